"""Pass/fail thresholds: ``value >= threshold`` passes.

The most specific setting wins: ``(backend, metric)``, then ``backend``, then ``metric``, then the
default (0.5). The command line's ``--threshold`` values are read by `Thresholds.parse`: ``0.7`` for
all, ``rubric=0.7`` per backend, ``faithfulness=0.6`` per metric, ``rubric:faithfulness=0.7`` per
backend and metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

from ..metrics import DEFAULT_PASS_MARK, GENERATION, RETRIEVAL
from .table import AnalysisError

__all__ = ["Thresholds", "DEFAULT_THRESHOLD", "check_threshold"]

DEFAULT_THRESHOLD = DEFAULT_PASS_MARK


@dataclass
class Thresholds:
    """Pass/fail thresholds by ``(backend, metric)``, ``backend``, ``metric``, else ``default``."""

    default: float = DEFAULT_THRESHOLD
    by_backend: dict[str, float] = field(default_factory=dict)
    by_metric: dict[str, float] = field(default_factory=dict)
    by_pair: dict[tuple[str, str], float] = field(default_factory=dict)

    def get(self, backend: str, metric: str) -> float:
        if (backend, metric) in self.by_pair:
            return self.by_pair[(backend, metric)]
        if backend in self.by_backend:
            return self.by_backend[backend]
        if metric in self.by_metric:
            return self.by_metric[metric]
        return self.default

    @classmethod
    def parse(
        cls, specs: Union[None, float, str, "Thresholds", Mapping[str, float], Iterable[Any]],
        backends: Iterable[str] = (),
    ) -> "Thresholds":
        """From ``0.7``, ``{"rubric": 0.7}`` or strings ``"0.7"``, ``"rubric=0.7"``,
        ``"rubric:faithfulness=0.7"``, ``"faithfulness=0.6"``. A name on the left of ``=`` is a backend
        when it is one of ``backends`` (or contains no metric-like characters and is not a known
        metric), else a metric."""
        if isinstance(specs, Thresholds):
            return specs
        out = cls()
        if specs is None:
            return out
        if isinstance(specs, (int, float)) and not isinstance(specs, bool):
            out.default = check_threshold(float(specs), str(specs))
            return out
        if isinstance(specs, str):
            specs = [specs]
        if isinstance(specs, Mapping):
            specs = [f"{k}={v}" for k, v in specs.items()]
        known_backends = set(backends)
        for spec in specs:
            text = str(spec).strip()
            if "=" not in text:
                out.default = check_threshold(_to_float(text, text), text)
                continue
            name, _, raw = text.partition("=")
            name = name.strip()
            value = check_threshold(_to_float(raw.strip(), text), text)
            if ":" in name:
                b, _, m = name.partition(":")
                out.by_pair[(b.strip(), m.strip())] = value
            elif name in known_backends or (
                not known_backends and "@" not in name and name.split("@")[0] not in RETRIEVAL
                and name not in GENERATION
            ):
                out.by_backend[name] = value
            else:
                out.by_metric[name] = value
        return out


def _to_float(raw: str, spec: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise AnalysisError(
            f"bad threshold {spec!r}: expected a number, BACKEND=NUMBER, METRIC=NUMBER or "
            "BACKEND:METRIC=NUMBER"
        ) from None


def check_threshold(value: float, spec: str) -> float:
    """``value``, or `AnalysisError` naming ``spec`` when it is not a finite number."""
    if not math.isfinite(value):
        raise AnalysisError(f"bad threshold {spec!r}: must be a finite number")
    return value
