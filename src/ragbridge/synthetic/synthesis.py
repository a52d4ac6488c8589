"""`synthesize`: a corpus in, a synthetic golden set out, through the run's judge gateway.

Steps: the corpus is read and cut into passages; the plan is made (`plan.plan_slots`, for
ragbridge's own generator) or the library's generator chosen (`delegate.Generator`); with ``out``,
the work folder (`work.WorkFolder`) is made or resumed; the judge gateway is started as a run starts
it (SQLite cache, budget over every session from the folder's tally, audit log, the stub's answers
in a dry run) and checked first (`JudgeGateway.preflight`); the questions are made; then, when every
slot is settled, the golden set is written in one piece (or the review file, `review`), and the
three weaknesses are measured (`weaknesses.measure`), beside a real set when one is given.

Bad input (a corpus that cannot be read, a mix that cannot be planned, a folder of other settings, a
judge that cannot answer) raises before anything is called or written: `SynthError` or
`~ragbridge.formats.DatasetError`. Faults after that are the result's ``status``: ``errored`` (a
judge error, a reply that is still not a question after the re-asks: the same call again retries
them), ``budget`` (the budget ran out: the same call with a larger one goes on), ``interrupted``;
then the golden set is not written, and the work folder keeps what was made.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .. import __version__
from ..formats import DatasetError, load_cases, write_cases, writing_format
from ..formats.corpus import Corpus, place_cases, read_corpus
from ..schema import Case
from ..lexical import BM25
from .passages import cut_passages
from .plan import KINDS, MIN_SOURCE_CHARS, PlanError, allocate, left_out, parse_mix, plan_slots
from .work import WorkError, WorkFolder, corpus_fingerprint, work_folder_for

__all__ = ["synthesize", "synthesize_async", "Synthesis", "SynthError", "BUILTIN"]

BUILTIN = "ragbridge"


class SynthError(ValueError):
    """A generation that cannot start (bad settings; says what and what to do)."""


@dataclass
class Synthesis:
    """What a generation made (``cases``, canonical, in plan order) and what it found.

    ``status``: ``complete``, ``review`` (written for review, see `ragbridge.synthetic.review`),
    ``dry-run``, ``errored``, ``budget`` or ``interrupted``. ``counts``: ``planned``, ``made``,
    ``dropped`` (by reason), ``pending``, and per kind. ``dropped`` and ``errors``: a row per question.
    ``judge``: the judge calls, cache hits, tokens and cost of this session. ``weaknesses``: the
    figures of the synthetic set and, with ``compare_to``, of the real one (`weaknesses.measure`).
    ``written``: the files written. ``notes``: what the generator had to say (a kind it could not
    make)."""

    cases: list[Case]
    status: str
    generator: str
    counts: dict[str, Any]
    dropped: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    judge: dict[str, Any] = field(default_factory=dict)
    weaknesses: dict[str, Any] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    work: Optional[str] = None
    stub: bool = False
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        c = self.counts
        if self.status == "dry-run":  # the questions are the stub judge's simulation: only the plan and calls
            return (f"Synthesis(dry-run: {c.get('planned', 0)} questions planned by {self.generator}; about "
                    f"{self.judge.get('calls', 0)} judge call(s) to make, nothing called or written)")
        lines = [f"Synthesis({self.status}: {c.get('made', 0)} of {c.get('planned', 0)} questions made by "
                 f"{self.generator}, {c.get('dropped', 0)} dropped"
                 + "".join(f"; {k} {v}" for k, v in self.written.items()) + ")"]
        real = self.weaknesses.get("real") is not None
        for r in self.rows():
            cells = [f"synthetic {_fmt(r['synthetic'])}"]
            if real:
                cells += [f"real {_fmt(r['real'])}"]
            lines.append(f"  {r['measure']}: " + ", ".join(cells))
        return "\n".join(lines)

    def rows(self) -> list[dict[str, Any]]:
        """The weaknesses as rows: synthetic beside real (`weaknesses.compare_rows`)."""
        from .weaknesses import compare_rows

        return compare_rows(self.weaknesses.get("synthetic") or {}, self.weaknesses.get("real"))


def _fmt(v: Optional[float]) -> str:
    return "—" if v is None else f"{v:.3f}"


def synthesize(corpus: Any, n: int = 100, out: str | Path | None = None, **kwargs: Any) -> Synthesis:
    """Generate ``n`` golden cases from ``corpus`` (see `synthesize_async` for every argument). Works
    in a notebook cell as in a script (`ragbridge.run.sync.run_sync`)."""
    from ..run.sync import run_sync

    return run_sync(synthesize_async(corpus, n, out, **kwargs))


async def synthesize_async(
    corpus: Any,
    n: int = 100,
    out: str | Path | None = None,
    *,
    judge: Any = None,
    mix: Optional[str | dict[str, float]] = None,
    generator: str = BUILTIN,
    seed: int = 0,
    max_calls: Optional[int] = None,
    max_cost: Optional[float] = None,
    dry_run: bool = False,
    overwrite: bool = False,
    drop_failed: bool = False,
    review: bool = False,
    compare_to: Any = None,
    combined: str | Path | None = None,
    options: Optional[dict[str, Any]] = None,
    progress: bool = False,
) -> Synthesis:
    """Generate golden cases from ``corpus`` through ``judge`` (a `~ragbridge.judge.JudgeConfig`).

    ``corpus``: a path (`ragbridge.formats.corpus.read_corpus`) or a ``Corpus``. ``n``: questions to
    plan. ``mix``: ``"single=0.5,multi=0.2,paraphrased=0.2,unanswerable=0.1"`` or a dict (default
    that mix; for a library generator, its kinds). ``generator``: ``"ragbridge"`` or the name a
    plugin registers (``ragbridge_register_generators``). ``seed``: the plan's (and the library's)
    random choices. ``out``: the golden set to write (any format `ragbridge.write_cases` writes); its
    work folder ``OUT.work/`` lets the same call resume. ``max_calls`` / ``max_cost``: the judge
    budget over every session. ``dry_run``: call and write nothing; ``judge`` in the result is what
    the generation would spend (the stub judge answers what the cache does not hold). ``overwrite``:
    start the work folder again. ``drop_failed``: settle a question whose reply is still unusable
    after the re-asks as dropped, instead of leaving it to the next session. ``review``: write the
    review file instead of ``out`` (then, once reviewed, ``out``). ``compare_to``: a real golden set
    (a path or cases) whose weaknesses are measured beside the synthetic set's; ``combined``: also
    write that real set (each case tagged ``real``) followed by the synthetic one, one golden set.
    ``options``: the generator's own. ``progress``: show the questions settled on stderr (a bar on a
    terminal, a line every 30 s in a log) while ragbridge's own generator works.
    """
    if judge is None:
        raise SynthError("generating questions needs a judge: pass --judge-model and --judge-base-url (or "
                         "set [judge] in ragbridge.toml)")
    if n < 1:
        raise SynthError(f"--n must be at least 1, got {n}")
    if review and out is None:
        raise SynthError("--review needs --out: the review file is written beside it")
    if combined is not None and compare_to is None:
        raise SynthError("--combined needs --compare-to: the real set it joins to the synthetic one")
    # an output no format writes, or that cannot be written where it is named, is refused before the
    # corpus is read and the judge called
    for path, what in ((out, "--out"), (combined, "--combined")):
        if path is not None:
            writing_format(path)
            _check_writable(Path(path), what)
    if out is not None:
        _check_writable(work_folder_for(Path(out)), "--out's work folder", folder=True)
    if judge.cache_path is not None and judge.cache_mode == "read-write" and not dry_run:
        _check_writable(Path(judge.cache_path), "the judge cache (--cache-path)")
    docs = corpus if isinstance(corpus, Corpus) else _read_corpus(corpus)
    passages = cut_passages(docs)
    bm25 = BM25([p.text for p in passages])
    lib = _generator(generator)
    kinds = lib.kinds if lib is not None else KINDS
    try:
        shares = parse_mix(mix, kinds) if not isinstance(mix, dict) else parse_mix(
            ",".join(f"{k}={v}" for k, v in mix.items()), kinds)
        slots = plan_slots(passages, n, shares, seed, bm25)
    except PlanError as exc:
        raise SynthError(str(exc)) from None
    real = _real_cases(compare_to, docs)
    plan = {"generator": generator, "corpus": docs.path, "corpus_fingerprint": corpus_fingerprint(docs.texts),
            "n": n, "mix": {k: round(v, 6) for k, v in shares.items()}, "seed": seed,
            "judge": {"model": judge.model, "base_url": _judge_identity(judge)},
            "options": options or {}, "ragbridge_version": __version__,
            **({"library_version": lib.version()} if lib is not None else {})}
    work = None
    folder = WorkFolder(work_folder_for(Path(out))) if out is not None else None
    try:
        # what the folder holds is not made (nor, in a dry run, counted) again
        done = {} if folder is None or overwrite else folder.peek(plan)
        settled = _settled(done, slots) if lib is None else bool(done.get("_complete"))
        if not settled and not dry_run:
            _preflight(judge)  # a judge that cannot answer is refused before anything is written
        if folder is not None and not dry_run:
            done = folder.prepare(plan, overwrite)
            work = folder
    except WorkError as exc:
        raise SynthError(str(exc)) from None
    result = Synthesis(cases=[], status="complete", generator=generator, counts={},
                       work=str(work.path) if work is not None else None)
    try:
        if not settled:
            await _generate(result, lib, docs, passages, bm25, slots, shares, n, seed, judge, work, done,
                            max_calls, max_cost, dry_run, drop_failed, options or {}, progress)
    finally:
        if work is not None:
            work.close()
    items = work.items() if work is not None else {**done, **result.counts.pop("_items", {})}
    if "_complete" in items and not result.notes:
        result.notes = list(items["_complete"].get("notes") or [])
    gone = left_out(passages, list(docs.texts))
    if gone:
        result.notes.append(f"{len(gone)} document(s) have no passage of {MIN_SOURCE_CHARS} characters or "
                            f"more to write a question from: {', '.join(gone[:5])}"
                            + (", ..." if len(gone) > 5 else ""))
    result.stub = result.stub or any(i.get("stub") for i in items.values())
    _assemble(result, items, slots, n, shares, lib is not None)
    if out is not None and result.status == "complete":
        _write(result, Path(out), review, real, combined)
    from .weaknesses import measure

    # measured on the set as written: without the questions dropped in review, with their edits (a dry
    # run's questions are the stub judge's simulation: not measured)
    if result.status != "dry-run":
        result.weaknesses["synthetic"] = measure(result.cases, docs, passages, bm25)
    if real is not None:
        result.weaknesses["real"] = measure(real, docs, passages, bm25)
    return result


def _check_writable(path: Path, what: str, folder: bool = False) -> None:
    """`SynthError` when ``path`` cannot be written: it is a folder (a file, for ``folder``), or the
    nearest existing folder above it is a file or not writable. Nothing is made."""
    kind = "folder" if folder else "file"
    if path.exists() and path.is_dir() != folder:
        raise SynthError(f"{what} {path} is a {'file' if folder else 'folder'}, not a {kind}: name another")
    above = path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise SynthError(f"{what} {path} cannot be written: {above} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SynthError(f"{what} {path} cannot be written: no permission to write in {above}")


def _judge_identity(judge: Any) -> str:
    """The judge's server as the work folder compares it: ragbridge's stub judge on this machine by
    its settings, not by the port it was given when started (`ragbridge.judge.config.identity_url`;
    asked through its list of models, which is no judge call)."""
    from ..judge.config import identity_url
    from ..judge.dialect import endpoints_of
    from ..judge.preflight import detect_stub

    return identity_url(judge.base_url, detect_stub(judge, endpoints_of(judge)[0]))


def _read_corpus(path: Any) -> Corpus:
    try:
        return read_corpus(path)
    except DatasetError as exc:
        if exc.hint and exc.hint.startswith("--corpus names"):
            exc.hint = exc.hint.replace("--corpus names", "CORPUS is", 1)
        raise


def _preflight(judge: Any) -> None:
    """`SynthError` when the judge's key or endpoint does not work (`JudgeGateway.preflight`)."""
    from ..judge import JudgeGateway

    probe = JudgeGateway(judge)  # the check needs no started gateway
    try:
        probe.preflight()
    except Exception as exc:
        raise SynthError(str(exc)) from None
    finally:
        probe.close()


