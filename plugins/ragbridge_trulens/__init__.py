"""ragbridge's TruLens backend: the RAG triad and ground-truth agreement, called as plain functions.

Installed with ``pip install 'ragbridge[trulens]'`` (trulens-core, trulens-feedback and
trulens-providers-openai 2.16.0 only; not the ``trulens`` metapackage, which pulls in Jupyter and
Streamlit). TruLens 1.5.3 and 2.16.0 also run in environments of their own (``--backend
trulens==1.5.3``, from ``locks/``); where 1.5 differs, the code chooses by the installed version
(``TruLensBackend.changes`` says what a user sees change). No ``TruSession``, no sqlite file, no
instrumented app: each metric is one call of a TruLens provider function on one case, with TruLens's
``OpenAI`` provider pointed at ragbridge's judge gateway (its key, one httpx client on the gateway's
in-process transport, calls attributed to their case by ``tag_scope``).

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
    ``native_value``: ``{score, scale, statements: [{criteria, supporting_evidence, score}]}``
    (TruLens 1.5 gives no per-sentence ``score``: its reasons are one text, split per sentence).
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
fail. TruLens 1.5 sends them there for every model name but gpt-3.5 and the gpt-4 models before
gpt-4o, with no fallback at all. The backend option ``api`` chooses: ``"auto"`` (default) probes
``/responses`` once per run through the gateway (one tiny request, cached) and uses chat completions
when it does not answer 2xx; ``"chat"`` and ``"responses"`` force a path. The choice is pre-seeded
into TruLens's capability cache, which ragbridge keys by model *and* endpoint (TruLens keys it by
model name only); on TruLens 1.5 it replaces the model-name rule (a probe that finds ``/responses``
leaves the rule).
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
  TruLens has no usage telemetry; ``TRULENS_OTEL_TRACING=0`` is set while a run uses the backend
  (:mod:`ragbridge_trulens.env`; a value the user set wins), before TruLens is first imported.
* Process-wide effects of TruLens itself, on import or provider construction: it wraps the openai
  SDK's ``create`` methods for cost tracking and sets ``KMP_DUPLICATE_LIB_OK=TRUE``.

Options (``--option trulens.KEY=VALUE``, ``[backends.trulens]``, ``options={"trulens": {...}}``;
:class:`ragbridge_trulens.options.TruLensOptions`): ``api`` (auto|responses|chat),
``context_relevance_agg`` (mean|max), ``sentence_split`` (nltk|llm), ``max_score`` (3|10|1),
``temperature`` (0.0), ``concurrency`` (cases in flight; default twice the judge's
``max_concurrency``).

Formats: ``trulens`` reads and writes the RAG-triad table TruLens users keep (``query``,
``contexts``, ``response``, ``expected_response`` ... see `ragbridge_trulens.formats`;
``ragbridge convert golden.jsonl triad.jsonl --to trulens``), and
``ragbridge trulens-leaderboard RUN_DIR OUT.csv`` (or `ragbridge_trulens.leaderboard.leaderboard`)
exports a run in the column layout of TruLens's leaderboard.

Files: ``backend.py`` (the backend, its run lifecycle, the provider), ``metrics.py`` (canonical metric
-> TruLens feedback function, the options), ``translate.py`` (a case -> TruLens' inputs, its result
-> a Score), ``formats.py`` (the dataset formats and the leaderboard), ``env.py`` (the environment
defaults, sentence splitting offline), ``stub.py`` (the stub judge's answers to TruLens' prompts,
registered through ``ragbridge_register_stub_responders``).
"""

from __future__ import annotations

from pathlib import Path

from ragbridge.plugin import hookimpl, lazy_names

__all__ = ["TruLensBackend", "METRICS"]

#: the package's names, imported when first used: registering the plugin imports none of its modules
__getattr__ = lazy_names(__name__, {"TruLensBackend": ".backend", "METRICS": ".metrics"})


@hookimpl
def ragbridge_register_backends(register):
    from ragbridge.plugin import LazyBackend

    register(LazyBackend("trulens", "ragbridge_trulens.backend:TruLensBackend"))


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
def ragbridge_register_stub_responders(register):
    from .stub import responders

    register(*responders(), first=False)  # in this order, ahead of the generic one


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
        import shutil
        import textwrap
        import warnings

        from ragbridge.plugin import DatasetError, RunError, distinct_output, load_run, run_files

        from .leaderboard import UnknownCost, write_leaderboard

        try:
            distinct_output(out, run_files(run_dir))
            run = load_run(run_dir)
        except (RunError, DatasetError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            path = write_leaderboard(run, out, backend=None if backend == "all" else backend,
                                     per_record=per_record)
        width = max(shutil.get_terminal_size().columns, 40)
        # ours, wrapped at the terminal's width (80 when piped), as the commands' warnings
        for w in (w for w in said if issubclass(w.category, UnknownCost)):
            typer.echo(textwrap.fill(f"warning: {w.message}", width, subsequent_indent="    ",
                                     break_long_words=False, break_on_hyphens=False), err=True)
        typer.echo(f"wrote {path}")
