"""TCP_NODELAY on the CRT's connections, which the Python binding cannot ask for.

The CRT's HTTP/1.1 client writes a request's head and its body separately. With Nagle's algorithm on (the
socket's default, and ``awscrt`` 0.38 exposes no option to turn it off, though aws-c-io has one), the last short
segment of a body is held back until the server acknowledges the head -- and the server, waiting for the whole
request before it answers, delays that acknowledgement by Linux's 40 ms. Every UploadPart a task sent through the
CRT took 42 ms at the median against a server on the same machine, 2.7 ms with TCP_NODELAY (bench/results/nodelay):
a task of 1,250 small files took twice as long as it does now. botocore's sockets (urllib3's) and S3A's (Apache
HttpClient's) are opened with TCP_NODELAY; so are these now, by finding their sockets among the process's file
descriptors (``/proc/self/fd``: Linux only; elsewhere nothing is done and the delay stays).

:func:`no_delay` runs before the first request on a connection whose body takes more than one write (a task's parts,
a large manifest or complete; a task holds a few connections): it reads the process's descriptors, and looks at a
socket of the store's only once.
"""

from __future__ import annotations

import os
import socket
import threading

_FD_DIR = "/proc/self/fd"
_lock = threading.Lock()
#: The sockets (``socket:[inode]``) found connected to a store's port, TCP_NODELAY set: never looked at again while
#: open. Pruned to the sockets still open at each pass, so that a new socket with an old number is looked at.
_seen: set[str] = set()


def no_delay(port: int) -> int:
    """Set TCP_NODELAY on every TCP socket of this process connected to ``port`` that does not have it; returns
    how many were set (0 where ``/proc/self/fd`` does not exist)."""
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return 0
    changed = 0
    with _lock:
        open_now: set[str] = set()
        for name in names:
            try:
                target = os.readlink(f"{_FD_DIR}/{name}")
            except OSError:  # closed meanwhile
                continue
            if not target.startswith("socket:"):
                continue
            open_now.add(target)
            if target in _seen:
                continue
            outcome = _set_if_ours(int(name), port)
            if outcome is not None:  # ours, now with TCP_NODELAY: never looked at again while it is open
                _seen.add(target)
                changed += outcome
        _seen.intersection_update(open_now)
    return changed


def _set_if_ours(fd: int, port: int) -> bool | None:
    """None when ``fd`` is not a TCP socket connected to ``port``; else whether TCP_NODELAY was set now (False: it
    had it). The descriptor is borrowed, never closed."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        if sock.getpeername()[1] != port:
            return None
        if sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
            return False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return True
    except OSError:  # not connected (yet), or closed meanwhile
        return None
    finally:
        sock.detach()
