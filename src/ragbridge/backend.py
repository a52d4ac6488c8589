"""What a backend is: a name, the metrics it offers, and an async scorer.

A backend plugin subclasses `Backend` and registers an instance through the
``ragbridge_register_backends`` hook. See ``plugins/README.md`` for a worked example.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, ClassVar, Optional, Sequence

from .schema import Case, Score

if TYPE_CHECKING:  # pragma: no cover
    from .judge import JudgeGateway

__all__ = ["Backend", "MetricSpec", "RunOptions", "ScoringContext", "resolve_metric"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric a backend offers.

    ``name`` is the canonical name; a name ending in ``@k`` takes a cut-off (``recall@k`` is run as
    ``recall@5`` with ``--k 5``, or asked for directly as ``recall@10``). ``requires`` lists the case
    inputs it needs (names from ``Case.fields_present()``: ``answer``, ``contexts``,
    ``context_text``, ``relevant``, ``reference``, ``reference_contexts``); a case that lacks one gets
    an undefined score with the reason, and the backend is never called for it. ``digest`` is the
    content hash of the definition the metric is judged by (a rubric), recorded in run.json so that
    scores of two definitions are never compared silently.
    """

    name: str
    native_name: Optional[str] = None
    requires: tuple[str, ...] = ()
    judge: bool = False
    description: str = ""
    digest: Optional[str] = None


@dataclass
class RunOptions:
    """Options every backend may read. ``backend_options`` holds per-backend settings by name.

    ``generator_model`` names the model of the system under test (a case's
    ``metadata["generator_model"]`` says it per case): a run judged by the same model is flagged."""

    k: int = 5
    gain: str = "linear"
    case_sensitive: bool = False
    decline_phrases: Optional[list[str]] = None
    backend_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    generator_model: Optional[str] = None

    def public(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "gain": self.gain,
            "case_sensitive": self.case_sensitive,
            "decline_phrases": self.decline_phrases,
            "backend_options": self.backend_options,
            "generator_model": self.generator_model,
        }


@dataclass
class ScoringContext:
    """Handed to ``Backend.score``: the run's options and, for judged metrics, the judge gateway."""

    options: RunOptions
    judge: Optional["JudgeGateway"] = None
    stats: dict[str, Any] = field(default_factory=dict)


_K_RE = re.compile(r"^(?P<base>[a-z_]+)@(?P<k>\d+)$")


def resolve_metric(spec_name: str, requested: str, k: int) -> Optional[str]:
    """The concrete metric name if ``requested`` asks for ``spec_name``, else None.

    ``recall@k`` matches ``recall@k`` (-> ``recall@{k}``), ``recall@10`` and ``recall`` (-> ``recall@{k}``).
    """
    if spec_name.endswith("@k"):
        base = spec_name[:-2]
        if requested in (spec_name, base):
            return f"{base}@{k}"
        m = _K_RE.match(requested)
        if m and m.group("base") == base and int(m.group("k")) > 0:
            return requested
        return None
    return spec_name if requested == spec_name else None


class Backend:
    """Base class for a backend. Subclasses set the class attributes and implement ``metrics`` and ``score``.

    ``score`` is an async generator: it yields one ``Score`` per case it was given, for the one metric
    asked, as soon as each is ready (the runner writes each to disk on arrival, so a killed run loses
    nothing already scored). A failure on one case is that Score's ``error``; ``score`` raises only
    for a fault that makes every case fail (and the runner records it for each case).
    A backend reaches the network only through ``ctx.judge``.
    """

    name: ClassVar[str] = ""
    #: the distribution whose presence makes the backend available (None: always available)
    library: ClassVar[Optional[str]] = None
    #: the import name to probe (defaults to ``library``)
    module: ClassVar[Optional[str]] = None
    install_hint: ClassVar[str] = ""

    def version(self) -> Optional[str]:
        """The library's installed version, or the ragbridge version for a library-less backend."""
        if self.library is None:
            from . import __version__

            return __version__
        try:
            return importlib.metadata.version(self.library)
        except importlib.metadata.PackageNotFoundError:
            return None

    def available(self) -> bool:
        if self.library is None:
            return True
        module = self.module or self.library.replace("-", "_")
        try:
            return importlib.util.find_spec(module) is not None and self.version() is not None
        except (ImportError, ValueError):
            return False

    def metrics(self) -> list[MetricSpec]:  # pragma: no cover - abstract
        raise NotImplementedError

    def metrics_for(self, options: RunOptions) -> list[MetricSpec]:
        """The metrics offered in a run with these options (default: ``metrics()``). A backend whose
        metrics are data named in ``options.backend_options`` overrides it, and raises ValueError
        (naming the file, field and fix) for options it cannot use, before anything is written."""
        return self.metrics()

    def needs_judge(self, metric: str) -> bool:
        for spec in self.metrics():
            if resolve_metric(spec.name, metric, 1) is not None or spec.name == metric:
                return spec.judge
        return False

    async def score(
        self, metric: str, cases: Sequence[Case], ctx: ScoringContext
    ) -> AsyncIterator[Score]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield  # makes this an async generator
