"""Every dataset format, proven against the libraries themselves.

For each format `ragbridge formats` lists (and each file kind a format writes): generated canonical
cases -> format -> canonical is the identity on every field the format can hold, every field that
comes back different is named in the writer's warning and in the format's ``cannot_hold`` (what
`ragbridge formats` shows), and the file loads with the library's own loader (RAGAS
``EvaluationDataset.from_jsonl`` / ``from_hf_dataset`` / ``from_list``, DeepEval's
``EvaluationDataset.add_goldens_from_*_file``, TruLens's ``GroundTruth``, pandas and ``datasets``
for the canonical formats). On a RAGAS export, RAGAS's own ``IDBasedContextRecall`` equals native
recall at the full retrieved depth, case by case. Files of another library are recognised from
their fields (checked through the command line).
"""

from __future__ import annotations

import ast
import json
import math
import re
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ragbridge  # noqa: F401  (privacy defaults before the libraries are imported)
from conftest import EXAMPLE, ragbridge_cli, warnings_in
from ragbridge.formats import DatasetError, get_formats, load_cases, resave_losses, write_cases
from ragbridge.native.ranking import evaluate as rank
from ragbridge.schema import Case, Chunk, Span

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 15  # per format: a few seconds each

# ------------------------------------------------------------------------------------------------
# Canonical cases, generated

#: metadata keys the library formats use for their own fields (documented in docs/formats.md);
#: their round trips are tested with real library data below, not with arbitrary values
RESERVED = {"ragas", "deepeval", "trulens", "ragbridge"}
_chars = st.characters(codec="utf-8", exclude_categories=("Cs",))
text = st.text(_chars, max_size=12)
word = st.text(_chars, min_size=1, max_size=10).filter(lambda s: s.strip() != "")


def _as_id(s: str) -> str:
    """A word as an id ragbridge takes (`ragbridge.schema.clean_id`): in NFC, printing, no space at
    either end (a map, not a filter, so the examples drawn stay the same)."""
    s = "".join(c for c in unicodedata.normalize("NFC", s) if c.isprintable()).strip()
    return unicodedata.normalize("NFC", s) or "x"


ident = word.map(_as_id)
phrase = text.map(lambda s: s if s.strip() else "x")  # a blank phrase is refused
ids = st.sampled_from(["a", "b", "doc#s", "doc#t"]) | ident
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=6)


docs = st.sampled_from(["a.md", "guide/b.md"]) | word
offsets = st.integers(0, 10**6)


@st.composite
def places(draw):
    """A chunk's or span label's place: none, a document alone, or a document with offsets."""
    doc = draw(st.none() | docs)
    if doc is None or draw(st.booleans()):
        return {"doc": doc}
    start = draw(offsets)
    return {"doc": doc, "start": start, "end": start + draw(st.integers(1, 5000))}


@st.composite
def chunks(draw):
    return Chunk(id=draw(ids), text=draw(text),
                 score=draw(st.none() | st.floats(allow_nan=False, allow_infinity=False)),
                 source=draw(st.none() | ids), **draw(places()))


@st.composite
def spans(draw):
    """A span label: by offsets, by a quote, or both."""
    start = draw(offsets)
    where = {"start": start, "end": start + draw(st.integers(1, 5000))}
    quote = {"quote": draw(word)}
    return Span(doc=draw(docs), grade=draw(st.integers(0, 3)),
                **draw(st.sampled_from([where, quote, {**where, **quote}])))


@st.composite
def one_case(draw, case_id):
    contexts = draw(st.none() | st.lists(chunks(), max_size=4))  # None: not given (a ground-truth set)
    known = ["a", "b", "doc#s", "doc#t"] + [c.id for c in contexts or []] + [
        c.source for c in contexts or [] if c.source]
    labels = st.sampled_from(known) | ident  # labels name chunks, their sources, or neither
    return Case(id=case_id, question=draw(word), answer=draw(st.none() | text), contexts=contexts,
                relevant=draw(st.dictionaries(labels, st.integers(0, 3), max_size=3)),
                relevant_spans=draw(st.lists(spans(), max_size=2)),
                reference=draw(st.none() | text), reference_contexts=draw(st.lists(text, max_size=3)),
                must_contain=draw(st.lists(phrase, max_size=2)),
                must_not_contain=draw(st.lists(phrase, max_size=2)),
                answerable=draw(st.booleans()), tags=draw(st.lists(ident, max_size=2, unique=True)),
                metadata=draw(st.dictionaries(word.filter(lambda k: k not in RESERVED), json_value,
                                              max_size=3)))


@st.composite
def case_lists(draw):
    names = draw(st.lists(word, min_size=1, max_size=4, unique=True))
    return [draw(one_case(i)) for i in dict.fromkeys(map(_as_id, names))]


def _top(name: str) -> str:
    """``contexts.score`` / ``answer (empty, CSV)`` -> the top-level field it belongs to."""
    return re.split(r"[ .]", name, maxsplit=1)[0]


def assert_round_trip(cases: list[Case], back: list[Case], lost: list[str], cannot_hold: tuple[str, ...]):
    assert set(lost) <= set(cannot_hold), f"warned with {lost}, but the format declares {cannot_hold}"
    assert len(back) == len(cases)
    allowed = {_top(n) for n in lost}
    for a, b in zip(cases, back):
        da, db = a.model_dump(), b.model_dump()
        changed = {k: (da[k], db[k]) for k in da if da[k] != db[k] and k not in allowed}
        assert not changed, f"changed without a warning (warned: {lost}): {changed}"
        if "contexts" not in allowed:  # no retrieval given, and a retriever that returned nothing, differ
            assert a.contexts_given == b.contexts_given, (a.id, a.contexts_given, lost)


# ------------------------------------------------------------------------------------------------
# Each library's own loader, and what it must see


