"""TruLens' environment: the defaults a run applies while it uses the backend, and sentence splitting
without a download.

`ENVIRONMENT` is what `TruLensBackend.environment` returns; the runner sets each variable the user
has not set before the backend opens (TruLens is first imported in ``open``, after that) and removes
it again when the run ends:

* ``TRULENS_OTEL_TRACING=0``: no OpenTelemetry tracing threads (TruLens has no usage telemetry);
* ``LITELLM_LOCAL_MODEL_COST_MAP=True``: LiteLLM (when installed: TruLens' LiteLLM provider uses it)
  fetches its model cost map from the internet at import otherwise.

`offline_sentence_splitter` makes TruLens' nltk sentence split work offline: TruLens calls
``nltk.download("punkt_tab")`` before every groundedness split, which contacts the internet even
when the data is present. `quiet_import` silences the warning TruLens logs at import about optional
packages of its own requirements list, which means nothing to a ragbridge user.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Optional

__all__ = ["ENVIRONMENT", "offline_sentence_splitter", "quiet_import"]

ENVIRONMENT: dict[str, str] = {
    "TRULENS_OTEL_TRACING": "0",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}


def quiet_import() -> None:
    """TruLens' "Package jsonschema not present in requirements" warning at import, silenced."""
    logging.getLogger("trulens.core.utils.imports").setLevel(logging.ERROR)


# A minimal Punkt model: no trained collocations or sentence starters, the common English
# abbreviations, so "e.g." and "Dr." do not end a sentence. Used only when no real punkt_tab
# model is installed (an installed one comes first on nltk's search path).
_ABBREVIATIONS = (
    "e.g", "i.e", "etc", "vs", "cf", "al", "approx", "dept", "est", "fig", "inc", "ltd", "co", "corp",
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "no", "nos", "vol", "p", "pp", "jan", "feb", "mar",
    "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "u.s", "u.k", "a.m", "p.m", "min",
    "max", "sec", "hr", "hrs",
)
_nltk_lock = threading.Lock()
_nltk_dir: Optional[str] = None


class _NltkWithoutDownload:
    """Stands in for the ``nltk`` module inside ``trulens.feedback.llm_provider`` only: ``download``
    is a no-op, everything else is nltk's own."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def download(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def offline_sentence_splitter() -> str:
    """Make TruLens's nltk sentence split work offline; returns the punkt_tab folder added.

    Idempotent. Writes the minimal model above into a private temporary folder (removed at exit, or
    after a kill by the next run), appends it to ``nltk.data.path`` (an installed model is found
    first), and replaces the ``nltk`` seen by TruLens's groundedness code with one whose
    ``download`` does nothing."""
    global _nltk_dir
    with _nltk_lock:
        import nltk
        from trulens.feedback import llm_provider

        if _nltk_dir is None:
            from ragbridge.plugin import scratch_folder

            root = scratch_folder("ragbridge-nltk-")
            model = os.path.join(root, "tokenizers", "punkt_tab", "english")
            os.makedirs(model)
            for name, text in (("collocations.tab", ""), ("sent_starters.txt", ""),
                               ("ortho_context.tab", ""),
                               ("abbrev_types.txt", "\n".join(_ABBREVIATIONS) + "\n")):
                with open(os.path.join(model, name), "w", encoding="utf-8", newline="") as f:
                    f.write(text)
            _nltk_dir = root
        if _nltk_dir not in nltk.data.path:
            nltk.data.path.append(_nltk_dir)
        if not isinstance(llm_provider.nltk, _NltkWithoutDownload):
            llm_provider.nltk = _NltkWithoutDownload(llm_provider.nltk)
        return _nltk_dir
