"""Diagnosis and the claim diagnostics, end to end on examples/diagnose (each case's true layer is
known by construction: ``metadata.true_layer``), judged by the stub judge through the CLI.

The claim diagnostics are checked against RAGChecker's computation: ``ragchecker`` cannot be
installed beside ragbridge (its dependency refchecker pulls torch, CUDA wheels, spaCy, transformers
and litellm), so `ragchecker_figures` restates the formulas of amazon-science/RAGChecker
``ragchecker/computation.py`` (v0.1.9: ``evaluate_precision`` ... ``evaluate_unfaithfulness``) in
NumPy, on the boolean matrices RAGChecker names answer2response, response2answer,
retrieved2response and retrieved2answer, including its 0 for empty inputs (but claim recall over an
empty claim x chunk matrix, where its code takes NumPy's mean of an empty row, NaN, is 0 here, as
ragbridge counts it).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, ragbridge_cli
from ragbridge import evaluate
from ragbridge.analysis.diagnose import LAYERS, diagnose
from ragbridge.analysis.thresholds import Thresholds
from ragbridge.rubric.diagnostics import DIAGNOSTICS, figure
from ragbridge.schema import Case, ClaimChecks

EXAMPLE = ROOT / "examples" / "diagnose"
GOLDEN = EXAMPLE / "golden.jsonl"
LABELS = EXAMPLE / "labels.jsonl"
METRICS = ["recall@5", "must_contain", "abstention", "faithfulness", "answer_correctness",
           "claim_diagnostics"]


def run_args(stub, out: Path, cache: Path, *extra: str) -> list:
    metric_args = [a for m in METRICS for a in ("--metric", m)]
    return ["run", GOLDEN, "--out", out, "--backend", "native", "--backend", "rubric", *metric_args,
            "--judge-model", "stub-judge", "--judge-base-url", stub.base_url, "--cache-path", cache,
            "--no-progress", *extra]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    from ragbridge.testing import StubJudge

    tmp = tmp_path_factory.mktemp("diagnose")
    with StubJudge() as stub:
        res = ragbridge_cli(*run_args(stub, tmp / "run", tmp / "cache.sqlite"))
        posts = len(stub.posts("/chat/completions"))
        assert res.returncode == 0, res.stderr
        yield tmp, tmp / "run", posts, stub


def golden() -> dict[str, dict]:
    return {c["id"]: c for c in map(json.loads, GOLDEN.read_text().splitlines())}


def scores_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "scores.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------------------------
# The diagnosis


def test_every_case_of_the_golden_set_gets_its_true_layer(judged):
    _, run, _, _ = judged
    res = ragbridge_cli("diagnose", run, "--labels", LABELS, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    cases = golden()
    got = {d["case_id"]: d["layer"] for d in doc["cases"]}
    assert {cid: got.get(cid, "pass") for cid in cases} == {
        cid: c["metadata"]["true_layer"] for cid, c in cases.items()}
    truth = [c["metadata"]["true_layer"] for c in cases.values()]
    assert doc["counts"] == {layer: truth.count(layer) for layer in LAYERS}
    assert doc["n_failing"] == len(got) and doc["n_cases"] == len(cases)
    for row in doc["by_tag"]:  # per tag: the same count from the cases carrying it
        tagged = [c for c in cases.values() if row["tag"] in c["tags"]]
        assert row["n_cases"] == len(tagged)
        for layer in LAYERS:
            assert row[layer] == sum(got.get(c["id"]) == layer for c in tagged), (row["tag"], layer)
    by_id = {d["case_id"]: d for d in doc["cases"]}
    # the evidence that decided each: the chunk outside the top k, the unsupported claim, the chunk
    # stating the wrong answer, the human label, the missing evidence named
    assert by_id["api-rate-limit"]["details"]["relevant_not_in_top_k"] == [
        {"label": "api.md#limits", "rank": 6}]
    assert by_id["sms-cost"]["decided_by"]["metric"] == "faithfulness"
    assert "free for the first 100 messages" in by_id["sms-cost"]["details"]["unsupported_claims"][0]["claim"]
    assert by_id["annual-refund-window"]["details"]["wrong_claims"][0]["stated_by"] == ["refunds.md#annual-1"]
    assert by_id["invoice-download"]["details"]["overruled"][0]["decided_by"]["source"] == "label"
    missing = by_id["quiet-hours"]["missing"]
    assert "recall@5 (native) undefined (no relevance labels)" in missing[0]
    assert "context_recall not scored in this run" in missing


def test_past_a_wrong_answer_the_claim_checks_name_the_claim_and_the_chunk(judged):
    """The layer of a faithful answer that is wrong follows the claim checks, and its reason names
    the claim and the chunk that decided it: the chunk the answer follows contradicts the reference
    (knowledge base); the right chunk holds the reference's claim and the answer restated another of
    its sentences (generation: claim_recall 1, context_utilization 0); a person labelled a paraphrase
    faithful that the judge finds in no chunk (the judge); an answer right by the reference whose
    grade counted its hedges (the judge); no reference, so nothing to hold the chunk against."""
    _, run, _, _ = judged
    res = ragbridge_cli("diagnose", run, "--labels", LABELS, "--json")
    by_id = {d["case_id"]: d for d in json.loads(res.stdout)["cases"]}
    kb = by_id["annual-refund-window"]
    assert (kb["layer"], kb["question"]) == ("knowledge_base", "correctness")
    assert ('"Annual plans can be refunded within 30 days of the charge." is stated by refunds.md#annual-1 '
            '(rank 1), which contradicts the reference\'s "Annual plans can be refunded within 14 days of '
            'the charge."') in kb["reason"]
    wrong_part = by_id["express-shipping-price"]
    assert (wrong_part["layer"], wrong_part["question"]) == ("generation", "correctness")
    assert ('"Express shipping costs 9.90 EUR and arrives the next business day." is stated by '
            'shipping.md#domestic-1 (rank 1); the answer states "Standard shipping within Germany costs '
            '4.90 EUR and arrives in 2 to 4 business days." from that chunk instead') in wrong_part["reason"]
    values = {s["metric"]: s["value"] for s in scores_of(run) if s["case_id"] == "express-shipping-price"}
    assert values["claim_recall"] == 1.0 and values["context_utilization"] == 0.0
    paraphrase = by_id["locker-night-pickup"]
    assert paraphrase["layer"] == "reference_or_judge" and paraphrase["decided_by"]["source"] == "label"
    assert paraphrase["reason"].startswith(
        'a human label disagrees with the judge: faithfulness (human label: pass), but the claim checks find '
        '"Yes, lockers never close')
    hedged = by_id["label-reprint"]
    assert hedged["layer"] == "reference_or_judge"
    assert hedged["details"]["claims"] == {"right_by_reference": True}
    assert "right by the reference" in hedged["reason"]
    assert "answer_correctness (rubric) 0.50" in hedged["reason"]
    no_reference = by_id["courier-pickup-slots"]
    assert (no_reference["layer"], no_reference["decided_by"]["metric"]) == ("undetermined", "must_contain")
    assert no_reference["missing"] == [
        "the case has no reference to hold the answer and the chunks against"]


def test_without_human_labels_the_evidence_decides_or_says_what_is_missing(judged):
    """A wrong reference the chunks neither state nor contradict is not sent to the knowledge base:
    the diagnosis says that the claim checks cannot tell, and that a human label would; the
    paraphrase nobody labelled is the generator's by the judge's verdicts."""
    _, run, _, _ = judged
    d = diagnose(run)
    got = {c.case_id: c for c in d.cases}
    for cid in ("invoice-download", "sso-plan"):
        assert got[cid].layer == "undetermined" and got[cid].question == "correctness"
        assert got[cid].missing[-1] == ("a human label on answer_correctness would say whether the answer or "
                                        "the reference is wrong")
        assert got[cid].missing[0].startswith("no retrieved chunk states or contradicts the reference's")
    assert got["locker-night-pickup"].layer == "generation"
    assert "(in no retrieved chunk)" in got["locker-night-pickup"].reason
    assert d.counts["knowledge_base"] == 3 and d.counts["reference_or_judge"] == 1


def test_without_claim_checks_a_wrong_answer_is_undetermined_naming_them(judged):
    """The same golden set scored without the claim diagnostics: a faithful, wrong answer could be
    the chunk's or the generator's; the diagnosis names the evidence to add instead of guessing."""
    tmp, _, _, stub = judged
    metrics = [a for m in METRICS if m != "claim_diagnostics" for a in ("--metric", m)]
    res = ragbridge_cli("run", GOLDEN, "--out", tmp / "no-claims", "--backend", "native", "--backend",
                        "rubric", *metrics, "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                        "--cache-path", tmp / "cache.sqlite", "--no-progress")
    assert res.returncode == 0, res.stderr
    d = diagnose(tmp / "no-claims", labels=LABELS)
    got = {c.case_id: c for c in d.cases}
    for cid in ("annual-refund-window", "label-void-window", "business-plan-price", "express-shipping-price",
                "label-reprint"):
        assert got[cid].layer == "undetermined", cid
        assert got[cid].missing == ["claim checks not scored in this run (--metric claim_diagnostics)"], cid
    assert d.counts["knowledge_base"] == 0
    # a human label against the judge's own faithfulness verdict is enough to doubt the judge
    assert got["locker-night-pickup"].layer == "reference_or_judge"
    assert "faithfulness (rubric) 0.00 < 1" in got["locker-night-pickup"].reason


def test_the_terminal_output_reads_at_80_columns(judged):
    _, run, _, _ = judged
    res = ragbridge_cli("diagnose", run, "--labels", LABELS, "--by-tag", env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    text = " ".join(" ".join(line.split()) for line in lines)
    assert "18 of 23 case(s) fail a metric" in text
    assert "api.md#limits (rank 6)" in text and "is stated by refunds.md#annual-1 (rank 1)" in text
    assert "answer_correctness (human label: pass) decides that the answer is correct" in text
    assert "│ real" in res.stdout  # the per-tag table fits


def test_bad_input_exits_2_and_names_it(judged, tmp_path):
    _, run, _, _ = judged
    res = ragbridge_cli("diagnose", run, "--labels", tmp_path / "labels.jsonl")
    assert res.returncode == 2 and "labels.jsonl: no such labels file" in res.stderr
    (tmp_path / "labels.jsonl").write_text('{"case_id": "x", "metric": "faithfulness", "label": "pass"}\n')
    res = ragbridge_cli("diagnose", run, "--labels", tmp_path / "labels.jsonl")
    assert res.returncode == 0 and "1 label(s) name a case that is not in this run" in res.stderr


def test_rules_on_a_native_run_noise_in_the_top_k_and_a_human_fail(tmp_path):
    chunks = [{"id": f"c{i}", "text": f"chunk {i}"} for i in range(5)]
    cases = [Case(id="noisy", question="q", answer="the answer", contexts=chunks, relevant={"c0": 1},
                  must_contain=["answer"], tags=["real"]),
             Case(id="labelled", question="q", answer="the answer", contexts=chunks, relevant={"c0": 1},
                  must_contain=["answer"], tags=["real"])]
    run = evaluate(cases, backends=["native"], metrics=["recall@5", "precision@5", "must_contain"],
                   out=tmp_path / "run")
    (tmp_path / "labels.jsonl").write_text(
        '{"case_id": "labelled", "metric": "faithfulness", "label": "fail"}\n')
    d = diagnose(run, Thresholds(by_metric={"precision@5": 0.5}), labels=tmp_path / "labels.jsonl")
    got = {c.case_id: c for c in d.cases}
    assert got["noisy"].layer == "retrieval" and got["noisy"].question is None
    assert got["noisy"].reason.endswith("precision@5 (native) 0.20 < 0.5 fails: 4 of the top 5 hold no "
                                        "relevant chunk")
    # a human fail answers the faithfulness question once retrieval passed: before the list's noise
    assert (got["labelled"].layer, got["labelled"].question) == ("generation", "faithfulness")
    assert got["labelled"].decided_by["source"] == "label"
    d = diagnose(run, labels=tmp_path / "labels.jsonl")  # at the default mark (1/5) precision passes
    assert [(c.case_id, c.layer) for c in d.cases] == [("labelled", "generation")]
    assert d.share("generation", "real") == 0.5 and d.share("retrieval") == 0.0


# --------------------------------------------------------------------------------------------
# The claim diagnostics: every value recomputed from the run folder, by RAGChecker's formulas


def ragchecker_figures(cc: dict) -> dict[str, float]:
    """RAGChecker's figures from one case's matrices (see the module docstring), 0 where it gives 0."""
    def m(x):
        return np.array([[v == "SUPPORTED" for v in row] for row in x] if x and isinstance(x[0], list)
                        else [v == "SUPPORTED" for v in (x or [])], dtype=bool)

    a2r, r2a = m(cc.get("answer_in_reference")), m(cc.get("reference_in_answer"))
    ret2resp, ret2ans = m(cc.get("answer_in_chunks")), m(cc.get("reference_in_chunks"))
    out = {}
    out["precision"] = float(a2r.mean()) if a2r.size else 0.0
    out["recall"] = float(r2a.mean()) if r2a.size else 0.0
    p, r = out["precision"], out["recall"]
    out["f1"] = 2 * p * r / (p + r) if p > 0 and r > 0 else 0.0
    if ret2ans.ndim == 2 and ret2ans.shape[0] and ret2ans.shape[1]:
        recalled = ret2ans.max(axis=1)
        out["claim_recall"] = float(recalled.mean())
        out["context_precision"] = float(ret2ans.max(axis=0).mean())
        out["context_utilization"] = (float((recalled & r2a).sum() / recalled.sum())
                                      if recalled.sum() else 0.0)
    else:
        out["claim_recall"] = out["context_precision"] = out["context_utilization"] = 0.0
    if a2r.size and ret2resp.ndim == 2 and ret2resp.shape[1] and ret2ans.ndim == 2 and ret2ans.shape[0]:
        relevant = ret2ans.max(axis=0, keepdims=True)
        rel = (relevant & ret2resp).max(axis=1)
        irr = (~relevant & ret2resp).max(axis=1) & ~rel
        out["noise_sensitivity_in_relevant"] = float((rel & ~a2r).mean())
        out["noise_sensitivity_in_irrelevant"] = float((irr & ~a2r).mean())
    else:
        out["noise_sensitivity_in_relevant"] = out["noise_sensitivity_in_irrelevant"] = 0.0
    if a2r.size and ret2resp.ndim == 2 and ret2resp.shape[1]:
        unfaithful = ~ret2resp.max(axis=1)
        out["hallucination"] = float((unfaithful & ~a2r).mean())
        out["self_knowledge"] = float((unfaithful & a2r).mean())
    else:
        out["hallucination"] = out["self_knowledge"] = 0.0
    return out


def defined(name: str, cc: dict) -> bool:
    """Where ragbridge gives a value rather than undefined: something to average (module docstring
    of ragbridge.rubric.diagnostics): claims, and for the figures RAGChecker takes as 0 on an empty
    claim x chunk matrix, a chunk."""
    a, r = cc.get("answer_claims") or [], cc.get("reference_claims") or []
    if cc.get("chunk_ids") == [] and name not in ("precision", "recall", "f1", "claim_recall"):
        return False
    if name in ("precision",):
        return bool(a)
    if name in ("recall", "claim_recall", "context_precision"):
        return bool(r)
    if name == "f1":
        return bool(a) and bool(r)
    if name == "context_utilization":
        return bool(r) and any("SUPPORTED" in row for row in cc["reference_in_chunks"])
    if name.startswith("noise"):
        return bool(a) and bool(r)
    return bool(a)


def test_every_claim_diagnostic_is_recomputed_from_the_run_folder(judged):
    _, run, _, _ = judged
    cases = golden()
    seen = {}
    for s in scores_of(run):
        if s["metric"] not in DIAGNOSTICS or s["error"]:
            continue
        d = DIAGNOSTICS[s["metric"]]
        if s["value"] is None and s["evidence"] is None:  # skipped: the case lacks an input
            assert s["reason"].startswith("skipped: case has no"), s
            continue
        cc = s["evidence"]["claim_checks"]
        assert cc["chunk_ids"] in (None, [c["id"] for c in cases[s["case_id"]]["contexts"]])
        raw = s["native_value"]["ragchecker_value"]
        assert s["native_metric"] == s["native_value"]["ragchecker_metric"] == d.ragchecker
        theirs = ragchecker_figures(cc)[d.ragchecker]
        if defined(d.ragchecker, cc):
            assert raw == pytest.approx(theirs, abs=1e-12), (s["case_id"], s["metric"])
            assert s["value"] == pytest.approx(1 - raw if d.inverted else raw, abs=1e-12)
        else:
            assert raw is None and s["value"] is None and theirs == 0.0, (s["case_id"], s["metric"])
        seen.setdefault(s["metric"], 0)
        seen[s["metric"]] += 1
    judged_cases = [c for c in cases.values() if c.get("reference") and c.get("answer")]
    assert seen == {m: len(judged_cases) for m in DIAGNOSTICS}
    # the golden set exercises the formulas: not every figure is 0 or 1
    hallucination = {s["case_id"]: s["native_value"]["ragchecker_value"] for s in scores_of(run)
                     if s["metric"] == "hallucination" and s["native_value"]}
    assert hallucination["password-reset-expiry"] == 1.0 and hallucination["refund-window-monthly"] == 0.0


def test_the_run_states_ragcheckers_own_mean_beside_its_mean(judged):
    """Where a figure is undefined here (nothing to average) RAGChecker counts 0, so the means differ:
    the run's --json and the report state RAGChecker's mean (its orientation, its 0s) beside the
    mean, recomputed here from each case's claim checks by RAGChecker's formulas."""
    tmp, _, _, stub = judged
    res = ragbridge_cli("run", GOLDEN, "--out", tmp / "rc", "--backend", "rubric", "--metric",
                        "claim_diagnostics", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                        "--cache-path", tmp / "cache.sqlite", "--no-progress", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["metric"]: r for r in json.loads(res.stdout)["summary"]}
    theirs: dict[str, list[float]] = {}
    for s in scores_of(tmp / "rc"):
        if s["evidence"] and s["evidence"].get("claim_checks"):  # a case RAGChecker's run holds
            name = DIAGNOSTICS[s["metric"]].ragchecker
            theirs.setdefault(s["metric"], []).append(ragchecker_figures(s["evidence"]["claim_checks"])[name])
    assert set(rows) == set(DIAGNOSTICS)
    differ = []
    for metric, row in rows.items():
        assert row["ragchecker_mean"] == pytest.approx(float(np.mean(theirs[metric])), abs=1e-12), metric
        assert row["n_ragchecker_zero"] == len(theirs[metric]) - row["n_scored"], metric
        if row["ragchecker_mean"] != pytest.approx(row["mean"]):
            differ.append(metric)
    # an answer with no claim, a reference claim in no chunk: the two means part
    assert {"context_utilization", "hallucination", "answer_claim_precision"} <= set(differ)
    assert rows["context_utilization"]["n_ragchecker_zero"] > 0
    md = ragbridge_cli("report", tmp / "rc", "--format", "md", "--out", "-", "--resamples", "0").stdout
    cu = rows["context_utilization"]
    line = next(ln for ln in md.splitlines() if ln.startswith("| context\\_utilization |"))
    assert (f"RAGChecker's mean {cu['ragchecker_mean']:.3f}, {cu['n_ragchecker_zero']} undefined case(s) "
            "counted as its 0") in line
    line = next(ln for ln in md.splitlines() if ln.startswith("| hallucination |"))
    assert f"RAGChecker's mean {rows['hallucination']['ragchecker_mean']:.3f} (its hallucination" in line


def test_ragcheckers_mean_counts_a_case_that_retrieved_nothing(tmp_path):
    """A case whose retriever returned nothing (``contexts: []``) is in a RAGChecker run, at 0 for every
    figure its code computes from the empty claim x chunk matrix: the run's claim checks check it (its
    claims against the other answer, none against a chunk), its chunk figures are undefined, and
    ``ragchecker_mean`` counts it as RAGChecker's 0. Its claim recall is 0: nothing retrieved holds
    the reference's claim."""
    from ragbridge.testing import StubJudge

    cases = [
        {"id": "no-contexts", "question": "What does the Pro plan cost?",
         "answer": "The Pro plan costs 10 EUR a month.", "contexts": [],
         "reference": "The Pro plan costs 8 EUR a month."},
        {"id": "one-context", "question": "What does the Pro plan cost?",
         "answer": "The Pro plan costs 10 EUR a month.",
         "contexts": [{"id": "misc-1", "text": "Quillpad was founded in Berlin."}],
         "reference": "The Pro plan costs 8 EUR a month."},
        {"id": "right", "question": "What does the Pro plan cost?", "answer": PRO,
         "contexts": [{"id": "plans.md#pro-1", "text": PRO}],
         "reference": "The Pro plan costs 8 EUR a month."},
    ]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    with StubJudge() as stub:
        res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--backend",
                            "rubric", "--metric", "claim_diagnostics", "--judge-model", "stub-judge",
                            "--judge-base-url", stub.base_url, "--cache-path", tmp_path / "cache.sqlite",
                            "--no-progress", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["metric"]: r for r in json.loads(res.stdout)["summary"]}
    scores = scores_of(tmp_path / "run")
    empty = {s["metric"]: s for s in scores if s["case_id"] == "no-contexts"}
    for metric, s in empty.items():  # checked: against no chunk where the metric reads the chunks
        assert s["evidence"] and s["evidence"]["claim_checks"], metric
        if {"answer_in_chunks", "reference_in_chunks"} & set(DIAGNOSTICS[metric].parts):
            assert s["evidence"]["claim_checks"]["chunk_ids"] == [], metric
    zero_by_emptiness = {"claim_context_precision", "context_utilization", "noise_sensitivity_relevant",
                         "noise_sensitivity_irrelevant", "hallucination", "self_knowledge"}
    for metric in zero_by_emptiness:
        assert empty[metric]["value"] is None and empty[metric]["reason"] == "no chunk was retrieved", metric
    assert empty["claim_recall"]["value"] == 0.0
    for metric, row in rows.items():  # RAGChecker's mean over the three cases, its 0 for the empty matrix
        name = DIAGNOSTICS[metric].ragchecker
        figures = [ragchecker_figures(s["evidence"]["claim_checks"])[name]
                   for s in scores if s["metric"] == metric]
        assert len(figures) == len(cases), metric
        assert row["ragchecker_mean"] == pytest.approx(float(np.mean(figures)), abs=1e-12), metric
        assert row["n_ragchecker_zero"] == len(cases) - row["n_scored"], metric
    assert rows["hallucination"]["ragchecker_mean"] == pytest.approx(1 / 3)  # one-context's 1, the others 0
    assert rows["hallucination"]["n_ragchecker_zero"] == 1


