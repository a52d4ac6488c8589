"""The Ray executor on a real local Ray cluster: the same scores and run folder as the local
executor, one judge budget and one cache for every worker, nothing lost when a worker or the driver
is killed, no connection off the machine, and the judge's key in no Ray process or log.

Most tests share one private local cluster (``ray_local``, started in-process with Ray's offline
settings, as ``ray_session`` starts one); the tests in subprocesses let the executor start its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import library, needs_library

#: a Ray cluster per test session and subprocesses that start their own: a minute or more in all
pytestmark = [pytest.mark.slow, needs_library("ray")]

ray = library("ray")

from conftest import stub_judge_config  # noqa: E402
from ragbridge import evaluate, load_run  # noqa: E402
from ragbridge.plugins import get_backends  # noqa: E402
from ragbridge.run.ray_executor import LOCAL_ENVIRONMENT, RayExecutor, ray_session  # noqa: E402
from ragbridge.testing import StubJudge  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = "gpt-4o-mini"
LIBRARIES = [b for b in ("ragas", "deepeval", "trulens", "phoenix")
             if b in get_backends() and get_backends()[b].available()]
#: what two runs may differ in: time, and tokens (a request repeated within a run is a single-flight
#: cache hit or a second call depending on timing, in either executor)
VOLATILE = {"seconds", "prompt_tokens", "completion_tokens"}


@pytest.fixture(scope="session")
def ray_local():
    """One private local cluster for the tests, started as the executor starts one (its offline
    settings, a short temporary folder, a capped object store) and left running between tests."""
    with ray_session(num_cpus=2, object_store_memory=512 * 2**20) as connected:
        yield connected


def comparable(run_dir: Path) -> dict:
    """The run folder's scores, each once (a repeated key fails), without the volatile fields."""
    out = {}
    for line in (run_dir / "scores.jsonl").read_text().splitlines():
        s = json.loads(line)
        key = (s["case_id"], s["metric"], s["backend"])
        assert key not in out, f"score recorded twice: {key}"
        out[key] = {k: v for k, v in s.items() if k not in VOLATILE}
    return out


def test_same_run_folder_and_scores_as_local(tmp_path, example_cases, ray_local):
    cases = example_cases[:8]
    backends = ["native", "rubric", *LIBRARIES]
    with StubJudge() as stub:
        local = evaluate(cases, backends=backends, out=tmp_path / "local",
                         judge=stub_judge_config(stub, MODEL, tmp_path / "local.sqlite"))
        remote = evaluate(cases, backends=backends, out=tmp_path / "ray", executor="ray",
                          judge=stub_judge_config(stub, MODEL, tmp_path / "ray.sqlite"))
    a, b = comparable(tmp_path / "local"), comparable(tmp_path / "ray")
    assert len(a) == len(local.scores) > 8 * 10
    assert a == b  # value for value: every field but time and tokens
    assert {s.key: s.value for s in local.scores} == {s.key: s.value for s in remote.scores}
    ma, mb = (json.loads((tmp_path / d / "run.json").read_text()) for d in ("local", "ray"))
    assert ma["counts"]["scores"] == mb["counts"]["scores"] and mb["status"] == "complete"
    # every score's calls are equal (above); the totals may differ by what a backend asks once per
    # session (TruLens's endpoint probe): once per actor instead of once per run
    assert mb["counts"]["judge"]["calls"] + mb["counts"]["judge"]["cache_hits"] >= sum(
        v["judge_calls"] for v in b.values())
    assert mb["judge"]["stub"] is True
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == sorted(
        p.name for p in (tmp_path / "ray").iterdir())


