"""Start-up imports only what is used: ``import ragbridge`` loads no heavy library, ``ragbridge
--help`` no command module, and a command its own module only. Checked by the modules a fresh
process holds (speed itself is measured as whole processes by benchmarks/bench_startup.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ragbridge.commands as commands

from conftest import EXAMPLE

HEAVY = ("pandas", "numpy", "httpx", "pydantic", "pyarrow", "datasets", "scipy", "sklearn", "rich", "jinja2",
         "nltk", "asyncio", "sqlite3", "ragas", "deepeval", "trulens", "phoenix")

_MODULES_AFTER = """
import json, sys
code = sys.argv[1]
try:
    exec(code)
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def modules_after(code: str) -> set[str]:
    p = subprocess.run([sys.executable, "-c", _MODULES_AFTER, code], capture_output=True, text=True,
                       timeout=120)
    return set(json.loads(p.stderr.strip().splitlines()[-1]))


def _top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


def test_import_ragbridge_loads_no_heavy_library_and_no_backend():
    mods = modules_after("import ragbridge")
    assert not _top(mods) & set(HEAVY)
    assert {m for m in mods if m.startswith("ragbridge")} == {"ragbridge"}
    # a name is imported on first use, and only what it needs
    mods = modules_after("import ragbridge; ragbridge.load_cases")
    assert "pandas" not in mods and "httpx" not in mods
    assert not [m for m in mods if m.startswith("ragbridge_")]


def test_help_imports_no_command_module_and_no_backend():
    mods = modules_after("import sys; sys.argv = ['ragbridge', '--help']\n"
                         "from ragbridge.commands import run_cli; run_cli()")
    assert not _top(mods) & set(HEAVY)
    assert not [m for m in mods if m.startswith("ragbridge.commands.")]
    # the plugins that add commands are registered, none of their backends imported
    assert "ragbridge_trulens" in mods and "ragbridge_trulens.backend" not in mods


def test_a_command_imports_its_own_module_only():
    mods = modules_after("import sys; sys.argv = ['ragbridge', 'formats', '--json']\n"
                         "from ragbridge.commands import run_cli; run_cli()")
    assert "ragbridge.commands.data" in mods
    assert not {"ragbridge.commands.analysis", "ragbridge.commands.regression", "ragbridge.commands.report",
                "ragbridge.commands.run", "ragbridge.analysis", "scipy", "sklearn"} & mods


def test_every_command_a_module_registers_is_listed():
    """A command added to a module's ``register`` but not to `COMMANDS` would be unreachable."""
    import importlib

    import typer

    names = set()
    for module in {mod for mod, _ in commands.COMMANDS.values()}:
        app = typer.Typer()
        importlib.import_module(f"ragbridge.commands.{module}").register(app)
        names |= {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
        names |= {g.name for g in app.registered_groups}
    assert names == set(commands.COMMANDS)


@pytest.mark.parametrize("name", list(commands.COMMANDS))
def test_the_help_listed_without_importing_is_the_commands_own(name):
    import click
    import typer

    _, line = commands.COMMANDS[name]
    group = typer.main.get_command(commands.cli)
    cmd = group.get_command(click.Context(group), name)
    assert cmd is not None and cmd.name == name
    assert " ".join((cmd.help or "").split("\n\n")[0].split()) == line


def test_a_native_run_imports_no_other_backend(tmp_path):
    """Registering a backend imports nothing of it (`ragbridge.plugins.LazyBackend`): a native run of
    the example imports the native backend and no library backend's module, nor the rubric judge's."""
    mods = modules_after(f"import sys; sys.argv = ['ragbridge', 'run', {str(EXAMPLE)!r}, '--out', "
                         f"{str(tmp_path / 'run')!r}, '--no-progress']\n"
                         "from ragbridge.commands import run_cli; run_cli()")
    assert "ragbridge.native.ranking" in mods and (tmp_path / "run" / "scores.jsonl").exists()
    assert not [m for m in mods if m.endswith(".backend") and m != "ragbridge.backend"]
    assert not _top(mods) & {"ragas", "deepeval", "trulens", "phoenix", "httpx", "pandas", "scipy", "sklearn"}
    # nor what only a judged run, a corpus or Ray needs: the score cache (sqlite), the judge's
    # cache and gateway, the corpus, the Ray executor
    assert not {"sqlite3", "ragbridge.run.score_cache", "ragbridge.judge.cache", "ragbridge.judge.gateway",
                "ragbridge.run.ray_executor", "ray"} & mods


def test_the_garbage_collector_is_back_on_when_a_command_runs(tmp_path):
    """The console script holds the cyclic garbage collector off while it imports a command, and
    switches it back on before the command works (a long run collects as always), also when the
    command fails."""
    probe = ("import gc, json, sys\n"
             "import ragbridge.commands.data as data\n"
             "def formats(as_json: bool = False):\n"
             "    print(json.dumps([gc.isenabled(), bool(gc.get_freeze_count())]), file=sys.stderr)\n"
             "data.formats = formats\n"
             "sys.argv = ['ragbridge'] + sys.argv[1:]\n"
             "from ragbridge.commands import run_cli\n"
             "try:\n"
             "    run_cli()\n"
             "finally:\n"
             "    print(json.dumps(gc.isenabled()), file=sys.stderr)\n")
    p = subprocess.run([sys.executable, "-c", probe, "formats"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert [json.loads(line) for line in p.stderr.splitlines()] == [[True, True], True]
    p = subprocess.run([sys.executable, "-c", probe, "run", str(tmp_path / "missing.jsonl"), "--out",
                        str(tmp_path / "run")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().splitlines()[-1] == "true", p.stderr


def test_a_lazily_registered_backend_is_made_when_first_used():
    from ragbridge.plugins import LazyBackend

    lazy = LazyBackend("rubric", "ragbridge.rubric.backend:RubricBackend")
    assert lazy.name == "rubric" and lazy._backend is None
    assert lazy.available() and lazy.load() is lazy.load() and lazy.load().name == "rubric"
    with pytest.raises(ValueError, match="registered as 'other'"):
        LazyBackend("other", "ragbridge.rubric.backend:RubricBackend").metrics()


@pytest.mark.parametrize("given", [None, "2"])
def test_a_run_starts_numpy_blas_with_one_thread_unless_the_user_set_one(tmp_path, given):
    """OpenBLAS's idle workers spin for a while after they start: the command line loads NumPy with
    one BLAS thread, and takes the setting out of the environment again (nothing the run starts
    inherits it); a thread count the user set is theirs."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    probe = ("import json, os, sys\n"
             "sys.argv = ['ragbridge'] + sys.argv[1:]\n"
             "from ragbridge.commands import run_cli\n"
             "try:\n"
             "    run_cli()\n"
             "except SystemExit:\n"
             "    pass\n"
             "from threadpoolctl import threadpool_info\n"
             "blas = [i['num_threads'] for i in threadpool_info() if i['internal_api'] == 'openblas']\n"
             "print(json.dumps([blas, os.environ.get('OPENBLAS_NUM_THREADS')]), file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    p = subprocess.run([sys.executable, "-c", probe, "run", str(EXAMPLE), "--out", str(tmp_path / "run"),
                        "--no-progress"], capture_output=True, text=True, timeout=120, env=env)
    blas, left = json.loads(p.stderr.strip().splitlines()[-1])
    if not blas:
        pytest.skip(f"NumPy here is not linked to OpenBLAS ({threadpoolctl.threadpool_info()})")
    assert (blas, left) == (([1], None) if given is None else ([2], given)), p.stderr
