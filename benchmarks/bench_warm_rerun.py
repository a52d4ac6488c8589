"""Warm re-runs: a judged run re-run into a new folder, cold against warm, as whole processes.

Three ``ragbridge run`` processes score the same golden set with DeepEval's faithfulness against the
stub judge (a separate process on 127.0.0.1), each into a new run folder, with one judge cache and
score cache in a temporary directory:

* cold: empty caches, every judge call made and every score stored in the score cache;
* warm: the score cache holds every score, so the library is not called at all;
* judge-cache only (``--no-score-cache``): DeepEval runs again, every request a judge-cache hit,
  which is what a warm re-run was before the score cache.

The golden set is the bundled example repeated to ``--cases`` cases (ids, questions, answers and
chunk texts made unique, so every case is its own judge calls: the cold run is cold). Prints one
JSON object: each process's wall time, the judge's counts, the ratios cold / warm and cold /
judge-cache only, and whether the three runs' values are identical. Exit status 1 if cold / warm
is under ``--min-ratio`` (20) or a value differs.

    python benchmarks/bench_warm_rerun.py [--cases 2000] [--min-ratio 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"

from ragbridge.testing.stub_judge import StubJudgeProcess  # noqa: E402


def golden(path: Path, n: int) -> None:
    base = [json.loads(x) for x in EXAMPLE.read_text().splitlines() if x.strip()]
    base = [c for c in base if c.get("answer") and c.get("contexts")]
    with path.open("w") as f:
        for i in range(n):
            case = dict(base[i % len(base)])
            case["id"] = f"{case['id']}-{i}"
            case["question"] = f"{case['question']} (variant {i})"
            case["answer"] = f"{case['answer']} (variant {i})"
            case["contexts"] = [{**ch, "text": f"{ch.get('text', '')} (variant {i})"}
                                for ch in case["contexts"]]
            f.write(json.dumps(case) + "\n")


def run(work: Path, cases: Path, out: str, base_url: str, *extra: str) -> dict:
    cmd = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run", str(cases),
           "--out", str(work / out), "--backend", "deepeval", "--metric", "faithfulness",
           "--judge-model", "gpt-4o-mini", "--judge-base-url", base_url, "--no-progress", "--json", *extra]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    started = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if p.returncode != 0:
        raise SystemExit(f"{out}: exit {p.returncode}\n{p.stderr[-2000:]}")
    counts = json.loads((work / out / "run.json").read_text())["counts"]
    values = {}
    for line in (work / out / "scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        values[s["case_id"]] = (s["value"], s.get("native_value"), s.get("passed"), s.get("reason"))
    return {"seconds": round(seconds, 2), "judge": counts.get("judge"),
            "score_cache": counts.get("score_cache"), "scores": len(values), "_values": values}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--min-ratio", type=float, default=20.0)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, StubJudgeProcess() as stub:
        work = Path(tmp)
        cases = work / "golden.jsonl"
        golden(cases, a.cases)
        cold = run(work, cases, "cold", stub.base_url)
        warm = run(work, cases, "warm", stub.base_url)
        judge_only = run(work, cases, "judge-cache-only", stub.base_url, "--no-score-cache")
    identical = cold["_values"] == warm["_values"] == judge_only["_values"]
    result = {
        "cases": a.cases, "load": os.getloadavg(),
        "cold": {k: v for k, v in cold.items() if k != "_values"},
        "warm": {k: v for k, v in warm.items() if k != "_values"},
        "judge_cache_only": {k: v for k, v in judge_only.items() if k != "_values"},
        "cold_over_warm": round(cold["seconds"] / warm["seconds"], 1),
        "cold_over_judge_cache_only": round(cold["seconds"] / judge_only["seconds"], 2),
        "values_identical": identical,
    }
    print(json.dumps(result, indent=2))
    return 0 if identical and result["cold_over_warm"] >= a.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
