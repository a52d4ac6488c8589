"""The DeepEval backend at every DeepEval version its plugin supports (a lock shipped for each): every
metric it offers scores as that version's own ``a_measure`` does, by hand, in the same
environment, against the stub judge (which answers each version's prompts); and two versions in one
run read as two backends by compare, diff, validate and report.

DeepEval 3.9.9's own call builds its judge with ``GPTModel`` (4.0 renamed it ``OpenAIModel``); its
faithfulness and answer-relevancy verdicts are yes / no / idk (4.x: borderline) and its prompts keep
their template's indentation. Both versions run in their environments (``--backend deepeval==V``,
built from uv's cache into the session's cache folder).
"""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLE, needs_backend, ragbridge_cli
from test_environments import cached, env_cache  # noqa: F401  (the session's environments)

from ragbridge.testing import StubJudge

METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall", "context_relevance",
           "answer_correctness")
#: a faithful case and two flawed ones
PICK = ("billing-refund-window", "notifications-sms-cost", "claims-damage-deadline")

#: DeepEval's own call, run with the environment's Python: ``python - GOLDEN BASE_URL MODEL STEPS``
#: prints ``{"version": ..., "scores": {metric: {input: [score, success, reason, error]}}}``
OWN = textwrap.dedent("""
    import asyncio, json, os, sys, warnings
    warnings.filterwarnings("ignore")
    os.environ.update(DEEPEVAL_TELEMETRY_OPT_OUT="1", DEEPEVAL_DISABLE_DOTENV="1",
                      DEEPEVAL_UPDATE_WARNING_OPT_IN="0",
                      # a call the stub left unanswered once (on a machine loaded by other jobs) timed
                      # out both of DeepEval's two default attempts: three, a minute each
                      DEEPEVAL_RETRY_MAX_ATTEMPTS="3", DEEPEVAL_PER_ATTEMPT_TIMEOUT_SECONDS_OVERRIDE="60")
    from importlib.metadata import version
    import deepeval.metrics as dm
    import deepeval.models as models
    from deepeval.dataset import EvaluationDataset
    from deepeval.metrics.g_eval.utils import Rubric
    from deepeval.test_case import SingleTurnParams

    golden, base, model_name, steps_rubric = sys.argv[1:5]
    steps, rubric = json.loads(steps_rubric)
    Model = models.OpenAIModel if hasattr(models, "OpenAIModel") else models.GPTModel  # 3.x: GPTModel
    dataset = EvaluationDataset()
    dataset.add_test_cases_from_json_file(golden, input_key_name="input",
                                          actual_output_key_name="actual_output",
                                          expected_output_key_name="expected_output",
                                          retrieval_context_key_name="retrieval_context")

    def metric(name):
        judge = Model(model=model_name, base_url=base, api_key="sk-direct", temperature=0)
        if name == "answer_correctness":
            return dm.GEval(name="Correctness", model=judge, evaluation_steps=steps,
                            evaluation_params=[SingleTurnParams.INPUT, SingleTurnParams.ACTUAL_OUTPUT,
                                               SingleTurnParams.EXPECTED_OUTPUT],
                            rubric=[Rubric(score_range=tuple(r), expected_outcome=o) for r, o in rubric])
        return getattr(dm, {"faithfulness": "FaithfulnessMetric", "answer_relevance": "AnswerRelevancyMetric",
                            "context_precision": "ContextualPrecisionMetric",
                            "context_recall": "ContextualRecallMetric",
                            "context_relevance": "ContextualRelevancyMetric"}[name])(model=judge)

    async def one(name, tc):
        m = metric(name)
        await m.a_measure(tc, _show_indicator=False)
        return name, tc.input, [m.score, m.success, m.reason, m.error]

    async def main():
        names = ["faithfulness", "answer_relevance", "context_precision", "context_recall",
                 "context_relevance", "answer_correctness"]
        return await asyncio.gather(*(one(n, tc) for n in names for tc in dataset.test_cases))

    out = {}
    for name, question, result in asyncio.run(main()):
        out.setdefault(name, {})[question] = result
    print(json.dumps({"version": version("deepeval"), "scores": out}))
""")


def test_each_shipped_lock_is_a_supported_version_with_its_changes_said():
    """The versions a lock is shipped for are the ones ``supports`` takes and ``changes`` speaks of,
    oldest first; the lock pins that DeepEval."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from ragbridge.run.environments import locks_of, version_key
    from ragbridge_deepeval import backend

    locks = locks_of(Path(backend.__file__).parent)
    assert sorted(locks, key=version_key) == list(backend.DeepEvalBackend.changes) == ["3.9.9", "4.3.1"]
    for version, lock in locks.items():
        assert Version(version) in SpecifierSet(backend.DeepEvalBackend.supports)
        assert f"\ndeepeval=={version}\n" in lock.read_text()
    assert Version("4.0.0") not in SpecifierSet(backend.DeepEvalBackend.supports)  # no OpenAIModel there


def _golden(folder):
    """The picked cases as a DeepEval golden file, written by DeepEval's own ``save_as``."""
    from deepeval.dataset import EvaluationDataset, Golden

    rows = {r["id"]: r for r in map(json.loads, EXAMPLE.read_text().splitlines())}
    goldens = [Golden(input=rows[i]["question"], actual_output=rows[i]["answer"],
                      expected_output=rows[i]["reference"],
                      retrieval_context=[c["text"] for c in rows[i]["contexts"]]) for i in PICK]
    return EvaluationDataset(goldens=goldens).save_as(file_type="json", directory=str(folder),
                                                      file_name="golden", include_test_cases=False)


