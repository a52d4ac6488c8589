"""Each option is declared once: the run's parameters (RunRequest), the options every backend reads
(RunOptions) and each backend's options model. The command line's flags, ``evaluate``'s signature and
docstring and the pytest plugin's options are made of (or held to) those declarations, and one
generic form, ``--option BACKEND.KEY=VALUE`` / ``[backends.NAME]`` / ``options={NAME: {...}}``,
reaches any backend's options, checked before anything runs."""

from __future__ import annotations

import inspect
import json
import re

import click
import pytest
import typer
from conftest import EXAMPLE, ragbridge_cli

import ragbridge
from ragbridge.backend import RunOptions
from ragbridge.flags import JUDGE_FLAGS
from ragbridge.judged_backend import JudgedOptions
from ragbridge.native.options import NativeOptions
from ragbridge.options import OptionError, backend_options, describe, flag_of
from ragbridge.plugins import get_backends
from ragbridge.run.request import RunRequest

pytest_plugins = ["pytester"]

RUN = ["run", EXAMPLE, "--metric", "ndcg@5", "--metric", "abstention", "--no-progress", "--json"]


def _command(name: str) -> click.Command:
    import ragbridge.commands as commands

    group = typer.main.get_command(commands.cli)
    return group.get_command(click.Context(group), name)


def _params(name: str) -> dict[str, click.Parameter]:
    return {opt: p for p in _command(name).params for opt in p.opts}


# -- one declaration ------------------------------------------------------------------------------


def test_evaluate_takes_the_run_requests_fields_each_documented():
    fields = RunRequest.model_fields
    for fn in (ragbridge.evaluate, ragbridge.evaluate_async):
        params = inspect.signature(fn).parameters
        assert list(params) == list(fields)
        for name, info in fields.items():
            default = inspect.Parameter.empty if info.is_required() else info.default
            assert params[name].default == default, (fn.__name__, name)
    doc = ragbridge.evaluate_async.__doc__
    undocumented = [name for name in fields if not re.search(rf"``{name}(``|=)", doc)]
    assert not undocumented, f"evaluate_async's docstring does not document {undocumented}"


@pytest.mark.parametrize("command", ["run", "rescore"])
def test_the_command_lines_flags_are_the_fields_declarations(command):
    """Each flag that stands for a field has the field's help and default: nothing is declared twice
    (``--batch-size`` is BATCH_SIZE, ``--target-concurrency`` RunRequest's 4)."""
    params = _params(command)
    models = [RunRequest, RunOptions, NativeOptions]
    seen = 0
    for model in models:
        for name, info in model.model_fields.items():
            flag = flag_of(info)
            if flag is None or flag not in params or (command, flag) == ("rescore", "--corpus"):
                continue  # rescore's --corpus is another option: it only places the chunks of --chunks
            seen += 1
            p = params[flag]
            assert p.help.startswith(info.description), (command, flag)
            if model is NativeOptions:  # kept as a flag of its own: unset unless given, default in the help
                assert p.default is None
                if info.default not in (None, False):
                    assert f"[default: {info.default}]" in p.help
            else:
                assert p.default == (None if info.default == [] else info.default), (command, flag)
    assert seen >= (20 if command == "run" else 15)
    assert "--option" in params and params["--option"].multiple
    # the native backend's options keep their flags, every one of them, on both commands
    assert {flag_of(i) for i in NativeOptions.model_fields.values()} <= set(params)


def test_the_pytest_plugins_judge_options_are_the_command_lines():
    """The pytest plugin's judge options are the judge flags of ``ragbridge run``, prefixed, with the
    same help (JUDGE_FLAGS), all of them."""
    from ragbridge.pytest_plugin import pytest_addoption

    ours = {}

    class Parser:  # what pytest_addoption asks of pytest's parser
        def getgroup(self, *args):
            return self

        def addoption(self, name, **kw):
            ours[name] = kw["help"]

        def addini(self, *args, **kw):
            pass

    pytest_addoption(Parser())
    run = _params("run")
    for spec in JUDGE_FLAGS:
        assert ours[f"--ragbridge-{spec.flag[2:]}"] == spec.help == run[spec.flag].help


def test_every_judged_backends_options_take_what_every_judged_backend_takes():
    """A judged backend's options model is a JudgedOptions: an option every judged backend takes
    (concurrency; a structured-output mode) is one field there, reached as BACKEND.KEY for each."""
    judged = [b for b in get_backends().values() if any(s.judge for s in b.metrics())]
    assert {b.name for b in judged} >= {"rubric", "ragas", "deepeval", "trulens", "phoenix"}
    for b in judged:
        assert issubclass(b.Options, JudgedOptions), b.name
        assert {"concurrency", "structured_output"} <= set(b.Options.model_fields)
        with pytest.raises(OptionError, match=re.escape(
                f"{b.name}.structured_output must be one of auto, schema, json_object, tool, prompt, "
                "got 'xml'")):
            backend_options({b.name: b}, [("python", {b.name: {"structured_output": "xml"}})])


