import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "support-bot" / "golden.jsonl"


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


def ragbridge_cli(*args, cwd=None, env=None):
    """Run the real console entry point in a subprocess; returns CompletedProcess."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=300,
    )


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
