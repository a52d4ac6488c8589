"""The plugin guide's example (plugins/README.md, "Writing a backend") works as written: its plugin,
registered in this process as an installed one would be, scores a run with its own metric, which the
report places by what the plugin registered, and it keeps the backend contract."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

import ragbridge
from ragbridge import metrics
from ragbridge.plugin import Case, Metric
from ragbridge.report.data import report_data
from ragbridge.testing import plugin_registered
from ragbridge.testing.contract import BackendContract

GUIDE = Path(__file__).resolve().parent.parent / "plugins" / "README.md"


def guide_plugin() -> types.ModuleType:
    """The first Python block of the guide's "Writing a backend", as the module ``my_backend``."""
    section = GUIDE.read_text(encoding="utf-8").split("## Writing a backend", 1)[1]
    source = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert source.startswith("# my_backend.py\nfrom ragbridge.plugin import ")
    module = types.ModuleType("my_backend")
    exec(compile(source, "my_backend.py", "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.fixture
def registered():
    with plugin_registered(guide_plugin()) as plugin:
        yield plugin


def test_the_guides_plugin_scores_its_own_metric(registered, tmp_path):
    cases = [Case(id="short", question="Refund window?", answer="14 days."),
             Case(id="long", question="Refund window?", answer="Refunds take 14 days. " * 20),
             Case(id="none", question="Refund window?")]
    run = ragbridge.evaluate(cases, backends=["length", "native"], metrics=["short_answer", "must_contain"],
                             out=tmp_path / "run")
    got = {(s.case_id, s.metric): s for s in run.scores if s.backend == "length"}
    assert got[("short", "short_answer")].value == 1.0 and got[("long", "short_answer")].value == 0.0
    assert got[("long", "short_answer")].native_value == len(cases[1].answer)
    assert got[("none", "short_answer")].reason == "skipped: case has no answer"
    # the metric the plugin registered is known as a canonical one is: its half, its pass mark
    assert metrics.find("short_answer") == Metric("short_answer", kind="answer check", half="generation",
                                                  meaning="1 if the answer is shorter than the length "
                                                          "backend's limit, else 0",
                                                  pass_mark=1.0)
    assert metrics.default_pass_mark("short_answer") == 1.0
    data = report_data(ragbridge.load_run(tmp_path / "run"))
    assert "short_answer" in data["halves"]["generation"]


def test_the_guides_options_model_is_set_from_python_and_the_config_file_and_checked(registered, tmp_path):
    """The guide's backend declares one option; it is set as the guide says, from Python and from
    ragbridge.toml, and a wrong one stops the run before it starts, naming it."""
    cases = [Case(id="short", question="Refund window?", answer="14 days."),
             Case(id="long", question="Refund window?", answer="Refunds take 14 days to reach you.")]

    def values(options):
        run = ragbridge.evaluate(cases, backends=["length"], metrics=["short_answer"], options=options)
        return {s.case_id: s.value for s in run.scores}

    assert values(None) == {"short": 1.0, "long": 1.0}  # the default limit, 200
    assert values({"length": {"limit": 10}}) == {"short": 1.0, "long": 0.0}
    from ragbridge.plugins import get_backends

    model = get_backends()["length"].Options
    assert values({"length": model(limit=5)}) == {"short": 0.0, "long": 0.0}
    (tmp_path / "ragbridge.toml").write_text("[backends.length]\nlimit = 9\n")
    assert values(ragbridge.RunOptions.load(cwd=tmp_path)) == {"short": 1.0, "long": 0.0}
    for bad, words in (({"limit": "x"}, "length.limit must be a whole number of at least 1, got 'x'"),
                       ({"limmit": 3}, "the length backend has no option 'limmit'; its options: limit")):
        with pytest.raises(ragbridge.RunError, match=re.escape(words)):
            values({"length": bad})
    (tmp_path / "ragbridge.toml").write_text("[backends.length]\nlimit = 0\n")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'ragbridge.toml'}: [backends.length] limit "
                                                   "must be a whole number of at least 1, got 0")):
        ragbridge.RunOptions.load(cwd=tmp_path)


def test_a_metric_leaves_with_its_plugin():
    assert metrics.find("short_answer") is None
    with plugin_registered(guide_plugin()):
        assert metrics.half_of("short_answer") == "generation"
    assert metrics.find("short_answer") is None


@pytest.mark.parametrize("bad, words", [
    (Metric("faithfulness", kind="judged", half="generation", meaning="mine"), "is a canonical metric"),
    (Metric("Tone", kind="judged", half="generation", meaning="how polite"), "lower case"),
    (Metric("tone", kind="vibes", half="generation", meaning="how polite"), "kind must be one of"),
    (Metric("tone", kind="judged", half="generation", meaning="how polite", pass_mark=2.0), "pass_mark"),
])
def test_a_metric_registered_wrong_is_a_clear_error(bad, words):
    plugin = types.ModuleType("wrong_metric")
    plugin.ragbridge_register_metrics = ragbridge.plugin.hookimpl(lambda register: register(bad))
    with plugin_registered(plugin):
        with pytest.raises(ValueError, match=words):
            metrics.find("anything_not_canonical")
    assert metrics.find("anything_not_canonical") is None  # and gone with its plugin


class TestTheGuidesBackendKeepsTheContract(BackendContract):
    backend = "length"

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _registered(cls):
        with plugin_registered(guide_plugin()):
            yield
