"""The backend contract kit: the tests every backend passes, for any backend's test suite.

A plugin's tests subclass `BackendContract` and name the backend; pytest then runs the contract on it,
in this process, against the stub judge on 127.0.0.1 (its prompts answered by the plugin's own stub
responders), with the kit's own cases::

    from ragbridge.testing.contract import BackendContract


    class TestMyBackend(BackendContract):
        backend = "mine"
        options = {"concurrency": 2}   # the backend's options for every run of the kit (optional)

A plugin that is not installed is registered for the class's tests with `plugin_registered`
(``yield from`` it in an autouse fixture of the class). ragbridge's own suite runs the kit on every
registered backend at once, by parametrizing ``backend``: ``@pytest.mark.parametrize("backend",
every_backend(), scope="class")`` over the class (``tests/test_backend_contract.py``). A backend's
own test file then holds only its parity with the library called directly and what is particular to
its library.

The contract, one test each:

* the plugin's package imports ragbridge only through ``ragbridge.plugin`` (and ``ragbridge.testing``,
  for its stub and tests): every ``import`` of its modules is read, also one inside a function;
* registering the backend, and asking whether it is available, its version and its metrics, imports
  none of its library (the library's modules and the plugin's own are set aside while it is asked,
  then put back);
* it declares metrics ragbridge knows (canonical, or registered by a plugin through
  ``ragbridge_register_metrics``), each once, needing only case inputs (`CASE_INPUTS`);
* a run scores every case once per planned metric, stamped with the backend, the metric and its
  native name, each value in 0..1 or undefined with a reason, never an error (the stub answers every
  prompt), each judged score with the judge calls and tokens it took;
* ``requires`` is honoured: a case with only the inputs a metric requires is scored without an error,
  and a case without one of them is skipped with the reason, its judge never asked;
* the run talks to no host but the judge (also with ``OPENAI_BASE_URL`` set elsewhere) and writes
  nothing in the working folder;
* a judge that answers 429, 500 or garbage once is retried by the gateway and every score is kept;
  a call that fails fails only the score it was made for, and the run goes on; a judge that answers
  429, 500, too slowly or with malformed JSON to every call gives each score an error, never a value,
  and the run completes;
* concurrency does not change scores: a run with the judge's concurrency 1 and one with 8 give the
  same values and reasons.

The tests that do not apply to a backend without a judged metric (the faults, the concurrency) are
skipped for it, saying so. A backend whose library is not installed is skipped whole, the reason
saying that none of the contract ran; with ``RAGBRIDGE_CONTRACT_STRICT=1`` in the environment (a
plugin's CI, where the library must be there) it fails instead.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import socket
import sys
import types
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Optional

import pytest

from ..backend import RunOptions
from ..metrics import find, resolve_metric
from ..plugins import get_backends, load_errors, load_plugins
from ..run import evaluate
from ..schema import Case
from ..stub import responders
from .stub_judge import StubJudge

__all__ = ["BackendContract", "every_backend", "plugin_registered", "plugins_as_at_start", "CONTRACT_CASES",
           "CASE_INPUTS", "imported_by_registering", "STRICT"]

#: the case inputs a `MetricSpec.requires` may name (`Case.fields_present`)
CASE_INPUTS = frozenset({"question", "answer", "contexts", "context_text", "relevant", "relevant_spans",
                         "reference", "reference_contexts"})
#: set (to anything but empty) in the environment, a backend whose library is not installed fails the
#: kit instead of skipping it: a plugin's CI sets it, so that a missing library is no green run
STRICT = "RAGBRIDGE_CONTRACT_STRICT"
#: hosts a run may look up or connect to: the stub judge's
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

_CHUNKS = [
    {"id": "refunds.md#window", "text": "Refunds can be requested within 14 days of the charge."},
    {"id": "refunds.md#annual", "text": "Annual plans can be refunded within 30 days of renewal."},
    {"id": "shipping.md#countries", "text": "We ship to 40 countries from our warehouse in Lyon."},
]

#: the kit's cases: a faithful answer, an unfaithful one, a declined unanswerable question; every
#: input a metric may require is in the first two
CONTRACT_CASES = (
    Case(id="contract-faithful", question="How long do I have to request a refund?",
         answer="You can request a refund within 14 days of the charge.", contexts=_CHUNKS,
         relevant={"refunds.md#window": 2, "refunds.md#annual": 1},
         reference="Refunds can be requested within 14 days of the charge.",
         reference_contexts=[_CHUNKS[0]["text"]], tags=["refunds"]),
    Case(id="contract-unfaithful", question="How long do I have to request a refund?",
         answer="You can request a refund within 60 days, and shipping is always free.",
         contexts=list(reversed(_CHUNKS)), relevant={"refunds.md#window": 2},
         reference="Refunds can be requested within 14 days of the charge.",
         reference_contexts=[_CHUNKS[0]["text"]], tags=["refunds"]),
    Case(id="contract-unanswerable", question="Is there an app for the Shopify store?",
         answer="I don't know: the documentation does not say.", contexts=[_CHUNKS[2]], relevant=[],
         answerable=False, tags=["unanswerable"]),
)


def every_backend() -> list[str]:
    """The names of every registered backend, available or not (the kit skips one that is not
    installed, with its install hint): what ragbridge's own suite parametrizes the kit with."""
    return sorted(get_backends())


