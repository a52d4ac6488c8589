"""DeepEval's side effects stay switched off (issue 5, point 5): no PostHog or Confident AI connection
(even with CONFIDENT_API_KEY set, and none at exit after the run), no `.deepeval/` folder in the
working directory, no `.env` loaded, and DeepEval's auto-loaded pytest plugin kept out of the
project's test runs; and none of DeepEval's defaults is set outside a run (importing ragbridge
changes no environment variable).

Each check runs in a fresh subprocess with the DeepEval / Confident variables removed from its
environment, as in a user's shell, and with a control run showing the check would catch the effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import needs_library  # noqa: E402

pytestmark = needs_library("deepeval")

from conftest import ROOT  # noqa: E402

DOTENV = "RAGBRIDGE_DOTENV_PROBE=loaded-from-dotenv\nCONFIDENT_API_KEY=confident_us_from_dotenv\n"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEEPEVAL_", "CONFIDENT_", "PYTEST_"))
           and k not in ("RAGBRIDGE_DOTENV_PROBE", "XDG_CACHE_HOME", "DO_NOT_TRACK")}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def py(code: str, cwd: Path, env: dict, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def user_dir(tmp_path):
    """A user's project folder with a `.env` DeepEval would load, and an empty home."""
    work = tmp_path / "work"
    work.mkdir()
    (work / ".env").write_text(DOTENV)
    (tmp_path / "home").mkdir()
    return work


NET_GUARD = """
    import atexit, json, socket, sys
    _seen = []
    _connect, _gai = socket.socket.connect, socket.getaddrinfo
    def connect(self, addr):
        _seen.append(["connect", str(addr[0]) if isinstance(addr, tuple) else str(addr)])
        return _connect(self, addr)
    def gai(host, *a, **k):
        _seen.append(["dns", str(host)])
        return _gai(host, *a, **k)
    socket.socket.connect, socket.getaddrinfo = connect, gai
    # registered first, so it runs last: after DeepEval's and PostHog's own exit handlers
    atexit.register(lambda: open("net.json", "w").write(json.dumps(_seen)))
"""


def test_a_run_talks_only_to_the_judge_loads_no_dotenv_writes_no_folder(user_dir):
    home = user_dir.parent / "home"
    code = NET_GUARD + f"""
    import os
    import ragbridge
    from ragbridge.judge import JudgeConfig
    from ragbridge.formats.canonical import read_jsonl
    from ragbridge.testing import StubJudge
    from pathlib import Path
    cases = read_jsonl(Path({str(ROOT / "examples/support-bot/golden.jsonl")!r}))[:2]
    with StubJudge() as stub:
        run = ragbridge.evaluate(cases, backends=["deepeval"], metrics=["faithfulness", "answer_correctness"],
                                 judge=JudgeConfig(model="gpt-4o-mini", base_url=stub.base_url,
                                                   cache_mode="off", api_key_env="RAGBRIDGE_TEST_KEY"))
    import deepeval
    print(json.dumps({{"scored": sum(s.value is not None for s in run.scores),
                      "errors": [s.error for s in run.scores if s.error],
                      "dotenv": os.environ.get("RAGBRIDGE_DOTENV_PROBE"),
                      "confident": os.environ.get("CONFIDENT_API_KEY"),
                      "left_set": sorted(k for k in os.environ if k.startswith("DEEPEVAL_"))}}))
    """
    res = py(code, user_dir, clean_env(home, CONFIDENT_API_KEY="confident_us_set_by_user"))
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["scored"] == 4 and not out["errors"]
    assert out["dotenv"] is None  # the .env in the working directory was not loaded
    assert out["confident"] == "confident_us_set_by_user"  # nor did it override the user's variable
    assert out["left_set"] == []  # the backend's defaults held while the run used it, no longer
    seen = json.loads((user_dir / "net.json").read_text())
    assert seen, "the socket guard saw nothing: it is not working"
    hosts = {h for _, h in seen}
    assert hosts <= {"127.0.0.1", "localhost", "::1"}, hosts  # no posthog, no confident-ai
    assert "PostHog" not in res.stderr and "confident" not in res.stderr.lower()
    leftovers = sorted(p.name for p in user_dir.iterdir())
    assert leftovers == [".env", "net.json"], leftovers  # no .deepeval/, no cache files
    assert not (home / ".deepeval").exists()


