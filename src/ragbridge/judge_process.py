"""The judge gateway in a child process: :class:`GatewayProcess`, the same API as :class:`JudgeGateway`.

The gateway's work per request (HTTP parsing, cache lookup, forwarding, accounting, audit) costs CPU
under the GIL of the process it runs in. Run by the runner next to RAGAS, DeepEval or TruLens, it
would slow the library down; in its own process it runs on another core.

``GatewayProcess(config, audit_log=...)`` starts ``python -m ragbridge.judge_process`` with the
current interpreter and sends it, on its stdin, the configuration (never a key: the child reads the
key from the environment variable named by ``JudgeConfig.api_key_env``, as the in-process gateway
does) and a random control token. The child starts a :class:`JudgeGateway` on 127.0.0.1 and
answers with its port. Then:

* ``base_url(backend, metric, case_id)`` is made locally: the triple is encoded in the URL path
  (:func:`ragbridge.judge.path_tag`), so no round trip is needed;
* ``usage``, ``usage_by_triple``, ``forget``, ``preflight`` and ``stub_detected`` are control
  requests to ``/_ragbridge/...`` on the child's gateway, which answers only requests carrying the
  token. The child counts a request before it answers it, so ``usage()`` read after a library got
  its answer includes it;
* ``close()`` closes the child's stdin; the child closes its gateway (flushing the audit log and the
  cache) and exits. A child whose stdin closes because the parent died, or whose parent process
  changed, exits as well: no orphan outlives the run. After ``close()`` the last usage and
  ``stub_detected`` remain readable.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal, Optional

from . import judge as _judge
from .judge import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    CONTROL_HEADER,
    CONTROL_PREFIX,
    DUMMY_API_KEY,
    JudgeConfig,
    JudgeError,
    JudgeGateway,
    Triple,
    Usage,
    path_tag,
)

__all__ = ["GatewayProcess"]

# How the child starts: ``python -m ragbridge.judge_process`` works too, but imports the whole
# package (runner, schema, rich, ...) first. The child needs only ragbridge.judge (stdlib, httpx and
# pydantic), so it is imported from this process's ragbridge directory (argv[1]) without running the
# package's __init__, and without httpx's command-line client (rich, click): ~0.15 s instead of ~0.6 s.
_BOOT = (
    "import sys, types\n"
    "sys.modules.setdefault('httpx._main', None)\n"
    "pkg = types.ModuleType('ragbridge')\n"
    "pkg.__path__ = [sys.argv[1]]\n"
    "sys.modules['ragbridge'] = pkg\n"
    "from ragbridge.judge_process import _child_main\n"
    "sys.exit(_child_main())\n"
)
START_TIMEOUT = 60.0  # seconds for the child to import and bind its port
STOP_TIMEOUT = 15.0  # seconds for the child to close its gateway before it is terminated
PARENT_POLL_SECONDS = 0.5


class GatewayProcess:
    """A :class:`JudgeGateway` running in a child process (see the module docstring).

    ``backoff_base``, ``backoff_cap`` and ``upstream_transport`` are passed to the child's gateway."""

    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP
    upstream_transport: Literal["stdlib", "httpx"] = "stdlib"

    def __init__(self, config: JudgeConfig, audit_log: Optional[Path] = None) -> None:
        self.config = config
        self.audit_log = Path(audit_log) if audit_log is not None else None
        self.port: Optional[int] = None
        self.pid: Optional[int] = None
        self._proc: Optional[subprocess.Popen] = None
        self._token: Optional[str] = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()
        # the last state read from the child (kept after close)
        self._last_usage: dict[Triple, Usage] = {}
        self._stub_detected = False

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "GatewayProcess":
        if self._proc is not None:
            return self
        import secrets

        token = secrets.token_urlsafe(32)
        spec = {
            "config": self.config.model_dump(mode="json"),
            "audit_log": str(self.audit_log.resolve()) if self.audit_log is not None else None,
            "token": token,
            "backoff_base": self.backoff_base,
            "backoff_cap": self.backoff_cap,
            "upstream_transport": self.upstream_transport,
            "parent_pid": os.getpid(),
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(Path(_judge.__file__).resolve().parent)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            start_new_session=True,  # a Ctrl-C in the terminal reaches the parent, which closes the child
        )
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(spec).encode("utf-8") + b"\n")
            proc.stdin.flush()
            line = b""
            deadline = time.monotonic() + START_TIMEOUT
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                    raise JudgeError(f"the judge gateway process did not start within {START_TIMEOUT:g} s")
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    code = proc.wait(STOP_TIMEOUT)
                    raise JudgeError(f"the judge gateway process exited (code {code}) before it started "
                                     f"(its error, if any, is on stderr)")
                line += chunk
            hello = json.loads(line)
            if "error" in hello:
                err = hello["error"]
                cls = getattr(_judge, err.get("type", ""), None)
                if not (isinstance(cls, type) and issubclass(cls, JudgeError)):
                    cls = JudgeError
                raise cls(err.get("message", "the judge gateway process failed to start"))
        except BaseException:
            _stop(proc)
            raise
        self._proc, self._token = proc, token
        self.port, self.pid = int(hello["port"]), int(hello["pid"])
        self._last_usage, self._stub_detected = {}, False
        return self

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            self._refresh()  # the final counters stay readable after close
        except Exception:
            pass
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._proc = None
        _stop(proc)

    def __enter__(self) -> "GatewayProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- control requests -----------------------------------------------------------------------
    def _call(self, method: str, name: str, payload: Optional[dict] = None) -> dict:
        if self._proc is None or self.port is None:
            raise JudgeError("the judge gateway is not running: call start() or use it as a context manager")
        body = json.dumps(payload).encode() if payload is not None else None
        headers = {CONTROL_HEADER: self._token or "", "Host": f"127.0.0.1:{self.port}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            for attempt in (0, 1):
                conn = self._conn
                if conn is None:
                    conn = self._conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                                   timeout=self.config.client_timeout())
                try:
                    conn.request(method, f"/{CONTROL_PREFIX}/{name}", body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._conn = None
                    if attempt:
                        code = self._proc.poll() if self._proc is not None else None
                        state = "is running" if code is None else f"exited with code {code}"
                        raise JudgeError(f"the judge gateway process does not answer ({type(exc).__name__}: "
                                         f"{exc}); it {state}") from None
                    continue
                if r.will_close:
                    conn.close()
                    self._conn = None
                break
        if r.status != 200:
            raise JudgeError(f"the judge gateway process answered HTTP {r.status} to {name}: "
                             f"{data[:300].decode('utf-8', 'replace')}")
        out = json.loads(data)
        if "stub_detected" in out:
            self._stub_detected = bool(out["stub_detected"])
        return out

    def _refresh(self) -> dict[Triple, Usage]:
        out = self._call("GET", "state")
        self._last_usage = {tuple(t[:3]): Usage(*t[3]) for t in out["triples"]}  # type: ignore[misc]
        return self._last_usage

    # -- what the backends use ------------------------------------------------------------------
    @property
    def api_key(self) -> str:
        return DUMMY_API_KEY

    @property
    def url(self) -> str:
        if self.port is None:
            raise JudgeError("the judge gateway is not started: call start() or use it as a context manager")
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> str:
        """An OpenAI base URL (``.../v1``) whose calls are counted under (backend, metric, case_id)."""
        return f"{self.url}/t/{path_tag(backend, metric, case_id)}/v1"

    @property
    def plain_base_url(self) -> str:
        return f"{self.url}/v1"

    tag_scope = staticmethod(JudgeGateway.tag_scope)
    httpx_event_hooks = staticmethod(JudgeGateway.httpx_event_hooks)
    async_httpx_event_hooks = staticmethod(JudgeGateway.async_httpx_event_hooks)

    @property
    def stub_detected(self) -> bool:
        if self._proc is not None and not self._stub_detected:
            try:
                self._call("GET", "state")
            except Exception:
                pass
        return self._stub_detected

    def usage(self, backend: Optional[str] = None, metric: Optional[str] = None,
              case_id: Optional[str] = None) -> Usage:
        """Summed over the triples matching every argument that is not None (one round trip)."""
        if self._proc is not None:
            return Usage(*self._call("POST", "usage", {"triple": [backend, metric, case_id]})["usage"])
        total = Usage()
        for (b, m, c), u in self._last_usage.items():
            if (backend is None or b == backend) and (metric is None or m == metric) and (
                    case_id is None or c == case_id):
                total = total + u
        return total

    def usage_by_triple(self) -> dict[Triple, Usage]:
        if self._proc is not None:
            self._refresh()
        return dict(self._last_usage)

    def forget(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> int:
        """Drop from the cache every response served for this (backend, metric, case) in this run."""
        if self._proc is None:
            return 0
        return int(self._call("POST", "forget", {"triple": [backend, metric, case_id]})["deleted"])

    def preflight(self) -> dict[str, Any]:
        """As :meth:`JudgeGateway.preflight`, run by the child's gateway."""
        out = self._call("POST", "preflight", {})
        if "error" in out:
            err = out["error"]
            cls = getattr(_judge, err.get("type", ""), None)
            if not (isinstance(cls, type) and issubclass(cls, JudgeError)):
                cls = JudgeError
            raise cls(err["message"])
        return out["result"]


def _stop(proc: subprocess.Popen) -> None:
    """Close the child's stdin (it then closes its gateway and exits); terminate it if it does not."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        # the child holds the write end of its stdout pipe until it exits: EOF there is its exit
        # (Popen.wait with a timeout would poll in steps of up to 50 ms)
        if proc.stdout is not None and not proc.stdout.closed:
            with contextlib.suppress(OSError, ValueError):
                deadline = time.monotonic() + STOP_TIMEOUT
                while time.monotonic() < deadline and select.select([proc.stdout], [], [],
                                                                    deadline - time.monotonic())[0]:
                    if not os.read(proc.stdout.fileno(), 4096):
                        break
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for f in (proc.stdout,):
        if f is not None and not f.closed:
            f.close()


# ------------------------------------------------------------------------------------------------
# The child
# ------------------------------------------------------------------------------------------------


def _child_main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the gateway stops
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing else may write to the pipe the parent reads the port from
    os.close(devnull)

    def hello(data: dict) -> None:  # ``out`` stays open until exit: the parent sees EOF when we are gone
        out.write(json.dumps(data).encode("utf-8") + b"\n")
        out.flush()

    line = sys.stdin.buffer.readline()
    if not line:
        return 0
    gw: Optional[JudgeGateway] = None
    try:
        spec = json.loads(line)
        config = JudgeConfig.model_validate(spec["config"])
        gw = JudgeGateway(config, audit_log=spec.get("audit_log"))
        gw.backoff_base = float(spec.get("backoff_base", BACKOFF_BASE))
        gw.backoff_cap = float(spec.get("backoff_cap", BACKOFF_CAP))
        gw.upstream_transport = spec.get("upstream_transport", "stdlib")
        gw.control_token = spec["token"]
        parent = int(spec.get("parent_pid") or os.getppid())
        gw.start()
    except Exception as exc:
        if gw is not None:
            gw.close()
        hello({"error": {"type": type(exc).__name__, "message": str(exc)}})
        return 1

    def watch_stdin() -> None:  # EOF: the parent closed us, or died
        try:
            while sys.stdin.buffer.read(65536):
                pass
        finally:
            stop.set()

    def watch_parent() -> None:  # belt and braces: the parent is gone even if a pipe end leaked
        while not stop.wait(PARENT_POLL_SECONDS):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch_stdin, name="ragbridge-judge-stdin", daemon=True).start()
    threading.Thread(target=watch_parent, name="ragbridge-judge-parent", daemon=True).start()
    hello({"port": gw.port, "pid": os.getpid()})
    while not stop.wait(1.0):
        pass
    gw.close()  # the audit log and the cache are closed: nothing is left to finalise
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_child_main())
