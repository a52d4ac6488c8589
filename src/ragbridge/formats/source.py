"""A golden set to run, read in batches so that memory holds one batch, not the dataset.

`open_cases` reads a dataset once, whole, before anything is scored or written: every record is
validated (bad input raises the reader's `DatasetError`, exactly as `ragbridge.formats.load_cases`
would), the fingerprint and the input warnings are counted, and the cases are written, one canonical
record a line (`ragbridge.formats.plain_records.record_line`), to a scratch copy, and batch by batch as
they were read (`ragbridge.formats.batches.CaseBatch.to_bytes`) to a scratch file that has no name
(it goes with the process, however that ends). A run moves the copy into its folder as
``cases.jsonl``; a copy that a killed process left behind (named with its pid) is removed by the next
`open_cases` beside it and reads its batches back from the scratch file (`CaseSource.batches`), with no
parsing: the cases scored are exactly the cases checked, even if the dataset changes meanwhile.

With span labels (``relevant_spans``), the check also places every chunk and label of a
span-labelled case against the corpus (`ragbridge.formats.corpus.SpanPlacer`: chunks without offsets
located by their text, quotes by theirs), so the cases written and scored carry their offsets and
scoring needs no corpus; what cannot be placed is a `DatasetError` naming the case and the chunk.

A canonical JSONL golden set is streamed (one line at a time, the common record taking the light
path of `ragbridge.formats.plain_records.plain_record`, and a record whose chunks are ids, or ids and
texts, that of `ragbridge.formats.record_lines.parse_record_line`: no mapping per chunk); a
TREC run is checked whole and read a query at a time (`ragbridge.formats.trec.records`: memory holds
its qrels, a few numbers a query and one batch), then goes the same way; every other format is read
whole by its reader, then batched. A dataset that fits in one batch is kept in memory
from the first read.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Optional, Sequence

from ..schema import Case
from . import load_cases, reading_format
from .files import DatasetError, jsonl_lines, no_cycle_collection, sweep_temporaries, temporary
from .corpus import Corpus, SpanPlacer, place_cases
from .batches import CaseBatch, Fingerprint, SeenCaseIds, batch_from_records
from .input_check import RETRIEVAL, InputCheck, InputWarning
from .record_lines import parse_record_line

__all__ = ["BATCH_SIZE", "CaseSource", "open_cases"]

#: cases per batch: a run's memory holds about this many cases (at 100 chunks a case, tens of MB)
BATCH_SIZE = 2000


class CaseSource:
    """The cases of one run: ``n_cases``, ``fingerprint``, ``warnings`` (`InputWarning` lines: the
    input check's and the span placement's),
    ``duplicate_chunk_ids``, ``span_cases`` (how many have span labels) and ``path`` (the dataset's, or
    None), with `batches` to score them by and `save` to write them as a run folder's ``cases.jsonl``."""

    def __init__(self, *, n_cases: int, fingerprint: str, warnings: list[InputWarning],
                 duplicate_chunk_ids: int,
                 path: Optional[Path] = None, held: Optional[list[CaseBatch]] = None,
                 copy: Optional[Path] = None, frames: Optional[BinaryIO] = None,
                 batch_size: int = BATCH_SIZE, span_cases: int = 0):
        self.n_cases, self.fingerprint, self.warnings = n_cases, fingerprint, warnings
        self.duplicate_chunk_ids, self.path = duplicate_chunk_ids, path
        self.span_cases = span_cases
        self.batch_size = batch_size
        self._held = held  # every batch, when they fit in memory
        self._copy = copy  # else the scratch copy of canonical lines (then the run folder's cases.jsonl)
        self._own_copy = copy is not None
        self._frames = frames  # and the batches, each a length (8 bytes) and `CaseBatch.to_bytes`
        self.opened_at: Optional[float] = None  # when reading began (Unix time), where it was read here

    @classmethod
    def of_cases(cls, cases: Sequence[Case], batch_size: int = BATCH_SIZE,
                 corpus: Optional[Corpus] = None) -> "CaseSource":
        """Cases already in memory (the Python API): batches are slices of them. Span-labelled cases
        are placed against ``corpus`` (`SpanPlacer`; `DatasetError` for what cannot be placed)."""
        placer = SpanPlacer(corpus)
        cases = place_cases(cases, corpus, placer)
        fp, check, batch = Fingerprint(), InputCheck(), CaseBatch.of_cases(cases)
        for i in range(len(batch)):
            fp.add(batch.line(i))
        check.add_batch(batch)
        held = [CaseBatch.of_cases(cases[i:i + batch_size]) for i in range(0, len(cases), batch_size)]
        return cls(n_cases=len(cases), fingerprint=fp.hexdigest(), warnings=_warnings(check, placer),
                   duplicate_chunk_ids=check.repeated_ids, held=held, batch_size=batch_size,
                   span_cases=placer.cases)

    @property
    def cases(self) -> list[Case]:
        """Every case, in memory (for what needs them all at once, e.g. a target run)."""
        return [case for batch in self.batches() for case in batch]

    def __len__(self) -> int:
        return self.n_cases

    def __iter__(self) -> Iterator[Case]:
        """The cases in order (for a writer that goes through them): a batch's records in memory at a
        time, and each `Case` made as it is asked for, not kept."""
        for batch in self.batches():
            if self._held is not None:
                yield from batch
            else:
                yield from (Case.model_validate(batch.record(i)) for i in range(len(batch)))

    def batches(self) -> Iterator[CaseBatch]:
        """The cases in order, `batch_size` at a time."""
        if self._held is not None:
            yield from self._held
            return
        fd, at = self._frames.fileno(), 0
        while head := os.pread(fd, 8, at):
            size = int.from_bytes(head, "little")
            yield CaseBatch.from_bytes(os.pread(fd, size, at + 8))
            at += 8 + size

    def records(self) -> Iterator[dict[str, Any]]:
        """The cases in order as canonical records (no `Case` made of them)."""
        for batch in self.batches():
            yield from map(batch.record, range(len(batch)))

    def save(self, dest: Path) -> None:
        """Write the cases to ``dest`` (a run folder's ``cases.jsonl``), whole or not at all; a scratch
        copy is moved there, and batches are read from there from now on. A ``dest`` of the same bytes
        (a run resumed or run again) is left as it is: the run's column copy, made of that file, stays
        good."""
        from .canonical import write_records
        from .files import atomic_path

        if self._copy is not None and self._copy != dest:
            if dest.is_file() and filecmp.cmp(self._copy, dest, shallow=False):
                if self._own_copy:
                    self._copy.unlink(missing_ok=True)
            elif _same_device(self._copy, dest):
                os.replace(self._copy, dest)
            else:
                shutil.move(self._copy, dest)
            self._copy, self._own_copy = dest, False
        elif self._copy is None:
            with atomic_path(dest, keep_same=True) as tmp:
                write_records(self.records(), tmp)

    def close(self) -> None:
        """Remove the scratch copy, if it was never saved, and the batches' scratch file."""
        if self._own_copy and self._copy is not None:
            self._copy.unlink(missing_ok=True)
            self._own_copy = False
        if self._frames is not None:
            self._frames.close()

    def __enter__(self) -> "CaseSource":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _place_batch(batch: CaseBatch, placer: SpanPlacer, lines: list[int], path: Path) -> None:
    """Place the span-labelled records of ``batch`` (read from ``path`` at ``lines``) in place."""
    if not any(batch.span_lists()):
        return  # nothing to place (and no chunk ids split into lists for nothing)
    rows = zip(batch.span_lists(), batch.chunk_lists(), batch.chunk_texts())
    for i, (spans, (ids, chunks, _), texts) in enumerate(rows):
        if spans:
            alone = ids if chunks is None and texts is None else None  # chunks that are ids alone
            batch.replace(i, placer.place(batch.record(i), alone, path, lines[i]))


