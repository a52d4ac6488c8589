"""Judge gateway throughput, cache speed-up and per-call overhead, against the stub judge.

    python benchmarks/bench_judge.py [--n 320] [--threads 32] [--client socket|http.client|openai|transport]
                                     [--repeat 3]

1. Cold: the stub judge runs in its own process with a fixed 100 ms latency; ``n`` distinct chat
   requests go through a fresh gateway (max_concurrency 16, empty cache in a new temp dir, audit log
   on) from ``threads`` client threads. Ideal time is n * 0.1 / 16; the run must take at most 1.2x that.
2. Warm: the identical requests again, through a new gateway on the same cache: every one is a
   cache hit and the run must be at least 20x faster than cold.
3. Overhead: sequential calls to a 0-latency stub, direct versus through the gateway (cache off),
   difference per call at p10 and p50: over the loopback socket (``http.client`` both ways), and
   through the in-process transport the backends use (``httpx.Client`` both ways: to the stub
   directly, and with ``transport=gw.transport()``).

Client threads each hold one keep-alive connection and speak minimal HTTP/1.1 over a socket by
default (``--client socket``, like wrk), so the numbers measure the gateway and not a client library
(client and gateway share one interpreter lock); ``--client http.client`` uses the standard
library's client, ``--client openai`` the OpenAI SDK (about 2 ms of CPU per call by itself), and
``--client transport`` an ``httpx.Client`` on the gateway's in-process transport (no socket between
client and gateway: the path ragbridge's backends use).
Each cold+warm pair runs ``--repeat`` times (fresh temp dir each time); the thresholds are checked on
the best run, since timings on a shared machine only ever get slower. Per-call process CPU is
printed too: it does not depend on what else the machine is doing. Exit status 1 if a threshold is
missed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ragbridge.judge import JudgeConfig, JudgeGateway  # noqa: E402
from ragbridge.testing import StubJudgeProcess  # noqa: E402

LATENCY = 0.1


def make_bodies(n: int) -> list[bytes]:
    context = ("Refunds are available within 30 days of purchase. To request a refund, open the Orders "
               "page and choose Request refund. Refunds are paid to the original payment method. ") * 4
    out = []
    for i in range(n):
        prompt = ("Your task is to judge the faithfulness of a series of statements "
                  "based on a given context.\n"
                  f'input: {{"context": {json.dumps(context)}, "statements": '
                  f'["Refunds are available within {i} days.", "Case {i} is about refunds."]}}\nOutput: ')
        out.append(json.dumps({"model": "bench-judge", "temperature": 0.0, "max_tokens": 1024,
                               "response_format": {"type": "json_object"},
                               "messages": [{"role": "system", "content": "You are a strict judge."},
                                            {"role": "user", "content": prompt}]}).encode())
    return out


def raw_worker(port: int, path: str, key: str, bodies: list[bytes], errors: list) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    for body in bodies:
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            errors.append((r.status, data[:200]))
    conn.close()


def socket_worker(port: int, path: str, key: str, bodies: list[bytes], errors: list) -> None:
    """A minimal keep-alive HTTP/1.1 client (like wrk): prebuilt request bytes, Content-Length framing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {key}\r\n").encode()
    buf = b""
    for body in bodies:
        sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("gateway closed the connection")
            buf += chunk
        header, _, buf = buf.partition(b"\r\n\r\n")
        status = int(header.split(b" ", 2)[1])
        length = int(next(line.split(b":", 1)[1] for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(buf) < length:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("gateway closed the connection")
            buf += chunk
        data, buf = buf[:length], buf[length:]
        if status != 200:
            errors.append((status, data[:200]))
    sock.close()


def transport_worker(client, url: str, bodies: list[bytes], errors: list) -> None:
    headers = {"Content-Type": "application/json"}
    for body in bodies:
        r = client.post(url, content=body, headers=headers)
        if r.status_code != 200:
            errors.append((r.status_code, r.content[:200]))


def openai_worker(client, bodies: list[bytes], errors: list) -> None:
    for body in bodies:
        kw = json.loads(body)
        try:
            client.chat.completions.create(**kw)
        except Exception as exc:  # pragma: no cover - reported
            errors.append(repr(exc))


def run_load(gw: JudgeGateway, bodies: list[bytes], threads: int, client: str) -> float:
    shards = [bodies[i::threads] for i in range(threads)]
    errors: list = []
    if client == "transport":
        import httpx

        url = gw.base_url("bench", "faithfulness", None, in_process=True) + "/chat/completions"
        clients = [httpx.Client(transport=gw.transport(), timeout=120) for _ in shards]
        ts = [threading.Thread(target=transport_worker, args=(c, url, s, errors))
              for c, s in zip(clients, shards)]
        return _timed_threads(ts, errors)
    base = gw.base_url("bench", "faithfulness", None)
    path = base.split(str(gw.port), 1)[1] + "/chat/completions"
    if client == "socket":
        ts = [threading.Thread(target=socket_worker, args=(gw.port, path, gw.api_key, s, errors))
              for s in shards]
    elif client == "http.client":
        ts = [threading.Thread(target=raw_worker, args=(gw.port, path, gw.api_key, s, errors))
              for s in shards]
    else:  # SDK clients are built before the clock starts (each builds an httpx client)
        import openai

        clients = [openai.OpenAI(base_url=base, api_key=gw.api_key, max_retries=0, timeout=120)
                   for _ in shards]
        ts = [threading.Thread(target=openai_worker, args=(c, s, errors)) for c, s in zip(clients, shards)]
    return _timed_threads(ts, errors)


def _timed_threads(ts: list, errors: list) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, e.g. {errors[0]}")
    return elapsed, cpu


def overhead(calls: int = 300, rounds: int = 3) -> dict[str, float]:
    """ms per sequential call: direct to a 0-latency stub process vs through the gateway (cache off).

    Rounds interleave the two so both see the same machine noise; p10 and p50 are reported (p10 is
    the better estimate on a busy machine: noise only ever adds time)."""
    stub = StubJudgeProcess(0.0).start()
    stub_url = stub.base_url
    try:
        port = int(stub_url.rsplit(":", 1)[1].split("/")[0])
        body = make_bodies(1)[0]
        headers = {"Content-Type": "application/json"}

        def timed(p: int, path: str, key: str = "") -> list[float]:
            conn = http.client.HTTPConnection("127.0.0.1", p)
            out = []
            auth = {**headers, "Authorization": f"Bearer {key}"} if key else headers
            for _ in range(calls):
                t = time.perf_counter()
                conn.request("POST", path, body, auth)
                r = conn.getresponse()
                r.read()
                out.append(time.perf_counter() - t)
            conn.close()
            return out

        def timed_httpx(client, url: str) -> list[float]:
            out = []
            for _ in range(calls):
                t = time.perf_counter()
                client.post(url, content=body, headers=headers).read()
                out.append(time.perf_counter() - t)
            return out

        import httpx

        cfg = JudgeConfig(model="bench-judge", base_url=stub_url, cache_mode="off",
                          api_key_env="RAGBRIDGE_BENCH_KEY")
        with JudgeGateway(cfg) as gw, httpx.Client(trust_env=False) as plain, \
                httpx.Client(transport=gw.transport()) as in_process:
            gpath = gw.base_url("bench").split(str(gw.port), 1)[1] + "/chat/completions"
            turl = gw.base_url("bench", in_process=True) + "/chat/completions"
            timed(port, "/v1/chat/completions")
            timed(gw.port, gpath, gw.api_key)  # warm-up
            timed_httpx(plain, stub_url + "/chat/completions")
            timed_httpx(in_process, turl)
            direct, via, direct_httpx, via_transport = [], [], [], []
            for _ in range(rounds):
                direct += timed(port, "/v1/chat/completions")
                via += timed(gw.port, gpath, gw.api_key)
                direct_httpx += timed_httpx(plain, stub_url + "/chat/completions")
                via_transport += timed_httpx(in_process, turl)

        def q(xs: list[float], f: float) -> float:
            return sorted(xs)[int(f * (len(xs) - 1))] * 1000

        return {"direct_p10": q(direct, 0.1), "via_p10": q(via, 0.1),
                "direct_p50": q(direct, 0.5), "via_p50": q(via, 0.5),
                "httpx_p10": q(direct_httpx, 0.1), "transport_p10": q(via_transport, 0.1),
                "httpx_p50": q(direct_httpx, 0.5), "transport_p50": q(via_transport, 0.5)}
    finally:
        stub.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=320)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--client", choices=["socket", "http.client", "openai", "transport"], default="socket")
    ap.add_argument("--no-audit", action="store_true", help="run without the audit log")
    ap.add_argument("--repeat", type=int, default=3, help="cold+warm pairs; thresholds use the best run")
    a = ap.parse_args()

    bodies = make_bodies(a.n)
    ideal = a.n * LATENCY / a.concurrency
    bound = 1.2 * ideal
    stub = StubJudgeProcess(LATENCY).start()
    stub_url = stub.base_url
    runs = []
    try:
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory(prefix="ragbridge-bench-judge-") as tmp:
                cfg = JudgeConfig(model="bench-judge", base_url=stub_url, max_concurrency=a.concurrency,
                                  cache_path=Path(tmp) / "judge-cache.sqlite",
                                  api_key_env="RAGBRIDGE_BENCH_KEY")
                audit = None if a.no_audit else Path(tmp) / "judge-audit.jsonl"
                with JudgeGateway(cfg, audit_log=audit) as gw:
                    cold = run_load(gw, bodies, a.threads, a.client)
                    u = gw.usage()
                    assert u.calls == a.n and u.cache_hits == 0, u
                with JudgeGateway(cfg, audit_log=audit) as gw:
                    warm = run_load(gw, bodies, a.threads, a.client)
                    u = gw.usage()
                    assert u.calls == 0 and u.cache_hits == a.n, u
                runs.append((cold, warm, os.getloadavg()[0]))
    finally:
        stub.close()

    print(f"judge gateway benchmark: n={a.n} calls, {a.threads} client threads ({a.client} client), "
          f"max_concurrency={a.concurrency}, stub latency {LATENCY * 1000:.0f} ms (separate process), "
          f"audit log {'off' if a.no_audit else 'on'}, {os.cpu_count()} CPUs")
    for i, ((c, c_cpu), (w, w_cpu), load) in enumerate(runs, 1):
        print(f"  run {i}: cold {c:.3f} s (cold/ideal {c / ideal:.3f}; "
              f"process CPU {c_cpu / a.n * 1000:.3f} ms/call)"
              f"   warm {w:.3f} s (speed-up {c / w:.1f}x; {w / a.n * 1000:.3f} ms and process CPU "
              f"{w_cpu / a.n * 1000:.3f} ms per cached call)   load average {load:.2f}")
    cold = min(r[0][0] for r in runs)
    warm = min(r[1][0] for r in runs)
    speedup = cold / warm
    print(f"  best of {len(runs)}: cold {cold:.3f} s, ideal n*latency/concurrency {ideal:.3f} s, "
          f"cold/ideal = {cold / ideal:.3f} (limit 1.2) {'OK' if cold <= bound else 'FAIL'}")
    print(f"  best of {len(runs)}: warm {warm:.3f} s, cold/warm speed-up = {speedup:.1f}x (need >= 20x) "
          f"{'OK' if speedup >= 20 else 'FAIL'}")
    ok = cold <= bound and speedup >= 20
    o = overhead()
    print(f"  overhead (sequential, 0-latency stub process, cache off): p10 direct {o['direct_p10']:.3f} ms, "
          f"via gateway {o['via_p10']:.3f} ms, added {o['via_p10'] - o['direct_p10']:.3f} ms; "
          f"p50 direct {o['direct_p50']:.3f} ms, via gateway {o['via_p50']:.3f} ms, "
          f"added {o['via_p50'] - o['direct_p50']:.3f} ms")
    print(f"  in-process transport (sequential, httpx.Client both ways): p10 direct {o['httpx_p10']:.3f} ms, "
          f"via transport {o['transport_p10']:.3f} ms, added {o['transport_p10'] - o['httpx_p10']:.3f} ms; "
          f"p50 direct {o['httpx_p50']:.3f} ms, via transport {o['transport_p50']:.3f} ms, "
          f"added {o['transport_p50'] - o['httpx_p50']:.3f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
