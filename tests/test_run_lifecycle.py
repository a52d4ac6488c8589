"""A run as CI sees it: exit codes, a run killed mid-way, and a resume whose counts cover both sessions.

Real ``ragbridge run`` subprocesses against the stub judge (in this process, so its latency and
faults can change between sessions), scored by the TruLens backend.
"""

import json
import socket
import subprocess
import sys
import time

import pytest

from conftest import ragbridge_cli
from ragbridge import load_cases, load_run
from ragbridge.plugins import get_backends
from ragbridge.run.folder import process_start

pytestmark = pytest.mark.skipif(not get_backends()["trulens"].available(), reason="needs the trulens backend")


def judge_args(stub, tmp_path, config=None):
    args = ["--backend", "native", "--backend", "trulens", "--metric", "mrr", "--metric", "faithfulness",
            "--judge-model", "gpt-4o-mini", "--judge-base-url", stub.base_url,
            "--cache-path", tmp_path / "cache.sqlite", "--no-progress"]
    return args + (["--config", config] if config else [])


@pytest.mark.parametrize("stub_judge", [{"fault_rate_500": 1.0}], indirect=True)
@pytest.mark.slow
def test_a_run_whose_judge_calls_all_failed_exits_3_then_resumes_to_0(tmp_path, example_path, stub_judge):
    cases = load_cases(example_path)[:2]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(c.model_dump_json() + "\n" for c in cases))
    config = tmp_path / "ragbridge.toml"
    config.write_text("[judge]\nmax_retries = 0\n")
    out = tmp_path / "run"
    res = ragbridge_cli("run", data, "--out", out, *judge_args(stub_judge, tmp_path, config), cwd=tmp_path)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "2 of 4 score(s) errored:" in res.stderr  # then each cause, with its fix
    assert "run the same command again to retry them" in res.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["errored"] == 2
    stub_judge.rates["500"] = 0.0
    again = ragbridge_cli("run", data, "--out", out, *judge_args(stub_judge, tmp_path, config), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed: 2 score(s) kept" in again.stdout and "errored" not in again.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["counts"]["errored"] == 0 and manifest["counts"]["scored"] == 4


def test_run_help_documents_the_exit_codes():
    res = ragbridge_cli("run", "--help")
    assert res.returncode == 0
    for code, words in (("0", "none errored"), ("2", "bad input"), ("3", "some scores errored"),
                        ("130", "interrupted")):
        assert any(line.split()[:1] == [code] and words in line for line in res.stdout.splitlines()), code


def _wait_for(predicate, proc, what, timeout=240.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended before {what}:\n{proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)


def _manifest(out):
    try:
        return json.loads((out / "run.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.parametrize("stub_judge", [{"latency": 0.3}], indirect=True)
@pytest.mark.slow
def test_a_run_killed_mid_way_reads_as_interrupted_and_its_resume_counts_both_sessions(
        tmp_path, example_path, stub_judge):
    cases = load_cases(example_path)
    out = tmp_path / "run"
    args = ["run", example_path, "--out", out, *judge_args(stub_judge, tmp_path), "--max-concurrency", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", *map(str, args)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        # mid-run: judged scores on disk, and a heartbeat has recorded the judge traffic so far
        _wait_for(lambda: '"trulens"' in (out / "scores.jsonl").read_text()
                  if (out / "scores.jsonl").exists() else False, proc, "a judged score")
        _wait_for(lambda: _manifest(out).get("counts", {}).get("judge", {}).get("calls", 0) > 0,
                  proc, "a heartbeat")
    finally:
        proc.kill()
        proc.wait()
    first = _manifest(out)
    assert first["status"] == "running" and first["process"]["pid"] == proc.pid  # it never recorded its end
    assert load_run(out).manifest.status == "interrupted"
    report = ragbridge_cli("report", out)
    assert report.returncode == 0 and "the run is interrupted" in report.stderr
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "mrr >= 0.1"\n')
    gate = ragbridge_cli("gate", out, "--config", gates)
    assert gate.returncode == 2 and "status 'interrupted'" in gate.stderr

    session1 = len(stub_judge.posts())  # every call the killed session made, reported or not
    stub_judge.latency = 0.0
    stub_judge.reset()
    second = ragbridge_cli("run", example_path, "--out", out, *judge_args(stub_judge, tmp_path))
    assert second.returncode == 0, second.stdout + second.stderr
    final = _manifest(out)
    assert final["status"] == "complete" and final["process"]["pid"] != proc.pid
    assert final["counts"]["scores"] == 2 * len(cases) and final["counts"]["errored"] == 0
    # the judge traffic of both sessions: every call of the killed one (counted as it was sent, so
    # also those after its last heartbeat; at most the one being sent at the kill not made), then
    # every call of the resume
    session2 = len(stub_judge.posts())
    assert session2 > 0 and session1 >= first["counts"]["judge"]["calls"]
    assert 0 <= final["counts"]["judge"]["calls"] - (session1 + session2) <= 1
    assert final["counts"]["judge"]["prompt_tokens"] > first["counts"]["judge"]["prompt_tokens"]
    # every native score was made by the killed session; the repeated chunk ids are still counted
    repeated = sum(len(c.contexts) - len({ch.id for ch in c.contexts}) for c in cases)
    assert repeated >= 2 and final["counts"]["duplicate_chunk_ids"] == repeated


def test_a_second_run_into_a_folder_being_written_is_refused(tmp_path, example_path):
    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr").returncode == 0
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # what run.json says while another process is writing the folder
        process = {"pid": sleeper.pid, "host": socket.gethostname(), "start": process_start(sleeper.pid)}
        (out / "run.json").write_text(json.dumps({**_manifest(out), "status": "running", "process": process}))
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        res = ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr")
        assert res.returncode == 2 and "is being written by another run" in res.stderr
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert load_run(out).manifest.status == "running"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert load_run(out).manifest.status == "interrupted"


@pytest.mark.parametrize("stub_judge", [{"latency": 0.3}], indirect=True)
@pytest.mark.slow
def test_a_terminated_run_records_that_it_was_interrupted_and_exits_130(tmp_path, example_path, stub_judge):
    out = tmp_path / "run"
    args = ["run", example_path, "--out", out, *judge_args(stub_judge, tmp_path), "--max-concurrency", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", *map(str, args)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(lambda: '"trulens"' in (out / "scores.jsonl").read_text()
                  if (out / "scores.jsonl").exists() else False, proc, "a judged score")
        stub_judge.hold()  # the judge answers nothing more: the run cannot finish before the signal
        proc.terminate()  # what a cancelled CI job sends
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted; what was scored is kept" in stderr
    manifest = _manifest(out)
    assert manifest["status"] == "interrupted" and manifest["finished_at"]
    assert 0 < manifest["counts"]["scores"] < 2 * len(load_cases(example_path))
