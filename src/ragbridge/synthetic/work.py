"""The work folder of a generation: what lets it resume after a crash, and keeps what it cost.

For ``--out runs/synth.jsonl`` the folder is ``runs/synth.work/``, holding

* ``plan.json``: what is being generated (the generator, the corpus's fingerprint, ``n``, the mix,
  the seed, the judge's model and endpoint), written once, whole (temporary file, then rename);
* ``items.jsonl``: one line per question settled, appended as it settles (``slot``, ``kind``,
  ``status`` ``made`` or ``dropped``, ``reason``, and the canonical ``case`` when made), each line
  one write on a file opened for appending, so a process killed even with SIGKILL leaves whole lines
  (a last line cut short is ignored and its question made again);
* ``judge-calls.log`` and ``judge-audit.jsonl``: the gateway's tally (what the budget counts over
  every session) and audit log, as in a run folder.

Running the same command again reads ``items.jsonl`` and generates only the slots it does not hold:
nothing is made twice. A folder made for other settings is refused (`WorkError`, naming what
differs): pass ``--overwrite`` to start again. The output file itself is written only when every
slot is settled, in one piece.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

from ..formats.files import write_atomic

__all__ = ["WorkFolder", "WorkError", "work_folder_for", "corpus_fingerprint"]


class WorkError(ValueError):
    """The work folder cannot be used for this generation (says why and what to do)."""


def work_folder_for(out: Path) -> Path:
    """``runs/synth.jsonl`` -> ``runs/synth.work``."""
    return Path(out).with_suffix(".work")


def corpus_fingerprint(texts: dict[str, str]) -> str:
    """SHA-256 over the documents' names and texts, in name order."""
    h = hashlib.sha256()
    for doc in sorted(texts):
        for part in (doc, texts[doc]):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


#: the plan's keys that must match for a folder to be resumed
IDENTITY = ("generator", "corpus_fingerprint", "n", "mix", "seed", "judge")


class WorkFolder:
    """``plan.json`` and ``items.jsonl`` of one generation (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: Optional[int] = None

    @property
    def plan_path(self) -> Path:
        return self.path / "plan.json"

    @property
    def items_path(self) -> Path:
        return self.path / "items.jsonl"

    @property
    def tally_path(self) -> Path:
        return self.path / "judge-calls.log"

    @property
    def audit_path(self) -> Path:
        return self.path / "judge-audit.jsonl"

    def prepare(self, plan: dict[str, Any], overwrite: bool) -> dict[str, dict[str, Any]]:
        """Make the folder (or check and resume it) and return the items it holds, by slot."""
        if overwrite and self.path.exists():
            shutil.rmtree(self.path)
        if self.plan_path.exists():
            self._check(plan)
            return self.items()
        if self.path.exists() and any(self.path.iterdir()):
            raise WorkError(f"{self.path} exists and is not a generation's work folder: remove it or choose "
                            "another --out")
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.plan_path, json.dumps(plan, indent=2, ensure_ascii=False) + "\n")
        return {}

    def peek(self, plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The items a folder of the same settings holds, without writing anything (a dry run): none
        for a folder that does not exist; `WorkError` for one of other settings."""
        if not self.plan_path.exists():
            return {}
        self._check(plan)
        return self.items()

    def _check(self, plan: dict[str, Any]) -> None:
        try:
            earlier = json.loads(self.plan_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise WorkError(f"{self.plan_path} cannot be read ({exc}): pass --overwrite to start again")
        differ = [k for k in IDENTITY if earlier.get(k) != plan.get(k)]
        if differ:
            k = differ[0]
            raise WorkError(
                f"{self.path} holds a generation with other settings ({k}: {_show(earlier.get(k))}, now "
                f"{_show(plan.get(k))}): pass --overwrite to start again, or choose another --out")

    def items(self) -> dict[str, dict[str, Any]]:
        """The settled items by slot (a line cut short by a kill is skipped)."""
        out: dict[str, dict[str, Any]] = {}
        try:
            data = self.items_path.read_bytes()
        except FileNotFoundError:
            return out
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("slot"), str):
                out[item["slot"]] = item
        return out

    def append(self, item: dict[str, Any]) -> None:
        """Record one settled item (one write on an appending file: whole even across SIGKILL)."""
        if self._fd is None:
            self._fd = os.open(self.items_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            if size and os.pread(self._fd, 1, size - 1) != b"\n":
                os.write(self._fd, b"\n")  # end the line a kill cut short: it is skipped, not joined
        os.write(self._fd, json.dumps(item, ensure_ascii=False).encode("utf-8") + b"\n")

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."
