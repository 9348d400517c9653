#!/usr/bin/env python3
"""QoS isolation (issue 16): a latency-sensitive victim beside a flood of large matmuls,
through gpukitd and, for reference, as plain torch processes and under MPS, in one run.

Scenarios, one after the other, each victim kind for --duration seconds while the flood runs:

  1              victim alone through gpukitd (no partitions configured: `default` has the
                 whole device; the victim's session is Guaranteed)
  flood-gpukitd  the flood alone through gpukitd, in the same place (BestEffort sessions)
  2              victim + flood through gpukitd in one partition (`default`, the whole device):
                 the victim Guaranteed, the flood BestEffort
  3              victim in a Guaranteed tenant's partition `guaranteed` (compute share 0.6),
                 flood in a partition `besteffort` (share 0.2): the same sessions
  plain-victim   victim alone as a plain torch process (no gpukitd)
  plain-flood    flood alone as a plain torch process
  4              victim + flood as two plain torch processes: the GPU's time-slicing
  5              the same two processes under MPS (a private control daemon of this run)
  6              MPS with the flood's process at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30

Victims, each a process of its own: `matmul`, square matmuls one at a time (default 1024^3
bf16), each waited for (gpukitd: `c = a @ b` returns once the result is complete; torch:
torch.cuda.synchronize()); `decode`, a decode step's chain of 30 small dependent ops on a
[1, hidden] activation (10 times: matmul with a [hidden, hidden] weight, multiply, add),
timed as a whole (gpukitd: 30 RunOps, each returning once done; torch: one synchronize at the
end). The flood, a process of its own: square matmuls (default 8192^3 bf16) as fast as they
go from two threads (gpukitd: two sessions, one per thread; torch: two threads, each with
its own CUDA stream, waiting for each of its matmuls).

Reported: the victim's p50/p99/p99.9 latency and their ratios to the victim alone through the
same path (gpukitd scenarios against 1, torch and MPS against plain-victim); the flood's
TFLOP/s while each victim ran, as a ratio to the flood alone through the same path. The table
goes to stdout, then, as the very last line, one JSON object with every figure (--save FILE
writes it too). Progress goes to stderr. Nothing here asserts a timing.

    . ./env.sh && bin/qos_isolation_bench.py --save qos.json     # from a bundle, GPU host
    tests/bench/qos_isolation_bench.py --cpu --duration 2        # here: CPU backend, 1-3

Without torch or a CUDA device (or with --cpu) it runs gpukitd's CPU backend with small
float32 sizes, scenarios 1-3 only. It finds gpukitd, gpukitctl and the gpukit package beside
itself in a bundle (bin/, python/), else in the build tree ($GPUKIT_BUILD_DIR, default build/);
$GPUKITD and $GPUKITCTL override the binaries. With the defaults on the GPU the run takes
about 7 minutes; --scenarios runs a part (each scenario brings the references it needs).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # gpukitd_socket.py lies beside this file, here and in a bundle
    sys.path.insert(0, str(HERE))
from gpukitd_socket import wait_for_gpukitd  # noqa: E402
THIS = Path(__file__).resolve()


def _layout() -> Dict[str, Path]:
    """gpukitd, gpukitctl and the package's directory: a bundle's bin/, else the build tree."""
    if (HERE / "gpukitd").exists():  # a bundle's bin/
        found = {"gpukitd": HERE / "gpukitd", "gpukitctl": HERE / "gpukitctl",
                 "python": HERE.parent / "python"}
    else:
        build = Path(os.environ.get("GPUKIT_BUILD_DIR", HERE.parents[1] / "build")).resolve()
        found = {"gpukitd": build / "daemon" / "gpukitd",
                 "gpukitctl": build / "client" / "cpp" / "gpukitctl", "python": build / "python"}
    for name, env in (("gpukitd", "GPUKITD"), ("gpukitctl", "GPUKITCTL")):
        if os.environ.get(env):
            found[name] = Path(os.environ[env])
    return found


LAYOUT = _layout()

DECODE_LAYERS = 10  # each a matmul, a multiply and an add: a chain of 30 ops
DECODE_WEIGHTS = 4  # distinct [hidden, hidden] weights the layers cycle through


# --------------------------------------------------------------------------------------------
# Workers: each workload is this script run again as a process (--worker ROLE SPEC). It sets
# up, prints READY on stdout, and then: a victim waits for a line (GO) and runs each victim
# kind for spec["duration_s"]; the flood runs until a line (STOP) or EOF arrives on stdin. Each
# writes its result as JSON to spec["out"]. Timestamps are time.monotonic() (CLOCK_MONOTONIC,
# the same clock in every process of the host), so the parent can line windows up.
# --------------------------------------------------------------------------------------------


def _import_gpukit():
    if (LAYOUT["python"] / "gpukit" / "__init__.py").exists():
        sys.path.insert(0, str(LAYOUT["python"]))
    import gpukit

    return gpukit


def _gpukit_session(spec: Dict[str, Any], role: str):
    gpukit = _import_gpukit()
    resources = spec.get("resources") or {}
    return gpukit.connect(spec["address"], tenant=f"qos-bench-{role.split('-')[0]}",
                          partition=spec["partition"], client_name=f"qos-bench-{role}",
                          call_timeout_s=600.0, **resources,
                          pipeline=False)  # a step returns once its ops have run


def _host_matrix(rows: int, cols: int, scale: float = 1.0, seed: int = 0):
    """Normal random float32 values times `scale`."""
    import numpy as np

    data = np.random.default_rng(seed).standard_normal((rows, cols), np.float32)
    return data * np.float32(scale) if scale != 1.0 else data


def _upload(gk: Any, host: Any, dtype: str) -> Any:
    """`host` (float32) as a new array of `dtype`, converted in gpukitd (faster than on the
    host for the flood's 8192^2 matrices)."""
    array = gk.array(host)
    return array if dtype == "float32" else array.astype(dtype)


def _gpukit_victims(spec: Dict[str, Any]) -> Tuple[Dict[str, Callable[[], Any]], Dict]:
    """One synchronous step per victim kind (their arrays keep the session open), and facts
    about the session."""
    gpukit = _import_gpukit()
    gk = _gpukit_session(spec, "victim")
    dtype, n, hidden = spec["dtype"], spec["victim_size"], spec["hidden"]
    steps: Dict[str, Callable[[], Any]] = {}
    if "matmul" in spec["victims"]:
        a = _upload(gk, _host_matrix(n, n), dtype)
        b = _upload(gk, _host_matrix(n, n, 0.5, seed=1), dtype)
        steps["matmul"] = lambda: a @ b  # returns once the result is complete
    if "decode" in spec["victims"]:
        x0 = _upload(gk, _host_matrix(1, hidden), dtype)
        scale = _upload(gk, _host_matrix(1, hidden, 0.1, seed=1), dtype)
        weights = [_upload(gk, _host_matrix(hidden, hidden, hidden**-0.5, seed=2 + i), dtype)
                   for i in range(DECODE_WEIGHTS)]

        def decode() -> List[Any]:
            kept = []  # freed after the timing: the chain's time is its 30 ops
            x = x0
            for layer in range(DECODE_LAYERS):
                h = x @ weights[layer % DECODE_WEIGHTS]
                g = h * scale
                x = x + g
                kept += [h, g, x]
            return kept

        steps["decode"] = decode
    facts = {"session_qos_class": gk.qos_class, "session_partition": gk.partition,
             "gpukit": getattr(gpukit, "__version__", None)}
    return steps, facts


def _torch_dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def _torch_victims(spec: Dict[str, Any]) -> Tuple[Dict[str, Callable[[], Any]], Dict]:
    import torch

    dt, n, hidden = _torch_dtype(spec["dtype"]), spec["victim_size"], spec["hidden"]
    generator = torch.Generator(device="cuda").manual_seed(1)

    def rand(rows: int, cols: int, scale: float = 1.0):
        return (torch.randn(rows, cols, device="cuda", generator=generator) * scale).to(dt)

    steps: Dict[str, Callable[[], Any]] = {}
    if "matmul" in spec["victims"]:
        a, b = rand(n, n), rand(n, n, 0.5)

        def matmul():
            c = a @ b
            torch.cuda.synchronize()
            return c

        steps["matmul"] = matmul
    if "decode" in spec["victims"]:
        x0, scale = rand(1, hidden), rand(1, hidden, 0.1)
        weights = [rand(hidden, hidden, hidden**-0.5) for _ in range(DECODE_WEIGHTS)]

        def decode():
            x = x0
            for layer in range(DECODE_LAYERS):
                x = x + (x @ weights[layer % DECODE_WEIGHTS]) * scale
            torch.cuda.synchronize()
            return x

        steps["decode"] = decode
    torch.cuda.synchronize()
    return steps, {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}


def _time_steps(step: Callable[[], Any], duration_s: float) -> Dict[str, Any]:
    clock = time.perf_counter_ns
    latencies_us: List[float] = []
    start = time.monotonic()
    end = start + duration_s
    while True:
        t = clock()
        kept = step()
        latencies_us.append((clock() - t) / 1000.0)
        del kept  # a gpukit result's free (a round trip) falls outside the timing
        if time.monotonic() >= end:
            break
    return {"window": [start, time.monotonic()], "latencies_us": latencies_us}


def _victim_worker(spec: Dict[str, Any], ready: Any) -> Dict[str, Any]:
    make = _gpukit_victims if spec["path"] == "gpukitd" else _torch_victims
    steps, facts = make(spec)
    kinds = [k for k in spec["victims"] if k in steps]
    for kind in kinds:  # warm-up: kernels, plans, the pool
        for _ in range(spec["warmup"]):
            steps[kind]()
    print("READY", file=ready, flush=True)
    if not sys.stdin.readline():  # GO; EOF: the parent is gone
        return {}
    runs = {kind: _time_steps(steps[kind], spec["duration_s"]) for kind in kinds}
    return {**facts, "runs": runs}


def _flood_worker(spec: Dict[str, Any], ready: Any) -> Dict[str, Any]:
    threads, n, dtype = spec["flood_threads"], spec["flood_size"], spec["dtype"]
    stop = threading.Event()
    done: List[List[float]] = [[] for _ in range(threads)]
    facts: Dict[str, Any] = {}
    if spec["path"] == "gpukitd":
        host_a, host_b = _host_matrix(n, n), _host_matrix(n, n, 0.5, seed=1)
        sessions = [_gpukit_session(spec, f"flood-{i}") for i in range(threads)]
        operands = [(_upload(gk, host_a, dtype), _upload(gk, host_b, dtype)) for gk in sessions]
        del host_a, host_b
        facts = {"session_qos_class": sessions[0].qos_class,
                 "session_partition": sessions[0].partition}

        def make_step(i: int) -> Callable[[], None]:
            a, b = operands[i]

            def step() -> None:
                c = a @ b  # returns once the result is complete
                del c
            return step
    else:
        import torch

        dt = _torch_dtype(dtype)
        a = torch.randn(n, n, device="cuda").to(dt)
        b = (torch.randn(n, n, device="cuda") * 0.5).to(dt)
        streams = [torch.cuda.Stream() for _ in range(threads)]
        torch.cuda.synchronize()
        facts = {"torch": torch.__version__}

        def make_step(i: int) -> Callable[[], None]:
            stream = streams[i]

            def step() -> None:
                with torch.cuda.stream(stream):
                    c = a @ b
                stream.synchronize()
                del c
            return step

    steps = [make_step(i) for i in range(threads)]
    for step in steps:
        for _ in range(spec["warmup"]):
            step()
    errors: List[str] = []

    def loop(i: int) -> None:
        try:
            while not stop.is_set():
                steps[i]()
                done[i].append(time.monotonic())
        except Exception as e:  # noqa: BLE001 - reported to the parent
            errors.append(f"thread {i}: {type(e).__name__}: {e}")
            stop.set()

    workers = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    print("READY", file=ready, flush=True)
    waiter = threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True)
    waiter.start()
    stop.wait(spec["max_s"])  # STOP or EOF from the parent; max_s if it hangs
    stop.set()
    for w in workers:
        w.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return {**facts, "started": started, "done": sorted(t for d in done for t in d)}


