"""The judge: one configuration, and one gateway that every backend's library talks to.

Each backend points its library (or its own client) at a :class:`JudgeGateway` with the
gateway's own key :attr:`JudgeGateway.api_key`. Two ways in, one behaviour (routing, cache, bounds,
retries, counts, audit):

* **in-process transport** (what ragbridge's own backends use): the library's ``httpx`` client gets
  ``transport=gw.transport()`` (or ``gw.async_transport()``) and the base URL
  ``gw.base_url(backend, metric, case_id, in_process=True)``, so a request reaches the gateway's
  code without crossing a socket;
* **loopback HTTP**: an OpenAI-compatible server on 127.0.0.1 at ``gw.base_url(backend, metric,
  case_id)``, for libraries whose HTTP client cannot be given a transport; every request on it must
  carry the gateway's key, which is random per gateway and lives in memory only.

The real key never enters a library object or file: the gateway adds it when it forwards a request.

The package, one concern a module, each importing only the ones listed before it:

* :mod:`~ragbridge.judge.config`: :class:`JudgeConfig` (and where it is read from), the errors,
  :func:`redact_url`;
* :mod:`~ragbridge.judge.repeat`: how a repeat's index travels with its calls (its own cache key);
* :mod:`~ragbridge.judge.cache`: :class:`JudgeCache`, the SQLite response cache;
* :mod:`~ragbridge.judge.upstream`: the keep-alive connection pool to the real judge;
* :mod:`~ragbridge.judge.server`: the loopback socket's handler (on :class:`FastRequestHandler`, the
  lean handler base the stub judge shares), and what both ways in share: the ``Serving`` interface
  of the gateway they call and the ``Result`` they send back;
* :mod:`~ragbridge.judge.transport`: :class:`JudgeTransport`, :class:`AsyncJudgeTransport`;
* :mod:`~ragbridge.judge.gateway`: :class:`JudgeGateway` (caching, bounds, retries, accounting in
  :class:`Usage`, audit log, ``forget``).
"""

from typing import TYPE_CHECKING, Any

from .config import JudgeConfig, JudgeConfigError, JudgeError, JudgeUnavailable, ModelPrice, redact_url
from .repeat import REPEAT_HEADER, repeat_case_id, split_repeat

if TYPE_CHECKING:  # pragma: no cover
    from .cache import JudgeCache
    from .gateway import TAG_HEADER, Budget, JudgeGateway, Usage
    from .server import FastRequestHandler
    from .transport import AsyncJudgeTransport, JudgeTransport

# imported when first asked for: a run with no judged metric (the native backend) needs only the
# configuration, not the HTTP client behind the gateway
_LAZY = {"JudgeCache": "cache", "TAG_HEADER": "gateway", "JudgeGateway": "gateway", "Budget": "gateway",
         "Usage": "gateway", "FastRequestHandler": "server", "JudgeTransport": "transport",
         "AsyncJudgeTransport": "transport"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "JudgeConfig",
    "JudgeGateway",
    "Budget",
    "ModelPrice",
    "REPEAT_HEADER",
    "repeat_case_id",
    "split_repeat",
    "JudgeCache",
    "Usage",
    "JudgeError",
    "JudgeConfigError",
    "JudgeUnavailable",
    "redact_url",
    "TAG_HEADER",
    "FastRequestHandler",
    "JudgeTransport",
    "AsyncJudgeTransport",
]
