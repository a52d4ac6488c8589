"""Phoenix evals at each version its plugin supports: 2.13.0 in an environment of its own
(``phoenix==2.13.0``), 3.9.4 installed. Parity: every metric's every score equals what Phoenix's
own API gives at that version, called by hand in the same environment (``evaluate_dataframe`` over
pandas frames, its evaluator classes, its ``LLM``; at 2.13.0 ``llm_classify`` for QA correctness)
against the stub judge.

The slow tests build environments with uv from the package index into the session's cache folder
(`test_environments.env_cache`): built once, from uv's cache in seconds.
"""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import EXAMPLE, needs_backend, ragbridge_cli
from test_environments import cached, env_cache  # noqa: F401 - the session's environments

from ragbridge.testing import StubJudge

#: the versions the plugin ships a lock for, oldest first
VERSIONS = ("2.13.0", "3.9.4")
#: the metrics the backend offers at each
OFFERED = {"2.13.0": {"faithfulness", "context_relevance", "abstention", "answer_correctness"},
           "3.9.4": {"faithfulness", "context_relevance", "abstention"}}


def test_every_shipped_version_is_supported_and_says_what_changes():
    """Each lock the plugin ships is a version inside ``supports`` with its entry in ``changes``,
    in the same order; ``phoenix==VERSION`` offers the metrics of that version (answer correctness
    only before 3.0), and before 3.5 context relevance names the evaluator that exists there."""
    from packaging.specifiers import SpecifierSet

    from ragbridge.run.isolated import backend_named
    from ragbridge_phoenix.backend import PhoenixBackend
    from ragbridge_phoenix.metrics import METRICS, metrics_at

    shipped = backend_named("phoenix==3.9.4").versions()
    assert tuple(shipped) == VERSIONS == tuple(PhoenixBackend.changes)
    assert all(v in SpecifierSet(PhoenixBackend.supports) for v in shipped)
    for version in VERSIONS:  # what a run plans for phoenix==VERSION, from the installed plugin
        assert {m.name for m in backend_named(f"phoenix=={version}").metrics()} == OFFERED[version]
    old = metrics_at("2.13.0")
    assert metrics_at("3.9.4") is METRICS and metrics_at("3.5.0") is METRICS
    assert set(metrics_at("3.0.0")) == set(METRICS) and "answer_correctness" in old
    assert (old["context_relevance"].evaluator, old["context_relevance"].chunk_field) == \
        ("DocumentRelevanceEvaluator", "document_text")
    assert metrics_at("3.4.0")["context_relevance"].label_scores == {"relevant": 1.0, "unrelated": 0.0}
    assert old["faithfulness"] == METRICS["faithfulness"] and old["abstention"] == METRICS["abstention"]


