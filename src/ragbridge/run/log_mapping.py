"""The mapping of a JSON lines log onto the schema, and the paths it is written in.

A mapping is a small TOML file (``ragbridge sample --mapping``): ``[fields]`` maps the schema's
fields (`FIELD_KEYS`) and ``[chunk]`` the parts of each chunk (`CHUNK_KEYS`) to paths into a log
record. A path is keys joined by dots; a key that itself holds dots is found as it is
(``attributes.input.value`` reaches ``{"attributes": {"input.value": ...}}`` and
``{"attributes.input.value": ...}``); ``[N]`` or ``.N`` picks a list item by position (the digits
0-9 only) and ``[field=value]`` the first item whose ``field`` equals ``value``
(``observations[type=RETRIEVER].output``). `ragbridge.run.sample` reads logs with it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Optional

from ..formats.files import DatasetError

__all__ = ["FIELD_KEYS", "CHUNK_KEYS", "load_mapping", "resolve", "walk"]

FIELD_KEYS = ("id", "question", "answer", "contexts", "timestamp", "tags")
CHUNK_KEYS = ("id", "text", "score", "source")


def load_mapping(path: Optional[Path]) -> dict[str, dict[str, str]]:
    """Read a mapping TOML file; raises `DatasetError` naming the file and key when it is wrong."""
    if path is None:
        return {"fields": {}, "chunk": {}}
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError("mapping file not found", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise DatasetError(f"not valid TOML: {exc}", path=path) from None
    unknown = set(data) - {"fields", "chunk"}
    if unknown:
        raise DatasetError(f"unknown table(s) {sorted(unknown)}; expected [fields] and [chunk]", path=path)
    out = {"fields": data.get("fields", {}), "chunk": data.get("chunk", {})}
    for table, keys in (("fields", FIELD_KEYS), ("chunk", CHUNK_KEYS)):
        for key, value in out[table].items():
            if key not in keys:
                raise DatasetError(f"unknown key {key!r} in [{table}]; known: {', '.join(keys)}", path=path)
            if not isinstance(value, str) or not value:
                raise DatasetError(f"[{table}] {key} must be a path string", path=path)
            try:
                _steps(value)
            except ValueError as exc:
                raise DatasetError(f"[{table}] {key}: {exc}", path=path) from None
    return out


_SELECT = re.compile(r"\[([^\]=]*)(?:=([^\]]*))?\]")


def _steps(path: str) -> list[Any]:
    """A path as steps: key parts (str), positions (int) and selections ((field, value))."""
    steps: list[Any] = []
    for part in path.split("."):
        head = part.split("[", 1)[0]
        if head:
            steps.append(int(head) if _position(head) else head)
        rest = part[len(head):]
        while rest:
            m = _SELECT.match(rest)
            if not m:
                raise ValueError(f"cannot read {part!r} (use [N] or [field=value])")
            key, value = m.group(1).strip(), m.group(2)
            if value is None:
                if not _position(key):
                    raise ValueError(f"[{key}] is neither a position (in the digits 0-9) nor field=value")
                steps.append(int(key))
            else:
                steps.append((key, value.strip()))
            rest = rest[m.end():]
    return steps


def _position(text: str) -> bool:
    """Whether a path part is a list position: digits 0-9 only (``int`` would also read other scripts'
    digits, and ``[١]`` is not the position 1 the user meant)."""
    return text.isascii() and text.isdigit()


def resolve(record: Any, path: str) -> Any:
    """The value at ``path`` in ``record`` (see the module docstring), or None."""
    return walk(record, _steps(path))


def walk(cur: Any, steps: list[Any]) -> Any:
    if not steps:
        return cur
    step = steps[0]
    if isinstance(step, tuple):
        if not isinstance(cur, list):
            return None
        key, value = step
        for item in cur:
            got = walk(item, [key]) if isinstance(item, dict) else None
            if got is not None and str(got) == value:
                return walk(item, steps[1:])
        return None
    if isinstance(cur, list):
        if isinstance(step, int) and step < len(cur):
            return walk(cur[step], steps[1:])
        return None
    if not isinstance(cur, dict):
        return None
    # the longest run of parts that is one key, so keys holding dots are found as they are
    for j in range(len(steps), 0, -1):
        if any(isinstance(s, tuple) for s in steps[:j]):
            continue
        key = ".".join(str(s) for s in steps[:j])
        if key in cur:
            found = walk(cur[key], steps[j:])
            if found is not None:
                return found
    return None