def test_a_case_that_retrieved_nothing_says_so(tmp_path):
    """An answerable question the retriever returned nothing for: with a relevance label, retrieval,
    naming the label not retrieved; with neither a label nor a reference, the empty list cannot say
    whether an article holds the answer, so the case is undetermined and says what is missing (not
    only "cannot tell whether a relevant chunk was in the top k"). The report says the same."""
    asked = {"question": "What does the Pro plan cost?", "answer": "The Pro plan costs 10 EUR.",
             "contexts": [], "must_contain": ["8 EUR"]}
    cases = [{"id": "labelled", **asked, "relevant": {"plans.md#pro": 1}}, {"id": "unlabelled", **asked}]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--backend", "native",
                        "-m", "recall@5", "-m", "must_contain", "--no-progress")
    assert res.returncode == 0, res.stderr
    res = ragbridge_cli("diagnose", tmp_path / "run", "--json")
    assert res.returncode == 0, res.stderr
    got = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}
    assert got["labelled"]["layer"] == "retrieval"
    assert got["labelled"]["reason"].endswith("not in the top 5: plans.md#pro (not retrieved)")
    d = got["unlabelled"]
    assert (d["layer"], d["question"], d["decided_by"]) == ("undetermined", "retrieval", None)
    assert d["missing"][0] == ("no chunk was retrieved, and nothing says whether an article holds the answer "
                               "(then retrieval missed it) or none does (then the knowledge base lacks it)")
    assert "recall@5 (native) undefined (no relevance labels; no chunk was retrieved)" in d["missing"]
    assert d["reason"] == "cannot tell whether a relevant chunk was in the top k: " + "; ".join(d["missing"])
    res = ragbridge_cli("report", tmp_path / "run", "--format", "json", "--out", "-", "--resamples", "0")
    assert res.returncode == 0, res.stderr
    assert {c["case_id"]: c["reason"] for c in json.loads(res.stdout)["diagnosis"]["cases"]} == {
        cid: c["reason"] for cid, c in got.items()}


