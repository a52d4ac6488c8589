#!/usr/bin/env python
"""The native ranking metrics as a user runs them: whole processes, from files on disk to per-query
results on disk, against pytrec_eval and ranx reading the same data as TREC run and qrels files.

    python benchmarks/bench_native_cli.py                      # 100,000 queries x 100 docs, 3 rounds
    python benchmarks/bench_native_cli.py --n 1000000 --rounds 1 --peers pytrec_eval
    python benchmarks/bench_native_cli.py --n 4000 --rounds 5  # quick

Data (fixed seed, written once into ``--data`` and reused): every query retrieves ``--docs`` documents
with unique ids and has labelled documents with grades 1-3, each retrieved with p = 0.5 at an
exponentially skewed rank (mean 15); every 50th query retrieves none of its labels. Each of
``--shapes`` is measured in turn, and the spread of the ratios over them is printed: ``dense``, 1-20
labels a query and ids drawn from 10x the documents a query retrieves; ``sparse``, 1-3 labels and
ids from 1000x (longer ids, fewer labels). ``--text N`` gives every chunk a text of N characters in
``cases.jsonl`` (one letter for 1; words otherwise), as a golden set with chunk text has. The same
data is written three ways:

- ``cases.jsonl``: ragbridge's canonical golden set (one case a line: id, question, contexts as
  ``{"id": ...}`` best first, relevant as ``{doc: grade}``);
- ``run.trec`` (``qid Q0 docno rank score tag``, scores ``n - rank``: no ties) and ``qrels.trec``
  (``qid 0 docno grade``): pytrec_eval's and ranx's usual input.

The processes, each timed from its start to its exit (wall clock; CPU time, user + system, and peak
RSS from ``wait4``):

- ``ragbridge``: ``ragbridge run cases.jsonl --out DIR --backend native --metric ...
  --no-progress`` (the installed console script); per-query results are the run folder's
  ``scores.jsonl``.
- ``pytrec_eval``: ``parse_qrel``, ``parse_run``, ``RelevanceEvaluator(...).evaluate``, per-query
  results written with ``json.dump``.
- ``ranx``: ``Qrels.from_file``, ``Run.from_file`` (kind ``trec``), ``evaluate(...,
  return_mean=False)``, per-query results written with ``json.dump``.

- ``parse:<parser>`` (``--parsers``): ``cases.jsonl`` read line by line and each line parsed by a
  JSON parser, nothing else: ``orjson.loads``, ``msgspec.json.decode``, ``simdjson`` (pysimdjson's
  ``Parser.parse``, lazy: the document is parsed, no Python object is built for its values: the
  floor of reading JSON), ``pydantic_core.from_json`` and ``json.loads``, each where it imports in
  ``--parser-python`` (default this interpreter; a venv that has them installed). Their MB/s (file
  size / CPU time) against ragbridge's say how close the whole run is to parsing the file alone.

The metrics: recall@10, precision@10, hit@10, reciprocal rank (uncut), nDCG@10, MAP (uncut).
Processes alternate within each round (ragbridge, then each peer; the order reversed every other
round), so load on the machine falls on all of them alike; a warm-up run writes ragbridge's byte code
first (``PYTHONDONTWRITEBYTECODE`` is dropped for the processes timed: an installed package has it).
Printed: the load average before and after, each process's median wall time, CPU
time and peak RSS over the rounds, the ratios against ragbridge (targets: wall time ragbridge /
pytrec_eval <= 1.0, peak ragbridge / pytrec_eval <= 1.0, and with chunk ids alone (``--text 0``) CPU
ragbridge / pytrec_eval <= 0.5; on a shared machine the CPU ratio is the steadier one, printed per round
too) and a check that the per-query values agree (max |difference| over every query and metric).
Exit status 1 when a target is missed (``--no-check`` to only report).
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
import textwrap
import time
from pathlib import Path

METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]
PYTREC = {"recall@10": "recall_10", "precision@10": "P_10", "hit@10": "success_10",
          "mrr": "recip_rank", "ndcg@10": "ndcg_cut_10", "map": "map"}
RANX = {"recall@10": "recall@10", "precision@10": "precision@10", "hit@10": "hit_rate@10",
        "mrr": "mrr", "ndcg@10": "ndcg@10", "map": "map"}

PYTREC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import pytrec_eval
    qrels_path, run_path, out_path = sys.argv[1:4]
    measures = set(json.loads(sys.argv[4]))
    with open(qrels_path) as f:
        qrels = pytrec_eval.parse_qrel(f)
    with open(run_path) as f:
        run = pytrec_eval.parse_run(f)
    results = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    with open(out_path, "w") as f:
        json.dump(results, f)
    """
)

