"""The ragas backend's options (``--option ragas.KEY=VALUE``, ``[backends.ragas]`` in ragbridge.toml,
``options={"ragas": {...}}``). Nothing here imports RAGAS."""

from __future__ import annotations

from ragbridge.plugin import JudgedOptions

__all__ = ["RagasOptions"]


class RagasOptions(JudgedOptions):
    """RAGAS's metrics are made as RAGAS makes them (its sampling, its parse retries): the options are
    every judged backend's, ``concurrency`` (cases in flight) and ``structured_output``."""
