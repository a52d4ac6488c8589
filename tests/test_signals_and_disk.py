"""Signals, a full disk and read-only outputs, through the real command line.

A full disk is simulated two ways: a small tmpfs (mounted where the test runs as root and may mount),
and ``RLIMIT_FSIZE`` in the child process with SIGXFSZ ignored (a write past the limit fails with
EFBIG, as one past a full disk fails with ENOSPC; this works everywhere). A read-only output folder is
a tmpfs mounted read-only, or, for a user who is not root, a folder without write permission (root
writes through file permissions). Each test asserts the exit code, the one-line message, and that
nothing wrong was written.
"""

import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ragbridge_cli
from ragbridge import load_cases, load_run
from ragbridge.testing import StubJudge

CLI = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()"]


def _can_mount() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextmanager
def _tmpfs(path: Path, options: str):
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _cli(*args, file_limit=None, timeout=300):
    """The console entry point in a subprocess; ``file_limit``: the largest file it may write (bytes)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"}, preexec_fn=limit if file_limit else None)


def _golden(path: Path, n: int, chunks: int = 20) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i}", "question": f"question {i} " * 5,
                                "answer": "an answer that is long enough to take some room " * 2,
                                "contexts": [{"id": f"d{i}-{j}", "text": "chunk text " * 8}
                                             for j in range(chunks)],
                                "relevant": {f"d{i}-1": 1}, "must_contain": ["answer"]}) + "\n")
    return path


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".tmp-*"))


# --------------------------------------------------------------------------------------------
# Signals


def test_sigterm_interrupts_a_background_run_of_a_script(tmp_path, example_path):
    """`ragbridge run ... & kill $!` from a script: the background job has SIGINT ignored, and SIGTERM
    must still interrupt it (exit 130, the run folder saying interrupted), and the run resumes."""
    out = tmp_path / "run"
    args = ["run", example_path, "--out", out, "--backend", "rubric", "--metric", "faithfulness",
            "--judge-model", "m", "--cache-path", tmp_path / "cache.sqlite", "--max-concurrency", "1",
            "--no-progress"]
    with StubJudge() as stub:
        script = '"$@" & echo $!; wait $!; exit $?'  # sh runs a background job with SIGINT ignored
        shell = subprocess.Popen(["sh", "-c", script, "sh", *CLI, *map(str, args), "--judge-base-url",
                                  stub.base_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            pid = int(shell.stdout.readline())
            stub.wait_for_requests(3)
            stub.hold()  # the judge answers nothing more: the run cannot finish before the signal
            os.kill(pid, signal.SIGTERM)
            _, stderr = shell.communicate(timeout=120)
        finally:
            stub.release()
            shell.kill()
            shell.wait()
        assert shell.returncode == 130, stderr[-3000:]
        assert "interrupted; what was scored is kept" in stderr and "Traceback" not in stderr
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["status"] == "interrupted" and manifest["finished_at"]
        resumed = ragbridge_cli(*args, "--judge-base-url", stub.base_url)
    assert resumed.returncode == 0, resumed.stderr
    assert load_run(out).complete


def test_a_scratch_copy_left_by_a_kill_during_the_input_check_is_removed_by_the_next_run(tmp_path):
    """kill -9 while the golden set is checked leaves the scratch copy beside --out (nothing else of
    the run); the next run beside it removes it and leaves nothing behind."""
    golden = _golden(tmp_path / "golden.jsonl", 20000, chunks=5)
    here = tmp_path / "runs"
    here.mkdir()
    out = here / "run"
    proc = subprocess.Popen([*CLI, "run", str(golden), "--out", str(out), "--batch-size", "50",
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list(here.glob(".tmp-*cases.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline, "no scratch copy was made"
            time.sleep(0.005)
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    left = list(here.glob(".tmp-*cases.jsonl"))
    assert len(left) == 1 and not out.exists()
    res = ragbridge_cli("run", golden, "--out", out, "--metric", "mrr", "--no-progress")
    assert res.returncode == 0, res.stderr
    assert _leftovers(here) == [] and load_run(out).complete


# --------------------------------------------------------------------------------------------
# A full disk


@pytest.fixture(params=["tmpfs", "rlimit_fsize"])
def full_disk(request, tmp_path):
    """``(folder, run)``: ``run(*args, limit)`` runs the command line so that writing more than
    ``limit`` bytes into ``folder`` (tmpfs: in all; RLIMIT_FSIZE: into one file) fails."""
    folder = tmp_path / "disk"
    if request.param == "tmpfs":
        if not _can_mount():
            pytest.skip("mounting a tmpfs needs root")

        @contextmanager
        def run(limit):
            with _tmpfs(folder, f"size={limit // 4096 * 4 + 4}k"):
                yield lambda *args: _cli(*args)
    else:
        folder.mkdir()

        @contextmanager
        def run(limit):
            yield lambda *args: _cli(*args, file_limit=limit)
    return request.param, folder, run


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_error_and_the_run_resumes(tmp_path, full_disk):
    mode, folder, disk = full_disk
    golden = _golden(tmp_path / "golden.jsonl", 1500, chunks=5)
    reference = tmp_path / "reference"
    assert ragbridge_cli("run", golden, "--out", reference, "--no-progress").returncode == 0
    cases, scores = ((reference / n).stat().st_size for n in ("cases.jsonl", "scores.jsonl"))
    # room for the cases and half the scores (RLIMIT_FSIZE: per file, so more than the cases' file
    # and less than the scores')
    assert cases < scores
    limit = cases + scores // 2 if mode == "tmpfs" else (cases + scores) // 2
    out = folder / "run"
    with disk(limit) as run:
        res = run("run", golden, "--out", out, "--no-progress")
        assert res.returncode == 2, res.stdout + res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        reason = "No space left on device" if mode == "tmpfs" else "File too large"
        assert lines[0].startswith(f"error: cannot write the run folder {out}: {reason}")
        assert lines[0].endswith("what was scored is kept: make room (or make it writable) and run the "
                                 "same command again to resume")
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["status"] == "interrupted"  # not "running": the run said how it ended
        assert _leftovers(folder) == []
        kept = sum(1 for _ in open(out / "scores.jsonl", "rb"))
        assert 0 < kept < 1500 * 9
        if mode == "tmpfs":  # room made
            size = (cases + 2 * scores) // 1024 + 64
            subprocess.run(["mount", "-o", f"remount,size={size}k", str(folder)], check=True)
        resumed = _cli("run", golden, "--out", out, "--no-progress")
        assert resumed.returncode == 0, resumed.stderr
        assert "resumed:" in resumed.stdout
        run_ = load_run(out)
        assert run_.complete and len(run_.scores) == 1500 * 9
        assert {(s.case_id, s.metric): s.value for s in run_.scores} == {
            (s.case_id, s.metric): s.value for s in load_run(reference).scores}


def test_a_full_disk_during_the_input_check_writes_nothing(tmp_path, full_disk):
    mode, folder, disk = full_disk
    golden = _golden(tmp_path / "golden.jsonl", 3000)
    with disk(golden.stat().st_size // 3) as run:
        res = run("run", golden, "--out", folder / "run", "--batch-size", "500", "--no-progress")
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"error: cannot check the golden set beside {folder / 'run'}: ")
        message = res.stderr.strip()
        assert message.endswith("nothing was written") and len(message.splitlines()) == 1
        assert sorted(p.name for p in folder.iterdir()) == []


@pytest.mark.slow
def test_an_export_that_does_not_fit_leaves_the_earlier_one_whole(tmp_path, example_path, full_disk):
    """trulens-leaderboard (and convert) write whole or not at all: the earlier export stays."""
    pytest.importorskip("ragbridge_trulens")
    mode, folder, disk = full_disk
    run_dir = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", run_dir, "--no-progress").returncode == 0
    # the per-record export holds every question and answer: more than 8 KiB; the leaderboard a line
    assert sum(len(c.question) + len(c.answer or "") for c in load_cases(example_path)) > 8192
    with disk(4096) as run:
        dest = folder / "board.csv"
        assert run("trulens-leaderboard", run_dir, dest).returncode == 0
        earlier = dest.read_bytes()
        for args in (["trulens-leaderboard", run_dir, dest, "--per-record", "--backend", "all"],
                     ["convert", example_path, folder / "golden.jsonl"]):
            res = run(*args)
            assert res.returncode == 2, res.stdout + res.stderr
            assert res.stderr.startswith("error: cannot write (or read) a file: ") or \
                res.stderr.startswith(f"error: {folder / 'golden.jsonl'}: cannot be written"), res.stderr
            assert "Traceback" not in res.stderr
        assert dest.read_bytes() == earlier
        assert sorted(p.name for p in folder.iterdir()) == ["board.csv"]


# --------------------------------------------------------------------------------------------
# A read-only output folder


@pytest.fixture
def read_only(tmp_path):
    """A folder no file can be written into (as root: a read-only tmpfs; else: no write permission)."""
    folder = tmp_path / "ro"
    if os.geteuid() != 0:
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
    elif _can_mount():
        with _tmpfs(folder, "ro,size=64k"):
            yield folder
    else:
        pytest.skip("root without mount: no folder is read-only to it")


@pytest.mark.slow
def test_a_read_only_output_is_one_error_exit_2_and_nothing_written(tmp_path, example_path, read_only):
    run_dir = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", run_dir, "--no-progress").returncode == 0
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "recall@5 >= 0.5"\n')  # a gate that passes: exit 1 means it failed
    cases = [
        (["run", example_path, "--out", read_only / "run", "--no-progress"], read_only / "run"),
        (["gate", run_dir, "--config", gates, "--junit", read_only / "gate.xml"], read_only / "gate.xml"),
        (["report", run_dir, "--out", read_only / "report.html"], read_only / "report.html"),
        (["convert", example_path, read_only / "golden.csv"], read_only / "golden.csv"),
    ]
    if importlib.util.find_spec("ragbridge_trulens"):
        cases.append((["trulens-leaderboard", run_dir, read_only / "board.csv"], read_only / "board.csv"))
    reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    for args, dest in cases:
        res = ragbridge_cli(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
        assert str(dest) in lines[0] and reason in lines[0], res.stderr
        assert list(read_only.iterdir()) == []
