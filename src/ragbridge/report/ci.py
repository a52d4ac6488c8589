"""A gate's verdicts as text: JUnit XML (for CI test reports), Markdown (for a CI job summary), and
the lines of a result (the terminal and pytest print the same).

Every string that comes from the data is escaped for where it goes (`ragbridge.report.text`):
`md_text` in Markdown, `plain_text` in text lines and JUnit messages. JUnit XML is written by the
standard library's ElementTree, which escapes markup; characters XML cannot hold at all are shown as
escapes too.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from typing import Any, Optional, Sequence

from ..analysis.diff import RunDiff
from ..analysis.gate import GateReport, GateResult
from ..run import Run
from ..verdicts import against, p_text
from .text import count, escape_char, interval, md_text, num, plain_text, records

__all__ = ["junit_xml", "markdown", "incomplete_junit_xml", "incomplete_markdown", "figure_text",
           "item_line", "TOP_CASES", "diff_json", "gate_json", "moved"]

#: How many of the cases behind a failed rule the terminal, the Markdown and the JUnit XML list
#: (the same ones, in the same order; each says how many there are in all).
TOP_CASES = 10

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def figure_text(result: GateResult) -> str:
    """The figure of a rule, with its interval and p-value when it has them: ``0.812 [0.770, 0.851]``;
    with more decimals where three would read the other way against the rule's bound (`against`)."""
    if math.isnan(result.figure):
        return num(result.figure)
    text = against(result.figure, result.rule.threshold, result.rule.op)
    brackets = interval(result.ci_low, result.ci_high, 3)
    text += f" {brackets}" if brackets else ""
    if not math.isnan(result.p_value):
        text += f" p {p_text(result.p_value)}"
    return text


def behind(result: GateResult) -> str:
    """What the items of a result are: ``"cases"``, or ``"runs"`` for a slope rule (each run's mean)."""
    return "runs" if result.rule.kind == "slope" else "cases"


def item_line(item: dict[str, Any]) -> str:
    """One case behind a rule as a line of plain text: its value, or its change, or its errors."""
    case = plain_text(item["case_id"])
    if "delta" in item:
        return f"{case}: {num(item['base'])} -> {num(item['new'])} ({num(item['delta'], signed=True)})"
    if "metrics" in item:
        line = f"{case}: {plain_text(item['metrics'])}: {plain_text(item.get('reason') or '')}"
        return line.rstrip(": ")
    if "layer" in item:  # a diagnosed rule: the case's layer and what decided it
        return f"{case}: {plain_text(item['reason'])}"
    return f"{case}: {num(item['value'])}"


def _run_line(run: Run) -> str:
    m = run.manifest
    return (
        f"{run.path or '(in memory)'}: "
        f"{count(m.dataset['n_cases'] if 'n_cases' in m.dataset else run.n_cases)} cases, "
        f"backends {', '.join((b + ' ' + (v or '')).strip() for b, v in m.backends.items())}, "
        f"status {m.status}, dataset {str(m.dataset.get('fingerprint') or '')[:19]}"
    )


def junit_xml(report: GateReport, top: int = TOP_CASES) -> str:
    """One ``<testcase>`` per rule and backend; a failed rule is a ``<failure>``, a skipped one
    ``<skipped>``."""
    results = report.results
    suite = ET.Element(
        "testsuite",
        name="ragbridge gate",
        tests=str(len(results)),
        failures=str(sum(r.verdict == "fail" for r in results)),
        errors="0",
        skipped=str(sum(r.verdict == "skip" for r in results)),
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="run", value=str(report.run.path or ""))
    if report.baseline is not None:
        ET.SubElement(props, "property", name="baseline", value=str(report.baseline.path or ""))
    fingerprint = str(report.run.manifest.dataset.get("fingerprint") or "")
    ET.SubElement(props, "property", name="dataset_fingerprint", value=fingerprint)
    for w in report.warnings:
        ET.SubElement(props, "property", name="warning", value=w)
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=f"ragbridge.gate.{r.backend}", name=r.rule.label, time="0"
        )
        text = f"{r.label}\nfigure: {figure_text(r)} (n={count(r.n)})\n{r.detail}"
        if r.items and r.verdict != "pass":
            text += f"\nthe {behind(r)} behind it ({min(top, len(r.items)):,} of {len(r.items):,}):\n"
            text += "\n".join(item_line(i) for i in r.items[:top])
        if r.verdict == "fail":
            failure = ET.SubElement(case, "failure", message=r.detail, type="GateFailure")
            failure.text = text
        elif r.verdict == "skip":
            ET.SubElement(case, "skipped", message=r.detail)
        else:
            ET.SubElement(case, "system-out").text = text
    root = ET.Element("testsuites", name="ragbridge", tests=suite.get("tests"),
                      failures=suite.get("failures"))
    root.append(suite)
    return _xml(root)