def test_ragbridge_and_the_deepeval_formats_import_no_deepeval_and_change_no_environment(user_dir):
    """Importing ragbridge, registering every plugin and converting DeepEval datasets neither imports
    DeepEval nor changes the environment: DeepEval's defaults belong to its backend, applied by a run."""
    home = user_dir.parent / "home"
    code = f"""
        import json, os, sys
        before = dict(os.environ)
        import ragbridge
        from ragbridge.formats import get_formats
        from ragbridge.plugins import get_backends
        assert "deepeval" in get_backends() and "deepeval" in get_formats()
        cases = ragbridge.load_cases({str(ROOT / "examples/support-bot/golden.jsonl")!r})[:3]
        for fmt, name in (("deepeval-json", "g.json"), ("deepeval-jsonl", "g.jsonl"),
                          ("deepeval-csv", "g.csv")):
            ragbridge.write_cases(cases, name, format=fmt)
            assert [c.id for c in ragbridge.load_cases(name, format="deepeval")] == [c.id for c in cases]
        changed = sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))
        print(json.dumps({{"imported": sorted(m for m in sys.modules if m.split(".")[0] == "deepeval"),
                          "changed": changed}}))
    """
    res = py(code, user_dir, clean_env(home))
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"imported": [], "changed": []}
    assert not (user_dir / ".deepeval").exists() and not (home / ".deepeval").exists()


def test_importing_deepeval_with_the_backends_environment_creates_no_folder_and_loads_no_dotenv(user_dir):
    """What a run does: the backend's environment applied, then DeepEval imported."""
    home = user_dir.parent / "home"
    code = """
        import os
        from ragbridge.run.lifecycle import applied_environment
        from ragbridge_deepeval import DeepEvalBackend

        with applied_environment(DeepEvalBackend().environment()):
            import deepeval
            from deepeval.metrics import FaithfulnessMetric, GEval
            from deepeval.models import OpenAIModel
            print(os.environ.get("RAGBRIDGE_DOTENV_PROBE"))
    """
    res = py(code, user_dir, clean_env(home))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "None"
    assert not (user_dir / ".deepeval").exists()
    # even a user who opts back into DeepEval's telemetry gets no .deepeval/ in the working directory
    res = py(code, user_dir, clean_env(home, DEEPEVAL_TELEMETRY_OPT_OUT="0"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert not (user_dir / ".deepeval").exists()


def test_control_plain_deepeval_import_does_write_and_load(user_dir):
    """Without ragbridge the same import makes `.deepeval/` and loads `.env`: the checks above can fail."""
    home = user_dir.parent / "home"
    res = py("import os, deepeval; print(os.environ.get('RAGBRIDGE_DOTENV_PROBE'))", user_dir,
             clean_env(home))
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "loaded-from-dotenv"
    assert (user_dir / ".deepeval").is_dir()


TINY_TEST = """
import sys

def test_tiny():
    assert "deepeval" not in sys.modules
"""


def run_pytest(folder: Path, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(folder),
         *args, "test_tiny.py"],
        cwd=folder, env=clean_env(home, **env), capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_deepeval_pytest_plugin_is_kept_out_of_project_test_runs(tmp_path):
    folder, home = tmp_path / "proj", tmp_path / "home"
    folder.mkdir()
    home.mkdir()
    (folder / "test_tiny.py").write_text(TINY_TEST)
    res = run_pytest(folder, home)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "1 passed" in res.stdout
    assert "Running teardown with pytest sessionfinish" not in res.stdout + res.stderr
    assert not (folder / ".deepeval").exists() and not (home / ".deepeval").exists()

    # control: the same run without the project's addopts loads DeepEval's plugin, which prints its
    # session-finish line (and imports DeepEval, so the tiny test fails). Telemetry is opted out here
    # only so that the control run does not try to reach PostHog.
    control = run_pytest(folder, home, "-o", "addopts=-p no:cacheprovider", DEEPEVAL_TELEMETRY_OPT_OUT="1")
    assert "Running teardown with pytest sessionfinish" in control.stdout + control.stderr
