"""The report's pass marks: which score of a case counts as below its bar (a badge on the case).

The first that sets one wins: ``--threshold`` (see `ragbridge.analysis.Thresholds`), then
``--gates FILE`` (`gate_thresholds`), then the defaults (each canonical metric's ``pass_mark``,
`ragbridge.metrics.default_pass_mark`), chosen so that the badge marks cases worth reading: 0.5 for
the ranking metrics and the judged metrics, ``1/k`` for ``precision@k`` and ``context_relevance``
(both are a precision of the retrieved list, whose ceiling with one relevant chunk is about
``1/k``), 1 for the answer checks (``must_contain``, ``must_not_contain``, ``abstention``), and no
bar (0) for the character-level span precision, IoU and precision-omega. A bare
``--threshold 0.7`` replaces those defaults, not the gates file's marks. docs/report.md has the
table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..analysis.gate import gate_thresholds
from ..analysis.thresholds import Thresholds
from ..metrics import default_pass_mark

__all__ = ["PassMarks", "pass_marks", "gate_thresholds"]


@dataclass
class PassMarks(Thresholds):
    """Thresholds in layers ``(source, thresholds, its default applies)``; the first layer that sets
    a mark for a (backend, metric) wins. `lookup` also says which layer it was."""

    layers: list[tuple[str, Thresholds, bool]] = field(default_factory=list)

    def lookup(self, backend: str, metric: str) -> tuple[float, str]:
        for source, t, with_default in self.layers:
            for found, value in (((backend, metric) in t.by_pair, t.by_pair.get((backend, metric))),
                                 (backend in t.by_backend, t.by_backend.get(backend)),
                                 (metric in t.by_metric, t.by_metric.get(metric))):
                if found:
                    return float(value), source
            if with_default:
                return t.default, source
        return default_pass_mark(metric), "default"

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


def pass_marks(thresholds: Any = None, gates: Any = None, metrics: Sequence[str] = (),
               backends: Sequence[str] = (), k: Optional[int] = None) -> Thresholds:
    """The report's pass marks: ``thresholds`` (``--threshold`` values), then ``gates`` (a gates
    file), then `ragbridge.metrics.default_pass_mark`. A `Thresholds` object is the whole answer."""
    if isinstance(thresholds, Thresholds):
        return thresholds
    given = Thresholds.parse(thresholds, backends)
    defaults = Thresholds(by_metric={m: default_pass_mark(m, k) for m in metrics})
    layers = [("--threshold", given, False)]
    if gates is not None:
        layers.append(("gates", gate_thresholds(gates), False))
    layers.append(("--threshold", given, True) if _bare(thresholds) else ("default", defaults, True))
    return PassMarks(layers=layers)
