"""A compact copy of a run folder's columns (``columns.npz``): what every later reader reads instead of
parsing ``cases.jsonl`` and ``scores.jsonl`` again.

Reading a run's columns (`ragbridge.run.recorded.read_columns`) parses and checks every line of both
files: about as much work as the run's own reading of its golden set, and every command that reads
the run (gate, diff, compare, report...) paid it again, twice for the commands that read two runs.
A run that writes every score in one session makes the copy as it goes (`CopyMaker`: each batch's
part of the case index, each score with the offset its line was written at) and writes it when it
completes; any other finished run's first reading writes what it found. The copy holds, as NumPy
arrays in one uncompressed ``.npz`` (no pickles): the case index (ids, tags, ``answerable``, each case's line
offset and golden digest) and every column's values, statuses, places and per-score arrays (a few
bytes a score: about 130 MB for a million cases of six metrics). Later readings load it in a
fraction of a second: the case index and each column's values and statuses at once, its line places
and per-score arrays (seconds, tokens, ...) when first asked for (most readers never ask: 183 MiB for
two runs of a million cases), from the same copy or not at all.

The copy names the two files it was made from by size, modification time (nanoseconds) and inode;
it is used only while both are exactly those (a run resumed, a score line edited or a file restored
changes them, and the files are read and checked again). A run still being written is not copied:
the files are checked unchanged from before to after the reading. A folder that cannot be written
(read-only, another owner) is read as before, without a copy. A run with repeats (``--repeats``) is
not copied (its collapsed slots read their scores back when its columns are made). ``--overwrite``
removes the copy with the run's other files.
"""

from __future__ import annotations

import json
import os
import zipfile
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np

from .case_ids import CaseIds
from .columns import (EXTRA_ARRAYS, EXTRA_FIELDS, SCORED, UNDEFINED, CaseIndex, Column, ColumnsBuilder,
                      RunColumns, ScoreStore, index_part)

__all__ = ["COPY_NAME", "CopyMaker", "file_keys", "load_copy", "save_copy"]

COPY_NAME = "columns.npz"
#: the layout of the copy; a copy of another layout is read as absent
VERSION = 1
_SOURCES = ("cases.jsonl", "scores.jsonl")


def file_keys(folder: Path) -> list[Optional[list[int]]]:
    """Size, modification time (ns) and inode of each of the run's files the copy is made from (None
    for a file that is not there)."""
    out: list[Optional[list[int]]] = []
    for name in _SOURCES:
        try:
            st = os.stat(folder / name)
        except OSError:
            out.append(None)
        else:
            out.append([st.st_size, st.st_mtime_ns, st.st_ino])
    return out


def save_copy(folder: Path, columns: RunColumns, keys: list, pass_at_least: Optional[int]) -> bool:
    """Write ``columns`` (read from ``folder`` when its files were ``keys``) as the folder's copy, if
    the files are still ``keys`` and the folder can be written; whether it was written. Nothing but a
    copy in place or none: a failure leaves no file."""
    if keys != file_keys(folder) or columns.repeats > 1 or any(
            c.repeats is not None for c in columns.columns.values()):
        return False
    index = columns.cases
    n = len(index)
    table: dict[tuple[str, ...], int] = {}
    tag_codes = np.fromiter((table.setdefault(t, len(table)) for t in index.tags), np.int32, n)
    golden = np.zeros((n, 16), np.uint8)
    golden[:index.described] = index.golden
    arrays: dict[str, np.ndarray] = {
        "ids": np.frombuffer(index.ids.blob, np.uint8), "id_ends": index.ids.ends, "tags": tag_codes,
        "answerable": np.asarray(index.answerable, bool), "places": np.asarray(index.places, np.int64),
        "golden": golden, "has_golden": np.arange(n) < index.described,
    }
    described_columns = []
    for k, ((backend, metric), col) in enumerate(columns.columns.items()):
        extras = [name for name in EXTRA_FIELDS if getattr(col, name) is not None]
        described_columns.append([backend, metric, extras])
        for name in ("value", "status", "places", *extras):
            arrays[f"c{k}_{name}"] = getattr(col, name)
    meta = {"version": VERSION, "files": keys, "pass_at_least": pass_at_least, "cases": n,
            "described": index.described, "dropped": columns.dropped, "tag_table": [list(t) for t in table],
            "columns": described_columns}
    return _write_copy(folder, keys, meta, {name: (a.dtype, a.shape, (a,)) for name, a in arrays.items()})


