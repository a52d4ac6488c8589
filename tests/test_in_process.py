"""The command line run in the test process (``ragbridge_cli``, `ragbridge.testing.in_process`) gives
what a child process gives: the same exit code, standard output and standard error, at the width the
call sets, and leaves nothing behind in the test process."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge.testing.in_process import run_in_process
from test_plugins import make_plugin


@pytest.mark.parametrize("args", [
    ("formats",),
    ("backends",),
    ("--help",),
    ("run", "--help"),
    ("run", "missing.jsonl", "--out", "r"),  # bad input: exit 2 and one error line
    ("run", EXAMPLE, "--out", "r", "--overwrite", "true"),  # a flag given a value
    ("convert", EXAMPLE, "out.csv", "--to", "nowhere"),
    ("gate", "no-such-run"),
    ("version-of-nothing",),  # click's usage error
])
@pytest.mark.parametrize("columns", ["80", "200"])
def test_a_command_in_process_prints_and_exits_as_in_a_process(args, columns, tmp_path):
    kw = dict(cwd=tmp_path, env={"COLUMNS": columns})
    child = ragbridge_cli(*args, subprocess=True, **kw)
    here = ragbridge_cli(*args, **kw)
    assert (here.returncode, here.stdout, here.stderr) == (child.returncode, child.stdout, child.stderr)


def test_a_run_in_process_writes_and_warns_as_in_a_process(tmp_path):
    """The input warnings (wrapped at the width), the note a format's detection logs, the files."""
    src = tmp_path / "cases.csv"
    assert ragbridge_cli("convert", EXAMPLE, src, cwd=tmp_path).returncode == 0
    outs = {}
    for way, sub in (("child", True), ("here0", False)):  # names of one length: the lines wrap alike
        res = ragbridge_cli("run", src, "--out", tmp_path / way, "--backend", "native", "--no-progress",
                            cwd=tmp_path, env={"COLUMNS": "80"}, subprocess=sub)
        outs[way] = res
        assert res.returncode == 0, res.stderr
    child, here = outs["child"], outs["here0"]
    assert here.stderr == child.stderr and "warning:" in here.stderr
    assert here.stdout.replace("here0", "child") == child.stdout
    scores = [(tmp_path / way / "scores.jsonl").read_text().splitlines() for way in ("child", "here0")]
    assert [json.loads(x)["value"] for x in scores[0]] == [json.loads(x)["value"] for x in scores[1]]
    # a log record no handler takes (the note of a detected format) is on stderr, as in a process
    ragas = EXAMPLE.parent / "ragas-dataset.jsonl"
    notes = [ragbridge_cli("convert", ragas, tmp_path / f"back{sub}.jsonl", subprocess=sub).stderr
             for sub in (True, False)]
    assert notes[0] == notes[1] and "read as format 'ragas'" in notes[1]


def test_what_a_call_changes_is_put_back(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBRIDGE_IN_PROCESS_PROBE", "kept")
    before = (dict(os.environ), os.getcwd(), list(sys.argv), list(sys.path), signal.getsignal(signal.SIGTERM),
              logging.getLogger().handlers[:], sys.stdout, sys.stderr, sys.stdin)
    res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "r", "--backend", "native", "--no-progress",
                        cwd=tmp_path, env={"RAGBRIDGE_IN_PROCESS_PROBE": "changed", "OTHER_PROBE": "1"})
    assert res.returncode == 0, res.stderr
    after = (dict(os.environ), os.getcwd(), list(sys.argv), list(sys.path), signal.getsignal(signal.SIGTERM),
             logging.getLogger().handlers[:], sys.stdout, sys.stderr, sys.stdin)
    assert after == before


def test_a_plugin_on_the_path_of_one_call_is_found_by_its_entry_point_and_forgotten_after(tmp_path):
    from ragbridge.plugins import get_backends

    env = make_plugin(tmp_path)
    assert "echo" in ragbridge_cli("backends", env=env).stdout
    assert "echo" not in get_backends() and "ragbridge_echo" not in sys.modules
    assert "echo" not in ragbridge_cli("backends").stdout


def _main_of(body):
    def main():
        body()
    return main


@pytest.mark.parametrize("body, code, out, err", [
    (lambda: None, 0, "", ""),
    (lambda: sys.exit(4), 4, "", ""),
    (lambda: sys.exit(256 + 3), 3, "", ""),
    (lambda: sys.exit("stopped"), 1, "", "stopped\n"),
    (lambda: (print("a\r\nb"), os.write(1, b"fd\n"), os.write(2, b"err\n")), 0, "a\nb\nfd\n", "err\n"),
    (lambda: warnings.warn("careful", UserWarning), 0, "", "UserWarning: careful"),
    (lambda: warnings.warn("old", DeprecationWarning), 0, "", ""),  # ignored outside __main__, as ever
    (lambda: print(sys.stdout.isatty(), sys.stderr.isatty(), sys.stdin.read() == "", sys.argv[0]), 0,
     "False False True -c\n", ""),
])
def test_a_main_in_process_exits_and_prints_as_a_process(body, code, out, err):
    res = run_in_process(_main_of(body), [])
    assert res.returncode == code
    assert res.stdout == out
    assert err in res.stderr if err else res.stderr == ""


def test_an_exception_is_its_traceback_and_exit_1_and_a_call_past_its_timeout_is_stopped():
    def boom():
        raise ValueError("broken")

    res = run_in_process(boom, [])
    assert res.returncode == 1
    assert res.stderr.startswith("Traceback") and res.stderr.endswith("ValueError: broken\n")

    def forever():
        import time

        time.sleep(30)

    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_process(forever, [], timeout=0.5)
    assert time.monotonic() - started < 10  # a blocking call is ended, as a process is killed

    # and so where this process ignores SIGINT (as something earlier in a test worker may leave it):
    # the call has Python's own handler, as a new process has, and this process's is kept
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            run_in_process(forever, [], timeout=0.5)
        assert time.monotonic() - started < 10
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, saved)
