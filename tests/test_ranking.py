"""Tests for ragbridge.native.ranking: pytrec_eval as the oracle, plus one named test per convention."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragbridge.native import ranking as rk
from ragbridge.schema import Case

ALL = ["recall@10", "precision@10", "hit@10", "mrr", "mrr@10", "ndcg", "ndcg@10", "map", "map@10"]
UNDEFINED_WHEN_R0 = ("recall@10", "mrr", "mrr@10", "ndcg", "ndcg@10", "map", "map@10")


def case(contexts, relevant, cid="q"):
    """Build a Case; a context item is an id string or a (id, source) pair."""
    chunks = [
        {"id": c} if isinstance(c, str) else {"id": c[0], "source": c[1]} for c in contexts
    ]
    return Case(id=cid, question="?", contexts=chunks, relevant=relevant)


def one(cases, metrics=ALL, gain="linear"):
    """evaluate() on the cases; {name: value of case 0} when one case is given."""
    if isinstance(cases, Case):
        cases = [cases]
    res = rk.evaluate(cases, metrics, gain=gain)
    return {k: float(v[0]) for k, v in res.items()} if len(cases) == 1 else res


# --------------------------------------------------------------------------- oracle property

try:
    import pytrec_eval
except ImportError:  # pragma: no cover - the dev extra installs it
    pytrec_eval = None

KS = (1, 3, 5, 10, 20)
POOL = 40  # doc ids d0..d39: some labels retrieved, some not


@st.composite
def labelled_cases(draw):
    """1-4 cases, unique chunk ids, 0-30 retrieved, chunk-level labels with grades 0..3.

    Hypothesis draws the sizes and a seed; the ids and grades come from that seed (cheap to draw,
    still reproducible and shrinkable by size).
    """
    out = []
    for q in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 30))
        n_labels = draw(st.integers(0, 12))
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        ranked = rng.sample(range(POOL), n)
        labelled = rng.sample(range(POOL), n_labels)  # some retrieved, some not
        labelled += rng.sample(ranked, min(len(ranked), rng.randint(0, 4)))  # more retrieved labels
        relevant = {f"d{d}": rng.randint(0, 3) for d in labelled}
        out.append(case([f"d{i}" for i in ranked], relevant, f"q{q}"))
    return out


def _pytrec(cases, k, remap=None):
    qrels = {
        c.id: {d: (remap(g) if remap else g) for d, g in c.relevant.items()}
        for c in cases
        if c.relevant
    }
    run = {c.id: {ch.id: float(len(c.contexts) - i) for i, ch in enumerate(c.contexts)} for c in cases}
    measures = {f"recall_{k}", f"P_{k}", f"success_{k}", f"ndcg_cut_{k}", "map", f"map_cut_{k}",
                "recip_rank", "ndcg"}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval (dev extra) is not installed")
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases=labelled_cases(), k=st.sampled_from(KS))
def test_matches_pytrec_eval(cases, k):
    names = [f"recall@{k}", f"precision@{k}", f"hit@{k}", f"ndcg@{k}", "map", f"map@{k}", "mrr",
             f"mrr@{k}", "ndcg"]
    ours = rk.evaluate(cases, names)
    ours_exp = rk.evaluate(cases, [f"ndcg@{k}"], gain="exponential")[f"ndcg@{k}"]
    trec = _pytrec(cases, k)
    trec_exp = _pytrec(cases, k, remap=lambda g: 2**g - 1)  # exponential gain via remapped grades
    pairs = {f"recall@{k}": f"recall_{k}", f"precision@{k}": f"P_{k}", f"hit@{k}": f"success_{k}",
             f"ndcg@{k}": f"ndcg_cut_{k}", "map": "map", f"map@{k}": f"map_cut_{k}",
             "mrr": "recip_rank", "ndcg": "ndcg"}
    for i, c in enumerate(cases):
        R = sum(1 for g in c.relevant.values() if g >= 1)
        if not c.relevant:
            assert c.id not in trec  # pytrec_eval silently drops it; ours is NaN everywhere
            for name in names:
                assert math.isnan(ours[name][i]), name
            continue
        t = trec[c.id]
        if R == 0:
            for name in names:
                if name.startswith(("precision", "hit")):
                    assert ours[name][i] == 0.0 == t[pairs[name]], name
                else:
                    assert math.isnan(ours[name][i]), name
            continue
        for name, measure in pairs.items():
            assert ours[name][i] == pytest.approx(t[measure], abs=1e-9, rel=0), (name, c)
        rr = t["recip_rank"]
        assert ours[f"mrr@{k}"][i] == pytest.approx(rr if rr >= 1.0 / k else 0.0, abs=1e-9, rel=0)
        assert ours_exp[i] == pytest.approx(trec_exp[c.id][f"ndcg_cut_{k}"], abs=1e-9, rel=0)


# --------------------------------------------------------------------------- reference property
# Section labels and repeated ids (which trec_eval cannot take) against a plain per-case reading
# of the conventions.


def _reference(c: Case, k: int) -> dict[str, float]:
    nan = float("nan")
    if not c.relevant:
        return {m: nan for m in ("recall", "precision", "hit", "mrr", "ndcg", "map")}
    seen, ranked = set(), []
    for ch in c.contexts:
        if ch.id not in seen:
            seen.add(ch.id)
            ranked.append(ch)
    rel = c.relevant
    ideal = sorted((g for g in rel.values() if g >= 1), reverse=True)
    R = len(ideal)
    credited_labels: set = set()
    rows = []  # (rank, grade, credited) of relevant chunks
    for pos, ch in enumerate(ranked, 1):
        label = ch.id if ch.id in rel else (ch.source if ch.source in rel else None)
        if label is None or rel[label] < 1:
            continue
        rows.append((pos, rel[label], label not in credited_labels))
        credited_labels.add(label)
    top = [row for row in rows if row[0] <= k]
    out = {"precision": len(top) / k, "hit": float(bool(top))}
    if R == 0:
        return {**out, "recall": nan, "mrr": nan, "ndcg": nan, "map": nan}
    out["recall"] = sum(1 for row in top if row[2]) / R
    out["mrr"] = 1.0 / rows[0][0] if rows and rows[0][0] <= k else 0.0
    dcg = sum(g / math.log2(r + 1) for r, g, cr in top if cr)
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:k]))
    out["ndcg"] = dcg / idcg
    ap, n_cred = 0.0, 0
    for r, g, cr in top:
        if cr:
            n_cred += 1
            ap += n_cred / r
    out["map"] = ap / R
    return out


@st.composite
def section_cases(draw):
    """1-4 cases whose chunks may repeat ids and carry sources; labels name chunks or sources."""
    out = []
    for q in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 25))
        n_labels = draw(st.integers(0, 8))
        rng = random.Random(draw(st.integers(0, 2**32 - 1)))
        ctx = [(f"c{rng.randint(0, 15)}", rng.choice([None, "s0", "s1", "s2", "s3", "s4", "s5"]))
               for _ in range(n)]
        keys = [rng.choice([f"c{rng.randint(0, 15)}", f"s{rng.randint(0, 5)}"]) for _ in range(n_labels)]
        out.append(case(ctx, {k: rng.randint(0, 3) for k in keys}, f"q{q}"))
    return out


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases=section_cases(), k=st.sampled_from(KS))
def test_matches_reference_with_sections_and_duplicates(cases, k):
    names = {"recall": f"recall@{k}", "precision": f"precision@{k}", "hit": f"hit@{k}",
             "mrr": f"mrr@{k}", "ndcg": f"ndcg@{k}", "map": f"map@{k}"}
    ours = rk.evaluate(cases, list(names.values()))
    r = rk.prepare(cases)
    for i, c in enumerate(cases):
        ref = _reference(c, k)
        for m, name in names.items():
            if math.isnan(ref[m]):
                assert math.isnan(ours[name][i]), (name, c)
            else:
                assert ours[name][i] == pytest.approx(ref[m], abs=1e-12, rel=0), (name, c)
                assert 0.0 <= ours[name][i] <= 1.0 + 1e-12
        assert r.duplicates[i] == len(c.contexts) - len({ch.id for ch in c.contexts})


# --------------------------------------------------------------------------- named conventions


def test_unlabelled_case_is_nan_for_every_metric():
    v = one(case(["a", "b"], {}))
    assert all(math.isnan(x) for x in v.values()), v
    r = rk.prepare([case(["a"], {})])
    assert not r.labelled[0] and r.n_relevant[0] == 0


def test_only_grade_zero_labels():
    v = one(case(["a", "b"], {"a": 0, "x": 0}))
    for name in UNDEFINED_WHEN_R0:
        assert math.isnan(v[name]), name
    assert v["precision@10"] == 0.0 and v["hit@10"] == 0.0
    r = rk.prepare([case(["a"], {"a": 0})])
    assert r.labelled[0] and r.n_relevant[0] == 0


def test_k_beyond_the_list_E4():
    v = one(case(["a", "b", "c"], {"a": 1, "c": 1}), ["precision@10", "recall@10", "hit@10", "map",
                                                     "map@100", "ndcg@10", "mrr@10"])
    assert v["precision@10"] == pytest.approx(0.2)  # hits / k, not hits / len
    assert v["recall@10"] == 1.0 and v["hit@10"] == 1.0 and v["mrr@10"] == 1.0
    assert v["map"] == pytest.approx(0.8333333333, abs=1e-9)
    assert v["map@100"] == pytest.approx(5 / 6)
    assert v["ndcg@10"] == pytest.approx(0.9197207891, abs=1e-9)


def test_duplicate_ids_dropped_before_ranking_and_counted():
    # b repeats at positions 3 and 4: dropped, so c moves from rank 5 to rank 3.
    c = case(["a", "b", "b", "b", "c"], {"c": 1})
    r = rk.prepare([c])
    assert r.duplicates.tolist() == [2] and r.n_retrieved.tolist() == [3]
    v = one(c, ["mrr", "precision@3", "recall@3", "map", "ndcg"])
    assert v["mrr"] == pytest.approx(1 / 3)
    assert v["precision@3"] == pytest.approx(1 / 3) and v["recall@3"] == 1.0
    assert v["map"] == pytest.approx(1 / 3)
    assert v["ndcg"] == pytest.approx(1 / math.log2(4))
    # A repeated relevant id is counted once: no precision or recall inflation.
    v = one(case(["a", "a", "a"], {"a": 1}), ["precision@3", "recall@3", "map"])
    assert v == {"precision@3": pytest.approx(1 / 3), "recall@3": 1.0, "map": 1.0}


def test_section_labels_match_by_source():
    c = case([("c1", "secA"), ("c2", "x"), ("c3", "secA"), ("c4", "secB")], {"secA": 2, "secB": 1})
    v = one(c, ["precision@4", "hit@1", "recall@4", "recall@3", "ndcg@4", "map", "mrr"])
    assert v["precision@4"] == pytest.approx(3 / 4)  # both secA chunks count for precision
    assert v["hit@1"] == 1.0 and v["mrr"] == 1.0
    assert v["recall@3"] == pytest.approx(1 / 2)  # secA counted once
    assert v["recall@4"] == 1.0
    dcg = 2 / math.log2(2) + 1 / math.log2(5)  # c3 adds no gain
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert v["ndcg@4"] == pytest.approx(dcg / idcg)
    assert v["map"] == pytest.approx((1 / 1 + 2 / 4) / 2)  # c3 non-relevant for AP
    r = rk.prepare([c])
    assert r.rank.tolist() == [1, 3, 4] and r.new.tolist() == [True, False, True]


def test_recall_never_exceeds_one_with_many_chunks_of_one_section():
    c = case([(f"c{i}", "doc") for i in range(8)], {"doc": 3})
    v = one(c, ["recall@5", "precision@5", "ndcg@5", "map@5", "hit@5"])
    assert v == {"recall@5": 1.0, "precision@5": 1.0, "ndcg@5": 1.0, "map@5": 1.0, "hit@5": 1.0}


def test_chunk_id_and_source_labels_for_the_same_label():
    # Label "doc1" names a chunk id and is also the source of another chunk: both chunks match it.
    c = case([("x", "doc1"), ("doc1", None), ("y", None)], {"doc1": 1})
    v = one(c, ["precision@3", "recall@3", "map", "mrr"])
    assert v == {"precision@3": pytest.approx(2 / 3), "recall@3": 1.0, "map": 1.0, "mrr": 1.0}


def test_id_match_takes_precedence_over_source():
    # c1's id is labelled grade 0: it is non-relevant even though its section is grade 2.
    v = one(case([("c1", "sec"), ("c2", "sec")], {"c1": 0, "sec": 2}), ["precision@2", "mrr", "map"])
    assert v == {"precision@2": 0.5, "mrr": 0.5, "map": 0.5}
    # c1's id has grade 1, its section grade 3: the id's grade is used.
    v = one(case([("c1", "sec")], {"c1": 1, "sec": 3}), ["ndcg@1", "recall@1", "ndcg"])
    assert v["ndcg@1"] == pytest.approx(1 / 3)  # gain 1, ideal top grade 3
    assert v["recall@1"] == 0.5  # two labels, one matched
    assert v["ndcg"] == pytest.approx(1 / (3 + 1 / math.log2(3)))


def test_graded_linear_vs_exponential_ndcg_E8():
    c = case(["a", "b"], {"a": 1, "b": 3})
    assert one(c, ["ndcg@10"])["ndcg@10"] == pytest.approx(0.7967, abs=1e-4)
    assert one(c, ["ndcg@10"], gain="exponential")["ndcg@10"] == pytest.approx(0.7098, abs=1e-4)
    r = rk.prepare([c])
    assert rk.ndcg(r, 10)[0] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))
    assert rk.ndcg(r, 10, gain="exponential")[0] == pytest.approx(
        (1 + 7 / math.log2(3)) / (7 + 1 / math.log2(3)))
    # all four grades, unretrieved labels in the ideal
    c = case(["a", "b", "c", "d"], {"a": 0, "b": 1, "c": 2, "d": 3, "e": 3})
    lin = one(c, ["ndcg"])["ndcg"]
    dcg = 1 / math.log2(3) + 2 / math.log2(4) + 3 / math.log2(5)
    idcg = 3 + 3 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(5)
    assert lin == pytest.approx(dcg / idcg)


def test_mrr_cut_off_E7():
    c = case([f"d{i:02d}" for i in range(20)], {"d10": 1})
    v = one(c, ["mrr", "mrr@10", "mrr@11", "hit@10", "map@100"])
    assert v["mrr@10"] == 0.0
    assert v["mrr"] == pytest.approx(1 / 11) and v["mrr@11"] == pytest.approx(1 / 11)
    assert v["hit@10"] == 0.0 and v["map@100"] == pytest.approx(1 / 11)


def test_empty_contexts():
    v = one(case([], {"a": 2}))
    assert all(x == 0.0 for x in v.values()), v
    r = rk.prepare([case([], {"a": 2})])
    assert r.n_retrieved[0] == 0 and r.n_relevant[0] == 1


def test_no_cases():
    r = rk.prepare([])
    assert r.n_cases == 0
    out = rk.evaluate([], ALL)
    assert all(v.shape == (0,) and v.dtype == np.float64 for v in out.values())


def test_batch_keeps_cases_independent_and_aligned():
    cases = [
        case(["a", "b"], {"b": 1}, "q0"),
        case(["x"], {}, "q1"),
        case(["a", "b"], {"a": 2}, "q2"),
        case([], {"z": 0}, "q3"),
    ]
    out = rk.evaluate(cases, ["mrr", "precision@1"])
    assert np.allclose(out["mrr"], [0.5, np.nan, 1.0, np.nan], equal_nan=True)
    assert np.allclose(out["precision@1"], [0.0, np.nan, 1.0, 0.0], equal_nan=True)
    r = rk.prepare(cases)
    assert r.labelled.tolist() == [True, False, True, True]
    assert r.n_relevant.tolist() == [1, 0, 1, 0]
    assert r.first_rank.tolist() == [2, 0, 1, 0]


def test_evaluate_accepts_prepared_and_keys_by_given_name():
    cases = [case(["a", "b"], {"b": 1})]
    r = rk.prepare(cases)
    out = rk.evaluate(r, ["MRR", "ndcg@2", "map@10"])
    assert list(out) == ["MRR", "ndcg@2", "map@10"]
    assert out["MRR"][0] == 0.5
    assert set(rk.METRICS) == {"recall", "precision", "hit", "mrr", "ndcg", "map"}


@pytest.mark.parametrize(
    "name", ["recal@5", "ndcg@10x", "p@5", "", "recall", "precision", "hit", "recall@0", "map@-1",
             "ndcg@1.5", "mrr@", "hit@ten", "map@0"]
)
def test_bad_metric_names_raise(name):
    with pytest.raises(ValueError):
        rk.evaluate([case(["a"], {"a": 1})], [name])


def test_unknown_metric_message_is_clear():
    with pytest.raises(ValueError, match=r"unknown ranking metric 'bleu'.*recall@k"):
        rk.evaluate([], ["bleu"])
    with pytest.raises(ValueError, match=r"needs a cut-off"):
        rk.evaluate([], ["recall"])
    with pytest.raises(ValueError, match=r"positive integer"):
        rk.evaluate([], ["ndcg@0"])


@pytest.mark.parametrize("k", [0, -3, 2.0, True, "5"])
def test_kernels_reject_bad_k(k):
    r = rk.prepare([case(["a"], {"a": 1})])
    for fn in (rk.recall, rk.precision, rk.hit, rk.mrr, rk.ndcg, rk.average_precision):
        with pytest.raises(ValueError, match="positive integer"):
            fn(r, k)


def test_bad_gain_raises():
    with pytest.raises(ValueError, match="gain"):
        rk.evaluate([case(["a"], {"a": 1})], ["ndcg@5"], gain="burges")
    with pytest.raises(ValueError, match="gain"):
        rk.ndcg(rk.prepare([]), 5, gain="log")


def test_scores_are_ignored():
    c = Case(id="q", question="?", relevant={"b": 1},
             contexts=[{"id": "a", "score": 0.1}, {"id": "b", "score": 0.9}])
    assert one(c, ["mrr"])["mrr"] == 0.5


# --------------------------------------------------------------------------- the path a run takes
# The native backend scores through the same dispatcher: a run's scores equal pytrec_eval's too.

RUN_METRICS = ["recall@k", "precision@k", "hit@k", "ndcg@k", "mrr", "map"]


def _run_pairs(k):
    return {f"recall@{k}": f"recall_{k}", f"precision@{k}": f"P_{k}", f"hit@{k}": f"success_{k}",
            f"ndcg@{k}": f"ndcg_cut_{k}", "map": "map", "mrr": "recip_rank"}


def _assert_scores_match(cases, values, k, trec):
    """``values``: {(case id, metric): value or None} of a run; ``trec``: pytrec_eval's output."""
    for c in cases:
        R = sum(1 for g in c.relevant.values() if g >= 1)
        for name, measure in _run_pairs(k).items():
            got = values[(c.id, name)]
            if not c.relevant or (R == 0 and not name.startswith(("precision", "hit"))):
                assert got is None, (name, c)  # undefined, never 0
            else:
                assert got == pytest.approx(trec[c.id][measure], abs=1e-9, rel=0), (name, c)


