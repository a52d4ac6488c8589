"""The TruLens backend against the stub judge: the triad + agreement, both endpoint paths, parity
with TruLens's own provider functions, TruLens's side effects and failures, and the formats. What
every backend keeps (registering without importing TruLens, errors as scores, no egress, ...) is the
backend contract's (tests/test_backend_contract.py)."""

from __future__ import annotations

import importlib.metadata
import json
import math
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest

try:  # checked from metadata: importing TruLens at collection would patch threading for every test
    importlib.metadata.version("trulens-providers-openai")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover
    pytest.skip("trulens-providers-openai is not installed", allow_module_level=True)

import ragbridge  # noqa: E402
from conftest import stub_judge_config  # noqa: E402
from ragbridge.backend import RunOptions  # noqa: E402
from ragbridge.formats import DatasetError, load_cases, write_cases  # noqa: E402
from ragbridge.schema import Case  # noqa: E402
from ragbridge.testing import StubJudge  # noqa: E402
from ragbridge.stub import responders  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"
METRICS = ("faithfulness", "context_relevance", "answer_relevance", "answer_correctness")
FLAWED = ("notifications-sms-cost", "claims-damage-deadline", "account-password-reset-link",
          "unanswerable-carbon-neutral")


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    all_cases = load_cases(EXAMPLE)
    faithful = [c for c in all_cases if not c.metadata.get("flaw") and c.answerable][:4]
    flawed = [c for c in all_cases if c.id in FLAWED]
    return faithful + flawed


@pytest.fixture(scope="module", autouse=True)
def _import_trulens():
    """Import TruLens once up front (5-10 s), so timings below measure scoring only."""
    import trulens.providers.openai  # noqa: F401
    from trulens.feedback import GroundTruthAgreement  # noqa: F401


def no_responses_api(stub: StubJudge) -> None:
    """Make a started stub answer ``POST /v1/responses`` with a plain 404, like most local servers.

    The request is re-routed to a path the stub does not serve (recorded as ``/responses-unavailable``)."""
    base = stub._server.RequestHandlerClass

    def do_POST(self):  # noqa: N802
        if self.path.partition("?")[0].rstrip("/") in ("/v1/responses", "/responses"):
            self.path = "/v1/responses-unavailable"
        base.do_POST(self)

    stub._server.RequestHandlerClass = type("NoResponsesApi", (base,), {"do_POST": do_POST})


def run_trulens(cases, stub, tmp_path, metrics=METRICS, **opts):
    return ragbridge.evaluate(cases, backends=["trulens"], metrics=list(metrics),
                              judge=stub_judge_config(stub, cache=tmp_path / "cache.sqlite"),
                              options=RunOptions(backend_options={"trulens": opts} if opts else {}))


def by_key(run):
    return {(s.case_id, s.metric): s for s in run.scores}


# --------------------------------------------------------------------------------------------
# Metrics


def test_metric_specs():
    from ragbridge.plugins import get_backends

    specs = {s.name: s for s in get_backends()["trulens"].metrics()}
    assert set(specs) == set(METRICS)
    assert all(s.judge for s in specs.values())
    assert specs["answer_correctness"].requires == ("question", "answer", "reference")
    assert specs["context_relevance"].requires == ("question", "context_text",)
    assert specs["faithfulness"].native_name == "groundedness_measure_with_cot_reasons"


# --------------------------------------------------------------------------------------------
# End to end, both endpoint families


