"""Where ragbridge's configuration is read from, once for every part that has a section there.

A section (``[judge]``, ``[backends]``) is read from ``pyproject.toml``'s ``[tool.ragbridge]`` in the
working folder, then from ``ragbridge.toml`` there (or the ``config_file`` given, which must exist);
a later file's values go over an earlier one's.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Optional

from .errors import UserError

__all__ = ["config_sections", "read_toml"]


def read_toml(path: Path, error: type[UserError] = UserError) -> dict:
    """The TOML file at ``path``; ``error`` naming the file when it cannot be read or is not TOML."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None


def config_sections(section: str, config_file: Optional[Path] = None, cwd: Optional[Path] = None,
                    error: type[UserError] = UserError) -> list[tuple[Path, str, Any]]:
    """The ``section`` of each configuration file that has one, lowest first, as (the file, the
    section's name as the file spells it, its value); ``error`` for a ``config_file`` that does not
    exist or a file that is not TOML."""
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    out: list[tuple[Path, str, Any]] = []
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        tool = read_toml(pyproject, error).get("tool")
        ours = tool.get("ragbridge") if isinstance(tool, dict) else None
        if isinstance(ours, dict) and section in ours:
            out.append((pyproject, f"[tool.ragbridge.{section}]", ours[section]))
    rb = Path(config_file) if config_file is not None else cwd / "ragbridge.toml"
    rb = rb if rb.is_absolute() else cwd / rb
    if config_file is not None and not rb.is_file():
        raise error(f"{rb}: config file not found")
    if rb.is_file():
        data = read_toml(rb, error)
        if section in data:
            out.append((rb, f"[{section}]", data[section]))
    return out
