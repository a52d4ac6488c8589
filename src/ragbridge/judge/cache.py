"""The judge's response cache: :class:`JudgeCache`, one SQLite file (WAL).

Answers are filed by the full request (upstream URL without credentials, path and the whole JSON
body: model, messages, every parameter), so a re-run of an unchanged suite makes no calls, and CI
can replay a recorded cache with no key (``cache_mode = "read-only"``, opened read-only and, in a
read-only directory, as immutable). What the cache holds is taken as the judge's word, so a cache
another user could change is refused, as ssh refuses such a key file (`refuse_unsafe`, a
`CacheRefused`): a folder or file that is a symbolic link, or not owned by this user (or root), or
writable by group or others. A folder and file the cache makes are this user's only (0700, 0600).
A file that will not take a write (a full disk, a read-only or
unwritable folder) is a :class:`CacheUnwritable` naming it, at open or at close, never a traceback.
:meth:`JudgeCache.delete` is what
:meth:`ragbridge.judge.JudgeGateway.forget` uses to drop the answers of a score that failed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sqlite3
import threading
import stat
import time
from pathlib import Path
from typing import Any, Optional

from ..errors import UserError


class CacheRefused(UserError):
    """A judge or score cache another user could change, or that is reached through a link: what
    it holds would be taken as the judge's word (`refuse_unsafe`)."""


def refuse_unsafe(path: Path) -> None:
    """Raise `CacheRefused` when the cache at ``path`` (its folder, the file and SQLite's files beside
    it) is a symbolic link, is not owned by this user (or root), or is writable by group or others."""
    path = Path(path)
    me = os.geteuid() if hasattr(os, "geteuid") else None
    for item in (path.parent, path, *(Path(f"{path}{end}") for end in ("-wal", "-shm", "-journal"))):
        try:
            st = item.lstat()
        except OSError:
            continue
        folder = item == path.parent
        if stat.S_ISLNK(st.st_mode):
            what = f"is a symbolic link (to {os.readlink(item)})"
            fix = "remove the link: the cache is written where it is named, never through a link"
        elif not (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
            what, fix = ("is not a folder" if folder else "is not a file"), "remove it"
        elif me is not None and st.st_uid not in (me, 0):
            what = f"belongs to another user (uid {st.st_uid})"
            fix = "remove it (its owner or root can), or keep the cache in a folder of your own"
        elif me is not None and st.st_mode & 0o022:
            what = f"can be written by {'group and others' if st.st_mode & 0o002 else 'its group'}"
            fix = f"chmod go-w {item}" + (" (and check what it holds)" if not folder else "")
        else:
            continue
        kind = "the judge cache's folder" if folder else "the judge cache"
        head = (f"{item}: {kind} {what}, so another user could change the answers (and scores) it "
                f"holds, which a run takes as the judge's; {fix}")
        raise CacheRefused(f"{head}, pass cache_path= another file, or cache_mode='off'",
                           cli=f"{head}, pass --cache-path another file, or --cache-mode off")


class CacheUnwritable(OSError):
    """The judge cache's file cannot be written (a full disk, a read-only or unwritable folder): an
    `OSError` with the reason's ``errno`` and ``strerror`` and the file as ``filename``, as a writer
    of the run folder raises, so every command reports it the same way (one line, exit 2)."""


def unwritable(exc: BaseException, path: Path) -> CacheUnwritable:
    """``exc`` (SQLite's error, or the OS's), as the `CacheUnwritable` of ``path`` with the reason the
    file system gives: SQLite says "disk I/O error" or "unable to open database file" for a full
    disk and a read-only folder alike."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return CacheUnwritable(exc.errno, exc.strerror or str(exc), str(path))
    folder = path.parent if path.parent.exists() else next((p for p in path.parents if p.exists()), Path("/"))
    code = errno.EIO
    if getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
        code = errno.ENOSPC
    else:
        with contextlib.suppress(OSError):
            if os.statvfs(folder).f_flag & os.ST_RDONLY:
                code = errno.EROFS
            elif not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
                code = errno.EACCES
            elif shutil.disk_usage(folder).free < (1 << 20):
                code = errno.ENOSPC
            elif _file_size_limited():
                code = errno.EFBIG
    text = os.strerror(code) if code != errno.EIO else f"{os.strerror(code)} ({exc})"
    return CacheUnwritable(code, text, str(path))


def _file_size_limited() -> bool:
    """Whether this process may write files only up to a size (``ulimit -f``): a write past it fails
    as a full disk's does."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def open_database(path: Path, table: str, *, read_only: bool, schema: tuple[str, ...] = ()
                  ) -> sqlite3.Connection:
    """A cache's SQLite file, shareable by threads (the caller locks), in autocommit mode.

    Read-write: WAL, its folder made, ``schema`` (``CREATE TABLE IF NOT EXISTS ...``) applied.
    Read-only (an existing file): opened with ``mode=ro`` and checked by reading ``table``; a WAL
    database in a read-only directory (a CI checkout) cannot be opened so and is opened immutable."""
    refuse_unsafe(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():  # this user's only (SQLite makes its -wal and -shm files alike)
            with contextlib.suppress(OSError):  # a folder that takes no file: SQLite's error says so
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        refuse_unsafe(path)
        conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for statement in schema:
            conn.execute(statement)
        return conn
    uri = path.resolve().as_uri()
    conn = None
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False, isolation_level=None)
        conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchall()
        return conn
    except sqlite3.OperationalError:
        if conn is not None:
            conn.close()
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, check_same_thread=False,
                               isolation_level=None)


