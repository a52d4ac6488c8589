#!/usr/bin/env python
"""Benchmark ragbridge's ranking metrics against pytrec_eval and ranx, end to end from Case objects.

    python benchmarks/bench_ranking.py              # 100,000 cases x 100 chunks (about 6 GB RAM per path)
    python benchmarks/bench_ranking.py --n 10000    # smaller

Each path runs in its own subprocess, so peak RSS is per path and every path pays the same
Case-building cost. Each subprocess: imports its library, builds the same N cases (fixed seed), runs
a warm-up on 20 cases (ranx's numba JIT, lazy imports), then times `--reps` end-to-end runs from the
Case list to per-case NumPy arrays and reports the median. Measured paths:

- ragbridge: ``ragbridge.native.ranking.evaluate(cases, [recall@10, precision@10, hit@10, mrr@10, ndcg@10,
  map@100])``, the one dispatcher the native backend scores through (``ragbridge run``).
- pytrec_eval: qrels/run dicts built from the cases (run scores ``n - position``, tie-free), then
  ``RelevanceEvaluator(qrels, {recall_10, P_10, success_10, recip_rank, ndcg_cut_10,
  map_cut_100}).evaluate(run)``, then per-query values read back into arrays (RR@10 derived as
  ``RR if RR >= 0.1 else 0``, exact).
- ranx: the same dicts, built in the same insertion order (``ranx.evaluate`` pairs dict inputs
  positionally), then ``ranx.evaluate(qrels, run, metrics, return_mean=False)``.

Data (shaped like the research notes' gen_data.py): each case retrieves 100 chunks with unique ids and
has 1-20 chunk-level labels with grades 1-3; each label is retrieved with p = 0.5 at an exponentially
skewed rank (mean 15), and every 50th case retrieves none of its labels. At this scale the means
match the notes' gen_data.py closely (nDCG@10 0.230 vs 0.232, MRR@10 0.443 vs 0.445 at 4,000 cases).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

METRICS = ["recall@10", "precision@10", "hit@10", "mrr@10", "ndcg@10", "map@100"]
PYTREC_MEASURES = {
    "recall@10": "recall_10",
    "precision@10": "P_10",
    "hit@10": "success_10",
    "mrr@10": "recip_rank",  # uncut in trec_eval; cut at 10 on read-back
    "ndcg@10": "ndcg_cut_10",
    "map@100": "map_cut_100",
}
RANX_METRICS = {
    "recall@10": "recall@10",
    "precision@10": "precision@10",
    "hit@10": "hit_rate@10",
    "mrr@10": "mrr@10",
    "ndcg@10": "ndcg@10",
    "map@100": "map@100",
}
PATHS = ("ragbridge", "pytrec_eval", "ranx")


def rss_mb() -> float:
    """Current resident set size (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def build_cases(n: int, n_chunks: int = 100, seed: int = 42):
    """N canonical Case objects, deterministic for a given seed."""
    from ragbridge.schema import Case

    rng = random.Random(seed)
    cases = []
    for q in range(n):
        n_rel = rng.randint(1, 20)
        doc_ids = [f"q{q}-d{j}" for j in rng.sample(range(10 * n_chunks), n_chunks + n_rel)]
        rel_ids, other_ids = doc_ids[:n_rel], doc_ids[n_rel:]
        relevant = {d: rng.randint(1, 3) for d in rel_ids}
        slots: list = [None] * n_chunks
        if q % 50 != 0:
            for d in rel_ids:
                if rng.random() < 0.5:
                    pos = min(int(rng.expovariate(1 / 15.0)), n_chunks - 1)  # mean rank 15
                    while slots[pos] is not None:  # next free slot, wrapping
                        pos = (pos + 1) % n_chunks
                    slots[pos] = d
        fill = iter(other_ids)
        contexts = [
            {"id": d if d is not None else next(fill), "score": (n_chunks - i) / 1e6}
            for i, d in enumerate(slots)
        ]
        keys = list(relevant)
        rng.shuffle(keys)  # insertion order not tied to rank
        cases.append(
            Case.model_validate(
                {
                    "id": f"q{q}",
                    "question": f"question {q}",
                    "contexts": contexts,
                    "relevant": {d: relevant[d] for d in keys},
                }
            )
        )
    return cases


def to_dicts(cases):
    """qrels and run dicts in case order; run scores n - position (tie-free, the Case ranking)."""
    qrels = {c.id: c.relevant for c in cases}
    run = {}
    for c in cases:
        ctx = c.contexts
        n = len(ctx)
        run[c.id] = {ch.id: float(n - i) for i, ch in enumerate(ctx)}
    return qrels, run


# --------------------------------------------------------------------------- the three paths


def run_ragbridge(cases, phases=None):
    from ragbridge.native.ranking import evaluate, prepare

    if phases is None:
        return evaluate(cases, METRICS)
    t0 = time.perf_counter()
    ranked = prepare(cases)
    t1 = time.perf_counter()
    out = evaluate(ranked, METRICS)
    phases.update(prepare=t1 - t0, kernels=time.perf_counter() - t1)
    return out


def run_pytrec_eval(cases, phases=None):
    import pytrec_eval

    t0 = time.perf_counter()
    qrels, run = to_dicts(cases)
    t1 = time.perf_counter()
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC_MEASURES.values()))
    res = evaluator.evaluate(run)
    t2 = time.perf_counter()
    del run, evaluator
    out = {}
    rows = [res[c.id] for c in cases]
    for name, measure in PYTREC_MEASURES.items():
        out[name] = np.fromiter((row[measure] for row in rows), dtype=np.float64, count=len(rows))
    rr = out["mrr@10"]
    out["mrr@10"] = np.where(rr >= 0.1, rr, 0.0)
    if phases is not None:
        phases.update(dicts=t1 - t0, evaluate=t2 - t1, read_back=time.perf_counter() - t2)
    return out


