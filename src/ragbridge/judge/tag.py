"""What a judge call is counted under: :class:`CallTag` (backend, metric, case, repeat), and how it
travels with a request.

A tag reaches the gateway in one of three ways, strongest first: the ``X-Ragbridge-Tag`` request
header (:meth:`CallTag.header` / :meth:`CallTag.from_header`), the ``tag_scope`` the request was made
in (in-process transports: :func:`current_tag`), or a path tag ``/t/<token>/v1`` of a base URL made by
:meth:`ragbridge.judge.client.JudgeClient.base_url`. The gateway reads it once, at its door, into a
``CallTag``; everything after (cache key, counts, budget, audit log) takes the tag as it is.

Repeats: a judged metric taken ``--repeats N`` times is N distinct judge calls per request. The
repeat index is the tag's ``repeat``; for ``repeat > 0`` it is part of the cache key (repeat 0 keeps
the key it always had) and is told to the upstream in ``X-Ragbridge-Repeat`` (ragbridge's stub judge
draws its per-repeat noise from it; a real endpoint ignores it).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Optional
from urllib.parse import quote, unquote

__all__ = ["CallTag", "TAG_HEADER", "REPEAT_HEADER", "UNTAGGED", "current_tag", "scoped"]

TAG_HEADER = "X-Ragbridge-Tag"
REPEAT_HEADER = "X-Ragbridge-Repeat"


@dataclass(frozen=True)
class CallTag:
    """The score a judge call belongs to: (backend, metric, case_id) and the repeat index."""

    backend: Optional[str] = None
    metric: Optional[str] = None
    case_id: Optional[str] = None
    repeat: int = 0

    def header(self) -> str:
        """The ``X-Ragbridge-Tag`` value: the fields percent-encoded, ``/``-separated (the repeat
        only when it is not 0)."""
        parts = [quote(p or "", safe="") for p in (self.backend, self.metric, self.case_id)]
        if self.repeat:
            parts.append(str(self.repeat))
        return "/".join(parts)

    @classmethod
    def from_header(cls, value: str) -> "CallTag":
        """The tag a header value stands for (a value of three fields: repeat 0)."""
        parts = value.split("/", 3) + ["", "", ""]
        repeat = parts[3].strip()
        return cls(unquote(parts[0]) or None, unquote(parts[1]) or None, unquote(parts[2]) or None,
                   int(repeat) if repeat.isdigit() else 0)

    def matches(self, backend: Optional[str], metric: Optional[str], case_id: Optional[str],
                repeat: Optional[int]) -> bool:
        """Whether this tag has every field given (None: any)."""
        return ((backend is None or self.backend == backend) and (metric is None or self.metric == metric)
                and (case_id is None or self.case_id == case_id)
                and (repeat is None or self.repeat == repeat))


UNTAGGED = CallTag()

_CURRENT: contextvars.ContextVar[Optional[CallTag]] = contextvars.ContextVar("ragbridge_judge_tag",
                                                                            default=None)


def current_tag() -> Optional[CallTag]:
    """The tag of the innermost ``tag_scope`` of this context (thread / asyncio task), or None."""
    return _CURRENT.get()


class scoped:  # noqa: N801 - used as a context manager, like contextlib's
    """``with scoped(tag):`` requests made in this context are counted under ``tag``."""

    __slots__ = ("tag", "_token")

    def __init__(self, tag: CallTag) -> None:
        self.tag = tag

    def __enter__(self) -> None:
        self._token = _CURRENT.set(self.tag)

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)
