"""Planning a run: which backend scores which concrete metric, checked before anything is called.

A metric request is a canonical name, with or without its cutoff (``recall@5``, ``recall``,
``faithfulness``); `ragbridge.metrics.resolve_metric` turns it into the concrete name a backend
scores. `RunError` is the error of a run that cannot start as asked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from ..backend import MetricSpec, RunOptions
from ..metrics import resolve_metric
from ..options import pass_mark_of
from ..plugins import get_backends
from .errors import RunError
from .isolated import IsolatedBackend, backend_named, shipped_versions, with_versions

__all__ = ["RunError", "DEFAULT_BACKENDS", "Plan", "plan_metrics"]

DEFAULT_BACKENDS = ("native",)

#: backend name -> the (concrete metric, spec) pairs it scores
Plan = dict[str, list[tuple[str, MetricSpec]]]


def unsupported(name: str, backend: Any) -> str:
    """What a run says of a backend whose installed library is outside the versions it supports."""
    shipped = shipped_versions(backend)
    isolated = (f", or run a version its plugin ships in an environment of its own: --backend "
                f"{name}=={shipped[-1]} (ragbridge environments list)") if shipped else ""
    return (f"backend {name!r}: {backend.library} {backend.version()} is installed, and the {name} backend "
            f"supports {backend.library}{backend.supports}: install a supported version "
            f"({backend.install_hint or 'see its documentation'}){isolated}")


def _guess(requested: str, names: Sequence[str]) -> str:
    """`` (did you mean 'recall@10'?)`` for a metric name close to one of ``names`` (``recall@k`` given
    the requested cut), else nothing."""
    import difflib

    base, at, cut = requested.partition("@")
    by_base = {n.partition("@")[0]: n for n in names}
    hint = difflib.get_close_matches(base, list(by_base), 1)
    if not hint:
        return ""
    name = by_base[hint[0]]
    if at and name.endswith("@k"):
        name = f"{name[:-2]}@{cut}"
    return f" (did you mean {name!r}?)"


def plan_metrics(
    backends: Sequence[str] | None, metrics: Sequence[str] | None, k: int,
    options: Optional[RunOptions] = None,
) -> Plan:
    """Which concrete metrics each backend will score. Raises `RunError` for anything unknown.

    With no ``metrics``, every metric of each backend is planned but those that are not
    ``MetricSpec.default``; a requested metric that a backend does not offer is skipped for that
    backend, but must be offered by at least one of them. A request naming a ``MetricSpec.group``
    asks for every metric of the group. A backend ``options.versions`` gives a version runs at it
    (``mylib`` is planned as ``mylib==1.2``).
    """
    if k < 1:
        raise RunError(f"k must be a positive integer (RunOptions(k=5)), got {k}",
                       cli=f"--k must be a positive integer, got {k}")
    registry = get_backends()
    # a backend named without a version runs at the one the options set for it (ragbridge.toml's)
    names = with_versions(list(backends or DEFAULT_BACKENDS), options.versions if options else {})
    plan: Plan = {}
    offers: dict[str, list[MetricSpec]] = {}
    for name in names:
        backend = backend_named(name, registry)
        if isinstance(backend, IsolatedBackend):
            backend.environment_spec()  # a version its plugin has a lock for, or the error saying which
        elif not backend.available():
            raise RunError(
                f"backend {name!r} is not available: its library is not installed "
                f"(install it with: {backend.install_hint or 'see its documentation'})"
            )
        elif backend.supported() is False:
            raise RunError(unsupported(name, backend))
        try:
            specs = offers[name] = _with_pass_mark(backend, backend.metrics_for(options or RunOptions(k=k)),
                                                   options)
        except ValueError as exc:  # options the backend cannot use (e.g. a bad rubric file)
            raise RunError(str(exc)) from None
        chosen: list[tuple[str, MetricSpec]] = []
        for spec in specs:
            if metrics:
                for req in metrics:
                    concrete = resolve_metric(spec.name, spec.name if req == spec.group else req, k)
                    if concrete and concrete not in [c for c, _ in chosen]:
                        chosen.append((concrete, spec))
            elif spec.default:
                chosen.append((resolve_metric(spec.name, spec.name, k) or spec.name, spec))
        plan[name] = chosen
    if metrics:
        offered = {c for chosen in plan.values() for c, _ in chosen}
        for req in metrics:
            if not any(
                resolve_metric(spec.name, req, k) or req == spec.group
                for chosen in plan.values() for _, spec in chosen
            ) and req not in offered:
                all_names = sorted({s.name for n in names for s in offers[n]}
                                   | {s.group for n in names for s in offers[n] if s.group})
                raise RunError(
                    f"no selected backend offers metric {req!r}{_guess(req, all_names)}; "
                    f"metrics of {', '.join(names)}: {', '.join(all_names)}"
                )
    return plan


def _with_pass_mark(backend: Any, specs: list[MetricSpec], options: Optional[RunOptions]) -> list[MetricSpec]:
    """``specs`` with the backend's pass-mark option (``option(..., pass_mark=True)``) as each one's
    ``pass_mark`` when the backend declares one: the run's verdicts (run.json's ``pass_marks``) are
    then the backend's own rule."""
    own = backend.inner if isinstance(backend, IsolatedBackend) else backend  # mylib==1.2 takes mylib's
    opts = options.of(own) if options is not None else own.Options()
    marks = [pass_mark_of(opts, spec.name) for spec in specs]
    return [spec if mark is None else replace(spec, pass_mark=mark) for spec, mark in zip(specs, marks)]