def _worker_main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    ready = sys.stdout
    sys.stdout = sys.stderr  # only READY goes to the parent's pipe
    result = (_victim_worker if role == "victim" else _flood_worker)(spec, ready)
    Path(spec["out"]).write_text(json.dumps(result))
    sys.stderr.flush()
    os._exit(0)  # sessions and CUDA contexts go with the process; no slow teardown


# --------------------------------------------------------------------------------------------
# The parent: daemons, MPS, workers, scenarios, figures.
# --------------------------------------------------------------------------------------------


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Daemon:
    """gpukitd on a private unix socket with a config of its own; a context manager."""

    def __init__(self, backend: str, config: Dict[str, Any], workdir: Path, name: str) -> None:
        self._dir = workdir / name
        self._dir.mkdir()
        sock = self._dir / "gpukitd.sock"
        config_path = self._dir / "gpukitd.json"
        config_path.write_text(json.dumps(config, indent=1))
        self.log_path = self._dir / "gpukitd.log"
        self.address = f"unix://{sock}"
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [str(LAYOUT["gpukitd"]), "--listen", self.address, "--backend", backend,
                 "--config", str(config_path), "--log-level", "info"],
                stdout=log, stderr=subprocess.STDOUT)
        if not wait_for_gpukitd(self._process, sock, timeout_s=120):
            self.stop()
            raise RuntimeError(f"gpukitd did not start:\n{_tail(self.log_path)}")

    def matmul_note(self) -> Optional[str]:
        """What gpukitd's log says matmul runs on (cuBLASLt's version, or gpukit's kernel)."""
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "matmul through cuBLASLt" in line or "matmul uses gpukit's own kernel" in line:
                return line.split("] ")[-1]
        return None

    def partition_device_time_ns(self) -> Optional[Dict[str, int]]:
        """Device time per partition since the daemon started (set-up and warm-up included),
        as `gpukitctl partitions` reports it; None if it cannot tell."""
        try:
            out = subprocess.run([str(LAYOUT["gpukitctl"]), "--addr", self.address, "-o", "json",
                                  "partitions"], check=True, capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        return {p.get("partition", {}).get("name", "?"): int(p.get("deviceTimeNs", 0))
                for p in json.loads(out).get("partitions", [])}

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Mps:
    """A private MPS control daemon: its pipe and log directories in this run's temporary
    directory, so it meets no other MPS of the host. The GPU's settings are not touched."""

    def __init__(self, workdir: Path) -> None:
        pipe, log = workdir / "mps-pipe", workdir / "mps-log"
        pipe.mkdir()
        log.mkdir()
        self._log = log
        self.env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
                    "CUDA_MPS_LOG_DIRECTORY": str(log)}
        self._control = shutil.which("nvidia-cuda-mps-control")
        self._started = False
        self.servers = ""

    def _ask(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run([self._control or "nvidia-cuda-mps-control"], input=command + "\n",
                              env=self.env, capture_output=True, text=True, timeout=60)

    def start(self) -> Optional[str]:
        """Starts it and checks that a CUDA client runs under it: None, or why not."""
        if self._control is None:
            return "nvidia-cuda-mps-control is not on PATH"
        try:
            started = subprocess.run([self._control, "-d"], env=self.env, capture_output=True,
                                     text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            return f"nvidia-cuda-mps-control -d: {e}"
        if started.returncode != 0:
            return (f"nvidia-cuda-mps-control -d exited with {started.returncode}: "
                    f"{(started.stdout + started.stderr).strip()}")
        self._started = True
        probe = _torch_probe(self.env)
        if probe is None or not probe.get("cuda"):
            why = probe.get("error") if probe else "the probe failed"
            return f"a CUDA client does not start under it ({why}); control.log: " + \
                _tail(self._log / "control.log", 5).replace("\n", " | ")
        self.servers = self._ask("get_server_list").stdout.strip()
        if not self.servers:
            return "a CUDA client ran but no MPS server was started for it; control.log: " + \
                _tail(self._log / "control.log", 5).replace("\n", " | ")
        return None

    def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                self._ask("quit")
            except (OSError, subprocess.SubprocessError) as e:
                _progress(f"MPS quit failed: {e}")


def _torch_probe(env: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
    """torch's version and the CUDA device's name, from a process of its own (this one holds
    no CUDA context); None without torch."""
    code = textwrap.dedent("""\
        import json
        try:
            import torch
        except ImportError:
            print("null")
            raise SystemExit
        try:
            ok = torch.cuda.is_available()
            name = torch.cuda.get_device_name(0) if ok else None
            if ok:
                torch.zeros(1, device="cuda")  # a context: under MPS, the client connects
            print(json.dumps({"torch": torch.__version__, "cuda": ok, "device": name}))
        except Exception as e:
            print(json.dumps({"torch": torch.__version__, "cuda": False,
                              "error": f"{type(e).__name__}: {e}"}))
        """)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, env=env)
        lines = out.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {"cuda": False, "error": out.stderr[-300:]}
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        return {"cuda": False, "error": str(e)}


class Worker:
    """One workload process (this script with --worker); see the workers' protocol above."""

    def __init__(self, role: str, spec: Dict[str, Any], env: Optional[Dict[str, str]],
                 workdir: Path, name: str) -> None:
        self.name = name
        self.out = workdir / f"{name}.json"
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(THIS), "--worker", role,
                 json.dumps({**spec, "out": str(self.out)})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)

    def _fail(self, what: str) -> RuntimeError:
        return RuntimeError(f"{self.name} {what}; its log:\n{_tail(self.log_path)}")

    def wait_ready(self, timeout_s: float) -> None:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if line.strip() != "READY":
            raise self._fail("did not get ready" + ("" if ready else f" in {timeout_s:.0f} s"))

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]

    def finish(self, timeout_s: float) -> Dict[str, Any]:
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise self._fail(f"did not end in {timeout_s:.0f} s") from None
        if code != 0 or not self.out.exists():
            raise self._fail(f"exited with {code}")
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclasses.dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    path: str  # gpukitd, torch or mps
    victim: bool
    flood: bool
    layout: str = ""  # gpukitd: "whole" (no partitions) or "split" (two partitions)
    flood_threads_percent: Optional[int] = None  # MPS: the flood's active thread percentage

    @property
    def victim_reference(self) -> Optional[str]:
        if not self.victim:
            return None
        return "1" if self.path == "gpukitd" else "plain-victim"

    @property
    def flood_reference(self) -> Optional[str]:
        if not self.flood:
            return None
        return "flood-gpukitd" if self.path == "gpukitd" else "plain-flood"