def _xml(root: ET.Element) -> str:
    """The document, with every character XML cannot hold (e.g. a NUL or a lone surrogate in a
    case id) shown as an escape: ElementTree escapes markup but writes those as they are."""
    for el in root.iter():
        el.attrib = {k: _NOT_XML.sub(escape_char, v) for k, v in el.attrib.items()}
        if el.text:
            el.text = _NOT_XML.sub(escape_char, el.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown(report: GateReport, top: int = TOP_CASES) -> str:
    """A Markdown summary: verdict, the table of every rule, then the cases behind each failure."""
    icon = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭️ skip"}
    head = "✅ passed" if report.passed else "❌ failed"
    lines = [f"## ragbridge gate {head}", "", report.summary_line(), ""]
    lines.append(f"- run: {md_text(_run_line(report.run))}")
    if report.baseline is not None:
        lines.append(f"- baseline: {md_text(_run_line(report.baseline))}")
    for w in report.warnings:
        lines.append(f"- ⚠️ {md_text(w)}")
    lines += ["", "| # | backend | rule | figure [CI] | n | verdict | detail |",
              "|---|---|---|---|---|---|---|"]
    for r in report.results:
        lines.append(
            f"| {r.rule.index} | {md_text(r.backend)} | {md_text(r.rule.label)} | "
            f"{md_text(figure_text(r))} | {count(r.n)} | {icon[r.verdict]} | {md_text(r.detail)} |"
        )
    for r in report.results:
        if r.verdict != "fail" or not r.items:
            continue
        shown = r.items[:top]
        lines += ["", f"### ❌ {md_text(r.label)}", "",
                  f"The {behind(r)} behind it ({len(shown):,} of {len(r.items):,}):", ""]
        if "delta" in r.items[0]:
            lines += ["| case | baseline | run | change |", "|---|---|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {num(i['base'])} | {num(i['new'])} | "
                      f"{num(i['delta'], signed=True)} |" for i in shown]
        elif "layer" in r.items[0]:
            lines += ["| case | diagnosis |", "|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {md_text(i['reason'])} |" for i in shown]
        elif "metrics" in r.items[0]:
            lines += ["| case | metrics | error |", "|---|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {md_text(i['metrics'])} | "
                      f"{md_text(i.get('reason') or '')} |" for i in shown]
        else:
            lines += ["| case | value |", "|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {num(i['value'])} |" for i in shown]
    return "\n".join(lines) + "\n"


def incomplete_junit_xml(message: str) -> str:
    """A JUnit report for a run that could not be gated (one errored test case saying why)."""
    root = ET.Element("testsuites", name="ragbridge", tests="1", failures="0", errors="1")
    suite = ET.SubElement(root, "testsuite", name="ragbridge gate", tests="1", failures="0", errors="1",
                          skipped="0")
    case = ET.SubElement(suite, "testcase", classname="ragbridge.gate", name="run is complete", time="0")
    ET.SubElement(case, "error", message=message, type="IncompleteRun").text = message
    return _xml(root)


def incomplete_markdown(message: str, problems: Optional[Sequence[str]] = None) -> str:
    """A Markdown summary for a run that could not be gated: why, and its problems."""
    lines = ["## ragbridge gate ⚠️ not gated: the run is incomplete", "", md_text(message), ""]
    lines += [f"- {md_text(p)}" for p in problems or ()]
    return "\n".join(lines) + "\n"


def moved(summary):
    """Rows of a diff summary where some case moved: got worse or better, or changed status."""
    return (summary["n_worse"] + summary["n_better"] + summary["n_status_changed"]) > 0


def diff_json(d: RunDiff, top: Optional[int] = None) -> dict:
    """The diff as one JSON-ready document (every summary row, with ``moved``; the cases that got
    worse, better or changed status: ``top`` of each, None for every one)."""
    summary = d.summary.copy()
    summary["moved"] = moved(summary)
    totals = d.totals()
    return {
        "base": {"path": str(d.base.path), "n_cases": d.base.n_cases, "status": d.base.manifest.status},
        "new": {"path": str(d.new.path), "n_cases": d.new.n_cases, "status": d.new.manifest.status},
        "warnings": list(d.warnings),
        "only_in_base": list(d.only_in_base),
        "only_in_new": list(d.only_in_new),
        "metrics_only_in_base": [list(k) for k in d.metrics_only_in_base],
        "metrics_only_in_new": [list(k) for k in d.metrics_only_in_new],
        "confidence": d.confidence,
        "summary": records(summary),
        # (every item row: JSON-ready as made, `Rows.plain`, millions of them at a million cases; ``top``
        # of them: made now, so that the document does not hold the diff's paired columns and both runs)
        **{key: (rows if top is None else list(rows)) for key, rows in (
            ("worse", d.rows("worse", top=top)), ("better", d.rows("better", top=top)),
            ("status_changes", d.rows("status", top=top)))},
        "totals": totals,
    }


def gate_json(report: GateReport) -> dict:
    """The gate as one JSON-ready document: the verdict, then every rule with all the cases behind it."""
    return {
        "passed": report.passed,
        "summary": report.summary_line(),
        "run": str(report.run.path),
        "baseline": str(report.baseline.path) if report.baseline is not None else None,
        "warnings": list(report.warnings),
        "results": [
            {
                "rule": r.rule.index, "label": r.rule.label, "check": r.rule.check, "tags": list(r.rule.tags),
                "backend": r.backend, "verdict": r.verdict, "figure": r.figure, "ci_low": r.ci_low,
                "ci_high": r.ci_high, "p_value": r.p_value, "n": r.n, "detail": r.detail,
                "n_cases_behind": len(r.items), "cases_behind": r.items,
            }
            for r in report.results
        ],
    }
