"""The score cache: a judged score made once is not made again while nothing it depends on changed.

A warm re-run of a judged suite into a new folder makes no judge calls (the judge cache holds every
answer), but the libraries still do all their own work around those answers, which dominates: a
faithfulness run of 2,000 cases re-run warm took about as long as cold. The score cache
skips the library: before a judged metric is scored, each case's score is looked up by its key, and
a score found is recorded as it is (``Score.cached``) without calling the backend.

The key is the SHA-256 of everything the score depends on:

- ragbridge's version, the backend's name and its library's version (``Backend.version``);
- the metric: canonical name, native name and the digest of its definition (a rubric's);
- the options a backend reads: ``k`` and this backend's own options (those that differ from their
  defaults: another backend's options, the native backend's included, are not in the key; a judged
  backend's ``structured_output`` among them);
- the judge: model, base URL (without credentials), embedding model and ``max_tokens``, and its
  ``structured_output`` when it is not ``auto``;
- the repeat index (``--repeats``: each repeat is its own score);
- the case: its whole canonical record (id, question, answer, chunks, labels, reference, tags,
  metadata), so any edit to a case invalidates its scores and only its scores.

Anything else the library reads on its own (an environment variable that changes its behaviour, its
prompt files) is not in the key: upgrading the library changes its version, which is. Only judged
metrics are cached (native metrics cost less to compute than to look up), and only scores that
were made: an error, a score the budget left unrun or a skipped case is never stored.

The file is the judge cache's, named ``.scores.sqlite`` instead of ``.sqlite`` (the default
``.ragbridge/judge-cache.scores.sqlite``: each judge cache has its own), and follows its mode:
``--cache-mode off`` (or no cache path) turns both off, ``read-only`` reads both and writes neither.
A dry run reads it and writes nothing. Stored scores are written at the end of each batch and when
the runner flushes its scores: a run killed outright loses at most those of its last batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Optional

from .. import __version__
from ..judge.cache import open_database
from ..backend import RunOptions
from ..formats.batches import CaseBatch
from ..formats.plain_records import record_line
from ..judge.config import identity_url, redact_url
from ..schema import RunManifest, Score, json_of
from .isolated import split_name
from .plan import Plan
from .recorded import score_from_line

__all__ = ["ScoreCache", "ScoreReuse", "score_cache_for", "score_cache_path", "metric_prefix", "case_key"]

SUFFIX = ".scores.sqlite"

_SCHEMA = ("CREATE TABLE IF NOT EXISTS scores "
           "(key TEXT PRIMARY KEY, score TEXT NOT NULL, stub INTEGER NOT NULL, created REAL NOT NULL)")


def metric_prefix(backend: str, version: Optional[str], metric: str, spec: Any, options: Any,
                  judge: Any, stub: Optional[str] = None) -> bytes:
    """What a backend's metric depends on within a run, hashed: the start of each of its cases' keys
    (``stub``: the judge is ragbridge's stub judge with these settings, `identity_url`)."""
    own = split_name(backend)[0]  # a library version's backend (mylib==1.2) reads mylib's options
    doc = {
        "ragbridge": __version__,
        "backend": backend,
        "version": version,
        "metric": metric,
        "native_metric": spec.native_name,
        "digest": spec.digest,
        "options": {"k": options.k, "backend_options": _own(options.backend_options.get(own))},
        "judge": {"model": judge.model, "base_url": identity_url(judge.base_url, stub),
                  "embedding_model": judge.embedding_model, "max_tokens": judge.max_tokens},
    }
    # what the gateway changes in each request, and another embeddings server (absent when unset, so
    # the keys of a plain judge stay what they were)
    changed = {**judge.answer_settings(), **({"embedding_base_url": redact_url(judge.embedding_base_url)}
                                             if judge.embedding_base_url else {})}
    if changed:
        doc["judge"]["changed"] = changed
    if judge.structured_output != "auto":  # how requests for a JSON object are sent
        doc["judge"]["structured_output"] = judge.structured_output
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).digest()


def _own(given: Any) -> Optional[dict]:
    """A backend's options in the key: those that differ from their defaults (None when none do)."""
    if hasattr(given, "model_dump"):
        given = given.model_dump(exclude_defaults=True)
    return dict(given) if given else None


def case_key(prefix: bytes, repeat: int, record_line: bytes) -> str:
    """The key of one case's score: the metric's prefix, the repeat index and the case's canonical line."""
    h = hashlib.sha256(prefix)
    h.update(b"%d\n" % repeat)
    h.update(record_line)
    return h.hexdigest()


