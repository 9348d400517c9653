"""gpukit-bench: the request path of gpukitd measured the way users measure it.

Runs a suite against a gpukitd that runs already (``--address``; default ``$GPUKIT_ADDR`` or
the default socket, as for ``gpukitctl``) or one it starts on a private socket
(``--gpukitd PATH``), prints a table row by row, and writes the figures as JSON
(``--save FILE``). ``--compare OLD.json [NEW.json]`` puts two runs side by side (with one file,
this run is the new one); ``--fail-on-regression`` makes a figure that got worse by more than
``--threshold`` (default 0.10) in its own direction exit with status 1.

The suites (``--only a,b`` picks some):

ping
    grpc.health.v1 Health/Check through a bare channel: the floor of any call (p50, p99).
runop
    ``c = a + b`` on 16 float32 elements, synchronous (p50, p99; and its ratio to the ping),
    then ``c.free()``, timed on its own.
chain
    A chain of dependent ``x = x + y`` on 16 elements: synchronous, pipelined (a session made
    with ``gpukit.connect(..., pipeline=True)``, ``sync()`` at the end) where the client has
    pipelining, and torch's same chain in this process as the reference (ops/s).
matmul
    Square matmuls (1024, 4096, 8192 on a GPU) in float32, tf32, float16 and bfloat16, each
    timed synchronously with its result kept, against ``torch.matmul`` in this process when
    torch with CUDA is importable and the daemon runs on CUDA (ratio: torch's time / gpukit's).
elementwise
    ``a + b`` in float32 in bytes moved per second (two read, one written), against a
    device-to-device copy by torch that moves as many bytes.
transfer
    Upload (``gk.array(host)``) and download (``a.numpy()``) of 64 MiB (GB/s).

Figures a suite cannot measure here (no torch, no pipelined client, ...) are listed as
skipped with the reason. ``--quick`` uses tiny sizes (what CI runs on the CPU backend).

Examples
--------
::

    gpukit-bench --gpukitd build/daemon/gpukitd --backend cpu --quick
    gpukit-bench --save h100-main.json                  # against the running gpukitd
    gpukit-bench --compare h100-main.json --fail-on-regression --threshold 0.05
    gpukit-bench --compare old.json new.json            # two saved runs, no run
"""

from __future__ import annotations

import argparse
import datetime
import gc
import inspect
import json
import math
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

import numpy as np

#: The JSON's "schema"; "schema_version" grows when a field changes meaning.
SCHEMA = "gpukit-bench"
SCHEMA_VERSION = 1
SUITES = ("ping", "runop", "chain", "matmul", "elementwise", "transfer")
MATMUL_DTYPES = ("float32", "tf32", "float16", "bfloat16")
DEFAULT_THRESHOLD = 0.10
MiB = 1 << 20


# --- figures and the report ----------------------------------------------------------------


@dataclass
class Figure:
    """One measured number.

    ``reference`` marks a figure of something other than gpukit (torch's time): it is shown
    and compared, but never counts as a regression of gpukit.
    """

    name: str
    value: float
    unit: str
    higher_is_better: bool
    reference: bool = False


@dataclass
class Skipped:
    """A figure, or a group of them, that this run could not measure, and why."""

    name: str
    reason: str


def _format_value(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{value:.3e}"


class Report:
    """The figures of one run, printed as a table row by row as they are added."""

    def __init__(self, header: Dict[str, Any], out: Optional[TextIO] = None) -> None:
        self.header = header
        self.figures: List[Figure] = []
        self.skipped: List[Skipped] = []
        self._out = out  # None: sys.stdout as it is when a line is printed

    def print_header(self) -> None:
        h = self.header
        self._print(
            f"gpukit-bench: gpukit {h['gpukit_version']}, gpukitd {h['daemon_version']} "
            f"({h['backend']}: {h['device']}) at {h['address']}"
            f"{', quick' if h['quick'] else ''}"
        )
        self._print(f"{'figure':<40} {'value':>12} {'unit':<8} better")

    def add(self, figure: Figure, note: str = "") -> None:
        if not (isinstance(figure.value, (int, float)) and math.isfinite(figure.value)):
            raise ValueError(f"figure {figure.name} = {figure.value!r} is not a finite number")
        self.figures.append(figure)
        better = "higher" if figure.higher_is_better else "lower"
        tail = "  (reference)" if figure.reference else ""
        tail += f"  {note}" if note else ""
        self._print(
            f"{figure.name:<40} {_format_value(figure.value):>12} {figure.unit:<8} {better}{tail}"
        )

    def skip(self, name: str, reason: str) -> None:
        self.skipped.append(Skipped(name, reason))
        self._print(f"{name:<40} {'skipped':>12} {'':<8} {reason}")

    def section(self, title: str) -> None:
        self._print(f"-- {title}")

    def to_json(self) -> Dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            **self.header,
            "figures": [asdict(f) for f in self.figures],
            "skipped": [asdict(s) for s in self.skipped],
        }

    def _print(self, line: str) -> None:
        print(line, file=self._out or sys.stdout, flush=True)


