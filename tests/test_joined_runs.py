"""Backends judged in separate runs (two judge servers, two judges), read side by side: ``compare``,
``validate`` and ``report`` with ``--with``, each run's backends a column that says which judge
scored it; ``compare RUN_A RUN_B`` keeps its meaning (each backend against itself in the other run)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import EXAMPLE, ragbridge_cli, stub_judge_config
from ragbridge import analysis as an

N_CASES = 10


def test_runs_written_apart_join_by_case_with_a_column_per_backend_and_run(tmp_path):
    """Exact values (runs written by hand): a backend scored in both runs by different judges is two
    columns, one scored the same by no judge is one; a case one run lacks is missing in its columns."""
    from test_analysis import sc, tiny_cases

    from conftest import write_run

    cases = tiny_cases(4)
    a = write_run(tmp_path / "a", cases, [sc(c.id, "faithfulness", "ragas", v, judge_calls=1)
                                          for c, v in zip(cases, (0.9, 0.2, 0.8, 0.1))]
                  + [sc(c.id, "mrr", "native", 1.0) for c in cases],
                  judge={"model": "qwen", "base_url": "http://gpu-1:8080/v1"})
    b = write_run(tmp_path / "b", cases[:3], [sc(c.id, "faithfulness", "deepeval", v, judge_calls=1)
                                              for c, v in zip(cases, (0.7, 0.6, 0.9))]
                  + [sc(c.id, "mrr", "native", 1.0) for c in cases[:3]],
                  judge={"model": "llama", "base_url": "http://gpu-2:8080/v1"})
    joined = an.join_runs([a, b])
    cols = joined.manifest.columns
    assert list(cols) == ["native", "ragas", "deepeval"]
    assert cols["deepeval"]["judge"] == {"model": "llama", "base_url": "http://gpu-2:8080/v1"}
    assert joined.manifest.judge is None and joined.manifest.joined["only_in_some"] == 1
    row = an.compare([a, b], n_resamples=0).iloc[0]
    assert (row.backend_a, row.backend_b, row.n_paired, row.a_missing) == ("deepeval", "ragas", 3, 1)
    # at 0.5: deepeval passes c1 c2 c3, ragas c1 c3: they differ on c2
    assert (row.both_pass, row.a_pass_b_fail, row.a_fail_b_pass, row.both_fail) == (2, 1, 0, 0)


@pytest.fixture(scope="module")
def apart(tmp_path_factory):
    """Two real runs of the same ten cases, each judged by its own stub judge server under its own
    model name: ``ragas-run`` (RAGAS and the rubric judge, judge-a) and ``rubric-run`` (the rubric
    judge, judge-b); both with the native mrr, which scores the same in each."""
    import ragbridge
    from ragbridge.testing import StubJudge

    root = tmp_path_factory.mktemp("apart")
    cases = ragbridge.load_cases(EXAMPLE)[:N_CASES]
    with StubJudge() as one, StubJudge() as two:
        ragbridge.evaluate(cases, backends=["ragas", "rubric", "native"], metrics=["faithfulness", "mrr"],
                           judge=stub_judge_config(one, model="judge-a"), out=root / "ragas-run",
                           progress=False)
        ragbridge.evaluate(cases, backends=["rubric", "native"], metrics=["faithfulness", "mrr"],
                           judge=stub_judge_config(two, model="judge-b"), out=root / "rubric-run",
                           progress=False)
        urls = {"judge-a": one.base_url, "judge-b": two.base_url}
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps({"case_id": c.id, "metric": "faithfulness",
                                          "label": "fail" if i % 3 == 0 else "pass"}) + "\n"
                              for i, c in enumerate(cases)), encoding="utf-8")
    return root, urls, labels


@pytest.mark.slow
def test_compare_with_reads_runs_judged_apart_as_columns(apart):
    root, urls, _ = apart
    res = ragbridge_cli("compare", root / "ragas-run", "--with", root / "rubric-run", "--json",
                        "--resamples", "200")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    cols = doc["columns"]
    # the rubric judged by two judges is two columns; the native metric, the same in both, one
    assert set(cols) == {"ragas", "rubric@ragas-run", "rubric@rubric-run", "native"}
    assert cols["ragas"]["judge"] == {"model": "judge-a", "base_url": urls["judge-a"], "stub": True}
    assert cols["rubric@rubric-run"]["judge"] == {"model": "judge-b", "base_url": urls["judge-b"],
                                                  "stub": True}
    assert cols["native"]["judge"] is None and cols["native"]["run"].endswith("ragas-run")
    assert doc["joined"]["shared"] == N_CASES and doc["runs"] == [str(root / "ragas-run"),
                                                                 str(root / "rubric-run")]
    pairs = {frozenset((r["backend_a"], r["backend_b"])): r for r in doc["agreement"]}
    assert set(pairs) == {frozenset(p) for p in (("ragas", "rubric@ragas-run"),
                                                 ("ragas", "rubric@rubric-run"),
                                                 ("rubric@ragas-run", "rubric@rubric-run"))}
    # the columns pair case by case: the same answers, each library's value from its own run
    cross = pairs[frozenset(("ragas", "rubric@rubric-run"))]
    assert cross["n_paired"] == N_CASES
    alone = an.compare(root / "ragas-run", n_resamples=200).iloc[0]
    assert cross["kappa"] == pytest.approx(alone["kappa"]) and cross["mae"] == pytest.approx(alone["mae"])
    # the text says which judge each column used
    text = ragbridge_cli("compare", root / "ragas-run", "--with", root / "rubric-run", "--resamples", "0",
                         env={"COLUMNS": "200"}).stdout
    said = f"rubric@rubric-run: rubric 0.1.0 in {root / 'rubric-run'}, judge judge-b at {urls['judge-b']}"
    assert said in text
    assert "ragas vs rubric@rubric-run" in text


@pytest.mark.slow
def test_validate_and_the_report_with_other_runs(apart, tmp_path):
    root, urls, labels = apart
    res = ragbridge_cli("validate", root / "rubric-run", "--with", root / "ragas-run", "--labels", labels,
                        "--json", "--resamples", "200")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    rows = {r["backend"]: r for r in doc["validation"]}
    assert set(rows) == {"ragas", "rubric@ragas-run", "rubric@rubric-run"}
    assert all(r["n_paired"] == N_CASES for r in rows.values())
    assert doc["columns"]["ragas"]["judge"]["model"] == "judge-a"
    # each column against the labels is what validate says of its own run
    own = an.validate(root / "ragas-run", labels, backends=["ragas"], n_resamples=200).iloc[0]
    assert (rows["ragas"]["tp"], rows["ragas"]["fp"]) == (own["tp"], own["fp"])
    assert rows["ragas"]["tnr"] == pytest.approx(own["tnr"])
    for fmt in ("md", "json", "html"):
        out = tmp_path / f"report.{fmt}"
        res = ragbridge_cli("report", root / "rubric-run", "--with", root / "ragas-run", "--labels", labels,
                            "--format", fmt, "--out", out, "--resamples", "100")
        assert res.returncode == 0, res.stderr
        text = out.read_text(encoding="utf-8")
        if fmt == "json":
            d = json.loads(text)
            assert d["run"]["columns"]["rubric@rubric-run"]["judge"]["model"] == "judge-b"
            assert {v["backend"] for v in d["validation"]} == set(rows)
            assert {frozenset((a["backend_a"], a["backend_b"])) for a in d["agreement"]} >= {
                frozenset(("ragas", "rubric@rubric-run"))}
        else:
            for judge in ("judge-a", "judge-b"):
                assert judge in text and urls[judge] in text, (fmt, judge)
            assert "rubric@ragas-run" in text and "runs read side by side" in text


@pytest.mark.slow
def test_compare_of_two_runs_keeps_its_meaning_and_the_two_forms_do_not_mix(apart, tmp_path):
    root, _, _ = apart
    res = ragbridge_cli("compare", root / "ragas-run", root / "rubric-run", "--json", "--resamples", "0",
                        "--permutations", "0")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {(r["metric"], r["backend"]) for r in doc["agreement"]} == {("faithfulness", "rubric"),
                                                                       ("mrr", "native")}
    rubric = next(r for r in doc["agreement"] if r["backend"] == "rubric")
    assert (rubric["judge_a"], rubric["judge_b"]) == ("judge-a", "judge-b")
    res = ragbridge_cli("compare", root / "ragas-run", root / "rubric-run", "--with", root / "ragas-run")
    assert res.returncode == 2 and "--with" in res.stderr and res.stdout == ""
    # runs of other cases are refused, naming what each holds
    other = tmp_path / "other"
    shutil.copytree(root / "rubric-run", other)
    lines = (other / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    (other / "cases.jsonl").write_text("\n".join(json.dumps({**json.loads(x), "question": "changed?"})
                                                 for x in lines) + "\n", encoding="utf-8")
    res = ragbridge_cli("compare", root / "ragas-run", "--with", other)
    err = " ".join(res.stderr.split())
    assert res.returncode == 2 and "same case ids with different content" in err
    assert "other questions, labels or references" in err
    # a case whose content differs is left out, and said so
    (other / "cases.jsonl").write_text("\n".join(
        [json.dumps({**json.loads(lines[0]), "answer": "another answer"})] + lines[1:]) + "\n",
        encoding="utf-8")
    joined = an.join_runs([root / "ragas-run", other])
    assert joined.manifest.joined["differing"] == 1 and len(joined.cases) == N_CASES - 1
    first = json.loads(lines[0])["id"]
    assert all(s.case_id != first for s in joined.scores)
    text = ragbridge_cli("compare", root / "ragas-run", "--with", other, "--resamples", "0").stdout
    assert f"1 case(s) differ between the runs and are left out (first: {first})" in " ".join(text.split())
    # so does calibrate, whose figures stand on the cases left
    res = ragbridge_cli("calibrate", root / "ragas-run", "--with", other, "--from", "ragas", "--to",
                        "rubric@other", "--metric", "faithfulness", "--resamples", "0")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert f"1 case(s) differ between the runs and are left out (first: {first})" in text
    assert f"on {N_CASES - 1} case(s) both scored" in text, text
    # the other run named by its path, as the command line names it, means the same column
    by_path = ragbridge_cli("calibrate", root / "ragas-run", "--with", other, "--from", "ragas", "--to",
                            f"rubric@{other}", "--metric", "faithfulness", "--resamples", "0")
    assert by_path.returncode == 0 and by_path.stdout == res.stdout, by_path.stderr
    # a backend each run scored apart is named by its column, and the refusal says which
    bare = ragbridge_cli("calibrate", root / "ragas-run", "--with", other, "--from", "ragas", "--to",
                         "rubric", "--metric", "faithfulness", "--resamples", "0")
    said = " ".join(bare.stderr.split())
    assert bare.returncode == 2 and "'rubric' scored 'faithfulness' in each run apart" in said, said
    assert "rubric@ragas-run" in said and "rubric@other" in said


def test_with_on_two_systems_runs_of_the_same_cases_says_to_compare_them(tmp_path):
    """``--with`` joins runs of the same cases; two systems' runs of the same questions (other
    retrieved chunks) hold the same ids with other content: the refusal says so and what to run."""
    rows = [{"id": f"q{q}", "question": f"question {q}", "contexts": [{"id": f"d{q}"}, {"id": f"e{q}"}],
             "relevant": {f"d{q}": 1}} for q in range(6)]
    for name, order in (("a", 1), ("b", -1)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({**r, "contexts": r["contexts"][::order]}) + "\n" for r in rows),
                        encoding="utf-8")
        res = ragbridge_cli("run", path, "--out", tmp_path / name, "-m", "mrr", "-m", "ndcg@10",
                            "--no-progress")
        assert res.returncode == 0, res.stderr
    for cmd in (("compare", tmp_path / "a", "--with", tmp_path / "b"),
                ("calibrate", tmp_path / "a", "--with", tmp_path / "b", "--from", f"native@{tmp_path / 'a'}",
                 "--to", f"native@{tmp_path / 'b'}", "--metric", "mrr")):
        res = ragbridge_cli(*cmd)
        err = " ".join(res.stderr.split())
        assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
        assert "the runs hold the same case ids with different content" in err, err
        assert "other answers or retrieved chunks" in err
        assert f"ragbridge compare {tmp_path / 'a'} {tmp_path / 'b'}" in err
    res = ragbridge_cli("compare", tmp_path / "a", tmp_path / "b")  # what the message says to run
    assert res.returncode == 0, res.stderr
