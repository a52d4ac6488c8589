#!/usr/bin/env python
"""Every command that reads a run, on a run of a million cases: whole processes, against ``run``.

    python benchmarks/bench_scale.py --n 1000000                 # this checkout, every command
    python benchmarks/bench_scale.py --n 20000 --baseline DIR     # DIR: a checkout of the code before
    python benchmarks/bench_scale.py --n 100000 --commands gate,diff --rounds 3

Data (fixed seed, written once into ``--data``, under /tmp by default, and removed with ``--clean``):
two golden sets of the same ``--n`` cases, ``base.jsonl`` and ``new.jsonl`` (the system before and
after a change): the generator of ``bench_native_cli.py`` (100 retrieved chunk ids a case, 1-20
graded labels, each retrieved with p = 0.5 at an exponentially skewed rank), a topic tag (one of 8)
and a difficulty tag (one of 3) on every case, and the trace the case came from in its metadata (for
``export-scores``); the new system retrieves each label with p = 0.55. Both are run with ``ragbridge
run ... --backend native`` and six ranking metrics (recall@10, precision@10, hit@10, mrr, ndcg@10,
map) into run folders ``A`` and ``B``; the time of these runs is the reference. A gates file, 1,000
human labels of ``ndcg@10`` (for ``validate``) are written beside them.

Each command is one whole process, timed by ``/usr/bin/time -v`` (user + system CPU time, wall
time, maximum resident set size), ``--rounds`` times, this checkout and the baseline (when given)
alternating; its JSON output (``--json``, or the report's file) is kept per side, and the two sides'
outputs are compared (every number, to the last bit but for the ``generated_at`` stamp, the paths
and, where the computation's order changed, 1e-9 relative: see ``TOLERANT``; gate's JUnit XML and
Markdown files too, as text). Printed: the load
average before and after, then a table of each command's median CPU and wall time and peak RSS per
side, its CPU and wall time over the ``run``'s (``diff`` and ``compare`` draw their shifts, and a
large Kendall merge its levels, in threads beside the main one: their wall time is less than their
CPU time on a machine of two processors or more) and whether the outputs agree.

The commands (``--commands``, comma-separated, default all):

``gate``      gate B --config gates.toml --baseline A --junit FILE --markdown FILE --json
``diff``      diff A B --json
``compare``   compare A B --json (each backend against itself across the runs)
``compare-with``  compare A --with B --json (native@A against native@B in one run)
``validate``  validate A --labels labels.jsonl --json
``calibrate`` calibrate A --with B --from native@A --to native@B --metric ndcg@10 --json
``diagnose``  diagnose A --json
``trend``     trend A B --json
``report-html``, ``report-md``, ``report-json``: report A --format ... --out FILE
``export``    export-scores A --to jsonl --out FILE
``report-gates``  report B --baseline A --gates gates.toml --out FILE (HTML: what moved and the gates)
``convert``   convert new.jsonl FILE.jsonl (a golden set, not a run: read and written a batch at a time)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]
TOPICS = ["billing", "shipping", "account", "privacy", "returns", "search", "mobile", "api"]
LEVELS = ["easy", "medium", "hard"]

GATES = """\
[defaults]
backend = "native"

[[gate]]
check = "ndcg@10 >= 0.2"

[[gate]]
check = "recall@10 drop <= 0.01"

[[gate]]
check = "share(mrr >= 0.5) >= 0.3"

[[gate]]
check = "map >= 0.15"
tags = ["hard"]

