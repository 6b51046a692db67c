"""A real Redis Cluster on loopback: six Debian `redis-server` processes in cluster mode,
made into three primaries with one replica each by `redis-cli --cluster create`.

A short node timeout (one second) makes a replica take over a killed primary within a
few seconds, as `cluster-node-timeout` does in production over a longer time. Each node
has its cluster bus on a port of its own (`cluster-port`), so that nothing is assumed
about the port 10000 above it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis

from .redisserver import RedisServer
from .serving import free_port, wait_until

NODE_TIMEOUT_MS = 1000


def redis_cli_binary(server_binary: str) -> str:
    """`redis-cli`, from the same package as `redis-server`."""
    beside = Path(server_binary).with_name("redis-cli")
    return str(beside) if beside.exists() else shutil.which("redis-cli") or "redis-cli"


class RedisCluster:
    """Three primaries and three replicas; `kill_primary_of(key)` fails over a shard."""

    def __init__(self, binary: str, shards: int = 3) -> None:
        self.binary = binary
        self.nodes = [
            RedisServer(
                binary,
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    str(free_port()),
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    "--cluster-config-file",
                    "nodes.conf",
                    # A shard without a primary does not stop the others.
                    "--cluster-require-full-coverage",
                    "no",
                    # Replicas copy their primary at once, not after the default 5 s.
                    "--repl-diskless-sync-delay",
                    "0",
                ),
            )
            for _ in range(shards * 2)
        ]

    @property
    def urls(self) -> list[str]:
        """Seed nodes for a client: one per shard's first member is enough, all are given."""
        return [f"redis://{node.address}" for node in self.nodes]

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            subprocess.run(
                [
                    redis_cli_binary(self.binary),
                    "--cluster",
                    "create",
                    *(node.address for node in self.nodes),
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=30,
            )
            wait_until(self._settled, 30, "the cluster to cover every slot with replicas")
        except BaseException:
            self.stop()
            raise
        return self

    def client(self) -> redis.RedisCluster:
        """A plain synchronous cluster client, as an operator would use."""
        live = next(node for node in self.nodes if node.process and node.process.poll() is None)
        return redis.RedisCluster(host="127.0.0.1", port=live.port, socket_timeout=5)

    def primary_of(self, key: str) -> RedisServer:
        """The node that serves `key`'s slot now."""
        with self.client() as cluster:
            node = cluster.get_node_from_key(key)
            assert node is not None
            return next(n for n in self.nodes if n.port == int(node.port))

    def kill_primary_of(self, key: str) -> RedisServer:
        """Kill (SIGKILL) the primary of `key`'s shard; its replica takes over."""
        primary = self.primary_of(key)
        primary.kill()
        return primary

    def failed_over(self, killed: RedisServer) -> bool:
        """Whether every live node sees all slots served again, none by `killed`."""
        for node in self.live():
            try:
                info = node.client(socket_timeout=1).execute_command("CLUSTER INFO")
                slots = node.client(socket_timeout=1).execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                return False
            if info["cluster_state"] != "ok" or int(info["cluster_slots_ok"]) != 16384:
                return False
            if any(int(primary[1]) == killed.port for _, _, primary, *_ in slots):
                return False
        return True

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def _settled(self) -> bool:
        for node in self.nodes:
            info = node.client(socket_timeout=1).execute_command("CLUSTER INFO")
            if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != 6:
                return False
        # A replica that has not copied its primary yet could not take over from it.
        replication = [node.client(socket_timeout=1).info("replication") for node in self.nodes]
        replicas = [r for r in replication if r["role"] == "slave"]
        return len(replicas) == 3 and all(r["master_link_status"] == "up" for r in replicas)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
