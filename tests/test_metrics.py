"""The one list of canonical metrics: every backend, the report, the gate and the docs agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragbridge import metrics
from ragbridge.metrics import default_pass_mark, half_of, resolve_metric, sort_key
from ragbridge.native import ranking
from ragbridge.plugins import get_backends, load_plugins
from ragbridge.rubric.rubrics import builtin_rubrics

ROOT = Path(__file__).resolve().parents[1]


def bundled() -> list[str]:
    """The backends ragbridge ships, from the registry: those its built-in plugins and the plugins
    under plugins/ register (not a third party's, installed beside it)."""
    names: list[str] = []
    for plugin in load_plugins().get_plugins():
        path = Path(getattr(plugin, "__file__", None) or "/")
        hook = getattr(plugin, "ragbridge_register_backends", None)
        if hook is not None and ROOT in path.parents:
            hook(register=lambda backend: names.append(backend.name))
    return sorted(names)


BUNDLED = bundled()


def test_the_bundled_backends_are_every_one_ragbridge_ships():
    assert {"native", "rubric", "ragas", "deepeval", "trulens", "phoenix"} <= set(BUNDLED)


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_backend_declares_only_canonical_metrics(name):
    """Stricter than the backend contract (which allows a metric a plugin registers): what ragbridge
    ships speaks only the canonical metrics."""
    backend = get_backends()[name]
    declared = [spec.name for spec in backend.metrics()]
    assert declared, name
    unknown = sorted(set(declared) - set(metrics.NAMES))
    assert not unknown, f"{name} declares metrics that ragbridge.metrics does not list: {unknown}"


def test_builtin_rubrics_are_canonical_metrics():
    # custom rubrics (--rubric FILE) are data and may name anything; the built-in ones may not
    assert set(builtin_rubrics()) <= set(metrics.NAMES)


def test_native_offers_every_ranking_metric_and_answer_check():
    offered = [s.name for s in get_backends()["native"].metrics()]
    assert offered == [m.name for m in metrics.METRICS
                       if m.kind in (metrics.RANKING, metrics.SPAN, metrics.ANSWER_CHECK)]
    assert set(ranking.METRICS) == {m.base for m in metrics.METRICS if m.kind == metrics.RANKING}
    assert set(ranking.SPAN_METRICS) == {m.base for m in metrics.METRICS if m.kind == metrics.SPAN}


def test_each_metric_is_well_formed():
    assert len(set(metrics.NAMES)) == len(metrics.NAMES)
    for m in metrics.METRICS:
        assert m.kind in metrics.KINDS and m.half in ("retrieval", "generation"), m
        assert m.meaning and len(m.meaning) <= 70, m
        assert m.pass_mark in (metrics.PER_K, metrics.NO_MARK) or 0 < m.pass_mark <= 1, m
        assert re.fullmatch(r"[a-z][a-z0-9_]*(@k)?", m.name), m  # a digit only where no cut-off follows


def test_display_order_halves_and_pass_marks():
    names = ["tone", "abstention", "faithfulness", "recall@10", "ndcg@5", "recall@5", "context_recall"]
    assert sorted(names, key=sort_key) == [
        "recall@5", "recall@10", "ndcg@5", "context_recall", "faithfulness", "abstention", "tone"]
    assert [half_of(n) for n in ("recall@5", "context_relevance", "faithfulness", "tone")] == [
        "retrieval", "retrieval", "generation", "generation"]
    assert default_pass_mark("precision@10") == pytest.approx(0.1)
    assert default_pass_mark("precision@k", k=4) == default_pass_mark("context_relevance", 4) == 0.25
    assert default_pass_mark("context_relevance") == pytest.approx(0.2)  # no k anywhere: 5
    assert default_pass_mark("must_contain") == default_pass_mark("abstention") == 1.0
    assert {default_pass_mark(n) for n in ("ndcg@10", "mrr", "faithfulness", "tone")} == {0.5}


@pytest.mark.parametrize("spec, asked, k, concrete", [
    ("recall@k", "recall@k", 5, "recall@5"),
    ("recall@k", "recall", 3, "recall@3"),
    ("recall@k", "recall@10", 5, "recall@10"),
    ("recall@k", "recall@0", 5, None),
    ("recall@k", "precision@5", 5, None),
    ("mrr", "mrr", 5, "mrr"),
    ("mrr", "mrr@10", 5, None),
    ("faithfulness", "faithfulness", 5, "faithfulness"),
])
def test_resolve_metric(spec, asked, k, concrete):
    assert resolve_metric(spec, asked, k) == concrete


def test_report_doc_default_table_agrees():
    """docs/report.md's table of default pass marks says what ``pass_mark`` says."""
    text = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    table = text.split("4. The defaults:", 1)[1].split("\n\n")[1]  # the table after the heading
    seen = set()
    for row in re.findall(r"^\| (`.+?) \| ([^|]+) \|", table, flags=re.M):
        mark = row[1].strip()
        for name in re.findall(r"`([a-z0-9_@]+)`", row[0]):
            m = metrics.find(name)
            assert m is not None, name
            shown = m.pass_mark if m.pass_mark == metrics.PER_K else f"{m.pass_mark:g}"
            assert shown == mark, (name, mark, m.pass_mark)
            seen.add(m.name)
    assert seen == set(metrics.NAMES)


def test_readme_and_metrics_doc_name_every_canonical_metric():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in metrics.NAMES:
        assert f"`{name}`" in readme, name
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    for m in metrics.METRICS:
        if m.kind in (metrics.RANKING, metrics.SPAN):
            assert f"`{m.name}`" in doc, m.name


def test_docs_metrics_lists_every_canonical_metric_as_ragbridge_metrics_defines_it():
    """plugins/README.md sends an author to docs/metrics.md for the canonical metrics: its table is
    ``ragbridge.metrics.METRICS``, row for row (name, kind, half, meaning, pass mark)."""
    page = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = page.split("## Every canonical metric", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| `")]
    assert rows == [[f"`{m.name}`", m.kind, m.half, m.meaning, str(m.pass_mark)] for m in metrics.METRICS]
    guide = (Path(__file__).parent.parent / "plugins" / "README.md").read_text(encoding="utf-8")
    assert "[docs/metrics.md](../docs/metrics.md#every-canonical-metric)" in guide
