"""Calling the system under test: fill each golden case's retrieved chunks and answer from a target.

A target is one of:

* ``package.module:pipeline`` — a callable (sync or async) taking the question and returning the
  output below;
* ``package.module:obj`` or ``package.module`` — anything with ``retrieve(question)`` returning the
  chunks and ``answer(question, chunks)`` returning the answer text (sync or async), called in that
  order;
* ``http://host:port/path`` (or https) — an endpoint that takes ``POST {"question": ..., "id": ...}``
  and returns the output below as JSON.

The output is a mapping (or an object with these attributes)::

    {"contexts": [{"id": "refunds.md#window-1", "text": "...", "score": 0.8,
                   "source": "refunds.md#window"}, ...],
     "answer": "You can ask for a refund within 14 days."}

``contexts`` may also be called ``retrieved``, ``chunks`` or ``documents``; a chunk may be a plain
string (its id is then derived from its text); ``answer`` may be called ``response`` or ``output``.

Each call's latency and error are kept in ``case.metadata["target"]`` and, as each call finishes, in
``target.jsonl`` in the run folder, so an interrupted run never calls the target again for a case it
already has, and ``ragbridge rescore`` re-scores the recorded outputs without calling it at all.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import socket
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlparse

from ..errors import UserError
from ..formats.files import jsonl_lines, no_follow
from ..formats.records import normalize_chunk
from .progress import progress_display
from ..schema import Case, Chunk

__all__ = ["TargetError", "Target", "load_target", "fill_cases", "parse_chunks", "parse_output",
           "target_error"]

#: where the output may hold the chunks, and the answer
CHUNK_KEYS = ("contexts", "retrieved", "chunks", "documents")
ANSWER_KEYS = ("answer", "response", "output")
EXPECTED = (
    "expected a JSON object (or mapping) with 'answer' (a string) and 'contexts' "
    "(a list of chunks {id, text, score?, source?} or of strings)"
)


class TargetError(UserError, ValueError):
    """A target that cannot be used at all (cannot be imported or reached)."""


class Target:
    """A loaded target: ``await target.call(case) -> (chunks, answer)``."""

    def __init__(self, spec: str, call: Callable[[Case], Any]):
        self.spec = spec
        self._call = call

    async def call(self, case: Case) -> tuple[list[Chunk], Optional[str]]:
        raw = await self._call(case)
        return parse_output(raw)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _run_sync_or_async(fn: Callable, *args: Any) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        return fn(*args)
    return asyncio.to_thread(fn, *args)


def load_target(spec: str, timeout: float = 120.0) -> Target:
    """Resolve a target spec (see the module docstring). Raises `TargetError` when it cannot be used."""
    if spec.startswith(("http://", "https://")):
        return _http_target(spec, timeout)
    if "://" in spec:
        raise TargetError(f"target {spec!r}: only http:// and https:// URLs are supported")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise TargetError(
            f"cannot import target module {module_name!r}: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    if attr:
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise TargetError(f"target {spec!r}: module {module_name!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
    retrieve, answer = getattr(obj, "retrieve", None), getattr(obj, "answer", None)
    if callable(retrieve) and callable(answer):

        async def two_step(case: Case) -> Any:
            chunks = await _maybe_await(_run_sync_or_async(retrieve, case.question))
            parsed = parse_chunks(chunks)
            text = await _maybe_await(_run_sync_or_async(answer, case.question, parsed))
            return {"contexts": parsed, "answer": text}

        return Target(spec, two_step)
    if callable(obj) and attr:

        async def pipeline(case: Case) -> Any:
            return await _maybe_await(_run_sync_or_async(obj, case.question))

        return Target(spec, pipeline)
    raise TargetError(
        f"target {spec!r} is neither a callable (question -> output) nor an object with "
        "retrieve(question) and answer(question, chunks)"
    )


def _http_target(url: str, timeout: float) -> Target:
    import httpx

    parts = urlparse(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=5):
            pass
    except OSError as exc:
        raise TargetError(f"target {url} cannot be reached: {exc.strerror or exc}") from None
    client: dict[str, httpx.AsyncClient] = {}

    async def post(case: Case) -> Any:
        if "c" not in client:
            client["c"] = httpx.AsyncClient(timeout=timeout)
        resp = await client["c"].post(url, json={"question": case.question, "id": case.id})
        if resp.status_code >= 400:
            raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()
        except ValueError:
            raise ValueError(f"response is not JSON: {resp.text[:120]!r}; {EXPECTED}") from None

    target = Target(url, post)
    target._client = client  # closed by fill_cases
    return target


def parse_chunks(chunks: Any) -> list[Chunk]:
    """A target's chunks as `Chunk` objects (see the module docstring); raises ``ValueError``."""
    if chunks is None:
        return []
    if not isinstance(chunks, (list, tuple)):
        raise ValueError(f"contexts is a {type(chunks).__name__}; {EXPECTED}")
    out = []
    for i, c in enumerate(chunks):
        if isinstance(c, Chunk):
            out.append(c)
            continue
        if not isinstance(c, (str, dict)):
            c = {k: getattr(c, k) for k in ("id", "text", "score", "source") if hasattr(c, k)} or c
        try:
            out.append(Chunk.model_validate(normalize_chunk(c)))
        except Exception as exc:
            raise ValueError(f"contexts[{i}] is not a chunk ({exc}); {EXPECTED}") from None
    return out