@contextlib.contextmanager
def plugin_registered(plugin: Any, name: Optional[str] = None) -> Iterator[Any]:
    """``plugin`` (a module or any object with hook implementations) registered in this process for
    the block, as if installed: its backends, formats, metrics and stub responders are ragbridge's
    until the block ends."""
    pm = load_plugins()
    responders.responders()  # the installed plugins' responders are asked for first, once
    added = []
    registered_as = pm.register(plugin, name=name)
    try:
        hook = getattr(plugin, "ragbridge_register_stub_responders", None)
        if hook is not None:
            def register(*rs: Any, first: bool = True) -> Any:
                registered = responders.register(*rs, first=first, plugin=registered_as)
                added.extend(rs)
                return registered

            hook(register=register)
        yield plugin
    finally:
        for r in added:
            responders.unregister(r)
        pm.unregister(plugin)
        load_errors.pop(registered_as, None)  # what it failed with leaves with it


@contextlib.contextmanager
def plugins_as_at_start() -> Iterator[None]:
    """The plugin manager as a new process starts with it, for the block: no plugin registered, the
    entry points not read yet; as it was after. What a command run in the test process registers and
    finds (a plugin a test put on the path) is forgotten when the block ends, as when its process exits,
    and a plugin the test registered (`plugin_registered`) is not seen in the block, as a child process
    would not see it. The stub judge's responders are the stub's, which answers in the test process:
    they are asked of the plugins registered here now (if not yet), as the stub asks at its first
    answer, and left as they are."""
    from .. import plugins

    responders.responders()
    pm = plugins.pm
    saved = pm.list_name_plugin()
    flags = plugins._loaded, plugins._entry_points_loaded, dict(plugins.load_errors)
    for _, plugin in saved:
        pm.unregister(plugin)
    plugins._loaded = plugins._entry_points_loaded = False
    plugins.load_errors.clear()
    try:
        yield
    finally:
        for _, plugin in pm.list_name_plugin():
            pm.unregister(plugin)
        for name, plugin in saved:
            pm.register(plugin, name=name)
        plugins._loaded, plugins._entry_points_loaded = flags[:2]
        plugins.load_errors.clear()
        plugins.load_errors.update(flags[2])


def imported_by_registering(name: str) -> set[str]:
    """The modules that registering backend ``name`` (with its plugin's formats and libraries) and
    asking whether it is available, its version and its metrics import, in this process. The library's
    modules and the plugin's own (but its package) are set aside while it is asked and put back after,
    so each one imported counts."""
    registrar = _registrar(name)
    probe = _registered_backends(registrar)[name]
    library = (probe.module or probe.library or "").replace("-", "_").partition(".")[0]
    package = getattr(registrar, "__name__", None)

    def aside(module: str) -> bool:
        return bool((library and (module == library or module.startswith(library + ".")))
                    or (package and (module == package or module.startswith(package + "."))))

    with _set_aside(aside) as before:
        registrar = _imported_again(registrar)  # what its own module imports counts too
        backend = _registered_backends(registrar)[name]
        backend.available(), backend.version(), backend.metrics()
        for hook in ("ragbridge_register_formats", "ragbridge_register_libraries"):
            if hasattr(registrar, hook):
                getattr(registrar, hook)(register=lambda item: None)
        return set(sys.modules) - before


def _imported_again(plugin: Any) -> Any:
    """``plugin``'s module imported anew (it is set aside), so that what it imports at its top counts;
    ``plugin`` itself when it is no module an import finds (an object, a module made in a test)."""
    name = getattr(plugin, "__name__", None)
    if not isinstance(plugin, types.ModuleType) or not name or getattr(plugin, "__spec__", None) is None:
        return plugin
    try:
        if importlib.util.find_spec(name) is None:
            return plugin
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - not importable as it stands: ask the module registered
        return plugin


