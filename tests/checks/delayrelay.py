"""A delay on one path for kernels without ``sch_netem``: packets to one peer go through a TUN device and
this relay holds each for ``--delay-ms`` before writing it onto the real interface (AF_PACKET, with the
peer's MAC). Run inside the sending node's namespace; :func:`tests.checks.shaping.delay_pair` starts it,
routes the peer's /32 through the TUN device and stops it.

Constructed for the tests, not a recorded trace: the development machine's kernel has no netem
(``tc qdisc add ... netem`` answers "Specified qdisc kind is unknown"), so this stands in for
``tc qdisc ... netem delay``. Being userspace, it also caps that one direction's throughput.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import os
import socket
import struct
import threading
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def _mac(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tun", required=True)
    parser.add_argument("--dev", required=True)
    parser.add_argument("--src-mac", required=True)
    parser.add_argument("--dst-mac", required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args()
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", args.tun.encode(), IFF_TUN | IFF_NO_PI))
    out = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    out.bind((args.dev, 0))
    head = _mac(args.dst_mac) + _mac(args.src_mac) + b"\x08\x00"
    delay = args.delay_ms / 1000.0
    queue: collections.deque = collections.deque()
    ready = threading.Condition()

    def send() -> None:
        while True:
            with ready:
                while not queue:
                    ready.wait()
                due, packet = queue.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                out.send(head + packet)
            except OSError:
                pass  # a dropped packet is what a real link does under trouble; TCP resends

    threading.Thread(target=send, daemon=True).start()
    print("ready", flush=True)
    while True:
        packet = os.read(fd, 65536)
        if packet and packet[0] >> 4 == 4:  # IPv4 only
            with ready:
                queue.append((time.monotonic() + delay, packet))
                ready.notify()


if __name__ == "__main__":
    main()
