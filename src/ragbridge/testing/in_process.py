"""A program's ``main`` run in this process as if it were a child process of its own
(`run_in_process`): what ``subprocess.run([sys.executable, "-c", ..., *args], capture_output=True,
text=True, cwd=cwd, env={**os.environ, **env}, timeout=timeout)`` returns, without the start-up of a
Python process and the import of every library a command needs, which are most of a command's time
in a test.

What a child process would see is set for the call and put back after it:

- its arguments (``sys.argv`` is ``["-c", *args]``, as under ``python -c``), its environment (``env``
  over this process's), its working folder (``cwd``), and ``''`` first on ``sys.path``; a
  ``PYTHONPATH`` in ``env`` puts its folders on ``sys.path``, and the modules imported from them (and
  from the working folder) during the call are forgotten after it, as a process exiting forgets them;
- its standard streams: file descriptors 1 and 2 go to files of their own (so what C code or a child
  of the command writes is caught too), ``sys.stdout`` and ``sys.stderr`` write to them with the
  encoding and error handling this interpreter's own streams have, neither is a terminal, and standard
  input is empty; the bytes are decoded as ``text=True`` decodes a child's output (the locale's
  encoding, universal newlines);
- its exit code: ``sys.exit(n)`` is ``n`` (None 0, a message printed and 1), an exception escaping
  ``main`` prints its traceback and is 1, as the interpreter does;
- the interpreter's defaults where a test runner changes them: the warning filters a fresh
  interpreter starts with (and ``PYTHONWARNINGS`` from ``env``) printing to standard error, the
  default hooks for exceptions in threads and for unraisable exceptions, logging's stream handlers
  writing to the call's streams;
- what the call changes and a process's exit would drop: signal handlers, logging's handlers and
  levels, the cyclic garbage collector's state, the environment, the working folder.

A program's own global state (caches, registries) is its caller's to reset, with ``fresh``: context
managers entered (in order) around the call.

Not for what needs a process of its own: signals sent to it, a kill, its start-up and its imports,
the connections it opens (``subprocess=True`` in the tests' ``ragbridge_cli``).
"""

from __future__ import annotations

import contextlib
import gc
import io
import locale
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Iterator, Optional

__all__ = ["run_in_process"]

#: the warning filters a Python 3 interpreter starts with (before -W and PYTHONWARNINGS)
_DEFAULT_FILTERS = [
    ("default", None, DeprecationWarning, "__main__", 0),
    ("ignore", None, DeprecationWarning, None, 0),
    ("ignore", None, PendingDeprecationWarning, None, 0),
    ("ignore", None, ImportWarning, None, 0),
    ("ignore", None, ResourceWarning, None, 0),
]


class _Timeout(BaseException):
    """The call ran past its timeout (raised in the main thread by the watchdog)."""


def run_in_process(main: Callable[[], Any], args: Iterable[Any], *, cwd: Optional[str | Path] = None,
                   env: Optional[dict[str, str]] = None, timeout: Optional[float] = None,
                   fresh: Iterable[Callable[[], ContextManager[Any]]] = ()) -> subprocess.CompletedProcess:
    """Call ``main()`` with ``args`` as a child process running it would (see the module's docstring)
    and return what `subprocess.run` would: a ``CompletedProcess`` with ``returncode``, ``stdout`` and
    ``stderr`` (text). Raises ``subprocess.TimeoutExpired`` when the call takes longer than
    ``timeout`` seconds. Call it from the main thread."""
    args = [str(a) for a in args]
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("run_in_process runs a program in the main thread only (signals, like a process)")
    env = {k: str(v) for k, v in (env or {}).items()}
    cmd = [sys.executable, "-c", getattr(main, "__qualname__", "main"), *args]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code, timed_out = _call(main, args, cwd, env, timeout, out, err, list(fresh))
        stdout, stderr = _text(out), _text(err)
    if timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(cmd, code, stdout, stderr)


def _text(f: Any) -> str:
    """A child's output as ``text=True`` reads it: the locale's encoding, universal newlines."""
    f.seek(0)
    data = f.read().decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


