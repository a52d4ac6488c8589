"""The gateway's requests-per-minute limit and its socket's address."""

import threading

import httpx
import pytest

from ragbridge.judge import JudgeConfig, JudgeConfigError, JudgeGateway
from ragbridge.judge.upstream import RateLimiter
from ragbridge.testing import StubJudge


def test_rate_limit_spaces_upstream_starts_across_threads(tmp_path):
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off", max_concurrency=8,
                          requests_per_minute=600)  # one start every 0.1 s
        with JudgeGateway(cfg) as gw:
            def call(i):
                with httpx.Client(transport=gw.transport()) as c:
                    r = c.post(gw.base_url(in_process=True) + "/chat/completions",
                               json={"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]})
                    assert r.status_code == 200
            threads = [threading.Thread(target=call, args=(i,)) for i in range(10)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        times = sorted(r.time for r in stub.posts())
    assert len(times) == 10
    # starts are spaced by the limiter, 0.1 s apart; the stub's clock sees them after the thread
    # scheduling of a busy machine, which can shift one arrival, so the span and the median gap
    # are what is checked (unlimited, 10 calls take a few milliseconds)
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    assert times[-1] - times[0] > 0.8
    assert gaps[len(gaps) // 2] > 0.085
    assert JudgeConfig(model="m", base_url="http://x/v1", requests_per_minute=30).public_dict()[
        "requests_per_minute"] == 30


def test_rate_limiter_stops_waiting_when_closing():
    limiter = RateLimiter(1)  # one a minute
    closing = threading.Event()
    assert limiter.wait(closing)
    closing.set()
    assert limiter.wait(closing) is False


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "0", "000.000.000.000", "0x0", "0.0", "::", "[::]", "0:0::0",
                                      "::ffff:0.0.0.0", " "])
def test_gateway_socket_host_is_explicit_never_a_wildcard(wildcard):
    cfg = JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1", cache_mode="off")
    with JudgeGateway(cfg, host=wildcard) as gw:
        with pytest.raises(JudgeConfigError, match="not a wildcard"):
            gw.url
    with JudgeGateway(cfg, host="localhost") as gw:
        assert gw.url.startswith("http://localhost:")
        r = httpx.get(gw.url + "/v1/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401


def test_a_wildcard_gateway_host_stops_a_ray_run_before_a_cluster_starts(tmp_path):
    from conftest import EXAMPLE, ragbridge_cli

    res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--metric", "mrr", "--executor", "ray",
                        "--gateway-host", "000.000.000.000")
    assert res.returncode == 2 and "--gateway-host '000.000.000.000' listens on every address" in res.stderr
    assert not (tmp_path / "run").exists()
