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


from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: E402,F401
