"""The gateway's answers: :class:`ResponseStore`, in front of the SQLite cache.

It finds the answer recorded for a request (by its exact bytes first, then by its parsed body), lets
one upstream call run per distinct request in flight (single flight: the others wait for its answer),
keeps a dry run's simulated answers in memory instead of the cache, and remembers which answers were
served for which call tag, so that :meth:`ResponseStore.forget` can drop every answer of a score
that failed, and keep any still in flight for it from being stored.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Iterator, Optional

from .cache import JudgeCache
from .tag import CallTag

__all__ = ["ResponseStore", "Answer"]

#: (status, body)
Answer = tuple[int, bytes]


class ResponseStore:
    """Answers by request key: the cache (None: no cache), or, with ``simulated``, a dry run's."""

    def __init__(self, cache_path: Optional[Path], *, read_only: bool, simulated: bool = False) -> None:
        self.cache = (JudgeCache(cache_path, read_only=read_only or simulated) if cache_path is not None
                      else None)
        self._simulated: Optional[dict[str, Answer]] = {} if simulated else None
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Event] = {}
        self._served: dict[CallTag, set[tuple[str, str]]] = {}
        self._failed: set[CallTag] = set()  # forgotten: no answer is stored for these any more

    @staticmethod
    def path_of(endpoint: str, repeat: int) -> str:
        """The path a request is filed under: repeat r > 0 of a judged score is a call of its own."""
        return "/" + endpoint + (f"#repeat={repeat}" if repeat else "")

    def by_bytes(self, identity: str, path: str, raw: bytes, tag: CallTag) -> tuple[Optional[str],
                                                                                   Optional[Answer]]:
        """(the key of the exact request bytes, the answer filed under it); no parsing."""
        if self.cache is None:
            return None, None
        raw_key = JudgeCache.raw_key(identity, path, raw)
        self._attribute(tag, ("raw", raw_key))
        return raw_key, self.cache.get_raw(raw_key)

    def by_body(self, identity: str, path: str, body: object, tag: CallTag,
                raw_key: Optional[str]) -> tuple[str, Optional[Answer]]:
        """(the canonical key of the parsed request, the answer filed under it)."""
        key = JudgeCache.key(identity, path, body)
        self._attribute(tag, ("key", key))
        hit = self.get(key)
        if hit is not None and raw_key is not None and self.cache is not None:
            self.cache.add_alias(raw_key, key)
        return key, hit

    def get(self, key: str) -> Optional[Answer]:
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is None and self._simulated is not None:
            hit = self._simulated.get(key)
        return hit

    @contextlib.contextmanager
    def single_flight(self, key: str, wait: float) -> Iterator[bool]:
        """``with store.single_flight(key, wait) as first:`` one caller per key at a time is
        ``first``; the others wait (at most ``wait`` seconds) for it to finish, then go on (they look
        the answer up again; if it was not stored, they call themselves)."""
        with self._lock:
            waiter = self._inflight.get(key)
            if waiter is None:
                self._inflight[key] = threading.Event()
        if waiter is not None:
            waiter.wait(wait)
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                ev = self._inflight.pop(key, None)
            if ev is not None:
                ev.set()

    def put(self, key: str, endpoint: str, model: Optional[str], answer: Answer, raw_key: Optional[str],
            tag: CallTag) -> None:
        """Keep a 2xx answer: in memory for a dry run, else in the cache unless ``tag`` was forgotten
        (checked under the same lock as `forget`: every answer is either dropped there or never
        stored)."""
        if self._simulated is not None:
            self._simulated[key] = answer
            return
        if self.cache is None:
            return
        with self._lock:
            if tag not in self._failed:
                self.cache.put(key, "/" + endpoint, model, answer[0], answer[1], raw_key=raw_key)

    def _attribute(self, tag: CallTag, entry: tuple[str, str]) -> None:
        with self._lock:
            if tag not in self._failed:
                self._served.setdefault(tag, set()).add(entry)

    def forget(self, tag: CallTag) -> int:
        """Drop every answer served for ``tag``, and store none for it from now on; the number of
        distinct requests served for it."""
        with self._lock:
            self._failed.add(tag)
            entries = self._served.pop(tag, set())
        if not entries or self.cache is None:
            return 0
        return self.cache.delete({v for k, v in entries if k == "key"}, {v for k, v in entries if k == "raw"})

    def close(self) -> None:
        cache, self.cache = self.cache, None
        if cache is not None:
            cache.close()