@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval (dev extra) is not installed")
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases=labelled_cases(), k=st.sampled_from(KS))
def test_native_backend_run_matches_pytrec_eval(cases, k):
    from ragbridge import RunOptions, evaluate

    run = evaluate(cases, backends=["native"], metrics=RUN_METRICS, options=RunOptions(k=k))
    values = {(s.case_id, s.metric): s.value for s in run.scores}
    assert len(values) == len(cases) * len(RUN_METRICS) and not any(s.error for s in run.scores)
    _assert_scores_match(cases, values, k, _pytrec(cases, k))
    exp = evaluate(cases, backends=["native"], metrics=["ndcg@k"],
                   options=RunOptions(k=k, backend_options={"native": {"gain": "exponential"}}))
    trec_exp = _pytrec(cases, k, remap=lambda g: 2**g - 1)
    for s in exp.scores:
        if s.value is not None:
            assert s.value == pytest.approx(trec_exp[s.case_id][f"ndcg_cut_{k}"], abs=1e-9, rel=0)


@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval (dev extra) is not installed")
def test_cli_run_matches_pytrec_eval(tmp_path):
    import json

    from conftest import ragbridge_cli

    rng = random.Random(15)
    rows = []
    for q in range(40):
        ranked = rng.sample(range(POOL), rng.randint(0, 30))
        labelled = rng.sample(range(POOL), rng.randint(0, 12)) + ranked[: rng.randint(0, 4)]
        rows.append({"id": f"q{q}", "question": f"question {q}",
                     "contexts": [{"id": f"d{i}"} for i in ranked],
                     "relevant": {f"d{d}": rng.randint(0, 3) for d in labelled}})
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "--k", "3")
    assert res.returncode == 0, res.stderr
    scores = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    values = {(s["case_id"], s["metric"]): s["value"] for s in scores}
    cases = [case([c["id"] for c in r["contexts"]], r["relevant"], r["id"]) for r in rows]
    _assert_scores_match(cases, values, 3, _pytrec(cases, 3))


