"""Judged runs at a realistic judge latency: each library's wall time against its floor.

For each (backend, metric) pair, one whole ``ragbridge run`` process scores a golden set from a file
against the stub judge in its own process, which answers every POST after a fixed ``--latency``
(1 s by default) and logs each call it answers (start, end, calls in flight, the answer's digest:
``python -m ragbridge.testing.stub_judge --log``). Every run gets a fresh judge cache and score
cache, and the golden set's questions, answers and chunk texts are unique per case, so every call
a library makes reaches the stub.

The floor of a run is what a perfect scheduler would take: the library's own call chain for each
case (read from its source, `CHAINS`: which of a case's judge calls must wait for which), the calls
each case actually made (counted from the stub's log, each call attributed to its case through the
run's audit log by the answer's digest), ``--concurrency`` calls in flight at most (the judge
gateway's bound) and ``--latency`` per call. A case's calls form stages (the calls of a stage are
concurrent, a stage waits for the one before); every chain here is an in-forest of unit-time calls,
for which scheduling the call with the longest chain still behind it first (Hu's algorithm) is
optimal, so the floor is exact: `floor_steps` x latency.

Reported per pair: wall time and CPU time of the process, the judge span (the first call of a metric
received to the last answered, from the stub's log; calls outside the metrics' chains, such as a
backend's probe of the endpoint, are counted apart), the time to the first call and after the last,
the time a process of its own takes to import what the run imports (`IMPORTS`), the calls, the most
calls in flight at once, the mean in flight over the span, the floor, and wall / floor, span / floor
and wall / (floor + imports). With ``--combined`` one more process runs every pair at once, against
the floor of all their chains together. The one-minute load average is printed before and after
each process. Pairs are run in a rotated order in each round (``--rounds``), so a slow spell of the
shared machine falls on different pairs; ``--baseline DIR`` runs each pair with other code too,
right after this code's run of it.

    python benchmarks/bench_judged_latency.py                      # 500 cases, 1 s, concurrency 8
    python benchmarks/bench_judged_latency.py --cases 100 --pairs ragas:faithfulness,trulens:faithfulness
    python benchmarks/bench_judged_latency.py --combined --rounds 2
    python benchmarks/bench_judged_latency.py --cases 53 --combined --no-split \
        --pairs ragas:faithfulness,deepeval:faithfulness,trulens:faithfulness,phoenix:faithfulness

Exit status 1 when a run fails, a case's call count does not fit its chain, or (with ``--max-ratio``,
default 1.2) a pair's wall / floor exceeds it.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"

from ragbridge.testing import StubJudgeProcess  # noqa: E402

#: How each library's metric calls the judge for one case, from its source (site-packages paths):
#: "sequential": every call waits for the one before; "parallel": every call at once; "fork2": two
#: calls at once, then the rest one after another.
CHAINS: dict[tuple[str, str], tuple[str, str]] = {
    ("ragas", "faithfulness"): (
        "sequential",
        "statements, then NLI verdicts (ragas/metrics/collections/faithfulness/metric.py:117-125)"),
    ("ragas", "answer_relevance"): (
        "sequential", "3 question generations in a loop (identical requests: the judge cache makes them one "
        "upstream call), then the question's embedding, then the questions' embeddings "
        "(ragas/metrics/collections/answer_relevancy/metric.py:116-141)"),
    ("deepeval", "faithfulness"): (
        "fork2", "truths and claims at once (asyncio.gather), then verdicts, then the reason "
        "(deepeval/metrics/faithfulness/faithfulness.py:182-188)"),
    ("deepeval", "answer_relevance"): (
        "sequential", "statements, then verdicts, then the reason "
        "(deepeval/metrics/answer_relevancy/answer_relevancy.py:147-154)"),
    ("trulens", "faithfulness"): (
        "parallel", "the answer split into sentences by nltk, one call per sentence in a thread pool "
        "(trulens/feedback/llm_provider.py:3452-3522)"),
    ("trulens", "answer_relevance"): ("sequential", "one call (relevance_with_cot_reasons)"),
    ("phoenix", "faithfulness"): ("sequential", "one call (FaithfulnessEvaluator.async_evaluate)"),
    ("rubric", "faithfulness"): (
        "sequential", "claims, then one verdicts call for all claims (ragbridge/rubric/claims.py)"),
    ("rubric", "answer_relevance"): ("sequential", "one call (the rubric's grade)"),
}
PAIRS = list(CHAINS)

#: What a process that scores with the backend must import before its first judge call: ragbridge's
#: command line and the library's modules the backend opens (timed as a process of its own, just
#: before each run, as the start-up no scheduler can overlap with judge calls).
IMPORTS = {
    "ragas": "ragas.metrics.collections, ragas.llms, ragas.embeddings",
    "deepeval": "deepeval.metrics, deepeval.models",
    "trulens": "trulens.providers.openai, trulens.feedback",
    "phoenix": "phoenix.evals",
    "rubric": "",
}


def golden(path: Path, n: int) -> int:
    """The bundled example repeated to ``n`` cases, each made unique without adding a sentence: a
    ``Ticket <i>:`` prefix on the question, the answer and every chunk text. Returns the number of
    cases written."""
    base = [json.loads(x) for x in EXAMPLE.read_text().splitlines() if x.strip()]
    base = [c for c in base if c.get("answer") and c.get("contexts")]
    with path.open("w") as f:
        for i in range(n):
            case = dict(base[i % len(base)])
            tag = f"Ticket {i}:"
            case["id"] = f"{case['id']}-{i}"
            case["question"] = f"{tag} {case['question']}"
            case["answer"] = f"{tag} {case['answer']}"
            case["contexts"] = [{**ch, "id": f"{ch['id']}-{i}", "text": f"{tag} {ch.get('text', '')}"}
                                for ch in case["contexts"]]
            f.write(json.dumps(case) + "\n")
    return n


def stages(kind: str, calls: int) -> list[int]:
    """A case's calls as stages (the number of calls of each), by its chain ``kind``."""
    if calls <= 0:
        return []
    if kind == "parallel":
        return [calls]
    if kind == "fork2" and calls >= 2:
        return [2] + [1] * (calls - 2)
    return [1] * calls