SCENARIOS = [
    Scenario("1", "victim alone", "gpukitd", True, False, "whole"),
    Scenario("flood-gpukitd", "flood alone", "gpukitd", False, True, "whole"),
    Scenario("2", "victim + flood, one partition", "gpukitd", True, True, "whole"),
    Scenario("3", "victim (Guaranteed partition) + flood (BestEffort partition)", "gpukitd",
             True, True, "split"),
    Scenario("plain-victim", "victim alone, plain torch", "torch", True, False),
    Scenario("plain-flood", "flood alone, plain torch", "torch", False, True),
    Scenario("4", "victim + flood, plain torch (time-slicing)", "torch", True, True),
    Scenario("5", "victim + flood under MPS", "mps", True, True),
    Scenario("6", "victim + flood under MPS, flood at 30% of the threads", "mps", True, True,
             flood_threads_percent=30),
]
BY_ID = {s.id: s for s in SCENARIOS}
CPU_SCENARIOS = ("1", "flood-gpukitd", "2", "3")


def _selected(requested: List[str]) -> List[Scenario]:
    """The requested scenarios and the references they need, in the run's order."""
    wanted = set(requested)
    for sid in requested:
        s = BY_ID[sid]
        wanted.update(r for r in (s.victim_reference, s.flood_reference) if r)
    return [s for s in SCENARIOS if s.id in wanted]