def test_a_hit_of_zero_says_the_top_k_holds_nothing_relevant(tmp_path):
    """A relevant chunk at rank 7: recall@10 passes and hit@5 is 0. The top 5 holds no relevant chunk at
    all (not "part of what is relevant", as a span recall below its mark says)."""
    cases = [{"id": "late", "question": "Where is the refund policy?",
              "contexts": [{"id": f"kb/{i}"} for i in range(10)], "relevant": {"kb/6": 1}}]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--backend", "native",
                        "-m", "recall@10", "-m", "hit@5", "--no-progress")
    assert res.returncode == 0, res.stderr
    [case] = json.loads(ragbridge_cli("diagnose", tmp_path / "run", "--json").stdout)["cases"]
    assert case["layer"] == "retrieval"
    assert case["reason"].startswith("a relevant chunk is in the top 10 (recall@10), but hit@5 (native) 0.00 "
                                     "< 0.5 fails: the top 5 holds nothing relevant ("), case["reason"]
    assert "kb/6 (rank 7)" in case["reason"] and "part of" not in case["reason"]
    # its details, as a case decided at a question gives them: the label the top 5 misses, and the top 5
    assert case["details"] == {"relevant_not_in_top_k": [{"label": "kb/6", "rank": 7}],
                               "top_k": [f"kb/{i}" for i in range(5)]}


def test_a_case_whose_labels_are_all_grade_0_is_not_sent_to_the_retriever(tmp_path):
    """Labels that name no relevant chunk (every grade 0): hit@k and precision@k are 0 (trec's
    convention) but say nothing of the retriever, so the case is undetermined, saying to label it,
    not a retrieval failure; its failing metrics are still listed. The report says the same."""
    chunks = [{"id": "faq.md#1"}, {"id": "faq.md#2"}]
    cases = [{"id": "graded-0", "question": "Can I pause my plan?", "contexts": chunks,
              "relevant": {"faq.md#9": 0}},
             {"id": "graded-0-wrong", "question": "What does Pro cost?", "contexts": chunks,
              "relevant": {"faq.md#9": 0}, "answer": "10 EUR.", "must_contain": ["8 EUR"]},
             {"id": "missed", "question": "Can I cancel?", "contexts": chunks, "relevant": {"faq.md#7": 1}}]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--backend", "native",
                        "-m", "hit@5", "-m", "precision@5", "-m", "recall@5", "-m", "must_contain",
                        "--no-progress")
    assert res.returncode == 0, res.stderr
    res = ragbridge_cli("diagnose", tmp_path / "run", "--json")
    assert res.returncode == 0, res.stderr
    got = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}
    assert got["missed"]["layer"] == "retrieval"
    for cid in ("graded-0", "graded-0-wrong"):
        d = got[cid]
        assert (d["layer"], d["question"], d["decided_by"]) == ("undetermined", "retrieval", None), d
        assert d["missing"][0].startswith("its relevance labels name no relevant chunk (every grade is 0)")
        assert not [m for m in d["missing"] if m.startswith(("hit@", "recall@"))], d["missing"]
        assert "label the chunk that answers it" in d["reason"]
        assert {"hit@5", "precision@5"} <= {f["metric"] for f in d["failing"]}
    res = ragbridge_cli("report", tmp_path / "run", "--format", "json", "--out", "-", "--resamples", "0")
    assert res.returncode == 0, res.stderr
    assert {c["case_id"]: c["reason"] for c in json.loads(res.stdout)["diagnosis"]["cases"]} == {
        cid: c["reason"] for cid, c in got.items()}


