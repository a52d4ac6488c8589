#!/usr/bin/env python
"""The HTML report of a large run as a user makes and opens it: ``ragbridge report RUN`` as a whole
process (wall time, peak RSS, file size), then the file opened in headless Chromium (time to a laid-out
page, from the process start to its exit).

    python benchmarks/bench_report.py                  # 20,000 cases x 20 chunks, native + 2 judged
    python benchmarks/bench_report.py --n 3000 --rounds 3  # quick
    python benchmarks/bench_report.py --no-judged      # native only (no stub judge)

Data (fixed seed, written once into ``--data`` and reused): every case has a question (8-16 words),
an answer of 3-6 sentences of 5-8 words (each copied from one of its chunks with a probability drawn
per case, else random words, so judged faithfulness spreads over 0..1), a reference (10-30 words),
``--contexts`` retrieved chunks of 30-70 words each with unique ids and a source (its document), 1-3
labelled relevant sources with grades 1-3, a ``must_contain`` word that the answer holds with
p = 0.9, a topic tag and a difficulty tag; every 20th case is unanswerable. Words come from a fixed
2,000-word vocabulary.

The run folder is made once per data set with the installed console script: ``ragbridge run cases.jsonl
--backend native`` (every native metric), and unless ``--no-judged`` also ``--backend rubric --backend
phoenix --metric faithfulness --metric abstention`` judged by ragbridge's stub judge
(``ragbridge.testing.StubJudge`` on 127.0.0.1), so the report has judged scores with reasons and
backend-against-backend plots (faithfulness: rubric and phoenix, on every case; abstention: native,
rubric and phoenix).

Timed, ``--rounds`` times each, alternating:

- ``report``: ``ragbridge report RUN --out report.html`` (wall clock, peak RSS from ``wait4``);
- ``chromium``: ``chromium --headless --dump-dom file://.../report.html`` with the flags the test suite
  uses and no virtual-time budget; the process exits once the page has loaded and its script has run.
  The dump is checked for the report script's ``data-report-ready`` mark.

Printed: medians of both, the file size, how many cases the file holds in full and in compact form.
"""

from __future__ import annotations

import argparse
import json
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

TOPICS = ["billing", "shipping", "account", "privacy", "returns", "search", "mobile", "api"]


def _words(rng: random.Random, vocab: list[str], lo: int, hi: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(rng.randint(lo, hi)))


