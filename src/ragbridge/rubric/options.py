"""The rubric backend's options (``--option rubric.KEY=VALUE``, ``[backends.rubric]``; ``--rubric FILE``
is ``files``)."""

from __future__ import annotations

import os
from typing import Any

from pydantic import field_validator

from ..judged_backend import JudgedOptions
from ..options import Whole, option
from .parse import DEFAULT_RETRIES

__all__ = ["RubricOptions"]


class RubricOptions(JudgedOptions):
    """Which rubrics the run judges by, and how often an unusable reply is asked again
    (`ragbridge.rubric.parse`; how a reply is asked for is every judged backend's
    ``structured_output``)."""

    files: list[str] = option(
        default_factory=list, help="Rubric files (TOML) to judge by, beside the built-in rubrics (one of the "
                                   "same name replaces it).", flag="--rubric")
    rubrics: list[Any] = option(
        default_factory=list, help="Rubrics to judge by, from Python: Rubric objects or mappings.")
    retries: Whole = option(
        DEFAULT_RETRIES, "Re-asks of a reply the rubric cannot use (at most the judge's max_retries).", ge=0)

    @field_validator("files", mode="before")
    @classmethod
    def _paths(cls, value: Any) -> Any:
        """One file, or paths, as the texts of a list."""
        if isinstance(value, (str, os.PathLike)):
            value = [value]
        if isinstance(value, (list, tuple)):
            return [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value]
        return value
