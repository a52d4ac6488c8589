"""The run folder: what a run leaves on disk, and reading it back.

A run folder holds ``run.json`` (the manifest), ``scores.jsonl`` (append-only, one `Score` a line,
buffered and flushed batch by batch as the scores arrive), ``cases.jsonl`` (the cases scored, one
canonical record a line, so reports and diffs need nothing else; the runner reads its batches back
from it), for judged runs ``judge-audit.jsonl`` and for runs that call a target ``target.jsonl`` (its
outputs, see `ragbridge.run.target`): `RUN_FILES`.

`RunFolder.prepare` decides, in one place and before anything is called or written, what a run does
with its folder: a new run, a resumed one (the folder holds a run of the same cases: scores already
there are kept, failed ones are retried, only what is missing is computed) or a replaced one
(``overwrite``: every file of `RUN_FILES` is deleted). A folder that another live process is writing
is refused.

``run.json`` and ``cases.jsonl`` are replaced whole (`ragbridge.formats.files.atomic_path`). While a
run is going, ``run.json`` says ``running`` with the process (pid, host, start time) and is
rewritten with the counts so far every `HEARTBEAT_SECONDS`; a run whose process is gone without
recording its end (``kill -9``, a lost machine) reads as ``interrupted`` (`load_run`, so reports and
gates can tell). A line of ``scores.jsonl`` cut short by a kill is dropped when the run resumes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..formats import load_cases
from ..formats.files import jsonl_lines, write_atomic
from ..schema import Case, RunManifest, Score
from .plan import RunError

#: how ``run.json``'s ``dataset.fingerprint`` is computed; a folder without it is from before
#: (`ragbridge.formats.batches.Fingerprint`) and cannot be resumed
FINGERPRINT_OF = "canonical-lines"

if TYPE_CHECKING:  # pragma: no cover
    from ..formats.source import CaseSource

__all__ = ["FINGERPRINT_OF", "JUDGE_IDENTITY", "RUN_FILES", "HEARTBEAT_SECONDS", "JUDGE_COUNTS", "Run",
           "RunFolder", "load_run", "read_scores", "now", "this_process", "process_start", "alive"]

RUN_FILES = ("run.json", "scores.jsonl", "cases.jsonl", "judge-audit.jsonl", "judge-calls.log",
             "target.jsonl")
HEARTBEAT_SECONDS = 2.0
#: the judge's counters kept in ``run.json``'s ``counts.judge``, added up over the sessions of a run
JUDGE_COUNTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "retries", "errors", "cost",
                "unpriced", "refused")
#: of `JUDGE_COUNTS`, the ones that are money (floats)
_FLOAT_COUNTS = ("cost",)


def now() -> str:
    """The time now (UTC, seconds), as the manifest records it."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# Reading a run folder


