"""The suites of gpukit-bench (gpukit.bench is the tool): each measures against one gpukitd
through the gpukit package and adds its figures to a Report, or lists what it cannot measure
here (no torch with CUDA, no pipelining client) with the reason.

Thread safety: none; one suite runs at a time on the caller's thread.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from . import _ops
from ._bench_report import Figure, Report, percentile

SUITES = ("ping", "runop", "chain", "matmul", "elementwise", "transfer")
MATMUL_DTYPES = ("float32", "tf32", "float16", "bfloat16")
MiB = 1 << 20


def progress(message: str) -> None:
    """A line on stderr about long work about to start (the table is on stdout)."""
    print(f".. {message}", file=sys.stderr, flush=True)


def time_calls(fn: Callable[[], Any], count: int, after: Optional[Callable[[Any], None]] = None
               ) -> List[float]:
    """Seconds of each of `count` calls of `fn`; `after(result)` runs untimed after each."""
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
        if after is not None:
            after(result)
        del result
    return seconds


# --- settings ------------------------------------------------------------------------------


@dataclass
class Settings:
    """Sizes and counts of one run; `for_run` derives them from the options and the backend."""

    iterations: int  # timed calls of each latency figure (ping, runop)
    chain_ops: int  # ops of each chain
    repeats: int  # timed runs of each large op (matmul, elementwise, transfer)
    warmup: int  # untimed runs before them
    matmul_sizes: Tuple[int, ...]
    matmul_dtypes: Tuple[str, ...]
    elementwise_elements: int
    transfer_bytes: int
    notes: List[str] = field(default_factory=list)

    @staticmethod
    def for_run(args: argparse.Namespace, backend: str) -> "Settings":
        gpu = backend == "cuda"
        notes = []
        if args.quick:
            s = Settings(iterations=200, chain_ops=1000, repeats=3, warmup=1,
                         matmul_sizes=(64, 128), matmul_dtypes=MATMUL_DTYPES,
                         elementwise_elements=1 << 18, transfer_bytes=4 * MiB)
        elif gpu:
            s = Settings(iterations=2000, chain_ops=20000, repeats=20, warmup=3,
                         matmul_sizes=(1024, 4096, 8192), matmul_dtypes=MATMUL_DTYPES,
                         elementwise_elements=1 << 26, transfer_bytes=64 * MiB)
        else:
            # The CPU backend computes a matmul in double on the host: 8192^3 would take
            # minutes per run.
            s = Settings(iterations=2000, chain_ops=20000, repeats=5, warmup=1,
                         matmul_sizes=(256, 512), matmul_dtypes=MATMUL_DTYPES,
                         elementwise_elements=1 << 22, transfer_bytes=64 * MiB)
            notes.append(f"{backend} backend: matmul sizes {s.matmul_sizes}, elementwise "
                         f"{s.elementwise_elements} elements (--matmul-sizes overrides)")
        if args.iterations is not None:
            s.iterations = args.iterations
            s.chain_ops = max(100, 10 * args.iterations)
        if args.matmul_sizes:
            s.matmul_sizes = tuple(args.matmul_sizes)
        if args.matmul_dtypes:
            s.matmul_dtypes = tuple(args.matmul_dtypes)
        s.notes = notes
        return s


# --- torch, where it is ---------------------------------------------------------------------


def load_torch(backend: str) -> Tuple[Any, str]:
    """(torch, "") when torch with CUDA is importable and gpukitd runs on CUDA (the only case
    where the two measure the same kind of device), else (None, why not)."""
    if backend != "cuda":
        return None, f"gpukitd runs the {backend} backend; torch's reference needs cuda"
    try:
        import torch  # noqa: PLC0415 (optional)
    except ImportError:
        return None, "torch is not importable"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    return torch, ""


def torch_seconds(torch: Any, fn: Callable[[], Any], count: int, warmup: int) -> List[float]:
    """Seconds of each of `count` calls of `fn`, each synchronized with the device."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        del result
    return seconds


# --- the suites ----------------------------------------------------------------------------


@dataclass
class Context:
    gpukit: Any  # the gpukit package
    probe: Any  # _gpukit.DaemonProbe
    session: Any  # gpukit.Session, synchronous
    address: str
    tenant: str
    backend: str
    settings: Settings
    report: Report
    torch: Any
    torch_reason: str
    pipelined: Any = None  # a gpukit.Session with pipeline=True, where the client has it
    pipelined_reason: str = ""


# The pause before each "ping after idle": about the device time of a synchronous 8192^3
# bf16 matmul, during which the client's connection carries nothing. On the GPU hosts a
# round trip after such a pause took about twice as long as one back to back
# (docs/benchmarks.md, "Where a synchronous op's time goes outside the daemon").
IDLE_BEFORE_PING_S = 0.0015


