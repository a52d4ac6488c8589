"""A third-party backend registered by entry point shows up in `backends` and in a run."""

import json
import os
import textwrap

from conftest import ragbridge_cli

PLUGIN = textwrap.dedent(
    '''
    from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl


    class EchoBackend(Backend):
        name = "echo"

        def metrics(self):
            return [MetricSpec("answer_length", native_name="chars", requires=("answer",))]

        async def score(self, metric, cases, ctx):
            for case in cases:
                if "boom" in case.answer:
                    yield Score(case_id=case.id, metric=metric, backend=self.name, error="ValueError: boom")
                    continue
                yield Score(case_id=case.id, metric=metric, backend=self.name,
                            value=min(len(case.answer) / 100, 1.0), native_value=len(case.answer))


    class MissingLibBackend(Backend):
        name = "needs-lib"
        library = "surely-not-installed-lib"
        install_hint = "pip install 'ragbridge[needs-lib]'"

        def metrics(self):
            return [MetricSpec("faithfulness", judge=True)]


    @hookimpl
    def ragbridge_register_backends(register):
        register(EchoBackend())
        register(MissingLibBackend())
    '''
)


def make_plugin(tmp_path, source: str = PLUGIN, name: str = "echo"):
    """An installed plugin distribution ``ragbridge-NAME`` holding ``source``, registered by entry
    point: the environment that puts it on the path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"ragbridge_{name}.py").write_text(source)
    dist = site / f"ragbridge_{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ragbridge-{name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[ragbridge]\n{name} = ragbridge_{name}\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}


def test_entry_point_backend_listed(tmp_path):
    env = make_plugin(tmp_path)
    res = ragbridge_cli("backends", env=env)
    assert res.returncode == 0, res.stderr
    assert "echo" in res.stdout and "answer_length" in res.stdout
    assert "needs-lib" in res.stdout and "pip install 'ragbridge[needs-lib]'" in res.stdout


def test_entry_point_backend_runs(tmp_path):
    env = make_plugin(tmp_path)
    data = tmp_path / "g.jsonl"
    data.write_text(
        json.dumps({"id": "a", "question": "q", "answer": "x" * 50}) + "\n"
        + json.dumps({"id": "b", "question": "q", "answer": "boom"}) + "\n"
        + json.dumps({"id": "c", "question": "q"}) + "\n"
    )
    out = tmp_path / "run"
    res = ragbridge_cli("run", data, "--out", out, "--backend", "echo", "--backend", "native",
                        "--metric", "answer_length", "--metric", "mrr", env=env)
    # case b's score errors on purpose: the run finishes, with the documented exit status for that
    assert res.returncode == 3, res.stderr
    assert "1 of 6 score(s) errored" in res.stderr
    scores = {(s["case_id"], s["backend"], s["metric"]): s
              for s in map(json.loads, (out / "scores.jsonl").read_text().splitlines())}
    assert scores[("a", "echo", "answer_length")]["value"] == 0.5
    assert scores[("b", "echo", "answer_length")]["error"] == "ValueError: boom"
    assert scores[("c", "echo", "answer_length")]["reason"] == "skipped: case has no answer"
    assert ("a", "native", "mrr") in scores
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backends"]["echo"] == "0.1.0"


def test_unavailable_backend_is_a_clear_error(tmp_path, example_path):
    env = make_plugin(tmp_path)
    res = ragbridge_cli("run", example_path, "--out", tmp_path / "r", "--backend", "needs-lib", env=env)
    assert res.returncode == 2
    assert "not available" in res.stderr and "pip install 'ragbridge[needs-lib]'" in res.stderr


def _commands(help_text: str) -> set[str]:
    lines = help_text.split("Commands:", 1)[1].splitlines()
    return {line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")}


def test_a_source_checkout_without_package_metadata_has_every_builtin_backend_and_command(tmp_path):
    """Only PYTHONPATH, no installed ragbridge distribution (so no entry point): the built-in plugins
    come from DEFAULT_PLUGINS. The venv's packages are seen through a folder of links without
    ragbridge's own metadata, and ``-S`` keeps the venv's site (and its editable finder) out."""
    import importlib.metadata
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    purelib = Path(sysconfig.get_paths()["purelib"])
    site = tmp_path / "site-without-ragbridge"
    site.mkdir()
    for entry in purelib.iterdir():
        if "ragbridge" not in entry.name.lower():  # its dist-info and editable finder
            (site / entry.name).symlink_to(entry)
    path = os.pathsep.join([str(root / "src"), str(root / "plugins"), str(site)])
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}

    def cli(*args: str, no_metadata: bool = True) -> subprocess.CompletedProcess:
        flags = ["-S"] if no_metadata else []
        code = "from ragbridge.commands import run_cli; run_cli()"
        return subprocess.run([sys.executable, *flags, "-c", code, *args], capture_output=True, text=True,
                              env=env if no_metadata else os.environ, timeout=300, cwd=tmp_path)

    probe = subprocess.run([sys.executable, "-S", "-c", "import importlib.metadata as m, ragbridge; "
                            "print(ragbridge.__file__); print(m.entry_points(group='ragbridge'))"],
                           capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    # (cwd: the checkout's root may hold the ragbridge.egg-info an editable install writes there)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith(str(root / "src")) and "EntryPoint" not in probe.stdout  # really none
    assert importlib.metadata.entry_points(group="ragbridge"), "the control has entry points"

    res = cli("backends")
    assert res.returncode == 0, res.stderr
    listed = {line.split()[1] for line in res.stdout.splitlines() if line.startswith("│ ")}
    assert {"native", "rubric"} <= listed
    assert cli("formats").stdout.count("jsonl") >= 1
    bare, full = cli("--help"), cli("--help", no_metadata=False)
    assert bare.returncode == 0 and full.returncode == 0, bare.stderr + full.stderr
    bare_commands, all_commands = _commands(bare.stdout), _commands(full.stdout)
    assert {"run", "rescore", "backends", "formats", "convert", "sample", "judge", "label", "pairwise",
            "report", "diff", "gate", "compare", "validate", "calibrate"} <= bare_commands
    # what is missing comes from the bundled library plugins, which are entry points
    assert bare_commands <= all_commands and all_commands - bare_commands <= {"trulens-leaderboard"}


#: a third party's judged backend: its metric registry, its client from the judge's factory, and
#: one case's fields; `JudgedBackend` does the rest (fan-out, tag_scope, timing, failures)
JUDGED_PLUGIN = textwrap.dedent(
    '''
    import re

    from ragbridge.plugin import JudgedBackend, JudgedMetric, async_http_client, hookimpl

    PROMPT = ("Rate from 0 to 10 how relevant the answer is to the question.\\n"
              "Question: {question}\\nAnswer: {answer}\\nReply as Score: N")


    class TenBackend(JudgedBackend):
        name = "ten"
        registry = {"answer_relevance": JudgedMetric(name="answer_relevance", native_name="relevance_0_10",
                                                     requires=("answer",), description="0-10 / 10")}

        async def open(self, ctx):
            judge = ctx.judge
            return judge and async_http_client(judge, base_url=judge.base_url(in_process=True) + "/",
                                               headers={"Authorization": f"Bearer {judge.api_key}"})

        async def close(self, ctx):
            if ctx.session is not None:
                await ctx.session.aclose()

        async def judge_case(self, metric, case, ctx, prepared):
            prompt = PROMPT.format(question=case.question, answer=case.answer)
            r = await ctx.session.post("chat/completions", json={
                "model": ctx.judge.config.model, "messages": [{"role": "user", "content": prompt}]})
            r.raise_for_status()
            text = r.json()["choices"][0]["message"]["content"]
            level = int(re.search(r"Score:\\s*(\\d+)", text).group(1))
            return {"value": level / 10, "native_value": level, "reason": text}


    @hookimpl
    def ragbridge_register_backends(register):
        register(TenBackend())
    '''
)


def test_a_judged_backend_needs_only_its_metrics_client_and_one_case(tmp_path, example_path, stub_judge):
    """A fifth judged backend on `JudgedBackend`: every case scored through the gateway, its calls
    counted for its Score, the metric's native name stamped, and a case the judge cannot answer is
    that Score's error while the others are scored."""
    env = make_plugin(tmp_path, JUDGED_PLUGIN, "ten")
    cases = [json.loads(line) for line in example_path.read_text().splitlines() if line.strip()][:4]
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in cases))
    stub_judge.inject("malformed")  # the first case's reply has no score in it
    out = tmp_path / "run"
    res = ragbridge_cli("run", data, "--out", out, "--backend", "ten", "--judge-model", "stub-judge",
                        "--judge-base-url", stub_judge.base_url, "--max-concurrency", "1", "--no-progress",
                        env=env)
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == len(cases), res.stderr
    assert all(s["backend"] == "ten" and s["native_metric"] == "relevance_0_10" for s in scores)
    failed = [s for s in scores if s["error"]]
    scored = [s for s in scores if not s["error"]]
    assert len(failed) == 1 and failed[0]["error"].startswith("AttributeError"), failed
    assert failed[0]["judge_calls"] == 1 and failed[0]["value"] is None, failed
    assert len(scored) == len(cases) - 1
    for s in scored:
        assert s["value"] == s["native_value"] / 10 and 0 <= s["value"] <= 1 and s["reason"]
        assert s["judge_calls"] == 1 and s["seconds"] > 0