_PHOENIX_OWN = textwrap.dedent("""
    import json, os, sys, warnings
    warnings.filterwarnings("ignore")
    os.environ["OTEL_SDK_DISABLED"] = "true"
    import pandas as pd
    import phoenix.evals as px
    from phoenix.evals import LLM, evaluate_dataframe
    from phoenix.evals.metrics import FaithfulnessEvaluator, RefusalEvaluator

    path, base = sys.argv[1:3]
    major, minor = (int(p) for p in px.__version__.split(".")[:2])
    llm = LLM(provider="openai", model="stub-judge", api_key="x", base_url=base,
              initial_per_second_request_rate=100.0)
    rows = pd.read_json(path, lines=True)
    cases = pd.DataFrame({"case_id": rows["id"], "input": rows["question"], "output": rows["answer"],
                          "context": ["\\n\\n".join(c["text"] for c in cs) for cs in rows["contexts"]]})
    chunks = pd.DataFrame([{"case_id": r.id, "input": r.question, "text": c["text"]}
                           for r in rows.itertuples() for c in r.contexts])
    if (major, minor) >= (3, 5):
        from phoenix.evals.metrics import RetrievalRelevanceEvaluator as Relevance
        chunks = chunks.rename(columns={"text": "context"})
    else:
        from phoenix.evals.metrics import DocumentRelevanceEvaluator as Relevance
        chunks = chunks.rename(columns={"text": "document_text"})
    unanswerable = cases[rows["answerable"].eq(False).to_numpy()]

    def scores(frame, evaluator):
        out = evaluate_dataframe(dataframe=frame, evaluators=[evaluator], hide_tqdm_bar=True,
                                 exit_on_error=True, max_retries=0)
        return [json.loads(s) if isinstance(s, str) else s for s in out[f"{evaluator.name}_score"]]

    correctness = {}
    if major < 3:  # QA correctness against a reference: llm_classify and its template, gone in 3.0
        from phoenix.evals import QA_PROMPT_RAILS_MAP, QA_PROMPT_TEMPLATE, OpenAIModel, llm_classify
        qa = llm_classify(data=cases.assign(reference=rows["reference"]),
                          model=OpenAIModel(model="stub-judge", api_key="x", base_url=base),
                          template=QA_PROMPT_TEMPLATE, rails=list(QA_PROMPT_RAILS_MAP.values()),
                          provide_explanation=True, progress_bar_format=None)
        correctness = {c: QA_PROMPT_TEMPLATE.score(label) for c, label in zip(cases["case_id"], qa["label"])}
        assert set(qa["label"]) <= set(QA_PROMPT_RAILS_MAP.values()), set(qa["label"])
    faith = scores(cases, FaithfulnessEvaluator(llm=llm, temperature=0.0))
    relevance = Relevance(llm=llm, temperature=0.0)
    rel = scores(chunks, relevance)
    refusal = scores(unanswerable, RefusalEvaluator(llm=llm, temperature=0.0))
    labels, values = {}, {}
    for cid, s in zip(chunks["case_id"], rel):
        labels.setdefault(cid, []).append(s["label"])
        values.setdefault(cid, []).append(s["score"])
    print(json.dumps({
        "version": px.__version__, "relevance": relevance.name,
        "faithfulness": dict(zip(cases["case_id"], (s["score"] for s in faith))),
        "context_relevance": {c: sum(v) / len(v) for c, v in values.items()},
        "chunk_labels": labels,
        "abstention": dict(zip(unanswerable["case_id"], (s["score"] for s in refusal))),
        "answer_correctness": correctness,
    }))
""")


def _golden(tmp_path):
    """Eight answerable cases of the bundled example (none with a repeated chunk id, which ragbridge
    judges once and a frame would hold twice) and its four unanswerable ones."""
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    picked = [r for r in rows if r.get("answerable", True)
              and len({c["id"] for c in r["contexts"]}) == len(r["contexts"])][:8]
    picked += [r for r in rows if r.get("answerable") is False]
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in picked))
    return path


