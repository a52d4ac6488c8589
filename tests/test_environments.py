"""A backend at a version of its library (``ragas==0.3.9``), in an environment uv builds from the lock
its plugin ships, scored by a worker process over a pipe, its judge calls through the run's gateway.

The slow tests build real environments with uv from the package index (uv's own cache, kept between
runs on one machine, makes a build take seconds); each test session builds into a cache folder of its
own (``RAGBRIDGE_CACHE_DIR``), never the user's.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import EXAMPLE, needs_backend, ragbridge_cli, stub_judge_config

from ragbridge import evaluate, load_cases
from ragbridge.run import RunError
from ragbridge.testing import StubJudge

pytest_plugins = ["pytester"]

SECRET = "sk-test-" + "9f3b" * 8  # the judge's key in these tests: never in a worker


@pytest.fixture(scope="session")
def env_cache(tmp_path_factory):
    """One cache folder for the session's environments: built once, then reused by every test."""
    return tmp_path_factory.mktemp("rb-cache")


@pytest.fixture
def cached(env_cache, monkeypatch):
    monkeypatch.setenv("RAGBRIDGE_CACHE_DIR", str(env_cache))
    return env_cache


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A cache folder with no environment in it (uv's own cache is left as it is)."""
    monkeypatch.setenv("RAGBRIDGE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def workers_of(pid: int) -> list[int]:
    """The worker processes (``ragbridge.run.worker``) whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"ragbridge.run.worker" in cmdline:
            found.append(int(entry.name))
    return found


# --------------------------------------------------------------------------------------------
# Names, versions and what cannot be built: errors before anything is scored (fast)


@pytest.mark.parametrize("name, says", [
    ("ragas>=0.3", "give one exact version, as NAME==VERSION"),
    ("ragas==", "give one exact version"),
    ("ragas==0.1.0", "no environment for ragas 0.1.0 (the versions its plugin ships a lock for: 0.2.15, "
                     "0.3.9, 0.4.3)"),
    ("native==0.1.0", "has no library whose version could be chosen"),
    ("nosuch==1.0", "unknown backend 'nosuch==1.0'"),
])
def test_a_version_ragbridge_has_no_environment_for_is_refused_before_anything_runs(name, says, tmp_path,
                                                                                   fresh_cache):
    with pytest.raises(RunError, match=None) as caught:
        evaluate(load_cases(EXAMPLE)[:2], backends=[name], out=tmp_path / "run")
    assert says in str(caught.value)
    assert not (tmp_path / "run").exists() and not fresh_cache.exists()


def test_the_cli_says_which_versions_there_are_and_exits_2(tmp_path, fresh_cache):
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas==0.2.0")
    assert done.returncode == 2, done.stderr
    assert "no environment for ragas 0.2.0" in done.stderr and "0.2.15, 0.3.9, 0.4.3" in done.stderr
    assert not (tmp_path / "run").exists()


RAGBRIDGE_TOML = """\
[judge]
model = "gpt-4o-mini"

[backends.ragas]
version = "0.0.1"   # no lock ships for it: a run stops at once, naming it
concurrency = 3

[backends.native]
gain = "exponential"
"""


def test_ragbridge_toml_sets_a_backends_version_beside_its_options(tmp_path, fresh_cache):
    """``[backends.ragas] version`` makes ``--backend ragas`` that version; the table's other keys are
    the backend's options, checked as ever (the version is no option of it), and a table holding only
    a version is no error either."""
    from ragbridge.backend import RunOptions
    from ragbridge.options import OptionError

    (tmp_path / "ragbridge.toml").write_text(RAGBRIDGE_TOML)
    options = RunOptions.load(cwd=tmp_path)
    assert options.versions == {"ragas": "0.0.1"}
    assert options.backend_options["ragas"].concurrency == 3
    assert options.backend_options["native"].gain == "exponential"
    with pytest.raises(RunError, match="no environment for ragas 0.0.1"):
        evaluate(load_cases(EXAMPLE)[:2], backends=["ragas"], options=options, out=tmp_path / "run")
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas", cwd=tmp_path)
    assert done.returncode == 2 and "no environment for ragas 0.0.1" in done.stderr, done.stderr

    (tmp_path / "pyproject.toml").write_text('[tool.ragbridge.backends.ragas]\nversion = "0.3.9"\n')
    (tmp_path / "ragbridge.toml").write_text('[backends.ragas]\nversion = "0.4.3"\n')
    assert RunOptions.load(cwd=tmp_path).versions == {"ragas": "0.4.3"}  # ragbridge.toml wins
    (tmp_path / "ragbridge.toml").unlink()
    assert RunOptions.load(cwd=tmp_path).versions == {"ragas": "0.3.9"}

    (tmp_path / "ragbridge.toml").write_text("[backends.ragas]\nversion = 3\n")
    with pytest.raises(OptionError, match=r"ragbridge.toml: \[backends.ragas\] version must be one exact"):
        RunOptions.load(cwd=tmp_path)
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas", cwd=tmp_path)
    assert done.returncode == 2 and "[backends.ragas] version must be one exact version" in done.stderr
    assert not (tmp_path / "run").exists()


def test_options_given_for_a_version_say_they_go_under_the_backends_name(tmp_path, fresh_cache):
    """A backend's options apply to every version of its library: given under ``ragas==0.3.9`` (on
    the command line, in ragbridge.toml, in Python) they are refused, saying where they go."""
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas==0.3.9",
                         "--option", "ragas==0.3.9.concurrency=2")
    assert done.returncode == 2, done.stderr
    assert "--option ragas==0.3.9.concurrency=2: a backend's options apply to every version" in done.stderr
    assert "(--option ragas.concurrency=VALUE, [backends.ragas])" in done.stderr
    (tmp_path / "ragbridge.toml").write_text('[backends."ragas==0.3.9"]\nconcurrency = 2\n')
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas==0.3.9", cwd=tmp_path)
    assert done.returncode == 2 and "[backends.ragas==0.3.9] concurrency: a backend's options apply" \
        in done.stderr, done.stderr
    with pytest.raises(RunError, match="ragas==0.3.9.concurrency: a backend's options apply to every"):
        evaluate(load_cases(EXAMPLE)[:2], backends=["ragas==0.3.9"],
                 options={"ragas==0.3.9": {"concurrency": 2}}, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_backends_names_the_backend_of_a_version():
    done = ragbridge_cli("backends", "ragas==0.3.9")
    assert done.returncode == 2
    assert "ragas==0.3.9 is the ragas backend at a version of its library" in done.stderr
    assert "ragbridge backends ragas" in done.stderr and "ragbridge environments list" in done.stderr


def test_the_pytest_plugin_reads_the_version_of_ragbridge_toml(pytester, fresh_cache):
    (pytester.path / "ragbridge.toml").write_text('[backends.ragas]\nversion = "0.0.1"\nconcurrency = 2\n')
    pytester.makepyfile(test_version=f'''
import pytest
import ragbridge

def test_version(ragbridge_evaluate):
    with pytest.raises(ragbridge.RunError, match="no environment for ragas 0.0.1"):
        ragbridge_evaluate(ragbridge.load_cases({str(EXAMPLE)!r})[:2], backends=["ragas"])
''')
    res = pytester.runpytest_inprocess("-p", "ragbridge", "-p", "no:cacheprovider", "-p", "no:deepeval",
                                       "-p", "no:langsmith_plugin")
    res.assert_outcomes(passed=1)


def test_without_uv_the_run_says_how_to_get_it(tmp_path, fresh_cache, monkeypatch):
    import builtins

    from ragbridge.run.environments import find_uv

    real_import = builtins.__import__

    def no_uv(name, *args, **kwargs):
        if name == "uv":
            raise ImportError("no uv")
        return real_import(name, *args, **kwargs)

    monkeypatch.delenv("RAGBRIDGE_UV", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_uv)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunError, match="uv is not installed: pip install uv"):
        find_uv()
    with StubJudge() as stub:
        done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas==0.3.9",
                             "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                             env={"RAGBRIDGE_UV": str(tmp_path / "no-uv-here")})
    assert done.returncode == 2 and "RAGBRIDGE_UV names" in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_scores_of_two_versions_read_as_two_backends(tmp_path):
    """compare's thresholds name a versioned backend as any other (the value after the last ``=``)."""
    from ragbridge.analysis.thresholds import Thresholds

    t = Thresholds.parse(["ragas==0.3.9=0.8", "ragas==0.4.3:faithfulness=0.6", "0.5"],
                         backends=["ragas==0.3.9", "ragas==0.4.3"])
    assert t.find("ragas==0.3.9", "faithfulness") == 0.8
    assert t.find("ragas==0.4.3", "faithfulness") == 0.6


def test_compare_says_how_many_cases_it_compared_when_one_backend_scored_none(tmp_path):
    """A run whose one backend errored on every case of a metric (as RAGAS 0.3.9's answer_relevance
    did): compare's answer says 0 cases were compared and that backend scored none, never that the
    verdicts differ on 0 cases as if they agreed."""
    import types

    from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl
    from ragbridge.plugins import load_plugins, pm

    class Scores(Backend):
        name = "mylib"

        def metrics(self):
            return [MetricSpec("relevance"), MetricSpec("recall")]

        async def score(self, metric, cases, ctx):
            for i, c in enumerate(cases):
                yield Score(case_id=c.id, metric=metric, backend=self.name, value=0.25 * (i % 4))

    class Fails(Scores):
        name = "mylib==1.2"

        async def score(self, metric, cases, ctx):
            for i, c in enumerate(cases):
                if metric == "relevance":
                    yield Score(case_id=c.id, metric=metric, backend=self.name,
                                error="APIConnectionError: Connection error.")
                else:
                    yield Score(case_id=c.id, metric=metric, backend=self.name, value=0.25 * (i % 4))

    @hookimpl
    def ragbridge_register_backends(register):
        register(Scores())
        register(Fails())

    load_plugins()
    plugin = types.SimpleNamespace(ragbridge_register_backends=ragbridge_register_backends)
    pm.register(plugin, name="compare-none-test")
    try:
        evaluate(load_cases(EXAMPLE)[:6], backends=["mylib", "mylib==1.2"], out=tmp_path / "run")
    finally:
        pm.unregister(name="compare-none-test")
    done = ragbridge_cli("compare", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert ("relevance: 2 backends, 0 of 6 cases compared; 6 scored by one, errored at another (listed "
            "below): mylib==1.2 scored none (6 errored)") in text
    assert "recall: 2 backends, 6 of 6 cases compared; their verdicts differ on 0" in text


def test_the_workers_judge_counts_calls_under_the_versioned_name():
    """The worker's gateway client files every call under ``ragas==0.3.9``: the tag it sends, whether
    it comes from the scope, the path or a header the library's client set."""
    import httpx

    from ragbridge.judge.remote import GatewayClient
    from ragbridge.judge.tag import TAG_HEADER, CallTag

    client = GatewayClient("http://127.0.0.1:9", "gw-key", {"model": "m", "base_url": "http://127.0.0.1:9/v1"},
                           aliases={"ragas": "ragas==0.3.9"})
    with client.tag_scope("ragas", "faithfulness", "c1"):
        sent = client.forwarded(httpx.Request("POST", client.base_url() + "/chat/completions"), b"{}")
    assert CallTag.from_header(sent.headers[TAG_HEADER]) == CallTag("ragas==0.3.9", "faithfulness", "c1")
    url = client.for_repeat(2).base_url("ragas", "context_recall", "c2", in_process=True)
    sent = client.forwarded(httpx.Request("POST", url + "/chat/completions"), b"{}")
    assert CallTag.from_header(sent.headers[TAG_HEADER]) == CallTag("ragas==0.3.9", "context_recall", "c2", 2)
    request = httpx.Request("POST", client.base_url() + "/chat/completions",
                            headers={TAG_HEADER: CallTag("ragas", "faithfulness", "c3").header()})
    sent = client.forwarded(request, b"{}")
    assert CallTag.from_header(sent.headers[TAG_HEADER]).backend == "ragas==0.3.9"
    assert sent.headers["authorization"] == "Bearer gw-key"


# --------------------------------------------------------------------------------------------
# Real environments (slow): built by uv from the package index


def _cases(n=8):
    return load_cases(EXAMPLE)[:n]


@pytest.mark.slow
@needs_backend("ragas")
def test_isolated_ragas_scores_exactly_as_the_installed_one_and_never_sees_the_key(cached, monkeypatch):
    """``ragas==0.4.3`` in its own environment beside the installed RAGAS 0.4.3, in one run: every
    metric's every score the same, each with its judge calls counted under its own name; the worker's
    arguments and environment hold neither the judge's key nor the gateway's."""
    monkeypatch.setenv("RB_TEST_JUDGE_KEY", SECRET)
    monkeypatch.setenv("SOME_OTHER_COPY", f"Bearer {SECRET}")
    seen: dict[int, tuple[bytes, bytes]] = {}

    def look(score):
        for pid in workers_of(os.getpid()):
            if pid not in seen:
                proc = Path(f"/proc/{pid}")
                seen[pid] = ((proc / "environ").read_bytes(), (proc / "cmdline").read_bytes())

    with StubJudge() as stub:
        judge = stub_judge_config(stub, embedding_model="stub-embedder", api_key_env="RB_TEST_JUDGE_KEY")
        run = evaluate(_cases(), backends=["ragas", "ragas==0.4.3"], judge=judge, on_score=look)
    assert run.manifest.backends == {"ragas": "0.4.3", "ragas==0.4.3": "0.4.3"}
    by = {(s.backend, s.case_id, s.metric): s for s in run.scores}
    metrics = sorted({m for _, _, m in by})
    assert len(metrics) >= 5
    for (backend, case_id, metric), native in by.items():
        if backend != "ragas":
            continue
        isolated = by[("ragas==0.4.3", case_id, metric)]
        assert (isolated.value, isolated.native_value, isolated.reason, bool(isolated.error)) == \
               (native.value, native.native_value, native.reason, bool(native.error)), (case_id, metric)
        assert isolated.judge_calls == native.judge_calls and isolated.judge_calls > 0, (case_id, metric)
    assert sum(1 for s in run.scores if s.value is not None) > len(by) // 2
    assert seen, "no worker process was seen during the run"
    for environ, cmdline in seen.values():
        assert SECRET.encode() not in environ and SECRET.encode() not in cmdline
        assert b"RB_TEST_JUDGE_KEY" not in environ and b"SOME_OTHER_COPY" not in environ


@pytest.mark.slow
def test_an_older_ragas_runs_beside_the_current_one_from_the_command_line(cached, tmp_path):
    """RAGAS 0.3.9 and 0.4.3, each in its environment: two backends of one run, compared, reported."""
    out = tmp_path / "run"
    picked = tmp_path / "six.jsonl"
    picked.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:6]))
    with StubJudge() as stub:
        done = ragbridge_cli("run", picked, "--out", out, "--backend", "ragas==0.3.9", "--backend",
                             "ragas==0.4.3", "--metric", "faithfulness", "--metric", "context_recall",
                             "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                             "--cache-mode", "off", "--no-progress")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backends"] == {"ragas==0.3.9": "0.3.9", "ragas==0.4.3": "0.4.3"}
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert {(s["backend"], s["metric"]) for s in scores} == {
        (b, m) for b in ("ragas==0.3.9", "ragas==0.4.3") for m in ("faithfulness", "context_recall")}
    assert all(s["value"] is not None and s["judge_calls"] > 0 for s in scores)
    compared = ragbridge_cli("compare", out, "--json")
    assert compared.returncode == 0, compared.stderr
    assert "ragas==0.3.9" in compared.stdout and "ragas==0.4.3" in compared.stdout
    from ragbridge_ragas.backend import RagasBackend  # what the plugin says changed from 0.3.9 to 0.4.3

    changes = dict(RagasBackend().changes_between("0.3.9", "0.4.3"))
    assert changes and manifest["version_changes"] == {
        "ragas": {"versions": {"ragas==0.3.9": "0.3.9", "ragas==0.4.3": "0.4.3"}, "changes": changes}}
    said = " ".join(ragbridge_cli("compare", out).stdout.split())
    assert "ragas 0.3.9 to 0.4.3 (ragas==0.3.9: 0.3.9, ragas==0.4.3: 0.4.3)" in said
    assert " ".join(changes["0.4.3"].split())[:60] in said
    report = ragbridge_cli("report", out, "--format", "md", "-o", tmp_path / "r.md")
    assert report.returncode == 0 and "ragas==0.3.9" in (tmp_path / "r.md").read_text()


