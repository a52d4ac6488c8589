"""`RunError`: the error of a run that cannot start as asked."""

from __future__ import annotations

from ..errors import UserError

__all__ = ["RunError"]


class RunError(UserError, ValueError):
    """A run that cannot start as asked (unknown backend or metric, unavailable library, bad folder, an
    environment that cannot be built)."""