def _generator(name: str) -> Any:
    """None for ragbridge's own generator, else the registered library generator (`SynthError` for
    an unknown or uninstalled one)."""
    if name == BUILTIN:
        return None
    from ..plugins import registered

    found = registered("ragbridge_register_generators", "generator")
    gen = found.get(name)
    if gen is None:
        raise SynthError(f"no generator named {name!r}; the generators are "
                         + ", ".join([BUILTIN, *sorted(found)]))
    if not gen.available():
        raise SynthError(f"the {name} generator needs its library: {gen.install_hint}")
    return gen


def _real_cases(compare_to: Any, docs: Corpus) -> Optional[list[Case]]:
    """The real set, read and its span labels placed in the corpus, before anything is called
    (`DatasetError` for a file that cannot be read or a quote that is not in the corpus)."""
    if compare_to is None:
        return None
    if isinstance(compare_to, (list, tuple)) and all(isinstance(c, Case) for c in compare_to):
        cases = list(compare_to)
    else:
        cases = load_cases(compare_to)
    try:
        return place_cases(cases, docs)
    except DatasetError as exc:
        if exc.path is None and compare_to is not None and not isinstance(compare_to, (list, tuple)):
            exc.path = str(compare_to)
        raise


def _settled(done: dict[str, dict[str, Any]], slots: Sequence[Any]) -> bool:
    return bool(slots) and all(s.id in done for s in slots)


