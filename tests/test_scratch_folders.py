"""The private temporary folders the backends make (RAGAS' id file, TruLens' sentence-split model)
are removed at exit; a process killed (SIGTERM, SIGKILL: no exit handler runs) leaves them, and the
next process that makes one removes those of this user's processes that are gone, never a live
one's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from conftest import needs_backend

MAKE = """
import os, signal, sys, time
from ragbridge_ragas.env import keep_ragas_id_out_of_home
from ragbridge_trulens.env import offline_sentence_splitter
keep_ragas_id_out_of_home()
offline_sentence_splitter()
print("made", flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "live":
    time.sleep(60)
"""


def _folders(tmp) -> list[str]:
    return sorted(n for n in os.listdir(tmp) if n.startswith(("ragbridge-ragas-", "ragbridge-nltk-")))


@pytest.mark.slow  # imports RAGAS and TruLens in three processes
@needs_backend("ragas")
@needs_backend("trulens")
def test_temporary_folders_of_killed_runs_are_removed_by_the_next(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "RAGAS_DO_NOT_TRACK": "true"}

    def make(how: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", MAKE, how], env=env, capture_output=True, text=True,
                              timeout=300)

    killed = make("kill")
    assert killed.returncode == -signal.SIGKILL and "made" in killed.stdout, killed.stderr
    assert len(_folders(tmp_path)) == 2  # what a kill leaves
    live = subprocess.Popen([sys.executable, "-c", MAKE, "live"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "made"
        theirs = _folders(tmp_path)
        assert len(theirs) == 2 and all(f"-{live.pid}-" in name for name in theirs), theirs  # the dead's gone
        done = make("exit")
        assert done.returncode == 0, done.stderr
        assert _folders(tmp_path) == theirs  # a live process's kept; the exiting one removed its own
    finally:
        live.kill()
        live.wait()


def test_scratch_folders_of_processes_that_are_gone_are_removed(tmp_path):
    """The core of it, without the libraries: a folder of a dead process of this user goes; a live
    process's, another prefix's and a name without a pid stay."""
    from ragbridge.formats.files import scratch_folder

    dead = subprocess.Popen(["true"])
    dead.wait()
    keep = [f"rb-x-{os.getpid()}-abc", "rb-x-notapid", f"rb-y-{dead.pid}-abc"]
    for name in keep + [f"rb-x-{dead.pid}-abc"]:
        (tmp_path / name).mkdir()
    os.environ["TMPDIR"] = str(tmp_path)
    import tempfile

    tempfile.tempdir = None
    try:
        made = scratch_folder("rb-x-")
    finally:
        del os.environ["TMPDIR"]
        tempfile.tempdir = None
    assert sorted(os.listdir(tmp_path)) == sorted(keep + [os.path.basename(made)])
    assert os.path.basename(made).startswith(f"rb-x-{os.getpid()}-")
    assert oct(os.stat(made).st_mode)[-3:] == "700"
