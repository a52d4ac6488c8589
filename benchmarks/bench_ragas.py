"""Overhead of ragbridge's RAGAS backend over calling the same RAGAS metrics directly.

Both sides score the same cases with the same six RAGAS metric classes (``ragas.metrics.collections``:
Faithfulness, AnswerRelevancy, ContextPrecisionWithReference, ContextRecall, ContextRelevance,
FactualCorrectness) against the same stub judge (a separate process on 127.0.0.1, 0 ms latency),
with the same concurrency:

* direct: RAGAS as a careful user runs it: ``llm_factory`` on one ``AsyncOpenAI`` client to the stub,
  the six metrics at once, each with ``asyncio.Semaphore(C)`` over its cases, and at most C
  requests in flight (the client's connection pool);
* ragbridge: ``ragbridge.evaluate(cases, backends=["ragas"], judge=JudgeConfig(...,
  max_concurrency=C))``: the runner, the backend, the run folder (scores, cases, the judge's audit
  log) and every call through the judge gateway's in-process transport (at most C upstream requests
  in flight), with its cache off (``cache=off``) and, for information, with a fresh cache
  (``cache=fresh``: repeated identical requests inside the run are answered once).

RAGAS is imported before timing. The sides alternate, ``--repeat`` times. Reported: the ratio of
the medians, the median of the per-round ratios (``_paired``: robust when the machine's load drifts),
the ratio of the best runs, and the ratio of the CPU times (``_cpu``; the judge gateway runs in the
same process).

    python benchmarks/bench_ragas.py [--cases N] [--repeat 3] [--concurrency 8] [--latency 0]

Prints one JSON object with the timings, request counts and the ratio ragbridge / direct; exit
status 1 if ragbridge / direct (medians, cache off) exceeds ``--max-ratio`` (1.1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")


async def run_direct(cases, base_url: str, concurrency: int) -> dict:
    import httpx
    from openai import AsyncOpenAI
    from ragas.embeddings import OpenAIEmbeddings
    from ragas.llms import llm_factory
    from ragas.metrics import collections as rc

    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency,
                                                 max_keepalive_connections=concurrency), timeout=600)
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, http_client=http)
    llm = llm_factory("stub-judge", client=client, max_tokens=4096)
    emb = OpenAIEmbeddings(client=client, model="stub-embedder")

    def texts(c):
        return [x.text for x in c.contexts if x.text]

    metrics = [
        (rc.Faithfulness(llm=llm),
         lambda c: dict(user_input=c.question, response=c.answer, retrieved_contexts=texts(c))),
        (rc.AnswerRelevancy(llm=llm, embeddings=emb),
         lambda c: dict(user_input=c.question, response=c.answer)),
        (rc.ContextPrecisionWithReference(llm=llm),
         lambda c: dict(user_input=c.question, reference=c.reference, retrieved_contexts=texts(c))),
        (rc.ContextRecall(llm=llm),
         lambda c: dict(user_input=c.question, retrieved_contexts=texts(c), reference=c.reference)),
        (rc.ContextRelevance(llm=llm), lambda c: dict(user_input=c.question, retrieved_contexts=texts(c))),
        (rc.FactualCorrectness(llm=llm, mode="f1"), lambda c: dict(response=c.answer, reference=c.reference)),
    ]
    values: dict = {}

    async def one_metric(metric, inputs):
        sem = asyncio.Semaphore(concurrency)

        async def one(c):
            async with sem:
                try:
                    values[(c.id, metric.name)] = (await metric.ascore(**inputs(c))).value
                except Exception as exc:  # same as ragbridge: a failure is one score's
                    values[(c.id, metric.name)] = f"{type(exc).__name__}: {exc}"

        await asyncio.gather(*(one(c) for c in cases))

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one_metric(m, f) for m, f in metrics))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    await client.close()
    return {"seconds": seconds, "cpu": cpu, "scores": len(values)}


def run_ragbridge(cases, base_url: str, concurrency: int, cache: str) -> dict:
    import ragbridge
    from ragbridge.judge import JudgeConfig

    with tempfile.TemporaryDirectory() as tmp:
        cfg = JudgeConfig(model="stub-judge", base_url=base_url, embedding_model="stub-embedder",
                          max_concurrency=concurrency, cache_mode="off" if cache == "off" else "read-write",
                          cache_path=Path(tmp) / "cache.sqlite")
        t0, c0 = time.perf_counter(), time.process_time()
        run = ragbridge.evaluate(cases, backends=["ragas"], judge=cfg, out=Path(tmp) / "run")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        n_scores = len(run.scores)  # read from the folder: before it is removed
    j = run.manifest.counts.get("judge", {})
    return {"seconds": seconds, "cpu": cpu, "scores": n_scores,
            "errored": run.manifest.counts.get("errored"),
            "upstream_calls": j.get("calls"), "cache_hits": j.get("cache_hits")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=0, help="first N cases of the example (0 = all)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--latency", type=float, default=0.0, help="stub judge latency per request, seconds")
    p.add_argument("--no-cache-run", action="store_true", help="skip the informational fresh-cache run")
    p.add_argument("--max-ratio", type=float, default=1.1,
                   help="exit 1 above this ragbridge / direct (medians)")
    a = p.parse_args(argv)

    import ragbridge
    import ragas.embeddings  # noqa: F401 - import cost is not what is measured
    import ragas.llms  # noqa: F401
    import ragas.metrics.collections  # noqa: F401

    cases = [c for c in ragbridge.load_cases(EXAMPLE) if c.answer and c.reference]
    if a.cases:
        cases = cases[: a.cases]
    from ragbridge.testing import StubJudgeProcess

    stub = StubJudgeProcess(a.latency).start()
    base_url = stub.base_url
    results: dict[str, list] = {"direct": [], "ragbridge": [], "ragbridge_fresh_cache": []}
    try:
        # warm-up: first-call costs (pydantic schemas, connection set-up) on both sides
        asyncio.run(run_direct(cases[:2], base_url, a.concurrency))
        run_ragbridge(cases[:2], base_url, a.concurrency, "off")
        for _ in range(a.repeat):
            results["direct"].append(asyncio.run(run_direct(cases, base_url, a.concurrency)))
            results["ragbridge"].append(run_ragbridge(cases, base_url, a.concurrency, "off"))
            if not a.no_cache_run:
                results["ragbridge_fresh_cache"].append(
                    run_ragbridge(cases, base_url, a.concurrency, "fresh"))
    finally:
        stub.close()

    def med(key, what="seconds", f=statistics.median):
        xs = [r[what] for r in results[key]]
        return f(xs) if xs else None

    def ratio(key, what="seconds", f=statistics.median):
        a, b = med(key, what, f), med("direct", what, f)
        return round(a / b, 3) if a is not None and b else None

    def paired(key, base="direct"):
        """median over repeats of (key / base) in the same round: robust to load drifting"""
        xs = [r["seconds"] / d["seconds"] for r, d in zip(results[key], results[base])]
        return round(statistics.median(xs), 3) if xs else None

    out = {
        "cases": len(cases),
        "metrics": 6,
        "concurrency": a.concurrency,
        "stub_latency_s": a.latency,
        "repeat": a.repeat,
        "direct_s": [round(r["seconds"], 3) for r in results["direct"]],
        "ragbridge_s": [round(r["seconds"], 3) for r in results["ragbridge"]],
        "ragbridge_fresh_cache_s": [round(r["seconds"], 3) for r in results["ragbridge_fresh_cache"]],
        "ragbridge_upstream_calls": results["ragbridge"][-1]["upstream_calls"],
        "ragbridge_fresh_cache_upstream_calls": (results["ragbridge_fresh_cache"][-1]["upstream_calls"]
                                                 if results["ragbridge_fresh_cache"] else None),
        "direct_cpu_s": [round(r["cpu"], 3) for r in results["direct"]],
        "ragbridge_cpu_s": [round(r["cpu"], 3) for r in results["ragbridge"]],
        "ratio_ragbridge_over_direct": ratio("ragbridge"),
        "ratio_ragbridge_over_direct_paired": paired("ragbridge"),
        "ratio_fresh_cache_over_direct_paired": paired("ragbridge_fresh_cache"),
        "ratio_ragbridge_over_direct_best_of": ratio("ragbridge", f=min),
        "ratio_ragbridge_over_direct_cpu": ratio("ragbridge", "cpu"),
        "ratio_fresh_cache_over_direct": ratio("ragbridge_fresh_cache"),
        "target_ratio": a.max_ratio,
    }
    print(json.dumps(out, indent=2))
    return 0 if out["ratio_ragbridge_over_direct"] <= a.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
