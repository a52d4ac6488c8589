"""The judge cache on a full disk or in a read-only folder, through the real command line: one error
line naming the cache and the reason, exit 2, as every writer of the run folder does (it was a
traceback and exit 1 at the cache's close, with every score written); and the run folder says how
the run ended."""

from __future__ import annotations

import json
import os

import pytest
from conftest import EXAMPLE
from test_signals_and_disk import _can_mount, _cli, _tmpfs

from ragbridge import load_run
from ragbridge.testing import StubJudge


def _run(stub: StubJudge, out, cache, **kwargs):
    return _cli("run", EXAMPLE, "--out", out, "--backend", "rubric", "--metric", "faithfulness",
                "--judge-model", "m", "--judge-base-url", stub.base_url, "--cache-path", cache,
                "--no-progress", **kwargs)


def _one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize("mode", ["tmpfs", "rlimit_fsize"])
def test_a_judge_cache_that_fills_the_disk_mid_run_is_one_error_and_every_score_is_kept(mode, tmp_path):
    """The cache's folder holds its first answers, not all of them (a tmpfs of 128 KiB, or a file-size
    limit over every file of the run folder but under the cache's): exit 2 with the reason, every
    score written, the run complete."""
    folder = tmp_path / "disk"
    with StubJudge() as stub:
        if mode == "tmpfs":
            if not _can_mount():
                pytest.skip("mounting a tmpfs needs root")
            with _tmpfs(folder, "size=128k,mode=0700"):
                res = _run(stub, tmp_path / "run", folder / "c.sqlite")
            reason = "No space left on device"
        else:
            folder.mkdir()
            res = _run(stub, tmp_path / "run", folder / "c.sqlite", file_limit=125_000)
            reason = "File too large"
    line = _one_line(res)
    assert line == (f"error: cannot write the judge cache: {reason}: {folder / 'c.sqlite'}; every score is "
                    f"written to {tmp_path / 'run'}, but this run's judge answers are not kept for later "
                    "runs: make room (or make it writable), or give another --cache-path (or --cache-mode "
                    "off), and run the same command again")
    run = load_run(tmp_path / "run")
    assert run.manifest.status == "complete" and len(run.scores) == 53
    assert all(s.value is not None for s in run.scores)


def test_a_judge_cache_in_a_read_only_folder_is_one_error_before_any_score(tmp_path):
    folder = tmp_path / "ro"
    with StubJudge() as stub:
        if os.geteuid() != 0:
            folder.mkdir()
            folder.chmod(0o555)
            res, reason = _run(stub, tmp_path / "run", folder / "c.sqlite"), "Permission denied"
            folder.chmod(0o755)
        elif _can_mount():
            with _tmpfs(folder, "ro,size=64k,mode=0700"):
                res, reason = _run(stub, tmp_path / "run", folder / "c.sqlite"), "Read-only file system"
        else:
            pytest.skip("root without mount: no folder is read-only to it")
        assert not stub.posts()
    assert _one_line(res) == (f"error: cannot write the judge cache: {reason}: {folder / 'c.sqlite'}; "
                              "nothing was scored: make room (or make it writable), or give another "
                              "--cache-path (or --cache-mode off), and run the same command again")
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["counts"]["scores"] == 0
