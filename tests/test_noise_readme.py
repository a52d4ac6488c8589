"""The README's judge-noise example runs as written (in a fresh folder that sees examples/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_readme_noise_example_runs(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Judge noise, cost and budgets"):text.index("## From Python")]
    [code] = re.findall(r"^```python\n(.*?)^```", section, re.M | re.S)
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    # run as a notebook's cell is run: twice, in one process (the stub judge gets another port)
    r = subprocess.run([sys.executable, "-c", f"{code}\nprint('AGAIN')\n{code}"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    once, twice = r.stdout.split("AGAIN")
    first, *table = once.strip().splitlines()
    calls, cost = first.split()
    assert int(calls) > 100 and float(cost) > 0
    assert "abstention" in table[-1]
    first, *again = twice.strip().splitlines()
    assert first == "0 0.0" and again == table  # all scored already: nothing to spend, the same figures
    manifest = (tmp_path / "runs" / "noise" / "run.json").read_text()
    assert '"status": "complete"' in manifest
