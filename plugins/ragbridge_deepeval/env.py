"""DeepEval's environment: the defaults a run applies while it uses the backend.

`environment` is what `DeepEvalBackend.environment` returns; the runner sets each variable the user
has not set before the backend opens and removes it again when the run ends. DeepEval reads most of
them when it is first imported, so the backend imports DeepEval only in ``open`` and ``score``, after
they are set (the dataset formats never import it):

* ``DEEPEVAL_TELEMETRY_OPT_OUT=1``: no PostHog events (also stops the ``.deepeval/`` folder DeepEval
  otherwise creates in the working directory at import, for its telemetry id);
* ``DEEPEVAL_DISABLE_DOTENV=1``: DeepEval loads ``.env``, ``.env.{APP_ENV}`` and ``.env.local`` of the
  working directory into ``os.environ`` at import otherwise;
* ``DEEPEVAL_DISABLE_LEGACY_KEYFILE=1``: nor merges ``./.deepeval/.deepeval`` into it;
* ``DEEPEVAL_NO_INSPECT_PROMPT=1``, ``DEEPEVAL_UPDATE_WARNING_OPT_IN=0``: no prompt on a terminal, no
  version check against pypi.org;
* ``DEEPEVAL_CACHE_FOLDER``: the user's cache folder (``$XDG_CACHE_HOME/ragbridge/deepeval`` or
  ``~/.cache/ragbridge/deepeval``), so even a user who opts back into telemetry gets no ``.deepeval/``
  in the working directory;
* ``DEEPEVAL_RETRY_MAX_ATTEMPTS=1``: the gateway has retried 429, 5xx and timeouts already; a
  second round of DeepEval's own would go through the gateway again;
* ``LITELLM_LOCAL_MODEL_COST_MAP=True``: LiteLLM (when installed: DeepEval's LiteLLM models use it)
  fetches its model cost map from the internet at import otherwise.

`runtime_environment` adds what depends on the judge: DeepEval's per-attempt timeout raised to the
gateway's worst case, set by ``open`` and removed by ``close`` (DeepEval reads it at call time).
A variable the user set is always left alone.

DeepEval decides whether telemetry is on when it *sends*, not when it measures: it counts every
measurement and sends the counts every 30 minutes and at process exit, long after the run ended and
its opt-out was removed. So ``close`` calls `settle_telemetry` while the opt-out still holds: the
counts of the run are dropped, and DeepEval's telemetry backend (chosen once per process) is chosen
then, the no-op one. Nothing the run measured is sent later; a user who opted in gets DeepEval's
own behaviour.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["ENVIRONMENT", "environment", "cache_folder", "runtime_environment", "settle_telemetry"]

ENVIRONMENT: dict[str, str] = {
    "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
    "DEEPEVAL_DISABLE_DOTENV": "1",
    "DEEPEVAL_DISABLE_LEGACY_KEYFILE": "1",
    "DEEPEVAL_NO_INSPECT_PROMPT": "1",
    "DEEPEVAL_UPDATE_WARNING_OPT_IN": "0",
    "DEEPEVAL_RETRY_MAX_ATTEMPTS": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}


def cache_folder() -> str:
    """Where DeepEval's ``.deepeval`` folder goes: the user's cache folder, never the project."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ragbridge", "deepeval")


def environment() -> dict[str, str]:
    """`ENVIRONMENT` and ``DEEPEVAL_CACHE_FOLDER``."""
    return {**ENVIRONMENT, "DEEPEVAL_CACHE_FOLDER": cache_folder()}


def runtime_environment(gateway: Any) -> dict[str, str]:
    """DeepEval's per-attempt timeout, raised to the gateway's worst-case time for one call."""
    return {"DEEPEVAL_PER_ATTEMPT_TIMEOUT_SECONDS_OVERRIDE": f"{gateway.config.client_timeout():g}"}


def settle_telemetry() -> None:
    """Flush DeepEval's buffered measurement counts now (dropped while telemetry is off) and let it
    choose its telemetry backend now (the no-op one while telemetry is off); see the module
    docstring. Nothing to do when DeepEval was never imported, nor before DeepEval 4.0, whose
    telemetry buffers nothing: it reads the opt-out at each measurement and sends at once."""
    if "deepeval" not in sys.modules:
        return
    try:
        from deepeval.telemetry.client import get_backend
    except ImportError:  # DeepEval 3.x: one ``deepeval.telemetry`` module, nothing buffered
        return
    from deepeval.telemetry.context import flush_standalone_metrics

    flush_standalone_metrics()
    get_backend()
