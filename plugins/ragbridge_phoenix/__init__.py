"""ragbridge's Phoenix backend: Arize Phoenix evals 3.9.4's RAG evaluators through ragbridge's judge.

Install with ``pip install 'ragbridge[phoenix]' -c constraints.txt``; run with
``ragbridge run DATASET --backend phoenix --judge-model M --judge-base-url U``. The library,
``arize-phoenix-evals``, is licensed under the Elastic License 2.0 (source-available, not an OSI
open-source licence: among other limits it may not be offered to others as a hosted or managed
service); ragbridge itself is Apache-2.0 and only imports it when this extra is installed.
Registering this plugin does not import Phoenix (nor pandas and openai, which it imports); it is
imported when a run opens the backend.

Metrics
-------
Each canonical metric is one of Phoenix's ``ClassificationEvaluator`` classes from
``phoenix.evals.metrics``, called with ``await evaluator.async_evaluate(record)``: the judge answers
one label from the evaluator's choices with an explanation, Phoenix maps the label to its score, and
that score is ragbridge's ``value`` (already 0..1, higher is better). ``reason`` is Phoenix's
explanation, ``native_value`` ``{label, score}``, ``native_metric`` Phoenix's ``Score.name``,
``passed`` true for the passing label.

=====================  ================================  ===============================  ============
canonical              Phoenix evaluator                 label -> value                   calls/case
=====================  ================================  ===============================  ============
``faithfulness``       ``FaithfulnessEvaluator``         faithful 1.0, unfaithful 0.0     1
``context_relevance``  ``RetrievalRelevanceEvaluator``,  per chunk: relevant 1.0,         1 per chunk
                       once per retrieved chunk          irrelevant 0.0; value = the
                                                         share judged relevant
``abstention``         ``RefusalEvaluator``              refused 1.0, answered 0.0;       1 (0 when
                                                         undefined on answerable cases    answerable)
=====================  ================================  ===============================  ============

Why each label maps so, the records sent, and what is not offered (no reference-based correctness
and no answer relevance in Phoenix 3.x; its hallucination check is conversation-grounded) are in
:mod:`ragbridge_phoenix.metrics`, with what differs at older versions (``phoenix==2.13.0``, in an
environment of its own: ``context_relevance`` is Phoenix's document relevance, and
``answer_correctness`` its ``llm_classify`` QA template, removed in 3.0). Context relevance fills
``Score.evidence.chunks`` with each chunk's verdict and Phoenix's explanation; a case fails
(``error``) when any of its chunks fails, and the chunks that were judged stay in ``native_value``.

Inputs (``MetricSpec.requires``): faithfulness needs the answer and chunk text; context relevance
chunk text; abstention the answer; answer correctness (before 3.0) the answer and the reference.
Chunks without text are not sent, and a chunk id repeated in ``contexts`` is judged once, at its
first rank.

The judge
---------
Every call goes through ragbridge's judge gateway (``ctx.judge``): Phoenix's ``LLM(provider=
"openai")`` gets httpx clients on the gateway's in-process transports and the gateway's own key, so
Phoenix never sees the real key and every call is cached, retried, bounded and counted (each case's
calls are attributed to its Score). Requests are chat completions with one user message (Phoenix's
prompt) and a strict ``json_schema`` response format asking for ``explanation`` then ``label``;
Phoenix retries once with a forced tool call only when the server answers 400 to that, and keeps
that choice for the run. Generation: ``temperature=0.0`` and the judge's ``max_tokens`` when set.
Phoenix's client-side rate limiter (5 requests/s by default) is raised out of the way; the
gateway's ``max_concurrency`` bounds the run.

Failures are the Score's ``error`` (``Type: message``), never a default label: the judge's error
after the gateway's retries (``InternalServerError``, ``APITimeoutError``; a 429 that outlasts the
gateway's retries makes Phoenix hold its requests 5 s and raise its ``RateLimitError``), an answer
that is not JSON (``JSONDecodeError``), no content (``ValueError``), a label outside the choices
(``ValueError`` naming the valid labels). The runner then drops the case's cached answers, so a
broken answer is asked for again on the next run, not replayed. The dataframe helpers
(``evaluate_dataframe``: tqdm bars, ten retries, "DID NOT RUN" rows) are not used.

Options (``--option phoenix.KEY=VALUE``, ``[backends.phoenix]``, ``options={"phoenix": {...}}``):
``concurrency``, ``temperature``, ``include_explanation``
(:class:`ragbridge_phoenix.options.PhoenixOptions`).

Side effects, switched off
--------------------------
Phoenix evals has no usage telemetry, makes no network call and writes no file by itself. Its
OpenTelemetry spans (with the full prompt) are switched off or redacted while a run uses the
backend: :mod:`ragbridge_phoenix.env`.

Traces and evaluations
----------------------
Phoenix evals has no dataset file format of its own (it scores pandas DataFrames whose columns are
the prompt fields). Phoenix's tracing side has two: its span export, read as the trace format
``phoenix-spans`` (each trace a case, contexts from the retriever span), and span evaluations,
written by the score format ``phoenix`` (``ragbridge export-scores RUN --to phoenix``), which Phoenix
loads as evaluations. Neither needs Phoenix installed: :mod:`ragbridge_phoenix.formats`. A running
Phoenix server is a trace store, ``phoenix://HOST:PORT/PROJECT``: ``ragbridge sample --from`` pulls
its spans, ``ragbridge export-scores --to`` pushes the scores as annotations, over its REST API with
httpx (:mod:`ragbridge_phoenix.store`).

Files: ``backend.py`` (the backend, its run lifecycle, Phoenix's LLM and evaluators),
``metrics.py`` (canonical metric -> Phoenix evaluator, the label -> 0..1 mapping, the options),
``translate.py`` (a case -> Phoenix's records, Phoenix's result -> a Score), ``formats.py`` (the
span export and span evaluations), ``store.py`` (a Phoenix server: spans pulled, annotations pushed),
``env.py`` (the
environment defaults), ``stub.py`` (the stub judge's answers to Phoenix's prompts, registered
through ``ragbridge_register_stub_responders``), ``locks/`` (one lock per Phoenix evals version a
``phoenix==VERSION`` backend runs at).
"""

from __future__ import annotations

from ragbridge.plugin import hookimpl, lazy_names

__all__ = ["PhoenixBackend", "METRICS", "FORMATS", "SCORE_FORMATS", "STORE"]

#: the package's names, imported when first used: registering the plugin imports none of its modules
__getattr__ = lazy_names(__name__, {"PhoenixBackend": ".backend", "METRICS": ".metrics",
                                    "FORMATS": ".formats", "SCORE_FORMATS": ".formats", "STORE": ".store"})


@hookimpl
def ragbridge_register_backends(register):
    from ragbridge.plugin import LazyBackend

    register(LazyBackend("phoenix", "ragbridge_phoenix.backend:PhoenixBackend"))


@hookimpl
def ragbridge_register_formats(register):
    from .formats import FORMATS

    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_score_formats(register):
    from .formats import SCORE_FORMATS

    for fmt in SCORE_FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_trace_stores(register):
    from .store import STORE

    register(STORE)


@hookimpl
def ragbridge_register_stub_responders(register):
    from .stub import responders

    register(*responders(), first=False)  # in this order, ahead of the generic one
