"""CI gates: thresholds over a run folder, absolute or relative to a baseline run.

A gates file (TOML, read with ``tomllib``) holds optional ``[defaults]`` and one ``[[gate]]`` table
per rule. A rule's ``check`` is one comparison::

    [defaults]
    backend = "native"        # a string or a list; omitted: every backend of the run that scored the metric
    min_n = 20                # fewer cases than this cannot pass (below_min_n = "skip" to skip instead)

    [[gate]]
    check = "recall@5 >= 0.85"                 # mean over the scored cases

    [[gate]]
    check = "ndcg@5 >= 0.80"
    tags = ["real"]                            # only cases carrying every listed tag
    min_n = 10

    [[gate]]
    check = "faithfulness drop <= 0.02"        # baseline mean - run mean, on cases scored in both
    backend = "rubric"
    significant = true                         # fail only when the drop is statistically significant

    [[gate]]
    check = "abstention >= 0.9"                # abstention is scored on unanswerable cases only
    tags = ["unanswerable"]

    [[gate]]
    check = "share(faithfulness >= 0.7) >= 0.9"   # share of scored cases passing at 0.7

    [[gate]]
    check = "error_rate <= 0.05"               # share of cases with an errored score (any metric)

    [[gate]]
    check = "faithfulness slope >= -0.01"      # least-squares slope per run of the mean, over
    last = 5                                   # the last 5 runs (the earlier ones from --history)

The left-hand side is one of: ``METRIC`` or ``mean(METRIC)``; ``METRIC drop`` (needs ``--baseline``;
only ``<=`` or ``<``); ``METRIC slope`` (needs ``--history``); ``share(METRIC OP VALUE)``;
``error_rate`` or ``error_rate(METRIC)``; ``undefined_rate(METRIC)``. OP is ``>=``, ``>``, ``<=`` or
``<``.

A ``slope`` rule (`ragbridge.analysis.trend`): the history runs (``history=``, ``--history RUN ...``:
run folders or folders of them) that started no later than the gated run, and the gated run, are
ordered by the start time in their ``run.json``; the rule takes the ``last`` of them (default: all;
at least 2) and fits a least-squares line to each run's mean over its scored cases (carrying the
rule's ``tags``; a run with fewer than ``min_n`` such cases is left out). The figure is the slope per
run, with its t interval (`ragbridge.analysis.stats.ols_slope`); ``n`` is the number of runs in the
fit, and the items behind a miss are the runs with their means, the latest first. Fewer than 2
runs in the fit: the ``below_min_n`` verdict. ``significant = true``: it fails only when the whole
interval misses the bound (with 2 runs there is no interval and a miss fails).

Rule keys: ``check`` (required), ``name``, ``backend``, ``tags`` (or ``tag``), ``min_n``,
``below_min_n`` (``"fail"`` or ``"skip"``), ``significant``, ``alpha`` (default 0.05),
``confidence`` (default 0.95), ``min_repeats`` (a judged metric must have been taken at least this
many times, ``run --repeats``, or the rule fails); every key but ``check`` and ``name`` may also be
set in ``[defaults]``, with ``seed``, ``resamples`` (bootstrap, default 2000) and ``permutations``
(default 9999). A ``backend`` of ``[defaults]`` is for the rules over one backend's scores: a rule
over the whole run (``diagnosed``) reads every backend whatever it says.

``significant = true``: a ``drop`` rule fails only when the drop exceeds the allowance AND a
one-sided paired permutation test of "the drop is larger than the allowance" gives p < ``alpha``;
a mean or share rule fails only when the whole confidence interval lies on the wrong side of the
threshold. A miss that is not significant passes, and the table says so. This keeps judge noise
from failing builds; a real regression on enough cases still fails.

Judge noise: when the runs were made with ``--repeats``, a ``drop`` rule's detail says whether the
drop is within judge noise (smaller than the band judge noise alone puts between the two means,
`ragbridge.analysis.noise`), and ``min_repeats`` makes a rule require that many repeats.

Undefined scores are never averaged: means and shares are over scored cases (``n`` in the table);
errors are gated by ``error_rate``. A run that did not finish is never gated (`IncompleteRunError`).
A case passes a per-case cut (a share rule's, and the bar of a mean rule whose cases behind a miss
are listed) by `ragbridge.verdicts.verdict`, as everywhere else: with repeats, when a majority of
them pass.

The parts: ``config`` reads a gates file; ``kinds`` says what each kind of rule measures (a new kind
is one `register` call); ``verdict`` decides whether a rule holds, in one function for every kind.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ...metrics import NAMES, resolve_metric
from ...run import Run
from ..diff import (
    RegressionError,
    dataset_change_message,
    dataset_changes,
    definition_change_message,
    definition_changes,
    noise_of,
    require_complete,
)
from ..noise import check_repeats
from ..thresholds import Thresholds
from ..stats import group_seed
from ..table import open_run
from ..trend import expand_runs, order_runs, started_at
from ..versions import version_change_warnings, version_steps
from ...run.progress import Steps
from .config import GateConfig, GateConfigError, Rule, load_gates, parse_gates, where
from .kinds import KINDS, GateContext, Measurement, RuleKind, register
from .verdict import decide

__all__ = ["GateConfigError", "Rule", "GateConfig", "GateResult", "GateReport", "load_gates", "parse_gates",
           "run_gates", "RuleKind", "Measurement", "register", "KINDS", "gate_thresholds"]


# --------------------------------------------------------------------------------------------
# Evaluation


@dataclass
class GateResult:
    """The verdict of one rule on one backend."""

    rule: Rule
    backend: str
    verdict: str  # pass | fail | skip
    figure: float
    n: int
    detail: str = ""
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    items: list[dict[str, Any]] = field(default_factory=list)

    def __repr__(self) -> str:  # one line: ``items`` may list every case
        return (f"GateResult(#{self.rule.index} {self.label}, {self.verdict}, figure={self.figure:.3f}, "
                f"n={self.n}, {len(self.items)} cases behind)")

    @property
    def label(self) -> str:
        return f"{self.backend}: {self.rule.label}"

    @property
    def passed(self) -> bool:
        return self.verdict != "fail"


@dataclass
class GateReport:
    """Every rule's verdict on a run; ``passed`` when no rule failed."""

    run: Run
    results: list[GateResult]
    baseline: Optional[Run] = None
    warnings: list[str] = field(default_factory=list)
    config: Optional[GateConfig] = None

    def __repr__(self) -> str:  # one line: the report holds the runs
        n_skip = sum(r.verdict == "skip" for r in self.results)
        return (f"GateReport({str(self.run.path)!r}, {len(self.results)} results: {len(self.failed)} failed, "
                f"{n_skip} skipped, {'passed' if self.passed else 'failed'})")

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> list[GateResult]:
        return [r for r in self.results if r.verdict == "fail"]

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rule": r.rule.index,
                    "backend": r.backend,
                    "check": r.rule.check,
                    "tags": list(r.rule.tags),
                    "figure": r.figure,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "p_value": r.p_value,
                    "n": r.n,
                    "verdict": r.verdict,
                    "detail": r.detail,
                }
                for r in self.results
            ]
        )

    def summary_line(self) -> str:
        n_fail = len(self.failed)
        n_skip = sum(r.verdict == "skip" for r in self.results)
        if n_fail:
            return f"gate failed: {n_fail} of {len(self.results)} rule(s) failed"
        held = f"gate passed: {len(self.results) - n_skip} rule(s) held"
        return held + (f", {n_skip} skipped" if n_skip else "")