def _registrar(name: str) -> Any:
    """The plugin (module or object) that registers backend ``name``."""
    for plugin in load_plugins().get_plugins():
        if name in _registered_backends(plugin):
            return plugin
    raise LookupError(f"no plugin registers a backend named {name!r}")


def _registered_backends(plugin: Any) -> dict[str, Any]:
    """The backends ``plugin`` registers now, by name (new objects: a `LazyBackend` not yet loaded)."""
    found: dict[str, Any] = {}
    hook = getattr(plugin, "ragbridge_register_backends", None)
    if hook is not None:
        hook(register=lambda b: found.setdefault(b.name, b))
    return found


@contextlib.contextmanager
def _set_aside(aside: Callable[[str], bool]) -> Iterator[set[str]]:
    """The modules ``aside`` names removed from ``sys.modules`` for the block, then put back as they
    were (their packages' attributes too, and what the block imported of them dropped); yields the
    names of the modules imported before the block."""
    hidden = {m: mod for m, mod in sys.modules.items() if aside(m)}
    attributes = {}
    for m in hidden:
        parent, _, child = m.rpartition(".")
        if parent in sys.modules and hasattr(sys.modules[parent], child):
            attributes[(parent, child)] = getattr(sys.modules[parent], child)
    for m in hidden:
        del sys.modules[m]
    try:
        yield set(sys.modules)
    finally:
        for m in [m for m in sys.modules if aside(m)]:
            del sys.modules[m]
        sys.modules.update(hidden)
        for (parent, child), value in attributes.items():
            setattr(sys.modules[parent], child, value)


#: what a plugin's package may import of ragbridge (the plugin API, and the test kit)
PLUGIN_API = ("ragbridge.plugin", "ragbridge.testing")


