"""The phoenix backend's options (``--option phoenix.KEY=VALUE``, ``[backends.phoenix]`` in
ragbridge.toml, ``options={"phoenix": {...}}``). Nothing here imports Phoenix."""

from __future__ import annotations

from ragbridge.plugin import Bool, JudgedOptions, Number, option

__all__ = ["PhoenixOptions"]


class PhoenixOptions(JudgedOptions):
    """How Phoenix's evaluators ask the judge (``concurrency``: cases in flight, every judged backend's)."""

    temperature: Number = option(
        0.0, "Sampling temperature of every request (Phoenix sends none of its own).", ge=0, le=2)
    include_explanation: Bool = option(
        True, "Ask for Phoenix's explanation, the score's reason; false drops it from the schema.")
