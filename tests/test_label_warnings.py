"""Labels no retrieved chunk matches: a RAGAS dataset made with RAGAS's own objects and writer, whose
labels name sections while its chunk ids name chunks, scores ranking metrics of 0 on most cases. The
run says so, with the count, the cases and the likely cause, everywhere a number is read: the
terminal, ``--json``, ``run.json``, the HTML and Markdown reports and a notebook's view of the run;
and only where the run computes a ranking metric. A case that the span labels of ``ragbridge anchor``
match is not one of them."""

from __future__ import annotations

import json
import sys

import pytest

import ragbridge
from conftest import EXAMPLE, ROOT, needs_backend, ragbridge_cli, warnings_in
from ragbridge.formats import write_cases

PREFIX = ("2 of 3 case(s) with relevance labels have no retrieved chunk that matches a label, so their "
          "ranking metrics are 0 ('q-")
CAUSE = ("their labels are the beginnings of chunk ids (label 'refunds.md#window', chunk "
         "'refunds.md#window-1'), as sections or documents are")


def _ragas_file(tmp_path):
    """Three cases of the support-bot set as a RAGAS user keeps them: the retriever's chunk ids in
    ``retrieved_context_ids``, the labelled sections in ``reference_context_ids`` (one case labelled by
    chunk id), written by RAGAS's ``EvaluationDataset.to_jsonl``."""
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample

    golden = {c.id: c for c in ragbridge.load_cases(EXAMPLE)}
    samples = []
    for cid in ("billing-refund-window", "billing-refund-annual", "account-2fa-sms"):
        case = golden[cid]
        samples.append(SingleTurnSample(
            user_input=case.question, response=case.answer,
            retrieved_contexts=[c.text for c in case.contexts],
            retrieved_context_ids=[c.id for c in case.contexts],
            reference_context_ids=[k for k, g in case.relevant.items() if g > 0]))
    path = tmp_path / "ragas.jsonl"
    EvaluationDataset(samples=samples).to_jsonl(str(path))
    return path


@needs_backend("ragas")
def test_labels_that_name_sections_of_chunk_ids_are_warned_wherever_the_numbers_are_read(tmp_path):
    data = _ragas_file(tmp_path)
    run = tmp_path / "run"
    res = ragbridge_cli("run", data, "--format", "ragas", "--out", run, "-m", "recall@5", "-m", "mrr",
                        "--no-progress", "--json")
    assert res.returncode == 0, res.stderr
    warned = warnings_in(res.stderr)
    assert len(warned) == 1 and warned[0].startswith("warning: " + PREFIX) and CAUSE in warned[0], res.stderr
    doc = json.loads(res.stdout)
    assert doc["warnings"] == [warned[0].removeprefix("warning: ")]
    assert json.loads((run / "run.json").read_text())["warnings"] == doc["warnings"]
    # and the warning is right: the two cases score 0, the one labelled by chunk id does not
    scores = map(json.loads, (run / "scores.jsonl").read_text().splitlines())
    recall = {s["case_id"]: s["value"] for s in scores if s["metric"] == "recall@5"}
    assert sorted(recall.values()) == [0.0, 0.0, 1.0]

    for fmt, shown in (("html", "⚠ warning: " + PREFIX), ("md", "> ⚠️ warning: 2 of 3 case(s)")):
        res = ragbridge_cli("report", run, "--format", fmt, "--out", tmp_path / f"report.{fmt}")
        assert res.returncode == 0, res.stderr
        text = (tmp_path / f"report.{fmt}").read_text(encoding="utf-8")
        assert shown in text.replace("&#39;", "'").replace("&#x27;", "'"), fmt

    # in Python: the run a notebook shows says it too
    from ragas.dataset_schema import EvaluationDataset

    result = ragbridge.evaluate(EvaluationDataset.from_jsonl(str(data)), metrics=["recall@5"])
    assert result.manifest.warnings == doc["warnings"]
    assert "warning: 2 of 3 case(s)" in result._repr_html_()


