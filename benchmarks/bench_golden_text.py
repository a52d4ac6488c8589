#!/usr/bin/env python
"""Reading a golden set with realistic chunk text: MB/s of a native run against parsing the same
file with the fastest JSON parser installed, the physical limit of reading it.

    python benchmarks/bench_golden_text.py                 # 20,000 cases x 10 chunks of ~1 KB, 3 rounds
    python benchmarks/bench_golden_text.py --n 2000 --rounds 5

Data (fixed seed, written once under the system's temporary folder and reused): each case has a
question, an answer of about 300 characters, 10 chunks of about 1 KB (``{"id", "text"}``: prose with
sentences, paragraphs, quotes, and some accented words, written by ``json.dumps`` as JSON writers
usually do, so texts hold ``\\n``, ``\\"`` and ``\\u00e9`` escapes) and 1-3 relevance labels.

The processes, interleaved in each round, each timed from start to exit (wall, CPU = user + system,
peak RSS from ``wait4``):

- ``ragbridge``: ``ragbridge run cases.jsonl --backend native --metric recall@10 --metric ndcg@10
  --no-progress`` into a new folder (reading and checking every case, writing the folder's
  ``cases.jsonl`` copy, scoring);
- ``parse:<parser>``: ``python -c`` reading the file line by line and parsing each line with the
  parser, for every parser installed among ``orjson``, ``pydantic_core.from_json`` (a dependency of
  ragbridge through pydantic) and the standard library's ``json``.

Printed: each process's median wall, CPU, peak RSS and MB/s (file size / CPU time), and ragbridge's
MB/s as a share of the fastest parser's (1.0 would be reading at the parser's speed).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("the a of to and in is for that with on as it be by this are from or at an refund policy "
         "order customer account days within request support shipping return item payment card "
         "invoice café naïve résumé delivery warehouse tracking number email address password reset "
         "subscription plan monthly annual upgrade downgrade cancel billing period credit").split()
PARSE = """
import sys
from {module} import {name} as parse
with open(sys.argv[1], "rb") as f:
    for line in f:
        if line.strip():
            parse(line)
"""
PARSERS = {"orjson": ("orjson", "loads"), "pydantic_core": ("pydantic_core", "from_json"),
           "json": ("json", "loads")}


def _prose(rng: random.Random, size: int) -> str:
    out, length = [], 0
    while length < size:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
        if rng.random() < 0.15:
            sentence = f'"{sentence}"'
        if rng.random() < 0.2:
            sentence += "\n\n"
        out.append(sentence)
        length += len(sentence) + 1
    return " ".join(out)[:size]


def generate(path: Path, n: int, chunks: int, size: int, seed: int) -> None:
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        for q in range(n):
            ids = [f"doc{rng.randrange(50_000)}#{rng.randrange(40)}" for _ in range(chunks)]
            ids = list(dict.fromkeys(ids))
            labels = {d: rng.randint(1, 3) for d in rng.sample(ids, min(len(ids), rng.randint(1, 3)))}
            record = {"id": f"q{q}", "question": _prose(rng, 60).rstrip(".") + "?",
                      "answer": _prose(rng, 300),
                      "contexts": [{"id": d, "text": _prose(rng, size)} for d in ids],
                      "relevant": labels}
            f.write(json.dumps(record) + "\n")
    os.replace(tmp, path)


def timed(cmd: list[str]) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed:\n{proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000, help="cases")
    p.add_argument("--chunks", type=int, default=10, help="chunks a case")
    p.add_argument("--size", type=int, default=1000, help="characters a chunk text")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args(argv)
    data = Path(tempfile.gettempdir()) / f"ragbridge-bench-text-{a.n}x{a.chunks}x{a.size}-s{a.seed}.jsonl"
    if not data.exists():
        generate(data, a.n, a.chunks, a.size, a.seed)
    mb = data.stat().st_size / 1e6
    print(f"data: {data} ({a.n:,} cases x {a.chunks} chunks of {a.size} characters, {mb:,.1f} MB)")
    exe = shutil.which("ragbridge", path=str(Path(sys.executable).parent)) or "ragbridge"
    work = Path(tempfile.mkdtemp(prefix="ragbridge-bench-text-"))
    procs = {"ragbridge": lambda r: [exe, "run", str(data), "--out", str(work / f"run{r}"),
                                     "--backend", "native", "--metric", "recall@10", "--metric", "ndcg@10",
                                     "--no-progress"]}
    for parser, (module, name) in PARSERS.items():
        try:
            __import__(module)
        except ImportError:
            continue
        script = PARSE.format(module=module, name=name)
        procs[f"parse:{parser}"] = lambda r, s=script: [sys.executable, "-c", s, str(data)]
    results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in procs}
    print("load average (1 min) at the start: %.2f" % os.getloadavg()[0])
    try:
        for r in range(a.rounds):
            for who, cmd in procs.items():
                results[who].append(timed(cmd(r)))
                w, c, m = results[who][-1]
                print(f"round {r + 1}: {who:<22} {w:7.2f} s {c:7.2f} s CPU {m:7,.0f} MiB {mb / c:7.1f} MB/s",
                      flush=True)
                shutil.rmtree(work / f"run{r}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("load average (1 min) at the end: %.2f" % os.getloadavg()[0])
    print(f"\n{'process':<22} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'MB/s':>8}")
    speed = {}
    for who, runs in results.items():
        w, c, m = (statistics.median(x) for x in zip(*runs))
        speed[who] = mb / c
        print(f"{who:<22} {w:8.2f} {c:8.2f} {m:9,.0f} {speed[who]:8.1f}")
    fastest = max((k for k in speed if k.startswith("parse:")), key=speed.get)
    print(f"ragbridge reads at {speed['ragbridge'] / speed[fastest]:.2f} of {fastest}'s speed "
          f"({speed['ragbridge']:.1f} against {speed[fastest]:.1f} MB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