def progress(message: str) -> None:
    """A line on stderr about long work about to start (the table is on stdout)."""
    print(f".. {message}", file=sys.stderr, flush=True)


# --- statistics ----------------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank `q`-th percentile (0 < q <= 100) of `samples`, which must not be
    empty: the smallest sample with at least q% of the samples at or below it."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


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
    us = 1e6
    if ping_s:
        ctx.report.add(Figure("ping_p50_us", percentile(ping_s, 50) * us, "us", False),
                       "grpc.health.v1 Check, bare channel")
        ctx.report.add(Figure("ping_p99_us", percentile(ping_s, 99) * us, "us", False))
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
                return gk.run_op("matmul", a, b, **attrs)

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
                    c = pipelined.run_op("matmul", pa, pb, **attrs)
                pipelined.sync()
                elapsed = time.perf_counter() - start
                del c
                return elapsed / s.repeats

            burst()
            per_op = burst()
            pa.free()
            pb.free()
            ctx.report.add(Figure(f"{name}_pipelined_ms", per_op * 1e3, "ms", False),
                           f"{s.repeats} back to back, then sync()")
            torch_s = _torch_matmul(ctx, n, dtype, pipelined=True) if torch is not None else None
            if torch_s is not None:
                ctx.report.add(Figure(f"{name}_pipelined_vs_torch", torch_s / per_op, "x", True),
                               f"torch {torch_s * 1e3:.3f} ms; issue 18's goal: >= 0.98")


def _torch_matmul(ctx: Context, n: int, dtype: str, pipelined: bool) -> float:
    """torch's seconds per n x n matmul in `dtype` in this process: the median of
    synchronized calls, or with `pipelined` the mean of `repeats` calls back to back."""
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
        start = time.perf_counter()
        for _ in range(s.repeats):
            c = a @ b
        torch.cuda.synchronize()
        del c
        return (time.perf_counter() - start) / s.repeats
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


# --- a gpukitd of its own ------------------------------------------------------------------


