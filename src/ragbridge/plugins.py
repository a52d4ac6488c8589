"""The plugin manager: ragbridge's built-in plugins, then the ``ragbridge`` entry-point group.

The built-in plugins (`DEFAULT_PLUGINS`: the native backend, the canonical dataset formats, TREC, the
trace formats, the rubric judge and the synthetic-set generator, with their commands) are registered
from that list, by module path, so a source checkout without package metadata still has every
backend and format. Every other plugin, the bundled library backends (``plugins/ragbridge_*``)
included, is found through the ``ragbridge`` entry-point group, like a third party's.

ragbridge's own commands (run, compare, report, diff, gate, ...) are not plugins: they are the
command line itself, ``ragbridge.commands``, and a plugin's commands join them through the
``ragbridge_register_commands`` hook when the console script starts.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Optional

import pluggy

from . import hookspecs
from .errors import PluginError

#: a `ragbridge.backend.Backend`, named and not imported: the plugin manager sits below every part it
#: loads (``ragbridge.metrics`` asks it for the metrics plugins register)
AnyBackend = Any

ENTRY_POINT_GROUP = "ragbridge"

#: the built-in plugins, by module path, registered in this order before any entry point (pluggy
#: calls the last registered first)
DEFAULT_PLUGINS = (
    "ragbridge.formats.canonical",
    "ragbridge.formats.trec",
    "ragbridge.traces",
    "ragbridge.native",
    "ragbridge.rubric",
    "ragbridge.synthetic",
)

pm = pluggy.PluginManager("ragbridge")
pm.add_hookspecs(hookspecs)

#: of `DEFAULT_PLUGINS`, those that add commands: the only built-in ones the command line imports
#: before a command needs the others (``ragbridge --help`` imports no backend, format or schema)
COMMAND_PLUGINS = ("ragbridge.rubric", "ragbridge.synthetic")

#: plugins that failed to load: name -> error message (shown by ``ragbridge backends``)
load_errors: dict[str, str] = {}

_loaded = False
_entry_points_loaded = False
#: the distribution of each ``ragbridge`` entry point, by the top-level package it names (`plugin_version`)
_entry_point_dists: dict[str, Any] = {}


def load_plugins() -> pluggy.PluginManager:
    """Register the built-in plugins and every plugin of the ``ragbridge`` entry-point group, once.

    A plugin that fails to import is reported in ``load_errors`` rather than breaking the CLI. An
    entry point into ragbridge's own package (the metadata of an older install) is ignored: the
    built-in plugins are `DEFAULT_PLUGINS`.
    """
    global _loaded
    if _loaded:
        return pm
    _loaded = True
    for modname in DEFAULT_PLUGINS:
        if not pm.has_plugin(modname):
            pm.register(importlib.import_module(modname), name=modname)
    _load_entry_points()
    return pm


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.dist is not None:
            _entry_point_dists[ep.module.partition(".")[0]] = ep.dist
        if ep.module.split(".")[0] == "ragbridge" or pm.has_plugin(ep.name) or ep.name in load_errors:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the tool down
            load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
            continue
        if not pm.is_registered(plugin):
            pm.register(plugin, name=ep.name)


class LazyBackend:
    """A backend registered by where its class lives, ``LazyBackend("mine",
    "my_plugin.backend:MyBackend")``: registering it imports nothing; the module is imported
    and the backend made the first time anything but its ``name`` is asked of it, so a run imports the
    backends it uses and no other. It stands for the backend everywhere (`get_backends`)."""

    def __init__(self, name: str, target: str):
        self.name = name
        self._target = target
        self._backend: Optional[AnyBackend] = None
        #: the plugin that registered it (set by `get_backends`), named in its errors
        self.plugin: Optional[str] = None

    def load(self) -> AnyBackend:
        """The backend itself (made once); a `PluginError` naming the plugin when its module fails to
        import (an options model without a default fails there: `ragbridge.options.BackendOptions`)."""
        if self._backend is None:
            module, _, cls = self._target.partition(":")
            plugin = self.plugin or module.partition(".")[0]
            try:
                backend = getattr(importlib.import_module(module), cls)()
            except Exception as exc:  # a broken plugin is that plugin's error, not a traceback
                raise PluginError(f"plugin {plugin!r} failed to load: backend {self.name!r} "
                                  f"({self._target}): {type(exc).__name__}: {exc}") from exc
            if backend.name != self.name:
                raise PluginError(f"plugin {plugin!r}: {self._target} makes backend {backend.name!r}, "
                                  f"registered as {self.name!r}")
            self._backend = backend
        return self._backend

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and the like ask before the instance is complete
            raise AttributeError(attr)
        return getattr(self.load(), attr)

    def __repr__(self) -> str:
        return f"LazyBackend({self.name!r}, {self._target!r})"


def lazy_names(package: str, names: dict[str, str]) -> Any:
    """A package's module ``__getattr__`` that imports each of ``names`` (name -> the module it is in,
    relative to ``package``: ``{"MyBackend": ".backend"}``) when it is first used, so that registering
    the plugin imports none of its modules: ``__getattr__ = lazy_names(__name__, {...})``."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(names[name], package), name)

    return __getattr__


