"""The report: content, escaping of every piece of user text, the three formats, the command, and the
HTML in a real headless Chromium (tables and plots render, no script from the data runs, screenshot)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE, ROOT, ragbridge_cli
from ragbridge import Case, Chunk, load_cases
from ragbridge import report as rep
from ragbridge.report.html import PALETTE
from ragbridge.analysis.gate import gate_thresholds
from ragbridge.report.text import num
from test_analysis import sc, synthetic_scores, write_run

ARTIFACTS = Path(os.environ.get("RAGBRIDGE_TEST_ARTIFACTS", ROOT / "runs" / "test-artifacts"))

# Text a hostile or careless dataset might hold: each must show as text and never run.
SCRIPT_Q = "<script>document.title='PWNED';document.documentElement.setAttribute('data-pwned','q')</script>"
IMG_A = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','a')\"> done & dusted"
REASON = "</script><script>document.documentElement.setAttribute('data-pwned','r')</script> | not | a | table"
TAG = "\"><svg onload=\"document.documentElement.setAttribute('data-pwned','t')\">"


def hostile_cases() -> list[Case]:
    cases = load_cases(EXAMPLE)[:12]
    evil = Case(
        id="evil-<b>case</b>",
        question=SCRIPT_Q,
        answer=IMG_A,
        contexts=[Chunk(id="doc#<i>1</i>", text="<style>body{display:none}</style>chunk text",
                        source="doc#s"),
                  Chunk(id="doc#2", text="plain", source="other")],
        relevant={"doc#s": 2},
        reference="<iframe src='https://example.com'></iframe>",
        tags=[TAG, "real"],
    )
    return cases + [evil]


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    import ragbridge

    cases = hostile_cases()
    native = ragbridge.evaluate(cases, backends=["native"],
                                metrics=["recall@5", "mrr", "ndcg@5", "must_contain"])
    scores = list(native.scores) + synthetic_scores(cases)
    scores = [s for s in scores if s.case_id != cases[-1].id or s.backend == "native"]
    scores += [
        sc(cases[-1].id, "faithfulness", "ragas", 0.1, reason=REASON, judge_calls=2, prompt_tokens=10,
           completion_tokens=5, seconds=1.25),
        sc(cases[-1].id, "faithfulness", "deepeval", 0.9, reason="<b>bold claim</b>", judge_calls=3,
           prompt_tokens=11, completion_tokens=6, seconds=2.5),
        sc(cases[-1].id, "faithfulness", "trulens", None, error="ValueError: <svg/onload=alert(1)>"),
    ]
    run = write_run(tmp_path_factory.mktemp("report") / "run", cases, scores,
                    judge={"model": "stub-<model>", "base_url": "http://127.0.0.1:9/v1", "stub": True})
    manifest = json.loads((run / "run.json").read_text())
    # the runner's wall-clock span per backend (trulens: not recorded, as by an older ragbridge)
    manifest["timing"] = {"wall_seconds": {"native": 0.05, "ragas": 0.75, "deepeval": 1.5}}
    (run / "run.json").write_text(json.dumps(manifest))
    return run


@pytest.fixture(scope="module")
def data(report_run):
    return rep.report_data(report_run, n_resamples=100)


@pytest.fixture(scope="module")
def html_text(report_run, data):
    return rep.render_html(report_run, data)


# --------------------------------------------------------------------------------------------
# Content


def test_report_data_content(data):
    assert data["backends"][0] == "native" and set(data["backends"]) == {"native", "ragas", "deepeval",
                                                                         "trulens"}
    assert data["halves"]["retrieval"] == ["recall@5", "mrr", "ndcg@5"]
    assert data["halves"]["generation"] == ["faithfulness", "answer_relevance", "must_contain"]
    # summary: mean, n, undefined, errors per metric x backend, overall and per tag
    s = {(r["metric"], r["backend"]): r for r in data["summary"]}
    assert s[("faithfulness", "trulens")]["n_errored"] == 1
    assert s[("faithfulness", "ragas")]["n_undefined"] == 1
    assert {"billing", "real"} <= set(data["summary_by_tag"])
    # agreement: three pairs on each of the two judged metrics, with intervals
    assert len(data["agreement"]) == 6
    assert all(a["spearman_low"] is not None for a in data["agreement"])
    assert data["disagreements"] and all(len(d["backends"]) >= 2 for d in data["disagreements"])
    # judge calls and tokens per backend
    usage = {u["backend"]: u for u in data["judge_usage"]}
    assert usage["native"]["judge_calls"] == 0
    assert usage["deepeval"]["judge_calls"] > 0 and usage["deepeval"]["prompt_tokens"] > 0
    # time: the runner's wall-clock span, and the per-score times added up (a different figure)
    assert (usage["ragas"]["wall_seconds"], usage["ragas"]["call_seconds"]) == (0.75, 1.25)
    assert (usage["deepeval"]["wall_seconds"], usage["deepeval"]["call_seconds"]) == (1.5, 2.5)
    assert usage["trulens"]["wall_seconds"] is None
    assert data["run"]["stub_judge"] is True
    # drill-down: chunks with relevance marked by id or by source, every backend's score
    evil = next(c for c in data["cases"] if c["id"] == "evil-<b>case</b>")
    assert [ch["relevant"] for ch in evil["contexts"]] == [True, False]
    assert evil["contexts"][0]["grade"] == 2
    assert {(x["metric"], x["backend"]) for x in evil["scores"]} >= {
        ("faithfulness", "ragas"), ("faithfulness", "deepeval"), ("faithfulness", "trulens")}
    assert evil["flags"]["error"] and evil["flags"]["fail"]
    dup = next(c for c in data["cases"] if c["id"] == "billing-refund-window")
    assert any(ch["relevant"] for ch in dup["contexts"])


def test_html_is_self_contained_and_escaped(html_text):
    h = html_text
    # one script, ours; no external resource of any kind
    assert len(re.findall(r"<script\b", h, re.I)) == 1
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", h, re.I)
    assert "@import" not in h and "url(http" not in h
    assert "Content-Security-Policy" in h and "script-src 'sha256-" in h
    # the hostile strings are present only as escaped text
    for raw in (SCRIPT_Q, IMG_A.split(" done")[0], "<svg onload", "<svg/onload", "<b>bold claim</b>",
                "<iframe", "<style>body{display:none}", "evil-<b>case"):
        assert raw not in h, raw
    assert "&lt;script&gt;document.title=&#39;PWNED&#39;" in h
    # the header says the scores came from the stub judge; wall time and summed call time are told apart
    assert h.index('class="stub-banner"') < h.index("</header>")
    assert "<th>wall time (s)</th><th>sum of call times (s)</th>" in h
    assert re.search(r'<td class="num">1\.5</td><td class="num">2\.5</td>', h)
    assert "&lt;img src=x onerror=" in h and "done &amp; dusted" in h
    assert "stub-&lt;model&gt;" in h
    # plots are inline SVG: distributions and scatter plots
    assert h.count('class="plot dist"') == 6 and h.count('class="plot scatter"') == 6


def test_markdown_and_json(report_run, data):
    md = rep.render_markdown(report_run, data)
    assert md.splitlines()[2].startswith("> **Stub judge.**")
    assert re.search(r"\| deepeval \| \d+ \| 0 \| \d+ \| \d+ \| \d+ \| \d+ \| \d+ \| 1\.5 \| 2\.5 \|", md)
    assert "## Retrieval" in md and "## Generation" in md and "## Agreement between backends" in md
    assert "## Judge calls, tokens and time" in md and "### billing-refund-window" in md
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "<img" not in md and "<svg" not in md
    # pipes in user text cannot break a table row
    reason_line = next(line for line in md.splitlines()
                       if line.startswith("| faithfulness | ragas |") and "not \\| a \\| table" in line)
    assert len(re.findall(r"(?<!\\)\|", reason_line)) == 5   # metric | backend | value | reason
    text = rep.render_json(report_run, data)
    back = json.loads(text)
    assert "NaN" not in text and back["cases_in_full"][-1]["question"] == SCRIPT_Q
    # every case, one line each, its scores read from the run's columns: the same values, statuses,
    # verdicts and flags as the rows made from each score read back
    lines = text.split('\n  "cases": [\n', 1)[1].splitlines()[:-2]
    assert len(lines) == len(back["cases"]) == len(data["cases"])
    fields = ("metric", "backend", "value", "status", "passed", "threshold")
    for line, case, full in zip(lines, back["cases"], data["cases"]):
        assert json.loads(line.rstrip(",")) == case
        assert (case["id"], case["tags"], case["answerable"], case["flags"]) == (
            full["id"], full["tags"], full["answerable"], full["flags"])
        assert [{k: s[k] for k in fields} for s in case["scores"]] == [
            {k: s[k] for k in fields} for s in full["scores"]]
    assert back["cases_file"] == str(report_run / "cases.jsonl") and "cases_file" in back["cases_note"]
    # the cases in full are the HTML report's; one case in full: the others' texts are not in the file
    one = json.loads(rep.render_json(report_run, data, full=1))
    assert len(one["cases_in_full"]) == 1 and len(one["cases"]) == len(data["cases"])
    shown = one["cases_in_full"][0]["id"]
    others = [c for c in data["cases"] if c["id"] != shown and c["answer"]]
    assert others and not any(c["answer"] in json.dumps(one, ensure_ascii=False) for c in others)
    assert back["agreement"][0]["metric"] in ("faithfulness", "answer_relevance")


def test_report_with_human_labels(report_run, tmp_path):
    cases = load_cases(EXAMPLE)[:12]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(
        json.dumps({"case_id": c.id, "metric": "faithfulness",
                    "label": "fail" if c.metadata.get("flaw") else "pass"}) + "\n" for c in cases))
    d = rep.report_data(report_run, n_resamples=50, labels=labels)
    v = {row["backend"]: row for row in d["validation"]}
    assert set(v) == {"ragas", "deepeval", "trulens"}
    assert all(row["n_labels"] == 12 and row["human_fail"] + row["human_pass"] == row["n_paired"]
               for row in v.values())
    assert v["ragas"]["claims_answers"] > 0     # the synthetic ragas scores expose claims
    h = rep.render_html(report_run, d)
    assert 'id="validation"' in h and "missed fails" in h
    md = rep.render_markdown(report_run, d)
    assert "## Against human labels" in md


def test_report_of_a_single_backend_run(tmp_path):
    run = write_run(tmp_path / "one", [Case(id="a", question="q?")], [sc("a", "mrr", "native", 1.0)])
    d = rep.report_data(run, n_resamples=0)
    assert d["agreement"] == [] and d["disagreements"] == []
    h = rep.render_html(run, d)
    assert "nothing to cross-check" in h
    # not judged by the stub: no stub notice anywhere
    assert d["run"]["stub_judge"] is False and 'class="stub-banner"' not in h
    assert "Stub judge" not in rep.render_markdown(run, d)


# --------------------------------------------------------------------------------------------
# Thresholds: per metric, from the gates file or the defaults


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    import ragbridge

    out = tmp_path_factory.mktemp("native") / "run"
    ragbridge.evaluate(load_cases(EXAMPLE), backends=["native"], out=out)
    return out


def test_default_thresholds_badge_the_cases_worth_reading(native_run):
    d = rep.report_data(native_run, n_resamples=0)
    marks = {t["metric"]: t for t in d["thresholds"]}
    assert marks["precision@5"]["threshold"] == pytest.approx(0.2) and marks["recall@5"]["threshold"] == 0.5
    assert marks["must_contain"]["threshold"] == 1.0 and {t["source"] for t in d["thresholds"]} == {"default"}
    # precision@5 is below its mark only where no relevant chunk made the top 5 (hit@5 = 0)
    by = {(s["metric"], c["id"]): s["value"] for c in d["cases"] for s in c["scores"]}
    misses = {cid for (m, cid), v in by.items() if m == "hit@5" and v == 0}
    badged = {c["id"] for c in d["cases"] if any(b["metric"] == "precision@5" for b in c["below"])}
    assert badged == misses and marks["precision@5"]["n_below"] == len(misses)
    # the example's documented retrieval misses are badged, with the metrics that show it
    for cid in ("shipping-same-day-cutoff", "account-password-reset-link", "privacy-address-book-json"):
        case = next(c for c in d["cases"] if c["id"] == cid)
        assert {"recall@5", "hit@5"} <= {b["metric"] for b in case["below"]} and case["flags"]["fail"]
    flagged = [c for c in d["cases"] if c["flags"]["fail"]]
    assert 3 <= len(flagged) < len(d["cases"]) / 4
    assert all(c["flags"]["fail"] == bool(c["below"]) for c in d["cases"])
    # one bare --threshold replaces every default: 0.5 on precision@5 flags nearly every labelled case
    flat = rep.report_data(native_run, n_resamples=0, thresholds=["0.5"])
    assert sum(c["flags"]["fail"] for c in flat["cases"]) > 3 * len(flagged)
    assert {t["source"] for t in flat["thresholds"]} == {"--threshold"}


def test_gates_file_sets_thresholds(native_run, tmp_path):
    gates = ROOT / "examples" / "ci" / "gates-native.toml"
    r = ragbridge_cli("report", native_run, "--gates", gates, "--format", "json",
                      "--out", tmp_path / "r.json", "--resamples", "0", "--threshold", "ndcg@5=0.6")
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["thresholds"]
    marks = {t["metric"]: (t["threshold"], t["source"]) for t in rows}
    assert marks["recall@5"] == (0.9, "gates")            # check = "recall@5 >= 0.90"
    assert marks["must_contain"] == (0.8, "gates")
    assert marks["abstention"] == (0.75, "gates")         # a rule limited to tags still names the metric
    assert marks["ndcg@5"] == (0.6, "--threshold")        # the command line beats the file
    assert marks["mrr"] == (0.5, "default")               # only a drop rule: no per-case mark
    assert marks["precision@5"] == (pytest.approx(0.2), "default")
    # share() cut first, a rule for all cases before one limited to tags, a backend's rule for that backend
    cfg = tmp_path / "gates.toml"
    cfg.write_text('[[gate]]\ncheck = "recall@5 >= 0.7"\ntags = ["real"]\n\n'
                   '[[gate]]\ncheck = "recall@5 >= 0.8"\n\n'
                   '[[gate]]\ncheck = "share(recall@5 >= 0.6) >= 0.9"\n\n'
                   '[[gate]]\ncheck = "mrr >= 0.9"\nbackend = "other"\n')
    th = gate_thresholds(cfg)
    assert th.by_metric == {"recall@5": 0.6} and th.by_pair == {("other", "mrr"): 0.9}
    d = rep.report_data(native_run, n_resamples=0, gates=cfg)
    assert {t["metric"]: t["threshold"] for t in d["thresholds"]}["mrr"] == 0.5
    # a broken gates file is bad input: exit 2, one line naming the file, nothing written
    bad = tmp_path / "bad.toml"
    bad.write_text('[[gate]]\ncheck = "recall@5 >>= 0.7"\n')
    r = ragbridge_cli("report", native_run, "--gates", bad, "--out", tmp_path / "x.html")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], r.stderr
    assert not (tmp_path / "x.html").exists()
    md = rep.render_markdown(native_run, rep.report_data(native_run, n_resamples=0, gates=gates))
    assert "| recall@5 | native | 0.9 | gates |" in md and "**Below threshold:** recall@5 (native" in md


@pytest.mark.slow
def test_cli_report(report_run, tmp_path):
    r = ragbridge_cli("report", report_run, "--resamples", "50")
    assert r.returncode == 0, r.stderr
    assert (report_run / "report.html").exists() and "report written to" in r.stdout
    md = ragbridge_cli("report", report_run, "--format", "md", "--out", "-", "--resamples", "0")
    assert md.returncode == 0 and md.stdout.startswith("# ragbridge report")
    out = tmp_path / "sub" / "r.json"
    j = ragbridge_cli("report", report_run, "--format", "json", "--out", out, "--resamples", "0",
                      "--threshold", "ragas=0.7")
    assert j.returncode == 0, j.stderr
    marks = {(t["backend"], t["metric"]): (t["threshold"], t["source"])
             for t in json.loads(out.read_text())["thresholds"]}
    assert marks[("ragas", "faithfulness")] == (0.7, "--threshold")
    assert marks[("deepeval", "faithfulness")] == (0.5, "default")
    for args, message in ((("report", report_run, "--format", "pdf"), "--format"),):
        bad = ragbridge_cli(*args)
        lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
        assert (bad.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:")
                and message in lines[0])


# --------------------------------------------------------------------------------------------
# A real browser


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _browse(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium)")
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", *extra, url],
        capture_output=True, text=True, timeout=120,
    )


def test_chromium_renders_tables_and_plots_and_runs_no_data_script(html_text, data, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(html_text, encoding="utf-8")
    # a link to a case opens it: its chunk and score tables are laid out with the others
    r = _browse(tmp_path, page.as_uri() + "#case-billing-refund-window", "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    root = re.search(r"<html[^>]*>", dom).group(0)
    # the report's own script ran (so scripts were enabled) and saw every plot and table laid out
    assert 'data-report-ready="1"' in root, root
    plots = int(re.search(r'data-plots-drawn="(\d+)"', root).group(1))
    tables = int(re.search(r'data-tables-drawn="(\d+)"', root).group(1))
    assert plots == html_text.count('class="plot ') == 12
    assert tables >= 9
    assert re.search(r'<details class="case" id="case-billing-refund-window"[^>]* open=""', dom)
    # the stub-judge notice is on screen, and every below-threshold badge is laid out, one per metric
    assert re.search(r'data-stub-notice-drawn="1"', root), root
    badges = int(re.search(r'data-badges-drawn="(\d+)"', root).group(1))
    assert badges == sum(len(c["below"]) for c in data["cases"]) > 0
    # nothing from the data ran
    assert "data-pwned" not in root
    assert re.search(r"<title>ragbridge report: golden.jsonl</title>", dom)
    assert "PWNED" not in re.search(r"<title>.*?</title>", dom, re.S).group(0)
    # and it is shown as text
    assert "&lt;script&gt;document.title=" in dom


def test_content_security_policy_blocks_markup_that_slips_through(html_text, tmp_path):
    """Defence in depth: even an unescaped script in the page would not run."""
    page = tmp_path / "injected.html"
    page.write_text(html_text.replace(
        "</main>", "<script>document.documentElement.setAttribute('data-pwned','csp')</script>"
        "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\"></main>"),
        encoding="utf-8")
    r = _browse(tmp_path, page.as_uri(), "--dump-dom")
    root = re.search(r"<html[^>]*>", r.stdout).group(0)
    assert 'data-report-ready="1"' in root and "data-pwned" not in root


@pytest.mark.slow
def test_screenshot(html_text, tmp_path):
    from PIL import Image

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / "report.html"
    page.write_text(html_text, encoding="utf-8")
    shot = ARTIFACTS / "report-screenshot.png"
    shot.unlink(missing_ok=True)
    width, height = 1400, 3200  # down to the distribution plots, below the real-and-synthetic table
    r = _browse(tmp_path, page.as_uri(), f"--window-size={width},{height}", f"--screenshot={shot}")
    assert shot.exists(), r.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (width, height)
    pixels = np.asarray(img, dtype=int).reshape(-1, 3)
    non_white = float(np.mean(pixels.min(axis=1) < 235))
    assert 0.03 < non_white < 0.6, non_white      # not blank, not a wall of colour
    # the plots' backend colours are on screen (bars of the distribution plots)
    palette = [tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in PALETTE[:4]]
    for colour in palette:
        near = int(np.sum(np.abs(pixels - np.array(colour)).sum(axis=1) < 40))
        assert near > 300, colour
    assert len(np.unique(pixels, axis=0)) > 200


# --------------------------------------------------------------------------------------------
# A large run: the cases that matter in full, the others one line each, small file, fast page

N_LARGE = 3000


def write_large_golden(path: Path, n: int = N_LARGE, contexts: int = 20) -> dict[str, set]:
    """``n`` cases of ``contexts`` chunks; every 75th retrieves none of its labelled chunks and every
    101st answer lacks its required word (the cases below a threshold). Returns those ids."""
    import random

    rng = random.Random(5)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(500)]
    missed, lacking = set(), set()
    with open(path, "w", encoding="utf-8") as f:
        for q in range(n):
            cid = f"case-{q:05d}"
            chunks = [{"id": f"{cid}#{i}", "source": f"doc{q}-{i}.md",
                       "text": f"{cid} chunk {i}: " + " ".join(rng.choice(vocab) for _ in range(40))}
                      for i in range(contexts)]
            relevant = {f"{cid}#{rng.randrange(2)}": 1}  # mrr 1 or 0.5: passes
            if q % 75 == 7:
                relevant = {f"{cid}#elsewhere": 1}
                missed.add(cid)
            word = f"needle{q}"
            answer = " ".join(rng.choice(vocab) for _ in range(30)) + ("" if q % 101 == 3 else f" {word}")
            if q % 101 == 3:
                lacking.add(cid)
            f.write(json.dumps({"id": cid, "question": f"question {q}: " + " ".join(vocab[q % 500:][:8]),
                                "answer": answer, "contexts": chunks, "relevant": relevant,
                                "must_contain": [word], "tags": [f"topic{q % 6}"]}) + "\n")
    return {"missed": missed, "lacking": lacking}


@pytest.fixture(scope="module")
def large_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("large")
    bad = write_large_golden(root / "golden.jsonl")
    run = root / "run"
    r = ragbridge_cli("run", root / "golden.jsonl", "--out", run, "--backend", "native", "--metric",
                      "recall@5", "--metric", "mrr", "--metric", "must_contain", "--no-progress")
    assert r.returncode == 0, r.stderr
    page = root / "report.html"
    r = ragbridge_cli("report", run, "--out", page, "--resamples", "0")
    assert r.returncode == 0, r.stderr
    return {"run": run, "page": page, "html": page.read_text(encoding="utf-8"), **bad}


def test_large_run_shows_the_cases_that_matter_in_full_and_the_rest_one_line_each(large_run):
    h, run = large_run["html"], large_run["run"]
    badged = large_run["missed"] | large_run["lacking"]
    # small next to the data: the chunks of the cases not shown in full are not in the file
    assert os.path.getsize(large_run["page"]) < 0.15 * os.path.getsize(run / "cases.jsonl")
    full = set(re.findall(r'<details class="case" id="case-([^"]+)"', h))
    assert full == badged and 0 < len(full) < 250
    for cid in sorted(badged)[:5]:  # in full: chunks and scores
        assert f"{cid} chunk 19: " in h
    assert "case-00000 chunk 0: " not in h          # a case that passes everything: one line
    pages = re.findall(r'<details class="page"><summary>([^<]*)</summary><pre class="crows"[^>]*>(.*?)</pre>',
                       h, re.S)
    assert len(pages) == math.ceil((N_LARGE - len(badged)) / 1000)
    lines = [ln for _, text in pages for ln in text.split("\n")[2:]]
    assert len(lines) == N_LARGE - len(badged)
    # every other case is reachable by id, with each of its scores, as scores.jsonl has them
    scores = {}
    for line in (run / "scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        scores[(s["case_id"], s["metric"])] = s["value"]
    columns = ["recall@5", "mrr", "must_contain"]
    for cid in ("case-00000", "case-01234", f"case-{N_LARGE - 1:05d}"):
        line = next(ln for ln in lines if f" {cid} · " in ln)
        assert line.split()[:3] == [num(scores[(cid, m)]) for m in columns], line
        assert "✗" not in line
    assert "3 of the" not in h and f"{len(full):,} of the {N_LARGE:,} cases are shown in full" in h


@pytest.mark.slow
def test_large_run_json_report_holds_every_case_and_the_html_reports_cases_in_full(large_run, tmp_path):
    run = large_run["run"]
    out = tmp_path / "r.json"
    r = ragbridge_cli("report", run, "--format", "json", "--out", out, "--resamples", "0")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    cases, full = doc["cases"], doc["cases_in_full"]
    # every case with every score, as scores.jsonl has them; the chunks only of the cases in full
    assert [c["id"] for c in cases] == [f"case-{i:05d}" for i in range(N_LARGE)]
    scores = {(s["case_id"], s["metric"]): s["value"] for s in map(json.loads, (run / "scores.jsonl").open())}
    assert {(c["id"], s["metric"]): s["value"] for c in cases for s in c["scores"]} == scores
    badged = large_run["missed"] | large_run["lacking"]
    assert {c["id"] for c in full} == badged == set(re.findall(r'<details class="case" id="case-([^"]+)"',
                                                                large_run["html"]))
    assert all(len(c["contexts"]) == 20 and c["contexts"][19]["text"].startswith(f"{c['id']} chunk 19: ")
               for c in full)
    assert {c["id"] for c in cases if c["flags"]["fail"]} == badged
    assert os.path.getsize(out) < 0.15 * os.path.getsize(run / "cases.jsonl")
    assert doc["cases_file"] == str(run / "cases.jsonl")


def test_full_option_and_a_small_limit(large_run, tmp_path):
    page = tmp_path / "r.html"
    r = ragbridge_cli("report", large_run["run"], "--out", page, "--resamples", "0", "--full", "10")
    assert r.returncode == 0, r.stderr
    h = page.read_text(encoding="utf-8")
    full = re.findall(r'<details class="case" id="case-([^"]+)"', h)
    assert len(full) == 10 and set(full) <= large_run["missed"] | large_run["lacking"]
    # the ones with the most badges first: the missed retrievals are below on two metrics
    assert set(full) <= large_run["missed"]


def test_binned_scatter_stays_small_and_counts_every_case():
    from ragbridge.report.html import SCATTER_POINTS, svg_scatter

    rng = np.random.default_rng(3)
    n = 5 * SCATTER_POINTS
    xs, ys = rng.random(n), np.clip(rng.random(n) * 0.3 + rng.random(n) * 0.7, 0, 1)
    pts = [(f"<b>c{i}</b>", float(x), float(y)) for i, (x, y) in enumerate(zip(xs, ys))]
    svg = svg_scatter("faithfulness", "ragas", "deepeval", pts, 0.5, 0.5, {})
    assert len(svg) < 120_000 and f"{n:,} cases in 20 × 20 cells" in svg and "<b>" not in svg
    counts = [int(c.replace(",", "")) for c in re.findall(r"<title>([\d,]+) case\(s\)", svg)]
    assert sum(counts) == n and len(counts) <= 2 * 20 * 20
    # a cell on the threshold holds agreeing and differing cases apart
    assert "verdicts differ" in svg and svg.count("pt-differ") < len(counts)


def test_chromium_opens_a_large_report_and_a_link_finds_a_case_on_its_line(large_run, tmp_path):
    page = large_run["page"]
    r = _browse(tmp_path, page.as_uri() + "#case-01234", "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    root = re.search(r"<html[^>]*>", r.stdout).group(0)
    assert 'data-report-ready="1"' in root and "data-pwned" not in root
    plots = int(re.search(r'data-plots-drawn="(\d+)"', root).group(1))
    assert plots == large_run["html"].count('class="plot ') > 0
    # the link filtered the lines to that case, and opened its page
    assert re.search(r'id="case-count"[^>]*>1 of 3,000 cases<', r.stdout)
    opened = re.findall(r'<details class="page" open=""><summary>[^<]*</summary><pre[^>]*>(.*?)</pre>',
                        r.stdout, re.S)
    assert len(opened) == 1 and [ln for ln in opened[0].split("\n")[2:]] == [
        next(ln for ln in large_run["html"].split("\n") if " case-01234 · " in ln)]


@pytest.mark.slow
def test_large_judged_run_report_bins_its_scatter_and_opens(tmp_path, stub_judge):
    from ragbridge.report.html import SCATTER_POINTS

    n = SCATTER_POINTS + 200  # past the points a scatter draws one by one: binned
    write_large_golden(tmp_path / "golden.jsonl", n)
    run = tmp_path / "run"
    r = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", run, "--backend", "native", "--backend",
                      "rubric", "--backend", "phoenix", "--metric", "mrr", "--metric", "faithfulness",
                      "--judge-model", "stub-judge", "--judge-base-url", stub_judge.base_url,
                      "--cache-mode", "off", "--no-progress")
    assert r.returncode == 0, r.stderr
    page = tmp_path / "report.html"
    r = ragbridge_cli("report", run, "--out", page, "--resamples", "0")
    assert r.returncode == 0, r.stderr
    h = page.read_text(encoding="utf-8")
    assert h.count('class="plot scatter"') == 1 and f"{n:,} cases in 20 × 20 cells" in h
    # 250 of the 1,200 cases in full, the others a line each: under half of the cases' own file
    assert os.path.getsize(page) < 0.5 * os.path.getsize(run / "cases.jsonl")
    full = set(re.findall(r'<details class="case" id="case-([^"]+)"', h))
    listed = set(re.findall(r'<td><a href="#case-([^"]+)">', h))   # "Where they disagree most"
    assert len(full) == 250 and listed <= full
    b = _browse(tmp_path, page.as_uri(), "--dump-dom")
    root = re.search(r"<html[^>]*>", b.stdout).group(0)
    assert 'data-report-ready="1"' in root and 'data-stub-notice-drawn="1"' in root
    assert int(re.search(r'data-plots-drawn="(\d+)"', root).group(1)) == h.count('class="plot ')


def test_past_the_line_budget_the_page_holds_a_uniform_sample_of_lines_and_says_so(large_run, monkeypatch):
    from ragbridge.report import html as page_module

    # a run past the page's line budget (as a million cases are past 20,000): a smaller budget here
    monkeypatch.setattr(page_module, "COMPACT_ROWS", 500, raising=False)
    h = rep.render_html(large_run["run"], n_resamples=0)
    badged = large_run["missed"] | large_run["lacking"]
    rest = [f"case-{q:05d}" for q in range(N_LARGE) if f"case-{q:05d}" not in badged]
    step = math.ceil(len(rest) / 500)
    lines = [ln for text in re.findall(r'<pre class="crows"[^>]*>(.*?)</pre>', h, re.S)
             for ln in text.split("\n")[2:]]
    assert [re.search(r" (case-\d+) · ", ln).group(1) for ln in lines] == rest[::step]
    assert f"A uniform sample of the other {len(rest):,} follows" in h
    assert f"{len(lines)} cases, one in {step} in run order" in h
    # the figures above the lines are still over every case
    assert f"{len(badged):,} of the {N_LARGE:,} cases are shown in full" in h


def test_a_case_of_ten_thousand_chunks_shows_its_first_and_its_relevant_ones(tmp_path):
    from ragbridge.formats import write_cases
    from ragbridge.report.html import CHUNKS_SHOWN

    n_chunks = 10_000
    cases = [Case(id=f"wide-{q}", question=f"question {q}", answer="an answer",
                  contexts=[Chunk(id=f"w{q}-{i}", text=f"w{q}-{i} " + "word " * 40) for i in range(n_chunks)],
                  relevant={f"w{q}-3": 2, f"w{q}-9000": 1})
             for q in range(3)]
    write_cases(cases, tmp_path / "golden.jsonl")
    run, page = tmp_path / "run", tmp_path / "report.html"
    r = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", run, "--backend", "native", "--metric",
                      "recall@10", "--metric", "mrr", "--no-progress")
    assert r.returncode == 0, r.stderr
    r = ragbridge_cli("report", run, "--out", page, "--resamples", "0")
    assert r.returncode == 0, r.stderr
    h = page.read_text(encoding="utf-8")
    assert os.path.getsize(page) < 0.1 * os.path.getsize(run / "cases.jsonl")
    for q in range(3):
        shown = re.findall(rf">(w{q}-\d+) word ", h)
        assert shown == [f"w{q}-{i}" for i in range(CHUNKS_SHOWN)] + [f"w{q}-9000"]
    hidden = n_chunks - CHUNKS_SHOWN - 1
    assert h.count(f"{hidden} more chunk(s) not shown") == 3
    b = _browse(tmp_path, page.as_uri(), "--dump-dom")
    assert b.returncode == 0, b.stderr[-2000:]
    assert 'data-report-ready="1"' in re.search(r"<html[^>]*>", b.stdout).group(0)


@pytest.mark.slow
def test_the_page_keeps_to_its_size_budget_and_chromium_opens_it(large_run, tmp_path):
    from ragbridge.formats import write_cases
    from ragbridge.report.html import SIZE_BUDGET

    # a run past the page's budget (as a million cases, or cases of 10,000 chunks, are past 20 MB):
    # the same page under a budget a small run exceeds
    budget = 200_000
    default = rep.render_html(large_run["run"], n_resamples=0)
    assert len(default.encode("utf-8")) > budget and len(large_run["html"].encode("utf-8")) < SIZE_BUDGET
    h = rep.render_html(large_run["run"], n_resamples=0, budget=budget)
    assert len(h.encode("utf-8")) <= budget
    pages = re.findall(r'<pre class="crows"[^>]*>(.*?)</pre>', h, re.S)
    n_lines = sum(text.count("\n") - 1 for text in pages)
    shown = re.search(r"([\d,]+) of the ([\d,]+) cases are shown in full", h)  # counts as 2,950
    rest = N_LARGE - int(shown.group(1).replace(",", ""))
    assert 0 < n_lines < rest and f"A uniform sample of the other {rest:,} follows" in h
    assert f"{n_lines:,} cases, one in " in h
    # the figures above the lines are still over every case
    assert f"over all {N_LARGE:,} cases" in h
    page = tmp_path / "budget.html"
    page.write_text(h, encoding="utf-8")
    b = _browse(tmp_path, page.as_uri(), "--dump-dom")
    assert b.returncode == 0, b.stderr[-2000:]
    assert 'data-report-ready="1"' in re.search(r"<html[^>]*>", b.stdout).group(0)

    # cases of 10,000 chunks each, of long texts: the cases in full keep to two fifths of the budget
    cases = [Case(id=f"wide-{q}", question=f"question {q}", answer="an answer",
                  contexts=[Chunk(id=f"w{q}-{i}", text=f"w{q}-{i} " + "word " * 200) for i in range(10_000)],
                  relevant={f"w{q}-3": 2, f"w{q}-9000": 1})
             for q in range(4)]
    write_cases(cases, tmp_path / "wide.jsonl")
    run = tmp_path / "wide-run"
    r = ragbridge_cli("run", tmp_path / "wide.jsonl", "--out", run, "--backend", "native", "--metric",
                      "recall@10", "--no-progress")
    assert r.returncode == 0, r.stderr
    h = rep.render_html(run, n_resamples=0, budget=budget)
    assert len(h.encode("utf-8")) <= budget and "would make the page too large to open" in h
    page.write_text(h, encoding="utf-8")
    b = _browse(tmp_path, page.as_uri(), "--dump-dom")
    assert 'data-report-ready="1"' in re.search(r"<html[^>]*>", b.stdout).group(0)


def test_report_takes_its_format_from_the_out_files_suffix(native_run, tmp_path):
    """``--out report.md`` without ``--format`` writes Markdown (not HTML under a .md name), .json JSON;
    a suffix that contradicts ``--format``, or .xml, is refused, exit 2, nothing written."""
    r = ragbridge_cli("report", native_run, "--out", tmp_path / "report.md", "--resamples", "0")
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# ") and "<html" not in text.lower()
    r = ragbridge_cli("report", native_run, "--out", tmp_path / "report.json", "--resamples", "0")
    assert r.returncode == 0 and "cases" in json.loads((tmp_path / "report.json").read_text()), r.stderr
    r = ragbridge_cli("report", native_run, "--out", tmp_path / "page.htm", "--resamples", "0")
    assert r.returncode == 0 and "<html" in (tmp_path / "page.htm").read_text().lower()
    r = ragbridge_cli("report", native_run, "--out", tmp_path / "other.md", "--format", "html")
    assert r.returncode == 2 and not (tmp_path / "other.md").exists()
    assert "names a md file but --format is html" in " ".join(r.stderr.split()), r.stderr
    r = ragbridge_cli("report", native_run, "--out", tmp_path / "report.xml")
    assert r.returncode == 2 and not (tmp_path / "report.xml").exists()
    assert "JUnit XML is what `ragbridge gate RUN --junit" in " ".join(r.stderr.split()), r.stderr


def test_write_report_takes_its_format_from_the_files_suffix(native_run, tmp_path):
    from ragbridge.analysis.table import AnalysisError

    md = rep.write_report(native_run, tmp_path / "r.md", n_resamples=0)
    assert md.read_text().startswith("# ") and "<html" not in md.read_text().lower()
    with pytest.raises(AnalysisError, match="names a md file but the format is html"):
        rep.write_report(native_run, tmp_path / "x.md", fmt="html", n_resamples=0)
    assert not (tmp_path / "x.md").exists()


def test_a_chunk_judged_not_relevant_is_not_listed_as_relevant_in_the_html(tmp_path):
    """Grade 0 says a person judged the chunk not relevant: the case's drill-down lists it so."""
    import json

    from conftest import ragbridge_cli
    from ragbridge.report.html import render_html

    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "what?", "contexts": [{"id": "a"}, {"id": "b"}],
                                "relevant": {"a": 2, "b": 0}}) + "\n", encoding="utf-8")
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "mrr", "--no-progress")
    assert res.returncode == 0, res.stderr
    page = render_html(tmp_path / "run")
    assert "labelled relevant: <code>a</code> (2)</p>" in page
    assert "judged not relevant: <code>b</code></p>" in page and "(0)" not in page


