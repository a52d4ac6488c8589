"""The example notebook runs in a real Jupyter kernel (ipykernel, driven by nbclient): it loads a
RAGAS dataset as RAGAS loads it, evaluates in a cell (under the kernel's running event loop),
shows the run as a table, reads the run folder back and hands the cases to DeepEval. The kernel
runs this Python, on this machine, with the libraries' telemetry off (the test process's
environment) and the stub judge on 127.0.0.1."""

from __future__ import annotations

import html
import os
import shutil

import pytest

from conftest import ROOT

NOTEBOOK = ROOT / "examples" / "migrate-from-ragas.ipynb"


@pytest.mark.slow  # a kernel, RAGAS and DeepEval imported in it: about a minute
def test_the_migration_notebook_runs_in_a_kernel(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    work = tmp_path / "examples"
    shutil.copytree(ROOT / "examples" / "support-bot", work / "support-bot")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # after the walkthrough: the cells ran under a running event loop, where asyncio.run cannot
    nb.cells.append(nbformat.v4.new_code_cell(
        "import asyncio\nloop = asyncio.get_running_loop()\n"
        "print('loop running:', loop.is_running(), type(loop).__module__)"))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}},
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    client.execute()

    def outputs(i):
        return nb.cells[i].get("outputs", [])

    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    errors = [o for i in code for o in outputs(i) if o.output_type == "error"]
    assert not errors, errors
    # the RAGAS file's labels name sections, its chunk ids chunks: the run says so, the fix follows
    check = outputs(code[1])[-1]["data"]["text/html"]
    assert "warning: 14 of 19 case(s) with relevance labels have no retrieved chunk" in check
    assert "label &#x27;refunds.md#window&#x27;, chunk &#x27;refunds.md#window-1&#x27;" in check
    assert "<td>recall@5</td><td>0.105</td>" in check
    fixed = outputs(code[2])[-1]["data"]["text/html"]
    assert "<td>recall@5</td><td>0.842</td>" in fixed and "14 of 19" not in fixed  # golden.jsonl's 0.842
    assert "warning: 3 of 19 case(s)" in fixed and "retrieval found none of their labelled chunks" in fixed
    shown = outputs(code[3])[-1]["data"]  # the run, displayed
    assert "<table>" in shown["text/html"] and "<td>deepeval</td><td>faithfulness</td>" in shown["text/html"]
    assert "stub judge" in shown["text/html"] and "<td>recall@5</td><td>0.842</td>" in shown["text/html"]
    wide = outputs(code[4])[-1]["data"]["text/html"]
    assert "native:recall@5" in wide and "ragas:faithfulness" in wide and "deepeval:faithfulness" in wide
    assert "(20," in outputs(code[0])[-1]["data"]["text/plain"]
    assert "20)" in outputs(code[7])[-1]["data"]["text/plain"]  # 20 goldens
    assert "loop running: True asyncio" in "".join(o.get("text", "") for o in outputs(code[-1]))
    assert (work / "runs" / "notebook" / "run.json").exists()


