"""A run's scores as columns: what every analysis and report of a run reads.

A run of a million cases holds millions of scores; as `Score` objects (and its cases as `Case`
objects, each with its chunks) it would not fit in memory. `RunColumns` holds instead:

- `CaseIndex`: the cases in run order (``cases.jsonl``'s order, then the ids only scores name), each
  one's id, tags, ``answerable`` and a digest of its golden fields (what diffs compare), and where its
  line is, so that its question or the whole case is read back when an output shows it;
- a `Column` per (backend, metric), in (backend, metric) order: one slot per case of the index, with
  its value (NaN unless scored), its status (`MISSING`, `SCORED`, `UNDEFINED`, `ERROR`, `NOT_RUN`),
  where its score is (its line in ``scores.jsonl``, or its place in a run's list in memory), its
  claims (`ragbridge.run.summary.claim_counts`), RAGChecker's figure, and the judge's calls, tokens,
  seconds and cost (arrays made only for a column that has them); a column of a run with repeats
  also holds each repeat's value and status (its slots collapsed as `ragbridge.run.repeats` does).

That is a few bytes a score (8 MB a column of a million cases): the analyses compute their figures
with NumPy over whole columns, and read the `Score` and `Case` objects of the few cases an output
names (`Column.scores`, `CaseIndex.cases`), or stream them batch by batch where an output lists every
case (`RunColumns.case_batches`). A run folder's columns are read by `ragbridge.run.recorded` (with
its checks); a run in memory (the Python API's) is put in columns by `RunColumns.of`. Both fill
them through one `ColumnsBuilder` (the last score per case, metric, backend and repeat wins; a case
with repeats is collapsed as `ragbridge.run.repeats` collapses it).

Size: the case index, the columns, the stores their scores are read back from and the builder that
fills them are one layout (what each slot means, what -1 and NaN stand for); kept in one module so
that the side that writes the slots and the sides that read them cannot drift apart.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from ..formats.plain_records import case_record, record_line
from ..schema import Case, Score
from ..verdicts import passes
from .case_ids import CaseIds

__all__ = ["MISSING", "SCORED", "UNDEFINED", "ERROR", "NOT_RUN", "STATUS_NAMES", "status_code",
           "CaseIndex", "Column", "RunColumns", "golden_digest", "index_part", "GOLDEN_FIELDS",
           "EXTRA_ARRAYS"]

MISSING, SCORED, UNDEFINED, ERROR, NOT_RUN = 0, 1, 2, 3, 4
#: a status code's name, as `Score.status` says it (``missing``: no score line at all)
STATUS_NAMES = ("missing", "scored", "undefined", "error", "not_run")
_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}

#: Case fields that define the test itself (as opposed to the system's output: answer, contexts)
GOLDEN_FIELDS = (
    "question", "relevant", "relevant_spans", "reference", "reference_contexts", "must_contain",
    "must_not_contain", "answerable",
)


def status_code(status: str) -> int:
    return _CODES[status]


#: the golden fields' defaults (a canonical record leaves a field at its default out)
_GOLDEN_DEFAULTS = {"relevant": {}, "relevant_spans": [], "reference": None, "reference_contexts": [],
                    "must_contain": [], "must_not_contain": [], "answerable": True}


_golden_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def golden_digest(record: dict[str, Any]) -> bytes:
    """A digest of a case's golden fields (`GOLDEN_FIELDS`) from its canonical record (or any record
    of JSON values): two cases' golden fields are equal exactly when their digests are."""
    golden = {}
    for k in GOLDEN_FIELDS:
        if k in record:
            v = record[k]
            if k not in _GOLDEN_DEFAULTS or v != _GOLDEN_DEFAULTS[k]:
                golden[k] = v
    return hashlib.blake2b(_golden_json(golden).encode(), digest_size=16).digest()


def index_part(batch: Any) -> tuple[CaseIds, list[tuple[str, ...]], np.ndarray, np.ndarray]:
    """A batch of cases' part of a `CaseIndex`: their ids, tags, ``answerable`` and golden fields'
    digests; what a reading of ``cases.jsonl`` and a run writing it (`ragbridge.run.column_copy`)
    both take from each batch."""
    heads = [batch.head(k) for k in range(len(batch))]
    return (CaseIds.of(batch.ids), [tuple(head.get("tags", ())) for head in heads],
            np.fromiter((head.get("answerable", True) for head in heads), bool, len(heads)),
            digests(map(golden_digest, heads)))


# --------------------------------------------------------------------------------------------
# The cases


