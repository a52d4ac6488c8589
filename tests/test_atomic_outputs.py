"""Outputs are whole or absent: ``kill -9`` in the middle of writing one leaves the earlier output.

Each command runs as a real subprocess (tests/kill_mid_write.py) that kills itself with SIGKILL once
it has written part of its output, so the point of the kill is chosen, not raced for.
"""

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ragbridge import evaluate, load_cases
from ragbridge.formats import write_cases
from ragbridge.formats.files import atomic_path, write_atomic

KILLER = Path(__file__).parent / "kill_mid_write.py"
EARLIER = b"the earlier output, whole\n"


def killed(watched: Path, budget: int, *args) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [sys.executable, str(KILLER), str(watched), str(budget), *map(str, args)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )
    assert res.returncode == -signal.SIGKILL, f"not killed mid-write: {res.returncode}\n{res.stderr[-2000:]}"
    return res


def visible(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the hidden temporaries, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".tmp-") for part in p.relative_to(folder).parts)
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, example_cases_module):
    out = tmp_path_factory.mktemp("runs") / "run"
    evaluate(example_cases_module, out=out)
    return out


@pytest.fixture(scope="module")
def example_cases_module():
    from conftest import EXAMPLE

    return load_cases(EXAMPLE)


# target name, --to: every writer a format plugin registers goes through write_cases
FORMATS = [
    ("out.jsonl", "jsonl"), ("out.csv", "csv"), ("ds", "hf"), ("out.jsonl", "ragas"), ("ds", "ragas-hf"),
    ("out.json", "deepeval"), ("out.jsonl", "trulens"),
]


@pytest.mark.parametrize("name, fmt", FORMATS, ids=[f for _, f in FORMATS])
def test_convert_killed_mid_write_keeps_the_earlier_file(tmp_path, example_path, name, fmt):
    out = tmp_path / "out"
    target = out / name
    write_cases(load_cases(example_path)[:3], target, fmt)  # an earlier, good output
    before = visible(out)
    killed(out, 2000, "convert", example_path, target, "--to", fmt)
    assert visible(out) == before
    assert len(load_cases(target, fmt)) == 3  # still the earlier output, and readable


def test_convert_killed_mid_write_leaves_no_file_for_run_to_accept(tmp_path, example_path):
    out = tmp_path / "out"
    out.mkdir()
    killed(out, 20_000, "convert", example_path, out / "golden.jsonl")
    assert visible(out) == {}
    from conftest import ragbridge_cli

    res = ragbridge_cli("run", out / "golden.jsonl", "--out", tmp_path / "run")
    assert res.returncode == 2 and "no such file" in res.stderr


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_report_killed_mid_write_keeps_the_earlier_report(run_dir, fmt):
    target = run_dir / f"report-{fmt}.out"
    target.write_bytes(EARLIER)
    killed(run_dir, 10_000, "report", run_dir, "--format", fmt, "--out", target)
    assert target.read_bytes() == EARLIER
    fresh = run_dir / f"fresh-{fmt}.out"
    killed(run_dir, 10_000, "report", run_dir, "--format", fmt, "--out", fresh)
    assert not fresh.exists()


GATES = '[[gate]]\ncheck = "recall@5 >= 0.5"\n'


@pytest.mark.parametrize("flag", ["--junit", "--markdown"])
def test_gate_outputs_killed_mid_write_are_kept(tmp_path, run_dir, flag):
    (tmp_path / "gates.toml").write_text(GATES)
    out = tmp_path / "ci"
    out.mkdir()
    target = out / "gate.out"
    target.write_bytes(EARLIER)
    killed(out, 50, "gate", run_dir, "--config", tmp_path / "gates.toml", flag, target)
    assert visible(out) == {"gate.out": EARLIER}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_diff_items_killed_mid_write_are_kept(tmp_path, run_dir, suffix):
    out = tmp_path / "diff"
    out.mkdir()
    target = out / f"items{suffix}"
    target.write_bytes(EARLIER)
    killed(out, 1000, "diff", run_dir, run_dir, "--items", target,
           "--resamples", "200", "--permutations", "200")
    assert visible(out) == {target.name: EARLIER}


