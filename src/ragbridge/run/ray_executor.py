"""The Ray executor: a run's jobs scored on a Ray cluster (``executor="ray"``, ``--executor ray``).

The runner does everything else as with the local executor (plan, run folder, target, manifest,
recording, batches); only the scoring of each batch's jobs runs on the cluster, and every score comes
back to the same recorder, in the driver, as its block of cases is done. So the run folder, the
resume and overwrite rules and the scores are the local executor's.

The cluster is started when the first job arrives, not before (a resumed run with nothing left, or
one whose every score is in the score cache, starts nothing), once for the run, and shut down when
the run ends. Each batch's jobs are cut into blocks of cases, and the blocks go out as they are
(`ragbridge.formats.records.CaseBatch`: the canonical records, no `Case` object built in the driver):

* a backend without a judged metric in the batch (the native ranking metrics, the answer checks,
  the span metrics, a plugin's local backend): one Ray task per block, which scores every metric
  of that backend over its block through the backend itself (`ragbridge.run.lifecycle`: the native
  backend prepares its arrays once per block for every ranking metric), with a session per task;
* judged metrics: a pool of `BackendScorer` actors, made once for the run (on the first judged
  job) and closed at its end. An actor opens each backend on its first block and keeps the session
  (its library objects, clients, thread pools) for the run, on one event loop of its own; each actor
  runs ``calls_per_actor`` blocks at once, so that a block's slowest case does not idle the judge.

The judge: the driver keeps the run's one `ragbridge.judge.JudgeGateway` (it owns the cache, the
concurrency bound, the requests-per-minute limit and the usage counts). Its socket is opened on
``gateway_host`` (127.0.0.1 unless the cluster has nodes on other machines, where an explicit
address of the driver's machine is required), and each actor gets a
`ragbridge.judge.remote.GatewayClient` for it: the socket's URL, the gateway's own per-run key and
the judge settings without secrets, as actor constructor arguments (never ``runtime_env``, whose
values Ray writes to its logs and state API). The judge's real key never leaves the driver. Every
judge call of every worker thus passes the one gateway: the bound and the limit hold for the
cluster together, and a case scored on any worker is a cache hit on a re-run wherever it lands. The
cost is one HTTP hop from the worker to the driver per judge call.

Faults: Ray restarts an actor whose process died and retries its blocks there, and retries a task
whose worker died, `MAX_RESTARTS` times each (then the run fails, saying so: an actor whose process
dies as it starts is not started for ever); a retried block asks the gateway again and is served
from its cache (a block's scores reach the driver only once the block is done, so a block is
recorded once). A scorer the workers cannot import fails the run at once, naming what is missing
(`ray_failure`). A killed driver ends the cluster it started (its workers with it; after ``kill -9`` the
raylet's two agent processes run on for about a minute, then exit); the run folder then holds every
score recorded so far and a re-run resumes it. SIGTERM ends the run as Ctrl-C does
(``ray.init`` replaces the process's handler with one that exits at once: it is put back).

Ray's defaults reach outside the machine (cloud-metadata probes, a node address found by a UDP
connect to a public resolver, listeners on every interface, usage reports), and let in anyone who
reaches a port. A cluster this executor starts is started with `LOCAL_ENVIRONMENT` and a ``HOME``
holding an empty ``ray_bootstrap_config.yaml``: every Ray process on loopback, no probes, no
reports, and Ray's token authentication with a token only the run holds (`ray_session`); what Ray
changes in this process's environment is put back when it is shut down. A cluster given by
``address`` is joined with usage reports off and only with token authentication (`_join`);
ragbridge (and the backends' libraries) must be installed on its nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import re
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Optional, Sequence, Union

from ..backend import Backend, RunOptions, ScoringContext
from ..formats.batches import CaseBatch
from ..plugins import get_backends
from ..schema import Score, ScoreBlock
from .executor import Executor, ExecutorSession
from .lifecycle import Job, Record, applied_environment, close_session, drive_job, open_session
from ..formats.files import sweep_scratch
from .plan import Plan, RunError

__all__ = ["RayExecutor", "BackendScorer", "ray_session", "LOCAL_ENVIRONMENT"]

#: set before a local cluster starts (see the module docstring and docs of Ray 2.60's behaviour)
LOCAL_ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address 127.0.0.1: every listener on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",  # every request to the cluster carries the run's token (`_private_token`)
}
#: what Ray reads for its token: the token itself, or a file holding it (else ~/.ray/auth_token)
_TOKEN_VARIABLES = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
#: what Ray sets in the driver's environment and does not undo, and what is set here for its processes
_RAY_TOUCHED = ("RAY_CLIENT_MODE", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "PYTHONBREAKPOINT",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "HOME", *_TOKEN_VARIABLES)
DEFAULT_OBJECT_STORE = 1 << 30  # a local cluster's object store (Ray's default: 30 % of RAM); spills to disk
#: the fewest cases in a block of a local backend's task (smaller batches go out whole)
MIN_BLOCK_ROWS = 256
#: how many times Ray restarts a scorer actor whose process died, and runs again a task whose worker
#: died: a worker killed now and then loses nothing; one that cannot start (its process dies while
#: it loads) fails the run instead of being started again for ever
MAX_RESTARTS = 3
#: a local cluster's private folder: ``rb-ray-<pid>-<random>`` in the system's temporary folder
FOLDER_PREFIX = "rb-ray-"

#: a block of work: (backend, [(metric, repeat), ...], cases), scored in one task or actor call
Block = tuple[str, list[tuple[str, int]], CaseBatch]
Item = Union[Score, ScoreBlock]


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, *, num_cpus: Optional[int] = None,
                object_store_memory: Optional[int] = DEFAULT_OBJECT_STORE,
                hide: Sequence[str] = ()) -> Iterator[Any]:
    """The ``ray`` module, connected: to the cluster this process is connected to already (left
    as it is), to the one at ``address``, or to a private local cluster started for the run (``None``
    or ``"local"``) with the offline settings; a cluster started or joined here is shut down after.

    A local cluster requires a token that only this run holds: random, in a file (0600) of the
    run's private folder (0700, ``rb-ray-<pid>-*`` in the temporary folder, which also holds Ray's
    session files and sockets; removed with the cluster, or by the next local cluster started
    once its process is gone), never in ``~/.ray``. A cluster at ``address`` is joined only with
    token authentication, with the token the user gives Ray (`_join`); the cluster of a connection
    made before is used only if it asks for a token.

    ``hide``: environment variables (the judge key's) taken out of the environment while Ray starts,
    so that no Ray process, and no worker they start, inherits them."""
    local = address in (None, "local")
    saved = {k: os.environ.get(k) for k in (*_RAY_TOUCHED, *hide)}
    if local and "ray" not in sys.modules:
        os.environ.update(LOCAL_ENVIRONMENT)  # Ray reads some of it when it is imported
    import ray
    from ray._private import ray_constants

    if ray.is_initialized():  # the user's connection: used as it is, if the cluster asks for a token
        _restore(saved)
        gcs = _gcs_address(ray)
        if gcs is not None and _answers_without_token(gcs):
            raise RunError(f"the Ray cluster this process is connected to ({gcs}) answers requests that "
                           f"carry no token: {_OPEN}; {_HOWTO}")
        yield ray
        return
    any_address = ray_constants.ENABLE_RAY_CLUSTER
    tmp = None
    terminate = _sigterm_handler()
    try:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        for name in hide:
            os.environ.pop(name, None)
        if local:
            sweep_folders()
            # a short folder: Ray's AF_UNIX socket paths under it must stay within 107 bytes
            tmp = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-",
                                   dir="/tmp" if os.path.isdir("/tmp") else None)
            os.environ.update(LOCAL_ENVIRONMENT)  # for Ray's processes
            for name in _TOKEN_VARIABLES:
                os.environ.pop(name, None)  # a token of the user's (another cluster's) is not this one's
            os.environ["RAY_AUTH_TOKEN_PATH"] = _private_token(tmp)
            _reload_auth()
            ray_constants.ENABLE_RAY_CLUSTER = False  # for this one, if Ray was imported before
            home = os.path.join(tmp, "home")
            os.makedirs(home)
            open(os.path.join(home, "ray_bootstrap_config.yaml"), "w").close()  # no cloud probes
            os.environ["HOME"] = home  # inherited by Ray's processes, started by init
            # Ray makes its temporary folder open to every user (0777): it is one level down, in
            # the private folder, where no other user can enter
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                     object_store_memory=object_store_memory, _temp_dir=os.path.join(tmp, "r"),
                     log_to_driver=False, configure_logging=False, job_config=_job_config(ray))
        else:
            _join(ray, address)
        _put_back_sigterm(terminate)
        _restore({k: saved[k] for k in ("HOME", *hide)})  # this process keeps its home (and key)
        yield ray
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        _put_back_sigterm(terminate)
        ray_constants.ENABLE_RAY_CLUSTER = any_address
        _restore(saved)
        with contextlib.suppress(Exception):
            _reload_auth()  # the token of this cluster is forgotten before its file is removed
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _job_config(ray: Any) -> Any:
    """The run's Ray job: ragbridge's folder on the workers' path where this process found it off its
    path (an editable install's finder). Ray puts the driver's current folder first there, and a
    folder in it named ``ragbridge`` (a clone, run from above) would be imported as an empty package."""
    import ragbridge

    root = os.path.dirname(os.path.dirname(os.path.abspath(ragbridge.__file__)))
    on_path = {os.path.abspath(p) for p in sys.path if p}  # site-packages: it holds the libraries too
    return ray.job_config.JobConfig(_py_driver_sys_path=[] if root in on_path else [root])


def _sigterm_handler() -> Any:
    """This process's SIGTERM handler (None where it cannot be set again: not the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.getsignal(signal.SIGTERM)


def _put_back_sigterm(handler: Any) -> None:
    """Set ``handler`` (`_sigterm_handler`) for SIGTERM again. ``ray.init`` replaces it with one that
    exits at once (and Ray's native code with one that aborts), so that a terminated run would not
    record its end or remove its cluster; the command line's handler ends the run as Ctrl-C does."""
    if handler is not None and signal.getsignal(signal.SIGTERM) is not handler:
        signal.signal(signal.SIGTERM, handler)


def _private_token(folder: str) -> str:
    """A new random token in a file of ``folder`` (a private folder) that only this user can read;
    its path."""
    path = os.path.join(folder, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def _reload_auth() -> None:
    """Make Ray in this process read its authentication settings and token again (it caches both),
    as Ray's own tests do between clusters."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


_HOWTO = ("start the cluster with RAY_AUTH_MODE=token and give ragbridge its token in RAY_AUTH_TOKEN, in a "
          "file named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token (see README, Scaling out)")
_OPEN = "anyone who reaches it can run code on it, and the run's judge calls would pass through it"


def _join(ray: Any, address: str) -> None:
    """Connect to the cluster at ``address`` with token authentication (``RAY_AUTH_MODE=token``
    unless the user set it to ``token`` already): its token comes from ``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, as for any Ray client. A cluster that the user
    declared open (``RAY_AUTH_MODE=disabled``), or for which no token is found, is refused, and so is
    one that answers a request without a token (`_answers_without_token`): every judge call of the
    run passes through its workers, so anyone able to reach it could run code there."""
    from ray.exceptions import AuthenticationError

    mode = (os.environ.get("RAY_AUTH_MODE") or "token").lower()
    howto = _HOWTO
    if mode != "token":
        raise RunError(f"RAY_AUTH_MODE is {mode!r}: ragbridge joins a Ray cluster only with token "
                       f"authentication; {howto}")
    os.environ["RAY_AUTH_MODE"] = "token"
    _reload_auth()
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False, job_config=_job_config(ray))
    except AuthenticationError as exc:
        raise RunError(f"the Ray cluster at {address} refused the connection: {_first_line(exc)}; "
                       f"{howto}") from None
    gcs = _gcs_address(ray)
    if gcs is not None and _answers_without_token(gcs):
        ray.shutdown()
        raise RunError(f"the Ray cluster at {address} answers requests that carry no token: {_OPEN}; {howto}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _gcs_address(ray: Any) -> Optional[str]:
    """The address of the cluster's control store (None for a Ray Client connection, ``ray://``)."""
    node = getattr(ray._private.worker, "_global_node", None)
    return getattr(node, "gcs_address", None)


def _answers_without_token(gcs: str, timeout: float = 10.0) -> bool:
    """Whether the control store at ``gcs`` serves a request that carries no token (a request to list
    the keys of its store, where the cluster's code is kept, sent without Ray's token)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(gcs) as channel:
        stub = gcs_service_pb2_grpc.InternalKVGcsServiceStub(channel)
        try:
            stub.InternalKVKeys(gcs_service_pb2.InternalKVKeysRequest(prefix=b"rb-probe"), timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return False
            raise RunError(f"the Ray cluster's control store at {gcs} did not answer: "
                           f"{exc.code().name}") from None
    return True


def sweep_folders(parent: Optional[str] = None) -> None:
    """Remove the private folders (`FOLDER_PREFIX`) that local clusters of this user left in the
    temporary folder when their process was killed (``kill -9``: no clean-up ran): those whose
    process (the pid in the name) is gone. Another user's folders, and live ones, are left alone."""
    sweep_scratch(FOLDER_PREFIX, parent or ("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()))


def _restore(saved: dict[str, Optional[str]]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# --------------------------------------------------------------------------------------------
# Scoring blocks in a Ray process


class BackendScorer:
    """Scores blocks (`Block`) in a Ray process: a Ray actor for judged backends, or made and
    closed within one Ray task for local ones.

    Per backend, on its first block: the backend's environment defaults are applied in this process
    (before its library is imported), then ``open`` runs once with a `GatewayClient` as the judge;
    the session lasts until `close`. Blocks are scored on the scorer's own event loop, through the
    lifecycle's ``drive_job`` (a backend fault becomes each case's error, as in the local executor)."""

    def __init__(self, options: RunOptions, gateway: Optional[tuple] = None) -> None:
        from ..judge.remote import GatewayClient

        self.options = options
        self._gateway_spec = gateway
        self.gateway = GatewayClient(*gateway) if gateway is not None else None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ragbridge-scorer", daemon=True)
        self._thread.start()
        self._environment = contextlib.ExitStack()
        self._contexts: dict[str, ScoringContext] = {}
        self._backends: dict[str, Backend] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    def score(self, blocks: list[Block]) -> list[Item]:
        """Every score of ``blocks``, scored concurrently."""
        return asyncio.run_coroutine_threadsafe(self._score_all(blocks), self.loop).result()

    def close(self) -> None:
        """Close every backend this scorer opened (the last opened first), and its event loop."""
        async def close_all() -> None:
            for name, backend in reversed(list(self._backends.items())):
                await close_session(backend, self._contexts[name])

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=60)
        finally:
            self._backends = {}
            self._environment.close()
            self.loop.call_soon_threadsafe(self.loop.stop)

    async def _score_all(self, blocks: list[Block]) -> list[Item]:
        queue: asyncio.Queue = asyncio.Queue()

        async def job(name: str, metric: str, cases: CaseBatch, repeat: int) -> None:
            backend, ctx = await self._context(name)
            scored: asyncio.Queue = asyncio.Queue()
            await drive_job(backend, metric, cases, ctx, scored, repeat=repeat)
            while not scored.empty():
                item = scored.get_nowait()
                if isinstance(item, Score):  # a library version's backend scores under its name
                    item.backend = name
                queue.put_nowait(item)

        await asyncio.gather(*(job(name, metric, cases, repeat)
                               for name, metrics, cases in blocks for metric, repeat in metrics))
        return [queue.get_nowait() for _ in range(queue.qsize())]

    async def _context(self, name: str) -> tuple[Backend, ScoringContext]:
        """The backend a block names, opened on its first block; ``NAME==VERSION`` is NAME in the
        actor's runtime environment of that version, its calls and scores under the versioned name."""
        from ..judge.remote import GatewayClient
        from .isolated import split_name

        async with self._opening.setdefault(name, asyncio.Lock()):
            if name not in self._contexts:
                base, version = split_name(name)
                backend = get_backends()[base]
                backend = backend.load() if callable(getattr(backend, "load", None)) else backend
                judge = self.gateway
                if version is not None:
                    if backend.version() != version:
                        raise RuntimeError(f"this Ray worker has {base} {backend.version()}, not {version}")
                    judge = self._gateway_spec and GatewayClient(*self._gateway_spec, aliases={base: name})
                self._environment.enter_context(applied_environment(backend.environment()))
                ctx = ScoringContext(options=self.options, judge=judge)  # type: ignore[arg-type]
                self._contexts[name] = await open_session(backend, ctx)
                self._backends[name] = backend
        return self._backends[name], self._contexts[name]


def score_blocks(blocks: list[Block], options: RunOptions) -> list[Item]:
    """`BackendScorer` as a plain function (a Ray task), for backends without a judge, whose ``open``
    is cheap: the session lasts one task."""
    scorer = BackendScorer(options)
    try:
        return scorer.score(blocks)
    finally:
        scorer.close()


# --------------------------------------------------------------------------------------------
# The executor


@dataclass
class RayExecutor(Executor):
    """Score a run's jobs on Ray (see the module docstring).

    ``address``: an existing cluster (``ray://...`` or ``HOST:PORT``, or ``auto``); None starts a
    private local one for the run (``num_cpus``: its CPUs, i.e. the tasks it runs at once, default
    all of the machine's; ``object_store_memory``), unless this process is connected to a cluster
    already. ``gateway_host``: the driver machine's address the workers reach the judge gateway at
    (default 127.0.0.1, required when the cluster has nodes on other machines). ``actors``: scorer
    actors for the judged backends (each holds every backend's session; a judged actor asks for no
    CPU, it waits on the judge), ``calls_per_actor`` blocks each at once; ``batch_size``: cases per
    judged block (default the judge's ``max_concurrency``); ``native_block_rows``: cases per block
    of a local backend's task (default: each batch cut in one block per CPU of the cluster, of at
    least `MIN_BLOCK_ROWS`)."""

    address: Optional[str] = None
    gateway_host: Optional[str] = None
    num_cpus: Optional[int] = None
    object_store_memory: Optional[int] = DEFAULT_OBJECT_STORE
    actors: int = 2
    batch_size: Optional[int] = None
    native_block_rows: Optional[int] = None
    calls_per_actor: int = 2

    def __post_init__(self) -> None:
        from ..judge.hosts import is_wildcard

        if self.gateway_host is not None and is_wildcard(self.gateway_host.strip("[]")):
            said = (f"{self.gateway_host!r} listens on every address of the machine: give this machine's "
                    "one address that the workers reach it at")
            raise RunError(f"gateway_host {said}", cli=f"--gateway-host {said}")

    @contextlib.asynccontextmanager
    async def session(self, plan: Plan, ctx: ScoringContext) -> AsyncIterator["_Cluster"]:
        cluster = _Cluster(self, ctx)
        try:
            yield cluster
        except BaseException:  # a failure, Ctrl-C or SIGTERM: the cluster ends now, without waiting
            cluster.close(wait=False)
            raise
        cluster.close()


class _Cluster(ExecutorSession):
    """One run on Ray: the cluster, started on the first job; the scorer actors, made on the first
    judged job; both ended by `close`."""

    def __init__(self, executor: RayExecutor, ctx: ScoringContext):
        self.executor, self.ctx = executor, ctx
        self.ray: Any = None
        self.actors: list[Any] = []
        #: per library version's backend (``mylib==1.2``): its scorer actors, in its runtime environment
        self.isolated: dict[str, list[Any]] = {}
        self._next_actor = 0
        self._cpus = 1
        self._task: Any = None
        self._stack = contextlib.ExitStack()

    def _connect(self) -> Any:
        if self.ray is None:
            ex = self.executor
            self.ray = self._stack.enter_context(ray_session(
                ex.address, num_cpus=ex.num_cpus, object_store_memory=ex.object_store_memory,
                hide=_key_variables(self.ctx.judge)))
            self._cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
            self._task = self.ray.remote(num_cpus=1, max_retries=MAX_RESTARTS)(score_blocks)
        return self.ray

    def _scorers(self, name: Optional[str] = None) -> list[Any]:
        """The scorer actors; for a library version's backend (``name``: ``mylib==1.2``), those of its
        own runtime environment."""
        if name is not None and "==" in name:
            if name not in self.isolated:
                from .isolated import ray_runtime_env

                self.isolated[name] = self._make_scorers(ray_runtime_env(name))
            return self.isolated[name]
        if not self.actors:
            self.actors = self._make_scorers(None)
        return self.actors

    def _make_scorers(self, runtime_env: Optional[dict]) -> list[Any]:
        ray, ex = self.ray, self.executor
        gateway = self._gateway_spec(ray, self.ctx.judge) if self.ctx.judge is not None else None
        settings: dict[str, Any] = dict(num_cpus=0, max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS,
                                        max_concurrency=max(1, ex.calls_per_actor))
        if runtime_env is not None:
            settings["runtime_env"] = runtime_env
        actor = ray.remote(**settings)(BackendScorer)
        return [actor.remote(self.ctx.options, gateway) for _ in range(max(1, ex.actors))]

    async def score(self, jobs: list[Job], record: Record) -> None:
        self._connect()
        # a library version's backend is scored by actors in its own environment, judged or not
        judged = {(b.name, id(c)) for b, m, c, _ in jobs if b.needs_judge(m) or "==" in b.name}
        refs = []
        for blocks, is_judged in self._blocks(jobs, judged):
            if is_judged:
                actors = self._scorers(blocks[0][0] if blocks else None)
                for block in blocks:
                    actor = actors[self._next_actor % len(actors)]
                    self._next_actor += 1
                    refs.append(actor.score.remote([block]))
            else:
                refs += [self._task.remote([block], self.ctx.options) for block in blocks]
        for done in asyncio.as_completed([asyncio.wrap_future(ref.future()) for ref in refs]):
            try:
                items = await done
            except Exception as exc:  # a Ray failure (a backend's own faults are its cases' errors)
                raise RunError(ray_failure(exc)) from None
            for item in items:
                record(item)

    def _blocks(self, jobs: list[Job], judged: set) -> Iterator[tuple[list[Block], bool]]:
        """The jobs as blocks: per backend and list of cases, every metric of it in one block of
        each slice of the cases (so a local backend shares its work per block over its metrics)."""
        grouped: dict[tuple[str, int], tuple[CaseBatch, list[tuple[str, int]]]] = {}
        for backend, metric, cases, repeat in jobs:
            grouped.setdefault((backend.name, id(cases)), (cases, []))[1].append((metric, repeat))
        ex = self.executor
        for (name, key), (cases, metrics) in grouped.items():
            cases = CaseBatch.of_cases(cases)
            if (name, key) in judged:
                size = ex.batch_size or (self.ctx.judge.config.max_concurrency if self.ctx.judge else 64)
                # one block per metric and slice: the judged calls of a slice spread over the actors
                yield [(name, [mr], cases[i:i + size]) for mr in metrics
                       for i in range(0, len(cases), size)], True
            else:
                size = ex.native_block_rows or max(MIN_BLOCK_ROWS, math.ceil(len(cases) / self._cpus))
                yield [(name, metrics, cases if size >= len(cases) else cases[i:i + size])
                       for i in range(0, len(cases), size)], False

    def close(self, wait: bool = True) -> None:
        """Close the scorers' backends (``wait``: else their actors are ended as they are), then shut
        the cluster down (if this session started it)."""
        isolated = [a for pool in self.isolated.values() for a in pool]
        try:
            if (self.actors or isolated) and wait:
                with contextlib.suppress(Exception):
                    self.ray.get([a.close.remote() for a in [*self.actors, *isolated]], timeout=60)
            for a in [*self.actors, *isolated]:
                with contextlib.suppress(Exception):
                    self.ray.kill(a)
        finally:
            self.actors = []
            self.isolated = {}
            self._stack.close()
            self.ray = None

    def _gateway_spec(self, ray: Any, gateway: Any) -> tuple:
        from ..judge.remote import GatewayClient

        host = self.executor.gateway_host
        if host is None:
            here = {"127.0.0.1", "localhost", ray.util.get_node_ip_address()}
            elsewhere = sorted({n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")} - here)
            if elsewhere:
                raise RunError(
                    "the Ray cluster has nodes on other machines (" + ", ".join(elsewhere) + "): pass "
                    "--gateway-host with this machine's address that they reach it at (the judge gateway "
                    "listens there; its traffic is plain HTTP, so use it on a trusted network only)")
            host = "127.0.0.1"
        if not gateway.listening:
            gateway.host = host
        return GatewayClient.spec(gateway)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def ray_failure(exc: BaseException) -> str:
    """What a failure of Ray's means for the run, in a few lines: which part of the cluster failed and
    the cause Ray gives last (its messages hold tracebacks and terminal colours)."""
    from ray import exceptions as rx

    lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines()]
    lines = [line for line in lines if line and not set(line) <= set("^~ ")]
    cause = next((line for line in reversed(lines) if re.match(r"^[A-Za-z_][\w.]*(Error|Exception)\b", line)),
                 lines[0] if lines else type(exc).__name__)
    install = ("ragbridge, its plugins and the backends' libraries must be importable on every node of "
               "the cluster")
    if isinstance(exc, rx.ActorDiedError) and "creation task" in str(exc):
        what = f"a scorer actor could not start on the cluster: {cause} ({install})"
    elif isinstance(exc, rx.ActorDiedError):
        what = (f"a scorer actor's process died {MAX_RESTARTS + 1} times (Ray restarts it "
                f"{MAX_RESTARTS} times): {cause}")
    elif isinstance(exc, rx.WorkerCrashedError):
        what = (f"a scoring task's worker process died {MAX_RESTARTS + 1} times (Ray runs it again "
                f"{MAX_RESTARTS} times): {cause}")
    elif "failed to import on the worker" in str(exc):
        what = f"a scoring task could not load on the cluster: {cause} ({install})"
    else:
        what = f"{type(exc).__name__}: {cause}"
    return f"the Ray executor failed: {what}; what was scored is kept: run the same command again to resume"


def _key_variables(judge: Any) -> list[str]:
    """The environment variables that hold the judge's keys (taken out of Ray's sight)."""
    if judge is None:
        return []
    return [v for v in (judge.config.api_key_env, judge.config.embedding_api_key_env) if v]