async def _generate(result: Synthesis, lib: Any, docs: Corpus, passages: Any, bm25: BM25, slots: list,
                    shares: dict[str, float], n: int, seed: int, judge: Any, work: Optional[WorkFolder],
                    done: dict, max_calls: Optional[int], max_cost: Optional[float], dry_run: bool,
                    drop_failed: bool, options: dict[str, Any], progress: bool = False) -> None:
    from ..judge import JudgeGateway

    gateway = JudgeGateway(judge, audit_log=work.audit_path if work is not None else None)

    def summarize() -> None:
        # once the gateway is closed: a call the library left in flight when it stopped (a sibling of
        # the call the budget refused) has ended and is counted, as the budget's tally counts it
        usage = gateway.usage()
        result.judge = {"calls": usage.calls, "cache_hits": usage.cache_hits,
                        "prompt_tokens": usage.prompt_tokens,
                        "completion_tokens": usage.completion_tokens,
                        "cost": usage.known_cost if judge.prices else None, "currency": judge.currency,
                        "refused": usage.refused}

    with contextlib.ExitStack() as closing:
        closing.callback(summarize)
        closing.callback(gateway.close)
        if dry_run:
            from ..stub.answers import simulate

            gateway.simulate = simulate
        else:
            if work is not None:
                calls, cost = gateway.ledger.open_tally(work.tally_path)
            else:
                calls, cost = 0, 0.0
            if max_calls is not None or max_cost is not None:
                gateway.set_budget(max_calls, max_cost, calls, cost)
        gateway.start()
        records: dict[str, dict[str, Any]] = {}
        if progress and lib is None:
            from .progress import GenerationProgress

            bar = GenerationProgress(len(slots), sum(1 for s in slots if s.id in done), gateway)
            closing.callback(bar.stop)
        else:
            bar = None

        def record(item: dict[str, Any]) -> None:
            if gateway.stub_detected:
                item["stub"] = True
            records[item["slot"]] = item
            if work is not None:
                work.append(item)
            if bar is not None:
                bar.advance()

        try:
            if lib is None:
                await _builtin(result, docs, passages, bm25, slots, judge, gateway, record, done, drop_failed)
            else:
                await _library(result, lib, docs, passages, slots, shares, n, seed, judge, gateway, record,
                               options)
        except (KeyboardInterrupt, asyncio.CancelledError):
            result.status = "interrupted"
            raise
        finally:
            result.stub = bool(gateway.stub_detected)
            if gateway.budget_spent and result.status != "interrupted":
                result.status = "budget"
                # the calls paid for and still in flight are answered and kept for the next session
                gateway.ledger.wait_settled(judge.client_timeout())
            if work is None:
                result.counts["_items"] = records
    if dry_run:
        result.status = "dry-run"


