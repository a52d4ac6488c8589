"""The limits of the options a run takes, whether they come from the command line, ``ragbridge.toml``
or Python: each is checked where the option is read (the judge's in
:class:`~ragbridge.judge.config.JudgeConfig`, the run's in :class:`~ragbridge.run.request.RunRequest`),
before anything is called or written, with a message that names the option and the range.

A value past these limits cannot be what was meant, and would not fail cleanly: a billion repeats
plan a billion jobs in memory, a rate of 1e-300 requests a minute spaces two requests further apart
than a clock can count. So is a text option given bytes that are not UTF-8 (:func:`not_text`): no
file the run writes could hold it.
"""

from __future__ import annotations

__all__ = ["MAX_REPEATS", "REQUESTS_PER_MINUTE", "MAX_CONCURRENCY", "MAX_TARGET_CONCURRENCY", "MAX_RETRIES",
           "MAX_TIMEOUT", "not_text", "as_text"]

#: ``--repeats``: each judged score taken at most this many times (judge noise needs a handful)
MAX_REPEATS = 100
#: ``--requests-per-minute``: from one request every 100 minutes to a million a minute
REQUESTS_PER_MINUTE = (0.01, 1_000_000.0)
#: ``--max-concurrency``: judge calls in flight at once, across all backends
MAX_CONCURRENCY = 1024
#: ``--target-concurrency``: calls of the system under test in flight at once
MAX_TARGET_CONCURRENCY = 1024
#: the judge's ``max_retries``: retries of one call
MAX_RETRIES = 20
#: the judge's ``timeout``: seconds one attempt may take (a day)
MAX_TIMEOUT = 86_400.0


def not_text(value: str) -> "str | None":
    """None when ``value`` is text a UTF-8 file can hold; else how to show it: the bytes it came as
    (a command-line argument that is not UTF-8 reaches Python as lone surrogates), e.g.
    ``b'gpt\\xff'``."""
    try:
        value.encode("utf-8")
        return None
    except UnicodeEncodeError:
        try:
            return repr(value.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:
            return ascii(value)


def as_text(value: str) -> str:
    """``value`` as text a file can hold: itself, or (a path in bytes that are not UTF-8, which a
    file name may be) those bytes with each one that is not UTF-8 written as ``\\xNN``."""
    if not_text(value) is None:
        return value
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
