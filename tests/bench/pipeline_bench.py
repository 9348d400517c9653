#!/usr/bin/env python3
"""Pipelined submission (ComputeService.Submit) against synchronous calls and torch.

Measured in one run, against one gpukitd:

- chain: a chain of dependent ``c = c + a`` on 16-element float32 arrays, ``--ops`` ops per
  session, in 1 and ``--sessions`` sessions at once (one process each, started together):
  ops per second across the sessions, pipelined (``gk.connect(pipeline=True)``, one
  ``sync()`` at the end) and synchronous (``pipeline=False``: a round trip per op);
  the reference is the same chain run by torch on the GPU in this process, one
  synchronize at the end (when torch with CUDA is importable).
- matmul: ``c = a @ b`` for square sizes and dtypes (tf32 is float32 with allow_tf32),
  ``--reps`` in a row, result kept until the next one: synchronous (the value read back
  through ``sync()`` after each) and pipelined (one ``sync()`` after all), time per op
  against torch.matmul in this process (``--reps`` in a row, one synchronize; and each
  synchronized for the synchronous comparison).

    bin/pipeline_bench.py --backend cuda                      # from a bundle, on a GPU host
    tests/bench/pipeline_bench.py --backend cpu --ops 2000 --sizes 256 --dtypes float32

It finds gpukitd and the gpukit package beside itself in a bundle (bin/, python/), else in the
build tree ($GPUKIT_BUILD_DIR, default build/), or uses a running daemon (``--address``).
With ``--threads`` (gpukitd started here) each pipelined chain also reports where its CPU
went: every thread of gpukitd and of its children (the executor), by thread name, in
microseconds of CPU per op (``/proc/PID/task/*/schedstat``, sampled every 50 ms so threads
that end with the chain count too), and the executor channel's datagrams and round trips
per op (gpukitd's metrics). Polling threads count as busy while they poll: run with
``GPUKIT_EXECUTOR_SPIN_US=0`` to see work alone (docs/benchmarks.md, "Pipelined sessions
together").

Nothing here asserts a timing: it prints the figures, the ratios and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # gpukitd_socket.py lies beside this file, here and in a bundle
    sys.path.insert(0, str(HERE))
from gpukitd_socket import wait_for_gpukitd  # noqa: E402


def layout() -> dict:
    if (HERE / "gpukitd").exists():  # a bundle's bin/
        return {"gpukitd": HERE / "gpukitd", "python": HERE.parent / "python"}
    build = Path(os.environ.get("GPUKIT_BUILD_DIR", HERE.parent.parent / "build")).resolve()
    return {"gpukitd": build / "daemon" / "gpukitd", "python": build / "python"}


def import_gpukit():
    python = str(layout()["python"])
    if python not in sys.path:
        sys.path.insert(0, python)
    import gpukit  # noqa: PLC0415

    return gpukit


class ThreadCpu:
    """CPU time of every thread of a process and of its children, sampled until stop()."""

    def __init__(self, pid: int):
        self.pids = [pid] + children_of(pid)
        self.start_totals = {p: process_cpu_ns(p) for p in self.pids}
        self.start = self._sample()
        self.last = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> dict:
        """(pid, tid) -> (process name, thread name, CPU ns) for the threads alive now."""
        seen = {}
        for pid in self.pids:
            try:
                process = Path(f"/proc/{pid}/comm").read_text().strip()
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                    ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                seen[(pid, tid)] = (process, name, ns)
        return seen

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self.last.update(self._sample())

    def stop(self, ops: int) -> dict:
        """Stops sampling; returns "process/thread" -> microseconds of CPU per op."""
        self._stop.set()
        self._thread.join()
        self.last.update(self._sample())
        per_name: dict = {}
        sampled: dict = {}  # pid -> (process name, CPU ns of its sampled threads)
        for (pid, tid), (process, name, ns) in self.last.items():
            used = ns - self.start.get((pid, tid), (process, name, 0))[2]
            per_name[f"{process}/{name}"] = per_name.get(f"{process}/{name}", 0) + used
            sampled[pid] = (process, sampled.get(pid, (process, 0))[1] + used)
        # A thread that started and ended between two samples, and a thread's last CPU before
        # it ended, show only in its process's total (clock ticks: coarse for short runs).
        for pid, (process, used) in sampled.items():
            ended = process_cpu_ns(pid) - self.start_totals.get(pid, 0) - used
            if ended > 0:
                label = f"{process}/(threads that ended)"
                per_name[label] = per_name.get(label, 0) + ended
        return {k: round(v / 1e3 / ops, 2) for k, v in sorted(per_name.items(), key=lambda x: -x[1])
                if v > 0}


def stat_fields(pid) -> list:
    """/proc/PID/stat's fields after the command name (state first); [] for a process gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat[stat.rindex(")") + 2:].split()