class CaseIndex:
    """The cases of a run in run order (see the module docstring). ``ids``: each case's id (a
    `ragbridge.run.case_ids.CaseIds`, or the ids as strings); ``golden``: the golden fields' digest of
    each case the run's cases describe (the first ``described``), a row of 16 bytes each; ``read``:
    how to read cases back, given their places (``places``: each case's line offset in
    ``cases.jsonl``, or its place in the run's list of cases in memory; -1 for a case only scores
    name). Places among the cases are found with `find` (no dict of the ids)."""

    def __init__(self, ids: Union[Sequence[str], CaseIds], tags: list[tuple[str, ...]],
                 answerable: np.ndarray, places: np.ndarray, golden: np.ndarray,
                 read: Callable[[Sequence[int]], list[Case]], described: Optional[int] = None,
                 contents: Optional[Callable[[], np.ndarray]] = None,
                 heads: Optional[Callable[[Sequence[int]], list[tuple[dict[str, Any], list[str]]]]] = None,
                 views: Optional[Callable[[Sequence[int]], list[Any]]] = None,
                 questions: Optional[Callable[[Sequence[int]], list[str]]] = None):
        self.ids = ids if isinstance(ids, CaseIds) else CaseIds.of(ids)
        self.tags = tags
        self.answerable = answerable
        self.places = places
        #: how many cases the run's cases describe (the rest only its scores name)
        self.described = len(self.ids) if described is None else described
        self.golden = np.asarray(golden, np.uint8).reshape(-1, 16)[:self.described]
        self._read = read
        self._masks: dict[str, np.ndarray] = {}
        self._contents = contents
        self._heads = heads
        self._views = views
        self._questions = questions
        self._rank: Optional[np.ndarray] = None

    def find(self, ids: Union[Sequence[str], CaseIds]) -> np.ndarray:
        """Each of ``ids``'s place among the cases (-1: not one of them)."""
        return self.ids.find(ids)

    def place(self, cid: str) -> Optional[int]:
        """The place of case ``cid`` (None: not one of the cases)."""
        return self.ids.get(cid)

    def golden_differs(self, at: np.ndarray, other: "CaseIndex", other_at: np.ndarray) -> np.ndarray:
        """Whether the golden fields of the cases ``at`` differ from those of ``other``'s cases
        ``other_at`` (pairs of described cases)."""
        return (self.golden[at] != other.golden[other_at]).any(axis=1)

    def views(self, indices: Sequence[int]) -> list[Any]:
        """The cases ``indices`` to read (None for a case only scores name): each a
        `ragbridge.formats.batches.CaseView` of its record (no `Case` made: what reads many cases
        back reads), or the `Case` itself where the run holds them."""
        if self._views is None:
            return self.cases(indices)
        indices = [int(i) for i in indices]
        known = [i for i in indices if self.places[i] >= 0]
        got = dict(zip(known, self._views([int(self.places[i]) for i in known]))) if known else {}
        return [got.get(i) for i in indices]

    def heads(self, indices: Sequence[int]) -> list[Optional[tuple[dict[str, Any], list[str]]]]:
        """Per case of ``indices``: its canonical record without its chunks (its metadata, labels,
        texts), and its chunks' ids; read back without making a `Case` (None for a case only scores
        name)."""
        indices = [int(i) for i in indices]
        known = [i for i in indices if self.places[i] >= 0]
        if self._heads is None:
            got = {i: (case_record(c), [ch.id for ch in c.contexts])
                   for i, c in zip(known, self.cases(known))}
        else:
            got = dict(zip(known, self._heads([int(self.places[i]) for i in known]))) if known else {}
        return [got.get(i) for i in indices]

    def contents(self) -> np.ndarray:
        """A digest of each described case's whole content (its canonical line), in order, a row of 16
        bytes each: two cases are the same exactly when their digests are."""
        if callable(self._contents):
            self._contents = self._contents()
        return np.zeros((0, 16), np.uint8) if self._contents is None else self._contents

    def id_rank(self) -> np.ndarray:
        """Each case's place among the ids sorted (as Python sorts strings), for sorting by id."""
        if self._rank is None:
            self._rank = self.ids.rank()
        return self._rank

    @classmethod
    def joined(cls, indexes: Sequence["CaseIndex"], held: Sequence[tuple[int, int]],
               only_scored: Sequence[str]) -> "CaseIndex":
        """The cases of several runs' indexes as one: ``held`` gives, per case, the index and the place
        in it of the run it is read from; ``only_scored``: ids that only scores name, after them."""
        runs = np.fromiter((k for k, _ in held), np.int64, len(held))
        at = np.fromiter((i for _, i in held), np.int64, len(held))
        parts, placed = [], []
        for k, index in enumerate(indexes):
            mine = np.flatnonzero(runs == k)
            if len(mine):
                parts.append(index.ids.taken(at[mine]))
                placed.append(mine)
        parts.append(CaseIds.of(only_scored))
        order = np.concatenate(placed) if placed else np.zeros(0, np.int64)
        ids = CaseIds.joined(parts)
        if not np.array_equal(order, np.arange(len(order))):
            back = np.empty(len(order), np.int64)
            back[order] = np.arange(len(order))
            ids = ids.taken(np.r_[back, np.arange(len(order), len(ids))])
        tags = [indexes[k].tags[i] for k, i in held] + [()] * len(only_scored)
        answerable = np.array([bool(indexes[k].answerable[i]) for k, i in held] + [True] * len(only_scored),
                              bool)
        golden = np.zeros((len(held), 16), np.uint8)
        for k, index in enumerate(indexes):
            mine = runs == k
            golden[mine] = index.golden[at[mine]]

        def contents() -> np.ndarray:
            out = np.zeros((len(held), 16), np.uint8)
            for k, index in enumerate(indexes):
                mine = runs == k
                if mine.any():
                    out[mine] = index.contents()[at[mine]]
            return out
        def gathered(how: str) -> Callable[[Sequence[int]], list]:
            """Read cases of the joined index from the runs that hold them (``how``: `cases`, `heads`
            or `views`)."""
            def get(places: Sequence[int]) -> list:
                out: dict[int, Any] = {}
                wanted = np.asarray(places, np.int64)
                for k, index in enumerate(indexes):
                    mine = wanted[runs[wanted] == k]
                    if len(mine):
                        out.update(zip(mine.tolist(), getattr(index, how)(at[mine].tolist())))
                return [out[p] for p in places]
            return get

        read, heads, views = gathered("cases"), gathered("heads"), gathered("views")
        places = np.r_[np.arange(len(held), dtype=np.int64), np.full(len(only_scored), -1, np.int64)]
        return cls(ids, tags, answerable, places, golden, read, described=len(held), contents=contents,
                   heads=heads, views=views)

    def __len__(self) -> int:
        return len(self.ids)

    def extend(self, ids: Sequence[str]) -> None:
        """Add cases that only scores name (no tags, answerable, nothing to read back)."""
        self.ids = self.ids.extended(ids)
        self.tags.extend([()] * len(ids))
        k = len(ids)
        self.answerable = np.concatenate([self.answerable, np.ones(k, bool)])
        self.places = np.concatenate([self.places, np.full(k, -1, np.int64)])
        self._masks.clear()
        self._rank = None

    def all_tags(self) -> list[str]:
        """Every tag of the cases, sorted."""
        return sorted({t for ts in set(self.tags) for t in ts})

    def tag_mask(self, tag: str) -> np.ndarray:
        """Which cases carry ``tag``."""
        mask = self._masks.get(tag)
        if mask is None:
            having = {ts for ts in set(self.tags) if tag in ts}
            mask = self._masks[tag] = np.fromiter((ts in having for ts in self.tags), bool, len(self.tags))
        return mask

    def slice_mask(self, tags: Iterable[str]) -> np.ndarray:
        """Which cases carry every tag of ``tags`` (all cases for none)."""
        mask = np.ones(len(self), bool)
        for t in tags:
            mask &= self.tag_mask(t)
        return mask

    def cases(self, indices: Sequence[int]) -> list[Optional[Case]]:
        """The `Case` objects of cases ``indices`` (None for a case only scores name), read back."""
        indices = [int(i) for i in indices]
        known = [i for i in indices if self.places[i] >= 0]
        got = dict(zip(known, self._read([int(self.places[i]) for i in known]))) if known else {}
        return [got.get(i) for i in indices]

    def questions(self, indices: Sequence[int]) -> list[str]:
        """The questions of cases ``indices`` ("" for a case only scores name)."""
        if self._questions is None:
            return [c.question if c is not None else "" for c in self.views(indices)]
        indices = [int(i) for i in indices]
        known = [i for i in indices if self.places[i] >= 0]
        got = dict(zip(known, self._questions([int(self.places[i]) for i in known]))) if known else {}
        return [got.get(i, "") for i in indices]

    def question_of(self) -> Callable[[int], str]:
        """A function from a case's index to its question, reading each once (for the few cases an
        output names)."""
        seen: dict[int, str] = {}

        def question(i: int) -> str:
            if i not in seen:
                seen[i] = self.questions([i])[0]
            return seen[i]
        return question

    def batches(self, indices: Optional[Sequence[int]] = None, size: int = 2000, views: bool = False
                ) -> Iterator[list[tuple[int, Optional[Case]]]]:
        """``(index, Case)`` of every case (or of ``indices``), in run order, ``size`` at a time (with
        ``views``: each a `views` item, to read)."""
        order = range(len(self)) if indices is None else sorted(int(i) for i in indices)
        order = list(order)
        read = self.views if views else self.cases
        for start in range(0, len(order), size):
            part = order[start:start + size]
            yield list(zip(part, read(part)))