def test_a_run_prepares_each_list_of_cases_once():
    """The native backend's session reuses the prepared arrays while the runner hands every ranking
    metric the same list object, and prepares afresh for another list."""
    import asyncio

    from ragbridge.plugin import RunOptions, ScoringContext
    from ragbridge.native import NativeBackend

    session = asyncio.run(NativeBackend().open(ScoringContext(options=RunOptions())))
    cases = [case(["a", "b"], {"b": 1}), case(["c"], {"c": 2}, "q2")]
    first = session.prepared(cases, 0.5).ranked
    assert session.prepared(cases, 0.5).ranked is first
    other = session.prepared(cases[:1], 0.5).ranked
    assert other is not first and other.n_cases == 1


@pytest.mark.skipif(pytrec_eval is None, reason="pytrec_eval (dev extra) is not installed")
def test_map_at_k_is_a_metric_the_command_line_takes(tmp_path):
    """docs/metrics.md lists ``map@k`` (trec_eval's ``map_cut``) beside ``map``: ``--metric map@2``
    runs it, with trec_eval's values, instead of refusing it."""
    import json

    from conftest import ragbridge_cli

    cases = [case(["a", "b", "c", "d"], {"c": 1, "d": 2}, "q1"), case(["e", "f"], {"f": 1, "x": 1}, "q2"),
             case(["g", "h", "i"], {"g": 3}, "q3")]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(c.model_dump_json() + "\n" for c in cases), encoding="utf-8")
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "map@2", "-m", "map", "--no-progress",
                        "--json")
    assert res.returncode == 0, res.stderr
    means = {r["metric"]: r["mean"] for r in json.loads(res.stdout)["summary"]}
    trec = _pytrec(cases, 2)
    assert means["map@2"] == pytest.approx(sum(t["map_cut_2"] for t in trec.values()) / 3)
    assert means["map"] == pytest.approx(sum(t["map"] for t in trec.values()) / 3)
    assert means["map@2"] != pytest.approx(means["map"])


