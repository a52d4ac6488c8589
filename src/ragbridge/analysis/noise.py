"""Judge noise, measured from repeats: how much a judged score moves when the judge is asked again.

From a run made with ``--repeats N`` (every judged score taken N times as distinct judge calls),
per backend and metric (`noise_figures`):

* ``within_sd``: the within-case standard deviation, pooled (the root of the mean per-case variance,
  ddof 1), and ``mean_sd``, the mean of the per-case standard deviations;
* ``flip_share``: the share of cases whose pass/fail verdict (`ragbridge.verdicts.verdict` at the
  pass mark) is not the same in every repeat;
* ``alpha``: test-retest reliability, Krippendorff's alpha (interval metric) with the repeats as the
  raters and the cases as the units, computed as NLTK's ``nltk.metrics.agreement`` does: 1 = the
  repeats always agree, 0 = the cases' differences are no larger than the judge's noise;
* ``mde``: the smallest difference in the mean that this golden set can detect against judge noise
  alone, at two-sided ``alpha_level`` (0.05) and ``power`` (0.8): ``(z(1 - a/2) + z(power)) *
  within_sd * sqrt(2 / (N * n))`` for n cases and N repeats, i.e. comparing two runs of the same
  size and noise on the same cases. A difference between two runs smaller than the noise band
  ``z(1 - a/2) * sqrt(sd_a^2 / N_a + sd_b^2 / N_b) / sqrt(n)`` (`noise_band`) is within judge noise:
  `within_judge_noise` is that one rule, which ``diff``, ``gate`` and `within_noise` all ask (a change
  of zero is within judge noise whatever the band).

Only cases with at least two scored repeats count. Everything is None when there are none (a run
without repeats has no measured noise).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from ..schema import Score
from ..metrics import DEFAULT_PASS_MARK
from ..verdicts import verdict
from .stats import EPS, normal_quantile

__all__ = ["noise_figures", "case_spread", "noise_band", "mde", "repeats_of", "repeat_scores", "within_noise",
           "check_repeats",
           "within_judge_noise",
           "noise_section", "noise_table", "POWER", "ALPHA_LEVEL"]

POWER = 0.8
ALPHA_LEVEL = 0.05

#: a pass threshold: one number, or ``(backend, metric) -> threshold`` (``Thresholds.get``)
Threshold = Union[float, Callable[[str, str], float]]


def _verdict(s: Score, threshold: Threshold) -> Optional[bool]:
    return verdict(s, threshold(s.backend, s.metric) if callable(threshold) else threshold)


def within_judge_noise(delta: Optional[float], band: Optional[float]) -> Optional[bool]:
    """Whether a change in the mean of ``delta`` is within judge noise of ``band`` (`noise_band`):
    ``|delta| <= band``, so a change of zero always is. None when either is unknown."""
    if delta is None or band is None or math.isnan(delta) or math.isnan(band):
        return None
    return abs(delta) <= band + EPS


def _z(p: float) -> float:
    return normal_quantile(p)


def mde(within_sd: Optional[float], n_cases: int, repeats: int, *, power: float = POWER,
        alpha_level: float = ALPHA_LEVEL, other_sd: Optional[float] = None,
        other_repeats: Optional[int] = None) -> Optional[float]:
    """The minimum detectable difference in the mean against judge noise (see the module docstring);
    ``other_*``: the compared run's noise and repeats (default: the same as this one's)."""
    if within_sd is None or n_cases < 1 or repeats < 1:
        return None
    other_sd = within_sd if other_sd is None else other_sd
    other_repeats = repeats if other_repeats is None else other_repeats
    se = math.sqrt(within_sd ** 2 / repeats + other_sd ** 2 / other_repeats) / math.sqrt(n_cases)
    return (_z(1 - alpha_level / 2) + _z(power)) * se


def noise_band(sd_a: Optional[float], repeats_a: int, sd_b: Optional[float], repeats_b: int, n_cases: int,
               alpha_level: float = ALPHA_LEVEL) -> Optional[float]:
    """How far apart two runs' means on the same ``n_cases`` may be from judge noise alone (two-sided
    ``alpha_level``). A run without measured noise (None) is taken to have the other's; None when
    neither has it."""
    if sd_a is None and sd_b is None or n_cases < 1:
        return None
    sd_a = sd_b if sd_a is None else sd_a
    sd_b = sd_a if sd_b is None else sd_b
    se = math.sqrt(sd_a ** 2 / max(1, repeats_a) + sd_b ** 2 / max(1, repeats_b)) / math.sqrt(n_cases)
    return _z(1 - alpha_level / 2) * se


def _by_case(scores: Iterable[Score]) -> dict[tuple[str, str], dict[str, list[Score]]]:
    groups: dict[tuple[str, str], dict[str, list[Score]]] = defaultdict(lambda: defaultdict(list))
    for s in scores:
        groups[(s.backend, s.metric)][s.case_id].append(s)
    return groups


def _var(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def case_spread(scores: Iterable[Score],
                threshold: Threshold = DEFAULT_PASS_MARK) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (backend, metric, case_id) with at least two scored repeats: ``values`` (in repeat order),
    ``mean``, ``sd`` (ddof 1), ``flips`` (the pass/fail verdict differs between repeats)."""
    out = {}
    for (backend, metric), cases in _by_case(scores).items():
        for case_id, group in cases.items():
            scored = sorted((s for s in group if s.status == "scored"), key=lambda s: s.repeat)
            if len(scored) < 2:
                continue
            values = [s.value for s in scored]
            verdicts = {v for s in scored if (v := _verdict(s, threshold)) is not None}
            out[(backend, metric, case_id)] = {
                "values": values, "mean": sum(values) / len(values), "sd": math.sqrt(_var(values)),
                "flips": len(verdicts) > 1}
    return out


