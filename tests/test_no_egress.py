"""A full run with every installed backend connects to nothing but the judge, also at exit.

The run happens in a subprocess whose ``sitecustomize`` records every socket connect and every
name lookup; the stub judge runs in this process, so only the run's own traffic is recorded.
"""

import json
import os
import textwrap

import pytest

from conftest import ragbridge_cli
from ragbridge.plugins import get_backends

RECORDER = textwrap.dedent(
    '''
    import json, os, socket

    _log = os.environ["RAGBRIDGE_EGRESS_LOG"]

    def _write(kind, target):
        with open(_log, "a") as f:
            f.write(json.dumps({"kind": kind, "target": target}) + "\\n")

    _connect = socket.socket.connect
    _connect_ex = socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _write("connect", list(address[:2]))
        return _connect(self, address)

    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            _write("connect", list(address[:2]))
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        _write("lookup", [host])
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo
    '''
)

LOCAL = {"127.0.0.1", "localhost", "::1"}


@pytest.mark.slow
def test_full_run_talks_only_to_the_judge(tmp_path, example_cases, stub_judge, monkeypatch):
    # as in a user's shell: the run relies on each backend's own environment defaults, not on the
    # opt-outs the test process set for itself
    for backend in get_backends().values():
        for name in backend.environment():
            monkeypatch.delenv(name, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "egress.jsonl"
    data = tmp_path / "two.jsonl"
    data.write_text("".join(c.model_dump_json() + "\n" for c in example_cases[:2]))
    judged = [name for name, b in get_backends().items() if b.available() and name != "native"]
    args = ["run", data, "--out", tmp_path / "run", "--no-progress", "--judge-model", "gpt-4o-mini",
            "--judge-base-url", stub_judge.base_url, "--cache-path", tmp_path / "cache.sqlite",
            "--embedding-model", "text-embedding-3-small"]
    for name in ["native", *judged]:
        args += ["--backend", name]
    env = {
        # the recorder first, then whatever the tests themselves run with (a checkout's src and plugins)
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p),
        "RAGBRIDGE_EGRESS_LOG": str(log),
        # credentials that would make a library upload or call home if it were allowed to
        "CONFIDENT_API_KEY": "confident-should-not-be-used",
        "OPENAI_API_KEY": "sk-should-not-leave-this-machine",
        "HOME": str(tmp_path / "home"),
    }
    res = ragbridge_cli(*args, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(e["kind"] == "connect" for e in events), "the recorder saw no traffic at all"
    stub_port = int(stub_judge.base_url.split(":")[2].split("/")[0])
    connects = {tuple(e["target"]) for e in events if e["kind"] == "connect"}
    lookups = {e["target"][0] for e in events if e["kind"] == "lookup"}
    assert {h for h, _ in connects} <= LOCAL, f"connected outside the machine: {connects}"
    # the only connections are the judge gateway's to the judge: the libraries reach the gateway
    # through its in-process transport and open no socket of their own
    assert connects == {("127.0.0.1", stub_port)}, connects
    assert lookups <= LOCAL, f"looked up outside hosts: {lookups}"
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert set(run["backends"]) == {"native", *judged}
    # nothing the libraries write by default lands in the working directory
    leftovers = {p.name for p in tmp_path.iterdir()} - {"site", "egress.jsonl", "two.jsonl", "run",
                                                        "cache.sqlite", "cache.scores.sqlite", "home"}
    assert not leftovers, leftovers
    # nor in the user's home (RAGAS' anonymous id file, DeepEval's key store, downloaded data, ...)
    in_home = sorted(str(p.relative_to(tmp_path / "home"))
                     for p in (tmp_path / "home").rglob("*") if p.is_file())
    assert not in_home, in_home