def _check_run(run, cases, api):
    scores = by_key(run)
    assert len(scores) == len(cases) * len(METRICS)
    for s in scores.values():
        assert s.status == "scored", (s.case_id, s.metric, s.error)
        assert 0.0 <= s.value <= 1.0
        assert s.native_value["api"] == api
        assert s.judge_calls >= 1 and s.prompt_tokens > 0
        if s.metric != "answer_correctness":
            assert s.reason and "Supporting Evidence" in s.reason
    # context relevance keeps the per-chunk scores and aggregates them by the mean
    for c in cases:
        cr = scores[(c.id, "context_relevance")]
        per = [x["score"] for x in cr.native_value["per_chunk"]]
        assert [x["id"] for x in cr.native_value["per_chunk"]] == [ch.id for ch in c.contexts]
        assert cr.value == pytest.approx(sum(per) / len(per))
        assert cr.native_value["max"] == max(per)
        g = scores[(c.id, "faithfulness")]
        assert g.native_value["scale"] == [0, 3] and g.native_value["statements"]
    # the stub is lexical, but faithful answers must beat the flawed ones
    good = [scores[(c.id, "faithfulness")].value for c in cases if c.id not in FLAWED]
    bad = [scores[(c.id, "faithfulness")].value for c in cases if c.id in FLAWED]
    assert sum(good) / len(good) > sum(bad) / len(bad)
    good = [scores[(c.id, "answer_correctness")].value for c in cases if c.id not in FLAWED]
    bad = [scores[(c.id, "answer_correctness")].value for c in cases if c.id in FLAWED]
    assert sum(good) / len(good) > sum(bad) / len(bad)


def test_responses_api_path(cases, tmp_path):
    with StubJudge() as stub:
        run = run_trulens(cases, stub, tmp_path)
        paths = Counter(r.path for r in stub.posts())
    _check_run(run, cases, "responses")
    assert paths["/responses"] > len(cases) * 3
    assert run.manifest.counts["judge"]["errors"] == 0


def test_chat_only_server_uses_chat_completions_without_retry_loop(cases, tmp_path):
    with StubJudge() as stub:
        no_responses_api(stub)
        t0 = time.perf_counter()
        run = run_trulens(cases, stub, tmp_path)
        seconds = time.perf_counter() - t0
        paths = Counter(r.path for r in stub.posts())
    _check_run(run, cases, "chat")
    assert paths["/responses-unavailable"] == 1 and not paths["/responses"]  # the one probe, answered 404
    assert paths["/chat/completions"] > len(cases) * 3
    assert seconds < 12, f"took {seconds:.1f}s: TruLens's 2/4/8 s retry loop is back?"


def test_forced_chat_sends_nothing_to_responses(cases, tmp_path):
    with StubJudge() as stub:
        run = run_trulens(cases[:2], stub, tmp_path, api="chat")
        assert not stub.posts("/responses")
    assert all(s.status == "scored" and s.native_value["api"] == "chat" for s in run.scores)


def test_forced_responses_on_chat_only_server_fails_per_score_fast(cases, tmp_path):
    with StubJudge() as stub:
        no_responses_api(stub)
        t0 = time.perf_counter()
        run = run_trulens(cases[:2], stub, tmp_path, metrics=("answer_relevance",), api="responses")
        seconds = time.perf_counter() - t0
    assert [s.status for s in run.scores] == ["error", "error"]
    assert all("404" in s.error or "Not Found" in s.error for s in run.scores)
    assert seconds < 10  # TruLens's own loop would sleep 2 + 4 + 8 s


def test_context_relevance_max_option(cases, tmp_path):
    with StubJudge() as stub:
        run = run_trulens(cases[:3], stub, tmp_path, metrics=("context_relevance",),
                          context_relevance_agg="max")
    for s in run.scores:
        assert s.value == max(x["score"] for x in s.native_value["per_chunk"])
        assert s.native_value["agg"] == "max"


def test_other_scale_and_llm_sentence_split(cases, tmp_path):
    with StubJudge() as stub:
        run = run_trulens(cases[:2], stub, tmp_path, metrics=("faithfulness", "answer_relevance"),
                          max_score=10, sentence_split="llm")
        splits = [r for r in stub.posts("/chat/completions")
                  if "individual sentences" in json.dumps(r.body)]
    assert len(splits) == 2
    for s in run.scores:
        assert s.status == "scored" and s.native_value["scale"] == [0, 10]


def test_a_bad_option_stops_the_run_before_it_starts(cases, tmp_path):
    with StubJudge() as stub:
        with pytest.raises(ragbridge.RunError, match="trulens.api must be one of auto, responses, chat, "
                                                     "got 'grpc'"):
            run_trulens(cases[:2], stub, tmp_path, metrics=("answer_relevance",), api="grpc")
        assert not stub.requests


def test_no_statements_is_undefined(tmp_path):
    case = Case(id="no-sentences", question="How long is the refund window?", answer="1.",
                contexts=[{"id": "a", "text": "Refunds can be requested within 14 days."}])
    with StubJudge() as stub:
        [s] = run_trulens([case], stub, tmp_path, metrics=("faithfulness",)).scores
    assert s.status == "undefined" and s.error is None and s.reason