def outside_the_plugin_api(package: str) -> list[str]:
    """Each import of ragbridge other than the plugin API (`PLUGIN_API`) in the modules of ``package``
    (a plugin's top-level package or module), read with ``ast`` (an import inside a function or under
    an ``if`` counts; ``if TYPE_CHECKING:`` too, an editor's import is a reader's API), as
    ``FILE:LINE imports NAME``; empty for ragbridge's own backends and for a package no file holds."""
    import ast

    if package == "ragbridge" or package.startswith("ragbridge."):
        return []
    spec = importlib.util.find_spec(package)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        files = sorted(f for folder in spec.submodule_search_locations for f in Path(folder).rglob("*.py"))
    else:
        files = [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else []
    found = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = ([f"{node.module}.{a.name}" for a in node.names] if node.module == "ragbridge"
                         else [node.module])
            else:
                continue
            found += [f"{path}:{node.lineno} imports {n}" for n in names
                      if n.split(".")[0] == "ragbridge" and not n.startswith(PLUGIN_API)]
    return found


def _plugin_packages(backend: Any) -> set[str]:
    """The top-level packages of the plugin that registers ``backend`` and of the backend's class."""
    load = getattr(backend, "load", None)
    made = load() if callable(load) else backend
    names = {type(made).__module__, getattr(_registrar(backend.name), "__name__", "") or ""}
    return {n.partition(".")[0] for n in names if n}


def _is_library_module(module: str, library: str) -> bool:
    """Whether ``module`` is one of the library's: a module under the library's top-level name that is
    not a namespace package (finding a module ``top.sub`` imports the namespace package ``top``)."""
    top = library.partition(".")[0]
    if module != top and not module.startswith(top + "."):
        return False
    return getattr(sys.modules.get(module), "__file__", None) is not None


class BackendContract:
    """The contract every backend keeps (see the module docstring). Subclass it with ``backend`` set
    to the backend's name; ``options`` are the backend's options for every run of the kit."""

    backend: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}

    # -- fixtures -----------------------------------------------------------------------------------

    @pytest.fixture(scope="class")
    @classmethod
    def backend_name(cls) -> str:
        """The backend's name: the class's ``backend`` (ragbridge's suite parametrizes it instead)."""
        assert cls.backend, "set the class attribute backend to the backend's registered name"
        return cls.backend

    @pytest.fixture(scope="class")
    @classmethod
    def contract_backend(cls, backend_name: str) -> Any:
        registered = get_backends()
        assert backend_name in registered, f"no backend {backend_name!r} is registered: {sorted(registered)}"
        found = registered[backend_name]
        if not found.available():
            why = (f"the {backend_name} backend's library is not installed ({found.install_hint}): "
                   f"NONE of the backend contract ran for it")
            if os.environ.get(STRICT):
                pytest.fail(f"{why} ({STRICT} is set)")
            pytest.skip(f"{why}; set {STRICT}=1 to fail instead of skipping")
        return found

    @pytest.fixture(scope="class")
    @classmethod
    def contract_stub(cls) -> Iterator[StubJudge]:
        with StubJudge() as stub:
            yield stub

    @pytest.fixture(scope="class")
    @classmethod
    def judged(cls, contract_backend: Any) -> list[str]:
        """The backend's judged metrics planned by default."""
        return [s.name for s in contract_backend.metrics_for(cls._options(contract_backend.name))
                if s.judge and s.default]

    @pytest.fixture(scope="class")
    @classmethod
    def contract_run(cls, contract_backend: Any, contract_stub: StubJudge,
                     tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """One run of every default metric over `CONTRACT_CASES`, in an empty working folder, with
        every socket connection and name lookup recorded, and an OpenAI key and base URL in the
        environment that a library must not follow (the judge is the run's)."""
        folder = tmp_path_factory.mktemp("contract-cwd")
        decoys = {"OPENAI_BASE_URL": "http://192.0.2.1/v1", "OPENAI_API_KEY": "sk-contract-decoy"}
        saved = {k: os.environ.get(k) for k in decoys}
        seen: list[tuple[str, Any]] = []
        connect, lookup, cwd = socket.socket.connect, socket.getaddrinfo, os.getcwd()

        def recorded_connect(sock: socket.socket, address: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                seen.append(("connect", tuple(address[:2])))
            return connect(sock, address)

        def recorded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(("lookup", host))
            return lookup(host, *args, **kwargs)

        socket.socket.connect, socket.getaddrinfo = recorded_connect, recorded_lookup
        os.chdir(folder)
        os.environ.update(decoys)
        try:
            run = cls._run(contract_backend.name, contract_stub, list(CONTRACT_CASES))
        finally:
            socket.socket.connect, socket.getaddrinfo = connect, lookup
            os.chdir(cwd)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return {"run": run, "seen": seen, "folder": folder, "stub": contract_stub}

    # -- helpers ------------------------------------------------------------------------------------

    @classmethod
    def _options(cls, name: str) -> RunOptions:
        return RunOptions(backend_options={name: dict(cls.options)} if cls.options else {})

    @classmethod
    def _run(cls, name: str, stub: StubJudge, cases: list[Case], metrics: Optional[list[str]] = None,
             **judge: Any) -> Any:
        from ..judge import JudgeConfig

        config = JudgeConfig(model="gpt-4o-mini", base_url=stub.base_url, cache_mode="off", cache_path=None,
                             embedding_model="text-embedding-3-small", **judge)
        return evaluate(cases, backends=[name], metrics=metrics, judge=config, options=cls._options(name),
                        progress=False)

    @staticmethod
    def _by_key(run: Any) -> dict[tuple[str, str], Any]:
        return {(s.case_id, s.metric): s for s in run.scores}

    # -- the contract -------------------------------------------------------------------------------

    def test_registers_without_importing_its_library(self, contract_backend: Any) -> None:
        library = (contract_backend.module or contract_backend.library or "").replace("-", "_")
        imported = sorted(m for m in imported_by_registering(contract_backend.name)
                          if library and _is_library_module(m, library))
        shown = ", ".join(imported[:3]) + (", ..." if len(imported) > 3 else "")
        assert not imported, (f"registering {contract_backend.name} imported its library ({shown}): "
                              "import it inside open or score")

    def test_imports_ragbridge_only_through_the_plugin_api(self, contract_backend: Any) -> None:
        offenders = [line for package in sorted(_plugin_packages(contract_backend))
                     for line in outside_the_plugin_api(package)]
        assert not offenders, (f"the {contract_backend.name} plugin imports ragbridge outside the plugin API "
                               f"(ragbridge.plugin): {'; '.join(offenders[:5])}"
                               f"{' ...' if len(offenders) > 5 else ''}: import those names from "
                               "ragbridge.plugin (its __all__ lists them; ragbridge.testing for tests)")

    def test_declares_known_metrics_and_case_inputs(self, contract_backend: Any) -> None:
        specs = contract_backend.metrics()
        names = [s.name for s in specs]
        assert names and len(set(names)) == len(names), names
        unknown = [n for n in names if find(n) is None]
        assert not unknown, (f"{contract_backend.name} declares metrics ragbridge does not know: {unknown} "
                             "(a canonical name, or register it through ragbridge_register_metrics)")
        for s in specs:
            assert set(s.requires) <= CASE_INPUTS, (s.name, s.requires)
            assert contract_backend.needs_judge(s.name) == s.judge, s.name

    def test_scores_every_case_once_per_metric(self, contract_backend: Any, contract_run: dict) -> None:
        run = contract_run["run"]
        specs = contract_backend.metrics_for(self._options(contract_backend.name))
        planned = run.manifest.metrics[contract_backend.name]
        assert planned == [m for m in planned if _spec_of(specs, m) is not None] and planned
        got = self._by_key(run)
        assert len(got) == len(run.scores) == len(CONTRACT_CASES) * len(planned)
        for (case_id, metric), s in got.items():
            spec = _spec_of(specs, metric)
            assert s.backend == contract_backend.name and s.error is None, (case_id, metric, s.error)
            assert spec.native_name is None or resolve_metric(spec.native_name, s.native_metric or "", 5) \
                == s.native_metric, (case_id, metric, s.native_metric, spec.native_name)
            if s.value is None:
                assert s.reason, f"{case_id} {metric}: undefined without a reason"
            else:
                assert 0.0 <= s.value <= 1.0, (case_id, metric, s.value)
                if spec.judge:
                    assert s.judge_calls >= 1 and s.prompt_tokens > 0, (case_id, metric)
        assert run.manifest.status == "complete"

    def test_requires_names_every_input_a_metric_needs(self, contract_backend: Any,
                                                       contract_stub: StubJudge) -> None:
        name = contract_backend.name
        specs = [s for s in contract_backend.metrics_for(self._options(name)) if s.default]
        full = CONTRACT_CASES[0]
        cases = {}
        for s in specs:
            only = _with_only(full, set(s.requires), f"only-{'-'.join(sorted(s.requires)) or 'question'}")
            cases[only.id] = only
            for field in s.requires:
                without = _without(full, field)
                cases[without.id] = without
        contract_stub.reset()
        got = self._by_key(self._run(name, contract_stub, list(cases.values()), [s.name for s in specs]))
        for s in specs:
            metric = next(m for (_, m) in got if resolve_metric(s.name, m, 5) == m)
            only = got[(f"only-{'-'.join(sorted(s.requires)) or 'question'}", metric)]
            assert only.error is None and (only.value is not None or only.reason), (
                f"{metric} errs on a case with only the inputs it requires {s.requires}: {only.error}")
            for field in s.requires:
                skipped = got[(f"without-{field}", metric)]
                assert skipped.value is None and skipped.error is None and skipped.judge_calls == 0
                assert (skipped.reason or "").startswith("skipped"), (metric, field, skipped.reason)

    def test_talks_only_to_the_judge_and_writes_nothing_here(self, contract_run: dict) -> None:
        stub_port = int(contract_run["stub"].base_url.split(":")[2].split("/")[0])
        connects = {target for kind, target in contract_run["seen"] if kind == "connect"}
        lookups = {target for kind, target in contract_run["seen"] if kind == "lookup"}
        assert connects <= {("127.0.0.1", stub_port)}, f"connected beside the judge: {sorted(connects)}"
        assert lookups <= LOOPBACK, f"looked up hosts: {sorted(lookups)}"
        written = sorted(p.name for p in Path(contract_run["folder"]).iterdir())
        assert not written, (f"the run wrote in the working folder {contract_run['folder']}: "
                             f"{', '.join(written)} (a library's cache or log: point it at a temporary "
                             "folder, or turn it off in the backend's environment())")

    def test_transient_judge_faults_are_retried_and_every_score_kept(self, contract_backend: Any,
                                                                     judged: list[str]) -> None:
        if not judged:
            pytest.skip(f"{contract_backend.name} has no judged metric")
        with StubJudge() as stub:
            stub.inject("429", "500", "garbage")
            run = self._run(contract_backend.name, stub, [CONTRACT_CASES[0]], judged[:1], max_concurrency=1)
        [score] = run.scores
        assert score.error is None and score.value is not None, score.error
        assert run.manifest.counts["judge"]["retries"] == 3

    def test_one_failing_call_fails_only_its_score(self, contract_backend: Any, judged: list[str]) -> None:
        if not judged:
            pytest.skip(f"{contract_backend.name} has no judged metric")
        failing = _marked(CONTRACT_CASES[1], "Xylofault", "contract-failing")
        with StubJudge() as stub:
            stub.fail_when("Xylofault", "500")  # every request about the failing case, whatever it asks
            run = self._run(contract_backend.name, stub, [CONTRACT_CASES[0], failing], judged, max_retries=0)
        got = self._by_key(run)
        for metric in judged:
            bad, good = got[("contract-failing", metric)], got[("contract-faithful", metric)]
            assert bad.value is None and bad.passed is None, (metric, bad.value, bad.reason)
            assert bad.error or (bad.judge_calls == 0 and bad.reason), (metric, bad.reason)
            assert good.error is None, (metric, good.error)
        assert run.manifest.status == "complete"
        assert run.manifest.counts["errored"] == sum(1 for s in run.scores if s.error) > 0

    @pytest.mark.parametrize("fault", ["429", "500", "timeout", "malformed"])
    def test_a_failing_judge_is_each_scores_error(self, contract_backend: Any, judged: list[str],
                                                   fault: str) -> None:
        if not judged:
            pytest.skip(f"{contract_backend.name} has no judged metric")
        with StubJudge(**{f"fault_rate_{fault}": 1.0, "timeout_seconds": 10}) as stub:
            run = self._run(contract_backend.name, stub, [CONTRACT_CASES[0]], judged, max_retries=0,
                            timeout=0.2)
        assert run.manifest.status == "complete"
        assert len(run.scores) == len(judged)
        for s in run.scores:
            # never a value; an error, unless the backend asked the judge nothing for this case (undefined)
            assert s.value is None and s.passed is None, (s.metric, s.value, s.error)
            assert s.error or (s.judge_calls == 0 and s.reason), (s.metric, s.reason)
        assert run.manifest.counts["errored"] == sum(1 for s in run.scores if s.error) > 0

    def test_concurrency_does_not_change_scores(self, contract_backend: Any, contract_stub: StubJudge,
                                                judged: list[str]) -> None:
        if not judged:
            pytest.skip(f"{contract_backend.name} has no judged metric")
        runs = [self._by_key(self._run(contract_backend.name, contract_stub, list(CONTRACT_CASES), judged,
                                       max_concurrency=n)) for n in (1, 8)]
        serial, parallel = ({k: (s.value, s.reason, s.error) for k, s in r.items()} for r in runs)
        assert serial == parallel


def _marked(case: Case, word: str, case_id: str) -> Case:
    """``case`` as ``case_id`` with ``word`` at the start of each of its texts, so that every judge
    request about it holds the word."""
    return case.model_copy(update={
        "id": case_id, "question": f"{word}: {case.question}", "answer": f"{word}: {case.answer}",
        "contexts": [c.model_copy(update={"text": f"{word}: {c.text}"}) for c in case.contexts],
        "reference": f"{word}: {case.reference}",
        "reference_contexts": [f"{word}: {t}" for t in case.reference_contexts]})


def _spec_of(specs: list, metric: str) -> Any:
    """The spec of ``specs`` a concrete metric name is scored by (``recall@5`` -> ``recall@k``)."""
    return next((s for s in specs if resolve_metric(s.name, metric, 5) == metric or s.name == metric), None)


def _with_only(case: Case, inputs: set[str], case_id: str) -> Case:
    """``case`` with only the question and ``inputs`` (`CASE_INPUTS` names)."""
    keep: dict[str, Any] = {"id": case_id, "question": case.question}
    if "answer" in inputs:
        keep["answer"] = case.answer
    if "context_text" in inputs:
        keep["contexts"] = case.contexts
    elif "contexts" in inputs:
        keep["contexts"] = [{"id": c.id} for c in case.contexts]
    for field in ("relevant", "relevant_spans", "reference", "reference_contexts"):
        if field in inputs:
            keep[field] = getattr(case, field)
    return Case(**keep)


def _without(case: Case, field: str) -> Case:
    """``case`` without the input ``field`` (`CASE_INPUTS`), as case ``without-<field>``."""
    update: dict[str, Any] = {"id": f"without-{field}"}
    if field == "contexts":
        update.update(contexts=[], relevant={})
    elif field == "context_text":
        update["contexts"] = [c.model_copy(update={"text": ""}) for c in case.contexts]
    elif field == "question":  # a blank question is not there (`Case.fields_present`)
        update[field] = ""
    elif field in ("answer", "reference", "reference_contexts", "relevant_spans"):
        update[field] = None if field in ("answer", "reference") else []
    elif field == "relevant":
        update[field] = {}
    return case.model_copy(update=update)
