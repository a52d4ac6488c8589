#!/usr/bin/env python
"""Sampling a large span export as a user runs it: ``ragbridge sample`` on a ~1 GB OTLP JSON file,
whole processes, wall time, CPU time and peak RSS.

    python benchmarks/bench_traces.py                  # ~1 GB file (written once, reused), every measure
    python benchmarks/bench_traces.py --size-mb 64     # quick

Data (written once into ``--data``, reused): the tests' RAG pipeline (tests/rag_pipeline.py, BM25
over the support-bot example's chunks, top 5) instrumented with the OpenTelemetry SDK and
OpenInference's conventions (`traced`), exported by the SDK's OTLP JSON file exporter (JSON lines,
one batch of up to 512 spans a line): a CHAIN root, a RETRIEVER span with five documents and an LLM
span per trace, users ``u0``..``u9``. The questions are the example's, numbered so each trace is
its own; every 50th trace has no retriever span.

The processes (each timed from its start to its exit; CPU time user + system and peak RSS from
``wait4``):

- ``sample --n N`` for N = 100, 1,000 and 10,000: the N lowest draws (peak RSS should follow N, not
  the file);
- ``sample --rate 0.01`` and ``sample --n 1000 --where user.id=u3``;
- ``sample --n 1000`` on an eighth of the file (the same N on a smaller file: the same memory);
- the contrast, on the eighth: ``ragbridge convert`` (every trace a case, read whole) and pandas
  ``read_json(lines=True)`` (how a span export is usually loaded into a dataframe).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_spans(path: Path, size_mb: int) -> int:
    """The instrumented pipeline's spans, exported by the SDK's OTLP JSON file exporter, until the file
    holds ``size_mb`` MiB; returns the number of traces."""
    os.environ.pop("OTEL_SDK_DISABLED", None)
    sys.path.insert(0, str(ROOT / "tests"))
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from rag_pipeline import EXAMPLE, traced

    questions = [json.loads(line)["question"] for line in EXAMPLE.read_text().splitlines()]
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(tmp), max_queue_size=8192,
                                                   max_export_batch_size=512))
    tracer = provider.get_tracer("support-bot")
    n, limit, t0 = 0, size_mb * 1024 * 1024, time.perf_counter()
    while True:
        for _ in range(2000):
            q = f"{questions[n % len(questions)]} (#{n})"
            traced(q, tracer, user=f"u{n % 10}", drop_retriever=n % 50 == 49)
            n += 1
        provider.force_flush()
        if tmp.stat().st_size >= limit:
            break
    provider.shutdown()
    tmp.rename(path)
    print(f"data: {n:,} traces, {path.stat().st_size / 2**20:,.0f} MiB written to {path} in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return n


def eighth(path: Path, out: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True) if path.stat().st_size < 2**28 else None
    with open(path, "rb") as f, open(out, "wb") as g:
        limit = path.stat().st_size // 8
        for line in (lines or f):
            g.write(line)
            if g.tell() >= limit:
                break


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of one whole process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--data", type=Path, default=None, help="data folder (default: under the temp folder)")
    a = p.parse_args(argv)
    data = a.data or Path(tempfile.gettempdir()) / f"ragbridge-bench-traces-{a.size_mb}mb"
    data.mkdir(parents=True, exist_ok=True)
    spans, part = data / "spans.jsonl", data / "eighth.jsonl"
    if not spans.exists():
        write_spans(spans, a.size_mb)
    if not part.exists():
        eighth(spans, part)
    exe = shutil.which("ragbridge", path=str(Path(sys.executable).parent)) or "ragbridge"
    out = data / "out"
    out.mkdir(exist_ok=True)
    size, small = spans.stat().st_size / 2**20, part.stat().st_size / 2**20
    print(f"file: {size:,.0f} MiB; eighth: {small:,.0f} MiB; load before: {os.getloadavg()[0]:.1f}")
    big, eighth_ = f"({size:,.0f} MiB)", f"({small:,.0f} MiB)"

    def sample(path, out_name, *args):
        return [exe, "sample", path, *args, "--out", out / out_name]

    runs = [
        (f"sample --n 100 {big}", sample(spans, "a.jsonl", "--n", "100")),
        (f"sample --n 1000 {big}", sample(spans, "b.jsonl", "--n", "1000")),
        (f"sample --n 10000 {big}", sample(spans, "c.jsonl", "--n", "10000")),
        (f"sample --rate 0.01 {big}", sample(spans, "d.jsonl", "--rate", "0.01")),
        (f"sample --n 1000 --where user.id=u3 {big}",
         sample(spans, "e.jsonl", "--n", "1000", "--where", "user.id=u3")),
        (f"sample --n 1000 {eighth_}", sample(part, "f.jsonl", "--n", "1000")),
        (f"convert, every trace {eighth_}", [exe, "convert", part, out / "g.jsonl"]),
        (f"pandas read_json(lines=True) {eighth_}",
         [sys.executable, "-c", f"import pandas; pandas.read_json({str(part)!r}, lines=True)"]),
    ]
    print("| process | wall s | CPU s | peak RSS MiB | MiB/s |\n|---|---:|---:|---:|---:|")
    for name, cmd in runs:
        wall, cpu, rss = timed([str(c) for c in cmd])
        mib = small if name.endswith(eighth_) else size
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {rss:,.0f} | {mib / wall:.1f} |", flush=True)
    counts = {f.name: sum(1 for _ in open(f)) for f in sorted(out.iterdir())}
    print(f"cases written: {counts}; load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
