"""A third-party backend registered by entry point shows up in `backends` and in a run."""

import json
import os
import textwrap

from conftest import ragbridge_cli

PLUGIN = textwrap.dedent(
    '''
    from ragbridge import Backend, MetricSpec, Score, hookimpl


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


def make_plugin(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "ragbridge_echo.py").write_text(PLUGIN)
    dist = site / "ragbridge_echo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ragbridge-echo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[ragbridge]\necho = ragbridge_echo\n")
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
