"""Options past their limits, or not text, through the real command line and through Python: exit 2
(RunError / JudgeConfigError in Python), one line naming the option and its range, nothing written,
nothing called, no traceback (ragbridge.limits)."""

from __future__ import annotations

import os

import pytest
from conftest import EXAMPLE, ragbridge_cli

from ragbridge import evaluate, load_cases
from ragbridge.backend import RunOptions
from ragbridge.judge import JudgeConfig, JudgeConfigError
from ragbridge.limits import MAX_REPEATS
from ragbridge.run import RunError
from ragbridge.testing import StubJudge

NOT_UTF8 = os.fsdecode(b"gpt-\xff\xfe")  # how Python hands over argument bytes that are not UTF-8

# option and value: the words the one error line holds
CLI = [
    (["--repeats", "1000000000"], "--repeats must be a whole number from 1 to 100"),
    (["--repeats", "100000"], "--repeats must be a whole number from 1 to 100"),
    (["--target-concurrency", "0"], "--target-concurrency must be a whole number from 1 to 1024, got 0"),
    (["--requests-per-minute", "1e-300"], "judge requests_per_minute: Input should be greater than or "
                                           "equal to 0.01"),
    (["--requests-per-minute", "inf"], "judge requests_per_minute: Input should be a finite number"),
    (["--max-concurrency", "1000000000"], "judge max_concurrency: Input should be less than or equal to "
                                          "1024"),
    (["--max-cost", "5"], "--max-cost needs the judge's price table"),
    (["--decline-phrase", NOT_UTF8], "--decline-phrase b'gpt-\\xff\\xfe' is not UTF-8 text"),
    (["--generator-model", NOT_UTF8], "--generator-model b'gpt-\\xff\\xfe' is not UTF-8 text"),
    ([f"--decline-phrase={NOT_UTF8}"], "--decline-phrase b'gpt-\\xff\\xfe' is not UTF-8 text"),
    (["--judge-model", NOT_UTF8], "--judge-model b'gpt-\\xff\\xfe' is not UTF-8 text"),
]


@pytest.mark.parametrize("args, words", CLI, ids=[" ".join(a)[:40] for a, _ in CLI])
def test_an_option_past_its_limit_is_refused_before_anything_runs(args, words, tmp_path):
    model = [] if "--judge-model" in args else ["--judge-model", "m"]
    with StubJudge() as stub:
        res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                            "answer_relevance", "--judge-base-url", stub.base_url, "--cache-path",
                            tmp_path / "c.sqlite", "--no-progress", *model, *args, cwd=tmp_path)
        assert not stub.requests  # not even the preflight
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and words in " ".join(res.stderr.split()), res.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "c.sqlite").exists()


def test_a_path_option_may_be_any_bytes(tmp_path):
    """A file name need not be UTF-8: only text options are held to it."""
    name = os.fsencode(tmp_path) + b"/golden-\xe9.jsonl"
    with open(name, "wb") as fh:
        fh.write(EXAMPLE.read_bytes())
    res = ragbridge_cli("run", os.fsdecode(name), "--out", tmp_path / "run", "--metric", "recall@5",
                        "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("kwargs, words", [
    (dict(repeats=10**9), "--repeats must be a whole number from 1 to 100"),
    (dict(repeats=MAX_REPEATS + 1), "--repeats must be a whole number from 1 to 100"),
    (dict(target_concurrency=0), "--target-concurrency must be a whole number"),
    (dict(options={"native": {"decline_phrases": ["\udcff"]}}),
     "native.decline_phrases b'\\xff' is not UTF-8"),
    (dict(max_cost=1.0), "--max-cost needs the judge's price table"),
])
def test_evaluate_holds_the_same_limits(kwargs, words, tmp_path):
    judge = JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1", cache_path=tmp_path / "c.sqlite")
    with pytest.raises(RunError) as raised:
        evaluate(load_cases(EXAMPLE)[:4], backends=["rubric"], metrics=["answer_relevance"],
                 out=tmp_path / "run", judge=judge, **kwargs)
    from ragbridge.errors import cli_text

    assert words in cli_text(raised.value)  # the command line's words; Python's name the parameter
    assert not (tmp_path / "run").exists()


def test_run_options_hold_their_limits_when_made():
    with pytest.raises(ValueError, match="is not UTF-8 text"):
        RunOptions(generator_model="m\ud800")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        RunOptions(k=0)


@pytest.mark.parametrize("field, value, words", [
    ("requests_per_minute", 1e-300, "greater than or equal to 0.01"),
    ("requests_per_minute", float("nan"), "finite number"),
    ("timeout", 1e300, "less than or equal to 86400"),
    ("max_retries", 10**6, "less than or equal to 20"),
    ("max_concurrency", 10**9, "less than or equal to 1024"),
])
def test_the_judge_config_holds_its_limits_from_every_source(field, value, words, tmp_path):
    with pytest.raises(JudgeConfigError, match=words):
        JudgeConfig.load({"model": "m", "base_url": "http://127.0.0.1:9/v1", field: value}, cwd=tmp_path)
    (tmp_path / "ragbridge.toml").write_text(f'[judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
                                             f'{field} = {value!r}\n')
    with pytest.raises(JudgeConfigError, match=f"ragbridge.toml: judge {field}: .*{words}"):
        JudgeConfig.load(cwd=tmp_path)
