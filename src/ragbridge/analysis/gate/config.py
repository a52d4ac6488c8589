"""A gates file read: TOML -> `GateConfig` (its rules, `Rule`), or `GateConfigError` naming the file,
the rule and what to write instead. The left-hand sides a check may have are the rule kinds of
`ragbridge.analysis.gate.kinds`."""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ...schema import clean_tags
from ..diff import RegressionError
from ..stats import DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from ..thresholds import Thresholds
from .kinds import KINDS, grammar

__all__ = ["GateConfigError", "Rule", "GateConfig", "parse_gates", "load_gates", "where"]

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_CHECK = re.compile(rf"^\s*(?P<lhs>.+?)\s*(?P<op>>=|<=|>|<)\s*(?P<value>{_NUM})\s*$")
_RULE_KEYS = {"check", "name", "backend", "tags", "tag", "min_n", "below_min_n", "significant", "alpha",
              "confidence", "min_repeats", "last"}
_DEFAULT_KEYS = (_RULE_KEYS - {"check", "name", "tag"}) | {"seed", "resamples", "permutations"}


class GateConfigError(RegressionError):
    """A gates file that cannot be used: unreadable, malformed, or naming what the run does not have."""


@dataclass
class Rule:
    """One parsed rule of a gates file. ``kind`` names its `ragbridge.analysis.gate.kinds.RuleKind`."""

    index: int
    check: str
    kind: str
    metric: Optional[str]
    op: str
    threshold: float
    cut_op: Optional[str] = None
    cut: Optional[float] = None
    name: Optional[str] = None
    backends: Optional[list[str]] = None
    backends_from_defaults: bool = False  # the rule's backends are [defaults]' (it names none)
    tags: list[str] = field(default_factory=list)
    min_n: int = 1
    below_min_n: str = "fail"
    significant: bool = False
    alpha: float = 0.05
    confidence: float = 0.95
    min_repeats: int = 1
    last: int = 0  # slope rules: the last N runs (0: every run)
    layer: Optional[str] = None  # diagnosed rules: the layer counted

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return self.check + (f" [{' & '.join(self.tags)}]" if self.tags else "")


@dataclass
class GateConfig:
    rules: list[Rule]
    seed: int = 0
    resamples: int = DEFAULT_RESAMPLES
    permutations: int = DEFAULT_PERMUTATIONS
    source: Optional[str] = None

    def pass_marks(self) -> Thresholds:
        """Per-case pass marks of these rules.

        A ``share(METRIC >= CUT)`` rule gives ``CUT``; a ``METRIC >= VALUE`` (mean) rule gives
        ``VALUE``: a case below the bar the mean must clear is one pulling it down. A rule with a
        ``backend`` sets the mark for those backends only. When several rules name a metric, a rule
        over all cases beats one limited to ``tags``, a share rule beats a mean rule, then the first in
        the file wins. Other rules set no mark."""
        marks = []
        for rule in self.rules:
            if rule.kind == "share" and rule.cut_op in (">=", ">"):
                marks.append(((bool(rule.tags), 0, rule.index), rule, rule.cut))
            elif rule.kind == "mean" and rule.op in (">=", ">"):
                marks.append(((bool(rule.tags), 1, rule.index), rule, rule.threshold))
        out = Thresholds()
        for _, rule, value in sorted(marks, key=lambda m: m[0]):
            for b in rule.backends or [None]:
                if b is None:
                    out.by_metric.setdefault(rule.metric, value)
                else:
                    out.by_pair.setdefault((b, rule.metric), value)
        return out


def where(source: Optional[str], index: Optional[int]) -> str:
    """``FILE: gate #N``: where a rule is, for a message."""
    src = source or "gates"
    return f"{src}: gate #{index}" if index else src


def _parse_check(check: str, at: str) -> dict[str, Any]:
    m = _CHECK.match(check)
    if not m:
        raise GateConfigError(f"{at}: cannot read check {check!r}: {grammar()}")
    lhs = re.sub(r"\s+", " ", m.group("lhs").strip())
    for kind in KINDS.values():
        lm = kind.pattern.match(lhs)
        if lm:
            break
    else:
        raise GateConfigError(f"{at}: cannot read {lhs!r} in check {check!r}: {grammar()}")
    bare = KINDS.get(lhs)
    if kind.name == "mean" and bare is not None and bare.name != "mean":  # e.g. undefined_rate alone
        raise GateConfigError(f"{at}: {lhs!r} in check {check!r} needs what it counts, as in "
                              f"{bare.syntax!r}")
    out: dict[str, Any] = {"kind": kind.name, "metric": lm.groupdict().get("metric"), "op": m.group("op"),
                           "threshold": float(m.group("value"))}
    if lm.groupdict().get("cut") is not None:
        out["cut_op"], out["cut"] = lm.group("cop"), float(lm.group("cut"))
    if lm.groupdict().get("layer") is not None:
        out["layer"] = lm.group("layer")
    problem = kind.check_args(lm.groupdict()) if kind.check_args is not None else None
    if problem:
        raise GateConfigError(f"{at}: {problem}")
    problem = kind.check_bound(out["op"], out["threshold"], out["metric"], m.group("value"))
    if problem:
        raise GateConfigError(f"{at}: {problem}")
    return out