def _run(golden, out, backends, stub, model, *extra, exit_code=0):
    args = [a for b in backends for a in ("--backend", b)]
    done = ragbridge_cli("run", golden, "--out", out, *args, "--judge-model", model, "--judge-base-url",
                         stub.base_url, "--no-progress", "--cache-mode", "off", *extra)
    assert done.returncode == exit_code, done.stderr
    cases = map(json.loads, (out / "cases.jsonl").read_text().splitlines())
    questions = {c["id"]: c["question"] for c in cases}
    return [dict(s, question=questions[s["case_id"]])
            for s in map(json.loads, (out / "scores.jsonl").read_text().splitlines())]


@pytest.mark.slow
@pytest.mark.parametrize("version, model", [("3.9.9", "stub-judge"), ("3.9.9", "gpt-4o-mini")])
def test_every_metric_scores_as_deepevals_own_a_measure_at_that_version(cached, tmp_path, version, model):
    """``--backend deepeval==V`` against DeepEval V's own ``a_measure`` of its own metric classes, in
    the same environment: every metric's every case the same score (1e-6), verdict and reason (an
    empty extraction's is undefined, DeepEval's reason said after ragbridge's). A
    judge model DeepEval knows (``gpt-4o-mini``) gets its json_schema requests, any other plain
    prompts; 3.9.9's prompts differ from 4.3.1's, and the stub answers both."""
    pytest.importorskip("deepeval")
    from ragbridge.run.isolated import prepare
    from ragbridge_deepeval.metrics import CORRECTNESS_RUBRIC, CORRECTNESS_STEPS

    golden = _golden(tmp_path)
    env = prepare([f"deepeval=={version}"])[f"deepeval=={version}"]
    with StubJudge() as stub:
        ours = _run(golden, tmp_path / "run", [f"deepeval=={version}"], stub, model)
        own = subprocess.run([str(env.python), "-c", OWN, golden, stub.base_url, model,
                              json.dumps([CORRECTNESS_STEPS, CORRECTNESS_RUBRIC])],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert own.returncode == 0, own.stderr[-2000:]
    theirs = json.loads(own.stdout.splitlines()[-1])
    assert theirs["version"] == version
    assert len(ours) == len(PICK) * len(METRICS) and all(s["error"] is None for s in ours)
    assert {s["metric"] for s in ours} == set(METRICS) == set(theirs["scores"])
    for s in ours:
        score, success, reason, error = theirs["scores"][s["metric"]][s["question"]]
        assert error is None
        assert s["native_value"] == pytest.approx(score, abs=1e-6), (s["metric"], s["case_id"])
        assert s["passed"] == success and reason in s["reason"], (s["metric"], s["case_id"])
    # the cases tell apart (not one score for everything), and each metric judged something: a prompt
    # the stub misread gets no verdicts, which DeepEval scores by convention on both sides
    assert len({s["native_value"] for s in ours}) > 3
    assert all(s["value"] is not None for s in ours)


class ExplainingJudge:
    """A judge that explains inside its context-precision verdicts (``"Yes, it states what the
    expected output needs"``), as chat models do: the stub's answer, reworded."""

    def __call__(self, req):
        from ragbridge_deepeval.stub import DeepEvalResponder, kind_of

        found = kind_of(req)
        if found is None or found[0] != "ContextualPrecisionVerdict":
            return None
        reply = DeepEvalResponder()(req)
        answer = json.loads(reply.content)
        for v in answer["verdicts"]:
            v["verdict"] = "Yes, it states what the expected output needs" if v["verdict"] == "yes" else "No."
        reply.content = json.dumps(answer)
        return reply


@pytest.mark.slow
@needs_backend("deepeval")
def test_two_deepeval_versions_in_one_run_are_two_backends_to_compare_diff_validate_and_report(
        cached, tmp_path):
    """``--backend deepeval==3.9.9 --backend deepeval==4.3.1`` beside the installed DeepEval 4.3.1:
    all score every case, the isolated 4.3.1 exactly as the installed one. Against a judge that
    explains inside its context-precision verdicts, 3.9.9 counts every such chunk as not useful
    (score 0, silently: it takes a verdict as yes only when it is exactly "yes") where 4.3.1 refuses
    the reply (the score errors, and the run says so). compare pairs the two versions (its counts of
    changed verdicts what the scores give at the thresholds asked), diff of two such runs pairs each
    version with itself, validate and the report name both."""
    from ragbridge.stub.responders import register, unregister

    picked = tmp_path / "five.jsonl"
    picked.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:5]))
    both = ["deepeval==3.9.9", "deepeval==4.3.1"]
    metrics = ("--metric", "faithfulness", "--metric", "context_precision")
    judge = register(ExplainingJudge())
    try:
        with StubJudge() as stub:
            scores = _run(picked, tmp_path / "run", ["deepeval", *both], stub, "stub-judge", *metrics,
                          exit_code=3)
            _run(picked, tmp_path / "again", both, stub, "stub-judge", *metrics, exit_code=3)
    finally:
        unregister(judge)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["backends"] == {"deepeval": "4.3.1", "deepeval==3.9.9": "3.9.9",
                                    "deepeval==4.3.1": "4.3.1"}
    assert {(s["backend"], s["metric"]) for s in scores} == {
        (b, m) for b in ["deepeval", *both] for m in ("faithfulness", "context_precision")}
    by = {(s["backend"], s["metric"], s["case_id"]): s for s in scores}
    for (backend, metric, case_id), installed in by.items():
        if backend == "deepeval":
            isolated = by[("deepeval==4.3.1", metric, case_id)]
            assert (isolated["native_value"], isolated["passed"], isolated["reason"], isolated["error"]) == \
                   (installed["native_value"], installed["passed"], installed["reason"], installed["error"])
    for s in scores:
        if s["metric"] == "faithfulness" or s["backend"] == both[0]:
            assert s["error"] is None and s["value"] is not None and s["judge_calls"] > 0, s
        if s["metric"] == "context_precision":
            if s["backend"] == both[0]:
                assert s["value"] == 0, s
            else:
                assert s["value"] is None and s["error"].startswith("ValidationError"), s

    # compare at 0.5 for 3.9.9 and 0.9 for 4.3.1: the verdicts that change are the values between
    thresholds = {"deepeval==3.9.9": 0.5, "deepeval==4.3.1": 0.9}
    compared = ragbridge_cli("compare", tmp_path / "run", "--json", "--threshold", "deepeval==3.9.9=0.5",
                             "--threshold", "deepeval==4.3.1=0.9")
    assert compared.returncode == 0, compared.stderr
    answer = json.loads(compared.stdout)
    rows = {r["metric"]: r for r in answer["agreement"] if (r["backend_a"], r["backend_b"]) == tuple(both)}
    assert (rows["context_precision"]["n_paired"], rows["context_precision"]["b_errored"]) == (0, 5)
    row = rows["faithfulness"]
    value = {(s["backend"], s["case_id"]): s["value"] for s in scores if s["metric"] == "faithfulness"}
    cases = {c for _, c in value}
    passes_a, passes_b = ({c for c in cases if value[(b, c)] >= thresholds[b]} for b in both)
    assert row["n_paired"] == 5 and row["a_pass_b_fail"] == len(passes_a - passes_b) > 0
    assert row["a_fail_b_pass"] == len(passes_b - passes_a)
    assert row["mean_a"] == pytest.approx(sum(value[(both[0], c)] for c in cases) / 5)
    changed = {d["case_id"] for d in answer["disagreements"]
               if d["metric"] == "faithfulness" and d.get(f"{both[0]}.passed") != d.get(f"{both[1]}.passed")}
    assert changed == passes_a ^ passes_b
    text = " ".join(ragbridge_cli("compare", tmp_path / "run").stdout.split())
    assert "deepeval==3.9.9 vs deepeval==4.3.1" in text
    assert "deepeval==4.3.1 scored none (5 errored)" in text
    # the cases 3.9.9 scored 0 and 4.3.1 refused: counted in the answer and listed, each side's value
    assert "context_precision: 3 backends, 0 of 5 cases compared; 5 scored by one, errored at another" in text
    assert "(scored by deepeval==3.9.9, errored at deepeval, deepeval==4.3.1)" in text
    one = [r for r in answer["scored_by_one"] if r["metric"] == "context_precision"]
    assert len(one) == 5 and all(r["deepeval==3.9.9.value"] == 0 for r in one)
    assert all(r["deepeval==4.3.1.reason"].startswith("ValidationError") for r in one)

    diffed = ragbridge_cli("diff", tmp_path / "run", tmp_path / "again")
    assert diffed.returncode == 0, diffed.stderr
    said = " ".join(diffed.stdout.split())
    assert "0 got worse, 0 better" in said
    assert "scored only in the base run" in said and "deepeval:faithfulness" in said

    labels = EXAMPLE.parent / "faithfulness-labels.jsonl"
    validated = ragbridge_cli("validate", tmp_path / "run", "--labels", labels, "--metric", "faithfulness",
                              "--json")
    assert validated.returncode == 0, validated.stderr
    assert all(b in validated.stdout for b in both)

    report = ragbridge_cli("report", tmp_path / "run", "--format", "md", "-o", tmp_path / "r.md")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "r.md").read_text()
    assert all(b in md for b in both) and "deepeval==3.9.9 vs deepeval==4.3.1" in md
    assert md.count("scored by one, errored at another") == 5
