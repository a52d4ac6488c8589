"""The analyses of run folders: cross-checking backends, validating them against human labels,
calibrating thresholds for a migration, diffing two runs and gating a run in CI.

Each analysis reads a run folder (or a `ragbridge.Run`) and returns pandas DataFrames or a result
object; the commands of ``ragbridge.commands`` print the same. One module per analysis:

``compare``    agreement between backends on each metric they share, and the cases they disagree on;
               two runs compared rater against rater (a change of judge model or library version)
``validate``   each backend's verdicts against human labels (``labels``: reading them)
``calibrate``  the threshold in one backend that reproduces another's pass/fail
``diff``       item-level diff of two runs with paired statistics
``gate``       CI gates: thresholds over a run, absolute or relative to a baseline
``noise``      judge noise from repeats: within-case spread, verdict flips, reliability, the minimum
               detectable difference, whether a difference between runs is within judge noise
``trend``      the series of each metric's mean over dated runs, its slope and its change points
``ppi``        the true pass rate from the judge's verdicts and a few human labels (PPI)
``stats``      the figures of two raters and their one interval method, the bootstrap of a mean, the
               permutation test, PPI
``table``      runs as paired tables of scores, runs judged apart joined as columns (`join_runs`);
               ``thresholds``: pass/fail thresholds

From Python::

    from ragbridge.analysis import compare, disagreements, validate, calibrate, calibration_flips
    compare("runs/x", metrics=["faithfulness"], thresholds={"rubric": 0.7})  # one row per pair
    disagreements("runs/x", top=10)                  # each backend's value and reason per case
    validate("runs/x", "labels.jsonl")               # one row per metric and backend
    curve = calibrate("runs/x", "old-backend", "new-backend", "faithfulness", threshold=0.7)
    best = curve[curve.best].iloc[0]                 # threshold, kappa, agreement, flips

    from ragbridge.analysis import diff_runs, run_gates
    d = diff_runs("runs/main", "runs/pr")      # RunDiff: .summary, .items (DataFrames), .worse(), .better()
    report = run_gates("runs/pr", "gates.toml", baseline="runs/main")
    report.passed, report.to_frame()           # JUnit and Markdown: ragbridge.report.ci

    from ragbridge.analysis import compare_runs, trend
    compare_runs("runs/old-judge", "runs/new-judge")   # one row per (metric, backend): figures, shift
    compare(["runs/gpu-1", "runs/gpu-2"])      # runs judged apart: each run's backends side by side
    validate(["runs/gpu-1", "runs/gpu-2"], "labels.jsonl")   # (join_runs: a column per backend and run)
    t = trend(["runs/daily"])                  # Trend: .series, .summary (slope), .changes

Cases a backend could not score are never dropped silently: every frame counts, per backend,
the cases that were ``undefined`` (value null, no error), ``errored`` and ``missing`` (no score line
at all); only cases both sides scored enter a figure.
"""

from ..run.summary import ALL, claim_counts, summarize, unsupported_claims
from .calibrate import calibrate, calibration_flips
from .compare import FIGURES, compare, compare_runs, coverage, disagreements, run_shifts
from .diff import IncompleteRunError, RegressionError, RunDiff, diff_runs, run_problems
from .gate import GateConfig, GateConfigError, GateReport, GateResult, load_gates, parse_gates, run_gates
from .labels import load_labels
from .noise import noise_figures, noise_table, within_noise
from .ppi import ppi_estimates
from .table import AnalysisError, join_runs
from .thresholds import Thresholds
from .trend import Trend, trend
from .validate import validate

__all__ = [
    "ALL", "AnalysisError", "FIGURES", "GateConfig", "GateConfigError", "GateReport", "GateResult",
    "IncompleteRunError", "RegressionError", "RunDiff", "Thresholds", "calibrate", "calibration_flips",
    "claim_counts", "compare", "compare_runs", "run_shifts", "Trend", "trend", "coverage", "diff_runs",
    "disagreements", "load_gates",
    "load_labels", "parse_gates", "run_gates", "run_problems", "summarize", "unsupported_claims",
    "validate", "noise_figures", "noise_table", "within_noise", "ppi_estimates", "join_runs",
]
