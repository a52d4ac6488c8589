"""What the judge calls cost: :class:`Usage` per call tag, the run's :class:`Budget`, the prices,
and the usage an answer reports, checked (:func:`reported_usage`).

:class:`Ledger` is the gateway's book: every answered request is entered under its
:class:`~ragbridge.judge.tag.CallTag` (:meth:`Ledger.enter`); a call that would go upstream first
reserves its place in the budget (:meth:`Ledger.reserve`), each retry takes a place of its own
(:meth:`Ledger.resending`: the budget counts every request sent upstream, since each may be charged),
and the call settles its cost when it is done (:meth:`Ledger.settle`). With a tally file
(:meth:`Ledger.open_tally`, the run folder's ``judge-calls.log``), each attempt is written there as it
goes upstream, before its first byte is sent (:meth:`Ledger.sending`; and its cost once known), so a
run killed with SIGKILL still knows every request it made: the next session starts from the tally,
and the budget holds over all sessions.

An answer's ``usage`` is a claim of the server's. Token counts that cannot be true (negative, not an
integer, more than :data:`ABSURD_TOKENS`, or prompt tokens far beyond the request's size) are not
counted: the call counts as made, its tokens as unknown (``invalid_usage``), and its cost as
unknown, so a money budget (``max_cost``) stops the run rather than trust it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional

from .config import JudgeConfig
from .tag import CallTag

__all__ = ["Usage", "Budget", "Ledger", "reported_usage", "ABSURD_TOKENS"]

#: more tokens than any model's context holds: a count above it is not believed
ABSURD_TOKENS = 10_000_000


@dataclass(frozen=True)
class Usage:
    """Judge traffic summed over some call tags.

    ``calls`` are library requests that went upstream (one per library request, however many
    attempts); ``cache_hits`` were answered from the cache; ``retries`` are extra attempts (each a
    request sent upstream too: ``calls + retries`` is what the budget counts); ``errors`` are
    requests whose final answer to the library was not 2xx (read-only cache misses included, budget
    refusals not); ``cost`` is what the calls cost by the price table, ``unpriced`` the calls whose
    cost is unknown (a model the table has no price for, or usage that cannot be true; see
    `known_cost`; with no table at all nothing is counted here); ``refused`` the requests refused
    because the run's budget was spent; ``invalid_usage`` the calls whose reported token counts were
    impossible (not counted in the tokens)."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    errors: int = 0
    cost: float = 0.0
    unpriced: int = 0
    refused: int = 0
    invalid_usage: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def known_cost(self) -> Optional[float]:
        """``cost``, or None when a call's cost is unknown (0.0 when no call went upstream)."""
        return None if self.unpriced else self.cost


@dataclass
class Budget:
    """A run's judge budget: at most ``max_calls`` requests sent upstream (every attempt, retries
    included) and ``max_cost`` money (None: no limit), ``calls`` and ``cost`` being what the run spent
    so far (earlier sessions included).

    A call is reserved before it goes upstream; with ``max_cost``, a new call is refused once the cost
    spent plus the calls in flight (each at the mean cost of a call so far) reaches the limit, or once
    a call's cost could not be known; so a run overshoots by at most the calls that were in flight
    when it ran out."""

    max_calls: Optional[int] = None
    max_cost: Optional[float] = None
    calls: int = 0
    cost: float = 0.0
    in_flight: int = 0
    settled: int = 0
    spent: bool = False
    cost_unknown: bool = False

    def describe(self) -> str:
        parts = []
        if self.max_calls is not None:
            parts.append(f"max_calls {self.max_calls}")
        if self.max_cost is not None:
            parts.append(f"max_cost {self.max_cost:g}"
                         + (", and a call's cost could not be known" if self.cost_unknown else ""))
        return ", ".join(parts)

    def exhausted(self) -> bool:
        if self.max_calls is not None and self.calls >= self.max_calls:
            return True
        if self.max_cost is None:
            return False
        if self.cost_unknown:
            return True
        mean = self.cost / self.settled if self.settled else 0.0
        return self.cost + self.in_flight * mean >= self.max_cost