def _alpha(units: dict[str, list[Score]]) -> Optional[float]:
    """Krippendorff's alpha of the repeats (interval metric: squared difference), the cases as the
    units: 1 - D_o / D_e, D_o the mean disagreement within a case (each pair of its values, weighted
    1 / (values - 1)), D_e over every pair of values; NLTK's ``AnnotationTask.alpha`` with
    ``interval_distance``, to rounding."""
    groups = [[float(s.value) for s in group] for group in units.values()]
    values = [v for g in groups for v in g]
    if len(set(values)) < 2:
        return None  # one value everywhere: no variation to attribute
    pairable = [g for g in groups if len(g) >= 2]
    every = [v for g in pairable for v in g]
    if not every:
        return None
    if len(set(every)) < 2:
        return 1.0

    def squared_differences(xs: list[float]) -> float:  # the sum over ordered pairs of (a - b)^2
        return 2.0 * (len(xs) * math.fsum(v * v for v in xs) - math.fsum(xs) ** 2)

    n = len(every)
    observed = math.fsum(squared_differences(g) / (len(g) - 1) for g in pairable) / n
    expected = squared_differences(every) / (n * (n - 1))
    if expected <= 0:
        return None
    value = 1.0 - observed / expected
    return float(value) if math.isfinite(value) else None


def noise_figures(scores: Iterable[Score], *, power: float = POWER, alpha_level: float = ALPHA_LEVEL,
                  threshold: Threshold = DEFAULT_PASS_MARK) -> list[dict[str, Any]]:
    """One row per (backend, metric) with repeats: ``backend``, ``metric``, ``n_cases`` (with two or
    more scored repeats), ``repeats`` (the most any case has), ``within_sd``, ``mean_sd``,
    ``flip_share``, ``alpha``, ``mde``, ``power``, ``alpha_level`` (see the module docstring)."""
    rows = []
    for (backend, metric), cases in sorted(_by_case(scores).items()):
        units = {}
        for case_id, group in cases.items():
            scored = [s for s in group if s.status == "scored"]
            if len(scored) >= 2:
                units[case_id] = scored
        if not units:
            continue
        variances = [_var([s.value for s in g]) for g in units.values()]
        verdict_sets = [{v for s in g if (v := _verdict(s, threshold)) is not None} for g in units.values()]
        judged = [v for v in verdict_sets if v]
        n = len(units)
        repeats = max(len(g) for g in units.values())
        within = math.sqrt(sum(variances) / n)
        mean_repeats = sum(len(g) for g in units.values()) / n
        rows.append({
            "backend": backend, "metric": metric, "n_cases": n, "repeats": repeats,
            "within_sd": within, "mean_sd": sum(math.sqrt(v) for v in variances) / n,
            "flip_share": (sum(1 for v in judged if len(v) > 1) / len(judged)) if judged else None,
            "alpha": _alpha(units),
            "mde": mde(within, n, max(1, int(round(mean_repeats))), power=power, alpha_level=alpha_level),
            "power": power, "alpha_level": alpha_level,
        })
    return rows


def repeats_of(run: Any) -> int:
    """How many repeats a run's judged scores were taken (``--repeats``; 1 for a run without)."""
    planned = (run.manifest.options or {}).get("repeats")
    seen = run.columns.repeats
    return max(planned if isinstance(planned, int) and not isinstance(planned, bool) else 1, seen)


def repeat_scores(run: Any) -> list[Score]:
    """Every repeat of the scores of ``run`` taken more than once (the columns with repeats: a run
    without repeats has none), as recorded: what the noise figures read."""
    return [s for col in run.columns.columns.values() if col.repeats is not None for s in col.repeat_scores()]