def _same_device(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b.parent).st_dev
    except OSError:
        return False


def _scratch_dir(near: Optional[Path]) -> Path:
    """The nearest existing folder at or above ``near`` (so the copy can be renamed into the run
    folder), else the system's temporary folder."""
    here = Path(near).absolute() if near is not None else None
    while here is not None and not here.is_dir():
        here = here.parent if here.parent != here else None
    return here if here is not None and os.access(here, os.W_OK) else Path(tempfile.gettempdir())


def open_cases(
    path: str | Path, format: Optional[str] = None, near: Optional[Path] = None,
    batch_size: int = BATCH_SIZE, progress: Optional[Callable[[int], None]] = None,
    corpus: Optional[Corpus] = None, **options: Any,
) -> CaseSource:
    """Read and check a golden set whole (see the module docstring); raises `DatasetError` for bad
    input, having written nothing that stays. ``near``: where the run folder will be (the scratch
    copy is made beside it). ``progress(n)`` is called with the cases read so far, batch by batch.
    ``corpus``: the documents span-labelled cases are placed against. ``options``: the format's read
    options (`ragbridge.formats.load_cases`)."""
    opened_at = time.time()
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such file or folder", path=path)
    fmt = reading_format(path, format, options)
    unit = "line"
    if fmt.name == "trec":  # checked whole, then read a query at a time
        from .trec import records

        lines = records(path, options.get("qrels"))
    elif fmt.name == "jsonl":
        lines = jsonl_lines(path, parse=parse_record_line)
    elif fmt.name in ("csv", "parquet"):  # a row at a time too
        from .canonical import csv_records, parquet_records

        lines = csv_records(path) if fmt.name == "csv" else parquet_records(path, batch_size)
        unit = "line" if fmt.name == "csv" else "row"
    else:
        source = CaseSource.of_cases(load_cases(path, fmt.name, options.get("qrels")), batch_size, corpus)
        source.path, source.opened_at = path, opened_at
        return source
    here = _scratch_dir(near)
    sweep_temporaries(here)  # the scratch copies of checks killed half way
    scratch = temporary(here / "cases.jsonl")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    frames = tempfile.TemporaryFile(prefix=".tmp-batches-", dir=here)
    try:
        with os.fdopen(fd, "wb") as out, no_cycle_collection():
            source = _check_records(lines, path, out, frames, batch_size, progress, SpanPlacer(corpus), unit)
    except BaseException:
        scratch.unlink(missing_ok=True)
        frames.close()
        raise
    if source._held is not None:
        scratch.unlink(missing_ok=True)
        frames.close()
    else:
        source._copy, source._own_copy = scratch, True
        frames.flush()
        source._frames = frames
    source.path, source.opened_at = path, opened_at
    return source


