"""Warm re-runs: a judged run re-run into a new folder, cold against warm, as whole processes.

Two parts (``--part``): ``deepeval`` (below) and ``libraries``.

**libraries**: the bundled example (53 cases) judged by RAGAS, DeepEval, TruLens and Phoenix
(faithfulness), against the native run of the same cases. After one cold run of all four (which
fills the judge cache and the score cache) and one of the first three (a second cache), ``--rounds``
rounds, interleaved, of three whole processes, each into a new folder:

* native: ``ragbridge run golden.jsonl`` (the native backend's default metrics);
* warm: the four libraries, every score in the score cache (no judge call);
* partly cached: the four libraries on a fresh copy of the three-library caches, so Phoenix alone has
  work (its judge calls made against the stub judge).

Printed per process kind: the median wall and CPU time (user + system, from ``wait4``) and which of
the libraries' packages the process imported (read from ``sys.modules`` at its exit); then warm /
native (target at most ``--max-ratio``, 1.5, on wall and CPU). Exit status 1 if the target is
missed, the warm run imported a library, or the partly cached one imported another than Phoenix.

    python benchmarks/bench_warm_rerun.py --part libraries [--rounds 5]

**deepeval**: three ``ragbridge run`` processes score the same golden set with DeepEval's
faithfulness against the stub judge (a separate process on 127.0.0.1), each into a new run folder,
with one judge cache and score cache in a temporary directory:

* cold: empty caches, every judge call made and every score stored in the score cache;
* warm: the score cache holds every score, so the library is not called at all;
* judge-cache only (``--no-score-cache``): DeepEval runs again, every request a judge-cache hit,
  which is what a warm re-run was before the score cache.

The golden set is the bundled example repeated to ``--cases`` cases (ids, questions, answers and
chunk texts made unique, so every case is its own judge calls: the cold run is cold). Prints one
JSON object: each process's wall time, the judge's counts, the ratios cold / warm and cold /
judge-cache only, and whether the three runs' values are identical. Exit status 1 if cold / warm
is under ``--min-ratio`` (20) or a value differs.

    python benchmarks/bench_warm_rerun.py --part deepeval [--cases 2000] [--min-ratio 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"

from ragbridge.testing.process import cli_showing_imports, imported_libraries  # noqa: E402
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


#: the libraries' own packages (phoenix's namespace package ``phoenix`` holds no code)
LIBRARY_MODULES = {"ragas": "ragas", "deepeval": "deepeval", "trulens": "trulens", "phoenix": "phoenix.evals"}
CLI_SHOWING_IMPORTS = cli_showing_imports(LIBRARY_MODULES)


def process(args: list, cwd: Path, env: dict) -> dict:
    """One whole ``ragbridge`` process: wall and CPU seconds, and the libraries it imported."""
    started = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CLI_SHOWING_IMPORTS, *map(str, args)], cwd=cwd, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{args}: exit {p.returncode}\n{stderr[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "imported": imported_libraries(stderr)}


def part_libraries(a) -> bool:
    libraries = list(LIBRARY_MODULES)
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    with tempfile.TemporaryDirectory() as tmp, StubJudgeProcess() as stub:
        work = Path(tmp)
        judged = ["--metric", "faithfulness", "--judge-model", "gpt-4o-mini",
                  "--judge-base-url", stub.base_url, "--no-progress", "--json"]

        def libs(names):
            return [x for b in names for x in ("--backend", b)]

        caches = {"all": work / "all", "three": work / "three"}
        for name, names in (("all", libraries), ("three", libraries[:-1])):
            process(["run", EXAMPLE, "--out", work / f"cold-{name}", *libs(names), *judged,
                     "--cache-path", caches[name] / "judge-cache.sqlite"], work, env)
        runs: dict[str, list[dict]] = {"native": [], "warm": [], "partly cached": []}
        for r in range(a.rounds):
            runs["native"].append(process(["run", EXAMPLE, "--out", work / f"native-{r}", "--no-progress",
                                           "--json"], work, env))
            runs["warm"].append(process(["run", EXAMPLE, "--out", work / f"warm-{r}", *libs(libraries),
                                         *judged, "--cache-path", caches["all"] / "judge-cache.sqlite"],
                                        work, env))
            fresh = work / f"three-{r}"
            shutil.copytree(caches["three"], fresh)
            runs["partly cached"].append(process(["run", EXAMPLE, "--out", work / f"partly-{r}",
                                                  *libs(libraries), *judged,
                                                  "--cache-path", fresh / "judge-cache.sqlite"], work, env))
    summary = {kind: {"wall_s": round(statistics.median(x["wall"] for x in xs), 3),
                      "cpu_s": round(statistics.median(x["cpu"] for x in xs), 3),
                      "walls": [round(x["wall"], 2) for x in xs],
                      "imported": sorted({b for x in xs for b in x["imported"]})}
               for kind, xs in runs.items()}
    ratio_wall = summary["warm"]["wall_s"] / summary["native"]["wall_s"]
    ratio_cpu = summary["warm"]["cpu_s"] / summary["native"]["cpu_s"]
    ok = (max(ratio_wall, ratio_cpu) <= a.max_ratio and summary["warm"]["imported"] == []
          and summary["partly cached"]["imported"] == [libraries[-1]])
    n_cases = sum(1 for x in EXAMPLE.read_text().splitlines() if x.strip())
    print(json.dumps({"part": "libraries", "cases": n_cases, "rounds": a.rounds, "load": os.getloadavg(),
                      **summary, "warm_over_native_wall": round(ratio_wall, 2),
                      "warm_over_native_cpu": round(ratio_cpu, 2), "target": a.max_ratio, "ok": ok},
                     indent=2))
    return ok


def part_deepeval(a) -> bool:
    with tempfile.TemporaryDirectory() as tmp, StubJudgeProcess() as stub:
        work = Path(tmp)
        cases = work / "golden.jsonl"
        golden(cases, a.cases)
        cold = run(work, cases, "cold", stub.base_url)
        warm = run(work, cases, "warm", stub.base_url)
        judge_only = run(work, cases, "judge-cache-only", stub.base_url, "--no-score-cache")
    identical = cold["_values"] == warm["_values"] == judge_only["_values"]
    result = {
        "part": "deepeval", "cases": a.cases, "load": os.getloadavg(),
        "cold": {k: v for k, v in cold.items() if k != "_values"},
        "warm": {k: v for k, v in warm.items() if k != "_values"},
        "judge_cache_only": {k: v for k, v in judge_only.items() if k != "_values"},
        "cold_over_warm": round(cold["seconds"] / warm["seconds"], 1),
        "cold_over_judge_cache_only": round(cold["seconds"] / judge_only["seconds"], 2),
        "values_identical": identical,
    }
    print(json.dumps(result, indent=2))
    return identical and result["cold_over_warm"] >= a.min_ratio


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["deepeval", "libraries", "both"], default="both")
    p.add_argument("--cases", type=int, default=2000)
    p.add_argument("--min-ratio", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-ratio", type=float, default=1.5)
    a = p.parse_args(argv)
    ok = True
    if a.part in ("libraries", "both"):
        ok = part_libraries(a) and ok
    if a.part in ("deepeval", "both"):
        ok = part_deepeval(a) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