# --------------------------------------------------------------------------------------------
# -1 and faults: errors per score, never values


class _Unparsable:
    """Answers answer-relevance prompts with a score TruLens cannot read (it returns -1)."""

    name = "test-unparsable"

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self, req):
        if "RELEVANCE grader; evaluate how relevant the RESPONSE" in req.system and self.marker in req.user:
            return responders.JudgeReply(json.dumps({"criteria": "c", "supporting_evidence": "e",
                                                     "score": "n/a"}))
        return None


def test_unparsable_score_becomes_the_error(cases, tmp_path):
    target = cases[0]
    r = responders.register(_Unparsable(target.answer[:40]))
    try:
        with StubJudge() as stub:
            run = run_trulens(cases[:3], stub, tmp_path, metrics=("answer_relevance",), api="chat")
    finally:
        responders.unregister(r)
    s = by_key(run)
    bad = s[(target.id, "answer_relevance")]
    assert bad.value is None and bad.error.startswith("UnparsableScore")
    assert [s[(c.id, "answer_relevance")].status for c in cases[1:3]] == ["scored", "scored"]


def test_faults_fail_one_score_not_the_run(cases, tmp_path):
    with StubJudge() as stub:
        # transient faults are retried by the gateway; a malformed body fails that one call
        stub.inject("429", "500", "malformed")
        t0 = time.perf_counter()
        run = run_trulens(cases[:4], stub, tmp_path, metrics=("answer_relevance",), api="responses")
        seconds = time.perf_counter() - t0
    statuses = Counter(s.status for s in run.scores)
    assert statuses == {"scored": 3, "error": 1}, [(s.case_id, s.error) for s in run.scores]
    assert run.manifest.counts["judge"]["retries"] >= 2
    assert seconds < 12


# --------------------------------------------------------------------------------------------
# Parity: the same case and judge give TruLens's own result


def _direct(provider, case, metric):
    from trulens.core.feedback.feedback import GroundednessConfigs
    from trulens.feedback import GroundTruthAgreement

    if metric == "faithfulness":
        return provider.groundedness_measure_with_cot_reasons(
            source="\n\n".join(c.text for c in case.contexts), statement=case.answer,
            groundedness_configs=GroundednessConfigs(use_sent_tokenize=True,
                                                     filter_trivial_statements=False))[0]
    if metric == "context_relevance":
        vals = [provider.context_relevance_with_cot_reasons(case.question, c.text)[0] for c in case.contexts]
        return sum(vals) / len(vals)
    if metric == "answer_relevance":
        return provider.relevance_with_cot_reasons(case.question, case.answer)[0]
    gta = GroundTruthAgreement([{"query": case.question, "expected_response": case.reference}],
                               provider=provider)
    return gta.agreement_measure(case.question, case.answer)[0]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_parity_with_trulens_provider_functions(cases, tmp_path, api):
    import openai
    from trulens.providers.openai import OpenAI

    from ragbridge_trulens.env import offline_sentence_splitter

    with StubJudge() as stub:
        if api == "chat":
            no_responses_api(stub)
        run = run_trulens(cases, stub, tmp_path)
        offline_sentence_splitter()  # TruLens's default nltk split, minus the download
        provider = OpenAI(model_engine="stub-judge", rpm=10**9,
                          client=openai.OpenAI(base_url=stub.base_url, api_key="sk-test", max_retries=0))
        provider.clear_capabilities_cache()
        if api == "chat":
            provider._set_capabilities({"responses_api": False, "structured_outputs": False})
        scores = by_key(run)
        checked = 0
        for case in cases:
            for metric in METRICS:
                expected = _direct(provider, case, metric)
                got = scores[(case.id, metric)]
                assert got.value == pytest.approx(expected, abs=1e-12), (case.id, metric, got.error)
                checked += 1
    assert checked == len(cases) * 4


# --------------------------------------------------------------------------------------------
# TruLens's side effects