def test_a_run_without_ranking_metrics_gets_no_ranking_warnings(tmp_path):
    """The same kind of labels, and repeated chunk ids, on a run of the answer checks alone: nothing
    of either is said, since no number of the run depends on them."""
    cases = [c.model_copy(update={"relevant": {f"{c.contexts[0].id.rsplit('-', 1)[0]}x": 1}})
             for c in ragbridge.load_cases(EXAMPLE) if c.contexts]
    path = tmp_path / "golden.jsonl"
    write_cases(cases, path)
    res = ragbridge_cli("run", path, "--out", tmp_path / "checks", "-m", "must_contain", "--no-progress")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    res = ragbridge_cli("run", path, "--out", tmp_path / "ranked", "-m", "recall@5", "--no-progress")
    warned = warnings_in(res.stderr)
    assert any("in none of the cases does a chunk's id or source match a label" in w for w in warned)
    assert any(w.startswith("warning: 2 repeated chunk id(s) in 2 case(s) ('returns-label-validity', "
                            "'notifications-quiet-hours') are dropped before ranking") for w in warned)
    # scoring more metrics into the folder keeps the warnings of the metrics it holds
    res = ragbridge_cli("rescore", tmp_path / "ranked", "-m", "must_contain", "--no-progress")
    assert res.returncode == 0, res.stderr
    kept = json.loads((tmp_path / "ranked" / "run.json").read_text())["warnings"]
    assert [f"warning: {w}" for w in kept] == warned


def test_retrieval_misses_are_counted_apart_from_input_problems(tmp_path):
    """The bundled golden set: three answerable cases retrieve no labelled chunk. A run counts and
    names them; ``convert``, which computes nothing, does not."""
    res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "-m", "recall@5", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert warnings_in(res.stderr)[:1] == [  # then the repeated chunk ids
        "warning: 3 of 49 case(s) with relevance labels have no retrieved chunk that matches a label, so "
        "their ranking metrics are 0 ('shipping-same-day-cutoff', 'account-password-reset-link', "
        "'privacy-address-book-json'): retrieval found none of their labelled chunks"]
    res = ragbridge_cli("convert", EXAMPLE, tmp_path / "cases.csv")
    assert res.returncode == 0 and res.stderr == "", res.stderr


@pytest.mark.slow  # the walkthrough's chunking, anchoring, BM25 retrieval and run: about 15 s
def test_after_anchor_a_case_its_spans_match_is_not_warned_of(tmp_path):
    """docs/compare-chunkings.md: the anchored golden set, retrieved from the window chunking. The case
    whose one label could not be anchored keeps it in 'relevant', beside the spans that match: its
    recall@5 is 0.67 and no warning says its ranking metrics are 0."""
    import subprocess

    chunking = ROOT / "examples" / "chunking"

    def python(*args):
        p = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr

    python(chunking / "chunk.py", chunking / "corpus", "--by", "heading",
           "--out", tmp_path / "headings.jsonl")
    python(chunking / "chunk.py", chunking / "corpus", "--size", "300", "--overlap", "100",
           "--out", tmp_path / "windows.jsonl")
    res = ragbridge_cli("anchor", chunking / "golden-by-chunk-id.jsonl", "--corpus", chunking / "corpus",
                        "--chunks", tmp_path / "headings.jsonl", "--out", tmp_path / "anchored.jsonl",
                        "--keep-unplaced")
    assert res.returncode == 0, res.stderr
    python(chunking / "retrieve.py", tmp_path / "anchored.jsonl", tmp_path / "windows.jsonl", "--k", "5",
           "--out", tmp_path / "bm25.jsonl")
    res = ragbridge_cli("run", tmp_path / "bm25.jsonl", "--out", tmp_path / "run", "--k", "5",
                        "--no-progress", "-m", "recall@5", "-m", "span_recall@5")
    assert res.returncode == 0, res.stderr
    assert "ranking metrics are 0" not in res.stderr and "warning" not in res.stderr, res.stderr
    scores = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    (recall,) = [s["value"] for s in scores if s["case_id"] == "group-cancel" and s["metric"] == "recall@5"]
    assert recall == pytest.approx(2 / 3)
