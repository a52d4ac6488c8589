"""A library version in an environment of its own (``--backend ragas==0.4.3``): what it costs, as whole
processes, against the stub judge (a separate process on 127.0.0.1).

Three parts (``--part``, default all):

* **build**: ``ragbridge environments build ragas==0.3.9`` (and 0.4.3) into an empty cache folder,
  uv's own cache warm (one build before, not timed): the wall time of each build, ``--rounds`` times.
  Target: under ``--max-build`` (30) seconds.
* **overhead**: the bundled example (53 cases, ``--metric``, default faithfulness) scored by the
  installed RAGAS (``--backend ragas``) and by the same version in its environment
  (``--backend ragas==0.4.3``, the environment made), each with the judge cache warm and the score
  cache off (the library does all its work, no judge call leaves), ``--rounds`` rounds, interleaved.
  Target: the isolated run's median wall time at most ``--max-overhead`` (1.0) seconds over the
  installed one's.
* **rerun**: a fully cached re-run (judge cache and score cache warm) of ``--backend ragas==0.4.3``
  into a new folder, against a native run of the same example (``ragbridge run golden.jsonl``),
  ``--rounds`` rounds, interleaved. Target: at most ``--max-ratio`` (1.5) x the native run's median.

Prints one JSON object (medians of wall and CPU time, the worker's CPU counted with its run's, every
round's time, the machine's load) and exits 1 if a target is
missed. uv is the one ragbridge finds (``RAGBRIDGE_UV``, the ``uv`` package, ``PATH``).

    python benchmarks/bench_environments.py [--part build|overhead|rerun] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"

from ragbridge.testing.stub_judge import StubJudgeProcess  # noqa: E402

CLI = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()"]


#: CPU seconds (user + system) of each process measured, with the worker it started, by its wall time
CPU: dict[float, float] = {}


def process(args: list, cwd: Path, env: dict) -> float:
    """One whole ``ragbridge`` process; its wall time (its CPU time, its worker's included, in `CPU`)."""
    started = time.perf_counter()
    p = subprocess.Popen([*CLI, *map(str, args)], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    stderr = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{args}: exit {code}\n{stderr[-2000:]}")
    CPU[wall] = usage.ru_utime + usage.ru_stime
    return wall


def part_build(a, work: Path) -> dict:
    env = dict(os.environ)
    for version in ("0.3.9", "0.4.3"):  # uv's cache filled (not timed)
        process(["environments", "build", f"ragas=={version}"], work,
                {**env, "RAGBRIDGE_CACHE_DIR": str(work / f"warmup-{version}")})
    times: dict[str, list[float]] = {"ragas==0.3.9": [], "ragas==0.4.3": []}
    for r in range(a.rounds):
        for name in times:
            times[name].append(process(["environments", "build", name], work,
                                       {**env, "RAGBRIDGE_CACHE_DIR": str(work / f"build-{r}-{name}")}))
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    return {"build_s": medians, "rounds": {k: [round(x, 2) for x in v] for k, v in times.items()},
            "target_s": a.max_build, "ok": max(medians.values()) < a.max_build}


def part_overhead(a, work: Path, stub_url: str) -> dict:
    env = {**os.environ, "RAGBRIDGE_CACHE_DIR": str(work / "cache"), "OPENAI_API_KEY": "sk-bench"}
    judged = ["--metric", a.metric, "--judge-model", "stub-judge", "--judge-base-url", stub_url,
              "--no-progress", "--no-score-cache", "--cache-path", work / "judge.sqlite"]
    for name in ("ragas", "ragas==0.4.3"):  # the environment made, the judge cache filled (not timed)
        process(["run", EXAMPLE, "--out", work / f"warmup-{name}", "--backend", name, *judged], work, env)
    times: dict[str, list[float]] = {"ragas": [], "ragas==0.4.3": []}
    for r in range(a.rounds):
        for name in times:
            times[name].append(process(["run", EXAMPLE, "--out", work / f"o-{r}-{name}", "--backend", name,
                                        *judged], work, env))
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    cpu = {k: round(statistics.median(CPU[x] for x in v), 2) for k, v in times.items()}
    added = round(medians["ragas==0.4.3"] - medians["ragas"], 2)
    rounds = {k: [round(x, 2) for x in v] for k, v in times.items()}
    return {"metric": a.metric, "wall_s": medians, "cpu_s": cpu, "rounds": rounds, "added_s": added,
            "added_cpu_s": round(cpu["ragas==0.4.3"] - cpu["ragas"], 2), "target_s": a.max_overhead,
            "ok": added <= a.max_overhead}


def part_rerun(a, work: Path, stub_url: str) -> dict:
    env = {**os.environ, "RAGBRIDGE_CACHE_DIR": str(work / "cache"), "OPENAI_API_KEY": "sk-bench"}
    judged = ["--backend", "ragas==0.4.3", "--metric", a.metric, "--judge-model", "stub-judge",
              "--judge-base-url", stub_url, "--no-progress", "--cache-path", work / "rerun.sqlite"]
    process(["run", EXAMPLE, "--out", work / "rerun-cold", *judged], work, env)  # both caches filled
    times: dict[str, list[float]] = {"native": [], "cached ragas==0.4.3": []}
    for r in range(a.rounds):
        native = ["run", EXAMPLE, "--out", work / f"n-{r}", "--no-progress"]
        times["native"].append(process(native, work, env))
        times["cached ragas==0.4.3"].append(process(["run", EXAMPLE, "--out", work / f"c-{r}", *judged],
                                                    work, env))
    medians = {k: round(statistics.median(v), 2) for k, v in times.items()}
    ratio = round(medians["cached ragas==0.4.3"] / medians["native"], 2)
    return {"wall_s": medians, "rounds": {k: [round(x, 2) for x in v] for k, v in times.items()},
            "ratio": ratio, "target": a.max_ratio, "ok": ratio <= a.max_ratio}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["build", "overhead", "rerun", "all"], default="all")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--metric", default="faithfulness")
    p.add_argument("--max-build", type=float, default=30.0)
    p.add_argument("--max-overhead", type=float, default=1.0)
    p.add_argument("--max-ratio", type=float, default=1.5)
    a = p.parse_args(argv)
    result: dict = {"rounds": a.rounds, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp, StubJudgeProcess() as stub:
        work = Path(tmp)
        if a.part in ("build", "all"):
            result["build"] = part_build(a, work)
        if a.part in ("overhead", "all"):
            result["overhead"] = part_overhead(a, work, stub.base_url)
        if a.part in ("rerun", "all"):
            result["rerun"] = part_rerun(a, work, stub.base_url)
    result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    return 0 if all(v["ok"] for v in result.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
