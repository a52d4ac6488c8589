"""RAGAS' environment: the defaults a run applies while it uses the backend, and its id file kept out
of the user's home.

`ENVIRONMENT` is what `RagasBackend.environment` returns; the runner sets each variable the user has
not set before the backend opens (so before RAGAS is first imported, which happens in ``open``) and
removes it again when the run ends. A variable the user set is left alone, so opting back in is a
matter of setting it:

* ``RAGAS_DO_NOT_TRACK=true``: RAGAS posts usage analytics to t.explodinggradients.com once per LLM
  call otherwise. The check is ``== "true"``, so ``1`` does not work; it is cached, so it must be
  set before the first tracked call.
* ``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``, ``HF_HUB_DISABLE_TELEMETRY``, ``DO_NOT_TRACK``:
  RAGAS imports Hugging Face ``datasets`` (and so ``huggingface_hub``): no hub downloads or
  telemetry while scoring.
* ``TOKENIZERS_PARALLELISM=false``: RAGAS' Hugging Face tokenizers warn about forked threads.
* ``ANONYMIZED_TELEMETRY=False``: the opt-out of vector stores reached through LangChain's
  community package, which RAGAS imports.

A library that reads a variable once, at import, keeps what it read for the rest of the process.

The dataset formats need none of this: they import RAGAS only in `translate.to_ragas` (an
in-memory ``EvaluationDataset``, no tracked call; a first import there is made under `ENVIRONMENT`)
and ``datasets`` only to read or write a folder on disk.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

__all__ = ["ENVIRONMENT", "keep_ragas_id_out_of_home"]

ENVIRONMENT: dict[str, str] = {
    "RAGAS_DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
}

_ID_DIR: Optional[str] = None
_ID_LOCK = threading.Lock()


def keep_ragas_id_out_of_home() -> None:
    """RAGAS writes an anonymous id file (``~/.local/share/ragas/uuid.json``) the first time it builds
    an analytics event or formats a log line, even with its tracking off. With tracking off (the
    default while a run uses the backend), RAGAS is pointed at a private temporary folder for it
    instead, removed at exit (or, after a kill, by the next run). A user who turned RAGAS' tracking
    on keeps RAGAS' own behaviour."""
    global _ID_DIR
    import ragas._analytics as analytics

    with _ID_LOCK:
        if _ID_DIR is not None or not analytics.do_not_track():
            return
        from ragbridge.plugin import scratch_folder

        _ID_DIR = scratch_folder("ragbridge-ragas-")
        folder = _ID_DIR
        analytics.user_data_dir = lambda *args, **kwargs: os.path.join(folder, "ragas")
