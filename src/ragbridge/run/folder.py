"""The run folder: what a run leaves on disk, and reading it back.

A run folder holds ``run.json`` (the manifest), ``scores.jsonl`` (append-only, one `Score` a line,
buffered and flushed batch by batch as the scores arrive), ``cases.jsonl`` (the cases scored, one
canonical record a line, so reports and diffs need nothing else; the runner reads its batches back
from it), for judged runs ``judge-audit.jsonl`` and for runs that call a target ``target.jsonl`` (its
outputs, see `ragbridge.run.target`): `RUN_FILES`.

`RunFolder.prepare` decides, in one place and before anything is called or written, what a run does
with its folder: a new run, a resumed one (the folder holds a run of the same cases: scores already
there are kept, failed ones are retried, only what is missing is computed), an updated one (the
folder holds a run of other cases and ``changed_cases="rescore"``, the Python API's default: the
scores of the cases that are unchanged, same id and same content, are kept, the changed and new
cases are scored, the removed ones' scores dropped; ``"refuse"``, the command line's, is a
`RunError` that says what to do) or a replaced one (``overwrite``: every file of `RUN_FILES` is
deleted). A folder that another live process is
writing is refused, and so is one where a file of `RUN_FILES` is a link (a symbolic link, or for a file
that is appended to, a file with other names) or not a file: a run writes its files in place, never
through a link to somewhere else (each is also opened without following a link made meanwhile).

``run.json`` and ``cases.jsonl`` are replaced whole (`ragbridge.formats.files.atomic_path`). While a
run is going, ``run.json`` says ``running`` with the process (pid, host, start time) and is
rewritten with the counts so far every `HEARTBEAT_SECONDS`; a run whose process is gone without
recording its end (``kill -9``, a lost machine) reads as ``interrupted`` (`load_run`, so reports and
gates can tell). A line of ``scores.jsonl`` cut short by a kill is dropped when the run resumes.

Everything read back is checked as input is (`ragbridge.run.recorded`: ``read_scores``,
``read_manifest``): a value a run never writes is an error naming the file, the line and the field.

Size: the writing side's one decision (new, resumed, updated, replaced, with the judge's identity)
and the reading side (`Run`, `load_run`, `read_scores`) share the folder's layout and its rules, kept
in one module so that they cannot drift; a notebook's view of a run is `ragbridge.run.view`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

from ..formats import load_cases
from ..formats.files import DatasetError, atomic_path, no_follow, write_atomic
from ..schema import Case, RunManifest, Score, ScoreBlock, json_of
from ..verdicts import count
from .column_copy import CopyMaker
from .kept import Kept
from .plan import RunError
from .recorded import read_columns, read_manifest, read_scores

#: how ``run.json``'s ``dataset.fingerprint`` is computed; a folder without it is from before
#: (`ragbridge.formats.batches.Fingerprint`) and cannot be resumed
FINGERPRINT_OF = "canonical-lines"

if TYPE_CHECKING:  # pragma: no cover
    from ..formats.batches import CaseBatch
    from ..formats.source import CaseSource
    from .columns import RunColumns

__all__ = ["FINGERPRINT_OF", "JUDGE_IDENTITY", "RUN_FILES", "HEARTBEAT_SECONDS", "JUDGE_COUNTS", "Run",
           "RunFolder", "load_run", "read_scores", "run_files", "now", "this_process", "process_start",
           "alive"]

RUN_FILES = ("run.json", "scores.jsonl", "cases.jsonl", "judge-audit.jsonl", "judge-calls.log",
             "target.jsonl", "columns.npz")
HEARTBEAT_SECONDS = 2.0


def run_files(path: Any) -> list[Path]:
    """A run folder and the files of it that a reader reads (`RUN_FILES`): what an output must not
    replace."""
    return [Path(path), *(Path(path) / name for name in RUN_FILES)]

#: of `RUN_FILES`, those appended to (the others are replaced whole)
APPENDED = ("scores.jsonl", "judge-audit.jsonl", "judge-calls.log", "target.jsonl")
#: the judge's counters kept in ``run.json``'s ``counts.judge``, added up over the sessions of a run
JUDGE_COUNTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "retries", "errors", "cost",
                "unpriced", "refused")
#: of `JUDGE_COUNTS`, the ones that are money (floats)
_FLOAT_COUNTS = ("cost",)


def now() -> str:
    """The time now (UTC, seconds), as the manifest records it."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def utc(at: float) -> str:
    """A Unix time as the manifest records times."""
    return dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# Reading a run folder


