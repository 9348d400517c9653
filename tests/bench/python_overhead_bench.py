#!/usr/bin/env python3
"""What the Python client adds to an op: ``c = a + b`` on two 16-element float32 arrays from
Python against ``Client::Add`` of the C++ client, in the same run, against the same gpukitd.

Both sides time the whole op as a program lives it: the RunOp round trip, the result
array's creation, and its free (a second round trip, when the result is dropped: Python's
``del c``, the C++ ``Array``'s destructor). The C++ side is ``gpukit_rpc_bench --only add``,
run as a subprocess against this script's daemon; the two take turns in rounds, so that
load from elsewhere on the machine falls on both alike, and every call is timed on its own.
The goal of the Python client issue is Python <= 1.2x C++.

    tests/bench/python_overhead_bench.py [--iterations 20000] [--rounds 10]
    tests/bench/python_overhead_bench.py --addr unix:///run/gpukit/gpukitd.sock
    bin/python_overhead_bench.py --backend cuda          # from a bundle, on a GPU host

Without --addr it starts gpukitd on a private unix socket (--backend, default cpu) and stops
it at the end. It finds gpukitd, gpukit_rpc_bench and the gpukit package beside itself in a
bundle (bin/, python/), else in the build tree ($GPUKIT_BUILD_DIR, default build/ at the
repository root), else on PATH and sys.path; --gpukitd and --cxx-bench name them.
--layers also times the binding alone (``_gpukit.Client.run_op``), without the pure-Python
``Array`` around it, which shows what gpukit/_array.py costs.

Nothing here asserts a timing: it prints p50, p99 and mean of each, and the ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # gpukitd_socket.py lies beside this file, here and in a bundle
    sys.path.insert(0, str(HERE))
from gpukitd_socket import wait_for_gpukitd  # noqa: E402


def _layout() -> Dict[str, Optional[Path]]:
    """Where the package, gpukitd and the C++ bench are: a bundle's, a build tree's, or PATH's."""
    bundle = HERE.parent
    if HERE.name == "bin" and (bundle / "python" / "gpukit" / "__init__.py").exists():
        return {"python": bundle / "python", "gpukitd": HERE / "gpukitd",
                "cxx_bench": HERE / "gpukit_rpc_bench"}
    root = HERE.parents[1]  # tests/bench -> the repository
    build = Path(os.environ.get("GPUKIT_BUILD_DIR", root / "build"))
    if (build / "CMakeCache.txt").exists():
        python = build / "python"
        return {"python": python if (python / "gpukit" / "__init__.py").exists() else None,
                "gpukitd": build / "daemon" / "gpukitd",
                "cxx_bench": build / "tests" / "bench" / "gpukit_rpc_bench"}

    def which(name: str) -> Optional[Path]:
        found = shutil.which(name)
        return Path(found) if found else None

    return {"python": None, "gpukitd": which("gpukitd"), "cxx_bench": which("gpukit_rpc_bench")}


LAYOUT = _layout()
if LAYOUT["python"] is not None:
    sys.path.insert(0, str(LAYOUT["python"]))

import numpy as np  # noqa: E402

import gpukit  # noqa: E402


