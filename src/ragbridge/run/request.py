"""A run request: every parameter of one run, in one typed object built once and passed down.

`ragbridge.evaluate` and `ragbridge.evaluate_async` keep their keyword signatures (a notebook's
call reads as the command line does) and build a `RunRequest` of them; the runner and its steps
read the request, so a new parameter is a field here and a keyword there, nothing in between.
`RunRequest.check` raises `RunError` for values no run can take, before anything is read, called
or written. The fields are documented on `ragbridge.run.runner.evaluate_async`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..backend import RunOptions
from ..formats.source import BATCH_SIZE
from ..limits import MAX_REPEATS, MAX_TARGET_CONCURRENCY
from ..schema import Score
from .plan import RunError

__all__ = ["RunRequest"]


@dataclass(frozen=True)
class RunRequest:
    """One run's parameters, as `ragbridge.run.runner.evaluate_async` takes them (same names, same
    defaults: a test holds the two together)."""

    cases: Any
    backends: Optional[Sequence[str]] = None
    metrics: Optional[Sequence[str]] = None
    out: Optional[str | Path] = None
    options: Optional[RunOptions] = None
    judge: Any = None
    dataset_path: Optional[str] = None
    progress: Optional[bool] = None
    overwrite: bool = False
    on_score: Optional[Callable[[Score], None]] = None
    target: Any = None
    target_concurrency: int = 4
    batch_size: int = BATCH_SIZE
    repeats: int = 1
    pass_repeats: Optional[int] = None
    max_calls: Optional[int] = None
    max_cost: Optional[float] = None
    dry_run: bool = False
    executor: Any = None
    score_cache: bool = True
    corpus: Any = None
    changed_cases: str = "rescore"

    @property
    def run_options(self) -> RunOptions:
        """``options``, or the defaults."""
        return self.options or RunOptions()

    @property
    def budget(self) -> bool:
        """Whether the run has a judge budget (``max_calls`` or ``max_cost``)."""
        return self.max_calls is not None or self.max_cost is not None

    def check(self) -> None:
        """Raise `RunError` for a value no run can take (named as the parameter is, and for the
        command line as its option is)."""
        def whole(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def bad(text: str) -> RunError:  # "{repeats}" is the parameter's name, or the option's
            return RunError(re.sub(r"\{(\w+)\}", r"\1", text),
                            cli=re.sub(r"\{(\w+)\}", lambda m: "--" + m[1].replace("_", "-"), text))

        repeats, pass_repeats = self.repeats, self.pass_repeats
        max_calls, max_cost = self.max_calls, self.max_cost
        if not whole(repeats) or not 1 <= repeats <= MAX_REPEATS:
            raise bad(f"{{repeats}} must be a whole number from 1 to {MAX_REPEATS} (each repeat is a "
                      f"judge call per case and judged metric), got {repeats!r}")
        if not whole(self.target_concurrency) or not 1 <= self.target_concurrency <= MAX_TARGET_CONCURRENCY:
            raise bad(f"{{target_concurrency}} must be a whole number from 1 to {MAX_TARGET_CONCURRENCY}, "
                      f"got {self.target_concurrency!r}")
        if pass_repeats is not None and (not whole(pass_repeats) or not 1 <= pass_repeats <= repeats):
            raise bad(f"{{pass_repeats}} must be an integer from 1 to {{repeats}} ({repeats}), "
                      f"got {pass_repeats!r}")
        if max_calls is not None and (not whole(max_calls) or max_calls < 0):
            raise bad(f"{{max_calls}} must be a non-negative integer, got {max_calls!r}")
        if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float))
                                     or not max_cost >= 0):
            raise bad(f"{{max_cost}} must be a non-negative number, got {max_cost!r}")
        if max_cost is not None and self.judge is not None and not getattr(self.judge, "prices", None):
            raise RunError("max_cost needs the judge's price table, or no call's cost is known: "
                           "JudgeConfig(prices={MODEL: {'input': ..., 'output': ...}}) (per million tokens)",
                           cli="--max-cost needs the judge's price table, or no call's cost is known: set "
                           "[judge.prices.\"MODEL\"] input and output (per million tokens) in ragbridge.toml")
        problem = self.run_options.problem()
        if problem:
            raise RunError(problem)
        if self.changed_cases not in ("rescore", "refuse"):
            raise RunError(f"changed_cases must be 'rescore' or 'refuse', got {self.changed_cases!r}")
        if self.dry_run and self.target is not None:
            raise RunError("a dry run cannot call the system under test: run without target (or rescore "
                           "the target run's folder) to count its judge calls",
                           cli="a dry run cannot call the system under test: run without --target (or "
                               "rescore the target run's folder) to count its judge calls")

    @classmethod
    def names(cls) -> list[str]:
        """The fields, in order: the parameters of ``evaluate`` and ``evaluate_async``."""
        return [f.name for f in fields(cls)]