class Run:
    """A run in memory: manifest, scores and cases, with summaries as DataFrames.

    A run read from (or written to) a folder reads its scores and cases from the folder when they
    are first asked for, so a run of a million cases costs nothing until then; ``summary`` of a run
    just made comes from the totals kept while it ran (``totals``), without reading either.
    """

    def __init__(self, manifest: RunManifest, scores: Optional[list[Score]] = None,
                 cases: Optional[list[Case]] = None, path: Optional[Path] = None, totals: Any = None,
                 repeat_scores: Optional[list[Score]] = None):
        self.manifest, self.path, self.totals = manifest, Path(path) if path is not None else None, totals
        self._scores: Optional[list[Score]] = None
        self._repeat_scores = repeat_scores
        self._cases = cases
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
        if self._scores is None:
            scores = read_scores(self._file("scores.jsonl"))[0] if self.path is not None else []
            order = {c.id: i for i, c in enumerate(self.cases)}
            scores.sort(key=lambda s: (s.backend, s.metric, order.get(s.case_id, 0), s.repeat))
            self._recorded(scores)
        return self._scores

    @scores.setter
    def scores(self, value: list[Score]) -> None:
        self._scores = value
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

    def _file(self, name: str) -> Path:
        """A file of the run's folder, read when first asked for; `RunError` when the folder is gone
        (a removed folder's scores are not an empty run)."""
        if not (self.path / "run.json").exists():
            raise RunError(f"{self.path} no longer holds this run (its run.json is gone): read the run's "
                           "scores and cases before the folder is removed")
        return self.path / name

    @property
    def cases(self) -> list[Case]:
        if self._cases is None:
            path = self._file("cases.jsonl") if self.path is not None else None
            self._cases = load_cases(path) if path is not None and path.exists() else []
        return self._cases

    @cases.setter
    def cases(self, value: list[Case]) -> None:
        self._cases = value

    def __repr__(self) -> str:  # one line: a run holds thousands of scores
        where = repr(str(self.path)) if self.path is not None else "in memory"
        n_cases = self.manifest.dataset.get("n_cases", len(self.cases) if self._cases is not None else "?")
        n_scores = self.manifest.counts.get("scores", len(self._scores) if self._scores is not None else "?")
        return f"Run({where}, {n_cases} cases, {n_scores} scores, {self.manifest.status})"

    def _repr_html_(self) -> str:
        """A notebook's view of the run: where it is, its status and counts, the input warnings that
        bear on its metrics, and the summary table (mean and counts per backend and metric, over all
        cases); for a run that computed nothing, what the cases lack and what to run instead
        (`ragbridge.run.unscored`)."""
        import html
        import math

        def num(v: Any) -> str:
            return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

        m = self.manifest
        where = html.escape(str(self.path)) if self.path is not None else "in memory"
        counts = m.counts or {}
        head = (f"<b>Run</b> {where}: {m.dataset.get('n_cases', '?')} cases, "
                f"{counts.get('scores', 0)} scores, {html.escape(m.status)}")
        if (m.judge or {}).get("stub"):
            head += " (judged by the stub judge: the judged scores test plumbing, not answer quality)"
        warned = "".join(f'<p style="color:#8a5a00">warning: {html.escape(w)}</p>' for w in m.warnings)
        columns = ("backend", "metric", "mean", "n_scored", "n_undefined", "n_errored", "n")
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(num(r[c]) if c == 'mean' else str(r[c]))}</td>"
                             for c in columns) + "</tr>" for r in self.summary_rows(by_tag=False))
        header = "".join(f"<th>{c}</th>" for c in columns)
        from .unscored import nothing_computed, unscored_lines

        unscored = nothing_computed(self)
        note = "" if unscored is None else f"<pre>{html.escape(chr(10).join(unscored_lines(unscored)))}</pre>"
        return (f"<div><p>{head}</p>{warned}<table><thead><tr>{header}</tr></thead>"
                f"<tbody>{body}</tbody></table>"
                f"{note}</div>")

    @property
    def complete(self) -> bool:
        return self.manifest.status == "complete"

    def to_frame(self, wide: bool = False):
        """The scores as a pandas DataFrame: one row per score (``case_id``, ``metric``, ``backend``,
        ``value``, ..., ``status``); with ``wide``, one row per case (``case_id``, ``question``, in the
        cases' order) and one column per ``backend:metric`` holding the value (NaN: undefined, failed
        or not scored), the layout evaluation libraries give their results in."""
        import pandas as pd

        if wide:
            columns = list(dict.fromkeys(f"{s.backend}:{s.metric}" for s in self.scores))
            values: dict[str, dict[str, Any]] = {}
            for s in self.scores:
                values.setdefault(s.case_id, {})[f"{s.backend}:{s.metric}"] = s.value
            rows = [{"case_id": c.id, "question": c.question, **values.get(c.id, {})} for c in self.cases]
            return pd.DataFrame(rows, columns=["case_id", "question", *columns]).astype(
                {c: float for c in columns})
        rows = [s.model_dump() for s in self.scores]
        for r, s in zip(rows, self.scores):
            r["status"] = s.status
        return pd.DataFrame(rows)

    def summary(self, by_tag: bool = True):
        if self.totals is not None:
            return self.totals.frame(by_tag)
        from .summary import summarize

        return summarize(self.scores, self.cases, by_tag=by_tag)

    def summary_rows(self, by_tag: bool = True) -> list[dict[str, Any]]:
        """`summary` as a list of plain dicts; for a run just made, without importing pandas."""
        if self.totals is not None:
            return self.totals.rows(by_tag)
        return self.summary(by_tag).to_dict("records")

    def costs(self):
        """Judge calls, tokens and cost per backend and metric, over the scores kept (a DataFrame:
        ``backend, metric, judge_calls, prompt_tokens, completion_tokens, cost``; cost NaN when a
        score's was unknown, no price for its model). The run's total, failed scores' calls
        included, is ``manifest.counts["cost"]["total"]``."""
        import pandas as pd

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


