"""A run folder whose files were replaced by links (by another user of a shared folder, or by
mistake): a run never writes through one. A link found when the run starts is refused with the file
named (exit 2, nothing written, no judge call); with --overwrite the link is removed, never what it
points to; and a link made after that check is not followed by any of the run's writers."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLE, ragbridge_cli, stub_judge_config

from ragbridge import RunError, evaluate, load_cases
from ragbridge.formats.canonical import write_jsonl
from ragbridge.run.folder import RunFolder
from ragbridge.testing import StubJudge

TESTS = str(Path(__file__).resolve().parent)
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)}
FILES = ["scores.jsonl", "judge-audit.jsonl", "judge-calls.log", "target.jsonl", "run.json", "cases.jsonl",
         "columns.npz"]


def golden():
    # without the recorded outputs: the target (tests/rag_pipeline.py) gives them, into target.jsonl
    return [c.model_copy(update={"contexts": [], "answer": None}) for c in load_cases(EXAMPLE)[:4]]


def run(out: Path, stub: StubJudge, **kw):
    return evaluate(golden(), backends=["native", "rubric"], metrics=["mrr", "faithfulness"], out=out,
                    target="rag_pipeline:pipeline", judge=stub_judge_config(stub, "m", None), **kw)


@pytest.fixture(scope="module")
def judge():
    """One judge for the module (a resume must keep the judge of the run it resumes)."""
    with StubJudge() as stub:
        yield stub


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, judge):
    """A run folder holding every file a run writes."""
    out = tmp_path_factory.mktemp("first") / "run"
    run(out, judge)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    return out


@pytest.fixture
def stub(judge):
    judge.reset()
    return judge


def linked(first_run: Path, tmp_path: Path, name: str, hard: bool = False) -> tuple[Path, Path]:
    """A copy of the run folder whose ``name`` is a link to a file elsewhere (holding a copy of it,
    so that a run would take it as the folder's own): the folder and that file."""
    out = tmp_path / "run"
    shutil.copytree(first_run, out)
    victim = tmp_path / "elsewhere" / name
    victim.parent.mkdir()
    shutil.copyfile(out / name, victim)
    (out / name).unlink()
    if hard:
        os.link(victim, out / name)
    else:
        (out / name).symlink_to(victim)
    return out, victim


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.is_symlink()}


@pytest.mark.parametrize("name", FILES)
def test_a_symbolic_link_in_the_run_folder_is_refused(first_run, stub, tmp_path, name):
    out, victim = linked(first_run, tmp_path, name)
    before, held = snapshot(out), victim.read_bytes()
    with pytest.raises(RunError) as refused:
        run(out, stub)
    assert stub.posts() == []  # refused before the target or the judge is called
    message = str(refused.value)
    assert str(out / name) in message and "symbolic link" in message and str(victim) in message
    assert victim.read_bytes() == held and snapshot(out) == before and (out / name).is_symlink()


@pytest.mark.parametrize("name", ["scores.jsonl", "judge-calls.log"])
def test_a_hard_link_to_a_file_the_run_appends_to_is_refused(first_run, stub, tmp_path, name):
    out, victim = linked(first_run, tmp_path, name, hard=True)
    held = victim.read_bytes()
    with pytest.raises(RunError, match="other name"):
        run(out, stub)
    assert victim.read_bytes() == held


def test_command_line_exits_2_naming_the_link_and_overwrite_removes_only_the_link(first_run, stub, tmp_path):
    out, victim = linked(first_run, tmp_path, "scores.jsonl")
    held = victim.read_bytes()
    write_jsonl(golden(), tmp_path / "golden.jsonl")  # the cases of the run in the folder
    args = ["run", tmp_path / "golden.jsonl", "--out", out, "--target", "rag_pipeline:pipeline", "--backend",
            "native", "--metric", "mrr", "--no-progress", "--judge-model", "m", "--judge-base-url",
            stub.base_url]
    res = ragbridge_cli(*args, env=ENV)
    assert res.returncode == 2, res.stderr
    assert "scores.jsonl is a symbolic link" in res.stderr and "Traceback" not in res.stderr
    res = ragbridge_cli(*args, "--overwrite", env=ENV)
    assert res.returncode == 0, res.stderr
    assert victim.read_bytes() == held
    scores = out / "scores.jsonl"
    assert not scores.is_symlink() and scores.read_text().count("\n") == len(golden())


@pytest.mark.parametrize("name", ["scores.jsonl", "judge-audit.jsonl", "judge-calls.log", "target.jsonl"])
def test_a_link_made_after_the_check_is_not_followed(first_run, stub, tmp_path, name, monkeypatch):
    """The link appears between the folder's check and the file's opening (the check is skipped
    here): the writer refuses to open through it (ELOOP), and its target is untouched."""
    out, victim = linked(first_run, tmp_path, name)
    if name != "scores.jsonl":
        (out / "scores.jsonl").unlink()  # every case scored again
    held = victim.read_bytes()
    monkeypatch.setattr(RunFolder, "_refuse_links", lambda self: None, raising=False)
    with pytest.raises(OSError) as failed:
        run(out, stub)
    assert failed.value.errno == errno.ELOOP
    assert victim.read_bytes() == held
