"""``ragbridge pairwise``: both orders asked, a preference only when they agree, the position-bias rate.

A judge that always prefers the first position (or the second) has no preference at all and a
position-bias rate of 100%; a judge that prefers one answer wherever it is shown gives that run every
case; the stub judge (no position bias) prefers the better-grounded answer."""

from __future__ import annotations

import json
import re

import pytest

from conftest import EXAMPLE, ragbridge_cli
from test_rubric_parse import CannedJudge

FLAWED = ["billing-refund-window", "shipping-perfume-japan", "account-extra-seat-cost", "api-429-retry",
          "returns-create-label", "billing-free-trial"]


def run_example(tmp_path, name: str, change=None):
    """A run folder of the example (native metrics only: pairwise reads the answers)."""
    rows = [json.loads(x) for x in EXAMPLE.read_text().splitlines()]
    if change:
        rows = [change(r) for r in rows]
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / name
    res = ragbridge_cli("run", data, "--out", out, "--metric", "mrr", "--no-progress")
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pairwise")
    base = run_example(tmp, "base")

    def reworded(r):  # every answer differs, none is better
        return {**r, "answer": r["answer"] + " Hope this helps!"}

    def flawed(r):  # six good answers replaced by an unrelated one
        return {**r, "answer": "Our office plants are watered on Tuesdays."} if r["id"] in FLAWED else r

    return base, run_example(tmp, "reworded", reworded), run_example(tmp, "flawed", flawed)


def pairwise(base, new, url, *extra):
    res = ragbridge_cli("pairwise", base, new, "--metric", "answer_relevance", "--judge-model", "j",
                        "--judge-base-url", url, "--cache-mode", "off", "--json", "--resamples", "500",
                        *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def always(position: str):
    reply = json.dumps({"reason": f"answer {position} reads better", "winner": position})
    return lambda body, n: (200, reply, "stop")


@pytest.mark.parametrize("position", ["A", "B"])
def test_a_judge_that_always_picks_one_position_has_no_preference_and_full_position_bias(runs, position):
    base, reworded, _ = runs
    with CannedJudge(always(position)) as canned:
        res = pairwise(base, reworded, canned.base_url)
    assert res["n_paired"] == res["n_both_orders"] == 53
    assert (res["wins"], res["ties"], res["losses"]) == (0, 53, 0)
    assert res["position_flips"] == 53 and res["position_bias"] == 1.0
    assert res["net"] == 0.0 and res["net_low"] == res["net_high"] == 0.0
    # the judge check's one-token request of the model (this judge lists no models) is not a judge call
    bodies = [b for b in canned.bodies if b.get("max_tokens") != 1]
    assert len(canned.bodies) - len(bodies) <= 1
    assert len(bodies) == 106 and res["judge_calls"] == 106
    # each case was shown in both orders: the base answer first, then the new answer first
    firsts = {}
    for body in bodies:
        user = body["messages"][1]["content"]
        a = re.search(r"### Answer A\n(.*?)\n\n### Answer B", user, re.S).group(1)
        firsts.setdefault(user.split("\n", 2)[1], set()).add(a.endswith("Hope this helps!"))
    assert all(v == {True, False} for v in firsts.values()) and len(firsts) == 53
    assert all(it["base_first"] != it["new_first"] and it["flipped"] for it in res["items"])


def test_a_preference_that_survives_the_swap_counts(runs):
    base, reworded, _ = runs

    def prefer_new(body, n):  # the reworded answer wins wherever it is shown
        user = body["messages"][1]["content"]
        a = re.search(r"### Answer A\n(.*?)\n\n### Answer B", user, re.S).group(1)
        winner = "A" if a.endswith("Hope this helps!") else "B"
        return 200, json.dumps({"reason": "friendlier", "winner": winner}), "stop"

    with CannedJudge(prefer_new) as canned:
        res = pairwise(base, reworded, canned.base_url)
    assert (res["wins"], res["ties"], res["losses"]) == (53, 0, 0)
    assert res["position_flips"] == 0 and res["position_bias"] == 0.0 and res["net"] == 1.0
    # swapped roles: the base run is now the "new" one, and loses every case
    with CannedJudge(prefer_new) as canned:
        res = pairwise(reworded, base, canned.base_url)
    assert (res["wins"], res["ties"], res["losses"]) == (0, 0, 53) and res["net"] == -1.0


def test_stub_judge_prefers_the_grounded_answer_and_has_no_position_bias(runs, stub_judge, tmp_path):
    base, _, flawed = runs
    out = tmp_path / "pairwise.json"
    res = pairwise(base, flawed, stub_judge.base_url, "--out", out)
    assert json.loads(out.read_text()) == res
    assert res["identical"] == 47 and res["n_both_orders"] == 6  # identical answers: ties, no call
    assert (res["wins"], res["ties"], res["losses"]) == (0, 47, 6)
    assert sorted(it["case_id"] for it in res["items"] if it["outcome"] == "base") == sorted(FLAWED)
    assert res["position_flips"] == 0 and res["stub"] is True
    assert res["net"] == pytest.approx(-6 / 53) and res["net_low"] < res["net"] < res["net_high"] < 0
    assert len(stub_judge.posts("/chat/completions")) == 12
    # the terminal summary, as a person reads it
    res = ragbridge_cli("pairwise", base, flawed, "--metric", "answer_relevance", "--judge-model",
                        "stub-judge", "--judge-base-url", stub_judge.base_url, "--cache-mode", "off",
                        env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert "new better 0 (0%), tie 47 (89%), base better 6 (11%)" in text
    assert "position bias: the verdict flipped with the order on 0 of 6 case(s) (0%)" in text
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def test_pairwise_refuses_what_it_cannot_compare(runs, tmp_path):
    base, reworded, _ = runs
    judge = ["--judge-model", "j", "--judge-base-url", "http://127.0.0.1:9/v1"]
    res = ragbridge_cli("pairwise", base, reworded, *judge)
    assert res.returncode == 2 and "--metric" in res.stderr
    res = ragbridge_cli("pairwise", base, reworded, "--metric", "nonesuch", *judge)
    assert res.returncode == 2 and "no rubric named 'nonesuch'" in res.stderr
    res = ragbridge_cli("pairwise", base, tmp_path / "nope", "--metric", "answer_relevance", *judge)
    assert res.returncode == 2 and "new run" in res.stderr
