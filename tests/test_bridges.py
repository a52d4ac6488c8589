"""Exports in the libraries' own hands: what each library's loader, re-save and deterministic
metrics make of a file ragbridge wrote, and what ragbridge makes of the library's own files.

TruLens: its ground-truth IR metrics (``GroundTruthAgreement.recall_at_k``, ``precision_at_k``,
``ndcg_at_k``, ``mrr``, ``ir_hit_rate``) on the export of the bundled example, loaded the way
docs/formats.md says (pandas or pyarrow, ``TruSession.add_ground_truth_to_dataset``, then
``get_ground_truth``), equal native recall, nDCG, MRR and hit case by case at every depth; precision
differs exactly as documented. TruLens's own expected chunks read back as labels. DeepEval and RAGAS:
their own files, loaders and writers.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ragbridge  # noqa: F401  (privacy defaults before the libraries are imported)
from conftest import EXAMPLE, ragbridge_cli, warnings_in
from ragbridge.formats import load_cases, write_cases
from ragbridge.native.ranking import evaluate as rank
from ragbridge.schema import Case

DEPTHS = (1, 3, 5, None)  # None: TruLens's default, the whole list


def _child(script: str, *args, cwd: Path) -> str:
    """Run TruLens in a child process: a TruSession is process-wide, and importing TruLens patches
    threading for the process."""
    res = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                         cwd=cwd, env={**os.environ, "TRULENS_OTEL_TRACING": "0", "HOME": str(cwd)},
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.splitlines()[-1]


#: the recipes of docs/formats.md, then TruLens's own loader and its ground-truth IR metrics
_TRULENS_SCORES = r'''
import json, math, sys
import pandas as pd
import pyarrow.parquet as pq
from trulens.core.session import TruSession
from trulens.feedback import GroundTruthAgreement
from trulens.providers.openai import OpenAI

from trulens.core.schema.groundtruth import GroundTruth

out = {"native_rows": []}
for q, ctx, expected in [  # a table in TruLens's own schema: GroundTruth rows plus the app's contexts
        ("Refund window?", ["Refunds within 14 days.", "Shipping takes 3 days."],
         [{"text": "Refunds within 14 days.", "expect_score": 2}, {"text": "Annual plans: 30 days."}]),
        ("Shipping time?", ["Shipping takes 3 days.", "Refunds within 14 days."],
         [{"text": "Shipping takes 3 days.", "expect_score": 0.5, "title": "shipping"}]),
        ("Unlabelled?", ["Refunds within 14 days."], None)]:
    row = json.loads(GroundTruth(dataset_id="d", query=q, expected_chunks=expected).model_dump_json())
    out["native_rows"].append({k: row[k] for k in ("query", "expected_chunks") if row[k] is not None}
                              | {"contexts": ctx})
session = TruSession(database_url="sqlite:///:memory:")
for i, path in enumerate(sys.argv[1:]):
    if path.endswith(".parquet"):
        frame = pd.DataFrame(pq.read_table(path).to_pylist())  # meta a struct, as TruLens's tables
    else:
        frame = pd.read_json(path, lines=True, dtype=False, precise_float=True)
    frame = frame.astype(object).where(frame.notna(), None)
    session.add_ground_truth_to_dataset(f"golden{i}", frame, {})
    truth = session.get_ground_truth(f"golden{i}")
    provider = OpenAI(model_engine="none", api_key="unused", base_url="http://127.0.0.1:9/v1")
    gta = GroundTruthAgreement(truth, provider=provider)
    nan = lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v
    rows = []
    for row in frame.to_dict("records"):
        q, ctx = row["query"], row.get("contexts") or []
        rows.append({"query_id": row["query_id"], "mrr": nan(gta.mrr(q, ctx)), **{
            f"{name}@{k}": nan(getattr(gta, fn)(q, ctx, k=k)) for k in (1, 3, 5, None)
            for name, fn in (("recall", "recall_at_k"), ("precision", "precision_at_k"),
                             ("ndcg", "ndcg_at_k"), ("hit", "ir_hit_rate"))}})
    back = truth.astype(object).where(truth.notna(), None).to_dict("records")
    out[path] = {"scores": rows, "truth": [{k: r[k] for k in ("query_id", "query", "expected_response",
                                                              "expected_chunks", "meta")} for r in back]}
print(json.dumps(out))
'''


def _native(case: Case, name: str, k) -> float:
    n = max(1, len(case.contexts))
    metric = "mrr" if name == "mrr" else f"{name}@{k or n}"
    value = float(rank([case], [metric])[metric][0])
    return None if math.isnan(value) else value


def _trulens_precision(case: Case, row: dict, k) -> float:
    """TruLens's precision as docs/formats.md states it: the retrieved texts in the top k (by list
    position, repeats included) that are expected chunks, over the number of chunks in the top k."""
    top = [c.text for c in case.contexts][:k] if k else [c.text for c in case.contexts]
    expected = {c["text"] for c in row["expected_chunks"]}
    return sum(t in expected for t in top) / len(top) if top and expected else None


@pytest.fixture(scope="module")
def trulens_example(tmp_path_factory):
    pytest.importorskip("trulens.core")
    tmp = tmp_path_factory.mktemp("trulens")
    paths = [tmp / "triad.jsonl", tmp / "triad.parquet"]
    for path in paths:
        assert write_cases(load_cases(EXAMPLE), path, "trulens") == []
    mixed = tmp / "mixed.jsonl"  # one case with a reference and labels, one with neither
    write_cases([Case(id="a", question="q1", reference="r", contexts=[{"id": "c1", "text": "t1"}],
                      relevant={"c1": 1}),
                 Case(id="b", question="q2", contexts=[{"id": "c2", "text": "t2"}])], mixed, "trulens")
    paths.append(mixed)
    result = json.loads(_child(_TRULENS_SCORES, *paths, cwd=tmp))
    assert sorted(p.name for p in tmp.iterdir()) == ["mixed.jsonl", "triad.jsonl", "triad.parquet"]
    return result, paths


def test_trulens_ir_metrics_on_the_export_equal_native_case_by_case(trulens_example):
    result, paths = trulens_example
    cases = load_cases(EXAMPLE)
    for path in paths[:2]:  # JSONL and Parquet, each through TruLens's own loader
        got = result[str(path)]
        assert [r["query_id"] for r in got["scores"]] == [c.id for c in cases]
        rows = {r["query_id"]: r for r in got["truth"]}
        precision_differs = set()
        for case, scores in zip(cases, got["scores"]):
            for k in DEPTHS:
                for name in ("recall", "ndcg", "hit"):
                    assert scores[f"{name}@{k}"] == pytest.approx(_native(case, name, k)), (case.id, name, k)
                # precision: TruLens's own convention (docs/formats.md), equal to native at the full
                # depth unless one label matches two retrieved chunks
                assert scores[f"precision@{k}"] == pytest.approx(_trulens_precision(case, rows[case.id], k))
                native = _native(case, "precision", k)
                if k is None and scores[f"precision@{k}"] != pytest.approx(native):
                    precision_differs.add(case.id)
            assert scores["mrr"] == pytest.approx(_native(case, "mrr", None)), case.id
        labelled = [c for c in cases if c.relevant]
        assert sum(scores["recall@5"] is not None for scores in got["scores"]) == len(labelled) == 49
        # the cases where a label matched more than one retrieved chunk: two chunks of one labelled
        # section, or a relevant chunk retrieved twice (native ranking drops the repeat)
        twice = {c.id for c in labelled if _labels_matched_twice(c)}
        assert precision_differs == twice and len(twice) == 11


def _labels_matched_twice(case: Case) -> bool:
    """Some label with grade >= 1 is matched by two chunks of the list as retrieved (repeats kept)."""
    rel = case.relevant
    labels = [c.id if c.id in rel else c.source for c in case.contexts]
    labels = [lab for lab in labels if rel.get(lab, 0) >= 1]
    return len(labels) != len(set(labels))


def test_trulens_loads_a_table_with_and_without_references_and_labels(trulens_example):
    result, paths = trulens_example
    got = result[str(paths[2])]
    assert [(r["query_id"], r["expected_response"], r["expected_chunks"]) for r in got["truth"]] == [
        ("a", "r", [{"text": "t1", "expect_score": 1}]), ("b", None, [])]
    assert got["scores"][0]["recall@None"] == 1.0
    assert got["scores"][1]["recall@None"] is None  # no labels: undefined, as native (and no crash)


def test_trulens_keeps_the_labels_in_its_own_store(trulens_example):
    """TruLens's re-save (its ground-truth table, as ``get_ground_truth`` returns it) holds the
    labels: ragbridge reads them back from it, without the app's outputs TruLens does not store (and,
    from Parquet, with the nulls the ``meta`` struct gives a row for other rows' keys: both named as
    the re-save's losses)."""
    from ragbridge.formats import resave_losses

    result, paths = trulens_example
    cases = {c.id: c for c in load_cases(EXAMPLE)}
    for path in paths[:2]:
        truth = result[str(path)]["truth"]
        resaved = path.with_name("resaved.jsonl")
        resaved.write_text("".join(json.dumps(r) + "\n" for r in truth), encoding="utf-8")
        nulls = "metadata (another row's keys, as null: Parquet)"
        assert (nulls in resave_losses(list(cases.values()), path, "trulens")) == (path.suffix == ".parquet")
        for back in load_cases(resaved, "trulens"):
            case = cases[back.id]
            if path.suffix == ".parquet":
                assert set(back.metadata) - set(case.metadata) <= {"language", "flaw", "persona"}
                back.metadata = {k: v for k, v in back.metadata.items() if v is not None}
            assert back.model_dump(exclude={"answer", "contexts"}) == case.model_dump(
                exclude={"answer", "contexts"})
            assert back.contexts == [] and back.answer is None


