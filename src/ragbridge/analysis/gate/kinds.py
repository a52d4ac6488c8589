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
from ...run.columns import ERROR, SCORED, UNDEFINED
from ...verdicts import COMPARE
from ..noise import noise_band, within_judge_noise
from ..rows import Rows
from ..stats import EPS, mean_interval, paired_bootstrap_ci, paired_permutation_pvalue
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
    """What a rule is measured on: the run's columns (`ragbridge.run.columns`), the baseline's (with
    ``base_at``: each of the run's cases' place among the baseline's, -1 where it has none), the
    cases of the rule's slice (their places, in run order), the ordered history (slope rules), the
    judge noise per (backend, metric) of baseline and run, and the statistics settings."""

    run: Run
    cols: Any
    base_cols: Any
    base_at: Optional[np.ndarray]
    ids: np.ndarray
    series: list[Run]
    noise: dict[tuple[str, str], tuple]
    seed: int
    resamples: int
    permutations: int
    config: Any = None
    _diagnosis: Any = None
    progress: Optional[str] = None  # the label of the diagnosis's progress (`run_gates`)
    given: Any = None  # a diagnosis made already (a report's), used where it is the one a rule needs

    def diagnosis(self) -> Any:
        """The run's diagnosis (`ragbridge.analysis.diagnose`), made once, by the run's pass marks with
        the gates file's (`ragbridge.analysis.thresholds.pass_marks`), as the report with it makes it:
        every failing case placed in its layer, and described only when a rule lists it; or the one
        ``given`` (a report's), where it was made by the same pass marks."""
        if self._diagnosis is None:
            from ..diagnose import diagnose, made_by
            from ..thresholds import pass_marks
            from ...run.progress import Steps

            marks = pass_marks(self.run, gates=self.config)
            if self.given is not None and made_by(self.given, self.run, marks):
                self._diagnosis = self.given
            else:
                steps = Steps(self.progress, "failing cases") if self.progress is not None else None
                self._diagnosis = diagnose(self.run, marks, listed=0, progress=steps)
        return self._diagnosis

    def case_id(self, i: int) -> str:
        return self.cols.cases.ids[i]


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


def _here(col: Any, ctx: GateContext) -> np.ndarray:
    """The cases of the rule's slice that ``col`` has a score for, in run order."""
    return ctx.ids[col.present[ctx.ids]]


def _not_counted(col: Any, here: np.ndarray) -> list[str]:
    st = col.status[here]
    n_und, n_err = int((st == UNDEFINED).sum()), int((st == ERROR).sum())
    return [f"not counted: {n_und} undefined, {n_err} errored"] if n_und or n_err else []


def _behind(col: Any, scored: np.ndarray, threshold: float, op: str, ctx: GateContext) -> Rows:
    """The cases on the wrong side of a per-case bar (by `ragbridge.verdicts.verdict`), lowest first:
    each with its value and reason, read as the rows are."""
    below = scored[~col.verdicts(threshold, op)[scored]]
    below = below[np.lexsort((ctx.cols.cases.id_rank()[below], col.value[below]))]

    def make(start: int, stop: int) -> list[dict[str, Any]]:
        part = below[start:stop]
        return [{"case_id": ctx.case_id(i), "value": float(col.value[i]), "reason": s.reason}
                for i, s in zip(part.tolist(), col.scores(part))]
    return Rows(len(below), make)


def _mean(rule, backend: str, ctx: GateContext) -> Measurement:
    col = ctx.cols.column(backend, rule.metric)
    here = _here(col, ctx)
    scored = here[col.status[here] == SCORED]
    vals = col.value[scored]
    n = len(vals)
    return Measurement(
        math.fsum(vals.tolist()) / n if n else math.nan, n, "mean",
        ci=mean_interval(vals, rule.confidence, ctx.resamples, ctx.seed) if n else (math.nan, math.nan),
        items=_behind(col, scored, rule.threshold, rule.op, ctx), notes=_not_counted(col, here))


def _share(rule, backend: str, ctx: GateContext) -> Measurement:
    col = ctx.cols.column(backend, rule.metric)
    here = _here(col, ctx)
    scored = here[col.status[here] == SCORED]
    vals = col.verdicts(rule.cut, rule.cut_op)[scored].astype(float)
    n = len(vals)
    return Measurement(
        math.fsum(vals.tolist()) / n if n else math.nan, n, "share",
        ci=mean_interval(vals, rule.confidence, ctx.resamples, ctx.seed) if n else (math.nan, math.nan),
        items=_behind(col, scored, rule.cut, rule.cut_op, ctx), notes=_not_counted(col, here))