# --------------------------------------------------------------------------------------------
# The scores of one (backend, metric)


class Repeats:
    """The repeats of one column: each case's value and status per repeat (``values`` NaN where the
    repeat is not scored; ``status`` `MISSING` where there is none), where each is, how many each
    case has (``n``: its highest repeat + 1) and the pass rule's ``pass_at_least`` per case."""

    __slots__ = ("values", "status", "places", "n", "collapsed", "pass_at_least")

    def __init__(self, size: int, width: int):
        self.values = np.full((size, width), np.nan)
        self.status = np.zeros((size, width), np.int8)
        self.places = np.full((size, width), -1, np.int64)
        self.n = np.zeros(size, np.int16)
        self.collapsed = np.zeros(size, bool)
        self.pass_at_least = np.zeros(size, np.int16)

    def widen(self, width: int) -> None:
        size, have = self.values.shape
        if width <= have:
            return
        for name, fill in (("values", np.nan), ("status", 0), ("places", -1)):
            old = getattr(self, name)
            new = np.full((size, width), fill, old.dtype)
            new[:, :have] = old
            setattr(self, name, new)

    def grow(self, size: int) -> None:
        have, width = self.values.shape
        if size <= have:
            return
        for name, fill in (("values", np.nan), ("status", 0), ("places", -1)):
            old = getattr(self, name)
            new = np.full((size, width), fill, old.dtype)
            new[:have] = old
            setattr(self, name, new)
        for name in ("n", "collapsed", "pass_at_least"):
            old = getattr(self, name)
            new = np.zeros(size, old.dtype)
            new[:have] = old
            setattr(self, name, new)


#: the per-score arrays a column makes only when a score has something there (else all defaults)
EXTRA_ARRAYS = {"judge_calls": (np.int64, 0), "prompt_tokens": (np.int64, 0),
                "completion_tokens": (np.int64, 0),
                "seconds": (np.float64, 0.0), "cost": (np.float64, np.nan), "claims": (np.int32, -1),
                "unsupported": (np.int32, 0), "ragchecker": (np.float64, np.nan), "cached": (np.bool_, False)}