def floor_steps(cases: list[list[int]], concurrency: int) -> int:
    """The fewest latency steps in which ``concurrency`` servers answer every case's calls, each
    stage of a case after the one before: Hu's highest-level-first list schedule (optimal for
    unit-time in-forests, which every chain of `CHAINS` is)."""
    ready: list[tuple[int, int]] = []  # (-stages left including this call's, case)
    stage = [0] * len(cases)
    left = [0] * len(cases)  # calls of the current stage not answered yet
    for i, st in enumerate(cases):
        if st:
            left[i] = st[0]
            ready.extend([(-len(st), i)] * st[0])
    heapq.heapify(ready)
    steps = 0
    while ready:
        taken = [heapq.heappop(ready) for _ in range(min(concurrency, len(ready)))]
        steps += 1
        for _, i in taken:
            left[i] -= 1
            if left[i] == 0:
                stage[i] += 1
                st = cases[i]
                if stage[i] < len(st):
                    left[i] = st[stage[i]]
                    for _ in range(st[stage[i]]):
                        heapq.heappush(ready, (-(len(st) - stage[i]), i))
    return steps


def run_pair(work: Path, cases: Path, name: str, pairs: list[tuple[str, str]], a: argparse.Namespace,
             code: Path | None = None) -> dict:
    """One ``ragbridge run`` process against a fresh stub judge process; its timings and the calls.
    ``code``: a source tree (its ``src`` and ``plugins``) to run instead of the installed ragbridge."""
    out = work / f"run-{name}"
    log = work / f"stub-{name}.jsonl"
    backends = sorted({b for b, _ in pairs})
    metrics = sorted({m for _, m in pairs})
    cmd = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
           "run", str(cases), "--out", str(out),
           "--judge-model", "gpt-4o-mini", "--max-concurrency", str(a.concurrency),
           "--cache-path", str(work / f"cache-{name}.sqlite"), "--no-progress", "--json"]
    for b in backends:
        cmd += ["--backend", b]
    for m in metrics:
        cmd += ["--metric", m]
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code / "src"), str(code / "plugins")])
    modules = ", ".join(filter(None, ["ragbridge.commands"] + [IMPORTS[b] for b in backends]))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {modules}"], env=env, check=True)
    imports = time.perf_counter() - t0
    with StubJudgeProcess(latency=a.latency, log=log) as stub:
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd + ["--judge-base-url", stub.base_url], cwd=work, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stdout, stderr = proc.communicate()
        wall = time.perf_counter() - t0
        # the run process only: the stub process is not reaped yet
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_after = os.getloadavg()[0]
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{stderr.decode()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"name": name, "pairs": pairs, "wall": wall, "cpu": cpu, "load": (load_before, load_after),
            "out": out, "log": log, "started": started, "imports": imports}