def _busy_wait(seconds: float) -> None:
    """Waits `seconds` on this thread's core without sleeping, so that only the transport
    and the daemon go idle, not the caller."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run_latency(ctx: Context, suites: Sequence[str]) -> None:
    """ping and runop, interleaved in rounds so that load from elsewhere falls on both alike."""
    s, gk = ctx.settings, ctx.session
    ctx.report.section(f"latency: {s.iterations} calls each, 16 x float32")
    a = gk.array(np.arange(16, dtype=np.float32))
    b = gk.array(np.ones(16, dtype=np.float32))
    ping_s: List[float] = []
    runop_s: List[float] = []
    free_s: List[float] = []

    def add_and_free() -> None:
        start = time.perf_counter()
        c = a + b
        middle = time.perf_counter()
        c.free()
        runop_s.append(middle - start)
        free_s.append(time.perf_counter() - middle)

    for _ in range(max(1, s.iterations // 10)):  # warm-up
        if "ping" in suites:
            ctx.probe.ping()
        if "runop" in suites:
            (a + b).free()
    rounds = 10
    for r in range(rounds):
        count = s.iterations // rounds + (1 if r < s.iterations % rounds else 0)
        if "ping" in suites:
            ping_s += time_calls(ctx.probe.ping, count)
        if "runop" in suites:
            for _ in range(count):
                add_and_free()
    idle_ping_s: List[float] = []
    if "ping" in suites:
        for _ in range(max(10, s.iterations // 20)):
            _busy_wait(IDLE_BEFORE_PING_S)
            idle_ping_s += time_calls(ctx.probe.ping, 1)
    us = 1e6
    if ping_s:
        ctx.report.add(Figure("ping_p50_us", percentile(ping_s, 50) * us, "us", False),
                       "grpc.health.v1 Check, bare channel")
        ctx.report.add(Figure("ping_p99_us", percentile(ping_s, 99) * us, "us", False))
        ctx.report.add(Figure("ping_after_idle_p50_us", percentile(idle_ping_s, 50) * us, "us",
                              False),
                       f"after {IDLE_BEFORE_PING_S * 1e3:g} ms without calls: what a synchronous "
                       "large op's round trip costs")
    if runop_s:
        ctx.report.add(Figure("runop_p50_us", percentile(runop_s, 50) * us, "us", False),
                       "c = a + b, synchronous")
        ctx.report.add(Figure("runop_p99_us", percentile(runop_s, 99) * us, "us", False))
        ctx.report.add(Figure("free_p50_us", percentile(free_s, 50) * us, "us", False),
                       "c.free()")
        ctx.report.add(Figure("free_p99_us", percentile(free_s, 99) * us, "us", False))
    if ping_s and runop_s:
        ctx.report.add(Figure("runop_p50_vs_ping", percentile(runop_s, 50) / percentile(ping_s, 50),
                              "x", False), "issue 18's goal: <= 1.2")
        ctx.report.add(Figure("runop_p99_vs_ping", percentile(runop_s, 99) / percentile(ping_s, 99),
                              "x", False), "issue 18's goal: <= 1.5")
    a.free()
    b.free()


def _has_pipeline_parameter(gpukit: Any) -> bool:
    try:
        return "pipeline" in inspect.signature(gpukit.connect).parameters
    except (TypeError, ValueError):
        return False


def connect_pipelined(gpukit: Any, address: str, tenant: str) -> Tuple[Any, str]:
    """(a pipelined session, "") where this client has pipelined submission, else (None, why
    not). Detected, not assumed: the API is issue 18's (branch pipe-client)."""
    if not _has_pipeline_parameter(gpukit):
        return None, ("this gpukit has no gpukit.connect(..., pipeline=True) "
                      "(pipelined submission, issue 18: branch pipe-client)")
    session = gpukit.connect(address or None, tenant=tenant, client_name="gpukit-bench",
                             pipeline=True)
    if not callable(getattr(session, "sync", None)):
        session.close()
        return None, "this gpukit's pipelined session has no sync()"
    return session, ""


def _chain(session: Any, ops: int, sync: Optional[Callable[[], None]]) -> float:
    """Seconds of `ops` dependent adds on 16 elements (and `sync()` after them); checks the
    result, so that a pipelined run that lost an op cannot pass for a fast one."""
    x = session.array(np.zeros(16, dtype=np.float32))
    y = session.array(np.ones(16, dtype=np.float32))
    start = time.perf_counter()
    for _ in range(ops):
        x = x + y
    if sync is not None:
        sync()
    seconds = time.perf_counter() - start
    got = x.numpy()
    if ops <= 1 << 24 and not np.all(got == ops):  # float32 counts exactly up to 2^24
        raise RuntimeError(f"chain of {ops} adds gave {got[:4]}..., not {ops}")
    return seconds


