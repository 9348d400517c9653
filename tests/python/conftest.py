"""Fixtures of the Python client's tests: the real gpukitd of the build, on a temporary unix
socket with the CPU backend ($GPUKIT_TEST_BACKEND=cuda on a GPU host), for the whole run; and
a fresh session for every test.

The build is found as for tests/run_all.sh: $GPUKIT_BUILD_DIR, else build/ at the repository
root. The package under test is <build>/python/gpukit (the module of that build) when it
exists, else an installed gpukit (pip install ./client/python). $GPUKITD and $GPUKITCTL
override the binaries.

In a bundle made by deploy/bundle.sh, which carries this directory as tests/python, there is
no build: the package is the bundle's python/gpukit and the binaries are its bin/gpukitd and
bin/gpukitctl (bin/run-gpu-tests.sh runs the suite so).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
BUILD_DIR = Path(os.environ.get("GPUKIT_BUILD_DIR", ROOT / "build"))
if (BUILD_DIR / "python" / "gpukit" / "__init__.py").exists():
    sys.path.insert(0, str(BUILD_DIR / "python"))
elif (ROOT / "python" / "gpukit" / "__init__.py").exists():  # a bundle's
    sys.path.insert(0, str(ROOT / "python"))

# This process and every gpukitd it starts keep absl's lock-order check, which releases turn
# off (runtime/base/mutex_mode.h): a lock-order cycle fails the test that made it.
os.environ.setdefault("GPUKIT_MUTEX_DEADLOCK_CHECK", "1")

import gpukit  # noqa: E402


def _binary(env: str, relative: str) -> Path:
    path = Path(os.environ.get(env) or BUILD_DIR / relative)
    bundled = ROOT / "bin" / path.name
    if not os.environ.get(env) and not path.exists() and bundled.exists():
        path = bundled
    if not path.exists():
        pytest.exit(f"{path} not found: build gpukit first or set {env}", returncode=4)
    return path


def stop_gpukitd(process: subprocess.Popen, log_path: Path) -> None:
    """Stops a gpukitd this suite started (SIGTERM; SIGKILL after 15 s) and asserts that it
    exited with status 0."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, (
        f"gpukitd exited with {process.returncode}:\n{log_path.read_text()}"
    )


def pytest_report_header(config: pytest.Config) -> str:
    return f"gpukit {gpukit.__version__} from {Path(gpukit.__file__).parent}"


@dataclass
class Daemon:
    address: str
    log_path: Path
    gpukitctl: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def has_nvrtc(self) -> bool:
        return "NVRTC JIT compiler not available" not in self.log()

    def ctl(self, command: str) -> dict:
        """`gpukitctl <command>` against this daemon, as JSON."""
        out = subprocess.run(
            [str(self.gpukitctl), "--addr", self.address, "-o", "json", command],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return json.loads(out.stdout)

    def status(self) -> dict:
        """`gpukitctl status` as JSON: sessions, arrays, backend, ..."""
        return self.ctl("status")


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


# The daemon's backend: cpu, unless $GPUKIT_TEST_BACKEND says cuda. On the GPU host
# deploy/run-gpu-tests.sh runs the whole suite so (test_cuda_interop.py needs it, and
# test_op_conformance.py then checks every op on CUDA); tests that only hold on the CPU
# backend skip there.
BACKEND = os.environ.get("GPUKIT_TEST_BACKEND", "cpu")


@contextlib.contextmanager
def running_gpukitd(
    directory: Path, config: dict, *flags: str, fatal: bool = False
) -> Iterator[Tuple[str, Path]]:
    """The build's gpukitd in `directory`: on a unix socket there, with `config` as its
    --config file and `flags` added. Yields (its address, its log) once it accepts, and stops
    it after (stop_gpukitd). One that does not accept within 15 s fails the test, or with
    `fatal` the whole run (pytest.exit, status 4)."""
    sock = directory / "gpukitd.sock"
    config_path = directory / "gpukitd.json"
    config_path.write_text(json.dumps(config))
    log_path = directory / "gpukitd.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [
                str(_binary("GPUKITD", "daemon/gpukitd")),
                "--listen",
                f"unix://{sock}",
                "--backend",
                BACKEND,
                "--config",
                str(config_path),
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 15
        while not (sock.exists() and _accepts(sock)):
            if process.poll() is not None or time.monotonic() > deadline:
                message = f"gpukitd did not start:\n{log_path.read_text()}"
                if fatal:
                    pytest.exit(message, returncode=4)
                pytest.fail(message)
            time.sleep(0.02)
        yield f"unix://{sock}", log_path
    finally:
        stop_gpukitd(process, log_path)


@contextlib.contextmanager
def gpukitd_with_metrics(directory: Path, config: dict) -> Iterator[Tuple[str, str, Path]]:
    """running_gpukitd with --metrics-address 127.0.0.1:0: yields (its address, its /metrics
    URL, its log); the port comes from its log."""
    flags = ("--metrics-address", "127.0.0.1:0")
    with running_gpukitd(directory, config, *flags) as (address, log_path):
        # Logged before the gRPC socket accepts.
        match = re.search(
            r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", log_path.read_text()
        )
        assert match, f"no metrics line in the log:\n{log_path.read_text()}"
        yield address, match.group(1), log_path


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    directory = tmp_path_factory.mktemp("gpukitd")
    config = {"jit": {"cacheDir": "none"}}  # no cache in $HOME
    with running_gpukitd(directory, config, fatal=True) as (address, log_path):
        try:
            yield Daemon(address, log_path, _binary("GPUKITCTL", "client/cpp/gpukitctl"))
        finally:
            # Sessions no test holds any more let go of their channels now. (The last test's
            # session is still referenced by pytest here; the daemon's shutdown waits a few
            # seconds for its idle channel.)
            gc.collect()


@pytest.fixture(scope="session")
def listed_ops(daemon: Daemon) -> Dict[str, dict]:
    """The daemon's ListOps (DaemonProbe.ops()) by op name, less the test-only ops that builds
    with fault injection add."""
    ops = gpukit._gpukit.DaemonProbe.connect(daemon.address).ops()
    assert ops, "ListOps listed no ops"
    return {op["name"]: op for op in ops if not op["name"].startswith("_test_")}


@pytest.fixture
def gk(daemon: Daemon) -> Iterator[gpukit.Session]:
    """A session of its own for each test, closed after it."""
    with gpukit.connect(daemon.address, tenant="pytest") as session:
        yield session


@pytest.fixture
def rng(request: pytest.FixtureRequest):
    """A NumPy generator seeded per test; the seed is in the test's report on failure."""
    import numpy as np

    seed = int(os.environ.get("GPUKIT_TEST_SEED", time.time_ns() % (1 << 31)))
    request.node.user_properties.append(("seed", seed))
    print(f"seed {seed} (GPUKIT_TEST_SEED={seed} repeats it)")
    return np.random.default_rng(seed)
