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
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert r.returncode == 0, r.stderr
    first, *table = r.stdout.strip().splitlines()
    calls, cost = first.split()
    assert int(calls) > 100 and float(cost) > 0
    assert "abstention" in table[-1]
    manifest = (tmp_path / "runs" / "noise" / "run.json").read_text()
    assert '"status": "complete"' in manifest