def _call(main: Callable[[], Any], args: list[str], cwd: Any, env: dict[str, str], timeout: Optional[float],
          out: Any, err: Any, fresh: list) -> tuple[int, bool]:
    fired = threading.Event()

    main_thread = threading.main_thread().ident

    def interrupt() -> None:
        fired.set()
        signal.pthread_kill(main_thread, signal.SIGINT)  # a real SIGINT: it also ends a blocking call

    watchdog = threading.Timer(timeout, interrupt) if timeout else None
    with contextlib.ExitStack() as stack:
        stack.enter_context(_interrupt_handler())
        stack.enter_context(_environment(env))
        stack.enter_context(_folder(cwd))
        stack.enter_context(_interpreter_defaults())
        stack.enter_context(_streams(out, err))
        stack.enter_context(_import_path(env.get("PYTHONPATH")))
        stack.enter_context(_left_behind())
        for make in fresh:
            stack.enter_context(make())
        saved_argv = sys.argv
        sys.argv = ["-c", *args]
        stack.callback(setattr, sys, "argv", saved_argv)
        if watchdog is not None:
            watchdog.daemon = True
            watchdog.start()
            stack.callback(watchdog.cancel)
        try:
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = _exit_status(exc.code)
            except KeyboardInterrupt:
                if fired.is_set():
                    return 1, True
                traceback.print_exc()
                code = -signal.SIGINT  # the interpreter ends itself by SIGINT
            except BaseException:  # noqa: BLE001 (a process prints it and exits 1)
                traceback.print_exc()
                code = 1
        except KeyboardInterrupt:  # the watchdog, while the exception was being handled
            return 1, True
        finally:
            if watchdog is not None:
                watchdog.cancel()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        return code, False


@contextlib.contextmanager
def _interrupt_handler() -> Iterator[None]:
    """Python's own SIGINT handler for the call, as a new process starts with (whatever this process
    had: a SIGINT ignored or handled outside Python would leave the timeout's interrupt unheard);
    this process's handler after it."""
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved if saved is not None else signal.SIG_DFL)


def _exit_status(code: Any) -> int:
    """The exit status ``sys.exit(code)`` gives a process."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` over this process's environment for the call; the environment as it was after it,
    whatever the call set."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        for k in [k for k in os.environ if k not in saved]:
            del os.environ[k]
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


@contextlib.contextmanager
def _folder(cwd: Any) -> Iterator[None]:
    saved = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved)


def _show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
          line: Any = None) -> None:
    """How the interpreter prints a warning: on standard error."""
    file = sys.stderr if file is None else file
    with contextlib.suppress(OSError):
        file.write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _interpreter_defaults() -> Iterator[None]:
    """The warning filters, warning printer and exception hooks of a fresh interpreter (a test runner
    records warnings and thread exceptions instead of printing them)."""
    with warnings.catch_warnings():
        warnings.filters[:] = _DEFAULT_FILTERS
        warnings._filters_mutated()  # type: ignore[attr-defined]
        options = [o for o in os.environ.get("PYTHONWARNINGS", "").split(",") if o]
        with contextlib.suppress(Exception):
            warnings._processoptions(options)  # type: ignore[attr-defined]
        warnings.showwarning = _show
        saved = threading.excepthook, sys.unraisablehook, sys.excepthook
        threading.excepthook, sys.unraisablehook = threading.__excepthook__, sys.__unraisablehook__
        sys.excepthook = sys.__excepthook__
        try:
            yield
        finally:
            threading.excepthook, sys.unraisablehook, sys.excepthook = saved


def _stream(fd: int, like: Any) -> io.TextIOWrapper:
    """A text stream writing straight to file descriptor ``fd`` (whatever it points to when written),
    with ``like``'s encoding and error handling."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                            encoding=getattr(like, "encoding", None) or "utf-8",
                            errors=getattr(like, "errors", None) or "strict", newline="\n",
                            write_through=True)


