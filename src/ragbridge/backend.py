"""What a backend is: a name, the metrics it offers, a run lifecycle, and an async scorer.

A backend plugin subclasses `Backend` and registers an instance through the
``ragbridge_register_backends`` hook. See ``plugins/README.md`` for a worked example.

The lifecycle of one run, as the runner drives it for every backend the run uses:

1. the backend's `Backend.environment` defaults are applied to ``os.environ`` (a variable the user
   set is left alone), so its library reads them when it is first imported;
2. ``session = await backend.open(ctx)``: whatever the backend shares between the metrics of the run
   (an HTTP client, a thread pool, a library object), handed back to it as ``ctx.session``;
3. ``backend.score(metric, cases, ctx)`` for each planned metric, concurrently with the other
   backends' and metrics' (each call has its own ``ctx``, all with the same ``ctx.session``);
4. ``await backend.close(ctx)`` once every metric is done (also after a failure or an interrupt), then
   the environment is restored.

A backend answers each case with a `Result` (``ragbridge.schema``): the value, the library's own
name and number, the reason, the error, the evidence. The run records it as a `Score`, adding the
backend and metric it answered for and its own bookkeeping (the repeat, judge calls, tokens, cost).

Two helpers keep the backends alike: `fan_out` scores the cases of one metric concurrently and
yields each `Result` as it is ready, and `error_text` is the one way a failure becomes a result's
``error``.

The cases ``score`` is handed are a sequence of `Case` (indexing or iterating it gives each case).
The runner's sequence holds them as canonical records and makes a `Case` only when one is asked for:
a backend that reads many cases and needs few fields reads `case_ids` and `case_record` instead,
which work on any sequence of cases.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import (TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, ClassVar, Mapping, Optional,
                    Sequence)

from pydantic import BaseModel, ConfigDict, field_validator

from .limits import not_text
from .metrics import resolve_metric
from .options import BackendOptions, OptionError, Whole, backend_options, config_tables, option
from .schema import Case, Result

if TYPE_CHECKING:  # pragma: no cover
    from .judge import JudgeGateway

__all__ = ["Backend", "BackendOptions", "MetricSpec", "RunOptions", "ScoringContext", "fan_out", "error_text",
           "case_ids", "case_record"]

#: the longest ``Score.error`` text (`error_text` cuts longer messages)
ERROR_TEXT_LIMIT = 2000

#: cases a judged backend scores at once per judge call the gateway lets through at once
#: (`ScoringContext.cases_in_flight`)
CASES_PER_CALL_SLOT = 2


@dataclass(frozen=True)
class MetricSpec:
    """One metric a backend offers.

    ``name`` is one of the canonical names of `ragbridge.metrics` (a custom rubric's name is the one
    exception); a name ending in ``@k`` takes a cut-off (``recall@k`` is run as ``recall@5`` with
    ``--k 5``, or asked for directly as ``recall@10``: `ragbridge.metrics.resolve_metric`).
    ``requires`` lists the case inputs it needs (names from ``Case.fields_present()``: ``question``,
    ``answer``, ``contexts``, ``context_text``, ``relevant``, ``reference``, ``reference_contexts``); a
    case that lacks one gets an undefined score with the reason, and the backend is never called for
    it. A judged metric always needs the question (added when not listed): a judge asked about an
    answer to no question measures nothing.
    ``digest`` is the content hash of the definition the metric is judged by (a rubric), recorded in
    run.json so that scores of two definitions are never compared silently. ``default``: planned
    when a run names no metric (False for a metric whose judge calls multiply, asked for by name, and
    for one that needs input the run does not have, such as the span metrics without span labels);
    ``group``: a name that asks for every metric of the group at once (``--metric GROUP``).
    ``pass_mark``: the threshold of the backend's own pass rule on the 0..1 value, when it has one
    that differs from the metric's default (a rubric's ``pass_at``), recorded in run.json
    (``pass_marks``) as the pass mark of this backend and metric.
    ``embedding_model``: the embedding model the metric asks the judge's server for when the judge
    names none (its library's default); None for a metric that embeds nothing. A run makes it the
    judge's ``embedding_model``, so the preflight checks that the server serves it and run.json
    records the model the scores came from.
    """

    name: str
    native_name: Optional[str] = None
    requires: tuple[str, ...] = ()
    judge: bool = False
    description: str = ""
    digest: Optional[str] = None
    default: bool = True
    group: Optional[str] = None
    pass_mark: Optional[float] = None
    embedding_model: Optional[str] = None

    def __post_init__(self) -> None:
        if self.judge and "question" not in self.requires:
            object.__setattr__(self, "requires", ("question", *self.requires))


#: the backend whose options run.json holds at the top level of ``options`` (``gain``, ``no_relevant``,
#: ...), where every run folder has held them; every other backend's are under ``backend_options``
FLAT_OPTIONS = "native"
#: one exact version of a library, as ``NAME==VERSION`` and ``[backends.NAME] version`` give it
EXACT_VERSION = re.compile(r"[A-Za-z0-9][^\s=<>~!,;*]*")


class RunOptions(BaseModel):
    """Options every backend may read, and each backend's own options by its name.

    ``k`` is the cut-off of the ``@k`` metric names (``recall@k`` is scored as ``recall@5``), for
    every backend. ``generator_model`` names the model of the system under test (a case's
    ``metadata["generator_model"]`` says it per case): a run judged by the same model is flagged.

    ``backend_options``: each backend's options, by the backend's name: its options model
    (``Backend.Options``) or a mapping of them, e.g. ``{"native": {"gain": "exponential"}}``;
    checked against each backend's model before a run starts (`resolved`), and read by a backend as
    its model (`of`). `load` adds those of ``ragbridge.toml``.

    ``versions``: the version of its library each backend named without one runs at, by the
    backend's name (``{"mylib": "1.2"}``: a run's ``mylib`` is ``mylib==1.2``, in an environment
    of its own: `ragbridge.run.isolated`); `load` reads them from the ``version`` key of
    ``[backends.NAME]``, which is no option of the backend.

    ``chunking`` is the chunking ``precision_omega`` measures (a `ragbridge.native.spans.Chunking`, or
    None); ``span_labels`` whether the cases hold span labels (set by the runner; the span metrics
    are planned by default only then)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    k: Whole = option(5, "Cut-off for the @k ranking metrics.", flag="--k", ge=1)
    generator_model: Optional[str] = option(None, "The system's own model.", flag="--generator-model")
    backend_options: dict[str, Any] = option(
        default_factory=dict, help="Each backend's options, by its name: its options model, or a mapping.")
    versions: dict[str, str] = option(
        default_factory=dict, help="The library version a backend named without one runs at, by its name.")
    chunking: Any = None
    span_labels: bool = False

    @field_validator("generator_model")
    @classmethod
    def _text(cls, value: Optional[str]) -> Optional[str]:
        shown = not_text(value) if isinstance(value, str) else None
        if shown is not None:
            raise ValueError(f"{shown} is not UTF-8 text: give it as UTF-8")
        return value

    @field_validator("versions")
    @classmethod
    def _versions(cls, value: dict[str, str]) -> dict[str, str]:
        for name, version in value.items():
            if not EXACT_VERSION.fullmatch(version):
                raise ValueError(f"{name}: {version!r} is not one exact version (e.g. \"0.3.9\")")
        return value

    def of(self, backend: "Backend") -> BackendOptions:
        """``backend``'s options in this run, as its options model (its defaults where none were
        given); `ragbridge.options.OptionError` for options it does not take."""
        given = self.backend_options.get(backend.name)
        if isinstance(given, backend.Options):
            return given
        name = backend.name
        return backend_options({name: backend}, [("python", {name: given or {}})])[name]

    def resolved(self, registry: Mapping[str, Any], names: Sequence[str] = ()) -> "RunOptions":
        """These options with each backend's as its options model: those given, and the defaults of
        the backends ``names`` (and `FLAT_OPTIONS`); `ragbridge.options.OptionError` for an unknown
        backend or an option a backend does not take."""
        given = self.backend_options
        wanted = {n: {} for n in dict.fromkeys([*names, FLAT_OPTIONS]) if n in registry and n not in given}
        checked = backend_options(registry, [("python", {**given, **wanted})])
        return self.model_copy(update={"backend_options": checked})

    @classmethod
    def load(cls, config_file: Optional[Path] = None, cwd: Optional[Path] = None,
             sources: Sequence[tuple[str, Mapping[str, Any]]] = (), **fields: Any) -> "RunOptions":
        """RunOptions of ``fields``, with the backends' options of ``[backends.NAME]`` in
        ``ragbridge.toml`` (``config_file`` instead, when given) and ``[tool.ragbridge.backends.NAME]``
        in ``pyproject.toml`` (in ``cwd``, default the working directory), under those of ``sources``
        (see `ragbridge.options.backend_options`) and of ``fields["backend_options"]``; and the
        ``version`` of each table (``versions``, ``ragbridge.toml``'s over ``pyproject.toml``'s, under
        ``fields["versions"]``), taken out before the table is checked as the backend's options. An
        `ragbridge.options.OptionError` naming the file, the backend and the option for what is
        wrong."""
        from .plugins import get_backends

        registry = get_backends()
        given = fields.pop("backend_options", None) or {}
        versions: dict[str, str] = {}
        tables = []
        for path, table in config_tables("backends", config_file, cwd):
            options = {}
            for name, settings in table.items():
                settings = dict(settings)
                version = settings.pop("version", None)
                if version is not None:
                    if not isinstance(version, str) or not EXACT_VERSION.fullmatch(version.strip()):
                        raise OptionError(f"{path}: [backends.{name}] version must be one exact version of "
                                          f"the backend's library as text (version = \"0.3.9\"), got "
                                          f"{version!r}")
                    versions[name] = version.strip()
                if settings or name not in registry:  # an unknown backend is named as such
                    options[name] = settings
            tables.append((path, options))
        merged = backend_options(registry, [*tables, *sources, ("python", given)])
        return cls(backend_options=merged, versions={**versions, **fields.pop("versions", {})}, **fields)

    def public(self) -> dict[str, Any]:
        """What run.json records of these options (`FLAT_OPTIONS`'s at the top level)."""
        out: dict[str, Any] = {"k": self.k}
        others: dict[str, Any] = {}
        for name, given in self.backend_options.items():
            values = given.model_dump(exclude_defaults=name != FLAT_OPTIONS) if isinstance(given, BaseModel) \
                else dict(given or {})
            if name == FLAT_OPTIONS:
                spans = ("span_min_overlap", "span_arithmetic")
                out.update((k, v) for k, v in values.items() if k not in spans)
                if self.span_labels or self.chunking is not None:
                    out.update((k, values.get(k)) for k in spans)
                    out["chunking"] = getattr(self.chunking, "path", None)
            elif values:
                others[name] = values
        out.update(backend_options=others, generator_model=self.generator_model)
        return out