def _rate(want: int) -> Callable[[Any, str, GateContext], Measurement]:
    def measure(rule, backend: str, ctx: GateContext) -> Measurement:
        keys = ([(backend, rule.metric)] if rule.metric
                else [k for k in ctx.cols.columns if k[0] == backend])
        cols = [ctx.cols.column(*k) for k in keys if ctx.cols.column(*k) is not None]
        ids = ctx.ids
        present = np.zeros(len(ids), bool)
        bad = np.zeros((len(cols), len(ids)), bool)
        for k, col in enumerate(cols):
            present |= col.present[ids]
            bad[k] = col.status[ids] == want
        n = int(present.sum())
        found = ids[bad.any(axis=0)]
        where = {int(i): k for k, i in enumerate(ids.tolist())} if len(found) else {}

        def make(start: int, stop: int) -> list[dict[str, Any]]:
            out = []
            for i in found[start:stop].tolist():
                which = [k for k in range(len(cols)) if bad[k, where[i]]]
                s = cols[which[0]].scores([i])[0]
                out.append({"case_id": ctx.case_id(i),
                            "metrics": ", ".join(sorted(cols[k].metric for k in which)),
                            "reason": s.error or s.reason})
            return out
        what = "share of cases with an error" if want == ERROR else "share of cases undefined"
        return Measurement(len(found) / n if n else math.nan, n, what, items=Rows(len(found), make))
    return measure


def _drop(rule, backend: str, ctx: GateContext) -> Measurement:
    new_s = ctx.cols.column(backend, rule.metric)
    old_s = ctx.base_cols.column(backend, rule.metric)
    ids = ctx.ids
    if old_s is None:
        both = ids[:0]
        became = 0
    else:
        old_s = old_s.on(ctx.base_at)
        present = ids[new_s.present[ids] & old_s.present[ids]]
        both = present[(new_s.status[present] == SCORED) & (old_s.status[present] == SCORED)]
        became = int(((old_s.status[present] == SCORED) & (new_s.status[present] != SCORED)).sum())
    n = len(both)
    b = old_s.value[both] if n else np.empty(0)
    v = new_s.value[both]
    m = Measurement(math.fsum((b - v).tolist()) / n if n else math.nan, n, "drop (baseline - run)")
    if n:
        m.ci = paired_bootstrap_ci(v, b, rule.confidence, ctx.resamples, ctx.seed)  # CI of base - new
        # H0: the drop is at most the allowance; H1: new < base - allowance.
        m.p = paired_permutation_pvalue(b, v, "less", rule.threshold, ctx.permutations, ctx.seed)
    if became:
        m.notes.append(f"{became} case(s) scored in the baseline are not scored now (see error_rate)")
    noise = ctx.noise.get((backend, rule.metric))
    if noise is not None and n:
        band = noise_band(noise[0], noise[1], noise[2], noise[3], n)
        within = within_judge_noise(m.figure, band)
        if within is not None:
            m.notes.append(f"{'within' if within else 'beyond'} judge noise (band {band:.3f})")
    worse = v - b < -EPS  # lower by more than rounding: what diff counts as worse
    down, base_v, new_v = both[worse], b[worse], v[worse]
    delta = new_v - base_v
    order = np.lexsort((ctx.cols.cases.id_rank()[down], delta))
    down, base_v, new_v, delta = down[order], base_v[order], new_v[order], delta[order]

    def make(start: int, stop: int) -> list[dict[str, Any]]:
        return [{"case_id": ctx.case_id(i), "base": x, "new": y, "delta": d}
                for i, x, y, d in zip(down[start:stop].tolist(), base_v[start:stop].tolist(),
                                      new_v[start:stop].tolist(), delta[start:stop].tolist())]
    m.items = Rows(len(down), make)
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
    from ..diagnose import LAYERS

    d = ctx.diagnosis()
    ids = ctx.ids
    behind = ids[d.layer_codes[ids] == LAYERS.index(rule.layer)]
    n = len(ids)

    def make(start: int, stop: int) -> list[dict[str, Any]]:
        return [{"case_id": c.case_id, "layer": c.layer, "reason": c.reason}
                for c in d.of_cases(behind[start:stop].tolist())]
    return Measurement(len(behind) / n if n else math.nan, n, f"share of cases diagnosed {rule.layer}",
                       items=Rows(len(behind), make))


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
             "error_rate(METRIC) <= 0.05", _rate(ERROR)),
    RuleKind("undefined_rate", re.compile(rf"^undefined_rate\(\s*(?P<metric>{_METRIC})\s*\)$"),
             "undefined_rate(METRIC) <= 0.1", _rate(UNDEFINED)),
    RuleKind("diagnosed", re.compile(r"^diagnosed\(\s*(?P<layer>[a-z_]+)\s*\)$"),
             "diagnosed(retrieval) <= 0.05", _diagnosed, scope="diagnosis", items_on_pass=False,
             check_args=_a_layer),
    RuleKind("mean", re.compile(rf"^(?P<call>mean\(\s*)?(?P<metric>{_METRIC})(?(call)\s*\))$"),
             "METRIC >= 0.85", _mean, significance="ci"),
):
    register(_kind)
