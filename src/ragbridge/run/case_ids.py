"""A run's case ids as two arrays, and where each id is found among them.

A million ids as Python strings, with a dict from each to its place, take about 130 bytes an id
(the string, the dict's entry and the place as an int object). `CaseIds` holds them as their UTF-8
bytes one after another and the offset where each ends (about 8 bytes an id besides its text), makes
each id as a string when it is asked for, and finds places with a table of the ids' hashes, sorted
(16 bytes an id, made at the first lookup): a lookup is a binary search of a hash, checked against
the id itself (two ids of the same hash are told apart by their text).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Sequence, Union

import numpy as np

__all__ = ["CaseIds"]

#: ids made as strings at a time where every id is walked (memory holds a block of them)
_BLOCK = 65536
#: the hash a lookup sorts and searches by (any function of the id: two ids of one hash are told apart)
_hash = hash


class CaseIds:
    """Ids in order (unique): ``blob``, their UTF-8 bytes one after another; ``ends``, where each
    ends in it. A sequence of strings: ``ids[i]``, ``ids[a:b]`` (a list), ``len``, iteration."""

    __slots__ = ("blob", "ends", "_ascii", "_text", "_hashes", "_order")

    def __init__(self, blob: bytes, ends: np.ndarray):
        self.blob = blob
        self.ends = np.asarray(ends, np.int64)
        self._ascii = blob.isascii()
        self._text = blob.decode("ascii") if self._ascii else None
        self._hashes: Optional[np.ndarray] = None  # the ids' hashes, sorted
        self._order: Optional[np.ndarray] = None  # the place of each of them

    @classmethod
    def of(cls, ids: Iterable[str]) -> "CaseIds":
        encoded = [cid.encode("utf-8") for cid in ids]
        ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), dtype=np.int64)
        return cls(b"".join(encoded), ends)

    def __len__(self) -> int:
        return len(self.ends)

    def _one(self, i: int) -> str:
        a = int(self.ends[i - 1]) if i else 0
        b = int(self.ends[i])
        return self._text[a:b] if self._text is not None else self.blob[a:b].decode("utf-8")

    def __getitem__(self, i: Union[int, slice]) -> Union[str, list[str]]:
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        n = len(self)
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("case index out of range")
        return self._one(i)

    def take(self, indices: Iterable[int]) -> list[str]:
        """The ids at ``indices``, as strings."""
        return [self._one(i) for i in map(int, indices)]

    def _span(self, start: int, stop: int) -> list[str]:
        ends = self.ends[start:stop].tolist()
        starts = [int(self.ends[start - 1]) if start else 0, *ends[:-1]]
        if self._text is not None:
            text = self._text
            return [text[a:b] for a, b in zip(starts, ends)]
        blob = self.blob
        return [blob[a:b].decode("utf-8") for a, b in zip(starts, ends)]

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _BLOCK):
            yield from self._span(start, min(start + _BLOCK, len(self)))

    def tolist(self) -> list[str]:
        return self._span(0, len(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CaseIds):
            return self.blob == other.blob and np.array_equal(self.ends, other.ends)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"CaseIds({len(self)} ids)"

    def extended(self, ids: Sequence[str]) -> "CaseIds":
        """These ids and then ``ids``."""
        more = CaseIds.of(ids)
        last = int(self.ends[-1]) if len(self) else 0
        return CaseIds(self.blob + more.blob, np.concatenate([self.ends, more.ends + last]))

    @staticmethod
    def joined(parts: Sequence["CaseIds"]) -> "CaseIds":
        """The ids of ``parts``, one after another."""
        shift = np.cumsum([0] + [len(p.blob) for p in parts[:-1]], dtype=np.int64)
        ends = [p.ends + d for p, d in zip(parts, shift.tolist())]
        return CaseIds(b"".join(p.blob for p in parts),
                       np.concatenate(ends) if ends else np.zeros(0, np.int64))

    def taken(self, indices: np.ndarray) -> "CaseIds":
        """The ids at ``indices`` (a permutation or a selection), as `CaseIds`."""
        indices = np.asarray(indices, np.int64)
        starts = np.concatenate([[0], self.ends[:-1]]) if len(self) else self.ends
        a, b = starts[indices], self.ends[indices]
        if len(indices) and np.array_equal(indices, np.arange(indices[0], indices[0] + len(indices))):
            blob = self.blob[int(a[0]):int(b[-1])] if len(indices) else b""
            return CaseIds(blob, b - a[0])
        blob = b"".join(self.blob[x:y] for x, y in zip(a.tolist(), b.tolist()))
        return CaseIds(blob, np.cumsum(b - a, dtype=np.int64))

    # ----------------------------------------------------------------------------------------
    # Places

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        if self._hashes is None:
            hashes = np.empty(len(self), np.int64)
            for start in range(0, len(self), _BLOCK):
                part = self._span(start, min(start + _BLOCK, len(self)))
                hashes[start:start + len(part)] = np.fromiter(map(_hash, part), np.int64, len(part))
            order = np.argsort(hashes, kind="stable")
            self._hashes, self._order = hashes[order], order
        return self._hashes, self._order

    def find(self, ids: Union[Sequence[str], "CaseIds"]) -> np.ndarray:
        """Each of ``ids``'s place among these ids, -1 where it is not one of them."""
        if isinstance(ids, CaseIds):
            out = np.empty(len(ids), np.int64)
            for start in range(0, len(ids), _BLOCK):
                part = ids._span(start, min(start + _BLOCK, len(ids)))
                out[start:start + len(part)] = self.find(part)
            return out
        m = len(ids)
        out = np.full(m, -1, np.int64)
        if not m or not len(self):
            return out
        hashes, order = self._table()
        wanted = np.fromiter(map(_hash, ids), np.int64, m)
        at = np.searchsorted(hashes, wanted)
        at_c = np.minimum(at, len(hashes) - 1)
        hit = np.flatnonzero(hashes[at_c] == wanted)
        got = order[at_c[hit]]
        stops = self.ends[got]
        starts = np.where(got > 0, self.ends[got - 1], 0)
        text = self._text
        if text is not None:
            same = [text[a:b] == ids[k] for k, a, b in zip(hit.tolist(), starts.tolist(), stops.tolist())]
        else:
            blob = self.blob
            same = [blob[a:b].decode("utf-8") == ids[k]
                    for k, a, b in zip(hit.tolist(), starts.tolist(), stops.tolist())]
        out[hit] = np.where(same, got, -1)
        for k in hit[~np.asarray(same, bool)].tolist():  # another id of the same hash first
            p = int(at[k]) + 1
            while p < len(hashes) and hashes[p] == wanted[k]:
                if self._one(int(order[p])) == ids[k]:
                    out[k] = int(order[p])
                    break
                p += 1
        return out

    def get(self, cid: str, default: Optional[int] = None) -> Optional[int]:
        """The place of ``cid`` among these ids (``default`` when it is not one of them)."""
        if type(cid) is not str or not len(self):
            return default
        hashes, order = self._table()
        h = _hash(cid)
        p = int(hashes.searchsorted(h))
        while p < len(hashes) and int(hashes[p]) == h:
            if self._one(int(order[p])) == cid:
                return int(order[p])
            p += 1
        return default

    def __contains__(self, cid: object) -> bool:
        return type(cid) is str and self.get(cid) is not None

    def rank(self) -> np.ndarray:
        """Each id's place among the ids sorted as Python sorts strings (by code point: the order of
        their UTF-8 bytes)."""
        n = len(self)
        if not n:
            return np.zeros(0, np.int64)
        width = int(np.diff(self.ends, prepend=0).max())
        if n * width > 8 * len(self.blob) + (64 << 20):  # a few very long ids: sort the strings
            order = np.array(sorted(range(n), key=self.tolist().__getitem__), np.int64)
        else:
            fixed = np.empty(n, f"S{width}")  # compared as bytes, as Python compares the strings
            for start in range(0, n, _BLOCK):
                part = self._span(start, min(start + _BLOCK, n))
                fixed[start:start + len(part)] = [cid.encode("utf-8") for cid in part]
            order = np.argsort(fixed, kind="stable")
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        return rank
