"""A local autoscaling Ray cluster: Ray's fake multi-node provider, run as processes on this machine.

Holds `local_autoscaling_cluster` (a context manager that starts the head from
cluster/local-autoscaling.yaml, yields its address, and tears every process it started down),
`worker_nodes` (which nodes the autoscaler started, and when), and a CLI that runs one command against
a fresh cluster:

    python cluster/local.py run -- python sweeps/objective_weights.py --preset smoke \
        --address {address} --storage file:///tmp/bert-objectives-local --name smoke

`{address}` in the command is replaced with the head's GCS address (also exported as
RAY_ADDRESS). The head advertises 0 CPUs, so work only runs once the autoscaler has started
worker nodes; they stop again after the config's idle timeout. The storage is a ``file://`` URI: a plain
folder is refused on a cluster whose head has no CPUs (on a real one it is one machine's disk), and every
node of this one is this machine.

Why not `ray.cluster_utils.AutoscalingCluster`: the Ray 2.60 wheel does not ship the
`fake_multi_node/example.yaml` it reads, and its start/shutdown run `ray stop --force`, which
kills every Ray process of this user on the machine, not just this cluster's. Here the head
runs in its own session with a private temp dir and private ports, and teardown signals only
the processes of that session.

Token auth: the cluster inherits the caller's RAY_AUTH_MODE. Tests set RAY_AUTH_MODE=disabled
(a test-only setting); with RAY_AUTH_MODE=token, run `ray get-auth-token --generate` first.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import psutil
import yaml

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parent / "local-autoscaling.yaml"
HEAD_OBJECT_STORE_BYTES = 200_000_000


class LocalClusterError(RuntimeError):
    """The local cluster did not come up (the message carries the head's log tail)."""


@dataclass(frozen=True)
class LocalCluster:
    """A running local autoscaling cluster."""

    address: str  # GCS address "host:port": ray.init(address=...) / --address
    dashboard_url: str  # http://127.0.0.1:<port>; serves only where ray[default] is installed
    temp_dir: Path  # Ray's session/log root for this cluster only
    config_path: Path  # the filled-in autoscaler config the head runs with
    head_pid: int  # `ray start --head --block`; its session id marks all our processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build_local_config(config_path: Path, gcs_address: str) -> dict:
    """The autoscaler config from `config_path` with the provider pointed at `gcs_address`."""
    config = yaml.safe_load(Path(config_path).read_text())
    if config.get("provider", {}).get("type") != "fake_multinode":
        raise ValueError(
            f"{config_path}: provider.type must be 'fake_multinode' for a local cluster, "
            f"got {config.get('provider', {}).get('type')!r}"
        )
    config["provider"]["gcs_address"] = gcs_address
    return config


def _head_command(config_file: Path, temp_dir: Path, ports: Mapping[str, int]) -> list[str]:
    return [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
        f"--autoscaling-config={config_file}",
        f"--temp-dir={temp_dir}",
        f"--port={ports['gcs']}",
        f"--dashboard-port={ports['dashboard']}",
        "--dashboard-host=127.0.0.1",
        f"--ray-client-server-port={ports['client']}",
        "--dashboard-agent-listen-port=0",
        "--num-cpus=0",
        "--num-gpus=0",
        f"--object-store-memory={HEAD_OBJECT_STORE_BYTES}",
        "--disable-usage-stats",
    ]


def _wait_for_head(address: str, head: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Block until the GCS answers and the head node is registered."""
    from ray._raylet import GcsClient  # the same client the CLI uses; no driver needed

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise LocalClusterError(f"ray start exited with {head.returncode}:\n{_tail(log)}")
        try:
            if GcsClient(address=address).get_all_node_info(timeout=2):
                return
        except Exception:  # noqa: BLE001 -- GCS not up yet; any error means "retry"
            pass
        time.sleep(0.5)
    raise LocalClusterError(f"head at {address} not up after {timeout_s:.0f}s:\n{_tail(log)}")


def _tail(log: Path, n: int = 30) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(lines[-n:])


def _session_processes(sid: int) -> list[psutil.Process]:
    """Every live (non-zombie) process in session `sid`, except this one."""
    procs = []
    for proc in psutil.process_iter():
        try:
            if (proc.pid != os.getpid() and os.getsid(proc.pid) == sid
                    and proc.status() != psutil.STATUS_ZOMBIE):
                procs.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return procs


def _signal_until_gone(sid: int, sig: int, grace_s: float) -> list[psutil.Process]:
    """Send `sig` to session `sid` and wait up to `grace_s`; returns the survivors."""
    for proc in _session_processes(sid):
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    deadline = time.monotonic() + grace_s
    while (alive := _session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def stop_cluster(head: subprocess.Popen, grace_s: float = 5.0) -> None:
    """Stop the head (it shuts its own processes down), then any process left in its session.

    The head was started with start_new_session, so its session id is its pid and every Ray
    process of this cluster -- GCS, raylets, the autoscaler, the worker nodes it started and
    their workers -- inherited that session; no other process on the machine has it.
    """
    sid = head.pid
    head.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(timeout=grace_s)
    if _signal_until_gone(sid, signal.SIGTERM, grace_s):
        survivors = _signal_until_gone(sid, signal.SIGKILL, grace_s)
        if survivors:
            logger.warning("processes still alive after SIGKILL: %s", [p.pid for p in survivors])
    if head.poll() is None:
        head.kill()
    head.wait()


@contextlib.contextmanager
def local_autoscaling_cluster(
    config_path: Path = DEFAULT_CONFIG,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float = 120.0,
) -> Iterator[LocalCluster]:
    """Start a head from `config_path`, yield it, then stop every process it started.

    `env` overrides the environment of all cluster processes (e.g. RAY_AUTH_MODE in tests).
    """
    from ray._private.services import get_node_ip_address

    temp_dir = Path(tempfile.mkdtemp(prefix="ray-local-"))
    ports = {name: _free_port() for name in ("gcs", "dashboard", "client")}
    address = f"{get_node_ip_address()}:{ports['gcs']}"
    config_file = temp_dir / "autoscaling.yaml"
    config_file.write_text(yaml.safe_dump(build_local_config(config_path, address)))
    proc_env = {**os.environ, **(env or {}), "RAY_FAKE_CLUSTER": "1",
                "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
    log = temp_dir / "head.log"
    with open(log, "wb") as out:
        head = subprocess.Popen(_head_command(config_file, temp_dir, ports), env=proc_env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_head(address, head, log, start_timeout_s)
        yield LocalCluster(address, f"http://127.0.0.1:{ports['dashboard']}", temp_dir,
                           config_file, head.pid)
    finally:
        stop_cluster(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


@dataclass(frozen=True)
class WorkerNode:
    """A non-head node that joined the cluster (started by the autoscaler)."""

    node_id: str
    node_type: str  # the config's node type name, e.g. "ray.worker.cpu"
    started_at: float  # unix time (s) the node registered with the GCS
    alive: bool


def worker_nodes(address: str) -> list[WorkerNode]:
    """Every non-head node that ever joined the cluster at `address`, alive or not, by start."""
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    nodes = GcsClient(address=address).get_all_node_info(timeout=10)
    workers = [WorkerNode(node_id.hex(), info.node_type_name, info.start_time_ms / 1000,
                          info.state == GcsNodeInfo.ALIVE)
               for node_id, info in nodes.items() if not info.is_head_node]
    return sorted(workers, key=lambda node: node.started_at)


def _substitute(command: Sequence[str], cluster: LocalCluster) -> list[str]:
    return [arg.replace("{address}", cluster.address)
            .replace("{dashboard}", cluster.dashboard_url) for arg in command]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="start a cluster, run COMMAND against it, tear it down")
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="after --; {address} / {dashboard} are substituted")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with local_autoscaling_cluster(args.config) as cluster:
        print(f"local cluster up: address={cluster.address} dashboard={cluster.dashboard_url}")
        started = time.monotonic()
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        code = subprocess.call(_substitute(command, cluster), env=env)
        workers = worker_nodes(cluster.address)
        print(json.dumps({"exit_code": code, "worker_nodes_started": len(workers),
                          "seconds": round(time.monotonic() - started, 1)}))
    return code


if __name__ == "__main__":
    sys.exit(main())