def test_sample_killed_mid_write_is_kept(tmp_path, example_path):
    out = tmp_path / "sample"
    out.mkdir()
    target = out / "sample.jsonl"
    target.write_bytes(EARLIER)
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(
        json.dumps({"id": c.id, "question": c.question, "answer": c.answer or ""}) + "\n"
        for c in load_cases(example_path)
    ))
    killed(out, 1000, "sample", traces, "--n", "40", "--out", target)
    assert visible(out) == {"sample.jsonl": EARLIER}


def test_run_folder_files_killed_mid_write_are_kept(tmp_path, example_path):
    """cases.jsonl, then run.json, killed half-written while a run resumes: both stay whole."""
    out = tmp_path / "run"
    evaluate(load_cases(example_path), out=out, metrics=["mrr"])
    before = visible(out)
    n_cases = len(before["cases.jsonl"])
    killed(out, n_cases // 2, "run", example_path, "--out", out, "--metric", "mrr", "--no-progress")
    assert visible(out) == before
    killed(out, n_cases + 200, "run", example_path, "--out", out, "--metric", "mrr", "--no-progress")
    assert visible(out)["run.json"] == before["run.json"]
    assert json.loads(visible(out)["run.json"])["status"] == "complete"


def test_atomic_path_replaces_a_folder_and_keeps_it_on_failure(tmp_path):
    target = tmp_path / "ds"
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "a").write_text("first")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "a").write_text("second, half")
            raise RuntimeError("writer failed")
    assert visible(target) == {"a": b"first"} and sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    with atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "b").write_text("second")
    assert visible(target) == {"b": b"second"} and sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    write_atomic(tmp_path / "f.txt", "text")
    write_atomic(tmp_path / "f.bin", b"\x00bytes")
    assert (tmp_path / "f.txt").read_text() == "text" and (tmp_path / "f.bin").read_bytes() == b"\x00bytes"


# --------------------------------------------------------------------------------------------
# What a kill leaves is removed by the next command that writes there


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith((".tmp-", ".old-")))


@pytest.fixture
def traced_run(tmp_path, example_path):
    """A run folder of cases that came from traces (what export-scores writes back)."""
    cases = [c.model_copy(update={"metadata": {"trace": {"trace_id": f"{i:032x}", "span_id": f"{i:016x}"}}})
             for i, c in enumerate(load_cases(example_path), 1)]
    evaluate(cases, metrics=["mrr", "must_contain"], out=tmp_path / "run")
    return tmp_path / "run"