def gate_thresholds(config: Any) -> Thresholds:
    """Per-case pass marks of a gates file (a path, or a loaded `GateConfig`): `GateConfig.pass_marks`."""
    return (config if isinstance(config, GateConfig) else load_gates(config)).pass_marks()


def _slice(run: Run, tags: Sequence[str]) -> np.ndarray:
    """The places of the cases a rule reads, in run order: the run's cases (every case its scores name
    when it has no cases.jsonl) carrying every tag of ``tags``."""
    cases = run.columns.cases
    known = cases.described or len(cases)
    if not tags:
        return np.arange(known)
    return np.flatnonzero(cases.slice_mask(tags)[:cases.described])


def _known_metric(name: str, registry_metrics: set[str]) -> bool:
    for spec in set(NAMES) | registry_metrics:
        if spec == name or resolve_metric(spec, name, 1):
            return True
    return False


def _registry() -> tuple[set[str], set[str]]:
    try:
        from ..plugins import get_backends

        backends = get_backends()
    except Exception:  # a broken plugin must not stop a gate over a finished run
        return set(), set()
    metrics = set()
    for b in backends.values():
        try:
            metrics |= {s.name for s in b.metrics()}
        except Exception:
            pass
    return set(backends), metrics


def _bind(rule: Rule, run: Run, scored_by: dict[str, set[str]], at: str) -> list[str]:
    """The backends this rule applies to in ``run``; raises `GateConfigError` for unknown names."""
    run_backends = set(run.manifest.backends) | set(scored_by)
    scope = KINDS[rule.kind].scope
    if scope is not None:  # a rule over the whole run, whatever scored it
        if rule.backends and not rule.backends_from_defaults:  # ([defaults]' backend is not for it)
            raise GateConfigError(f"{at}: the {scope} reads every backend of the run: remove 'backend'")
        return [scope]
    if rule.backends:
        named = " (set in [defaults])" if rule.backends_from_defaults else ""
        for b in rule.backends:
            if b not in run_backends:
                known, _ = _registry()
                if b in known:
                    raise GateConfigError(
                        f"{at}: backend {b!r}{named} is not in this run "
                        f"(it ran: {', '.join(sorted(run_backends))})"
                    )
                hint = difflib.get_close_matches(b, sorted(run_backends | known), n=1)
                raise GateConfigError(
                    f"{at}: unknown backend {b!r}{named}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + f"; this run has: {', '.join(sorted(run_backends))}"
                )
    if rule.metric is None:  # error_rate over every metric
        return list(rule.backends or sorted(run_backends))
    offered = {m for ms in scored_by.values() for m in ms}
    if rule.metric not in offered:
        _, reg_metrics = _registry()
        all_in_run = sorted(offered)
        if not _known_metric(rule.metric, reg_metrics):
            hint = difflib.get_close_matches(rule.metric, all_in_run + list(NAMES), n=1)
            raise GateConfigError(
                f"{at}: unknown metric {rule.metric!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; this run scored: {', '.join(all_in_run)}"
            )
        raise GateConfigError(
            f"{at}: metric {rule.metric!r} was not scored in this run (it scored: {', '.join(all_in_run)})"
        )
    if rule.backends:
        named = " (set in [defaults])" if rule.backends_from_defaults else ""
        missing = [b for b in rule.backends if rule.metric not in scored_by.get(b, set())]
        if missing:
            raise GateConfigError(
                f"{at}: backend {missing[0]!r}{named} did not score {rule.metric!r} in this run "
                f"(backends that did: "
                f"{', '.join(sorted(b for b, ms in scored_by.items() if rule.metric in ms))})"
            )
        return list(rule.backends)
    return sorted(b for b, ms in scored_by.items() if rule.metric in ms)