def test_python_dash_m_runs_the_command_line():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "ragbridge", "--help"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "diagnose" in res.stdout and "report" in res.stdout


def test_export_scores_of_a_run_not_from_traces_says_where_its_scores_are(tmp_path):
    """``export-scores`` writes span evaluations for runs sampled from traces; on another run it says
    so and where every score is as data (the report's JSON, which the test reads back)."""
    import json

    from conftest import ragbridge_cli

    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "what?", "contexts": [{"id": "a"}],
                                "relevant": {"a": 1}}) + "\n", encoding="utf-8")
    assert ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "mrr", "--no-progress").returncode == 0
    res = ragbridge_cli("export-scores", tmp_path / "run", "--to", "jsonl", "--out", tmp_path / "e.jsonl")
    err = " ".join(res.stderr.split())
    assert res.returncode == 2 and not (tmp_path / "e.jsonl").exists()
    assert f"ragbridge report {tmp_path / 'run'} --format json --out FILE" in err
    res = ragbridge_cli("report", tmp_path / "run", "--format", "json", "--out", tmp_path / "r.json")
    assert res.returncode == 0, res.stderr
    assert "mrr" in (tmp_path / "r.json").read_text(encoding="utf-8")


def test_the_markdown_report_of_a_large_run_keeps_to_the_htmls_cases_in_full(tmp_path):
    """The Markdown shows the cases the HTML shows in full (``--full``, the ones that matter first),
    each with its first chunks, and says what it left out and where every case is."""
    import json

    from conftest import ragbridge_cli
    from ragbridge.report.html import CHUNKS_SHOWN

    rows = [{"id": f"q{q}", "question": f"question {q}",
             "contexts": [{"id": f"d{q}-{i}", "text": f"chunk {i}"} for i in range(CHUNKS_SHOWN + 10)],
             "relevant": {f"d{q}-{1 if q % 4 else CHUNKS_SHOWN + 5}": 1}} for q in range(40)]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "mrr", "--no-progress").returncode == 0
    res = ragbridge_cli("report", tmp_path / "run", "--format", "md", "--out", tmp_path / "r.md",
                        "--full", "5",
                        "--resamples", "0")
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert md.count("\n### q") == 5 and "5 of 40 cases in full" in md
    assert "`ragbridge report RUN --format json`" in md
    assert [f"q{q}" for q in range(0, 20, 4)] == [ln[4:] for ln in md.splitlines() if ln.startswith("### q")]
    assert md.count("more chunk(s) not shown") == 5 and f"| chunk {CHUNKS_SHOWN + 5} |" in md
    assert f"| chunk {CHUNKS_SHOWN + 6} |" not in md
    small = ragbridge_cli("report", tmp_path / "run", "--format", "md", "--out", "-",
                          "--resamples", "0").stdout
    assert small.count("\n### q") == 40 and "cases in full" not in small  # under --full's 250: every case