@pytest.mark.slow  # RAGAS and DeepEval judged runs against the stub judge
def test_the_from_ragas_and_deepeval_page_runs_as_written(tmp_path, stub_judge):
    import re
    import subprocess
    import sys

    page = (ROOT / "docs" / "from-ragas-and-deepeval.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.M | re.S)
    assert len(blocks) == 2
    code = "\n".join(blocks).replace("https://api.openai.com/v1", stub_judge.base_url)
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    p = subprocess.run([sys.executable, "-c", code + "\nprint(run.to_frame(wide=True).columns.tolist())\n"
                        "print(len(goldens.goldens))"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "['case_id', 'question', 'deepeval:faithfulness', 'ragas:faithfulness']" in p.stdout
    assert p.stdout.strip().endswith("1")
    assert (tmp_path / "runs" / "from-ragas" / "run.json").exists()


LOOP_SETUP = '''
import ragbridge
from ragbridge.judge import JudgeConfig
from ragbridge.testing import StubJudge
golden = ragbridge.load_cases(GOLDEN)[:12]
# as a team writes its cases in a notebook: no ids (each derived from its question)
records = [{"question": c.question, "answer": c.answer, "contexts": [ch.text for ch in c.contexts]}
           for c in golden]
'''
LOOP_RUN = '''
with StubJudge(latency=0.15) as stub:
    run = ragbridge.evaluate(records, backends=["rubric"], metrics=["faithfulness"], out="runs/loop",
                             judge=JudgeConfig(model="stub-judge", base_url=stub.base_url,
                                               cache_path="runs/cache.sqlite"))
run
'''
LOOP_CELLS = [
    LOOP_SETUP,
    LOOP_RUN,  # 1: scored, with a live progress bar
    LOOP_RUN,  # 2: the same cell again: another port, the same judge, nothing to score
    "records[0]['answer'] = 'You can ask for a refund at any time, no questions asked.'\n" + LOOP_RUN,  # 3
    "ragbridge.evaluate(records, backends=['rubric'], metrics=['faithfulness'])",  # 4: no judge
    "ragbridge.evaluate(records[:2], out='runs/loop', changed_cases='refuse')",  # 5: refused
    '''
with StubJudge(fault_rate_500=1.0) as stub:  # 6: every call fails
    failed = ragbridge.evaluate(records[:3], backends=["rubric"], metrics=["faithfulness"], out="runs/bad",
                                judge=JudgeConfig(model="stub-judge", base_url=stub.base_url,
                                                  cache_mode="off", max_retries=0))
failed
''',
]


def test_the_notebook_loop_in_a_kernel(tmp_path):  # a kernel and a few small judged runs: about 5 s
    """Run a cell, run it again, edit the data and run it again, make mistakes: each cell shows a
    live progress bar and the run, or one line that says what to do in Python's terms."""
    import nbformat
    from nbclient import NotebookClient

    from conftest import EXAMPLE

    from ragbridge import load_cases

    messages: dict[int, list[dict]] = {}

    class Client(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            messages.setdefault(cell_index, []).append(msg)
            return super().process_message(msg, cell, cell_index)

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.replace("GOLDEN", repr(str(EXAMPLE)))) for src in LOOP_CELLS]
    Client(nb, timeout=300, kernel_name="python3", allow_errors=True,
           resources={"metadata": {"path": str(tmp_path)}}).execute()

    def outputs(i, kind):
        return [o for o in nb.cells[i].outputs if o.output_type == kind]

    first_question = load_cases(EXAMPLE)[0].question
    for i in (1, 2, 3, 6):
        assert not outputs(i, "error"), outputs(i, "error")
    # 1: the progress bar, redrawn while the run went, left as the run ended
    [bar] = outputs(1, "display_data")
    assert "<progress" in bar.data["text/html"]
    assert bar.data["text/plain"].startswith("scoring: 12 of 12 done")
    updates = [m["content"]["data"]["text/plain"] for m in messages[1]
               if m["msg_type"] == "update_display_data"]
    live = [u for u in updates[:-1] if u.startswith("scoring ") and "/12" in u and "scoring 0/" not in u]
    assert live, updates
    shown = outputs(1, "execute_result")[0].data["text/html"]
    assert "12 cases, 12 scores, complete" in shown and "<td>rubric</td><td>faithfulness</td>" in shown
    # 2: the same cell again: resumed, nothing scored (so no bar), the same run shown
    assert not outputs(2, "display_data")
    assert outputs(2, "execute_result")[0].data["text/html"] == shown
    # 3: one case edited: that one scored again, the others kept
    again = outputs(3, "execute_result")[0].data["text/html"]
    assert "1 changed and 0 new case(s) scored, 0 removed; the scores of the 11 unchanged kept" in again
    assert outputs(3, "display_data")[0].data["text/plain"].startswith("scoring: 1 of 1 done")
    # 4 and 5: one line each, in Python's terms, no traceback through the event loop
    for i, said in ((4, "judge=JudgeConfig(model="), (5, "overwrite=True")):
        [error] = outputs(i, "error")
        assert len(error.traceback) == 1 and said in error.traceback[0], error.traceback
        assert "--" not in error.evalue and "asyncio" not in error.traceback[0]
    # 6: the errored scores, each case named by its question (its id was derived from it)
    failed = outputs(6, "execute_result")[0].data["text/html"]
    assert "3 score(s) errored" in failed and "retries them" in failed
    assert f"<b>{html.escape(first_question)}</b> rubric:faithfulness:" in failed
    assert "<b>q-" not in failed


FIX_CELLS = [
    '''
import json, ragbridge
from ragas.dataset_schema import EvaluationDataset
dataset = EvaluationDataset.from_jsonl(RAGAS)
cases = ragbridge.load_cases(dataset)
run = ragbridge.evaluate(cases, metrics=["recall@5", "mrr"], out="runs/nb")
run
''',
    # the fix the warning names: each chunk's section as its source, then the same cell again
    '''
def with_sections(cases):
    for case in cases:
        for chunk in case.contexts:
            chunk.source = chunk.id.rsplit("-", 1)[0]
    return cases
cases = with_sections(cases)
run = ragbridge.evaluate(cases, metrics=["recall@5", "mrr"], out="runs/nb")
print(json.dumps(json.load(open("runs/nb/run.json"))["warnings"]))
run
''',
    # one question edited (its id is derived from it: one case removed, one added)
    '''
i = next(i for i, c in enumerate(cases) if repr(c.id) in run.manifest.warnings[0])  # a case warned of
removed = cases[i].id
dataset.samples[i].user_input += " Thanks!"
cases = with_sections(ragbridge.load_cases(dataset))
run = ragbridge.evaluate(cases, metrics=["recall@5", "mrr"], out="runs/nb")
fresh = ragbridge.evaluate(cases, metrics=["recall@5", "mrr"], out="runs/fresh")
print(json.dumps([removed, run.manifest.warnings, fresh.manifest.warnings,
                  json.load(open("runs/nb/run.json"))["warnings"]]))
run
''',
]


@pytest.mark.slow  # a kernel with RAGAS imported in it: about 20 s (test_rerun.py has the quick form)
def test_a_cell_run_again_on_fixed_data_warns_of_the_data_as_it_is(tmp_path):
    """A notebook's loop: the RAGAS file's labels name sections, so 14 of 19 labelled cases are warned
    of; the chunks given their sections, the same cell run again into the same folder: recall 0.842,
    and what the run says (run.json, the Markdown report, the cell's view) is of the cases as they are
    now, not of an earlier session's."""
    import json

    import nbformat
    from nbclient import NotebookClient

    from conftest import ragbridge_cli

    ragas = ROOT / "examples" / "support-bot" / "ragas-dataset.jsonl"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.replace("RAGAS", repr(str(ragas)))) for src in FIX_CELLS]
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    def shown(i):
        return html.unescape([o for o in nb.cells[i].outputs if o.output_type == "execute_result"][0]
                             .data["text/html"])

    def printed(i):
        return json.loads("".join(o.text for o in nb.cells[i].outputs if o.output_type == "stream"
                                  and o.name == "stdout"))

    assert "warning: 14 of 19 case(s) with relevance labels have no retrieved chunk" in shown(0)
    assert "<td>recall@5</td><td>0.842</td>" in shown(1) and "14 of 19" not in shown(1)
    kept = printed(1)
    assert kept and not any("14 of 19" in w for w in kept), kept
    assert all(f"warning: {w}" in shown(1) for w in kept)
    res = ragbridge_cli("report", tmp_path / "runs" / "nb", "--format", "md", "--out", tmp_path / "r.md")
    assert res.returncode == 0, res.stderr
    report = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "14 of 19" not in report and "warning: 3 of 19 case(s)" in report
    # an edited question: the warnings a fresh run of the same cases gives, none of a removed case
    removed, after, fresh, on_disk = printed(2)
    assert after == fresh == on_disk and len(after) == 1, after
    assert repr(removed) not in after[0] and "3 of 19 case(s)" in after[0], (removed, after)
