"""Start-up: the commands a user waits on before any work, as whole processes.

Each round runs, in turn, one process of each:

* ``import``: ``python -c "import ragbridge"`` (what a notebook's first cell pays);
* ``help``: ``ragbridge --help``;
* ``run-help``: ``ragbridge run --help``;
* ``native-run``: ``ragbridge run examples/support-bot/golden.jsonl --out DIR --no-progress`` (the
  bundled 53-case example, native metrics, into a new folder each time).

The console script is the installed one (``.venv/bin/ragbridge`` beside the Python running this),
so the measurement includes the entry point's own start. For each command it prints the median and
the best of the rounds' wall time and CPU time (user + system, from ``wait4``), and the one-minute
load average before and after. Exit status 1 if a median CPU time is over its target (``--help``
0.3 s, the native run 0.5 s) and ``--check`` is given: CPU, because wall time on a shared machine
moves with its load.

The warm-up round writes the byte code of both checkouts (``__pycache__``, as an installed package
has it) even where ``PYTHONDONTWRITEBYTECODE`` is set: otherwise every process would compile
ragbridge's sources again and the figures would be the compiler's.

``--baseline DIR`` (another checkout of ragbridge, e.g. a worktree of an earlier commit) runs the
same commands on that code too, in the same rounds, interleaved: its ``src`` and ``plugins`` first on
``PYTHONPATH``, the console script replaced by ``python -c "from ragbridge.commands import run_cli;
run_cli()"`` (for both, so the two differ only in the code).

    python benchmarks/bench_startup.py [--rounds 10] [--check] [--baseline ../main]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"
TARGETS = {"help": 0.3, "native-run": 0.5}


def _script() -> str:
    here = Path(sys.executable).parent / "ragbridge"
    return str(here) if here.exists() else shutil.which("ragbridge") or "ragbridge"


def commands(work: Path, script: list[str] | None = None) -> dict[str, list[str]]:
    script = script or [_script()]
    return {
        "import": [sys.executable, "-c", "import ragbridge"],
        "help": [*script, "--help"],
        "run-help": [*script, "run", "--help"],
        "native-run": [*script, "run", str(EXAMPLE), "--out", str(work / "run-{n}"), "--no-progress"],
    }


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one process; its output is discarded."""
    started = time.perf_counter()
    with open(os.devnull, "wb") as null:
        pid = os.posix_spawn(cmd[0], cmd, env or dict(os.environ), file_actions=[
            (os.POSIX_SPAWN_DUP2, null.fileno(), 1), (os.POSIX_SPAWN_DUP2, null.fileno(), 2)])
        _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--check", action="store_true", help="exit 1 if a median misses its target")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure in the same rounds")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    launcher = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()"]
    variants: dict[str, tuple[dict[str, list[str]], dict[str, str] | None]] = {}
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.baseline is None:
            variants[""] = (commands(work), None)
        else:
            base = args.baseline.resolve()
            path = os.pathsep.join([str(base / "src"), str(base / "plugins"),
                                    os.environ.get("PYTHONPATH", "")])
            variants["this "] = (commands(work / "this", launcher), None)
            variants["baseline "] = (commands(work / "baseline", launcher),
                                     {**os.environ, "PYTHONPATH": path})
            (work / "this").mkdir()
            (work / "baseline").mkdir()
        for cmds, env in variants.values():  # one warm-up each: the bytecode cache and the page cache
            warm = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
            for cmd in cmds.values():
                timed([c.replace("{n}", "warm") for c in cmd], warm)
        for n in range(args.rounds):
            for name in commands(work):
                for label, (cmds, env) in variants.items():
                    results.setdefault(label + name, []).append(
                        timed([c.replace("{n}", str(n)) for c in cmds[name]], env))
    report: dict = {"rounds": args.rounds, "load1": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
    missed = []
    for name, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        report[name] = {"wall_median": round(statistics.median(walls), 3), "wall_best": round(min(walls), 3),
                        "cpu_median": round(statistics.median(cpus), 3), "cpu_best": round(min(cpus), 3)}
        target = TARGETS.get(name.removeprefix("this "))
        if target and not name.startswith("baseline") and statistics.median(cpus) > target:
            missed.append(f"{name}: median CPU {statistics.median(cpus):.3f} s > {target} s")
    print(json.dumps(report, indent=1))
    for line in missed:
        print("target missed:", line, file=sys.stderr)
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