def process_cpu_ns(pid: int) -> int:
    """A process's CPU time, its ended threads' included (utime + stime, clock ticks)."""
    fields = stat_fields(pid)
    if not fields:
        return 0
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def children_of(pid: int) -> list:
    return [int(e) for e in os.listdir("/proc")
            if e.isdigit() and stat_fields(e)[1:2] == [str(pid)]]


def executor_counters(metrics_address: str) -> dict:
    """gpukitd's executor-channel counters (summed over devices)."""
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    counts = {"messages": 0.0, "round_trips": 0.0}
    for line in text.splitlines():
        for key in counts:
            if line.startswith(f"gpukit_executor_{key}_total{{"):
                counts[key] += float(line.rsplit(" ", 1)[1])
    return counts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chain_worker(address: str, pipeline: bool, ops: int, start, results) -> None:
    """One session: a warm-up, then `ops` dependent adds; puts (t0, t1) on `results`."""
    gk = import_gpukit()
    import numpy as np  # noqa: PLC0415

    with gk.connect(address, pipeline=pipeline) as s:
        a = s.array(np.ones(16, np.float32))
        c = s.array(np.zeros(16, np.float32))
        for _ in range(200):
            c = c + a
        s.sync()
        c = s.array(np.zeros(16, np.float32))
        start.wait()
        t0 = time.perf_counter()
        for _ in range(ops):
            c = c + a
        s.sync()
        t1 = time.perf_counter()
        value = float(c.numpy()[0])
        if value != ops:
            raise SystemExit(f"chain gave {value}, expected {ops}")
        results.put((t0, t1))


def chain_ops_per_s(address: str, pipeline: bool, sessions: int, ops: int) -> float:
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(sessions)
    results = ctx.Queue()
    procs = [ctx.Process(target=chain_worker, args=(address, pipeline, ops, start, results))
             for _ in range(sessions)]
    for p in procs:
        p.start()
    spans = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a chain worker exited with {p.exitcode}")
    t0 = min(t for t, _ in spans)
    t1 = max(t for _, t in spans)
    return sessions * ops / (t1 - t0)


def torch_chain_ops_per_s(ops: int) -> float | None:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.ones(16, device="cuda")
    c = torch.zeros(16, device="cuda")
    for _ in range(200):
        c = c + a
    torch.cuda.synchronize()
    c = torch.zeros(16, device="cuda")
    t0 = time.perf_counter()
    for _ in range(ops):
        c = c + a
    torch.cuda.synchronize()
    return ops / (time.perf_counter() - t0)


def gpukit_matmul(s, size: int, dtype: str, reps: int, pipelined: bool) -> float:
    """Seconds per `c = a @ b` (median of 3 rounds of `reps`)."""
    import numpy as np  # noqa: PLC0415

    np_dtype = "float32" if dtype == "tf32" else dtype
    rng = np.random.default_rng(0)
    a = s.array(rng.random((size, size), dtype=np.float32)).astype(np_dtype)
    b = s.array(rng.random((size, size), dtype=np.float32)).astype(np_dtype)
    attrs = {"allow_tf32": True} if dtype == "tf32" else {}
    c = s.run_op("matmul", a, b, **attrs)
    s.sync()
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            c = s.run_op("matmul", a, b, **attrs)
            if not pipelined:
                s.sync()
        s.sync()
        rounds.append((time.perf_counter() - t0) / reps)
    del c
    return statistics.median(rounds)