def test_the_one_line_cases_questions_are_the_cases_own(tmp_path):
    """The one-line cases of a large run take their questions from the start of each case's line
    (its id, then its question) without reading its chunks: the same strings as the cases read in
    full, whatever characters the ids and questions hold."""
    import ragbridge
    from ragbridge import load_run

    odd = ['plain', 'with "quotes" and \\ backslash', 'tab\tand\nnewline', 'ünïcödé 日本 🙂', '', '\u2028x']
    cases = [Case(id=f'c-{i}-"q"\\é', question=q or "?", contexts=[Chunk(id=f"d{i}", text="t")],
                  relevant={f"d{i}": 1}) for i, q in enumerate(odd)]
    ragbridge.evaluate(cases, backends=["native"], metrics=["recall@5"], out=tmp_path / "run")
    index = load_run(tmp_path / "run").columns.cases
    places = list(range(len(index)))
    assert index.questions(places) == [c.question for c in cases]
    assert index.questions(places) == [v.question for v in index.views(places)]
    assert index.questions(places[::-1]) == [c.question for c in cases][::-1]


def test_a_report_of_a_killed_run_counts_the_scores_it_recorded(tmp_path):
    """A run killed with SIGKILL leaves run.json as its session began it (running, no counts): the
    report says interrupted and counts the scores scores.jsonl holds, not 0."""
    import subprocess
    import sys

    out = tmp_path / "run"
    res = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "native", "--no-progress")
    assert res.returncode == 0, res.stderr
    manifest = json.loads((out / "run.json").read_text())
    done = manifest["counts"]
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a process that has ended
    manifest.update(status="running", counts={}, finished_at=None,
                    process={**manifest["process"], "pid": int(gone)})
    (out / "run.json").write_text(json.dumps(manifest))
    res = ragbridge_cli("report", out, "--format", "json", "--out", "-", "--resamples", "0")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)["run"]
    assert run["status"] == "interrupted"
    assert {k: run["counts"][k] for k in ("scores", "scored", "undefined", "errored")} == {
        k: done[k] for k in ("scores", "scored", "undefined", "errored")}
    # the Python view says the same
    from ragbridge import load_run

    loaded = load_run(out)
    assert f"{done['scores']} scores, interrupted" in repr(loaded)
    assert f"{done['scores']} scores, interrupted" in loaded._repr_html_()