CHUNKING = Path(__file__).resolve().parent.parent / "examples" / "chunking"
#: command -> (its output's name, its arguments given the golden set, the traced run and the output)
COMMANDS = {
    "convert-csv": ("golden.csv", lambda golden, run, out: ["convert", golden, out, "--to", "csv"]),
    "anchor": ("golden.jsonl", lambda golden, run, out: [
        "anchor", CHUNKING / "golden-by-chunk-id.jsonl", "--corpus", CHUNKING / "corpus", "--out", out,
        "--keep-unplaced"]),  # no chunking given: its labels stay as they are, and the file is written
    "export-scores": ("evals.csv", lambda golden, run, out: [
        "export-scores", run, "--to", "csv", "--out", out]),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_temporaries_left_by_kill_9_are_removed_by_the_next_write_there(tmp_path, example_path, traced_run,
                                                                         command):
    """Three kills of the command half way through its output: each left its temporary beside it, for
    ever (57 MB after 123 kills); now each run removes what the killed ones left, so one is left
    (the last kill's), and the next run that completes removes it and writes its output whole."""
    from conftest import ragbridge_cli

    out = tmp_path / "out"
    out.mkdir()
    name, make_args = COMMANDS[command]
    args = make_args(example_path, traced_run, out / name)
    for _ in range(3):
        killed(out, 300, *args)
    assert len(_temporaries(out)) == 1 and not (out / name).exists()
    res = ragbridge_cli(*args)
    assert res.returncode == 0, res.stderr
    assert _temporaries(out) == [] and (out / name).stat().st_size > 300


def test_only_temporaries_of_processes_that_are_gone_are_removed(tmp_path):
    """Beside an output: a live writer's temporary (this process's, and another live process's), one of
    another machine (another pid space), another user's, one named as earlier versions named theirs, and
    a user's own file that merely looks alike are all kept; only the dead writer's goes."""
    import shutil
    import socket as sock

    from ragbridge.formats import files

    live = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        tag = files._host_tag()
        other_tag = "0000" if tag != "0000" else "ffff"
        keep = [f".tmp-{os.getpid()}@{tag}-0123abcd-a.csv", f".tmp-{live.pid}@{tag}-0123abcd-b.csv",
                f".tmp-{dead.pid}@{other_tag}-0123abcd-c.csv", ".tmp-0123abcd-d.csv", ".tmp-notes.txt",
                f".tmp-{dead.pid}@{tag}-0123abcd"]
        gone = [f".tmp-{dead.pid}@{tag}-0123abcd-e.csv", f".old-{dead.pid}@{tag}-89abcdef-ds"]
        for name in keep + gone[:1]:
            (tmp_path / name).write_text("x")
        (tmp_path / gone[1]).mkdir()
        (tmp_path / gone[1] / "part").write_text("x")
        others = f".tmp-{dead.pid}@{tag}-0123abcd-f.csv"
        (tmp_path / others).write_text("x")
        if os.geteuid() == 0:
            shutil.chown(tmp_path / others, user="nobody")
            keep.append(others)
        else:
            gone.append(others)
        write_atomic(tmp_path / "out.csv", "a,b\n")
        assert sorted(_temporaries(tmp_path)) == sorted(keep), sock.gethostname()
    finally:
        live.kill()
        live.wait()


# --------------------------------------------------------------------------------------------
# An output that is a link or a device is refused, never replaced nor written through

WRITERS = {**COMMANDS, "report": ("report.md", lambda golden, run, out: [
    "report", run, "--format", "md", "--out", out])}


@pytest.mark.parametrize("kind", ["link", "fifo"])
@pytest.mark.parametrize("command", sorted(WRITERS))
def test_an_output_that_is_a_link_or_a_device_is_refused(tmp_path, example_path, traced_run, command, kind):
    """``--out`` names a symbolic link (as ``/dev/stdout`` is one, to the terminal) or a FIFO: each
    command that writes a file refuses it (exit 2, saying what to do), and the link, what it points to
    and the FIFO are as they were."""
    from conftest import ragbridge_cli

    out = tmp_path / "out"
    out.mkdir()
    name, make_args = WRITERS[command]
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone else's\n")
    if kind == "link":
        (out / name).symlink_to(target)
    else:
        os.mkfifo(out / name)
    res = ragbridge_cli(*make_args(example_path, traced_run, out / name))
    said = " ".join(res.stderr.split())
    assert res.returncode == 2, res.stderr
    what = f"is a symbolic link (to {target})" if kind == "link" else "is not a file"
    assert f"{out / name}: {what}" in said and "give another path" in said, said
    if kind == "link":
        assert (out / name).is_symlink() and os.readlink(out / name) == str(target)
    else:
        assert stat.S_ISFIFO(os.lstat(out / name).st_mode)
    assert target.read_text() == "someone else's\n" and sorted(p.name for p in out.iterdir()) == [name]


def test_report_writes_to_standard_output_with_out_dash(traced_run):
    from conftest import ragbridge_cli

    res = ragbridge_cli("report", traced_run, "--format", "md", "--out", "-")
    assert res.returncode == 0 and res.stdout.startswith("# ragbridge report")
