"""The versions of its library a backend supports (``Backend.supports``) and what changes between
them (``Backend.changes``): shown by ``ragbridge backends``, an installed version outside the range
refused before a run scores, and a run holding two versions of one library naming the changes in
run.json, compare and the report.
"""

import json
import types

import pytest

from conftest import EXAMPLE, needs_backend, ragbridge_cli

from ragbridge import evaluate, load_cases
from ragbridge.analysis import join_runs
from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl
from ragbridge.run import RunError

CHANGES = {"1.2": "the oldest version tested.",
           "1.3": "recall counts each label of a chunk, where 1.2 counted the chunk once.",
           "1.4": "relevance asks the judge for a 0-3 grade, where 1.3 asked yes or no."}


class MyLib(Backend):
    """A library-like backend at a version of its own, with the versions it supports declared."""

    name = "mylib"
    library = "mylib"
    supports = ">=1.2,<2"
    changes = CHANGES
    at = "1.4"

    def version(self):
        return self.at

    def available(self):
        return True

    def metrics(self):
        return [MetricSpec("relevance"), MetricSpec("recall")]

    async def score(self, metric, cases, ctx):
        for i, c in enumerate(cases):
            yield Score(case_id=c.id, metric=metric, backend=self.name, value=0.25 * (i % 4))


class MyLibOld(MyLib):
    name = "mylib==1.2"
    at = "1.2"

    async def score(self, metric, cases, ctx):
        for i, c in enumerate(cases):
            yield Score(case_id=c.id, metric=metric, backend=self.name, value=0.25 * ((i + 1) % 4))


@pytest.fixture
def mylib():
    from ragbridge.plugins import load_plugins, pm

    @hookimpl
    def ragbridge_register_backends(register):
        register(MyLib())
        register(MyLibOld())

    load_plugins()
    pm.register(types.SimpleNamespace(ragbridge_register_backends=ragbridge_register_backends),
                name="versions-test")
    yield
    pm.unregister(name="versions-test")


def test_supported_reads_the_range_and_changes_between_takes_the_versions_after_the_older():
    lib = MyLib()
    assert lib.supported() is True and lib.supported("1.2") is True
    assert lib.supported("1.1.9") is False and lib.supported("2.0") is False
    assert lib.changes_between("1.2", "1.4") == [("1.3", CHANGES["1.3"]), ("1.4", CHANGES["1.4"])]
    assert lib.changes_between("1.4", "1.3") == [("1.4", CHANGES["1.4"])]
    assert lib.changes_between("1.3", "1.3") == []
    assert Backend().supported("1.0") is None  # no library, no range: nothing to say


def test_a_run_of_two_versions_names_what_changes_between_them(mylib, tmp_path):
    """run.json records each backend's version and the plugin's changes between the oldest and the
    newest; compare (text and JSON) and the report (Markdown, HTML, JSON) name them."""
    out = tmp_path / "run"
    evaluate(load_cases(EXAMPLE)[:6], backends=["mylib==1.2", "mylib"], out=out)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["version_changes"] == {
        "mylib": {"versions": {"mylib==1.2": "1.2", "mylib": "1.4"},
                  "changes": {"1.3": CHANGES["1.3"], "1.4": CHANGES["1.4"]}}}
    done = ragbridge_cli("compare", out)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "mylib 1.2 to 1.4 (mylib==1.2: 1.2, mylib: 1.4): what changes, by its plugin:" in text
    assert f"1.3: {CHANGES['1.3']}" in text and f"1.4: {CHANGES['1.4']}" in text
    assert "the oldest version tested" not in text  # what changed before the older version is not news
    data = json.loads(ragbridge_cli("compare", out, "--json").stdout)
    assert data["version_changes"] == manifest["version_changes"]
    for fmt, name in (("md", "r.md"), ("html", "r.html"), ("json", "r.json")):
        done = ragbridge_cli("report", out, "--format", fmt, "-o", tmp_path / name)
        assert done.returncode == 0, done.stderr
    md = (tmp_path / "r.md").read_text()
    assert "**Library versions in this run**" in md and "recall counts each label of a chunk" in md
    html = (tmp_path / "r.html").read_text()
    assert 'class="note version-changes"' in html and "relevance asks the judge for a 0-3 grade" in html
    reported = json.loads((tmp_path / "r.json").read_text())["run"]
    assert reported["version_changes"] == manifest["version_changes"]


