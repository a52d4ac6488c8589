"""The example notebook runs in a real Jupyter kernel (ipykernel, driven by nbclient): it loads a
RAGAS dataset as RAGAS loads it, evaluates in a cell (under the kernel's running event loop),
shows the run as a table, reads the run folder back and hands the cases to DeepEval. The kernel
runs this Python, on this machine, with the libraries' telemetry off (the test process's
environment) and the stub judge on 127.0.0.1."""

from __future__ import annotations

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