class StartedDaemon:
    """A gpukitd that this run starts on a unix socket in a temporary directory, and stops
    (SIGTERM) when the block ends; its log is printed when it fails to start."""

    def __init__(self, binary: str, backend: Optional[str], config: Optional[str]) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="gpukit-bench-"))
        self.socket = self._directory / "gpukitd.sock"
        self.address = f"unix://{self.socket}"
        self._log_path = self._directory / "gpukitd.log"
        self._command = [binary, "--listen", self.address]
        if backend:
            self._command += ["--backend", backend]
        if config:
            self._command += ["--config", config]
        self._process: Optional[subprocess.Popen] = None

    def __enter__(self) -> "StartedDaemon":
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120  # a CUDA backend's start can take tens of seconds
        while not (self.socket.exists() and self._accepts()):
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = self._log_path.read_text(errors="replace")
                self.__exit__(None, None, None)
                raise RuntimeError(f"gpukitd did not start ({' '.join(self._command)}):\n{log}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._directory, ignore_errors=True)

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(str(self.socket))
                return True
            except OSError:
                return False


# --- running the suite ---------------------------------------------------------------------


def run_suite(args: argparse.Namespace, address: str, suites: Sequence[str]) -> Report:
    import gpukit  # noqa: PLC0415 (the compiled module: only when something runs)
    from gpukit import _gpukit  # noqa: PLC0415

    probe = _gpukit.DaemonProbe.connect(address, args.connect_timeout)
    info = probe.info()
    # Synchronous, also where a client's sessions pipeline by default: runop times the reply.
    sync_only = {"pipeline": False} if _has_pipeline_parameter(gpukit) else {}
    session = gpukit.connect(address or None, tenant=args.tenant, client_name="gpukit-bench",
                             **sync_only)
    ctx: Optional[Context] = None
    try:
        devices = info.get("devices") or []
        device = next((d for d in devices if d["index"] == session.device_index),
                      devices[0] if devices else {"name": "unknown"})
        backend = device.get("backend") or info["backend"]
        settings = Settings.for_run(args, backend)
        torch, torch_reason = load_torch(backend)
        report = Report({
            "gpukit_version": gpukit.__version__,
            "daemon_version": info["version"],
            "backend": backend,
            "device": device["name"],
            "address": probe.address,
            "quick": bool(args.quick),
            "suites": list(suites),
            "host": platform.node(),
            "python": platform.python_version(),
            "torch": getattr(torch, "__version__", None),
            "time_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        })
        report.print_header()
        for note in settings.notes:
            progress(note)
        ctx = Context(gpukit, probe, session, probe.address, args.tenant, backend, settings,
                      report, torch, torch_reason)
        if "chain" in suites or "matmul" in suites:
            ctx.pipelined, ctx.pipelined_reason = connect_pipelined(gpukit, address, args.tenant)
        if "ping" in suites or "runop" in suites:
            run_latency(ctx, suites)
        runners = {"chain": run_chain, "matmul": run_matmul, "elementwise": run_elementwise,
                   "transfer": run_transfer}
        for suite in suites:
            if suite in runners:
                runners[suite](ctx)
        return report
    finally:
        if ctx is not None and ctx.pipelined is not None:
            ctx.pipelined.close()
        session.close()
        gc.collect()  # arrays of the suites let go of the session's channel now


# --- compare mode --------------------------------------------------------------------------


def load_report(path: str) -> Dict[str, Any]:
    """A saved run, checked to be one; raises ValueError naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file (no \"schema\": \"{SCHEMA}\")")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}; this "
                         f"gpukit-bench reads {SCHEMA_VERSION}")
    for i, f in enumerate(data.get("figures", [])):
        value = f.get("value") if isinstance(f, dict) else None
        if (not isinstance(f, dict) or not isinstance(f.get("name"), str)
                or not isinstance(value, (int, float)) or isinstance(value, bool)
                or not isinstance(f.get("higher_is_better"), bool)):
            raise ValueError(f"{path}: figures[{i}] needs name, a number value and "
                             f"higher_is_better: {f!r}")
    return data


@dataclass
class Change:
    """One figure of the comparison. `worse_by` is how much worse the new value is than the
    old, in the figure's own direction, as a fraction of the old (negative: better)."""

    name: str
    old: Optional[float]
    new: Optional[float]
    unit: str
    higher_is_better: bool
    reference: bool
    worse_by: Optional[float]

    def regressed(self, threshold: float) -> bool:
        return (not self.reference and self.worse_by is not None
                and self.worse_by > threshold)


def compare(old: Dict[str, Any], new: Dict[str, Any]) -> List[Change]:
    """Every figure of either run, in the new run's order, then those only the old one has."""
    old_figures = {f["name"]: f for f in old.get("figures", [])}
    new_figures = {f["name"]: f for f in new.get("figures", [])}
    names = list(new_figures) + [n for n in old_figures if n not in new_figures]
    changes = []
    for name in names:
        o, n = old_figures.get(name), new_figures.get(name)
        either = n or o
        higher = bool(either["higher_is_better"])
        worse_by = None
        if o is not None and n is not None and o["value"] != 0:
            change = (n["value"] - o["value"]) / abs(o["value"])
            worse_by = -change if higher else change
        changes.append(Change(name, o and o["value"], n and n["value"], either.get("unit", ""),
                              higher, bool(either.get("reference", False)), worse_by))
    return changes


def print_comparison(changes: Sequence[Change], threshold: float, old_label: str,
                     new_label: str, old_header: Dict[str, Any], new_header: Dict[str, Any],
                     out: Optional[TextIO] = None) -> List[Change]:
    """Prints old, new and the change of each figure (after a note for each of backend,
    device and --quick where the runs differ); returns the regressions."""
    out = out or sys.stdout
    for key in ("backend", "device", "quick"):
        if old_header.get(key) != new_header.get(key):
            print(f"note: {key} differs: old {old_header.get(key)!r}, new "
                  f"{new_header.get(key)!r}", file=out)
    print(f"comparison: old {old_label}, new {new_label}; worse by more than "
          f"{threshold:.0%} in a figure's own direction is a regression", file=out)
    print(f"{'figure':<40} {'old':>12} {'new':>12} {'change':>8}  verdict", file=out)
    regressions = []
    for c in changes:
        if c.old is None or c.new is None:
            verdict = "only in " + ("new" if c.old is None else "old")
            change = ""
        elif c.worse_by is None:
            verdict, change = "old is 0", ""
        else:
            change = f"{(c.new - c.old) / abs(c.old):+.1%}"
            if c.regressed(threshold):
                verdict = "REGRESSION"
                regressions.append(c)
            elif c.worse_by > threshold:
                verdict = "worse (reference)"
            elif -c.worse_by > threshold:
                verdict = "better"
            else:
                verdict = "same"
        print(f"{c.name:<40} {_format_value(c.old):>12} {_format_value(c.new):>12} "
              f"{change:>8}  {verdict}", file=out)
    print(f"{len(regressions)} regression(s) of {sum(1 for c in changes if c.worse_by is not None)}"
          " figure(s) in both runs", file=out)
    return regressions


# --- command line --------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpukit-bench", description=__doc__.split("\n\n")[0],
        epilog="Suites: " + ", ".join(SUITES) + ". See the module's help (pydoc gpukit.bench) "
               "and docs/benchmarks.md.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--address", help="gpukitd's address (default: $GPUKIT_ADDR, else the "
                                         "default socket)")
    where.add_argument("--gpukitd", metavar="PATH",
                       help="start this gpukitd on a private unix socket for the run")
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"),
                        help="--backend of the gpukitd that --gpukitd starts")
    parser.add_argument("--daemon-config", metavar="FILE",
                        help="--config of the gpukitd that --gpukitd starts")
    parser.add_argument("--only", metavar="A,B", help="run only these suites, of: "
                                                      + ", ".join(SUITES))
    parser.add_argument("--iterations", type=int, metavar="N",
                        help="timed calls per latency figure (default 2000, --quick 200); "
                             "chains run 10 x N ops")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and counts: a check that everything runs (CI)")
    parser.add_argument("--matmul-sizes", type=lambda v: [int(x) for x in v.split(",")],
                        metavar="N,N", help="matmul sizes (default 1024,4096,8192 on cuda)")
    parser.add_argument("--matmul-dtypes", type=lambda v: v.split(","), metavar="D,D",
                        help="of " + ", ".join(MATMUL_DTYPES) + " (default: all)")
    parser.add_argument("--tenant", default="gpukit-bench", help="tenant of the sessions")
    parser.add_argument("--connect-timeout", type=float, default=5.0, metavar="S")
    parser.add_argument("--save", metavar="FILE", help="write the figures as JSON")
    parser.add_argument("--compare", nargs="+", metavar="FILE",
                        help="OLD.json: compare this run with it; OLD.json NEW.json: compare two "
                             "saved runs without running anything")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a figure is worse than in OLD by more than the "
                             "threshold")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, metavar="F",
                        help="relative change that counts as a regression (default 0.10)")
    args = parser.parse_args(argv)
    if args.compare and len(args.compare) > 2:
        parser.error("--compare takes OLD.json, or OLD.json NEW.json")
    if args.fail_on_regression and not args.compare:
        parser.error("--fail-on-regression needs --compare")
    if not 0 <= args.threshold:
        parser.error("--threshold must be >= 0")
    if args.iterations is not None and args.iterations < 10:
        parser.error("--iterations must be >= 10")
    if (args.backend or args.daemon_config) and not args.gpukitd:
        parser.error("--backend and --daemon-config apply to the gpukitd that --gpukitd starts")
    for dtype in args.matmul_dtypes or []:
        if dtype not in MATMUL_DTYPES:
            parser.error(f"--matmul-dtypes: {dtype!r} is not one of {', '.join(MATMUL_DTYPES)}")
    args.suites = list(SUITES)
    if args.only:
        args.suites = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in args.suites if s not in SUITES]
        if unknown or not args.suites:
            parser.error(f"--only: {', '.join(unknown) or '(none)'}: suites are "
                         + ", ".join(SUITES))
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The console script's entry point; returns the exit status (0; 1 for a regression with
    --fail-on-regression; 2 for bad arguments or unreadable files; 3 when the run failed)."""
    args = parse_args(argv)
    old = new = None
    try:
        if args.compare:
            old = load_report(args.compare[0])
            if len(args.compare) == 2:
                new = load_report(args.compare[1])
    except ValueError as e:
        print(f"gpukit-bench: {e}", file=sys.stderr)
        return 2
    if new is None:  # run the suite
        try:
            if args.gpukitd:
                with StartedDaemon(args.gpukitd, args.backend, args.daemon_config) as daemon:
                    report = run_suite(args, daemon.address, args.suites)
            else:
                report = run_suite(args, args.address or "", args.suites)
        except Exception as e:  # noqa: BLE001 (a bench reports what stopped it, and exits)
            print(f"gpukit-bench: {type(e).__name__}: {e}", file=sys.stderr)
            return 3
        new = report.to_json()
        if args.save:
            Path(args.save).write_text(json.dumps(new, indent=2) + "\n")
            print(f"saved {len(new['figures'])} figures to {args.save}")
    if old is None:
        return 0
    regressions = print_comparison(compare(old, new), args.threshold, args.compare[0],
                                   args.compare[1] if len(args.compare) == 2 else "this run",
                                   old, new)
    return 1 if regressions and args.fail_on_regression else 0


if __name__ == "__main__":
    sys.exit(main())