@dataclass
class ScoringContext:
    """Handed to ``Backend.open``, ``score`` and ``close``: the run's options, the judge gateway (for
    judged metrics), and ``session``, what this backend's `Backend.open` returned for this run."""

    options: RunOptions
    judge: Optional["JudgeGateway"] = None
    session: Any = None

    def for_session(self, session: Any) -> "ScoringContext":
        """The same context with ``session`` set (the runner makes one per backend)."""
        return replace(self, session=session)

    def cases_in_flight(self, option: Optional[int] = None) -> int:
        """How many cases a judged backend scores at once: ``option`` (the backend's own
        ``concurrency`` setting) when set, else `CASES_PER_CALL_SLOT` x the judge's
        ``max_concurrency``. More cases than calls: while some cases are between two calls (their
        library reading an answer and building the next prompt), the next calls of others already
        wait at the gateway's bound and go out the moment a call ends, so the judge is not left idle
        by the work between calls. The calls in flight stay bounded by the gateway."""
        if option:
            return max(1, int(option))
        if self.judge is None:
            return 1
        return CASES_PER_CALL_SLOT * max(1, int(self.judge.config.max_concurrency))


class Backend:
    """Base class for a backend. Subclasses set the class attributes and implement ``metrics`` and ``score``.

    ``score`` is an async generator: it yields one `Result` per case it was given (or a
    `ResultBlock` for many), for the one metric asked, as soon as each is ready (the runner records
    each as a `Score` and writes it to disk on arrival, so a killed run loses nothing already
    scored). A failure on one case is that result's ``error``; ``score`` raises only for a fault
    that makes every case fail (and the runner records it for each case).
    A backend reaches the network only through ``ctx.judge``.
    """

    name: ClassVar[str] = ""
    #: the distribution whose presence makes the backend available (None: always available)
    library: ClassVar[Optional[str]] = None
    #: the import name to probe (defaults to ``library``)
    module: ClassVar[Optional[str]] = None
    install_hint: ClassVar[str] = ""
    #: the backend's options model (a `BackendOptions` subclass; this one takes none): what
    #: ``--option NAME.KEY=VALUE``, ``[backends.NAME]`` in ragbridge.toml and ``options={NAME: {...}}``
    #: set, read in a run as ``ctx.options.of(self)``
    Options: ClassVar[type[BackendOptions]] = BackendOptions
    #: the versions of its library the backend supports, a PEP 440 specifier (``">=1.2,<3"``; None:
    #: any). An installed version outside it is refused before a run scores (`supported`); another
    #: supported version runs in an environment of its own (``NAME==VERSION``, from a lock its plugin
    #: ships)
    supports: ClassVar[Optional[str]] = None
    #: per version it is tested at (oldest first): what changes for a user from the version before it
    #: (a metric's meaning or formula, its prompts, metrics added or removed), a sentence or two naming
    #: the metric by its canonical name; shown by ``ragbridge backends NAME`` and named by compare and
    #: the report when a run holds two versions of the library (`changes_between`)
    changes: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A `supports` that is not a PEP 440 range, or a version of `changes` that is not a version, is
        refused where the backend is declared: its plugin's module fails to import, and the plugin is
        reported as failing to load, with the fix."""
        super().__init_subclass__(**kwargs)
        problem = _versions_problem(cls)
        if problem:
            raise TypeError(problem)

    def supported(self, version: Optional[str] = None) -> Optional[bool]:
        """Whether ``version`` (default: the installed one) is one `supports` takes; None when the
        backend declares no range or the version is unknown."""
        version = self.version() if version is None else version
        if self.supports is None or version is None or self.library is None:
            return None
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return Version(version) in SpecifierSet(self.supports)
        except (InvalidSpecifier, InvalidVersion):
            return None

    def changes_between(self, old: str, new: str) -> list[tuple[str, str]]:
        """The `changes` a user meets going from version ``old`` of the library to ``new`` (either
        order): those of the versions after the older one up to the newer one, oldest first."""
        from packaging.version import InvalidVersion, Version

        try:
            low, high = sorted((Version(old), Version(new)))
            found = [(Version(v), v, text) for v, text in self.changes.items()]
        except InvalidVersion:
            return []
        return [(v, text) for at, v, text in sorted(found) if low < at <= high]

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

    def metrics_at(self, version: Optional[str]) -> list[MetricSpec]:
        """The metrics offered at ``version`` of the library (default: `metrics`, the same at every
        version). A backend whose library added, removed or redefined a metric between the versions it
        `supports` overrides it, and its `metrics` returns ``self.metrics_at(self.version())``; a run of
        ``NAME==VERSION`` plans that version's metrics."""
        return self.metrics()

    def metrics_for(self, options: RunOptions) -> list[MetricSpec]:
        """The metrics offered in a run with these options (default: ``metrics()``). A backend whose
        metrics are data named in its options (``options.of(self)``) overrides it, and raises
        ValueError (naming the file, field and fix) for options it cannot use, before anything is
        written."""
        return self.metrics()

    def environment(self) -> dict[str, str]:
        """Environment defaults this backend's library needs while a run uses it (telemetry off, no
        ``.env`` loading, no hub downloads ...). The runner sets each one that the user has not set,
        before `open`, and restores the environment after `close`."""
        return {}

    async def open(self, ctx: ScoringContext) -> Any:
        """Prepare what the metrics of one run share; the result is ``ctx.session`` in `score` and
        `close`. Called once per run, before the first `score`, with the environment applied."""
        return None

    async def close(self, ctx: ScoringContext) -> None:
        """Release what `open` made (``ctx.session``). Called once per run, after the last `score`,
        also when the run failed or was interrupted."""

    def needs_judge(self, metric: str) -> bool:
        for spec in self.metrics():
            if resolve_metric(spec.name, metric, 1) is not None or spec.name == metric:
                return spec.judge
        return False

    async def score(
        self, metric: str, cases: Sequence[Case], ctx: ScoringContext
    ) -> AsyncIterator[Result]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield  # makes this an async generator


