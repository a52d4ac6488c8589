"""Pass marks: which threshold applies to a (backend, metric), decided in one place for every output.

`pass_marks` is what the report, ``compare``, ``validate``, ``calibrate``, the noise figures and
``diff`` ask; a score then passes by `ragbridge.verdicts.verdict` (``value >= threshold``, and a
majority of repeats for a run made with ``--repeats``). The first that sets a mark wins:

1. ``--threshold`` (`Thresholds.parse`): ``rubric:faithfulness=0.7`` for one backend and metric,
   ``rubric=0.7`` for a backend, ``faithfulness=0.6`` for a metric;
2. a gates file (`ragbridge.analysis.gate.GateConfig.pass_marks`): a ``share(METRIC >= CUT)`` rule
   gives CUT, a ``METRIC >= VALUE`` rule gives VALUE;
3. a plain ``--threshold 0.7``: the mark of every other metric;
4. the backend's own pass rule, recorded in ``run.json`` (``pass_marks``: a rubric's pass level on
   the 0..1 scale; its claim rubric passes an answer whose every claim is supported, 1.0);
5. the metric's default (`ragbridge.metrics.default_pass_mark`: 0.5; ``1/k`` for the precisions of
   the retrieved list; 1 for the answer checks).

The last two are the run's own marks, `ragbridge.verdicts.pass_mark`, which ``Run.to_frame`` reads
too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from ..metrics import DEFAULT_PASS_MARK, GENERATION, RETRIEVAL
from ..verdicts import pass_mark
from .table import AnalysisError

__all__ = ["Thresholds", "PassMarks", "pass_marks", "DEFAULT_THRESHOLD",
           "check_threshold", "SOURCES"]

DEFAULT_THRESHOLD = DEFAULT_PASS_MARK
#: where a mark came from, as `PassMarks.lookup` names it
SOURCES = ("--threshold", "gates", "backend", "default")


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

    def find(self, backend: str, metric: str) -> Optional[float]:
        """The mark this object sets for (backend, metric) by name, or None (its default aside)."""
        for found, value in (((backend, metric) in self.by_pair, self.by_pair.get((backend, metric))),
                             (backend in self.by_backend, self.by_backend.get(backend)),
                             (metric in self.by_metric, self.by_metric.get(metric))):
            if found:
                return float(value)
        return None

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
            name, _, raw = text.rpartition("=")  # a backend name may hold "=" (mylib==1.2)
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


@dataclass
class PassMarks(Thresholds):
    """Thresholds in layers ``(source, thresholds, its default applies)``; the first layer that sets
    a mark for a (backend, metric) wins, then the run's own (`ragbridge.verdicts.pass_mark`: the
    backend's rule recorded in ``manifest``, else the metric's default). `lookup` also says which
    layer it was (one of `SOURCES`)."""

    layers: list[tuple[str, Thresholds, bool]] = field(default_factory=list)
    manifest: Any = None

    def lookup(self, backend: str, metric: str) -> tuple[float, str]:
        for source, t, with_default in self.layers:
            found = t.find(backend, metric)
            if found is not None:
                return found, source
            if with_default:
                return t.default, source
        return pass_mark(self.manifest, backend, metric)

    def get(self, backend: str, metric: str) -> float:
        return self.lookup(backend, metric)[0]


def _bare(specs: Any) -> bool:
    """Whether ``--threshold`` values include a plain number (a new default for every metric)."""
    if isinstance(specs, (int, float)) and not isinstance(specs, bool):
        return True
    if isinstance(specs, str):
        specs = [specs]
    if isinstance(specs, (list, tuple)):
        return any("=" not in str(x) for x in specs)
    return False


def pass_marks(run: Any = None, thresholds: Any = None, gates: Any = None,
               backends: Sequence[str] = ()) -> Thresholds:
    """The pass marks of ``run`` (a `ragbridge.Run`, or None): ``thresholds`` (``--threshold``
    values), then ``gates`` (a `ragbridge.analysis.gate.GateConfig`: its `pass_marks`), then the
    backends' own rules recorded in the run, then the defaults (see the module docstring). A
    `Thresholds` object given as ``thresholds`` is the whole answer."""
    if isinstance(thresholds, Thresholds):
        return thresholds
    if run is not None and not backends:
        backends = sorted(set(run.manifest.backends) | set(run.manifest.metrics))
    given = Thresholds.parse(thresholds, backends)
    layers = [("--threshold", given, False)]
    if gates is not None:
        layers.append(("gates", gates.pass_marks(), False))
    if _bare(thresholds):
        layers.append(("--threshold", given, True))
    return PassMarks(layers=layers, manifest=run.manifest if run is not None else None)


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