def test_native_blocks_equal_local(tmp_path, ray_local):
    """Many native blocks (a block of 7 cases), graded labels, sources and repeated chunk ids."""
    import random

    from ragbridge.schema import Case

    rng = random.Random(3)
    cases = []
    for i in range(60):
        docs = [f"d{rng.randrange(40)}" for _ in range(12)]
        rel = {f"d{j}": rng.randrange(0, 3) for j in rng.sample(range(40), rng.randrange(0, 5))}
        cases.append(Case(id=f"q{i}", question="q", answer="the refund window is 30 days",
                          contexts=[{"id": f"{d}#{k % 2}", "source": d, "text": d}
                                    for k, d in enumerate(docs)],
                          relevant=rel, must_contain=["30 days"]))
    metrics = ["recall@5", "precision@3", "hit@10", "mrr", "ndcg@5", "map", "must_contain"]
    evaluate(cases, metrics=metrics, out=tmp_path / "local")
    evaluate(cases, metrics=metrics, out=tmp_path / "ray", executor=RayExecutor(native_block_rows=7))
    assert comparable(tmp_path / "local") == comparable(tmp_path / "ray")
    # chunk ids alone, many graded labels: the sums of a case's labels are the same bits in the
    # driver and in a worker (another process, its own string hashing)
    cases = []
    for i in range(200):
        ids = [f"d{j}" for j in rng.sample(range(500), 50)]
        rel = {d: rng.randint(1, 3) for d in rng.sample(ids[:20], rng.randint(3, 12))}
        cases.append(Case(id=f"p{i}", question="q", contexts=[{"id": d} for d in ids], relevant=rel))
    metrics = ["ndcg@10", "ndcg", "map"]
    evaluate(cases, metrics=metrics, out=tmp_path / "local-ids")
    evaluate(cases, metrics=metrics, out=tmp_path / "ray-ids", executor=RayExecutor(native_block_rows=64))
    assert comparable(tmp_path / "local-ids") == comparable(tmp_path / "ray-ids")


def test_one_judge_budget_and_rate_for_every_worker(tmp_path, example_cases, ray_local):
    """Four actors running two batches each would keep 8 x batch requests open: the gateway lets
    max_concurrency of them reach the judge, counted at the stub."""
    with StubJudge(latency=0.15) as stub:
        evaluate(example_cases[:24], backends=["rubric"], metrics=["faithfulness"],
                 judge=stub_judge_config(stub, MODEL, None, cache_mode="off", max_concurrency=3),
                 executor=RayExecutor(actors=4, batch_size=3))
        assert stub.max_in_flight == 3  # reached, never exceeded
        assert len(stub.posts()) >= 24
    with StubJudge() as stub:  # 300 a minute: starts 0.2 s apart, whichever worker asks
        evaluate(example_cases[:12], backends=["rubric"], metrics=["answer_relevance"],
                 judge=stub_judge_config(stub, MODEL, None, cache_mode="off", max_concurrency=8,
                                         requests_per_minute=300),
                 executor=RayExecutor(actors=3, batch_size=2))
        times = sorted(r.time for r in stub.posts())
    assert len(times) == 12
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) > 0.17, gaps  # 0.2 s apart (less a little scheduling jitter)


def test_scorer_actors_are_made_once_per_run_and_end_with_it(tmp_path, example_cases, ray_local):
    """Three batches of judged cases: the two scorer actors are made once for the run (not once per
    batch), every batch is scored by them, and none is left alive when the run ends."""
    from ray._private.state import actors as actor_table  # Ray's actor table (dead actors included)

    def scorers() -> dict:
        return {a: info for a, info in actor_table().items() if info["ActorClassName"] == "BackendScorer"}

    before = set(scorers())
    with StubJudge() as stub:
        run = evaluate(example_cases[:12], backends=["rubric"], metrics=["answer_relevance"],
                       judge=stub_judge_config(stub, MODEL, None), out=tmp_path / "run", batch_size=4,
                       executor=RayExecutor(actors=2, batch_size=2))
        assert len(stub.posts()) == 12
    assert run.complete and len(run.scores) == 12
    made = {a: info for a, info in scorers().items() if a not in before}
    assert len(made) == 2, made
    assert {info["State"] for info in made.values()} == {"DEAD"}


def test_cache_is_shared_by_every_worker(tmp_path, example_cases, ray_local):
    cases = example_cases[:10]
    with StubJudge() as stub:
        cfg = stub_judge_config(stub, MODEL, tmp_path / "cache.sqlite")
        first = evaluate(cases, backends=["rubric"], out=tmp_path / "one", judge=cfg,
                         executor=RayExecutor(actors=2, batch_size=2))
        assert len(stub.posts()) > 0
        stub.reset()
        # other actors, other batches: each case lands elsewhere, and is a hit wherever it lands
        second = evaluate(cases, backends=["rubric"], out=tmp_path / "two", judge=cfg,
                          executor=RayExecutor(actors=3, batch_size=3), score_cache=False)
        assert stub.posts() == []
    assert comparable(tmp_path / "one") == comparable(tmp_path / "two")
    assert {s.key: s.value for s in first.scores} == {s.key: s.value for s in second.scores}