@pytest.mark.slow
@needs_backend("phoenix")
@pytest.mark.parametrize("version", VERSIONS)
def test_phoenix_scores_as_phoenix_own_evaluate_dataframe(version, cached, tmp_path):
    """ragbridge at Phoenix evals ``version`` (2.13.0 isolated, 3.9.4 the installed one, in process)
    scores every metric of every case exactly as Phoenix's own ``evaluate_dataframe`` does in the same
    environment, and at 2.13.0 answer correctness as its ``llm_classify`` with ``QA_PROMPT_TEMPLATE``;
    at 2.13.0 context relevance is Phoenix's document relevance, judged per chunk."""
    from ragbridge.run.isolated import prepare

    installed = version == VERSIONS[-1]
    backend = "phoenix" if installed else f"phoenix=={version}"
    python = sys.executable if installed else str(prepare([backend])[backend].python)
    golden = _golden(tmp_path)
    out = tmp_path / "run"
    with StubJudge() as stub:
        done = ragbridge_cli("run", golden, "--out", out, "--backend", backend, "--judge-model", "stub-judge",
                             "--judge-base-url", stub.base_url, "--no-progress", "--cache-mode", "off")
        sent = sorted(json.dumps(r.body, sort_keys=True) for r in stub.posts())
        stub.requests.clear()
        own = subprocess.run([python, "-c", _PHOENIX_OWN, str(golden), stub.base_url],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
        theirs_sent = sorted(json.dumps(r.body, sort_keys=True) for r in stub.posts())
    assert done.returncode == 0, done.stderr
    assert own.returncode == 0, own.stderr[-2000:]
    theirs = json.loads(own.stdout.splitlines()[-1])
    assert theirs["version"] == version
    assert sent == theirs_sent  # byte for byte the requests Phoenix's own calls send
    assert json.loads((out / "run.json").read_text())["backends"] == {backend: version}
    scores = {(s["metric"], s["case_id"]): s for s in map(json.loads, (out / "scores.jsonl").read_text()
                                                         .splitlines())}
    assert all(s["error"] is None for s in scores.values())
    assert {m for m, _ in scores} == OFFERED[version]
    for metric in OFFERED[version]:
        ours = {cid: s["value"] for (m, cid), s in scores.items() if m == metric and s["value"] is not None}
        assert set(ours) == set(theirs[metric]), metric
        assert ours == pytest.approx(theirs[metric], abs=1e-6), metric
        assert len(set(ours.values())) > 1, metric  # the verdicts differ between cases
    for cid, labels in theirs["chunk_labels"].items():
        rows = scores[("context_relevance", cid)]["native_value"]["per_chunk"]
        assert [r["label"] for r in rows] == labels, cid
    native = {s["native_metric"] for (m, _), s in scores.items() if m == "context_relevance"}
    expected = "document_relevance" if version < "3" else "retrieval_relevance"
    assert native == {theirs["relevance"]} == {expected}


@pytest.mark.slow
def test_two_phoenix_versions_run_side_by_side_and_compare_names_both(cached, tmp_path):
    """``--backend phoenix==2.13.0 --backend phoenix==3.9.4`` from the command line: two backends of
    one run, each in its environment, its judge calls counted under its name; compare and the report
    read them as two backends."""
    golden = _golden(tmp_path)
    out = tmp_path / "run"
    with StubJudge() as stub:
        done = ragbridge_cli("run", golden, "--out", out, "--backend", "phoenix==2.13.0", "--backend",
                             "phoenix==3.9.4", "--metric", "context_relevance", "--judge-model", "stub-judge",
                             "--judge-base-url", stub.base_url, "--no-progress", "--cache-mode", "off")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backends"] == {"phoenix==2.13.0": "2.13.0", "phoenix==3.9.4": "3.9.4"}
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert {(s["backend"], s["native_metric"]) for s in scores} == {
        ("phoenix==2.13.0", "document_relevance"), ("phoenix==3.9.4", "retrieval_relevance")}
    assert all(s["value"] is not None and s["judge_calls"] > 0 for s in scores)
    compared = ragbridge_cli("compare", out)
    assert compared.returncode == 0, compared.stderr
    text = " ".join(compared.stdout.split())
    assert "context_relevance: 2 backends, 12 of 12 cases compared" in text, compared.stdout
    report = ragbridge_cli("report", out, "--format", "md", "-o", tmp_path / "r.md")
    assert report.returncode == 0 and "phoenix==2.13.0" in (tmp_path / "r.md").read_text()


@pytest.mark.slow
def test_an_answer_phoenix_2_cannot_snap_to_a_label_is_an_error_not_incorrect(cached, tmp_path):
    """Phoenix 2.13's legacy QA classification snaps the judge's answer to a label and, when it
    cannot, labels it NOT_PARSABLE with score 0.0 (what ``llm_classify`` returns): ragbridge makes
    that case's answer_correctness an error, never a 0; the other cases score."""
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()[:3]]
    golden = tmp_path / "three.jsonl"
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    with StubJudge() as stub:
        stub.fail_when(rows[1]["question"], "malformed")
        done = ragbridge_cli("run", golden, "--out", out, "--backend", "phoenix==2.13.0", "--metric",
                             "answer_correctness", "--judge-model", "stub-judge", "--judge-base-url",
                             stub.base_url, "--no-progress", "--cache-mode", "off")
    assert done.returncode == 3, done.stderr  # finished, with an errored score
    scores = {s["case_id"]: s for s in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    bad = scores.pop(rows[1]["id"])
    assert bad["value"] is None and "NOT_PARSABLE" in bad["error"], bad
    assert all(s["value"] in (0.0, 1.0) and s["error"] is None for s in scores.values())