def run_gates(
    run: Run | str | Path,
    config: GateConfig | str | Path | dict,
    baseline: Run | str | Path | None = None,
    seed: Optional[int] = None,
    resamples: Optional[int] = None,
    permutations: Optional[int] = None,
    history: Optional[Sequence[Run | str | Path]] = None,
    progress: Optional[str] = None,
    diagnosis: Any = None,
) -> GateReport:
    """Evaluate every rule of ``config`` on ``run``.

    ``history``: earlier runs (run folders, or folders of them) for ``slope`` rules; those that
    started after ``run`` are left out, and so is ``run`` itself if a folder holds it. ``progress``: a
    label (``gate``) under which the rules checked, and the diagnosis a ``diagnosed`` rule reads, show
    their progress on stderr (`ragbridge.run.progress.Steps`). ``diagnosis``: one made already of
    ``run`` without human labels (a report's), which such a rule reads where it was made by the gates
    file's pass marks.

    Raises `IncompleteRunError` when the run (or the baseline) did not finish, and `GateConfigError`
    when the rules name a metric, backend or tag the run does not have, or need a baseline or a
    history that was not given.
    """
    if isinstance(config, dict):
        config = parse_gates(config)
    elif not isinstance(config, GateConfig):
        config = load_gates(config)
    run = open_run(run, "run", RegressionError)
    require_complete(run, "run", "then gate it; an unfinished run is not gated")
    base = None
    if baseline is not None:
        base = open_run(baseline, "baseline run", RegressionError)
        require_complete(base, "baseline run")
    series: list[Run] = []
    if history:
        here = run.path.resolve() if run.path is not None else None
        earlier = [h for h in expand_runs(history, RegressionError)
                   if (h.path is None or h.path.resolve() != here)
                   and started_at(h) <= started_at(run)]
        series = order_runs(earlier) + [run]
    seed = config.seed if seed is None else seed
    resamples = config.resamples if resamples is None else resamples
    permutations = config.permutations if permutations is None else permutations
    src = config.source

    scored_by: dict[str, set[str]] = {}
    for b, ms in run.manifest.metrics.items():
        scored_by.setdefault(b, set()).update(ms)
    cols = run.columns
    for b, m in cols.columns:
        scored_by.setdefault(b, set()).add(m)
    base_cols = base.columns if base is not None else None
    base_at = None
    if base_cols is not None:
        base_at = base_cols.cases.find(cols.cases.ids)
    all_tags = cols.cases.all_tags()

    warnings: list[str] = [f"history: {h.path} did not finish (status {h.manifest.status}); its means "
                           "are of what it scored" for h in series[:-1] if h.manifest.status != "complete"]
    warnings += [f"history: {w}" for w in version_steps(series, set(scored_by))]
    redefined = definition_changes(base, run) if base is not None else {}
    if base is not None:
        warnings += [f"baseline: {w}" for w in version_change_warnings(
            base, run, set(scored_by) & set(base.manifest.backends))]
    if base is not None:
        differs, changed, added, removed = dataset_changes(base, run)
        if differs:
            warnings.append(
                "baseline: " + dataset_change_message(changed, added, removed)
                + "; drops are measured on the cases scored in both runs"
            )

    # Validate every rule before evaluating any, so bad input never yields a partial verdict.
    bound: list[tuple[Rule, list[str]]] = []
    for rule in config.rules:
        at = where(src, rule.index)
        for t in rule.tags:
            if t not in all_tags:
                hint = difflib.get_close_matches(t, all_tags, n=1)
                raise GateConfigError(
                    f"{at}: no case in this run carries tag {t!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + f"; tags in this run: {', '.join(all_tags) or 'none'}"
                )
        needs = KINDS[rule.kind].needs
        if needs == "baseline" and base is None:
            raise GateConfigError(
                f"{at}: {rule.check!r} compares with a baseline: pass --baseline BASE_RUN")
        if needs == "history" and not series:
            raise GateConfigError(
                f"{at}: {rule.check!r} is a trend over runs: pass --history with the earlier runs "
                "(run folders, or a folder of them)")
        if rule.last and rule.kind != "slope":
            raise GateConfigError(f"{at}: 'last' is for slope rules ('METRIC slope >= -0.01')")
        backends = _bind(rule, run, scored_by, at)
        if needs == "baseline":
            for b in backends:
                if base_cols.column(b, rule.metric) is None \
                        and rule.metric not in base.manifest.metrics.get(b, []):
                    same = sorted(x for x in base.manifest.backends
                                  if x != b and x.split("==")[0] == b.split("==")[0])
                    raise GateConfigError(
                        f"{at}: the baseline run has no {b}:{rule.metric} scores to compare with"
                        + (f"; it scored {', '.join(same)}, the same library at another version: a drop "
                           "rule compares a backend with itself; to compare the versions, run ragbridge "
                           f"compare {base.path} --with {run.path}" if same else "")
                    )
                if (b, rule.metric) in redefined:  # a change between two rubrics is no regression test
                    raise GateConfigError(
                        f"{at}: " + definition_change_message(b, rule.metric, redefined[b, rule.metric]))
        bound.append((rule, backends))

    results = []
    given, diagnosis = diagnosis, None  # made once, by the first rule that reads it (or given)
    noise = noise_of(base, run) if base is not None else {}
    steps = Steps(progress, "rules") if progress is not None else Steps.quiet()
    with steps.start(sum(len(backends) for _, backends in bound)):
        for rule, backends in bound:
            ids = _slice(run, rule.tags)
            for backend in backends:
                ctx = GateContext(run, cols, base_cols, base_at, ids, series, noise,
                                  group_seed(seed, str(rule.index), backend), resamples, permutations, config,
                                  diagnosis, progress, given)
                kind = KINDS[rule.kind]
                m = kind.measure(rule, backend, ctx)
                diagnosis = ctx._diagnosis if diagnosis is None else diagnosis
                verdict, detail = decide(rule, m, _unmet(rule, run, cols.column(backend, rule.metric)))
                items = m.items if verdict != "pass" or kind.items_on_pass else []
                results.append(GateResult(rule, backend, verdict, m.figure, m.n, detail, m.ci[0], m.ci[1],
                                          m.p, items))
                steps.advance()
    return GateReport(run=run, results=results, baseline=base, warnings=warnings, config=config)




def _unmet(rule: Rule, run: Run, column: Any) -> list[str]:
    """The requirements of ``rule`` the run does not meet: ``min_repeats`` on a judged metric."""
    if rule.min_repeats <= 1 or column is None or not column.judged:
        return []
    problem = check_repeats(run, rule.min_repeats)
    return [problem] if problem else []