#: a golden set of chunk ids alone: ragbridge's CPU at most this share of pytrec_eval's (median of rounds)
IDS_CPU_TARGET = 0.5

#: JSON parsers timed on cases.jsonl: name -> (import, the call that parses one line's bytes)
PARSERS = {
    "orjson": ("from orjson import loads as parse", "parse(line)"),
    "msgspec": ("from msgspec.json import decode as parse", "parse(line)"),
    "simdjson": ("from simdjson import Parser; parse = Parser().parse", "parse(line)"),
    "pydantic_core": ("from pydantic_core import from_json as parse", "parse(line)"),
    "json": ("from json import loads as parse", "parse(line)"),
}
PARSE_SCRIPT = """
import sys
{imports}
with open(sys.argv[1], "rb") as f:
    for line in f:
        {call}
"""

RANX_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.filterwarnings("ignore")
    from ranx import Qrels, Run, evaluate
    qrels_path, run_path, out_path = sys.argv[1:4]
    metrics = json.loads(sys.argv[4])
    qrels = Qrels.from_file(qrels_path, kind="trec")
    run = Run.from_file(run_path, kind="trec")
    scores = evaluate(qrels, run, metrics, return_mean=False)
    ids = list(run.keys())
    results = {q: {m: float(scores[m][i]) for m in metrics} for i, q in enumerate(ids)}
    with open(out_path, "w") as f:
        json.dump(results, f)
    """
)


#: the shapes of data the benchmark generates: labels per query (lowest, highest), and the size of
#: the id space as a multiple of the documents a query retrieves
SHAPES = {"dense": ((1, 20), 10), "sparse": ((1, 3), 1000)}


def generate(folder: Path, n: int, docs: int, seed: int, shape: str = "dense", text: int = 0) -> None:
    """Write cases.jsonl, run.trec and qrels.trec (deterministic for n, docs, seed, shape and text)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    (low, high), space = SHAPES[shape]
    letters = "abcdefghijklmnopqrstuvwxyz"
    t0 = time.perf_counter()
    with open(folder / "cases.jsonl.tmp", "w") as fc, open(folder / "run.trec.tmp", "w") as fr, \
            open(folder / "qrels.trec.tmp", "w") as fq:
        for q in range(n):
            qid = f"q{q}"
            n_rel = rng.randint(low, high)
            ids = [f"d{j}" for j in rng.sample(range(space * docs), docs + n_rel)]
            rel, other = ids[:n_rel], ids[n_rel:]
            grades = {d: rng.randint(1, 3) for d in rel}
            slots: list = [None] * docs
            if q % 50 != 0:
                for d in rel:
                    if rng.random() < 0.5:
                        pos = min(int(rng.expovariate(1 / 15.0)), docs - 1)
                        while slots[pos] is not None:
                            pos = (pos + 1) % docs
                        slots[pos] = d
            fill = iter(other)
            ranked = [d if d is not None else next(fill) for d in slots]
            if text:
                chunks = [{"id": d, "text": _text(rng, letters, text)} for d in ranked]
            else:
                chunks = [{"id": d} for d in ranked]
            fc.write(json.dumps({"id": qid, "question": f"question {q}", "contexts": chunks,
                                 "relevant": grades}))
            fc.write("\n")
            fr.write("".join(f"{qid} Q0 {d} {i + 1} {docs - i} bench\n" for i, d in enumerate(ranked)))
            fq.write("".join(f"{qid} 0 {d} {g}\n" for d, g in grades.items()))
    for name in ("cases.jsonl", "run.trec", "qrels.trec"):
        os.replace(folder / f"{name}.tmp", folder / name)
    (folder / "meta.json").write_text(json.dumps(_meta(n, docs, seed, shape, text)))
    print(f"data: {n:,} queries x {docs} docs ({shape}, text {text}) written to {folder} in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)


def _text(rng: random.Random, letters: str, size: int) -> str:
    """A chunk text of ``size`` characters: one letter, or words of letters with a sentence's marks."""
    if size == 1:
        return rng.choice(letters)
    words = []
    while sum(map(len, words)) + len(words) < size:
        words.append("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))))
    return (" ".join(words)[:size - 1] + ".").capitalize()


def _meta(n: int, docs: int, seed: int, shape: str, text: int) -> dict:
    return {"n": n, "docs": docs, "seed": seed, "shape": shape, "text": text}


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of one whole process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} {' '.join(cmd[1:4])} ... failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def ragbridge_cmd(data: Path, out: Path) -> list[str]:
    exe = shutil.which("ragbridge", path=str(Path(sys.executable).parent)) or shutil.which("ragbridge")
    if exe is None:
        raise SystemExit("the ragbridge console script is not installed (pip install -e .)")
    cmd = [exe, "run", str(data / "cases.jsonl"), "--out", str(out), "--backend", "native", "--no-progress",
           "--overwrite"]
    for m in METRICS:
        cmd += ["--metric", m]
    return cmd


def parser_cmds(names: list[str], python: str, data: Path) -> dict[str, list[str]]:
    """``parse:<name>``'s command for each parser of ``names`` that ``python`` imports."""
    out = {}
    for name in names:
        imports, call = PARSERS[name]
        if subprocess.run([python, "-c", imports], capture_output=True).returncode == 0:
            script = PARSE_SCRIPT.format(imports=imports, call=call)
            out[f"parse:{name}"] = [python, "-c", script, str(data / "cases.jsonl")]
        else:
            print(f"{name}: not importable in {python}, left out")
    return out


def peer_cmd(peer: str, data: Path, out: Path) -> list[str]:
    script, names = (PYTREC_SCRIPT, PYTREC) if peer == "pytrec_eval" else (RANX_SCRIPT, RANX)
    return [sys.executable, "-c", script, str(data / "qrels.trec"), str(data / "run.trec"), str(out),
            json.dumps(sorted(set(names.values())))]


def agreement(run_dir: Path, peer: str, out: Path) -> float:
    """Max |ragbridge - peer| over every query and metric (recall etc. of unlabelled-free data)."""
    names = PYTREC if peer == "pytrec_eval" else RANX
    theirs = json.loads(out.read_text())
    worst = 0.0
    seen = 0
    with open(run_dir / "scores.jsonl") as f:
        for line in f:
            s = json.loads(line)
            v = s["value"]
            t = theirs.get(s["case_id"], {}).get(names[s["metric"]])
            if v is None or t is None:
                raise SystemExit(f"{peer}: no value to compare for {s['case_id']} {s['metric']}")
            worst = max(worst, abs(v - t))
            seen += 1
    expected = len(theirs) * len(METRICS)
    if seen != expected:
        raise SystemExit(f"ragbridge wrote {seen} scores, {peer} {expected}")
    return worst


def measure(data: Path, a: argparse.Namespace, peers: list[str], work: Path, env: dict) -> tuple[dict, bool]:
    """Time ragbridge and the peers on ``data``, interleaved, ``a.rounds`` times; print the medians and
    the ratios. Returns ``{process: (wall, peak, CPU)}`` (medians) and whether the targets are met."""
    parsers = parser_cmds(a.parsers, a.parser_python, data)
    times: dict[str, list[float]] = {k: [] for k in ["ragbridge", *peers, *parsers]}
    cpus: dict[str, list[float]] = {k: [] for k in times}
    peaks: dict[str, list[float]] = {k: [] for k in times}
    print("load average (1, 5, 15 min) at the start: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    warm = data.parent / f"ragbridge-bench-native-warmup-{a.docs}"
    if not (warm / "meta.json").exists():
        generate(warm, 50, a.docs, a.seed)
    timed(ragbridge_cmd(warm, work / "warmup-run"), env)  # writes the byte code
    for r in range(a.rounds):
        # the order alternates from round to round: a process's place in a round moves its CPU time
        for who in (list(times) if r % 2 == 0 else list(times)[::-1]):
            if who == "ragbridge":
                wall, cpu, peak = timed(ragbridge_cmd(data, work / "run"), env)
            elif who in parsers:
                wall, cpu, peak = timed(parsers[who], env)
            else:
                wall, cpu, peak = timed(peer_cmd(who, data, work / f"{who}.json"), env)
            times[who].append(wall)
            cpus[who].append(cpu)
            peaks[who].append(peak)
            print(f"round {r + 1}: {who:<12} {wall:8.2f} s  {cpu:8.2f} s CPU  {peak:8,.0f} MiB", flush=True)
    print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"\n{a.n:,} queries x {a.docs} docs, {a.rounds} round(s), medians:")
    mb = (data / "cases.jsonl").stat().st_size / 1e6
    print(f"{'process':<16} {'wall s':>9} {'CPU s':>9} {'peak MiB':>10} {'MB/s':>8}")
    med = {k: (statistics.median(times[k]), statistics.median(peaks[k]), statistics.median(cpus[k]))
           for k in times}
    for k, (w, m, c) in med.items():
        print(f"{k:<16} {w:9.2f} {c:9.2f} {m:10,.0f} {mb / c:8.1f}")
    ok = True
    for peer in peers:
        diff = agreement(work / "run", peer, work / f"{peer}.json")
        tr = med["ragbridge"][0] / med[peer][0]
        cr = med["ragbridge"][2] / med[peer][2]
        mr = med["ragbridge"][1] / med[peer][1]
        print(f"ragbridge / {peer}: wall {tr:.3f}, CPU {cr:.3f}, peak memory {mr:.3f}; "
              f"max |difference| {diff:.2e}")
        if peer == "pytrec_eval":
            rounds = [x / y for x, y in zip(cpus["ragbridge"], cpus[peer])]
            print(f"  CPU ratio per round: {', '.join(f'{x:.3f}' for x in rounds)}")
            if tr > a.max_ratio or mr > a.max_ratio:
                ok = False
            if a.text == 0:  # chunk ids alone: CPU at most IDS_CPU_TARGET of pytrec_eval's
                met = "met" if cr <= IDS_CPU_TARGET else "MISSED"
                print(f"  chunk ids alone, CPU <= {IDS_CPU_TARGET}: {met}")
                ok = ok and cr <= IDS_CPU_TARGET
        if diff > 1e-9:
            ok = False
    if parsers:
        fastest = min(parsers, key=lambda k: med[k][2])
        print(f"ragbridge / fastest parser ({fastest.removeprefix('parse:')}): MB/s "
              f"{med[fastest][2] / med['ragbridge'][2]:.3f} ({mb / med['ragbridge'][2]:.1f} against "
              f"{mb / med[fastest][2]:.1f} MB/s, {mb:,.0f} MB)")
    return med, ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="queries")
    p.add_argument("--docs", type=int, default=100, help="retrieved documents per query")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--peers", default="pytrec_eval,ranx", help="comma-separated: pytrec_eval, ranx")
    p.add_argument("--shapes", default=",".join(SHAPES),
                   help=f"comma-separated data shapes to measure, each in turn: {', '.join(SHAPES)}")
    p.add_argument("--text", type=int, default=0,
                   help="characters of text per chunk in cases.jsonl (0: chunks are ids alone)")
    p.add_argument("--data", type=Path, default=None,
                   help="data folder (default: a folder per size and shape under the system's temporary "
                   "folder; with several shapes, a sub-folder per shape)")
    p.add_argument("--max-ratio", type=float, default=1.0,
                   help="wall-time and peak-memory target, ragbridge / pytrec_eval")
    p.add_argument("--no-check", action="store_true", help="report only; exit 0 whatever the ratios")
    p.add_argument("--parsers", default=",".join(PARSERS),
                   help="comma-separated JSON parsers timed on cases.jsonl ('' for none): "
                   + ", ".join(PARSERS))
    p.add_argument("--parser-python", default=sys.executable,
                   help="the interpreter the parsers run in (e.g. a venv with orjson, msgspec, pysimdjson)")
    a = p.parse_args(argv)
    peers = [x for x in a.peers.split(",") if x]
    a.parsers = [x for x in a.parsers.split(",") if x]
    if sorted(set(a.parsers) - set(PARSERS)):
        raise SystemExit(f"unknown parser(s) {', '.join(sorted(set(a.parsers) - set(PARSERS)))}; "
                         f"known: {', '.join(PARSERS)}")
    shapes = [x for x in a.shapes.split(",") if x]
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
    work = Path(tempfile.mkdtemp(prefix="ragbridge-bench-"))
    # byte code written and read, as an installed package has it (where PYTHONDONTWRITEBYTECODE is set,
    # every process would compile ragbridge's modules again: about 0.3 s of CPU a run)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"COLUMNS": "100"}
    results: dict[str, dict] = {}
    ok = True
    try:
        for shape in shapes:
            name = f"ragbridge-bench-native-{a.n}x{a.docs}-s{a.seed}-{shape}-t{a.text}"
            data = Path(tempfile.gettempdir()) / name
            if a.data:
                data = a.data / shape if len(shapes) > 1 else a.data
            meta = data / "meta.json"
            wanted = _meta(a.n, a.docs, a.seed, shape, a.text)
            if not (meta.exists() and json.loads(meta.read_text()) == wanted):
                generate(data, a.n, a.docs, a.seed, shape, a.text)
            sizes = {f: (data / f).stat().st_size / 2**20 for f in ("cases.jsonl", "run.trec", "qrels.trec")}
            print(f"\nshape {shape} ({SHAPES[shape][0][0]}-{SHAPES[shape][0][1]} labels a query, ids from "
                  f"{SHAPES[shape][1]}x the retrieved), text {a.text}; input: "
                  + ", ".join(f"{k} {v:,.0f} MiB" for k, v in sizes.items()))
            if "ranx" in peers:  # numba compiles ranx's kernels once and caches them: not a user's run
                warm = data.parent / f"ragbridge-bench-native-warmup-{a.docs}"
                if not (warm / "meta.json").exists():
                    generate(warm, 50, a.docs, a.seed)
                timed(peer_cmd("ranx", warm, work / "warmup.json"), env)
            results[shape], met = measure(data, a, peers, work, env)
            ok = ok and met
        if "pytrec_eval" in peers:
            if len(shapes) > 1:
                for i, label in ((0, "wall"), (2, "CPU"), (1, "peak memory")):
                    ratios = {s: r["ragbridge"][i] / r["pytrec_eval"][i] for s, r in results.items()}
                    print(f"spread over shapes, ragbridge / pytrec_eval {label}: "
                          + ", ".join(f"{s} {v:.3f}" for s, v in ratios.items())
                          + f" (min {min(ratios.values()):.3f}, max {max(ratios.values()):.3f})")
            print(f"targets (wall and peak <= {a.max_ratio}, CPU <= {IDS_CPU_TARGET} with chunk ids alone, "
                  "set for 100,000 queries) on every shape: "
                  f"{'met' if ok else 'MISSED'}")
        return 0 if ok or a.no_check else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
