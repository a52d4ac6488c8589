"""Run the ragbridge command line and kill it with SIGKILL in the middle of writing an output.

    python tests/kill_mid_write.py DIR BYTES ragbridge-arguments...

Files opened for writing (not for appending) under DIR count the bytes written to them; when the
next write would pass BYTES in all, the process writes up to BYTES, flushes the file and sends
itself SIGKILL. That is what ``kill -9`` in the middle of a large write leaves behind, at a
chosen point instead of a point a timer happens to hit.
"""

import builtins
import io
import os
import signal
import sys
from pathlib import Path

WATCHED = Path(sys.argv[1]).resolve()
BUDGET = [int(sys.argv[2])]
_open = io.open


class _Dying:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        if len(data) >= BUDGET[0]:
            self._f.write(data[: BUDGET[0]])
            self._f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        BUDGET[0] -= len(data)
        return self._f.write(data)

    def __iter__(self):
        return iter(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


def _watched(file) -> bool:
    try:
        return WATCHED in Path(os.fsdecode(file)).resolve().parents
    except (TypeError, ValueError):
        return False


def _open_dying(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    if any(m in mode for m in "wx+") and "a" not in mode and _watched(file):
        return _Dying(f)
    return f


builtins.open = io.open = _open_dying
sys.argv = ["ragbridge", *sys.argv[3:]]

from ragbridge.commands import run_cli  # noqa: E402

run_cli()
