"""ragbridge's TruLens backend against calling TruLens's provider functions directly.

    python benchmarks/bench_trulens.py [--n 53] [--latency 0.1] [--workers 8] [--reps 3]
                                       [--api responses|chat]

Two paths score the bundled support-bot golden set (``--n`` cases, repeated if larger) on the four
metrics against the same stub judge, which runs in its own process with a fixed per-request latency
(a stand-in for a real model; ``--latency 0`` measures pure overhead):

* direct: TruLens's stock ``OpenAI`` provider pointed at the stub, the same provider functions and
  arguments the backend uses (groundedness with ``use_sent_tokenize=True`` and the trivial filter
  off, context relevance per chunk then the mean, answer relevance, ``GroundTruthAgreement``), all
  (case, metric) pairs submitted to one pool of 4 x ``--workers`` threads, so up to that many
  judge calls in flight;
* ragbridge: ``ragbridge.evaluate(cases, backends=["trulens"], out=...)``: the runner, the backend
  (the four metrics at once on one pool of 2 x ``max_concurrency`` threads), the run folder (scores,
  cases, the judge's audit log) and every call through the judge gateway's in-process transport
  (cache off, ``max_concurrency`` = 4 x workers judge calls in flight): accounting, audit line and
  the gateway's own upstream connection pool.

TruLens is imported, and one warm-up call made, before anything is timed. The paths run ``--reps``
times, alternating; medians are compared (wall time and process CPU time), and the per-round ratios
(``paired``: robust when the machine's load drifts). Exit status 1 if ragbridge / direct (medians)
> ``--max-ratio`` (1.1).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "plugins"))

import ragbridge  # noqa: E402
from ragbridge.backend import RunOptions  # noqa: E402
from ragbridge.judge import JudgeConfig  # noqa: E402
from ragbridge_trulens import TruLensBackend  # noqa: E402

# the direct side imports TruLens outside a run: give this process the backend's defaults first
for _name, _value in TruLensBackend().environment().items():
    os.environ.setdefault(_name, _value)

METRICS = ("faithfulness", "context_relevance", "answer_relevance", "answer_correctness")
MODEL = "bench-judge"


def direct_provider(base_url: str, api: str):
    import openai
    from trulens.providers.openai import OpenAI

    p = OpenAI(model_engine=MODEL, rpm=10**9,
               client=openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0))
    p.clear_capabilities_cache()
    if api == "chat":
        p._set_capabilities({"responses_api": False, "structured_outputs": False})
    return p


def direct_one(provider, case, metric):
    from trulens.core.feedback.feedback import GroundednessConfigs
    from trulens.feedback import GroundTruthAgreement

    if metric == "faithfulness":
        return provider.groundedness_measure_with_cot_reasons(
            source="\n\n".join(c.text for c in case.contexts if c.text), statement=case.answer,
            groundedness_configs=GroundednessConfigs(use_sent_tokenize=True,
                                                     filter_trivial_statements=False))[0]
    if metric == "context_relevance":
        vals = [provider.context_relevance_with_cot_reasons(case.question, c.text)[0]
                for c in case.contexts if c.text]
        return sum(vals) / len(vals)
    if metric == "answer_relevance":
        return provider.relevance_with_cot_reasons(case.question, case.answer)[0]
    return GroundTruthAgreement([{"query": case.question, "expected_response": case.reference}],
                                provider=provider).agreement_measure(case.question, case.answer)[0]


def eligible(case, metric) -> bool:
    have = case.fields_present()
    need = {"faithfulness": ("answer", "context_text"), "context_relevance": ("context_text",),
            "answer_relevance": ("answer",), "answer_correctness": ("answer", "reference")}[metric]
    return all(n in have for n in need)


def run_direct(cases, base_url, workers, api) -> tuple[float, int]:
    # the standard library's pool (TruLens replaces concurrent.futures.ThreadPoolExecutor on import
    # with one that records the stack on every submit; the cheaper original is the fair baseline)
    from trulens.core.utils.threading import fThreadPoolExecutor

    provider = direct_provider(base_url, api)
    t0 = time.perf_counter()
    pool = fThreadPoolExecutor(4 * workers)
    futures = [pool.submit(direct_one, provider, c, m) for m in METRICS for c in cases if eligible(c, m)]
    done = sum(1 for f in futures if f.result() is not None)
    pool.shutdown()
    return time.perf_counter() - t0, done


def run_ragbridge(cases, base_url, workers, api, tmp: Path, rep: int) -> tuple[float, int]:
    judge = JudgeConfig(model=MODEL, base_url=base_url, cache_mode="off", max_concurrency=workers * 4)
    t0 = time.perf_counter()
    run = ragbridge.evaluate(cases, backends=["trulens"], metrics=list(METRICS), judge=judge,
                             out=tmp / f"run-{rep}",
                             options=RunOptions(backend_options={"trulens": {"api": api}}))
    seconds = time.perf_counter() - t0
    bad = [s for s in run.scores if s.status == "error"]
    if bad:
        raise SystemExit(f"ragbridge run had {len(bad)} errors, e.g. {bad[0].error}")
    return seconds, sum(1 for s in run.scores if s.status == "scored")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=53)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--api", choices=("responses", "chat"), default="responses")
    ap.add_argument("--max-ratio", type=float, default=1.1)
    a = ap.parse_args(argv)

    base = ragbridge.load_cases(ROOT / "examples" / "support-bot" / "golden.jsonl")
    cases = [base[i % len(base)].model_copy(update={"id": f"{base[i % len(base)].id}#{i}"})
             for i in range(a.n)]
    t = time.perf_counter()
    import trulens.providers.openai  # noqa: F401
    from trulens.feedback import GroundTruthAgreement  # noqa: F401

    from ragbridge_trulens.env import offline_sentence_splitter

    offline_sentence_splitter()
    print(f"import trulens: {time.perf_counter() - t:.1f}s (not timed below)")
    from ragbridge.testing import StubJudgeProcess

    stub = StubJudgeProcess(a.latency).start()
    url = stub.base_url
    times: dict[str, list[tuple[float, float]]] = {"direct": [], "ragbridge": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-trulens-") as tmp:
            run_direct(cases[:2], url, a.workers, a.api)  # warm-up
            for rep in range(a.reps):
                line = []
                for name in times:
                    c0 = time.process_time()
                    if name == "direct":
                        wall, n = run_direct(cases, url, a.workers, a.api)
                    else:
                        wall, n = run_ragbridge(cases, url, a.workers, a.api, Path(tmp), rep)
                    times[name].append((wall, time.process_time() - c0))
                    line.append(f"{name} {wall:.2f}s wall {times[name][-1][1]:.2f}s cpu ({n} scores)")
                print(f"rep {rep + 1}: " + ", ".join(line), flush=True)
    finally:
        stub.close()
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in times.items()}
    d = med["direct"]
    print(f"median wall / cpu: direct {d[0]:.2f}s / {d[1]:.2f}s, "
          f"ragbridge {med['ragbridge'][0]:.2f}s / {med['ragbridge'][1]:.2f}s")
    ratio = med["ragbridge"][0] / d[0]
    paired = statistics.median(r[0] / x[0] for r, x in zip(times["ragbridge"], times["direct"]))
    print(f"ratio ragbridge / direct: wall {ratio:.3f} (paired {paired:.3f}), "
          f"cpu {med['ragbridge'][1] / d[1]:.3f} "
          f"(n={a.n}, latency={a.latency}s, workers={a.workers}, api={a.api}; limit {a.max_ratio})")
    return 0 if ratio <= a.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
