"""A real Redis for the tests: the Debian `redis-server` binary on a free loopback port.

Each server has a throwaway directory and no persistence. `pause()`/`resume()` freeze
and thaw the process (a Redis that accepts connections but never answers); `kill()` and
`start()` again on the same port are a Redis that goes away and comes back, empty.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from .controlplane import Authority
from .serving import end_process_group, free_port, wait_until


def redis_server_binary() -> str:
    """Where `redis-server` is (tests/run.sh installs it when absent). Without it the test
    skips, under CI fails, as for the binaries built from Go modules."""
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.path.exists(p)),
        None,
    )
    if found is None:
        reason = "no redis-server (tests/run.sh installs it; Debian: apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


def start_answering(
    args: list[str], log_path: Path, client: Callable[[], redis.Redis]
) -> subprocess.Popen[bytes]:
    """Start a Redis process (a server or a sentinel) in its own session, its output in
    `log_path`, and wait until it answers PING; a process that exits instead fails with
    its log."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(log_path.read_text(errors="replace"))
        try:
            return bool(client().ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answers, 15, f"{Path(args[0]).name} to answer PING")
    except BaseException:  # never left running by a start that failed
        end_process_group(process)
        raise
    return process


class RedisServer:
    """With `tls`, the server speaks only TLS, with a certificate `tls` issues."""

    def __init__(
        self, binary: str, tls: Authority | None = None, extra: tuple[str, ...] = ()
    ) -> None:
        """`extra`: more redis-server options (cluster mode, `--replicaof`, ...)."""
        self.binary = binary
        self.extra = list(extra)
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mcpcache-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.tls_args: list[str] = []
        if tls is not None:
            cert, key = tls.issue("redis", hosts=("127.0.0.1",))
            files = {"ca.pem": tls.pem, "cert.pem": cert, "key.pem": key}
            for name, data in files.items():
                (self.dir / name).write_bytes(data)
            self.tls_args = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-auth-clients",
                "no",
            ]
            for option, name in (("cert", "cert.pem"), ("key", "key.pem"), ("ca-cert", "ca.pem")):
                self.tls_args += [f"--tls-{option}-file", str(self.dir / name)]

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def url(self) -> str:
        if self.tls_args:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca_file}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self, **kw: object) -> redis.Redis:
        """A plain synchronous client, as an operator (or an attacker) would use."""
        if self.tls_args:
            kw = {"ssl": True, "ssl_ca_certs": str(self.ca_file), **kw}
        kw = {"socket_timeout": 5, **kw}
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)  # type: ignore[arg-type]

    def start(self) -> RedisServer:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        self.process = start_answering(
            [self.binary, *args, *self.tls_args, *self.extra],
            self.dir / "redis.log",
            lambda: self.client(socket_connect_timeout=1),
        )
        return self

    def pause(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.resume()
            end_process_group(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)