def _scorer_pids() -> list[int]:
    """The processes of the scorer actors (their title is ``ray::BackendScorer``, with the method running)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if cmd.startswith(b"ray::BackendScorer"):
                pids.append(int(d))
    return pids


def test_killed_worker_loses_nothing_and_doubles_nothing(tmp_path, example_cases, ray_local):
    cases = example_cases[:30]
    with StubJudge(latency=0.1) as stub:
        reference = evaluate(cases, backends=["rubric"], metrics=["faithfulness", "answer_relevance"],
                             out=tmp_path / "ref",
                             judge=stub_judge_config(stub, MODEL, tmp_path / "ref.sqlite"))
        stub.reset()
        killed = []

        def kill_one():
            deadline = time.time() + 120
            pids = []
            while time.time() < deadline and (len(stub.posts()) < 15 or not pids):
                time.sleep(0.05)
                pids = _scorer_pids()
            if pids:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])

        t = threading.Thread(target=kill_one)
        t.start()
        run = evaluate(cases, backends=["rubric"], metrics=["faithfulness", "answer_relevance"],
                       out=tmp_path / "ray",
                       judge=stub_judge_config(stub, MODEL, tmp_path / "ray.sqlite", max_concurrency=4),
                       executor=RayExecutor(actors=2, batch_size=4))
        t.join()
    assert killed, "no scorer actor was found to kill"
    assert run.complete and len(run.scores) == len(reference.scores) == 60
    assert len(stub.posts()) >= 60  # the batch of the killed actor was asked for again
    _equal_but_calls(comparable(tmp_path / "ray"), comparable(tmp_path / "ref"))


def _equal_but_calls(a: dict, b: dict) -> bool:
    """Equal but for judge_calls, which for a score of a retried batch also counts the calls of the
    attempt that died (answered again from the cache)."""
    strip = lambda d: {k: {f: x for f, x in v.items() if f != "judge_calls"} for k, v in d.items()}  # noqa: E731
    assert strip(a) == strip(b)
    assert all(a[k]["judge_calls"] >= b[k]["judge_calls"] for k in a)
    return True


DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from ragbridge import evaluate, load_cases
    from ragbridge.judge import JudgeConfig
    from ragbridge.run.ray_executor import RayExecutor
    golden, out, base_url, cache, report = sys.argv[1:6]
    secret = os.environ["RB_TEST_JUDGE_KEY"]
    seen = []

    def inspect(score):
        # while the cluster runs: the key in no Ray process's environment and no file of its folder, the
        # cluster's token in no file but its own and no command line
        seen.append(score)
        if len(seen) != 3 or report == "-":
            return
        import ray
        session = ray._private.worker._global_node.get_session_dir_path()
        token_path = os.environ["RAY_AUTH_TOKEN_PATH"]  # the cluster's token: in its own file only
        secrets = [secret.encode(), open(token_path, "rb").read()]
        found = []
        for d, _, files in os.walk(os.path.dirname(token_path)):
            for f in files:
                try:
                    data = open(os.path.join(d, f), "rb").read()
                except OSError:
                    continue
                if any(s in data for s in secrets) and os.path.join(d, f) != token_path:
                    found.append(os.path.join(d, f))
        environs = []
        for p in os.listdir("/proc"):
            if p.isdigit() and p != str(os.getpid()):
                try:
                    env = open(f"/proc/{p}/environ", "rb").read()
                    cmd = open(f"/proc/{p}/cmdline", "rb").read()
                except OSError:
                    continue
                if (b"ray" in cmd) and (secret.encode() in env or any(s in cmd for s in secrets)):
                    environs.append(cmd[:80].decode("utf-8", "replace"))
        with open(report, "w") as fh:
            json.dump({"files": found, "environs": environs, "session": session}, fh)

    cases = load_cases(golden)
    cfg = JudgeConfig(model="gpt-4o-mini", base_url=base_url, cache_path=cache,
                      api_key_env="RB_TEST_JUDGE_KEY", max_concurrency=2)
    run = evaluate(cases, backends=["native", "rubric"], metrics=["recall@5", "mrr", "faithfulness"], out=out,
                   judge=cfg, executor=RayExecutor(num_cpus=2, object_store_memory=256 * 2**20, actors=2,
                                                   batch_size=2),
                   on_score=inspect)
    print(json.dumps({"scores": len(run.scores), "complete": run.complete}))
    """
)

