"""The Python API as a notebook or an async application meets it: ``evaluate`` under a running event
loop, ``evaluate_async``, real signatures, and a run shown and laid out as a table."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pandas as pd

import ragbridge

from conftest import EXAMPLE, needs_backend

METRICS = ["recall@5", "mrr"]


def test_evaluate_works_inside_a_running_event_loop_without_touching_it(tmp_path):
    cases = ragbridge.load_cases(EXAMPLE)
    seen = {}

    async def cell():  # what a Jupyter cell is: code run while the kernel's loop runs
        loop = asyncio.get_running_loop()
        seen["loop_class"] = type(loop)
        seen["run_until_complete"] = loop.run_until_complete
        run = ragbridge.evaluate(cases, metrics=METRICS, out=tmp_path / "r")
        seen["same_loop"] = asyncio.get_running_loop() is loop
        return run

    run = asyncio.run(cell())
    assert run.complete and run.manifest.counts["scored"] == 98
    assert seen["same_loop"] and seen["loop_class"] is asyncio.new_event_loop().__class__
    # the loop was not patched for re-entry (as nest_asyncio does)
    assert seen["run_until_complete"].__func__ is asyncio.BaseEventLoop.run_until_complete
    plain = ragbridge.evaluate(cases, metrics=METRICS)
    assert [s.value for s in run.scores] == [s.value for s in plain.scores]


def test_evaluate_async_is_public_and_awaitable():
    cases = ragbridge.load_cases(EXAMPLE)
    run = asyncio.run(ragbridge.evaluate_async(cases, metrics=METRICS))
    assert run.complete and "evaluate_async" in ragbridge.__all__


def test_an_error_in_the_worker_reaches_the_caller():
    async def cell():
        return ragbridge.evaluate(ragbridge.load_cases(EXAMPLE), backends=["no-such-backend"])

    try:
        asyncio.run(cell())
    except ragbridge.RunError as exc:
        assert "no-such-backend" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("no error")
    assert not [t for t in threading.enumerate() if t.name == "ragbridge-run"]


def test_public_functions_have_real_signatures_and_docstrings():
    for name in ("evaluate", "evaluate_async", "load_cases", "load_run", "write_cases", "to_library"):
        fn = getattr(ragbridge, name)
        params = inspect.signature(fn).parameters.values()
        assert not [p for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)], name
        assert fn.__doc__ and len(fn.__doc__) > 80, name
    sync, coro = inspect.signature(ragbridge.evaluate), inspect.signature(ragbridge.evaluate_async)
    assert list(sync.parameters) == list(coro.parameters)
    assert [p.default for p in sync.parameters.values()] == [p.default for p in coro.parameters.values()]
    # both build one RunRequest of their arguments: its fields are the parameters, defaults included
    from ragbridge.run.request import RunRequest

    request = inspect.signature(RunRequest).parameters
    assert list(request) == list(sync.parameters)
    assert [p.default for p in request.values()] == [p.default for p in sync.parameters.values()]
    assert sorted(set(ragbridge.__all__) - {"__version__"}) == sorted(ragbridge._EXPORTS)
    assert set(ragbridge.__all__) <= set(dir(ragbridge))


def test_a_run_shows_as_a_table_and_lays_out_wide(tmp_path):
    run = ragbridge.evaluate(ragbridge.load_cases(EXAMPLE), metrics=METRICS, out=tmp_path / "r")
    html = run._repr_html_()
    assert "<table>" in html and "<td>native</td><td>recall@5</td>" in html and "0.939" in html
    wide = run.to_frame(wide=True)
    assert list(wide.columns) == ["case_id", "question", "native:mrr", "native:recall@5"]
    assert len(wide) == 53 and wide["case_id"].tolist()[0] == "billing-refund-window"
    long = run.to_frame()
    recall = long[long.metric == "recall@5"].set_index("case_id")["value"].astype(float)
    assert wide.set_index("case_id")["native:recall@5"].equals(recall.reindex(wide["case_id"]).rename(
        "native:recall@5"))
    assert wide["native:mrr"].isna().sum() == 4  # the unanswerable cases: undefined, not 0
    back = ragbridge.load_run(tmp_path / "r")
    pd.testing.assert_frame_equal(back.to_frame(wide=True), wide)
    assert "<table" in back.summary()._repr_html_()


@needs_backend("deepeval")
@needs_backend("ragas")
def test_to_frame_passed_is_the_runs_one_pass_rule_for_every_backend(tmp_path, example_cases, stub_judge):
    """``passed`` in ``run.to_frame()`` is filled for every scored value of every backend (RAGAS gives
    no verdict, DeepEval its own), by the pass rule the report and gates answer with; the library's
    own verdict is ``library_passed``."""
    import json

    from conftest import stub_judge_config
    from ragbridge.report import render_json

    judge = stub_judge_config(stub_judge, embedding_model="stub-embedder")
    run = ragbridge.evaluate(example_cases[:6], backends=["native", "ragas", "deepeval"],
                             metrics=["recall@5", "precision@5", "faithfulness", "must_contain"], judge=judge,
                             out=tmp_path / "run")
    frame = run.to_frame()
    scored = frame[frame["status"] == "scored"]
    assert set(scored["backend"]) == {"native", "ragas", "deepeval"}
    assert scored["passed"].notna().all() and frame[frame["status"] != "scored"]["passed"].isna().all()
    assert set(frame.loc[frame["metric"] == "precision@5", "pass_mark"]) == {0.2}  # 1/k
    report = json.loads(render_json(ragbridge.load_run(tmp_path / "run")))  # `ragbridge report --format json`
    theirs = {(c["id"], s["backend"], s["metric"]): s["passed"] for c in report["cases"] for s in c["scores"]}
    ours = {(r.case_id, r.backend, r.metric): (None if r.passed is None else bool(r.passed))
            for r in frame.itertuples()}
    assert ours == theirs
    deepeval = frame[frame["backend"] == "deepeval"]
    assert deepeval["library_passed"].notna().all()  # DeepEval's own success, kept beside
    assert frame.loc[frame["backend"] == "ragas", "library_passed"].isna().all()