# -- from the command line ----------------------------------------------------------------------------


def _native_values(res) -> dict:
    assert res.returncode == 0, res.stderr
    return {(r["metric"], r["mean"]) for r in json.loads(res.stdout)["summary"]}


def test_a_native_option_from_option_the_config_file_and_its_own_flag_alike(tmp_path):
    """``--gain exponential``, ``--option native.gain=exponential`` and ``[backends.native]`` in
    ragbridge.toml give the same run; the command line goes over the file; run.json records it."""
    flag = _native_values(ragbridge_cli(*RUN, "--out", tmp_path / "flag", "--gain", "exponential",
                                        "--decline-phrase", "no idea", cwd=tmp_path))
    generic = _native_values(ragbridge_cli(*RUN, "--out", tmp_path / "generic", "--option",
                                           "native.gain=exponential", "--option",
                                           "native.decline_phrases=no idea", cwd=tmp_path))
    assert flag == generic
    (tmp_path / "ragbridge.toml").write_text('[backends.native]\ngain = "exponential"\n'
                                             'decline_phrases = ["no idea"]\n')
    toml = _native_values(ragbridge_cli(*RUN, "--out", tmp_path / "toml", cwd=tmp_path))
    assert toml == flag
    over = _native_values(ragbridge_cli(*RUN, "--out", tmp_path / "over", "--option", "native.gain=linear",
                                        "--option", "native.decline_phrases=[]", cwd=tmp_path))
    assert over != toml
    recorded = json.loads((tmp_path / "toml" / "run.json").read_text())["options"]
    assert recorded["gain"] == "exponential" and recorded["decline_phrases"] == ["no idea"]
    assert recorded["backend_options"] == {}
    recorded = json.loads((tmp_path / "over" / "run.json").read_text())["options"]
    assert recorded["gain"] == "linear" and recorded["decline_phrases"] is None


