"""How a run shows itself in a notebook (`run_html`, a `Run`'s ``_repr_html_``).

Where the run is, its status and counts, the input warnings that bear on its metrics, what changed
since an earlier session (cases updated: `ragbridge.run.folder.RunFolder.resume`), the summary table
(mean and counts per backend and metric, over all cases), the first errored scores with their cases
named as a person reads them (`ragbridge.formats.records.case_label`: the question where the id was
derived from it), and for a run that computed nothing, what the cases lack and what to call instead,
in Python (`ragbridge.run.unscored`).
"""

from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING, Any

from ..verdicts import count

if TYPE_CHECKING:  # pragma: no cover
    from .folder import Run

__all__ = ["run_html", "SHOWN_ERRORS"]

#: the errored scores the view names
SHOWN_ERRORS = 5
#: the longest error text shown (a library's message can hold a whole prompt)
ERROR_CHARS = 500


def run_html(run: "Run") -> str:
    """The run as HTML (see the module docstring)."""
    from .unscored import nothing_computed, unscored_lines

    def num(v: Any) -> str:
        return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"

    m = run.manifest
    where = html.escape(str(run.path)) if run.path is not None else "in memory"
    counts = run.counts
    head = (f"<b>Run</b> {where}: {count(m.dataset.get('n_cases', '?'))} cases, "
            f"{count(counts.get('scores', 0))} scores, {html.escape(m.status)}")
    if (m.judge or {}).get("stub"):
        head += " (judged by the stub judge: the judged scores test plumbing, not answer quality)"
    notes = []
    changed = counts.get("cases_changed")
    if changed:
        notes.append(f"the cases changed since this folder was scored: {changed['changed']} changed and "
                     f"{changed['added']} new case(s) scored, {changed['removed']} removed; the scores "
                     f"of the {changed['kept']} unchanged kept")
    columns = ("backend", "metric", "mean", "n_scored", "n_undefined", "n_errored", "n")
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(num(r[c]) if c == 'mean' else count(r[c]))}</td>"
                         for c in columns) + "</tr>" for r in run.summary_rows(by_tag=False))
    header = "".join(f"<th>{c}</th>" for c in columns)
    unscored = nothing_computed(run)
    note = "" if unscored is None else \
        f"<pre>{html.escape(chr(10).join(unscored_lines(unscored, python=True)))}</pre>"
    warned = "".join(f'<p style="color:#8a5a00">warning: {html.escape(w)}</p>' for w in m.warnings)
    return (f"<div><p>{head}</p>{warned}" + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
            + f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"
            + _errors_html(run, counts) + f"{note}</div>")


def _errors_html(run: "Run", counts: dict[str, Any]) -> str:
    """The first errored scores, each with its case, backend, metric and error; "" when none errored."""
    from ..formats.records import case_label

    if not counts.get("errored"):
        return ""
    errored = [s for s in run.scores if s.status == "error"][:SHOWN_ERRORS]
    questions = _questions(run, {s.case_id for s in errored})
    items = "".join(
        f"<li><b>{html.escape(case_label(s.case_id, questions.get(s.case_id)))}</b> "
        f"{html.escape(s.backend)}:{html.escape(s.metric)}: {html.escape(_cut(s.error or ''))}</li>"
        for s in errored)
    more = counts["errored"] - len(errored)
    return (f"<p>{counts['errored']} score(s) errored"
            + (f" ({more} more not shown: <code>run.to_frame()</code> has every one)" if more > 0 else "")
            + "; the same <code>evaluate(...)</code> call with the same <code>out</code> retries them:</p>"
            + f"<ul>{items}</ul>")


def _questions(run: "Run", ids: set[str]) -> dict[str, str]:
    """The questions of the cases ``ids``; from a folder, without reading every case (the canonical
    line of a case starts with its id)."""
    if run.path is None or run._cases is not None:
        return {c.id: c.question for c in run.cases if c.id in ids}
    starts = {b'{"id":' + json.dumps(i, ensure_ascii=False).encode() + b",": i for i in ids}
    found: dict[str, str] = {}
    with open(run._file("cases.jsonl"), "rb") as f:
        for line in f:
            for start, case_id in starts.items():
                if line.startswith(start):
                    found[case_id] = json.loads(line).get("question", "")
            if len(found) == len(starts):
                break
    return found


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "…"
