"""A gate's verdicts as JUnit XML (for CI test reports) and Markdown (for a CI job summary).

Every string that comes from the data (case ids, tags, metric and backend names, reasons, paths) is
escaped for where it goes, by one helper per kind of output: :func:`md_text` for Markdown (also used
by ``ragbridge report --format md``): HTML-escaped, so no tag survives even where a renderer allows
HTML, and Markdown-escaped, so it can neither format nor break a table; :func:`plain_text` for text
lines (terminal, JUnit messages, pytest): control characters shown as escapes, so a value cannot add
lines or drive a terminal. JUnit XML is written by the standard library's ElementTree, which escapes
markup; characters XML cannot hold at all are shown as escapes too.
"""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from .gate import GateReport, GateResult
    from .run import Run

__all__ = ["junit_xml", "markdown", "incomplete_junit_xml", "incomplete_markdown", "md_text", "plain_text", "TOP_CASES"]

#: How many of the cases behind a failed rule the terminal, the Markdown and the JUnit XML list
#: (the same ones, in the same order; each says how many there are in all).
TOP_CASES = 10

# C0 and C1 controls, and the bidirectional overrides that make text display other than it reads
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")  # what can format, link or end a table cell mid-line
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _escape_char(m: "re.Match[str]") -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def plain_text(text: Any) -> str:
    """``text`` for one line of plain text: control characters (newlines included) as ``\\n``-style
    escapes."""
    return _CONTROL.sub(_escape_char, str(text))


def md_text(text: Any) -> str:
    """``text`` safe anywhere in Markdown, a table cell included: HTML-escaped (``<``, ``>``, ``&``),
    Markdown punctuation and backslashes backslash-escaped, line breaks as ``<br>``, other control
    characters as escapes."""
    if text is None:
        return ""
    s = _MD_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))
    s = s.replace("\r\n", "<br>").replace("\r", "<br>").replace("\n", "<br>")
    return plain_text(s)


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def _item_line(item: dict[str, Any]) -> str:
    case = plain_text(item["case_id"])
    if "delta" in item:
        return f"{case}: {_num(item['base'])} -> {_num(item['new'])} ({item['delta']:+.3f})"
    if "metrics" in item:
        return f"{case}: {plain_text(item['metrics'])}: {plain_text(item.get('reason') or '')}".rstrip(": ")
    return f"{case}: {_num(item['value'])}"


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
    return _xml(root)


def _xml(root: ET.Element) -> str:
    """The document, with every character XML cannot hold (e.g. a NUL or a lone surrogate in a
    case id) shown as an escape: ElementTree escapes markup but writes those as they are."""
    for el in root.iter():
        el.attrib = {k: _NOT_XML.sub(_escape_char, v) for k, v in el.attrib.items()}
        if el.text:
            el.text = _NOT_XML.sub(_escape_char, el.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown(report: "GateReport", top: int = TOP_CASES) -> str:
    """A Markdown summary: verdict, the table of every rule, then the cases behind each failure."""
    icon = {"pass": "✅ pass", "fail": "❌ fail", "skip": "⏭️ skip"}
    head = "✅ passed" if report.passed else "❌ failed"
    lines = [f"## ragbridge gate {head}", "", report.summary_line(), ""]
    lines.append(f"- run: {md_text(_run_line(report.run))}")
    if report.baseline is not None:
        lines.append(f"- baseline: {md_text(_run_line(report.baseline))}")
    for w in report.warnings:
        lines.append(f"- ⚠️ {md_text(w)}")
    lines += ["", "| # | backend | rule | figure [CI] | n | verdict | detail |", "|---|---|---|---|---|---|---|"]
    for r in report.results:
        lines.append(
            f"| {r.rule.index} | {md_text(r.backend)} | {md_text(r.rule.label)} | {md_text(r.figure_text())} | {r.n} "
            f"| {icon[r.verdict]} | {md_text(r.detail)} |"
        )
    for r in report.results:
        if r.verdict != "fail" or not r.items:
            continue
        lines += ["", f"### ❌ {md_text(r.label)}", "", f"The cases behind it ({min(top, len(r.items))} of {len(r.items)}):", ""]
        if "delta" in r.items[0]:
            lines += ["| case | baseline | run | change |", "|---|---|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {_num(i['base'])} | {_num(i['new'])} | {i['delta']:+.3f} |" for i in r.items[:top]]
        elif "metrics" in r.items[0]:
            lines += ["| case | metrics | error |", "|---|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {md_text(i['metrics'])} | {md_text(i.get('reason') or '')} |" for i in r.items[:top]]
        else:
            lines += ["| case | value |", "|---|---|"]
            lines += [f"| {md_text(i['case_id'])} | {_num(i['value'])} |" for i in r.items[:top]]
    return "\n".join(lines) + "\n"


def incomplete_junit_xml(message: str) -> str:
    """A JUnit report for a run that could not be gated (one errored test case saying why)."""
    root = ET.Element("testsuites", name="ragbridge", tests="1", failures="0", errors="1")
    suite = ET.SubElement(root, "testsuite", name="ragbridge gate", tests="1", failures="0", errors="1", skipped="0")
    case = ET.SubElement(suite, "testcase", classname="ragbridge.gate", name="run is complete", time="0")
    ET.SubElement(case, "error", message=message, type="IncompleteRun").text = message
    return _xml(root)


def incomplete_markdown(message: str, problems: Optional[Sequence[str]] = None) -> str:
    lines = ["## ragbridge gate ⚠️ not gated: the run is incomplete", "", md_text(message), ""]
    lines += [f"- {md_text(p)}" for p in problems or ()]
    return "\n".join(lines) + "\n"