def test_a_ranking_score_below_1_says_why(tmp_path):
    """Each ranking score below 1 carries its reason, from the same matching as its value: the labels
    the top k miss with the rank of their first chunk (a section's first chunk, a repeated id counted
    once), the rank of the first relevant chunk, the chunks matching no label above relevant ones,
    a chunk finding less gain above one finding more; no label to find (grades of 0 alone); a value
    of 1 carries none."""
    import json

    from conftest import ragbridge_cli

    cases = [
        case(["n1", "n2", "a", "a", "n3", ("x", "api.md#limits")], {"a": 1, "api.md#limits": 2, "gone": 1},
             "q1"),
        case(["low", "high"], {"low": 1, "high": 3}, "q2"),
        case(["a"], {"a": 1}, "q3"),
        case(["a", "n"], {"a": 0}, "q4"),  # labels of grade 0 alone: nothing to find
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(c.model_dump_json() + "\n" for c in cases), encoding="utf-8")
    metrics = [a for m in ("recall@3", "hit@3", "mrr", "ndcg@3", "map", "precision@3") for a in ("-m", m)]
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "--k", "3", "--no-progress", *metrics)
    assert res.returncode == 0, res.stderr
    why = {(s["case_id"], s["metric"]): s["reason"]
           for s in map(json.loads, (tmp_path / "run" / "scores.jsonl").read_text().splitlines())}
    # q1 ranks n1, n2, a, n3, x after the repeated a is dropped: a at 3, the section at 5
    assert why[("q1", "recall@3")] == "not in the top 3: api.md#limits (rank 5), gone (not retrieved)"
    assert why[("q1", "mrr")] == "the first relevant chunk is at rank 3"
    assert why[("q1", "precision@3")] == "2 of the top 3 hold no relevant chunk"
    assert why[("q1", "map")] == ("1 of 3 labels not found in the list; noise: 3 chunks matching no label "
                                  "rank above relevant ones")
    assert why[("q1", "ndcg@3")] == ("2 of 3 labels not found in the top 3; noise: 2 chunks matching no "
                                     "label rank above relevant ones")
    assert why[("q2", "ndcg@3")] == "a chunk finding less gain ranks above one finding more"
    assert why[("q2", "recall@3")] is None and why[("q2", "map")] is None  # 1: nothing to explain
    assert all(why[("q3", m)] is None for m in ("recall@3", "hit@3", "mrr", "ndcg@3", "map"))
    assert why[("q3", "precision@3")] == "2 of the top 3 hold no relevant chunk (the list has 1 chunk)"
    # hit@3 is a defined 0 there, recall@3 undefined: both say why
    assert why[("q4", "hit@3")] == why[("q4", "recall@3")] == "no label with grade >= 1"