class ScoreCache:
    """Scores by key in one SQLite file (WAL), looked up a batch at a time; new scores are held until
    `commit` (end of a batch, each flush of the run's scores, close)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._pending: dict[str, tuple[str, int, float]] = {}
        self._conn: Optional[sqlite3.Connection] = None
        if not read_only or self.path.is_file():
            with contextlib.suppress(sqlite3.Error):  # an unusable cache is a cold cache
                self._conn = open_database(self.path, "scores", read_only=read_only, schema=(_SCHEMA,))

    def get_many(self, keys: Iterable[str]) -> dict[str, tuple[Score, bool, float]]:
        """The stored scores of ``keys`` that are present: key -> (score, made by the stub judge, when
        it was stored: Unix seconds)."""
        keys = list(keys)
        found: dict[str, tuple[Score, bool, float]] = {}
        for key in keys:
            if key in self._pending:
                line, stub, created = self._pending[key]
                found[key] = (Score.model_validate_json(line), bool(stub), created)
        if self._conn is None:
            return found
        rest = [k for k in keys if k not in found]
        for start in range(0, len(rest), 500):
            chunk = rest[start:start + 500]
            try:
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, score, stub, created FROM scores WHERE key IN ({marks})", chunk).fetchall()
            except sqlite3.Error:
                return found  # an unreadable cache is a cold cache
            for key, line, stub, created in rows:
                with contextlib.suppress(ValueError, TypeError):  # a score a run never makes is a miss
                    found[key] = (score_from_line(line), bool(stub), float(created))
        return found

    def put(self, key: str, score: Score, stub: bool) -> bool:
        """Hold ``score`` (as made this run, with its usage) for the next `commit`; False when this
        cache is read-only."""
        if self.read_only or self._conn is None:
            return False
        self._pending[key] = (json_of(score), int(stub), time.time())
        return True

    def commit(self) -> None:
        if not self._pending or self._conn is None:
            return
        rows = [(k, line, stub, created) for k, (line, stub, created) in self._pending.items()]
        try:
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error:
            return  # kept pending: tried again at the next commit
        self._pending.clear()

    def close(self) -> None:
        self.commit()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def score_cache_path(judge_cache: Path) -> Path:
    """The score cache beside the judge cache ``judge_cache``: ``cache.sqlite`` -> ``cache.scores.sqlite``."""
    return Path(judge_cache).with_suffix(SUFFIX)


def score_cache_for(judge: Any, dry_run: bool = False) -> Optional[ScoreCache]:
    """The score cache of a run judged by ``judge`` (a `JudgeConfig`): its judge cache's, in the same
    mode; None when the judge cache is off. A dry run only reads it."""
    if judge is None or judge.cache_path is None or judge.cache_mode == "off":
        return None
    path = score_cache_path(judge.cache_path)
    return ScoreCache(path, read_only=dry_run or judge.cache_mode == "read-only")


class ScoreReuse:
    """The score cache as a run uses it: `lookup` takes out of a job the cases whose score it holds
    (recorded as they are, `Score.cached`) and files the keys of the others; `store` keeps a score
    made this run under its key. ``reused`` and ``stored`` count this run's, all sessions included;
    ``by_backend`` the reused per backend, with when the first and the last of them were made."""

    def __init__(self, cache: ScoreCache, plan: Plan, options: RunOptions, judge: Any,
                 manifest: RunManifest):
        self.cache = cache
        stub = (manifest.judge or {}).get("stub_settings")
        versions = manifest.backends  # each backend's library version, as the run records it
        self.prefixes = {(b, m): metric_prefix(b, versions.get(b), m, spec, options, judge, stub)
                         for b, chosen in plan.items() for m, spec in chosen if spec.judge}
        self.priced = bool(judge.prices)
        self.keys: dict[tuple[str, str, str, int], str] = {}  # the scores being made: repeat key -> key
        self._lines: tuple[Optional[CaseBatch], list[Optional[bytes]]] = (None, [])
        earlier = manifest.counts.get("score_cache") or {}
        self.reused, self.stored = int(earlier.get("reused", 0)), int(earlier.get("stored", 0))
        self.by_backend: dict[str, dict[str, int]] = {b: dict(v) for b, v in
                                                      (earlier.get("by_backend") or {}).items()}
        self.stub = False  # a reused score was made by the stub judge

    def _line(self, batch: CaseBatch, i: int) -> bytes:
        if self._lines[0] is not batch:
            self._lines = (batch, [None] * len(batch))
        lines = self._lines[1]
        if lines[i] is None:
            lines[i] = record_line(batch.record(i))
        return lines[i]

    def lookup(self, backend: str, metric: str, repeat: int, batch: CaseBatch, eligible: list[int],
               immediate: list[Score]) -> list[int]:
        """The cases of ``eligible`` the cache does not hold; the scores of those it holds are added to
        ``immediate``."""
        prefix = self.prefixes[(backend, metric)]
        ids = batch.ids
        keys = {i: case_key(prefix, repeat, self._line(batch, i)) for i in eligible}
        found = self.cache.get_many(keys.values())
        left = []
        for i in eligible:
            hit = found.get(keys[i])
            if hit is None:
                self.keys[(ids[i], metric, backend, repeat)] = keys[i]
                left.append(i)
                continue
            score, stub, created = hit
            self.stub = self.stub or stub
            made = self.by_backend.setdefault(backend, {"reused": 0, "first_made": int(created),
                                                        "last_made": int(created)})
            made["first_made"] = min(made["first_made"], int(created))
            made["last_made"] = max(made["last_made"], int(created))
            # the key holds the case (its id), metric, backend and repeat: only this run's usage differs
            immediate.append(score.model_copy(update={
                "cached": True, "judge_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0,
                "cost": 0.0 if self.priced else None}))
        return left

    def record(self, score: Score, stub: bool) -> None:
        """Count a recorded score, and store it when it was made this run (not an error, not unrun)."""
        if score.cached:
            self.reused += 1
            self.by_backend[score.backend]["reused"] += 1
            return
        key = self.keys.pop(score.repeat_key, None)
        if key is not None and not score.error and not score.not_run and self.cache.put(key, score, stub):
            self.stored += 1

    def counts(self) -> dict[str, Any]:
        return {"reused": self.reused, "stored": self.stored,
                **({"by_backend": self.by_backend} if self.by_backend else {})}
