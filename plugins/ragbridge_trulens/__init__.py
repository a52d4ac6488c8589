"""The TruLens backend: the RAG triad and ground-truth agreement, called as plain functions.

Installed with ``pip install 'ragbridge[trulens]'`` (trulens-core, trulens-feedback and
trulens-providers-openai 2.16.0 only; not the ``trulens`` metapackage, which pulls in Jupyter and
Streamlit). No ``TruSession``, no sqlite file, no instrumented app: each metric is one call of a
TruLens provider function on one case, with TruLens's ``OpenAI`` provider pointed at ragbridge's
judge gateway (its key, one httpx client on the gateway's in-process transport, calls attributed
to their case by ``tag_scope``).

Metrics, formulas and normalisation
-----------------------------------
TruLens asks the judge for an integer on a scale ``0..N`` (``N = 3`` by default; ``max_score``
may be 10 or 1, the other scales TruLens accepts) and normalises it itself to
``(raw - 0) / (N - 0)``, so on the default scale one judge call gives 0, 1/3, 2/3 or 1. ragbridge
keeps TruLens's normalised number as ``value`` (already 0..1, higher is better) and puts the
library's full result in ``native_value`` with the scale.

``faithfulness`` <- ``groundedness_measure_with_cot_reasons(source, statement)``
    ``source`` is the retrieved chunks' texts joined with a blank line, ``statement`` the answer.
    The answer is split into sentences, each sentence is graded 0..N against the source (one
    judge call each, with reasons), and the score is the mean of the normalised sentence grades.
    A sentence whose reply could not be parsed (-1) is left out of the mean, as TruLens does.
    ``native_value``: ``{score, scale, statements: [{criteria, supporting_evidence, score}]}``.
    Abstentions ("I don't know") are graded at the maximum by TruLens's prompt.
``context_relevance`` <- ``context_relevance_with_cot_reasons(question, context)``
    once per retrieved chunk (0..N each, normalised), aggregated by the **mean** over the chunks
    (TruLens's own ``agg=np.mean`` with ``collect_list=False``), or by the **max** with the backend
    option ``context_relevance_agg="max"``. ``native_value``:
    ``{per_chunk: [{id, score, reason}], mean, max, agg, scale}``.
``answer_relevance`` <- ``relevance_with_cot_reasons(prompt=question, response=answer)``
    one call, 0..N normalised. Refusals and "I don't know" are graded at the minimum.
``answer_correctness`` <- ``GroundTruthAgreement([{query, expected_response}]).agreement_measure``
    only for cases with a ``reference``: one plain-text judge call on TruLens's fixed 0-10 scale,
    divided by 10. TruLens gives no reasons for it; the reference is in ``native_value``.

Reasons from the ``*_with_cot_reasons`` functions are kept in ``reason`` (per sentence / per chunk).

Failures and undefined scores
-----------------------------
* TruLens's ``-1`` ("unparsable") becomes the Score's ``error`` (``UnparsableScore``), never a value.
* A judge error (after the gateway's own retries) is that Score's ``error``; TruLens's own retry loop
  (``run_in_pace``: 3 retries, 2/4/8 s sleeps) is switched off, the gateway retries instead.
* A context-relevance case fails when any of its chunks fails; the per-chunk results stay in
  ``native_value``.
* An answer with no sentence to grade is undefined (``value`` None, a reason, no error).

Endpoints: Responses API or chat completions
--------------------------------------------
TruLens 2.16 sends structured scoring calls to ``POST /v1/responses`` and falls back to chat
completions only when the error text says "not supported"; a plain 404 makes it retry for 14 s and
fail. The backend option ``api`` chooses: ``"auto"`` (default) probes ``/responses`` once per run
through the gateway (one tiny request, cached) and uses chat completions when it does not answer
2xx; ``"chat"`` and ``"responses"`` force a path. The choice is pre-seeded into TruLens's capability
cache, which ragbridge keys by model *and* endpoint (TruLens keys it by model name only).
On the chat path TruLens sends no ``response_format``; its prompts ask for JSON or for the
``Criteria / Supporting Evidence / Score`` template, and a text reply may cost TruLens one more
"convert to JSON" call.

Safe and offline
----------------
* Sentence splitting needs no download. ``sentence_split="nltk"`` (default) uses TruLens's nltk
  ``sent_tokenize`` with a minimal bundled Punkt model (written to a private temporary folder, used
  only when no real ``punkt_tab`` model is installed) and TruLens's per-call
  ``nltk.download("punkt_tab")`` is made a no-op (inside TruLens's module only).
  ``sentence_split="llm"`` sets ``use_sent_tokenize=False``: the judge splits the answer (one more
  call per answer).
* ``filter_trivial_statements=False`` always: TruLens's trivial-statement filter runs ``eval()`` on
  the judge's reply.
* TruLens's HTTP goes to the judge gateway in-process (``gateway.transport()``, ``trust_env=False``):
  TruLens opens no connection at all; only the gateway connects, to the judge.
  TruLens has no usage telemetry; ``TRULENS_OTEL_TRACING=0`` is set at ``import ragbridge``.
* Process-wide effects of TruLens itself, on import or provider construction: it wraps the openai
  SDK's ``create`` methods for cost tracking and sets ``KMP_DUPLICATE_LIB_OK=TRUE``.

Options (``RunOptions(backend_options={"trulens": {...}})``): ``api`` (auto|responses|chat),
``context_relevance_agg`` (mean|max), ``sentence_split`` (nltk|llm), ``max_score`` (3|10|1),
``temperature`` (0.0).

Formats: ``trulens`` reads and writes the RAG-triad table TruLens users keep (``query``,
``contexts``, ``response``, ``expected_response`` ... see `ragbridge_trulens.formats`;
``ragbridge convert golden.jsonl triad.jsonl --to trulens``), and
``ragbridge trulens-leaderboard RUN_DIR OUT.csv`` (or `ragbridge_trulens.formats.leaderboard`)
exports a run in the column layout of TruLens's leaderboard.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from pathlib import Path
from typing import AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext
from ragbridge.hookspecs import hookimpl
from ragbridge.schema import Case, Score

# TruLens warns at import about optional packages of its own requirements list ("Package jsonschema
# not present in requirements"); that line means nothing to a ragbridge user.
logging.getLogger("trulens.core.utils.imports").setLevel(logging.ERROR)

__all__ = ["TruLensBackend", "NATIVE_NAMES"]

NATIVE_NAMES = {
    "faithfulness": "groundedness_measure_with_cot_reasons",
    "context_relevance": "context_relevance_with_cot_reasons",
    "answer_relevance": "relevance_with_cot_reasons",
    "answer_correctness": "GroundTruthAgreement.agreement_measure",
}

PROBE_BODY_TEXT = "Reply with the single word OK."


class TruLensBackend(Backend):
    name = "trulens"
    library = "trulens-feedback"
    module = "trulens.feedback"
    install_hint = "pip install 'ragbridge[trulens]'"

    def version(self) -> Optional[str]:
        import importlib.metadata

        try:
            return importlib.metadata.version("trulens-feedback")
        except importlib.metadata.PackageNotFoundError:
            return None

    def available(self) -> bool:
        """Both distributions installed (checked from their metadata: nothing is imported)."""
        import importlib.metadata

        try:
            for dist in ("trulens-feedback", "trulens-providers-openai", "trulens-core"):
                importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def metrics(self) -> list[MetricSpec]:
        return [
            MetricSpec("faithfulness", NATIVE_NAMES["faithfulness"], requires=("answer", "context_text"),
                       judge=True, description="TruLens groundedness: mean per-sentence support, 0-3 scale / 3"),
            MetricSpec("context_relevance", NATIVE_NAMES["context_relevance"], requires=("context_text",),
                       judge=True, description="TruLens context relevance per chunk (0-3 / 3), mean (or max)"),
            MetricSpec("answer_relevance", NATIVE_NAMES["answer_relevance"], requires=("answer",),
                       judge=True, description="TruLens answer relevance, 0-3 scale / 3"),
            MetricSpec("answer_correctness", NATIVE_NAMES["answer_correctness"], requires=("answer", "reference"),
                       judge=True, description="TruLens ground-truth agreement, 0-10 scale / 10"),
        ]

    # -- scoring ---------------------------------------------------------------------------------
    async def _api_mode(self, ctx: ScoringContext, settings) -> str:
        """The endpoint family to use, probed once per run when ``api="auto"``."""
        if settings.api != "auto":
            return settings.api
        lock = ctx.stats.setdefault("trulens_api_lock", asyncio.Lock())
        async with lock:
            mode = ctx.stats.get("trulens_api")
            if mode is None:
                mode = await asyncio.to_thread(self._probe, ctx)
                ctx.stats["trulens_api"] = mode
        return mode

    def _probe(self, ctx: ScoringContext) -> str:
        import httpx

        gw = ctx.judge
        url = gw.base_url(self.name, "responses-api-probe", None, in_process=True) + "/responses"
        body = {"model": gw.config.model, "input": PROBE_BODY_TEXT, "max_output_tokens": 16}
        try:
            with httpx.Client(transport=gw.transport(), trust_env=False, timeout=gw.config.client_timeout()) as client:
                r = client.post(url, json=body, headers={"Authorization": f"Bearer {gw.api_key}"})
            if 200 <= r.status_code < 300 and isinstance(r.json().get("output"), list):
                return "responses"
        except Exception:  # noqa: BLE001 - any failure: use the path every server has
            pass
        return "chat"

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        from . import scoring

        if ctx.judge is None:
            raise RuntimeError("the trulens backend needs a judge (--judge-model, --judge-base-url)")
        settings = scoring.TruLensSettings.from_options(ctx.options.backend_options.get(self.name))
        fn = scoring.METRIC_FUNCTIONS[metric]
        gw = ctx.judge
        api = await self._api_mode(ctx, settings)
        if metric == "faithfulness" and settings.sentence_split == "nltk":
            await asyncio.to_thread(scoring.offline_sentence_splitter)
        provider, executor = await self._acquire_provider(ctx, api)
        loop = asyncio.get_running_loop()

        def one(case: Case) -> Score:
            t0 = time.perf_counter()
            base = dict(case_id=case.id, metric=metric, backend=self.name, native_metric=NATIVE_NAMES[metric])
            try:
                with gw.tag_scope(self.name, metric, case.id):
                    value, native, reason = fn(provider, case, settings)
            except scoring.ChunkScoreError as exc:
                return Score(**base, native_value={**exc.native, "api": api}, error=f"{type(exc).__name__}: {exc}",
                             seconds=time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - one case's failure is that Score's error
                msg = " ".join(str(exc).split())
                return Score(**base, error=f"{type(exc).__name__}: {msg[:1000]}", seconds=time.perf_counter() - t0)
            if isinstance(native, dict):
                native = {**native, "api": api}
            return Score(**base, value=value, native_value=native, reason=reason, seconds=time.perf_counter() - t0)

        futures: list = []
        try:
            futures = [loop.run_in_executor(executor, one, case) for case in cases]
            for fut in asyncio.as_completed(futures):
                yield await fut
        finally:
            for fut in futures:
                fut.cancel()
            self._release_provider(ctx)

    # One TruLens provider (one httpx client) per run and endpoint family, and one thread pool,
    # shared by the metrics; closed when the last metric of the run is done.
    async def _acquire_provider(self, ctx: ScoringContext, api: str):
        from . import scoring

        shared = ctx.stats.setdefault("trulens_providers", {"users": 0, "by_api": {}, "executor": None})
        shared["users"] += 1
        if shared["executor"] is None:
            # The standard library's pool: importing TruLens replaces concurrent.futures'
            # ThreadPoolExecutor process-wide with one that captures inspect.stack() on every submit.
            try:
                from trulens.core.utils.threading import fThreadPoolExecutor as pool_cls
            except ImportError:  # pragma: no cover - other TruLens versions
                pool_cls = concurrent.futures.ThreadPoolExecutor
            shared["executor"] = pool_cls(max_workers=ctx.judge.config.max_concurrency + 4,
                                          thread_name_prefix="ragbridge-trulens")
        lock = ctx.stats.setdefault("trulens_provider_lock", asyncio.Lock())
        async with lock:
            provider = shared["by_api"].get(api)
            if provider is None:
                gw, cfg = ctx.judge, ctx.judge.config
                provider = await asyncio.to_thread(
                    scoring.make_provider, cfg.model, gw.base_url(in_process=True), gw.api_key, api=api,
                    timeout=cfg.client_timeout(), transport=gw.transport())
                shared["by_api"][api] = provider
        return provider, shared["executor"]

    def _release_provider(self, ctx: ScoringContext) -> None:
        shared = ctx.stats.get("trulens_providers")
        if not shared:
            return
        shared["users"] -= 1
        if shared["users"] <= 0:
            for provider in shared["by_api"].values():
                try:
                    provider.endpoint.client.client.close()
                except Exception:  # noqa: BLE001 - pragma: no cover
                    pass
            shared["by_api"].clear()
            if shared["executor"] is not None:
                shared["executor"].shutdown(wait=False, cancel_futures=True)
                shared["executor"] = None


@hookimpl
def ragbridge_register_backends(register):
    register(TruLensBackend())


@hookimpl
def ragbridge_register_formats(register):
    from .formats import FORMATS

    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_commands(cli):
    import typer

    @cli.command("trulens-leaderboard")
    def trulens_leaderboard(
        run_dir: Path = typer.Argument(..., help="A run folder."),
        out: Path = typer.Argument(..., help="Where to write it: .csv or .json (records)."),
        backend: str = typer.Option("trulens", "--backend", "-b",
                                    help="Whose scores to export; 'all' gives one row per backend."),
        per_record: bool = typer.Option(False, "--per-record",
                                        help="One row per case (get_records_and_feedback's columns)."),
    ) -> None:
        """Export a run's scores in the column layout of TruLens's leaderboard."""
        from ragbridge.run import RunError, load_run

        from .formats import write_leaderboard

        try:
            run = load_run(run_dir)
        except RunError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        path = write_leaderboard(run, out, backend=None if backend == "all" else backend, per_record=per_record)
        typer.echo(f"wrote {path}")
