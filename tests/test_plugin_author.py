"""A third party's plugin written from plugins/README.md (`lexeval_plugin`: a token-F1 metric of its
own computed without a judge, a judged metric, options with a pass mark and a tokenizer), registered
in this process as an installed one would be: what its author meets is what the guide says."""

from __future__ import annotations

import json

import pytest

import lexeval_plugin
import ragbridge
from ragbridge.plugin import Case
from ragbridge.testing import plugin_registered
from conftest import stub_judge_config

REFERENCE = "Refunds are accepted within 14 days of delivery."
ANSWERS = ["Refunds are accepted within 14 days of delivery.", "You get 14 days for refunds.",
           "Refunds are accepted within 30 days.", "No idea."]


def cases() -> list[Case]:
    return [Case(id=f"c{i}", question="How long is the refund window?", answer=a, reference=REFERENCE,
                 must_contain=["14 days"]) for i, a in enumerate(ANSWERS)]


@pytest.fixture
def lexeval(tmp_path):
    """The plugin, installed (with its library) in a folder of the test's and registered."""
    plugin = lexeval_plugin.install(tmp_path / "site")
    try:
        with plugin_registered(plugin):
            yield plugin
    finally:
        lexeval_plugin.forget()


def test_the_backends_pass_mark_option_is_the_runs_pass_rule(lexeval, tmp_path):
    """The plugin's ``threshold``, declared ``option(..., pass_mark=True)`` and given as 0.9, is the
    pass mark of its metrics everywhere: run.json's pass_marks, to_frame's passed (which then agrees
    with the backend's own verdict, library_passed), the thresholds every report reads."""
    from ragbridge.analysis.thresholds import pass_marks

    run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"],
                             options={"lexeval": {"threshold": 0.9}}, out=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["pass_marks"] == {
        "lexeval": {"lexeval_token_f1": 0.9}}
    frame = ragbridge.load_run(tmp_path / "run").to_frame()
    assert list(frame["pass_mark"]) == [0.9] * len(ANSWERS)
    values = dict(zip(frame["case_id"], frame["value"]))
    assert 0.5 <= values["c2"] < 0.9 and values["c0"] == 1.0  # a value the default 0.5 would pass
    assert list(frame["passed"]) == list(frame["library_passed"]) == [v >= 0.9 for v in frame["value"]]
    assert pass_marks(run).get("lexeval", "lexeval_token_f1") == 0.9
    # the default threshold is the default pass mark
    run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"])
    assert run.manifest.pass_marks == {"lexeval": {"lexeval_token_f1": 0.5}}


def test_a_metric_computed_without_the_judge_needs_none(lexeval, stub_judge):
    """``JudgedMetric(judge=False)`` beside a judged metric: asked for alone it is scored, with a judge
    given or not; with the judged one, both are."""
    for judge in (None, stub_judge_config(stub_judge)):
        run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"], judge=judge)
        assert [s.error for s in run.scores] == [None] * len(ANSWERS)
        assert {s.case_id: s.value for s in run.scores}["c0"] == 1.0
    run = ragbridge.evaluate(cases(), backends=["lexeval"], judge=stub_judge_config(stub_judge))
    assert sorted({s.metric for s in run.scores if s.error is None and s.value is not None}) == [
        "answer_correctness", "lexeval_token_f1"]
    assert sum(s.judge_calls for s in run.scores if s.metric == "answer_correctness") == len(ANSWERS)


def test_a_new_release_of_the_plugin_scores_again(tmp_path, stub_judge):
    """The plugin's distribution and version are in run.json and in the score cache's key: after its
    author changes its code and its version, the judged scores are made again, not reused."""
    judge = stub_judge_config(stub_judge, cache=tmp_path / "cache.sqlite")

    def run(version: str, mark: str, out: str):
        plugin = lexeval_plugin.install(tmp_path / f"site-{out}", version=version, mark=mark)
        try:
            with plugin_registered(plugin):
                return ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["answer_correctness"],
                                          judge=judge, out=tmp_path / out)
        finally:
            lexeval_plugin.forget()

    first = run("0.1.1", "v1", "r1")
    assert json.loads((tmp_path / "r1" / "run.json").read_text())["plugins"] == {
        "lexeval": "ragbridge-lexeval==0.1.1"}
    assert all(s.reason.startswith("v1 ") and not s.cached for s in first.scores)
    again = run("0.1.1", "v1", "r2")
    assert all(s.cached for s in again.scores)  # the same release: the cache is used
    changed = run("0.1.2", "v2", "r3")
    assert changed.manifest.plugins == {"lexeval": "ragbridge-lexeval==0.1.2"}
    assert [s.cached for s in changed.scores] == [False] * len(ANSWERS)
    assert all(s.reason.startswith("v2 ") for s in changed.scores)


def cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """The command line in this process: (exit status, stdout, stderr)."""
    from ragbridge.commands import run_cli

    monkeypatch.setattr("sys.argv", ["ragbridge", *map(str, args)])
    monkeypatch.setenv("COLUMNS", "200")
    code = 0
    try:
        run_cli()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def golden(tmp_path):
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(c.model_dump_json() + "\n" for c in cases()))
    return path


def broken(tmp_path, **changes):
    """The plugin with ``changes`` made to its source, registered for the block."""
    plugin = lexeval_plugin.install(tmp_path / "site", **changes)
    return plugin_registered(plugin)


@pytest.mark.parametrize("changes, words", [
    ({"meaning": "token F1 of the answer against the reference answer, as lexeval computes it (0..1)"},
     "meaning is one line of at most 70 characters (it has 82): shorten it"),
    ({"kind": "answer-check"}, "kind 'answer-check' is not one of ranking, span, answer check, judged"),
])
def test_a_metric_registered_wrong_stops_a_run_with_one_line_and_backends_says_it(
        tmp_path, monkeypatch, capsys, golden, changes, words):
    line = f"plugin 'ragbridge_lexeval' registers metric 'lexeval_token_f1': {words}"
    try:
        with broken(tmp_path, **changes):
            code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "run",
                                 "--backend", "lexeval", "--metric", "lexeval_token_f1")
            assert code == 2 and "Traceback" not in err, err
            assert line in " ".join(err.split()), err
            assert not (tmp_path / "run").exists()
            code, out, err = cli(monkeypatch, capsys, "backends")
            assert code == 0 and "native" in out
            assert line in " ".join(err.split()), err
    finally:
        lexeval_plugin.forget()


def test_a_backend_module_that_fails_to_import_is_its_plugins_line(tmp_path, monkeypatch, capsys, golden):
    """The plugin's backend module imports what is not installed: ``ragbridge backends`` lists the
    others and says which plugin failed and why, as for a package that fails to import; a run of it
    stops with the same line, exit 2."""
    line = ("plugin 'ragbridge_lexeval' failed to load: backend 'lexeval' "
            "(ragbridge_lexeval.backend:LexevalBackend): ModuleNotFoundError: "
            "No module named 'lexeval_extras'")
    try:
        with broken(tmp_path, backend_import="import lexeval_extras"):
            code, out, err = cli(monkeypatch, capsys, "backends")
            assert code == 0 and "Traceback" not in err, err
            assert "native" in out and "lexeval" not in out
            assert line in " ".join(err.split()), err
            code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "run",
                                 "--backend", "lexeval")
            assert code == 2 and "Traceback" not in err and line in " ".join(err.split()), err
            code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "native",
                                 "--backend", "native", "--metric", "must_contain")
            assert code == 0, err
    finally:
        lexeval_plugin.forget()


def test_an_option_without_a_default_is_refused_at_registration(tmp_path, monkeypatch, capsys, golden):
    line = ("plugin 'ragbridge_lexeval' failed to load: backend 'lexeval' "
            "(ragbridge_lexeval.backend:LexevalBackend): ")
    fix = ("TypeError: option 'threshold' of LexevalOptions has no default: declare it with "
           "option(DEFAULT, \"help\") (every option has a default)")
    try:
        with broken(tmp_path, threshold='option(help="A score at or above this passes.", ge=0.0, le=1.0)'):
            code, out, err = cli(monkeypatch, capsys, "backends")
            assert code == 0 and "PydanticUndefined" not in out + err, out
            assert line + fix in " ".join(err.split()), err
            code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "run",
                                 "--backend", "lexeval", "--metric", "lexeval_token_f1")
            assert code == 2 and line + fix in " ".join(err.split()), err
    finally:
        lexeval_plugin.forget()


def test_the_contract_kit_sees_a_library_imported_at_the_top_of_the_plugin(tmp_path):
    """``import lexeval`` at the top of the plugin's ``__init__.py`` makes every command import the
    library: the kit's registration check names it."""
    from ragbridge.testing.contract import BackendContract, imported_by_registering

    try:
        with broken(tmp_path, top_import="import lexeval  # noqa: F401"):
            assert "lexeval" in imported_by_registering("lexeval")
            from ragbridge.plugins import get_backends

            with pytest.raises(AssertionError, match=r"registering lexeval imported its library \(lexeval\)"):
                BackendContract().test_registers_without_importing_its_library(get_backends()["lexeval"])
        with broken(tmp_path / "clean"):  # imported inside the backend's module only: nothing to say
            assert not {"lexeval"} & imported_by_registering("lexeval")
    finally:
        lexeval_plugin.forget()