def generate(folder: Path, n: int, contexts: int, seed: int) -> None:
    """Write cases.jsonl (deterministic for n, contexts and seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(2000)})
    t0 = time.perf_counter()
    with open(folder / "cases.jsonl.tmp", "w") as f:
        for q in range(n):
            docs = [f"doc{rng.randrange(10 * n)}.md" for _ in range(contexts + 3)]
            labelled = docs[contexts:contexts + rng.randint(1, 3)]
            chunks = []
            for i in range(contexts):
                src = docs[i]
                if labelled and rng.random() < 0.6 / contexts * len(labelled):
                    src = rng.choice(labelled)
                chunks.append({"id": f"{src}#c{q}-{i}", "source": src, "text": _words(rng, vocab, 30, 70),
                               "score": round(1 - i / contexts, 3)})
            grounded = rng.random()  # the share of the answer's sentences taken from its chunks
            sentences = []
            for _ in range(rng.randint(3, 6)):
                if rng.random() < grounded:
                    words = rng.choice(chunks)["text"].split()
                    at = rng.randrange(len(words) - 8)
                    sentences.append(" ".join(words[at:at + rng.randint(5, 8)]))
                else:
                    sentences.append(_words(rng, vocab, 5, 8))
            answer = ". ".join(x.capitalize() for x in sentences) + "."
            word = rng.choice(vocab)
            if rng.random() < 0.9:
                answer += f" {word}."
            case = {"id": f"case-{q:06d}", "question": _words(rng, vocab, 8, 16) + "?", "answer": answer,
                    "reference": _words(rng, vocab, 10, 30), "contexts": chunks,
                    "relevant": {d: rng.randint(1, 3) for d in labelled}, "must_contain": [word],
                    "tags": [TOPICS[q % len(TOPICS)], ["easy", "medium", "hard"][rng.randrange(3)]]}
            if q % 20 == 0:
                case["answerable"] = False
            f.write(json.dumps(case) + "\n")
    os.replace(folder / "cases.jsonl.tmp", folder / "cases.jsonl")
    print(f"data: {n:,} cases x {contexts} chunks written to {folder} in {time.perf_counter() - t0:.1f} s "
          f"({(folder / 'cases.jsonl').stat().st_size / 2**20:,.0f} MiB)", flush=True)


def timed(cmd: list[str], env: dict | None = None, stdout=subprocess.DEVNULL) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and standard output of one whole process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.stderr.close()
        out.seek(0)
        text = out.read().decode(errors="replace")
    if code not in (0,):
        raise SystemExit(f"{cmd[0]} {' '.join(cmd[1:4])} ... failed ({code}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, text


def ragbridge_exe() -> str:
    exe = shutil.which("ragbridge", path=str(Path(sys.executable).parent)) or shutil.which("ragbridge")
    if exe is None:
        raise SystemExit("the ragbridge console script is not installed (pip install -e .)")
    return exe


def make_run(data: Path, run: Path, judged: bool, env: dict) -> None:
    """The run folder: native, then (judged) the rubric backend through the stub judge."""
    exe = ragbridge_exe()
    t0 = time.perf_counter()
    timed([exe, "run", str(data / "cases.jsonl"), "--out", str(run), "--backend", "native", "--no-progress",
           "--overwrite"], env)
    print(f"run: native in {time.perf_counter() - t0:.1f} s", flush=True)
    if judged:
        from ragbridge.testing import StubJudge

        t0 = time.perf_counter()
        with StubJudge() as stub:
            timed([exe, "run", str(data / "cases.jsonl"), "--out", str(run), "--backend", "native",
                   "--backend", "rubric", "--backend", "phoenix", "--metric", "faithfulness",
                   "--metric", "abstention", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                   "--cache-mode", "off", "--max-concurrency", "16", "--no-progress"], env)
        print(f"run: rubric and phoenix (stub judge) in {time.perf_counter() - t0:.1f} s", flush=True)
    (run / "bench-done").write_text("1")


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def open_cmd(exe: str, page: Path, profile: Path) -> list[str]:
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
            "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}", "--dump-dom",
            page.as_uri()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000, help="cases")
    p.add_argument("--contexts", type=int, default=20, help="retrieved chunks per case")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-judged", action="store_true", help="native only: no rubric backend, no stub judge")
    p.add_argument("--data", type=Path, default=None,
                   help="data folder (default: a folder per size under the system's temporary folder)")
    a = p.parse_args(argv)
    judged = not a.no_judged
    data = a.data or Path(tempfile.gettempdir()) / (
        f"ragbridge-bench-report2-{a.n}x{a.contexts}-s{a.seed}{'-judged' if judged else ''}")
    meta = data / "meta.json"
    want = {"n": a.n, "contexts": a.contexts, "seed": a.seed}
    if not (meta.exists() and json.loads(meta.read_text()) == want):
        generate(data, a.n, a.contexts, a.seed)
        meta.write_text(json.dumps(want))
    env = {**os.environ, "COLUMNS": "100"}
    run = data / "run"
    if not (run / "bench-done").exists():
        make_run(data, run, judged, env)
    scores_mib = (run / "scores.jsonl").stat().st_size / 2**20
    cases_mib = (run / "cases.jsonl").stat().st_size / 2**20
    print(f"run folder: cases.jsonl {cases_mib:,.0f} MiB, scores.jsonl {scores_mib:,.0f} MiB")
    browser = chromium()
    if browser is None:
        print("no Chromium on PATH: the open time is not measured")
    work = Path(tempfile.mkdtemp(prefix="ragbridge-bench-report-"))
    page = work / "report.html"
    walls, peaks, opens = [], [], []
    try:
        for r in range(a.rounds):
            wall, peak, _ = timed([ragbridge_exe(), "report", str(run), "--out", str(page)], env)
            walls.append(wall)
            peaks.append(peak)
            line = f"round {r + 1}: report {wall:7.2f} s {peak:7,.0f} MiB"
            if browser:
                shutil.rmtree(work / "profile", ignore_errors=True)
                t, _, dom = timed(open_cmd(browser, page, work / "profile"), env)
                if 'data-report-ready="1"' not in dom[:4000]:
                    raise SystemExit("Chromium did not run the report's script to its end")
                opens.append(t)
                line += f"   chromium open {t:6.2f} s"
            print(line, flush=True)
        html_text = page.read_text(encoding="utf-8")
        size = page.stat().st_size
        full = len(re.findall(r'<details class="case"', html_text))
        compact = sum(len(t.split("\n")) - 2 for t in re.findall(r'<pre class="crows"[^>]*>(.*?)</pre>',
                                                                   html_text, re.S))
        backends = "native + rubric + phoenix" if judged else "native"
        print(f"\n{a.n:,} cases x {a.contexts} chunks, {backends}, {a.rounds} round(s), medians:")
        print(f"report: {statistics.median(walls):.2f} s wall, {statistics.median(peaks):,.0f} MiB peak RSS")
        print(f"file: {size / 2**20:.2f} MiB; {full:,} cases in full, {compact:,} one line each")
        if opens:
            print(f"chromium --headless --dump-dom: {statistics.median(opens):.2f} s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
