"""The README's rubric walk-through runs as written on the bundled example (the stub judge served as
the README says, on a free port), and the shipped labels belong to the rubric and the sample it draws."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time

import httpx
import pytest

from conftest import ROOT, ragbridge_cli
from ragbridge.rubric import load_rubrics

SECTION = "## Your own rubric, validated against people"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_readme_rubric_commands_run_on_the_example(tmp_path):
    commands = readme_commands()
    assert [c.split()[1] for c in commands] == ["judge", "run", "label", "validate"]
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    port = str(free_port())
    serve = shlex.split(commands[0].replace("8808", port).rstrip("&"))
    assert serve[:4] == ["ragbridge", "judge", "serve", "--stub"]
    stub = subprocess.Popen([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                             *serve[1:]], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        results = []
        for command in commands[1:]:
            args = shlex.split(command.replace("8808", port))
            assert args[0] == "ragbridge"
            res = ragbridge_cli(*args[1:], cwd=tmp_path, env={"COLUMNS": "100"})
            assert res.returncode == 0, (command, res.stdout, res.stderr)
            results.append(res)
    finally:
        stub.terminate()
        stub.wait(timeout=30)
    run, labelled, validated = results
    assert "helpfulness" in run.stdout and "faithfulness" in run.stdout and "unsupported" in run.stdout
    page = tmp_path / "runs" / "rubric" / "label-helpfulness.html"
    assert page.exists() and "--threshold rubric:helpfulness=0.75" in labelled.stdout
    assert "helpf" in validated.stdout and "TNR" in validated.stdout  # the table may shorten names
    # the shipped labels grade exactly the 20 cases the README's label command draws, by this rubric
    shipped = ROOT / "examples/support-bot/labels-helpfulness.jsonl"
    labels = [json.loads(x) for x in shipped.read_text().splitlines()]
    rubric = load_rubrics(ROOT / "examples/support-bot/rubrics.toml")[0]
    assert {r["rubric_hash"] for r in labels} == {rubric.hash}
    assert all(r["label"] == ("pass" if r["level"] >= rubric.pass_at else "fail") for r in labels)
    drawn = ragbridge_cli(*shlex.split(commands[2])[1:], "--json", cwd=tmp_path)
    assert sorted(json.loads(drawn.stdout)["case_ids"]) == sorted(r["case_id"] for r in labels)
    figures = ragbridge_cli(*shlex.split(commands[3])[1:], "--json", cwd=tmp_path)
    row = json.loads(figures.stdout)["validation"][0]
    assert row["n_labels"] == row["n_paired"] == 20 and row["human_fail"] == 5
    # the labels carry the draw: weighted by stratum, the pass rate is not the labels' plain share
    assert row["design"] == "stratified" and {r["stratum"] for r in labels} == {"pass", "fail"}
    assert row["ppi_pass_rate_low"] <= row["ppi_pass_rate"] <= row["ppi_pass_rate_high"] <= 1.0
    assert row["ppi_pass_rate"] > row["human_pass"] / row["n_paired"]
