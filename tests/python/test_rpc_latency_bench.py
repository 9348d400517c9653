"""gpukit_rpc_bench (tests/bench/rpc_latency_bench.cc) on the CPU backend: a short full run
ends with one line of JSON carrying ping_p50_us, ping_p99_us, runop_p50_us, runop_p99_us as
positive numbers and pipelined_ops_per_s (the C++ client's pipelined chain) as a positive
number. No timing is asserted.

The bench is <build>/tests/bench/gpukit_rpc_bench ($GPUKIT_BUILD_DIR, as for this suite's
gpukitd; a build with GPUKIT_BUILD_BENCHMARKS=ON) or bin/gpukit_rpc_bench in a bundle; the
test skips where neither was built.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from conftest import BACKEND, BUILD_DIR, ROOT, _binary

BENCH = next((p for p in (BUILD_DIR / "tests" / "bench" / "gpukit_rpc_bench",
                          ROOT / "bin" / "gpukit_rpc_bench") if p.exists()), None)

pytestmark = pytest.mark.skipif(BENCH is None, reason="gpukit_rpc_bench not built "
                                "(GPUKIT_BUILD_BENCHMARKS=ON)")


def test_full_run_ends_with_one_json_object_of_the_documented_keys() -> None:
    run = subprocess.run(
        [str(BENCH), "--gpukitd", str(_binary("GPUKITD", "daemon/gpukitd")), "--iterations",
         "200", "--starts", "1", "--backend", BACKEND],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    lines = run.stdout.strip().splitlines()
    assert any("RunOp / ping" in line for line in lines[:-1]), "no table before the JSON"
    summary = json.loads(lines[-1])
    for key in ("ping_p50_us", "ping_p99_us", "runop_p50_us", "runop_p99_us"):
        value = summary[key]
        assert isinstance(value, (int, float)) and math.isfinite(value) and value > 0, key
    assert summary["ping_p99_us"] >= summary["ping_p50_us"]
    assert summary["runop_p99_us"] >= summary["runop_p50_us"]
    assert "pipelined_ops_per_s" in summary
    pipelined = summary["pipelined_ops_per_s"]
    assert isinstance(pipelined, (int, float)) and pipelined > 0
    assert summary["backend"] == BACKEND
