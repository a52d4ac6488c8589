"""The kinds of gate rule: what each measures. A kind is one `RuleKind` in `KINDS` (`register`): the
left-hand side it reads, what its figure is called, what it needs (a baseline, a history) and its
``measure``, which returns a `Measurement` (the figure, its n, interval, p-value, the items behind a
miss and notes). Whether a rule holds is not a kind's business: `ragbridge.analysis.gate.verdict`
decides it, the same way for every kind.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from ...run import Run
from ...verdicts import COMPARE, verdict
from ..noise import noise_band, within_judge_noise
from ..stats import mean_interval, paired_bootstrap_ci, paired_permutation_pvalue
from ..trend import slope_of

__all__ = ["RuleKind", "Measurement", "GateContext", "KINDS", "register", "grammar"]

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_METRIC = r"[A-Za-z_][A-Za-z0-9_]*(?:@\d+)?"


@dataclass
class Measurement:
    """What a rule measured on one backend: ``figure`` over ``n`` units (cases, or runs for a slope),
    its interval and p-value where the kind has them, the ``items`` behind a miss (worst first),
    ``notes`` for the detail, and ``what`` (the figure's name, e.g. ``mean``)."""

    figure: float
    n: int
    what: str
    ci: tuple[float, float] = (math.nan, math.nan)
    p: float = math.nan
    items: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    digits: str = ".3f"
    too_few: Optional[str] = None  # why n is too small to decide, when the kind says so itself


@dataclass
class GateContext:
    """What a rule is measured on: the run, its scores by (backend, metric) -> case, the baseline's,
    the case ids of the rule's slice, the ordered history (slope rules), the judge noise per
    (backend, metric) of baseline and run, and the statistics settings."""

    run: Run
    by_key: dict[tuple[str, str], dict[str, Any]]
    base_key: dict[tuple[str, str], dict[str, Any]]
    ids: list[str]
    series: list[Run]
    noise: dict[tuple[str, str], tuple]
    seed: int
    resamples: int
    permutations: int
    config: Any = None
    _diagnosis: Any = None

    def diagnosis(self) -> Any:
        """The run's diagnosis (`ragbridge.analysis.diagnose`), made once, by the run's pass marks with
        the gates file's (`ragbridge.analysis.thresholds.pass_marks`), as the report with it makes it."""
        if self._diagnosis is None:
            from ..diagnose import diagnose
            from ..thresholds import pass_marks

            self._diagnosis = diagnose(self.run, pass_marks(self.run, gates=self.config))
        return self._diagnosis


@dataclass(frozen=True)
class RuleKind:
    """One kind of rule. ``pattern`` reads the left-hand side of a check (groups ``metric``, and
    ``cop`` and ``cut`` for a per-case cut); ``syntax`` shows it in messages; ``needs`` is
    ``"baseline"`` or ``"history"`` when the rule needs that input; ``bounds`` the allowed range of
    the right-hand side; ``ops`` its allowed comparisons; ``significance`` ``"ci"`` (the interval
    must miss the bound) or ``"p"`` (a one-sided p-value below alpha), or None (a miss is a miss).
    ``scope``: for a rule over the whole run rather than one backend, the name its one result
    stands under instead of a backend's (``diagnosis``);
    ``items_on_pass``: whether a rule that holds keeps the items behind it; ``check_args``: what is
    wrong with the groups of the left-hand side (a layer's name), or None."""

    name: str
    pattern: re.Pattern
    syntax: str
    measure: Callable[[Any, str, GateContext], Measurement]
    needs: Optional[str] = None
    bounds: tuple[float, float] = (0.0, 1.0)
    ops: tuple[str, ...] = (">=", ">", "<=", "<")
    significance: Optional[str] = None
    scope: Optional[str] = None
    items_on_pass: bool = True
    check_args: Optional[Callable[[dict], Optional[str]]] = None

    def check_bound(self, op: str, threshold: float, metric: Optional[str], raw: str) -> Optional[str]:
        """What is wrong with a right-hand side ``op threshold``, or None."""
        if op not in self.ops:
            return (f"a {self.name} is bounded from {'above' if self.ops[0][0] == '<' else 'below'}: "
                    f"write '{metric or 'METRIC'} {self.name} {self.ops[0]} {raw}'")
        lo, hi = self.bounds
        if lo <= threshold <= hi:
            return None
        if (lo, hi) == (0.0, 1.0):
            return f"threshold {threshold} is outside 0..1 (scores, shares and rates are in 0..1)"
        return f"the bound of a {self.name} rule must be between {lo:g} and {hi:g}, got {threshold}"


#: every rule kind, in the order a check's left-hand side is tried
KINDS: dict[str, RuleKind] = {}


def register(kind: RuleKind) -> RuleKind:
    """Add a rule kind (before the plain ``METRIC`` mean, which matches last)."""
    plain = KINDS.pop("mean", None)
    KINDS[kind.name] = kind
    if plain is not None and kind.name != "mean":
        KINDS["mean"] = plain
    return kind


def grammar() -> str:
    """How to write a check, for error messages."""
    return "write it as " + ", ".join(f"'{k.syntax}'" for k in KINDS.values())


# --------------------------------------------------------------------------------------------
# The kinds


def _scores(rule, backend: str, ctx: GateContext) -> list:
    got = ctx.by_key.get((backend, rule.metric), {})
    return [got[c] for c in ctx.ids if c in got]


def _not_counted(here: list) -> list[str]:
    n_und = sum(s.status == "undefined" for s in here)
    n_err = sum(s.status == "error" for s in here)
    return [f"not counted: {n_und} undefined, {n_err} errored"] if n_und or n_err else []


def _behind(scored: list, threshold: float, op: str) -> list[dict[str, Any]]:
    """The cases on the wrong side of a per-case bar (by `ragbridge.verdicts.verdict`), lowest first."""
    rows = [{"case_id": s.case_id, "value": s.value, "reason": s.reason}
            for s in scored if verdict(s, threshold, op) is False]
    return sorted(rows, key=lambda r: (r["value"], r["case_id"]))


def _mean(rule, backend: str, ctx: GateContext) -> Measurement:
    here = _scores(rule, backend, ctx)
    scored = [s for s in here if s.status == "scored"]
    vals = np.array([s.value for s in scored], dtype=float)
    n = len(vals)
    return Measurement(
        math.fsum(vals) / n if n else math.nan, n, "mean",
        ci=mean_interval(vals, rule.confidence, ctx.resamples, ctx.seed) if n else (math.nan, math.nan),
        items=_behind(scored, rule.threshold, rule.op), notes=_not_counted(here))


def _share(rule, backend: str, ctx: GateContext) -> Measurement:
    here = _scores(rule, backend, ctx)
    scored = [s for s in here if s.status == "scored"]
    vals = np.array([verdict(s, rule.cut, rule.cut_op) for s in scored], dtype=float)
    n = len(vals)
    return Measurement(
        math.fsum(vals) / n if n else math.nan, n, "share",
        ci=mean_interval(vals, rule.confidence, ctx.resamples, ctx.seed) if n else (math.nan, math.nan),
        items=_behind(scored, rule.cut, rule.cut_op), notes=_not_counted(here))


def _rate(want: str) -> Callable[[Any, str, GateContext], Measurement]:
    def measure(rule, backend: str, ctx: GateContext) -> Measurement:
        keys = [(backend, rule.metric)] if rule.metric else [k for k in ctx.by_key if k[0] == backend]
        per_case: dict[str, list] = {}
        for key in keys:
            for cid, s in ctx.by_key.get(key, {}).items():
                per_case.setdefault(cid, []).append(s)
        cases = [c for c in ctx.ids if c in per_case]
        bad = [(c, [s for s in per_case[c] if s.status == want]) for c in cases]
        bad = [(c, ss) for c, ss in bad if ss]
        n = len(cases)
        items = [{"case_id": c, "metrics": ", ".join(sorted(s.metric for s in ss)),
                  "reason": ss[0].error or ss[0].reason} for c, ss in bad]
        what = "share of cases with an error" if want == "error" else "share of cases undefined"
        return Measurement(len(bad) / n if n else math.nan, n, what, items=items)
    return measure


def _drop(rule, backend: str, ctx: GateContext) -> Measurement:
    new_s = ctx.by_key.get((backend, rule.metric), {})
    old_s = ctx.base_key.get((backend, rule.metric), {})
    pairs = [(c, old_s[c].value, new_s[c].value) for c in ctx.ids
             if c in new_s and c in old_s and new_s[c].status == "scored" and old_s[c].status == "scored"]
    n = len(pairs)
    b = np.array([x[1] for x in pairs], dtype=float)
    v = np.array([x[2] for x in pairs], dtype=float)
    m = Measurement(math.fsum(b - v) / n if n else math.nan, n, "drop (baseline - run)")
    if n:
        m.ci = paired_bootstrap_ci(v, b, rule.confidence, ctx.resamples, ctx.seed)  # CI of base - new
        # H0: the drop is at most the allowance; H1: new < base - allowance.
        m.p = paired_permutation_pvalue(b, v, "less", rule.threshold, ctx.permutations, ctx.seed)
    became = sum(1 for c in ctx.ids if c in new_s and c in old_s and old_s[c].status == "scored"
                 and new_s[c].status != "scored")
    if became:
        m.notes.append(f"{became} case(s) scored in the baseline are not scored now (see error_rate)")
    noise = ctx.noise.get((backend, rule.metric))
    if noise is not None and n:
        band = noise_band(noise[0], noise[1], noise[2], noise[3], n)
        within = within_judge_noise(m.figure, band)
        if within is not None:
            m.notes.append(f"{'within' if within else 'beyond'} judge noise (band {band:.3f})")
    m.items = sorted(({"case_id": c, "base": x, "new": y, "delta": y - x} for c, x, y in pairs if y < x),
                     key=lambda r: (r["delta"], r["case_id"]))
    return m


def _slope(rule, backend: str, ctx: GateContext) -> Measurement:
    fit = slope_of(ctx.series, backend, rule.metric, rule.tags, rule.last, rule.min_n, rule.confidence)
    n, window = fit["n_runs"], fit["runs_in_window"]
    span = f"the last {window} runs" if rule.last else f"{window} runs"
    m = Measurement(fit["slope"], n, f"slope per run over {span}", ci=(fit["low"], fit["high"]),
                    digits="+.4f")
    if window - n:
        m.notes.append(f"{window - n} run(s) left out (fewer than {max(1, rule.min_n)} scored case(s))")
    if n < 2:
        m.too_few = f"a slope needs 2 runs with scores, {span} hold {n}"
    # the runs behind a miss, the latest first
    m.items = [{"case_id": Path(x["run"]).name, "value": x["mean"]} for x in fit["means"]][::-1]
    if n >= 2 and COMPARE[rule.op](m.figure, rule.threshold):
        m.items = []
    return m


def _diagnosed(rule, backend: str, ctx: GateContext) -> Measurement:
    """The share of the rule's cases (all of them, failing or not) the diagnosis gives the layer."""
    layer_of = {c.case_id: c for c in ctx.diagnosis().cases}
    behind = [layer_of[c] for c in ctx.ids if c in layer_of and layer_of[c].layer == rule.layer]
    n = len(ctx.ids)
    return Measurement(len(behind) / n if n else math.nan, n, f"share of cases diagnosed {rule.layer}",
                       items=[{"case_id": c.case_id, "layer": c.layer, "reason": c.reason} for c in behind])


def _a_layer(groups: dict) -> Optional[str]:
    from ..diagnose import LAYERS

    layer = groups.get("layer")
    if layer in LAYERS:
        return None
    return f"{layer!r} is not a layer of the diagnosis; one of: {', '.join(LAYERS)}"


for _kind in (
    RuleKind("drop", re.compile(rf"^(?P<metric>{_METRIC})\s+drop$"), "METRIC drop <= 0.02", _drop,
             needs="baseline", bounds=(-1.0, 1.0), ops=("<=", "<"), significance="p"),
    RuleKind("slope", re.compile(rf"^(?P<metric>{_METRIC})\s+slope$"), "METRIC slope >= -0.01", _slope,
             needs="history", bounds=(-1.0, 1.0), significance="ci", items_on_pass=False),
    RuleKind("share", re.compile(
        rf"^share\(\s*(?P<metric>{_METRIC})\s*(?P<cop>>=|<=|>|<)\s*(?P<cut>{_NUM})\s*\)$"),
        "share(METRIC >= 0.7) >= 0.9", _share, significance="ci"),
    RuleKind("error_rate", re.compile(rf"^error_rate(?:\(\s*(?P<metric>{_METRIC})\s*\))?$"),
             "error_rate(METRIC) <= 0.05", _rate("error")),
    RuleKind("undefined_rate", re.compile(rf"^undefined_rate\(\s*(?P<metric>{_METRIC})\s*\)$"),
             "undefined_rate(METRIC) <= 0.1", _rate("undefined")),
    RuleKind("diagnosed", re.compile(r"^diagnosed\(\s*(?P<layer>[a-z_]+)\s*\)$"),
             "diagnosed(retrieval) <= 0.05", _diagnosed, scope="diagnosis", items_on_pass=False,
             check_args=_a_layer),
    RuleKind("mean", re.compile(rf"^(?P<call>mean\(\s*)?(?P<metric>{_METRIC})(?(call)\s*\))$"),
             "METRIC >= 0.85", _mean, significance="ci"),
):
    register(_kind)
