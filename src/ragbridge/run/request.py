"""A run request: every parameter of one run, declared once, in one typed object passed down.

`RunRequest`'s fields are the run's parameters: their types, defaults, limits and help (and, for
those the command line has a flag of its own for, the flag: `ragbridge.options.option`).
`ragbridge.evaluate` and `ragbridge.evaluate_async` keep their keyword signatures (a notebook's call
reads as the command line does), which a test holds to these fields (names, order, defaults, each
documented); ``ragbridge run`` and ``ragbridge rescore`` build their flags for them from the fields
(`ragbridge.commands.model_options`); the pytest plugin's ``ragbridge_evaluate`` takes them as
keywords. `RunRequest.of` raises `RunError` for a value no run can take, named as the parameter
is (and, for the command line, as its flag is), before anything is read, called or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..backend import RunOptions
from ..formats.source import BATCH_SIZE
from ..limits import MAX_REPEATS, MAX_TARGET_CONCURRENCY
from ..options import Bool, Number, Whole, field_error, flag_of, option
from .plan import RunError

__all__ = ["RunRequest"]


class RunRequest(BaseModel):
    """One run's parameters, as `ragbridge.run.runner.evaluate_async` takes them (same names, same
    order, same defaults; each documented there)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    cases: Any
    backends: Optional[Sequence[str]] = option(
        None, "Backend to run (repeatable). Default: native. NAME==VERSION runs that version of its library "
              "in an environment of its own.", flag="--backend -b", cli_type=list[str])
    metrics: Optional[Sequence[str]] = option(
        None, "Metric to score (repeatable), e.g. recall@5, mrr, faithfulness. Default: all of each "
              "backend's.", flag="--metric -m", cli_type=list[str])
    out: Any = None
    options: Optional[RunOptions] = None
    judge: Any = None
    dataset_path: Optional[str] = None
    progress: Optional[bool] = None
    overwrite: Bool = option(False, "Replace the run folder instead of resuming it.", flag="--overwrite")
    on_score: Any = None
    target: Any = option(
        None, "Call the system under test for each case first: module:callable, module:object with "
              "retrieve/answer, or an http(s) URL.", flag="--target", cli_type=Optional[str])
    target_concurrency: Whole = option(
        4, "Target calls in flight at once.", flag="--target-concurrency", ge=1, le=MAX_TARGET_CONCURRENCY)
    batch_size: Whole = option(
        BATCH_SIZE, "Cases scored at a time (memory holds one batch).", flag="--batch-size", ge=1)
    repeats: Whole = option(
        1, "Take every judged score this many times, as distinct judge calls; a case's score is its mean "
           "over them.", flag="--repeats", ge=1, le=MAX_REPEATS)
    pass_repeats: Optional[Whole] = option(
        None, "A case passes when at least this many of its repeats pass (default: a majority).",
        flag="--pass-repeats", ge=1)
    max_calls: Optional[Whole] = option(
        None, "Judge budget: at most this many requests sent to the judge for the run (all its sessions, "
              "retries included); then stop cleanly, the rest not run.", flag="--max-calls", ge=0)
    max_cost: Optional[Number] = option(
        None, "Judge budget in money, by the judge config's price table (all the run's sessions).",
        flag="--max-cost", ge=0)
    dry_run: Bool = option(
        False, "Call and write nothing: print the judge calls and cost the run would make, counting what "
               "the cache and the run folder hold.", flag="--dry-run")
    executor: Any = None
    score_cache: Bool = option(
        True, "Reuse a judged score an earlier run made from the same inputs (beside the judge cache; off "
              "with it).", flag="--score-cache/--no-score-cache")
    corpus: Any = option(
        None, "The documents span labels point into: a folder of text or markdown files, or a JSONL of "
              "{doc, text}. Chunks and quotes without offsets are located by their text.", flag="--corpus",
        cli_type=Optional[Path])
    changed_cases: Literal["rescore", "refuse"] = "rescore"

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, value: Any) -> Any:
        """A mapping of the backends' options stands for ``RunOptions(backend_options=...)``."""
        if isinstance(value, Mapping):
            return RunOptions(backend_options=dict(value))
        return value

    @classmethod
    def of(cls, **parameters: Any) -> "RunRequest":
        """The request of ``parameters`` (`ragbridge.evaluate`'s), checked: `RunError` naming the
        parameter (and the command line's flag) for a value no run can take."""
        try:
            request = cls.model_validate(parameters)
        except ValidationError as exc:
            def flag(key: str) -> str:
                info = cls.model_fields.get(key)
                return (flag_of(info) if info is not None else None) or key

            raise RunError(field_error(cls, exc, str, parameters),
                           cli=field_error(cls, exc, flag, parameters)) from None
        request.check()
        return request

    @property
    def run_options(self) -> RunOptions:
        """``options``, or the defaults."""
        return self.options or RunOptions()

    @property
    def budget(self) -> bool:
        """Whether the run has a judge budget (``max_calls`` or ``max_cost``)."""
        return self.max_calls is not None or self.max_cost is not None

    def check(self) -> None:
        """Raise `RunError` for what the fields allow one by one but not together."""
        if self.pass_repeats is not None and self.pass_repeats > self.repeats:
            raise RunError(f"pass_repeats must be a whole number from 1 to repeats ({self.repeats}), "
                           f"got {self.pass_repeats!r}",
                           cli=f"--pass-repeats must be a whole number from 1 to --repeats ({self.repeats}), "
                               f"got {self.pass_repeats!r}")
        if self.max_cost is not None and self.judge is not None and not getattr(self.judge, "prices", None):
            raise RunError("max_cost needs the judge's price table, or no call's cost is known: "
                           "JudgeConfig(prices={MODEL: {'input': ..., 'output': ...}}) (per million tokens)",
                           cli="--max-cost needs the judge's price table, or no call's cost is known: set "
                           "[judge.prices.\"MODEL\"] input and output (per million tokens) in ragbridge.toml")
        if self.dry_run and self.target is not None:
            raise RunError("a dry run cannot call the system under test: run without target (or rescore "
                           "the target run's folder) to count its judge calls",
                           cli="a dry run cannot call the system under test: run without --target (or "
                               "rescore the target run's folder) to count its judge calls")

    @classmethod
    def names(cls) -> list[str]:
        """The fields, in order: the parameters of ``evaluate`` and ``evaluate_async``."""
        return list(cls.model_fields)