# --------------------------------------------------------------------------- the same bits in every process

_HASHED_RUN = """
import json, random, sys
from ragbridge.native import ranking as rk
from ragbridge.schema import Case
rng = random.Random(7)
cases = []
for q in range(300):
    ids = [f"d{j}" for j in rng.sample(range(2000), 100)]
    rel = {d: rng.randint(1, 3) for d in rng.sample(ids[:30], rng.randint(2, 12))}
    cases.append(Case(id=f"q{q}", question="?", contexts=[{"id": d} for d in ids], relevant=rel))
out = rk.evaluate(cases, ["ndcg@10", "ndcg", "map"])
print(json.dumps({k: [float(x).hex() for x in v] for k, v in out.items()}))
"""


def test_values_are_the_same_bits_whatever_the_processs_string_hashing():
    """Two processes (a run and its re-run, or the driver and a Ray worker) give the same values to
    the last bit: a case's labels are summed in rank order, not in the order of a set, which follows
    the process's string hashing (``PYTHONHASHSEED``)."""
    import json
    import os
    import subprocess
    import sys

    got = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", _HASHED_RUN], env=env, capture_output=True, text=True,
                              check=True)
        got.append(proc.stdout)
    assert got[0] == got[1] == got[2]
    # and they are the sums in rank order, as trec_eval makes them
    ndcg = [float.fromhex(x) for x in json.loads(got[0])["ndcg@10"]]
    scope: dict = {}
    exec(_HASHED_RUN.split("out = ")[0], scope)
    for c, value in zip(scope["cases"], ndcg):
        ids = [x.id for x in c.contexts]
        dcg = sum(c.relevant[d] / math.log2(r + 2) for r, d in enumerate(ids[:10]) if d in c.relevant)
        best = sorted(c.relevant.values(), reverse=True)[:10]
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(best))
        assert value == min(dcg / ideal, 1.0)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_recall_reasons_of_chunk_ids_alone_are_those_of_cases(tmp_path, k):
    """The reason of recall@k and hit@k below 1 read from the ranks of chunk ids held as one string
    (a golden set of ids alone, read as a run reads it) is the one `missed_labels` gives the same
    cases as `Case` objects: labels of grade 0 left out, the first three missed named with their rank,
    how many more, repeated ids counted at their first rank."""
    import json

    from ragbridge.formats.batches import batch_from_records
    from ragbridge.formats.record_lines import parse_record_line

    rng = random.Random(k)
    lines = []
    for q in range(400):
        pool = [f"d{j}" for j in range(40)]
        ids = [rng.choice(pool) for _ in range(rng.randint(1, 15))]
        labels = rng.sample(pool, rng.randint(1, 8))
        grades = {d: rng.choice([0, 1, 1, 2, 3]) if q % 3 else rng.randint(1, 3) for d in labels}
        lines.append(json.dumps({"id": f"q{q}", "question": "?", "contexts": [{"id": d} for d in ids],
                                 "relevant": grades}))
    path = tmp_path / "cases.jsonl"
    batch = batch_from_records([(n + 1, parse_record_line(x)) for n, x in enumerate(lines)], path)
    assert all(ranked is not None for *_, ranked in batch.chunk_rows())  # read through the ranks
    cases = [Case.model_validate_json(x) for x in lines]
    for metric in (f"recall@{k}", f"hit@{k}"):
        got = rk.reasons(batch, rk.prepare(batch), metric, rk.evaluate(batch, [metric])[metric])
        want = rk.reasons(cases, rk.prepare(cases), metric, rk.evaluate(cases, [metric])[metric])
        assert got == want
        assert sum(w is not None for w in want) > 100 and any("more" in w for w in want if w)