def test_the_formulas_are_ragcheckers_on_random_claim_matrices():
    rng = random.Random(3)
    verdicts = ("SUPPORTED", "CONTRADICTED", "NOT_FOUND")
    n_defined = 0
    for _ in range(3000):
        na, nr, nk, p = rng.randint(0, 4), rng.randint(0, 4), rng.randint(0, 5), rng.random()

        def v():
            return "SUPPORTED" if rng.random() < p else rng.choice(verdicts[1:])

        cc = {"answer_claims": [f"a{i}" for i in range(na)], "reference_claims": [f"r{j}" for j in range(nr)],
              "chunk_ids": [f"c{k}" for k in range(nk)],
              "answer_in_chunks": [[v() for _ in range(nk)] for _ in range(na)],
              "reference_in_chunks": [[v() for _ in range(nk)] for _ in range(nr)],
              "answer_in_reference": [v() for _ in range(na)],
              "reference_in_answer": [v() for _ in range(nr)]}
        theirs = ragchecker_figures(cc)
        for d in DIAGNOSTICS.values():
            mine, reason = figure(d.ragchecker, ClaimChecks(**cc))
            assert reason
            if defined(d.ragchecker, cc):
                n_defined += 1
                assert mine == pytest.approx(theirs[d.ragchecker], abs=1e-12), (d.name, cc)
            else:
                assert mine is None and theirs[d.ragchecker] == 0.0, (d.name, cc)
    assert n_defined > 18000


# --------------------------------------------------------------------------------------------
# Judge calls: batched per chunk, planned by --dry-run, reused from the cache


def expected_calls(run: Path) -> int:
    """The claim checks' calls by their definition: per case two splits, one check of each side's
    claims against the other text, and one call per distinct chunk text when there is a claim."""
    cases = golden()
    total = 0
    for s in scores_of(run):
        if s["metric"] != "noise_sensitivity_relevant" or not s["evidence"]:
            continue  # this metric reads every part but reference_in_answer: counted below
        cc = s["evidence"]["claim_checks"]
        texts = {c["text"] for c in cases[s["case_id"]]["contexts"]}
        has_claims = bool(cc["answer_claims"] or cc["reference_claims"])
        total += 2 + bool(cc["answer_claims"]) + bool(cc["reference_claims"]) + len(texts) * has_claims
    return total


def test_dry_run_plans_exactly_the_calls_the_run_makes(judged, tmp_path):
    from ragbridge.testing import StubJudge

    with StubJudge() as stub:
        only = ["--metric", "claim_diagnostics"]
        args = ["run", GOLDEN, "--backend", "rubric", *only, "--judge-model", "stub-judge",
                "--judge-base-url", stub.base_url, "--cache-path", tmp_path / "c.sqlite", "--no-progress"]
        dry = ragbridge_cli(*args, "--out", tmp_path / "dry", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert stub.posts("/chat/completions") == [] and not (tmp_path / "dry").exists()
        res = ragbridge_cli(*args, "--out", tmp_path / "run", "--json")
        assert res.returncode == 0, res.stderr
        real = len(stub.posts("/chat/completions"))
    planned = json.loads(dry.stdout)
    assert planned["calls"] == real == expected_calls(tmp_path / "run")
    assert planned["cache_hits"] > 2 * real  # ten metrics, one set of calls


def test_a_rerun_on_the_same_judge_cache_calls_nothing(judged):
    tmp, run, posts, stub = judged
    stub.reset()
    res = ragbridge_cli(*run_args(stub, tmp / "again", tmp / "cache.sqlite", "--no-score-cache"))
    assert res.returncode == 0, res.stderr
    assert stub.posts("/chat/completions") == []
    first = {(s["case_id"], s["backend"], s["metric"]): (s["value"], s["evidence"]) for s in scores_of(run)}
    again = {(s["case_id"], s["backend"], s["metric"]): (s["value"], s["evidence"])
             for s in scores_of(tmp / "again")}
    assert again == first and posts > 0


# --------------------------------------------------------------------------------------------
# The report's section and the gate rule


def test_the_report_shows_the_diagnosis_the_command_gives(judged, tmp_path):
    from ragbridge.report.data import report_data
    from ragbridge.report.html import render_html
    from ragbridge.report.markdown import render_markdown

    _, run, _, _ = judged
    expected = diagnose(run, labels=LABELS)
    d = report_data(run, labels=LABELS, n_resamples=0)
    assert d["diagnosis"]["counts"] == expected.to_dict()["counts"]
    # the same reason, word for word, though the report reads the cases without their chunks: the
    # rank of a chunk outside the top k comes from the native score's own reason
    assert [(c["case_id"], c["layer"], c["reason"]) for c in d["diagnosis"]["cases"]] == [
        (c.case_id, c.layer, c.reason) for c in expected.cases]
    assert "not in the top 5: api.md#limits (rank 6)" in next(
        c["reason"] for c in d["diagnosis"]["cases"] if c["case_id"] == "api-rate-limit")
    page = render_html(run, data=d)
    assert '<section id="diagnosis">' in page and 'href="#case-api-rate-limit"' in page
    md = render_markdown(run, data=d)
    assert "| all | 23 | 18 | 4 | 5 | 3 | 4 | 2 |" in md


def test_the_report_names_a_few_cases_per_layer_and_counts_the_rest(judged, monkeypatch):
    """A large run's report stays small: each layer lists its first cases, then how many more."""
    from ragbridge.report import html, markdown
    from ragbridge.report.data import report_data

    _, run, _, _ = judged
    d = report_data(run, labels=LABELS, n_resamples=0)
    counts = d["diagnosis"]["counts"]
    monkeypatch.setattr(html, "DIAGNOSIS_LISTED", 2)
    monkeypatch.setattr(markdown, "DIAGNOSIS_LISTED", 2)
    page, md = html.render_html(run, data=d), markdown.render_markdown(run, data=d)
    for layer, n in counts.items():
        section = page.split(f"<summary>{layer} ({n})</summary>")[1].split("</details>")[0] if n else ""
        assert section.count("<li><a href=") == min(n, 2)
        assert (f"and {n - 2} more" in section) == (n > 2)
        rows = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.split(" | ")[1] == layer]
        assert len(rows) == min(n, 2) + (n > 2)


def test_a_report_places_every_failing_case_and_describes_the_cases_it_lists(judged):
    """``listed``: the report's diagnosis keeps the first cases of each layer whole, as the full
    diagnosis gives them, and places every other failing case in its layer, the counts the same; a
    case placed only is described as the full diagnosis describes it when it is asked for."""
    _, run, _, _ = judged
    full = diagnose(run, labels=LABELS)
    short = diagnose(run, labels=LABELS, listed=2)
    assert short.by_tag == full.by_tag and short.counts["n_failing"] == 18
    assert (short.layer_codes == full.layer_codes).all()
    first = {}
    for c in full.cases:
        first.setdefault(c.layer, []).append(c)
    assert [c.to_dict() for c in short.cases] == [c.to_dict() for c in full.cases
                                                  if first[c.layer].index(c) < 2]
    assert sum(min(len(v), 2) for v in first.values()) == len(short.cases) < len(full.cases)
    for layer in first:
        assert [c.case_id for c in short.in_layer(layer)] == [c.case_id for c in first[layer][:2]]
    assert short.to_dict()["counts"] == full.to_dict()["counts"]
    # a case placed only is described when asked for (a gate's cases behind a rule): as in full
    places = np.flatnonzero(full.layer_codes >= 0)
    for made in (short, diagnose(run, labels=LABELS, listed=0)):
        assert [c.to_dict() for c in made.of_cases(places[::-1])] == [c.to_dict() for c in full.cases][::-1]


def test_a_gate_rule_bounds_the_share_of_a_layer(judged, tmp_path):
    _, run, _, _ = judged
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "diagnosed(retrieval) <= 0.05"\ntags = ["real"]\n\n'
                     '[[gate]]\ncheck = "diagnosed(undetermined) <= 0.2"\n')
    res = ragbridge_cli("gate", run, "--config", gates, "--json", "--markdown", tmp_path / "gate.md")
    assert res.returncode == 1, res.stderr
    rows = json.loads(res.stdout)["results"]
    real = [c for c in golden().values() if "real" in c["tags"]]
    retrieval = sorted(c["id"] for c in real if c["metadata"]["true_layer"] == "retrieval")
    assert rows[0]["verdict"] == "fail" and rows[0]["n"] == len(real)
    assert rows[0]["figure"] == pytest.approx(len(retrieval) / len(real))
    assert sorted(c["case_id"] for c in rows[0]["cases_behind"]) == retrieval
    # the gate reads no human labels: the two wrong references are undetermined too
    undetermined = [c for c in diagnose(run).cases if c.layer == "undetermined"]
    assert len(undetermined) == 4
    assert rows[1]["verdict"] == "pass" and rows[1]["figure"] == pytest.approx(4 / len(golden()))
    assert "not in the top 5: plans.md\\#seats (not retrieved)" in (tmp_path / "gate.md").read_text()
    gates.write_text('[[gate]]\ncheck = "diagnosed(retreival) <= 0.05"\n')
    res = ragbridge_cli("gate", run, "--config", gates)
    assert res.returncode == 2 and "'retreival' is not a layer of the diagnosis" in res.stderr


