"""The registered responders and the order they are tried in: `register`, `unregister`,
`responders`, `respond`.

Plugins add theirs through the ``ragbridge_register_stub_responders`` hook, asked once per process,
at the first answer; `generic` answers whatever no registered responder claims.
"""

from __future__ import annotations

import functools
import threading
from typing import Optional, Protocol

from ...errors import PluginError
from .generic import generic
from .request import JudgeReply, JudgeRequest

__all__ = ["Responder", "register", "unregister", "responders", "respond"]


class Responder(Protocol):
    name: str

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]: ...


_REGISTRY: list[Responder] = []
#: the plugin that registered each responder (by its id), for the errors that name it
_OWNER: dict[int, str] = {}


def register(responder: Responder, *more: Responder, first: bool = True,
             plugin: Optional[str] = None) -> Responder:
    """Add one responder or several, tried in the order given: ``first=True`` ahead of every
    registered one, else after them (always ahead of `generic`). A plugin registers its responders
    at once: ``register(*responders(), first=False)``. Returns ``responder`` (for `unregister`).
    Each must be callable (a `PluginError` naming ``plugin``, the plugin registering them, if not);
    what one returns is checked when it answers (`respond`)."""
    added = [responder, *more]
    who = f"plugin {plugin}" if plugin else "a plugin"
    for r in added:
        if not callable(r):
            hint = (" (register(*responders()) registers the responders of a list, each one a callable)"
                    if isinstance(r, (list, tuple)) else "")
            raise PluginError(f"{who} registered a stub responder that is not callable: a "
                              f"{type(r).__name__}{hint}; a responder takes a JudgeRequest and returns a "
                              "JudgeReply or None: fix the plugin", plugin=plugin)
    if plugin:
        _OWNER.update((id(r), plugin) for r in added)
    if first:
        _REGISTRY[:0] = added
    else:
        _REGISTRY.extend(added)
    return responder


def unregister(responder: Responder) -> None:
    """Remove a responder added by `register` (a test's own, say)."""
    _REGISTRY.remove(responder)
    if responder not in _REGISTRY:
        _OWNER.pop(id(responder), None)


_plugins_lock = threading.Lock()
_plugins_asked = False


_plugins_error: Optional[PluginError] = None


def _plugin_responders() -> None:
    """Once per process: plugins add their responders (the ``ragbridge_register_stub_responders``
    hook); a plugin that registers one wrongly is the error of every answer after (`PluginError`)."""
    global _plugins_asked, _plugins_error
    with _plugins_lock:
        if not _plugins_asked:
            _plugins_asked = True
            from ragbridge.plugins import load_plugins

            # each plugin's hook in the order pluggy calls them, with a register that knows its plugin
            try:
                for impl in reversed(load_plugins().hook.ragbridge_register_stub_responders.get_hookimpls()):
                    impl.function(**{arg: functools.partial(register, plugin=impl.plugin_name)
                                     for arg in impl.argnames})
            except PluginError as exc:
                _plugins_error = exc
    if _plugins_error is not None:
        raise _plugins_error


def responders() -> list[Responder]:
    """The responders in the order they are tried, `generic` last."""
    _plugin_responders()
    return [*_REGISTRY, _Generic()]


def respond(req: JudgeRequest) -> JudgeReply:
    """The first reply a responder gives, else `generic`'s."""
    _plugin_responders()
    for r in list(_REGISTRY):
        reply = r(req)
        if reply is not None and not isinstance(reply, JudgeReply):
            plugin = _OWNER.get(id(r))
            name = getattr(r, "name", getattr(r, "__name__", type(r).__name__))
            who = f'plugin {plugin}' if plugin else 'a plugin'
            raise PluginError(f"the stub responder {name!r} of {who} "
                              f"returned a {type(reply).__name__}, not a JudgeReply or None: fix the plugin",
                              plugin=plugin)
        if reply is not None:
            reply.responder = reply.responder or getattr(r, "name", type(r).__name__)
            return reply
    return generic(req)


class _Generic:
    name = "generic"

    def __call__(self, req: JudgeRequest) -> JudgeReply:
        return generic(req)