#: the names of those arrays (a `Column`'s attributes, None until written)
EXTRA_FIELDS = tuple(EXTRA_ARRAYS)


class Column:
    """The scores of one (backend, metric), a slot per case of the run's `CaseIndex`."""

    def __init__(self, backend: str, metric: str, size: int, store: "ScoreStore"):
        self.backend, self.metric = backend, metric
        self.value = np.full(size, np.nan)
        self.status = np.zeros(size, np.int8)
        self.places = np.full(size, -1, np.int64)
        self.repeats: Optional[Repeats] = None
        self._store = store
        for name in EXTRA_ARRAYS:
            setattr(self, name, None)

    def __repr__(self) -> str:
        return f"Column({self.backend}:{self.metric}, {int((self.status != MISSING).sum())} scores)"

    def __getattr__(self, name: str):
        # (only for an attribute not set: ``places`` or a per-score array a column copy left unread,
        # read when first asked for; most readers ask for the values and statuses alone)
        unread = self.__dict__.get("unread")
        if unread is None or name not in unread:
            raise AttributeError(name)
        value = unread.pop(name)()
        setattr(self, name, value)
        return value

    def leave_unread(self, name: str, read: Callable[[], Any]) -> None:
        """``places`` or a per-score array of `EXTRA_FIELDS` to be made by ``read()`` when first asked for."""
        self.__dict__.pop(name, None)
        self.__dict__.setdefault("unread", {})[name] = read

    def grow(self, size: int) -> None:
        """Room for ``size`` cases (cases only scores name, added as they are read)."""
        have = len(self.value)
        if size <= have:
            return
        for name, fill in (("value", np.nan), ("status", 0), ("places", -1),
                           *((n, f) for n, (_, f) in EXTRA_ARRAYS.items())):
            old = getattr(self, name)
            if old is None:
                continue
            new = np.full(size, fill, old.dtype)
            new[:have] = old
            setattr(self, name, new)
        if self.repeats is not None:
            self.repeats.grow(size)

    def extra(self, name: str) -> np.ndarray:
        """The per-score array ``name`` of `EXTRA_ARRAYS`, made (at its default) when first written."""
        got = getattr(self, name)
        if got is None:
            dtype, fill = EXTRA_ARRAYS[name]
            got = np.full(len(self.value), fill, dtype)
            setattr(self, name, got)
        return got

    def get(self, name: str) -> np.ndarray:
        """The per-score array ``name``: its default everywhere when no score set it."""
        got = getattr(self, name)
        if got is None:
            dtype, fill = EXTRA_ARRAYS[name]
            return np.full(len(self.value), fill, dtype)
        return got

    # what the analyses ask

    @property
    def scored(self) -> np.ndarray:
        return self.status == SCORED

    @property
    def present(self) -> np.ndarray:
        return self.status != MISSING

    @property
    def judged(self) -> bool:
        """Whether any score of the column made a judge call."""
        return self.judge_calls is not None and bool((self.judge_calls > 0).any())

    def counts(self, mask: Optional[np.ndarray] = None) -> dict[str, int]:
        """How many of the cases (of ``mask``) are scored, undefined, errored (or not run) and missing."""
        st = self.status if mask is None else self.status[mask]
        got = np.bincount(st, minlength=len(STATUS_NAMES))
        return {"scored": int(got[SCORED]), "undefined": int(got[UNDEFINED]),
                "errored": int(got[ERROR] + got[NOT_RUN]), "missing": int(got[MISSING])}

    def verdicts(self, threshold: float, op: str = ">=") -> np.ndarray:
        """Each case's verdict at ``threshold`` (`ragbridge.verdicts.verdict`): True or False where it
        is scored (a case with repeats: at least ``pass_at_least`` of them pass), False elsewhere (no
        verdict: ask `scored` which cases have one)."""
        with np.errstate(invalid="ignore"):
            passed = passes(self.value, threshold, op) & self.scored
            rep = self.repeats
            if rep is not None and rep.collapsed.any():
                hits = np.count_nonzero(passes(rep.values, threshold, op) & ~np.isnan(rep.values), axis=1)
                passed = np.where(rep.collapsed, (hits >= rep.pass_at_least) & self.scored, passed)
        return passed

    def repeat_values(self, mask: np.ndarray) -> list[float]:
        """The values of the cases of ``mask`` (scored ones), and every value a repeat of theirs took:
        where a threshold's verdicts can change."""
        rep = self.repeats
        if rep is None:
            return self.value[mask].tolist()
        got = rep.values[rep.collapsed & mask]
        return [*self.value[mask].tolist(), *got[~np.isnan(got)].tolist()]

    def scores(self, indices: Sequence[int]) -> list[Optional[Score]]:
        """The `Score` of cases ``indices`` (None where missing), read back: a case with repeats as
        its mean over them (`ragbridge.run.repeats.collapse_repeats`)."""
        at = np.asarray(indices, np.int64).reshape(-1)
        rep = self.repeats
        present = self.status[at] != MISSING
        plain = present & ~rep.collapsed[at] if rep is not None else present
        out: list[Optional[Score]] = [None] * len(at)
        where = np.flatnonzero(plain).tolist()
        for k, s in zip(where, self._store.scores(self.places[at[plain]].tolist())):
            out[k] = s
        if rep is not None:
            for k in np.flatnonzero(present & ~plain).tolist():
                out[k] = self._collapsed(int(at[k]))
        if self.backend is not None and any(s is not None and s.backend != self.backend for s in out):
            out = [self._named(s) for s in out]
        return out

    def _named(self, s: Optional[Score]) -> Optional[Score]:
        """``s`` under this column's backend name (runs joined side by side rename a backend)."""
        if s is not None and s.backend != self.backend:
            return s.model_copy(update={"backend": self.backend})
        return s

    def _collapsed(self, i: int) -> Score:
        from .repeats import collapse_repeats

        rep = self.repeats
        places = [int(p) for p in rep.places[i] if p >= 0]
        return collapse_repeats(self._store.scores(places), int(rep.pass_at_least[i]) or None)[0]

    def on(self, source: np.ndarray) -> "Column":
        """This column on another run's order of cases: slot j is this column's slot ``source[j]``
        (-1: missing). The scores are read from the same place."""
        out = Column(self.backend, self.metric, 0, self._store)
        has = source >= 0
        at = np.where(has, source, 0)

        def take(arr: np.ndarray, fill: Any) -> np.ndarray:
            got = arr[at] if len(arr) else np.full(len(source), fill, arr.dtype)
            got[~has] = fill
            return got

        out.value, out.status = take(self.value, np.nan), take(self.status, 0)
        out.places = take(self.places, -1)
        for name, (_, fill) in EXTRA_ARRAYS.items():
            got = getattr(self, name)
            if got is not None:
                setattr(out, name, take(got, fill))
        if self.repeats is not None:
            rep = out.repeats = Repeats(0, 1)
            mine = self.repeats
            for name, fill in (("values", np.nan), ("status", 0), ("places", -1), ("n", 0),
                               ("collapsed", False), ("pass_at_least", 0)):
                setattr(rep, name, take(getattr(mine, name), fill))
        return out

    def moved(self, source: np.ndarray, name: str, into: Optional["Column"], part: int,
              parts: int) -> "Column":
        """This column on another run's cases (runs joined side by side), named ``name``: slot j
        takes this column's slot ``source[j]`` (-1: none), where ``into`` (the joined column so far,
        or None) has no score yet. ``part`` of ``parts``: this column's run among the joined runs
        (where its scores are read from)."""
        size = len(source)
        if into is None:
            into = Column(self.backend, self.metric, size, MultiStore(parts))
            into.backend = name
            into.places[:] = -1
        into._store.parts[part] = self._store
        take = source >= 0
        take[take] &= self.status[source[take]] != MISSING
        take &= into.status == MISSING
        at = source[take]
        into.value[take] = self.value[at]
        into.status[take] = self.status[at]
        into.places[take] = self.places[at] * parts + part
        for extra in EXTRA_ARRAYS:
            got = getattr(self, extra)
            if got is not None:
                into.extra(extra)[take] = got[at]
        if self.repeats is not None:
            width = self.repeats.values.shape[1]
            if into.repeats is None:
                into.repeats = Repeats(size, width)
            rep, mine = into.repeats, self.repeats
            rep.widen(width)
            rep.values[take, :width] = mine.values[at]
            rep.status[take, :width] = mine.status[at]
            rep.places[take, :width] = np.where(mine.places[at] >= 0, mine.places[at] * parts + part, -1)
            for attr in ("n", "collapsed", "pass_at_least"):
                getattr(rep, attr)[take] = getattr(mine, attr)[at]
        return into

    def repeat_scores(self) -> list[Score]:
        """Every repeat of every score of the column, as recorded."""
        rep = self.repeats
        if rep is None:
            return [s for s in self.scores(np.flatnonzero(self.present)) if s is not None]
        out = []
        for i in np.flatnonzero(self.present):
            places = [int(p) for p in rep.places[i] if p >= 0] if rep.collapsed[i] else [int(self.places[i])]
            out += self._store.scores(places)
        return out