@pytest.mark.parametrize("args, words", [
    (["--option", "nope.concurrency=2"], "--option nope.concurrency: unknown backend 'nope'; registered "
                                         "backends: deepeval, native, phoenix, ragas, rubric, trulens"),
    (["--option", "ragas.concurency=2"], "--option ragas.concurency: the ragas backend has no option "
                                         "'concurency'; its options: concurrency"),
    (["--option", "trulens.max_score=5"], "--option trulens.max_score must be one of 3, 10, 1, got '5'"),
    (["--option", "deepeval.include_reason=maybe"], "--option deepeval.include_reason must be true or false, "
                                                    "got 'maybe'"),
    (["--option", "phoenix.temperature=hot"], "--option phoenix.temperature must be a number from 0 to 2, "
                                              "got 'hot'"),
    (["--option", "deepeval.threshold={0.7}"], "--option deepeval.threshold: '{0.7}' is not JSON"),
    (["--option", "native.gain"], "--option takes BACKEND.KEY=VALUE (e.g. --option native.gain=exponential), "
                                  "got 'native.gain'"),
    (["--gain", "cubic"], "--gain must be one of linear, exponential, got 'cubic'"),
    (["--span-min-overlap", "1.5"], "--span-min-overlap must be a number from 0 to 1, got 1.5"),
    (["--k", "0"], "--k must be a whole number of at least 1, got 0"),
    (["--batch-size", "0"], "--batch-size must be a whole number of at least 1, got 0"),
])
def test_a_bad_option_is_named_with_what_it_takes_and_nothing_is_written(args, words, tmp_path):
    res = ragbridge_cli(*RUN, "--out", tmp_path / "run", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and words in " ".join(res.stderr.split()), res.stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_table_in_the_config_file_is_named_by_file_table_and_key(tmp_path):
    (tmp_path / "ragbridge.toml").write_text("[backends.deepeval]\nthreshold = \"high\"\n")
    res = ragbridge_cli(*RUN, "--out", tmp_path / "run", cwd=tmp_path)
    assert res.returncode == 2 and not (tmp_path / "run").exists()
    assert (f"{tmp_path / 'ragbridge.toml'}: [backends.deepeval] threshold must be a number, or a mapping of "
            "text to number, got 'high'") in " ".join(res.stderr.split())
    (tmp_path / "ragbridge.toml").write_text("[backends]\nnative = 3\n")
    res = ragbridge_cli(*RUN, "--out", tmp_path / "run", cwd=tmp_path)
    assert res.returncode == 2 and "[backends] must hold one table per backend" in res.stderr


@pytest.mark.slow  # two runs that import DeepEval: about 20 s
def test_a_library_backends_option_reaches_the_library_from_the_command_line(tmp_path):
    """DeepEval's threshold, set by --option and by ragbridge.toml, decides its pass/fail (DeepEval's
    own ``success``), with the stub judge; the command line goes over the file."""
    pytest.importorskip("deepeval")
    from ragbridge.testing import StubJudge

    def passed(out, *args):
        res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / out, "--backend", "deepeval", "--metric",
                            "answer_relevance", "--judge-model", "stub", "--judge-base-url", stub.base_url,
                            "--cache-mode", "off", "--no-progress", *args, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        run = ragbridge.load_run(tmp_path / out)
        return {s.passed for s in run.scores if s.case_id == "billing-refund-window"}

    with StubJudge() as stub:
        (tmp_path / "ragbridge.toml").write_text("[backends.deepeval]\n"
                                                 "threshold = {answer_relevance = 0.6}\n")
        assert passed("a", "--option", "deepeval.threshold=0.01") == {True}
        assert passed("b") == {False}  # its relevancy is 0.5
        recorded = json.loads((tmp_path / "b" / "run.json").read_text())
        assert recorded["options"]["backend_options"] == {
            "deepeval": {"threshold": {"answer_relevance": 0.6}}}
        assert recorded["pass_marks"] == {"deepeval": {"answer_relevance": 0.6}}


def test_backends_lists_each_backends_options_with_type_default_and_help(tmp_path):
    res = ragbridge_cli("backends", "deepeval", cwd=tmp_path, env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    for row in describe(get_backends()["deepeval"].Options):
        assert f"deepeval.{row['name']}: {row['type']}; default " in text, row
    assert ("deepeval.threshold: number, or mapping of text to number; default none; DeepEval's pass/fail "
            "threshold and the run's pass mark") in text
    assert all(len(line) <= 80 for line in res.stdout.splitlines())
    res = ragbridge_cli("backends", "--json", cwd=tmp_path)
    doc = {b["name"]: b for b in json.loads(res.stdout)["backends"]}
    assert [o["name"] for o in doc["native"]["options"]] == list(NativeOptions.model_fields)
    gain = doc["native"]["options"][0]
    assert gain == {"name": "gain", "type": "one of linear, exponential", "default": "linear",
                    "help": NativeOptions.model_fields["gain"].description, "flag": "--gain"}
    assert [o["name"] for o in doc["trulens"]["options"]][:3] == ["concurrency", "structured_output", "api"]
    res = ragbridge_cli("backends", "nope", cwd=tmp_path)
    assert res.returncode == 2 and "unknown backend 'nope'; registered backends: deepeval," in res.stderr


# -- from Python -----------------------------------------------------------------------------------


def test_python_takes_a_mapping_or_the_backends_model_and_checks_it(example_cases):
    cases = example_cases[:12]

    def means(options):
        run = ragbridge.evaluate(cases, metrics=["ndcg@5"], options=options)
        return [s.value for s in run.scores]

    linear = means(None)
    exponential = means({"native": {"gain": "exponential"}})
    assert exponential != linear
    assert means({"native": NativeOptions(gain="exponential")}) == exponential
    assert means(RunOptions(backend_options={"native": {"gain": "exponential"}})) == exponential
    with pytest.raises(ragbridge.RunError, match=re.escape("options['nope']: unknown backend 'nope'")):
        means({"nope": {}})
    with pytest.raises(ragbridge.RunError, match=re.escape("native.gain must be one of linear, exponential, "
                                                           "got 'cubic'")):
        means({"native": {"gain": "cubic"}})
    with pytest.raises(ragbridge.RunError, match="must be a NativeOptions"):
        means({"native": JudgedOptions()})
    with pytest.raises(ragbridge.RunError, match=re.escape("repeats must be a whole number from 1 to 100, "
                                                           "got True")):
        ragbridge.evaluate(cases, repeats=True)


def test_the_pytest_plugin_takes_evaluates_keywords_and_the_config_files_options(pytester):
    (pytester.path / "ragbridge.toml").write_text('[backends.native]\ngain = "exponential"\n')
    pytester.makepyfile(test_opts=f'''
import pytest
import ragbridge

CASES = ragbridge.load_cases({str(EXAMPLE)!r})[:12]

def test_options(ragbridge_evaluate):
    toml = ragbridge_evaluate(CASES, metrics=["ndcg@5"], name="toml")
    plain = ragbridge.evaluate(CASES, metrics=["ndcg@5"])
    exp = ragbridge.evaluate(CASES, metrics=["ndcg@5"], options={{"native": {{"gain": "exponential"}}}})
    assert [s.value for s in toml.scores] == [s.value for s in exp.scores] != [s.value for s in plain.scores]
    over = ragbridge_evaluate(CASES, metrics=["ndcg@5"], name="over",
                              options={{"native": {{"gain": "linear"}}}}, batch_size=5)
    assert [s.value for s in over.scores] == [s.value for s in plain.scores]

def test_keywords(ragbridge_evaluate):
    run = ragbridge_evaluate(CASES, metrics=["recall@k"], k=3)
    assert {{s.metric for s in run.scores}} == {{"recall@3"}}
    with pytest.raises(TypeError, match="unexpected keyword argument 'gain'; it takes ragbridge.evaluate's "
                                        "[(]options, dataset_path.*[)] and k, generator_model; a backend's "
                                        "option goes in options="):
        ragbridge_evaluate(CASES, gain="exponential")
''')
    res = pytester.runpytest_inprocess("-p", "ragbridge", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
