"""tests/bench/pipeline_bench.py on the CPU backend: a short run ends with a JSON line holding
the chain's rates (pipelined and synchronous, 1 and 2 sessions) and the matmul's times. The
bench itself checks each chain's value (a wrong chain exits non-zero). No rate is asserted
(they depend on the machine); docs/benchmarks.md has the GPU's.

The bench is tests/bench/ in the repository and bin/ in a bundle made by deploy/bundle.sh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
BENCH = next((p for p in (ROOT / "tests" / "bench" / "pipeline_bench.py",
                          ROOT / "bin" / "pipeline_bench.py") if p.exists()), None)

pytestmark = pytest.mark.skipif(BENCH is None, reason="pipeline_bench.py not found")


def test_short_cpu_run_reports_chains_and_matmuls():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--backend", "cpu", "--ops", "300", "--sessions", "2",
         "--sizes", "64", "--dtypes", "float32", "--reps", "3"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for mode in ("pipelined", "synchronous"):
        for n in (1, 2):
            assert result[f"chain_{mode}_{n}_sessions_ops_per_s"] > 0, (mode, n)
        assert result[f"matmul_64_float32_{mode}_ms"] > 0, mode


def test_threads_report_cpu_per_thread_and_executor_messages():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--backend", "cpu", "--ops", "5000", "--sessions", "2",
         "--only", "chain", "--threads"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for n in (1, 2):
        key = f"chain_pipelined_{n}_sessions"
        cpu = result[f"{key}_cpu_us_per_op"]
        # The stream's thread in gpukitd (a submit socket connection's: the stream goes over
        # the socket; alive through the chain, so sampled at least once) and the executor's
        # reader did the ops' work.
        assert cpu.get("gpukitd/gk-sock-conn", 0) > 0, cpu
        assert cpu.get("gpukit-executor/gpukit-executor", 0) > 0, cpu
        assert result[f"{key}_executor_messages_per_op"] > 0, result
        assert result[f"{key}_executor_round_trips_per_op"] > 0, result
    assert "chain_synchronous_1_sessions_cpu_us_per_op" not in result


def test_threads_needs_its_own_gpukitd():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--address", "unix:///nonexistent.sock", "--threads"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--threads reads the gpukitd it starts" in run.stderr


def test_a_running_daemon_is_reported_with_its_own_backend(daemon):
    # --backend names the backend of a gpukitd the bench starts; at --address the daemon's own
    # goes into the report, whatever --backend says.
    backend = daemon.status()["backend"]
    other = "cuda" if backend == "cpu" else "cpu"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--address", daemon.address, "--backend", other,
         "--only", "chain", "--ops", "200", "--sessions", "1"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["backend"] == backend
    assert f"{backend} backend" in run.stdout.splitlines()[0]
