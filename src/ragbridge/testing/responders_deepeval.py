"""Stub-judge answers for DeepEval 4.3.1 prompts that the generic DeepEval responder misreads.

Registered ahead of the built-in responders (see the end of :mod:`ragbridge.testing.responders`).

DeepEval puts each judged text under a label line (``Expected Output:`` then the text on the next
lines). The shared section parser ends a section at instruction-like lines (``Return ...``,
``Respond ...``, ``Produce ...``, ``Example...``, ``IMPORTANT...``), so a text that itself *starts*
with such a word ("Return labels are valid for 30 days ...") was read as an empty section and judged as
nothing (no sentences, so no verdicts). This responder marks such a first line with an invisible
zero-width space, lets :class:`~ragbridge.testing.responders.DeepEvalResponder` answer, and removes the
mark from the answer again: the verdicts are the same lexical ones, over the whole text.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from ragbridge.testing.responders import DeepEvalResponder, JudgeReply, JudgeRequest, register

_MARK = "\u200b"
_LABEL = re.compile(
    r"^(input|actual output|expected output|retrieval context|context|statements|claims|text|"
    r"statement|answer|response|output|ai output)(?:\s*\([^)]*\))?\s*:\s*$", re.I)
_TEXT_LIKE_STOP = re.compile(r"^(Respond |Return |Produce |Example|IMPORTANT)")


def _mark_section_starts(text: str) -> Optional[str]:
    lines = text.split("\n")
    changed = False
    for i in range(1, len(lines)):
        if _LABEL.match(lines[i - 1].strip()) and _TEXT_LIKE_STOP.match(lines[i].strip()):
            lines[i] = _MARK + lines[i]
            changed = True
    return "\n".join(lines) if changed else None


class DeepEvalSectionResponder:
    name = "deepeval"

    def __init__(self) -> None:
        self._inner = DeepEvalResponder()

    def __call__(self, req: JudgeRequest) -> Optional[JudgeReply]:
        if not (req.user or req.prompt).rstrip().endswith("JSON:"):
            return None
        messages, changed = [], False
        for role, text in req.messages:
            marked = _mark_section_starts(text) if role == "user" else None
            changed = changed or marked is not None
            messages.append((role, marked if marked is not None else text))
        if not changed:
            return None  # nothing misread: the built-in responder answers as before
        reply = self._inner(dataclasses.replace(req, messages=messages))
        if reply is not None:
            reply.content = reply.content.replace(_MARK, "")
        return reply


register(DeepEvalSectionResponder(), first=True)
