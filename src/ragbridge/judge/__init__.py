"""The judge: one configuration, and one gateway that every backend's library talks to.

Each backend points its library (or its own client) at the run's judge, a :class:`JudgeClient`
(the :class:`JudgeGateway` itself, or a Ray worker's ``GatewayClient``), with the gateway's own key
:attr:`JudgeGateway.api_key`. Two ways in, one behaviour (routing, cache, bounds, retries, counts,
audit):

* **in-process transport** (what ragbridge's own backends use): the library's ``httpx`` client gets
  ``transport=gw.transport()`` (or ``gw.async_transport()``) and the base URL
  ``gw.base_url(backend, metric, case_id, in_process=True)``, so a request reaches the gateway's
  code without crossing a socket;
* **loopback HTTP**: an OpenAI-compatible server on 127.0.0.1 at ``gw.base_url(backend, metric,
  case_id)``, for libraries whose HTTP client cannot be given a transport; every request on it must
  carry the gateway's key, which is random per gateway and lives in memory only.

The real key never enters a library object or file: the gateway adds it when it forwards a request,
in the upstream's dialect.

The package, one concern a module:

* :mod:`~ragbridge.judge.config`: :class:`JudgeConfig` (and where it is read from), the errors,
  :func:`redact_url`;
* :mod:`~ragbridge.judge.tag`: :class:`CallTag`, what a call is counted under (backend, metric,
  case, repeat), and how it travels with a request;
* :mod:`~ragbridge.judge.client`: :class:`JudgeClient`, the interface a backend uses;
* :mod:`~ragbridge.judge.dialect`: how a request is addressed and authorised upstream;
* :mod:`~ragbridge.judge.redact`: every form and charset of the key, removed;
* :mod:`~ragbridge.judge.strict`: an answer whose JSON repeats a key, found;
* :mod:`~ragbridge.judge.cache`: :class:`JudgeCache`, the SQLite response cache;
* :mod:`~ragbridge.judge.store`: the answers (cache, single flight, a dry run's, ``forget``);
* :mod:`~ragbridge.judge.ledger`: :class:`Usage`, :class:`Budget`, prices;
* :mod:`~ragbridge.judge.audit`: the audit log;
* :mod:`~ragbridge.judge.upstream`: the transport contract to the real judge and the retry policy;
* :mod:`~ragbridge.judge.server`: the loopback socket's handler (on :class:`FastRequestHandler`, the
  lean handler base the stub judge shares), and what both ways in share;
* :mod:`~ragbridge.judge.transport`: :class:`JudgeTransport`, :class:`AsyncJudgeTransport`;
* :mod:`~ragbridge.judge.preflight`: the check before a run;
* :mod:`~ragbridge.judge.gateway`: :class:`JudgeGateway`, the pipeline of those steps;
* :mod:`~ragbridge.judge.remote`: ``GatewayClient``, the gateway seen from a Ray worker.
"""

from typing import TYPE_CHECKING, Any

from .config import (JudgeConfig, JudgeConfigError, JudgeError, JudgeUnavailable, ModelPrice, identity_url,
                     redact_url)
from .tag import REPEAT_HEADER, TAG_HEADER, CallTag

if TYPE_CHECKING:  # pragma: no cover
    from .cache import JudgeCache
    from .client import JudgeClient
    from .gateway import JudgeGateway
    from .ledger import Budget, Usage
    from .server import FastRequestHandler
    from .transport import AsyncJudgeTransport, JudgeTransport

# imported when first asked for: a run with no judged metric (the native backend) needs only the
# configuration, not the HTTP client behind the gateway
_LAZY = {"JudgeCache": "cache", "JudgeClient": "client", "JudgeGateway": "gateway", "Budget": "ledger",
         "Usage": "ledger", "FastRequestHandler": "server", "JudgeTransport": "transport",
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
    "JudgeClient",
    "JudgeGateway",
    "CallTag",
    "Budget",
    "ModelPrice",
    "REPEAT_HEADER",
    "TAG_HEADER",
    "JudgeCache",
    "Usage",
    "JudgeError",
    "JudgeConfigError",
    "JudgeUnavailable",
    "redact_url",
    "identity_url",
    "FastRequestHandler",
    "JudgeTransport",
    "AsyncJudgeTransport",
]