# --------------------------------------------------------------------------------------------
# Span labels: the handbook corpus chunked by LangChain's splitter, BM25's top chunks, labels by quote

HANDBOOK = ROOT / "examples" / "chunking"
#: support answers as a person would label them: the passages that answer (quotes), the reference,
#: the bot's answer
SPAN_CASES = [
    {"id": "ebike-day-price", "question": "How much does an e-bike cost for a day?",
     "answer": "A city bike costs 4 euros an hour or 18 euros a day.",
     "reference": "An e-bike costs 35 euros a day.",
     "relevant_spans": [{"doc": "rentals.md", "quote": "an e-bike 8 euros an hour or 35 euros a day"}]},
    {"id": "stolen-bike-claim", "question": "What must I bring to the shop to claim a stolen bike?",
     "answer": "Bring back the key of the lock, and report the theft to the police within 24 hours.",
     "reference": "Report the theft to the police within 24 hours, bring back the key of the lock, and "
                  "give the police report number with the claim.",
     "relevant_spans": [{"doc": "insurance.md", "quote": "Bring back the key of the lock"},
                        {"doc": "insurance.md", "quote": "the police report number for a theft"},
                        {"doc": "insurance.md", "quote": "Report the theft to the police within 24 hours"}]},
]


@pytest.fixture(scope="module")
def span_run(tmp_path_factory):
    """The span cases with their top 5 chunks of a 300-character chunking, scored through the CLI."""
    splitters = pytest.importorskip("langchain_text_splitters")
    bm25_module = pytest.importorskip("rank_bm25")
    from ragbridge.testing import StubJudge

    def words(text):  # as examples/chunking/retrieve.py
        return re.findall(r"[a-z0-9]+", text.lower())

    tmp = tmp_path_factory.mktemp("spans")
    splitter = splitters.RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=0)
    chunks = [(p.name, i, text) for p in sorted((HANDBOOK / "corpus").glob("*.md"))
              for i, text in enumerate(splitter.split_text(p.read_text(encoding="utf-8")))]
    bm25 = bm25_module.BM25Okapi([words(t) for _, _, t in chunks])
    lines = []
    for case in SPAN_CASES:
        scores = bm25.get_scores(words(case["question"]))
        top = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[:5]
        contexts = [{"id": f"{chunks[i][0]}#{chunks[i][1]}", "text": chunks[i][2], "doc": chunks[i][0]}
                    for i in top]
        lines.append(json.dumps({**case, "contexts": contexts}))
    (tmp / "golden.jsonl").write_text("\n".join(lines) + "\n")
    with StubJudge() as stub:
        metrics = [a for m in ("recall@3", "span_recall@3", "faithfulness", "answer_correctness",
                               "claim_diagnostics") for a in ("--metric", m)]
        res = ragbridge_cli("run", tmp / "golden.jsonl", "--corpus", HANDBOOK / "corpus", "--out",
                            tmp / "run", "--k", "3", "--backend", "native", "--backend", "rubric", *metrics,
                            "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                            "--cache-path", tmp / "cache.sqlite", "--no-progress")
    assert res.returncode == 0, res.stderr
    return tmp / "run"


def test_span_labelled_cases_name_the_spans_missed_and_the_claim_that_decided(span_run):
    """A team wanting every labelled passage in the top 3: the case whose top 3 miss one of three
    labels is a retrieval failure naming that span (document, offsets, first words, characters held),
    not "no relevant chunk"; the answer restating the wrong sentence of the right chunk is the
    generator's, with the reference's claim and the chunk holding it named. The report says the same,
    from the scores' reasons (it reads no chunk texts)."""
    res = ragbridge_cli("diagnose", span_run, "--threshold", "recall@3=1", "--json")
    assert res.returncode == 0, res.stderr
    got = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}
    claim = got["stolen-bike-claim"]
    assert claim["layer"] == "retrieval" and claim["decided_by"]["value"] == pytest.approx(2 / 3)
    text = (HANDBOOK / "corpus" / "insurance.md").read_text(encoding="utf-8")
    found = re.search(r"the\s+police\s+report\s+number\s+for\s+a\s+theft", text)  # a line break in it
    start, end = found.span()
    where = f"insurance.md[{start}:{end}]"
    assert claim["reason"].startswith("the top 3 misses labelled text: recall@3 (native) 0.67 < 1")
    assert f'{where} "the police report number for a ..." (0 of {end - start} characters in the top 3' \
        in claim["reason"]
    assert "no relevant chunk" not in claim["reason"]
    assert [(m["doc"], m["start"], m["end"]) for m in claim["details"]["spans_missed"]] == [
        ("insurance.md", start, end)]
    price = got["ebike-day-price"]
    assert (price["layer"], price["question"]) == ("generation", "correctness")
    held = price["details"]["claims"]["omitted"][0]["chunks"]
    assert held and all("35 euros a day" in chunk_text(span_run, "ebike-day-price", c) for c in held)
    assert f'"An e-bike costs 35 euros a day." is stated by {held[0]} (rank ' in price["reason"]
    assert 'the answer states "A city bike costs 4 euros an hour or 18 euros a day." from that chunk' \
        in price["reason"]
    res = ragbridge_cli("report", span_run, "--threshold", "recall@3=1", "--format", "json", "--out", "-",
                        "--resamples", "0")
    assert res.returncode == 0, res.stderr
    assert {c["case_id"]: c["reason"] for c in json.loads(res.stdout)["diagnosis"]["cases"]} == {
        cid: c["reason"] for cid, c in got.items()}


def chunk_text(run: Path, case_id: str, chunk_id: str) -> str:
    cases = map(json.loads, (run / "cases.jsonl").read_text().splitlines())
    case = next(c for c in cases if c["id"] == case_id)
    return next(ch["text"] for ch in case["contexts"] if ch["id"] == chunk_id)


def test_the_walkthrough_quotes_what_diagnose_prints(judged):
    """docs/diagnose.md walks one case of each layer, quoting the evidence diagnose gives it: each
    quoted piece is in the command's output as printed (a pass mark the page gave as 0.5 was 1)."""
    import re

    _, run, _, _ = judged
    res = ragbridge_cli("diagnose", run, "--labels", LABELS, "--by-tag")
    assert res.returncode == 0, res.stderr
    printed = " ".join(res.stdout.split())
    page = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    walk = page.split("placed it. Walking one case of each:")[1].split("The `--json` document")[0]
    quoted = re.findall(r"^- `([\w-]+)`: \*(.*?)\*", walk, re.M | re.S)
    assert len(quoted) == 8
    for case_id, quote in quoted:
        for piece in filter(None, (p.strip(" ;,") for p in " ".join(quote.split()).split("..."))):
            assert piece in printed, (case_id, piece)


# --------------------------------------------------------------------------------------------
# Cases a person labels: a note-taking app's help bot, each case written for one rule (the answer,
# the chunks the retriever returned, the reference), judged by the rubric backend and the stub judge

def _person(cid: str, question: str, answer: str, chunks: list[tuple[str, str]], reference=None, **more):
    """A case as a person writes it: the chunks the retriever returned, each from the section its id
    names (``plans.md#pro-1`` from ``plans.md#pro``), labelled by its first chunk's section."""
    contexts = [{"id": i, "text": t, "source": i.rsplit("-", 1)[0]} for i, t in chunks]
    case = {"id": cid, "question": question, "answer": answer, "contexts": contexts, **more}
    if reference is not None:
        case["reference"] = reference
    if more.get("answerable", True):
        case["relevant"] = {contexts[-1 if cid == "stale-duplicate" else 0]["source"]: 1}
    return case