def _daemon_config(args: argparse.Namespace, layout: str) -> Dict[str, Any]:
    config: Dict[str, Any] = {"jit": {"cacheDir": "none"}}
    if layout == "split":
        # The CPU backend's within cpu.memory's default 4 GiB.
        memory = ("512MiB", "2GiB") if args.backend == "cpu" else ("4GiB", "16GiB")
        config["partitions"] = [
            {"name": "guaranteed", "memory": memory[0], "compute": args.guaranteed_share,
             **args.partition_config},
            {"name": "besteffort", "memory": memory[1], "compute": args.besteffort_share,
             **args.partition_config},
        ]
    return _merged(config, args.daemon_config)


def _merged(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _run_workloads(scenario: Scenario, args: argparse.Namespace, workdir: Path,
                   address: Optional[str], mps_env: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """Runs the scenario's victim and flood processes; their raw results and the windows."""
    path = "gpukitd" if scenario.path == "gpukitd" else "torch"
    common = {"path": path, "address": address, "dtype": args.dtype, "warmup": args.warmup}
    victim_partition = flood_partition = "default"
    if scenario.layout == "split":
        victim_partition, flood_partition = "guaranteed", "besteffort"
    victim_memory = (256 << 20) if args.backend == "cpu" else (2 << 30)
    victim_spec = {**common, "partition": victim_partition, "victims": args.victims,
                   "victim_size": args.victim_size, "hidden": args.hidden,
                   "duration_s": args.duration,
                   # Guaranteed: memory and compute limits, requests defaulting to them.
                   "resources": {"memory_limit_bytes": victim_memory,
                                 "compute_limit": args.guaranteed_share}}
    budget_s = args.duration * len(args.victims) + 600
    flood_spec = {**common, "partition": flood_partition, "flood_threads": args.flood_threads,
                  "flood_size": args.flood_size, "max_s": budget_s + args.duration}
    flood_env = victim_env = mps_env
    if scenario.flood_threads_percent is not None and mps_env is not None:
        flood_env = {**mps_env,
                     "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(scenario.flood_threads_percent)}
    tag = scenario.id.replace("-", "_")
    workers: List[Worker] = []
    try:
        flood = victim = None
        if scenario.flood:
            flood = Worker("flood", flood_spec, flood_env, workdir, f"s{tag}-flood")
            workers.append(flood)
        if scenario.victim:
            victim = Worker("victim", victim_spec, victim_env, workdir, f"s{tag}-victim")
            workers.append(victim)
        for w in workers:
            w.wait_ready(600)
        result: Dict[str, Any] = {}
        if victim is not None:
            victim.send("GO")
            result["victim"] = victim.finish(budget_s)
        else:
            start = time.monotonic()
            time.sleep(args.duration)  # the flood-alone measurement window
            result["window"] = [start, time.monotonic()]
        if flood is not None:
            flood.send("STOP")
            result["flood"] = flood.finish(300)
        return result
    finally:
        for w in workers:
            w.kill()


def _percentile(ordered: List[float], q: float) -> float:
    """Nearest rank: the smallest sample with at least q of the samples at or below it."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _latency_stats(latencies_us: List[float]) -> Dict[str, Any]:
    ordered = sorted(latencies_us)
    return {"count": len(ordered), "mean_us": sum(ordered) / len(ordered),
            "p50_us": _percentile(ordered, 0.50), "p99_us": _percentile(ordered, 0.99),
            "p999_us": _percentile(ordered, 0.999)}


def _flood_tflops(done: List[float], window: List[float], flops: float) -> float:
    start, end = window
    count = sum(1 for t in done if start < t <= end)
    return count * flops / (end - start) / 1e12


def _figures(scenario: Scenario, raw: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    """The scenario's own figures (ratios come later, once every reference has run)."""
    flops = 2.0 * args.flood_size**3
    out: Dict[str, Any] = {}
    if "victim" in raw:
        v = raw["victim"]
        if "session_qos_class" in v:  # gpukitd's
            out["victim_session"] = {k: v[k] for k in ("session_qos_class", "session_partition")}
        out["victims"] = {}
        for kind, run in v["runs"].items():
            entry = _latency_stats(run["latencies_us"])
            if "flood" in raw:
                entry["flood_tflops"] = _flood_tflops(raw["flood"]["done"], run["window"], flops)
            out["victims"][kind] = entry
        windows = [run["window"] for run in v["runs"].values()]
        window = [min(w[0] for w in windows), max(w[1] for w in windows)]
    else:
        window = raw["window"]
    if "flood" in raw:
        f = raw["flood"]
        out["flood"] = {"tflops": _flood_tflops(f["done"], window, flops),
                        "matmuls": sum(1 for t in f["done"] if window[0] < t <= window[1]),
                        "window_s": window[1] - window[0]}
        if "session_qos_class" in f:
            out["flood_session"] = {"session_qos_class": f["session_qos_class"],
                                    "session_partition": f["session_partition"]}
    return out


def _ratio(value: Optional[float], reference: Optional[float]) -> Optional[float]:
    if value is None or not reference:
        return None
    return value / reference


def _add_ratios(results: Dict[str, Dict[str, Any]]) -> None:
    """Each scenario's figures against its references' (and gpukitd's against plain torch)."""
    def ok(sid: Optional[str]) -> Optional[Dict[str, Any]]:
        r = results.get(sid or "")
        return r if r is not None and r["status"] == "ok" else None

    for sid, r in results.items():
        if r["status"] != "ok":
            continue
        s = BY_ID[sid]
        vref, fref = ok(s.victim_reference), ok(s.flood_reference)
        plain_v = ok("plain-victim") if s.path == "gpukitd" else None
        plain_f = ok("plain-flood") if s.path == "gpukitd" else None
        for kind, v in r.get("victims", {}).items():
            if vref is not None and sid != s.victim_reference:
                base = vref["victims"].get(kind, {})
                for p in ("p50", "p99", "p999"):
                    v[f"ratio_{p}"] = _ratio(v[f"{p}_us"], base.get(f"{p}_us"))
            if plain_v is not None:
                base = plain_v["victims"].get(kind, {})
                v["ratio_p99_to_plain_alone"] = _ratio(v["p99_us"], base.get("p99_us"))
            if "flood_tflops" in v and fref is not None:
                v["flood_ratio"] = _ratio(v["flood_tflops"], fref["flood"]["tflops"])
        if "flood" in r:
            if fref is not None and sid != s.flood_reference:
                r["flood"]["ratio"] = _ratio(r["flood"]["tflops"], fref["flood"]["tflops"])
            if plain_f is not None:
                r["flood"]["ratio_to_plain_alone"] = _ratio(r["flood"]["tflops"],
                                                            plain_f["flood"]["tflops"])


def _fmt(value: Optional[float], spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def _print_table(report: Dict[str, Any]) -> None:
    c = report["config"]
    print(f"QoS isolation: {report['device']}; torch {report['torch'] or '-'}; gpukitd backend "
          f"{report['backend']} ({report.get('gpukitd_matmul') or 'matmul: not logged'})")
    print(f"victims: matmul {c['victim_size']}^3, decode chain of {3 * DECODE_LAYERS} ops on "
          f"[1, {c['hidden']}]; flood {c['flood_size']}^3 from {c['flood_threads']} threads; "
          f"{c['dtype']}; {c['duration_s']:g} s per victim kind; ratios to the same path alone")
    labels = {sid: f"{sid} {r['title']} [{r['path']}]" for sid, r in report["scenarios"].items()}
    width = max([len(label) for label in labels.values()] + [8])
    print(f"{'scenario':<{width}} {'victim':>6} {'p50 us':>9} {'p99 us':>9} {'p99.9 us':>9} "
          f"{'p50 x':>6} {'p99 x':>6} {'p99.9x':>6} {'flood TF/s':>10} {'flood x':>7}")
    for sid, r in report["scenarios"].items():
        label = labels[sid]
        if r["status"] != "ok":
            print(f"{label:<{width}} {r['status']}")
            continue
        rows = list(r.get("victims", {}).items()) or [("-", None)]
        for kind, v in rows:
            if v is None:
                f = r["flood"]
                print(f"{label:<{width}} {'-':>6} {'':>9} {'':>9} {'':>9} {'':>6} {'':>6} {'':>6} "
                      f"{f['tflops']:10.3f} {_fmt(f.get('ratio'), '.2f', 'x'):>7}")
                continue
            print(f"{label:<{width}} {kind:>6} {v['p50_us']:9.1f} {v['p99_us']:9.1f} "
                  f"{v['p999_us']:9.1f} {_fmt(v.get('ratio_p50'), '.2f', 'x'):>6} "
                  f"{_fmt(v.get('ratio_p99'), '.2f', 'x'):>6} "
                  f"{_fmt(v.get('ratio_p999'), '.2f', 'x'):>6} "
                  f"{_fmt(v.get('flood_tflops'), '10.3f'):>10} "
                  f"{_fmt(v.get('flood_ratio'), '.2f', 'x'):>7}")
            label = ""
    if report.get("mps"):
        print(f"MPS: {report['mps']}")
    print("target (issue 16): victim p99 <= 1.2x alone while the flood keeps >= 70% "
          "(goal 1.05x, 80%), better than 4 and 6 on both")


def _run(args: argparse.Namespace) -> Dict[str, Any]:
    probe = _torch_probe() if args.backend != "cpu" else None
    if args.backend == "auto":
        args.backend = "cuda" if probe and probe.get("cuda") else "cpu"
    _apply_size_defaults(args)
    requested = args.scenarios or (list(CPU_SCENARIOS) if args.backend == "cpu"
                                   else [s.id for s in SCENARIOS])
    if args.backend == "cpu":
        bad = [sid for sid in requested if sid not in CPU_SCENARIOS]
        if bad:
            raise SystemExit(f"the CPU backend runs scenarios 1-3 only, not {', '.join(bad)}")
    has_torch = bool(probe and probe.get("cuda"))
    device = "gpukitd CPU backend" + (f" ({platform.processor() or platform.machine()})")
    if args.backend == "cuda":
        device = (probe or {}).get("device") or _nvidia_smi_name() or "CUDA device"
    report: Dict[str, Any] = {
        "bench": "qos_isolation", "date": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"), "command": " ".join([Path(sys.argv[0]).name,
                                                            *sys.argv[1:]]),
        "host": platform.node(), "device": device, "backend": args.backend,
        "torch": (probe or {}).get("torch"), "python": platform.python_version(),
        "gpukit": None, "gpukitd_matmul": None, "mps": None,
        "config": {"duration_s": args.duration, "victims": args.victims,
                   "victim_size": args.victim_size, "hidden": args.hidden,
                   "decode_ops": 3 * DECODE_LAYERS, "flood_size": args.flood_size,
                   "flood_threads": args.flood_threads, "dtype": args.dtype,
                   "guaranteed_share": args.guaranteed_share,
                   "besteffort_share": args.besteffort_share,
                   "daemon_config": args.daemon_config, "partition_config": args.partition_config,
                   "torch_flood": "one process, its threads each on a CUDA stream of its own"},
        "scenarios": {},
    }
    results: Dict[str, Dict[str, Any]] = report["scenarios"]
    with tempfile.TemporaryDirectory(prefix="gpukit-qos-bench-") as tmp:
        workdir = Path(tmp)
        mps: Optional[Mps] = None
        mps_why: Optional[str] = None
        try:
            for scenario in _selected(requested):
                references = {
                    f"{role}_reference": ref if ref != scenario.id else None
                    for role, ref in (("victim", scenario.victim_reference),
                                      ("flood", scenario.flood_reference))}
                entry: Dict[str, Any] = {"title": scenario.title, "path": scenario.path,
                                         **references}
                results[scenario.id] = entry
                if scenario.path != "gpukitd" and not has_torch:
                    entry["status"] = "skipped: torch with CUDA is not available"
                    continue
                mps_env = None
                if scenario.path == "mps":
                    if mps is None:
                        mps = Mps(workdir)
                        mps_why = mps.start()
                        report["mps"] = (f"MPS unavailable: {mps_why}" if mps_why else
                                         f"private control daemon, servers: {mps.servers}")
                    if mps_why:
                        entry["status"] = f"skipped: MPS unavailable: {mps_why}"
                        continue
                    mps_env = mps.env
                _progress(f"scenario {scenario.id}: {scenario.title} [{scenario.path}]")
                try:
                    if scenario.path == "gpukitd":
                        config = _daemon_config(args, scenario.layout)
                        with Daemon(args.backend, config, workdir, f"gpukitd-{scenario.id}") as d:
                            raw = _run_workloads(scenario, args, workdir, d.address, None)
                            entry["partitions_device_time_ns"] = d.partition_device_time_ns()
                            report["gpukitd_matmul"] = report["gpukitd_matmul"] or d.matmul_note()
                        report["gpukit"] = report["gpukit"] or raw.get("victim", {}).get("gpukit")
                    else:
                        raw = _run_workloads(scenario, args, workdir, None, mps_env)
                    entry.update(_figures(scenario, raw, args))
                    entry["status"] = "ok"
                except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
                    _progress(f"scenario {scenario.id} failed: {e}")
                    entry["status"] = "failed: " + " | ".join(str(e).splitlines())
        finally:
            if mps is not None:
                mps.stop()
    _add_ratios(results)
    return report


def _nvidia_smi_name() -> Optional[str]:
    try:  # a query only; nothing of the GPU's settings changes
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                              "0"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _apply_size_defaults(args: argparse.Namespace) -> None:
    cpu = args.backend == "cpu"
    defaults = {"victim_size": 64 if cpu else 1024, "hidden": 64 if cpu else 4096,
                "flood_size": 256 if cpu else 8192, "dtype": "float32" if cpu else "bfloat16"}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def _json_object(text: str) -> Dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return _worker_main(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"],
                        help="cuda where torch sees a CUDA device (auto), else cpu")
    parser.add_argument("--cpu", action="store_const", const="cpu", dest="backend",
                        help="the same as --backend cpu")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds each victim kind runs in a scenario (default 20)")
    parser.add_argument("--scenarios", type=lambda s: [x for x in s.split(",") if x],
                        help="ids to run, e.g. 1,2,3 (default all; cpu: 1,2,3); "
                             "the references they need run too: " + ", ".join(BY_ID))
    parser.add_argument("--victims", type=lambda s: [x for x in s.split(",") if x],
                        default=["matmul", "decode"], help="matmul,decode (default both)")
    parser.add_argument("--victim-size", type=int, help="matmul victim's n (1024; cpu 64)")
    parser.add_argument("--hidden", type=int, help="decode victim's width (4096; cpu 64)")
    parser.add_argument("--flood-size", type=int, help="flood matmul's n (8192; cpu 256)")
    parser.add_argument("--flood-threads", type=int, default=2)
    parser.add_argument("--dtype", help="bfloat16 (cpu: float32)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--guaranteed-share", type=float, default=0.6,
                        help="compute share of scenario 3's partition `guaranteed` (0.6)")
    parser.add_argument("--besteffort-share", type=float, default=0.2,
                        help="compute share of scenario 3's partition `besteffort` (0.2)")
    parser.add_argument("--daemon-config", type=_json_object, default={},
                        help="JSON merged into every gpukitd config, e.g. '{\"scheduler\": {}}'")
    parser.add_argument("--partition-config", type=_json_object, default={},
                        help="JSON merged into scenario 3's two partitions")
    parser.add_argument("--save", type=Path, help="also write the JSON object here")
    args = parser.parse_args()
    unknown = [sid for sid in args.scenarios or [] if sid not in BY_ID]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; there are {', '.join(BY_ID)}")
    if not set(args.victims) <= {"matmul", "decode"} or not args.victims:
        parser.error("--victims takes matmul, decode or both")
    if not LAYOUT["gpukitd"].exists():
        parser.error(f"gpukitd not found at {LAYOUT['gpukitd']}: build it, or set GPUKITD")
    started = time.monotonic()
    report = _run(args)
    report["run_s"] = round(time.monotonic() - started, 1)
    _print_table(report)
    line = json.dumps(report, separators=(",", ":"))
    if args.save:
        args.save.write_text(line + "\n")
    print(line, flush=True)
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped")
                    for r in report["scenarios"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
