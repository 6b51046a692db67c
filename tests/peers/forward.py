"""A TCP port on this machine's loopback that leads into a network namespace.

    python forward.py NETNS TARGET_HOST TARGET_PORT

listens on a free port of 127.0.0.1 in the namespace it starts in, prints that port,
then moves itself into the network namespace `/run/netns/NETNS` and connects every
accepted client to TARGET_HOST:TARGET_PORT there. A socket keeps the namespace it was
made in, so the listener stays on the host's loopback while the connections it makes
are inside the namespace: how the tests reach the node's API server, whose address
exists only in the node's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000


def enter(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def serve(listener: socket.socket, host: str, port: int) -> None:
    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target_reader, target_writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), 10
            )
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(pipe(reader, target_writer), pipe(target_reader, writer))

    server = await asyncio.start_server(connect, sock=listener)
    async with server:
        await server.serve_forever()


def start(netns: str, host: str, port: int, log_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """This script as a process of its own session; returns it and its loopback port."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, netns, host, str(port)],
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.strip():
        process.wait(10)
        raise RuntimeError(f"forward.py did not start: {log_path.read_text()[-2000:]}")
    return process, int(line)


def main() -> None:
    netns, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    enter(netns)
    print(listener.getsockname()[1], flush=True)
    asyncio.run(serve(listener, host, port))


if __name__ == "__main__":
    main()
