"""examples/ci/rag-eval.yml runs as CI runs it: each job's ``run`` steps in order, in bash with the
runner's options, from a git checkout of this code, with the workflow's environment and its
expressions filled in as GitHub fills them.

The repository is a local git repository holding this checkout's files (the base commit, and a head
commit after it), served as ``file://``: the workflow's ``RAGBRIDGE`` (``git+<server>/<repository>@
<sha>``) is then a git URL pip clones and builds, as a user's CI installs ragbridge from its git
repository. Offline: pip installs ragbridge alone into the job's fresh virtual environment, which
sees this Python's packages for ragbridge's dependencies. The nightly job replays a judge cache and
a baseline recorded as examples/ci/README.md says, committed to the repository; the stub judge
stands in for the judge URL, as in the docs' tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT

yaml = pytest.importorskip("yaml")

WORKFLOW = ROOT / "examples" / "ci" / "rag-eval.yml"
JUDGE_URL = "https://api.openai.com/v1"  # the workflow's judge: the stub judge stands in for it


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "ci", "GIT_AUTHOR_EMAIL": "ci@example.invalid",
           "GIT_COMMITTER_NAME": "ci", "GIT_COMMITTER_EMAIL": "ci@example.invalid"}
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def _repository(where: Path) -> Path:
    """A git repository of this checkout's files (tracked or not, but not ignored), as committed:
    the base commit, then a head commit after it."""
    repo = where / "ragbridge"
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    _git("init", "-q", "-b", "main", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "base", cwd=repo)
    return repo


def _commit(repo: Path, message: str) -> str:
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "--allow-empty", "-m", message, cwd=repo)
    return _git("rev-parse", "HEAD", cwd=repo)


def _venv(where: Path) -> Path:
    """A fresh virtual environment (setup-python's, here) that sees this Python's packages for
    ragbridge's dependencies, but not ragbridge: pip installs that. Its ``pip`` is this Python's (a
    current one, as setup-python gives; the one ``venv`` bundles may be too old to take a
    ``git+file://`` URL), installing into the environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    site = Path(sysconfig.get_paths(vars={"base": str(where), "platbase": str(where)})["purelib"])
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    pip = where / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\nexec "{where / "bin" / "python"}" -m pip "$@"\n', encoding="utf-8")
    pip.chmod(0o755)
    return where / "bin"


_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _fill(text: str, context: dict[str, str]) -> str:
    def value(m: re.Match) -> str:
        assert m.group(1) in context, f"the workflow uses an expression this test does not know: {m.group(1)}"
        return context[m.group(1)]

    return _EXPRESSION.sub(value, str(text))


def _run_job(job: dict, env: dict[str, str], context: dict[str, str], checkout: Path, tmp: Path,
             swap: tuple[str, str] = ("", ""), may_fail: str = "") -> tuple[list[str], dict[str, int]]:
    """Each ``run`` step of ``job`` in order, as the runner runs it (``bash --noprofile --norc -eo
    pipefail``; after a failed step, only the ``if: always()`` ones); the ``uses`` steps are what the
    test did (checkout, Python) or does not need (artifacts). Only the step named ``may_fail`` may
    fail, with exit code 1 (a gate's verdict). Returns the steps run and the failed ones' codes."""
    ran, failed = [], {}
    summary = tmp / "step-summary.md"
    summary.touch()
    for step in job["steps"]:
        if "run" not in step:
            assert step["uses"].split("@")[0] in ("actions/checkout", "actions/setup-python",
                                                  "actions/upload-artifact"), step
            continue
        if failed and step.get("if") != "always()":
            continue
        step_env = {**env, **{k: _fill(v, context) for k, v in step.get("env", {}).items()},
                    "GITHUB_STEP_SUMMARY": str(summary)}
        script = _fill(step["run"], context).replace(*swap)
        p = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=checkout,
                           env=step_env, capture_output=True, text=True, timeout=900)
        name = step.get("name", script)
        assert p.returncode == 0 or (name == may_fail and p.returncode == 1), (
            f"step {name!r} exited {p.returncode}:\n{script}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        assert "Traceback" not in p.stderr, p.stderr[-3000:]
        ran.append(name)
        if p.returncode:
            failed[name] = p.returncode
    return ran, failed


def _environment(workflow: dict, job: dict, bin_dir: Path, context: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update({k: _fill(v, context) for k, v in {**workflow.get("env", {}), **job.get("env", {})}.items()})
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    # offline: ragbridge alone is built from the repository, its dependencies are already there
    env.update(PIP_NO_INDEX="1", PIP_NO_DEPS="1", PIP_NO_BUILD_ISOLATION="0",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


@pytest.mark.slow  # two jobs, each installing ragbridge from git into a fresh environment: a few minutes
def test_the_ci_workflow_runs_as_ci_runs_it(tmp_path, stub_judge):
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    repo = _repository(tmp_path / "server")
    base = _git("rev-parse", "HEAD", cwd=repo)
    (repo / "CHANGES.md").write_text("A change under review.\n", encoding="utf-8")
    head = _commit(repo, "head")

    # the install is a git URL of the repository at the commit under test: what the workflow says
    assert workflow["env"]["RAGBRIDGE"].startswith("git+")
    # a host in the URL (localhost): the pip an older venv bundles (23.2) takes no git+file:/// requirement
    context = {"github.server_url": f"file://localhost{repo.parent}", "github.repository": repo.name,
               "github.sha": head, "github.run_id": "1",
               "env.PYTHON_VERSION": workflow["env"]["PYTHON_VERSION"],
               # a pull request: the base commit is the pull request's base
               "github.event_name == 'pull_request' && github.event.pull_request.base.sha || "
               "github.event.before": base}

    # on a pull request: the native gate
    job = workflow["jobs"]["native-gate"]
    assert job["if"] == "github.event_name == 'pull_request' || github.event_name == 'push'"
    checkout = tmp_path / "pr" / "ragbridge"
    subprocess.run(["git", "clone", "-q", str(repo), str(checkout)], check=True, timeout=120)
    bin_dir = _venv(tmp_path / "pr" / "venv")
    env = _environment(workflow, job, bin_dir, context)
    ran, failed = _run_job(job, env, context, checkout, tmp_path / "pr")
    assert not failed and ran == ["Install", "Score this change", "Score the base commit (baseline)",
                   "Diff (per-case changes, for the log)", "Gate", "Job summary"]
    import ragbridge

    installed = subprocess.run([str(bin_dir / "python"), "-c", "import ragbridge; print(ragbridge.__file__)"],
                               capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=True)
    assert installed.stdout.strip().startswith(str(bin_dir.parent))  # pip's copy, not this checkout's
    assert Path(ragbridge.__file__).parent != Path(installed.stdout.strip()).parent
    assert "gate passed" in (tmp_path / "pr" / "step-summary.md").read_text(encoding="utf-8")
    assert (checkout / "runs" / "gate-native.xml").exists()
    assert (checkout / "runs" / "diff-items.csv").exists()

    # nightly: the judged gate, replaying the judge cache and the baseline recorded as the README says
    # (with a key, against the judge; here the stub judge), committed to the repository
    readme = (ROOT / "examples" / "ci" / "README.md").read_text(encoding="utf-8")
    record = re.search(r"^# locally, with a key.*?\n(ragbridge run .*?)\ngit add", readme, re.M | re.S)
    record = record.group(1)
    record = record.replace("golden.jsonl", workflow["env"]["GOLDEN"]).replace(JUDGE_URL, stub_judge.base_url)
    cli = f'"{sys.executable}" -c "from ragbridge.commands import run_cli; run_cli()"'
    p = subprocess.run(["bash", "-eo", "pipefail", "-c", record.replace("ragbridge run", f"{cli} run", 1)
                        + " --no-progress"], cwd=repo, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "OPENAI_API_KEY": "sk-recording"})
    assert p.returncode == 0, p.stderr[-3000:]
    nightly = _commit(repo, "the judge cache and the judged baseline")
    context.update({"github.sha": nightly})
    job = workflow["jobs"]["judged-gate"]
    assert job["if"] == "github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'"
    checkout = tmp_path / "nightly" / "ragbridge"
    subprocess.run(["git", "clone", "-q", str(repo), str(checkout)], check=True, timeout=120)
    bin_dir = _venv(tmp_path / "nightly" / "venv")
    env = _environment(workflow, job, bin_dir, context)
    env.pop("OPENAI_API_KEY", None)  # no key in CI: every judge request is in the cache
    before = len(stub_judge.requests)
    gate = "Gate against the recorded baseline"
    ran, failed = _run_job(job, env, context, checkout, tmp_path / "nightly",
                           swap=(JUDGE_URL, stub_judge.base_url), may_fail=gate)
    assert ran == ["Install", "Score with the judge, replaying the committed cache", gate, "Job summary"]
    # nothing was asked of the judge: a replay only asks a judge on this machine, without the key,
    # whether it is ragbridge's stub (its list of models), which a hosted judge in CI never is
    sent = stub_judge.requests[before:]
    assert all(r.method == "GET" and r.path.endswith("/models") and "authorization" not in r.headers
               for r in sent), sent
    # the stub judge's verdicts fail a rule: exit 1, the gate's verdict, with the job page's summary
    summary = (tmp_path / "nightly" / "step-summary.md").read_text(encoding="utf-8")
    assert failed == {gate: 1} and "gate failed" in summary and "answers mostly grounded" in summary