def test_runs_no_eval_filter_downloads_nothing_and_writes_no_database(cases, tmp_path, monkeypatch):
    """TruLens's own side effects (the backend contract checks the hosts a run talks to): no nltk
    download, no statement filter call, no database of its own."""
    import nltk

    downloads = []
    monkeypatch.setattr(nltk, "download", lambda *a, **k: downloads.append(a) or False)
    monkeypatch.chdir(tmp_path)
    with StubJudge() as stub:
        run = run_trulens(cases[:3], stub, tmp_path, metrics=("faithfulness",))
        bodies = [json.dumps(r.body) for r in stub.posts()]
    assert all(s.status == "scored" for s in run.scores)
    assert downloads == []  # TruLens's nltk.download("punkt_tab") never ran
    assert not any("Identify and remove sentences that are stylistic" in b for b in bodies)
    # the only databases are ragbridge's judge cache and its score cache: TruLens wrote none of its own
    assert {p.name for p in tmp_path.glob("*.sqlite")} <= {"cache.sqlite", "cache.scores.sqlite"}
    assert not (tmp_path / "default.sqlite").exists()


# --------------------------------------------------------------------------------------------
# Formats


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_trulens_format_round_trip(tmp_path, suffix):
    original = load_cases(EXAMPLE)
    path = tmp_path / f"triad{suffix}"
    lost = write_cases(original, path, format="trulens")
    assert lost == []
    back = load_cases(path, format="trulens")
    assert [c.model_dump() for c in back] == [c.model_dump() for c in original]


def test_trulens_rows_use_trulens_columns(tmp_path):
    from ragbridge_trulens.formats import cases_from_frame, cases_to_frame

    original = load_cases(EXAMPLE)[:5]
    df = cases_to_frame(original)
    assert {"query_id", "query", "response", "contexts", "expected_response", "meta"} <= set(df.columns)
    assert isinstance(df.loc[0, "contexts"], list) and isinstance(df.loc[0, "contexts"][0], str)
    assert [c.model_dump() for c in cases_from_frame(df)] == [c.model_dump() for c in original]


def test_plain_trulens_table_reads(tmp_path):
    import pandas as pd

    from ragbridge_trulens.formats import cases_from_frame

    df = pd.DataFrame([
        {"query": "Who wrote Moby-Dick?", "response": "Herman Melville.",
         "contexts": ["Moby-Dick is an 1851 novel by Herman Melville.", "Whales are mammals."],
         "expected_response": "Herman Melville",
         "expected_chunks": [{"text": "by Herman Melville", "expect_score": 1}],
         "meta": {"source": "lit"}},
    ])
    (case,) = cases_from_frame(df)
    assert case.question == "Who wrote Moby-Dick?" and case.answer == "Herman Melville."
    assert ([c.text for c in case.contexts][1] == "Whales are mammals."
            and case.contexts[0].id.startswith("ctx-"))
    assert case.reference == "Herman Melville" and case.reference_contexts == ["by Herman Melville"]
    assert case.metadata == {"source": "lit"}


def test_bad_trulens_rows_are_reported(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"query": "q1", "response": "a"}\n{"query": "q2", "contexts": 5}\n', encoding="utf-8")
    with pytest.raises(DatasetError) as e:
        load_cases(p, format="trulens")
    assert e.value.line == 2 and e.value.field == "contexts"
    p.write_text('{"query": "q1", "answer_text": "a"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match="unknown column"):
        load_cases(p, format="trulens")


def test_leaderboard_layout_and_round_trip(cases, tmp_path):
    import pandas as pd

    from ragbridge_trulens.leaderboard import leaderboard, records, write_leaderboard

    with StubJudge() as stub:
        run = ragbridge.evaluate(cases[:4], backends=["trulens", "native"],
                                 judge=stub_judge_config(stub, cache=tmp_path / "cache.sqlite"),
                                 out=tmp_path / "run")
    run = ragbridge.load_run(tmp_path / "run")
    lb = leaderboard(run)
    assert list(lb.index.names) == ["app_name", "app_version"]
    assert list(lb.columns) == ["Answer Relevance", "Context Relevance", "Ground Truth Agreement",
                                "Groundedness", "latency", "total_cost"]
    for metric, col in (("faithfulness", "Groundedness"), ("context_relevance", "Context Relevance")):
        vals = [s.value for s in run.scores if s.backend == "trulens" and s.metric == metric]
        assert lb.loc[("ragbridge", "trulens"), col] == pytest.approx(sum(vals) / len(vals))
    rec = records(run)
    assert len(rec) == 4 and {"record_id", "input", "output", "Groundedness",
                              "total_tokens"} <= set(rec.columns)
    out = write_leaderboard(run, tmp_path / "lb.csv")
    back = pd.read_csv(out).set_index(["app_name", "app_version"])
    pd.testing.assert_frame_equal(back, lb, check_dtype=False)
    both = leaderboard(run, backend=None)
    assert set(both.index.get_level_values("app_version")) == {"trulens", "native"}
    assert not any(math.isnan(v) for v in lb.iloc[0].tolist()[:-1])
    # the same from the command line
    from conftest import ragbridge_cli

    r = ragbridge_cli("trulens-leaderboard", tmp_path / "run", tmp_path / "lb-cli.csv")
    assert r.returncode == 0, r.stderr
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "lb-cli.csv"), pd.read_csv(out))


