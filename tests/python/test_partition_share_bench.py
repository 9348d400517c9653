"""tests/bench/partition_share_bench.py on the CPU backend: a short run gives, as its last
line, a JSON object with every layout, each partition's ops and shares that add up to 1. No
timing or share is asserted (they depend on the machine); docs/benchmarks.md has the GPU's.

The bench is tests/bench/ in the repository and bin/ in a bundle made by deploy/bundle.sh.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
BENCH = next((p for p in (ROOT / "tests" / "bench" / "partition_share_bench.py",
                          ROOT / "bin" / "partition_share_bench.py") if p.exists()), None)

pytestmark = pytest.mark.skipif(BENCH is None, reason="partition_share_bench.py not found")


def test_short_cpu_run_reports_every_layout_and_partition():
    run = subprocess.run(
        [sys.executable, str(BENCH), "--size", "64", "--dtype", "float32", "--seconds", "0.5",
         "--backend", "cpu", "--memory", "256MiB"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(result["layouts"]) == {"one partition", "0.5 / 0.5", "0.8 / 0.2"}
    expected = {"one partition": {"default"}, "0.5 / 0.5": {"a", "b"}, "0.8 / 0.2": {"a", "b"}}
    for name, layout in result["layouts"].items():
        assert set(layout["ops"]) == expected[name], name
        assert all(n > 0 for n in layout["ops"].values()), name
        assert sum(layout["share_of_ops"].values()) == pytest.approx(1.0), name
        assert all(s > 0 for s in layout["charged_device_s"].values()), name
        assert layout["ops_per_s"] > 0, name
