"""ragbridge's DeepEval backend: DeepEval's RAG metrics through ragbridge's judge, and its datasets.

Install with ``pip install 'ragbridge[deepeval]' -c constraints.txt``; run with
``ragbridge run DATASET --backend deepeval --judge-model M --judge-base-url U``.
Registering this plugin does not import DeepEval; it is imported when the backend first scores or
never (the dataset formats do not need it).

Versions
--------
The backend supports DeepEval 3.9.9 and 4.3.1 on (``DeepEvalBackend.supports``); ``locks/`` holds a
lock for each, so ``--backend deepeval==3.9.9`` runs it in an environment of its own
(docs/environments.md) and ``--backend deepeval`` the installed one. Where 3.x differs, the plugin
chooses by the installed major version (`metrics.by_version`): the judge class (``GPTModel``,
``backend.JUDGE_CLASS``) and the metrics' arguments (no ``eval_mode``, ``metrics.METRIC_KWARGS``).
The canonical metrics and formulas below hold at both; what changes between them (which verdicts a
reply may hold, ``idk`` where 4.x says ``borderline``) is ``DeepEvalBackend.changes`` and
docs/migrate-deepeval-versions.md.

Metrics
-------
Each canonical metric is scored by DeepEval's own metric class, a **fresh instance per case** (DeepEval
keeps a measurement's state on the instance, so a shared instance gives wrong scores under
concurrency), with ``await metric.a_measure(test_case)``. DeepEval's score is already in 0..1 with
higher better, so ``value`` is that score unchanged (clamped to 0..1); ``native_value`` is the same raw
number; ``native_metric`` is DeepEval's metric name; ``passed`` is DeepEval's ``success`` (score >=
threshold, 0.5 by default); ``reason`` is DeepEval's reason. When DeepEval's verdict step judged
nothing (no claims, no statements, no nodes), DeepEval still returns a number by convention (1 for
faithfulness and answer relevancy, 0 for the contextual metrics); ragbridge then reports ``value``
``None`` (undefined, counted, never averaged) with that number in ``native_value`` and says so in
``reason``.

=====================  ===========================  ==============================================
canonical              DeepEval class (calls/case)  formula (score range 0..1)
=====================  ===========================  ==============================================
``faithfulness``       FaithfulnessMetric (4)       truths are extracted from the retrieved context
                                                    and claims from the answer (in parallel), each
                                                    claim gets a verdict yes / no / borderline
                                                    against the truths; score = (#yes + #borderline)
                                                    / #claims. "no" only when the context
                                                    *contradicts* the claim, so unsupported claims
                                                    pass as borderline (unlike RAGAS) unless the
                                                    option ``penalize_ambiguous_claims`` is set.
``answer_relevance``   AnswerRelevancyMetric (3)    statements are extracted from the answer; score =
                                                    (#yes + #borderline) / #statements relevant to
                                                    the question.
``context_precision``  ContextualPrecisionMetric    one verdict per retrieved chunk (was it useful for
                       (2)                          the reference answer?); score = mean over useful
                                                    chunks at rank k of precision@k (rank-weighted
                                                    average precision); 0 if none is useful.
``context_recall``     ContextualRecallMetric (2)   one verdict per sentence of the reference answer
                                                    (attributable to the retrieved context?); score =
                                                    #yes / #sentences.
``context_relevance``  ContextualRelevancyMetric    statements of each retrieved chunk judged
                       (1 per chunk + 1)            relevant to the question; score = #yes /
                                                    #statements over all chunks.
``answer_correctness`` GEval (1)                    ragbridge's fixed correctness rubric (below):
                                                    the judge scores 0..10, weighted by the
                                                    log-probabilities of the score token when the
                                                    judge model supports them; score = raw / 10.
=====================  ===========================  ==============================================

The call counts include DeepEval's reason call (the option ``include_reason=False`` skips it, except
for GEval whose reason comes with the score).

``answer_correctness`` is ``GEval(name="Correctness", evaluation_params=[INPUT, ACTUAL_OUTPUT,
EXPECTED_OUTPUT])`` with fixed evaluation steps (so DeepEval's "generate steps" call is skipped and
every case is judged by the same words) and a fixed rubric, both in ``metrics.py``:

* steps: compare the facts of the answer with the reference; heavily penalise a contradicting fact
  (number, time limit, price, plan, place, condition); penalise left-out facts, less for minor details;
  do not penalise extra non-contradicting detail or wording; a refusal when the reference answers is
  incorrect.
* rubric: 0-2 contradicts the main point or declines; 3-5 partly correct; 6-8 correct on the main
  point with minor details missing; 9-10 fully agrees with the reference.

Inputs (``MetricSpec.requires``): faithfulness needs the answer and chunk text; answer relevance the
answer; context precision and recall chunk text and a reference; context relevance chunk text;
answer correctness the answer and a reference. Cases without them are skipped by the runner.

Case -> ``LLMTestCase``: ``input`` = question, ``actual_output`` = answer, ``expected_output`` =
reference, ``retrieval_context`` = the texts of the retrieved chunks in rank order (chunks without text
left out, a repeated chunk id counted once at its first rank), ``context`` = reference_contexts,
``name`` = id, ``tags`` = tags.

The judge
---------
Each case gets DeepEval's ``OpenAIModel(model=<judge model>, base_url=<gateway URL tagged with
(deepeval, metric, case id)>, api_key=<the gateway's own key>, temperature=0)``: DeepEval never sees
the real key and every call is cached, retried, bounded and counted by the gateway. DeepEval picks the
wire format by model *name*: a name in its OpenAI registry (``gpt-4o-mini``, ``gpt-4.1``, ...; see
``backend.structured_outputs``) sends strict ``json_schema`` structured outputs (and, for GEval,
``logprobs``); any other name sends plain prompts and DeepEval cuts the JSON out of the answer. So
name a registry model only when the server supports ``json_schema``.

DeepEval does not retry an answer that is not valid JSON or misses a key; the gateway retries
transport faults (429, 5xx, timeouts, non-JSON bodies) and anything left is that case's Score
``error`` (``Type: message``), never an exception out of ``score``. While a run uses the backend,
``DEEPEVAL_RETRY_MAX_ATTEMPTS=1`` (the gateway has retried already) and
``DEEPEVAL_PER_ATTEMPT_TIMEOUT_SECONDS_OVERRIDE`` (the gateway's worst-case time) are set, unless the
user set them.

Options (``--option deepeval.KEY=VALUE``, ``[backends.deepeval]``, ``options={"deepeval": {...}}``;
:class:`ragbridge_deepeval.options.DeepEvalOptions`): ``threshold`` (a number, or a mapping canonical
metric -> number; the run's pass mark too, run.json's ``pass_marks``), ``include_reason``,
``strict_mode``, ``penalize_ambiguous_claims``, ``truths_extraction_limit``, ``concurrency`` (cases
in flight; default twice the judge's max_concurrency).

Side effects, switched off
--------------------------
While a run uses the backend (:mod:`ragbridge_deepeval.env`; a variable the user set wins, and the
environment is restored when the run ends) ``DEEPEVAL_TELEMETRY_OPT_OUT`` (no PostHog; also stops
the ``.deepeval/`` folder DeepEval otherwise creates in the working directory at import),
``DEEPEVAL_DISABLE_DOTENV`` (no ``.env`` loaded into the environment),
``DEEPEVAL_DISABLE_LEGACY_KEYFILE``, ``DEEPEVAL_NO_INSPECT_PROMPT`` and ``DEEPEVAL_CACHE_FOLDER`` (a
per-user cache folder, so even a user who opts back into telemetry gets no ``.deepeval/`` in the
working directory) are set; DeepEval reads them at import, and it is first imported after that, when
the backend scores (``import ragbridge`` and the dataset formats never import it). DeepEval sends its
buffered telemetry counts at exit, after the run: the backend's ``close`` settles them while the
opt-out still holds, so nothing is sent later (`env.settle_telemetry`). The backend never
calls ``deepeval.evaluate`` or any upload, so a ``CONFIDENT_API_KEY`` in the environment sends
nothing to Confident AI. DeepEval's auto-loaded pytest plugin is disabled in the project's test runs
(``-p no:deepeval`` in pyproject's pytest addopts).

Datasets
--------
``ragbridge convert IN OUT --from deepeval`` / ``--to deepeval`` (or ``deepeval-json``,
``deepeval-jsonl``, ``deepeval-csv``) read DeepEval goldens and test cases and write goldens; see
``formats.py`` for the field mapping and what can be lost. In memory, ``ragbridge.load_cases`` and
``ragbridge.evaluate`` take an ``EvaluationDataset``, lists of ``Golden`` or ``LLMTestCase``, and
``ragbridge.to_library(cases, "deepeval")`` gives an ``EvaluationDataset`` back (``kind="test_cases"``:
a list of ``LLMTestCase``); see ``translate.py``.

Files: ``backend.py`` (the backend, its run lifecycle and judge), ``metrics.py`` (canonical metric
-> DeepEval class, options, the correctness rubric), ``translate.py`` (cases -> test cases, results ->
Scores), ``formats.py`` (the dataset formats), ``env.py`` (the environment defaults), ``stub.py`` (the
stub judge's answers to DeepEval's prompts, registered through ``ragbridge_register_stub_responders``),
``generator.py`` (DeepEval's ``Synthesizer`` behind ``ragbridge synthesize --generator deepeval``,
registered through ``ragbridge_register_generators``) and ``generator_stub.py`` (the stub's answers to
its prompts).
"""

from __future__ import annotations

from ragbridge.plugin import hookimpl, lazy_names

__all__ = ["DeepEvalBackend", "FORMATS"]

#: the package's names, imported when first used: registering the plugin imports none of its modules
__getattr__ = lazy_names(__name__, {"DeepEvalBackend": ".backend", "FORMATS": ".formats"})


@hookimpl
def ragbridge_register_backends(register):
    from ragbridge.plugin import LazyBackend

    register(LazyBackend("deepeval", "ragbridge_deepeval.backend:DeepEvalBackend"))


@hookimpl
def ragbridge_register_formats(register):
    from .formats import FORMATS

    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_libraries(register):
    from .translate import library

    register(library())


@hookimpl
def ragbridge_register_generators(register):
    from .generator import DeepEvalGenerator

    register(DeepEvalGenerator())


@hookimpl
def ragbridge_register_stub_responders(register):
    from .generator_stub import DeepEvalGeneratorResponder
    from .stub import responders

    # in this order, ahead of the generic one
    register(*responders(), DeepEvalGeneratorResponder(), first=False)