def _nan_eq(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def check_ragas_dataset(ds, cases: list[Case], lost: list[str]):
    """RAGAS's dataset holds the cases, and its own ID-based metrics mean what native ones do."""
    import warnings

    from ragas.metrics import IDBasedContextPrecision, IDBasedContextRecall

    from ragbridge_ragas.translate import export_ids

    assert len(ds) == len(cases)
    recall, precision = IDBasedContextRecall(), IDBasedContextPrecision()
    for s, c in zip(ds.samples, cases):
        assert s.user_input == c.question and s.reference_contexts == (c.reference_contexts or None)
        if "answer" not in {_top(n) for n in lost}:
            assert s.response == c.answer
        assert s.retrieved_contexts == ([x.text for x in c.contexts]
                                        if any(x.text for x in c.contexts) else None)
        if not c.relevant:
            assert s.reference_context_ids is None
            continue
        c = c.model_copy(update={"relevant_spans": []})  # RAGAS's ids hold the id labels alone
        if not c.contexts_given:  # no retrieval given: RAGAS refuses to score it, native leaves it undefined
            assert s.retrieved_context_ids is None
            with pytest.raises(AssertionError, match="retrieved_context_ids is empty"):
                recall.single_turn_score(s)
            run = ragbridge.evaluate([c], metrics=["recall@5"], progress=False)
            assert run.scores[0].status == "undefined", run.scores[0]
            continue
        n = max(1, len(c.contexts))
        native = {k: float(v[0]) for k, v in rank([c], [f"recall@{n}", f"precision@{n}"]).items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = recall.single_turn_score(s)
            p = precision.single_turn_score(s) if c.contexts else math.nan
        assert _nan_eq(r, native[f"recall@{n}"]), (c, s)
        if c.contexts:  # distinct ids: equal to native precision@n unless two chunks hit one label
            relevant = [e for e, x in zip(export_ids(c), c.contexts) if c.relevant.get(e, 0) >= 1]
            distinct = set(export_ids(c))
            assert p == pytest.approx(len(set(relevant)) / len(distinct))
            first = {}
            for e, x in zip(export_ids(c), c.contexts):
                first.setdefault(x.id, e)
            if len(first) == len(distinct):  # no two chunks relevant to one label
                k = len(first)
                assert p == pytest.approx(float(rank([c], [f"precision@{k}"])[f"precision@{k}"][0]))


# Each library step: the library's own loader reads ragbridge's file (and must see the cases), then
# the library's own writer saves what it loaded; the step returns the path of that re-saved file.


def load_ragas_jsonl(path, cases, lost, out):
    from ragas.dataset_schema import EvaluationDataset

    ds = EvaluationDataset.from_jsonl(path)
    check_ragas_dataset(ds, cases, lost)
    ds.to_jsonl(out / "resaved.jsonl")
    return out / "resaved.jsonl"


def load_ragas_hf(path, cases, lost, out):
    import datasets
    from ragas.dataset_schema import EvaluationDataset

    ds = EvaluationDataset.from_hf_dataset(datasets.load_from_disk(str(path)))
    check_ragas_dataset(ds, cases, lost)
    ds.to_hf_dataset().save_to_disk(str(out / "resaved"))
    return out / "resaved"


def load_ragas_csv(path, cases, lost, out):
    """RAGAS has no CSV reader: pandas, Python literals for the list cells, then ``from_list``."""
    import pandas as pd
    from ragas.dataset_schema import EvaluationDataset

    lists = {"retrieved_contexts", "reference_contexts", "retrieved_context_ids", "reference_context_ids",
             "multi_responses", "rubrics"}
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    rows = [{k: (ast.literal_eval(v) if k in lists else v) for k, v in row.items() if v != ""}
            for row in frame.to_dict("records")]
    ds = EvaluationDataset.from_list(rows)
    check_ragas_dataset(ds, cases, lost)
    try:
        ds.to_csv(out / "resaved.csv")
    except ValueError:  # "dict contains fields not in fieldnames": RAGAS takes the first sample's columns
        from ragbridge_ragas.formats import CSV_FIRST_ROW

        assert CSV_FIRST_ROW in lost
        return None
    return out / "resaved.csv"


def _pandas_looks_missing_or_numeric(value) -> bool:
    """pandas' read_csv type inference turns these cells into numbers or NaN."""
    import csv
    import io

    import pandas as pd

    if value is None or value == "":
        return False
    buf = io.StringIO()
    csv.writer(buf).writerows([["c"], [value]])
    column = pd.read_csv(io.StringIO(buf.getvalue()))["c"]
    if len(column) != 1:  # pandas read the cell as no row at all (a blank or comment-like line)
        return True
    parsed = column.iloc[0]
    return not isinstance(parsed, str) or parsed != value


def load_deepeval(kind):
    def check(path, cases, lost, out):
        from deepeval.dataset import EvaluationDataset

        if kind == "csv" and any(_pandas_looks_missing_or_numeric(v) for c in cases
                                 for v in (c.question, c.id)):
            return None  # DeepEval's CSV loader fails on these (the writer warns: docs/formats.md)
        if kind == "csv" and any("DeepEval's CSV loader refuses the file" in n for n in lost):
            return None  # said: a text column pandas types as numbers
        ds = EvaluationDataset()
        getattr(ds, f"add_goldens_from_{kind}_file")(str(path))
        assert len(ds.goldens) == len(cases)
        split = {_top(n) for n in lost}
        for g, c in zip(ds.goldens, cases):
            assert g.input == c.question
            if "id" not in split:
                assert g.name in (c.id, None)
            if "contexts" not in split:
                assert [getattr(x, "context", x) for x in g.retrieval_context or []] == [
                    x.text for x in c.contexts]
            if "reference_contexts" not in split:
                assert (g.context or []) == c.reference_contexts
            if "answer" not in split:
                assert g.actual_output == c.answer
            if "reference" not in split:
                assert g.expected_output == c.reference
        return Path(ds.save_as(kind, str(out), "resaved"))
    return check


def load_trulens(path, cases, lost, out):
    """TruLens has no file reader: the recipe of docs/formats.md, then TruLens's ``GroundTruth`` row
    by row, exactly as ``TruSession.add_ground_truth_to_dataset`` builds them; its re-save is the
    ground-truth table TruLens stores (``get_ground_truth``'s columns), written with pandas."""
    import pandas as pd
    import pyarrow.parquet as pq
    from trulens.core.schema.groundtruth import GroundTruth

    suffix = Path(path).suffix
    if suffix == ".csv":
        frame = pd.read_csv(path, dtype=object, keep_default_na=False)
        frame = frame.where(frame != "", None)
        for col in ("contexts", "expected_chunks", "meta"):
            if col in frame:
                frame[col] = frame[col].map(lambda v: None if v is None else json.loads(v))
    elif suffix == ".parquet":
        frame = pd.DataFrame(pq.read_table(path).to_pylist())  # meta a struct: a dict per row
    else:
        try:
            frame = pd.read_json(path, lines=suffix == ".jsonl", dtype=False, precise_float=True)
        except ValueError as exc:  # pandas' JSON reader refuses subnormal numbers (5e-324), valid JSON
            assert "Range error" in str(exc) and _subnormal(cases), exc
            return None
    frame = frame.astype(object).where(frame.notna(), None)
    assert len(frame) == len(cases)
    stored = []
    for (_, row), c in zip(frame.iterrows(), cases):  # as add_ground_truth_to_dataset reads the rows
        gt = GroundTruth(dataset_id="golden", query=row["query"], query_id=row.get("query_id", None),
                         expected_response=row.get("expected_response", None),
                         expected_chunks=row.get("expected_chunks", None), meta=row.get("meta", None))
        assert (gt.query, gt.query_id) == (c.question, c.id)
        expected = [{"text": t, "expect_score": g} for t, g in _trulens_labels(c)]
        assert [{k: x[k] for k in ("text", "expect_score")} for x in gt.expected_chunks] == expected
        stored.append({k: v for k, v in json.loads(gt.model_dump_json()).items()
                       if k in ("query", "query_id", "expected_response", "expected_chunks", "meta")})
    (out / "resaved.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stored), encoding="utf-8")
    return out / "resaved.jsonl"


def _subnormal(value) -> bool:
    """Whether ``value`` (cases, or anything in one) holds a float below the normal range."""
    if isinstance(value, list):
        return any(_subnormal(v) for v in value)
    if isinstance(value, dict):
        return any(_subnormal(v) for v in value.values())
    if isinstance(value, Case):
        return _subnormal(value.model_dump())
    return isinstance(value, float) and value != 0 and abs(value) < sys.float_info.min


def _trulens_labels(case):
    """(text, grade) per label with grade >= 1, as docs/formats.md says the TruLens export writes them."""
    from ragbridge.formats.records import chunk_id_for_text
    first = {}
    for chunk, label in zip(case.contexts, case.chunk_labels()):
        if label is not None:
            first.setdefault(label, chunk.text)
    gold = {chunk_id_for_text(t): t for t in case.reference_contexts}
    return [(first.get(label, gold.get(label, label)), g) for label, g in case.relevant.items() if g >= 1]


#: the examples (of each process) ranx re-saves: it compiles its typed dicts anew for each length of
#: the longest id (a ``<U{n}`` array), about 6 s an example here, 90 s for all of them
RANX_EXAMPLES = 4
_ranx_examples = []


def load_trec(path, cases, lost, out):
    """pytrec_eval's own parsers read the run and the qrels beside it: each case with chunks is a
    query ranking exactly its chunk ids, and every id label is a judgement of that query. ranx
    (``Run.from_file``, ``Qrels.from_file``, ``save``) re-saves them, for the first `RANX_EXAMPLES`
    examples (then None: nothing re-saved to read back)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    ranx = pytest.importorskip("ranx")
    with open(path, encoding="utf-8") as f:
        run = pytrec_eval.parse_run(f)
    with open(Path(path).with_suffix(".qrels"), encoding="utf-8") as f:
        qrels = pytrec_eval.parse_qrel(f)
    assert set(run) == {c.id for c in cases if c.contexts}
    for c in cases:
        if c.contexts:
            assert set(run[c.id]) == {x.id for x in c.contexts}
        by_source = {lab for x, lab in zip(c.contexts, c.chunk_labels()) if lab is not None and lab != x.id}
        for label, grade in c.relevant.items():
            if any(x.id == label for x in c.contexts) or label not in by_source:
                assert qrels[c.id][label] == grade
    if len(_ranx_examples) >= RANX_EXAMPLES:
        return None
    _ranx_examples.append(path)
    try:
        ranx.Run.from_file(str(path), kind="trec").save(str(out / "resaved.trec"), kind="trec")
    except KeyError:  # ranx's numba dicts fail to look up some non-ASCII ids they stored (ranx 0.3.21)
        assert any(not x.id.isascii() or not c.id.isascii() for c in cases for x in c.contexts)
        return None
    if Path(path).with_suffix(".qrels").read_text():  # ranx fails on a qrels file without a line
        ranx.Qrels.from_file(str(Path(path).with_suffix(".qrels")), kind="trec").save(
            str(out / "resaved.qrels"), kind="trec")
    return out / "resaved.trec"


def load_pandas(kind):
    def check(path, cases, lost, out):
        import datasets
        import pandas as pd

        if kind == "hf":
            ds = datasets.load_from_disk(str(path))
            assert ds["question"] == [c.question for c in cases]
            ds.save_to_disk(str(out / "resaved"))
            return out / "resaved"
        if kind == "csv":
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
            frame.to_csv(out / "resaved.csv", index=False)
            if any(name.startswith("every field") for name in lost):
                return None  # the rows break at the carriage return, for every reader
        elif kind == "parquet":
            frame = pd.read_parquet(path)
            frame.to_parquet(out / "resaved.parquet", index=False)
        else:
            try:
                frame = pd.read_json(path, lines=True, dtype=False, precise_float=True)
            except ValueError as exc:  # pandas' JSON reader refuses subnormal numbers (5e-324), valid JSON
                assert "Range error" in str(exc) and _subnormal(cases), exc
                return None
            frame.to_json(out / "resaved.jsonl", orient="records", lines=True, force_ascii=False)
        assert frame["question"].tolist() == [c.question for c in cases]
        return out / f"resaved.{kind}"
    return check


#: (format, file suffix or "" for a folder) -> the library's own loader and re-save
WRITTEN = {
    ("jsonl", ".jsonl"): load_pandas("jsonl"),
    ("csv", ".csv"): load_pandas("csv"),
    ("parquet", ".parquet"): load_pandas("parquet"),
    ("hf", ""): load_pandas("hf"),
    ("ragas", ".jsonl"): load_ragas_jsonl,
    ("ragas-hf", ""): load_ragas_hf,
    ("ragas-csv", ".csv"): load_ragas_csv,
    ("deepeval", ".json"): load_deepeval("json"),
    ("deepeval", ".jsonl"): load_deepeval("jsonl"),
    ("deepeval", ".csv"): load_deepeval("csv"),
    ("deepeval-json", ".json"): load_deepeval("json"),
    ("deepeval-jsonl", ".jsonl"): load_deepeval("jsonl"),
    ("deepeval-csv", ".csv"): load_deepeval("csv"),
    ("trulens", ".jsonl"): load_trulens,
    ("trulens", ".json"): load_trulens,
    ("trulens", ".csv"): load_trulens,
    ("trulens", ".parquet"): load_trulens,
    ("trec", ".trec"): load_trec,
}


TRACE_FORMATS = {"otlp", "otel-spans", "phoenix-spans", "langfuse"}


def test_every_registered_format_is_proven_here():
    writable = {n for n, f in get_formats().items() if f.write}
    assert writable == {n for n, _ in WRITTEN}, "a format without a round-trip test below"
    # read only: JSON lists, and the trace formats, whose records are spans (tests/test_traces.py,
    # tests/test_trace_store.py)
    assert {n for n, f in get_formats().items() if f.read and not f.write} == {"json", *TRACE_FORMATS}
    assert all(get_formats()[n].spans is not None for n in TRACE_FORMATS)


#: TREC files hold ids without white space, and a query only through its ranked documents
trec_id = word.filter(lambda s: not any(ch.isspace() for ch in s)).map(_as_id)


@st.composite
def trec_case_lists(draw):
    out = []
    for case_id in dict.fromkeys(draw(st.lists(trec_id, min_size=1, max_size=4, unique=True))):
        contexts = draw(st.lists(st.builds(Chunk, id=trec_id | st.sampled_from(["a", "doc#s"]), text=text,
                                           score=st.none() | st.floats(allow_nan=False, allow_infinity=False),
                                           source=st.none() | trec_id), min_size=1, max_size=4))
        known = ["a", "doc#s"] + [c.id for c in contexts] + [c.source for c in contexts if c.source]
        base = draw(one_case(case_id))
        out.append(base.model_copy(update={
            "contexts": contexts,
            "relevant": draw(st.dictionaries(st.sampled_from(known) | trec_id, st.integers(0, 3),
                                             max_size=3)),
        }))
    return out


@pytest.mark.parametrize("name, suffix", [  # ranx's numba compiles for 1-2 minutes: trec runs with -m slow
    pytest.param(*k, marks=pytest.mark.slow) if k[0] == "trec" else k for k in sorted(WRITTEN)],
    ids=lambda v: v or "folder")
def test_round_trip_is_identity_or_loud_and_the_library_loads_it(name, suffix):
    if name.startswith("ragas"):
        pytest.importorskip("ragas")
    if name.startswith("deepeval"):
        pytest.importorskip("deepeval")
    if name.startswith("trulens"):
        pytest.importorskip("trulens.core")
    fmt = get_formats()[name]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(trec_case_lists() if name == "trec" else case_lists())
    def round_trip(cases):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / ("cases" + suffix)
            lost = write_cases(cases, path, name)
            dropped = resave_losses(cases, path, name)
            assert set(dropped) <= set(fmt.resave_drops), dropped
            back = load_cases(path, name)  # ragbridge's own file
            assert_round_trip(cases, back, lost, fmt.cannot_hold)
            out = Path(tmp) / "library"
            out.mkdir()
            resaved = WRITTEN[(name, suffix)](path, cases, lost + dropped, out)  # in the library's hands
            if resaved is not None:
                try:
                    again = load_cases(resaved, name)
                except DatasetError:  # pandas' to_json wrote 1.8e308 for 1.79...e308: no number
                    assert any("to_json" in n for n in dropped), dropped
                    return
                if name == "trec":  # ranx writes the queries in sorted order
                    by_id = {c.id: c for c in again}
                    again = [by_id[c.id] for c in cases if c.id in by_id]
                assert_round_trip(cases, again, lost + dropped, fmt.cannot_hold + fmt.resave_drops)

    if name != "trec":  # a retriever that returned nothing: not the same as no retrieval given
        round_trip = example([Case(id="0", question="0", contexts=[])])(round_trip)
    round_trip()


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(case_lists())
def test_json_list_reads_as_the_cases(cases):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cases.json"
        path.write_text(json.dumps([c.model_dump(mode="json") for c in cases]), encoding="utf-8")
        assert load_cases(path) == cases


# ------------------------------------------------------------------------------------------------
# RAGAS: the bundled example, with RAGAS's own metric


def test_ragas_id_recall_on_the_example_equals_native_recall_case_by_case(tmp_path):
    pytest.importorskip("ragas")
    from ragas.dataset_schema import EvaluationDataset
    from ragas.metrics import IDBasedContextRecall

    path = tmp_path / "ragas.jsonl"
    res = ragbridge_cli("convert", EXAMPLE, path, "--to", "ragas")
    assert res.returncode == 0, res.stderr
    cases = load_cases(EXAMPLE)
    ds = EvaluationDataset.from_jsonl(path)
    metric = IDBasedContextRecall()
    labelled = [(s, c) for s, c in zip(ds.samples, cases) if c.relevant]
    assert len(labelled) == 49
    ragas_values, native_values = [], []
    for sample, case in labelled:
        n = len(case.contexts)
        ragas_values.append(metric.single_turn_score(sample))
        native_values.append(float(rank([case], [f"recall@{n}"])[f"recall@{n}"][0]))
    assert ragas_values == native_values
    mean = sum(ragas_values) / len(ragas_values)
    assert mean == pytest.approx(float(rank(cases, ["recall@5"])["recall@5"][~_unlabelled(cases)].mean()))
    assert mean > 0.9  # 0.082 when section labels met chunk ids
    assert load_cases(path, "ragas") == cases  # and the way back is lossless


def _unlabelled(cases):
    import numpy as np

    return np.array([not c.relevant for c in cases])


def test_ragas_ids_are_exported_in_the_labels_id_space():
    from ragbridge_ragas.translate import case_to_sample

    case = Case(id="c", question="q", contexts=[
        {"id": "r.md#w-1", "text": "a", "source": "r.md#w"},   # relevant by its source
        {"id": "r.md#w-2", "text": "b", "source": "r.md#w"},   # the same section
        {"id": "r.md#x-1", "text": "c", "source": "r.md#x"},   # a grade-0 label: keeps its own id
        {"id": "exact", "text": "d", "source": "r.md#w"},      # its id is a label: the id wins
        {"id": "other", "text": "e"},
        {"id": "other", "text": "e", "source": "r.md#w"}],   # a repeat: native ranking drops it
        relevant={"r.md#w": 2, "r.md#x": 0, "exact": 1, "missed": 1})
    row = case_to_sample(case)
    assert row["retrieved_context_ids"] == ["r.md#w", "r.md#w", "r.md#x-1", "exact", "other", "other"]
    assert row["reference_context_ids"] == ["r.md#w", "exact", "missed"]
    empty = case_to_sample(Case(id="e", question="q", contexts=[], relevant={"x": 1}))
    assert empty["retrieved_context_ids"] == [] and "retrieved_contexts" not in empty  # recall 0, as native
    none = case_to_sample(Case(id="e", question="q", relevant={"x": 1}))
    assert "retrieved_context_ids" not in none and "retrieved_contexts" not in none  # undefined, as native


@st.composite
def section_labelled(draw):
    """Chunks of a few sections, labelled by section, by chunk, or both (as real golden sets are)."""
    sections = ["refunds.md#window", "refunds.md#exceptions", "billing.md#plans"]
    contexts = [Chunk(id=draw(st.sampled_from([f"{s}-1", f"{s}-2", "shared-1"])), text=draw(text), source=s)
                for s in draw(st.lists(st.sampled_from(sections), max_size=5))]  # "shared-1": a repeated id
    labels = st.sampled_from(sections + [c.id for c in contexts] + ["missing.md#x"])
    return Case(id=draw(ident), question=draw(word), contexts=contexts,
                relevant=draw(st.dictionaries(labels, st.integers(0, 3), max_size=4)))


@settings(max_examples=2 * EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(section_labelled(), min_size=1, max_size=4, unique_by=lambda c: c.id))
def test_ragas_id_metrics_mean_what_native_ones_do(cases):
    """RAGAS's own ID-based recall (and precision, as documented) on ``to_ragas``'s dataset."""
    pytest.importorskip("ragas")
    from ragbridge_ragas import to_ragas

    check_ragas_dataset(to_ragas(cases)[0], cases, [])


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.fixed_dictionaries(
    {"user_input": word},
    optional={"retrieved_contexts": st.lists(text, max_size=3), "response": text, "reference": text,
              "reference_contexts": st.lists(text, max_size=2),
              "reference_context_ids": st.lists(ids, max_size=2, unique=True),
              "persona_name": word, "rubrics": st.dictionaries(word, text, max_size=2)}),
    min_size=1, max_size=3))
def test_ragas_rows_survive_ragbridge(rows):
    """RAGAS -> canonical -> RAGAS: every RAGAS field comes back (ids RAGAS left out may be added:
    the derived ones, which mean the same). Retrieved contexts that are all empty texts are chunks
    without text, written as ids only (docs/formats.md)."""
    pytest.importorskip("ragas")
    rows = [r for r in rows if not r.get("retrieved_contexts") or any(r["retrieved_contexts"])] or rows[:0]
    if not rows:
        return
    from ragas.dataset_schema import EvaluationDataset

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "ragas.jsonl", Path(tmp) / "again.jsonl"
        EvaluationDataset.from_list(rows).to_jsonl(src)
        assert write_cases(load_cases(src, "ragas"), out, "ragas") == []
        again = EvaluationDataset.from_jsonl(out).to_list()
    for a, b in zip(EvaluationDataset.from_list(rows).to_list(), again):
        b.pop("retrieved_context_ids", None) if "retrieved_context_ids" not in a else None
        assert a == b


# ------------------------------------------------------------------------------------------------
# TruLens: expected chunks keep their scores and titles


def test_trulens_expected_chunk_scores_and_titles_survive(tmp_path):
    src = tmp_path / "triad.jsonl"
    chunks_in = [{"text": "Refunds within 14 days.", "expect_score": 0.5, "title": "Refunds"},
                 {"text": "Annual plans: 30 days.", "expect_score": 1}]
    src.write_text(json.dumps({"query": "Refund window?", "query_id": "r1", "expected_response": "14 days",
                               "expected_chunks": chunks_in, "ground_truth_id": "gt-1",
                               "dataset_id": "d-1"}) + "\n", encoding="utf-8")
    mid, out = tmp_path / "cases.jsonl", tmp_path / "again.jsonl"
    for args in ((src, mid, "--from", "trulens"), (mid, out, "--to", "trulens")):
        res = ragbridge_cli("convert", *args)
        assert res.returncode == 0, res.stderr
        warned = warnings_in(res.stderr)
        assert warned == (["warning: " + str(src) + ": 1 expected chunk(s) in 1 row(s) have an expect_score "
                           "that is not an integer from 1 to 1000: read as grade 1 (TruLens's recall, "
                           "precision, MRR and hit count them as relevant; its nDCG weighs them by the "
                           "score); written back as they were"] if args[0] == src else []), res.stderr
    (case,) = load_cases(mid)
    assert case.reference_contexts == [c["text"] for c in chunks_in]
    row = json.loads(out.read_text())
    assert row["expected_chunks"] == chunks_in
    assert (row["ground_truth_id"], row["dataset_id"]) == ("gt-1", "d-1")
    pytest.importorskip("trulens.core")
    from trulens.core.schema.groundtruth import GroundTruth

    gt = GroundTruth(dataset_id="d", query=row["query"], expected_chunks=row["expected_chunks"])
    assert gt.expected_chunks[0]["expect_score"] == 0.5 and gt.expected_chunks[0]["title"] == "Refunds"


# ------------------------------------------------------------------------------------------------
# DeepEval: what DeepEval's own writer produced, read and written back


_golden = st.fixed_dictionaries(
    {"input": word},
    optional={"actual_output": word, "expected_output": word, "name": ident, "comments": word,
              "retrieval_context": st.lists(st.sampled_from(["same", "other", "a longer chunk"]) | word,
                                            max_size=3),
              "context": st.lists(word, max_size=2),
              "additional_metadata": st.dictionaries(word, word, max_size=2)})


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv"])
def test_deepeval_files_survive_ragbridge(kind):
    """DeepEval save_as -> ragbridge -> DeepEval: DeepEval's loader sees the same goldens, and every
    retrieved text is a chunk of its own (repeated texts get distinct ids, none is empty)."""
    pytest.importorskip("deepeval")
    from deepeval.dataset import EvaluationDataset, Golden

    def goldens(path):
        ds = EvaluationDataset()
        getattr(ds, f"add_goldens_from_{kind}_file")(str(path))
        return [g.model_dump() for g in ds.goldens]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.lists(_golden, min_size=1, max_size=3, unique_by=lambda r: r.get("name") or id(r)))
    def survive(rows):
        if kind == "csv" and any(_pandas_looks_missing_or_numeric(v) or "|" in v
                                 for r in rows for k, vs in r.items() if k != "additional_metadata"
                                 for v in (vs if isinstance(vs, list) else [vs])):
            return  # outside what DeepEval's own CSV round trip keeps (docs/formats.md)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(EvaluationDataset(goldens=[Golden(**r) for r in rows]).save_as(kind, tmp, "src"))
            cases = load_cases(src, "deepeval")
            before = goldens(src)
            for case, g in zip(cases, before):
                assert [c.text for c in case.contexts] == (g["retrieval_context"] or [])
                assert len({c.id for c in case.contexts}) == len(case.contexts)
            out = Path(tmp) / f"again.{kind}"
            assert write_cases(cases, out, "deepeval") == []
            after = goldens(out)
            for g, b, case in zip(after, before, cases):
                meta = g["additional_metadata"] or {}
                assert "ragbridge" not in meta  # DeepEval's own goldens need nothing of ragbridge's
                g["additional_metadata"] = meta or None
                b["additional_metadata"] = b["additional_metadata"] or None  # {} and none: both nothing
                if b["name"] is None and g["name"] == case.id:
                    g["name"] = None  # an input repeated in the file: its second golden is named
            assert after == before

    survive()


def test_deepeval_empty_retrieval_context_is_kept(tmp_path):
    src = tmp_path / "goldens.json"
    src.write_text(json.dumps([{"input": "q", "retrieval_context": [], "context": None}]), encoding="utf-8")
    out = tmp_path / "again.json"
    res = ragbridge_cli("convert", src, out, "--from", "deepeval", "--to", "deepeval")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(out.read_text())
    assert row["retrieval_context"] == [] and row["context"] is None  # "retrieved nothing" stays so


# ------------------------------------------------------------------------------------------------
# Files of the libraries, recognised by their fields (the command line, as users run it)


def _ragas_file(tmp_path) -> Path:
    from ragas.dataset_schema import EvaluationDataset

    path = tmp_path / "ragas.jsonl"
    EvaluationDataset.from_list([
        {"user_input": "Refund window?", "retrieved_contexts": ["Refunds within 14 days.", "Shipping."],
         "retrieved_context_ids": ["refunds", "shipping"], "reference_context_ids": ["refunds"],
         "response": "14 days.", "reference": "Within 14 days."}]).to_jsonl(path)
    return path


def test_run_on_a_file_ragas_wrote_detects_its_format(tmp_path):
    pytest.importorskip("ragas")
    path = _ragas_file(tmp_path)
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "--metric", "recall@5", "--no-progress")
    assert res.returncode == 0, res.stderr
    notes = [line for line in res.stderr.splitlines() if "read as format" in line]
    assert len(notes) == 1 and "'ragas'" in notes[0]
    (score,) = [json.loads(x) for x in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert score["metric"] == "recall@5" and score["value"] == 1.0


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv"])
def test_convert_detects_what_deepeval_wrote(tmp_path, kind):
    pytest.importorskip("deepeval")
    from deepeval.dataset import EvaluationDataset, Golden

    src = EvaluationDataset(goldens=[Golden(input="Refund window?", actual_output="14 days.",
                                            retrieval_context=["Refunds within 14 days."], name="r")]
                            ).save_as(kind, str(tmp_path), "goldens")
    res = ragbridge_cli("convert", src, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'deepeval'" in res.stderr
    (case,) = load_cases(tmp_path / "cases.jsonl")
    assert (case.id, case.answer, case.contexts[0].text) == ("r", "14 days.", "Refunds within 14 days.")


def test_convert_detects_a_trulens_table(tmp_path):
    src = tmp_path / "triad.csv"
    src.write_text("query,response,expected_response\nRefund window?,14 days.,Within 14 days.\n",
                   encoding="utf-8")
    res = ragbridge_cli("convert", src, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'trulens'" in res.stderr
    (case,) = load_cases(tmp_path / "cases.jsonl")
    assert (case.question, case.reference) == ("Refund window?", "Within 14 days.")


def test_ambiguous_fields_name_the_format_option_and_write_nothing(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"input": "q", "context": ["x"]}) + "\n", encoding="utf-8")
    target = tmp_path / "out.jsonl"
    res = ragbridge_cli("convert", src, target)
    assert res.returncode == 2
    assert "--format" in res.stderr and "deepeval" in res.stderr and "trulens" in res.stderr
    assert not target.exists()
    res = ragbridge_cli("convert", src, target, "--from", "deepeval")  # naming it settles it
    assert res.returncode == 0 and load_cases(target)[0].reference_contexts == ["x"]


def test_canonical_files_are_not_second_guessed(tmp_path):
    res = ragbridge_cli("convert", EXAMPLE, tmp_path / "cases.csv")
    assert res.returncode == 0 and res.stderr == ""
    res = ragbridge_cli("convert", tmp_path / "cases.csv", tmp_path / "cases.jsonl")
    assert res.returncode == 0 and res.stderr == ""
    src = tmp_path / "odd.jsonl"
    src.write_text(json.dumps({"question": "q", "answer_text": "a"}) + "\n", encoding="utf-8")
    res = ragbridge_cli("convert", src, tmp_path / "x.jsonl")
    assert res.returncode == 2 and "unknown field(s): answer_text" in res.stderr
    assert "name its format (see ragbridge formats)" in res.stderr


# ------------------------------------------------------------------------------------------------
# `ragbridge formats`: the data behind it, readable at 80 columns, and the docs


def test_formats_json_lists_what_each_format_cannot_hold():
    res = ragbridge_cli("formats", "--json")
    assert res.returncode == 0, res.stderr
    listed = {f["name"]: f for f in json.loads(res.stdout)["formats"]}
    registered = get_formats()
    assert set(listed) == set(registered)
    for name, f in registered.items():
        row = listed[name]
        assert row["cannot_hold"] == list(f.cannot_hold) and row["suffixes"] == list(f.suffixes)
        assert (row["read"], row["write"], row["folder"], row["recognised"]) == (
            f.read is not None, f.write is not None, f.is_dir, bool(f.fields))
        assert set(row) == {"name", "suffixes", "folder", "read", "write", "recognised", "description",
                            "cannot_hold", "resaved_by", "resave_drops"}
        assert row["resaved_by"] == f.resaved_by and row["resave_drops"] == list(f.resave_drops)
    assert listed["ragas"]["recognised"] and listed["csv"]["cannot_hold"] == ["answer (blank)",
                                                                              "reference (blank)"]


def test_formats_table_fits_80_columns_when_piped():
    res = ragbridge_cli("formats", env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert "\x1b[" not in res.stdout  # no colour codes when piped
    for name in get_formats():
        assert any(line.split()[:1] == [name] for line in lines), name
    assert "cannot hold:" in res.stdout and "holds every field" in res.stdout
    flat = " ".join(res.stdout.split())
    assert "after RAGAS's EvaluationDataset.from_jsonl and to_jsonl: loses id," in flat


def test_convert_warns_with_the_fields_it_cannot_hold(tmp_path):
    src = tmp_path / "cases.jsonl"
    src.write_text(json.dumps({"id": "e", "question": "q", "answer": ""}) + "\n", encoding="utf-8")
    res = ragbridge_cli("convert", src, tmp_path / "out.csv", "--to", "ragas-csv")
    assert res.returncode == 0
    warnings = warnings_in(res.stderr)
    assert len(warnings) == 2 and "cannot hold answer (empty);" in warnings[0]
    assert warnings[1].endswith("after RAGAS's EvaluationDataset.from_list (after pandas) and to_csv these "
                                "are lost: id (see ragbridge formats)")  # apart: the file holds the id


def test_readme_and_docs_name_every_format():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    docs = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    assert "docs/formats.md" in readme and "--json" in readme
    for name, f in get_formats().items():
        assert f"`{name}`" in readme, name
        assert f"`{name}`" in docs, name
        for lost in f.cannot_hold + f.resave_drops:
            assert lost.split(" (")[0] in docs, (name, lost)
        for lost in f.cannot_hold:
            assert lost in docs, (name, lost)
    assert "`ragbridge trulens-leaderboard RUN OUT.csv`" in readme


@pytest.mark.slow  # pandas writes and reads a struct of 6,000 fields: about 6 s
def test_a_parquet_column_of_dicts_as_pandas_writes_it_is_read_small_and_refused_with_the_fix_large(tmp_path):
    """pandas' to_parquet writes a column of dicts as a struct with a field per key of any row: labels
    keyed by chunk id make it rows x distinct ids cells (2,000 cases: 12 million, about 900 MB read)."""
    import pandas as pd

    def frame(n):
        return pd.DataFrame([{"id": f"q{i}", "question": f"question {i}",
                              "retrieved": [f"d{i}-{j}" for j in range(20)],
                              "relevant": {f"d{i}-{j}": 1 + j % 3 for j in (1, 7, 30)}} for i in range(n)])

    small = tmp_path / "small.parquet"
    frame(50).to_parquet(small)  # 150 fields: read as it is
    cases = load_cases(small)
    assert cases[3].relevant == {"d3-1": 2, "d3-7": 2, "d3-30": 1}
    big = frame(2000)
    big.to_parquet(tmp_path / "big.parquet")
    with pytest.raises(DatasetError) as err:
        load_cases(tmp_path / "big.parquet")
    message = str(err.value)
    assert "'relevant'" in message and "6,000 fields" in message and "json.dumps" in message
    # the fix the error gives, as a user applies it, reads the same labels
    big["relevant"] = big["relevant"].map(json.dumps)
    big.to_parquet(tmp_path / "fixed.parquet")
    fixed = load_cases(tmp_path / "fixed.parquet")
    assert len(fixed) == 2000 and fixed[1999].relevant == {"d1999-1": 2, "d1999-7": 2, "d1999-30": 1}
    res = ragbridge_cli("run", tmp_path / "big.parquet", "--backend", "native", "--out", tmp_path / "run")
    assert res.returncode == 2 and "big.parquet" in res.stderr and "relevant" in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_csv_of_numpy_arrays_as_pandas_prints_them_is_refused_not_read_as_one_joined_id(tmp_path):
    """pd.read_parquet gives a NumPy array for each list cell, and to_csv prints it with no commas
    (['a' 'b'\\n 'c']), which Python reads as one string: a silent wrong chunk list (hit@10 0 on every
    case). It is an error naming the cell's field and the fix; the fix reads the same cases."""
    import pandas as pd

    frame = pd.DataFrame([{"id": f"q{i}", "question": f"question {i}",
                           "retrieved": [f"kb/doc{j}.md#c{j}" for j in range(i, i + 12)],
                           "relevant": json.dumps({f"kb/doc{i + 1}.md#c{i + 1}": 1}), "tags": ["billing"]}
                          for i in range(30)])
    frame.to_parquet(tmp_path / "set.parquet")
    back = pd.read_parquet(tmp_path / "set.parquet")
    back.to_csv(tmp_path / "set.csv", index=False)
    assert "' '" in (tmp_path / "set.csv").read_text()  # the arrays as pandas prints them
    with pytest.raises(DatasetError) as err:
        load_cases(tmp_path / "set.csv")
    assert "side by side" in str(err.value) and ".map(list)" in str(err.value)
    assert err.value.field in ("retrieved", "tags")
    res = ragbridge_cli("run", tmp_path / "set.csv", "--backend", "native", "--out", tmp_path / "run")
    assert res.returncode == 2 and "side by side" in res.stderr and not (tmp_path / "run").exists()
    for col in ("retrieved", "tags"):  # the fix the error gives
        back[col] = back[col].map(list)
    back.to_csv(tmp_path / "fixed.csv", index=False)
    fixed = load_cases(tmp_path / "fixed.csv")
    assert [c.id for c in fixed[3].contexts][:2] == ["kb/doc3.md#c3", "kb/doc4.md#c4"]
    assert fixed[3].tags == ["billing"]


@pytest.mark.parametrize("long_score, long_meta", [(True, True), (False, False)])
def test_converting_a_large_golden_set_to_jsonl_writes_its_lines_and_says_what_pandas_rounds(
        tmp_path, long_score, long_meta):
    """A golden set read a batch at a time (JSONL, or a TREC run and its qrels) converts to JSONL (and
    the JSONL to CSV and Parquet) as the Python API writes it, byte for byte; a chunk score or a
    metadata number of more digits than pandas' to_json keeps, in the last batch, is named, and
    pandas' own re-save does lose it."""
    import pandas as pd

    from ragbridge.formats.source import BATCH_SIZE

    n = BATCH_SIZE * 2 + 7
    cases = [Case(id=f"q{i}", question=f"question {i}",
                  contexts=[Chunk(id=f"d{i}-{j}", text=f"text {j}", score=round(1 - j / 8, 3))
                            for j in range(4)],
                  relevant={f"d{i}-1": 2}, metadata={"cost": 0.25}) for i in range(n)]
    if long_score:
        cases[-2].contexts[1].score = 0.123456789012345
    if long_meta:
        cases[-1].metadata["cost"] = 1 / 3
    src = tmp_path / "golden.jsonl"
    write_cases(cases, src)
    trec = tmp_path / "run.trec"
    write_cases(cases, trec)
    for source in (src, trec) if long_score else (src,):  # the other formats once
        out = tmp_path / f"from-{source.suffix[1:]}.jsonl"
        res = ragbridge_cli("convert", source, out)
        assert res.returncode == 0, res.stderr
        expected = tmp_path / f"expected-{source.suffix[1:]}.jsonl"
        write_cases(load_cases(source), expected)
        assert out.read_bytes() == expected.read_bytes()
        assert out.stat().st_mode & 0o777 == expected.stat().st_mode & 0o777  # not a scratch file's 0600
        said = " ".join(res.stderr.split())
        if source == src:
            assert ("contexts.score (pandas' to_json keeps 10 digits)" in said) == long_score, said
            assert ("metadata (pandas' to_json keeps 10 digits)" in said) == long_meta, said
            assert ("are lost" in said) == (long_score or long_meta)
    for suffix in (".csv", ".parquet") if long_score else ():  # written a case at a time too, as the
        # Python API writes them
        res = ragbridge_cli("convert", src, tmp_path / f"out{suffix}")
        assert res.returncode == 0, res.stderr
        write_cases(load_cases(src), tmp_path / f"expected{suffix}")
        out, expected = tmp_path / f"out{suffix}", tmp_path / f"expected{suffix}"
        assert out.read_bytes() == expected.read_bytes()
        assert out.stat().st_mode & 0o777 == expected.stat().st_mode & 0o777
        assert load_cases(tmp_path / f"out{suffix}") == load_cases(src)
    # pandas' own load and re-save of the file
    frame = pd.read_json(tmp_path / "from-jsonl.jsonl", lines=True, dtype=False, precise_float=True)
    frame.to_json(tmp_path / "resaved.jsonl", orient="records", lines=True)
    back = load_cases(tmp_path / "resaved.jsonl")
    assert (back[-2].contexts[1].score != cases[-2].contexts[1].score) == long_score
    assert (back[-1].metadata["cost"] != cases[-1].metadata["cost"]) == long_meta