def within_noise(base: Any, new: Any, *, alpha_level: float = ALPHA_LEVEL,
                 power: float = POWER) -> list[dict[str, Any]]:
    """Per (backend, metric) judged in both runs (`ragbridge.run.Run`), on the cases both scored:
    ``delta`` (new mean - base mean), each run's ``within_sd`` and ``repeats``, ``band`` (`noise_band`:
    how far apart judge noise alone puts the means), ``within_noise`` (``|delta| < band``; None when
    neither run measured its noise) and ``mde`` (the smallest difference the pair can detect)."""
    noise_a = {(r["backend"], r["metric"]): r for r in noise_figures(repeat_scores(base))}
    noise_b = {(r["backend"], r["metric"]): r for r in noise_figures(repeat_scores(new))}
    ra, rb = repeats_of(base), repeats_of(new)

    def values(run: Any, key: tuple[str, str]) -> dict[str, float]:
        col = run.columns.column(*key)
        if col is None:
            return {}
        at = np.flatnonzero(col.scored)
        ids = run.columns.cases.ids
        return dict(zip((ids[i] for i in at.tolist()), col.value[at].tolist()))

    rows = []
    for key in sorted(set(noise_a) | set(noise_b)):
        va, vb = values(base, key), values(new, key)
        common = sorted(set(va) & set(vb))
        if not common:
            continue
        sd_a = noise_a.get(key, {}).get("within_sd")
        sd_b = noise_b.get(key, {}).get("within_sd")
        delta = (sum(vb[c] for c in common) - sum(va[c] for c in common)) / len(common)
        band = noise_band(sd_a, ra, sd_b, rb, len(common), alpha_level)
        sd_known = sd_a if sd_a is not None else sd_b
        rows.append({
            "backend": key[0], "metric": key[1], "n_cases": len(common), "delta": delta,
            "base_within_sd": sd_a, "new_within_sd": sd_b, "base_repeats": ra, "new_repeats": rb,
            "band": band, "within_noise": within_judge_noise(delta, band),
            "mde": mde(sd_known, len(common), ra, other_sd=sd_b if sd_b is not None else sd_known,
                       other_repeats=rb, power=power, alpha_level=alpha_level),
            "alpha_level": alpha_level, "power": power,
        })
    return rows


def noise_table(run: Any, threshold: Optional[Threshold] = None):
    """`noise_figures` of a run (a `ragbridge.Run` or its folder) as a DataFrame, one row per backend
    and metric with repeats (empty for a run without); verdicts at ``threshold`` (default: the run's
    pass marks, `ragbridge.analysis.thresholds.pass_marks`)."""
    import pandas as pd

    from ..run import load_run
    from .thresholds import pass_marks

    if not hasattr(run, "repeat_scores"):
        run = load_run(run)
    threshold = pass_marks(run).get if threshold is None else threshold
    columns = ["backend", "metric", "n_cases", "repeats", "within_sd", "mean_sd", "flip_share", "alpha",
               "mde", "power", "alpha_level"]
    return pd.DataFrame(noise_figures(repeat_scores(run), threshold=threshold), columns=columns)


def check_repeats(run: Any, min_repeats: int) -> Optional[str]:
    """A gate rule's check: None when the run's judged scores were taken at least ``min_repeats``
    times, else what failed (``"judged 1 time, the gate requires at least 3 repeats"``)."""
    judged = any(col.judged for col in run.columns.columns.values())
    n = repeats_of(run)
    if not judged or n >= min_repeats:
        return None
    return (f"judged {n} time{'s' if n != 1 else ''} per score, the gate requires at least {min_repeats} "
            f"repeats (run with --repeats {min_repeats})")


def noise_section(run: Any, threshold: Optional[Threshold] = None) -> dict[str, Any]:
    """What a report shows of a run's judge noise: ``repeats``, ``figures`` (`noise_figures`) and
    ``cases``: per backend and metric, each case's repeat values, mean, spread and whether its verdict
    flips, largest spread first (`case_spread`). Empty lists for a run without repeats. Verdicts at
    ``threshold`` (default: the run's pass marks)."""
    from .thresholds import pass_marks

    threshold = pass_marks(run).get if threshold is None else threshold
    scores = repeat_scores(run)
    spread = case_spread(scores, threshold)
    cases: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (backend, metric, case_id), row in spread.items():
        cases[f"{backend}:{metric}"].append({"case_id": case_id, **row})
    for rows in cases.values():
        rows.sort(key=lambda r: (-r["sd"], r["case_id"]))
    return {"repeats": repeats_of(run),
            "figures": noise_figures(scores, threshold=threshold),
            "cases": dict(cases)}
