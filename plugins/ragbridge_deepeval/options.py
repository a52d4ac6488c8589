"""The deepeval backend's options (``--option deepeval.KEY=VALUE``, ``[backends.deepeval]`` in
ragbridge.toml, ``options={"deepeval": {...}}``). Nothing here imports DeepEval."""

from __future__ import annotations

from typing import Annotated, Optional, Union

from pydantic import Field

from ragbridge.plugin import Bool, JudgedOptions, Number, Whole, option

__all__ = ["DeepEvalOptions"]

#: a threshold: a number in 0..1 (a score's range, and a pass mark's)
Mark = Annotated[Number, Field(ge=0, le=1)]


class DeepEvalOptions(JudgedOptions):
    """The arguments every DeepEval metric is made with (``concurrency``: cases in flight, every judged
    backend's)."""

    threshold: Optional[Union[Mark, dict[str, Mark]]] = option(
        None, "DeepEval's pass/fail threshold and the run's pass mark (compare, report, gate): a number, "
              "or one per canonical metric as a mapping (JSON on the command line: "
              "'{\"faithfulness\": 0.7}'). Unset (or for a metric it leaves out): DeepEval's 0.5, and the "
              "metric's default pass mark.", pass_mark=True)
    include_reason: Bool = option(
        True, "The extra reason call; false saves one judge call per case and metric.")
    strict_mode: Bool = option(False, "DeepEval's strict mode: a score below 1 is 0.")
    penalize_ambiguous_claims: Bool = option(
        False, "Faithfulness: count claims the judge calls ambiguous as unsupported.")
    truths_extraction_limit: Optional[Whole] = option(
        None, "Faithfulness: at most this many truths taken from the chunks (default: all).", ge=1)

    def threshold_for(self, metric: str) -> float:
        """The threshold of canonical ``metric``."""
        t = self.threshold
        t = t.get(metric) if isinstance(t, dict) else t
        return 0.5 if t is None else float(t)