PRO = "The Pro plan costs 8 EUR a month."
DARK = "Dark mode can be turned on in Settings > Appearance."
FONT = "The editor font size can be set from 12 to 24 points in Settings > Editor."
PERSON_CASES = [
    _person("declined-with-ref", "Can I lock a notebook with a PIN?", "I don't know.",
            [("security.md#lock-1", "Notebooks can be locked with a 4-digit PIN on mobile.")],
            "Yes, with a 4-digit PIN on mobile."),
    _person("dup-chunks", "What does the Pro plan cost?", f"{PRO} It comes with priority support.",
            [("plans.md#pro-1", PRO), ("mirror/plans.md#pro-1", PRO),
             ("support.md#tiers-1", "Priority support comes with the Team plan.")], PRO),
    _person("dark-mode-stale", "Is there a dark mode?", f"Yes, {DARK[0].lower()}{DARK[1:]}",
            [("editor.md#appearance-1", DARK)], f"Yes, {DARK[0].lower()}{DARK[1:]}"),
    _person("enable-2fa", "How do I turn on two-factor authentication?",
            "Open your account settings, go to the security section and switch 2FA on there.",
            [("security.md#2fa-1", "Two-factor authentication can be enabled under Account > Security."),
             ("security.md#password-1", "Passwords must be at least 10 characters long.")],
            "Enable it under Account > Security."),
    _person("export-formats", "Which formats can I export a note to?",
            "You can export a note as PDF or Markdown from the note menu. Exports also include a full "
            "revision history file.",
            [("export.md#formats-1", "A note can be exported as PDF or Markdown from the note menu."),
             ("export.md#bulk-1", "Whole notebooks are exported as a ZIP archive of Markdown files.")],
            "A note can be exported as PDF or Markdown from the note menu."),
    _person("free-sync-two", "How many devices can I sync on the free plan?",
            "The free plan syncs across at most two devices.",
            [("sync.md#free-limit-1", "The free plan syncs across at most two devices.")],
            "The free plan syncs across at most two devices.", must_contain=["2 devices"]),
    _person("mixed-noise", "What are the plan prices?", f"{PRO} The Team plan costs 12 EUR a month.",
            [("plans.md#pro-1", f"{PRO} The Team plan costs 12 EUR a month."),
             ("old.md#team-1", "The Team plan costs 12 EUR a month.")],
            f"{PRO} The Team plan costs 15 EUR a month."),
    _person("stale-duplicate", "How many people can I share a notebook with?",
            "A shared notebook can have up to 10 collaborators.",
            [("faq-old.md#sharing-1", "A shared notebook can have up to 10 collaborators."),
             ("sharing.md#limits-1", "A shared notebook can have up to 25 collaborators.")],
            "A shared notebook can have up to 25 collaborators."),
    _person("font-size", "Can I change the editor font size?",
            "Yes, the font size can be set from 10 to 24 points in Settings > Editor.",
            [("editor.md#font-1", FONT)], FONT),
    _person("offline-mode", "Does Quillpad work offline?", "Yes, Quillpad works offline on the desktop app.",
            [("sync.md#offline-1", "Quillpad works offline on the desktop and mobile apps; changes sync when "
                                   "you reconnect.")], must_contain=["mobile"]),
    _person("linux-declined", "Does Quillpad have a Linux app?",
            "I couldn't find anything about a Linux app in the help centre.",
            [("apps.md#platforms-1", "Quillpad has apps for Windows, macOS, iOS and Android.")],
            answerable=False),
]
PERSON_METRICS = ["recall@5", "must_contain", "abstention", "faithfulness", "answer_correctness"]


@pytest.fixture(scope="module")
def person_runs(tmp_path_factory):
    """The cases scored with the claim checks, and without them (the same judge cache)."""
    from ragbridge.testing import StubJudge

    tmp = tmp_path_factory.mktemp("person")
    (tmp / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in PERSON_CASES), encoding="utf-8")
    runs = {}
    with StubJudge() as stub:
        for name, extra in (("claims", ["claim_diagnostics"]), ("no-claims", [])):
            metrics = [a for m in PERSON_METRICS + extra for a in ("--metric", m)]
            res = ragbridge_cli("run", tmp / "golden.jsonl", "--out", tmp / name, "--backend", "native",
                                "--backend", "rubric", *metrics, "--judge-model", "stub-judge",
                                "--judge-base-url", stub.base_url, "--cache-path", tmp / "cache.sqlite",
                                "--no-progress")
            assert res.returncode == 0, res.stderr
            runs[name] = tmp / name
    return tmp, runs


def diagnosed(tmp: Path, run: Path, *labels: tuple[str, str, str]) -> dict[str, dict]:
    """``ragbridge diagnose --json`` with the human labels ``(case, metric, label)`` as a person writes
    them (a JSONL file), by case."""
    args = []
    if labels:
        path = tmp / f"labels-{abs(hash(labels))}.jsonl"
        rows = [{"case_id": c, "metric": m, "label": v} for c, m, v in labels]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        args = ["--labels", path]
    res = ragbridge_cli("diagnose", run, *args, "--json")
    assert res.returncode == 0, res.stderr
    return {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}


def test_an_answerable_question_declined_with_the_answer_at_rank_1_is_the_generators(person_runs):
    """"I don't know." with the chunk stating the reference's claim at rank 1: the answer states no
    claim, so none is unsupported (not "cannot tell whether every claim is supported"), and the claim
    checks show the generator had the claim (rule 3d), with or without a person's fail."""
    tmp, runs = person_runs
    values = {s["metric"]: s["value"] for s in scores_of(runs["claims"])
              if s["case_id"] == "declined-with-ref" and s["backend"] == "rubric"}
    assert values["claim_recall"] == 1.0 and values["context_utilization"] == 0.0
    assert values["faithfulness"] is None  # the answer states no claim
    for labels in ((), (("declined-with-ref", "answer_correctness", "fail"),)):
        d = diagnosed(tmp, runs["claims"], *labels)["declined-with-ref"]
        assert (d["layer"], d["question"]) == ("generation", "correctness"), d["reason"]
        assert d["reason"].endswith('"Yes, with a 4-digit PIN on mobile." is stated by security.md#lock-1 '
                                    '(rank 1); the answer states no claim')
        assert d["details"]["claims"]["omitted"][0]["chunks"] == ["security.md#lock-1"]


def test_a_reason_asks_only_for_evidence_that_is_missing(person_runs):
    """Unlabelled, a wrong answer the claim checks cannot place asks for a person's label on
    correctness; with that label given (fail), it asks for what is still missing, the check of the
    chunk the wrong claim comes from, never for the label it has."""
    tmp, runs = person_runs
    unlabelled = diagnosed(tmp, runs["claims"])["dup-chunks"]
    assert unlabelled["layer"] == "undetermined"
    assert unlabelled["missing"][-1] == ("a human label on answer_correctness would say whether the answer "
                                         "or the reference is wrong")
    labelled = diagnosed(tmp, runs["claims"], ("dup-chunks", "answer_correctness", "fail"))["dup-chunks"]
    assert labelled["layer"] == "undetermined" and labelled["decided_by"]["source"] == "label"
    assert not any("answer_correctness" in m for m in labelled["missing"])
    assert "a human label on answer_correctness" not in labelled["reason"]
    assert labelled["missing"][-1] == ("whether support.md#tiers-1 is right: if not, the knowledge base is "
                                       "wrong; if it is, the generator misapplied it")
    # the chunk stating the reference's claim is named (rank 1, and its mirror at rank 2)
    assert ('the reference\'s "The Pro plan costs 8 EUR a month." is stated by plans.md#pro-1 (rank 1) and '
            'mirror/plans.md#pro-1 (rank 2)') in labelled["reason"]


def test_a_persons_fail_on_an_answer_the_judge_passes_points_to_the_reference(person_runs):
    """Every metric passes, the answer says what the reference says, and a person fails it (the setting
    moved): the reference is out of date, and so is the article the answer follows; the judge, which
    passed it, is not to blame."""
    tmp, runs = person_runs
    assert "dark-mode-stale" not in diagnosed(tmp, runs["claims"])  # every metric passes
    d = diagnosed(tmp, runs["claims"], ("dark-mode-stale", "answer_correctness", "fail"))["dark-mode-stale"]
    assert d["layer"] == "reference_or_judge" and d["decided_by"]["source"] == "label"
    assert "check the judge" not in d["reason"]
    assert d["reason"].endswith("answer_correctness (human label: fail); answer_correctness (rubric) 1.00 "
                                ">= 1: the reference is wrong or out of date: check it, and "
                                "editor.md#appearance-1 (rank 1), which the answer follows and which states "
                                "the same")


def test_human_labels_keep_the_evidence_and_are_named(person_runs):
    """A person's pass on correctness beside the judge's fail on faithfulness is named, with the label
    that would settle it; a person's fail on faithfulness keeps the invented claim the judge found; a
    person's pass on faithfulness that overrules the judge names what the judge found."""
    tmp, runs = person_runs
    run = runs["claims"]
    paraphrase = '"Open your account settings, go to the security section and switch 2FA on there."'
    d = diagnosed(tmp, run, ("enable-2fa", "answer_correctness", "pass"))["enable-2fa"]
    assert (d["layer"], d["question"]) == ("generation", "faithfulness")
    assert f"unsupported: {paraphrase} (in no retrieved chunk)" in d["reason"]
    assert d["reason"].endswith("answer_correctness (human label: pass) says the answer is correct: a human "
                                "label on faithfulness would say whether the chunks state it in other words")
    d = diagnosed(tmp, run, ("export-formats", "faithfulness", "fail"))["export-formats"]
    assert (d["layer"], d["decided_by"]["source"]) == ("generation", "label")
    assert d["reason"] == ("the answer makes claims the chunks do not support: faithfulness (human label: "
                           'fail); faithfulness (rubric) 0.50 < 1; unsupported: "Exports also include a full '
                           'revision history file." (in no retrieved chunk)')
    assert d["details"]["unsupported_claims"][0]["in_no_chunk"] is True
    d = diagnosed(tmp, run, ("enable-2fa", "faithfulness", "pass"),
                  ("enable-2fa", "answer_correctness", "pass"))["enable-2fa"]
    assert d["layer"] == "reference_or_judge"
    assert d["reason"].startswith(f"faithfulness (rubric) 0.00 < 1 fails (it finds {paraphrase} in no "
                                  "retrieved chunk), but faithfulness (human label: pass) decides")


def test_decided_by_is_the_evidence_that_decided(person_runs):
    """Where a human label (or a question's evidence) overrules a failing score, decided_by is the
    label (or that evidence), never the overruled score, which details.overruled lists."""
    tmp, runs = person_runs
    got = diagnosed(tmp, runs["claims"], ("enable-2fa", "faithfulness", "pass"),
                    ("enable-2fa", "answer_correctness", "pass"))
    label = got["enable-2fa"]["decided_by"]
    assert (label["metric"], label["source"], label["passed"]) == ("faithfulness", "label", True)
    judge = got["free-sync-two"]["decided_by"]  # the judge's correctness overrules must_contain's "2 devices"
    assert (judge["metric"], judge["backend"], judge["passed"]) == ("answer_correctness", "rubric", True)
    overruled = [c for c in got.values() if c["details"].get("overruled")]
    assert len(overruled) >= 3
    for c in overruled:
        assert c["decided_by"] == c["details"]["overruled"][0]["decided_by"], c["case_id"]
        assert c["decided_by"] not in c["failing"], c["case_id"]


