"""User signals kept apart from the spans: a file of feedback and annotations, by trace or span,
and how a signal stands for a human pass or fail.

A signals file is JSON lines or CSV, one signal a record: ``trace_id`` or ``span_id`` (which the
signal is about), ``name`` (``thumbs``, ``user_feedback``, ``escalation``, ...: default
``feedback``), and at least one of ``score`` (a number; ``true``/``false`` read as 1/0), ``label``
(a word: ``up``, ``down``, ``helpful``, ``escalated``) and ``note`` (free text); ``source`` (who gave
it) and ``polarity`` (see below) are optional. Ids are matched as the trace files hold them (hex for
OpenTelemetry ids).

**Polarity.** A signal is *positive* when a high score or a yes is the good outcome (a thumbs-up, a
rating, ``helpful``) and *negative* when it is the bad one: an escalation to a human, a follow-up
question, a thumbs-down, a complaint, a regenerated answer. `polarity_of` says which: the polarity
given for the validation (``validate --signal-polarity``), else the signal's own (``polarity`` in
its record), else its name (`NEGATIVE_NAMES`: a name holding one of those words is negative), else
positive. A negative signal's score at or above the label threshold is a fail, below it a pass; its
``yes``/``true``/``1`` label a fail. Words that say which outcome was good keep their meaning
whatever the polarity (``down``, ``bad`` fail; ``up``, ``resolved`` pass).

**Labels.** A label is a pass or a fail by the user's table first (`load_label_table`: a CSV or
JSON lines file of ``label``, ``verdict`` (pass or fail) and, optionally, ``name``, the signal it is
for), then by the words known here (`PASS_LABELS`, `FAIL_LABELS`, and the yes/no words by
polarity). A label neither knows is not a label, and is counted with its values named.

`labels_from_signals` turns the signals that a run's cases carry (``metadata["signals"]``) into
human labels for ``validate``: one signal name is the human side. A case with several signals of that
name whose verdicts disagree (a thumbs-up and a thumbs-down) gives no label: it is counted and named
(``conflicting``), never settled by the order of the file.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from ..formats.files import DatasetError, jsonl_lines
from ..schema import Case
from .spans import Signal, SpanError, hex_id, shown

__all__ = ["load_signals", "signal_verdict", "labels_from_signals", "human_labels", "polarity_of",
           "load_label_table", "LabelTable", "SignalLabels", "NEGATIVE_NAMES", "PASS_LABELS", "FAIL_LABELS",
           "POLARITIES"]

POLARITIES = ("positive", "negative")
#: words that say the outcome was good, or bad, whatever the signal's polarity
PASS_LABELS = frozenset({"up", "thumbs_up", "thumbsup", "positive", "good", "helpful", "like", "liked",
                         "pass", "passed", "correct", "resolved", "solved", "accepted", "satisfied"})
FAIL_LABELS = frozenset({"down", "thumbs_down", "thumbsdown", "negative", "bad", "unhelpful", "dislike",
                         "disliked", "fail", "failed", "incorrect", "wrong", "escalated", "unresolved",
                         "rejected", "abandoned", "unsatisfied"})
#: yes and no: a pass and a fail for a positive signal, the other way round for a negative one
_YES, _NO = frozenset({"yes", "true", "1", "y"}), frozenset({"no", "false", "0", "n"})
#: words in a signal's name that make it negative (a high score, or a yes, is the bad outcome)
NEGATIVE_NAMES = ("escalation", "escalated", "escalate", "follow_up", "followup", "thumbs_down",
                  "thumbsdown", "thumb_down", "dislike", "downvote", "complaint", "complain", "regenerate",
                  "regenerated", "retry", "handoff", "hand_off", "abandon", "abandoned", "frustration",
                  "frustrated", "reported", "flagged")


def _word(text: Any) -> str:
    return re.sub(r"[^0-9a-z]+", "_", str(text).strip().lower()).strip("_")


def polarity_of(name: str, given: Optional[str] = None, own: Optional[str] = None) -> str:
    """A signal's polarity: ``given`` (the validation's), else ``own`` (the signal's record), else
    negative when its name holds one of `NEGATIVE_NAMES`, else positive."""
    for value in (given, own):
        if value:
            return value
    word = f"_{_word(name)}_"
    return "negative" if any(f"_{n}_" in word for n in NEGATIVE_NAMES) else "positive"


@dataclass
class LabelTable:
    """A user's table of labels: (signal name or None for any, label) -> pass (True) or fail."""

    verdicts: dict[tuple[Optional[str], str], bool] = field(default_factory=dict)

    def get(self, name: str, label: str) -> Optional[bool]:
        key = _word(label)
        found = self.verdicts.get((name, key))
        return self.verdicts.get((None, key)) if found is None else found


def load_label_table(path: str | Path) -> LabelTable:
    """A table of labels (see the module docstring); raises `DatasetError` naming the line and field."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such label table", path=path)
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = [(n, {k: v for k, v in row.items() if v not in (None, "")})
                    for n, row in enumerate(csv.DictReader(f), start=2)]
    else:
        rows = list(jsonl_lines(path))
    table = LabelTable()
    for line, rec in rows:
        if not isinstance(rec, dict):
            raise DatasetError("each row must be a JSON object", path=path, line=line)
        label, verdict = rec.get("label"), _word(rec.get("verdict") or "")
        if label in (None, ""):
            raise DatasetError("no label", path=path, line=line, field="label",
                               hint="each row maps one label to a verdict: label,verdict")
        if verdict not in ("pass", "fail"):
            raise DatasetError(f"verdict {rec.get('verdict')!r} is neither pass nor fail", path=path,
                               line=line, field="verdict", hint="write pass or fail")
        name = rec.get("name")
        key = (str(name) if name not in (None, "") else None, _word(label))
        if key in table.verdicts and table.verdicts[key] != (verdict == "pass"):
            raise DatasetError(f"label {label!r} is given both verdicts", path=path, line=line,
                               field="verdict", hint="keep one row for it")
        table.verdicts[key] = verdict == "pass"
    return table


def _number(value: Any, path: Path, line: int, unit: str) -> Optional[float]:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    try:
        number = float(value)
    except (TypeError, ValueError):
        text = str(value).strip().lower()
        if text in ("true", "false"):
            return 1.0 if text == "true" else 0.0
        raise DatasetError(f"score {value!r} is not a number", path=path, line=line, field="score",
                           unit=unit) from None
    if not math.isfinite(number):
        raise DatasetError(f"score {value!r} is not a finite number", path=path, line=line, field="score",
                           unit=unit)
    return number


def load_signals(path: str | Path) -> dict[str, list[Signal]]:
    """Signals by trace id or span id (see the module docstring); raises `DatasetError` for bad
    input, naming the line and field."""
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such signals file", path=path)
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8-sig", newline="") as f:
            rows = [(n, {k: v for k, v in row.items() if v not in (None, "")})
                    for n, row in enumerate(csv.DictReader(f), start=2)]
    else:
        rows = list(jsonl_lines(path))
    out: dict[str, list[Signal]] = {}
    for line, rec in rows:
        if not isinstance(rec, dict):
            raise DatasetError("each signal must be a JSON object", path=path, line=line)
        for key in ("trace_id", "span_id", "name", "label", "note", "source", "polarity"):
            value = rec.get(key)
            if value is not None and isinstance(value, (dict, list, bool)):
                raise DatasetError(f"{key} must be a text, got {shown(value)}", path=path, line=line,
                                   field=key)
        try:
            trace, span = hex_id(rec.get("trace_id"), 16), hex_id(rec.get("span_id"), 8)
        except SpanError as exc:
            raise DatasetError(exc.message, path=path, line=line, field="trace_id", hint=exc.hint) from None
        if trace is None and span is None:
            raise DatasetError("no trace_id or span_id", path=path, line=line, field="trace_id",
                               hint="say which trace (or span) the signal is about")
        score = _number(rec.get("score"), path, line, "line")
        label, note = rec.get("label"), rec.get("note")
        if score is None and label in (None, "") and note in (None, ""):
            raise DatasetError("the signal has no score, label or note", path=path, line=line,
                               field="score")
        polarity = rec.get("polarity")
        if polarity not in (None, "") and str(polarity).strip().lower() not in POLARITIES:
            raise DatasetError(f"polarity {polarity!r} is neither positive nor negative", path=path,
                               line=line, field="polarity",
                               hint="positive: a high score is good; negative: it is bad")
        signal = Signal(name=str(rec.get("name") or "feedback"), score=score,
                        label=None if label in (None, "") else str(label),
                        note=None if note in (None, "") else str(note),
                        span_id=span, source=rec.get("source"),
                        polarity=str(polarity).strip().lower() if polarity not in (None, "") else None)
        out.setdefault(trace or span, []).append(signal)
    return out


def signal_verdict(signal: dict[str, Any], polarity: str = "positive", table: Optional[LabelTable] = None,
                   threshold: float = 0.5) -> Optional[tuple[float, bool]]:
    """A signal as a human label ``(grade, graded)`` (see the module docstring), or None when it says
    neither pass nor fail. A positive signal's score is its grade (graded unless 0 or 1: ``validate``
    binarises it at its label threshold); a negative one's is a pass (1) below ``threshold``, else a
    fail (0); a label is a pass (1) or a fail (0)."""
    score = signal.get("score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        if polarity == "negative":
            return (0.0 if score >= threshold else 1.0), False
        return float(score), score not in (0, 1)
    label = signal.get("label")
    if label in (None, ""):
        return None
    name = str(signal.get("name") or "")
    mapped = table.get(name, str(label)) if table is not None else None
    if mapped is None:
        word = _word(label)
        if word in PASS_LABELS or word in FAIL_LABELS:
            mapped = word in PASS_LABELS
        elif word in _YES or word in _NO:
            mapped = (word in _YES) == (polarity == "positive")
    return None if mapped is None else ((1.0 if mapped else 0.0), False)


@dataclass
class SignalLabels:
    """What `labels_from_signals` made: the labels ``frame``, the ``polarity`` used, the signals
    that were not labels: ``unread`` (how many) and their ``labels`` (the values, for the message),
    the ids of the cases left out because their signals disagree (``conflicting``), and the names of
    every signal the cases carry (``names``)."""

    frame: Any
    polarity: str
    unread: int = 0
    labels: list[str] = field(default_factory=list)
    conflicting: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def labels_from_signals(cases: Iterable[Case], name: str, metrics: Sequence[str],
                        polarity: Optional[str] = None, table: Optional[LabelTable] = None,
                        threshold: float = 0.5) -> SignalLabels:
    """Human labels (``case_id, metric, grade, graded``) from the signal ``name`` on each case, one
    row per metric of ``metrics``: the same user judgement stands for every metric. A case with
    several such signals takes the last when they agree (a pass, or a fail, at ``threshold``), and
    none when they do not (counted in ``conflicting``); ``polarity`` (None: the signal's own, else by
    its name), ``table`` and ``threshold`` as `signal_verdict` takes them."""
    import pandas as pd

    rows, unread, labels, conflicting, used, names = [], 0, [], [], None, set()
    for case in cases:  # once: the cases may be a stream
        carried = [s for s in case.metadata.get("signals", []) or [] if isinstance(s, dict)]
        names.update(str(s.get("name")) for s in carried)
        found = [s for s in carried if s.get("name") == name]
        if not found:
            continue
        verdicts = []
        for signal in found:
            used = polarity_of(name, polarity, signal.get("polarity"))
            verdict = signal_verdict(signal, used, table, threshold)
            if verdict is None:
                unread += 1
                if signal.get("label") not in (None, ""):
                    labels.append(str(signal["label"]))
            else:
                verdicts.append(verdict)
        if not verdicts:
            continue
        if len({grade >= (threshold if graded else 0.5) for grade, graded in verdicts}) > 1:  # validate
            conflicting.append(case.id)
            continue
        grade, graded = verdicts[-1]
        rows.extend({"case_id": case.id, "metric": m, "grade": grade, "graded": graded} for m in metrics)
    frame = pd.DataFrame(rows, columns=["case_id", "metric", "grade", "graded"])
    return SignalLabels(frame, used or polarity_of(name, polarity), unread, sorted(set(labels)), conflicting,
                        sorted(names))


def human_labels(cases: Iterable[Case], name: str, metrics: Sequence[str], polarity: Optional[str] = None,
                 table: Optional[str | Path] = None, threshold: float = 0.5) -> tuple[Any, list[str]]:
    """``validate --labels signal:NAME``: the labels frame of `labels_from_signals` and the lines to
    print (the polarity read, the signals that are not labels). Raises `DatasetError` when no signal
    gives a label, saying why and what to do."""
    if not name:
        raise DatasetError("--labels signal:NAME needs the signal's name, e.g. signal:thumbs")
    if polarity is not None and polarity not in POLARITIES:
        raise DatasetError(f"--signal-polarity must be positive or negative, got {polarity!r}")
    mapping = load_label_table(table) if table is not None else None
    got = labels_from_signals(cases, name, metrics, polarity, mapping, threshold)
    unknown = (f"its labels {', '.join(map(repr, got.labels[:6]))} are neither a pass nor a fail: say what "
               "they mean with --signal-labels (a table of label, verdict)") if got.labels else ""
    disagree = (f"{len(got.conflicting)} case(s) carry {name!r} signals that disagree (a pass and a fail, "
                f"e.g. {got.conflicting[0]}) and are left out: keep the one signal that stands for each "
                "in the signals file") if got.conflicting else ""
    if got.frame.empty:
        if disagree:
            raise DatasetError(f"no {name!r} signal gives a label: {disagree}")
        if got.unread:
            raise DatasetError(f"none of the {got.unread} {name!r} signal(s) reads as a pass or a fail"
                               + (f": {unknown}" if unknown else " (no score and no label)"))
        names = got.names
        raise DatasetError(f"no case carries a signal named {name!r}"
                           + (f" (the cases carry: {', '.join(names)})" if names else
                              " (the cases carry no signals: sample the traces with their feedback, "
                              "ragbridge sample --signals)"))
    notes = [f"note: the {name!r} signal read as {got.polarity} (a high score or a yes is "
             f"{'good' if got.polarity == 'positive' else 'bad'}; --signal-polarity to say otherwise)"]
    if disagree:
        notes.append(f"warning: {disagree}")
    if got.unread:
        notes.append(f"warning: {got.unread} {name!r} signal(s) are not labels: "
                     + (unknown or "neither a score nor a label"))
    return got.frame, notes