def analyse(res: dict, a: argparse.Namespace) -> dict:
    """The run's calls from the stub's log, attributed to cases, against the floor of their chains."""
    calls = [json.loads(x) for x in res["log"].read_text().splitlines() if x.strip()]
    owner: dict[str, tuple[str, str, str]] = {}
    for line in (res["out"] / "judge-audit.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("cache") != "hit":
            owner[rec["response_sha256"]] = (rec["backend"], rec["metric"], rec["case_id"])
    per_case: dict[tuple[str, str], Counter] = defaultdict(Counter)
    scored = []  # the calls of the metrics' chains (not e.g. a backend's probe of the endpoint)
    for c in calls:
        who = owner.get(c["response_sha256"])
        if who is not None and (who[0], who[1]) in CHAINS:
            per_case[(who[0], who[1])][who[2]] += 1
            scored.append(c)
    other = len(calls) - len(scored)
    first = min((c["start"] for c in scored), default=res["started"])
    last = max((c["end"] for c in scored), default=first)
    span = last - first
    busy = sum(c["end"] - c["start"] for c in scored)
    chains: list[list[int]] = []
    counts = {}
    for pair in res["pairs"]:
        kind = CHAINS[pair][0]
        per = per_case.get(pair, Counter())
        chains += [stages(kind, n) for n in per.values()]
        counts[f"{pair[0]}:{pair[1]}"] = {"cases": len(per), "calls": sum(per.values()),
                                         "calls_per_case": dict(sorted(Counter(per.values()).items()))}
    floor = floor_steps(chains, a.concurrency) * a.latency
    manifest = json.loads((res["out"] / "run.json").read_text())
    scores = manifest["counts"]
    wall = res["wall"]
    with_imports = floor + res["imports"]
    return {
        "run": res["name"], "wall_s": round(wall, 2), "cpu_s": round(res.get("cpu", 0.0), 2),
        "to_first_call_s": round(first - res["started"], 2), "judge_span_s": round(span, 2),
        "after_last_call_s": round(res["started"] + wall - last, 2),
        "imports_s": round(res["imports"], 2), "calls": len(calls), "other_calls": other,
        "max_in_flight": max((c["in_flight"] for c in calls), default=0),
        "mean_in_flight": round(busy / span, 2) if span else 0.0,
        "floor_s": round(floor, 2), "wall_over_floor": round(wall / floor, 3) if floor else None,
        "span_over_floor": round(span / floor, 3) if floor else None,
        "wall_over_floor_and_imports": round(wall / with_imports, 3) if floor else None,
        "load1": [round(x, 1) for x in res["load"]], "by_pair": counts,
        "scores": {k: scores.get(k) for k in ("scores", "errors") if k in scores},
    }


def line(r: dict) -> str:
    """One run's figures on one line."""
    return (f"{r['run']:<40} wall {r['wall_s']:7.2f} s (to first call {r['to_first_call_s']:5.1f}, "
            f"span {r['judge_span_s']:6.1f}, after {r['after_last_call_s']:4.1f}; imports alone "
            f"{r['imports_s']:4.1f})  cpu {r['cpu_s']:6.1f} s  floor {r['floor_s']:6.1f} s  "
            f"wall/floor {r['wall_over_floor']:.3f}  span/floor {r['span_over_floor']:.3f}  "
            f"wall/(floor+imports) {r['wall_over_floor_and_imports']:.3f}  calls {r['calls']:5d}  "
            f"in flight max {r['max_in_flight']:2d} mean {r['mean_in_flight']:5.2f}  "
            f"load1 {r['load1'][0]}->{r['load1'][1]}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=500)
    p.add_argument("--latency", type=float, default=1.0, help="seconds per judge call (default 1)")
    p.add_argument("--concurrency", type=int, default=8, help="judge calls in flight at most (default 8)")
    p.add_argument("--pairs", default="", help="backend:metric,... (default: every pair of CHAINS)")
    p.add_argument("--combined", action="store_true", help="also one process running every pair at once")
    p.add_argument("--no-split", action="store_true", help="no process per pair (with --combined)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--max-ratio", type=float, default=1.2)
    p.add_argument("--keep", type=Path, default=None, help="keep the run folders and logs here")
    p.add_argument("--baseline", type=Path, default=None,
                   help="a source tree of other code (e.g. `git archive REV src plugins`) to run each pair "
                        "with too, right after this code's run of it")
    a = p.parse_args(argv)
    pairs = [tuple(x.split(":", 1)) for x in a.pairs.split(",") if x] or PAIRS
    unknown = [x for x in pairs if x not in CHAINS]
    if unknown:
        raise SystemExit(f"unknown pair(s) {unknown}; known: {', '.join(f'{b}:{m}' for b, m in PAIRS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        cases = work / "golden.jsonl"
        golden(cases, a.cases)
        units: list[tuple[str, list]] = [] if a.no_split else [(f"{b}-{m}", [(b, m)]) for b, m in pairs]
        if a.combined:
            units.append(("combined", list(pairs)))
        for r in range(a.rounds):
            order = units[r % len(units):] + units[:r % len(units)]
            for name, unit in order:
                for code in ("this", "baseline") if a.baseline else ("this",):
                    tree = a.baseline if code == "baseline" else None
                    res = run_pair(work, cases, f"{name}-r{r}-{code}", unit, a, tree)
                    row = analyse(res, a)
                    row.update(unit=name, code=code)
                    rows.append(row)
                    print(line(row), file=sys.stderr, flush=True)
    print(json.dumps({"cases": a.cases, "latency": a.latency, "concurrency": a.concurrency,
                      "chains": {f"{b}:{m}": CHAINS[(b, m)] for b, m in pairs}, "runs": rows}, indent=2))
    bad = [r for r in rows if r["code"] == "this"
           and (r["wall_over_floor"] is None or r["wall_over_floor"] > a.max_ratio)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
