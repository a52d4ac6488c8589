"""One question, one answer: every output of a run (terminal, --json, HTML, Markdown, JUnit) answers
pass/fail, judge noise and counts by the same rule.

The run is the README's noise example: the rubric backend's ``abstention`` taken 5 times by a stub
judge made noisy on purpose, so that a case's repeats disagree and "a majority of repeats pass" and
"the mean clears the threshold" give different answers. Each output is read as a user reads it: the
CLI as a subprocess on the run folder, the HTML in a real Chromium.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig
from ragbridge.testing import StubJudge
from test_report import ARTIFACTS, _browse


def _judge(stub, tmp_path, name="cache.sqlite", model="stub-judge"):
    return JudgeConfig(model=model, base_url=stub.base_url, cache_path=tmp_path / name)


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agree")
    with StubJudge(noise=0.2, noise_seed=1) as stub:
        evaluate(load_cases(EXAMPLE), backends=["rubric"], metrics=["abstention"], judge=_judge(stub, tmp),
                 out=tmp / "run", repeats=5, progress=False)
    return tmp / "run"


@pytest.mark.slow
def test_every_output_counts_the_same_passes(noisy_run, tmp_path):
    run = load_run(noisy_run)
    passed = sum(s.passed is True for s in run.scores)
    failed = sum(s.passed is False for s in run.scores)
    assert passed and failed and passed + failed == len(run.scores)  # the run: a majority of 5 repeats
    # the mean would say otherwise on some case: that is what the outputs must not do
    assert any(s.passed and s.value < 1 for s in run.scores)
    mark = run.manifest.pass_marks["rubric"]["abstention"]

    # the report as JSON: the threshold table, the summary and every case's badge
    data = json.loads(ragbridge_cli("report", noisy_run, "--format", "json", "--out", "-").stdout)
    [row] = data["thresholds"]
    assert (row["threshold"], row["source"]) == (mark, "backend")
    assert (row["n_scored"] - row["n_below"], row["n_below"]) == (passed, failed)
    [summary] = data["summary"]
    assert (summary["n_pass"], summary["n_fail"]) == (passed, failed)
    assert sum(c["flags"]["fail"] for c in data["cases"]) == failed
    assert sum(bool(c["below"]) for c in data["cases_in_full"]) == failed
    # Markdown
    md = ragbridge_cli("report", noisy_run, "--format", "md", "--out", "-").stdout
    assert f"{passed} of {passed + failed} pass" in md and f"| {failed} of {passed + failed} |" in md
    assert md.count("**Below threshold:**") == failed
    # the gate on the terminal, as JSON, in Markdown and in JUnit: the share of passing cases
    gates = tmp_path / "gates.toml"
    gates.write_text(f'[[gate]]\ncheck = "share(abstention >= {mark:g}) >= 0.99"\n')
    junit, gmd = tmp_path / "junit.xml", tmp_path / "gate.md"
    text = ragbridge_cli("gate", noisy_run, "--config", gates, "--junit", junit, "--markdown", gmd,
                         "--top", 100)
    assert text.returncode == 1
    share = f"{passed / (passed + failed):.3f}"
    assert f"share {share} >= 0.99: does not hold" in " ".join(text.stdout.split())
    assert f"behind it ({failed} of {failed})" in text.stdout
    [result] = json.loads(ragbridge_cli("gate", noisy_run, "--config", gates, "--json").stdout)["results"]
    assert result["figure"] == pytest.approx(passed / (passed + failed))
    assert result["n_cases_behind"] == failed
    assert f"({failed} of {failed})" in gmd.read_text()
    [case] = ET.parse(junit).getroot().iter("testcase")
    assert f"({failed} of {failed})" in case.find("failure").text
    # the HTML, in a real browser: one badge and one red grid cell per failing case
    page = tmp_path / "report.html"
    assert ragbridge_cli("report", noisy_run, "--out", page).returncode == 0
    r = _browse(tmp_path, page.as_uri(), "--dump-dom")
    root = re.search(r"<html[^>]*>", r.stdout).group(0)
    assert f'data-badges-drawn="{failed}"' in root and f'data-grid-fail-drawn="{failed}"' in root, root
    assert f'data-grid-pass-drawn="{passed}"' in root
    # and the noise figures flip verdicts by the same rule: a case flips when its repeats disagree at the mark
    noise = data["noise"]["top"]["rubric:abstention"]
    assert all(r["flips"] == (0 < sum(v >= mark for v in r["values"]) < len(r["values"])) for r in noise)


@pytest.mark.slow
def test_diff_and_gate_say_the_same_about_judge_noise(tmp_path):
    """A zero change is within judge noise in diff and gate alike, even when the noise is zero."""
    cases = load_cases(EXAMPLE)
    runs = {}
    for name, noise in (("quiet", 0.0), ("noisy", 0.2)):
        with StubJudge(noise=noise, noise_seed=3) as stub:
            runs[name] = tmp_path / name
            judge = _judge(stub, tmp_path, f"{name}.sqlite")
            evaluate(cases, backends=["rubric"], metrics=["abstention"], judge=judge, out=runs[name],
                     repeats=3, progress=False)
        shutil.copytree(runs[name], tmp_path / f"{name}-again")  # the same system, the same scores
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "abstention drop <= 0.05"\nbackend = "rubric"\n')
    for name in runs:
        again = tmp_path / f"{name}-again"
        d = json.loads(ragbridge_cli("diff", runs[name], again, "--all", "--json").stdout)
        [row] = [r for r in d["summary"] if r["tag"] == "(all)"]
        assert row["delta"] == 0 and row["within_noise"] is True, name
        text = ragbridge_cli("diff", runs[name], again, "--all").stdout
        assert "within judge noise" in text and "beyond judge noise" not in text
        gate = ragbridge_cli("gate", again, "--config", gates, "--baseline", runs[name])
        assert gate.returncode == 0 and "within judge noise" in gate.stdout and "beyond" not in gate.stdout


def test_a_gate_detail_never_says_the_opposite_of_its_verdict(tmp_path, noisy_run):
    gates = tmp_path / "gates.toml"
    gates.write_text("\n".join([
        '[[gate]]\ncheck = "abstention >= 0.8"\nsignificant = true',     # a miss, not significant: holds
        '[[gate]]\ncheck = "abstention >= 0.99"\nsignificant = true',    # a significant miss: fails
        '[[gate]]\ncheck = "abstention >= 0.5"',                          # holds
        '[[gate]]\ncheck = "share(abstention >= 1) >= 0.95"',            # does not hold
    ]))
    results = json.loads(ragbridge_cli("gate", noisy_run, "--config", gates, "--json").stdout)["results"]
    assert [r["verdict"] for r in results] == ["pass", "fail", "pass", "fail"]
    for r in results:
        assert ("does not hold" in r["detail"]) == (r["verdict"] == "fail"), r["detail"]
    detail = results[0]["detail"]
    assert " misses >= 0.8 within its uncertainty: the miss is not significant (95% CI [" in detail
    assert ">= 0.8:" not in detail  # the figure is below 0.8: never written as if it were at or above


def test_resuming_with_another_judge_is_refused(tmp_path):
    cases = load_cases(EXAMPLE)[:6]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(c.model_dump_json() + "\n" for c in cases))
    out = tmp_path / "run"
    with StubJudge() as stub:
        args = ["run", data, "--out", out, "--backend", "rubric", "--metric", "abstention",
                "--judge-base-url", stub.base_url, "--cache-path", tmp_path / "c.sqlite", "--no-progress"]
        assert ragbridge_cli(*args, "--judge-model", "judge-a").returncode == 0
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        res = ragbridge_cli(*args, "--judge-model", "judge-b")
        assert res.returncode == 2
        said = " ".join(res.stderr.split())
        assert "model 'judge-a'" in said and "model 'judge-b'" in said and "--overwrite" in said
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
        # the same judge resumes; a changed rubric is scored again, and the run says which
        assert ragbridge_cli(*args, "--judge-model", "judge-a").returncode == 0


@pytest.mark.slow
def test_compare_explains_only_what_it_prints_and_lists_real_disagreements(tmp_path):
    from test_analysis import sc, tiny_cases, write_run

    cases = tiny_cases(8)
    a = [0.9, 0.8, 0.3, 0.6, 0.2, 0.7, 0.55, 0.4]
    b = [0.9, 0.8, 0.3, 0.6 + 1e-9, 0.25, 0.4, 0.55, 0.6]  # c4 differs by a rounding error only
    scores = [sc(f"c{i + 1}", "faithfulness", "x", v) for i, v in enumerate(a)]
    scores += [sc(f"c{i + 1}", "faithfulness", "y", v) for i, v in enumerate(b)]
    run = write_run(tmp_path / "r", cases, scores)
    for columns in ("80", "200"):
        res = ragbridge_cli("compare", run, env={"COLUMNS": columns})
        assert res.returncode == 0, res.stderr
        printed = "PP PF FP FF" in res.stdout.replace("PP PF FP FF:", "")
        assert ("PP PF FP FF:" in res.stdout) == printed, res.stdout
        assert "spread 0.000" not in res.stdout
    dis = json.loads(ragbridge_cli("compare", run, "--json", "--top", 50).stdout)["disagreements"]
    assert {d["case_id"] for d in dis} == {"c5", "c6", "c8"}


def test_calibrate_writes_each_row_by_the_thresholds_it_stands_for(tmp_path):
    from test_analysis import sc, tiny_cases, write_run

    cases = tiny_cases(6)
    src = [0.9, 0.8, 0.75, 0.6, 0.3, 0.95]
    tgt = [1.0, 0.667, 0.5, 0.6671, 0.1, 1.0]  # two values alike to 3 digits: a row between them
    scores = [sc(f"c{i + 1}", "faithfulness", "a", v) for i, v in enumerate(src)]
    scores += [sc(f"c{i + 1}", "faithfulness", "b", v) for i, v in enumerate(tgt)]
    run = write_run(tmp_path / "p", cases, scores)
    res = ragbridge_cli("calibrate", run, "--from", "a", "--to", "b", "--metric", "faithfulness",
                        "--threshold", "0.7", "--resamples", "100", env={"COLUMNS": "100"})
    assert res.returncode == 0, res.stderr
    claim = re.search(r"any threshold (\S+ \S+) gives the same verdicts", res.stdout).group(1)
    # the table has a row written the same way, and no row written as if it were a plain threshold
    row_re = re.compile(r"^\s*│?\s*((?:\(|<=|>)[^│]*?)\s*│\s*(\S+)", re.M)
    rows = {m.group(1): m.group(2) for m in row_re.finditer(res.stdout)}
    assert claim in rows, res.stdout
    assert "> 1" in rows and rows["> 1"] != rows[claim]  # the row above every value: none passes
    ends = [re.match(r"\((\S+), (\S+)\]", r) for r in rows]
    assert all(m.group(1) != m.group(2) for m in ends if m) and "(0.667, 0.6671]" in rows, rows


@pytest.mark.slow
def test_validate_intervals_stay_in_zero_one_and_name_the_missed_cases(tmp_path):
    from test_analysis import sc, tiny_cases, write_run

    cases = tiny_cases(30)
    scores = [sc(c.id, "faithfulness", "x", 0.9 if i != 3 else 0.95) for i, c in enumerate(cases)]
    run = write_run(tmp_path / "r", cases, scores)
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"case_id": c.id, "metric": "faithfulness",
                                          "label": "fail" if i == 3 else "pass"}) + "\n"
                              for i, c in enumerate(cases[:12])))
    [row] = json.loads(ragbridge_cli("validate", run, "--labels", labels, "--json").stdout)["validation"]
    for key in ("ppi_pass_rate", "human_pass_rate"):
        lo, hi = row.get(f"{key}_low"), row.get(f"{key}_high")
        assert 0.0 <= lo <= hi <= 1.0, (key, lo, hi)
    assert row["missed_fails"] == [cases[3].id] and row["missed_passes"] == []
    text = ragbridge_cli("validate", run, "--labels", labels).stdout
    assert f"1 failure(s) missed (human fail, backend pass): {cases[3].id}" in " ".join(text.split())
    assert not re.search(r"1\.0[1-9]", text)  # no interval end above 1


@pytest.fixture(scope="module")
def moved_runs(tmp_path_factory):
    """A baseline and a run where two cases got worse and one better on a native metric."""
    from ragbridge import Case

    tmp = tmp_path_factory.mktemp("moved")
    cases = load_cases(EXAMPLE)
    metrics = ["recall@5", "precision@5", "must_contain"]
    evaluate(cases, backends=["native"], metrics=metrics, out=tmp / "base", progress=False)
    worse = {cases[0].id, cases[1].id}

    def change(c: Case) -> Case:
        if c.id in worse:  # retrieve nothing relevant
            return c.model_copy(update={"contexts": [ch.model_copy(update={"id": f"x-{i}", "source": None})
                                                     for i, ch in enumerate(c.contexts)]})
        return c
    evaluate([change(c) for c in cases], backends=["native"], metrics=metrics, out=tmp / "new",
             progress=False)
    return tmp / "base", tmp / "new", worse


@pytest.mark.slow
def test_the_report_shows_what_moved_and_the_gate_in_chromium(moved_runs, tmp_path):
    base, new, worse = moved_runs
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "recall@5 drop <= 0.01"\n[[gate]]\ncheck = "precision@5 >= 0.1"\n')
    page = tmp_path / "report.html"
    res = ragbridge_cli("report", new, "--baseline", base, "--gates", gates, "--out", page)
    assert res.returncode == 0, res.stderr
    data = json.loads(ragbridge_cli("report", new, "--baseline", base, "--gates", gates, "--format", "json",
                                    "--out", "-").stdout)
    diff = json.loads(ragbridge_cli("diff", base, new, "--json").stdout)
    gate = json.loads(ragbridge_cli("gate", new, "--config", gates, "--baseline", base, "--json").stdout)
    # the same answers as diff and gate
    assert data["moved"]["totals"] == diff["totals"]
    assert {r["case_id"] for r in data["moved"]["worse"]} == {r["case_id"] for r in diff["worse"]} >= worse
    assert [(r["rule"], r["verdict"], r["detail"]) for r in data["gate"]["results"]] == [
        (r["rule"], r["verdict"], r["detail"]) for r in gate["results"]]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-moved.png"
    shot.unlink(missing_ok=True)
    r = _browse(tmp_path, page.as_uri() + "#moved", "--window-size=1400,1400", f"--screenshot={shot}")
    assert shot.exists(), r.stderr[-2000:]
    dom = _browse(tmp_path, page.as_uri(), "--dump-dom").stdout
    moved = re.search(r'<section id="moved">.*?</section>', dom, re.S).group(0)
    for cid in worse:
        assert f'href="#case-{cid}"' in moved
    assert f"<strong class=\"err\">{diff['totals']['worse']} worse</strong>" in moved
    section = re.search(r'<section id="gate">.*?</section>', dom, re.S).group(0)
    assert ("failed" if not gate["passed"] else "passed") in section
    assert section.count('class="gate-fail"') == sum(r["verdict"] == "fail" for r in gate["results"])


@pytest.mark.slow
def test_the_grid_colours_each_cell_by_its_own_threshold_sorts_and_filters_in_chromium(moved_runs, tmp_path):
    _, new, worse = moved_runs
    page = tmp_path / "report.html"
    assert ragbridge_cli("report", new, "--out", page).returncode == 0
    data = json.loads(ragbridge_cli("report", new, "--format", "json", "--out", "-").stdout)
    marks = {(t["metric"], t["backend"]): t["threshold"] for t in data["thresholds"]}
    assert marks[("precision@5", "native")] == pytest.approx(0.2)
    dom = _browse(tmp_path, page.as_uri(), "--dump-dom").stdout
    grid = re.search(r'<table class="grid" id="case-grid">.*?</table>', dom, re.S).group(0)
    cells = re.findall(r'<td class="g g-(\w+)" data-col="native:precision@5" data-v="([^"]*)"', grid)
    assert cells and all((cls == "pass") == (float(v) >= 0.2) for cls, v in cells if v)
    assert any(cls == "pass" and float(v) < 0.5 for cls, v in cells)  # green below 0.5: its own threshold
    # worst first: the most failing cells first, the furthest below a threshold first among equals
    rows = re.findall(r'<tr data-case="([^"]+)"[^>]*data-fails="(\d+)"', grid)
    fails = [int(f) for _, f in rows]
    assert fails == sorted(fails, reverse=True) and fails[0] > fails[-1]
    assert worse <= {cid for cid, f in rows if int(f) >= 2}
    # sorted by a column, lowest first; filtered by a tag: the address says which
    tag = sorted({t for c in data["cases"] for t in c["tags"]})[0]
    n_tag = sum(tag in c["tags"] for c in data["cases"])
    dom = _browse(tmp_path, page.as_uri() + f"#grid:tag={tag}&sort=native%3Arecall%405", "--dump-dom").stdout
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert f'data-grid-tag="{tag}"' in root and 'data-grid-sort="native:recall@5"' in root
    assert f'data-grid-shown="{n_tag}"' in root
    grid = re.search(r'<table class="grid" id="case-grid">.*?</table>', dom, re.S).group(0)
    shown = [(m.group(1), m.group(2)) for m in re.finditer(r'<tr data-case="([^"]+)" data-tags="([^"]*)"'
                                                          r'(?! hidden)[^>]*?(?<!hidden="")>', grid)]
    recall = {c["id"]: next((s["value"] for s in c["scores"] if s["metric"] == "recall@5"), None)
              for c in data["cases"]}
    visible = [cid for cid, _ in shown if tag in _.split("\n")]
    values = [recall[c] if recall[c] is not None else float("inf") for c in visible]
    assert values == sorted(values)
    shot = ARTIFACTS / "report-grid.png"
    shot.unlink(missing_ok=True)
    _browse(tmp_path, page.as_uri() + "#grid:sort=worst", "--window-size=1400,1200", f"--screenshot={shot}")
    assert shot.exists()


def test_a_judged_run_in_a_log_prints_progress_at_a_steady_interval(tmp_path):
    """Piped (a CI log), a run prints a progress line every RAGBRIDGE_PROGRESS_SECONDS while the judge
    is slow, with the scores done, the errors, the judge calls; then one at the end."""
    cases = load_cases(EXAMPLE)[:4]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(c.model_dump_json() + "\n" for c in cases))
    with StubJudge(latency=0.3) as stub:
        res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                            "abstention", "--judge-model", "m", "--judge-base-url", stub.base_url,
                            "--cache-path", tmp_path / "c.sqlite", "--max-concurrency", "1",
                            env={"RAGBRIDGE_PROGRESS_SECONDS": "0.2"})
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("progress: ")]
    assert len(lines) >= 3, res.stderr  # 4 judge calls of 0.3 s each, a line every 0.2 s
    done = [int(re.match(r"progress: (\d+) of 4 scores", ln).group(1)) for ln in lines]
    assert done == sorted(done) and done[-1] == 4
    assert lines[-1].startswith("progress: 4 of 4 scores (100%), no error, 4 judge calls")


def test_reading_a_large_golden_set_in_a_log_prints_a_line_at_the_progress_interval(monkeypatch, capsys):
    """Piped, the reading's count of cases comes at the scoring's interval (30 s by default), not a line a
    batch (a golden set of 250,000 cases gave 125 lines of a CI log), and the whole count at the end
    (the first line alone read as if 2,000 of 300,000 cases were loaded)."""
    import time

    from ragbridge.commands.output import counting_progress

    monkeypatch.setenv("RAGBRIDGE_PROGRESS_SECONDS", "30")
    show = counting_progress()
    for n in (2000, 4000, 6000):
        show(n)
        time.sleep(0.6)  # longer than a terminal's half second
    monkeypatch.setenv("RAGBRIDGE_PROGRESS_SECONDS", "0.1")
    again = counting_progress()
    for n in (2000, 4000):
        again(n)
        time.sleep(0.2)
    show(6000, done=True)  # the whole count, where the last line gave less
    again(4000, done=True)  # (not twice)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("read")]
    assert lines == ["reading: 2,000 cases", "reading: 2,000 cases", "reading: 4,000 cases",
                     "read: 6,000 cases"]


def test_the_gate_states_the_mean_the_summary_states(tmp_path):
    """The same scores give the same mean, to the last bit, in `run --json`'s summary and the gate."""
    golden = tmp_path / "golden.jsonl"
    shutil.copy(EXAMPLE, golden)
    out = tmp_path / "run"
    ran = ragbridge_cli("run", golden, "--out", out, "--backend", "native", "--json", "--no-progress")
    assert ran.returncode == 0, ran.stderr
    means = {r["metric"]: r["mean"] for r in json.loads(ran.stdout)["summary"] if r["mean"] is not None}
    assert len(means) >= 5
    gates = tmp_path / "gates.toml"
    gates.write_text("".join(f'[[gate]]\ncheck = "{m} >= 0"\nbackend = "native"\n' for m in means))
    results = json.loads(ragbridge_cli("gate", out, "--config", gates, "--json").stdout)["results"]
    assert {r["check"].split(" >=")[0]: r["figure"] for r in results} == means


def test_convert_says_how_far_its_writing_is_once_it_takes_a_while(monkeypatch, capsys):
    """A format written case by case (TREC, Parquet: 3 minutes for a million cases) says how many
    cases it has written, a line at the progress interval, and the whole count at the end; a short
    conversion (under the ``after`` seconds) says nothing."""
    from ragbridge.commands.data import _Counted
    from ragbridge.commands.output import counting_progress

    monkeypatch.setenv("RAGBRIDGE_PROGRESS_SECONDS", "0")
    shown = _Counted(list(range(2500)), counting_progress("writing", "written"))
    assert len(shown) == 2500 and list(shown) == list(range(2500)) and shown[3] == 3
    assert capsys.readouterr().err.splitlines() == ["writing: 1,000 cases", "written: 2,500 cases"]
    quiet = _Counted(list(range(2500)), counting_progress("writing", "written", after=60.0))
    assert list(quiet) == list(range(2500)) and capsys.readouterr().err == ""
