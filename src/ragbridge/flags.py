"""Command-line flags as data: what the command line and the pytest plugin build their options from.

A `FlagSpec` is one flag: the parameter it fills, the type the command line reads, its default, its
help and its spellings. The flags of the options declared in pydantic models (the run's
parameters, `ragbridge.backend.RunOptions`, a backend's options) are made of the models' fields
(`ragbridge.options.flag_spec`); the judge's settings, which `ragbridge.judge.config.JudgeConfig`
checks, are declared here, `JUDGE_FLAGS`, for every command that calls the judge and for the pytest
plugin (``--ragbridge-judge-model``...). This module imports nothing but the standard library:
``ragbridge --help`` builds the judge's flags of the plugins' commands from it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["FlagSpec", "JUDGE_FLAGS", "JUDGE_SETTING", "unwrap"]


@dataclass(frozen=True)
class FlagSpec:
    """One flag: ``name`` (the parameter, or the model field, it fills), ``annotation`` (the type the
    command line reads), ``default``, ``help`` and ``flags`` (its spellings: ``("--backend", "-b")``,
    ``("--score-cache/--no-score-cache",)``)."""

    name: str
    annotation: Any
    default: Any
    help: str
    flags: tuple[str, ...]

    @property
    def flag(self) -> str:
        """The first spelling (``--backend``, ``--score-cache``)."""
        return self.flags[0].split("/")[0]


def _judge(name: str, annotation: Any, flag: str, help: str) -> FlagSpec:
    return FlagSpec(name, annotation, None, help, (flag,))


#: the judge's settings: every command that calls the judge takes them, and the pytest plugin (as
#: ``--ragbridge-judge-model`` ...); each sets the JudgeConfig field `JUDGE_SETTING` names
JUDGE_FLAGS: tuple[FlagSpec, ...] = (
    _judge("judge_model", Optional[str], "--judge-model", "Judge model name."),
    _judge("judge_base_url", Optional[str], "--judge-base-url",
           "Base URL of the judge (OpenAI-compatible; see docs/judges.md)."),
    _judge("judge_api_key_env", Optional[str], "--judge-api-key-env",
           "Environment variable that holds the judge's key (default OPENAI_API_KEY; none needed on this "
           "machine)."),
    _judge("embedding_model", Optional[str], "--embedding-model",
           "Embedding model name, for metrics that embed."),
    _judge("cache_mode", Optional[str], "--cache-mode", "Judge cache: read-write, read-only or off."),
    _judge("cache_path", Optional[Path], "--cache-path", "Judge cache file (SQLite)."),
    _judge("max_concurrency", Optional[int], "--max-concurrency",
           "Judge calls in flight at once, across all backends (default 8)."),
    _judge("requests_per_minute", Optional[float], "--requests-per-minute",
           "Judge requests started per minute, across all backends and workers (default: no limit)."),
    _judge("judge_timeout", Optional[float], "--judge-timeout",
           "Seconds one judge call may take, the whole answer included (default 120; `ragbridge judge "
           "check` proposes one)."),
    _judge("judge_structured_output", Optional[str], "--judge-structured-output",
           "How a request for a JSON object is sent to the judge: auto (default), schema, json_object, tool "
           "or prompt; a backend's option structured_output sets its own."),
    _judge("config", Optional[Path], "--config",
           "Config file (default: ./ragbridge.toml, then [tool.ragbridge] in ./pyproject.toml)."),
)

#: a `JUDGE_FLAGS` name -> the JudgeConfig field it sets (None: ``config``, the file the others are read from)
JUDGE_SETTING: dict[str, Optional[str]] = {
    spec.name: {"judge_model": "model", "judge_base_url": "base_url", "judge_api_key_env": "api_key_env",
                "judge_timeout": "timeout", "judge_structured_output": "structured_output",
                "config": None}.get(spec.name, spec.name)
    for spec in JUDGE_FLAGS
}


def unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """A type without ``Annotated`` and ``Optional``: (the type, its annotated metadata, whether None
    is allowed)."""
    metadata: list[Any] = []
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *more = typing.get_args(annotation)
            metadata += more
        elif origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation):
            rest = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = True
            if len(rest) != 1:
                return typing.Union[tuple(rest)], metadata, optional
            annotation = rest[0]
        else:
            return annotation, metadata, optional