def test_leaderboard_cost_is_the_runs_cost_or_unknown(cases, tmp_path):
    """``total_cost`` is what the run's judge calls cost by its price table; where the judge model has
    no price the run's cost is unknown (null in run.json), and so is ``total_cost``: NaN, an empty
    CSV cell, JSON null, never 0.0. A backend that called no judge costs 0."""
    import pandas as pd

    from conftest import ragbridge_cli, warnings_in
    from ragbridge_trulens.leaderboard import leaderboard, records

    with StubJudge() as stub:
        for name, prices in (("unpriced", {}), ("priced", {"stub-judge": {"input": 1.0, "output": 2.0}})):
            ragbridge.evaluate(cases[:3], backends=["trulens", "native"], metrics=["faithfulness", "mrr"],
                               judge=stub_judge_config(stub, prices=prices), out=tmp_path / name)
    unpriced, priced = (ragbridge.load_run(tmp_path / n) for n in ("unpriced", "priced"))
    assert unpriced.manifest.counts["cost"]["total"] is None
    total = priced.manifest.counts["cost"]["by_backend"]["trulens"]  # the cost of its scores
    assert total > 0
    with pytest.warns(UserWarning, match=r"total_cost is unknown .* for trulens: 'stub-judge' has no price "
                                         r"in the judge's price table"):
        assert math.isnan(leaderboard(unpriced).loc[("ragbridge", "trulens"), "total_cost"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known cost, and a backend that called no judge: no word
        leaderboard(priced), leaderboard(unpriced, backend="native")
    assert leaderboard(priced).loc[("ragbridge", "trulens"), "total_cost"] == pytest.approx(total / 3)
    assert records(priced)["total_cost"].sum() == pytest.approx(total)
    assert leaderboard(unpriced, backend="native").loc[("ragbridge", "native"), "total_cost"] == 0.0
    for suffix in ("csv", "json"):
        out = tmp_path / f"lb.{suffix}"
        r = ragbridge_cli("trulens-leaderboard", tmp_path / "unpriced", out, env={"COLUMNS": "80"})
        assert r.returncode == 0, r.stderr
        said = warnings_in(r.stderr)
        assert len(said) == 1 and "'stub-judge' has no price" in said[0]
        assert '[judge.prices."stub-judge"]' in said[0]
        assert max(map(len, r.stderr.splitlines())) <= 80
        if suffix == "csv":
            assert math.isnan(pd.read_csv(out)["total_cost"].iloc[0])
            assert out.read_text().splitlines()[1].endswith(",")  # the cell is empty, not 0.0
        else:
            assert json.loads(out.read_text())[0]["total_cost"] is None


# --------------------------------------------------------------------------------------------
# The stub's TruLens answers (ragbridge_trulens.stub)


def test_stub_agreement_and_splitter_answers():
    from ragbridge.stub.responders import JudgeRequest, respond
    from ragbridge_trulens.stub import agreement_score

    assert agreement_score("Refunds are possible within 14 days.", "Within 14 days of the charge.") > \
        agreement_score("Refunds are possible within 30 days.", "Within 14 days of the charge.")
    assert agreement_score("", "anything") == 0
    split = respond(JudgeRequest.from_chat({"model": "m", "messages": [
        {"role": "system", "content": "Split the following statement into individual sentences:\n\n"
                                      "Statement: {statement}\n\nReturn each sentence on a new line."},
        {"role": "user", "content": "Refunds take 14 days. Labels can be voided."}]}))
    assert split.content.split("\n") == ["Refunds take 14 days.", "Labels can be voided."]
    reformat = respond(JudgeRequest.from_chat({"model": "m", "messages": [
        {"role": "system", "content": 'Convert the following text into a strict JSON object with keys '
                                      '"criteria", "supporting_evidence", and "score" (integer).'},
        {"role": "user", "content": "Criteria: c\nSupporting Evidence: e\nScore: 2"}]}))
    assert json.loads(reformat.content) == {"criteria": "c", "supporting_evidence": "e", "score": 2}


_STORE_PARQUET = """
import sys
import pandas as pd
import pyarrow.parquet as pq
from trulens.core import TruSession
from trulens.core.database.connector.default import DefaultDBConnector
frame = pd.DataFrame(pq.read_table(sys.argv[1]).to_pylist())  # lists as lists: TruLens takes no arrays
session = TruSession(connector=DefaultDBConnector(database_url="sqlite:///" + sys.argv[2]))
session.add_ground_truth_to_dataset("golden", frame, dataset_metadata={"domain": "support"})
session.get_ground_truth("golden").to_pickle(sys.argv[3])
"""


def test_the_parquet_export_goes_into_trulens_own_store(tmp_path):
    """``meta`` is a struct, as TruLens's own tables hold it, so ``add_ground_truth_to_dataset`` takes
    the rows (it refused the JSON text of before: "meta: Input should be a valid dictionary"). Rows
    whose metadata cannot share one struct type (a number here, a text there) hold that key as JSON
    text; a row without metadata gets nulls; ragbridge reads its file back exactly."""
    import pandas as pd
    import pyarrow.parquet as pq

    cases = load_cases(EXAMPLE)[:4]
    cases[0].metadata.update(n=1, nested={"a": 1})
    cases[1].metadata.update(n="one", nested={"b": [1, 2]})
    cases[2].metadata.clear()
    write_cases(cases, tmp_path / "in.jsonl")
    path = tmp_path / "triad.parquet"
    res = subprocess.run([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                          "convert", str(tmp_path / "in.jsonl"), str(path), "--to", "trulens"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "cannot hold" not in res.stderr, res.stderr
    schema = pq.read_schema(path)
    assert str(schema.field("meta").type).startswith("struct<")
    assert sorted(json.loads(schema.metadata[b"ragbridge.meta_json"])) == ["n", "ragbridge"]
    assert load_cases(path, "trulens") == cases

    subprocess.run([sys.executable, "-c", _STORE_PARQUET, str(path), str(tmp_path / "t.sqlite"),
                    str(tmp_path / "stored.pkl")], check=True, capture_output=True, timeout=300, cwd=tmp_path)
    stored = pd.read_pickle(tmp_path / "stored.pkl")
    assert stored["query_id"].tolist() == [c.id for c in cases]
    for meta, case in zip(stored["meta"], cases):
        present = {k: v for k, v in meta.items() if v is not None}  # a struct's null: a key the row lacks
        present.pop("ragbridge", None)
        if "n" in present:
            present["n"] = json.loads(present["n"])  # held as JSON text: the rows' values differ in type
        if "nested" in present:
            present["nested"] = {k: v for k, v in present["nested"].items() if v is not None}
        assert present == case.metadata
    # and ragbridge reads TruLens's stored ground truth: every field but the app's outputs
    back = load_cases(stored)
    assert [c.relevant for c in back] == [c.relevant for c in cases]
    assert [c.reference for c in back] == [c.reference for c in cases]


def test_a_null_in_metadata_is_named_as_lost_in_parquet(tmp_path):
    case = load_cases(EXAMPLE)[0]
    case.metadata["note"] = None
    lost = write_cases([case], tmp_path / "t.parquet", format="trulens")
    assert lost == ["metadata (a null value, Parquet)"]
    assert write_cases([case], tmp_path / "t.jsonl", format="trulens") == []
    assert "note" not in load_cases(tmp_path / "t.parquet", "trulens")[0].metadata
