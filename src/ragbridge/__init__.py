"""ragbridge: one golden set, every RAG evaluation backend, one report.

From Python::

    import ragbridge
    cases = ragbridge.load_cases("examples/support-bot/golden.jsonl")
    run = ragbridge.evaluate(cases, backends=["native"], out="runs/example")
    run.summary()      # DataFrame: backend, metric, tag, mean, n_scored, n_undefined, n_errored
    run.to_frame()     # DataFrame: one row per score

Importing ragbridge changes no environment variable: each backend's library defaults (telemetry off
and the like) are applied only while a run uses that backend (``Backend.environment``).
"""

__version__ = "0.1.0"

# `pytest -p ragbridge` loads the pytest plugin through this (it is never loaded otherwise).
pytest_plugins = ["ragbridge.pytest_plugin"]

from .backend import Backend, MetricSpec, RunOptions, ScoringContext  # noqa: E402
from .hookspecs import hookimpl  # noqa: E402
from .formats import DatasetError, load_cases, write_cases  # noqa: E402
from .run import Run, RunError, evaluate, load_run  # noqa: E402
from .schema import Case, Chunk, RunManifest, Score  # noqa: E402

__all__ = [
    "__version__",
    "Backend",
    "Case",
    "Chunk",
    "DatasetError",
    "MetricSpec",
    "Run",
    "RunError",
    "RunManifest",
    "RunOptions",
    "Score",
    "ScoringContext",
    "evaluate",
    "hookimpl",
    "load_cases",
    "load_run",
    "write_cases",
]
