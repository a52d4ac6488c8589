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
from conftest import EXAMPLE, ragbridge_cli
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
        frame = pd.DataFrame(pq.read_table(path).to_pylist())
        frame["meta"] = frame["meta"].map(json.loads)
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
    labels: ragbridge reads them back from it, without the app's outputs TruLens does not store."""
    result, paths = trulens_example
    cases = {c.id: c for c in load_cases(EXAMPLE)}
    for path in paths[:2]:
        truth = result[str(path)]["truth"]
        resaved = path.with_name("resaved.jsonl")
        resaved.write_text("".join(json.dumps(r) + "\n" for r in truth), encoding="utf-8")
        for back in load_cases(resaved, "trulens"):
            case = cases[back.id]
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
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("expected_chunks") or None for r in again] == [r.get("expected_chunks") for r in rows]
    assert [r["contexts"] for r in again] == [r["contexts"] for r in rows]
    assert all("ragbridge" not in r["meta"] for r in again)  # nothing TruLens cannot say itself

