#!/usr/bin/env python
"""Placing chunks in a corpus, as a user runs it: whole ``ragbridge run`` processes over a
span-labelled golden set whose chunks give only their text and document.

    python benchmarks/bench_spans.py                               # 10,000 docs, 1,000,000 chunks
    python benchmarks/bench_spans.py --cases 1000 --docs 1000      # quick

Data (fixed seed, written once into ``--data`` and reused):

- ``corpus.jsonl``: ``--docs`` documents of ``--doc-chars`` characters (words of 2-9 letters,
  spaces, line breaks), ``{"doc", "text"}`` a line;
- a chunking of it: windows of 400 characters every 300 (100 overlapping);
- ``text-N.jsonl``: N cases of ``--chunks`` chunks each (the case's labelled document's chunks
  first, in a shuffled order, then chunks of random documents), each chunk ``{"id", "text",
  "doc"}``: placed by its text; 1-3 span labels with offsets in one document;
- ``offsets-N.jsonl``: the same cases with each chunk's ``start`` and ``end`` given (no locating:
  the checks against the corpus only).

The processes (wall clock from start to exit; CPU time, user + system, and peak RSS from ``wait4``):

- ``corpus only``: a Python process that reads the corpus (``read_corpus``) and exits: the floor
  of the memory a run over it needs;
- ``ragbridge run DATA --corpus corpus.jsonl --out DIR --metric recall@10 --metric span_recall@10
  --metric span_precision@10 --no-progress`` for ``text`` and ``offsets`` data, at N = ``--cases``
  and at half of it (both several batches of the default 2,000 cases): the golden set streams
  through in batches, so the peak should not grow with N, and the difference between ``text`` and
  ``offsets`` is the cost of locating; and the ``text`` run at N with ``--batch-size 500``, whose
  peak shows what a batch holds.

Printed: each process's wall, CPU and peak RSS, chunks per second, and the peak over the corpus
alone. Nothing is asserted: the figures go to benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRICS = ["recall@10", "span_recall@10", "span_precision@10"]
SIZE, STEP = 400, 300


def make_corpus(path: Path, n_docs: int, chars: int, rng: random.Random) -> list[int]:
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    lengths = []
    with open(path, "w", encoding="utf-8") as f:
        for d in range(n_docs):
            parts, n = [], 0
            while n < chars:
                w = rng.choice(vocab) + ("\n" if rng.random() < 0.08 else " ")
                parts.append(w)
                n += len(w)
            text = "".join(parts)[:chars]
            lengths.append(len(text))
            f.write(json.dumps({"doc": f"doc{d:05d}.md", "text": text}) + "\n")
    return lengths


def windows(length: int) -> list[tuple[int, int]]:
    return [(s, min(s + SIZE, length)) for s in range(0, max(length - SIZE + STEP, 1), STEP)]


def make_golden(corpus: Path, n_cases: int, per_case: int, rng: random.Random, out_text: Path,
                out_offsets: Path) -> None:
    texts = [json.loads(line)["text"] for line in corpus.open(encoding="utf-8")]
    with open(out_text, "w", encoding="utf-8") as ft, open(out_offsets, "w", encoding="utf-8") as fo:
        for q in range(n_cases):
            d = rng.randrange(len(texts))
            own = windows(len(texts[d]))
            rng.shuffle(own)
            chunks = [(d, s, e) for s, e in own[: per_case // 3]]
            while len(chunks) < per_case:
                o = rng.randrange(len(texts))
                s, e = rng.choice(windows(len(texts[o])))
                if (o, s, e) not in chunks:
                    chunks.append((o, s, e))
            spans = []
            for _ in range(rng.randint(1, 3)):
                start = rng.randrange(0, len(texts[d]) - 200)
                spans.append({"doc": f"doc{d:05d}.md", "start": start, "end": start + rng.randint(20, 200)})
            with_text = [{"id": f"doc{o:05d}.md#{s}", "text": texts[o][s:e], "doc": f"doc{o:05d}.md"}
                         for o, s, e in chunks]
            rec = {"id": f"q{q}", "question": f"question {q}", "relevant_spans": spans}
            ft.write(json.dumps({**rec, "contexts": with_text}) + "\n")
            fo.write(json.dumps({**rec, "contexts": [{**c, "start": s, "end": e} for c, (_, s, e) in
                                                     zip(with_text, chunks)]}) + "\n")


def timed(cmd: list[str]) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{err[-2000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--doc-chars", type=int, default=3_000)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=100, help="chunks per case")
    parser.add_argument("--data", type=Path, default=None,
                        help="folder for the data (default: a temporary one)")
    args = parser.parse_args()
    data = args.data or Path(tempfile.mkdtemp(prefix="bench-spans-"))
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    corpus = data / "corpus.jsonl"
    sizes = [max(1, args.cases // 2), args.cases]
    if not corpus.exists():
        t = time.perf_counter()
        make_corpus(corpus, args.docs, args.doc_chars, rng)
        print(f"corpus: {args.docs:,} docs, {corpus.stat().st_size / 1e6:.0f} MB "
              f"({time.perf_counter() - t:.0f} s)")
    for n in sizes:
        text, offsets = data / f"text-{n}.jsonl", data / f"offsets-{n}.jsonl"
        if not text.exists():
            t = time.perf_counter()
            make_golden(corpus, n, args.chunks, random.Random(n), text, offsets)
            print(f"golden set: {n:,} cases x {args.chunks} chunks, {text.stat().st_size / 1e6:.0f} MB "
                  f"({time.perf_counter() - t:.0f} s)")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    read_only = "import sys; from ragbridge.formats.corpus import read_corpus; read_corpus(sys.argv[1])"
    rows = [("corpus only", 0, timed([sys.executable, "-c", read_only, str(corpus)]))]
    ragbridge = shutil.which("ragbridge") or str(Path(sys.executable).with_name("ragbridge"))
    metric_args = [a for m in METRICS for a in ("--metric", m)]
    for n in sizes:
        for kind in ("text", "offsets"):
            out = data / f"run-{kind}-{n}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [ragbridge, "run", str(data / f"{kind}-{n}.jsonl"), "--corpus", str(corpus),
                   "--out", str(out), *metric_args, "--no-progress"]
            rows.append((f"run, chunks by {kind}", n, timed(cmd)))
            shutil.rmtree(out, ignore_errors=True)
    out = data / "run-small-batches"
    cmd = [ragbridge, "run", str(data / f"text-{args.cases}.jsonl"), "--corpus", str(corpus),
           "--out", str(out), *metric_args, "--no-progress", "--batch-size", "500"]
    rows.append(("run, by text, batches 500", args.cases, timed(cmd)))
    shutil.rmtree(out, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"{'process':<26}{'cases':>9}{'chunks':>11}{'wall s':>9}{'CPU s':>8}{'peak MB':>9}{'chunks/s':>11}")
    for name, n, r in rows:
        chunks = n * args.chunks
        rate = f"{chunks / r['wall']:,.0f}" if chunks else "-"
        print(f"{name:<26}{n:>9,}{chunks:>11,}{r['wall']:>9.1f}{r['cpu']:>8.1f}{r['peak_mb']:>9.0f}{rate:>11}")
    if args.data is None:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
