"""The synthetic-set plugin's command, ``ragbridge synthesize``: generate a synthetic golden set from
a corpus through the run's judge, measure its three known weaknesses (beside a real set with
``--compare-to``), and write it.

Exit codes:
  0    the set was written (or, with --review, the review file; with --dry-run, nothing)
  2    bad input or configuration (the corpus, the mix, the review file, the judge); nothing written
  3    some questions failed (a judge error, a reply that is not a question after the re-asks):
       what was made is kept in the work folder; run it again to retry them (or --drop-failed)
  4    the judge budget was spent: run it again with a larger budget to go on
  130  interrupted: run it again to go on
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Optional

import typer

from ..commands import JudgeOptions, judge_options

# What the command prints with (rich, the output helpers) is imported when it runs: registering it
# (every ``ragbridge`` command line, ``--help`` included) imports neither.

__all__ = ["register", "synthesize"]

#: how the weaknesses are named in the table
_LABELS = {"copied_terms": "passage terms the question repeats", "bm25_top1": "passage ranked first by BM25",
           "bm25_mrr": "BM25 reciprocal rank of the passage", "one_passage": "one answer passage",
           "unanswerable": "unanswerable"}
_REASONS = {"unplaced": "the quote is not in the passage", "short_quote": "the quote is too short to label "
            "an answer", "one_passage": "the answer uses one passage", "unrelated": "no related passage in "
            "another document", "not_a_question": "the library's question is not one",
            "not_reworded": "the rewording kept the passage's words", "answered": "the corpus answers it",
            "duplicate": "asked before",
            "unusable": "the judge's reply was unusable", "review": "dropped in review"}


def register(cli: typer.Typer) -> None:
    cli.command("synthesize")(synthesize)


@judge_options
def synthesize(
    corpus: Path = typer.Argument(
        ..., help="The documents: a folder of text or markdown files, one such file, or a JSONL of "
                  "{doc, text}."),
    out_path: Path = typer.Option(
        ..., "--out", "-o", help="The golden set to write (.jsonl, .csv, ...); its work folder OUT.work/ "
                                 "lets the same command resume."),
    n: int = typer.Option(100, "--n", help="Questions to generate."),
    mix: Optional[str] = typer.Option(
        None, "--mix", help="Kinds and their shares, as KIND=SHARE joined by commas; the kinds are single, "
                            "multi, paraphrased and unanswerable (default: 0.5, 0.2, 0.2 and 0.1)."),
    generator: str = typer.Option(
        "ragbridge", "--generator", help="Who writes the questions: ragbridge, or a library's generator its "
                                         "plugin registers."),
    seed: int = typer.Option(0, "--seed", help="Seed of the plan's (and the library's) random choices."),
    compare_to: Optional[Path] = typer.Option(
        None, "--compare-to", help="A real golden set over the same corpus: its weaknesses beside the "
                                   "synthetic set's."),
    combined: Optional[Path] = typer.Option(
        None, "--combined", help="Also write the real set (tagged real) and the synthetic set as one golden "
                                 "set, for one run and a report of both side by side."),
    review: bool = typer.Option(
        False, "--review", help="Write OUT.review.csv to drop questions by hand (with why) first; the same "
                                "command again writes the kept ones."),
    drop_failed: bool = typer.Option(
        False, "--drop-failed", help="Drop (and count) questions whose judge reply is still unusable after "
                                     "the re-asks, instead of failing."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start the work folder again."),
    max_calls: Optional[int] = typer.Option(
        None, "--max-calls", min=0, help="Judge budget: at most this many upstream calls (all sessions)."),
    max_cost: Optional[float] = typer.Option(
        None, "--max-cost", min=0, help="Judge budget in money, by the judge config's price table."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Call and write nothing: print the plan and about how many judge calls (and "
                                 "what cost) the generation would make."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    judge: JudgeOptions = JudgeOptions({}),
) -> None:
    """Generate a synthetic golden set from a corpus, labelled by spans, with its weaknesses measured.

    \b
    Exit codes:
      0    written (or the review file; with --dry-run, nothing)
      2    bad input or configuration; nothing written
      3    some questions failed: run it again to retry them (or --drop-failed)
      4    the judge budget was spent: run it again with a larger budget
      130  interrupted: run it again to go on
    """
    from rich.markup import escape

    from ..commands.output import (EXIT_BUDGET_SPENT, EXIT_INTERRUPTED, EXIT_SCORE_ERRORS, err, fail,
                                   refuse_overwriting, storage_error)
    from ..formats import DatasetError
    from .synthesis import SynthError, synthesize as make

    for output in (out_path, combined):
        refuse_overwriting(output, corpus, compare_to)
    cfg = judge.load()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Reader(sys.stdout), _Reader(sys.stderr)  # a reader may go away mid-way
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            result = make(corpus, n, out_path, judge=cfg, mix=mix, generator=generator, seed=seed,
                          max_calls=max_calls, max_cost=max_cost, dry_run=dry_run, overwrite=overwrite,
                          drop_failed=drop_failed, review=review, compare_to=compare_to, combined=combined,
                          progress=not no_progress and not dry_run)
        except (SynthError, DatasetError) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            err.print(f"[bold red]error:[/] interrupted; what was made is kept in "
                      f"{escape(str(out_path.with_suffix('.work')))}; run the same command again to go on",
                      highlight=False, soft_wrap=True)
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(EXIT_INTERRUPTED)
        except OSError as exc:
            if storage_error(exc) is None:
                raise
            fail(f"cannot write {out_path}: {storage_error(exc)}; what was made is kept in its work folder")
        finally:
            signal.signal(signal.SIGTERM, previous)
        if as_json:
            _print_json(result, compare_to)
        else:
            _print(result, out_path, compare_to)
        if result.status == "budget":
            raise typer.Exit(EXIT_BUDGET_SPENT)
        if result.status in ("errored", "interrupted"):
            raise typer.Exit(EXIT_SCORE_ERRORS)
    finally:
        sys.stdout, sys.stderr = streams


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


class _Reader:
    """A standard stream whose reader may go away (``| head``, a closed log pipe): from the first write
    that finds the pipe closed, what is written goes to the null device, so the generation (and a
    library's progress bars, which can deadlock on the error) goes on and the set is written."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _closed(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _num(v: Optional[float]) -> str:
    from ..report.text import MISSING

    return MISSING if v is None else f"{v:.3f}"


def _signed(v: Optional[float]) -> str:
    from ..report.text import MISSING

    return MISSING if v is None else f"{v:+.3f}"


def _print_json(result, compare_to: Optional[Path]) -> None:
    from ..commands.output import print_json

    print_json({"status": result.status, "generator": result.generator, "stub_judge": result.stub,
                "counts": result.counts, "judge": result.judge, "weaknesses": result.rows(),
                "compare_to": str(compare_to) if compare_to else None,
                "n_real": (result.weaknesses.get("real") or {}).get("n"),
                "dropped": result.dropped, "errors": result.errors, "written": result.written,
                "work": result.work})
    _exit_notes(result, json_mode=True)


def _print(result, out_path: Path, compare_to: Optional[Path]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..commands.output import out, print_lines, print_table

    c = result.counts
    if result.status == "dry-run":
        _print_dry_run(result)
        return
    kinds = ", ".join(f"{k} {v['made']} of {v['planned']}" for k, v in c.get("by_kind", {}).items())
    pending = f", {c['pending']} not made yet" if c.get("pending") else ""
    print_lines(out, [f"{c['made']} of {c['planned']} questions made by {result.generator} ({kinds}); "
                      f"{c['dropped']} dropped{pending}"])
    if c.get("dropped_by_reason"):
        print_lines(out, ["dropped: " + "; ".join(f"{_REASONS.get(k, k)} {v}"
                                                  for k, v in c["dropped_by_reason"].items())])
    print_lines(out, [f"note: {n}" for n in result.notes])
    if result.stub:
        out.print("[yellow]written by the stub judge: these questions test plumbing, not a model[/]",
                  highlight=False)
    j = result.judge
    if j:
        money = "" if j.get("cost") is None else f", cost {j['cost']:.4f} {j['currency']}"
        out.print(f"[dim]judge: {j['calls']} call(s), {j['cache_hits']} from cache, "
                  f"{j['prompt_tokens']}+{j['completion_tokens']} tokens{money}[/]", highlight=False)
    rows = result.rows()
    real = result.weaknesses.get("real")
    title = ("The three weaknesses of generated questions" + (f", beside the real set {compare_to}"
                                                               if real is not None else ""))
    table = Table(title=escape(title), title_justify="default")
    for col in ["measure", "synthetic", *(["real", "difference"] if real is not None else [])]:
        table.add_column(col, justify="left" if col == "measure" else "right", no_wrap=True)
    lines = []
    for r in rows:
        cells = [_LABELS[r["measure"]], _num(r["synthetic"])]
        line = f"{_LABELS[r['measure']]}: synthetic {_num(r['synthetic'])}"
        if real is not None:
            cells += [_num(r["real"]), _signed(r["difference"])]
            line += f", real {_num(r['real'])}, difference {_signed(r['difference'])}"
        table.add_row(*cells)
        lines.append(line)
    print_table(out, table, lines)
    syn = result.weaknesses.get("synthetic") or {}
    note = (f"[dim]over {syn.get('n_labelled', 0)} synthetic" + (f" and {real['n_labelled']} real"
                                                                 if real is not None else "")
            + " answerable question(s) with span labels; the passages are the corpus's paragraphs[/]")
    out.print(note, highlight=False)
    written = result.written
    if "review" in written:
        print_lines(out, [f"review file written to {written['review']}: set decision to drop (and say why) "
                          "for the questions to leave out, then run the same command again"])
    elif "out" in written:
        extra = "".join(f"; {k} {v}" for k, v in written.items() if k != "out")
        print_lines(out, [f"written to {written['out']} ({len(result.cases)} cases{extra})"])
        if "reviewed_out" in c:
            print_lines(out, [f"review: {c['reviewed_out']} dropped, {c.get('reviewed_edited', 0)} edited "
                              "(the generated wording kept in metadata.review.edited)"])
    _exit_notes(result, json_mode=False)


def _print_dry_run(result) -> None:
    """What a dry run found: the plan and the judge calls it would make. The questions the stub judge
    simulated, their drops and their weaknesses are not shown: they are the stub's, not the judge's."""
    from ..commands.output import out, print_lines

    c, j = result.counts, result.judge
    kinds = ", ".join(f"{k} {v['planned']}" for k, v in c.get("by_kind", {}).items())
    lines = [f"dry run: {c['planned']} questions planned by {result.generator} ({kinds}); nothing was "
             "called or written"]
    if j.get("calls") or j.get("cache_hits"):
        money = "" if j.get("cost") is None else f", about {j['cost']:.4f} {j['currency']}"
        lines.append(f"the generation would make about {j['calls']} judge call(s) "
                     f"({j['prompt_tokens']}+{j['completion_tokens']} tokens{money}); {j['cache_hits']} "
                     "more request(s) answered from the judge cache")
        lines.append("an estimate: the answers the cache does not hold were simulated by the stub judge, and "
                     "a real judge's answers change the re-asks and checks that follow them")
    else:
        lines.append("every question is made already: the generation would make no judge call")
    print_lines(out, lines)
    print_lines(out, [f"note: {n}" for n in result.notes])


def _exit_notes(result, json_mode: bool) -> None:
    """The error lines of a generation that did not finish (stderr)."""
    from rich.markup import escape

    from ..commands.output import err, warn

    work = result.work or "the work folder"
    kept = (f"what was made is kept in {escape(work)}" if result.generator == "ragbridge" else
            "the library's judge calls so far are kept in the judge cache")
    for e in result.errors[:5]:
        err.print(f"[red]error[/] {escape(str(e.get('slot') or ''))} {escape(e['error'])}", highlight=False,
                  soft_wrap=True)
    if len(result.errors) > 5:
        err.print(f"... and {len(result.errors) - 5} more", highlight=False)
    if result.status == "budget":
        err.print(f"[bold yellow]judge budget spent: {result.counts.get('pending', 0)} question(s) not "
                  f"made[/]; {kept}, nothing else was written; run the same command with a larger budget to "
                  "go on", highlight=False, soft_wrap=True)
    elif result.status in ("errored", "interrupted"):
        unusable = sum(1 for e in result.errors if e.get("unusable"))
        err.print(f"[bold red]{result.counts.get('pending', 0)} question(s) not made[/] "
                  f"({len(result.errors)} failed); {kept}, nothing else was written; run the same command "
                  "again to retry them"
                  + (" (or add --drop-failed to drop the ones whose reply is unusable)" if unusable else ""),
                  highlight=False, soft_wrap=True)
    if not json_mode and result.status == "complete" and result.counts.get("made", 0) == 0:
        warn("no question was made: every one was dropped")