REFUSE = textwrap.dedent(
    '''
    import json, os, socket

    _log = os.environ["RB_EGRESS_LOG"]
    _LOCAL = ("127.", "::1", "::ffff:127.", "localhost")

    def _refuse(kind, target):
        import traceback
        with open(_log, "a") as f:
            f.write(json.dumps({"kind": kind, "target": str(target), "pid": os.getpid(),
                                "stack": traceback.format_stack()[-7:-1]}) + "\\n")
        raise OSError(f"egress refused by the test: {kind} {target}")

    _connect, _connect_ex, _getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not str(address[0]).startswith(_LOCAL):
            _refuse("connect", address[:2])
        return _connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not str(address[0]).startswith(_LOCAL):
            _refuse("connect", address[:2])
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not str(host).startswith(_LOCAL) and host not in ("", "0.0.0.0"):
            _refuse("lookup", host)
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo
    '''
)


def _driver(tmp_path, golden, out, stub, report="-", env=None):
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REFUSE)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "RB_EGRESS_LOG": str(tmp_path / "egress.jsonl"),
           "RB_TEST_JUDGE_KEY": "sk-ragbridge-ray-test-4c1f9e2a7b", **(env or {})}
    for k in ("RAY_ADDRESS", *LOCAL_ENVIRONMENT):
        env.pop(k, None)  # the executor must set what it needs itself
    return subprocess.Popen([sys.executable, str(script), str(golden), str(out), stub.base_url,
                             str(tmp_path / "cache.sqlite"), str(report)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_own_cluster_is_offline_and_never_holds_the_key(tmp_path, example_path):
    """The executor starts its own cluster (in a subprocess whose every Python process, Ray's
    included, refuses any connection or name lookup off the machine): the run completes, nothing
    was refused, and the judge's key is in no Ray process's environment or session file."""
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:8]))
    with StubJudge() as stub:
        proc = _driver(tmp_path, golden, tmp_path / "run", stub, report=tmp_path / "report.json")
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-3000:]
        assert stub.last_authorization == "Bearer sk-ragbridge-ray-test-4c1f9e2a7b"  # the gateway used it
    assert json.loads(stdout.strip().splitlines()[-1]) == {"scores": 24, "complete": True}
    egress = tmp_path / "egress.jsonl"
    assert not egress.exists(), egress.read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["files"] == [] and report["environs"] == [], report
    assert not Path(report["session"]).exists()  # the session folder is removed with the cluster
    for f in (tmp_path / "run").iterdir():
        assert b"sk-ragbridge-ray-test" not in f.read_bytes(), f


def test_killed_driver_resumes_to_every_score_once(tmp_path, example_path, ray_local):
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:20]))
    out = tmp_path / "run"
    with StubJudge(latency=0.25) as stub:
        proc = _driver(tmp_path, golden, out, stub)
        scores = out / "scores.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if scores.exists() and sum(1 for line in scores.read_text().splitlines()
                                       if '"rubric"' in line) >= 4:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        before = sum(1 for _ in scores.read_text().splitlines())
        assert 0 < before < 60
        # resume (in this process, on the shared cluster) and compare with an uninterrupted run
        from ragbridge import load_cases

        cases = load_cases(golden)
        cfg = stub_judge_config(stub, MODEL, tmp_path / "cache.sqlite", api_key_env="RB_TEST_JUDGE_KEY",
                                max_concurrency=2)
        metrics = ["recall@5", "mrr", "faithfulness"]
        run = evaluate(cases, backends=["native", "rubric"], metrics=metrics, out=out, judge=cfg,
                       executor="ray")
        evaluate(cases, backends=["native", "rubric"], metrics=metrics, out=tmp_path / "ref",
                 judge=stub_judge_config(stub, MODEL, tmp_path / "ref.sqlite"))
    assert run.complete and len(run.scores) == 60
    assert comparable(out) == comparable(tmp_path / "ref")
    assert load_run(out).complete


