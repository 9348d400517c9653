"""tests/bench/partition_share_bench.py on the CPU backend: a short run, synchronous and
pipelined (--depth 2), gives as its last line a JSON object with every layout, each
partition's ops and shares that add up to 1, and per partition its configured share and its
shares over the windows, all in [0, 1]. No timing or share is asserted (they depend on the
machine); docs/benchmarks.md has the GPU's. The bench's window attribution and share
statistics are checked on literal records.

The bench is tests/bench/ in the repository and bin/ in a bundle made by deploy/bundle.sh.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
BENCH = next((p for p in (ROOT / "tests" / "bench" / "partition_share_bench.py",
                          ROOT / "bin" / "partition_share_bench.py") if p.exists()), None)

pytestmark = pytest.mark.skipif(BENCH is None, reason="partition_share_bench.py not found")

EXPECTED_PARTITIONS = {"one partition": {"default"}, "0.5 / 0.5": {"a", "b"},
                       "0.8 / 0.2": {"a", "b"}}
CONFIGURED = {"one partition": {"default": 1.0}, "0.5 / 0.5": {"a": 0.5, "b": 0.5},
              "0.8 / 0.2": {"a": 0.8, "b": 0.2}}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("partition_share_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=[1, 2], ids=["depth1", "depth2"])
def cpu_run(request) -> dict:
    """The JSON of a short CPU run with synchronous (1) or pipelined (2) clients."""
    run = subprocess.run(
        [sys.executable, str(BENCH), "--size", "64", "--dtype", "float32", "--seconds", "0.5",
         "--backend", "cpu", "--memory", "256MiB", "--depth", str(request.param)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["depth"] == request.param
    return result


def test_short_cpu_run_reports_every_layout_and_partition(cpu_run):
    result = cpu_run
    assert result["window_ms"] == 100.0
    assert 0 < result["warmup_s"] < result["seconds"]
    assert set(result["layouts"]) == set(EXPECTED_PARTITIONS)
    for name, layout in result["layouts"].items():
        assert set(layout["ops"]) == EXPECTED_PARTITIONS[name], name
        assert all(n > 0 for n in layout["ops"].values()), name
        assert sum(layout["share_of_ops"].values()) == pytest.approx(1.0), name
        assert all(s > 0 for s in layout["charged_device_s"].values()), name
        assert layout["ops_per_s"] > 0, name


def test_short_cpu_run_reports_window_shares_of_every_partition(cpu_run):
    result = cpu_run
    for name, layout in result["layouts"].items():
        partitions = EXPECTED_PARTITIONS[name]
        assert layout["windows"] > 0, name
        assert 0 < layout["measured_s"] <= layout["wall_s"], name
        assert layout["configured_share"] == pytest.approx(CONFIGURED[name]), name
        assert set(layout["work_share"]) == partitions, name
        assert sum(layout["work_share"].values()) == pytest.approx(1.0), name
        assert set(layout["window_share"]) == partitions, name
        for p, w in layout["window_share"].items():
            assert set(w) == {"mean", "min", "max", "max_dev_pts", "within_3pts"}, (name, p)
            assert 0.0 <= w["min"] <= w["mean"] <= w["max"] <= 1.0, (name, p, w)
            assert 0.0 <= w["within_3pts"] <= 1.0, (name, p, w)
            worst = max(abs(w["min"] - layout["configured_share"][p]),
                        abs(w["max"] - layout["configured_share"][p]))
            assert w["max_dev_pts"] == pytest.approx(100 * worst), (name, p, w)
    one = result["layouts"]["one partition"]["window_share"]["default"]
    assert one == pytest.approx({"mean": 1.0, "min": 1.0, "max": 1.0, "max_dev_pts": 0.0,
                                 "within_3pts": 1.0})


def test_run_too_short_for_one_window_is_refused():
    run = subprocess.run([sys.executable, str(BENCH), "--seconds", "1", "--warmup-s", "0.95"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "leaves no 100 ms window" in run.stderr


@pytest.mark.parametrize("records, expected", [
    # inside one window
    ([(10, 40, 6.0)], [6.0, 0.0, 0.0]),
    # across a window edge: split in proportion to the overlap
    ([(90, 110, 4.0)], [2.0, 2.0, 0.0]),
    # over three windows
    ([(50, 250, 8.0)], [2.0, 4.0, 2.0]),
    # before begin and after the last window: only the overlap counts
    ([(-100, 100, 4.0), (250, 350, 10.0)], [2.0, 0.0, 5.0]),
    # wholly outside
    ([(-50, 0, 3.0), (300, 400, 3.0)], [0.0, 0.0, 0.0]),
    # an op of no duration counts where it starts
    ([(150, 150, 7.0)], [0.0, 7.0, 0.0]),
])
def test_work_per_window_spreads_each_op_over_its_interval(bench, records, expected):
    assert bench.work_per_window(records, 0, 100, 3) == pytest.approx(expected)


def test_measured_interval_is_where_every_session_is_busy_after_the_warmup(bench):
    sessions = [[(0, 10, 1.0), (10, 500, 1.0)], [(30, 40, 1.0), (40, 420, 1.0)]]
    assert bench.measured_interval(sessions, 20) == (50, 420)
    with pytest.raises(ValueError):
        bench.measured_interval([[(0, 10, 1.0)], []], 0)


def test_share_stats_compares_each_window_with_the_configured_share(bench):
    # window 0: a 0.8, window 1: a 0.75, window 2: empty (left out), window 3: a 0.83
    work = {"a": [8.0, 3.0, 0.0, 8.3], "b": [2.0, 1.0, 0.0, 1.7]}
    stats = bench.share_stats(work, {"a": 0.8, "b": 0.2})
    assert stats["windows"] == 3
    assert stats["work_share"] == pytest.approx({"a": 19.3 / 24.0, "b": 4.7 / 24.0})
    a, b = stats["window_share"]["a"], stats["window_share"]["b"]
    assert a["min"] == pytest.approx(0.75) and a["max"] == pytest.approx(0.83)
    assert a["mean"] == pytest.approx((0.8 + 0.75 + 0.83) / 3)
    assert a["max_dev_pts"] == pytest.approx(5.0) and b["max_dev_pts"] == pytest.approx(5.0)
    # 0 and 3 points are within +-3 (3.0000000000000027 in floating point), 5 is not
    assert a["within_3pts"] == pytest.approx(2 / 3) and b["within_3pts"] == pytest.approx(2 / 3)


def test_share_stats_without_work_has_no_shares(bench):
    stats = bench.share_stats({"a": [0.0, 0.0], "b": [0.0, 0.0]}, {"a": 0.5, "b": 0.5})
    assert stats == {"windows": 0, "work_share": {"a": None, "b": None},
                     "window_share": {"a": None, "b": None}}