#: ``sys.stdout`` and ``sys.stderr`` during every call: one pair for all calls, so a logging handler
#: made during one call writes to whichever call's streams are current
_STREAMS: dict[int, io.TextIOWrapper] = {}


@contextlib.contextmanager
def _streams(out: Any, err: Any) -> Iterator[None]:
    """Standard output and error into ``out`` and ``err`` (file descriptors 1 and 2 and the Python
    streams), standard input empty; as they were after."""
    for fd, like in ((1, sys.__stdout__), (2, sys.__stderr__)):
        if fd not in _STREAMS:
            _STREAMS[fd] = _stream(fd, like)
    saved_fds = [os.dup(1), os.dup(2)]
    saved = sys.stdin, sys.stdout, sys.stderr
    loggers = [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                       if isinstance(x, logging.Logger))]
    retarget = [(h, h.stream) for lg in loggers for h in lg.handlers
                if isinstance(h, logging.StreamHandler) and "stream" in vars(h)
                and any(h.stream is s for s in saved[1:])]
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdin = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
        sys.stdout, sys.stderr = _STREAMS[1], _STREAMS[2]
        for h, s in retarget:
            h.stream = sys.stderr if s is saved[2] else sys.stdout
        yield
    finally:
        for h, s in retarget:
            h.stream = s
        sys.stdin, sys.stdout, sys.stderr = saved
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)


def _under(path: Optional[str], roots: list[Path]) -> bool:
    if not path:
        return False
    with contextlib.suppress(OSError, ValueError):
        resolved = Path(path).resolve()
        return any(resolved.is_relative_to(r) for r in roots)
    return False


@contextlib.contextmanager
def _import_path(pythonpath: Optional[str]) -> Iterator[None]:
    """``sys.path`` as ``python -c`` starts with it: ``''`` (the working folder) first, then the
    folders of a ``PYTHONPATH`` the call gives that are not on it already. Modules imported from those
    during the call (a test's plugin or pipeline) are forgotten after it; the ones imported from where
    this process imports its own are kept."""
    saved = list(sys.path)
    stable = [Path(p).resolve() for p in saved if p and Path(p).is_dir()]
    known = {str(p) for p in stable}
    added = [p for p in (pythonpath or "").split(os.pathsep) if p and str(Path(p).resolve()) not in known]
    roots = [Path(os.getcwd()).resolve(), *(Path(p).resolve() for p in added)]
    before = set(sys.modules)
    sys.path[:0] = ["", *added]
    import importlib

    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = saved
        for name in [n for n in sys.modules if n not in before]:
            file = getattr(sys.modules.get(name), "__file__", None)
            if _under(file, roots) and not _under(file, stable):
                sys.modules.pop(name, None)
        importlib.invalidate_caches()


@contextlib.contextmanager
def _left_behind() -> Iterator[None]:
    """Put back what a process's exit would drop: signal handlers, logging's handlers and levels, the
    cyclic garbage collector's state (a call that froze what it made is unfrozen)."""
    handlers = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handlers[sig] = signal.getsignal(sig)
    loggers = {name: (lg.handlers[:], lg.level, lg.propagate, lg.disabled)
               for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]
               if isinstance(lg, logging.Logger)}
    disable = logging.root.manager.disable
    gc_on, frozen = gc.isenabled(), gc.get_freeze_count()
    # a test runner's handlers on the root logger (pytest's capture of log records) are not a new
    # process's: without them a record no handler takes goes to standard error (logging.lastResort)
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not type(h).__module__.startswith(("_pytest", "pytest"))]
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(sig, handler)
        for name, lg in [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]:
            if isinstance(lg, logging.Logger) and name in loggers:
                lg.handlers[:], lg.level, lg.propagate, lg.disabled = loggers[name]
        logging.root.manager.disable = disable
        logging.Logger.manager._clear_cache()  # type: ignore[attr-defined]
        if gc.get_freeze_count() > frozen:
            gc.unfreeze()
        (gc.enable if gc_on else gc.disable)()