def reported_usage(parsed: Any, request_bytes: int) -> Optional[tuple[int, int]]:
    """(prompt, completion) tokens an answer reports (0, 0 when it reports none), or None when what it
    reports cannot be true: a count that is negative, not an integer, above `ABSURD_TOKENS`, or prompt
    tokens beyond twice the request's bytes plus 4,096 (a tokenizer makes at most about one token per
    byte; the margin covers a server's own template)."""
    if not isinstance(parsed, dict):
        return 0, 0
    u = parsed.get("usage")
    if u is None:
        return 0, 0
    if not isinstance(u, dict):
        return None
    counts = []
    for names in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        value: Any = 0
        for name in names:
            if name in u and u[name] is not None:
                value = u[name]
                break
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if isinstance(value, float) and not value.is_integer():
            return None
        if not 0 <= value <= ABSURD_TOKENS:
            return None
        counts.append(int(value))
    if counts[0] > 2 * request_bytes + 4096:
        return None
    return counts[0], counts[1]


class Ledger:
    """Usage per call tag, the budget and the prices of one gateway (thread-safe)."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.budget: Optional[Budget] = None
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified when no reserved call is in flight
        self._usage: dict[CallTag, dict[str, Any]] = {}
        self._refused: set[CallTag] = set()
        self._failures: dict[CallTag, tuple[str, str]] = {}  # the first failed request's (cause, words)
        self._tally: Optional[int] = None  # the tally file's descriptor

    # -- the budget -------------------------------------------------------------------------------
    def open_tally(self, path: Path, sent: int = 0) -> tuple[int, float]:
        """Write every call to ``path`` from now on, before it goes upstream; returns the (calls,
        cost) it holds from earlier sessions (calls a killed session made after its last report
        included), and ``sent`` more: requests this session sent already (the check of the judge's
        model, `ragbridge.judge.ledger.Probes`), written first."""
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._tally = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        for _ in range(sent):
            self._write_tally(b"c\n")
        return read_tally(path)

    def set_budget(self, max_calls: Optional[int] = None, max_cost: Optional[float] = None,
                   spent_calls: int = 0, spent_cost: float = 0.0) -> Budget:
        """Limit the upstream calls from now on; ``spent_*``: what the run spent before."""
        self.budget = Budget(max_calls=max_calls, max_cost=max_cost, calls=spent_calls, cost=spent_cost)
        return self.budget

    def reserve(self, tag: CallTag) -> bool:
        """Reserve one upstream call for ``tag``; False (and the tag marked refused) when the budget
        is spent."""
        b = self.budget
        if b is None:
            return True
        with self._lock:
            if b.exhausted():
                b.spent = True
                self._refused.add(tag)
                return False
            b.calls += 1
            b.in_flight += 1
        return True

    def sending(self, tag: CallTag) -> bool:
        """A reserved call is about to go upstream (its first attempt): written to the tally now, and
        True. False (the reservation given back, ``tag`` refused) when, while it waited for a free
        slot, the money budget ran out or a call's cost could not be known: a run overshoots by the
        calls in flight, never by the calls queued behind them."""
        b = self.budget
        if b is not None and b.max_cost is not None:
            with self._lock:
                if b.cost_unknown or b.cost >= b.max_cost:
                    b.spent = True
                    b.calls -= 1
                    b.in_flight -= 1
                    self._refused.add(tag)
                    if not b.in_flight:
                        self._settled.notify_all()
                    return False
        self._write_tally(b"c\n")
        return True

    def resending(self, tag: CallTag) -> bool:
        """A reserved call is about to send another attempt (a retry): counted in the budget and
        written to the tally, and True; False (``tag`` refused, the call ends here) when the budget
        has no room left for it. Every attempt is a request the upstream may charge for."""
        b = self.budget
        if b is not None:
            with self._lock:
                if ((b.max_calls is not None and b.calls >= b.max_calls)
                        or (b.max_cost is not None and (b.cost_unknown or b.cost >= b.max_cost))):
                    b.spent = True
                    self._refused.add(tag)
                    return False
                b.calls += 1
        self._write_tally(b"c\n")
        return True

    def settle(self, cost: Optional[float]) -> None:
        """The reserved call is done, at ``cost`` (None: unknown)."""
        if cost:
            self._write_tally(f"${cost!r}\n".encode())
        b = self.budget
        if b is None:
            return
        with self._lock:
            b.in_flight -= 1
            b.settled += 1
            if cost is None:
                b.cost_unknown = True
            else:
                b.cost += cost
            if not b.in_flight:
                self._settled.notify_all()

    def wait_settled(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until no reserved call is in flight: the calls a library
        left running when it stopped are answered (and cached) rather than cut. False on timeout."""
        with self._settled:
            return self._settled.wait_for(lambda: self.budget is None or self.budget.in_flight <= 0, timeout)

    def _write_tally(self, record: bytes) -> None:
        if self._tally is not None:
            os.write(self._tally, record)  # one write on an O_APPEND file: whole even across SIGKILL

    def refused(self, tag: CallTag) -> bool:
        with self._lock:
            return tag in self._refused

    def close(self) -> None:
        fd, self._tally = self._tally, None
        if fd is not None:
            os.close(fd)

    # -- usage --------------------------------------------------------------------------------------
    def price(self, model: Optional[str], tokens: Optional[tuple[int, int]]) -> Optional[float]:
        """What a call cost: None when its model has no price or its tokens are unknown."""
        if tokens is None:
            return None
        price = self.config.price_of(model)
        return price.cost(*tokens) if price is not None else None

    def enter(self, tag: CallTag, *, cache: str, attempts: int, ok: bool,
              tokens: Optional[tuple[int, int]], cost: Optional[float],
              failure: Optional[tuple[str, str]] = None) -> None:
        """Count one answered request under ``tag``: a cache hit, a refusal, or a call with its
        attempts, tokens (None: the answer's usage could not be true) and cost; ``failure``: why a
        request that failed did (its cause and the judge's or the gateway's words), the first kept."""
        with self._lock:
            if failure is not None and not ok:
                self._failures.setdefault(tag, failure)
            u = self._usage.get(tag)
            if u is None:
                u = self._usage[tag] = {f.name: f.default for f in fields(Usage)}
            if cache == "hit":
                u["cache_hits"] += 1
                return
            if cache == "budget":  # refused: before its first attempt, or before a retry
                u["refused"] += 1
                if attempts == 0:
                    return
            if attempts > 0:
                u["calls"] += 1
                u["retries"] += attempts - 1
                if cost is not None:
                    u["cost"] += cost
                elif self.config.prices or tokens is None:
                    u["unpriced"] += 1
            if tokens is None:
                u["invalid_usage"] += 1
            else:
                u["prompt_tokens"] += tokens[0]
                u["completion_tokens"] += tokens[1]
            if not ok and cache != "budget":
                u["errors"] += 1

    def usage(self, backend: Optional[str] = None, metric: Optional[str] = None,
              case_id: Optional[str] = None, repeat: Optional[int] = None) -> Usage:
        """Summed over the tags matching every argument that is not None."""
        if backend is not None and metric is not None and case_id is not None and repeat is not None:
            with self._lock:  # one score's: no scan
                u = self._usage.get(CallTag(backend, metric, case_id, repeat))
                return Usage(**u) if u is not None else Usage()
        total = Usage()
        with self._lock:
            items = [(t, dict(u)) for t, u in self._usage.items()]
        for tag, u in items:
            if tag.matches(backend, metric, case_id, repeat):
                total = total + Usage(**u)
        return total

    def failure(self, tag: CallTag) -> Optional[tuple[str, str]]:
        """Why the first request of ``tag`` that failed did: (cause, words), or None."""
        with self._lock:
            return self._failures.get(tag)

    def by_tag(self) -> dict[CallTag, Usage]:
        with self._lock:
            return {t: Usage(**u) for t, u in self._usage.items()}


def read_tally(path: Path) -> tuple[int, float]:
    """(calls, cost) a tally file holds (0, 0.0 when there is none); a line cut short by a kill is
    skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, 0.0
    calls, cost = 0, 0.0
    for line in data.split(b"\n"):
        if line == b"c":
            calls += 1
        elif line.startswith(b"$"):
            try:
                cost += float(line[1:])
            except ValueError:
                pass
    return calls, cost


class Probes:
    """The model requests a check may send: ``left`` (None: any number), and how many it ``sent``."""

    def __init__(self, left: Optional[int] = None) -> None:
        self.left = left
        self.sent = 0

    def take(self) -> bool:
        """Whether one more request may go; counted as sent when it may."""
        if self.left is not None and self.sent >= self.left:
            return False
        self.sent += 1
        return True
