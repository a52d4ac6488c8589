"""Rows made as they are read: every case of a large run, listed without holding them.

An output that lists every case (a diff's cases that got worse, the cases behind a gate's rule, the
flips of a calibration, a report's cases) would hold a dict per case; at a million cases that is
more than memory. `Rows` is a list whose rows are made when read, a block at a time, from what the
analysis keeps (the cases' places in NumPy arrays): its length, slices and iteration behave as a
list's, and `ragbridge.commands.output.print_json` and `ragbridge.report.text.jsonable` write it
row by row. Anything that needs a real list (pandas) gets ``list(rows)``.
"""

from __future__ import annotations

import json
import pickle
import tempfile
from array import array
from typing import Any, Callable, Iterator, Optional

from ..json_text import plain_json, plain_json_utf8

__all__ = ["Rows", "Spool", "BLOCK", "plain_json"]

#: rows made at a time
BLOCK = 2000


class Rows(list):
    """``n`` rows, row ``i`` being ``make(i, i + 1)[0]``; ``make(start, stop)`` makes a block. ``plain``:
    the rows are JSON-ready as made (dicts of plain values: `jsonable` passes them as they are)."""

    def __init__(self, n: int, make: Callable[[int, int], list], block: int = BLOCK, plain: bool = False):
        super().__init__()
        self._n, self._make, self._block, self.plain = n, make, block, plain

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, self._n, self._block):
            yield from self._make(start, min(self._n, start + self._block))

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return list(self)[i]
            return self._make(start, stop) if stop > start else []
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("row index out of range")
        return self._make(i, i + 1)[0]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, list) and len(self) == len(other)
                and all(a == b for a, b in zip(self, other)))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self._n} rows)"

    def mapped(self, f: Callable[[Any], Any]) -> "Rows":
        """These rows, each passed through ``f`` as it is made."""
        return Rows(self._n, lambda start, stop: [f(r) for r in self._make(start, stop)], self._block)

    def head(self, k: int) -> list:
        return self[:k]


class Spool:
    """Records kept on disk in order (a nameless scratch file that goes with the object), added one at
    a time and read back as `Rows`: results made one by one that are too many to hold (a diagnosis
    of every failing case of a large run).

    With ``plain`` (a record as JSON values) and ``back`` (the record again from them), a record whose
    ``plain`` holds only plain JSON values is kept as their JSON text (`plain_json`), which reads back
    to the same values, and `texts` gives that text as it is (what writes the records as JSON needs
    nothing else); any other record is pickled."""

    def __init__(self, plain: Optional[Callable[[Any], Any]] = None,
                 back: Optional[Callable[[Any], Any]] = None) -> None:
        self._file = tempfile.TemporaryFile()
        self._plain, self._back = plain, back
        self._at = array("q")  # where each record starts
        self._json = bytearray()  # whether each is JSON text (1) or a pickle (0)
        self._end = 0  # where the next one goes
        self._read = False  # the file was read since the last record was added: seek its end first

    def __len__(self) -> int:
        return len(self._at)

    def add(self, record: Any) -> None:
        data = None
        if self._plain is not None:
            try:
                data = plain_json_utf8(self._plain(record))
            except (TypeError, ValueError):  # not plain JSON values (or half a surrogate pair)
                pass
        self._json.append(data is not None)
        if data is None:
            data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        if self._read:
            self._file.seek(self._end)
            self._read = False
        self._at.append(self._end)
        self._file.write(data)
        self._end += len(data)

    def rows(self) -> Rows:
        """The records, in the order they were added."""
        return self._kept(lambda text: self._back(json.loads(text)))

    def texts(self) -> Rows:
        """Per record, in order: its JSON text (`plain_json` at level 0) where it is kept as one, else
        the record."""
        return self._kept(lambda text: text)

    def _kept(self, from_text: Callable[[str], Any]) -> Rows:
        at = array("q", self._at)
        at.append(self._end)
        kinds = bytes(self._json)

        def make(start: int, stop: int) -> list:
            if stop <= start:
                return []
            self._read = True
            self._file.seek(at[start])
            data = memoryview(self._file.read(at[stop] - at[start]))
            base = at[start]
            return [from_text(str(data[at[k] - base:at[k + 1] - base], "utf-8")) if kinds[k]
                    else pickle.loads(data[at[k] - base:at[k + 1] - base]) for k in range(start, stop)]
        return Rows(len(at) - 1, make)
