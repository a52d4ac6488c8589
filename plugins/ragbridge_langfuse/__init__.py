"""ragbridge's Langfuse formats: Langfuse trace exports in, a Langfuse score import out.

Langfuse is a tracing and evaluation service, not an evaluation library that scores cases here, so
this plugin registers no backend: only a trace format and a score format. Neither needs the
``langfuse`` package; both read and write files.

- ``langfuse`` (trace format, read only): a trace downloaded from Langfuse's trace view, or an
  observations export. Each trace with a ``RETRIEVER`` observation becomes a case (question and
  answer from the root observation, contexts from the retriever's output); the trace's scores
  become user signals on the case (``metadata["signals"]``), for ``validate --labels signal:NAME``.
- ``langfuse`` (score format): ``ragbridge export-scores RUN --to langfuse --out scores.json``
  writes an ingestion batch of ``score-create`` events, each on the trace and observation the case
  came from.

The field mapping and what is not kept: :mod:`ragbridge_langfuse.formats`.
"""

from __future__ import annotations

from ragbridge.hookspecs import hookimpl

from .formats import FORMATS, SCORE_FORMATS

__all__ = ["FORMATS", "SCORE_FORMATS"]


@hookimpl
def ragbridge_register_formats(register):
    for fmt in FORMATS:
        register(fmt)


@hookimpl
def ragbridge_register_score_formats(register):
    for fmt in SCORE_FORMATS:
        register(fmt)