def test_missed_labels_named_at_once_as_case_by_case():
    """The reasons of recall@k and hit@k below 1 of a batch whose chunk ids were ranked as they were
    read, made at once with NumPy, are each case's own (`_missed_ranked`): cases without labels or
    with empty ones, grades 0, labels retrieved in and below the top k or not at all, fewer and more
    than three missed, labels that are not ASCII."""
    from ragbridge.native.ranking import _missed_ranked, _missed_ranked_at_once

    rng = random.Random(5)
    rels, ranked = [], []
    for _ in range(3000):
        kind = rng.random()
        rel = None if kind < 0.05 else {} if kind < 0.1 else {
            rng.choice(["d", "é", "sec#"]) + str(i): rng.randint(0, 3) for i in range(rng.randint(1, 9))}
        ranks = [rng.choice([0, 0, 1, 2, 5, 10, 11, 40]) for _ in (rel or ())]
        rels.append(rel)
        ranked.append((rng.randint(1, 50), 0, ranks))
    for k in (1, 5, 10):
        want = [_missed_ranked(rel, r[2], k) if rel else None for rel, r in zip(rels, ranked)]
        assert _missed_ranked_at_once(rels, ranked, k) == want
        assert sum(w is None for w in want) > 100 and sum("more" in (w or "") for w in want) > 100
    assert _missed_ranked_at_once([], [], 5) == []
