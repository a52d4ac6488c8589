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

``--kinds`` picks some of them (``ray x2`` alone: ``--kinds 'ray x2'``). Each process is timed from
its start to its exit (Ray's start and shutdown included); the driver's peak RSS is read from its
``/proc/PID/status`` (``VmHWM``) while it runs: the driver streams one batch of cases
(``--batch-size``) to the workers and their scores back to the run folder, whatever ``--n``, so its
peak must not grow with ``--n``. Printed: the median wall time of each, the speed-up of two workers
over one and over the local executor, and a check that every run's values are the first kind's (an
order-free digest of case, metric and value of every score).

``--analyses`` (comma-separated, default none): commands run where the last Ray run's folder is,
as a user runs them after ``--executor ray`` (no gathering from the workers: the folder holds every
score), each timed with its peak RSS: ``gate`` (``--config`` of a few ranking rules, the local run
as ``--baseline`` when it was made, ``--json``), ``diff`` (the local run against the Ray run: every
difference 0), ``report-json`` (``report --format json``).

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


def timed(cmd: list[str], stdout: "Path | None" = None) -> tuple[float, float]:
    """Wall seconds and the driver's peak RSS (MiB) of one whole process (its output to ``stdout``)."""
    t0 = time.perf_counter()
    sink = open(stdout, "w") if stdout else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, text=True)
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
    if stdout:
        sink.close()
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
    wanted = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(wanted) - set(kinds))
    if unknown or not wanted:
        raise SystemExit(f"--kinds: unknown {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(kinds)}")
    kinds = {k: v for k, v in kinds.items() if k in wanted}
    analyses = [a.strip() for a in args.analyses.split(",") if a.strip()]
    work = Path(tempfile.mkdtemp(prefix="rb-bench-ray-"))
    times: dict[str, list[float]] = {k: [] for k in kinds}
    peaks: dict[str, list[float]] = {k: [] for k in kinds}
    digests = {}
    kept: dict[str, Path] = {}
    analysed: dict[str, dict] = {}
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
                if kind in kept:
                    shutil.rmtree(kept[kind], ignore_errors=True)
                kept[kind] = out
                print(f"round {r + 1}: {kind}: {wall:.1f} s, driver peak {peak:.0f} MiB", flush=True)
        ray_run = next((kept[k] for k in ("ray x2", "ray x1") if k in kept), None)
        if analyses and ray_run is None:
            raise SystemExit("--analyses needs a Ray run (--kinds with ray x1 or ray x2)")
        for name in analyses:
            analysed[name] = analyse(exe, name, ray_run, kept.get("local"), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    same = len(set(digests.values())) == 1 and next(iter(digests.values()))[0] == args.n * len(METRICS)
    speedups = {f"speedup_{a}_over_{b}".replace(" ", ""): round(med[b] / med[a], 3)
                for a, b in (("ray x2", "ray x1"), ("ray x2", "local")) if a in med and b in med}
    print(json.dumps({"part": "native", "queries": args.n, "docs": args.docs, "rounds": args.rounds,
                      "batch_size": args.batch_size, "load": os.getloadavg(),
                      "wall_s": {k: round(v, 2) for k, v in med.items()},
                      "walls": {k: [round(x, 1) for x in v] for k, v in times.items()},
                      "driver_peak_mib": {k: round(max(v)) for k, v in peaks.items()},
                      **speedups, "same_values": same, "analyses": analysed}))
    return same and all(a["ok"] for a in analysed.values())


GATES = """\
[defaults]
backend = "native"

[[gate]]
check = "ndcg@10 >= 0.1"

[[gate]]
check = "share(mrr >= 0.5) >= 0.1"
"""


def analyse(exe: str, name: str, run: Path, local: "Path | None", work: Path) -> dict:
    """One analysis command over a Ray run's folder: wall seconds, peak RSS and whether it did what it
    should (``gate``: every rule held, exit 0, the local run its baseline when there is one; ``diff``:
    the local run and the Ray run the same, every mean difference 0)."""
    if name == "gate":
        drop = '\n[[gate]]\ncheck = "recall@10 drop <= 0"\n' if local else ""
        (work / "gates.toml").write_text(GATES + drop)
        cmd = [exe, "gate", str(run), "--config", str(work / "gates.toml"), "--json"]
        cmd += ["--baseline", str(local)] if local else []
    elif name == "diff":
        if local is None:
            raise SystemExit("--analyses diff needs the local run (--kinds with local)")
        cmd = [exe, "diff", str(local), str(run), "--json"]
    elif name == "report-json":
        cmd = [exe, "report", str(run), "--format", "json", "--out", str(work / "report.json")]
    else:
        raise SystemExit(f"--analyses: unknown {name!r}; known: gate, diff, report-json")
    out = work / f"{name}.out"
    wall, peak = timed(cmd, stdout=out)
    ok = True
    if name == "diff":
        ok = _all_zero(json.loads(out.read_text()))
    print(f"{name} on the Ray run's folder: {wall:.1f} s, peak {peak:.0f} MiB, ok {ok}", flush=True)
    return {"wall_s": round(wall, 2), "peak_mib": round(peak), "ok": ok}


def _all_zero(diff: dict) -> bool:
    """Whether ``diff --json`` found the two runs the same: no case worse or better, every mean
    difference 0."""
    totals = diff["totals"]
    return totals["worse"] == 0 and totals["better"] == 0 and all(s["delta"] == 0 for s in diff["summary"])


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
    p.add_argument("--kinds", default="local,ray x1,ray x2", help="native: executors to run, comma-separated")
    p.add_argument("--analyses", default="", help="native: gate, diff, report-json over the Ray run's folder")
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
