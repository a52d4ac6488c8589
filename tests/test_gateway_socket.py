"""The judge gateway's loopback socket against another local process that floods it before it has
the key: endless headers, thousands of idle connections, a head sent a byte at a time, too many
header lines. The gateway's memory and threads stay bounded, and the run's own calls (with the key,
on new connections and on kept ones) still pass. Every loop is bounded and on 127.0.0.1."""

from __future__ import annotations

import os
import resource
import socket
import threading
import time

import httpx
import pytest

import ragbridge.judge.server as server
from ragbridge.judge import JudgeConfig, JudgeGateway
from ragbridge.testing import StubJudge

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateway():
    with StubJudge() as stub, JudgeGateway(JudgeConfig(model="m", base_url=stub.base_url,
                                                       cache_mode="off")) as gw:
        gw.url  # noqa: B018 - opens the socket
        yield gw


def own_call(gw: JudgeGateway, client: httpx.Client | None = None) -> float:
    """One judge call of the run's, with the key (on a new connection unless ``client``): its time."""
    started = time.monotonic()
    post = client.post if client is not None else httpx.post
    r = post(gw.url + "/chat/completions", headers={"Authorization": f"Bearer {gw.api_key}"}, json=BODY,
             timeout=30)
    assert r.status_code == 200, r.text
    return time.monotonic() - started


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def head(gw: JudgeGateway) -> bytes:
    return f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n".encode()


def closed_by_server(s: socket.socket, within: float = 5.0) -> bytes | None:
    """What the server sent before it closed ``s`` (None: still open after ``within`` seconds)."""
    s.settimeout(within)
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (TimeoutError, socket.timeout):
        return None
    except OSError:
        pass
    return data


@pytest.mark.parametrize("names", ["distinct", "repeated"])
def test_endless_headers_hold_no_memory_and_the_runs_calls_pass(gateway, names):
    """100 connections each sending 99 header lines of 64 KB (distinct names, or one name over and
    over), never ending the head: each is answered 431 and closed after 32 KB, the process grows by
    less than 16 MB (it held 6 MB a connection, 634 MB in all) and keeps no thread for them."""
    gw = gateway
    own_call(gw)  # the gateway's own threads started
    base_rss, base_threads = rss_mb(), threading.active_count()
    conns = [socket.create_connection(("127.0.0.1", gw.port), timeout=5) for _ in range(100)]
    for c in conns:
        c.sendall(head(gw))
    peak, open_, calls = 0.0, list(conns), 1
    for n in range(99):
        line = (f"X-Flood-{n if names == 'distinct' else 0}: ".encode() + b"a" * 64000 + b"\r\n")
        for c in list(open_):
            try:
                c.sendall(line)
            except OSError:  # closed by the gateway
                open_.remove(c)
        peak = max(peak, rss_mb() - base_rss)
        assert own_call(gw) < 5
        calls += 1
        if not open_:
            break
    assert open_ == [] and peak < 16, (len(open_), peak)
    answers = [closed_by_server(c) for c in conns]
    assert all(a is not None and (a == b"" or a.startswith(b"HTTP/1.1 431 ")) for a in answers)
    assert threading.active_count() <= base_threads + 4  # the run's calls' (it was one a connection)
    for c in conns:
        c.close()
    assert gw.usage().calls == calls  # the run's own, and only those


@pytest.mark.slow
def test_idle_connections_hold_no_thread_and_are_closed(gateway, monkeypatch):
    """2,000 connections that send nothing: no thread for any (it was one each), the oldest closed
    past 512 at once and the rest after the head's time limit; meanwhile the run's calls pass on new
    connections and on a kept one, which is closed only after its own idle limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4500:
        pytest.skip(f"2,000 connections need 4,500 open files (limit {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4500), hard))
    monkeypatch.setattr(server, "HEAD_SECONDS", 2.0, raising=False)
    monkeypatch.setattr(server, "IDLE_SECONDS", 3.0, raising=False)
    gw = gateway
    try:
        with httpx.Client() as kept:
            own_call(gw, kept)  # the run's client: its connection presents the key, and stays
            base_threads = threading.active_count()
            idle = []
            for _ in range(2000):
                idle.append(socket.create_connection(("127.0.0.1", gw.port), timeout=5))
            time.sleep(0.5)
            assert threading.active_count() <= base_threads + 4
            assert max(own_call(gw) for _ in range(5)) < 2  # new connections, past the idle ones
            assert own_call(gw, kept) < 2
            dropped = sum(closed_by_server(c, within=0.01) is not None for c in idle[:1400])
            assert dropped >= 1400 - 512  # the oldest, for the new ones (they were all kept)
            answers = [closed_by_server(c, within=5) for c in idle[-300:]]  # the newest: at the limit
            assert all(a is not None and (a == b"" or a.startswith(b"HTTP/1.1 408 ")) for a in answers)
            time.sleep(3.5)  # the kept connection, idle past its limit, is closed; the client reconnects
            assert own_call(gw, kept) < 2
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for c in idle:
            c.close()


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_time_limit(gateway, monkeypatch):
    monkeypatch.setattr(server, "HEAD_SECONDS", 1.0, raising=False)
    gw = gateway
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
    started, answer = time.monotonic(), None
    for byte in (head(gw) + b"X-Slow: " + b"a" * 100)[:60]:  # one byte every 0.05 s: 3 s in all
        try:
            s.send(bytes([byte]))
        except OSError:
            break
        time.sleep(0.05)
    answer = closed_by_server(s)
    assert answer is not None and answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 3
    s.close()


def test_too_many_header_lines_are_refused_even_under_one_name(gateway):
    gw = gateway
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as s:
        s.sendall(head(gw) + f"Authorization: Bearer {gw.api_key}\r\n".encode() + b"X-A: 1\r\n" * 101
                  + b"Content-Length: 2\r\n\r\n{}")
        assert closed_by_server(s).startswith(b"HTTP/1.1 431 ")
    assert gw.usage().calls == 0
