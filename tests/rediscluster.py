"""A real Redis Cluster on loopback for the tests: ``masters`` redis-server processes with ``--cluster-enabled
yes`` (plus ``replicas`` replicas each), joined by ``redis-cli --cluster create``, persisted with AOF synced on
every write, torn down (processes and data directories) on exit.

Each node needs two free ports: its own and its cluster bus port (port + 10000), so ports are drawn below
55535 and both checked free. ``kill(port)`` SIGKILLs one node (a master's replica is then promoted after
``cluster-node-timeout``, 2 s here)."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from redis import Redis

from fair_router.demo.harness import stop_processes
from fair_router.demo.redis_server import find_redis_server

NODE_TIMEOUT_MS = 2000


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int, taken: set[int]) -> list[int]:
    """``count`` ports below 55535 whose bus ports (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 45000)
        if port in taken or port + 10000 in taken or not _free(port) or not _free(port + 10000):
            continue
        taken.update((port, port + 10000))
        ports.append(port)
    return ports


@dataclass
class ClusterNode:
    port: int
    dir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> Redis:
        return Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=2)


@dataclass
class RedisClusterFixture:
    """Context manager running a private Redis Cluster (module docstring)."""

    masters: int = 3
    replicas: int = 0
    nodes: list[ClusterNode] = field(default_factory=list)
    _root: tempfile.TemporaryDirectory[str] | None = None

    @property
    def seed_url(self) -> str:
        """Any node's URL (the first): with redis_cluster on, a seed is all a client needs."""
        return self.nodes[0].url

    def start(self) -> RedisClusterFixture:
        binary = find_redis_server()
        cli = shutil.which("redis-cli") or str(Path(binary).with_name("redis-cli"))
        self._root = tempfile.TemporaryDirectory(prefix="fair-router-cluster-")
        ports = free_cluster_ports(self.masters * (1 + self.replicas), set())
        for port in ports:
            node = ClusterNode(port, Path(self._root.name) / str(port))
            node.dir.mkdir()
            node.process = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node.dir),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "yes", "--appendfsync", "always",
                 "--save", "", "--daemonize", "no", "--loglevel", "warning"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.nodes.append(node)
        try:
            for node in self.nodes:
                self._wait(lambda node=node: node.client().ping(), f"node {node.port} to answer PING")
            created = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                capture_output=True, timeout=60)
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout.decode()[-2000:]}"
                                   f"{created.stderr.decode()[-2000:]}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def alive(self) -> list[ClusterNode]:
        return [node for node in self.nodes if node.process is not None and node.process.poll() is None]

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every live node says cluster_state:ok and knows every slot's owner."""
        def ok() -> bool:
            for node in self.alive():
                info = node.client().execute_command("CLUSTER INFO")  # redis-py parses it into a dict
                if str(info.get("cluster_state")) != "ok" or int(info.get("cluster_slots_assigned", 0)) != 16384:
                    return False
            return True
        self._wait(ok, "cluster_state:ok on every node", timeout)

        def synced() -> bool:  # a replica that never synced with its master cannot be promoted
            for node in self.alive():
                info = node.client().info("replication")
                if info.get("role") == "slave" and info.get("master_link_status") != "up":
                    return False
            return True
        self._wait(synced, "every replica in sync with its master", timeout)

    def master_of(self, key: str) -> ClusterNode:
        """The node that owns ``key``'s slot now (asked of a live node)."""
        client = self.alive()[0].client()
        slot = int(client.execute_command("CLUSTER KEYSLOT", key))
        for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
            if int(start) <= slot <= int(end):
                port = int(master[1])
                return next(node for node in self.nodes if node.port == port)
        raise LookupError(f"no owner of slot {slot}")

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node (no shutdown, no final save)."""
        if node.process is not None:
            node.process.kill()
            node.process.wait()

    def stop(self) -> None:
        stop_processes([node.process for node in self.nodes if node.process is not None and
                        node.process.poll() is None], grace=5)
        if self._root is not None:
            self._root.cleanup()
            self._root = None

    @staticmethod
    def _wait(condition: object, what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if condition():  # type: ignore[operator]
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis cluster: timed out after {timeout} s waiting for {what}")
            time.sleep(0.05)

    def __enter__(self) -> RedisClusterFixture:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
