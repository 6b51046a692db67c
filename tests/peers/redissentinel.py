"""A real Sentinel-managed Redis on loopback: a primary, its replica and three
sentinels (Debian's `redis-sentinel`, or `redis-server --sentinel`), with a quorum of
two and a one-second down-after, so that killing the primary promotes the replica
within a few seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis

from .redisserver import RedisServer, start_answering
from .serving import end_process_group, free_port, wait_until

MASTER = "mcpcache"
DOWN_AFTER_MS = 1000


def sentinel_command(server_binary: str) -> list[str]:
    """How to start a sentinel: `redis-sentinel` when installed, the same binary in
    sentinel mode otherwise."""
    found = shutil.which("redis-sentinel") or (
        "/usr/bin/redis-sentinel" if os.path.exists("/usr/bin/redis-sentinel") else None
    )
    return [found] if found else [server_binary, "--sentinel"]


class Sentinel:
    """One sentinel process with its own (rewritable) config file."""

    def __init__(self, command: list[str], primary: RedisServer) -> None:
        self.command = command
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-sentinel-"))
        self.config = self.dir / "sentinel.conf"
        self.config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\ndaemonize no\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {primary.port} 2\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 5000\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Sentinel:
        self.process = start_answering(
            [*self.command, str(self.config)], self.dir / "sentinel.log", self.client
        )
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def stop(self) -> None:
        if self.process is not None:
            end_process_group(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisSentinel:
    """The primary, one replica and three sentinels that watch them."""

    def __init__(self, binary: str) -> None:
        fast = ("--repl-diskless-sync-delay", "0")  # the replica copies at once
        self.primary = RedisServer(binary, extra=fast)
        self.replica = RedisServer(binary, extra=(*fast, "--replicaof", "127.0.0.1", "0"))
        self.command = sentinel_command(binary)
        self.sentinels: list[Sentinel] = []

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{s.port}" for s in self.sentinels]

    def start(self) -> RedisSentinel:
        try:
            self.primary.start()
            self.replica.extra[-1] = str(self.primary.port)
            self.replica.start()
            self.sentinels = [Sentinel(self.command, self.primary).start() for _ in range(3)]
            wait_until(self._settled, 30, "the sentinels to know the replica and each other")
        except BaseException:
            self.stop()
            raise
        return self

    def master_port(self) -> int:
        """The primary's port as the sentinels report it."""
        _, port = self.sentinels[0].client().sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def _settled(self) -> bool:
        for sentinel in self.sentinels:
            state = sentinel.client().sentinel_master(MASTER)
            if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                return False
        return bool(self.replica.client().info("replication")["master_link_status"] == "up")

    def failed_over(self) -> bool:
        """Whether every sentinel names the former replica as the primary, and it is one."""
        try:
            ports = {
                int(s.client().sentinel_get_master_addr_by_name(MASTER)[1]) for s in self.sentinels
            }
            role = self.replica.client(socket_timeout=1).execute_command("ROLE")[0]
        except redis.RedisError:
            return False
        return ports == {self.replica.port} and role in (b"master", "master")

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        self.replica.stop()
        self.primary.stop()
