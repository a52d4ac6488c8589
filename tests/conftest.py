import contextlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"

# Hypothesis keeps what it caches (the constants it draws from, its unicode tables) in the temporary
# folder, not in a .hypothesis/ of the checkout: a test run writes nothing beside the project's files.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      str(Path(tempfile.gettempdir()) / f"ragbridge-tests-hypothesis-{os.getuid()}"))


def _backend_defaults() -> None:
    """The libraries' telemetry stays off in every test process, also where a test calls a library
    directly (the parity tests): each backend's environment defaults, as a run applies them."""
    from ragbridge.plugins import get_backends

    for backend in get_backends().values():
        for name, value in backend.environment().items():
            os.environ.setdefault(name, value)


_backend_defaults()


@pytest.fixture(autouse=True)
def _work_in_a_folder_of_its_own(tmp_path_factory, monkeypatch):
    """Every test runs in an empty folder of its own, as a user runs ragbridge in a project: what a
    command writes beside itself by default (the judge cache under ``.ragbridge/``, a report) lands
    there, never in the checkout, and no test sees what an earlier one left."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture
def example_path() -> Path:
    return EXAMPLE


@pytest.fixture
def example_cases():
    from ragbridge import load_cases

    return load_cases(EXAMPLE)


def ragbridge_cli(*args, cwd=None, env=None, subprocess=False, timeout=300):
    """Run the real console entry point (``run_cli``) with ``args``, as a user's shell runs it with
    ``COLUMNS=200`` and ``env`` over the environment, in ``cwd``; returns a ``CompletedProcess``
    (``returncode``, ``stdout``, ``stderr``).

    In this process (`ragbridge.testing.in_process.run_in_process`: its own arguments, environment,
    working folder, standard streams and exit code, the plugin manager and the consoles as a new
    process has them, and nothing it changes left behind), which spares each call the start-up of
    Python and the import of the libraries. ``subprocess=True`` (and an ``env`` whose PYTHONPATH holds
    a ``sitecustomize``): in a child process, for what only a process shows (its signals, its start-up
    and imports, the connections it opens, a Ray cluster of its own, a crash's stderr)."""
    env = {"COLUMNS": "200", **(env or {})}
    if subprocess or _starts_with_site_code(env):
        import subprocess as sp

        # -P: the current folder is not put first on the path, as for the console script
        return sp.run([sys.executable, "-P", "-c", "from ragbridge.commands import run_cli; run_cli()",
                       *map(str, args)], capture_output=True, text=True, cwd=cwd,
                      env={**os.environ, **env}, timeout=timeout)
    from ragbridge.commands import run_cli
    from ragbridge.testing.contract import plugins_as_at_start
    from ragbridge.testing.in_process import run_in_process

    with _consoles_kept():
        return run_in_process(run_cli, args, cwd=cwd, env=env, timeout=timeout,
                              fresh=[plugins_as_at_start, _cli_as_at_start, _consoles_as_at_start])


def _starts_with_site_code(env) -> bool:
    """Whether ``env`` puts a ``sitecustomize`` on the path (a recorder of the connections a process
    opens): code that runs when a process starts, so the call needs a process of its own."""
    added = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return any((Path(p) / name).exists() for p in added for name in ("sitecustomize.py", "usercustomize.py"))


def _consoles():
    output = sys.modules.get("ragbridge.commands.output")
    return [output.out, output.err] if output is not None else []


@contextlib.contextmanager
def _consoles_as_at_start():
    """The command line's consoles made again, as a new process makes them (the width from
    ``COLUMNS``, no terminal)."""
    for console in _consoles():
        console.__init__(stderr=console.stderr)
    yield


@contextlib.contextmanager
def _consoles_kept():
    """The command line's consoles as they were before a call; made again, in this process's
    environment, when the call made them."""
    saved = {id(c): dict(c.__dict__) for c in _consoles()}
    try:
        yield
    finally:
        for console in _consoles():
            if id(console) in saved:
                console.__dict__.clear()
                console.__dict__.update(saved[id(console)])
            else:
                console.__init__(stderr=console.stderr)


@contextlib.contextmanager
def _cli_as_at_start():
    """The command line's application as a new process has it: the commands plugins add when
    ``run_cli`` starts are added again, and removed after; the garbage collector's start-up pause
    and freeze as in a new process."""
    from ragbridge import commands

    app = commands.cli
    saved = (list(app.registered_commands), list(app.registered_groups), commands._gc_paused,
             commands._gc_frozen)
    commands._gc_paused = commands._gc_frozen = False
    try:
        yield
    finally:
        app.registered_commands[:], app.registered_groups[:] = saved[:2]
        commands._gc_paused, commands._gc_frozen = saved[2:]


#: runs a command and prints its exit code and peak RSS (KiB): the command is started from this small
#: process, not from the test's, because Linux counts the memory of the process that forks it in the
#: peak of a child until it executes (a test that made large inputs would read its own size)
_PEAK = ("import os, subprocess, sys\n"
         "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
         "_, status, usage = os.wait4(p.pid, 0)\n"
         "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)")


def peak_mib(*args) -> float:
    """Run the command line ``args`` in a process of its own (``COLUMNS=100``, output dropped); its
    peak RSS in MiB (``ru_maxrss``). Exit status 0 or 1 (a gate that fails) is expected."""
    import subprocess as sp

    env = {**os.environ, "COLUMNS": "100"}
    done = sp.run([sys.executable, "-c", _PEAK, sys.executable, "-c",
                   "from ragbridge.commands import run_cli; run_cli()", *map(str, args)],
                  capture_output=True, text=True, env=env)
    code, kib = done.stdout.split()
    assert int(code) in (0, 1), done.stderr
    return int(kib) / 1024


def warnings_in(stderr: str) -> list[str]:
    """The ``warning:`` lines of a command's stderr, each joined with its continuation lines (a
    warning wrapped at the width goes on indented)."""
    out: list[str] = []
    going_on = False
    for line in stderr.splitlines():
        if line.startswith("warning:"):
            out.append(line)
            going_on = True
        elif going_on and line.startswith("    "):
            out[-1] += " " + line.strip()
        else:
            going_on = False
    return out


def needs_backend(name: str):
    """Skip the test, with the reason and the install command, when backend ``name``'s library is
    not installed (a checkout with only the dev extra)."""
    from ragbridge.plugins import get_backends

    backend = get_backends().get(name)
    missing = backend is None or not backend.available()
    hint = backend.install_hint if backend is not None else ""
    return pytest.mark.skipif(missing, reason=f"the {name} backend's library is not installed ({hint})")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package is missing
        return False


def needs_library(name: str, reason: str | None = None):
    """A test module's ``pytestmark`` for the tests of library ``name``: skipped when it is not
    installed, which is found without importing it, so that collecting the tests imports no library
    (the first test that uses it does)."""
    return pytest.mark.skipif(not _installed(name), reason=reason or f"{name} is not installed")


class library:
    """Module ``name`` as a test module's global, imported when a test first asks it for anything
    (``pytest.importorskip`` then: the test is skipped when it is not installed), so that collecting
    the tests does not import it."""

    def __init__(self, name: str, reason: str | None = None):
        self._name, self._reason = name, reason

    def __getattr__(self, attr: str):
        if attr.startswith("_"):  # what collecting asks of a module's globals (a fixture's marker)
            raise AttributeError(attr)
        return getattr(pytest.importorskip(self._name, reason=self._reason), attr)


def stub_judge_config(stub, model: str = "stub-judge", cache: Path | None = None, **kw):
    """The judge configuration for a stub judge: ``model`` (a name DeepEval knows, ``gpt-4o-mini``,
    gets strict ``json_schema`` requests from it; any other, plain prompts), the response cache at
    ``cache`` (None: no cache), and any other `JudgeConfig` field in ``kw``."""
    from ragbridge.judge import JudgeConfig

    cache = kw.pop("cache_path", cache)
    if cache is None:
        kw.setdefault("cache_mode", "off")
    return JudgeConfig(model=model, base_url=stub.base_url, cache_path=cache, **kw)


def write_run(path: Path, cases, scores, *, judge: dict | None = None, status: str = "complete",
              extra_lines: str = "") -> Path:
    """A run folder written as a run writes one (``run.json``, ``scores.jsonl``, ``cases.jsonl``),
    holding the given ``scores`` of ``cases``: for the analyses' tests, which need exact values and
    no backend. ``extra_lines`` are appended to ``scores.jsonl`` as they are (a line cut by a kill)."""
    from ragbridge.formats.canonical import write_jsonl
    from ragbridge.formats.batches import fingerprint
    from ragbridge.schema import RunManifest

    path.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, list[str]] = {}
    for s in scores:
        metrics.setdefault(s.backend, [])
        if s.metric not in metrics[s.backend]:
            metrics[s.backend].append(s.metric)
    counts = {"scores": len(scores), "scored": sum(s.status == "scored" for s in scores),
              "undefined": sum(s.status == "undefined" for s in scores),
              "errored": sum(s.status == "error" for s in scores)}
    if judge:
        counts["judge"] = {"calls": sum(s.judge_calls for s in scores), "cache_hits": 0,
                           "prompt_tokens": sum(s.prompt_tokens for s in scores),
                           "completion_tokens": sum(s.completion_tokens for s in scores)}
    manifest = RunManifest(
        ragbridge_version="0.1.0",
        dataset={"path": "golden.jsonl", "fingerprint": fingerprint(cases), "n_cases": len(cases)},
        backends={b: "1.0" for b in metrics}, metrics=metrics, judge=judge,
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:01:00+00:00" if status != "running" else None,
        status=status, counts=counts,
    )
    (path / "run.json").write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    lines = "".join(s.model_dump_json() + "\n" for s in scores)
    (path / "scores.jsonl").write_text(lines + extra_lines, encoding="utf-8")
    write_jsonl(cases, path / "cases.jsonl")
    return path


from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: E402,F401


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the addopts in pyproject.toml): the whole suite (``python -m pytest``, ``-m slow``)
    runs on a worker per core and one more; a run of chosen files or tests runs in this one process,
    as before (``-n N`` on the command line, or ``PYTEST_XDIST_AUTO_NUM_WORKERS``, chooses).

    The one more: a test waits a part of its time on what is not its worker (a child process, a stub
    judge's thread, a deadline), and a third worker fills it. On 2 cores the default run took 4:25 on
    2 workers, 3:40 on 3 and 3:50 on 4, one after the other."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist reads it
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores + 1


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """A worker makes its temporary folders as a run without workers does (``pytest-of-USER/pytest-N``,
    kept and rotated by pytest), not in xdist's ``pytest-N/popen-gw0``: paths of the same length, which
    the tests that print a path at 80 columns expect."""
    if getattr(config, "workerinput", None) is not None:
        config.option.basetemp = None
