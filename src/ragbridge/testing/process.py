"""Child processes for tests and benchmarks: the stub judge (:class:`StubJudgeProcess`), and the
command line that reports which modules it imported (`cli_showing_imports`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

__all__ = ["StubJudgeProcess", "cli_showing_imports", "imported_libraries"]


def cli_showing_imports(modules: dict[str, str]) -> str:
    """``python -c`` code of the ``ragbridge`` command line that prints at exit, on standard error,
    which of ``modules`` (a name -> the module that shows it was imported) the process imported; read
    it with `imported_libraries`."""
    return (
        "import atexit, json, sys\n"
        f"LIBS = {modules!r}\n"
        "atexit.register(lambda: print('IMPORTED ' + json.dumps(sorted(b for b, m in LIBS.items() "
        "if m in sys.modules)), file=sys.stderr))\n"
        "from ragbridge.commands import run_cli\n"
        "run_cli()\n"
    )


def imported_libraries(stderr: str) -> list[str]:
    """The names a `cli_showing_imports` process imported, from its standard error."""
    lines = [x for x in stderr.splitlines() if x.startswith("IMPORTED ")]
    if len(lines) != 1:
        raise ValueError(f"not one IMPORTED line in the process's output:\n{stderr[-2000:]}")
    return json.loads(lines[0][len("IMPORTED "):])


class StubJudgeProcess:
    """The stub judge in a child process (``python -m ragbridge.testing.stub_judge``), so its CPU time
    is not the measuring process's: ``with StubJudgeProcess(latency=0.1) as stub: ... stub.base_url``.
    Used by the benchmarks."""

    def __init__(self, latency: float = 0.0, start_timeout: float = 60.0,
                 log: Optional[str | Path] = None) -> None:
        self.latency = latency
        self.log = log  # the stub's call log (``--log``)
        self.start_timeout = start_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.base_url = ""

    def start(self) -> "StubJudgeProcess":
        import http.client

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        src = str(Path(__file__).resolve().parents[2])  # works from a source checkout without install
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
        log = ["--log", str(self.log)] if self.log is not None else []
        self.proc = subprocess.Popen([sys.executable, "-m", "ragbridge.testing.stub_judge",
                                      "--port", str(port), "--latency", str(self.latency), *log], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/v1/models")
                ok = conn.getresponse().status == 200
                conn.close()
                if ok:
                    self.base_url = f"http://127.0.0.1:{port}/v1"
                    return self
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"the stub judge process did not answer on port {port}"
                           f" within {self.start_timeout:g} s")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> "StubJudgeProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