def get_backends() -> dict[str, AnyBackend]:
    """Every registered backend by name, available or not (a `LazyBackend` stands for its backend; the
    plugin that registered it is its ``plugin``)."""
    load_plugins()
    found: dict[str, AnyBackend] = {}

    for impl in reversed(pm.hook.ragbridge_register_backends.get_hookimpls()):  # pluggy's call order
        plugin = impl.plugin_name

        def register(backend: AnyBackend, plugin: str = plugin) -> None:
            if not backend.name:
                raise ValueError(f"backend {backend!r} has no name")
            if backend.name in found:
                raise ValueError(f"two plugins register a backend named {backend.name!r}")
            if isinstance(backend, LazyBackend):
                backend.plugin = plugin
            found[backend.name] = backend

        impl.function(register=register)
    return found


def plugin_version(backend: AnyBackend) -> Optional[str]:
    """``DISTRIBUTION==VERSION`` of the installed distribution that ships ``backend``'s code (a
    plugin's own package, ``ragbridge-mylib==0.1.1``), or None for a backend of ragbridge's own
    distribution or of code no distribution holds. Found by the distribution whose ``ragbridge``
    entry point names the package, else the one named as the package (``ragbridge_mylib``)."""
    # a library version's backend (mylib==1.2): mylib's plugin (asked of its own attributes: asking a
    # LazyBackend for one it lacks would load it)
    inner = vars(backend).get("inner", backend)
    if isinstance(inner, LazyBackend):
        module = inner._target.partition(":")[0]
    else:
        module = type(inner).__module__
    top = module.partition(".")[0]
    if top == "ragbridge":
        return None
    load_plugins()
    dist = _entry_point_dists.get(top)
    if dist is None:
        try:
            dist = importlib.metadata.distribution(top)
        except importlib.metadata.PackageNotFoundError:
            return None
    name = dist.metadata["Name"]
    if not name or name.replace("-", "_").lower() == "ragbridge":
        return None
    return f"{name}=={dist.version}"


def usable_backends() -> dict[str, AnyBackend]:
    """`get_backends` less the backends whose plugin cannot be used (a `LazyBackend` whose module
    fails to import or breaks a rule: `PluginError`), each of which is put in ``load_errors`` as a
    plugin that fails to import is: for what asks every backend (``ragbridge backends``, the hints of
    a run that computed nothing), so that one broken plugin does not take the others down."""
    found: dict[str, AnyBackend] = {}
    for name, backend in get_backends().items():
        if isinstance(backend, LazyBackend):
            try:
                backend.load()
            except PluginError as exc:
                load_errors[backend.plugin or name] = plugin_problem(exc)
                continue
        found[name] = backend
    return found


def plugin_problem(exc: PluginError) -> str:
    """A `PluginError`'s words after the plugin's name (``plugin 'x' failed to load: ...``), as
    ``load_errors`` holds them."""
    text = str(exc)
    if text.startswith("plugin "):
        head, sep, rest = text.partition(" failed to load: ")
        if not sep:
            head, sep, rest = text.partition(": ")
        return rest if sep else text
    return text


def registered(hook: str, kind: str) -> dict[str, Any]:
    """What the plugins register through ``hook`` (called with ``register``), by ``name``; a name
    registered twice is an error naming ``kind``."""
    load_plugins()
    found: dict[str, Any] = {}

    def register(item: Any) -> None:
        if item.name in found:
            raise ValueError(f"two plugins register a {kind} named {item.name!r}")
        found[item.name] = item

    getattr(pm.hook, hook)(register=register)
    return found


def register_commands(cli) -> None:
    """Add every plugin's commands to ``cli``. Only the plugins that add commands are imported here
    (`COMMAND_PLUGINS` and the entry points, whose registration is cheap); `load_plugins` registers
    the other built-in plugins when something first needs them."""
    if not _loaded:
        for modname in COMMAND_PLUGINS:
            if not pm.has_plugin(modname):
                pm.register(importlib.import_module(modname), name=modname)
        _load_entry_points()
    pm.hook.ragbridge_register_commands(cli=cli)

