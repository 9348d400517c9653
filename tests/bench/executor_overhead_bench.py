#!/usr/bin/env python3
"""What the device executor costs on the request path, measured in one run.

Two gpukitd run side by side on the same device: one with ``executor.mode`` "inprocess" (the
device inside gpukitd, as before the executor existed) and one with the default (each device
in a child executor process). The same calls go to both, in alternating rounds so that load
from elsewhere falls on both alike:

- a raw gRPC ping and RunOp ``add`` on 16 elements (``gpukit_rpc_bench --addr --only``), p50
  and p99, and RunOp / ping at p50;
- from Python, ``c = a @ b`` for square matmuls (default 4096 and 8192, bf16), synchronous,
  result kept until the next one: the time per op, and torch's in this process as the
  reference when torch is importable.

    bin/executor_overhead_bench.py --backend cuda          # from a bundle, on a GPU host
    tests/bench/executor_overhead_bench.py --backend cpu --sizes 512 --dtype float32

It finds gpukitd, gpukit_rpc_bench and the gpukit package beside itself in a bundle (bin/,
python/), else in the build tree ($GPUKIT_BUILD_DIR, default build/). Nothing here asserts a
timing: it prints the figures and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # gpukitd_socket.py lies beside this file, here and in a bundle
    sys.path.insert(0, str(HERE))
from gpukitd_socket import wait_for_gpukitd  # noqa: E402


def layout() -> dict:
    if (HERE / "gpukitd").exists():  # a bundle's bin/
        return {"gpukitd": HERE / "gpukitd", "rpc_bench": HERE / "gpukit_rpc_bench",
                "gpukitctl": HERE / "gpukitctl", "python": HERE.parent / "python"}
    build = Path(os.environ.get("GPUKIT_BUILD_DIR", HERE.parent.parent / "build")).resolve()
    return {"gpukitd": build / "daemon" / "gpukitd",
            "rpc_bench": build / "tests" / "bench" / "gpukit_rpc_bench",
            "gpukitctl": build / "client" / "cpp" / "gpukitctl", "python": build / "python"}


LAYOUT = layout()
sys.path.insert(0, str(LAYOUT["python"]))
if not (LAYOUT["python"] / "gpukit" / "__init__.py").exists():
    sys.path.insert(0, str(HERE.parent.parent / "client" / "python"))


MODES = {"inprocess": {"mode": "inprocess"}, "process": {"mode": "process"},
         "process-nostandby": {"mode": "process", "standby": False},
         "process-nospin": {"mode": "process"}}
# The environment of a mode's gpukitd (and so of its executors), beside the config.
MODE_ENV = {"process-nospin": {"GPUKIT_EXECUTOR_SPIN_US": "0"}}


def device_time_ns(address: str) -> int:
    """The device time all partitions' tasks took so far, as gpukitd measured it."""
    out = subprocess.run([str(LAYOUT["gpukitctl"]), "--addr", address, "-o", "json",
                          "partitions"], check=True, capture_output=True, text=True).stdout
    return sum(int(p.get("deviceTimeNs", 0)) for p in json.loads(out).get("partitions", []))