class JudgeCache:
    """SQLite response cache (WAL). One connection shared by all threads under a lock.

    Two tables: ``responses`` (canonical request key -> status, body) and ``aliases`` (key of the
    exact request bytes -> canonical key, so a byte-identical request is found without parsing).
    A cache whose bodies total at most ``memory_bytes`` is also loaded into memory when opened, and
    new answers are added while they fit: a warm re-run then never waits on SQLite. A lookup that
    misses in memory still asks SQLite (another process may have written the file since).

    New answers are served from memory at once and written to SQLite by a background thread, one
    transaction per batch, at most ``write_delay`` seconds later (and on :meth:`close`): a judge
    call does not wait for a commit. A crash loses at most that last fraction of a second of
    answers, which the next run asks for again."""

    memory_bytes = 64 << 20
    write_delay = 0.1

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.Lock()
        self._conn: Optional[sqlite3.Connection] = None
        self._mem: dict[str, tuple[int, bytes]] = {}
        self._mem_alias: dict[str, str] = {}
        self._mem_size = 0
        # written by the background writer: (key, path, model, status, body, created) and (raw, key)
        self._pending: dict[str, tuple] = {}
        self._pending_alias: dict[str, str] = {}
        self._plock = threading.Lock()
        self._closed = threading.Event()
        self._writer: Optional[threading.Thread] = None
        if read_only:
            if self.path.is_file():
                self._conn = open_database(self.path, "responses", read_only=True)
        else:
            try:
                self._conn = open_database(self.path, "responses", read_only=False, schema=(
                    "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, path TEXT NOT NULL, "
                    "model TEXT, status INTEGER NOT NULL, body BLOB NOT NULL, created REAL NOT NULL)",
                    "CREATE TABLE IF NOT EXISTS aliases (raw TEXT PRIMARY KEY, key TEXT NOT NULL)"))
            except (sqlite3.Error, OSError) as exc:
                raise unwritable(exc, self.path) from None
            self._writer = threading.Thread(target=self._write_periodically,
                                            name="ragbridge-judge-cache-writer", daemon=True)
            self._writer.start()
        self._preload()

    def _write_periodically(self) -> None:
        while not self._closed.wait(self.write_delay):
            with contextlib.suppress(CacheUnwritable):  # tried again, and said at close
                self.flush()

    def flush(self) -> None:
        """Write the answers not yet in SQLite (one transaction); `CacheUnwritable` when the file
        will not take them (they stay pending, to be tried again)."""
        with self._lock:  # taken before the pending entries: delete() cannot slip in between
            with self._plock:
                pending, self._pending = self._pending, {}
                pending_alias, self._pending_alias = self._pending_alias, {}
            if not (pending or pending_alias) or self._conn is None:
                return
            try:
                self._conn.execute("BEGIN")
                try:
                    self._conn.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                                           list(pending.values()))
                    self._conn.executemany("INSERT OR REPLACE INTO aliases VALUES (?, ?)",
                                           list(pending_alias.items()))
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with self._plock:  # kept, under what came meanwhile
                    self._pending = {**pending, **self._pending}
                    self._pending_alias = {**pending_alias, **self._pending_alias}
                raise unwritable(exc, self.path) from None

    def _preload(self) -> None:
        if self._conn is None:
            return
        try:
            total = self._conn.execute("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM responses").fetchone()[0]
            if total > self.memory_bytes:
                return
            for key, status, body in self._conn.execute("SELECT key, status, body FROM responses"):
                self._mem[key] = (int(status), bytes(body))
            self._mem_size = int(total)
            self._mem_alias.update(self._conn.execute("SELECT raw, key FROM aliases").fetchall())
        except sqlite3.OperationalError:
            pass  # an older or foreign file: SQLite lookups still work where they can

    def _remember(self, key: str, status: int, body: bytes) -> None:
        if key not in self._mem and self._mem_size + len(body) <= self.memory_bytes:
            self._mem[key] = (status, body)
            self._mem_size += len(body)

    @staticmethod
    def key(upstream: str, path: str, body: Any) -> str:
        canon = json.dumps({"upstream": upstream, "path": path, "body": body}, sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()

    @staticmethod
    def raw_key(upstream: str, path: str, raw: bytes) -> str:
        """Key of the exact request bytes (an alias of the canonical key, to skip JSON parsing)."""
        h = hashlib.sha256(upstream.encode("utf-8"))
        h.update(b"\0" + path.encode("utf-8") + b"\0")
        h.update(raw)
        return h.hexdigest()

    def get_raw(self, raw_key: str) -> Optional[tuple[int, bytes]]:
        key = self._mem_alias.get(raw_key)
        if key is not None:
            hit = self._mem.get(key)
            if hit is None:
                hit = self._pending_hit(key)
            if hit is not None:
                return hit
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute(
                    "SELECT r.key, r.status, r.body FROM aliases a JOIN responses r ON r.key = a.key "
                    "WHERE a.raw = ?",
                    (raw_key,)).fetchone()
            except sqlite3.OperationalError:
                return None
        if row is None:
            return None
        hit = (int(row[1]), bytes(row[2]))
        self._remember(row[0], *hit)
        self._mem_alias[raw_key] = row[0]
        return hit

    def add_alias(self, raw_key: str, key: str) -> None:
        self._mem_alias[raw_key] = key
        if self._conn is None or self.read_only:
            return
        with self._plock:
            self._pending_alias[raw_key] = key

    def _pending_hit(self, key: str) -> Optional[tuple[int, bytes]]:
        row = self._pending.get(key)
        return (row[3], row[4]) if row is not None else None

    def get(self, key: str) -> Optional[tuple[int, bytes]]:
        hit = self._mem.get(key) or self._pending_hit(key)
        if hit is not None:
            return hit
        if self._conn is None:
            return None
        with self._lock:
            try:
                row = self._conn.execute("SELECT status, body FROM responses WHERE key = ?",
                                         (key,)).fetchone()
            except sqlite3.OperationalError:
                return None  # e.g. a read-only file without the table
        if row is None:
            return None
        hit = (int(row[0]), bytes(row[1]))
        self._remember(key, *hit)
        return hit

    def put(self, key: str, path: str, model: Optional[str], status: int, body: bytes,
            raw_key: Optional[str] = None) -> None:
        if self._conn is None or self.read_only:
            return
        with self._plock:
            self._pending[key] = (key, path, model, status, body, time.time())
            if raw_key is not None:
                self._pending_alias[raw_key] = key
        self._remember(key, status, body)
        if raw_key is not None:
            self._mem_alias[raw_key] = key

    def delete(self, keys: set[str], raw_keys: set[str]) -> int:
        """Forget these responses (canonical keys, and the ones the raw keys alias). Returns how many."""
        if self.read_only:
            return 0
        keys = set(keys)
        with self._lock:
            with self._plock:
                for raw in raw_keys:  # the canonical keys the raw keys stand for, wherever they are
                    key = self._pending_alias.get(raw) or self._mem_alias.get(raw)
                    if key is None and self._conn is not None:
                        row = self._conn.execute("SELECT key FROM aliases WHERE raw = ?", (raw,)).fetchone()
                        key = row[0] if row else None
                    if key is not None:
                        keys.add(key)
                # answers not yet written are dropped here, so the writer never adds them back
                for key in keys:
                    self._pending.pop(key, None)
                for raw in [r for r, k in self._pending_alias.items() if k in keys or r in raw_keys]:
                    del self._pending_alias[raw]
            for key in keys:
                hit = self._mem.pop(key, None)
                if hit is not None:
                    self._mem_size -= len(hit[1])
            for raw in [r for r, k in self._mem_alias.items() if k in keys or r in raw_keys]:
                del self._mem_alias[raw]
            if self._conn is None or not keys:
                return len(keys)
            marks = ",".join("?" * len(keys))
            try:
                self._conn.execute(f"DELETE FROM responses WHERE key IN ({marks})", tuple(keys))
                self._conn.execute(f"DELETE FROM aliases WHERE key IN ({marks})", tuple(keys))
            except sqlite3.Error as exc:
                raise unwritable(exc, self.path) from None
        return len(keys)

    def __len__(self) -> int:
        if self._conn is None:
            return 0
        self.flush()
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def close(self) -> None:
        """Write what is pending and close; `CacheUnwritable` (after closing) when it cannot be
        written: this run's answers not yet written are then lost to later runs."""
        self._closed.set()
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        try:
            if self._conn is not None and not self.read_only:
                self.flush()
        finally:
            with self._lock:
                if self._conn is not None:
                    if not self.read_only:
                        with contextlib.suppress(sqlite3.Error):  # fold the WAL back: one portable file
                            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.close()
                    self._conn = None