def test_the_chunks_behind_a_verdict_are_named(person_runs):
    """Both chunks stating the wrong figure, the top-ranked first, and the reference's claim they
    contradict; the chunk that states the reference's claim; a claim a chunk contradicts said so; no
    reference asked for, not the claim checks; an unanswerable case's judge, not its reference."""
    tmp, runs = person_runs
    got = diagnosed(tmp, runs["claims"])
    assert got["mixed-noise"]["layer"] == "knowledge_base"
    assert ('"The Team plan costs 12 EUR a month." is stated by plans.md#pro-1 (rank 1) and old.md#team-1 '
            '(rank 2), which contradict the reference\'s "The Team plan costs 15 EUR a month."'
            ) in got["mixed-noise"]["reason"]
    stale = got["stale-duplicate"]
    assert stale["layer"] == "knowledge_base"
    assert stale["reason"].endswith("is stated by faq-old.md#sharing-1 (rank 1), which contradicts the "
                                    'reference\'s "A shared notebook can have up to 25 collaborators."; '
                                    "sharing.md#limits-1 (rank 2) states the reference's claim")
    font = got["font-size"]
    assert (font["layer"], font["question"]) == ("generation", "faithfulness")
    assert font["reason"].endswith('"Yes, the font size can be set from 10 to 24 points in Settings > '
                                   'Editor." (contradicted by editor.md#font-1 (rank 1))')
    assert "in no retrieved chunk" not in font["reason"]
    assert font["details"]["unsupported_claims"][0]["contradicted_by"] == "editor.md#font-1"
    declined = got["linux-declined"]
    assert declined["layer"] == "reference_or_judge"
    assert declined["reason"].endswith("decides that the system declined a question it cannot answer: "
                                       "check the judge")
    for run in runs.values():
        offline = diagnosed(tmp, run)["offline-mode"]
        assert offline["layer"] == "undetermined"
        assert offline["missing"] == ["the case has no reference to hold the answer and the chunks against"]


def test_a_retrieval_metric_failing_once_recall_passes_says_what_the_top_k_miss(tmp_path):
    """examples/chunking's golden set, its handbook split by LangChain's splitter into chunks of up to
    800 characters, BM25's top 5: where recall@5 passes its mark (0.5) with labels
    missed, the failing metric's reason names each span missed, not "noise"; a failing mrr gives the
    rank of the first relevant chunk; "noise" only where a chunk matching no label ranks above one
    that finds a label. Checked against the span rule on sets of character offsets (LangChain's own
    start index, the quotes found in the text). The report says the same, reading no chunk."""
    splitters = pytest.importorskip("langchain_text_splitters")
    bm25_module = pytest.importorskip("rank_bm25")
    docs = {p.name: p.read_text(encoding="utf-8") for p in sorted((HANDBOOK / "corpus").glob("*.md"))}
    splitter = splitters.RecursiveCharacterTextSplitter(chunk_size=800, chunk_overlap=0, add_start_index=True)
    chunks = []  # (doc, start, end, text)
    for name, text in docs.items():
        for d in splitter.create_documents([text]):
            start = d.metadata["start_index"]
            chunks.append((name, start, start + len(d.page_content), d.page_content))
    bm25 = bm25_module.BM25Okapi([re.findall(r"[a-z0-9]+", c[3].lower()) for c in chunks])
    golden = [json.loads(line) for line in (HANDBOOK / "golden.jsonl").read_text().splitlines()]
    top_of, lines = {}, []
    for g in golden:
        scores = bm25.get_scores(re.findall(r"[a-z0-9]+", g["question"].lower()))
        top = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))[:5]
        top_of[g["id"]] = [chunks[i][:3] for i in top]
        contexts = [{"id": f"{chunks[i][0]}#{i}", "text": chunks[i][3], "doc": chunks[i][0]} for i in top]
        lines.append(json.dumps({**g, "contexts": contexts}))
    (tmp_path / "golden.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics = [a for m in ("recall@5", "mrr", "ndcg@5", "map") for a in ("-m", m)]
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--corpus", HANDBOOK / "corpus", "--out",
                        tmp_path / "run", "--k", "5", *metrics, "--no-progress")
    assert res.returncode == 0, res.stderr
    res = ragbridge_cli("diagnose", tmp_path / "run", "--json")
    assert res.returncode == 0, res.stderr
    got = {c["case_id"]: c for c in json.loads(res.stdout)["cases"]}

    def matches(chunk, label):
        (cd, cs, ce), (ld, ls, le) = chunk, label
        shared = len(set(range(cs, ce)) & set(range(ls, le))) if cd == ld else 0
        return shared >= 1 and shared >= 0.5 * min(ce - cs, le - ls)

    seen = {"missed": 0, "noise": 0, "rank": 0}
    for g in golden:
        d = got.get(g["id"])
        if d is None or d["layer"] != "retrieval" or d["question"] is not None:
            continue  # not a retrieval failure past the first question
        top = top_of[g["id"]]
        labels = []
        for span in g["relevant_spans"]:
            found = re.search(r"\s+".join(map(re.escape, span["quote"].split())), docs[span["doc"]])
            labels.append((span["doc"], found.start(), found.end()))
        assert "the top k holds noise" not in d["reason"]
        missed = [lab for lab in labels if not any(matches(c, lab) for c in top)]
        for doc, start, end in missed:  # every span missed is named
            assert f"{doc}[{start}:{end}]" in d["reason"], (g["id"], d["reason"])
            seen["missed"] += 1
        finding = [r for r, c in enumerate(top, 1) if any(matches(c, lab) for lab in labels)]
        if d["decided_by"]["metric"] == "mrr":
            assert f"the first relevant chunk is at rank {finding[0]}" in d["reason"], d["reason"]
            seen["rank"] += 1
        if "noise" in d["reason"]:  # a chunk matching no label above the last chunk that finds one
            assert any(r not in finding for r in range(1, max(finding))), (g["id"], d["reason"])
            seen["noise"] += 1
    assert all(seen.values()), seen  # the chunking exercises each kind
    res = ragbridge_cli("report", tmp_path / "run", "--format", "json", "--out", "-", "--resamples", "0")
    assert {c["case_id"]: c["reason"] for c in json.loads(res.stdout)["diagnosis"]["cases"]} == {
        cid: c["reason"] for cid, c in got.items()}


def test_an_unanswerable_case_that_declined_is_not_said_retrieved_faithful_and_correct(tmp_path):
    """An unanswerable case is asked only whether it declined: a failing answer check beside it is
    said after that, not after "retrieved, faithful and correct", which nothing measured (no relevance
    labels, no faithfulness score that passes)."""
    case = Case(id="unanswerable-app", question="Is there an app for the store?",
                answer="I don't know: the documentation does not say.", answerable=False,
                must_contain=["app store"], contexts=[{"id": "c0", "text": "Refunds take 14 days."}])
    run = evaluate([case], backends=["native"], metrics=["abstention", "must_contain", "recall@5"],
                   out=tmp_path / "run")
    (d,) = diagnose(run).cases
    assert d.layer == "generation"
    assert d.reason.startswith("declined a question it cannot answer, but must_contain (native)"), d.reason
    assert "retrieved" not in d.reason and "faithful" not in d.reason


def test_the_command_lists_as_many_cases_per_layer_as_the_report_and_says_a_missing_metric_once(tmp_path):
    """``diagnose`` of a large run lists the report's number of failing cases per layer, then how many
    more there are and how to see them; a metric the run did not score is named once, not per case; no
    line ends in spaces (a table's title neither)."""
    from ragbridge.analysis.diagnose import DIAGNOSIS_LISTED
    from ragbridge.report import data, html, markdown

    assert html.DIAGNOSIS_LISTED is markdown.DIAGNOSIS_LISTED is data.DIAGNOSIS_LISTED is DIAGNOSIS_LISTED
    rows = [{"id": f"q{q:03d}", "question": f"question {q}", "contexts": [{"id": f"d{q}"}, {"id": "x"}],
             # the first 60 find no relevant chunk (retrieval); the last 5 have none judged relevant
             # (undetermined: precision fails, recall is undefined)
             "relevant": {f"r{q}": 1} if q < 60 else {f"d{q}": 0} if q >= 65 else {f"d{q}": 1}}
            for q in range(70)]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "recall@10", "-m", "precision@10",
                        "--no-progress")
    assert res.returncode == 0, res.stderr
    res = ragbridge_cli("diagnose", tmp_path / "run")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"retrieval (60, the first {DIAGNOSIS_LISTED})" in out and "undetermined (5)" in out
    assert "Layers" in out and not [ln for ln in out.splitlines() if ln.endswith(" ")]  # a CI log's lines
    listed = [ln.split(":")[0].strip() for ln in out.splitlines() if re.match(r"  q\d{3}:", ln)]
    assert listed == [f"q{q:03d}" for q in [*range(DIAGNOSIS_LISTED), *range(65, 70)]]
    assert f"{60 - DIAGNOSIS_LISTED} more failing case(s) not listed: --all" in " ".join(out.split())
    assert " ".join(out.split()).lower().count("not scored in this run") == 1 and "context_recall" in out
    every = ragbridge_cli("diagnose", tmp_path / "run", "--all").stdout
    assert len([ln for ln in every.splitlines() if re.match(r"  q\d{3}:", ln)]) == 65
    assert "more failing case" not in every
    three = ragbridge_cli("diagnose", tmp_path / "run", "--top", "3").stdout
    assert len([ln for ln in three.splitlines() if re.match(r"  q\d{3}:", ln)]) == 6
    none = ragbridge_cli("diagnose", tmp_path / "run", "--top", "0").stdout  # the counts alone
    assert "the first 0" not in none and re.search(r"retrieval\W+60\W", none)  # its row of the table
    assert not re.search(r"^(retrieval|undetermined) \(", none, re.M)
    assert "65 more failing case(s) not listed" in " ".join(none.split())
    # the JSON keeps every case and its reasons as they are
    cases = json.loads(ragbridge_cli("diagnose", tmp_path / "run", "--json").stdout)["cases"]
    assert len(cases) == 65 and "context_recall not scored in this run" in cases[-1]["reason"]


