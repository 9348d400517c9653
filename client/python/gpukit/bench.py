"""gpukit-bench: the request path of gpukitd measured the way users measure it.

Runs a suite against a gpukitd that runs already (``--address``; default ``$GPUKIT_ADDR`` or
the default socket, as for ``gpukitctl``) or one it starts on a private socket
(``--gpukitd PATH``), prints a table row by row, and writes the figures as JSON
(``--save FILE``). ``--compare OLD.json [NEW.json]`` puts two runs side by side (with one file,
this run is the new one); ``--fail-on-regression`` makes a figure that got worse by more than
``--threshold`` (default 0.10) in its own direction exit with status 1.

The suites (``--only a,b`` picks some):

ping
    grpc.health.v1 Health/Check through a bare channel: the floor of any call (p50, p99),
    and its p50 after 1.5 ms without calls (the pause a synchronous large op leaves the
    transport), what a synchronous large op's round trip costs on top of its device time.
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
import json
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from ._bench_report import (
    DEFAULT_THRESHOLD,
    Report,
    compare,
    load_report,
    percentile,
    print_comparison,
)
from ._bench_suites import (
    MATMUL_DTYPES,
    SUITES,
    Context,
    Settings,
    _has_pipeline_parameter,
    connect_pipelined,
    load_torch,
    progress,
    run_chain,
    run_elementwise,
    run_latency,
    run_matmul,
    run_transfer,
)

__all__ = ["SUITES", "load_report", "compare", "main", "percentile"]


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
    if args.no_submit_socket:
        sync_only["submit_socket"] = False
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
            "submit_socket": not args.no_submit_socket,
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
    parser.add_argument("--no-submit-socket", action="store_true",
                        help="ops over gRPC, not the daemon's submit socket (to "
                             "compare the two)")
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
