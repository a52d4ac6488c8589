"""The judge cache and the score cache are taken as the judge's word, so a cache another local user
could change, or one reached through a link, is refused before any call (exit 2, saying what to do),
as ssh refuses such a key file; the caches a run makes are its user's only."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLE, ragbridge_cli

from ragbridge.testing import StubJudge

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def run(stub: StubJudge, cwd: Path, out: str = "run", *extra):
    return ragbridge_cli("run", EXAMPLE, "--out", cwd / out, "--backend", "rubric", "--metric",
                         "faithfulness", "--judge-model", "m", "--judge-base-url", stub.base_url,
                         "--no-progress", *extra, cwd=cwd)


def said(res) -> str:
    return " ".join(res.stderr.split())


def as_nobody(*command: str, cwd: Path) -> None:
    subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command], cwd=cwd,
                   check=True, timeout=60)


@pytest.mark.skipif(not AS_ROOT or not shutil.which("setpriv"),
                    reason="needs root and setpriv, to act as another user (nobody)")
def test_a_cache_folder_another_user_made_in_a_shared_folder_is_refused(tmp_path):
    """In a folder everyone may write to (1777, as /tmp), another user makes a world-writable
    ``.ragbridge/`` first, to replace the caches a run puts there: the run refuses it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    as_nobody("mkdir", "-m", "777", ".ragbridge", cwd=shared)
    with StubJudge() as stub:
        res = run(stub, shared)
        posts = len(stub.posts())
    assert res.returncode == 2, res.stderr
    assert f"{shared / '.ragbridge'}: the judge cache's folder belongs to another user" in said(res)
    assert "--cache-path another file, or --cache-mode off" in said(res)
    assert posts == 0 and not (shared / "run").exists()
    assert os.listdir(shared / ".ragbridge") == []  # nothing of the run's put where it could be changed


@pytest.mark.skipif(not AS_ROOT, reason="needs root, to give a file to another user")
def test_a_score_cache_replaced_by_another_user_is_refused(tmp_path):
    with StubJudge() as stub:
        assert run(stub, tmp_path, "first").returncode == 0
        poisoned = tmp_path / ".ragbridge" / "judge-cache.scores.sqlite"
        os.chown(poisoned, 65534, 65534)
        res = run(stub, tmp_path, "second")
    assert res.returncode == 2
    assert f"{poisoned}: the judge cache belongs to another user (uid 65534)" in said(res)
    assert not (tmp_path / "second").exists()


@pytest.mark.parametrize("item, mode", [(".ragbridge", 0o002), (".ragbridge/judge-cache.sqlite", 0o020),
                                        (".ragbridge/judge-cache.scores.sqlite", 0o002)])
def test_a_cache_writable_by_group_or_others_is_refused(item, mode, tmp_path):
    with StubJudge() as stub:
        assert run(stub, tmp_path, "first").returncode == 0, "the first run makes the caches"
        path = tmp_path / item
        path.chmod(stat.S_IMODE(path.stat().st_mode) | mode)
        stub.reset()
        res = run(stub, tmp_path, "second")
        posts = len(stub.posts())
    assert res.returncode == 2, res.stderr
    assert f"{path}: the judge cache" in said(res) and f"chmod go-w {path}" in said(res)
    assert posts == 0 and not (tmp_path / "second").exists()


def test_the_caches_a_run_makes_are_its_users_only(tmp_path):
    with StubJudge() as stub:
        assert run(stub, tmp_path).returncode == 0
    folder = tmp_path / ".ragbridge"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = list(folder.iterdir())
    assert {p.name for p in files} >= {"judge-cache.sqlite", "judge-cache.scores.sqlite"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files), [oct(p.stat().st_mode) for p in files]


@pytest.mark.parametrize("link", ["file", "cache-path", "folder", "score-file"])
def test_a_judge_cache_reached_through_a_link_is_refused(link, tmp_path):
    """``.ragbridge/judge-cache.sqlite`` a link, ``--cache-path`` a link, ``.ragbridge/`` a link to a
    folder elsewhere, the score cache a link: refused, nothing written where the link points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "target.sqlite").write_bytes(b"")
    (tmp_path / ".ragbridge").mkdir(mode=0o700)
    extra: tuple = ()
    if link == "file":
        named = tmp_path / ".ragbridge" / "judge-cache.sqlite"
        named.symlink_to(elsewhere / "target.sqlite")
    elif link == "score-file":
        named = tmp_path / ".ragbridge" / "judge-cache.scores.sqlite"
        named.symlink_to(elsewhere / "target.sqlite")
    elif link == "cache-path":
        named = tmp_path / "mine.sqlite"
        named.symlink_to(elsewhere / "target.sqlite")
        extra = ("--cache-path", named)
    else:
        (tmp_path / ".ragbridge").rmdir()
        named = tmp_path / ".ragbridge"
        named.symlink_to(elsewhere, target_is_directory=True)
    with StubJudge() as stub:
        res = run(stub, tmp_path, "run", *extra)
        posts = len(stub.posts())
    assert res.returncode == 2, res.stderr
    assert f"{named}:" in said(res) and "is a symbolic link" in said(res) and "remove the link" in said(res)
    assert posts == 0 and not (tmp_path / "run").exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["target.sqlite"]
    assert (elsewhere / "target.sqlite").read_bytes() == b""


def test_a_run_folder_a_run_makes_is_its_users_only(tmp_path):
    with StubJudge() as stub:
        assert run(stub, tmp_path, "deep/run").returncode == 0
    assert stat.S_IMODE((tmp_path / "deep" / "run").stat().st_mode) == 0o700
