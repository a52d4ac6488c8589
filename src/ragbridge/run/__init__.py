"""Running an evaluation: plan, call the system under test if asked, score, keep the run folder.

The modules, in the order a run uses them: ``plan`` (which backend scores which metric, `RunError`),
``target`` (filling cases from the system under test), ``folder`` (the run folder: new, resumed,
updated or replaced in one place, the manifest, the scores, reading a run back as a `Run`; ``view``
shows one in a notebook), ``request`` (a run's
parameters, `RunRequest`), ``runner`` (`evaluate_async`: the steps of a run), ``executor`` (where the
jobs are scored: ``local_executor`` in this process, ``ray_executor`` on a Ray cluster), ``lifecycle``
(a backend's open, jobs and close, alike in every executor), ``recorder`` (each score as it arrives,
the counts) and ``progress``. ``sample`` draws golden cases from production logs; ``summary`` is a
run's means and counts per backend, metric and tag (`Run.summary`), with the claims behind a score.
"""


from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Run", "RunError", "evaluate", "evaluate_async", "load_run", "plan_metrics"]

#: the package's names, each imported from its module when first used: a process that needs one
#: module of the package (a library version's worker, ``ragbridge.run.worker``) imports no other
_EXPORTS = {"Run": ".folder", "load_run": ".folder", "RunError": ".errors", "plan_metrics": ".plan",
            "evaluate": ".runner", "evaluate_async": ".runner"}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from .errors import RunError  # noqa: F401
    from .folder import Run, load_run  # noqa: F401
    from .plan import plan_metrics  # noqa: F401
    from .runner import evaluate, evaluate_async  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