# --------------------------------------------------------------------------------------------
# Large runs: cases read as their chunk ids, and every case's JSON kept as its text


def test_a_case_read_as_its_chunk_ids_is_diagnosed_as_the_case_itself(tmp_path, monkeypatch):
    """The cases a run holds as chunk ids (read back without a chunk object each) get the details the
    same cases read as `Case` objects get, chunk by chunk: the first rank of each relevant label, a
    label found past the cut-off or not at all, a grade-0 label ignored, and a label that names a
    chunk's source (a case whose chunks carry one is read as chunks)."""
    from ragbridge.run import columns

    rng = random.Random(7)
    cases = []
    for q in range(60):
        ids = [f"d{j}" for j in rng.sample(range(40), 12)]
        relevant = {f"d{j}": rng.choice([0, 1, 2, 3]) for j in rng.sample(range(40), 5)}
        if q % 3 == 0:  # chunks with a source each, labelled by source
            contexts = [{"id": d, "text": f"text of {d}", "source": f"doc{j % 4}"} for j, d in enumerate(ids)]
            relevant[f"doc{q % 5}"] = 1
        else:
            contexts = [{"id": d} if q % 2 else {"id": d, "text": f"text of {d}"} for d in ids]
        cases.append(Case(id=f"q{q}", question=f"question {q}", contexts=contexts, relevant=relevant,
                          tags=["sourced" if q % 3 == 0 else "ids"]))
    run = evaluate(cases, backends=["native"], metrics=["recall@5", "hit@5", "mrr", "ndcg@5"],
                   out=tmp_path / "run")
    views = diagnose(run)
    read = run.columns.cases.views(range(len(cases)))
    assert sum(v.chunk_ids is not None for v in read) == 40  # the cases without sources: as ids
    monkeypatch.setattr(columns.CaseIndex, "views", columns.CaseIndex.cases)  # every case a `Case`
    objects = diagnose(evaluate(cases, backends=["native"], metrics=["recall@5", "hit@5", "mrr", "ndcg@5"],
                                out=tmp_path / "again"))
    got, expected = [c.to_dict() for c in views.cases], [c.to_dict() for c in objects.cases]
    assert got == expected
    details = [c["details"] for c in got if c["layer"] == "retrieval" and c["question"] == "retrieval"]
    assert sum("relevant_not_in_top_k" in d for d in details) > 20
    assert any(m["rank"] is not None for d in details for m in d.get("relevant_not_in_top_k", []))
    by_id = {c.id: c for c in cases}
    for c in got:  # independently: each relevant label's first place in the list, by id or source
        case = by_id[c["case_id"]]
        if c["question"] != "retrieval" or c["layer"] != "retrieval":
            continue
        first = {}
        for i, ch in enumerate(case.contexts, 1):
            label = ch.id if case.relevant.get(ch.id, 0) >= 1 else ch.source
            if case.relevant.get(label, 0) >= 1:
                first.setdefault(label, i)
        assert c["details"].get("relevant_not_in_top_k", []) == [
            {"label": label, "rank": first.get(label)} for label, g in case.relevant.items()
            if g >= 1 and first.get(label, 6) > 5]
        assert c["details"]["top_k"] == [ch.id for ch in case.contexts[:5]]


def test_the_json_of_every_case_kept_as_text_is_print_jsons(judged):
    """``diagnose --json`` writes each case from the JSON text the diagnosis kept it as: the same
    characters as `print_json` of the diagnosis made of objects, on the judged run's every layer."""
    import io

    from ragbridge.commands.diagnose import print_diagnosis_json
    from ragbridge.commands.output import print_json

    _, run, _, _ = judged
    as_objects = diagnose(run, labels=LABELS)
    as_text = diagnose(run, labels=LABELS, as_text=True)
    assert {c.layer for c in as_objects.cases} >= {"retrieval", "generation", "knowledge_base",
                                                    "reference_or_judge", "undetermined"}
    expected = io.StringIO()
    print_json(as_objects.to_dict(), file=expected)
    for d in (as_text, as_objects):  # the cases' texts, and objects written one by one
        got = io.StringIO()
        print_diagnosis_json(d, file=got)
        assert got.getvalue() == expected.getvalue()
    assert all(type(t) is str for t in as_text.case_texts())
    # read back from their texts, the cases are the same values
    assert [c.to_dict() for c in as_text.cases] == [c.to_dict() for c in as_objects.cases]
    res = ragbridge_cli("diagnose", run, "--labels", LABELS, "--json")
    assert res.returncode == 0 and res.stdout == expected.getvalue()
    none = diagnose(run, Thresholds(default=0.0), as_text=True)  # every score passes: no case listed
    assert none.counts["n_failing"] == 0
    expected, got = io.StringIO(), io.StringIO()
    print_json(none.to_dict(), file=expected)
    print_diagnosis_json(none, file=got)
    assert got.getvalue() == expected.getvalue() and '"cases": []' in got.getvalue()


def test_plain_json_writes_what_json_dumps_writes_and_refuses_what_would_not_read_back():
    """`plain_json` at any level is ``json.dumps(indent=2, ensure_ascii=False)`` indented in place, and
    `plain_json_utf8` (one C call where the package is built with it) its UTF-8 bytes; whatever would
    not read back as it was (a NaN, a tuple, a NumPy number, a key that is not a string) is refused by
    both, and the spool keeps such a record pickled."""
    from ragbridge.analysis.rows import Spool, plain_json
    from ragbridge.json_text import plain_json_utf8

    rng = random.Random(3)
    words = ["", "plain", "é ü 中文", "quote \" and \\ back", "line\nbreak\ttab", "\x1b[31m", "\u202e"]

    def value(depth: int):
        kind = rng.randrange(8 if depth < 4 else 5)
        if kind == 0:
            return rng.choice(words)
        if kind == 1:
            return rng.choice([0, -3, 10**20, True, False, None])
        if kind == 2:
            return rng.choice([0.0, -0.0, 0.1, 1e-300, 2.5e300, 1 / 3])
        if kind in (3, 4):
            return rng.choice(words)
        if kind in (5, 6):
            return {rng.choice(words) + str(i): value(depth + 1) for i in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(5))]

    for _ in range(300):
        o = {"a": value(0), "b": [value(0) for _ in range(3)]}
        level = rng.randrange(4)
        assert plain_json(o, level) == json.dumps(o, indent=2, ensure_ascii=False).replace(
            "\n", "\n" + "  " * level)
        assert plain_json_utf8(o) == json.dumps(o, indent=2, ensure_ascii=False).encode("utf-8")
        assert plain_json_utf8(o["b"]) == json.dumps(o["b"], indent=2, ensure_ascii=False).encode("utf-8")
    rows = [{"metric": m, "value": v, "reason": r} for m in ("a", "},\u0001{", "{") for v in (0.5, None, 2)
            for r in ("}", "x},", "", "\x01,\x01")]  # a list of dicts of plain values: one encoder call
    for level in range(3):
        for o in (rows, {"failing": rows, "more": [{"k": "}"}]}, [rows[:1], {"k": []}]):
            assert plain_json(o, level) == json.dumps(o, indent=2, ensure_ascii=False).replace(
                "\n", "\n" + "  " * level)
    for bad in ({"x": float("nan")}, [1, (2, 3)], {"x": np.float64(0.5)}, {1: "a"}, [float("inf")],
                [{"x": 1}, {2: 1}], [{"x": np.int64(1)}], [{"x": float("nan")}],
                {"x": [np.int64(1)]}):
        with pytest.raises((TypeError, ValueError)):
            plain_json(bad)
        with pytest.raises((TypeError, ValueError)):
            plain_json_utf8(bad)
    with pytest.raises(UnicodeEncodeError):
        plain_json_utf8({"x": ["\ud800"]})
    spool = Spool(lambda r: r, lambda r: r)
    records = [{"x": 1.5, "y": ["a"]}, {"x": np.float64(0.5)}, [1, (2, 3)], {"x": "\ud800"}, {"z": None}]
    for r in records:
        spool.add(r)
    back = list(spool.rows())
    assert back == records and type(back[1]["x"]) is np.float64 and back[2][1] == (2, 3)
    assert [type(t) is str for t in spool.texts()] == [True, False, False, False, True]