def test_trulens_expected_chunks_read_back_as_labels(trulens_example, tmp_path):
    """A table in TruLens's own schema (``GroundTruth`` rows plus the app's ``contexts``): its expected
    chunks are labels, so native metrics on it are TruLens's, and it writes back unchanged."""
    rows = trulens_example[0]["native_rows"]
    src = tmp_path / "triad.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    mid, out = tmp_path / "cases.jsonl", tmp_path / "again.jsonl"
    res = ragbridge_cli("convert", src, mid, "--from", "trulens")
    assert res.returncode == 0, res.stderr
    odd = [line for line in res.stderr.splitlines() if line.startswith("warning:")]
    assert len(odd) == 1 and "1 expected chunk(s) in 1 row(s)" in odd[0]  # the 0.5, read as grade 1
    cases = load_cases(mid)
    values = rank(cases, ["recall@2", "precision@2", "mrr", "ndcg@2"])
    assert values["recall@2"].tolist()[:2] == [0.5, 1.0]  # 1 of the 2 expected chunks; 1 of 1
    assert values["mrr"].tolist()[:2] == [1.0, 1.0]
    assert math.isnan(values["recall@2"][2])  # no expected chunks: no labels
    assert cases[0].reference_contexts == ["Refunds within 14 days.", "Annual plans: 30 days."]
    res = ragbridge_cli("convert", mid, out, "--to", "trulens")
    assert res.returncode == 0 and "cannot hold" not in res.stderr, res.stderr
    assert "get_ground_truth these are lost: contexts" in res.stderr  # a ground truth holds no outputs
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("expected_chunks") or None for r in again] == [r.get("expected_chunks") for r in rows]
    assert [r["contexts"] for r in again] == [r["contexts"] for r in rows]
    assert all("ragbridge" not in r["meta"] for r in again)  # nothing TruLens cannot say itself