def test_one_version_of_a_library_names_no_changes(mylib, tmp_path):
    evaluate(load_cases(EXAMPLE)[:3], backends=["mylib"], out=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["version_changes"] == {}
    done = ragbridge_cli("report", tmp_path / "run", "--format", "md", "-o", tmp_path / "r.md")
    assert done.returncode == 0 and "Library versions" not in (tmp_path / "r.md").read_text()


def test_an_installed_version_outside_the_range_is_refused_before_anything_is_written(mylib, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setattr(MyLib, "at", "0.9")
    said = r"backend 'mylib': mylib 0.9 is installed, and the mylib backend supports mylib>=1.2,<2: install"
    with pytest.raises(RunError, match=said):
        evaluate(load_cases(EXAMPLE)[:3], backends=["mylib"], out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@needs_backend("ragas")
def test_the_cli_refuses_an_unsupported_installed_library_with_what_to_do(tmp_path, monkeypatch):
    from ragbridge_ragas.backend import RagasBackend

    monkeypatch.setattr(RagasBackend, "supports", ">=9")
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas", "--dry-run")
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    installed = RagasBackend().version()
    assert f"ragas {installed} is installed, and the ragas backend supports ragas>=9" in said
    assert "--backend ragas==" in said and "ragbridge environments list" in said
    assert not (tmp_path / "run").exists()


@needs_backend("ragas")
def test_backends_shows_the_range_whether_the_installed_version_is_in_it_and_the_changes(monkeypatch):
    from ragbridge_ragas.backend import RagasBackend

    installed = RagasBackend().version()
    monkeypatch.setattr(RagasBackend, "supports", ">=0.1,<1")
    monkeypatch.setattr(RagasBackend, "changes", {"0.1.0": "the first.", installed: "the installed one."})
    done = ragbridge_cli("backends", "ragas", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert f"supports ragas>=0.1,<1; installed: {installed} (supported)" in text
    assert "the installed one." in text and "in process (installed)" in text
    data = json.loads(ragbridge_cli("backends", "--json").stdout)
    ragas = next(b for b in data["backends"] if b["name"] == "ragas")
    assert ragas["supports"] == ">=0.1,<1" and ragas["supported"] is True
    assert ragas["changes"]["0.1.0"] == "the first." and installed in ragas["versions"] + [installed]
    monkeypatch.setattr(RagasBackend, "supports", ">=9")
    listed = " ".join(ragbridge_cli("backends", env={"COLUMNS": "80"}).stdout.split())
    assert f"ragas {installed} (not supported: ragas>=9)" in listed


class MyLibStrict(MyLib):
    """The newer version, refusing the judge's reply on every case but the first (as DeepEval 4.3.1
    refuses an explained verdict 3.9.9 reads as no)."""

    async def score(self, metric, cases, ctx):
        for i, c in enumerate(cases):
            if i == 0:
                yield Score(case_id=c.id, metric=metric, backend=self.name, value=1.0)
            else:
                yield Score(case_id=c.id, metric=metric, backend=self.name,
                            error="reply unusable: verdict 'Yes, it states this' is not yes or no")


def test_compare_and_the_report_name_the_cases_one_version_scored_and_the_other_errored_on(
        mylib, tmp_path, monkeypatch):
    """No figure counts a case only one version scored; compare's answer line, its JSON and the
    report's disagreement table list them, each side's value or error."""
    monkeypatch.setattr(MyLib, "score", MyLibStrict.score)
    out = tmp_path / "run"
    evaluate(load_cases(EXAMPLE)[:6], backends=["mylib==1.2", "mylib"], metrics=["relevance"], out=out)
    done = ragbridge_cli("compare", out, env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "1 of 6 cases compared" in text and "5 scored by one, errored at another" in text
    assert "Scored by one backend, errored at another: relevance, 5 case(s)" in text
    assert "scored by mylib==1.2, errored at mylib" in text and "mylib error: reply unusable" in text
    data = json.loads(ragbridge_cli("compare", out, "--json").stdout)
    one = data["scored_by_one"]
    assert len(one) == 5 and {r["scored"] for r in one} == {"mylib==1.2"}
    assert {r["errored"] for r in one} == {"mylib"} and all(r["mylib.status"] == "error" for r in one)
    assert all(r["mylib.reason"].startswith("reply unusable") for r in one)
    assert all(isinstance(r["mylib==1.2.value"], float) for r in one)
    for fmt, name in (("md", "r.md"), ("json", "r.json"), ("html", "r.html")):
        done = ragbridge_cli("report", out, "--format", fmt, "-o", tmp_path / name)
        assert done.returncode == 0, done.stderr
    listed = [d for d in json.loads((tmp_path / "r.json").read_text())["disagreements"] if d["scored_by_one"]]
    assert {d["case_id"] for d in listed} == {r["case_id"] for r in one}
    assert (tmp_path / "r.md").read_text().count("scored by one, errored at another") == 5
    assert "scored by one, errored at another" in (tmp_path / "r.html").read_text()


def test_trend_and_gate_warn_when_a_backends_library_version_changed_between_the_runs(
        mylib, tmp_path, monkeypatch):
    """diff, trend and gate --baseline say the same thing when mylib moved from 1.3 to 1.4 (runs made
    in one second are ordered by folder name)."""
    cases = load_cases(EXAMPLE)[:6]
    monkeypatch.setattr(MyLib, "at", "1.3")
    evaluate(cases, backends=["mylib"], out=tmp_path / "r1-old")
    monkeypatch.setattr(MyLib, "at", "1.4")
    evaluate(cases, backends=["mylib"], out=tmp_path / "r2-new")
    said = "backend mylib version changed: 1.3 -> 1.4"
    done = ragbridge_cli("diff", tmp_path / "r1-old", tmp_path / "r2-new")
    assert said in " ".join(done.stdout.split()), done.stdout + done.stderr
    data = json.loads(ragbridge_cli("trend", tmp_path / "r1-old", tmp_path / "r2-new", "--json").stdout)
    assert any(said in w for w in data["warnings"]), data["warnings"]
    done = ragbridge_cli("trend", tmp_path / "r1-old", tmp_path / "r2-new", env={"COLUMNS": "80"})
    assert done.returncode == 0 and said in " ".join(done.stderr.split()), done.stdout + done.stderr
    (tmp_path / "gates.toml").write_text('[[gate]]\ncheck = "relevance drop <= 0.5"\n')
    done = ragbridge_cli("gate", tmp_path / "r2-new", "--baseline", tmp_path / "r1-old",
                         "--config", tmp_path / "gates.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"warning: baseline: {said}" in " ".join(done.stdout.split())
    monkeypatch.setattr(MyLib, "at", "1.3")
    evaluate(cases, backends=["mylib"], out=tmp_path / "r3-same")
    quiet = json.loads(ragbridge_cli("trend", tmp_path / "r1-old", tmp_path / "r3-same",
                                      "--json").stdout)
    assert not any("version changed" in w for w in quiet["warnings"])


def test_versions_scored_in_different_runs_point_from_diff_to_compare_with_and_name_the_changes(
        mylib, tmp_path):
    """A mylib==1.2 run and a mylib (1.4) run share no backend: diff says which each has and points to
    compare --with, which names what changes between the two versions, as for one run holding both."""
    cases = load_cases(EXAMPLE)[:6]
    evaluate(cases, backends=["mylib==1.2"], out=tmp_path / "old")
    evaluate(cases, backends=["mylib"], out=tmp_path / "new")
    done = ragbridge_cli("diff", tmp_path / "old", tmp_path / "new")
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "base has backend(s) mylib==1.2; new has mylib (1.4)" in said
    assert f"ragbridge compare {tmp_path / 'old'} --with {tmp_path / 'new'}" in said
    (tmp_path / "gates.toml").write_text('[[gate]]\ncheck = "relevance drop <= 0.5"\n')
    done = ragbridge_cli("gate", tmp_path / "new", "--baseline", tmp_path / "old",
                         "--config", tmp_path / "gates.toml")
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "it scored mylib==1.2, the same library at another version" in said
    assert f"ragbridge compare {tmp_path / 'old'} --with {tmp_path / 'new'}" in said
    done = ragbridge_cli("compare", tmp_path / "old", "--with", tmp_path / "new")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "Library versions compared in this run mylib 1.2 to 1.4 (mylib==1.2: 1.2, mylib: 1.4)" in text
    data = json.loads(ragbridge_cli("compare", tmp_path / "old", "--with", tmp_path / "new", "--json").stdout)
    assert data["version_changes"]["mylib"]["versions"] == {"mylib==1.2": "1.2", "mylib": "1.4"}
    # what changes is the plugin's (the command line above runs without this test's plugin)
    joined = join_runs([tmp_path / "old", tmp_path / "new"])
    assert joined.manifest.version_changes["mylib"]["changes"] == {"1.3": CHANGES["1.3"],
                                                                   "1.4": CHANGES["1.4"]}


@needs_backend("phoenix")
def test_backends_says_which_metrics_differ_at_each_shipped_version():
    """Phoenix evals 2.13 offers answer_correctness, which 3.x removed: ``backends phoenix`` says so in
    its Versions table (and --json per version), whose changes column is true of every row."""
    from ragbridge_phoenix.backend import PhoenixBackend

    backend = PhoenixBackend()
    listed = {s.name for s in backend.metrics()}
    at = {v: {s.name for s in backend.metrics_at(v)} for v in ("2.13.0", "3.9.4")}
    assert at["2.13.0"] - at["3.9.4"] == {"answer_correctness"}
    done = ragbridge_cli("backends", "phoenix")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "what changes at this version" in text and "from the version before" not in text
    extra = sorted(at["2.13.0"] - listed)
    gone = sorted(listed - at["2.13.0"])
    said = "; ".join(([f"does not offer {', '.join(gone)}"] if gone else [])
                     + ([f"also offers {', '.join(extra)}"] if extra else []))
    narrow = ragbridge_cli("backends", "phoenix", env={"COLUMNS": "80"}).stdout
    assert said and said in " ".join(narrow.split())
    data = json.loads(ragbridge_cli("backends", "phoenix", "--json").stdout)["backends"][0]
    assert {v: set(names) for v, names in data["metrics_at"].items()} == at