CONTRACT_FILE = '''
import pytest

import lexeval_plugin
from ragbridge.testing import plugin_registered
from ragbridge.testing.contract import BackendContract


class TestLexeval(BackendContract):
    backend = "lexeval"

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _registered(cls, tmp_path_factory):
        plugin = lexeval_plugin.install(tmp_path_factory.mktemp("site"), library={library}, **{changes})
        with plugin_registered(plugin):
            yield
'''


def contract_of(tmp_path, library=True, env=None, **changes):
    """The plugin's own contract test file, as its author writes it, run by pytest: (status, output)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = tmp_path / "plugin-tests"
    folder.mkdir(parents=True)
    (folder / "test_contract.py").write_text(CONTRACT_FILE.format(library=library, changes=changes))
    path = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          "test_contract.py", "-k", "registers or writes_nothing or scores_every"],
                         cwd=folder, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": path, **(env or {})})
    return res.returncode, res.stdout + res.stderr


@pytest.mark.slow  # a plugin's own pytest run, twice
def test_the_contract_kit_says_loudly_when_the_library_is_absent_and_fails_when_asked(tmp_path):
    code, output = contract_of(tmp_path, library=False)
    assert code == 0 and "3 skipped" in output, output
    assert ("the lexeval backend's library is not installed (pip install lexeval): NONE of the backend "
            "contract ran for it; set RAGBRIDGE_CONTRACT_STRICT=1 to fail instead of skipping") in output
    code, output = contract_of(tmp_path / "strict", library=False, env={"RAGBRIDGE_CONTRACT_STRICT": "1"})
    assert code == 1 and "3 errors" in output and "NONE of the backend contract ran" in output, output


@pytest.mark.slow  # a plugin's own pytest run
def test_the_contract_kit_names_the_file_a_run_wrote_in_the_working_folder(tmp_path):
    code, output = contract_of(tmp_path, on_case="open('lexeval-cache.json', 'w').close()")
    assert code == 1 and "1 failed, 2 passed" in output, output
    assert "the run wrote in the working folder" in output and "lexeval-cache.json" in output, output


def test_an_option_no_backend_of_the_run_reads_or_given_twice_is_a_warning(tmp_path, lexeval, monkeypatch,
                                                                            capsys, golden):
    from conftest import warnings_in

    code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "run", "--backend", "native",
                         "--metric", "must_contain", "--option", "lexeval.threshold=0.9")
    assert code == 0, err
    assert ("warning: --option lexeval.threshold: the lexeval backend is not in this run (its backends: "
            "native), so no backend reads it; add --backend lexeval to use it") in warnings_in(err), err
    code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "twice",
                         "--backend", "lexeval", "--metric", "lexeval_token_f1",
                         "--option", "lexeval.threshold=0.9", "--option", "lexeval.threshold=0.7",
                         "--option", "lexeval.tokenizer=word")
    assert code == 0, err
    assert warnings_in(err) == [
        "warning: --option lexeval.threshold is given 2 times (0.9, 0.7): the last, 0.7, is used"]
    assert json.loads((tmp_path / "twice" / "run.json").read_text())["pass_marks"] == {
        "lexeval": {"lexeval_token_f1": 0.7}}


def test_a_plugins_responders_register_at_once_and_answer_in_the_order_given(stub_judge):
    """A plugin registers its stub responders in one call (``register(*responders(), first=False)``,
    as plugins/README.md shows): the stub judge on 127.0.0.1 asks them in the order given."""
    import types

    import httpx

    from ragbridge.plugin import JudgeReply, hookimpl

    class Says:
        def __init__(self, name: str, word: str):
            self.name, self.word = name, word

        def __call__(self, req):
            return JudgeReply(f"{self.name} answers") if self.word in req.prompt else None

    plugin = types.ModuleType("ragbridge_echo_responders")

    @hookimpl
    def ragbridge_register_stub_responders(register):
        register(Says("echo-claims", "ECHO-CLAIM"), Says("echo-any", "ECHO"), first=False)

    plugin.ragbridge_register_stub_responders = ragbridge_register_stub_responders

    def answer(prompt: str) -> str:
        r = httpx.post(f"{stub_judge.base_url}/chat/completions", json={
            "model": "stub-judge", "messages": [{"role": "user", "content": prompt}]}, timeout=30)
        return r.json()["choices"][0]["message"]["content"]

    with plugin_registered(plugin):
        assert answer("ECHO-CLAIM: the sky is blue") == "echo-claims answers"  # the first one given first
        assert answer("ECHO: anything else") == "echo-any answers"
    assert answer("ECHO: anything else") != "echo-any answers"  # gone with the plugin


def test_a_stub_responder_registered_wrong_is_the_plugins_error(stub_judge):
    """``register(responders())`` (a list, not its responders) is refused at registration, naming the
    plugin; a responder that returns a text is refused when it answers, and the stub judge's reply says
    which plugin's responder it was (not an error the judge's context size could explain)."""
    import types

    import httpx

    from ragbridge.errors import PluginError
    from ragbridge.plugin import hookimpl

    def plugin_registering(*responders):
        plugin = types.ModuleType("ragbridge_wrong_responders")

        @hookimpl
        def ragbridge_register_stub_responders(register):
            register(*responders, first=False)

        plugin.ragbridge_register_stub_responders = ragbridge_register_stub_responders
        return plugin

    def says_yes(req):
        return "yes" if "WRONG-RESPONDER" in req.prompt else None

    with pytest.raises(PluginError, match=r"plugin ragbridge_wrong_responders registered a stub responder "
                                          r"that is not callable: a list \(register\(\*responders\(\)\)"):
        with plugin_registered(plugin_registering([says_yes])):
            pass
    with plugin_registered(plugin_registering(says_yes)):
        r = httpx.post(f"{stub_judge.base_url}/chat/completions", json={
            "model": "stub-judge", "messages": [{"role": "user", "content": "WRONG-RESPONDER: is it?"}]},
            timeout=30)
        assert r.status_code == 500
        assert ("PluginError: the stub responder 'says_yes' of plugin ragbridge_wrong_responders returned a "
                "str, not a JudgeReply or None: fix the plugin") in r.text


def test_a_supports_that_is_not_a_version_range_is_refused_at_registration(tmp_path, monkeypatch, capsys,
                                                                          golden):
    """``supports = "1.0"`` (a version, not a PEP 440 range) is the plugin's error with the fix, in
    ``backends`` and in a run (exit 2), not "supports lexeval1.0"; a range ``backends`` cannot check the
    installed version against says why, not that the library is not installed."""
    line = ("plugin 'ragbridge_lexeval' failed to load: backend 'lexeval' "
            "(ragbridge_lexeval.backend:LexevalBackend): TypeError: LexevalBackend.supports = '1.0' is not a "
            "PEP 440 version range: write the versions the backend supports as one, e.g. '>=1.0,<3' "
            "('==1.0' for that one version alone)")
    try:
        with broken(tmp_path, supports='supports = "1.0"'):
            code, out, err = cli(monkeypatch, capsys, "backends")
            assert code == 0 and "lexeval1.0" not in out and line in " ".join(err.split()), err
            code, out, err = cli(monkeypatch, capsys, "run", golden, "--out", tmp_path / "run",
                                 "--backend", "lexeval", "--metric", "lexeval_token_f1")
            assert code == 2 and line in " ".join(err.split()) and not (tmp_path / "run").exists(), err
        with broken(tmp_path / "nightly", supports='supports = ">=0.1"'):
            metadata = tmp_path / "nightly" / "site" / "lexeval-0.2.0.dist-info" / "METADATA"
            metadata.write_text(metadata.read_text().replace("Version: 0.2.0", "Version: nightly"))
            code, out, err = cli(monkeypatch, capsys, "backends", "lexeval")
            assert "not installed)" not in out, out
            said = ("supports lexeval>=0.1; installed: nightly (not checked: its version is not a PEP 440 "
                    "version)")
            assert said in " ".join(out.split()), out
    finally:
        lexeval_plugin.forget()


def test_the_contract_kit_sees_an_import_of_ragbridge_outside_the_plugin_api(tmp_path):
    """``from ragbridge.backend import MetricSpec`` in the plugin's backend module (under an ``if``,
    as a plugin toggles it): the kit's check names the file, the line and the module, and the fix."""
    from ragbridge.plugins import get_backends
    from ragbridge.testing.contract import BackendContract

    kit = BackendContract()
    try:
        toggled = "if True:\n    from ragbridge.backend import MetricSpec  # noqa"
        with broken(tmp_path, backend_import=toggled):
            with pytest.raises(AssertionError, match=r"the lexeval plugin imports ragbridge outside the "
                               r"plugin API \(ragbridge.plugin\): \S+ragbridge_lexeval/backend.py:\d+ "
                               r"imports ragbridge.backend: import those names from ragbridge.plugin"):
                kit.test_imports_ragbridge_only_through_the_plugin_api(get_backends()["lexeval"])
        with broken(tmp_path / "clean"):  # ragbridge.plugin and ragbridge.testing only: nothing to say
            kit.test_imports_ragbridge_only_through_the_plugin_api(get_backends()["lexeval"])
    finally:
        lexeval_plugin.forget()