class ScoreStore:
    """Where a column's scores are: `scores` gives the `Score` objects at their places."""

    def scores(self, places: Sequence[int]) -> list[Score]:  # pragma: no cover - abstract
        raise NotImplementedError


class MultiStore(ScoreStore):
    """The scores of several runs' stores (runs joined side by side): place ``p`` is place
    ``p // parts`` of store ``p % parts``."""

    def __init__(self, parts: int):
        self.parts: list[Optional[ScoreStore]] = [None] * parts

    def scores(self, places: Sequence[int]) -> list[Score]:
        n = len(self.parts)
        by_part: dict[int, list[int]] = {}
        for p in places:
            by_part.setdefault(p % n, []).append(p)
        got: dict[int, Score] = {}
        for k, ps in by_part.items():
            got.update(zip(ps, self.parts[k].scores([p // n for p in ps])))
        return [got[p] for p in places]


class ListStore(ScoreStore):
    """Scores in memory: a place is an index into the list."""

    def __init__(self, scores: Sequence[Score]):
        self._scores = scores

    def scores(self, places: Sequence[int]) -> list[Score]:
        return [self._scores[p] for p in places]


# --------------------------------------------------------------------------------------------
# A run


class RunColumns:
    """A run's cases (`CaseIndex`) and its scores by (backend, metric) (`Column`, in (backend, metric)
    order); ``repeats``: the most repeats a score was taken (1 without ``--repeats``); ``dropped``: the
    last score line cut short by a killed run, dropped (1 or 0)."""

    def __init__(self, cases: CaseIndex, columns: dict[tuple[str, str], Column], repeats: int = 1,
                 dropped: int = 0):
        self.cases = cases
        self.columns = dict(sorted(columns.items()))
        self.repeats = repeats
        self.dropped = dropped

    def __repr__(self) -> str:
        return f"RunColumns({len(self.cases)} cases, {len(self.columns)} columns)"

    def column(self, backend: str, metric: str) -> Optional[Column]:
        return self.columns.get((backend, metric))

    def keys(self) -> list[tuple[str, str]]:
        """(backend, metric) of every column, in order."""
        return list(self.columns)

    def backends(self) -> list[str]:
        return list(dict.fromkeys(b for b, _ in self.columns))

    def metrics(self) -> list[str]:
        """Every metric, in the order of their first column."""
        return list(dict.fromkeys(m for _, m in self.columns))

    def n_scores(self) -> int:
        return sum(int(c.present.sum()) for c in self.columns.values())

    def scores_of(self, indices: Sequence[int]) -> list[list[Score]]:
        """Per case of ``indices`` every score it has, in (backend, metric) order."""
        out: list[list[Score]] = [[] for _ in indices]
        for col in self.columns.values():
            for k, s in enumerate(col.scores(indices)):
                if s is not None:
                    out[k].append(s)
        return out

    def case_batches(self, indices: Optional[Sequence[int]] = None, size: int = 2000, views: bool = False
                     ) -> Iterator[list[tuple[int, Optional[Case], list[Score]]]]:
        """``(index, Case, its scores)`` of every case (or of ``indices``) in run order, ``size``
        cases at a time: memory holds one batch (``views``: the cases as `CaseIndex.views`)."""
        for batch in self.cases.batches(indices, size, views):
            scores = self.scores_of([i for i, _ in batch])
            yield [(i, c, s) for (i, c), s in zip(batch, scores)]

    def summary_rows(self, by_tag: bool = True) -> list[dict[str, Any]]:
        """`ragbridge.run.summary.Totals.rows` of these scores: the same rows, counted over whole
        columns at once (the sums exact, as `Totals` keeps them)."""
        from .summary import ALL

        cols = self
        nan = float("nan")
        index = cols.cases
        groups = [(ALL, None)] + ([(t, index.tag_mask(t)) for t in index.all_tags()] if by_tag else [])
        rows = []
        for (backend, metric), col in cols.columns.items():
            claims, bad = col.get("claims"), col.get("unsupported")
            judged, cost, rc = col.get("judge_calls") > 0, col.get("cost"), col.get("ragchecker")
            for tag, mask in groups:
                present = col.present if mask is None else col.present & mask
                n = int(present.sum())
                if not n:
                    continue
                st = col.status[present]
                scored = present & (col.status == SCORED)
                n_scored = int(scored.sum())
                with_claims = scored & (claims >= 0)
                n_claims = int(with_claims.sum())
                is_judged = present & judged
                unpriced = int((is_judged & np.isnan(cost)).sum())
                has_rc = present & ~np.isnan(rc)
                n_rc = int(has_rc.sum())
                rows.append({
                    "backend": backend, "metric": metric, "tag": tag,
                    "mean": math.fsum(col.value[scored].tolist()) / n_scored if n_scored else nan,
                    "n_scored": n_scored, "n_undefined": int((st == UNDEFINED).sum()),
                    "n_errored": int((st == ERROR).sum()), "n": n, "n_claims": n_claims,
                    "unsupported_share": int((with_claims & (bad > 0)).sum()) / n_claims if n_claims else nan,
                    "n_not_run": int((st == NOT_RUN).sum()),
                    "cost": (math.fsum(cost[is_judged].tolist()) if is_judged.any() and not unpriced
                             else nan),
                    "ragchecker_mean": math.fsum(rc[has_rc].tolist()) / n_rc if n_rc else nan,
                    "n_ragchecker_zero": int((has_rc & (col.status != SCORED)).sum()),
                })
        rows.sort(key=lambda r: (r["tag"] != ALL, r["tag"], r["backend"], r["metric"]))
        return rows

    @classmethod
    def of(cls, scores: Sequence[Score], cases: Sequence[Case] = (),
           pass_at_least: Optional[int] = None) -> "RunColumns":
        """A run in memory in columns: ``scores`` as recorded (every repeat), ``cases`` in run order;
        the last score per (case, metric, backend, repeat) counts, as in a folder."""
        index = CaseIndex([c.id for c in cases], [tuple(c.tags) for c in cases],
                          np.fromiter((c.answerable for c in cases), bool, len(cases)),
                          np.arange(len(cases), dtype=np.int64),
                          digests(golden_digest(c.model_dump(mode="json", include=set(GOLDEN_FIELDS)))
                                  for c in cases),
                          lambda places: [cases[p] for p in places],
                          contents=lambda: digests(_line_digest(record_line(case_record(c))) for c in cases))
        builder = ColumnsBuilder(index, ListStore(scores))
        found = index.find([s.case_id for s in scores]).tolist()
        for place, (s, i) in enumerate(zip(scores, found)):
            builder.add_score(s, place, place, i)
        return builder.finish(pass_at_least)


class ColumnsBuilder:
    """Scores put in columns one line (or one `Score`) at a time, the last per (case, metric, backend,
    repeat) winning; `finish` gives the `RunColumns`."""

    def __init__(self, cases: CaseIndex, store: ScoreStore):
        self.cases, self.store = cases, store
        self.columns: dict[tuple[str, str], Column] = {}
        self.size = len(cases)  # the slots every column has (cases only scores name are added)
        self.max_repeat = 0
        # cases only scores name: their first column and order there, to place them as a run does
        self.unknown: dict[int, tuple[tuple[str, str], int]] = {}
        #: the ids only scores name, each with its place (added to the cases at `finish`)
        self.only_scored: dict[str, int] = {}
        self._pending: dict[tuple[str, str], list[list]] = {}

    def _column(self, key: tuple[str, str]) -> Column:
        col = self.columns.get(key)
        if col is None:
            col = self.columns[key] = Column(key[0], key[1], self.size, self.store)
        return col

    def index(self, case_id: str, key: tuple[str, str], order: int, found: Optional[int] = None) -> int:
        """The place of case ``case_id`` (``found``: its place among the cases, -1 for none, when
        already looked up), a new one for an id only scores name."""
        i = self.cases.place(case_id) if found is None else found
        if i is None or i < 0:
            i = self.only_scored.get(case_id)
            if i is None:
                i = self.only_scored[case_id] = len(self.cases) + len(self.only_scored)
                if i >= self.size:
                    self.size = max(i + 1, 2 * self.size, 1024)
                    for col in self.columns.values():
                        col.grow(self.size)
        if i >= self.cases.described:
            first = self.unknown.get(i)
            if first is None or key < first[0]:
                self.unknown[i] = (key, order)
        return i

    def add_fast(self, key: tuple[str, str], i: int, value: Optional[float], status: int, place: int,
                 repeat: int, extra: Optional[dict[str, Any]]) -> None:
        """One score as its fields (``extra``: the per-score arrays' values that are not defaults)."""
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = [[], [], [], [], [], []]
        pending[0].append(i)
        pending[1].append(math.nan if value is None else value)
        pending[2].append(status)
        pending[3].append(place)
        pending[4].append(repeat)
        pending[5].append(extra)

    def add_block(self, key: tuple[str, str], at: np.ndarray, value: np.ndarray, status: np.ndarray,
                  places: np.ndarray, extras: dict[str, Any]) -> None:
        """Scores of one column at once, each case once (``at``: their places among the cases; a run's
        `ScoreBlock`): after the scores added before them, as `add_fast` would put them (``extras``:
        each per-score array's value for all, where it is not the default)."""
        if key in self._pending:
            self.flush()
        col = self._column(key)
        if col.value.shape[0] < self.size:
            col.grow(self.size)
        col.value[at] = value
        col.status[at] = status
        col.places[at] = places
        for name, default in _EXTRA_DEFAULTS.items():
            if name in extras:
                col.extra(name)[at] = extras[name]
            elif getattr(col, name) is not None:
                getattr(col, name)[at] = default

    def add_score(self, s: Score, place: int, order: int, found: Optional[int] = None) -> None:
        """One `Score` (a line read field by field, or a run's score in memory; ``found``: as `index`
        takes it)."""
        from .summary import claim_counts
        from ..metrics import ragchecker_figure

        key = (s.backend, s.metric)
        i = self.index(s.case_id, key, order, found)
        extra: dict[str, Any] = {}
        if s.judge_calls:
            extra["judge_calls"] = s.judge_calls
            extra["cost"] = math.nan if s.cost is None else s.cost
        for name in ("prompt_tokens", "completion_tokens", "seconds", "cached"):
            if getattr(s, name):
                extra[name] = getattr(s, name)
        claims = claim_counts(s)
        if claims is not None:
            extra["claims"], extra["unsupported"] = claims
        rc = ragchecker_figure(s)
        if rc is not None:
            extra["ragchecker"] = rc
        self.add_fast(key, i, s.value, status_code(s.status), place, s.repeat, extra or None)

    def flush(self) -> None:
        """Write the scores added since the last flush into their columns."""
        for key, (idx, values, status, places, repeats, extras) in self._pending.items():
            col = self._column(key)
            if col.value.shape[0] < self.size:
                col.grow(self.size)
            if any(repeats):
                self._repeats(col, idx, values, status, places, repeats)
            at = np.array(idx, np.int64)
            if len(set(idx)) < len(idx):  # a score given again: the last line wins
                last: dict[int, int] = {}
                for k, i in enumerate(idx):
                    if repeats[k] == 0:
                        last[i] = k
                keep = np.array(sorted(last.values()), np.int64)
            else:
                keep = np.flatnonzero(np.array(repeats) == 0) if any(repeats) else None
            if keep is not None:
                at = at[keep]
                pick = keep.tolist()
                values = [values[k] for k in pick]
                status = [status[k] for k in pick]
                places = [places[k] for k in pick]
                extras = [extras[k] for k in pick]
            col.value[at] = values
            col.status[at] = status
            col.places[at] = places
            self._extras(col, at, extras)
        self._pending = {}

    @staticmethod
    def _extras(col: Column, at: np.ndarray, extras: list) -> None:
        written: set[str] = set()
        for k, extra in enumerate(extras):
            if extra:
                for name, v in extra.items():
                    col.extra(name)[at[k]] = v
                    written.add(name)
        for name in ("judge_calls", "prompt_tokens", "completion_tokens", "seconds", "cost", "claims",
                     "unsupported", "ragchecker", "cached"):
            if name not in written and getattr(col, name) is not None:  # a line given again, plainer
                default = _EXTRA_DEFAULTS[name]
                for k, extra in enumerate(extras):
                    if not extra or name not in extra:
                        getattr(col, name)[at[k]] = default

    def _repeats(self, col: Column, idx: list, values: list, status: list, places: list,
                 repeats: list) -> None:
        width = max(repeats) + 1
        self.max_repeat = max(self.max_repeat, width - 1)
        if col.repeats is None:
            col.repeats = Repeats(self.size, width)
            first = col.status != MISSING  # repeat 0 lines read before the first repeat
            col.repeats.values[first, 0] = col.value[first]
            col.repeats.status[first, 0] = col.status[first]
            col.repeats.places[first, 0] = col.places[first]
        rep = col.repeats
        rep.grow(self.size)
        rep.widen(width)
        for i, v, st, p, r in zip(idx, values, status, places, repeats):
            rep.values[i, r] = v if st == SCORED else math.nan
            rep.status[i, r] = st
            rep.places[i, r] = p

    def finish(self, pass_at_least: Optional[int] = None) -> RunColumns:
        self.flush()
        if self.only_scored:
            self.cases.extend(list(self.only_scored))
            self.only_scored = {}
        n = len(self.cases)
        self._place_unknown()
        columns = {}
        for key, col in self.columns.items():
            col.grow(n)
            for name in ("value", "status", "places", *_EXTRA_DEFAULTS):
                arr = getattr(col, name)
                if arr is not None and len(arr) != n:
                    setattr(col, name, arr[:n].copy())
            if col.repeats is not None:
                self._collapse(col, n, pass_at_least)
            columns[key] = col
        for col in columns.values():  # a run with repeats: every other column's repeat 0 rows too
            if self.max_repeat and col.repeats is None:
                pass
        return RunColumns(self.cases, columns, repeats=self.max_repeat + 1)

    def _place_unknown(self) -> None:
        """Put the cases only scores name in the order a run lists them (by their first column, then
        their order there), moving every column's slots with them."""
        start = self.cases.described
        n = len(self.cases)
        if n == start:
            return
        order = sorted(range(start, n), key=lambda i: self.unknown.get(i, ((chr(0x10FFFF),) * 2, 0)))
        if order == list(range(start, n)):
            return
        perm = np.arange(n)
        perm[start:] = order
        self.cases.ids = self.cases.ids.taken(perm)
        self.cases.tags[:] = [self.cases.tags[i] for i in perm]
        self.cases.answerable = self.cases.answerable[perm]
        self.cases.places = self.cases.places[perm]
        self.cases._masks.clear()
        for col in self.columns.values():
            col.grow(n)
            for name in ("value", "status", "places", *_EXTRA_DEFAULTS):
                arr = getattr(col, name)
                if arr is not None:
                    setattr(col, name, arr[:n][perm])
            rep = col.repeats
            if rep is not None:
                rep.grow(n)
                for name in ("values", "status", "places", "n", "collapsed", "pass_at_least"):
                    setattr(rep, name, getattr(rep, name)[:n][perm])

    def _collapse(self, col: Column, n: int, pass_at_least: Optional[int]) -> None:
        """Each case of ``col`` with a repeat beyond the first as its mean over them
        (`ragbridge.run.repeats.collapse_repeats`, on the repeats read back)."""
        from ..metrics import ragchecker_figure
        from .repeats import collapse_repeats
        from .summary import claim_counts

        rep = col.repeats
        rep.grow(n)
        for name in ("values", "status", "places", "n", "collapsed", "pass_at_least"):
            arr = getattr(rep, name)
            if len(arr) != n:
                setattr(rep, name, arr[:n].copy())
        present = rep.status != MISSING
        beyond = present[:, 1:].any(axis=1) if rep.values.shape[1] > 1 else np.zeros(n, bool)
        for i in np.flatnonzero(beyond):
            places = [int(p) for p in rep.places[i] if p >= 0]
            s = collapse_repeats(self.store.scores(places), pass_at_least)[0]
            rep.collapsed[i] = True
            rep.n[i] = s.repeats.n
            rep.pass_at_least[i] = s.repeats.pass_at_least
            col.value[i] = math.nan if s.value is None else s.value
            col.status[i] = status_code(s.status)
            for name in ("judge_calls", "prompt_tokens", "completion_tokens", "seconds", "cached"):
                if getattr(s, name):
                    col.extra(name)[i] = getattr(s, name)
                elif getattr(col, name) is not None:
                    getattr(col, name)[i] = _EXTRA_DEFAULTS[name]
            if s.judge_calls:
                col.extra("cost")[i] = math.nan if s.cost is None else s.cost
            claims = claim_counts(s)
            if claims is not None or col.claims is not None:
                col.extra("claims")[i], col.extra("unsupported")[i] = claims or (-1, 0)
            rc = ragchecker_figure(s)
            if rc is not None or col.ragchecker is not None:
                col.extra("ragchecker")[i] = math.nan if rc is None else rc


_EXTRA_DEFAULTS = {"judge_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0,
                   "cost": math.nan, "claims": -1, "unsupported": 0, "ragchecker": math.nan, "cached": False}


def digests(each: Iterable[bytes]) -> np.ndarray:
    """Digests of 16 bytes as the rows of an array."""
    return np.frombuffer(b"".join(each), np.uint8).reshape(-1, 16).copy()


def _line_digest(line: bytes) -> bytes:
    return hashlib.blake2b(line, digest_size=16).digest()


def exact_mean(values: np.ndarray) -> float:
    """The mean of ``values`` from their exact sum (`math.fsum`), NaN for none."""
    return math.fsum(values.tolist()) / len(values) if len(values) else math.nan