async def _builtin(result: Synthesis, docs: Corpus, passages: Any, bm25: BM25, slots: list, judge: Any,
                   gateway: Any, record: Any, done: dict, drop_failed: bool) -> None:
    from ..judge.clients import async_http_client
    from ..rubric.parse import DEFAULT_RETRIES, Asker
    from .generate import Generation, run_slots

    client = async_http_client(gateway, base_url=gateway.base_url(in_process=True) + "/",
                               headers={"Authorization": f"Bearer {gateway.api_key}"})
    try:
        asker = Asker(client, judge.model, retries=min(DEFAULT_RETRIES, judge.max_retries),
                      max_tokens=judge.max_tokens)
        g = Generation(docs, passages, bm25, asker, gateway, record, judge_model=judge.model,
                       drop_failed=drop_failed, embedding_model=judge.embedding_model, client=client)
        await run_slots(g, slots, done, judge.max_concurrency)
    finally:
        await client.aclose()
    result.errors = g.errors
    if g.errors and result.status == "complete":
        result.status = "errored"


async def _library(result: Synthesis, lib: Any, docs: Corpus, passages: Any, slots: list,
                   shares: dict[str, float], n: int, seed: int, judge: Any, gateway: Any, record: Any,
                   options: dict[str, Any]) -> None:
    from ..run.lifecycle import applied_environment
    from .delegate import GeneratorRequest, cases_from_items

    request = GeneratorRequest(passages=list(passages), counts=allocate(shares, n), seed=seed, judge=gateway,
                               slots=slots, options=options)

    def work() -> list:
        random.seed(seed)
        with applied_environment(lib.environment()):
            return lib.generate(request)

    try:
        items = await asyncio.to_thread(work)
        result.notes += request.notes
    except Exception as exc:  # the library failed: its error, after the gateway's retries
        if gateway.budget_spent:
            return
        result.status = "errored"
        result.errors = [{"slot": None, "kind": None, "error": f"the {lib.name} generator failed: "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"}]
        return
    if gateway.budget_spent:  # the library went on without the calls the budget refused: not a whole set
        return
    made, dropped = cases_from_items(items, docs, passages, lib.name, judge.model,
                                     max(4, len(str(len(items)))))
    for item in [*made, *dropped]:
        record(item)
    record({"slot": "_complete", "status": "complete", "n": len(items), "notes": request.notes})


def _assemble(result: Synthesis, items: dict[str, dict[str, Any]], slots: Sequence[Any], n: int,
              shares: dict[str, float], delegated: bool) -> None:
    """The made cases in plan order (a question asked by an earlier slot dropped as ``duplicate``),
    the dropped rows and the counts."""
    order = sorted(k for k in items if k != "_complete") if delegated else [s.id for s in slots]
    seen: set[str] = set()
    made, dropped = [], []
    for sid in order:
        item = items.get(sid)
        if item is None:
            continue
        if item["status"] == "made":
            key = " ".join(item["question"].lower().split()).rstrip("?").strip()
            if key in seen:
                dropped.append({**item, "status": "dropped", "reason": "duplicate",
                                "detail": "an earlier question is the same"})
                continue
            seen.add(key)
            made.append(item)
        elif item["status"] == "dropped":
            dropped.append(item)
    result.cases = [Case.model_validate(i["case"]) for i in made]
    result.dropped = [{k: d.get(k) for k in ("slot", "kind", "reason", "detail", "question")}
                      for d in dropped]
    by_reason: dict[str, int] = {}
    for d in dropped:
        by_reason[d["reason"]] = by_reason.get(d["reason"], 0) + 1
    planned = allocate(shares, n)
    made_by = {k: sum(1 for i in made if i["kind"] == k) for k in planned}
    if delegated:
        complete = "_complete" in items
        pending = 0 if complete else n
    else:
        pending = sum(1 for s in slots if s.id not in items)
    result.counts = {"planned": n, "made": len(made), "dropped": len(dropped), "dropped_by_reason": by_reason,
                     "pending": pending, "by_kind": {k: {"planned": planned[k], "made": made_by[k]}
                                                    for k in planned}}
    if pending and result.status == "complete":
        result.status = "errored" if result.errors else "interrupted"


def _edited(case: Case, edit: Optional[dict[str, str]]) -> Case:
    """``case`` with a reviewer's edits, the generated wording kept in ``metadata.review.edited``."""
    if not edit:
        return case
    was = {k: getattr(case, k) for k in edit}
    return case.model_copy(update={**edit, "metadata": {**case.metadata, "review": {"edited": was}}})


def _write(result: Synthesis, out: Path, review: bool, real: Optional[list[Case]],
           combined: str | Path | None) -> None:
    """The golden set (or the review file, or the reviewed set), and the combined set; everything is
    checked (the review file, the combined set's ids) before the first file is written."""
    from .review import dropped_path, read_review, review_path, write_review

    if combined is not None and real is not None:
        ids = {c.id for c in real}
        clash = next((c.id for c in result.cases if c.id in ids), None)
        if clash is not None:
            raise DatasetError(f"case id {clash!r} is in both the real and the synthetic set", path=combined,
                               hint="give the real cases other ids")
    kept, gone = result.cases, []
    if review:
        path = review_path(out)
        if not path.exists():
            write_review(path, [c.model_dump(mode="json", exclude_defaults=True) for c in result.cases])
            result.status = "review"
            result.written["review"] = str(path)
            return
        reviewed = read_review(path, [c.model_dump(mode="json", exclude_defaults=True) for c in result.cases])
        rejected = reviewed.dropped
        kept = [_edited(c, reviewed.edits.get(c.id)) for c in result.cases if c.id not in rejected]
        result.counts["reviewed_edited"] = len(reviewed.edits)
        gone = [c.model_copy(update={"metadata": {**c.metadata,
                                                  "review": {"dropped": True, "why": rejected[c.id]}}})
                for c in result.cases if c.id in rejected]
        write_cases(gone, dropped_path(out))
        result.written["dropped"] = str(dropped_path(out))
        result.counts["reviewed_out"] = len(gone)
        result.dropped += [{"slot": c.id, "kind": (c.metadata.get("synthetic") or {}).get("kind"),
                            "reason": "review", "detail": rejected[c.id], "question": c.question}
                           for c in gone]
        result.cases = kept
    write_cases(kept, out)
    result.written["out"] = str(out)
    if combined is not None and real is not None:
        both = [c if "real" in c.tags else c.model_copy(update={"tags": [*c.tags, "real"]}) for c in real]
        write_cases([*both, *kept], combined)
        result.written["combined"] = str(combined)
