"""The RAGAS backend: its metrics, scoring through the judge gateway, parity with RAGAS called
directly, NaN and RAGAS' own failures per score, embeddings, and dataset translation both ways. What
every backend keeps (registering without importing RAGAS, errors as scores, no egress, ...) is the
backend contract's (tests/test_backend_contract.py).

Every judge call goes to the deterministic stub judge on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap

import pytest

from conftest import needs_library  # noqa: E402

pytestmark = needs_library("ragas")

from conftest import EXAMPLE, ragbridge_cli, stub_judge_config  # noqa: E402
from ragbridge import Case, evaluate, load_cases  # noqa: E402
from ragbridge.formats import DatasetError, write_cases  # noqa: E402
from ragbridge.testing import StubJudge  # noqa: E402

import ragbridge_ragas  # noqa: E402
from ragbridge_ragas import from_ragas, to_ragas  # noqa: E402
from ragbridge_ragas.metrics import METRICS  # noqa: E402
from ragbridge_ragas.translate import normalise  # noqa: E402

ALL = ["faithfulness", "answer_relevance", "context_precision", "context_recall", "context_relevance",
       "answer_correctness"]
NATIVE = {"faithfulness": "faithfulness", "answer_relevance": "answer_relevancy",
          "context_precision": "context_precision_with_reference", "context_recall": "context_recall",
          "context_relevance": "context_relevance", "answer_correctness": "factual_correctness(mode=f1)"}
PICK = ["billing-refund-window", "api-429-retry", "notifications-sms-cost", "claims-damage-deadline",
        "privacy-address-book-json"]
FLAWED = {"notifications-sms-cost", "claims-damage-deadline", "privacy-address-book-json"}


def extra_cases():
    ctx = [{"id": "c1", "text": "Refunds are processed within 5 business days."}]
    return [
        # nothing RAGAS can split into statements: faithfulness and context_recall are NaN
        Case(id="no-statements", question="How fast are refunds processed?", answer="...",
             reference="...", contexts=ctx),
    ]


@pytest.fixture(scope="module", autouse=True)
def _ragas_user_dir(tmp_path_factory):
    """RAGAS writes an anonymous id file under the user's data dir even with tracking off: keep the
    tests' out of the real home."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old


@pytest.fixture(scope="module")
def example():
    return load_cases(EXAMPLE)


@pytest.fixture(scope="module")
def scored(example, tmp_path_factory):
    """One run of every RAGAS metric over five example cases and an edge case."""
    cases = [c for c in example if c.id in PICK] + extra_cases()
    out = tmp_path_factory.mktemp("ragas-run") / "run"
    with StubJudge() as stub:
        run = evaluate(cases, backends=["ragas"], out=out,
                       judge=stub_judge_config(stub, embedding_model="stub-embedder"))
        requests = stub.posts()
    return cases, run, requests, out


def by(run):
    return {(s.case_id, s.metric): s for s in run.scores}


# --------------------------------------------------------------------------------------------
# the extra, the pins and the metrics


