"""Errors a user can fix, and how they are shown.

`UserError` is the base of ragbridge's errors of input and configuration (`ragbridge.RunError`,
`ragbridge.DatasetError`, the judge's `ragbridge.judge.JudgeError`, ...). Its message says what is
wrong and what to do, in Python's terms (``overwrite=True``, ``judge=JudgeConfig(model=...)``);
where the command line names the same thing otherwise (``--overwrite``, ``--judge-model``), the error
also carries the command line's text (``cli``), which the commands print (`cli_text`).

In IPython and Jupyter such an error is shown as its one line (``RunError: ...``), not as a
traceback through ragbridge's internals and the event loop (IPython's ``_render_traceback_`` hook;
``%debug`` still has the frames); everywhere else it is an ordinary exception with its traceback.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["UserError", "PluginError", "cli_text"]


class UserError(Exception):
    """An error of input or configuration: the message says what to do (see the module docstring).

    ``cli``: the same message in the command line's terms, when they differ."""

    def __init__(self, *args: Any, cli: Optional[str] = None) -> None:
        super().__init__(*args)
        self.cli = cli

    def _render_traceback_(self) -> list[str]:
        """How IPython shows this error: its one line, the name in red."""
        return [f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}"]


class PluginError(UserError, ValueError):
    """A plugin that cannot be used as it is: its module fails to import, a metric or an options
    model it registers breaks a rule. The message names the plugin and what its author is to fix;
    ``ragbridge backends`` shows the same line. ``plugin``: the plugin's name."""

    def __init__(self, *args: Any, plugin: Optional[str] = None, cli: Optional[str] = None) -> None:
        super().__init__(*args, cli=cli)
        self.plugin = plugin


def cli_text(exc: BaseException) -> str:
    """What the command line prints for ``exc``: its ``cli`` text where it has one, else its message."""
    return getattr(exc, "cli", None) or str(exc)