# ------------------------------------------------------------------------------------------------
# TREC at trec_eval's edges, checked against pytrec_eval (trec_eval's own code)

_TREC_MEASURES = {"map": "map", "P_1": "precision@1", "P_5": "precision@5", "recip_rank": "mrr",
                  "ndcg_cut_5": "ndcg@5", "recall_5": "recall@5"}


def _pytrec(run_path: Path, qrels_path: Path) -> dict:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    with open(qrels_path, encoding="utf-8") as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path, encoding="utf-8") as f:
        run = pytrec_eval.parse_run(f)
    return pytrec_eval.RelevanceEvaluator(qrels, set(_TREC_MEASURES)).evaluate(run)


def test_trec_scores_that_tie_in_single_precision_rank_as_trec_eval(tmp_path):
    """trec_eval compares scores cast to single precision: 0.30000001 and 0.3 tie, and the docno
    (descending) decides. The two-line run of the report: map 0.833 and P@1 1, as pytrec_eval."""
    run, qrels = tmp_path / "r.trec", tmp_path / "r.qrels"
    run.write_text("q1 Q0 a 1 0.30000001 x\nq1 Q0 b 2 0.3 x\n", encoding="utf-8")
    qrels.write_text("q1 0 b 1\nq1 0 c 1\n", encoding="utf-8")
    (case,) = load_cases(run, "trec", qrels=qrels)
    assert [c.id for c in case.contexts] == ["b", "a"]
    theirs = _pytrec(run, qrels)["q1"]
    ours = rank([case], list(_TREC_MEASURES.values()))
    for measure, metric in _TREC_MEASURES.items():
        assert float(ours[metric][0]) == pytest.approx(theirs[measure]), measure
    assert theirs["P_1"] == 1.0 and theirs["map"] == pytest.approx(0.5)


