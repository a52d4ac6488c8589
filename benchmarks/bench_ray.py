#!/usr/bin/env python
"""The Ray executor end to end: the native ranking metrics through ``ragbridge run --executor ray``,
and a judged run against a slow judge.

    python benchmarks/bench_ray.py                       # both parts: 1,000,000 queries x 100 docs, 400 calls
    python benchmarks/bench_ray.py --part native --n 100000 --rounds 2
    python benchmarks/bench_ray.py --part judged --cases 400 --latency 0.2 --concurrency 8

**native**: ``--n`` queries x ``--docs`` documents, the golden set of ``bench_native_cli.py`` (same
generator and seed: chunk ids only, 1-20 graded labels a query), written once into ``--data``.
Whole ``ragbridge run`` processes from that file to a run folder, interleaved over ``--rounds``
rounds, for recall@10, precision@10, hit@10, mrr, ndcg@10 and map:

- ``local``: the local executor (one process);
- ``ray x1``: ``--executor ray --ray-cpus 1``, a private local Ray cluster with one worker;
- ``ray x2``: ``--executor ray --ray-cpus 2``, two workers.

Each process is timed from its start to its exit (Ray's start and shutdown included); the driver's
peak RSS is read from its ``/proc/PID/status`` (``VmHWM``) while it runs: the driver holds one batch
of cases (``--batch-size``), whatever ``--n``. Printed: the median wall time of each, the speed-up of
two workers over one and over the local executor, and a check that every run's values are the
local run's (an order-free digest of case, metric and value of every score).

**judged**: ``--cases`` cases (the bundled example's, repeated with new ids), the rubric backend's
``answer_relevance`` (one judge call per case), the stub judge in its own process at ``--latency``
seconds, cache off, ``--concurrency`` the global bound, scored by the Ray executor with two actors
(made once for the run, whatever the number of batches: ``--batch-size`` cases a batch).
The ideal wall time is ``calls x latency / concurrency``; the target is at most 1.2x that
(exit status 1 otherwise; ``--no-check`` to only report). Ray's start-up is timed apart.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and the driver's peak RSS (MiB) of one whole process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        try:
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}):\n{err[-3000:]}")
    return wall, peak / 1024


def digest(run_dir: Path) -> tuple[int, int]:
    """(scores, an order-free digest of every score's case, metric and value)."""
    total, n = 0, 0
    with open(run_dir / "scores.jsonl", "rb") as f:
        for line in f:
            s = json.loads(line)
            key = f"{s['case_id']}\t{s['metric']}\t{s['value']!r}".encode()
            total = (total + int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")) % (1 << 64)
            n += 1
    return n, total


def part_native(args) -> bool:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_native_cli import generate

    data = Path(args.data) / f"native-{args.n}x{args.docs}"
    if not (data / "cases.jsonl").exists():
        generate(data, args.n, args.docs, 42)
    exe = shutil.which("ragbridge", path=str(Path(sys.executable).parent)) or shutil.which("ragbridge")
    if exe is None:
        raise SystemExit("the ragbridge console script is not installed (pip install -e '.[ray]')")
    kinds = {"local": [], "ray x1": ["--executor", "ray", "--ray-cpus", "1"],
             "ray x2": ["--executor", "ray", "--ray-cpus", "2"]}
    work = Path(tempfile.mkdtemp(prefix="rb-bench-ray-"))
    times: dict[str, list[float]] = {k: [] for k in kinds}
    peaks: dict[str, list[float]] = {k: [] for k in kinds}
    digests = {}
    try:
        for r in range(args.rounds):
            for kind, extra in kinds.items():
                out = work / f"{kind.replace(' ', '')}-{r}"
                cmd = [exe, "run", str(data / "cases.jsonl"), "--out", str(out), "--backend", "native",
                       "--no-progress", "--batch-size", str(args.batch_size), *extra]
                for m in METRICS:
                    cmd += ["--metric", m]
                wall, peak = timed(cmd)
                times[kind].append(wall)
                peaks[kind].append(peak)
                digests[(kind, r)] = digest(out)
                shutil.rmtree(out, ignore_errors=True)
                print(f"round {r + 1}: {kind}: {wall:.1f} s, driver peak {peak:.0f} MiB", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    same = len(set(digests.values())) == 1 and next(iter(digests.values()))[0] == args.n * len(METRICS)
    print(json.dumps({"part": "native", "queries": args.n, "docs": args.docs, "rounds": args.rounds,
                      "batch_size": args.batch_size, "load": os.getloadavg(),
                      "wall_s": {k: round(v, 2) for k, v in med.items()},
                      "walls": {k: [round(x, 1) for x in v] for k, v in times.items()},
                      "driver_peak_mib": {k: round(max(v)) for k, v in peaks.items()},
                      "speedup_2_over_1": round(med["ray x1"] / med["ray x2"], 3),
                      "speedup_2_over_local": round(med["local"] / med["ray x2"], 3),
                      "same_values": same}))
    return same


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
                           out=out / "run", executor=RayExecutor(actors=2), batch_size=args.batch_size)
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
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=2000)
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