@pytest.mark.slow
def test_a_version_in_ragbridge_toml_runs_there_with_the_tables_options(cached, tmp_path):
    """``[backends.ragas] version = "0.3.9"`` beside ``concurrency = 2``: ``--backend ragas`` is RAGAS
    0.3.9 in its environment, and the table's option reaches it (run.json records it)."""
    (tmp_path / "ragbridge.toml").write_text('[backends.ragas]\nversion = "0.3.9"\nconcurrency = 2\n')
    picked = tmp_path / "three.jsonl"
    picked.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:3]))
    with StubJudge() as stub:
        done = ragbridge_cli("run", picked, "--out", tmp_path / "run", "--backend", "ragas", "--metric",
                             "faithfulness", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                             "--cache-mode", "off", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["backends"] == {"ragas==0.3.9": "0.3.9"}
    assert manifest["options"]["backend_options"] == {"ragas": {"concurrency": 2}}
    scores = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 3 and {s["backend"] for s in scores} == {"ragas==0.3.9"}
    assert all(s["value"] is not None and s["judge_calls"] > 0 for s in scores)


@pytest.mark.slow
@needs_backend("ragas")
def test_a_killed_worker_loses_no_score_and_the_run_resumes(cached, tmp_path):
    from ragbridge.run.environments import envs_root  # noqa: F401 - the cache is the fixture's

    out = tmp_path / "run"
    with StubJudge(latency=0.15) as stub:
        args = ["run", EXAMPLE, "--out", out, "--backend", "ragas==0.4.3", "--metric", "faithfulness",
                "--judge-model", "stub-judge", "--judge-base-url", stub.base_url, "--no-progress",
                "--max-concurrency", "2"]
        proc = subprocess.Popen([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                                 *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        scores = out / "scores.jsonl"
        deadline = time.monotonic() + 240
        killed = None
        while time.monotonic() < deadline and killed is None:
            if scores.exists() and len(scores.read_text().splitlines()) >= 5:
                for pid in workers_of(proc.pid):
                    os.kill(pid, signal.SIGKILL)
                    killed = pid
            time.sleep(0.05)
        assert killed is not None, "the worker was not seen scoring"
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 3, stderr  # finished, with the killed worker's cases errored
        lines = [json.loads(line) for line in scores.read_text().splitlines()]
        kept = [s for s in lines if s["error"] is None]
        errored = [s for s in lines if s["error"]]
        assert len(kept) >= 5 and errored
        assert all(f"(pid {killed}) ended: killed by signal 9" in s["error"] for s in errored)
        again = ragbridge_cli("run", EXAMPLE, "--out", out, "--backend", "ragas==0.4.3", "--metric",
                              "faithfulness", "--judge-model", "stub-judge", "--judge-base-url",
                              stub.base_url, "--no-progress")
    assert again.returncode == 0, again.stderr
    final = {}
    for line in scores.read_text().splitlines():
        s = json.loads(line)
        final[s["case_id"]] = s
    assert len(final) == 53 and all(s["error"] is None for s in final.values())
    for s in kept:  # what was scored before the kill is what the run keeps
        assert final[s["case_id"]]["value"] == s["value"]
    assert f"resumed: {len(kept)} score(s) kept" in again.stdout


_RAGAS_OWN = textwrap.dedent("""
    import json, math, os, sys, warnings
    warnings.filterwarnings("ignore")
    os.environ["RAGAS_DO_NOT_TRACK"] = "true"
    import ragas
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings
    from ragas import EvaluationDataset, evaluate
    from ragas.embeddings import LangchainEmbeddingsWrapper
    from ragas.llms import LangchainLLMWrapper
    from ragas.metrics import Faithfulness, ResponseRelevancy

    path, base = sys.argv[1:3]
    llm = LangchainLLMWrapper(ChatOpenAI(model="stub-judge", base_url=base, api_key="x", max_tokens=4096))
    emb = LangchainEmbeddingsWrapper(OpenAIEmbeddings(model="text-embedding-3-small", base_url=base,
                                                      api_key="x", check_embedding_ctx_length=False))
    frame = evaluate(EvaluationDataset.from_jsonl(path), metrics=[Faithfulness(), ResponseRelevancy()],
                     llm=llm, embeddings=emb, show_progress=False).to_pandas()
    print(json.dumps({"version": ragas.__version__, "faithfulness": frame["faithfulness"].tolist(),
                      "answer_relevance": frame["answer_relevancy"].tolist()}))
""")


@pytest.mark.slow
@needs_backend("ragas")
def test_ragas_0_3_answer_relevance_beside_faithfulness_scores_as_ragas_own_evaluate(cached, tmp_path):
    """RAGAS 0.3.9's AnswerRelevancy embeds with its synchronous ``embed_text`` inside ``ascore``: in
    the worker, beside faithfulness, every case is scored (none errored, no hang), each score what
    RAGAS 0.3.9's own ``ragas.evaluate`` gives in that environment."""
    from ragas import EvaluationDataset, SingleTurnSample

    from ragbridge.run.isolated import prepare

    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()[:6]]
    samples = [SingleTurnSample(user_input=r["question"], response=r["answer"], reference=r["reference"],
                                retrieved_contexts=[c["text"] for c in r["contexts"]])
               for r in rows]
    golden = tmp_path / "golden.ragas.jsonl"
    EvaluationDataset(samples=samples).to_jsonl(str(golden))
    env = prepare(["ragas==0.3.9"])["ragas==0.3.9"]
    out = tmp_path / "run"
    with StubJudge() as stub:
        done = ragbridge_cli("run", golden, "--out", out, "--backend", "ragas==0.3.9", "--metric",
                             "faithfulness", "--metric", "answer_relevance", "--judge-model", "stub-judge",
                             "--judge-base-url", stub.base_url, "--no-progress", "--cache-mode", "off")
        own = subprocess.run([str(env.python), "-c", _RAGAS_OWN, str(golden), stub.base_url],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert own.returncode == 0, own.stderr[-2000:]
    theirs = json.loads(own.stdout.splitlines()[-1])
    assert theirs["version"] == "0.3.9"
    order = [json.loads(line)["id"] for line in (out / "cases.jsonl").read_text().splitlines()]
    lines = (out / "scores.jsonl").read_text().splitlines()
    scores = {(s["metric"], s["case_id"]): s for s in map(json.loads, lines)}
    assert len(scores) == 12 and all(s["error"] is None for s in scores.values())
    for metric in ("faithfulness", "answer_relevance"):
        ours = [scores[(metric, cid)]["value"] for cid in order]
        assert ours == pytest.approx(theirs[metric], abs=1e-6), metric
    assert len(set(theirs["answer_relevance"])) > 2  # the embeddings mattered


_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from ragbridge.run.environments import ensure
    from ragbridge.run.isolated import backend_named

    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.01)
    env = ensure(backend_named("ragas==0.3.9").environment_spec(), note=lambda t: print(t, flush=True))
    print("READY", env.path, env.ready(), flush=True)
""")


@pytest.mark.slow
def test_two_runs_building_one_environment_share_one_build(fresh_cache, tmp_path):
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _BUILD, str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ)) for _ in range(2)]
    time.sleep(1.0)  # both started (Python and ragbridge imported), waiting for the word
    go.touch()
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    text = "".join(o for o, _ in outs)
    assert text.count("building the environment of ragas==0.3.9 with uv") == 1, text
    assert text.count("waiting for another run that is building") == 1, text
    ready = [line for line in text.splitlines() if line.startswith("READY")]
    assert len(ready) == 2 and len(set(ready)) == 1 and ready[0].endswith("True")
    assert len(list((fresh_cache / "envs").glob("ragas-0.3.9-*"))) == 1


@pytest.mark.slow
def test_kill_9_of_a_build_ends_the_uv_it_started(fresh_cache, tmp_path):
    """``kill -9`` of the process building an environment (its process alone, not its group): the uv
    it started ends with it, leaving nothing that writes into the folder the next build removes."""
    go = tmp_path / "go"
    go.touch()
    proc = subprocess.Popen([sys.executable, "-c", _BUILD, str(go)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    uv: list[int] = []
    while time.monotonic() < deadline and not uv:
        uv = [pid for pid in _children(proc.pid) if b"sync" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        time.sleep(0.01)
    assert uv, "uv pip sync was not seen"
    proc.kill()
    proc.wait()
    time.sleep(0.5)
    left = [pid for pid in uv if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "uv outlived the build that started it"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.slow
def test_a_killed_build_leaves_no_environment_in_use(fresh_cache, tmp_path):
    from ragbridge.run.environments import ensure
    from ragbridge.run.isolated import backend_named

    go = tmp_path / "go"
    go.touch()
    proc = subprocess.Popen([sys.executable, "-c", _BUILD, str(go)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    envs = fresh_cache / "envs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed once the build has installed part of the lock
        tmp = list(envs.glob(".tmp-ragas-0.3.9-*/lib/python*/site-packages/*"))
        if len(tmp) > 20:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and the uv it started
    proc.wait()
    spec = backend_named("ragas==0.3.9").environment_spec()
    assert not spec.path.exists() and not spec.ready()
    assert list(envs.glob(".tmp-ragas-0.3.9-*")), "the kill came after the build"
    import fcntl

    left = envs / f".{spec.path.name}.lock"  # as docs/environments.md says: left, held by no one
    with open(left, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    ensure(spec)
    assert spec.ready() and not list(envs.glob(".tmp-ragas-0.3.9-*")) and not left.exists()


@pytest.mark.slow
def test_an_unreachable_index_is_said_with_what_to_do(fresh_cache, tmp_path):
    with StubJudge() as stub:
        done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas==0.3.9",
                             "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                             "--no-progress",
                             env={"UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple", "UV_NO_CACHE": "1"})
    assert done.returncode == 2, done.stderr
    assert "building the environment of ragas==0.3.9" in done.stderr  # a note, not a progress display
    assert "cannot build the environment of ragas==0.3.9" in done.stderr
    assert "the package index could not be reached" in done.stderr and "127.0.0.1:9" in done.stderr
    assert not (tmp_path / "run").exists()
    envs = fresh_cache / "envs"
    assert not list(envs.glob("ragas-*")) and not list(envs.glob(".tmp-*"))
    assert not list(envs.glob(".*.lock")), "the failed build left its lock file"


@pytest.mark.slow
def test_a_lock_without_a_wheel_for_this_python_is_said_with_what_to_do(fresh_cache, tmp_path):
    """A plugin whose lock pins a release with no wheel for this Python (numpy 1.21.0: wheels up to
    Python 3.9): the reason, the Python, and what to do."""
    from ragbridge.plugin import Backend, MetricSpec, hookimpl
    from ragbridge.plugins import pm

    package = tmp_path / "rb_old_numpy"
    (package / "locks").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "locks" / "1.21.0.txt").write_text("numpy==1.21.0\n")
    sys.path.insert(0, str(tmp_path))

    import rb_old_numpy  # noqa: F401 - the package the backend class lives in

    class OldNumpy(Backend):
        name = "oldnumpy"
        library = "numpy"

        def metrics(self):
            return [MetricSpec("must_contain")]

    OldNumpy.__module__ = "rb_old_numpy"

    class Plugin:
        @hookimpl
        def ragbridge_register_backends(self, register):
            register(OldNumpy())

    plugin = Plugin()
    pm.register(plugin, name="oldnumpy")
    try:
        with pytest.raises(RunError) as caught:
            evaluate(load_cases(EXAMPLE)[:2], backends=["oldnumpy==1.21.0"], out=tmp_path / "run")
    finally:
        pm.unregister(plugin)
        sys.path.remove(str(tmp_path))
    text = str(caught.value)
    assert "cannot build the environment of oldnumpy==1.21.0" in text
    assert "has no wheel for this Python" in text and "numpy" in text
    assert not (tmp_path / "run").exists()


def test_a_range_for_a_version_names_the_versions_there_are(tmp_path, fresh_cache):
    done = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "ragas>=0.3")
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "give one exact version, as NAME==VERSION" in said and "mylib" not in said
    assert "ragas runs at 0.2.15, 0.3.9, 0.4.3 (e.g. --backend ragas==0.4.3)" in said
    assert not (tmp_path / "run").exists()


def test_removing_a_version_there_is_no_lock_or_environment_for_exits_2_naming_the_versions(fresh_cache):
    done = ragbridge_cli("environments", "remove", "ragas==0.3.8")
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "'ragas==0.3.8': no such version to remove" in said and "ragas: 0.2.15, 0.3.9, 0.4.3" in said
    done = ragbridge_cli("environments", "remove", "ragas==0.3.9")  # shipped, not built: nothing to do
    assert done.returncode == 0 and "no environment to remove" in done.stdout, done.stdout + done.stderr


def test_environments_list_names_the_versions_each_backend_can_run_at(fresh_cache):
    done = ragbridge_cli("environments", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert listed["versions"]["ragas"] == ["0.2.15", "0.3.9", "0.4.3"]
    assert listed["environments"] == [] and listed["folder"] == str(fresh_cache / "envs")


@pytest.mark.slow
def test_environments_build_then_remove(fresh_cache):
    done = ragbridge_cli("environments", "build", "ragas==0.3.9")
    assert done.returncode == 0, done.stderr
    assert "building the environment of ragas==0.3.9" in done.stderr and "ready in" in done.stdout
    listed = json.loads(ragbridge_cli("environments", "list", "--json").stdout)["environments"]
    assert [(e["backend"], e["version"], e["current"]) for e in listed] == [("ragas", "0.3.9", True)]
    python = listed[0]["executable"]
    ran = subprocess.run([python, "-c", "import ragas; print(ragas.__version__)"], capture_output=True,
                         text=True)
    assert ran.stdout.strip() == "0.3.9"
    shown = ragbridge_cli("environments", "list", env={"COLUMNS": "80"}).stdout
    assert f"ragas==0.3.9: python {python}" in shown
    again = ragbridge_cli("environments", "build", "ragas==0.3.9")  # made: nothing to build
    assert again.returncode == 0 and "building" not in again.stderr
    gone = ragbridge_cli("environments", "remove", "ragas==0.3.9")
    assert gone.returncode == 0 and "removed ragas==0.3.9" in gone.stdout
    assert not list((fresh_cache / "envs").glob("ragas-*"))


@pytest.mark.slow
def test_on_ray_a_library_version_runs_in_rays_uv_runtime_env(cached):
    """``ragas==0.3.9`` with the Ray executor: Ray's own uv runtime environment installs the lock for
    the scorer actors (no worker of ragbridge's), and the scores are those of the local worker."""
    pytest.importorskip("ray")
    from ragbridge.run.isolated import ray_runtime_env
    from ragbridge.run.ray_executor import RayExecutor

    spec = ray_runtime_env("ragas==0.3.9")["uv"]
    assert "ragas==0.3.9" in spec["packages"] and "--no-build" in spec["uv_pip_install_options"]
    cases = _cases(4)
    with StubJudge() as stub:
        judge = stub_judge_config(stub)
        local = evaluate(cases, backends=["ragas==0.3.9"], metrics=["faithfulness"], judge=judge)
        on_ray = evaluate(cases, backends=["ragas==0.3.9"], metrics=["faithfulness"], judge=judge,
                          executor=RayExecutor(num_cpus=2))
    assert on_ray.manifest.backends == {"ragas==0.3.9": "0.3.9"}
    ours = {s.case_id: (s.backend, s.value, s.error, s.judge_calls) for s in local.scores}
    assert {s.case_id: (s.backend, s.value, s.error, s.judge_calls) for s in on_ray.scores} == ours
    assert all(v[1] is not None and v[3] > 0 for v in ours.values())


def _worker(env=None):
    return subprocess.Popen([sys.executable, "-m", "ragbridge.run.worker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})


def _say(proc, message):
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _hear(proc):
    """The worker's next message, past the ``alive`` ones it sends every second."""
    while True:
        message = json.loads(proc.stdout.readline())
        if message != {"alive": True}:
            return message


@pytest.mark.slow  # spawns a worker process
def test_the_worker_speaks_its_protocol_over_the_pipe():
    """The worker's side of the pipe, driven as a run drives it (here with the native backend and this
    Python): the hello, a job's scores then its end, the close; anything a backend prints goes to
    stderr, never into the pipe; a run speaking another protocol version is refused."""
    from ragbridge.backend import RunOptions, case_record
    from ragbridge.run.worker import options_record

    options = options_record(RunOptions())
    proc = _worker()
    _say(proc, {"ragbridge_worker": 1, "backend": "native", "name": "native", "plugin": "ragbridge.native",
                "options": options, "judge": None})
    ready = _hear(proc)
    assert ready["ready"] is True and ready["pid"] == proc.pid and "must_contain" in ready["metrics"]
    cases = load_cases(EXAMPLE)[:3]
    _say(proc, {"op": "score", "job": 7, "metric": "must_contain", "repeat": 0,
                "cases": [case_record(cases, i) for i in range(3)]})
    got = [_hear(proc) for _ in range(4)]
    assert [m["job"] for m in got] == [7] * 4 and got[-1] == {"job": 7, "done": True}
    assert sorted(m["score"]["case_id"] for m in got[:3]) == sorted(c.id for c in cases)
    assert all(m["score"]["metric"] == "must_contain" for m in got[:3])
    _say(proc, {"op": "close"})
    assert _hear(proc) == {"closed": True}
    assert proc.wait(timeout=30) == 0

    other = _worker()
    _say(other, {"ragbridge_worker": 2, "backend": "native", "name": "native"})
    refused = _hear(other)
    assert refused["ready"] is False and "protocol 1" in refused["error"]
    other.stdin.close()
    other.wait(timeout=30)


@pytest.mark.slow  # spawns a worker process
def test_a_worker_whose_run_is_gone_exits():
    proc = _worker()
    proc.stdin.close()  # the run died before it said anything
    assert proc.wait(timeout=30) == 0


LOUD = textwrap.dedent('''
    import os, sys
    from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl

    print("a plugin that prints as it is imported")

    class Loud(Backend):
        name = "loud"
        library = "numpy"

        def metrics(self):
            return [MetricSpec("must_contain")]

        async def score(self, metric, cases, ctx):
            for case in cases:
                print("scoring", case.id)
                os.write(1, b"and straight to file descriptor 1\\n")
                yield Score(case_id=case.id, metric=metric, backend=self.name, value=1.0)

    @hookimpl
    def ragbridge_register_backends(register):
        register(Loud())
''')


@pytest.mark.slow  # spawns a worker process
def test_what_a_library_prints_never_reaches_the_pipe(tmp_path):
    from ragbridge.backend import RunOptions, case_record
    from ragbridge.run.worker import options_record

    (tmp_path / "rb_loud.py").write_text(LOUD)
    options = options_record(RunOptions())
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    proc = _worker({"PYTHONPATH": path})
    _say(proc, {"ragbridge_worker": 1, "backend": "loud", "name": "loud==1.0", "plugin": "rb_loud",
                "options": options, "judge": None})
    assert _hear(proc)["ready"] is True
    cases = load_cases(EXAMPLE)[:2]
    _say(proc, {"op": "score", "job": 1, "metric": "must_contain", "repeat": 0,
                "cases": [case_record(cases, i) for i in range(2)]})
    got = [_hear(proc) for _ in range(3)]
    assert [m.get("score", {}).get("value") for m in got[:2]] == [1.0, 1.0] and got[2]["done"]
    _say(proc, {"op": "close"})
    assert _hear(proc) == {"closed": True}
    assert proc.wait(timeout=30) == 0
    printed = proc.stderr.read().decode()
    assert "scoring " + cases[0].id in printed and "straight to file descriptor 1" in printed


STUCK = textwrap.dedent('''
    import time
    from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl

    class Stuck(Backend):
        name = "stuck"
        library = "numpy"

        def version(self):
            return "1.0"

        def metrics(self):
            return [MetricSpec("must_contain")]

        async def score(self, metric, cases, ctx):
            yield Score(case_id=cases[0].id, metric=metric, backend=self.name, value=1.0)
            time.sleep(120)  # a library's blocking call: the worker's event loop is held

    @hookimpl
    def ragbridge_register_backends(register):
        register(Stuck())
''')

_RUN_OF_A_WORKER = textwrap.dedent('''
    import json, subprocess, sys, time
    from ragbridge import load_cases
    from ragbridge.backend import RunOptions, case_record
    from ragbridge.run.worker import options_record

    worker = subprocess.Popen([sys.executable, "-m", "ragbridge.run.worker"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, start_new_session=True)
    def say(message):
        worker.stdin.write(json.dumps(message).encode() + b"\\n")
        worker.stdin.flush()
    say({"ragbridge_worker": 1, "backend": "stuck", "name": "stuck==1.0", "plugin": "rb_stuck",
         "options": options_record(RunOptions()), "judge": None})
    assert json.loads(worker.stdout.readline())["ready"] is True
    cases = load_cases(sys.argv[1])[:2]
    say({"op": "score", "job": 1, "metric": "must_contain", "repeat": 0,
         "cases": [case_record(cases, i) for i in range(2)]})
    assert "score" in json.loads(worker.stdout.readline())
    print(worker.pid, flush=True)
    time.sleep(600)
''')


@pytest.mark.slow  # spawns a worker process
def test_a_worker_whose_run_is_killed_while_a_library_holds_its_loop_exits():
    """The run is killed outright (two Ctrl-Cs, ``kill -9``) while a library's blocking call holds the
    worker's event loop (it cannot read the end of its pipe): the worker ends all the same, within
    seconds, and is never left running without its run."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "rb_stuck.py").write_text(STUCK)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")])}
        run = subprocess.Popen([sys.executable, "-c", _RUN_OF_A_WORKER, str(EXAMPLE)], stdout=subprocess.PIPE,
                               env=env, text=True)
        worker = int(run.stdout.readline())
        assert Path(f"/proc/{worker}").exists()
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(worker):
            time.sleep(0.1)
        alive = _alive(worker)
        if alive:
            os.kill(worker, signal.SIGKILL)
        assert not alive, "the worker outlived its run"


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_ends_its_worker(cached, tmp_path, how):
    """Ctrl-C (or SIGTERM) of a run while its worker scores: the run exits 130 within seconds, every
    score it recorded kept, and no worker process is left."""
    out = tmp_path / "run"
    # the example's cases four times over, a judge answering in a second: the cases are scored in
    # several waves, so the run is still scoring when its first score is recorded (the example alone
    # could be scored in one wave, all its scores recorded together)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(c.model_copy(update={"id": f"{c.id}-{k}"}).model_dump_json() + "\n"
                              for k in range(4) for c in load_cases(EXAMPLE)), encoding="utf-8")
    with StubJudge(latency=1.0) as stub:
        args = ["run", golden, "--out", out, "--backend", "ragas==0.3.9", "--metric", "faithfulness",
                "--judge-model", "stub-judge", "--judge-base-url", stub.base_url, "--no-progress",
                "--cache-mode", "off"]
        proc = subprocess.Popen([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                                 *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                # Ctrl-C reaches a command in a terminal's foreground: SIGINT as the
                                # system leaves it (a test run in a script's background inherits it
                                # ignored, and a run that ignores it is not interrupted)
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        scores = out / "scores.jsonl"
        deadline = time.monotonic() + 240
        seen: list[int] = []
        while time.monotonic() < deadline and not (seen and scores.exists() and scores.read_text().strip()):
            seen = seen or workers_of(proc.pid)
            time.sleep(0.05)
        assert seen, "no worker was seen scoring"
        os.kill(proc.pid, getattr(signal, how))
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - started
    assert proc.returncode == 130, stderr
    assert took < 15, took
    time.sleep(1)
    assert not [pid for pid in seen if _alive(pid)], "a worker outlived its run"
    assert all(json.loads(line)["error"] is None for line in scores.read_text().splitlines())


@pytest.mark.slow  # spawns a worker process
def test_a_worker_whose_loop_a_library_holds_errors_its_cases_as_timed_out(tmp_path, fresh_cache,
                                                                          monkeypatch):
    """A library call that holds the worker's event loop far past the judge's timeout: the score the
    worker sent before is recorded, the case it held errors as timed out, the run ends (no hang) and
    the worker with it."""
    import ragbridge.run.isolated as isolated
    from ragbridge.plugins import pm
    from ragbridge.run.environments import MARKER
    from ragbridge.run.isolated import backend_named

    package = tmp_path / "rb_stuck"
    (package / "locks").mkdir(parents=True)
    (package / "__init__.py").write_text(STUCK)
    (package / "locks" / "1.0.txt").write_text("numpy\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import rb_stuck

    monkeypatch.setattr(isolated, "STALL_SECONDS", 4.0, raising=False)
    pm.register(rb_stuck, name="rb_stuck")
    try:
        env = backend_named("stuck==1.0").environment_spec()  # made by hand: this Python, no uv
        (env.path / "bin").mkdir(parents=True)
        env.python.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
        env.python.chmod(0o755)
        (env.path / MARKER).write_text("{}")
        started = time.monotonic()
        run = evaluate(load_cases(EXAMPLE)[:2], backends=["stuck==1.0"], metrics=["must_contain"],
                       out=tmp_path / "run")
        took = time.monotonic() - started
    finally:
        pm.unregister(rb_stuck)
    by = {s.case_id: s for s in run.scores}
    first, second = (c.id for c in load_cases(EXAMPLE)[:2])
    assert by[first].value == 1.0 and by[first].error is None
    assert by[second].error and "timed out" in by[second].error and "held its event loop" in by[second].error
    assert took < 60, took
    pid = int(by[second].error.split("(pid ")[1].split(")")[0])
    assert not _alive(pid)
