"""A TCP proxy on loopback that holds every chunk for half of an added round trip: a Redis "over a network"
for the benchmarks, on a machine whose kernel has no ``netem`` to add latency.

Why: plain rq's ``enqueue`` makes two round trips (two MULTIs), a routed ``delay()`` and a FairQueue's enqueue
one, so how they compare depends on what a round trip costs. On loopback it costs 40-50 µs here; a Redis on
another host is typically a few hundred µs away. Run behind this proxy, a bench measures both sides at a
round trip of its choosing, each side paying it per round trip as it would on a network.

Each client connection gets its own upstream connection and one thread per direction; a thread reads a chunk,
sleeps until ``one_way_us`` after it arrived (its timer slack set to 1 ns), and sends it on. Order within a
direction is kept. It sleeps and never spins: on this 2-core machine a spinning proxy would take CPU from the
client and the server it sits between. A sleep still wakes some tens of µs late and the relay itself costs a few
tens of µs per hop, so a bench reports the round trip it measured (PING through the proxy), not the one it asked
for. It listens on 127.0.0.1 only and forwards only to the loopback port it was given.

As a program (what :class:`DelayProxy` runs): ``python bench/delay_proxy.py TARGET_PORT ONE_WAY_US``; it
prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import subprocess
import sys
import threading
import time
from types import TracebackType

CHUNK = 65536
PR_SET_TIMERSLACK = 29  # linux/prctl.h


def tight_sleeps() -> None:
    """This thread's sleeps wake on time: Linux lets a timer fire up to 50 µs late by default (its timer slack),
    which alone would double a 50 µs hold. Left as it is where prctl is missing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)


def relay(src: socket.socket, dst: socket.socket, one_way_s: float) -> None:
    """Copy ``src`` to ``dst``, each chunk ``one_way_s`` after it was read, until ``src`` closes."""
    tight_sleeps()
    try:
        while chunk := src.recv(CHUNK):
            if one_way_s > 0:
                time.sleep(one_way_s)
            dst.sendall(chunk)
    except OSError:
        pass  # the other direction closed the pair
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def serve(target_port: int, one_way_s: float, listener: socket.socket) -> None:
    """Accept connections on ``listener`` forever, each relayed to 127.0.0.1:``target_port`` both ways."""
    while True:
        client, _ = listener.accept()
        upstream = socket.create_connection(("127.0.0.1", target_port))
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=relay, args=(src, dst, one_way_s), daemon=True).start()


class DelayProxy:
    """Context manager: the proxy as a subprocess in front of 127.0.0.1:``target_port``, adding ``rtt_us`` of
    round trip (half each way); ``port`` is where it listens."""

    def __init__(self, target_port: int, rtt_us: float) -> None:
        if rtt_us < 0:
            raise ValueError(f"rtt_us must be >= 0, got {rtt_us}")
        self.target_port, self.rtt_us = target_port, rtt_us
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> DelayProxy:
        self._process = subprocess.Popen([sys.executable, __file__, str(self.target_port), str(self.rtt_us / 2)],
                                         stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline() if self._process.stdout is not None else ""
        if not line.strip().isdigit():
            self.__exit__(None, None, None)
            raise RuntimeError(f"delay proxy did not start (said {line!r})")
        self.port = int(line)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: delay_proxy.py TARGET_PORT ONE_WAY_US", file=sys.stderr)
        return 2
    target_port, one_way_us = int(argv[0]), float(argv[1])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)
    serve(target_port, one_way_us / 1e6, listener)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
