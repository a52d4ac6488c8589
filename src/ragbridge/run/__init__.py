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

from .folder import Run, load_run
from .plan import RunError, plan_metrics
from .runner import evaluate, evaluate_async

__all__ = ["Run", "RunError", "evaluate", "evaluate_async", "load_run", "plan_metrics"]
