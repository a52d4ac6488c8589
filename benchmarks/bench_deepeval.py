"""Overhead of ragbridge's DeepEval backend over calling the same DeepEval metrics directly.

Both sides score the same cases with the same six DeepEval metric classes (FaithfulnessMetric,
AnswerRelevancyMetric, ContextualPrecisionMetric, ContextualRecallMetric, ContextualRelevancyMetric and
GEval with ragbridge's fixed correctness rubric), a fresh metric instance per case, against the same
stub judge (a separate process on 127.0.0.1), with the same number of cases in flight per metric:

* direct: DeepEval as its docs show it: ``OpenAIModel(model, base_url=<stub>)`` and a fresh metric per
  case, ``await metric.a_measure(test_case)`` for every case of the six metrics at once, each metric
  with ``asyncio.Semaphore(C)`` over its cases. DeepEval builds a new OpenAI client, and so a new TLS
  context, for every call;
* direct-tuned: the same, plus one shared ``httpx.AsyncClient`` handed to every ``OpenAIModel``
  (``async_http_client=``) whose pool holds C connections, so at most C requests are in flight as
  through the gateway; this removes the per-call cost: the fairest baseline, and the gate;
* ragbridge: ``ragbridge.evaluate(cases, backends=["deepeval"], judge=JudgeConfig(...,
  max_concurrency=C, cache_mode="off"))``: the runner, the backend, and every call through the judge
  gateway's in-process transport (at most C upstream requests in flight) with its cache off,
  writing a run folder (scores, cases, the judge's audit log) to a temporary directory.

DeepEval is imported before timing. The three sides alternate, ``--repeat`` times; medians are
compared, and per round (``_paired``). Exit status 1 if ragbridge / direct-tuned (medians) exceeds
``--max-ratio`` (1.1).

    python benchmarks/bench_deepeval.py [--cases 12] [--repeat 3] [--concurrency 8] [--latency 0]
                                        [--model gpt-4o-mini]

Prints one JSON object with the timings, request counts and the ratios.
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

import ragbridge  # noqa: E402
from ragbridge.formats.canonical import read_jsonl  # noqa: E402
from ragbridge.judge import JudgeConfig  # noqa: E402
from ragbridge_deepeval import DeepEvalBackend  # noqa: E402
from ragbridge_deepeval import metrics as deepeval_metrics  # noqa: E402
from ragbridge_deepeval import translate  # noqa: E402

# the direct side imports DeepEval outside a run: give this process the backend's privacy defaults first
for _name, _value in DeepEvalBackend().environment().items():
    os.environ.setdefault(_name, _value)


async def direct(cases, model: str, base_url: str, concurrency: int, shared_client: bool) -> tuple[int, int]:
    """DeepEval alone: returns (scores, errors)."""
    import httpx
    from deepeval.models import OpenAIModel

    # the shared pool holds C connections: at most C requests in flight, as through the gateway
    client = httpx.AsyncClient(timeout=120, trust_env=False,
                               limits=httpx.Limits(max_connections=concurrency)) if shared_client else None
    scored = errors = 0

    async def one(metric: str, case, sem: asyncio.Semaphore) -> None:
        nonlocal scored, errors
        async with sem:
            kw = {"async_http_client": client} if client is not None else {}
            judge = OpenAIModel(model=model, base_url=base_url, api_key="sk-bench", temperature=0, **kw)
            m = deepeval_metrics.make_metric(metric, judge)
            try:
                await m.a_measure(translate.to_test_case(case), _show_indicator=False)
                scored += 1
            except Exception:
                errors += 1

    jobs = []
    for metric in deepeval_metrics.METRICS:
        sem = asyncio.Semaphore(concurrency)
        jobs += [one(metric, c, sem) for c in cases]
    await asyncio.gather(*jobs)
    if client is not None:
        await client.aclose()
    return scored, errors


def via_ragbridge(cases, model: str, base_url: str, concurrency: int) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory(prefix="bench-deepeval-") as tmp:
        run = ragbridge.evaluate(cases, backends=["deepeval"], out=Path(tmp) / "run", judge=JudgeConfig(
            model=model, base_url=base_url, cache_mode="off", cache_path=None, max_concurrency=concurrency,
            api_key_env="RAGBRIDGE_BENCH_NO_KEY"))
        scored = sum(1 for s in run.scores if s.value is not None)  # read from the folder: before it goes
        errors = sum(1 for s in run.scores if s.error)
    return scored, errors, run.manifest.counts["judge"]["calls"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=12)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--latency", type=float, default=0.0)
    p.add_argument("--model", default="gpt-4o-mini")
    p.add_argument("--max-ratio", type=float, default=1.1)
    a = p.parse_args(argv)

    cases = read_jsonl(EXAMPLE)[: a.cases]
    # every case has an answer, chunk text and a reference, so every metric scores every case
    import deepeval.metrics  # noqa: F401  (import cost outside the timings)
    import deepeval.models  # noqa: F401

    from ragbridge.testing import StubJudgeProcess

    stub = StubJudgeProcess(a.latency).start()
    base = stub.base_url
    times: dict[str, list[float]] = {"direct": [], "direct-tuned": [], "ragbridge": []}
    info: dict[str, object] = {}
    try:
        asyncio.run(direct(cases[:1], a.model, base, a.concurrency, True))  # warm-up
        for _ in range(a.repeat):
            for side in times:
                t = time.perf_counter()
                if side == "ragbridge":
                    scored, errors, calls = via_ragbridge(cases, a.model, base, a.concurrency)
                    info["judge_calls"] = calls
                else:
                    scored, errors = asyncio.run(
                        direct(cases, a.model, base, a.concurrency, side == "direct-tuned"))
                times[side].append(time.perf_counter() - t)
                info[f"{side}_scored"], info[f"{side}_errors"] = scored, errors
    finally:
        stub.close()

    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "deepeval": __import__("deepeval").__version__,
        "cases": len(cases), "metrics": len(deepeval_metrics.METRICS), "concurrency": a.concurrency,
        "latency": a.latency, "model": a.model, "repeat": a.repeat,
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "median": {k: round(v, 3) for k, v in med.items()},
        "ratio_vs_direct": round(med["ragbridge"] / med["direct"], 3),
        "ratio_vs_direct_tuned": round(med["ragbridge"] / med["direct-tuned"], 3),
        # median over rounds of the ratio within a round: robust when the machine's load drifts
        "ratio_vs_direct_tuned_paired": round(statistics.median(
            r / d for r, d in zip(times["ragbridge"], times["direct-tuned"])), 3),
        "max_ratio": a.max_ratio,
        **info,
    }
    print(json.dumps(out, indent=2))
    return 0 if out["ratio_vs_direct_tuned"] <= a.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
