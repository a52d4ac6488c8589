"""``pip install ragbridge`` alone: no evaluation library, no SciPy, scikit-learn, NLTK, pyarrow or
datasets, under 300 MB in a fresh venv; the statistics it computed with them, computed here and
checked against them (the dev extra installs them); Parquet and datasets folders say which extra
reads them.
"""

import os
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from conftest import EXAMPLE, ROOT

LIBRARIES = ("ragas", "deepeval", "trulens", "arize-phoenix-evals", "openai", "langchain", "ray")
LEFT_OUT = ("scipy", "scikit-learn", "nltk", "pyarrow", "datasets", *LIBRARIES)


def _requirement_names(requirements):
    import re

    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_core_requires_no_library_and_the_extras_take_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not _requirement_names(project["dependencies"]) & set(LEFT_OUT)
    extras = project["optional-dependencies"]
    for extra, library in (("ragas", "ragas"), ("deepeval", "deepeval"), ("trulens", "trulens-core"),
                           ("phoenix", "arize-phoenix-evals")):
        spec = next(r for r in extras[extra] if _requirement_names([r]) == {library})
        assert ">=" in spec and "==" not in spec, spec  # a range of the versions the plugin supports
    pins = {line.split("==")[0].lower() for line in (ROOT / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    assert {"ragas", "deepeval", "trulens-core", "arize-phoenix-evals", "uv"} <= pins  # the known-good set


def test_normal_and_t_quantiles_and_the_slope_are_scipys():
    stats = pytest.importorskip("scipy.stats")
    from ragbridge.analysis import stats as st

    for p in (1e-9, 0.025, 0.2, 0.5, 0.8, 0.975, 0.999999):
        assert st.normal_quantile(p) == pytest.approx(stats.norm.ppf(p), rel=1e-12, abs=1e-12)
    for df in (1, 2, 3, 7, 30, 500):
        for q in (0.6, 0.9, 0.975, 0.995):
            assert st.t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9)
    rng = np.random.default_rng(0)
    for n in (3, 4, 8, 40):
        for _ in range(10):
            x = rng.normal(size=n).cumsum()
            y = 0.2 * x + rng.normal(size=n) * rng.uniform(0.05, 1.0)
            fit, ours = stats.linregress(x, y), st.ols_slope(y, x)
            t = stats.t.ppf(0.975, n - 2)
            assert (ours["slope"], ours["intercept"], ours["se"], ours["p_value"]) == pytest.approx(
                (fit.slope, fit.intercept, fit.stderr, fit.pvalue), rel=1e-9, abs=1e-12)
            assert ours["low"] == pytest.approx(fit.slope - t * fit.stderr, rel=1e-9)


def test_krippendorffs_alpha_is_nltks():
    agreement = pytest.importorskip("nltk.metrics.agreement")
    from nltk.metrics.distance import interval_distance

    from ragbridge.analysis.noise import _alpha
    from ragbridge.schema import Score

    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(150):
        units = {}
        for c in range(int(rng.integers(2, 12))):
            base = rng.uniform()
            units[f"c{c}"] = [Score(case_id=f"c{c}", metric="m", backend="b", repeat=r,
                                    value=float(np.clip(round(base + rng.normal() * 0.2, 2), 0, 1)))
                              for r in range(int(rng.integers(2, 5)))]
        data = [(str(s.repeat), cid, float(s.value)) for cid, group in units.items() for s in group]
        ours = _alpha(units)
        if len({d[2] for d in data}) < 2:
            assert ours is None
            continue
        assert ours == pytest.approx(agreement.AnnotationTask(data=data, distance=interval_distance).alpha(),
                                     abs=1e-12)
        checked += 1
    assert checked > 100


def test_parquet_and_datasets_folders_name_the_extra_that_reads_them(tmp_path, monkeypatch):
    import pandas as pd

    from ragbridge import DatasetError, load_cases
    from ragbridge.formats import write_cases

    cases = load_cases(EXAMPLE)[:3]
    pd.DataFrame({"question": ["q"], "answer": ["a"]}).to_parquet(tmp_path / "set.parquet")
    for module in ("pyarrow", "pyarrow.parquet", "datasets"):
        monkeypatch.setitem(sys.modules, module, None)  # not installed
    with pytest.raises(DatasetError, match=r"reading Parquet needs pyarrow.*'ragbridge\[parquet\]'"):
        load_cases(tmp_path / "set.parquet")
    with pytest.raises(DatasetError, match=r"a datasets folder needs datasets.*ragbridge\[datasets\]"):
        write_cases(cases, tmp_path / "out", "hf")


@pytest.mark.slow
def test_pip_install_ragbridge_alone_is_under_300_mb_and_runs(tmp_path):
    """A fresh venv (pip and setuptools as ``python -m venv`` makes it) with ragbridge and no extra:
    measured, and a native run of the bundled example made with it."""
    from ragbridge.run.environments import find_uv

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # as pip installs it: the modules compiled to bytecode
    install = [find_uv(), "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python),
               str(ROOT), "-c", str(ROOT / "constraints.txt")]
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
    assert size < 300 * 2**20, f"{size / 2**20:.0f} MiB"
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "freeze"], capture_output=True,
                            text=True, env=env).stdout.lower()
    installed = {line.split("==")[0] for line in listed.splitlines()}
    assert not installed & set(LEFT_OUT), installed & set(LEFT_OUT)
    run = subprocess.run([str(venv / "bin" / "ragbridge"), "run", str(EXAMPLE), "--out",
                          str(tmp_path / "run"), "--no-progress"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "scores.jsonl").stat().st_size > 0