def torch_matmul(size: int, dtype: str, reps: int, pipelined: bool) -> float | None:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = {"tf32": torch.float32, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}[dtype]
    a = torch.rand(size, size, device="cuda").to(dt)
    b = torch.rand(size, size, device="cuda").to(dt)
    c = torch.matmul(a, b)
    torch.cuda.synchronize()
    rounds = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            c = torch.matmul(a, b)
            if not pipelined:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / reps)
    del c
    torch.backends.cuda.matmul.allow_tf32 = False
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--address", help="a running gpukitd (else one is started)")
    parser.add_argument("--ops", type=int, default=20000, help="adds per session's chain")
    parser.add_argument("--sessions", type=int, default=8, help="sessions of the wide chain")
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--dtypes", default="tf32,float16,bfloat16")
    parser.add_argument("--reps", type=int, default=20, help="matmuls in a row per round")
    parser.add_argument("--only", default="chain,matmul")
    parser.add_argument("--threads", action="store_true",
                        help="per-thread CPU and executor messages per op of the pipelined chains")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if args.threads and args.address:
        parser.error("--threads reads the gpukitd it starts (no --address)")

    daemon = None
    workdir = tempfile.TemporaryDirectory(prefix="gpukit-pipeline-bench-")
    address = args.address
    if address is None:
        sock = Path(workdir.name) / "gpukitd.sock"
        log = open(Path(workdir.name) / "gpukitd.log", "w")
        metrics = f"127.0.0.1:{free_port()}"
        flags = [f"--metrics-address={metrics}"] if args.threads else []
        daemon = subprocess.Popen([str(layout()["gpukitd"]), f"--listen=unix://{sock}",
                                   f"--backend={args.backend}", "--log-level=warn", *flags],
                                  stdout=log, stderr=subprocess.STDOUT)
        if not wait_for_gpukitd(daemon, sock, timeout_s=120):
            daemon.kill()
            raise SystemExit(Path(log.name).read_text())
        address = f"unix://{sock}"
    # The backend of the daemon measured: the one started here, or the one at --address.
    backend = args.backend
    if args.address:
        import_gpukit()
        from gpukit import _gpukit  # noqa: PLC0415
        backend = _gpukit.DaemonProbe.connect(address, 10.0).info()["backend"]
    print(f"gpukitd at {address}, {backend} backend", flush=True)
    out: dict = {"backend": backend}
    try:
        if "chain" in only:
            for pipeline in (False, True):
                mode = "pipelined" if pipeline else "synchronous"
                for n in sorted({1, args.sessions}):
                    ops = args.ops if pipeline else max(args.ops // 10, 100)
                    probe = args.threads and pipeline
                    if probe:
                        before = executor_counters(metrics)
                        cpu = ThreadCpu(daemon.pid)
                    rate = chain_ops_per_s(address, pipeline, n, ops)
                    out[f"chain_{mode}_{n}_sessions_ops_per_s"] = round(rate)
                    print(f"chain of adds, {mode}, {n} session(s): {rate:,.0f} ops/s", flush=True)
                    if probe:
                        # The sessions' warm-up ops (200 each) ran meanwhile too.
                        total = n * (ops + 200)
                        threads = cpu.stop(total)
                        after = executor_counters(metrics)
                        key = f"chain_{mode}_{n}_sessions"
                        out[f"{key}_cpu_us_per_op"] = threads
                        for name in ("messages", "round_trips"):
                            out[f"{key}_executor_{name}_per_op"] = round(
                                (after[name] - before[name]) / total, 3)
                        print("  CPU per op (us): " + ", ".join(
                            f"{k} {v}" for k, v in list(threads.items())[:12]), flush=True)
                        print(f"  executor datagrams / round trips per op: "
                              f"{out[f'{key}_executor_messages_per_op']} / "
                              f"{out[f'{key}_executor_round_trips_per_op']}", flush=True)
            ref = torch_chain_ops_per_s(args.ops)
            if ref is not None:
                out["chain_torch_ops_per_s"] = round(ref)
                print(f"chain of adds, torch in one process: {ref:,.0f} ops/s", flush=True)
        if "matmul" in only:
            gk = import_gpukit()
            with gk.connect(address, pipeline=True) as s:
                for size in [int(x) for x in args.sizes.split(",")]:
                    for dtype in args.dtypes.split(","):
                        for pipelined in (False, True):
                            mode = "pipelined" if pipelined else "synchronous"
                            mine = gpukit_matmul(s, size, dtype, args.reps, pipelined)
                            ref = torch_matmul(size, dtype, args.reps, pipelined)
                            key = f"matmul_{size}_{dtype}_{mode}"
                            out[f"{key}_ms"] = round(mine * 1e3, 4)
                            line = f"matmul {size}^3 {dtype} {mode}: {mine * 1e3:.3f} ms"
                            if ref is not None:
                                out[f"{key}_torch_ms"] = round(ref * 1e3, 4)
                                out[f"{key}_vs_torch"] = round(ref / mine, 3)
                                line += f", torch {ref * 1e3:.3f} ms, torch/gpukit {ref / mine:.3f}x"
                            print(line, flush=True)
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=30)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
