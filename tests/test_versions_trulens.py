"""TruLens at each version its plugin ships a lock for (1.5.3 and 2.16.0): ragbridge's scores equal
TruLens's own provider feedback functions called by hand in the same environment, against the stub
judge, whose TruLens responder reads each version's prompts.

The environments are built by uv from the locks the plugin ships (``RAGBRIDGE_CACHE_DIR`` of the
session, as in test_environments.py); the hand-made calls run in the environment's own Python.
"""

import json
import subprocess
import textwrap

import pytest

from conftest import EXAMPLE, needs_backend, stub_judge_config
from test_environments import cached, env_cache  # noqa: F401 - the session's environments

from ragbridge import evaluate, load_cases
from ragbridge.testing import StubJudge

# TruLens's own calls, as its docs show them: one OpenAI provider, the RAG triad's feedback functions
# per case (context relevance once per chunk, TruLens's np.mean over them), GroundTruthAgreement on
# the reference; the sentence split offline (nltk's punkt_tab data in NLTK_DATA, no download)
_TRULENS_OWN = textwrap.dedent("""
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    import nltk
    nltk.download = lambda *a, **k: True  # offline: the punkt_tab data is in NLTK_DATA
    import numpy as np
    import importlib.metadata
    from trulens.core.feedback.feedback import GroundednessConfigs
    from trulens.feedback import GroundTruthAgreement
    from trulens.providers.openai import OpenAI

    path, base = sys.argv[1:3]
    provider = OpenAI(model_engine="stub-judge", base_url=base, api_key="x", rpm=100_000)
    configs = GroundednessConfigs(use_sent_tokenize=True, filter_trivial_statements=False)
    out = {"version": importlib.metadata.version("trulens-feedback")}
    for line in open(path):
        case = json.loads(line)
        q, a, ref = case["question"], case["answer"], case["reference"]
        chunks = [c["text"] for c in case["contexts"]]
        g, _ = provider.groundedness_measure_with_cot_reasons(
            source="\\n\\n".join(chunks), statement=a, groundedness_configs=configs)
        cr = float(np.mean([provider.context_relevance_with_cot_reasons(q, c)[0] for c in chunks]))
        ar, _ = provider.relevance_with_cot_reasons(q, a)
        gta = GroundTruthAgreement([{"query": q, "expected_response": ref}], provider=provider)
        ac, _ = gta.agreement_measure(q, a)
        out[case["id"]] = {"faithfulness": g, "context_relevance": cr, "answer_relevance": ar,
                           "answer_correctness": ac}
    print(json.dumps(out))
""")

METRICS = ("faithfulness", "context_relevance", "answer_relevance", "answer_correctness")