class Daemon:
    def __init__(self, mode: str, backend: str, workdir: Path):
        self.mode = mode
        self.socket = workdir / f"{mode}.sock"
        config = workdir / f"{mode}.json"
        config.write_text(json.dumps({"executor": MODES[mode]}))
        self.log = open(workdir / f"{mode}.log", "w")
        self.process = subprocess.Popen(
            [str(LAYOUT["gpukitd"]), f"--listen=unix://{self.socket}", f"--backend={backend}",
             f"--config={config}", "--log-level=warn"], stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, **MODE_ENV.get(mode, {})})
        if not wait_for_gpukitd(self.process, self.socket, timeout_s=120):
            raise SystemExit(f"gpukitd ({mode}) did not start; see {self.log.name}")
        self.address = f"unix://{self.socket}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def rpc_percentiles(daemon: Daemon, only: str, iterations: int) -> tuple[float, float]:
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as samples:
        subprocess.run([str(LAYOUT["rpc_bench"]), "--addr", daemon.address, "--only", only,
                        "--iterations", str(iterations), "--warmup", str(iterations // 10),
                        "--samples-out", samples.name],
                       check=True, stdout=subprocess.DEVNULL)
        times = sorted(float(line) for line in open(samples.name) if line.strip())
    return times[len(times) // 2], times[int(len(times) * 0.99)]


def matmul_seconds(session, address: str, size: int, dtype: str, reps: int) -> tuple[float, float]:
    """The median wall time of `c = a @ b`, and the mean device time gpukitd measured."""
    import numpy as np
    a = session.array(np.random.rand(size, size).astype(np.float32)).astype(dtype)
    b = session.array(np.random.rand(size, size).astype(np.float32)).astype(dtype)
    c = a @ b  # warm-up: kernels, workspace, pool
    times = []
    device_before = device_time_ns(address)
    for _ in range(reps):
        start = time.perf_counter()
        c = a @ b
        times.append(time.perf_counter() - start)
    device = (device_time_ns(address) - device_before) / reps / 1e9
    del c
    return statistics.median(times), device


def torch_seconds(size: int, dtype: str, reps: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
    a = torch.rand(size, size, device="cuda").to(dt)
    b = torch.rand(size, size, device="cuda").to(dt)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        c = torch.matmul(a, b)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    del c
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--iterations", type=int, default=5000, help="ping/RunOp calls a round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--reps", type=int, default=20, help="matmuls timed a round")
    parser.add_argument("--modes", default="inprocess,process",
                        help="daemons to compare: " + ", ".join(MODES))
    args = parser.parse_args()
    import gpukit

    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="gpukit-executor-bench-") as tmp:
        daemons = [Daemon(mode, args.backend, Path(tmp)) for mode in args.modes.split(",")]
        results = {d.mode: {"ping": [], "runop": [], "matmul": {s: [] for s in sizes}}
                   for d in daemons}
        try:
            sessions = {d.mode: gpukit.connect(d.address, pipeline=False) for d in daemons}
            for _ in range(args.rounds):
                for d in daemons:
                    for only in ("ping", "runop"):
                        results[d.mode][only].append(rpc_percentiles(d, only, args.iterations))
                    for size in sizes:
                        results[d.mode]["matmul"][size].append(
                            matmul_seconds(sessions[d.mode], d.address, size, args.dtype,
                                           args.reps))
            for session in sessions.values():
                session.close()
        finally:
            for d in daemons:
                d.stop()
    print(f"backend {args.backend}; {args.rounds} rounds; medians over rounds")
    print(f"{'':12} {'ping p50':>9} {'ping p99':>9} {'RunOp p50':>10} {'RunOp p99':>10} "
          f"{'RunOp/ping':>10}")
    for mode, r in results.items():
        ping50 = statistics.median(p for p, _ in r["ping"])
        ping99 = statistics.median(p for _, p in r["ping"])
        run50 = statistics.median(p for p, _ in r["runop"])
        run99 = statistics.median(p for _, p in r["runop"])
        print(f"{mode:12} {ping50:8.1f}us {ping99:8.1f}us {run50:9.1f}us {run99:9.1f}us "
              f"{run50 / ping50:9.2f}x")
    for size in sizes:
        torch_s = torch_seconds(size, args.dtype, args.reps) if args.backend == "cuda" else None
        flops = 2 * size**3
        print(f"matmul {size}^3 {args.dtype}:"
              + (f" torch {torch_s * 1e3:.3f} ms" if torch_s is not None else ""))
        first = next(iter(results))
        base = statistics.median(t for t, _ in results[first]["matmul"][size])
        for mode, r in results.items():
            t = statistics.median(w for w, _ in r["matmul"][size])
            dev = statistics.median(d for _, d in r["matmul"][size])
            line = (f"  {mode:18} {t * 1e3:8.3f} ms ({flops / t / 1e12:6.1f} TFLOP/s, "
                    f"{t / base:.3f}x {first}); device time {dev * 1e3:.3f} ms")
            if torch_s is not None:
                line += f"; torch/this {torch_s / t:.2f}x"
            print(line)


if __name__ == "__main__":
    main()
