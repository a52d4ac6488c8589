"""The registered responders and the order they are tried in: `register`, `unregister`,
`responders`, `respond`.

Plugins add theirs through the ``ragbridge_register_stub_responders`` hook, asked once per process,
at the first answer; `generic` answers whatever no registered responder claims.
"""

from __future__ import annotations

import threading
from typing import Optional, Protocol

from .generic import generic
from .request import JudgeReply, JudgeRequest

__all__ = ["Responder", "register", "unregister", "responders", "respond"]


class Responder(Protocol):
    name: str

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]: ...


_REGISTRY: list[Responder] = []


def register(responder: Responder, *more: Responder, first: bool = True) -> Responder:
    """Add one responder or several, tried in the order given: ``first=True`` ahead of every
    registered one, else after them (always ahead of `generic`). A plugin registers its responders
    at once: ``register(*responders(), first=False)``. Returns ``responder`` (for `unregister`)."""
    added = [responder, *more]
    if first:
        _REGISTRY[:0] = added
    else:
        _REGISTRY.extend(added)
    return responder


def unregister(responder: Responder) -> None:
    """Remove a responder added by `register` (a test's own, say)."""
    _REGISTRY.remove(responder)


_plugins_lock = threading.Lock()
_plugins_asked = False


def _plugin_responders() -> None:
    """Once per process: plugins add their responders (the ``ragbridge_register_stub_responders`` hook)."""
    global _plugins_asked
    with _plugins_lock:
        if _plugins_asked:
            return
        _plugins_asked = True
        from ragbridge.plugins import load_plugins

        load_plugins().hook.ragbridge_register_stub_responders(register=register)


def responders() -> list[Responder]:
    """The responders in the order they are tried, `generic` last."""
    _plugin_responders()
    return [*_REGISTRY, _Generic()]


def respond(req: JudgeRequest) -> JudgeReply:
    """The first reply a responder gives, else `generic`'s."""
    _plugin_responders()
    for r in list(_REGISTRY):
        reply = r(req)
        if reply is not None:
            reply.responder = reply.responder or getattr(r, "name", type(r).__name__)
            return reply
    return generic(req)


class _Generic:
    name = "generic"

    def __call__(self, req: JudgeRequest) -> JudgeReply:
        return generic(req)
