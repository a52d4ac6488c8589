"""A compact copy of a run folder's columns (``columns.npz``): what every later reader reads instead of
parsing ``cases.jsonl`` and ``scores.jsonl`` again.

Reading a run's columns (`ragbridge.run.recorded.read_columns`) parses and checks every line of both
files: about as much work as the run's own reading of its golden set, and every command that reads
the run (gate, diff, compare, report...) paid it again, twice for the commands that read two runs.
The first reading of a finished run's folder writes what it found beside them, as NumPy arrays in
one uncompressed ``.npz`` (no pickles): the case index (ids, tags, ``answerable``, each case's line
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
from typing import Callable, Optional

import numpy as np

from .case_ids import CaseIds
from .columns import EXTRA_FIELDS, CaseIndex, Column, RunColumns, ScoreStore

__all__ = ["COPY_NAME", "file_keys", "load_copy", "save_copy"]

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
    from ..formats.files import DatasetError, atomic_path

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
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), np.uint8)
    try:
        with atomic_path(folder / COPY_NAME) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
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