def test_cli_executor_ray_writes_the_local_run_folder(tmp_path, example_path):
    """``--executor ray`` from the command line writes the folder a local run writes, also when run
    from a folder that holds a clone of ragbridge."""
    from conftest import ragbridge_cli

    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:6]))
    # run from the folder above a clone of the repository (a folder named ragbridge, no __init__.py,
    # with its folders src and plugins): Ray puts the current folder first on its workers' path
    for folder in ("src", "plugins"):
        (tmp_path / "ragbridge" / folder).mkdir(parents=True)
    with StubJudge() as stub:
        common = ["run", golden, "--backend", "native", "--backend", "rubric", "--no-progress", "--json",
                  "--judge-model", "gpt-4o-mini", "--judge-base-url", stub.base_url,
                  "--requests-per-minute", "6000"]
        local = ragbridge_cli(*common, "--out", tmp_path / "local", "--cache-path", tmp_path / "a.sqlite",
                              cwd=tmp_path)
        remote = ragbridge_cli(*common, "--out", tmp_path / "ray", "--cache-path", tmp_path / "b.sqlite",
                               "--executor", "ray", cwd=tmp_path, subprocess=True)  # its own cluster
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert json.loads(remote.stdout)["summary"] == json.loads(local.stdout)["summary"]
    assert comparable(tmp_path / "local") == comparable(tmp_path / "ray")
    bad = ragbridge_cli("run", golden, "--out", tmp_path / "x", "--ray-address", "auto", cwd=tmp_path)
    assert bad.returncode == 2 and "--executor ray" in bad.stderr


# ------------------------------------------------------------------------------------------------
# Another user of the machine


def _cluster_processes(folder: str, driver: bool = True) -> list:
    """The processes of the cluster started in ``folder`` (its control store and node manager name it
    on their command line), with every process they started, and (``driver``) this process and its."""
    import psutil

    roots = [psutil.Process()] if driver else []
    for proc in psutil.process_iter(["cmdline"]):
        if any(folder in arg for arg in proc.info["cmdline"] or ()):
            roots.append(proc)
    found = {}
    for root in roots:
        with_children = [root]
        try:
            with_children += root.children(recursive=True)
        except psutil.Error:
            pass
        found.update({p.pid: p for p in with_children})
    return list(found.values())


def _private_folders(pid: int) -> list[Path]:
    """The folders of the clusters that process ``pid`` started (their node managers name them)."""
    import psutil

    found = set()
    for child in psutil.Process(pid).children(recursive=True):
        try:
            for arg in child.cmdline():
                found.update(map(Path, re.findall(r"(/[^\s=:]*/rb-ray-[^/\s]+)", arg)))
        except psutil.Error:
            continue
    return sorted(found)


def _listening(processes: list) -> dict[int, str]:
    """The TCP ports the processes listen on, and the address each is bound to."""
    import psutil

    ports = {}
    for proc in processes:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    ports[conn.laddr.port] = conn.laddr.ip
        except psutil.Error:
            continue
    return ports