def _check_records(records: Iterable[tuple[int, Any]], path: Path, out, frames, batch_size: int, progress,
                   placer: SpanPlacer, unit: str = "line") -> CaseSource:
    """Check ``(line, record)`` pairs batch by batch, writing the lines to ``out`` and the batches to
    ``frames``; the `CaseSource` of them (holding the batches when they are one)."""
    fp, check = Fingerprint(), InputCheck()
    first_seen = SeenCaseIds()  # memory: 25 bytes a case, not the ids
    held: Optional[list[CaseBatch]] = []
    n = 0
    pending: list[tuple[int, Any]] = []

    def flush() -> None:
        nonlocal held, n
        batch = batch_from_records(pending, path, unit, first_seen=first_seen)
        first_seen.end_batch()
        _place_batch(batch, placer, [line for line, _ in pending], path)
        pending.clear()
        lines = batch.lines()
        lines.append(b"")
        block = b"\n".join(lines)
        fp.add_lines(block)
        check.add_batch(batch)
        out.write(block)
        frame = batch.to_bytes()
        frames.write(len(frame).to_bytes(8, "little"))
        frames.write(frame)
        n += len(batch)
        if held is not None:
            held.append(batch)
            if n > batch_size:
                held = None  # more than a batch: read back from the scratch file, batch by batch
        if progress is not None:
            progress(n)

    records = iter(records)
    while True:
        pending.extend(islice(records, batch_size))  # a batch's pairs, taken in a C loop
        if not pending:
            break
        flush()
    if n == 0:
        raise DatasetError("holds no cases", path=path, hint="a golden set needs at least one case")
    return CaseSource(n_cases=n, fingerprint=fp.hexdigest(), warnings=_warnings(check, placer),
                      duplicate_chunk_ids=check.repeated_ids, held=held, batch_size=batch_size,
                      span_cases=placer.cases)


def _warnings(check: InputCheck, placer: SpanPlacer) -> list[InputWarning]:
    return check.warnings() + [InputWarning(w, RETRIEVAL) for w in placer.warnings()]
