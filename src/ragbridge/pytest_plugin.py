"""pytest plugin: load a golden set, run backends and assert gates from Python tests.

It is loaded only when asked for (it is not a ``pytest11`` entry point, so it never loads by itself)::

    pytest -p ragbridge                      # or: pytest -p ragbridge.pytest_plugin

    # or in conftest.py
    pytest_plugins = ["ragbridge.pytest_plugin"]

A test::

    import pytest

    def test_retrieval(ragbridge_golden, ragbridge_evaluate, ragbridge_gate):
        run = ragbridge_evaluate(ragbridge_golden, backends=["native"])
        ragbridge_gate(run, ["recall@5 >= 0.85", "ndcg@5 >= 0.8"])

    @pytest.mark.judge
    def test_faithfulness(ragbridge_golden, ragbridge_evaluate, ragbridge_gate, ragbridge_judge):
        run = ragbridge_evaluate(ragbridge_golden, backends=["rubric"], metrics=["faithfulness"],
                                 judge=ragbridge_judge)
        ragbridge_gate(run, "gates-judged.toml")

Run the cheap tests on every pull request with ``pytest -m "not judge"`` and the judged ones nightly
with ``pytest -m judge``. A test that uses the ``ragbridge_judge`` fixture is marked ``judge``
automatically.

Fixtures:

``ragbridge_golden``
    The golden set named by ``--ragbridge-golden`` (or the ``ragbridge_golden`` ini option), as a list
    of `Case`. Paths given on the command line are relative to where pytest runs; paths in the ini
    file are relative to the ini file.
``ragbridge_load_golden(path, fmt=None)``
    Load any golden set (JSONL, CSV, Parquet, a datasets folder).
``ragbridge_evaluate(cases_or_path, backends=None, metrics=None, judge=None, name=None, **parameters)``
    Score cases into a run folder and return the `Run`. The folder is under the test's ``tmp_path``,
    or under ``--ragbridge-runs DIR`` (kept: the per-item results of a failing test, for CI artifacts).
    ``parameters`` are `ragbridge.evaluate`'s (``options``, ``repeats``, ``target`` ...) and the
    options every backend reads (``k``, ``generator_model``); a backend's own options go in
    ``options={"native": {"gain": "exponential"}}``. The backends' options of ``[backends.NAME]`` in
    ``ragbridge.toml`` (or ``--ragbridge-config``) apply under those of ``options``, as on the
    command line. When a planned metric needs a judge and none is given,
    the ``ragbridge_judge`` fixture is used.
``ragbridge_judge``
    The judge configuration from the judge's options of the command line, prefixed ``--ragbridge-``
    (``--ragbridge-judge-model``, ``--ragbridge-judge-base-url``, ``--ragbridge-cache-mode`` ... and
    ``--ragbridge-config``, the config file), then ``ragbridge.toml`` and ``[tool.ragbridge.judge]`` in
    ``pyproject.toml``. The test is skipped when no judge is configured at all; a configuration that
    is wrong is an error.
``ragbridge_baseline``
    The baseline run named by ``--ragbridge-baseline`` (or ini ``ragbridge_baseline``), or None.
``ragbridge_gate(run, gates=None, baseline=...)``
    Evaluate gates on a run and fail the test, with the table of rules, when any rule fails. ``gates``
    is a gates file path, a list of checks (``["recall@5 >= 0.85"]``), a list of rule tables, or a
    parsed gates dict; the default is ``--ragbridge-gates`` (ini ``ragbridge_gates``). ``baseline``
    defaults to ``ragbridge_baseline``. Returns the `GateReport`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest

from .analysis.gate import GateConfig, GateReport, load_gates, parse_gates, run_gates
from .flags import JUDGE_FLAGS, JUDGE_SETTING
from .report.ci import figure_text, item_line
from .report.text import plain_text
from .run import Run, load_run

__all__ = ["assert_gates", "GateFailed"]

JUDGE_MARKER = "judge: a test scored by an LLM judge (run nightly; deselect with -m \"not judge\")"


class GateFailed(AssertionError):
    """A gate rule failed; the message is the table of every rule."""


def _gates_config(gates: Any) -> GateConfig:
    if isinstance(gates, GateConfig):
        return gates
    if isinstance(gates, (str, Path)) and not re.search(r"[<>]", str(gates)):
        return load_gates(gates)
    if isinstance(gates, str):
        gates = [gates]
    if isinstance(gates, dict):
        return parse_gates(gates, source="gates")
    if isinstance(gates, Sequence):
        rules = [{"check": g} if isinstance(g, str) else g for g in gates]
        return parse_gates({"gate": rules}, source="gates")
    raise TypeError(f"gates must be a gates file, a list of checks or a dict, got {type(gates).__name__}")


def format_report(report: GateReport) -> str:
    """The gate as plain text: one line per rule, then the cases behind each failure (every value
    from the data on its own line: control characters shown as escapes)."""
    lines = [report.summary_line()]
    for w in report.warnings:
        lines.append(f"warning: {plain_text(w)}")
    labels = [plain_text(r.label) for r in report.results]
    width = max(map(len, labels), default=0)
    for r, label in zip(report.results, labels):
        lines.append(
            f"  {r.verdict.upper():4}  {label:<{width}}  {figure_text(r)}  n={r.n}  {plain_text(r.detail)}")
    for r in report.failed:
        if r.items:
            lines.append(f"cases behind {plain_text(r.label)!r} ({min(10, len(r.items))} of {len(r.items)}):")
            lines += [f"    {item_line(i)}" for i in r.items[:10]]
    return "\n".join(lines)


def assert_gates(run: Run | str | Path, gates: Any, baseline: Run | str | Path | None = None,
                 **kwargs: Any) -> GateReport:
    """Evaluate ``gates`` on ``run``; raise `GateFailed` (an AssertionError) when a rule fails."""
    __tracebackhide__ = True
    report = run_gates(run, _gates_config(gates), baseline=baseline, **kwargs)
    if not report.passed:
        raise GateFailed(format_report(report))
    return report


# --------------------------------------------------------------------------------------------
# Hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ragbridge", "RAG evaluation with ragbridge")
    for name, help_ in (
        ("golden", "golden set for the ragbridge_golden fixture"),
        ("runs", "keep each test's run folder under this directory (per-item results)"),
        ("baseline", "baseline run folder for 'drop' gate rules"),
        ("gates", "default gates file for the ragbridge_gate fixture"),
    ):
        group.addoption(f"--ragbridge-{name}", dest=f"ragbridge_{name}", default=None, help=help_)
        parser.addini(f"ragbridge_{name}", help_, default=None)
    for spec in JUDGE_FLAGS:  # the command line's judge options, each as --ragbridge-NAME
        group.addoption(f"--ragbridge-{spec.flag.removeprefix('--')}", dest=f"ragbridge_{spec.name}",
                        default=None, help=spec.help)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", JUDGE_MARKER)


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for item in items:
        if ("ragbridge_judge" in getattr(item, "fixturenames", ())
                and item.get_closest_marker("judge") is None):
            item.add_marker(pytest.mark.judge)


def _setting(config: pytest.Config, name: str) -> Optional[Path]:
    """A path option: from the command line (relative to where pytest was run), else from the ini file
    (relative to the ini file's folder)."""
    value = config.getoption(f"ragbridge_{name}", default=None)
    base = Path(config.invocation_params.dir)
    if value is None:
        value = config.getini(f"ragbridge_{name}") or None
        base = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
    if value is None:
        return None
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def ragbridge_load_golden() -> Callable[..., list]:
    from .formats import load_cases

    def load(path: str | Path, fmt: Optional[str] = None) -> list:
        return load_cases(path, fmt)

    return load


@pytest.fixture(scope="session")
def ragbridge_golden(request: pytest.FixtureRequest, ragbridge_load_golden) -> list:
    path = _setting(request.config, "golden")
    if path is None:
        pytest.fail(
            "ragbridge_golden needs a golden set: pass --ragbridge-golden PATH or set ragbridge_golden "
            "in the pytest ini options (or load one with the ragbridge_load_golden fixture)",
            pytrace=False,
        )
    return ragbridge_load_golden(path)


@pytest.fixture(scope="session")
def ragbridge_judge(request: pytest.FixtureRequest):
    from .judge import JudgeConfig, JudgeConfigError

    config = request.config
    given = {spec.name: config.getoption(f"ragbridge_{spec.name}") for spec in JUDGE_FLAGS}
    overrides = {JUDGE_SETTING[k]: v for k, v in given.items() if JUDGE_SETTING[k] and v is not None}
    try:
        return JudgeConfig.load(overrides, config_file=given["config"],
                                cwd=Path(config.invocation_params.dir))
    except JudgeConfigError as exc:
        if "is not set" in str(exc):
            pytest.skip(
                "no judge configured: pass --ragbridge-judge-model and --ragbridge-judge-base-url, or set "
                "[judge] in ragbridge.toml or [tool.ragbridge.judge] in pyproject.toml"
            )
        pytest.fail(f"ragbridge judge configuration: {exc}", pytrace=False)
    except ValueError as exc:
        pytest.fail(f"ragbridge judge configuration: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def ragbridge_baseline(request: pytest.FixtureRequest) -> Optional[Run]:
    path = _setting(request.config, "baseline")
    return load_run(path) if path is not None else None


@pytest.fixture
def ragbridge_evaluate(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Run]:
    from .backend import RunOptions
    from .formats import load_cases
    from .run import evaluate, plan_metrics
    from .run.request import RunRequest

    keep = _setting(request.config, "runs")
    used: set[str] = set()
    fixed = {"cases", "backends", "metrics", "judge", "out", "overwrite"}

    def run(
        cases: Any,
        backends: Optional[Sequence[str]] = None,
        metrics: Optional[Sequence[str]] = None,
        judge: Any = None,
        name: Optional[str] = None,
        **parameters: Any,
    ) -> Run:
        shared = [n for n, f in RunOptions.model_fields.items() if f.json_schema_extra]  # k, generator_model
        takes = [n for n in RunRequest.model_fields if n not in fixed]
        unknown = sorted(set(parameters) - set(takes) - set(shared))
        if unknown:
            raise TypeError(f"ragbridge_evaluate() got an unexpected keyword argument {unknown[0]!r}; "
                            f"it takes ragbridge.evaluate's ({', '.join(takes)}) and {', '.join(shared)}; "
                            "a backend's option goes in options={BACKEND: {KEY: VALUE}}")
        if isinstance(cases, (str, Path)):
            cases = load_cases(cases)
        given = parameters.pop("options", None)
        if isinstance(given, RunOptions):
            fields = {k: getattr(given, k) for k in given.model_fields_set}
        else:
            fields = {"backend_options": dict(given or {})}
        fields.update((k, parameters.pop(k)) for k in shared if k in parameters)
        opts = RunOptions.load(config_file=request.config.getoption("ragbridge_config"),
                               cwd=Path(request.config.invocation_params.dir), **fields)
        if judge is None:
            plan = plan_metrics(backends, metrics, opts.k, opts)
            if any(spec.judge for chosen in plan.values() for _, spec in chosen):
                judge = request.getfixturevalue("ragbridge_judge")
        label = name or "run"
        if label in used:
            raise ValueError(f"run name {label!r} already used in this test: pass name=...")
        used.add(label)
        if keep is not None:
            node = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid).strip("_")
            out = keep / node / label
        else:
            out = tmp_path / f"ragbridge-{label}"
        return evaluate(cases, backends=backends, metrics=metrics, out=out, options=opts, judge=judge,
                        overwrite=True, **parameters)

    return run


@pytest.fixture
def ragbridge_gate(request: pytest.FixtureRequest, ragbridge_baseline) -> Callable[..., GateReport]:
    default_gates = _setting(request.config, "gates")

    def gate(run: Run | str | Path, gates: Any = None, baseline: Any = ..., **kwargs: Any) -> GateReport:
        __tracebackhide__ = True
        if gates is None:
            if default_gates is None:
                pytest.fail("ragbridge_gate needs gates: pass them, or --ragbridge-gates PATH", pytrace=False)
            gates = default_gates
        if baseline is ...:
            baseline = ragbridge_baseline
        return assert_gates(run, gates, baseline=baseline, **kwargs)

    return gate
