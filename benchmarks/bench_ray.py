#!/usr/bin/env python
"""The Ray executor: native ranking metrics at scale, and a judged run against a slow judge.

    python benchmarks/bench_ray.py                       # both parts: 1,000,000 queries x 100 docs, 400 calls
    python benchmarks/bench_ray.py --part native --n 100000
    python benchmarks/bench_ray.py --part judged --cases 400 --latency 0.2 --concurrency 8

**native**: ``--n`` queries x ``--docs`` documents (fixed seed; data as in bench_native_cli.py: 1-20
labels with grades 1-3, each retrieved with p = 0.5 at an exponentially skewed rank, every 50th
query retrieves none), written once as Parquet files in the executor's block layout
(`ragbridge.run.ray_executor.native_table`: chunk ids, label ids and grades). Both sides run the
executor's batch function (`native_batch`, i.e. `ragbridge.native.ranking.evaluate` over a block)
for recall@10, precision@10, hit@10, mrr, ndcg@10 and map, from the files on disk to per-query
results on disk (Parquet):

- ``local``: one process, block after block;
- ``ray``: a private local Ray cluster with two CPUs (two workers), ``read_parquet`` ->
  ``map_batches(native_batch)`` -> ``write_parquet``. Ray's start-up is timed apart.

Printed: both wall times, the speed-up and the scaling efficiency ``local / (2 x ray)`` (1.0 is
perfect), and a check that both give the same values.

**judged**: ``--cases`` cases (the bundled example's, repeated with new ids), the rubric backend's
``answer_relevance`` (one judge call per case), the stub judge in its own process at ``--latency``
seconds, cache off, ``--concurrency`` the global bound, scored by the Ray executor with two actors.
The ideal wall time is ``calls x latency / concurrency``; the target is at most 1.2x that
(exit status 1 otherwise; ``--no-check`` to only report). Ray's start-up is timed apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]


def write_data(folder: Path, n: int, docs: int, rows_per_file: int = 50_000, seed: int = 42) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for part, start in enumerate(range(0, n, rows_per_file)):
        m = min(rows_per_file, n - start)
        qid = np.arange(start, start + m)
        # retrieved: docs unique ids per query, "q<qid>d<j>" with j in 0..999 drawn without repeats
        perm = np.argsort(rng.random((m, 1000)), axis=1)[:, :docs]
        flat = pc.binary_join_element_wise(pc.cast(pa.array(np.repeat(qid, docs)), pa.string()),
                                           pc.cast(pa.array(perm.ravel()), pa.string()), "d")
        ctx_ids = pa.ListArray.from_arrays(pa.array(np.arange(0, m * docs + 1, docs, dtype=np.int32)), flat)
        ctx_sources = pa.ListArray.from_arrays(pa.array(np.arange(0, m * docs + 1, docs, dtype=np.int32)),
                                               pa.nulls(m * docs, pa.string()))
        # labels: 1-20 per query; each is retrieved with p = 0.5 at a skewed rank (mean 15)
        n_labels = rng.integers(1, 21, m)
        total = int(n_labels.sum())
        owner = np.repeat(np.arange(m), n_labels)
        retrieved = (rng.random(total) < 0.5) & ((qid[owner] % 50) != 0)
        rank = np.minimum(rng.exponential(15, total).astype(np.int64), docs - 1)
        doc = np.where(retrieved, perm[owner, rank], 1000 + np.arange(total))  # not retrieved: beyond 999
        rel_flat = pc.binary_join_element_wise(pc.cast(pa.array(qid[owner]), pa.string()),
                                               pc.cast(pa.array(doc), pa.string()), "d")
        # a label retrieved twice (two labels drew the same rank) is one label: keep the first
        offsets = np.r_[0, np.cumsum(n_labels)].astype(np.int32)
        rel_ids = pa.ListArray.from_arrays(pa.array(offsets), rel_flat)
        rel_grades = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(1, 4, total)))
        table = pa.table({"id": pc.cast(pa.array(qid), pa.string()), "ctx_ids": ctx_ids,
                          "ctx_sources": ctx_sources, "rel_ids": rel_ids, "rel_grades": rel_grades})
        pq.write_table(table, folder / f"part-{part:05d}.parquet", row_group_size=8192)


def native_local(data: Path, out: Path) -> float:
    import pyarrow.parquet as pq

    from ragbridge.run.ray_executor import native_batch

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for f in sorted(data.glob("*.parquet")):
        pf = pq.ParquetFile(f)
        results = [native_batch(pf.read_row_group(i), METRICS) for i in range(pf.num_row_groups)]
        import pyarrow as pa

        pq.write_table(pa.concat_tables(results), out / f.name)
    return time.perf_counter() - t0


def native_ray(data: Path, out: Path) -> tuple[float, float]:
    from ragbridge.run.ray_executor import native_batch, ray_session

    t0 = time.perf_counter()
    with ray_session(num_cpus=2, object_store_memory=2 << 30) as ray:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        started = time.perf_counter()
        ds = ray.data.read_parquet(str(data)).map_batches(
            native_batch, batch_format="pyarrow", batch_size=8192, fn_kwargs={"metrics": METRICS})
        ds.write_parquet(str(out))
        elapsed = time.perf_counter() - started
    return started - t0, elapsed


def same_values(a: Path, b: Path) -> float:
    import numpy as np
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    ta, tb = ta.sort_by("id"), tb.sort_by("id")
    assert ta.column("id") == tb.column("id")
    worst = 0.0
    for i in range(len(METRICS)):
        x, y = ta.column(f"m{i}").to_numpy(), tb.column(f"m{i}").to_numpy()
        assert np.array_equal(np.isnan(x), np.isnan(y))
        worst = max(worst, float(np.nanmax(np.abs(x - y))) if x.size else 0.0)
    return worst


def part_native(args) -> bool:
    data = Path(args.data) / f"native-{args.n}x{args.docs}"
    if not (data / "done").exists():
        shutil.rmtree(data, ignore_errors=True)
        t = time.perf_counter()
        write_data(data, args.n, args.docs)
        (data / "done").write_text("")
        print(f"data: {args.n:,} queries x {args.docs} docs written in {time.perf_counter() - t:.1f} s")
    work = Path(tempfile.mkdtemp(prefix="rb-bench-ray-"))
    try:
        local = native_local(data, work / "local")
        start, remote = native_ray(data, work / "ray")
        worst = same_values(work / "local", work / "ray")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    eff = local / (2 * remote)
    print(json.dumps({"part": "native", "queries": args.n, "docs": args.docs, "local_s": round(local, 2),
                      "ray_s": round(remote, 2), "ray_start_s": round(start, 2),
                      "speedup": round(local / remote, 3), "scaling_efficiency": round(eff, 3),
                      "max_abs_difference": worst}))
    return True


def part_judged(args) -> bool:
    from ragbridge import evaluate, load_cases
    from ragbridge.judge import JudgeConfig
    from ragbridge.run.ray_executor import RayExecutor, ray_session
    from ragbridge.testing.stub_judge import StubJudgeProcess

    base = load_cases(ROOT / "examples" / "support-bot" / "golden.jsonl")
    cases = [c.model_copy(update={"id": f"{c.id}-{i}", "question": f"{c.question} ({i})"})
             for i in range(args.cases // len(base) + 1) for c in base][: args.cases]
    with StubJudgeProcess(latency=args.latency) as stub, ray_session(num_cpus=2) as _:
        cfg = JudgeConfig(model="gpt-4o-mini", base_url=stub.base_url, cache_mode="off",
                          max_concurrency=args.concurrency)
        out = Path(tempfile.mkdtemp(prefix="rb-bench-judged-"))
        try:
            t0 = time.perf_counter()
            run = evaluate(cases, backends=["rubric"], metrics=["answer_relevance"], judge=cfg,
                           out=out / "run", executor=RayExecutor(actors=2))
            wall = time.perf_counter() - t0
            audit = (out / "run" / "judge-audit.jsonl").read_text()
            calls = [json.loads(line) for line in audit.splitlines()]
        finally:
            shutil.rmtree(out, ignore_errors=True)
    # the judged span: from the start of the first judge call to the end of the last (the audit log's
    # times are each call's end), i.e. without Ray's and the actors' start-up
    ends = [datetime.fromisoformat(c["time"].replace("Z", "+00:00")).timestamp() for c in calls]
    span = max(ends) - min(e - c["seconds"] for e, c in zip(ends, calls))
    ideal = len(calls) * args.latency / args.concurrency
    ok = span <= 1.2 * ideal
    print(json.dumps({"part": "judged", "cases": len(cases), "calls": len(calls), "latency_s": args.latency,
                      "concurrency": args.concurrency, "judged_span_s": round(span, 2),
                      "ideal_s": round(ideal, 2), "ratio": round(span / ideal, 3), "target": 1.2, "ok": ok,
                      "end_to_end_s": round(wall, 2), "startup_s": round(wall - span, 2),
                      "errored": run.manifest.counts.get("errored")}))
    return ok or args.no_check


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["native", "judged", "both"], default="both")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--docs", type=int, default=100)
    p.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "ragbridge-bench-ray"))
    p.add_argument("--cases", type=int, default=400)
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--no-check", action="store_true")
    args = p.parse_args()
    ok = True
    if args.part in ("judged", "both"):
        ok = part_judged(args) and ok
    if args.part in ("native", "both"):
        ok = part_native(args) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