def read_scores(path: Path) -> tuple[list[Score], int]:
    """Scores in ``scores.jsonl``, the last line per (case, metric, backend, repeat) winning.

    Returns the scores and the number of unreadable lines (a line cut short by a killed run).
    """
    if not path.exists():
        return [], 0
    bad: list[Exception] = []
    latest: dict[tuple[str, str, str, int], Score] = {}
    for _, score in jsonl_lines(path, allow_empty=True, on_bad=bad.append, parse=Score.model_validate_json):
        latest[score.repeat_key] = score
    return list(latest.values()), len(bad)


def load_run(path: str | Path) -> Run:
    """Read a run folder (``run.json``, ``scores.jsonl``, ``cases.jsonl``) back as a `Run`: its
    manifest now, its scores and cases when first asked for. A run whose process is gone without
    recording its end reads as ``interrupted``. Raises `RunError` when the folder is not a run's."""
    path = Path(path)
    manifest_path = path / "run.json"
    if not manifest_path.exists():
        raise RunError(f"{path} is not a run folder: it has no run.json")
    try:
        manifest = RunManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RunError(f"{manifest_path}: not a valid run manifest: {exc}") from None
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
    return score.model_dump_json(exclude=exclude or None)


def truncate_partial_line(path: Path) -> None:
    """Cut a last line that has no ``\\n`` (a write cut short by a kill) off the end of ``path``."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        cut = f.read().rfind(b"\n") + 1
        f.truncate(cut)


# --------------------------------------------------------------------------------------------
# Writing a run folder


#: the judge settings that decide its answers: a resume must keep them (`RunFolder.resume`)
JUDGE_IDENTITY = ("model", "base_url", "embedding_model")


class RunFolder:
    """A run folder being written: `prepare`, then `resume` (if it resumes), `start`, `append` each
    score, `heartbeat` while it goes, `finish` at the end."""

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
        self._last_beat = time.monotonic()
        self._beat: Optional[threading.Thread] = None  # the heartbeat being written
        self._beat_error: Optional[OSError] = None

    def prepare(self, overwrite: bool, fingerprint: str, target: bool = False) -> Optional[RunManifest]:
        """Decide what this run does with the folder; returns the earlier run's manifest to resume
        from, or None for a run that starts afresh (nothing there, or ``overwrite``: its files are
        deleted). ``fingerprint`` is the cases' (for a ``target`` run: the golden cases', before the
        target fills them). Raises `RunError` when another live process is writing the folder, or,
        without ``overwrite``, when it holds a run over other cases or an unreadable manifest."""
        self._refuse_if_busy()
        if overwrite:
            for name in RUN_FILES:
                (self.path / name).unlink(missing_ok=True)
            return None
        if not self.manifest_path.exists():
            return None
        try:
            old = RunManifest.model_validate_json(self.manifest_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise RunError(
                f"{self.manifest_path} is not a valid run manifest ({exc}); use --overwrite") from None
        self._check_same_cases(old, "golden_fingerprint" if target else "fingerprint", fingerprint)
        return old

    def _check_same_cases(self, old: RunManifest, key: str, fingerprint: str) -> None:
        if old.dataset.get(key) != fingerprint:
            if old.dataset.get("fingerprint_of") != FINGERPRINT_OF:
                raise RunError(
                    f"{self.path} holds a run written by an earlier ragbridge, whose dataset fingerprint "
                    "is computed differently (now: SHA-256 of the cases' canonical lines), so it cannot "
                    "be resumed; pass --overwrite to score it again from the start, or choose another --out"
                )
            raise RunError(
                f"{self.path} holds a run over different cases (dataset fingerprint differs); "
                "choose another --out, or pass --overwrite to replace it"
            )

    def _check_same_judge(self, old: RunManifest, new: RunManifest) -> None:
        """Refuse a resume whose judge differs from the earlier sessions' in what decides its answers
        (`JUDGE_IDENTITY`): the folder's judged scores would come from two judges, and run.json could
        name only one. A changed rubric is not refused: its metric is scored again (`resume`)."""
        a, b = old.judge or {}, new.judge or {}
        if not a or not b:
            return
        changed = [k for k in JUDGE_IDENTITY if a.get(k) != b.get(k)]
        if changed:
            def judge(j: dict) -> str:
                return ", ".join(f"{k} {j.get(k)!r}" for k in changed)

            raise RunError(
                f"{self.path} was judged with {judge(a)}; this run asks for {judge(b)}. Resuming would mix "
                "two judges' scores in one run folder: resume with the same judge, or score into another "
                "--out (then `ragbridge compare OLD NEW` compares the two judges), or pass --overwrite to "
                "judge every case again with the new one")

    def _refuse_if_busy(self) -> None:
        try:
            old = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        process = old.get("process") if isinstance(old, dict) else None
        if (old.get("status") == "running" and isinstance(process, dict)
                and process.get("pid") != os.getpid() and alive(process)):
            raise RunError(
                f"{self.path} is being written by another run (pid {process.get('pid')} on "
                f"{process.get('host')}, last heartbeat {old.get('heartbeat_at') or old.get('started_at')}); "
                "wait for it to end or stop it, then run again"
            )

    def resume(self, old: RunManifest, manifest: RunManifest) -> dict[tuple[str, str, str, int], Score]:
        """Merge the earlier sessions' manifest ``old`` into this session's ``manifest`` and return
        the scores to keep, by `Score.repeat_key`: every one that did not fail and was not left unrun
        by a spent budget, unless its metric was redefined
        since (its rubric's digest changed: ``counts.redefined``, scored again). A judge that
        differs in `JUDGE_IDENTITY` is refused (`RunError`). The judge counts and the backends'
        wall times carry over, to be added to. Raises `RunError` when the cases differ from those
        the earlier sessions scored (a target run whose outputs were not all kept in target.jsonl)."""
        self._check_same_cases(old, "fingerprint", manifest.dataset["fingerprint"])
        self._check_same_judge(old, manifest)
        previous, _ = read_scores(self.scores_path)
        redefined = sorted(f"{b}:{m}" for b, ds in manifest.digests.items() for m, d in ds.items()
                           if old.digests.get(b, {}).get(m, d) != d)
        done = {s.repeat_key: s for s in previous
                if s.status not in ("error", "not_run") and f"{s.backend}:{s.metric}" not in redefined}
        manifest.digests = {b: {**old.digests.get(b, {}), **manifest.digests.get(b, {})}
                            for b in {**old.digests, **manifest.digests}}
        manifest.pass_marks = {b: {**old.pass_marks.get(b, {}), **manifest.pass_marks.get(b, {})}
                               for b in {**old.pass_marks, **manifest.pass_marks}}
        if redefined:
            manifest.counts["redefined"] = redefined
        manifest.started_at = old.started_at
        merged = dict(old.metrics)
        for b, ms in manifest.metrics.items():
            merged[b] = list(dict.fromkeys(list(merged.get(b, [])) + ms))
        manifest.metrics = merged
        manifest.warnings = list(dict.fromkeys([*old.warnings, *manifest.warnings]))  # the metrics of both
        manifest.backends = {**old.backends, **manifest.backends}
        manifest.judge = manifest.judge or old.judge
        if (old.judge or {}).get("stub") and manifest.judge is not None and all(
            manifest.judge.get(k) == old.judge.get(k) for k in ("model", "base_url")
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
        (a last line cut short by a kill is cut off first)."""
        self.path.mkdir(parents=True, exist_ok=True)
        source.save(self.cases_path)
        self.write_manifest(manifest)
        truncate_partial_line(self.scores_path)
        self._fh = open(self.scores_path, "a", encoding="utf-8", buffering=1 << 20)
        self._last_beat = time.monotonic()

    def write_manifest(self, manifest: RunManifest) -> None:
        write_atomic(self.manifest_path, manifest.model_dump_json(indent=2))

    def append(self, score: Score) -> None:
        """Add a score to the write buffer (on disk at the next `flush`)."""
        self._fh.write(score_json(score) + "\n")

    def append_lines(self, lines: str) -> None:
        """Add whole ``scores.jsonl`` lines to the write buffer (`ScoreBlock.json_lines`)."""
        self._fh.write(lines)

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


def _rewrite_in_place(path: Path, manifest: RunManifest) -> None:
    """Overwrite ``path``'s bytes with ``manifest`` (compact JSON, padded with spaces to the file's
    length), for when no new file can be made (a full disk): no block is allocated. When even that
    does not fit, the manifest without its counts and timing (its status, the run's identity); when
    that does not either, nothing (``running`` with its process gone reads as interrupted)."""
    try:
        with open(path, "r+b") as f:
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
