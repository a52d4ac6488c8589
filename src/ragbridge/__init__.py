"""ragbridge: one golden set, every RAG evaluation backend, one report.

From Python::

    import ragbridge
    cases = ragbridge.load_cases("examples/support-bot/golden.jsonl")   # or a DataFrame, a list of
    run = ragbridge.evaluate(cases, backends=["native"], out="runs/example")  # dicts, a library's dataset
    run.summary()              # DataFrame: backend, metric, tag, mean, n_scored, n_undefined, n_errored
    run.to_frame(wide=True)    # DataFrame: one row per case, one column per backend:metric
    ragbridge.to_library(cases, name)      # the cases as a library's own dataset object
    ragbridge.synthesize("docs/", n=200, out="synth.jsonl", judge=...)  # a synthetic golden set

``evaluate`` works in a notebook cell or under a running event loop as in a script;
``await ragbridge.evaluate_async(...)`` is the same run for async code.

A plugin (a backend, a dataset format, a library's objects) imports ragbridge through
``ragbridge.plugin``, and its tests through ``ragbridge.testing``.

Importing ragbridge is cheap: each name below is imported when first used (so a notebook's
``import ragbridge`` loads neither pandas, the HTTP client nor any library backend), and it changes
no environment variable: each backend's library defaults (telemetry off and the like) are applied
only while a run uses that backend (``Backend.environment``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# `pytest -p ragbridge` loads the pytest plugin through this (it is never loaded otherwise).
pytest_plugins = ["ragbridge.pytest_plugin"]

#: every public name, and the module it is imported from when first used
_EXPORTS = {
    "RunOptions": "ragbridge.backend",
    "DatasetError": "ragbridge.formats",
    "load_cases": "ragbridge.formats",
    "write_cases": "ragbridge.formats",
    "to_library": "ragbridge.formats.objects",
    "Run": "ragbridge.run",
    "RunError": "ragbridge.run",
    "evaluate": "ragbridge.run",
    "evaluate_async": "ragbridge.run",
    "load_run": "ragbridge.run",
    "Case": "ragbridge.schema",
    "Chunk": "ragbridge.schema",
    "RunManifest": "ragbridge.schema",
    "Score": "ragbridge.schema",
    "synthesize": "ragbridge.synthetic.synthesis",
}

__all__ = [
    "__version__", "Case", "Chunk", "DatasetError", "Run", "RunError", "RunManifest", "RunOptions", "Score",
    "evaluate", "evaluate_async", "load_cases", "load_run", "synthesize", "to_library", "write_cases",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from .backend import RunOptions
    from .formats import DatasetError, load_cases, write_cases
    from .formats.objects import to_library
    from .run import Run, RunError, evaluate, evaluate_async, load_run
    from .schema import Case, Chunk, RunManifest, Score
    from .synthetic.synthesis import synthesize


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragbridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
