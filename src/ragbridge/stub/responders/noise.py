"""Noise, on purpose (a test device): a real judge does not give the same verdict every time it is
asked; to test what ragbridge measures about that (``--repeats``, the noise figures), the stub can be
made noisy: ``StubJudge(noise=p, noise_seed=s)``.

Inside `perturbed` every verdict of the toy judge (``is_supported``, ``is_relevant``) flips with
probability ``p`` (`noisy`), and a level on a scale (`noisy_level`, which a responder applies to the
level it answers) moves to a neighbouring level with probability ``p``. The draws come from a
generator seeded by (``s``, the repeat index the gateway sends in ``X-Ragbridge-Repeat``, the
request body), so a given request in a given repeat always gets the same answer, and repeats differ
as independent draws. Outside `perturbed` (or with ``p`` 0) nothing changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import random
from dataclasses import dataclass
from typing import Any, Optional, Sequence

__all__ = ["perturbed", "noisy", "noisy_level"]


@dataclass
class _Noise:
    rate: float
    rng: random.Random


_NOISE: contextvars.ContextVar[Optional[_Noise]] = contextvars.ContextVar("ragbridge_stub_noise",
                                                                         default=None)


@contextlib.contextmanager
def perturbed(rate: float, seed: int, repeat: int, request: bytes):
    """Within this block the toy judge is noisy (see the module docstring): verdicts flip and levels
    move with probability ``rate``, drawn from a generator seeded by (seed, repeat, request)."""
    if not rate:
        yield
        return
    digest = hashlib.sha256(b"%d\0%d\0" % (seed, repeat) + request).digest()
    token = _NOISE.set(_Noise(float(rate), random.Random(int.from_bytes(digest[:8], "little"))))
    try:
        yield
    finally:
        _NOISE.reset(token)


def noisy(verdict: bool) -> bool:
    """``verdict``, flipped with the noise probability inside `perturbed` (else unchanged)."""
    noise = _NOISE.get()
    if noise is None:
        return verdict
    return (not verdict) if noise.rng.random() < noise.rate else verdict


def noisy_level(level: Any, values: Sequence[Any]) -> Any:
    """``level`` (one of the ordered ``values``), moved to a neighbouring value with the noise
    probability inside `perturbed` (at either end, to its only neighbour), else unchanged."""
    noise = _NOISE.get()
    values = list(values)
    if noise is None or len(values) < 2 or level not in values or noise.rng.random() >= noise.rate:
        return level
    i = values.index(level)
    if i == 0:
        return values[1]
    if i == len(values) - 1:
        return values[-2]
    return values[i + (1 if noise.rng.random() < 0.5 else -1)]
