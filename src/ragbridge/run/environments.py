"""A backend's library at a chosen version, in an environment of its own, built with uv from a lock.

``--backend mylib==1.2`` runs the backend of a library at 1.2 of it, whatever this process has
installed. Each backend plugin ships one lock per version it supports, ``locks/<version>.txt`` in
its package (every package the version needs, pinned: ``uv pip compile``'s output, the command in its
header); `locks_of` lists them. `ensure` turns a lock into a virtual environment:

* where: ``<cache>/envs/<backend>-<version>-<hash>``, ``<cache>`` being the user's cache folder
  (`cache_root`: ``$RAGBRIDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ragbridge`` or
  ``~/.cache/ragbridge``; ``~/Library/Caches/ragbridge`` on macOS, ``%LOCALAPPDATA%\\ragbridge\\Cache``
  on Windows), the hash taken over the lock, this Python's version and the machine, so an edited
  lock or another Python is another environment and the ones made before stay valid;
* how: ``uv venv`` and ``uv pip sync`` of the lock (wheels only: nothing is compiled on the user's
  machine), into a temporary folder beside it, renamed into place once complete with a
  ``ragbridge-environment.json`` that says so. A build that is killed leaves a temporary folder no run
  uses and its lock file, empty and held by no one (the next build removes both); two runs that
  need the same environment at once share one build (a file lock: the second waits, then finds it
  made);
* reused: an environment that is complete is used as it is (a check of one file).

ragbridge itself is not installed into the environment: the worker runs this installation's code
(`code_path`: a folder in the cache holding links to the ``ragbridge`` package and to the backend's
plugin package, nothing else), so one environment per library version serves every ragbridge
version and never runs stale code; the lock holds ragbridge's own dependencies with the library's.

uv is the ``uv`` package's binary (a dependency of ragbridge), else ``uv`` on ``PATH``, or the one
``$RAGBRIDGE_UV`` names (`find_uv`). What cannot be built is a `RunError` saying why (uv missing, the
package index unreachable, no wheel of a package for this Python) and what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .errors import RunError

__all__ = ["Environment", "cache_root", "envs_root", "find_uv", "locks_of", "environment_for", "ensure",
           "code_path", "installed", "remove", "python_in", "MARKER"]

#: the file that marks an environment as complete (written last, before the rename)
MARKER = "ragbridge-environment.json"
#: the layout of an environment (part of its hash: a new layout builds anew)
LAYOUT = 1
#: how long a build may take before it is given up (uv's own network timeouts come first)
BUILD_SECONDS = 1800

_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+!_-]*$")


def cache_root() -> Path:
    """ragbridge's folder in the user's cache folder (see the module docstring)."""
    given = os.environ.get("RAGBRIDGE_CACHE_DIR")
    if given:
        return Path(given).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "ragbridge" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "ragbridge"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ragbridge"


def envs_root() -> Path:
    return cache_root() / "envs"


def find_uv() -> str:
    """The uv binary to build environments with: ``$RAGBRIDGE_UV``, else the ``uv`` package's, else
    ``uv`` on ``PATH``. A `RunError` when there is none."""
    given = os.environ.get("RAGBRIDGE_UV")
    if given:
        path = shutil.which(given)
        if path is None:
            raise RunError(f"RAGBRIDGE_UV names {given!r}, which is not an executable uv: give the path of "
                           "uv, or unset it to use the uv that ragbridge installs")
        return path
    try:
        import uv  # the PyPI package: its binary beside this Python's scripts

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    path = shutil.which("uv")
    if path is None:
        raise RunError("a backend with a version (NAME==VERSION) runs in an environment built with uv, and "
                       "uv is not installed: pip install uv (it comes with ragbridge; reinstall ragbridge, "
                       "or put uv on PATH, or name it in RAGBRIDGE_UV)")
    return path


def locks_of(package_dir: Optional[Path]) -> dict[str, Path]:
    """The locks a plugin package ships (``locks/<version>.txt``), by version."""
    folder = package_dir / "locks" if package_dir is not None else None
    if folder is None or not folder.is_dir():
        return {}
    return {p.name[:-4]: p for p in sorted(folder.glob("*.txt")) if _VERSION.match(p.name[:-4])}


def _python_tag() -> str:
    impl = sys.implementation
    version = f"{impl.version.major}.{impl.version.minor}"
    return f"{impl.name}-{version}-{platform.machine().lower()}-{sys.platform}"


def python_in(folder: Path) -> Path:
    """The Python of the virtual environment in ``folder``."""
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


@dataclass(frozen=True)
class Environment:
    """One library version's environment (made or not): ``name`` is the backend's as a run names it
    (``mylib==1.2``), ``backend`` the registered backend (``mylib``), ``package`` its plugin package's
    top-level module (``ragbridge_mylib``), ``lock`` the lock file."""

    name: str
    backend: str
    version: str
    package: str
    package_dir: Path
    lock: Path
    digest: str
    root: Path

    @property
    def path(self) -> Path:
        return self.root / f"{self.backend}-{self.version}-{self.digest[:12]}"

    @property
    def python(self) -> Path:
        return python_in(self.path)

    def ready(self) -> bool:
        """Whether the environment is complete (its marker written) and its Python is there."""
        return (self.path / MARKER).is_file() and self.python.exists()


def environment_for(name: str, backend: str, version: str, package: str, package_dir: Path,
                    root: Optional[Path] = None) -> Environment:
    """The environment of ``backend`` at ``version``: a `RunError` when its plugin ships no lock for
    that version, naming the versions it has."""
    locks = locks_of(package_dir)
    lock = locks.get(version)
    if lock is None:
        have = ", ".join(sorted(locks, key=version_key)) or "none"
        raise RunError(f"backend {name!r}: ragbridge has no environment for {backend} {version} (the "
                       f"versions its plugin ships a lock for: {have}); use one of them, or {backend!r} "
                       "alone for the version installed here (see docs/environments.md)")
    digest = hashlib.sha256(lock.read_bytes() + f"\n{_python_tag()}\n{LAYOUT}".encode()).hexdigest()
    return Environment(name, backend, version, package, package_dir, lock, digest, root or envs_root())


def version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version))


# --------------------------------------------------------------------------------------------
# Building


def ensure(env: Environment, note: Optional[Callable[[str], None]] = None) -> Environment:
    """Make ``env`` if it is not complete (see the module docstring), and return it. ``note`` is
    told what happens when it takes time (a build, a wait for another run's build)."""
    if env.ready():
        return env
    env.root.mkdir(parents=True, exist_ok=True)
    with _locked(env.root / f".{env.path.name}.lock", env, note):
        if env.ready():  # another run made it while this one waited
            return env
        _sweep(env)
        uv = find_uv()
        started = time.monotonic()
        if note:
            note(f"building the environment of {env.name} with uv (once; kept in {env.path})")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{env.path.name}-", dir=env.root))
        try:
            _build(uv, env, tmp)
            marker = {"backend": env.backend, "version": env.version, "lock": str(env.lock),
                      "digest": env.digest, "python": _python_tag(), "layout": LAYOUT,
                      "uv": _uv_version(uv), "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
            if env.path.exists():  # an incomplete one from before the marker existed
                shutil.rmtree(env.path)
            os.replace(tmp, env.path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if note:
            note(f"built the environment of {env.name} in {time.monotonic() - started:.1f} s")
    return env


def _build(uv: str, env: Environment, into: Path) -> None:
    python = python_in(into)
    base = getattr(sys, "_base_executable", None) or sys.executable
    _uv(uv, env, ["venv", "--quiet", "--relocatable", "--python", base, str(into)])
    _uv(uv, env, ["pip", "sync", "--quiet", "--no-build", "--python", str(python), str(env.lock)])


def _uv(uv: str, env: Environment, args: list[str]) -> None:
    """Run uv; a failure is a `RunError` with uv's reason and what to do."""
    cmd = [uv, *args]
    environ = dict(os.environ)
    environ.pop("VIRTUAL_ENV", None)  # uv would take it for the environment to act on
    environ.setdefault("UV_NO_PROGRESS", "1")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=BUILD_SECONDS,
                              stdin=subprocess.DEVNULL, preexec_fn=_dies_with_parent(os.getpid()))
    except FileNotFoundError:
        raise RunError(f"uv ({uv}) could not be started: reinstall ragbridge (it installs uv), or put uv on "
                       "PATH") from None
    except subprocess.TimeoutExpired:
        raise RunError(f"building the environment of {env.name} took over {BUILD_SECONDS} s and was "
                       "stopped: check the network to the package index, and try again") from None
    if done.returncode != 0:
        raise RunError(build_failure(env, done.stderr or done.stdout or ""))


def _dies_with_parent(parent: int) -> Optional[Callable[[], None]]:
    """On Linux, what makes uv's process end when the build's process dies, even by ``kill -9``
    (the kernel's parent-death signal): no uv is left writing into a folder the next build removes.
    Elsewhere None: a build killed outright leaves uv to finish (or fail) on its own."""
    if not sys.platform.startswith("linux"):
        return None

    def set_signal() -> None:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # it died before the signal was set
            os._exit(1)

    return set_signal


def build_failure(env: Environment, uv_output: str) -> str:
    """What a failed uv command means for the user: the reason, uv's own words, and what to do."""
    text = " ".join(uv_output.split())
    lowered = text.lower()
    said = text if len(text) <= 600 else text[:597] + "..."
    head = f"cannot build the environment of {env.name} (from {env.lock.name} of {env.package})"
    if any(s in lowered for s in ("failed to fetch", "dns error", "connection refused", "connect error",
                                  "error sending request", "network", "timed out", "tcp connect")):
        return (f"{head}: the package index could not be reached. uv said: {said}. Check the network or "
                "the index uv uses (UV_INDEX_URL, UV_DEFAULT_INDEX), or build it where the index is "
                f"reachable with `ragbridge environments build {env.name}` (uv's cache then lets it "
                "build offline), or run the installed version with --backend " + env.backend)
    if any(s in lowered for s in ("no wheels", "no usable wheels", "matching python", "not available for",
                                  "--no-build", "building source distributions is disabled",
                                  "no matching distribution", "requires-python", "platform tag", "abi tag")):
        return (f"{head}: a package it pins has no wheel for this Python ({platform.python_version()} on "
                f"{platform.machine()}). uv said: {said}. Run ragbridge on a Python the lock supports "
                "(the lock's header says which), or use the version installed here with --backend "
                + env.backend)
    return f"{head}. uv said: {said}. Fix what uv names and run again"


def _uv_version(uv: str) -> Optional[str]:
    with contextlib.suppress(Exception):
        return subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return None


def _sweep(env: Environment) -> None:
    """Remove what killed builds of ``env`` left (their temporary folders): called with its lock held,
    so no build of it is running. A uv killed with its build may still be ending (its last writes
    landing as the folder is removed): a folder not removed whole is removed again, for up to
    `SWEEP_SECONDS`."""
    for leftover in env.root.glob(f".tmp-{env.path.name}-*"):
        deadline = time.monotonic() + SWEEP_SECONDS
        shutil.rmtree(leftover, ignore_errors=True)
        while leftover.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
            shutil.rmtree(leftover, ignore_errors=True)


#: how long `_sweep` tries again to remove a killed build's folder
SWEEP_SECONDS = 10.0


@contextlib.contextmanager
def _locked(path: Path, env: Environment, note: Optional[Callable[[str], None]]) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released by the system if this process dies). The file is
    removed when the lock is released (a build, made or failed, leaves no lock file behind; one
    killed leaves it, unlocked, for the next build to remove: removing a file another process may
    hold would let two builds run at once); a run that locked a file removed meanwhile locks the one
    there now instead."""
    if sys.platform == "win32":  # pragma: no cover - locked byte by byte on Windows, the file kept
        import msvcrt

        fh = open(path, "a+b")
        try:
            while True:
                try:
                    msvcrt.locking(fh.fileno(), msvcrt.LK_NBLCK, 1)
                    break
                except OSError:
                    time.sleep(0.5)
            yield
        finally:
            fh.close()
        return
    import fcntl

    waited = False
    while True:
        fh = open(path, "a+b")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if note and not waited:
                note(f"waiting for another run that is building the environment of {env.name}")
            waited = True
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        fh.close()  # the run that held it removed it: lock the file there now
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        fh.close()


# --------------------------------------------------------------------------------------------
# ragbridge's own code, for the worker


def code_path(packages: dict[str, Path]) -> Path:
    """A folder that holds links to ``packages`` (top-level module name -> its folder) and nothing
    else: what the worker puts on its path to run this installation's ragbridge and plugin, without
    the other packages installed beside them. Made once per set of folders (a copy where links
    cannot be made)."""
    key = json.dumps(sorted((k, str(v.resolve())) for k, v in packages.items()))
    folder = cache_root() / "code" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if all((folder / name).exists() for name in packages):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        for name, source in packages.items():
            try:
                os.symlink(source.resolve(), tmp / name, target_is_directory=True)
            except OSError:  # no symlinks (Windows without the right): a copy
                shutil.copytree(source, tmp / name, ignore=shutil.ignore_patterns("__pycache__"))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


# --------------------------------------------------------------------------------------------
# What is there


def installed(root: Optional[Path] = None) -> list[dict[str, Any]]:
    """The complete environments in the cache: each one's marker, with its ``path`` and ``bytes``."""
    root = root or envs_root()
    out = []
    for marker in sorted(root.glob(f"*/{MARKER}")) if root.is_dir() else []:
        try:
            doc = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        doc.update(path=str(marker.parent), executable=str(python_in(marker.parent)),
                   bytes=_size(marker.parent))
        out.append(doc)
    return out


def _size(folder: Path) -> int:
    """Bytes the files under ``folder`` take (each hard-linked file once)."""
    seen, total = set(), 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, f))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def remove(path: Path) -> None:
    """Remove one environment: renamed aside first, so no run starts in a half-removed one."""
    aside = path.with_name(f".tmp-{path.name}-removing")
    os.replace(path, aside)
    shutil.rmtree(aside, ignore_errors=True)