def _as_nobody(*args: str, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *args],
                          input=stdin, capture_output=True, text=True, timeout=240, cwd="/",
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"})


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="runs another user's client under setpriv: needs root")
def test_another_local_user_can_neither_reach_the_cluster_nor_read_its_secrets(
        tmp_path, example_cases, ray_local, monkeypatch):
    """While a judged run is scoring on the cluster, the user ``nobody`` tries what a local user can:
    Ray's client and raw calls of every Ray service on every port the cluster listens on (reads, a
    write), the runtime-environment agent's HTTP route, the run's private folder and token, and every
    file under /tmp and /dev/shm and every command line, searched for the token and both keys.
    Every Ray port is on loopback; nothing answers without the token; nothing holds a secret."""
    from ragbridge.judge.remote import GatewayClient

    ray_mod = ray_local
    token_path = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
    node = ray_mod._private.worker._global_node
    folder = os.path.dirname(token_path) if token_path else node.get_temp_dir_path()
    key = "sk-ragbridge-local-user-" + secrets.token_hex(8)  # in no file: not even this one
    monkeypatch.setenv("RB_TEST_JUDGE_KEY", key)
    specs = []
    spec = GatewayClient.spec.__func__
    monkeypatch.setattr(GatewayClient, "spec", classmethod(lambda cls, gw: specs.append(spec(cls, gw))
                                                           or specs[-1]))
    report: dict = {}

    def attack(score) -> None:  # once, while the scorer actors are alive and hold the gateway's key
        if report or not specs:
            return
        processes = _cluster_processes(folder)
        ports = _listening(processes)
        ports.pop(stub.port)  # the test's judge, in this process (the gateway's socket is probed too)
        report["ports"] = ports
        report["own"] = [str(p) for p in _listening([p for p in processes if p.pid == os.getpid()])]
        secrets = [key, specs[0][1]] + ([Path(token_path).read_text()] if token_path else [])
        targets = {"ports": sorted(ports), "gcs": node.gcs_address, "folder": folder,
                   "token_path": token_path or os.path.join(folder, "auth_token"), "secrets": secrets}
        proc = _as_nobody(sys.executable, str(ROOT / "tests" / "local_user_probe.py"),
                          stdin=json.dumps(targets))
        if proc.returncode != 0:
            report["error"] = proc.stderr[-3000:]
        else:
            report.update(json.loads(proc.stdout))

    with StubJudge(latency=0.05) as stub:
        run = evaluate(example_cases[:8], backends=["rubric"], metrics=["faithfulness"],
                       judge=stub_judge_config(stub, MODEL, None, api_key_env="RB_TEST_JUDGE_KEY"),
                       executor=RayExecutor(actors=2, batch_size=2), on_score=attack)
    assert run.complete
    if "No module named" in report.get("error", ""):
        pytest.skip(f"the user nobody cannot import Ray here: {report['error'][-300:]}")
    assert "error" not in report, report.get("error")
    assert report["uid"] == 65534
    ports = report["ports"]
    assert len(ports) >= 4  # control store, node manager, workers, agents
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip in ports.values()), ports
    answered = [(port, method) for port, calls in report["grpc"].items()
                for method, code in calls.items() if code == "OK"]
    assert answered == [], answered
    refused = {port for port, calls in report["grpc"].items() if "UNAUTHENTICATED" in calls.values()}
    http = {port: line for port, line in report["http"].items() if line.startswith("HTTP/")}
    assert all(line.split()[1] in ("401", "403") for line in http.values()), http
    # every port of the cluster's processes was reached and refused; in this process (which runs
    # the test's own servers too), the driver's port and the judge gateway's
    assert refused | set(http) >= set(report["grpc"]) - set(report["own"]), report
    assert refused & set(report["own"]) and specs[0][0].rsplit(":", 1)[1] in http
    assert not any(v.startswith("OK") for v in report["ray_client"].values()), report["ray_client"]
    assert report["folder"] == report["token"] == "error PermissionError"
    assert report["found"] == [] and report["searched"] > 0, report["found"]
    assert not (Path.home() / ".ray" / "auth_token").exists() or "RAY_AUTH_TOKEN_PATH" not in os.environ


# ------------------------------------------------------------------------------------------------
# SIGTERM, and actors that cannot start


def test_sigterm_ends_the_run_as_ctrl_c_and_leaves_no_cluster(tmp_path, example_path):
    """``kill`` of a command-line run on Ray mid-way: exit 130 with the interrupted message, run.json
    says ``interrupted``, the run's private folder is removed and no process of its cluster is left;
    the same command resumes it to every score."""
    from conftest import ragbridge_cli

    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:16]))
    with StubJudge(latency=0.2) as stub:
        args = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run", str(golden),
                "--out", str(tmp_path / "run"), "--backend", "rubric", "--metric", "faithfulness",
                "--no-progress", "--judge-model", MODEL, "--judge-base-url", stub.base_url,
                "--cache-path", str(tmp_path / "c.sqlite"), "--executor", "ray"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and len(stub.posts()) < 4:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        folders = _private_folders(proc.pid)
        assert len(folders) == 1
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr[-3000:]
        assert "interrupted; what was scored is kept" in stderr and "SIGTERM received" not in stderr
        assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "interrupted"
        assert not folders[0].exists()
        time.sleep(1)
        left = [p.pid for p in _cluster_processes(str(folders[0]), driver=False)]
        assert left == []
        again = ragbridge_cli(*args[3:], cwd=tmp_path, subprocess=True)  # its own cluster
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["counts"]["scores"] == 16


