"""Waiting for a gpukitd that a bench started to listen on its unix socket.

Shared by the Python benches of tests/bench; deploy/bundle.sh installs it beside them in a
bundle's bin/, so a bench imports it from its own directory either way:

    process = subprocess.Popen([gpukitd, "--listen", f"unix://{sock}", ...])
    if not wait_for_gpukitd(process, sock, timeout_s=120):
        ...  # it exited, or did not listen in time: stop it and report its log
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def accepts(sock: Path) -> bool:
    """Whether something accepts a connection on the unix socket `sock`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(sock))
            return True
        except OSError:
            return False


def wait_for_gpukitd(process: subprocess.Popen, sock: Path, timeout_s: float,
                     poll_s: float = 0.05) -> bool:
    """Polls every `poll_s` until `sock` accepts connections (True), or until `process` has
    exited or `timeout_s` has passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not (sock.exists() and accepts(sock)):
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True
