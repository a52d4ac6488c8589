"""The worker: one backend scored in a process of its own, in the environment of its library's version
(``python -m ragbridge.run.worker``, started by `ragbridge.run.isolated`).

The pipe's protocol (version `PROTOCOL`): one JSON document a line, UTF-8, in both directions; the
run writes to the worker's stdin, the worker writes to what was its stdout (anything its libraries
print goes to stderr instead, which the run keeps the last lines of).

run -> worker
    ``{"ragbridge_worker": 1, "backend": "mylib", "name": "mylib==1.2", "plugin": "ragbridge_mylib",
    "options": `options_record`, "judge": [gateway URL, gateway key, judge settings] | null}``
    first, once; then any number of ``{"op": "score", "job": N, "metric": M, "repeat": R, "cases":
    [canonical records]}`` (jobs run concurrently), ``{"op": "cancel", "job": N}``, and last
    ``{"op": "close"}``. The end of stdin (the run is gone) closes the worker as ``close`` does; a run
    that is gone ends it within a second even while a library holds its event loop (`watch_parent`).
worker -> run
    ``{"ragbridge_worker": 1, "ready": true, "version": the library's version, "metrics": [...],
    "pid": N, "python": "3.11.7"}`` (or ``"ready": false, "error": ...``) once the backend is open;
    per job, one ``{"job": N, "score": {a Score}}`` per case, then ``{"job": N, "done": true}``;
    ``{"closed": true}`` once every backend session is closed; ``{"alive": true}`` every
    `ALIVE_SECONDS` from the worker's event loop, so the run sees a loop that a library's blocking
    call holds (it ends such a worker: `ragbridge.run.isolated`).

The backend runs through the lifecycle every executor uses (`ragbridge.run.lifecycle`): its
environment defaults, ``open``, one score per case whatever it does, ``close``. Its judge is a
`ragbridge.judge.remote.GatewayClient` of the run's gateway, whose calls are counted under the
versioned name; the key it sends is the gateway's per-run key, which comes down the pipe.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any, BinaryIO

__all__ = ["PROTOCOL", "LINE_LIMIT", "ALIVE_SECONDS", "options_record", "main"]

PROTOCOL = 1
#: how often the worker's event loop says it is alive
ALIVE_SECONDS = 1.0
#: the longest line either side reads (a job's cases are one line)
LINE_LIMIT = 1 << 30


def options_record(options: Any) -> dict[str, Any]:
    """``options`` (the run's `RunOptions`) as the hello sends them: each backend's options as a
    mapping, checked again by the worker's backend; the chunking left out (no backend in a worker
    scores against a corpus)."""
    return options.model_dump(mode="json", exclude={"chunking"})


class _Channel:
    """The protocol's side of the worker: lines written whole, one at a time."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def send(self, message: dict) -> None:
        self.send_line(json.dumps(message, ensure_ascii=False, allow_nan=False))

    def send_line(self, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass") + b"\n"
        view = memoryview(data)
        while view:
            view = view[self.out.write(view):]


class _Scores:
    """What `drive_job` puts scores on: each sent down the pipe as it comes."""

    def __init__(self, channel: _Channel, job: int) -> None:
        self.channel, self.job = channel, job

    async def put(self, item: Any) -> None:
        from ..schema import ScoreBlock, json_of

        for score in item.scores() if isinstance(item, ScoreBlock) else (item,):
            self.channel.send_line(f'{{"job":{self.job},"score":{json_of(score)}}}')


async def _lines(limit: int = LINE_LIMIT) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    return reader


async def serve(channel: _Channel) -> None:
    """Read the run's messages and answer them (the module docstring), until ``close`` or the end of
    stdin."""
    import contextlib
    import importlib
    import platform

    reader = await _lines()
    hello = json.loads(await reader.readline() or b"{}")
    if hello.get("ragbridge_worker") != PROTOCOL:
        channel.send({"ragbridge_worker": PROTOCOL, "ready": False,
                      "error": f"this worker speaks protocol {PROTOCOL}, the run "
                               f"{hello.get('ragbridge_worker')}"})
        return
    from ..backend import RunOptions, ScoringContext
    from ..formats.batches import CaseBatch
    from ..plugins import get_backends, load_plugins, pm
    from .lifecycle import applied_environment, close_session, drive_job, open_session

    base, name = hello["backend"], hello["name"]
    load_plugins()
    if base not in get_backends():
        try:
            plugin = importlib.import_module(hello["plugin"])
            if not pm.is_registered(plugin):
                pm.register(plugin, name=base)
        except Exception as exc:
            channel.send({"ragbridge_worker": PROTOCOL, "ready": False,
                          "error": f"cannot load the plugin {hello['plugin']}: {type(exc).__name__}: {exc}"})
            return
    backend = get_backends()[base]
    backend = backend.load() if callable(getattr(backend, "load", None)) else backend
    options = RunOptions(**hello["options"])
    judge = None
    if hello.get("judge"):
        from ..judge.remote import GatewayClient

        url, key, config = hello["judge"]
        judge = GatewayClient(url, key, config, aliases={base: name})
    with contextlib.ExitStack() as stack:
        stack.enter_context(applied_environment(backend.environment()))
        ctx = await open_session(backend, ScoringContext(options=options, judge=judge))
        channel.send({"ragbridge_worker": PROTOCOL, "ready": True, "version": backend.version(),
                      "metrics": [spec.name for spec in backend.metrics_for(options)], "pid": os.getpid(),
                      "python": platform.python_version()})
        tasks: dict[int, asyncio.Task] = {}

        async def alive() -> None:
            while True:
                await asyncio.sleep(ALIVE_SECONDS)
                channel.send({"alive": True})

        beat = asyncio.create_task(alive())

        async def job(msg: dict) -> None:
            jid = int(msg["job"])
            try:
                await drive_job(backend, msg["metric"], CaseBatch(msg["cases"]), ctx, _Scores(channel, jid),
                                repeat=int(msg.get("repeat") or 0))
                channel.send({"job": jid, "done": True})
            finally:
                tasks.pop(jid, None)

        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                msg = json.loads(line)
                op = msg.get("op")
                if op == "score":
                    tasks[int(msg["job"])] = asyncio.create_task(job(msg))
                elif op == "cancel" and int(msg.get("job", -1)) in tasks:
                    tasks[int(msg["job"])].cancel()
                elif op == "close":
                    break
        finally:
            beat.cancel()
            for task in list(tasks.values()):
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            await close_session(backend, ctx)
    channel.send({"closed": True})


#: how often the worker checks that its run is alive (`watch_parent`)
PARENT_SECONDS = 0.5


def watch_parent(interval: float = PARENT_SECONDS) -> None:
    """End this process as soon as its parent (the run) is gone, whatever its event loop is doing: a
    thread that looks every ``interval`` seconds. The end of stdin says the same, but only to a loop
    that reads it, and a library's blocking call can hold the loop; a run killed outright (two
    Ctrl-Cs, ``kill -9``) leaves no worker behind this way."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(1)

    if parent != 1:
        threading.Thread(target=watch, name="ragbridge-parent-watch", daemon=True).start()


def main() -> None:
    """The worker's process: the protocol on what was stdout, every other output on stderr."""
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a library's print() goes to stderr, never into the pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run ends the worker (its pipe), not a Ctrl-C
    watch_parent()
    asyncio.run(serve(_Channel(out)))
    # every session is closed and said so: leave without the interpreter's teardown of the library's
    # modules (seconds with a library's dependencies loaded), as the command line does
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
