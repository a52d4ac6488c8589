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
    check = "share(faithfulness >= 0.7) >= 0.9"   # share of scored cases at or above 0.7

    [[gate]]
    check = "error_rate <= 0.05"               # share of cases with an errored score (any metric)

    [[gate]]
    check = "faithfulness slope >= -0.01"      # least-squares slope per run of the mean, over
    last = 5                                   # the last 5 runs (the earlier ones from --history)

    [[gate]]
    check = "diagnosed(retrieval) <= 0.05"     # share of the cases a diagnosis puts in this layer
    tags = ["real"]                            # (ragbridge.analysis.diagnose), failing or not

The left-hand side is one of: ``METRIC`` or ``mean(METRIC)``; ``METRIC drop`` (needs ``--baseline``;
only ``<=`` or ``<``); ``METRIC slope`` (needs ``--history``); ``share(METRIC OP VALUE)``;
``error_rate`` or ``error_rate(METRIC)``; ``undefined_rate(METRIC)``; ``diagnosed(LAYER)`` (the
share of the rule's cases the diagnosis gives LAYER, one of ``retrieval``, ``generation``,
``knowledge_base``, ``reference_or_judge``, ``undetermined``; pass marks are the gates file's, else
each metric's default; the cases behind a miss are those cases, with the reason). OP is ``>=``,
``>``, ``<=`` or ``<``.

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
(default 9999).

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
"""

from __future__ import annotations

import difflib
import math
import operator
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ..metrics import NAMES, default_pass_mark, resolve_metric
from ..run import Run
from .diff import (
    RegressionError,
    dataset_change_message,
    dataset_changes,
    definition_change_message,
    definition_changes,
    noise_of,
    require_complete,
)
from .stats import (
    DEFAULT_PERMUTATIONS,
    DEFAULT_RESAMPLES,
    group_seed,
    mean_interval,
    paired_bootstrap_ci,
    paired_permutation_pvalue,
)
from .diagnose import LAYERS, diagnose
from .noise import check_repeats, noise_band
from .table import open_run
from .thresholds import Thresholds
from .trend import expand_runs, order_runs, slope_of, started_at

__all__ = ["GateConfigError", "Rule", "GateConfig", "GateResult", "GateReport", "load_gates", "parse_gates",
           "run_gates", "gate_thresholds"]

_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
#: the "backend" of a diagnosed rule's result: the diagnosis reads every backend
DIAGNOSIS = "diagnosis"
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_METRIC = r"[A-Za-z_][A-Za-z0-9_]*(?:@\d+)?"
_CHECK = re.compile(rf"^\s*(?P<lhs>.+?)\s*(?P<op>>=|<=|>|<)\s*(?P<value>{_NUM})\s*$")
_LHS = [
    ("drop", re.compile(rf"^(?P<metric>{_METRIC})\s+drop$")),
    ("slope", re.compile(rf"^(?P<metric>{_METRIC})\s+slope$")),
    ("mean", re.compile(rf"^mean\(\s*(?P<metric>{_METRIC})\s*\)$")),
    ("share", re.compile(rf"^share\(\s*(?P<metric>{_METRIC})\s*(?P<cop>>=|<=|>|<)\s*(?P<cut>{_NUM})\s*\)$")),
    ("error_rate", re.compile(rf"^error_rate(?:\(\s*(?P<metric>{_METRIC})\s*\))?$")),
    ("undefined_rate", re.compile(rf"^undefined_rate\(\s*(?P<metric>{_METRIC})\s*\)$")),
    ("diagnosed", re.compile(r"^diagnosed\(\s*(?P<layer>[a-z_]+)\s*\)$")),
    ("mean", re.compile(rf"^(?P<metric>{_METRIC})$")),
]
_GRAMMAR = (
    "write it as 'METRIC >= 0.85', 'METRIC drop <= 0.02', 'share(METRIC >= 0.7) >= 0.9', "
    "'METRIC slope >= -0.01', 'error_rate <= 0.05', 'error_rate(METRIC) <= 0.05', "
    "'undefined_rate(METRIC) <= 0.1' or 'diagnosed(retrieval) <= 0.05'"
)
_RULE_KEYS = {"check", "name", "backend", "tags", "tag", "min_n", "below_min_n", "significant", "alpha",
              "confidence", "min_repeats", "last"}
_DEFAULT_KEYS = (_RULE_KEYS - {"check", "name", "tag"}) | {"seed", "resamples", "permutations"}


class GateConfigError(RegressionError):
    """A gates file that cannot be used: unreadable, malformed, or naming what the run does not have."""


@dataclass
class Rule:
    """One parsed rule of a gates file."""

    index: int
    check: str
    kind: str  # mean | share | drop | slope | error_rate | undefined_rate | diagnosed
    metric: Optional[str]
    op: str
    threshold: float
    cut_op: Optional[str] = None
    cut: Optional[float] = None
    name: Optional[str] = None
    backends: Optional[list[str]] = None
    tags: list[str] = field(default_factory=list)
    min_n: int = 1
    below_min_n: str = "fail"
    significant: bool = False
    alpha: float = 0.05
    confidence: float = 0.95
    min_repeats: int = 1
    last: int = 0  # slope rules: the last N runs (0: every run)
    layer: Optional[str] = None  # diagnosed rules: the layer counted

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.check + (f" [{' & '.join(self.tags)}]" if self.tags else "")


@dataclass
class GateConfig:
    rules: list[Rule]
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES
    permutations: int = DEFAULT_PERMUTATIONS
    source: Optional[str] = None


def _where(source: Optional[str], index: Optional[int]) -> str:
    src = source or "gates"
    return f"{src}: gate #{index}" if index else src


def _parse_check(check: str, where: str) -> dict[str, Any]:
    m = _CHECK.match(check)
    if not m:
        raise GateConfigError(f"{where}: cannot read check {check!r}: {_GRAMMAR}")
    lhs = re.sub(r"\s+", " ", m.group("lhs").strip())
    for kind, pattern in _LHS:
        lm = pattern.match(lhs)
        if lm:
            break
    else:
        raise GateConfigError(f"{where}: cannot read {lhs!r} in check {check!r}: {_GRAMMAR}")
    out: dict[str, Any] = {
        "kind": kind,
        "metric": lm.groupdict().get("metric"),
        "op": m.group("op"),
        "threshold": float(m.group("value")),
    }
    if kind == "share":
        out["cut_op"], out["cut"] = lm.group("cop"), float(lm.group("cut"))
    if kind == "diagnosed":
        out["layer"] = lm.group("layer")
        if out["layer"] not in LAYERS:
            raise GateConfigError(f"{where}: {out['layer']!r} is not a layer of the diagnosis; "
                                  f"one of: {', '.join(LAYERS)}")
    if kind == "drop":
        if out["op"] not in ("<=", "<"):
            raise GateConfigError(
                f"{where}: a drop is bounded from above: write '{out['metric']} drop <= {m.group('value')}'"
            )
        if not -1 <= out["threshold"] <= 1:
            raise GateConfigError(
                f"{where}: the allowed drop must be between -1 and 1, got {out['threshold']}")
    elif kind == "slope":
        if not -1 <= out["threshold"] <= 1:
            raise GateConfigError(
                f"{where}: a slope per run is between -1 and 1, got {out['threshold']}")
    elif not 0 <= out["threshold"] <= 1:
        raise GateConfigError(
            f"{where}: threshold {out['threshold']} is outside 0..1 (scores, shares and rates are in 0..1)"
        )
    return out


def _check_value(key: str, value: Any, where: str) -> Any:
    def bad(expected: str) -> GateConfigError:
        return GateConfigError(f"{where}: {key} must be {expected}, got {value!r}")

    if key in ("check", "name"):
        if not isinstance(value, str) or not value.strip():
            raise bad("a non-empty string")
        return value.strip()
    if key == "backend":
        vals = [value] if isinstance(value, str) else value
        if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v for v in vals):
            raise bad("a backend name or a list of backend names")
        return list(vals)
    if key in ("tags", "tag"):
        vals = [value] if isinstance(value, str) else value
        if not isinstance(vals, list) or not all(isinstance(v, str) and v for v in vals):
            raise bad("a list of tag names")
        return list(vals)
    if key == "last":
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise bad("an integer of at least 2 (a slope needs two runs)")
        return value
    if key == "min_repeats":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad("a positive integer")
        return value
    if key in ("min_n", "seed", "resamples", "permutations"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad("a non-negative integer")
        if key in ("resamples", "permutations") and value < 100:
            raise bad("at least 100")
        return value
    if key == "below_min_n":
        if value not in ("fail", "skip"):
            raise bad("'fail' or 'skip'")
        return value
    if key == "significant":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key in ("alpha", "confidence"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise bad("a number between 0 and 1 (exclusive)")
        return float(value)
    raise AssertionError(key)  # pragma: no cover


def parse_gates(data: dict[str, Any], source: Optional[str] = None) -> GateConfig:
    """Build a `GateConfig` from the parsed TOML (a dict). Raises `GateConfigError` when malformed."""
    if not isinstance(data, dict):
        raise GateConfigError(f"{source or 'gates'}: expected a table of [defaults] and [[gate]] rules")
    unknown = sorted(set(data) - {"defaults", "gate"})
    if unknown:
        raise GateConfigError(
            f"{source or 'gates'}: unknown top-level key(s) {', '.join(map(repr, unknown))}; "
            "a gates file holds an optional [defaults] table and [[gate]] rules"
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise GateConfigError(f"{source or 'gates'}: [defaults] must be a table")
    bad = sorted(set(defaults) - _DEFAULT_KEYS)
    if bad:
        raise GateConfigError(
            f"{source or 'gates'}: unknown key(s) {', '.join(map(repr, bad))} in [defaults]; "
            f"known: {', '.join(sorted(_DEFAULT_KEYS))}"
        )
    defaults = {k: _check_value(k, v, f"{source or 'gates'}: [defaults]") for k, v in defaults.items()}
    rules_data = data.get("gate")
    if rules_data is None or rules_data == []:
        raise GateConfigError(
            f"{source or 'gates'}: no rules: add at least one [[gate]] table with a check, e.g. "
            "check = \"recall@5 >= 0.85\""
        )
    if not isinstance(rules_data, list) or not all(isinstance(r, dict) for r in rules_data):
        raise GateConfigError(f"{source or 'gates'}: rules must be [[gate]] tables (an array of tables)")
    rules = []
    for i, raw in enumerate(rules_data, start=1):
        where = _where(source, i)
        bad = sorted(set(raw) - _RULE_KEYS)
        if bad:
            hint = difflib.get_close_matches(bad[0], sorted(_RULE_KEYS), n=1)
            raise GateConfigError(
                f"{where}: unknown key(s) {', '.join(map(repr, bad))}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; known: {', '.join(sorted(_RULE_KEYS))}"
            )
        if "check" not in raw:
            raise GateConfigError(f"{where}: missing 'check' ({_GRAMMAR})")
        if "tag" in raw and "tags" in raw:
            raise GateConfigError(f"{where}: give either 'tag' or 'tags', not both")
        merged = {k: v for k, v in defaults.items() if k not in ("seed", "resamples", "permutations")}
        merged.update({k: _check_value(k, v, where) for k, v in raw.items()})
        if "tag" in merged:
            merged["tags"] = merged.pop("tag")
        parsed = _parse_check(merged.pop("check"), where)
        backends = merged.pop("backend", None)
        rules.append(Rule(index=i, check=raw["check"].strip(), backends=backends, **parsed, **merged))
    return GateConfig(
        rules=rules,
        seed=defaults.get("seed", 0),
        resamples=defaults.get("resamples", DEFAULT_RESAMPLES),
        permutations=defaults.get("permutations", DEFAULT_PERMUTATIONS),
        source=source,
    )


def load_gates(path: str | Path) -> GateConfig:
    """Read a gates TOML file. Raises `GateConfigError` (file, line and what is wrong) for bad input."""
    path = Path(path)
    if not path.is_file():
        raise GateConfigError(f"gates file {path} not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise GateConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise GateConfigError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    return parse_gates(data, source=str(path))


def gate_thresholds(config: Any) -> Thresholds:
    """Per-case pass marks read from a gates file (a path or a `ragbridge.analysis.gate.GateConfig`).

    A ``share(METRIC >= CUT)`` rule gives ``CUT``; a ``METRIC >= VALUE`` (mean) rule gives
    ``VALUE``: a case below the bar the mean must clear is one pulling it down. A rule with a
    ``backend`` sets the mark for those backends only. When several rules name a metric, a rule over
    all cases beats one limited to ``tags``, a share rule beats a mean rule, then the first in the
    file wins. ``drop``, ``error_rate`` and ``undefined_rate`` rules set no mark."""
    if not isinstance(config, GateConfig):
        config = load_gates(config)
    marks = []
    for rule in config.rules:
        if rule.kind == "share":
            marks.append(((bool(rule.tags), 0, rule.index), rule, rule.cut))
        elif rule.kind == "mean" and rule.op in (">=", ">"):
            marks.append(((bool(rule.tags), 1, rule.index), rule, rule.threshold))
    out = Thresholds()
    for _, rule, value in sorted(marks, key=lambda m: m[0]):
        for b in rule.backends or [None]:
            if b is None:
                out.by_metric.setdefault(rule.metric, value)
            else:
                out.by_pair.setdefault((b, rule.metric), value)
    return out


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


def _slice(run: Run, tags: Sequence[str]) -> list[str]:
    ids = [c.id for c in run.cases] or list(dict.fromkeys(s.case_id for s in run.scores))
    if not tags:
        return ids
    need = set(tags)
    return [c.id for c in run.cases if need <= set(c.tags)]


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


def _bind(rule: Rule, run: Run, scored_by: dict[str, set[str]], where: str) -> list[str]:
    """The backends this rule applies to in ``run``; raises `GateConfigError` for unknown names."""
    run_backends = set(run.manifest.backends) | set(scored_by)
    if rule.backends:
        for b in rule.backends:
            if b not in run_backends:
                known, _ = _registry()
                if b in known:
                    raise GateConfigError(
                        f"{where}: backend {b!r} is not in this run "
                        f"(it ran: {', '.join(sorted(run_backends))})"
                    )
                hint = difflib.get_close_matches(b, sorted(run_backends | known), n=1)
                raise GateConfigError(
                    f"{where}: unknown backend {b!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + f"; this run has: {', '.join(sorted(run_backends))}"
                )
    if rule.kind == "diagnosed":
        if rule.backends:
            raise GateConfigError(f"{where}: the diagnosis reads every backend of the run: remove 'backend'")
        return [DIAGNOSIS]
    if rule.metric is None:  # error_rate over every metric
        return list(rule.backends or sorted(run_backends))
    offered = {m for ms in scored_by.values() for m in ms}
    if rule.metric not in offered:
        _, reg_metrics = _registry()
        all_in_run = sorted(offered)
        if not _known_metric(rule.metric, reg_metrics):
            hint = difflib.get_close_matches(rule.metric, all_in_run + list(NAMES), n=1)
            raise GateConfigError(
                f"{where}: unknown metric {rule.metric!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; this run scored: {', '.join(all_in_run)}"
            )
        raise GateConfigError(
            f"{where}: metric {rule.metric!r} was not scored in this run (it scored: {', '.join(all_in_run)})"
        )
    if rule.backends:
        missing = [b for b in rule.backends if rule.metric not in scored_by.get(b, set())]
        if missing:
            raise GateConfigError(
                f"{where}: backend {missing[0]!r} did not score {rule.metric!r} in this run "
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
) -> GateReport:
    """Evaluate every rule of ``config`` on ``run``.

    ``history``: earlier runs (run folders, or folders of them) for ``slope`` rules; those that
    started after ``run`` are left out, and so is ``run`` itself if a folder holds it.

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
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for s in run.scores:
        scored_by.setdefault(s.backend, set()).add(s.metric)
        by_key.setdefault((s.backend, s.metric), {})[s.case_id] = s
    base_key: dict[tuple[str, str], dict[str, Any]] = {}
    if base is not None:
        for s in base.scores:
            base_key.setdefault((s.backend, s.metric), {})[s.case_id] = s
    all_tags = sorted({t for c in run.cases for t in c.tags})

    warnings: list[str] = [f"history: {h.path} did not finish (status {h.manifest.status}); its means "
                           "are of what it scored" for h in series[:-1] if h.manifest.status != "complete"]
    redefined = definition_changes(base, run) if base is not None else {}
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
        where = _where(src, rule.index)
        for t in rule.tags:
            if t not in all_tags:
                hint = difflib.get_close_matches(t, all_tags, n=1)
                raise GateConfigError(
                    f"{where}: no case in this run carries tag {t!r}"
                    + (f" (did you mean {hint[0]!r}?)" if hint else "")
                    + f"; tags in this run: {', '.join(all_tags) or 'none'}"
                )
        if rule.kind == "drop" and base is None:
            raise GateConfigError(
                f"{where}: {rule.check!r} compares with a baseline: pass --baseline BASE_RUN")
        if rule.kind == "slope" and not series:
            raise GateConfigError(
                f"{where}: {rule.check!r} is a trend over runs: pass --history with the earlier runs "
                "(run folders, or a folder of them)")
        if rule.last and rule.kind != "slope":
            raise GateConfigError(f"{where}: 'last' is for slope rules ('METRIC slope >= -0.01')")
        backends = _bind(rule, run, scored_by, where)
        if rule.kind == "drop":
            for b in backends:
                if (b, rule.metric) not in base_key and rule.metric not in base.manifest.metrics.get(b, []):
                    raise GateConfigError(
                        f"{where}: the baseline run has no {b}:{rule.metric} scores to compare with"
                    )
                if (b, rule.metric) in redefined:  # a drop between two rubrics is no regression test
                    raise GateConfigError(
                        f"{where}: " + definition_change_message(b, rule.metric, redefined[b, rule.metric]))
        bound.append((rule, backends))

    diagnosis = None
    if any(rule.kind == "diagnosed" for rule, _ in bound):
        diagnosis = diagnose(run, _diagnosis_marks(config, run))
    results = []
    noise = noise_of(base, run) if base is not None else {}
    for rule, backends in bound:
        ids = _slice(run, rule.tags)
        for backend in backends:
            gseed = group_seed(seed, str(rule.index), backend)
            if rule.kind == "slope":
                results.append(_evaluate_slope(rule, backend, series))
                continue
            if rule.kind == "diagnosed":
                results.append(_evaluate_diagnosed(rule, ids, diagnosis))
                continue
            result = _evaluate(rule, backend, ids, run, by_key, base_key, gseed, resamples, permutations,
                               noise.get((backend, rule.metric)))
            results.append(_require_repeats(result, rule, run, by_key.get((backend, rule.metric), {})))
    return GateReport(run=run, results=results, baseline=base, warnings=warnings, config=config)


def _diagnosis_marks(config: GateConfig, run: Run) -> Thresholds:
    """The pass marks a diagnosed rule diagnoses by: the gates file's (`gate_thresholds`), else each
    metric's default, as the report with this gates file uses."""
    marks = gate_thresholds(config)
    k = (run.manifest.options or {}).get("k")
    for m in {s.metric for s in run.scores}:
        marks.by_metric.setdefault(m, default_pass_mark(m, k))
    return marks


def _evaluate_diagnosed(rule: Rule, ids: list[str], diagnosis: Any) -> GateResult:
    """A diagnosed rule: the share of the rule's cases (all of them, failing or not) given the layer."""
    layer_of = {c.case_id: c for c in diagnosis.cases}
    behind = [layer_of[c] for c in ids if c in layer_of and layer_of[c].layer == rule.layer]
    n = len(ids)
    figure = len(behind) / n if n else math.nan
    items = [{"case_id": c.case_id, "layer": c.layer, "reason": c.reason} for c in behind]
    if n == 0 or n < rule.min_n:
        detail = "no case to measure" if n == 0 else f"n={n} is below min_n={rule.min_n}"
        return GateResult(rule, DIAGNOSIS, rule.below_min_n, figure, n, detail, items=items)
    holds = bool(_OPS[rule.op](figure, rule.threshold))
    detail = (f"share of cases diagnosed {rule.layer} {figure:.3f} {rule.op} {rule.threshold:g}: "
              + ("holds" if holds else "does not hold"))
    return GateResult(rule, DIAGNOSIS, "pass" if holds else "fail", figure, n, detail,
                      items=items if not holds else [])


def _require_repeats(result: GateResult, rule: Rule, run: Run, scores: dict[str, Any]) -> GateResult:
    """A rule with ``min_repeats`` fails on a judged metric taken fewer times (nothing else changes)."""
    if rule.min_repeats <= 1 or not any(s.judge_calls for s in scores.values()):
        return result
    problem = check_repeats(run, rule.min_repeats)
    if problem is None:
        return result
    result.verdict = "fail"
    result.detail = f"{result.detail}; {problem}"
    return result


def _evaluate_slope(rule: Rule, backend: str, series: list[Run]) -> GateResult:
    """A slope rule: the least-squares slope per run over the last ``rule.last`` runs of ``series``."""
    fit = slope_of(series, backend, rule.metric, rule.tags, rule.last, rule.min_n, rule.confidence)
    n, figure = fit["n_runs"], fit["slope"]
    items = [{"case_id": Path(m["run"]).name, "value": m["mean"]} for m in fit["means"]]
    window = f"the last {fit['runs_in_window']} runs" if rule.last else f"{fit['runs_in_window']} runs"
    left_out = fit["runs_in_window"] - n
    extra = (f"; {left_out} run(s) left out (fewer than {max(1, rule.min_n)} scored case(s))"
             if left_out else "")
    if n < 2:
        return GateResult(rule, backend, rule.below_min_n, figure, n,
                          f"a slope needs 2 runs with scores, {window} hold {n}{extra}", items=items)
    holds = bool(_OPS[rule.op](figure, rule.threshold))
    detail = (f"slope per run {figure:+.4f} over {window} {rule.op} {rule.threshold:g}: "
              + ("holds" if holds else "does not hold"))
    verdict = "pass" if holds else "fail"
    lo, hi = fit["low"], fit["high"]
    if not holds and rule.significant:
        if math.isnan(lo):
            detail += "; no interval with 2 runs, fails"
        else:
            sig = not _OPS[rule.op](hi if rule.op in (">=", ">") else lo, rule.threshold)
            conf = f"{rule.confidence:.0%} CI [{lo:+.4f}, {hi:+.4f}]"
            detail += (f"; significant ({conf} misses it)" if sig
                       else f"; not significant ({conf} reaches it), passes")
            verdict = "fail" if sig else "pass"
    items = items[::-1] if not holds else []  # the latest run first
    return GateResult(rule, backend, verdict, figure, n, detail + extra, lo, hi, math.nan, items)


def _evaluate(
    rule: Rule, backend: str, ids: list[str], run: Run, by_key, base_key, seed: int, resamples: int,
    permutations: int, noise: Optional[tuple] = None,
) -> GateResult:
    op = _OPS[rule.op]
    ci = (math.nan, math.nan)
    p = math.nan
    items: list[dict[str, Any]] = []
    extra = ""
    if rule.kind in ("mean", "share"):
        scores = by_key.get((backend, rule.metric), {})
        here = [scores[c] for c in ids if c in scores]
        scored = [s for s in here if s.status == "scored"]
        vals = np.array([s.value for s in scored], dtype=float)
        if rule.kind == "share":
            vals = _OPS[rule.cut_op](vals, rule.cut).astype(float)
        n = len(vals)
        figure = float(vals.mean()) if n else math.nan
        if n:
            ci = mean_interval(vals, rule.confidence, resamples, seed)
        n_und = sum(s.status == "undefined" for s in here)
        n_err = sum(s.status == "error" for s in here)
        if n_und or n_err:
            extra = f"; not counted: {n_und} undefined, {n_err} errored"
        items = sorted(
            ({"case_id": s.case_id, "value": s.value, "reason": s.reason} for s in scored),
            key=lambda r: (r["value"], r["case_id"]),
        )
        # the cases behind a miss: those on the wrong side of the per-case cut or the threshold
        cut_op, cut = (rule.cut_op, rule.cut) if rule.kind == "share" else (rule.op, rule.threshold)
        items = [r for r in items if not _OPS[cut_op](r["value"], cut)]
    elif rule.kind in ("error_rate", "undefined_rate"):
        want = "error" if rule.kind == "error_rate" else "undefined"
        keys = [(backend, rule.metric)] if rule.metric else [k for k in by_key if k[0] == backend]
        per_case: dict[str, list] = {}
        for key in keys:
            for cid, s in by_key.get(key, {}).items():
                per_case.setdefault(cid, []).append(s)
        cases = [c for c in ids if c in per_case]
        bad = [(c, [s for s in per_case[c] if s.status == want]) for c in cases]
        bad = [(c, ss) for c, ss in bad if ss]
        n = len(cases)
        figure = len(bad) / n if n else math.nan
        items = [
            {"case_id": c, "metrics": ", ".join(sorted(s.metric for s in ss)),
             "reason": ss[0].error or ss[0].reason}
            for c, ss in bad
        ]
    else:  # drop
        new_s = by_key.get((backend, rule.metric), {})
        old_s = base_key.get((backend, rule.metric), {})
        pairs = [
            (c, old_s[c].value, new_s[c].value)
            for c in ids
            if c in new_s and c in old_s and new_s[c].status == "scored" and old_s[c].status == "scored"
        ]
        n = len(pairs)
        b = np.array([x[1] for x in pairs], dtype=float)
        v = np.array([x[2] for x in pairs], dtype=float)
        figure = float((b - v).mean()) if n else math.nan
        if n:
            lo, hi = paired_bootstrap_ci(v, b, rule.confidence, resamples, seed)  # CI of base - new
            ci = (lo, hi)
            # H0: the drop is at most the allowance; H1: new < base - allowance.
            p = paired_permutation_pvalue(b, v, "less", rule.threshold, permutations, seed)
        became = sum(
            1 for c in ids
            if c in new_s and c in old_s and old_s[c].status == "scored" and new_s[c].status != "scored"
        )
        if became:
            extra = f"; {became} case(s) scored in the baseline are not scored now (see error_rate)"
        if noise is not None and n:
            band = noise_band(noise[0], noise[1], noise[2], noise[3], n)
            if band is not None:
                extra += (f"; within judge noise (band {band:.3f})" if abs(figure) < band
                          else f"; beyond judge noise (band {band:.3f})")
        items = sorted(
            ({"case_id": c, "base": x, "new": y, "delta": y - x} for c, x, y in pairs if y < x),
            key=lambda r: (r["delta"], r["case_id"]),
        )

    what = {"mean": "mean", "share": "share", "error_rate": "share of cases with an error",
            "undefined_rate": "share of cases undefined", "drop": "drop (baseline - run)"}[rule.kind]
    if n == 0 or n < rule.min_n:
        verdict = rule.below_min_n
        detail = ("no case to measure" if n == 0 else f"n={n} is below min_n={rule.min_n}") + extra
        return GateResult(rule, backend, verdict, figure, n, detail, ci[0], ci[1], p, items)
    holds = bool(op(figure, rule.threshold))
    detail = f"{what} {figure:.3f} {rule.op} {rule.threshold:g}: " + ("holds" if holds else "does not hold")
    verdict = "pass" if holds else "fail"
    if not holds and rule.significant:
        if rule.kind == "drop":
            sig = p < rule.alpha
            detail += (f"; significant (p={p:.3g} < {rule.alpha:g})" if sig
                       else f"; not significant (p={p:.3g} >= {rule.alpha:g}), passes")
        elif rule.kind in ("mean", "share") and not math.isnan(ci[0]):
            if rule.op in (">=", ">"):
                sig = not op(ci[1], rule.threshold)
            else:
                sig = not op(ci[0], rule.threshold)
            conf = f"{rule.confidence:.0%} CI [{ci[0]:.3f}, {ci[1]:.3f}]"
            detail += (f"; significant ({conf} misses it)" if sig
                       else f"; not significant ({conf} reaches it), passes")
        else:
            sig = True
        verdict = "fail" if sig else "pass"
    return GateResult(rule, backend, verdict, figure, n, detail + extra, ci[0], ci[1], p, items)