def _write_copy(folder: Path, keys: list, meta: dict,
                members: dict[str, tuple[Any, tuple, Iterable]]) -> bool:
    """Write the copy: ``meta`` and each member (``name -> (dtype, shape, its rows a part at a time)``)
    as an array of the ``.npz``, read by `numpy.load` as `numpy.savez` writes it, if the files are
    still ``keys`` when it is written; whether it was. Nothing but a copy in place or none."""
    from ..formats.files import DatasetError, atomic_path

    meta_bytes = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    members = {**members, "meta": (meta_bytes.dtype, meta_bytes.shape, (meta_bytes,))}
    try:
        with atomic_path(folder / COPY_NAME) as tmp:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, (dtype, shape, parts) in members.items():
                    dtype = np.dtype(dtype)
                    with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                        np.lib.format.write_array_header_1_0(f, {
                            "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                            "shape": tuple(shape)})
                        rows = 0
                        for part in parts:
                            part = np.ascontiguousarray(part, dtype)
                            f.write(part.data)
                            rows += len(part)
                        if rows != (shape[0] if shape else 1):
                            raise OSError(f"{name}: {rows} rows, not {shape[0]}")
            if keys != file_keys(folder):  # written to while it was read: no copy
                raise OSError("changed")
    except (OSError, DatasetError):  # not writable, or not a file there (refused): no copy
        return False
    return True


def _member(path: Path, name: str, n: int, files) -> np.ndarray:
    """The array ``name`` of the copy at ``path``, of ``n`` values, the copy still that of ``files``."""
    with np.load(path, allow_pickle=False) as got:
        if json.loads(bytes(got["meta"]).decode("utf-8")).get("files") != files:
            raise RuntimeError(f"{path} changed while the run was read: read the run again")
        arr = got[name]
    if len(arr) != n:
        raise RuntimeError(f"{path}: {name} holds {len(arr)} values, not {n}: read the run again")
    return arr


def load_copy(folder: Path, pass_at_least: Optional[int], store: ScoreStore,
              index_of: Callable[..., CaseIndex]) -> Optional[RunColumns]:
    """The folder's columns from its copy, or None when there is none or it is not of the files as
    they are now (or of another ``pass_at_least``, or unreadable). ``index_of(ids, tags, answerable,
    places, golden, described)``: the `CaseIndex` over the folder's ``cases.jsonl``."""
    path = folder / COPY_NAME
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as got:
            meta = json.loads(bytes(got["meta"]).decode("utf-8"))
            if meta.get("version") != VERSION or meta.get("files") != file_keys(folder) \
                    or meta.get("pass_at_least") != pass_at_least:
                return None
            n = int(meta["cases"])
            described = int(meta["described"])
            ends = got["id_ends"].astype(np.int64)
            blob = got["ids"].tobytes()
            if len(ends) != n or (n and (int(ends[-1]) != len(blob)
                                         or (np.diff(ends, prepend=0) <= 0).any())):
                return None
            blob.decode("utf-8")  # raises on bytes that are not text
            ids = CaseIds(blob, ends)
            table = [tuple(t) for t in meta["tag_table"]]
            tags = [table[c] for c in got["tags"].tolist()]
            golden = got["golden"]
            if golden.shape != (n, 16) or not got["has_golden"][:described].all():
                return None
            index = index_of(ids, tags, got["answerable"].astype(bool), got["places"].astype(np.int64),
                             golden[:described], described)
            columns: dict[tuple[str, str], Column] = {}
            for k, (backend, metric, extras) in enumerate(meta["columns"]):
                col = Column(backend, metric, 0, store)
                for name in ("value", "status"):
                    arr = got[f"c{k}_{name}"]
                    if len(arr) != n:
                        return None
                    setattr(col, name, arr)
                for name in ("places", *extras):  # read when first asked for (most readers do not)
                    got.zip.getinfo(f"c{k}_{name}.npy")  # (there: a KeyError where not)
                    col.leave_unread(name, partial(_member, path, f"c{k}_{name}", n, meta["files"]))
                columns[(backend, metric)] = col
    except (OSError, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, zipfile.BadZipFile,
            EOFError):
        return None
    if len(ids) != n or len(tags) != n:
        return None
    return RunColumns(index, columns, repeats=1, dropped=int(meta["dropped"]))


class _Cases:
    """The cases of one batch of a run being written, to a `ColumnsBuilder`: how many (every one
    described)."""

    def __init__(self, n: int):
        self.described = n

    def __len__(self) -> int:
        return self.described


class CopyMaker:
    """The copy of a run's columns made as the run writes its folder, so that no reader parses its
    files first; its memory holds one batch. Each batch's part of the case index as the batch begins
    (`start_batch`), each score or block of scores with the byte offset its line was written at, in
    a `ColumnsBuilder` of the batch's cases; as the next batch begins, its arrays go to a scratch
    file without a name (gone with the process), and `save`, once the run is complete, writes the
    copy from them a part at a time, each column's slots before its first score at their defaults.

    Made only for a session that writes the whole run (not resumed or updated, without repeats); a
    score of a case not in the batch drops the copy (the first reader reads the files)."""

    def __init__(self, folder: Path, n_cases: int):
        import tempfile

        self.folder, self.n = folder, n_cases
        self.broken = False
        self._scratch = tempfile.TemporaryFile(dir=folder)
        self._parts: dict[str, list[tuple[int, int, int]]] = {}  # member -> (first row, offset, bytes)
        self._written = 0
        self._tags: dict[tuple[str, ...], int] = {}
        self._id_bytes = 0
        self._start, self._size = 0, 0  # the batch's first case, and its cases
        self._places: dict[str, int] = {}  # the batch's case ids -> their place in the batch
        self._builder: Any = None
        #: the columns, with the per-score arrays any of their scores set
        self._columns: dict[tuple[str, str], set[str]] = {}

    def _put(self, name: str, first: int, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr)
        self._scratch.write(data.data)
        self._parts.setdefault(name, []).append((first, self._written, data.nbytes))
        self._written += data.nbytes

    def start_batch(self, batch) -> None:
        self._end_batch()
        ids, tags, answerable, golden = index_part(batch)
        first = self._start
        self._put("ids", self._id_bytes, np.frombuffer(ids.blob, np.uint8))
        self._put("id_ends", first, ids.ends + self._id_bytes)
        self._id_bytes += len(ids.blob)
        self._put("tags", first, np.fromiter((self._tags.setdefault(t, len(self._tags)) for t in tags),
                                             np.int32, len(tags)))
        self._put("answerable", first, answerable)
        self._put("golden", first, golden)
        names = batch.ids
        self._places = dict(zip(names, range(len(names))))
        self._builder = ColumnsBuilder(_Cases(len(names)), None)  # (its scores are never read back)
        self._size = len(names)

    def _end_batch(self) -> None:
        """The batch's columns to the scratch file."""
        if self._builder is None:
            return
        self._builder.flush()
        for key, col in self._builder.columns.items():
            made = self._columns.setdefault(key, set())
            for name in ("value", "status", "places", *EXTRA_FIELDS):
                arr = getattr(col, name)
                if arr is not None:
                    self._put(f"{key!r}:{name}", self._start, arr[:self._size])
                    made.add(name)
        self._start += self._size
        self._builder = None

    def _at(self, case_ids) -> Optional[list[int]]:
        try:
            return [self._places[c] for c in case_ids]
        except KeyError:
            self.broken = True
            return None

    def block(self, block, at: int, data: bytes) -> None:
        """A `ScoreBlock` written as ``data`` (its lines) at byte offset ``at`` of ``scores.jsonl``."""
        if self.broken or (where := self._at(block.case_ids)) is None:
            return
        key = (block.backend, block.metric)
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
        places = np.empty(len(ends), np.int64)
        places[:1] = at
        places[1:] = ends[:-1] + 1 + at
        values = np.array([np.nan if v is None else v for v in block._values()], np.float64)
        status = np.where(np.isnan(values), UNDEFINED, SCORED).astype(np.int8)
        extras = {"seconds": float(block.seconds)} if block.seconds else {}
        self._builder.add_block(key, np.array(where, np.int64), values, status, places, extras)

    def score(self, score, at: int) -> None:
        """A `Score` written at byte offset ``at`` of ``scores.jsonl``."""
        if self.broken or (where := self._at([score.case_id])) is None:
            return
        self._builder.add_score(score, at, 0, where[0])

    def _rows(self, name: str, n: int, dtype: Any, fill: Any, width: int = 1) -> Iterator[np.ndarray]:
        """Member ``name``'s rows (of ``dtype``, as written) from the scratch file, a part at a time,
        ``fill`` where it has none."""
        fd, row = self._scratch.fileno(), 0
        for first, offset, size in [*self._parts.get(name, ()), (n, 0, 0)]:
            while row < first:
                k = min(first - row, 1 << 16)
                yield np.full((k, width) if width > 1 else k, fill, dtype)
                row += k
            if size:
                part = np.frombuffer(os.pread(fd, size, offset), dtype)
                part = part.reshape(-1, width) if width > 1 else part
                yield part
                row += len(part)

    def close(self) -> None:
        """Drop what was gathered (a run that did not complete)."""
        self._scratch.close()

    def save(self, pass_at_least: Optional[int]) -> bool:
        """Write the copy of the folder as it is now (its files as this session wrote them); whether
        it was written. The scratch file is closed either way."""
        try:
            self._end_batch()
            self._scratch.flush()
            n = self.n
            if self.broken or self._start != n:
                return False
            keys = file_keys(self.folder)
            members: dict[str, tuple[Any, tuple, Iterable]] = {
                "ids": (np.uint8, (self._id_bytes,), self._rows("ids", self._id_bytes, np.uint8, 0)),
                "id_ends": (np.int64, (n,), self._rows("id_ends", n, np.int64, 0)),
                "tags": (np.int32, (n,), self._rows("tags", n, np.int32, 0)),
                "answerable": (np.bool_, (n,), self._rows("answerable", n, np.bool_, True)),
                "places": (np.int64, (n,), _line_starts(self.folder / "cases.jsonl")),
                "golden": (np.uint8, (n, 16), self._rows("golden", n, np.uint8, 0, 16)),
                "has_golden": (np.bool_, (n,), (np.ones(n, bool),)),
            }
            described = []
            defaults = {"value": (np.float64, np.nan), "status": (np.int8, 0), "places": (np.int64, -1),
                        **EXTRA_ARRAYS}
            for k, (key, made) in enumerate(sorted(self._columns.items())):  # as `RunColumns` has them
                extras = [name for name in EXTRA_ARRAYS if name in made]
                described.append([key[0], key[1], extras])
                for name in ("value", "status", "places", *extras):
                    dtype, fill = defaults[name]
                    members[f"c{k}_{name}"] = (dtype, (n,), self._rows(f"{key!r}:{name}", n, dtype, fill))
            meta = {"version": VERSION, "files": keys, "pass_at_least": pass_at_least, "cases": n,
                    "described": n, "dropped": 0, "tag_table": [list(t) for t in self._tags],
                    "columns": described}
            return _write_copy(self.folder, keys, meta, members)
        finally:
            self._scratch.close()


def _line_starts(path: Path, block: int = 1 << 22) -> Iterator[np.ndarray]:
    """The byte offset of each line of ``path``, a block of the file at a time; `OSError` for a last
    line without a line break."""
    at, pending = 0, np.zeros(1, np.int64)  # the start of a line not yet known to hold anything
    with open(path, "rb") as f:
        while data := f.read(block):
            ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10).astype(np.int64) + (at + 1)
            if len(ends):
                yield pending
                yield ends[:-1]
                pending = ends[-1:]
            at += len(data)
    if pending[0] != at:
        raise OSError(f"{path}: its last line has no line break")