async def fan_out(
    cases: Sequence[Case], score_one: Callable[[Case], Awaitable[Result]], concurrency: Optional[int] = None
) -> AsyncIterator[Result]:
    """Score every case with ``score_one(case)``, at most ``concurrency`` at once (None: no bound of its
    own, e.g. when a thread pool or the judge gateway bounds it), yielding each `Result` as soon as it
    is ready. When the consumer stops early (an interrupt), the cases still running are cancelled.

    ``score_one`` turns a failure on its case into that result's ``error`` (with `error_text`); an
    exception it lets through ends the fan-out, and the runner records it for every case not scored.
    """
    sem = asyncio.Semaphore(concurrency) if concurrency else None

    async def one(case: Case) -> Result:
        if sem is None:
            return await score_one(case)
        async with sem:
            return await score_one(case)

    tasks = [asyncio.ensure_future(one(c)) for c in cases]
    try:
        for fut in asyncio.as_completed(tasks):
            yield await fut
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _versions_problem(cls: type) -> Optional[str]:
    """What is wrong with the `Backend.supports` and `Backend.changes` a backend class declares, or None."""
    supports, changes = cls.__dict__.get("supports"), cls.__dict__.get("changes")
    if supports is None and not changes:
        return None
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if supports is not None:
        try:
            SpecifierSet(str(supports))
        except InvalidSpecifier:
            return (f"{cls.__name__}.supports = {supports!r} is not a PEP 440 version range: write the "
                    f"versions the backend supports as one, e.g. '>=1.0,<3' ('=={supports}' for that one "
                    "version alone)")
    for version in changes or {}:
        try:
            Version(str(version))
        except InvalidVersion:
            return (f"{cls.__name__}.changes has {version!r}, which is not a version: its keys are the "
                    "versions of the library the backend is tested at, e.g. '2.0'")
    return None


def error_text(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """``Type: message`` of a failure, for ``Result.error``: white space collapsed, the cause that a
    retry wrapper hides named, and cut at ``limit`` characters."""
    msg = " ".join(str(exc).split())
    inner = exc.__cause__ or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None)
    if isinstance(inner, BaseException) and type(inner).__name__ not in msg:
        detail = f"{type(inner).__name__}: {' '.join(str(inner).split())}"
        msg = f"{msg} (caused by {detail})" if msg else detail
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def case_ids(cases: Sequence[Case]) -> list[str]:
    """The ids of the cases, in order, without making a `Case` of each where the sequence holds them
    as records (the runner's batches have ``ids``)."""
    ids = getattr(cases, "ids", None)
    return list(ids) if ids is not None else [case.id for case in cases]


def case_record(cases: Sequence[Case], i: int) -> dict[str, Any]:
    """Case ``i`` as a canonical record (JSON types, fields at their defaults left out), without
    making a `Case` where the sequence holds it as one (the runner's batches have ``record(i)``)."""
    record = getattr(cases, "record", None)
    return record(i) if record is not None else cases[i].model_dump(mode="json", exclude_defaults=True)