def test_trec_runs_with_close_scores_score_as_pytrec_eval(tmp_path):
    """Many queries whose scores differ only beyond single precision, or not at all."""
    import random

    rng = random.Random(7)
    values = [0.3, 0.30000001, 0.1234567891, 0.123456789, 1.0, 1.0000000001, 2.5, 2.5000001]
    run_lines, qrels_lines = [], []
    for q in range(60):
        docs = rng.sample([f"d{i}" for i in range(12)], rng.randint(1, 8))
        for rank_, d in enumerate(docs, start=1):
            run_lines.append(f"q{q} Q0 {d} {rank_} {rng.choice(values)!r} x\n")
        for d in rng.sample([f"d{i}" for i in range(12)], 4):
            qrels_lines.append(f"q{q} 0 {d} {rng.choice([0, 1, 1, 2])}\n")
    run, qrels = tmp_path / "r.trec", tmp_path / "r.qrels"
    run.write_text("".join(run_lines), encoding="utf-8")
    qrels.write_text("".join(qrels_lines), encoding="utf-8")
    theirs = _pytrec(run, qrels)
    cases = load_cases(run, "trec", qrels=qrels)
    ours = rank(cases, list(_TREC_MEASURES.values()))
    compared = 0
    for i, case in enumerate(cases):
        if not any(g >= 1 for g in case.relevant.values()):
            continue  # R = 0: trec_eval's 0, ragbridge's undefined (the next test)
        compared += 1
        for measure, metric in _TREC_MEASURES.items():
            assert float(ours[metric][i]) == pytest.approx(theirs[case.id][measure]), (case.id, measure)
    assert compared > 40
    # written back, the run keeps that order: scores that tie in single precision are not written
    out = tmp_path / "again.trec"
    write_cases(cases, out, "trec")
    again = _pytrec(out, out.with_suffix(".qrels"))
    for case in cases:
        if any(g >= 1 for g in case.relevant.values()):
            assert again[case.id]["map"] == pytest.approx(theirs[case.id]["map"]), case.id