def run_ranx(cases, phases=None):
    import ranx

    t0 = time.perf_counter()
    qrels, run = to_dicts(cases)  # same insertion order: ranx pairs dict inputs positionally
    t1 = time.perf_counter()
    res = ranx.evaluate(qrels, run, list(RANX_METRICS.values()), return_mean=False)
    out = {name: np.asarray(res[m], dtype=np.float64) for name, m in RANX_METRICS.items()}
    if phases is not None:
        phases.update(dicts=t1 - t0, evaluate=time.perf_counter() - t1)
    return out


RUNNERS = {"ragbridge": run_ragbridge, "pytrec_eval": run_pytrec_eval, "ranx": run_ranx}


def worker(path: str, n: int, n_chunks: int, reps: int, seed: int, out_npz: str) -> dict:
    import warnings

    warnings.filterwarnings("ignore")  # ranx/numba type-safety warnings
    rss0 = rss_mb()
    if path == "ranx":
        import ranx  # noqa: F401
    elif path == "pytrec_eval":
        import pytrec_eval  # noqa: F401
    else:
        import ragbridge.native.ranking  # noqa: F401
    rss_import = rss_mb()
    fn = RUNNERS[path]

    t0 = time.perf_counter()
    warm_cases = build_cases(20, n_chunks, seed + 1)
    fn(warm_cases)  # JIT compile / lazy imports, excluded from timing
    warmup_s = time.perf_counter() - t0
    del warm_cases

    t0 = time.perf_counter()
    cases = build_cases(n, n_chunks, seed)
    build_s = time.perf_counter() - t0
    rss_data = rss_mb()
    peak_before = peak_mb()

    times, cpu = [], []
    result = None
    for _ in range(reps):
        result = None
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn(cases)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    peak = peak_mb()
    phases: dict = {}
    result = None
    result = fn(cases, phases)  # one more run, split into phases (after the peak was read)
    np.savez(out_npz, **{k: v for k, v in result.items()})
    return {
        "path": path,
        "n": n,
        "times": times,
        "median_s": statistics.median(times),
        "us_per_case": statistics.median(times) / n * 1e6,
        "cpu": cpu,
        "median_cpu_s": statistics.median(cpu),
        "peak_mb": peak,
        "peak_before_mb": peak_before,
        "rss_start_mb": rss0,
        "import_mb": rss_import - rss0,
        "data_mb": rss_data - rss_import,
        "working_mb": peak - rss_data,
        "build_s": build_s,
        "warmup_s": warmup_s,
        "means": {k: float(np.nanmean(v)) for k, v in result.items()},
        "phases": phases,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="number of cases (default 100000)")
    ap.add_argument("--chunks", type=int, default=100, help="retrieved chunks per case (default 100)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the set of path processes this many times, interleaved; the table pools "
                         "all reps (a busy shared machine drifts, interleaving keeps it fair)")
    ap.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    ap.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        info = worker(args.worker, args.n, args.chunks, args.reps, args.seed, args.out)
        print("RESULT " + json.dumps(info))
        return 0

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    import platform

    print(f"# ranking benchmark: {args.n:,} cases x {args.chunks} chunks, seed {args.seed}, "
          f"median of {args.reps} reps x {args.rounds} round(s), each path in its own process")
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("pytrec_eval", "ranx", "numba"):
        try:
            from importlib.metadata import version

            versions[mod] = version({"pytrec_eval": "pytrec-eval-terrier"}.get(mod, mod))
        except Exception:  # pragma: no cover
            versions[mod] = "?"
    print("# " + ", ".join(f"{k} {v}" for k, v in versions.items()) + f", {os.cpu_count()} cpus")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    runs: dict = {p: [] for p in paths}
    values = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for path in paths:
                out = os.path.join(tmp, f"{path}.npz")
                cmd = [sys.executable, __file__, "--worker", path, "--n", str(args.n), "--chunks",
                       str(args.chunks), "--reps", str(args.reps), "--seed", str(args.seed), "--out", out]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if proc.returncode != 0 or not line:
                    print(f"{path}: FAILED (exit {proc.returncode})\n{proc.stderr[-2000:]}")
                    continue
                runs[path].append(json.loads(line[-1][7:]))
                with np.load(out) as z:
                    values[path] = {k: z[k] for k in z.files}
    results = {}
    for path, rs in runs.items():
        if not rs:
            continue
        r = dict(rs[-1])
        r["times"] = [t for x in rs for t in x["times"]]
        r["cpu"] = [t for x in rs for t in x["cpu"]]
        r["median_s"] = statistics.median(r["times"])
        r["median_cpu_s"] = statistics.median(r["cpu"])
        r["us_per_case"] = r["median_s"] / args.n * 1e6
        r["peak_mb"] = max(x["peak_mb"] for x in rs)
        r["working_mb"] = max(x["working_mb"] for x in rs)
        results[path] = r
    if args.rounds > 1 and "ragbridge" in results:
        print()
        print("per round (median of its reps): " + "; ".join(
            f"round {i + 1}: " + ", ".join(
                f"{p} {statistics.median(runs[p][i]['times']):.2f}s" for p in paths if len(runs[p]) > i)
            for i in range(args.rounds)))

    print()
    print("| path | median s | us/case | reps s | CPU s (all threads) | peak RSS MB | import MB | data MB | "
          "working MB | build s | warm-up s |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for path, r in results.items():
        reps = ", ".join(f"{t:.2f}" for t in r["times"])
        print(f"| {path} | {r['median_s']:.3f} | {r['us_per_case']:.1f} | {reps} | {r['median_cpu_s']:.3f} | "
              f"{r['peak_mb']:,.0f} | "
              f"{r['import_mb']:+,.0f} | {r['data_mb']:,.0f} | {r['working_mb']:+,.0f} | "
              f"{r['build_s']:.1f} | {r['warmup_s']:.1f} |")

    print()
    print("phases of one extra run (s):")
    for path, r in results.items():
        print(f"  {path:12s} " + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()))

    print()
    print("means:")
    for m in METRICS:
        row = "  ".join(f"{p}={results[p]['means'][m]:.10f}" for p in results)
        print(f"  {m:13s} {row}")

    if "ragbridge" in values:
        print()
        print("agreement with ragbridge (max |diff| of means; max |diff| per case; cases differing > 1e-9):")
        base = values["ragbridge"]
        for p in values:
            if p == "ragbridge":
                continue
            mean_diff = max(abs(results[p]["means"][m] - results["ragbridge"]["means"][m]) for m in METRICS)
            case_diff = max(float(np.nanmax(np.abs(values[p][m] - base[m]))) for m in METRICS)
            n_diff = sum(int(np.sum(np.abs(values[p][m] - base[m]) > 1e-9)) for m in METRICS)
            print(f"  {p:12s} means {mean_diff:.3e}   per case {case_diff:.3e}   differing {n_diff}")

        rb = results["ragbridge"]
        print()
        print("ratios:")
        if "pytrec_eval" in results:
            pt = results["pytrec_eval"]
            print(f"  pytrec_eval_time / ragbridge_time = {pt['median_s'] / rb['median_s']:.2f}"
                  "  (target >= 2.0)")
        if "ranx" in results:
            rx = results["ranx"]
            print(f"  ranx_time / ragbridge_time        = {rx['median_s'] / rb['median_s']:.2f}"
                  "  (target >= 2.0)")
        cpu_ratios = [f"{p}_cpu / ragbridge_cpu = {results[p]['median_cpu_s'] / rb['median_cpu_s']:.2f}"
                      for p in ("pytrec_eval", "ranx") if p in results]
        if cpu_ratios:
            print("  (process CPU time, less sensitive to a busy machine: " + "; ".join(cpu_ratios) + ")")
        if "pytrec_eval" in results:
            print(f"  ragbridge_peak / pytrec_eval_peak = {rb['peak_mb'] / pt['peak_mb']:.3f}"
                  "  (target <= 1.0)")
            print(f"  ragbridge_working / pytrec_eval_working = "
                  f"{rb['working_mb']:+,.0f} MB / {pt['working_mb']:+,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
