"""compare across runs: the same backend and metric in two runs, rater against rater, on the cases
both hold; the mean shift with its paired interval; a refusal when the runs share no case."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge.analysis import compare_runs


def _rewrite(run: Path, shift: float = 0.0, model: str | None = None, keep=None) -> Path:
    """Move every scored value of ``run`` by ``shift`` (clipped to 0..1), name another judge model in
    its run.json, keep only the cases ``keep`` accepts."""
    lines = []
    for line in (run / "scores.jsonl").read_text(encoding="utf-8").splitlines():
        s = json.loads(line)
        if keep is not None and not keep(s["case_id"]):
            continue
        if s.get("value") is not None:
            s["value"] = min(1.0, max(0.0, s["value"] + shift))
        lines.append(json.dumps(s))
    (run / "scores.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if keep is not None:
        cases = [c for c in (run / "cases.jsonl").read_text(encoding="utf-8").splitlines()
                 if keep(json.loads(c)["id"])]
        (run / "cases.jsonl").write_text("\n".join(cases) + "\n", encoding="utf-8")
    if model is not None:
        manifest = json.loads((run / "run.json").read_text(encoding="utf-8"))
        manifest["judge"] = {**(manifest.get("judge") or {}), "model": model}
        (run / "run.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return run


@pytest.fixture(scope="module")
def judged_runs(tmp_path_factory):
    """Two real rubric runs on the support-bot set with the stub judge under two model names."""
    from ragbridge.testing import StubJudge

    root = tmp_path_factory.mktemp("compare-runs")
    with StubJudge() as stub:
        for name, model in (("old", "judge-old"), ("new", "judge-new")):
            r = ragbridge_cli("run", EXAMPLE, "--out", root / name, "--backend", "rubric", "--metric",
                              "faithfulness", "--judge-model", model, "--judge-base-url", stub.base_url,
                              "--no-progress", cwd=root)
            assert r.returncode == 0, r.stdout + r.stderr
    return root


def test_the_same_judge_answers_agree_and_do_not_shift(judged_runs):
    frame = compare_runs(judged_runs / "old", judged_runs / "new", n_resamples=200, n_permutations=999)
    assert list(frame["backend"]) == ["rubric"] and list(frame["metric"]) == ["faithfulness"]
    row = frame.iloc[0]
    assert row["judge_a"] == "judge-old" and row["judge_b"] == "judge-new"
    assert row["n_paired"] == row["n_cases"] > 10
    assert row["shift"] == pytest.approx(0.0) and row["mae"] == pytest.approx(0.0)
    assert frame.attrs["label_a"] == "old (judge-old)" and frame.attrs["n_shared"] == row["n_cases"]


@pytest.mark.slow
def test_a_shifted_judge_shows_the_shift(judged_runs, tmp_path):
    lenient = _rewrite(Path(shutil.copytree(judged_runs / "new", tmp_path / "lenient")), shift=-0.2)
    frame = compare_runs(judged_runs / "old", lenient, n_resamples=500, n_permutations=999)
    row = frame.iloc[0]
    base = compare_runs(judged_runs / "old", judged_runs / "old", n_resamples=0).iloc[0]
    clipped = base["mean_a"] - row["mean_b"]  # the shift less what clipping at 0 kept back
    assert row["shift"] == pytest.approx(-clipped) and row["shift"] < -0.1
    assert row["shift_low"] <= row["shift"] <= row["shift_high"] < 0
    assert row["shift_p"] < 0.01
    assert row["spearman"] > 0.9  # the same order of cases, moved down

    r = ragbridge_cli("compare", judged_runs / "old", lenient, "--resamples", "200", "--permutations", "999")
    assert r.returncode == 0, r.stderr
    assert "judge judge-old" in r.stdout and "judge judge-new" in r.stdout
    assert "Each backend in run B against itself in run A" in r.stdout and "Cases that moved most" in r.stdout
    j = ragbridge_cli("compare", judged_runs / "old", lenient, "--resamples", "200", "--json")
    assert j.returncode == 0, j.stderr
    data = json.loads(j.stdout)
    assert data["label_b"] == "lenient (judge-new)"
    assert data["agreement"][0]["shift"] == pytest.approx(row["shift"])
    assert data["agreement"][0]["shift_low"] < 0 and data["moved"]


def test_runs_with_some_cases_in_common_compare_those(judged_runs, tmp_path):
    ids = [json.loads(x)["id"] for x in (judged_runs / "old" / "cases.jsonl").read_text().splitlines()]
    half = set(ids[: len(ids) // 2])
    part = _rewrite(Path(shutil.copytree(judged_runs / "new", tmp_path / "part")), keep=lambda c: c in half)
    row = compare_runs(judged_runs / "old", part, n_resamples=0).iloc[0]
    assert row["n_cases"] == len(half) == row["n_paired"]
    r = ragbridge_cli("compare", judged_runs / "old", part, "--resamples", "0", "--permutations", "0")
    assert r.returncode == 0 and f"{len(ids) - len(half)} only in A" in r.stdout, r.stdout + r.stderr


def test_runs_sharing_no_case_are_refused(judged_runs, tmp_path):
    ids = [json.loads(x)["id"] for x in (judged_runs / "old" / "cases.jsonl").read_text().splitlines()]
    a = _rewrite(Path(shutil.copytree(judged_runs / "old", tmp_path / "a")), keep=lambda c: c in ids[:5])
    b = _rewrite(Path(shutil.copytree(judged_runs / "new", tmp_path / "b")), keep=lambda c: c not in ids[:5])
    r = ragbridge_cli("compare", a, b)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("error:") and "share no case" in r.stderr and not r.stdout
    r = ragbridge_cli("compare", a, b, a)
    assert r.returncode == 2 and "one run folder" in r.stderr


def test_the_one_run_form_is_unchanged(judged_runs):
    r = ragbridge_cli("compare", judged_runs / "old")
    assert r.returncode == 2 and "two or more backends" in r.stderr  # one backend: nothing to compare


def test_diff_compare_and_the_report_give_one_interval_and_p_value_for_a_pair_of_runs(tmp_path):
    """The shift of a mean between two runs is one computation: ``diff``, ``compare A B`` and the
    report with ``--baseline`` print the same interval and p-value, and print a p-value one way."""
    from ragbridge.analysis.compare import compare_runs
    from ragbridge.analysis.diff import diff_runs
    from ragbridge.report.html import render_html
    from ragbridge.report.markdown import render_markdown

    rng = np.random.default_rng(3)
    rows = []
    for q in range(300):
        ranked = [f"d{q}-{i}" for i in rng.permutation(8)]
        rows.append({"id": f"q{q}", "question": f"question {q}", "contexts": [{"id": c} for c in ranked],
                     "relevant": {f"d{q}-0": 1, f"d{q}-1": 2}})
    for name, shift in (("a", 0), ("b", 1)):
        path = tmp_path / f"{name}.jsonl"
        moved = [{**r, "contexts": sorted(r["contexts"], key=lambda c: c["id"], reverse=True)}
                 if shift and i % 2 == 0 else r for i, r in enumerate(rows)]  # b ranks them last
        path.write_text("".join(json.dumps(r) + "\n" for r in moved), encoding="utf-8")
        res = ragbridge_cli("run", path, "--out", tmp_path / name, "-m", "mrr", "-m", "ndcg@3",
                            "--no-progress")
        assert res.returncode == 0, res.stderr
    d = diff_runs(tmp_path / "a", tmp_path / "b", by_tag=False).summary.set_index(["backend", "metric"])
    c = compare_runs(tmp_path / "a", tmp_path / "b").set_index(["backend", "metric"])
    for key in c.index:
        assert (c.loc[key, "shift_low"], c.loc[key, "shift_high"], c.loc[key, "shift_p"]) == (
            d.loc[key, "ci_low"], d.loc[key, "ci_high"], d.loc[key, "p_value"]), key
    assert (d["p_value"] < 0.001).any()
    page = render_html(tmp_path / "b", baseline=tmp_path / "a")
    md = render_markdown(tmp_path / "b", baseline=tmp_path / "a")
    assert '<td class="num">&lt;0.001</td>' in page  # the shift's p-value, as the commands print it
    assert "<0.001 |" in md.replace("\\<", "<")


def test_shifts_drawn_in_threads_are_those_drawn_one_at_a_time(tmp_path, monkeypatch):
    """``diff`` and ``compare A B`` draw each shift (bootstrap and permutation test) in a thread of a
    pool (`stats.threads` of them, compare's beside its figures): every row is the same, to the last
    bit, with one thread, two or four, and the shifts run in the pool's threads."""
    import threading

    from ragbridge.analysis import stats
    from ragbridge.analysis.compare import compare_runs
    from ragbridge.analysis.diff import diff_runs

    rng = np.random.default_rng(8)
    for name in ("a", "b"):
        rows = []
        for q in range(400):
            ranked = [f"d{q}-{i}" for i in rng.permutation(6)]
            rows.append({"id": f"q{q}", "question": f"question {q}", "tags": [f"t{q % 3}"],
                         "contexts": [{"id": c} for c in ranked], "relevant": {f"d{q}-0": 1, f"d{q}-1": 1}})
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        res = ragbridge_cli("run", tmp_path / f"{name}.jsonl", "--out", tmp_path / name, "-m", "mrr",
                            "-m", "recall@3", "-m", "ndcg@3", "--no-progress")
        assert res.returncode == 0, res.stderr
    ran_in: set[str] = set()
    shift = stats.mean_shift

    def watched(*args, **kwargs):
        ran_in.add(threading.current_thread().name)
        return shift(*args, **kwargs)

    got = []
    for n in (1, 2, 4):
        monkeypatch.setattr(stats, "threads", lambda n=n: n)
        monkeypatch.setattr(stats, "mean_shift", watched)
        monkeypatch.setattr("ragbridge.analysis.diff.threads", lambda n=n: n)
        monkeypatch.setattr("ragbridge.analysis.diff.mean_shift", watched)
        d = diff_runs(tmp_path / "a", tmp_path / "b", n_resamples=300, n_permutations=300).summary
        c = compare_runs(tmp_path / "a", tmp_path / "b", n_resamples=300, n_permutations=300)
        got.append(repr((d.to_dict("records"), c.to_dict("records"))))  # (floats' repr: every bit)
    assert len(d) == 3 * 4 and len(c) == 3  # (every metric, all cases and each of three tags)
    assert got[0] == got[1] == got[2]
    assert ran_in and all(name.startswith("ragbridge-shift") for name in ran_in), ran_in


@pytest.mark.slow
def test_ctrl_c_stops_diff_and_compare_with_one_line_and_exit_130(tmp_path):
    """Ctrl-C in the middle of ``diff`` or ``compare`` (their shifts drawing in threads) stops the
    process with exit 130 and says so in one line on stderr (it was silent), with nothing on stdout."""
    import signal
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(5)
    for name in ("a", "b"):
        rows = [{"id": f"q{q}", "question": f"question {q}", "tags": [f"t{q % 4}"],
                 "contexts": [{"id": f"d{q}-{i}"} for i in rng.permutation(10)],
                 "relevant": {f"d{q}-0": 1, f"d{q}-1": 2}} for q in range(3000)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        res = ragbridge_cli("run", tmp_path / f"{name}.jsonl", "--out", tmp_path / name, "-m", "mrr",
                            "-m", "ndcg@5", "-m", "map", "--no-progress")
        assert res.returncode == 0, res.stderr
    for command in ("diff", "compare"):  # many resamples: minutes, stopped after a second or two
        child = subprocess.Popen(
            [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", command,
             str(tmp_path / "a"), str(tmp_path / "b"), "--resamples", "400000", "--permutations", "400000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        assert child.poll() is None, child.communicate()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        assert child.returncode == 130, (command, err)
        assert err.strip().splitlines()[-1] == "error: interrupted; no output file was left half written"
        assert out == "", (command, out)


@pytest.fixture(scope="module")
def runs_of_2000(tmp_path_factory):
    """Two runs (``a``, ``b``) of 2,000 cases of 6 chunk ids each in another order, by ``ragbridge run``
    (mrr, ndcg@3, hit@1; a tag of 9), in a folder of their own: (the folder, each run's stdout)."""
    tmp = tmp_path_factory.mktemp("runs2000")
    rng = np.random.default_rng(5)
    said = {}
    for name in ("a", "b"):
        rows = [{"id": f"q{q}", "question": f"question {q}", "tags": [f"t{q % 9}"],
                 "contexts": [{"id": f"d{q}-{i}"} for i in rng.permutation(6)], "relevant": {f"d{q}-0": 1}}
                for q in range(2000)]
        path = tmp / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        res = ragbridge_cli("run", path, "--out", tmp / name, "-m", "mrr", "-m", "ndcg@3", "-m", "hit@1",
                            "--no-progress")
        assert res.returncode == 0, res.stderr
        said[name] = res.stdout
    return tmp, said


def test_every_output_writes_a_count_of_thousands_with_its_separator(runs_of_2000):
    """2,000 cases, stated by the run's summary, diff, compare, the Markdown and HTML reports, the gate's
    Markdown and JUnit and the run's repr: written 2,000 in each, never 2000."""
    import re

    from ragbridge import load_run

    tmp, said = runs_of_2000
    bare = re.compile(r"(?<![\w,./])2000(?![\d,])")  # (not an SVG's namespace, w3.org/2000/svg)
    gates = tmp / "count-gates.toml"
    gates.write_text('[[gate]]\ncheck = "mrr >= 0.1"\n', encoding="utf-8")
    md, html, junit, gate_md = (tmp / n for n in ("count.md", "count.html", "count.xml", "count-gate.md"))
    texts = {"run": said["b"]}
    for name, args in (("diff", ("diff", tmp / "a", tmp / "b", "--resamples", "200")),
                       ("compare", ("compare", tmp / "a", tmp / "b", "--resamples", "200")),
                       ("gate", ("gate", tmp / "b", "--config", gates, "--junit", junit,
                                 "--markdown", gate_md)),
                       ("md", ("report", tmp / "b", "--format", "md", "--out", md, "--resamples", "0")),
                       ("html", ("report", tmp / "b", "--out", html, "--resamples", "0"))):
        res = ragbridge_cli(*args, env={"COLUMNS": "200"})
        assert res.returncode in (0, 1), (name, res.stderr)
        texts[name] = res.stdout + res.stderr
    for path in (md, html, junit, gate_md):
        texts[path.name] = path.read_text(encoding="utf-8")
    texts["repr"] = repr(load_run(tmp / "b"))
    for name, text in texts.items():
        assert "2,000" in text and not bare.search(text), (name, bare.search(text), text[:3000])


def test_long_diffs_and_compares_say_how_far_they_are_on_stderr(runs_of_2000, tmp_path):
    """In a log (stderr not a terminal), diff, compare, the report beside a baseline, diagnose and a
    gate's diagnosis print a progress line once they have taken a progress interval
    (``RAGBRIDGE_PROGRESS_SECONDS``, here 0), then one at the end with every step done; their JSON on
    stdout is whole and the same as without the lines."""
    runs, _ = runs_of_2000
    for name in ("a", "b"):
        shutil.copytree(runs / name, tmp_path / name)
    for command, noun, steps in (("diff", "shifts", 30), ("compare", "metrics", 3)):
        res = ragbridge_cli(command, tmp_path / "a", tmp_path / "b", "--json", "--resamples", "4000",
                            env={"RAGBRIDGE_PROGRESS_SECONDS": "0", "COLUMNS": "80"}, subprocess=True)
        assert res.returncode == 0, res.stderr
        lines = [line for line in res.stderr.splitlines() if "progress:" in line]
        assert lines and lines[-1].startswith(f"{command} progress: {steps} of {steps} {noun} (100%), ")
        assert all(len(line) <= 80 for line in lines), lines
        again = json.loads(ragbridge_cli(command, tmp_path / "a", tmp_path / "b", "--json",
                                         "--resamples", "4000").stdout)
        assert json.loads(res.stdout) == again
    res = ragbridge_cli("report", tmp_path / "b", "--baseline", tmp_path / "a", "--format", "md", "--out",
                        tmp_path / "r.md", "--resamples", "4000", env={"RAGBRIDGE_PROGRESS_SECONDS": "0"},
                        subprocess=True)
    assert res.returncode == 0 and "report progress: 30 of 30 shifts (100%)" in res.stderr, res.stderr
    failing = json.loads(ragbridge_cli("diagnose", tmp_path / "b", "--json").stdout)["n_failing"]
    assert 0 < failing < 2000
    assert f"report progress: {failing:,} of {failing:,} failing cases (100%)" in res.stderr, res.stderr
    # the gate's diagnosis (a diagnosed rule) says its progress too; every case behind the rule is
    # described as diagnose describes it, though the gate's diagnosis first placed them alone
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "diagnosed(retrieval) <= 0.05"\n', encoding="utf-8")
    res = ragbridge_cli("gate", tmp_path / "b", "--config", gates, "--json",
                        env={"RAGBRIDGE_PROGRESS_SECONDS": "0"}, subprocess=True)
    said = f"gate progress: {failing:,} of {failing:,} failing cases (100%)"
    assert res.returncode == 1 and said in res.stderr, res.stderr
    assert "gate progress: 1 of 1 rules (100%)" in res.stderr, res.stderr  # and the rules checked
    diagnosed = json.loads(ragbridge_cli("diagnose", tmp_path / "b", "--json").stdout)["cases"]
    [rule] = json.loads(res.stdout)["results"]
    assert rule["cases_behind"] == [{k: c[k] for k in ("case_id", "layer", "reason")} for c in diagnosed
                                    if c["layer"] == "retrieval"] and len(rule["cases_behind"]) > 100
    # the report with the gates walks the failing cases once, for its diagnosis and its gate alike
    res = ragbridge_cli("report", tmp_path / "b", "--gates", gates, "--format", "json", "--out",
                        tmp_path / "r.json", env={"RAGBRIDGE_PROGRESS_SECONDS": "0"}, subprocess=True)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("failing cases (100%)") == 1, res.stderr
    assert "report progress: 1 of 1 rules (100%)" in res.stderr, res.stderr
    page = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    [in_page] = page["gate"]["results"]
    top = len(in_page["cases_behind"])
    assert 0 < top < len(rule["cases_behind"]) and in_page["cases_behind"] == rule["cases_behind"][:top]
    assert in_page["n_cases_behind"] == rule["n_cases_behind"] and in_page["figure"] == rule["figure"]
    assert page["diagnosis"]["counts"] == json.loads(ragbridge_cli("diagnose", tmp_path / "b", "--json")
                                                     .stdout)["counts"]
    res = ragbridge_cli("diagnose", tmp_path / "b", env={"RAGBRIDGE_PROGRESS_SECONDS": "0"}, subprocess=True)
    assert res.returncode == 0 and f"{failing:,} of 2,000 case(s) fail" in " ".join(res.stdout.split())
    said = [line for line in res.stderr.splitlines() if "progress:" in line]
    assert said[-1].startswith(f"diagnose progress: {failing:,} of {failing:,} failing cases (100%), "), said


def test_progress_shows_a_long_first_step_and_says_the_end_once(monkeypatch, capsys):
    """A first step that takes longer than `Steps.after` shows its line while it runs, not when it
    ends; the line at the end is not printed again when the last one said the same but for the time; a
    part of a longer command counts from the command's start."""
    import time

    from ragbridge.run.progress import Lines, Steps

    monkeypatch.setenv("RAGBRIDGE_PROGRESS_SECONDS", "60")
    with Steps("compare", "metrics", after=0.2).start(3) as steps:
        time.sleep(0.6)
        assert capsys.readouterr().err.startswith("compare progress: 0 of 3 metrics (0%), 0m00s")
        steps.advance(3)
    assert capsys.readouterr().err.startswith("compare progress: 3 of 3 metrics (100%), ")
    lines = Lines(2, None, 60, "shifts", "report")
    lines.advance(2)
    lines.say()
    time.sleep(1.05)
    lines.stop()
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith("report progress: 2 of 2 shifts (100%), 0m00s"), said
    # a report's second part (its diagnosis) counts its time from the report's start, not its own
    with Steps("report", "failing cases", after=0.0, since=time.monotonic() - 125).start(4) as steps:
        steps.advance(1)
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == "report progress: 1 of 4 failing cases (25%), 2m05s", said
    # on the command line, every part counts from the command's start (reading the runs included)
    from ragbridge.run import progress

    monkeypatch.setattr(progress, "command_started", time.monotonic() - 65)
    with Steps("gate", "rules", after=0.0).start(2) as steps:
        steps.advance(1)
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == "gate progress: 1 of 2 rules (50%), 1m05s", said
