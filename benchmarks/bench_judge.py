"""Judge gateway throughput, cache speed-up and per-call overhead, against the stub judge.

    PYTHONPATH=src python benchmarks/bench_judge.py [--n 320] [--threads 32] [--client raw|openai]

1. Cold: the stub judge runs in its own process with a fixed 100 ms latency; ``n`` distinct chat
   requests go through a fresh gateway (max_concurrency 16, empty cache in a new temp dir, audit log
   on) from ``threads`` client threads. Ideal time is n * 0.1 / 16; the run must take at most 1.2x that.
2. Warm: the identical requests again, through a new gateway on the same cache: every one is a
   cache hit and the run must be at least 20x faster than cold.
3. Overhead: sequential calls to a 0-latency stub, direct versus through the gateway (cache off),
   median difference per call.

Client threads use one keep-alive ``http.client`` connection each by default (``--client raw``), so
the numbers measure the gateway and not a client library; ``--client openai`` uses the OpenAI SDK.
Exit status 1 if a threshold is missed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ragbridge.judge import JudgeConfig, JudgeGateway  # noqa: E402

LATENCY = 0.1


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_stub_process(latency: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "ragbridge.testing.stub_judge", "--port", str(port),
                             "--latency", str(latency)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                c.close()
                return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("stub judge did not start")


def make_bodies(n: int) -> list[bytes]:
    context = ("Refunds are available within 30 days of purchase. To request a refund, open the Orders "
               "page and choose Request refund. Refunds are paid to the original payment method. ") * 4
    out = []
    for i in range(n):
        prompt = (f"Your task is to judge the faithfulness of a series of statements based on a given context.\n"
                  f'input: {{"context": {json.dumps(context)}, "statements": '
                  f'["Refunds are available within {i} days.", "Case {i} is about refunds."]}}\nOutput: ')
        out.append(json.dumps({"model": "bench-judge", "temperature": 0.0, "max_tokens": 1024,
                               "response_format": {"type": "json_object"},
                               "messages": [{"role": "system", "content": "You are a strict judge."},
                                            {"role": "user", "content": prompt}]}).encode())
    return out


def raw_worker(port: int, path: str, bodies: list[bytes], errors: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer ragbridge-gateway"}
    for body in bodies:
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            errors.append((r.status, data[:200]))
    conn.close()


def openai_worker(base_url: str, bodies: list[bytes], errors: list) -> None:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="ragbridge-gateway", max_retries=0, timeout=120)
    for body in bodies:
        kw = json.loads(body)
        try:
            client.chat.completions.create(**kw)
        except Exception as exc:  # pragma: no cover - reported
            errors.append(repr(exc))
    client.close()


def run_load(gw: JudgeGateway, bodies: list[bytes], threads: int, client: str) -> float:
    base = gw.base_url("bench", "faithfulness", None)
    path = base.split(str(gw.port), 1)[1] + "/chat/completions"
    shards = [bodies[i::threads] for i in range(threads)]
    errors: list = []
    if client == "raw":
        target: Callable = lambda shard: raw_worker(gw.port, path, shard, errors)  # noqa: E731
    else:
        target = lambda shard: openai_worker(base, shard, errors)  # noqa: E731
    ts = [threading.Thread(target=target, args=(s,)) for s in shards]
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return elapsed, cpu


def overhead(calls: int = 400) -> tuple[float, float, float]:
    """Median ms per sequential call: direct to a 0-latency stub, through the gateway (cache off)."""
    proc, stub_url = start_stub_process(0.0)
    try:
        port = int(stub_url.rsplit(":", 1)[1].split("/")[0])
        body = make_bodies(1)[0]
        headers = {"Content-Type": "application/json"}

        def timed(p: int, path: str) -> list[float]:
            conn = http.client.HTTPConnection("127.0.0.1", p)
            out = []
            for _ in range(calls):
                t = time.perf_counter()
                conn.request("POST", path, body, headers)
                r = conn.getresponse()
                r.read()
                out.append(time.perf_counter() - t)
            conn.close()
            return out

        cfg = JudgeConfig(model="bench-judge", base_url=stub_url, cache_mode="off", api_key_env="RAGBRIDGE_BENCH_KEY")
        with JudgeGateway(cfg) as gw:
            gpath = gw.base_url("bench").split(str(gw.port), 1)[1] + "/chat/completions"
            timed(port, "/v1/chat/completions")
            timed(gw.port, gpath)  # warm-up
            direct, via = [], []
            for _ in range(3):  # interleave to share machine noise
                direct += timed(port, "/v1/chat/completions")
                via += timed(gw.port, gpath)
        d, g = statistics.median(direct) * 1000, statistics.median(via) * 1000
        return d, g, g - d
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=320)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--client", choices=["raw", "openai"], default="raw")
    ap.add_argument("--no-audit", action="store_true", help="run without the audit log")
    a = ap.parse_args()

    bodies = make_bodies(a.n)
    ideal = a.n * LATENCY / a.concurrency
    bound = 1.2 * ideal
    proc, stub_url = start_stub_process(LATENCY)
    ok = True
    try:
        with tempfile.TemporaryDirectory(prefix="ragbridge-bench-judge-") as tmp:
            cfg = JudgeConfig(model="bench-judge", base_url=stub_url, max_concurrency=a.concurrency,
                              cache_path=Path(tmp) / "judge-cache.sqlite", api_key_env="RAGBRIDGE_BENCH_KEY")
            audit = None if a.no_audit else Path(tmp) / "judge-audit.jsonl"
            with JudgeGateway(cfg, audit_log=audit) as gw:
                cold, cold_cpu = run_load(gw, bodies, a.threads, a.client)
                u = gw.usage()
                assert u.calls == a.n and u.cache_hits == 0, u
            with JudgeGateway(cfg, audit_log=audit) as gw:
                warm, warm_cpu = run_load(gw, bodies, a.threads, a.client)
                u = gw.usage()
                assert u.calls == 0 and u.cache_hits == a.n, u
    finally:
        proc.terminate()
        proc.wait(10)

    print(f"judge gateway benchmark: n={a.n} calls, {a.threads} client threads ({a.client} client), "
          f"max_concurrency={a.concurrency}, stub latency {LATENCY * 1000:.0f} ms (separate process), "
          f"audit log {'off' if a.no_audit else 'on'}")
    print(f"  cold: {cold:.3f} s   ideal n*latency/concurrency = {ideal:.3f} s   "
          f"cold/ideal = {cold / ideal:.3f}  (limit 1.2)  {'OK' if cold <= bound else 'FAIL'}   "
          f"[process CPU {cold_cpu:.3f} s = {cold_cpu / a.n * 1000:.3f} ms/call, clients included]")
    speedup = cold / warm
    print(f"  warm: {warm:.3f} s   cold/warm speed-up = {speedup:.1f}x  (need >= 20x)  "
          f"{'OK' if speedup >= 20 else 'FAIL'}   ({warm / a.n * 1000:.3f} ms per cached call; "
          f"process CPU {warm_cpu:.3f} s = {warm_cpu / a.n * 1000:.3f} ms/call, clients included)")
    print(f"  machine load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    ok = cold <= bound and speedup >= 20
    d, g, diff = overhead()
    print(f"  overhead (sequential, 0-latency stub, cache off): direct {d:.3f} ms, via gateway {g:.3f} ms, "
          f"added {diff:.3f} ms per call (median)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