[[gate]]
check = "error_rate <= 0.01"
"""


def generate(folder: Path, n: int, seed: int = 42, docs: int = 100) -> None:
    """base.jsonl and new.jsonl (the same cases, labels and tags; the new system's retrieved lists
    differ), labels.jsonl and gates.toml, deterministic for n and seed."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rng = random.Random(seed)
    with open(folder / "base.jsonl.tmp", "w") as fa, open(folder / "new.jsonl.tmp", "w") as fb:
        for q in range(n):
            n_rel = rng.randint(1, 20)
            ids = [f"d{j}" for j in rng.sample(range(10 * docs), docs + n_rel)]
            rel, other = ids[:n_rel], ids[n_rel:]
            grades = {d: rng.randint(1, 3) for d in rel}
            tags = [TOPICS[q % len(TOPICS)], LEVELS[(q // 7) % len(LEVELS)]]
            trace = {"trace_id": f"{q:032x}", "span_id": f"{q:016x}",
                     "retriever_span_ids": [f"{q + 1:016x}"]}
            for f, p in ((fa, 0.5), (fb, 0.55)):
                slots: list = [None] * docs
                if q % 50 != 0:
                    for d in rel:
                        if rng.random() < p:
                            pos = min(int(rng.expovariate(1 / 15.0)), docs - 1)
                            while slots[pos] is not None:
                                pos = (pos + 1) % docs
                            slots[pos] = d
                fill = iter(other)
                ranked = [d if d is not None else next(fill) for d in slots]
                f.write(json.dumps({"id": f"q{q}", "question": f"question {q} about {tags[0]}",
                                    "contexts": [{"id": d} for d in ranked], "relevant": grades,
                                    "tags": tags, "metadata": {"trace": trace}}))
                f.write("\n")
    for name in ("base.jsonl", "new.jsonl"):
        os.replace(folder / f"{name}.tmp", folder / name)
    lab = random.Random(seed + 1)
    with open(folder / "labels.jsonl", "w") as f:
        for q in sorted(lab.sample(range(n), min(n, 1000))):
            f.write(json.dumps({"case_id": f"q{q}", "metric": "ndcg@10",
                                "label": "pass" if lab.random() < 0.4 else "fail"}) + "\n")
    (folder / "gates.toml").write_text(GATES)
    (folder / "meta.json").write_text(json.dumps({"n": n, "seed": seed, "docs": docs}))
    print(f"data: {n:,} cases written to {folder} in {time.perf_counter() - t0:.1f} s", flush=True)


_TIME_FIELDS = {"User time (seconds)": "user", "System time (seconds)": "sys",
                "Maximum resident set size (kbytes)": "rss_kb",
                "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall"}


def _wall(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def timed(cmd: list[str], env: dict, stdout: Path | None = None, ok=(0,)) -> dict:
    """One whole process under ``/usr/bin/time -v``: cpu (user + system), wall and peak RSS (MiB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        out = open(stdout, "w") if stdout is not None else subprocess.DEVNULL
        try:
            proc = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, *cmd], env=env, stdout=out,
                                  stderr=subprocess.PIPE, text=True)
        finally:
            if stdout is not None:
                out.close()
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(cmd[3:8])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        got = {}
        for line in tf.read().splitlines():
            key, _, value = line.strip().rpartition(": ")
            if key in _TIME_FIELDS:
                got[_TIME_FIELDS[key]] = value
    return {"cpu": float(got["user"]) + float(got["sys"]), "wall": _wall(got["wall"]),
            "peak_mib": int(got["rss_kb"]) / 1024, "exit": proc.returncode}


def cli(checkout: Path) -> tuple[list[str], dict]:
    """How to start the command line of ``checkout`` (its src and plugins first on the path)."""
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}:{checkout / 'plugins'}",
           "COLUMNS": "100", "NO_COLOR": "1"}
    return [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()"], env


def commands(data: Path, out: Path) -> dict[str, tuple[list[str], Path | None, tuple]]:
    """name -> (arguments, the output file the command writes itself or None for stdout, exit codes)."""
    a, b = str(data / "A"), str(data / "B")
    return {
        "gate": (["gate", b, "--config", str(data / "gates.toml"), "--baseline", a, "--junit",
                  str(out / "gate.xml"), "--markdown", str(out / "gate.md"), "--json"], None, (0, 1)),
        "diff": (["diff", a, b, "--json"], None, (0,)),
        "compare": (["compare", a, b, "--json"], None, (0,)),
        "compare-with": (["compare", a, "--with", b, "--json"], None, (0,)),
        "validate": (["validate", a, "--labels", str(data / "labels.jsonl"), "--json"], None, (0,)),
        "calibrate": (["calibrate", a, "--with", b, "--from", "native@A", "--to", "native@B", "--metric",
                       "ndcg@10", "--json"], None, (0,)),
        "diagnose": (["diagnose", a, "--json"], None, (0,)),
        "trend": (["trend", a, b, "--json"], None, (0,)),
        "report-html": (["report", a, "--out", str(out / "report.html")], out / "report.html", (0,)),
        "report-md": (["report", a, "--format", "md", "--out", str(out / "report.md")], out / "report.md",
                      (0,)),
        "report-json": (["report", a, "--format", "json", "--out", str(out / "report.json")],
                        out / "report.json", (0,)),
        "export": (["export-scores", a, "--to", "jsonl", "--out", str(out / "evals.jsonl")],
                   out / "evals.jsonl", (0,)),
        "report-gates": (["report", b, "--baseline", a, "--gates", str(data / "gates.toml"), "--out",
                          str(out / "report-gates.html")], out / "report-gates.html", (0,)),
        "convert": (["convert", str(data / "new.jsonl"), str(out / "converted.jsonl")],
                    out / "converted.jsonl", (0,)),
    }


#: keys whose values differ from one process to the next (a time stamp) or name the output's place
VOLATILE = {"generated_at"}
#: where the computation's order changed (a sum over another order, a float product), the relative
#: difference allowed; every other number must be equal
TOLERANT = 1e-9


def differences(x, y, where: str = "$", found: list | None = None, tolerance: float = 0.0) -> list[str]:
    """Where two parsed JSON documents differ (at most 20 places)."""
    found = [] if found is None else found
    if len(found) >= 20:
        return found
    if isinstance(x, dict) and isinstance(y, dict):
        for k in dict.fromkeys([*x, *y]):
            if k in VOLATILE:
                continue
            if k not in x or k not in y:
                found.append(f"{where}.{k}: only in {'new' if k not in x else 'old'}")
            else:
                differences(x[k], y[k], f"{where}.{k}", found, tolerance)
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            found.append(f"{where}: {len(x)} items, now {len(y)}")
        for i, (u, v) in enumerate(zip(x, y)):
            differences(u, v, f"{where}[{i}]", found, tolerance)
    elif isinstance(x, float) and isinstance(y, float) and not isinstance(x, bool):
        if x != y and not (math.isnan(x) and math.isnan(y)) and \
                abs(x - y) > tolerance * max(abs(x), abs(y), 1e-300):
            found.append(f"{where}: {x!r}, now {y!r}")
    elif x != y:
        found.append(f"{where}: {str(x)[:80]!r}, now {str(y)[:80]!r}")
    return found


#: files a command writes besides its main output, compared as text too
ALSO_WRITTEN = {"gate": ("gate.xml", "gate.md")}


def _document(path: Path, name: str):
    """The output of a command as something to compare: JSON parsed; HTML and Markdown as text."""
    if name in ("report-html", "report-md", "report-gates") or name in sum(ALSO_WRITTEN.values(), ()):
        text = path.read_text(encoding="utf-8")
        # the stamp of the report's making, and the one place a checkout's version may differ
        return re.sub(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "TIME", text)
    if name == "convert":  # a golden set's size: its digest
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()
    if name == "export":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return json.loads(path.read_text(encoding="utf-8"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--data", default=None,
                   help="folder of the data and runs (default /tmp/ragbridge-scale-N)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--commands", default=",".join(commands(Path("."), Path(".")).keys()))
    p.add_argument("--baseline", default=None, help="a checkout of the code before, run in the same rounds")
    p.add_argument("--compare-only", action="store_true", help="with --baseline: compare the outputs "
                   "of one round, do not time")
    p.add_argument("--clean", action="store_true", help="remove the data and runs at the end")
    p.add_argument("--out", default=None, help="folder of the outputs (default: in --data; give each of "
                   "two processes timing different commands over the same data its own)")
    args = p.parse_args()
    data = Path(args.data or f"/tmp/ragbridge-scale-{args.n}")
    if not (data / "meta.json").exists() or json.loads((data / "meta.json").read_text())["n"] != args.n:
        shutil.rmtree(data, ignore_errors=True)
        generate(data, args.n)
    sides = {"this": ROOT}
    if args.baseline:
        sides = {"before": Path(args.baseline).resolve(), **sides}
    load_before = os.getloadavg()
    prefix, env = cli(ROOT)
    runs = {}
    for name, src in (("A", "base.jsonl"), ("B", "new.jsonl")):
        if not (data / name / "run.json").exists():
            cmd = [*prefix, "run", str(data / src), "--out", str(data / name), "--backend", "native",
                   "--no-progress", "--overwrite"]
            for m in METRICS:
                cmd += ["--metric", m]
            runs[name] = timed(cmd, env)
            print(f"run {name}: {runs[name]['cpu']:.1f} s CPU, {runs[name]['wall']:.1f} s wall, "
                  f"{runs[name]['peak_mib']:.0f} MiB", flush=True)
    if runs:
        (data / "runs.json").write_text(json.dumps(runs))
    runs = json.loads((data / "runs.json").read_text())
    run_cpu = statistics.mean(r["cpu"] for r in runs.values())
    run_wall = statistics.mean(r["wall"] for r in runs.values())
    chosen = [c for c in args.commands.split(",") if c]
    results: dict[tuple[str, str], list[dict]] = {}
    agree: dict[str, str] = {}
    outs = {side: Path(args.out or data) / f"out-{side}" for side in sides}
    for folder in outs.values():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for r in range(1 if args.compare_only else args.rounds):
        for name in chosen:
            for side, checkout in sides.items():
                argv, written, ok = commands(data, outs[side])[name]
                prefix, env = cli(checkout)
                stdout = outs[side] / f"{name}.out"
                got = timed([*prefix, *argv], env, stdout=stdout, ok=ok)
                results.setdefault((name, side), []).append(got)
                print(f"round {r + 1} {name} ({side}): {got['cpu']:.1f} s CPU, {got['wall']:.1f} s wall, "
                      f"{got['peak_mib']:.0f} MiB, output {os.path.getsize(written or stdout):,} bytes",
                      flush=True)
                if written is None:
                    written = stdout
                got["output_bytes"] = os.path.getsize(written)
                if "before" not in sides:  # nothing to compare with: not kept (30 GB of JSON at 1,000,000)
                    os.remove(written)
                    continue
                os.replace(written, outs[side] / f"{name}.result")
            if "before" in sides and r == 0:
                try:
                    old = _document(outs["before"] / f"{name}.result", name)
                    new = _document(outs["this"] / f"{name}.result", name)
                    diff = differences(old, new, tolerance=TOLERANT)
                    for also in ALSO_WRITTEN.get(name, ()):
                        diff += [f"{also}: {d}" for d in differences(
                            _document(outs["before"] / also, also), _document(outs["this"] / also, also))]
                    agree[name] = "same" if not diff else "DIFFER: " + "; ".join(diff[:5])
                except (OSError, ValueError) as exc:
                    agree[name] = f"not compared ({exc})"
                print(f"  outputs: {agree[name]}", flush=True)
    load_after = os.getloadavg()
    peaks = ", ".join(f"{k} {v['peak_mib']:.0f} MiB" for k, v in runs.items())
    print(f"\nload average before {load_before[0]:.1f}, after {load_after[0]:.1f}; "
          f"{args.n:,} cases; run (the reference): {run_cpu:.1f} s CPU, {run_wall:.1f} s wall "
          f"(peaks {peaks})")
    head = ("| command | " + " | ".join(f"{s}: CPU s, wall s, peak MiB, CPU / run, wall / run" for s in sides)
            + " | outputs |")
    print(head)
    print("|---" * (len(sides) + 2) + "|")
    for name in chosen:
        cells = []
        for side in sides:
            got = results.get((name, side))
            if not got:
                cells.append("—")
                continue
            cpu = statistics.median(g["cpu"] for g in got)
            wall = statistics.median(g["wall"] for g in got)
            peak = max(g["peak_mib"] for g in got)
            cells.append(f"{cpu:.1f}, {wall:.1f}, {peak:,.0f}, {cpu / run_cpu:.2f}, {wall / run_wall:.2f}")
        print(f"| {name} | " + " | ".join(cells) + f" | {agree.get(name, '')} |")
    print(json.dumps({"n": args.n, "load": [load_before, load_after], "run_cpu": run_cpu,
                      "run_wall": run_wall, "results": {f"{k[0]}/{k[1]}": v for k, v in results.items()},
                      "agree": agree}))
    if args.clean:
        shutil.rmtree(data, ignore_errors=True)
    return 0 if all(v in ("same", "") for v in agree.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