def test_queries_judged_all_zero_warn_and_average_as_trec_eval_on_request(tmp_path):
    """A query whose judgements are all grade 0: trec_eval averages it as 0; ragbridge leaves it out
    of the mean (undefined), warns with the count, and ``--no-relevant zero`` gives trec_eval's mean."""
    run, qrels = tmp_path / "r.trec", tmp_path / "r.qrels"
    run.write_text("q1 Q0 a 1 3 x\nq1 Q0 b 2 2 x\nq2 Q0 c 1 3 x\nq2 Q0 d 2 2 x\nq3 Q0 e 1 1 x\n",
                   encoding="utf-8")
    qrels.write_text("q1 0 b 1\nq2 0 c 1\nq2 0 x 1\nq3 0 e 0\n", encoding="utf-8")
    theirs = _pytrec(run, qrels)
    trec_mean = sum(theirs[q]["map"] for q in theirs) / len(theirs)
    means = {}
    for option in ("undefined", "zero"):
        res = ragbridge_cli("run", run, "--qrels", qrels, "--out", tmp_path / option, "--metric", "map",
                           "--no-relevant", option, "--json", "--no-progress")
        assert res.returncode == 0, res.stderr
        warned = [line for line in warnings_in(res.stderr) if "none with grade >= 1" in line]
        assert len(warned) == 1 and warned[0].startswith("warning: 1 case(s)"), res.stderr
        (row,) = json.loads(res.stdout)["summary"]
        means[option] = (row["mean"], row["n_undefined"])
    assert means["zero"] == (pytest.approx(trec_mean), 0)
    assert means["undefined"] == (pytest.approx((theirs["q1"]["map"] + theirs["q2"]["map"]) / 2), 1)
    assert means["undefined"][0] != pytest.approx(trec_mean)


def test_trec_export_judges_the_chunks_of_a_labelled_section(tmp_path):
    """A label naming a section is written as a judgement of each retrieved chunk of that section,
    not as a docno no run can retrieve (which would count in R); a section nothing retrieved stays a
    judged docno (R counts it, as native recall does). Where each section matches at most one chunk,
    pytrec_eval on the export equals native case by case; elsewhere R counts each chunk."""
    cases = load_cases(EXAMPLE)
    run = tmp_path / "example.trec"
    lost = write_cases(cases, run, "trec")
    assert "relevant (by source)" in lost
    theirs = _pytrec(run, run.with_suffix(".qrels"))
    judged = {}
    for line in run.with_suffix(".qrels").read_text().splitlines():
        q, _, doc, grade = line.split()
        judged.setdefault(q, {})[doc] = int(grade)
    ours = rank(cases, list(_TREC_MEASURES.values()))
    equal = 0
    for i, case in enumerate(cases):
        labels = case.chunk_labels()
        matched = {lab for c, lab in zip(case.contexts, labels) if lab is not None and lab != c.id}
        assert not matched & set(judged.get(case.id, {})), case.id  # no section docno once matched
        for label in set(case.relevant) - matched:
            assert judged[case.id][label] == case.relevant[label]  # chunk labels, unmatched sections
        if case.id not in theirs or not any(g >= 1 for g in case.relevant.values()):
            continue
        if not _labels_matched_twice(case):
            equal += 1
            for measure, metric in _TREC_MEASURES.items():
                assert float(ours[metric][i]) == pytest.approx(theirs[case.id][measure]), (case.id, measure)
    assert equal >= 35


# ------------------------------------------------------------------------------------------------
# RAGAS: its own files, its re-save, its deterministic metrics