class Daemon:
    """gpukitd on a private unix socket, as tests/python/conftest.py starts it."""

    def __init__(self, binary: Path, backend: str) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="gpukit-pybench-"))
        sock = self._dir / "gpukitd.sock"
        config = self._dir / "gpukitd.json"
        config.write_text(json.dumps({"jit": {"cacheDir": "none"}}))
        self.log_path = self._dir / "gpukitd.log"
        self.address = f"unix://{sock}"
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [str(binary), "--listen", self.address, "--backend", backend,
                 "--config", str(config), "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT)
        if not wait_for_gpukitd(self._process, sock, timeout_s=15, poll_s=0.02):
            self.stop()
            sys.exit(f"gpukitd did not start:\n{self.log_path.read_text(errors='replace')}")

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def _stats(us: List[float]) -> Dict[str, float]:
    ordered = sorted(us)
    return {"p50": ordered[len(ordered) // 2], "p99": ordered[len(ordered) * 99 // 100],
            "mean": sum(ordered) / len(ordered)}


def _time_calls(fn: Callable[[], None], count: int, out: List[float]) -> None:
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        fn()
        out.append((clock() - start) / 1000.0)


def _cxx_round(bench: Path, address: str, count: int, warmup: int, scratch: Path) -> List[float]:
    samples = scratch / "cxx-samples.txt"
    result = subprocess.run(
        [str(bench), "--addr", address, "--only", "add", "--iterations", str(count),
         "--warmup", str(warmup), "--samples-out", str(samples)],
        capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"{bench} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return [float(line) for line in samples.read_text().split()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--addr", help="a running gpukitd (default: start one here)")
    parser.add_argument("--gpukitd", type=Path, default=LAYOUT["gpukitd"])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "auto"],
                        help="backend of the gpukitd started here (default cpu)")
    parser.add_argument("--cxx-bench", type=Path, default=LAYOUT["cxx_bench"],
                        help="gpukit_rpc_bench, which times the C++ client")
    parser.add_argument("--iterations", type=int, default=20000, help="timed calls of each")
    parser.add_argument("--rounds", type=int, default=10, help="turns each side takes")
    parser.add_argument("--layers", action="store_true",
                        help="also time the binding alone, without gpukit.Array")
    args = parser.parse_args()
    if args.cxx_bench is None or not args.cxx_bench.exists():
        parser.error(f"gpukit_rpc_bench not found ({args.cxx_bench}); give --cxx-bench")
    per_round = max(1, args.iterations // args.rounds)
    warmup = max(100, per_round // 10)

    daemon: Optional[Daemon] = None
    if args.addr is None:
        if args.gpukitd is None or not args.gpukitd.exists():
            parser.error(f"gpukitd not found ({args.gpukitd}); give --gpukitd or --addr")
        daemon = Daemon(args.gpukitd, args.backend)
    address = args.addr or daemon.address  # type: ignore[union-attr]
    scratch = Path(tempfile.mkdtemp(prefix="gpukit-pybench-samples-"))
    try:
        with gpukit.connect(address, tenant="bench", client_name="python_overhead_bench",
                            pipeline=False) as gk:
            values = np.arange(1, 17, dtype=np.float32)
            a, b = gk.array(values), gk.array(values)
            assert (a + b).numpy().tolist() == (values * 2).tolist()
            client, a_impl, b_impl = gk._client, a._impl, b._impl

            def python_add() -> None:
                c = a + b
                del c  # the result's free: its last reference goes, as in a loop's rebinding

            def binding_add() -> None:
                c = client.run_op("add", [a_impl, b_impl], {})
                del c

            kinds: Dict[str, Callable[[], None]] = {"python": python_add}
            if args.layers:
                kinds["binding"] = binding_add
            samples: Dict[str, List[float]] = {name: [] for name in ["cxx", *kinds]}
            for fn in kinds.values():
                _time_calls(fn, warmup, [])
            for _ in range(args.rounds):
                for name, fn in kinds.items():
                    _time_calls(fn, per_round, samples[name])
                samples["cxx"] += _cxx_round(args.cxx_bench, address, per_round, warmup, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if daemon is not None:
            gc.collect()
            daemon.stop()

    labels = {
        "cxx": "C++ Client::Add incl. Free (gpukit_rpc_bench)",
        "binding": "Python _gpukit Client.run_op + del (binding)",
        "python": "Python c = a + b; del c (gpukit.Array)",
    }
    stats = {name: _stats(us) for name, us in samples.items()}
    where = f"started here, --backend {args.backend}" if daemon is not None else "given"
    print(f"gpukitd {address} ({where}); Python {platform.python_version()}, "
          f"gpukit {gpukit.__version__} from {Path(gpukit.__file__).parent}")
    print(f"add of 2 x 16 float32, result freed: {per_round * args.rounds} timed calls of "
          f"each in {args.rounds} rounds, after {warmup} warm-up calls")
    print(f"{'':48} {'p50 us':>9} {'p99 us':>9} {'mean us':>9} {'/ C++ p50':>10}")
    for name in samples:
        s = stats[name]
        print(f"{labels[name]:48} {s['p50']:9.1f} {s['p99']:9.1f} {s['mean']:9.1f} "
              f"{s['p50'] / stats['cxx']['p50']:9.2f}x")
    py, cxx = stats["python"], stats["cxx"]
    print(f"Python / C++: p50 {py['p50'] / cxx['p50']:.2f}x, mean {py['mean'] / cxx['mean']:.2f}x "
          f"(goal <= 1.2x); Python adds {py['p50'] - cxx['p50']:.1f} us at p50")
    return 0


if __name__ == "__main__":
    sys.exit(main())
