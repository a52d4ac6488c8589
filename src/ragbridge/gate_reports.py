"""A gate's verdicts as JUnit XML (for CI test reports) and Markdown (for a CI job summary)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .gate import GateReport, GateResult
    from .runner import Run

__all__ = ["junit_xml", "markdown", "incomplete_junit_xml", "incomplete_markdown", "TOP_CASES"]

#: How many of the cases behind a failed rule the terminal, the Markdown and the JUnit XML list
#: (the same ones, in the same order; each says how many there are in all).
TOP_CASES = 10


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _item_line(item: dict[str, Any]) -> str:
    if "delta" in item:
        return f"{item['case_id']}: {_num(item['base'])} -> {_num(item['new'])} ({item['delta']:+.3f})"
    if "metrics" in item:
        return f"{item['case_id']}: {item['metrics']}: {item.get('reason') or ''}".rstrip(": ")
    return f"{item['case_id']}: {_num(item['value'])}"


def _run_line(run: "Run") -> str:
    m = run.manifest
    return (
        f"{run.path or '(in memory)'}: {m.dataset.get('n_cases', len(run.cases))} cases, "
        f"backends {', '.join((b + ' ' + (v or '')).strip() for b, v in m.backends.items())}, "
        f"status {m.status}, dataset {str(m.dataset.get('fingerprint') or '')[:19]}"
    )


def junit_xml(report: "GateReport", top: int = TOP_CASES) -> str:
    """One ``<testcase>`` per rule and backend; a failed rule is a ``<failure>``, a skipped one ``<skipped>``."""
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
    ET.SubElement(props, "property", name="dataset_fingerprint", value=str(report.run.manifest.dataset.get("fingerprint") or ""))
    for w in report.warnings:
        ET.SubElement(props, "property", name="warning", value=w)
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=f"ragbridge.gate.{r.backend}", name=r.rule.label, time="0"
        )
        text = f"{r.label}\nfigure: {r.figure_text()} (n={r.n})\n{r.detail}"
        if r.items and r.verdict != "pass":
            text += f"\nthe cases behind it ({min(top, len(r.items))} of {len(r.items)}):\n"
            text += "\n".join(_item_line(i) for i in r.items[:top])
        if r.verdict == "fail":
            failure = ET.SubElement(case, "failure", message=r.detail, type="GateFailure")
            failure.text = text
        elif r.verdict == "skip":
            ET.SubElement(case, "skipped", message=r.detail)
        else:
            ET.SubElement(case, "system-out").text = text
    root = ET.Element("testsuites", name="ragbridge", tests=suite.get("tests"), failures=suite.get("failures"))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: "GateReport", top: int = TOP_CASES) -> str:
    """A Markdown summary: verdict, the table of every rule, then the cases behind each failure."""
    icon = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭️ skip"}
    head = "✅ passed" if report.passed else "❌ failed"
    lines = [f"## ragbridge gate {head}", "", report.summary_line(), ""]
    lines.append(f"- run: `{_run_line(report.run)}`")
    if report.baseline is not None:
        lines.append(f"- baseline: `{_run_line(report.baseline)}`")
    for w in report.warnings:
        lines.append(f"- ⚠️ {w}")
    lines += ["", "| # | backend | rule | figure [CI] | n | verdict | detail |", "|---|---|---|---|---|---|---|"]
    for r in report.results:
        lines.append(
            f"| {r.rule.index} | {r.backend} | {_md_cell(r.rule.label)} | {_md_cell(r.figure_text())} | {r.n} "
            f"| {icon[r.verdict]} | {_md_cell(r.detail)} |"
        )
    for r in report.results:
        if r.verdict != "fail" or not r.items:
            continue
        lines += ["", f"### ❌ {_md_cell(r.label)}", "", f"The cases behind it ({min(top, len(r.items))} of {len(r.items)}):", ""]
        if "delta" in r.items[0]:
            lines += ["| case | baseline | run | change |", "|---|---|---|---|"]
            lines += [f"| {_md_cell(i['case_id'])} | {_num(i['base'])} | {_num(i['new'])} | {i['delta']:+.3f} |" for i in r.items[:top]]
        elif "metrics" in r.items[0]:
            lines += ["| case | metrics | error |", "|---|---|---|"]
            lines += [f"| {_md_cell(i['case_id'])} | {_md_cell(i['metrics'])} | {_md_cell(i.get('reason') or '')} |" for i in r.items[:top]]
        else:
            lines += ["| case | value |", "|---|---|"]
            lines += [f"| {_md_cell(i['case_id'])} | {_num(i['value'])} |" for i in r.items[:top]]
    return "\n".join(lines) + "\n"


def incomplete_junit_xml(message: str) -> str:
    """A JUnit report for a run that could not be gated (one errored test case saying why)."""
    root = ET.Element("testsuites", name="ragbridge", tests="1", failures="0", errors="1")
    suite = ET.SubElement(root, "testsuite", name="ragbridge gate", tests="1", failures="0", errors="1", skipped="0")
    case = ET.SubElement(suite, "testcase", classname="ragbridge.gate", name="run is complete", time="0")
    ET.SubElement(case, "error", message=message, type="IncompleteRun").text = message
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def incomplete_markdown(message: str, problems: Optional[Sequence[str]] = None) -> str:
    lines = ["## ragbridge gate ⚠️ not gated: the run is incomplete", "", message, ""]
    lines += [f"- {p}" for p in problems or ()]
    return "\n".join(lines) + "\n"