def test_a_csv_ragas_to_csv_wrote_with_its_usual_columns_is_read_as_ragas(tmp_path):
    pytest.importorskip("ragas")
    from ragas.dataset_schema import EvaluationDataset

    src = tmp_path / "ragas.csv"
    EvaluationDataset.from_list([
        {"user_input": "Refund window?", "retrieved_contexts": ["Refunds within 14 days.", "Shipping."],
         "response": "14 days.", "reference": "Within 14 days."},
        {"user_input": "Shipping?", "retrieved_contexts": ["Shipping takes 3 days."],
         "response": "3 days.", "reference": "3 days."}]).to_csv(src)
    assert src.read_text().splitlines()[0] == "user_input,retrieved_contexts,response,reference"
    res = ragbridge_cli("convert", src, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'ragas'" in res.stderr
    cases = load_cases(tmp_path / "cases.jsonl")
    assert [c.text for c in cases[0].contexts] == ["Refunds within 14 days.", "Shipping."]


def test_a_minimal_ragas_jsonl_keeps_its_empty_retrieved_contexts(tmp_path):
    pytest.importorskip("ragas")
    from ragas.dataset_schema import EvaluationDataset

    src, out = tmp_path / "ragas.jsonl", tmp_path / "again.jsonl"
    EvaluationDataset.from_list([{"user_input": "q", "retrieved_contexts": []}]).to_jsonl(src)
    mid = tmp_path / "cases.jsonl"
    res = ragbridge_cli("convert", src, mid)
    assert res.returncode == 0 and "read as format 'ragas'" in res.stderr, res.stderr
    assert ragbridge_cli("convert", mid, out, "--to", "ragas").returncode == 0
    assert EvaluationDataset.from_jsonl(out).to_list() == [{"user_input": "q", "retrieved_contexts": []}]


def test_what_ragas_own_resave_drops_is_warned_and_nothing_else_changes(tmp_path):
    """The bundled example through RAGAS's own from_jsonl and to_jsonl: what comes back differs from
    the cases only in what ``convert`` warned of, and RAGAS's deterministic metrics (ID-based recall,
    exact match, string presence, string similarity) on the re-saved file equal those on the cases."""
    pytest.importorskip("ragas")
    import warnings

    from ragas.dataset_schema import EvaluationDataset
    from ragas.metrics import (ExactMatch, IDBasedContextRecall, NonLLMStringSimilarity,
                               StringPresence)

    from ragbridge_ragas import to_ragas

    path, resaved = tmp_path / "ragas.jsonl", tmp_path / "resaved.jsonl"
    res = ragbridge_cli("convert", EXAMPLE, path, "--to", "ragas")
    assert res.returncode == 0, res.stderr
    (warned,) = warnings_in(res.stderr)
    assert "after RAGAS's EvaluationDataset.from_jsonl and to_jsonl these are lost:" in warned
    names = warned.split("lost: ")[1].split(" (see")[0].split(", ")
    assert set(names) == {"id", "contexts.id", "contexts.score", "contexts.source", "relevant (grades)",
                          "must_contain", "must_not_contain", "answerable", "tags", "metadata"}
    EvaluationDataset.from_jsonl(path).to_jsonl(resaved)
    cases, back = load_cases(EXAMPLE), load_cases(resaved, "ragas")
    changed = {k for a, b in zip(cases, back) for k, v in a.model_dump().items() if b.model_dump()[k] != v}
    assert changed <= {n.split(" ")[0].split(".")[0] for n in names}
    assert load_cases(path, "ragas") == cases  # ragbridge's own file holds them all
    in_memory, _ = to_ragas(cases)
    metrics = [IDBasedContextRecall(), ExactMatch(), StringPresence(), NonLLMStringSimilarity()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a, b, case in zip(in_memory.samples, EvaluationDataset.from_jsonl(resaved).samples, cases):
            for m in metrics:
                va, vb = _outcome(m, a), _outcome(m, b)
                assert va == vb or (va != va and vb != vb), (case.id, type(m).__name__, va, vb)
            if case.reference is not None and case.answer is not None:
                assert ExactMatch().single_turn_score(b) == float(case.answer == case.reference)


def _outcome(metric, sample):
    """A RAGAS metric's score, or the error it raises (IDBasedContextRecall refuses a sample without
    reference ids)."""
    try:
        return metric.single_turn_score(sample)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------
# DeepEval: its own goldens, its CSV loader, its re-save


def test_deepeval_own_goldens_come_back_as_they_were(tmp_path):
    """A golden with a source-tagged chunk (``RetrievedContextData``) and no name: DeepEval's own
    save_as -> ragbridge -> DeepEval gives the same goldens, nothing added but the name: the case id
    made from the input, which DeepEval's results carry so that they join back to the cases."""
    pytest.importorskip("deepeval")
    from deepeval.dataset import EvaluationDataset, Golden
    from deepeval.test_case import RetrievedContextData

    golden = Golden(input="Refund window?", expected_output="14 days.",
                    retrieval_context=[RetrievedContextData(context="Refunds within 14 days.",
                                                            source="refunds.md"), "Shipping."])
    for kind in ("json", "jsonl", "csv"):
        src = Path(EvaluationDataset(goldens=[golden]).save_as(kind, str(tmp_path), f"src-{kind}"))
        out = tmp_path / f"again.{kind}"
        mid = tmp_path / f"cases-{kind}.jsonl"
        assert ragbridge_cli("convert", src, mid, "--from", "deepeval").returncode == 0
        (case,) = load_cases(mid)
        assert case.contexts[0].source == "refunds.md" and case.contexts[0].text == "Refunds within 14 days."
        res = ragbridge_cli("convert", mid, out, "--to", "deepeval")
        assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
        before, after = EvaluationDataset(), EvaluationDataset()
        getattr(before, f"add_goldens_from_{kind}_file")(str(src))
        getattr(after, f"add_goldens_from_{kind}_file")(str(out))
        assert [g.model_dump(exclude={"name"}) for g in after.goldens] == [
            g.model_dump(exclude={"name"}) for g in before.goldens], kind
        assert before.goldens[0].name is None and after.goldens[0].name == case.id
        assert isinstance(after.goldens[0].retrieval_context[0], RetrievedContextData)


def test_deepeval_csv_warns_of_every_cell_its_loader_reads_as_missing(tmp_path):
    pytest.importorskip("deepeval")
    from deepeval.dataset import EvaluationDataset

    src = tmp_path / "cases.jsonl"
    write_cases([Case(id="NA", question="q1", answer="null", contexts=[{"id": "c", "text": "NaN"}]),
                 Case(id="ok", question="q2", answer="fine", reference="None")], src)
    out = tmp_path / "goldens.csv"
    res = ragbridge_cli("convert", src, out, "--to", "deepeval-csv")
    assert res.returncode == 0, res.stderr
    (warned,) = warnings_in(res.stderr)
    for name in ("id", "answer", "reference", "contexts"):
        assert f"{name} (a cell pandas reads as missing, CSV)" in warned
    ds = EvaluationDataset()
    ds.add_goldens_from_csv_file(str(out))  # what DeepEval makes of them: nothing
    g1, g2 = ds.goldens
    assert (g1.name, g1.actual_output, g1.retrieval_context, g2.expected_output) == (None, None, [], None)
    assert load_cases(out, "deepeval-csv") == load_cases(src)  # ragbridge reads the cells as text


def test_deepeval_jsonl_resave_splits_texts_with_a_bar_and_says_so(tmp_path):
    pytest.importorskip("deepeval")
    from deepeval.dataset import EvaluationDataset

    table = "| plan | days |\n|---|---|\n| monthly | 14 |"
    src, out = tmp_path / "cases.jsonl", tmp_path / "goldens.jsonl"
    write_cases([Case(id="t", question="Refund window?", contexts=[{"id": "c", "text": table}])], src)
    res = ragbridge_cli("convert", src, out, "--to", "deepeval-jsonl")
    assert res.returncode == 0
    assert "contexts (text with '|', DeepEval's re-save)" in res.stderr
    ds = EvaluationDataset()
    ds.add_goldens_from_jsonl_file(str(out))
    assert ds.goldens[0].retrieval_context == [table]  # ragbridge's file holds it
    resaved = Path(ds.save_as("jsonl", str(tmp_path), "resaved"))
    again = EvaluationDataset()
    again.add_goldens_from_jsonl_file(str(resaved))
    assert len(again.goldens[0].retrieval_context) == table.count("|") + 1  # DeepEval's own re-save
    listed = json.loads(ragbridge_cli("formats", "--json").stdout)["formats"]
    row = next(f for f in listed if f["name"] == "deepeval-jsonl")
    assert row["cannot_hold"] == [] and "contexts (text with '|', DeepEval's re-save)" in row["resave_drops"]
