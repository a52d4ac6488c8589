"""The report as one JSON document (``ragbridge report RUN --format json``), bounded whatever the run's size.

What it holds: everything `ragbridge.report.data.report_data` computes over the whole run (summary,
per tag, agreement, disagreements, judge usage, pass marks, ...), then

- ``cases``: every case of the run, one compact line each (no indentation): ``id``, ``tags``,
  ``answerable``, ``flags`` (error, undefined, fail, disagree) and ``scores`` (each score's
  ``metric``, ``backend``, ``value``, ``status``, ``passed`` and ``threshold``), made from the run's
  columns without reading a case or a score back: what a CI job or a notebook filters on;
- ``cases_in_full``: the cases the HTML and Markdown reports show in full (the ones that matter most,
  at most ``--full``, within `ragbridge.report.html.FULL_BUDGET`), each with its question, answer,
  reference, chunks (the first `ragbridge.report.html.CHUNKS_SHOWN` and the relevant ones), and
  every score with its reason, error and ``below`` badge;
- ``diagnosis.cases``: the first `ragbridge.analysis.diagnose.DIAGNOSIS_LISTED` failing cases of each
  layer (the counts are over every case; ``ragbridge diagnose RUN --json`` lists them all);
- ``cases_note``, ``cases_file`` and ``scores_file``: where every case's texts and every score's
  reason are (the run folder's ``cases.jsonl`` and ``scores.jsonl``, by case id).

Writing every case's texts and reasons grew with the texts (612 MB at 20,000 cases of 100 chunk ids
each, about 30 GB at a million); this file grows by about 100 bytes a case and score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Optional, TextIO, Union

from ..analysis.diagnose import DIAGNOSIS_LISTED
from ..analysis.table import open_run
from ..metrics import sort_key as metric_key
from ..run import Run
from ..run.columns import MISSING, SCORED, STATUS_NAMES
from .data import backend_key, listed_by_layer, report_data
from .html import FULL_BUDGET, FULL_CASES, cases_in_full, case_flags, shown_cases
from .text import json_chunks

__all__ = ["render_json", "write_json", "case_lines", "CASES_NOTE"]

#: what the file says of its ``cases`` (``cases_note``)
CASES_NOTE = ("cases: every case of the run, its scores' values, statuses and verdicts; cases_in_full: "
              "the cases that matter most with their question, answer, reference, chunks and every "
              "score's reason (those the HTML and Markdown reports show in full); every case's texts "
              "are in cases_file and every score with its reason in scores_file, by case id")

#: cases made into lines at a time
BLOCK = 4096


def render_json(run: Union[Run, str, Path], data: Optional[dict] = None, full: int = FULL_CASES,
                **kw) -> str:
    """The report as one JSON document (see the module docstring)."""
    import io

    buffer = io.StringIO()
    write_json(run, buffer, data, full=full, **kw)
    return buffer.getvalue()


def write_json(run: Union[Run, str, Path], out: TextIO, data: Optional[dict] = None, full: int = FULL_CASES,
               **kw) -> None:
    """Write the report as one JSON document to ``out`` (see the module docstring), its ``cases`` a
    block of lines at a time. ``data``: `report_data`'s (its ``cases`` are not read)."""
    run = open_run(run)
    d = data or report_data(run, case_texts=False, **kw)
    shown, _ = shown_cases(run, d, cases_in_full(d, run.columns, full), FULL_BUDGET)
    folder = Path(run.path) if run.path else None
    head = {k: v for k, v in d.items() if k != "cases"}
    if head.get("diagnosis"):
        listed = listed_by_layer(head["diagnosis"])
        head["diagnosis"] = head["diagnosis"] | {
            "cases": [c for first, _ in listed.values() for c in first], "cases_listed": DIAGNOSIS_LISTED}
    head |= {"cases_note": CASES_NOTE,
             "cases_file": str(folder / "cases.jsonl") if folder else None,
             "scores_file": str(folder / "scores.jsonl") if folder else None,
             "cases_in_full": shown}
    text = "".join(json_chunks(head, escaped=False))
    assert text.endswith("\n}")
    out.write(text[:-2] + ',\n  "cases": [')
    first = True
    for lines in case_lines(run, d):
        out.write(("\n" if first else ",\n") + ",\n".join(lines))
        first = False
    out.write("\n  ]\n}" if not first else "]\n}")


def case_lines(run: Run, data: dict[str, Any]) -> Iterator[list[str]]:
    """Every case of ``run`` as a compact JSON line (``cases``), a block at a time, from the run's
    columns and case index alone."""
    cols = run.columns
    index = cols.cases
    marks = {(r["backend"], r["metric"]): r["threshold"] for r in data["summary"]}
    keys = sorted(marks, key=lambda p: (metric_key(p[1]), backend_key(p[0])))
    f = case_flags(data, cols)
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    ids, tags, answerable = index.ids, index.tags, index.answerable
    n = len(index)
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        per = []
        for b, m in keys:
            col = cols.column(b, m)
            passed = col.verdicts(marks[(b, m)])[start:stop]
            per.append((m, b, marks[(b, m)], col.status[start:stop].tolist(), col.value[start:stop].tolist(),
                        passed.tolist()))
        flags = [f[x][start:stop].tolist() for x in ("error", "undefined", "fail", "disagree")]
        lines = []
        for j in range(stop - start):
            i = start + j
            scores = []
            for m, b, t, status, value, passed in per:
                code = status[j]
                if code == MISSING:
                    continue
                ok = code == SCORED
                scores.append({"metric": m, "backend": b, "value": value[j] if ok else None,
                               "status": STATUS_NAMES[code], "passed": passed[j] if ok else None,
                               "threshold": t})
            lines.append(dumps({"id": ids[i], "tags": list(tags[i]) if i < len(tags) else [],
                                "answerable": bool(answerable[i]) if i < len(answerable) else True,
                                "flags": {"error": flags[0][j], "undefined": flags[1][j], "fail": flags[2][j],
                                          "disagree": flags[3][j]},
                                "scores": scores}))
        yield lines

