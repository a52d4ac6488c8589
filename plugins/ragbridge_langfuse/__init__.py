"""ragbridge's Langfuse formats: Langfuse trace exports in, a Langfuse score import out.

Langfuse is a tracing and evaluation service, not an evaluation library that scores cases here, so
this plugin registers no backend: a trace format, a score format and a trace store. None needs the
``langfuse`` package: the formats read and write files, the store speaks the public API with httpx.

- ``langfuse`` (trace format, read only): a trace downloaded from Langfuse's trace view, or an
  observations export. Each trace with a ``RETRIEVER`` observation becomes a case (question and
  answer from the root observation, contexts from the retriever's output); the trace's scores
  become user signals on the case (``metadata["signals"]``), for ``validate --labels signal:NAME``.
- ``langfuse`` (score format): ``ragbridge export-scores RUN --to langfuse --out scores.json``
  writes the batch score import (a list of scores), each on the trace and observation the case
  came from.
- ``langfuse://HOST`` (trace store): ``ragbridge sample --from langfuse://cloud.langfuse.com`` pulls
  observations and scores from the public API, ``ragbridge export-scores RUN --to langfuse://...``
  sends the scores; keys from ``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY``.

The field mapping and what is not kept: :mod:`ragbridge_langfuse.formats`; the API calls:
:mod:`ragbridge_langfuse.store`.
"""

from __future__ import annotations

from ragbridge.plugin import hookimpl, lazy_names

__all__ = ["FORMATS", "SCORE_FORMATS", "STORE"]

#: the package's names, imported when first used: registering the plugin imports none of its modules
__getattr__ = lazy_names(__name__, {"FORMATS": ".formats", "SCORE_FORMATS": ".formats", "STORE": ".store"})


@hookimpl
def ragbridge_register_formats(register):
    from .formats import FORMATS

    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_score_formats(register):
    from .formats import SCORE_FORMATS

    for fmt in SCORE_FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_trace_stores(register):
    from .store import STORE

    register(STORE)