class Run:
    """A run in memory: manifest, scores and cases, with summaries as DataFrames.

    A run read from (or written to) a folder reads its scores and cases from the folder when they
    are first asked for, so a run of a million cases costs nothing until then; ``summary`` of a run
    just made comes from the totals kept while it ran (``totals``), without reading either; its
    frames (`to_frame`, `costs`) come from its columns (`ragbridge.run.frames`), without either.
    """

    def __init__(self, manifest: RunManifest, scores: Optional[list[Score]] = None,
                 cases: Optional[list[Case]] = None, path: Optional[Path] = None, totals: Any = None,
                 repeat_scores: Optional[list[Score]] = None, columns: Optional["RunColumns"] = None):
        self.manifest, self.path, self.totals = manifest, Path(path) if path is not None else None, totals
        self._scores: Optional[list[Score]] = None
        self._repeat_scores = repeat_scores
        self._cases = cases
        self._columns: Any = columns
        #: whether the scores or cases were given (a run in memory, or changed), not read from the folder
        self._given = scores is not None or cases is not None
        if scores is not None:
            if repeat_scores is None:
                self._recorded(scores)
            else:
                self._scores = scores

    def _recorded(self, scores: list[Score]) -> None:
        """Take ``scores`` as recorded: every repeat; ``scores`` becomes each case's mean over them."""
        from .repeats import collapse_repeats, has_repeats

        if has_repeats(scores):
            self._repeat_scores = list(scores)
            self._scores = collapse_repeats(scores, pass_at_least(self.manifest))
        else:
            self._repeat_scores = self._scores = scores

    @property
    def scores(self) -> list[Score]:
        """Every score, the last per (case, metric, backend), by backend, metric and case order; in a
        run with repeats, each case's mean over its repeats (`ragbridge.run.repeats`)."""
        if self._scores is None and self._columns is not None and self.path is None:
            self._scores = [s for col in self._columns.columns.values()
                            for s in col.scores(range(len(self._columns.cases))) if s is not None]
            self._repeat_scores = [s for col in self._columns.columns.values() for s in col.repeat_scores()]
        if self._scores is None:
            scores = self._read_scores() if self.path is not None else []
            order = {c.id: i for i, c in enumerate(self.cases)}
            if order:
                self._refuse_stray({s.case_id for s in scores} - set(order))
            scores.sort(key=lambda s: (s.backend, s.metric, order.get(s.case_id, 0), s.repeat))
            self._recorded(scores)
        return self._scores

    def _scores_file(self) -> Path:
        """``scores.jsonl``; a `DatasetError` when it is gone while run.json counts scores in it."""
        path = self._file("scores.jsonl")
        counted = (self.manifest.counts or {}).get("scores")
        if not path.exists() and isinstance(counted, int) and counted > 0:
            raise DatasetError(f"is missing, but run.json counts {counted} score(s) in it", path=path,
                               hint="the folder was changed since the run wrote it: restore the file, or run "
                                    "the evaluation again into this folder with --overwrite")
        return path

    def _read_scores(self) -> list[Score]:
        return read_scores(self._scores_file())[0]

    def _refuse_stray(self, ids: "Iterable[str]") -> None:
        """A `DatasetError` when scores name cases (``ids``) that ``cases.jsonl`` does not hold."""
        stray = sorted(ids)
        if stray:
            more = f" and {len(stray) - 5} more" if len(stray) > 5 else ""
            shown = ", ".join(repr(i) for i in stray[:5]) + more
            raise DatasetError(
                f"holds scores of {len(stray)} case id(s) that are not cases of this run "
                f"({self.path / 'cases.jsonl'}): {shown}", path=self.path / "scores.jsonl",
                hint="the folder was changed since the run wrote it: restore it, or run the evaluation "
                     "again into a new folder")

    @scores.setter
    def scores(self, value: list[Score]) -> None:
        self._scores = value
        self._given, self._columns = True, None
        if self._repeat_scores is None:
            self._repeat_scores = value

    @property
    def repeat_scores(self) -> list[Score]:
        """Every repeat of every score as recorded (``scores`` holds each case's mean over its
        repeats); the same list as ``scores`` for a run without repeats."""
        if self._repeat_scores is None:
            self.scores  # noqa: B018 - reads the folder
        return self._repeat_scores

    @repeat_scores.setter
    def repeat_scores(self, value: list[Score]) -> None:
        self._repeat_scores = value
        self._given, self._columns = True, None

    def _file(self, name: str) -> Path:
        """A file of the run's folder, read when first asked for; `RunError` when the folder is gone
        (a removed folder's scores are not an empty run)."""
        if not (self.path / "run.json").exists():
            raise RunError(f"{self.path} no longer holds this run (its run.json is gone): read the run's "
                           "scores and cases before the folder is removed")
        return self.path / name

    @property
    def columns(self) -> "RunColumns":
        """The run's cases and scores in columns (`ragbridge.run.columns`): what every analysis and
        report reads. A run read from a folder is read a block at a time, checked
        (`ragbridge.run.recorded.read_columns`), without making a `Score` or `Case` object of each."""
        if self._columns is None:
            if self.path is not None and not self._given:
                self._scores_file()  # a removed folder's scores are not an empty run
                columns = read_columns(self.path, pass_at_least(self.manifest))
                known = columns.cases.described
                if known:
                    self._refuse_stray(columns.cases.ids[known:])
                self._columns = columns
            else:
                from .columns import RunColumns

                self._columns = RunColumns.of(self.repeat_scores, self.cases, pass_at_least(self.manifest))
        return self._columns

    @columns.setter
    def columns(self, value: "RunColumns") -> None:
        self._columns = value

    def _folder_columns(self) -> Optional["RunColumns"]:
        """The columns of a run read from a folder (its scores and cases not replaced in memory)
        whose every scored case is one of its cases: what its frames are built from; else None."""
        if self.path is None or self._given:
            return None
        from .frames import frames_apply

        columns = self.columns
        return columns if frames_apply(columns, self._scores_file()) else None

    @property
    def cases(self) -> list[Case]:
        if self._cases is None and self._columns is not None and self.path is None:
            index = self._columns.cases
            self._cases = [c for c in index.cases(range(index.described)) if c is not None]
        if self._cases is None:
            path = self._file("cases.jsonl") if self.path is not None else None
            self._cases = load_cases(path) if path is not None and path.exists() else []
        return self._cases

    @cases.setter
    def cases(self, value: list[Case]) -> None:
        self._cases = value
        self._given, self._columns = True, None

    @property
    def n_cases(self) -> int:
        """How many cases the run holds (its ``cases.jsonl``; not the ids only its scores name)."""
        return len(self._cases) if self._cases is not None else self.columns.cases.described

    def __repr__(self) -> str:  # one line: a run holds thousands of scores
        where = repr(str(self.path)) if self.path is not None else "in memory"
        n_cases = self.manifest.dataset.get("n_cases", len(self.cases) if self._cases is not None else "?")
        n_scores = self.counts.get("scores", len(self._scores) if self._scores is not None else "?")
        return f"Run({where}, {count(n_cases)} cases, {count(n_scores)} scores, {self.manifest.status})"

    @property
    def counts(self) -> dict[str, Any]:
        """``run.json``'s counts; for a run killed mid-way (they are its session's last, or none) the
        scores, scored, undefined and errored as its ``scores.jsonl`` holds them (its columns)."""
        counts = dict(self.manifest.counts or {})
        if self.manifest.status in ("interrupted", "running") and self.path is not None:
            from .summary import ALL

            overall = [r for r in self.summary_rows(by_tag=False) if r["tag"] == ALL]
            counts.update({name: sum(r[key] for r in overall) for name, key in (
                ("scores", "n"), ("scored", "n_scored"), ("undefined", "n_undefined"),
                ("errored", "n_errored"))})
        return counts

    def _repr_html_(self) -> str:
        """A notebook's view of the run (`ragbridge.run.view`)."""
        from .view import run_html

        return run_html(self)

    @property
    def complete(self) -> bool:
        return self.manifest.status == "complete"

    def to_frame(self, wide: bool = False):
        """The scores as a pandas DataFrame: one row per score (``case_id``, ``question``, ``metric``,
        ``backend``, ``value``, ..., ``passed``, ..., ``pass_mark``, ``library_passed``, ``status``);
        with ``wide``, one row per case (``case_id``, ``question``, in the cases' order) and one
        column per ``backend:metric`` holding the value (NaN: undefined, failed or not scored), the
        layout evaluation libraries give their results in.

        ``passed`` is the run's one pass rule (`ragbridge.verdicts.verdict`, as the report, ``gate``
        and ``compare`` answer without a threshold of their own): the value at or above
        ``pass_mark``, the run's own (`ragbridge.verdicts.pass_mark`: the backend's rule recorded in
        run.json's ``pass_marks``, else the metric's default); None where the score has no value.
        ``library_passed`` is the library's own verdict where it gives one (a test case's success, an
        evaluation's label), which may differ.

        A run read from a folder builds the frame from its columns and its score lines read a block
        at a time (`ragbridge.run.frames`): memory holds the frame and a block, not a `Score` or
        `Case` object per case."""
        import pandas as pd

        columns = self._folder_columns()
        if columns is not None:
            from . import frames

            if wide:
                return frames.wide_frame(columns)
            try:
                return frames.long_frame(columns, self.manifest, self._scores_file())
            except frames.Unusual:
                pass
        if wide:
            columns = list(dict.fromkeys(f"{s.backend}:{s.metric}" for s in self.scores))
            values: dict[str, dict[str, Any]] = {}
            for s in self.scores:
                values.setdefault(s.case_id, {})[f"{s.backend}:{s.metric}"] = s.value
            rows = [{"case_id": c.id, "question": c.question, **values.get(c.id, {})} for c in self.cases]
            return pd.DataFrame(rows, columns=["case_id", "question", *columns]).astype(
                {c: float for c in columns})
        from ..verdicts import pass_mark, verdict

        questions = {c.id: c.question for c in self.cases}
        marks: dict[tuple[str, str], float] = {}
        rows = []
        for s in self.scores:
            key = (s.backend, s.metric)
            if key not in marks:
                marks[key] = pass_mark(self.manifest, s.backend, s.metric)[0]
            row = s.model_dump()
            library = row["passed"]
            row["passed"] = verdict(s, marks[key])
            rows.append({"case_id": row.pop("case_id"), "question": questions.get(s.case_id), **row,
                         "pass_mark": marks[key], "library_passed": library, "status": s.status})
        return pd.DataFrame(rows)

    def summary(self, by_tag: bool = True):
        """Per backend, metric and tag (``(all)`` for every case): the mean over scored cases and the
        counts (`ragbridge.run.summary.summarize`), as a DataFrame."""
        import pandas as pd

        from .summary import COLUMNS

        return pd.DataFrame(self.summary_rows(by_tag), columns=COLUMNS)

    def summary_rows(self, by_tag: bool = True) -> list[dict[str, Any]]:
        """`summary` as a list of plain dicts; for a run just made, from the totals kept while it ran
        (without importing pandas), else from the run's columns."""
        if self.totals is not None:
            return self.totals.rows(by_tag)
        return self.columns.summary_rows(by_tag)

    def costs(self):
        """Judge calls, tokens and cost per backend and metric, over the scores kept (a DataFrame:
        ``backend, metric, judge_calls, prompt_tokens, completion_tokens, cost``; cost NaN when a
        score's was unknown, no price for its model). The run's total, failed scores' calls
        included, is ``manifest.counts["cost"]["total"]``."""
        import pandas as pd

        columns = self._folder_columns()
        if columns is not None:
            from .frames import costs_frame

            return costs_frame(columns)

        rows: dict[tuple[str, str], dict] = {}
        for s in self.scores:
            if not s.judge_calls:
                continue
            row = rows.setdefault((s.backend, s.metric), {"backend": s.backend, "metric": s.metric,
                                                          "judge_calls": 0, "prompt_tokens": 0,
                                                          "completion_tokens": 0, "cost": 0.0})
            row["judge_calls"] += s.judge_calls
            row["prompt_tokens"] += s.prompt_tokens
            row["completion_tokens"] += s.completion_tokens
            row["cost"] = float("nan") if s.cost is None else row["cost"] + s.cost
        columns = ["backend", "metric", "judge_calls", "prompt_tokens", "completion_tokens", "cost"]
        return pd.DataFrame(list(rows.values()), columns=columns)


