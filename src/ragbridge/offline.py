"""Privacy defaults applied when ragbridge is imported, before any backend library is.

The libraries ragbridge adapts phone home, read ``.env`` files and write folders into the working
directory unless told not to (see each backend's module docstring). ragbridge switches all of that
off by default with ``os.environ.setdefault``: a variable the user has set explicitly is left alone,
so opting back in is a matter of setting it.
"""

from __future__ import annotations

import os

DEFAULTS = {
    # RAGAS: usage analytics to its tracking endpoint (checked as the string "true").
    "RAGAS_DO_NOT_TRACK": "true",
    # DeepEval: PostHog telemetry, .env autoload, the legacy key file, the inspect prompt.
    "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
    "DEEPEVAL_DISABLE_DOTENV": "1",
    "DEEPEVAL_DISABLE_LEGACY_KEYFILE": "1",
    "DEEPEVAL_NO_INSPECT_PROMPT": "1",
    "DEEPEVAL_UPDATE_WARNING_OPT_IN": "0",
    # LiteLLM (pulled in by the libraries): fetches its model cost map at import otherwise.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    # TruLens: OpenTelemetry tracing threads.
    "TRULENS_OTEL_TRACING": "0",
    # Hugging Face: no hub downloads at run time.
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # The generic opt-out honoured by several tools.
    "DO_NOT_TRACK": "1",
    "ANONYMIZED_TELEMETRY": "False",
}


def _deepeval_cache_folder() -> str:
    # DeepEval's ".deepeval" folder (telemetry id migration, evaluate() caches) defaults to the working
    # directory; keep it in the user's cache folder instead, so no run ever writes into the project.
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ragbridge", "deepeval")


def apply_defaults() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("DEEPEVAL_CACHE_FOLDER", _deepeval_cache_folder())