def run_chain(ctx: Context) -> None:
    ops = ctx.settings.chain_ops
    ctx.report.section(f"chain: {ops} dependent adds on 16 x float32")
    _chain(ctx.session, max(10, ops // 10), None)  # warm-up
    ctx.report.add(Figure("chain_sync_ops_per_s", ops / _chain(ctx.session, ops, None), "ops/s",
                          True), "one round trip per op")
    pipelined = ctx.pipelined
    if pipelined is None:
        ctx.report.skip("pipelined_ops_per_s", ctx.pipelined_reason)
    else:
        _chain(pipelined, max(10, ops // 10), pipelined.sync)
        seconds = _chain(pipelined, ops, pipelined.sync)
        ctx.report.add(Figure("pipelined_ops_per_s", ops / seconds, "ops/s", True),
                       "issue 18's goal: >= 50000 on the H100 host")
    torch = ctx.torch
    if torch is None:
        ctx.report.skip("torch_chain_ops_per_s", ctx.torch_reason)
        return

    def torch_chain(count: int) -> float:
        x = torch.zeros(16, device="cuda")
        y = torch.ones(16, device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(count):
            x = x + y
        torch.cuda.synchronize()
        return time.perf_counter() - start

    torch_chain(max(10, ops // 10))
    ctx.report.add(Figure("torch_chain_ops_per_s", ops / torch_chain(ops), "ops/s", True,
                          reference=True), "torch in this process")


def _torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16,
            "bfloat16": torch.bfloat16}[name]


def _matmul_operands(session: Any, a_host: np.ndarray, b_host: np.ndarray, dtype: str
                     ) -> Tuple[Any, Any]:
    """The two inputs in `session`, uploaded as float32 and converted there."""
    a, b = session.array(a_host), session.array(b_host)
    if dtype in ("float32", "tf32"):
        return a, b
    return a.astype(dtype), b.astype(dtype)


# Bursts timed for each pipelined matmul figure (gpukit's and torch's), which is their median:
# a single burst's figure swung from 0.20x to 0.98x of torch between two runs of one build on
# the GPU host (docs/benchmarks.md, "A burst's first op: the wake-ups after a pause").
PIPELINED_BURSTS = 5


def run_matmul(ctx: Context) -> None:
    s, gk, torch = ctx.settings, ctx.session, ctx.torch
    ctx.report.section(f"matmul: n x n @ n x n, {s.repeats} runs each, synchronous (result "
                       "kept), and pipelined where the client pipelines")
    if torch is None:
        ctx.report.skip("matmul_*_vs_torch", ctx.torch_reason)
    if ctx.pipelined is None:
        ctx.report.skip("matmul_*_pipelined_*", ctx.pipelined_reason)
    rng = np.random.default_rng(0)
    for n in s.matmul_sizes:
        a_host = rng.standard_normal((n, n), dtype=np.float32)
        b_host = rng.standard_normal((n, n), dtype=np.float32)
        for dtype in s.matmul_dtypes:
            name = f"matmul_{n}_{dtype}"
            if dtype == "tf32" and ctx.backend != "cuda":
                ctx.report.skip(name, f"tf32 is float32 on the {ctx.backend} backend")
                continue
            attrs = {"allow_tf32": True} if dtype == "tf32" else {}
            progress(f"{name}: {s.warmup} + {s.repeats} runs")
            a, b = _matmul_operands(gk, a_host, b_host, dtype)

            def op() -> Any:
                return gk.run_op(_ops.MATMUL, a, b, **attrs)

            time_calls(op, s.warmup)
            seconds = percentile(time_calls(op, s.repeats), 50)
            a.free()
            b.free()
            ctx.report.add(Figure(f"{name}_ms", seconds * 1e3, "ms", False))
            ctx.report.add(Figure(f"{name}_tflops", 2.0 * n**3 / seconds / 1e12, "TFLOP/s",
                                  True))
            torch_s = _torch_matmul(ctx, n, dtype, pipelined=False) if torch is not None else None
            if torch_s is not None:
                ctx.report.add(Figure(f"{name}_vs_torch", torch_s / seconds, "x", True),
                               f"torch {torch_s * 1e3:.3f} ms; issue 18's goal: >= 0.95 at "
                               "4096 and 8192")
            if ctx.pipelined is None:
                continue
            pipelined = ctx.pipelined
            pa, pb = _matmul_operands(pipelined, a_host, b_host, dtype)

            def burst() -> float:
                """Seconds per op of `repeats` ops issued back to back, then one sync."""
                start = time.perf_counter()
                for _ in range(s.repeats):
                    c = pipelined.run_op(_ops.MATMUL, pa, pb, **attrs)
                pipelined.sync()
                elapsed = time.perf_counter() - start
                del c
                return elapsed / s.repeats

            burst()
            per_op = percentile([burst() for _ in range(PIPELINED_BURSTS)], 50)
            pa.free()
            pb.free()
            ctx.report.add(Figure(f"{name}_pipelined_ms", per_op * 1e3, "ms", False),
                           f"median of {PIPELINED_BURSTS} bursts of {s.repeats} back to back, "
                           "each then sync()")
            torch_s = _torch_matmul(ctx, n, dtype, pipelined=True) if torch is not None else None
            if torch_s is not None:
                ctx.report.add(Figure(f"{name}_pipelined_vs_torch", torch_s / per_op, "x", True),
                               f"torch {torch_s * 1e3:.3f} ms; issue 18's goal: >= 0.98")


def _torch_matmul(ctx: Context, n: int, dtype: str, pipelined: bool) -> float:
    """torch's seconds per n x n matmul in `dtype` in this process: the median of
    synchronized calls, or with `pipelined` the median over PIPELINED_BURSTS bursts of the
    mean of `repeats` calls back to back."""
    torch, s = ctx.torch, ctx.settings
    tdtype = _torch_dtype(torch, dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        a = torch.randn(n, n, device="cuda", dtype=tdtype)
        b = torch.randn(n, n, device="cuda", dtype=tdtype)
        if not pipelined:
            return percentile(torch_seconds(torch, lambda: a @ b, s.repeats, s.warmup), 50)
        for _ in range(s.warmup):
            a @ b
        torch.cuda.synchronize()

        def burst() -> float:
            start = time.perf_counter()
            for _ in range(s.repeats):
                c = a @ b
            torch.cuda.synchronize()
            del c
            return (time.perf_counter() - start) / s.repeats

        return percentile([burst() for _ in range(PIPELINED_BURSTS)], 50)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def run_elementwise(ctx: Context) -> None:
    s, gk, torch = ctx.settings, ctx.session, ctx.torch
    n = s.elementwise_elements
    operand_mib = n * 4 // MiB
    label = f"{operand_mib}MiB" if operand_mib else f"{n * 4 // 1024}KiB"
    ctx.report.section(f"elementwise: a + b, {n} x float32 each ({label}), {s.repeats} runs")
    moved = 3 * n * 4  # two operands read, one result written
    a = gk.array(np.ones(n, dtype=np.float32))
    b = gk.array(np.ones(n, dtype=np.float32))
    time_calls(lambda: a + b, s.warmup)
    seconds = percentile(time_calls(lambda: a + b, s.repeats), 50)
    add_gbps = moved / seconds / 1e9
    ctx.report.add(Figure(f"add_{label}_gbps", add_gbps, "GB/s", True),
                   "bytes read and written per second")
    a.free()
    b.free()
    if torch is None:
        ctx.report.skip(f"add_{label}_vs_copy", ctx.torch_reason)
        return
    # A copy of `moved / 2` bytes reads and writes as many bytes as the add.
    src = torch.ones(moved // 8, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_seconds = percentile(torch_seconds(torch, lambda: dst.copy_(src), s.repeats, s.warmup),
                              50)
    copy_gbps = moved / copy_seconds / 1e9
    ctx.report.add(Figure(f"copy_{label}_torch_gbps", copy_gbps, "GB/s", True, reference=True),
                   "torch device-to-device copy, as many bytes moved")
    ctx.report.add(Figure(f"add_{label}_vs_copy", add_gbps / copy_gbps, "x", True))


def run_transfer(ctx: Context) -> None:
    s, gk = ctx.settings, ctx.session
    size = s.transfer_bytes
    label = f"{size // MiB}MiB"
    ctx.report.section(f"transfer: {label} of uint8, {s.repeats} runs each way")
    host = np.ones(size, dtype=np.uint8)
    time_calls(lambda: gk.array(host), s.warmup, lambda a: a.free())
    seconds = percentile(time_calls(lambda: gk.array(host), s.repeats, lambda a: a.free()), 50)
    ctx.report.add(Figure(f"upload_{label}_gbps", size / seconds / 1e9, "GB/s", True),
                   "gk.array(host)")
    a = gk.array(host)
    time_calls(a.numpy, s.warmup)
    seconds = percentile(time_calls(a.numpy, s.repeats), 50)
    ctx.report.add(Figure(f"download_{label}_gbps", size / seconds / 1e9, "GB/s", True),
                   "a.numpy()")
    a.free()
