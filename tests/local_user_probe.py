"""What another user of the machine can do to a Ray cluster that a run started: run as that user (by
tests/test_ray_executor.py, under ``setpriv``), one bounded attempt of each kind, the results printed
as one JSON object.

    python local_user_probe.py < TARGETS_JSON

TARGETS (on stdin, so that the secrets searched for are in no file):
``{"ports": [...], "gcs": "HOST:PORT", "folder": ..., "token_path": ..., "secrets": [...]}``.

* Ray's own client (``GcsClient``) connecting to the control store, without a token and with a
  guessed one, and listing the keys of its store (where the cluster's code is kept);
* every listening port of the cluster's processes: read calls of each Ray service and one write,
  sent without a token (``grpc``), and a POST to the runtime-environment agent's route (HTTP);
* the run's private folder and token file, and every file under ``/tmp`` and ``/dev/shm`` this user
  can read (at most `MAX_FILES` files of at most 4 MB, 256 MB in all) and every process's command
  line, searched for the token, the judge's key and the gateway's key.
"""

from __future__ import annotations

import json
import os
import socket
import sys

#: (method, request): read calls of each service a Ray process serves, and one write, all harmless
CALLS = [
    ("/ray.rpc.InternalKVGcsService/InternalKVKeys", b""),
    ("/ray.rpc.InternalKVGcsService/InternalKVPut", b"\n\x08rb-probe\x12\x01x"),  # key, value
    ("/ray.rpc.NodeInfoGcsService/GetAllNodeInfo", b""),
    ("/ray.rpc.ActorInfoGcsService/GetAllActorInfo", b""),
    ("/ray.rpc.JobInfoGcsService/GetAllJobInfo", b""),
    ("/ray.rpc.NodeManagerService/GetNodeStats", b""),
    ("/ray.rpc.NodeManagerService/GetSystemConfig", b""),
    ("/ray.rpc.CoreWorkerService/GetCoreWorkerStats", b""),
    ("/ray.rpc.CoreWorkerService/NumPendingTasks", b""),
    ("/ray.rpc.ObjectManagerService/Pull", b""),  # of no object, for no node
    ("/ray.rpc.ReporterService/HealthCheck", b""),
    ("/ray.rpc.LogService/ListLogs", b""),
]
MAX_FILES = 20_000
MAX_BYTES = 4 << 20
MAX_TOTAL = 256 << 20


def ray_client(gcs: str) -> dict[str, str]:
    """Ray's client of the control store, without a token and with a guessed one: what each got."""
    from ray._raylet import GcsClient

    out = {}
    for name, token in (("no token", None), ("guessed token", "0" * 64)):
        if token is not None:
            os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
        try:
            keys = GcsClient(address=gcs).internal_kv_keys(b"", namespace=None, timeout=5)
            out[name] = f"OK: {len(keys)} keys"
        except Exception as exc:  # noqa: BLE001 - what the attempt got is the result
            out[name] = f"{type(exc).__name__}"
    return out


def grpc_calls(port: int) -> dict[str, str]:
    """Each call of `CALLS` on ``port``, without a token: its status code's name."""
    import grpc

    out = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        for method, request in CALLS:
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            try:
                call(request, timeout=5)
                out[method] = "OK"
            except grpc.RpcError as exc:
                out[method] = exc.code().name
    return out


def http_post(port: int) -> str:
    """The status line of a POST to the runtime-environment agent's route on ``port`` (or what came)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"POST /get_runtime_envs_info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            data = s.recv(200)
    except OSError as exc:
        return f"error {type(exc).__name__}"
    return data.split(b"\r\n", 1)[0].decode("latin-1") if data.startswith(b"HTTP/") else "not HTTP"


def readable(targets: dict) -> dict:
    """The private folder and the token as this user sees them, and the files that hold a secret."""
    out: dict = {"found": []}
    try:
        out["folder"] = sorted(os.listdir(targets["folder"]))
    except OSError as exc:
        out["folder"] = f"error {type(exc).__name__}"
    try:
        with open(targets["token_path"], "rb") as f:
            out["token"] = f"read {len(f.read())} bytes"
    except OSError as exc:
        out["token"] = f"error {type(exc).__name__}"
    secrets = [s.encode() for s in targets["secrets"] if s]
    seen = total = 0
    for top in ("/tmp", "/dev/shm"):
        for d, _, files in os.walk(top, onerror=lambda e: None):
            for name in files:
                path = os.path.join(d, name)
                try:
                    if (seen >= MAX_FILES or total > MAX_TOTAL or os.path.islink(path)
                            or os.path.getsize(path) > MAX_BYTES):
                        continue
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                seen, total = seen + 1, total + len(data)
                if any(s in data for s in secrets):
                    out["found"].append(path)
    out["searched"] = seen
    for pid in filter(str.isdigit, os.listdir("/proc")):  # every process's command line is public
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if any(s in f.read() for s in secrets):
                    out["found"].append(f"/proc/{pid}/cmdline")
        except OSError:
            continue
    return out


def main() -> None:
    targets = json.load(sys.stdin)
    report = {"uid": os.getuid(), "grpc": {}, "http": {}}
    for port in targets["ports"]:
        report["grpc"][str(port)] = grpc_calls(port)
        report["http"][str(port)] = http_post(port)
    report.update(readable(targets))
    report["ray_client"] = ray_client(targets["gcs"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