def _check_value(key: str, value: Any, at: str) -> Any:
    def bad(expected: str) -> GateConfigError:
        return GateConfigError(f"{at}: {key} must be {expected}, got {value!r}")

    if key in ("check", "name"):
        if not isinstance(value, str) or not value.strip():
            raise bad("a non-empty string")
        return value.strip()
    if key == "backend":
        vals = [value] if isinstance(value, str) else value
        if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v for v in vals):
            raise bad("a backend name or a list of backend names")
        return list(vals)
    if key in ("tags", "tag"):
        vals = [value] if isinstance(value, str) else value
        if not isinstance(vals, list) or not all(isinstance(v, str) and v for v in vals):
            raise bad("a list of tag names")
        try:
            return clean_tags(vals)  # as a case's tags are, so that each names the cases' tag
        except ValueError as exc:
            raise GateConfigError(f"{at}: {key}: {exc}") from None
    if key == "last":
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise bad("an integer of at least 2 (a slope needs two runs)")
        return value
    if key == "min_repeats":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad("a positive integer")
        return value
    if key in ("min_n", "seed", "resamples", "permutations"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad("a non-negative integer")
        if key in ("resamples", "permutations") and value < 100:
            raise bad("at least 100")
        return value
    if key == "below_min_n":
        if value not in ("fail", "skip"):
            raise bad("'fail' or 'skip'")
        return value
    if key == "significant":
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key in ("alpha", "confidence"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise bad("a number between 0 and 1 (exclusive)")
        return float(value)
    raise AssertionError(key)  # pragma: no cover


def parse_gates(data: dict[str, Any], source: Optional[str] = None) -> GateConfig:
    """Build a `GateConfig` from the parsed TOML (a dict). Raises `GateConfigError` when malformed."""
    src = source or "gates"
    if not isinstance(data, dict):
        raise GateConfigError(f"{src}: expected a table of [defaults] and [[gate]] rules")
    unknown = sorted(set(data) - {"defaults", "gate"})
    if unknown:
        raise GateConfigError(
            f"{src}: unknown top-level key(s) {', '.join(map(repr, unknown))}; "
            "a gates file holds an optional [defaults] table and [[gate]] rules"
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise GateConfigError(f"{src}: [defaults] must be a table")
    bad = sorted(set(defaults) - _DEFAULT_KEYS)
    if bad:
        raise GateConfigError(
            f"{src}: unknown key(s) {', '.join(map(repr, bad))} in [defaults]; "
            f"known: {', '.join(sorted(_DEFAULT_KEYS))}"
        )
    defaults = {k: _check_value(k, v, f"{src}: [defaults]") for k, v in defaults.items()}
    rules_data = data.get("gate")
    if rules_data is None or rules_data == []:
        raise GateConfigError(
            f"{src}: no rules: add at least one [[gate]] table with a check, e.g. "
            "check = \"recall@5 >= 0.85\""
        )
    if not isinstance(rules_data, list) or not all(isinstance(r, dict) for r in rules_data):
        raise GateConfigError(f"{src}: rules must be [[gate]] tables (an array of tables)")
    rules = []
    for i, raw in enumerate(rules_data, start=1):
        at = where(source, i)
        bad = sorted(set(raw) - _RULE_KEYS)
        if bad:
            hint = difflib.get_close_matches(bad[0], sorted(_RULE_KEYS), n=1)
            raise GateConfigError(
                f"{at}: unknown key(s) {', '.join(map(repr, bad))}"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; known: {', '.join(sorted(_RULE_KEYS))}"
            )
        if "check" not in raw:
            raise GateConfigError(f"{at}: missing 'check' ({grammar()})")
        if "tag" in raw and "tags" in raw:
            raise GateConfigError(f"{at}: give either 'tag' or 'tags', not both")
        merged = {k: v for k, v in defaults.items() if k not in ("seed", "resamples", "permutations")}
        merged.update({k: _check_value(k, v, at) for k, v in raw.items()})
        if "tag" in merged:
            merged["tags"] = merged.pop("tag")
        parsed = _parse_check(merged.pop("check"), at)
        backends = merged.pop("backend", None)
        rules.append(Rule(index=i, check=raw["check"].strip(), backends=backends,
                          backends_from_defaults=backends is not None and "backend" not in raw,
                          **parsed, **merged))
    return GateConfig(
        rules=rules,
        seed=defaults.get("seed", 0),
        resamples=defaults.get("resamples", DEFAULT_RESAMPLES),
        permutations=defaults.get("permutations", DEFAULT_PERMUTATIONS),
        source=source,
    )


def load_gates(path: str | Path) -> GateConfig:
    """Read a gates TOML file. Raises `GateConfigError` (file, line and what is wrong) for bad input."""
    path = Path(path)
    if not path.is_file():
        raise GateConfigError(f"gates file {path} not found")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise GateConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise GateConfigError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    return parse_gates(data, source=str(path))