def _trulens_own(python, cases_file, stub, tmp_path):
    from ragbridge_trulens.env import offline_sentence_splitter

    env = {"NLTK_DATA": offline_sentence_splitter(), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([str(python), "-c", _TRULENS_OWN, str(cases_file), stub.base_url],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _answered_by_the_trulens_responder(requests):
    """Every judge request TruLens sent (not the backend's probe) is answered by the TruLens
    responder, from its own slots, never by the stub's generic fallback."""
    from ragbridge.plugin import JudgeRequest
    from ragbridge_trulens.backend import PROBE_BODY_TEXT
    from ragbridge_trulens.stub import TruLensResponder

    responder = TruLensResponder()
    routes = set()
    for r in requests:
        if r.method != "POST" or PROBE_BODY_TEXT in json.dumps(r.body):
            continue
        routes.add(r.path.rsplit("/", 1)[-1])
        req = (JudgeRequest.from_responses(r.body) if r.path.endswith("/responses")
               else JudgeRequest.from_chat(r.body))
        assert responder(req) is not None, req.prompt[:600]
    return routes


@pytest.mark.slow
@needs_backend("trulens")
def test_trulens_1_5_scores_as_its_own_feedback_functions(cached, tmp_path):
    """Every metric the backend offers, on six cases of the bundled example: ``trulens==1.5.3`` in its
    environment gives what TruLens 1.5.3's provider functions give there by hand; every prompt it
    sent (the Responses API's and the agreement's chat completion) is one the stub judge's TruLens
    responder reads. (The installed 2.16's parity is test_trulens.py's.)"""
    from ragbridge.run.isolated import prepare

    env = prepare(["trulens==1.5.3"])["trulens==1.5.3"]
    cases = load_cases(EXAMPLE)[:6]
    with StubJudge() as stub:
        run = evaluate(cases, backends=["trulens==1.5.3"], judge=stub_judge_config(stub),
                       out=tmp_path / "run")
        routes = _answered_by_the_trulens_responder(stub.requests)
        theirs = _trulens_own(env.python, tmp_path / "run" / "cases.jsonl", stub, tmp_path)
    assert theirs["version"] == "1.5.3" and run.manifest.backends == {"trulens==1.5.3": "1.5.3"}
    assert routes == {"responses", "completions"}
    by = {(s.case_id, s.metric): s for s in run.scores}
    assert {m for _, m in by} == set(METRICS) and len(by) == len(cases) * len(METRICS)
    for case in cases:
        for metric in METRICS:
            score = by[(case.id, metric)]
            assert score.error is None and score.judge_calls > 0, (case.id, metric, score.error)
            assert score.value == pytest.approx(theirs[case.id][metric], abs=1e-9), (case.id, metric)
    assert len({s.value for s in run.scores}) > 4  # the stub's verdicts differ from case to case


@pytest.mark.slow
@needs_backend("trulens")
def test_trulens_1_5_and_2_16_isolated_on_chat_completions(cached, tmp_path):
    """``api=chat`` (a judge without the Responses API) with 1.5.3 and 2.16.0 in their environments
    beside the installed 2.16: every call goes to chat completions and is read by the stub's TruLens
    responder (1.5's text template as 2.16's JSON), the isolated 2.16.0 scores exactly as the
    installed one, and 1.5.3 judges the same texts as 2.16."""
    cases = load_cases(EXAMPLE)[:4]
    backends = ["trulens==1.5.3", "trulens==2.16.0", "trulens"]
    with StubJudge() as stub:
        run = evaluate(cases, backends=backends, judge=stub_judge_config(stub),
                       options={"trulens": {"api": "chat"}}, out=tmp_path / "run")
        routes = _answered_by_the_trulens_responder(stub.requests)
    assert routes == {"completions"}
    assert run.manifest.backends == {"trulens==1.5.3": "1.5.3", "trulens==2.16.0": "2.16.0",
                                     "trulens": "2.16.0"}
    by = {(s.backend, s.case_id, s.metric): s for s in run.scores}
    assert len(by) == len(backends) * len(cases) * len(METRICS)
    assert all(s.error is None and s.value is not None for s in run.scores), \
        [(s.backend, s.case_id, s.metric, s.error) for s in run.scores if s.error]
    for (backend, case_id, metric), installed in by.items():
        if backend != "trulens":
            continue
        isolated = by[("trulens==2.16.0", case_id, metric)]
        assert (isolated.value, isolated.native_value, isolated.reason, isolated.judge_calls) == \
               (installed.value, installed.native_value, installed.reason, installed.judge_calls)
        assert by[("trulens==1.5.3", case_id, metric)].value == pytest.approx(installed.value, abs=1e-9)


def test_the_backend_says_which_trulens_versions_it_supports_and_what_changes():
    from packaging.specifiers import SpecifierSet

    from ragbridge.run.isolated import shipped_versions
    from ragbridge_trulens.backend import TruLensBackend

    backend = TruLensBackend()
    shipped = shipped_versions(backend)
    assert shipped == ["1.5.3", "2.16.0"]
    assert all(v in SpecifierSet(backend.supports) for v in shipped)
    assert list(backend.changes) == shipped
    assert "context_relevance" in backend.changes["2.16.0"] and "faithfulness" in backend.changes["2.16.0"]