def test_ragas_extra_and_constraints_pin_a_working_set():
    import tomllib

    root = EXAMPLE.parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ragas"]
    # a range of the versions the plugin supports; 0.4.2 of langchain-community breaks `import ragas`
    assert "ragas>=0.2.15,<0.5" in extra and "langchain-community!=0.4.2" in extra
    pins = {line.split("==")[0].lower(): line.split("==")[1].split()[0]
            for line in (root / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    assert pins["ragas"] == "0.4.3" and pins["langchain-community"] == "0.4.1"
    # instructor 1.13 pulls openai 2
    assert pins["instructor"] == "1.12.0" and pins["openai"].startswith("1.")


def test_metric_specs():
    specs = {s.name: s for s in ragbridge_ragas.RagasBackend().metrics()}
    assert set(specs) == set(ALL) == set(METRICS)
    assert all(s.judge for s in specs.values())
    assert {k: s.native_name for k, s in specs.items()} == NATIVE
    assert specs["context_precision"].requires == ("question", "reference", "context_text")
    assert specs["answer_correctness"].requires == ("question", "answer", "reference")
    assert specs["answer_relevance"].requires == ("question", "answer",)


# --------------------------------------------------------------------------------------------
# scoring


def test_every_metric_scored_per_case(scored):
    cases, run, _, out = scored
    got = by(run)
    assert len(run.scores) == len(cases) * len(ALL)
    for cid in PICK:
        for m in ALL:
            s = got[(cid, m)]
            assert s.error is None, s.error
            assert s.backend == "ragas" and s.native_metric == NATIVE[m]
            assert 0.0 <= s.value <= 1.0
            assert s.value == normalise(s.native_value)
            assert s.judge_calls >= 1 and s.prompt_tokens > 0  # attributed to this case by the gateway
    # the run folder holds them, with the judge's totals
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["backends"]["ragas"] == "0.4.3"
    assert manifest["counts"]["judge"]["calls"] > 0 and manifest["counts"]["errored"] == 0
    assert len((out / "scores.jsonl").read_text().splitlines()) == len(run.scores)


def test_faithful_beats_flawed(scored):
    _, run, _, _ = scored
    got = by(run)
    ok = min(got[(c, "faithfulness")].value for c in PICK if c not in FLAWED)
    assert ok > max(got[(c, "faithfulness")].value for c in FLAWED)
    for m in ("answer_correctness", "context_recall"):
        mean = lambda ids: sum(got[(c, m)].value for c in ids) / len(ids)  # noqa: E731
        assert mean([c for c in PICK if c not in FLAWED]) > mean(FLAWED), m
    assert got[("notifications-sms-cost", "faithfulness")].value < 1.0  # the invented SMS allowance


def test_no_statements_is_undefined_not_zero(scored):
    _, run, _, _ = scored
    got = by(run)
    for m in ("faithfulness", "context_recall"):
        s = got[("no-statements", m)]
        assert s.value is None and s.error is None, (m, s)
        assert s.native_value is None and "NaN" in s.reason and "statements" in s.reason
        assert s.judge_calls >= 1  # RAGAS was asked; it found nothing to judge
    assert run.manifest.counts["undefined"] >= 2


def test_normalise():
    assert normalise(0.9999999999) == 1.0 and normalise(0.99999999995) == 1.0
    assert normalise(1 / 3) == pytest.approx(1 / 3, abs=1e-9)
    assert normalise(-0.2) == 0.0 and normalise(float("nan")) is None


# --------------------------------------------------------------------------------------------
# parity with RAGAS called directly


async def _direct(base_url, cases):
    """RAGAS as a user calls it: llm_factory on an AsyncOpenAI client, ascore per case."""
    from openai import AsyncOpenAI
    from ragas.embeddings import OpenAIEmbeddings
    from ragas.llms import llm_factory
    from ragas.metrics.collections import (AnswerRelevancy, ContextPrecisionWithReference, ContextRecall,
                                           ContextRelevance, FactualCorrectness, Faithfulness)

    client = AsyncOpenAI(base_url=base_url, api_key="direct")
    llm = llm_factory("stub-judge", client=client)
    emb = OpenAIEmbeddings(client=client, model="stub-embedder")
    metrics = {
        "faithfulness": (Faithfulness(llm=llm),
                         lambda c: dict(user_input=c.question, response=c.answer,
                                        retrieved_contexts=[x.text for x in c.contexts])),
        "answer_relevance": (AnswerRelevancy(llm=llm, embeddings=emb),
                             lambda c: dict(user_input=c.question, response=c.answer)),
        "context_precision": (ContextPrecisionWithReference(llm=llm),
                              lambda c: dict(user_input=c.question, reference=c.reference,
                                             retrieved_contexts=[x.text for x in c.contexts])),
        "context_recall": (ContextRecall(llm=llm),
                           lambda c: dict(user_input=c.question, reference=c.reference,
                                          retrieved_contexts=[x.text for x in c.contexts])),
        "context_relevance": (ContextRelevance(llm=llm), lambda c: dict(
            user_input=c.question, retrieved_contexts=[x.text for x in c.contexts])),
        "answer_correctness": (FactualCorrectness(llm=llm),
                               lambda c: dict(response=c.answer, reference=c.reference)),
    }
    out = {}
    for name, (metric, inputs) in metrics.items():
        for c in cases:
            out[(c.id, name)] = (await metric.ascore(**inputs(c))).value
    await client.close()
    return out


def test_parity_with_ragas_called_directly(scored):
    cases, run, _, _ = scored
    picked = [c for c in cases if c.id in PICK]
    with StubJudge() as stub:
        direct = asyncio.run(_direct(stub.base_url, picked))
    got = by(run)
    for (cid, m), raw in direct.items():
        s = got[(cid, m)]
        assert s.native_value == raw, (cid, m, s.native_value, raw)
        assert s.value == normalise(raw)
    assert len(direct) == len(PICK) * len(ALL)
    assert len({v for v in direct.values()}) > 5  # not one constant everywhere


# --------------------------------------------------------------------------------------------
# what reaches the judge


def test_requests_embeddings_and_max_tokens(scored):
    _, _, requests, out = scored
    chats = [r.body for r in requests if r.path == "/chat/completions"]
    embeds = [r.body for r in requests if r.path == "/embeddings"]
    assert chats and all(b["max_tokens"] == 4096 for b in chats)  # not RAGAS' 1024
    assert all(b["model"] == "stub-judge" and b["response_format"] == {"type": "json_object"} for b in chats)
    assert embeds and all(b["model"] == "stub-embedder" for b in embeds)
    assert all(isinstance(b["input"], (str, list))
               and not (isinstance(b["input"], list) and b["input"] and isinstance(b["input"][0], int))
               for b in embeds)
    audit = [json.loads(line) for line in (out / "judge-audit.jsonl").read_text().splitlines()]
    paths = {a["path"] for a in audit if a["backend"] == "ragas" and a["metric"] == "answer_relevance"}
    assert paths == {"/chat/completions", "/embeddings"}  # embeddings went through the gateway too
    assert all(a["case_id"] for a in audit)


def test_max_tokens_from_config():
    case = Case(id="c", question="What is the refund window?", answer="14 days.",
                contexts=[{"id": "a", "text": "Refunds within 14 days."}], reference="14 days.")
    with StubJudge() as stub:
        evaluate([case], backends=["ragas"], metrics=["context_recall"],
                 judge=stub_judge_config(stub, embedding_model="stub-embedder", max_tokens=12000))
        assert [r.body["max_tokens"] for r in stub.posts("/chat/completions")] == [12000]


def _one_metric_run(stub, cases, metric, **cfg):
    return evaluate(cases, backends=["ragas"], metrics=[metric],
                    judge=stub_judge_config(stub, embedding_model="stub-embedder", **cfg))


def test_parse_failure_after_retries_is_an_error(example):
    cases = [c for c in example if c.id in PICK[:1]]
    with StubJudge(fault_rate_malformed=1.0) as stub:
        run = _one_metric_run(stub, cases, "faithfulness")
        n = stub.request_count
    s = run.scores[0]
    assert s.value is None and "InstructorRetryException" in s.error
    assert n == 3  # instructor re-asked twice (3 attempts), then RAGAS gave up on the first step


def test_parse_retries_are_per_call_under_concurrency(example):
    """Each concurrent case gets its own 3 attempts (a retry policy shared between calls would not)."""
    cases = [c for c in example if c.id in PICK]
    with StubJudge(fault_rate_malformed=1.0) as stub:
        run = _one_metric_run(stub, cases, "faithfulness", max_concurrency=8)
        n = stub.request_count
    assert all(s.value is None and "InstructorRetryException" in s.error for s in run.scores)
    assert n == 3 * len(cases)


def test_timeout_is_an_error(example):
    cases = [c for c in example if c.id in PICK[:1]]
    with StubJudge(fault_rate_timeout=1.0, timeout_seconds=5) as stub:
        run = _one_metric_run(stub, cases, "context_recall", timeout=0.3, max_retries=0)
        assert stub.request_count == 1  # no second attempt from the SDK or instructor
    s = run.scores[0]
    assert s.value is None and "timed out" in s.error


def test_swallowed_judge_errors_are_reported(example):
    """ContextRelevance catches judge errors itself and returns NaN: that is still an error."""
    cases = [c for c in example if c.id in PICK[:1]]
    with StubJudge(fault_rate_500=1.0) as stub:
        run = _one_metric_run(stub, cases, "context_relevance", max_retries=0)
    s = run.scores[0]
    assert s.value is None and s.error and "500" in s.error and "NaN" in s.reason


# --------------------------------------------------------------------------------------------
# privacy outside a run


def test_converting_before_a_run_keeps_the_runs_privacy_defaults(tmp_path):
    """``to_ragas`` imports RAGAS outside any run, so without the backend's environment: it makes no
    tracked call, and RAGAS reads RAGAS_DO_NOT_TRACK only in the run that follows, where the backend
    has set it. No analytics lookup, no id file in the home folder, nothing left set after the run."""
    code = textwrap.dedent(f"""
        import json, os, socket
        seen = []
        real = socket.getaddrinfo
        socket.getaddrinfo = lambda host, *a, **k: (seen.append(host), real(host, *a, **k))[1]
        import ragbridge
        from ragbridge.judge import JudgeConfig
        from ragbridge.testing import StubJudge
        from ragbridge_ragas import to_ragas
        cases = ragbridge.load_cases({str(EXAMPLE)!r})[:2]
        dataset, _ = to_ragas(cases)
        with StubJudge() as stub:
            run = ragbridge.evaluate(cases, backends=["ragas"], metrics=["faithfulness"],
                                     judge=JudgeConfig(model="stub-judge", base_url=stub.base_url,
                                                       cache_mode="off", api_key_env="RAGBRIDGE_TEST_KEY"))
        print(json.dumps({{"samples": len(dataset.samples), "scored": [s.status for s in run.scores],
                          "hosts": sorted(set(seen)), "left_set": os.environ.get("RAGAS_DO_NOT_TRACK")}}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAGAS_DO_NOT_TRACK"}
    env["HOME"] = str(tmp_path / "home")
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["samples"] == 2 and out["scored"] == ["scored", "scored"]
    assert set(out["hosts"]) <= {"127.0.0.1", "localhost"}, out["hosts"]
    assert out["left_set"] is None
    assert not [p for p in (tmp_path / "home").rglob("*") if p.is_file()]


# --------------------------------------------------------------------------------------------
# datasets


def test_round_trip_is_lossless_and_ragas_reads_it(tmp_path, example):
    path = tmp_path / "ragas.jsonl"
    assert write_cases(example, path, "ragas") == []  # what RAGAS has no field for is in the ragbridge column
    from ragas.dataset_schema import EvaluationDataset

    ds = EvaluationDataset.from_jsonl(path)  # RAGAS itself reads what was written (and ignores the column)
    assert len(ds) == len(example) and ds[0].user_input == example[0].question
    for line in path.read_text().splitlines():
        assert set(json.loads(line)) <= set(ragbridge_ragas.translate.RAGAS_FIELDS) | {"ragbridge"}
    assert load_cases(path, "ragas") == example


def test_lossless_when_nothing_is_outside_ragas(tmp_path):
    from ragbridge.formats.records import case_id_for_question

    q = "How do I reset my password?"
    case = Case(id=case_id_for_question(q), question=q, answer="Use the link.",
                contexts=[{"id": "a#1", "text": "Reset links last 60 minutes."}], relevant=["a#1"],
                reference="Use the reset link.", metadata={"ragas": {"persona_name": "admin"}})
    assert write_cases([case], tmp_path / "x.jsonl", "ragas") == []
    assert load_cases(tmp_path / "x.jsonl", "ragas") == [case]
    row = json.loads((tmp_path / "x.jsonl").read_text())
    assert row["persona_name"] == "admin" and "ragbridge" not in row  # nothing needs the column


def test_hf_folder_round_trip(tmp_path, example):
    folder = tmp_path / "hf"
    assert write_cases(example[:5], folder, "ragas-hf") == []
    from datasets import load_from_disk
    from ragas.dataset_schema import EvaluationDataset

    assert len(EvaluationDataset.from_hf_dataset(load_from_disk(str(folder)))) == 5
    assert load_cases(folder, "ragas-hf") == example[:5]


def test_python_api_evaluation_dataset_both_ways(example):
    ds, lost = to_ragas(example)
    assert type(ds).__name__ == "EvaluationDataset" and len(ds) == len(example) and "tags" in lost
    back = from_ragas(ds)
    assert [c.answer for c in back] == [c.answer for c in example]
    assert from_ragas(ds.to_hf_dataset())[3].reference == example[3].reference
    assert from_ragas(ds.to_pandas())[4].contexts == back[4].contexts


def test_legacy_columns_from_pandas_and_hf():
    import datasets
    import pandas as pd

    frame = pd.DataFrame({
        "question": ["What is the refund window?", "Do you ship to Mars?"],
        "contexts": [["Refunds within 14 days."], ["We ship to 40 countries."]],
        "answer": ["14 days.", "No."],
        "ground_truth": ["Within 14 days.", None],  # a missing cell (NaN in pandas 3)
    })
    cases = from_ragas(frame)
    assert cases[0].question == "What is the refund window?" and cases[0].answer == "14 days."
    assert cases[0].contexts[0].text == "Refunds within 14 days." and cases[0].reference == "Within 14 days."
    assert cases[1].reference is None
    hf = datasets.Dataset.from_pandas(frame)
    assert [c.model_dump() for c in from_ragas(hf)] == [c.model_dump() for c in cases]


def test_cli_convert_to_ragas_and_back_by_its_fields(tmp_path):
    target = tmp_path / "out.jsonl"
    res = ragbridge_cli("convert", EXAMPLE, target, "--to", "ragas")
    assert res.returncode == 0, res.stderr
    assert "cannot hold" not in res.stderr  # the file loses nothing; RAGAS's own re-save would:
    assert "after RAGAS's EvaluationDataset.from_jsonl and to_jsonl these are lost: answerable," in res.stderr
    first = json.loads(target.read_text().splitlines()[0])
    assert "user_input" in first and first["retrieved_context_ids"][0] == "refunds.md#window"  # the label
    back = tmp_path / "back.jsonl"
    res = ragbridge_cli("convert", target, back)  # no --from: RAGAS's fields tell the format
    assert res.returncode == 0, res.stderr
    assert "read as format 'ragas'" in res.stderr
    assert load_cases(back) == load_cases(EXAMPLE)


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"response": "x"}', "user_input"),
        ('{"user_input": [{"content": "hi", "type": "human"}]}', "user_input"),
        ('{"user_input": "q", "retrieved_contexts": ["a", "b"], "retrieved_context_ids": ["1"]}',
         "retrieved_context_ids"),
        ('{"question": "q", "user_input": "q"}', "question"),
    ],
)
def test_bad_ragas_rows_are_reported_with_location(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"user_input": "fine"}\n\n' + line + "\n")
    with pytest.raises(DatasetError) as info:
        load_cases(path, "ragas")
    assert info.value.line == 3 and info.value.field == field and str(path) in str(info.value)


def test_reads_what_ragas_to_csv_writes(tmp_path, example):
    """RAGAS's own CSV (no ragbridge column): the ids are the exported ones, and recall still means
    what it meant."""
    from ragbridge.native.ranking import evaluate as rank

    from ragbridge_ragas.translate import export_ids

    ds, lost = to_ragas(example[:8])
    assert {"tags", "relevant (grades)", "contexts.source", "id"} <= set(lost)  # RAGAS's samples lack them
    path = tmp_path / "ragas.csv"
    ds.to_csv(path)  # RAGAS' own writer: list cells as Python literals
    back = load_cases(path, "ragas-csv")
    assert [(c.question, c.answer, c.reference) for c in back] == [(c.question, c.answer, c.reference)
                                                                   for c in example[:8]]
    assert [[(x.id, x.text) for x in c.contexts] for c in back] == [
        list(zip(export_ids(c), [x.text for x in c.contexts])) for c in example[:8]]
    assert [set(c.relevant) for c in back] == [{k for k, g in c.relevant.items() if g >= 1}
                                               for c in example[:8]]
    recall = [rank(cs, ["recall@10"])["recall@10"].tolist() for cs in (back, example[:8])]
    assert recall[0] == recall[1]
    assert write_cases(back, tmp_path / "again.csv", "ragas-csv") == []
    assert load_cases(tmp_path / "again.csv", "ragas-csv") == back


def test_convert_reads_a_saved_dataframe_with_legacy_columns(tmp_path):
    import pandas as pd

    src = tmp_path / "legacy.parquet"
    pd.DataFrame({
        "question": ["What is the refund window?"],
        "contexts": [["Refunds within 14 days.", "Annual plans: 30 days."]],
        "answer": ["14 days."],
        "ground_truth": ["Within 14 days."],
    }).to_parquet(src)
    target = tmp_path / "cases.jsonl"
    res = ragbridge_cli("convert", src, target, "--from", "ragas", "--to", "jsonl")
    assert res.returncode == 0, res.stderr
    (case,) = load_cases(target)
    assert (case.question, case.answer, case.reference) == ("What is the refund window?", "14 days.",
                                                            "Within 14 days.")
    assert [c.text for c in case.contexts] == ["Refunds within 14 days.", "Annual plans: 30 days."]
