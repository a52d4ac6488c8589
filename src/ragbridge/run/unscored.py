"""When a run computed nothing: why, and what to run instead.

A run whose every score is undefined (no score has a value, none errored) measured nothing: the
metrics asked for need fields the cases do not have, e.g. native ranking metrics on a golden set
without relevance labels. `nothing_computed` says so, per backend and metric, with the reasons the
scores give (how many cases each) and which inputs the cases do have; and, for the judged backends
that are installed, the metrics those inputs allow and the command that scores them. The command
line prints it and exits with its own code; a notebook shows it under the run (`Run._repr_html_`).
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import TYPE_CHECKING, Any, Optional

from .lifecycle import NO_REASON_END

if TYPE_CHECKING:  # pragma: no cover
    from .folder import Run

__all__ = ["nothing_computed", "unscored_lines", "gave_no_reason"]

#: the inputs `Case.fields_present` names, as a person reads them
FIELD_WORDS = {"question": "question", "answer": "answer", "contexts": "contexts",
               "context_text": "contexts with text", "relevant": "relevance labels (relevant)",
               "reference": "reference answer", "reference_contexts": "reference_contexts"}


def gave_no_reason(reason: str) -> bool:
    """Whether ``reason`` is the one the run gives an undefined value its backend gave no reason for
    (`ragbridge.run.lifecycle.no_reason`)."""
    return reason.startswith("backend ") and reason.endswith(NO_REASON_END)


def nothing_computed(run: "Run", dataset: Optional[str] = None, out: Optional[str] = None) -> Optional[dict]:
    """None when some score of ``run`` has a value (or some errored: that is another problem);
    else what computed nothing and what would, as a JSON-ready dict:

    ``metrics`` (per backend and metric: ``backend``, ``metric``, ``n``, and ``reasons``, each undefined
    score's reason with its number of cases), ``fields`` (per input of `FIELD_WORDS`: how many cases
    have it), ``judged`` (per installed backend with judged metrics: ``backend`` and the ``metrics``
    some case has every input for) and ``command`` (a ``ragbridge run`` that scores them, with the
    judge's options to fill in; None when no judged backend is installed), ``python`` (the same as a
    call of `ragbridge.evaluate`). ``dataset`` and ``out`` go into the command (default: the run's
    recorded dataset path and folder).
    """
    counts = run.manifest.counts or {}
    if not counts.get("scores") or counts.get("scored") or counts.get("errored") or counts.get("not_run"):
        return None
    reasons: dict[tuple[str, str], Counter] = {}
    for s in run.scores:
        reasons.setdefault((s.backend, s.metric), Counter())[s.reason or "undefined"] += 1
    metrics = [{"backend": b, "metric": m, "n": sum(c.values()),
                "reasons": [{"reason": r, "cases": n} for r, n in c.most_common()]}
               for (b, m), c in reasons.items()]
    present = [c.fields_present() for c in run.cases]
    fields = {f: sum(f in p for p in present) for f in FIELD_WORDS}
    if all(gave_no_reason(r["reason"]) for m in metrics for r in m["reasons"]):
        # the backends returned nothing, for no reason they gave: the cases are not to blame
        return {"metrics": metrics, "fields": fields, "judged": [], "command": None, "python": None,
                "lacking": [], "blame": "backends"}
    judged = _judged_backends(present, unanswerable=any(not c.answerable for c in run.cases))
    lacking = [] if judged else _lacking(present)
    command = python = None  # the first backend's: its metrics whose inputs are missing are skipped
    if judged:
        dataset = dataset or run.manifest.dataset.get("path") or "GOLDEN.jsonl"
        out = out or (str(run.path) if run.path is not None else "RUN_FOLDER")
        command = " ".join(["ragbridge", "run", shlex.quote(str(dataset)), "--out", shlex.quote(str(out)),
                            "--backend", judged[0]["backend"], "--judge-model", "MODEL", "--judge-base-url",
                            "URL"])
        python = (f"ragbridge.evaluate(cases, backends=[{judged[0]['backend']!r}], "
                  f"judge=JudgeConfig(model=\"MODEL\", base_url=\"URL\"), out={str(out)!r})")
    return {"metrics": metrics, "fields": fields, "judged": judged, "command": command, "python": python,
            "lacking": lacking, "blame": "cases"}


def _judged_backends(present: list[set[str]], unanswerable: bool) -> list[dict[str, Any]]:
    """Each installed backend's judged metrics that some case has every input for (``abstention``
    only with an unanswerable case: it is undefined on the others); the rubric backend (ragbridge's
    own judge) last."""
    from ..plugins import usable_backends

    found = []
    for name, backend in sorted(usable_backends().items(), key=lambda kv: (kv[0] == "rubric", kv[0])):
        if not backend.available():
            continue
        try:
            specs = backend.metrics()
        except Exception:  # noqa: BLE001 - a backend that cannot list its metrics offers none here
            continue
        usable = [s.name for s in specs if s.judge and (unanswerable or s.name != "abstention")
                  and any(set(s.requires) <= p for p in present)]
        if usable:
            found.append({"backend": name, "metrics": usable})
    return found


def _lacking(present: list[set[str]]) -> list[str]:
    """What the cases lack for the judged metric of an installed backend that needs the least they
    have none of (the fields of `FIELD_WORDS`, in its order): empty when there is no such metric."""
    from ..plugins import usable_backends

    have = set().union(*present) if present else set()
    best: Optional[set[str]] = None
    for backend in usable_backends().values():
        if not backend.available():
            continue
        try:
            specs = backend.metrics()
        except Exception:  # noqa: BLE001 - a backend that cannot list its metrics offers none here
            continue
        for spec in specs:
            if spec.judge and spec.name != "abstention":
                missing = set(spec.requires) - have
                if best is None or len(missing) < len(best):
                    best = missing
    return [f for f in FIELD_WORDS if f in (best or ())]


def unscored_lines(info: dict, python: bool = False) -> list[str]:
    """`nothing_computed`'s answer as lines of plain text; ``python``: what to run as Python (for a
    notebook), else as a command line."""
    n = sum(m["n"] for m in info["metrics"])
    if info.get("blame") == "backends":
        return [f"nothing was computed: all {n} scores are undefined, and their backends gave no reason:"] + [
            f"  {m['backend']} {m['metric']}: {m['n']} case(s)" for m in info["metrics"]] + [
            "the cases have the inputs; the backend returned no value (null or NaN) for each: its plugin is "
            "to say why (a reason), or to fix what it computes"]
    lines = [f"nothing was computed: all {n} scores are undefined, because the cases lack what the "
             "metrics need:"]
    by_reasons: dict[tuple, list[str]] = {}
    for m in info["metrics"]:
        key = (m["backend"], tuple((r["reason"], r["cases"]) for r in m["reasons"]))
        by_reasons.setdefault(key, []).append(m["metric"])
    for (backend, reasons), names in by_reasons.items():
        why = "; ".join(f"{r} ({k} case(s))" for r, k in reasons)
        lines.append(f"  {backend} {', '.join(names)}: {why}")
    total = max(info["fields"].values(), default=0)
    have = [f"{FIELD_WORDS[f]}" + ("" if k == total else f" ({k})") for f, k in info["fields"].items() if k]
    missing = [FIELD_WORDS[f] for f, k in info["fields"].items() if not k]
    lines.append(f"the cases have: {', '.join(have) or 'nothing but questions'}"
                 + (f"; none has: {', '.join(missing)}" if missing else ""))
    if info["judged"]:
        lines.append("metrics that judge these inputs (a judge model needed), by installed backend:")
        lines.extend(f"  {j['backend']}: {', '.join(j['metrics'])}" for j in info["judged"])
        if python and info.get("python"):
            lines.append(f"to score them: {info['python']}")
            lines.append("(from ragbridge.judge import JudgeConfig; another backend in backends=[...]; "
                         "ragbridge.testing.StubJudge() is a judge to try the plumbing without a key)")
        else:
            lines.append(f"to score them: {info['command']}")
            lines.append("(another backend with --backend; the judge can also come from ragbridge.toml, "
                         "and `ragbridge judge serve --stub` runs a stub judge to try the plumbing without "
                         "a key)")
    else:
        lacking = info.get("lacking") or []
        give = (f"give the cases their {' and '.join(FIELD_WORDS[f] for f in lacking)} (the least a judged "
                "metric needs)" if lacking else "install a judged backend")
        lines.append(f"no installed backend has a judged metric these inputs allow: {give}; `ragbridge "
                     "backends` lists the backends, their metrics and how to install them")
    return lines