def pass_at_least(manifest: RunManifest) -> Optional[int]:
    """The run's ``--pass-repeats m`` (a case passes when at least m of its repeats pass), or None."""
    value = (manifest.options or {}).get("pass_repeats")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def load_run(path: str | Path) -> Run:
    """Read a run folder (``run.json``, ``scores.jsonl``, ``cases.jsonl``) back as a `Run`: its
    manifest now, its scores and cases when first asked for. A run whose process is gone without
    recording its end reads as ``interrupted``. Raises `RunError` when the folder is not a run's."""
    path = Path(path)
    manifest_path = path / "run.json"
    if not manifest_path.exists():
        raise RunError(f"{path} is not a run folder: it has no run.json")
    try:
        manifest = read_manifest(manifest_path)
    except ValueError as exc:
        raise RunError(f"not a valid run manifest: {exc}") from None
    if manifest.status == "running" and not alive(manifest.process):
        manifest.status = "interrupted"  # its process is gone: it will never record its end
    return Run(manifest=manifest, path=path)


# --------------------------------------------------------------------------------------------
# The writing process and whether it is alive


def this_process() -> dict[str, Any]:
    """This process as a manifest names it: pid, host and start time (see `process_start`)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": process_start(os.getpid())}


def process_start(pid: int) -> Optional[str]:
    """When process ``pid`` started, in the kernel's clock ticks (Linux; None elsewhere or if gone).

    With the pid it names one process: a later process given the same pid has another start time.
    A zombie (killed, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def alive(process: Optional[dict[str, Any]]) -> bool:
    """Whether the process a manifest names may still be running (True when this host cannot tell)."""
    if not process or process.get("host") != socket.gethostname() or not isinstance(process.get("pid"), int):
        return True
    try:
        os.kill(process["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        pass
    if process.get("start") is None:
        return True
    return process_start(process["pid"]) == process["start"]


_OPTIONAL_FIELDS = {"repeat": 0, "not_run": False, "cost": None, "repeats": None, "cached": False}


def score_json(score: Score) -> str:
    """One line of ``scores.jsonl``: the score, without the fields a run without repeats, budget or
    prices leaves at their defaults (so such a run's lines are what they always were)."""
    exclude = {k for k, default in _OPTIONAL_FIELDS.items() if getattr(score, k) == default}
    return json_of(score, exclude=exclude or None)


def truncate_partial_line(path: Path) -> None:
    """Cut a last line that has no ``\\n`` (a write cut short by a kill) off the end of ``path``."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+", opener=no_follow) as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        cut = f.read().rfind(b"\n") + 1
        f.truncate(cut)


# --------------------------------------------------------------------------------------------
# Writing a run folder


#: the judge settings that decide its answers: a resume must keep them (`RunFolder.resume`); the
#: server is compared as `ragbridge.judge.config.identity_url` has it (ragbridge's stub judge by its
#: settings, not by its port)
JUDGE_IDENTITY = ("model", "base_url", "embedding_model")


def judge_identity(judge: dict[str, Any]) -> dict[str, Any]:
    """What decides the answers of the judge a manifest records (``run.json``'s ``judge``)."""
    from ..judge.config import identity_url

    found = {k: judge.get(k) for k in JUDGE_IDENTITY}
    if found["base_url"]:
        found["base_url"] = identity_url(found["base_url"], judge.get("stub_settings"))
    return found


class RunFolder:
    """A run folder being written: `prepare`, then `resume` (if it resumes), `start`, `append` each
    score, `heartbeat` while it goes, `finish` at the end. A session that writes every score of the
    run (not resumed or updated, without repeats) makes the column copy as it goes (``copy``) and
    writes it at `finish`, unless it was interrupted.

    Size: the folder's whole life as a run writes it, each of its files in one place (the decision
    to start afresh, resume or update, the refusal of links, the score lines, the heartbeat and the
    last manifest on a full disk), so that the order in which a run touches its files reads in one
    class."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.manifest_path = self.path / "run.json"
        self.scores_path = self.path / "scores.jsonl"
        self.cases_path = self.path / "cases.jsonl"
        self.audit_path = self.path / "judge-audit.jsonl"
        #: every judge call of every session, written before it goes upstream (`ragbridge.judge.ledger`)
        self.tally_path = self.path / "judge-calls.log"
        self.target_path = self.path / "target.jsonl"
        self._fh = None
        self._size = 0  # the bytes of scores.jsonl, this session's buffered lines too
        #: the column copy made as this session writes (`ragbridge.run.column_copy.CopyMaker`)
        self.copy: Optional[CopyMaker] = None
        self._last_beat = time.monotonic()
        self._beat: Optional[threading.Thread] = None  # the heartbeat being written
        self._beat_error: Optional[OSError] = None
        #: the cases differ from the earlier sessions' and only the changed ones are scored (`prepare`)
        self.updating = False
        #: the earlier sessions' scores kept (`resume`); an update's are written anew by `start`
        self.kept: Optional[Kept] = None
        #: when the earlier sessions ended (`resume`)
        self.earlier_finished_at: Optional[str] = None

    def prepare(self, overwrite: bool, fingerprint: str, target: bool = False,
                changed_cases: str = "refuse") -> Optional[RunManifest]:
        """Decide what this run does with the folder; returns the earlier run's manifest to resume
        from, or None for a run that starts afresh (nothing there, or ``overwrite``: its files are
        deleted). ``fingerprint`` is the cases' (for a ``target`` run: the golden cases', before the
        target fills them). A folder over other cases is updated with ``changed_cases="rescore"``
        (not a ``target`` run's: its cases are the target's answers); `resume` then keeps the scores
        of the unchanged cases. Raises `RunError` when another live process is writing the folder, or,
        without ``overwrite``, when it holds an unreadable manifest or a run over other cases that is
        not updated."""
        self._refuse_if_busy()
        if overwrite:
            for name in RUN_FILES:
                path = self.path / name
                if path.is_symlink() or path.is_file():  # a link goes, not what it points to
                    path.unlink()
            self._refuse_links()  # what is not a file
            return None
        self._refuse_links()
        if not self.manifest_path.exists():
            return None
        try:
            old = read_manifest(self.manifest_path)
        except DatasetError as exc:  # file, line, field and what is wrong
            why = f"not a valid run manifest: {exc}"
            raise RunError(f"{why}; pass overwrite=True to replace the run",
                           cli=f"{why}; use --overwrite to replace the run") from None
        key = "golden_fingerprint" if target else "fingerprint"
        if old.dataset.get(key) != fingerprint and changed_cases == "rescore" and not target \
                and self.cases_path.exists():
            self.updating = True
            return old
        self._check_same_cases(old, key, fingerprint, target)
        return old

    def _refuse_links(self) -> None:
        """Raise `RunError` for a file of `RUN_FILES` that the run would write through to somewhere
        else: a symbolic link, a file it appends to that has other names (hard links), or not a file."""
        for name in RUN_FILES:
            path = self.path / name
            st = path.lstat() if os.path.lexists(path) else None
            if st is None or (stat.S_ISREG(st.st_mode) and (st.st_nlink == 1 or name not in APPENDED)):
                continue
            what = (f"is a symbolic link (to {os.readlink(path)})" if stat.S_ISLNK(st.st_mode) else
                    "is not a file" if not stat.S_ISREG(st.st_mode) else
                    f"has {st.st_nlink - 1} other name(s) (hard links), which appending to it would change")
            head = (f"{path} {what}: a run writes its folder's files in place, never through a link; "
                    f"remove it (or copy the file's contents into a file of its own), ")
            raise RunError(head + "pass overwrite=True to start the run afresh, or choose another out",
                           cli=head + "pass --overwrite to start the run afresh, or choose another --out")

    def _check_same_cases(self, old: RunManifest, key: str, fingerprint: str, target: bool = False) -> None:
        if old.dataset.get(key) != fingerprint:
            if old.dataset.get("fingerprint_of") != FINGERPRINT_OF:
                raise RunError(
                    f"{self.path} holds a run written by an earlier ragbridge, whose dataset fingerprint "
                    "is computed differently (now: SHA-256 of the cases' canonical lines), so it cannot "
                    "be resumed; pass overwrite=True to score it again from the start, or another out",
                    cli=f"{self.path} holds a run written by an earlier ragbridge, whose dataset fingerprint "
                    "is computed differently (now: SHA-256 of the cases' canonical lines), so it cannot "
                    "be resumed; pass --overwrite to score it again from the start, or choose another --out"
                )
            raise RunError(
                f"{self.path} holds a run over different cases (dataset fingerprint differs); "
                + ("a run with a target cannot keep part of it: " if target else "")
                + "pass another out, or overwrite=True to replace it"
                + ("" if target else ", or changed_cases=\"rescore\" to score only the cases that changed"),
                cli=f"{self.path} holds a run over different cases (dataset fingerprint differs); "
                "choose another --out, pass --overwrite to replace it"
                + (", or --update to score only the cases that changed" if not target else "")
            )

    def _unchanged(self, source: "CaseSource", ids: Sequence[str]) -> tuple[set[str], dict[str, int]]:
        """The ids of ``source``'s cases that the folder's ``cases.jsonl`` holds as they are (same id,
        same canonical line), and how many cases were kept, changed, added and removed. ``ids``: the
        folder's case ids, in the order of its lines (its columns')."""
        import hashlib

        def digest(line: bytes) -> bytes:
            return hashlib.blake2b(line, digest_size=16).digest()

        def lines() -> Iterator[bytes]:
            with open(self.cases_path, "rb") as f:
                yield from (line for line in (line.rstrip(b"\n") for line in f) if line)

        read = lines()
        before = {case_id: digest(line) for case_id, line in zip(ids, read)}  # (ids first: no line lost)
        if len(before) != len(ids) or next(read, None) is not None:
            # (not the columns of this file: each line's id read from it)
            before = {json.loads(line)["id"]: digest(line) for line in lines()}
        kept, counts = set(), {"kept": 0, "changed": 0, "added": 0, "removed": 0}
        for batch in source.batches():
            for i, case_id in enumerate(batch.ids):
                earlier = before.pop(case_id, None)
                if earlier is None:
                    counts["added"] += 1
                elif earlier == digest(batch.line(i)):
                    kept.add(case_id)
                    counts["kept"] += 1
                else:
                    counts["changed"] += 1
        counts["removed"] = len(before)
        return kept, counts

    def _check_same_judge(self, old: RunManifest, new: RunManifest) -> None:
        """Refuse a resume whose judge differs from the earlier sessions' in what decides its answers
        (`JUDGE_IDENTITY`): the folder's judged scores would come from two judges, and run.json could
        name only one. A changed rubric is not refused: its metric is scored again (`resume`)."""
        a, b = old.judge or {}, new.judge or {}
        if not a or not b:
            return
        ia, ib = judge_identity(a), judge_identity(b)
        # no embedding model named before: its library's default, or none used (a run names it now)
        changed = [k for k in JUDGE_IDENTITY if a.get(k) != b.get(k) and ia[k] != ib[k]
                   and not (k == "embedding_model" and a.get(k) is None)]
        if changed:
            def judge(j: dict) -> str:
                said = ", ".join(f"{k} {j.get(k)!r}" for k in changed)
                if j.get("stub_settings") and "base_url" in changed:
                    said += f" (ragbridge's stub judge, {j['stub_settings']})"
                return said

            said = (f"{self.path} was judged with {judge(a)}; this run asks for {judge(b)}. Resuming would "
                    "mix two judges' scores in one run folder: resume with the same judge, or score into ")
            raise RunError(
                said + "another out (then ragbridge.analysis.compare_runs(old, new) compares the two "
                "judges), or pass overwrite=True to judge every case again with the new one",
                cli=said + "another --out (then `ragbridge compare OLD NEW` compares the two judges), or "
                "pass --overwrite to judge every case again with the new one")

    def _refuse_if_busy(self) -> None:
        try:
            old = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(old, dict):
            return  # not a manifest: `prepare` says so, with the file
        process = old.get("process")
        if (old.get("status") == "running" and isinstance(process, dict)
                and process.get("pid") != os.getpid() and alive(process)):
            raise RunError(
                f"{self.path} is being written by another run (pid {process.get('pid')} on "
                f"{process.get('host')}, last heartbeat {old.get('heartbeat_at') or old.get('started_at')}); "
                "wait for it to end or stop it, then run again"
            )

    def resume(self, old: RunManifest, manifest: RunManifest,
               source: Optional["CaseSource"] = None) -> Kept:
        """Merge the earlier sessions' manifest ``old`` into this session's ``manifest`` and return
        the scores to keep (`Kept`, read back a batch of cases at a time): every one that did not fail
        and was not left unrun by a spent budget, unless its metric was redefined since (its rubric's
        digest changed: ``counts.redefined``, scored again). A judge that
        differs in `JUDGE_IDENTITY` is refused (`RunError`). The judge counts and the backends'
        wall times carry over, to be added to. Raises `RunError` when the cases differ from those
        the earlier sessions scored (a target run whose outputs were not all kept in target.jsonl).

        An update (`prepare`: the cases changed) keeps only the scores of the cases of ``source``
        that are unchanged, of the metrics this session plans (``counts.cases_changed``: how many
        cases were kept, changed, added and removed); `start` writes the folder's scores anew."""
        if not self.updating:
            self._check_same_cases(old, "fingerprint", manifest.dataset["fingerprint"])
        self._check_same_judge(old, manifest)
        columns = read_columns(self.path, pass_at_least(old), copy=False)
        if self.updating:
            kept_cases, changed = self._unchanged(source, columns.cases.ids[:columns.cases.described])
            manifest.counts["cases_changed"] = changed
        redefined = sorted(f"{b}:{m}" for b, ds in manifest.digests.items() for m, d in ds.items()
                           if old.digests.get(b, {}).get(m, d) != d)
        planned = {(b, m) for b, ms in manifest.metrics.items() for m in ms}
        done = self.kept = Kept(
            self.scores_path, columns,
            lambda b, m: f"{b}:{m}" not in redefined and (not self.updating or (b, m) in planned),
            kept_cases if self.updating else None)
        if self.updating:
            old = old.model_copy(update={"metrics": {}, "backends": {}})  # this session's plan is the run's
        manifest.digests = {b: {**old.digests.get(b, {}), **manifest.digests.get(b, {})}
                            for b in {**old.digests, **manifest.digests}}
        manifest.pass_marks = {b: {**old.pass_marks.get(b, {}), **manifest.pass_marks.get(b, {})}
                               for b in {**old.pass_marks, **manifest.pass_marks}}
        if redefined:
            manifest.counts["redefined"] = redefined
        manifest.started_at = old.started_at
        self.earlier_finished_at = old.finished_at  # (kept by a session that scores nothing)
        merged = dict(old.metrics)
        for b, ms in manifest.metrics.items():
            merged[b] = list(dict.fromkeys(list(merged.get(b, [])) + ms))
        manifest.metrics = merged
        manifest.backends = {**old.backends, **manifest.backends}
        manifest.judge = manifest.judge or old.judge
        if (old.judge or {}).get("stub") and manifest.judge is not None and all(
            judge_identity(manifest.judge)[k] == judge_identity(old.judge)[k] for k in ("model", "base_url")
        ):
            # the earlier sessions' judged scores came from the stub: a resume that makes no call
            # must not lose that label
            manifest.judge = {**manifest.judge, "stub": True}
        manifest.counts["resumed_from"] = len(done)
        if isinstance(old.counts.get("judge"), dict):
            kept = old.counts["judge"]
            manifest.counts["judge"] = {k: (float if k in _FLOAT_COUNTS else int)(kept.get(k) or 0)
                                        for k in JUDGE_COUNTS}
        if "wall_seconds" in old.timing:
            manifest.timing = {**manifest.timing, "wall_seconds": dict(old.timing["wall_seconds"])}
        return done

    def start(self, source: "CaseSource", manifest: RunManifest) -> None:
        """Write the cases (``source.save``) and the manifest, and open ``scores.jsonl`` to append to
        (a last line cut short by a kill is cut off first; an update's scores written anew: those it
        keeps)."""
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)  # its user's only
        if self.updating and self.kept is not None:  # the kept lines as they were, a block at a time
            places = self.kept.places().tolist()
            with atomic_path(self.scores_path) as tmp:
                with open(tmp, "wb") as f:
                    for i in range(0, len(places), 65536):
                        f.write(b"".join(line + b"\n" for line in self.kept.lines(places[i:i + 65536])))
        source.save(self.cases_path)
        self.write_manifest(manifest)
        truncate_partial_line(self.scores_path)
        self._fh = open(self.scores_path, "ab", buffering=1 << 20, opener=no_follow)
        self._size = self._fh.seek(0, os.SEEK_END)
        if not self._size and manifest.options.get("repeats", 1) == 1:  # this session writes every score
            self.copy = CopyMaker(self.path, source.n_cases)
        self._last_beat = time.monotonic()

    def write_manifest(self, manifest: RunManifest) -> None:
        write_atomic(self.manifest_path, manifest.model_dump_json(indent=2))

    def start_batch(self, batch: "CaseBatch") -> None:
        """The scores of ``batch``'s cases come next."""
        if self.copy is not None:
            self.copy.start_batch(batch)

    def append(self, score: Score) -> None:
        """Add a score to the write buffer (on disk at the next `flush`)."""
        at = self._write((score_json(score) + "\n").encode("utf-8"))
        if self.copy is not None:
            self.copy.score(score, at)

    def append_block(self, block: ScoreBlock) -> None:
        """Add a block's scores to the write buffer, as lines (`ScoreBlock.json_lines`)."""
        data = block.json_lines().encode("utf-8")
        at = self._write(data)
        if self.copy is not None:
            self.copy.block(block, at, data)

    def _write(self, data: bytes) -> int:
        at = self._size
        self._fh.write(data)
        self._size += len(data)
        return at

    def flush(self) -> None:
        """Hand the buffered scores to the operating system: a kill from now on loses none of them."""
        self._fh.flush()

    @property
    def heartbeat_due(self) -> bool:
        return time.monotonic() - self._last_beat >= HEARTBEAT_SECONDS

    def heartbeat(self, manifest: RunManifest) -> None:
        """Rewrite the manifest with ``heartbeat_at`` now (the caller updated its counts).

        The write (a temporary file, its fsync, the rename) is done in a thread of its own, so that
        a slow disk does not hold up the scoring that calls this: while the previous heartbeat is
        still being written, this one is skipped; a failed write raises at the next call."""
        if self._beat is not None:
            if self._beat.is_alive():
                return
            self._beat = None
        if self._beat_error is not None:
            error, self._beat_error = self._beat_error, None
            raise error
        manifest.heartbeat_at = now()
        text = manifest.model_dump_json(indent=2)
        self._beat = threading.Thread(target=self._write_beat, args=(text,), name="ragbridge-heartbeat",
                                      daemon=True)
        self._beat.start()
        self._last_beat = time.monotonic()

    def _write_beat(self, text: str) -> None:
        try:
            write_atomic(self.manifest_path, text)
        except OSError as exc:
            self._beat_error = exc

    def finish(self, manifest: RunManifest) -> None:
        """Close ``scores.jsonl`` and write the final manifest (after a heartbeat still being written),
        also when the disk is full: the manifest is then rewritten in place (`_rewrite_in_place`)
        rather than left saying ``running``; the error that stopped the writing is raised after."""
        error = None
        if self._fh:
            try:
                self._fh.close()  # a line cut short is cut off when the run resumes
            except OSError as exc:
                error = exc
            self._fh = None
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        try:
            self.write_manifest(manifest)
        except OSError as exc:
            error = error or exc
            _rewrite_in_place(self.manifest_path, manifest)
        if error is not None:
            raise error
        if self.kept is not None:
            self.kept.close()
        copy, self.copy = self.copy, None
        if copy is not None:  # its readers read the copy, not its files (unless it was stopped: no wait)
            copy.save(pass_at_least(manifest)) if manifest.status != "interrupted" else copy.close()


def _rewrite_in_place(path: Path, manifest: RunManifest) -> None:
    """Overwrite ``path``'s bytes with ``manifest`` (compact JSON, padded with spaces to the file's
    length), for when no new file can be made (a full disk): no block is allocated. When even that
    does not fit, the manifest without its counts and timing (its status, the run's identity); when
    that does not either, nothing (``running`` with its process gone reads as interrupted)."""
    try:
        with open(path, "r+b", opener=no_follow) as f:
            size = f.seek(0, os.SEEK_END)
            for text in (manifest.model_dump_json(),
                         manifest.model_dump_json(exclude={"counts", "timing", "process"})):
                data = text.encode()
                if len(data) <= size:
                    f.seek(0)
                    f.write(data + b" " * (size - len(data)))
                    f.flush()
                    os.fsync(f.fileno())
                    return
    except OSError:
        pass