def parse_output(raw: Any) -> tuple[list[Chunk], Optional[str]]:
    """A target's output as its chunks and answer (see the module docstring); raises ``ValueError``."""
    if not isinstance(raw, dict):
        if hasattr(raw, "__dict__") or hasattr(raw, "answer"):
            raw = {k: getattr(raw, k) for k in (*CHUNK_KEYS, *ANSWER_KEYS) if hasattr(raw, k)}
        else:
            raise ValueError(f"target returned {type(raw).__name__}; {EXPECTED}")
    chunks = next((raw[k] for k in CHUNK_KEYS if k in raw), None)
    answer = next((raw[k] for k in ANSWER_KEYS if k in raw), None)
    if chunks is None and answer is None:
        raise ValueError(f"target returned keys {sorted(raw)}; {EXPECTED}")
    if answer is not None and not isinstance(answer, str):
        raise ValueError(f"answer is a {type(answer).__name__}; {EXPECTED}")
    return parse_chunks(chunks), answer


def _filled(case: Case, record: dict[str, Any]) -> Case:
    meta = dict(case.metadata)
    meta["target"] = {"spec": record["target"], "seconds": record["seconds"], "error": record["error"]}
    return case.model_copy(
        update={
            "contexts": [Chunk.model_validate(c) for c in record["contexts"]],
            "answer": record["answer"],
            "metadata": meta,
        }
    )


async def fill_cases(
    cases: Sequence[Case],
    target: Target,
    record_path: Optional[Path] = None,
    *,
    concurrency: int,
    progress: Optional[bool] = False,
) -> list[Case]:
    """Call the target for every case (at most ``concurrency`` at once) and return the filled cases.

    A case whose call fails keeps no chunks and no answer, and its error is in
    ``metadata["target"]["error"]`` (the runner turns it into that case's scores' error). With
    ``record_path`` every finished call is appended there at once, and calls already recorded for the
    same case id and question are reused instead of made again.
    """
    recorded: dict[str, dict[str, Any]] = {}
    if record_path is not None and record_path.exists():
        for _, rec in jsonl_lines(record_path, allow_empty=True, on_bad=lambda error: None):  # cut short
            recorded[rec["case_id"]] = rec
    by_id = {c.id: c for c in cases}
    results: dict[str, dict[str, Any]] = {
        cid: rec for cid, rec in recorded.items()
        if cid in by_id and rec.get("question") == by_id[cid].question
    }
    todo = [c for c in cases if c.id not in results]
    if record_path is not None:
        record_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fh = open(record_path, "a", encoding="utf-8", opener=no_follow) if record_path is not None else None
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = progress_display(progress, len(todo), label="calling target", noun="target calls")

    async def one(case: Case) -> None:
        async with sem:
            start = time.perf_counter()
            error = None
            chunks: list[Chunk] = []
            answer = None
            try:
                chunks, answer = await target.call(case)
            except Exception as exc:
                error = f"case {case.id!r}: target failed: {type(exc).__name__}: {exc}"
            rec = {
                "case_id": case.id,
                "question": case.question,
                "target": target.spec,
                "contexts": [c.model_dump(mode="json", exclude_none=True) for c in chunks],
                "answer": answer,
                "seconds": round(time.perf_counter() - start, 6),
                "error": error,
            }
            results[case.id] = rec
            if fh is not None:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                fh.flush()
            if bar is not None:
                bar.advance(1, int(error is not None))

    try:
        await asyncio.gather(*(one(c) for c in todo))
    finally:
        if fh is not None:
            fh.close()
        if bar is not None:
            bar.stop()
        client = getattr(target, "_client", {}).pop("c", None)
        if client is not None:
            await client.aclose()
    return [_filled(c, results[c.id]) for c in cases]


def target_error(case: Case) -> Optional[str]:
    """The error of the target call that filled ``case``, if it failed (see `fill_cases`)."""
    return target_error_of(case.metadata)


def target_error_of(metadata: dict[str, Any]) -> Optional[str]:
    """`target_error`, from a case's ``metadata``."""
    info = metadata.get("target")
    return info.get("error") if isinstance(info, dict) else None
