"""The plugin manager: loads the ``ragbridge`` entry-point group and collects what plugins register."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

import pluggy

from . import hookspecs

if TYPE_CHECKING:  # pragma: no cover
    from .backend import Backend

ENTRY_POINT_GROUP = "ragbridge"

pm = pluggy.PluginManager("ragbridge")
pm.add_hookspecs(hookspecs)

#: plugins whose entry point failed to load: name -> error message (shown by ``ragbridge backends``)
load_errors: dict[str, str] = {}

_loaded = False


def load_plugins() -> pluggy.PluginManager:
    """Register every plugin of the ``ragbridge`` entry-point group once, built-in ones included.

    A plugin that fails to import is reported in ``load_errors`` rather than breaking the CLI.
    """
    global _loaded
    if _loaded:
        return pm
    _loaded = True
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    seen = set()
    for ep in sorted(eps, key=lambda e: e.name):
        if ep.name in seen or pm.has_plugin(ep.name):
            continue
        seen.add(ep.name)
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the tool down
            load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
            continue
        pm.register(plugin, name=ep.name)
    # The built-in backends (native, rubric) and core formats are always there, even when the
    # distribution's metadata is missing (a source checkout): register them like any entry point would.
    for name, modname in (("native", "ragbridge.native"), ("rubric", "ragbridge.rubric"),
                          ("formats", "ragbridge.formats.canonical")):
        if name in load_errors:
            continue
        if not pm.has_plugin(name) and modname not in {
            getattr(p, "__name__", None) for p in pm.get_plugins()
        }:
            pm.register(importlib.import_module(modname), name=name)
    return pm


def get_backends() -> dict[str, "Backend"]:
    """Every registered backend by name, available or not."""
    load_plugins()
    found: dict[str, Backend] = {}

    def register(backend: "Backend") -> None:
        if not backend.name:
            raise ValueError(f"backend {backend!r} has no name")
        if backend.name in found:
            raise ValueError(f"two plugins register a backend named {backend.name!r}")
        found[backend.name] = backend

    pm.hook.ragbridge_register_backends(register=register)
    return found


def register_commands(cli) -> None:
    load_plugins()
    pm.hook.ragbridge_register_commands(cli=cli)


def _reset_for_tests() -> None:  # pragma: no cover - used by the test-suite only
    global _loaded
    for plugin in list(pm.get_plugins()):
        pm.unregister(plugin)
    load_errors.clear()
    _loaded = False
