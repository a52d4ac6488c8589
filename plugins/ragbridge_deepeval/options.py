"""The deepeval backend's options (``--option deepeval.KEY=VALUE``, ``[backends.deepeval]`` in
ragbridge.toml, ``options={"deepeval": {...}}``). Nothing here imports DeepEval."""

from __future__ import annotations

from typing import Optional, Union

from ragbridge.plugin import Bool, JudgedOptions, Number, Whole, option

__all__ = ["DeepEvalOptions"]


class DeepEvalOptions(JudgedOptions):
    """The arguments every DeepEval metric is made with (``concurrency``: cases in flight, every judged
    backend's)."""

    threshold: Union[Number, dict[str, Number]] = option(
        0.5, "DeepEval's pass/fail threshold: a number, or one per canonical metric as a mapping "
             "(JSON on the command line: '{\"faithfulness\": 0.7}'; 0.5 for a metric it leaves out).")
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
        return float(t.get(metric, 0.5) if isinstance(t, dict) else t)