class _TooLong(BaseException):
    """Raised in the main thread at a test's deadline (a BaseException: nothing on the way catches it)."""


@contextlib.contextmanager
def _deadline(seconds: int):
    """Interrupt the block after ``seconds`` (a run that would never end fails the test instead)."""
    def expire(signum, frame):
        raise _TooLong(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


UNLOADABLE = textwrap.dedent(
    """
    from ragbridge.run.ray_executor import BackendScorer, score_blocks

    class Scorer(BackendScorer):  # its module is on this process's path only, not the workers'
        pass

    def blocks(blocks, options):
        return score_blocks(blocks, options)
    """
)


@pytest.mark.parametrize("fault, message", [
    ("crash", "a scorer actor's process died 4 times"),
    ("actor-unloadable", "a scorer actor could not start on the cluster: ModuleNotFoundError: No module "
                         "named 'rb_unloadable'"),
    ("task-unloadable", "a scoring task could not load on the cluster: ModuleNotFoundError: No module "
                        "named 'rb_unloadable'"),
], ids=["crash", "actor-unloadable", "task-unloadable"])
def test_a_scorer_that_cannot_start_fails_the_run_with_a_clear_error(tmp_path, example_cases, ray_local,
                                                                       monkeypatch, fault, message):
    """A scorer actor whose process dies as it starts is restarted a bounded number of times, then the
    run fails saying so (it was restarted for ever); a scorer whose code the workers cannot import
    fails the run at once, naming the missing module and what to install."""
    import importlib

    import ragbridge.run.ray_executor as executor

    class Crashing(executor.BackendScorer):  # made here: sent to the workers whole, by value
        def __init__(self, *args, **kwargs):
            os._exit(1)  # its process dies as it starts, each time Ray starts it

    (tmp_path / "rb_unloadable.py").write_text(UNLOADABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rb_unloadable", None)
    if fault == "crash":
        monkeypatch.setattr(executor, "BackendScorer", Crashing)
    elif fault == "actor-unloadable":
        monkeypatch.setattr(executor, "BackendScorer", importlib.import_module("rb_unloadable").Scorer)
    else:
        monkeypatch.setattr(executor, "score_blocks", importlib.import_module("rb_unloadable").blocks)
    backend, metric = ("native", "mrr") if fault == "task-unloadable" else ("rubric", "faithfulness")
    with StubJudge() as stub, pytest.raises(executor.RunError) as failed, _deadline(120):
        evaluate(example_cases[:4], backends=[backend], metrics=[metric], out=tmp_path / "run",
                 judge=stub_judge_config(stub, MODEL, None), executor=RayExecutor(actors=1))
    text = str(failed.value)
    assert message in text, text
    assert "\x1b[" not in text and "Traceback" not in text and len(text.splitlines()) == 1
    assert json.loads((tmp_path / "run" / "run.json").read_text())["status"] == "incomplete"


# ------------------------------------------------------------------------------------------------
# A cluster of the user's (address): joined only with token authentication


HOST = textwrap.dedent(
    """
    import sys, ray
    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=256 * 2**20,
             _temp_dir=sys.argv[1], log_to_driver=False, configure_logging=False)
    print(ray._private.worker._global_node.gcs_address, flush=True)
    sys.stdin.read()  # until the test closes it
    ray.shutdown()
    """
)


@contextlib.contextmanager
def _users_cluster(tmp_path: Path, auth: dict):
    """A cluster of the user's, started in a process of its own (with Ray's offline settings and the
    authentication settings ``auth``): its address."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="rb-test-cluster-", dir="/tmp"))  # short: socket paths
    home = folder / "home"
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(LOCAL_ENVIRONMENT, HOME=str(home), **auth)
    proc = subprocess.Popen([sys.executable, "-c", HOST, str(folder / "r")], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        address = proc.stdout.readline().strip()
        assert address, "the user's cluster did not start"
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_users_cluster_is_joined_only_with_token_authentication(tmp_path, example_path):
    """``--ray-address``: a cluster that answers without a token is refused (exit 2, nothing sent
    to it), even when a token is given; so is a token cluster when no token is given, and any cluster
    with ``RAY_AUTH_MODE=disabled``; with its token the run completes."""
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:4]))
    token = tmp_path / "token"
    token.write_text("f" * 64)
    token.chmod(0o600)
    client_home = tmp_path / "home"  # no ~/.ray/auth_token
    client_home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", HOME=str(client_home))

    def run(address: str, out: str, **env: str):
        with StubJudge() as stub:
            res = subprocess.run(
                [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run",
                 str(golden), "--out", str(tmp_path / out), "--backend", "native", "--backend", "rubric",
                 "--metric", "mrr", "--metric", "faithfulness", "--no-progress", "--judge-model", MODEL,
                 "--judge-base-url", stub.base_url, "--cache-mode", "off", "--executor", "ray",
                 "--ray-address", address], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                env={**base, **env})
            return res, len(stub.posts())

    with _users_cluster(tmp_path, {"RAY_AUTH_MODE": "disabled"}) as address:
        res, calls = run(address, "open", RAY_AUTH_TOKEN_PATH=str(token))  # a token it does not ask for
        assert res.returncode == 2, res.stderr[-3000:]
        assert "answers requests that carry no token" in res.stderr and calls == 0
        assert not (tmp_path / "open" / "scores.jsonl").exists() or not (
            tmp_path / "open" / "scores.jsonl").read_text()
    with _users_cluster(tmp_path, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}) as address:
        res, calls = run(address, "no-token")
        assert res.returncode == 2 and calls == 0, res.stderr[-3000:]
        assert "RAY_AUTH_TOKEN" in res.stderr and "Traceback" not in res.stderr
        res, calls = run(address, "disabled", RAY_AUTH_MODE="disabled", RAY_AUTH_TOKEN_PATH=str(token))
        assert res.returncode == 2 and "RAY_AUTH_MODE is 'disabled'" in res.stderr, res.stderr[-3000:]
        res, calls = run(address, "joined", RAY_AUTH_TOKEN_PATH=str(token))
        assert res.returncode == 0, res.stderr[-3000:]
        manifest = json.loads((tmp_path / "joined" / "run.json").read_text())
        assert manifest["status"] == "complete" and manifest["counts"]["scores"] == 8
        assert calls == manifest["counts"]["judge"]["calls"] > 0


CONNECTED = textwrap.dedent(
    """
    import json, sys, ray
    from ragbridge import evaluate, load_cases, RunError
    ray.init(address="local", num_cpus=1, include_dashboard=False, object_store_memory=256 * 2**20,
             _temp_dir=sys.argv[2], log_to_driver=False, configure_logging=False)
    try:
        evaluate(load_cases(sys.argv[1]), metrics=["mrr"], executor="ray")
        print(json.dumps({"ran": True}))
    except RunError as exc:
        print(json.dumps({"refused": str(exc)}))
    """
)


def test_a_cluster_this_process_connected_to_without_a_token_is_refused(tmp_path, example_path):
    """``ray.init`` called by the user before, of a cluster that asks for no token: the run refuses it
    rather than sending its work there."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="rb-test-cluster-", dir="/tmp"))
    (folder / "home").mkdir()
    (folder / "home" / "ray_bootstrap_config.yaml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(LOCAL_ENVIRONMENT, RAY_AUTH_MODE="disabled", HOME=str(folder / "home"))
    try:
        res = subprocess.run([sys.executable, "-c", CONNECTED, str(example_path), str(folder / "r")], env=env,
                             capture_output=True, text=True, timeout=240)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout.strip().splitlines()[-1])
    assert "answers requests that carry no token" in result.get("refused", ""), result
