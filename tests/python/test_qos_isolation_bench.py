"""tests/bench/qos_isolation_bench.py (issue 16's benchmark) on the CPU backend: a short run of
scenarios 1-3 gives the table and, as its last line, a JSON object of the documented shape
with positive figures; and the bench's own rules (percentiles, the references a scenario
brings, the ratios) on literal numbers. No timing is asserted.

The bench is tests/bench/qos_isolation_bench.py in the repository and bin/ in a bundle made
by deploy/bundle.sh; it finds gpukitd as this suite does ($GPUKIT_BUILD_DIR, $GPUKITD).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
BENCH = next((p for p in (ROOT / "tests" / "bench" / "qos_isolation_bench.py",
                          ROOT / "bin" / "qos_isolation_bench.py") if p.exists()), None)

pytestmark = pytest.mark.skipif(BENCH is None, reason="qos_isolation_bench.py not found")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("qos_isolation_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory):
    saved = tmp_path_factory.mktemp("qos") / "qos.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--cpu", "--duration", "0.5", "--save", str(saved)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stdout.strip().splitlines()
    return lines, json.loads(lines[-1]), saved


def test_cpu_run_ends_with_one_json_object_that_save_also_writes(cpu_run) -> None:
    lines, report, saved = cpu_run
    assert any(line.startswith("scenario ") for line in lines[:-1]), "no table header"
    assert json.loads(saved.read_text()) == report
    assert report["bench"] == "qos_isolation"
    assert report["backend"] == "cpu"
    assert report["device"]
    assert report["config"]["dtype"] == "float32"
    assert report["config"]["decode_ops"] == 30
    assert list(report["scenarios"]) == ["1", "flood-gpukitd", "2", "3"]
    for sid, scenario in report["scenarios"].items():
        assert scenario["status"] == "ok", (sid, scenario["status"])


def test_cpu_run_places_the_victim_guaranteed_and_the_flood_besteffort(cpu_run) -> None:
    scenarios = cpu_run[1]["scenarios"]
    for sid, victim_partition, flood_partition in (("2", "default", "default"),
                                                   ("3", "guaranteed", "besteffort")):
        s = scenarios[sid]
        assert s["victim_session"] == {"session_qos_class": "Guaranteed",
                                       "session_partition": victim_partition}
        assert s["flood_session"] == {"session_qos_class": "BestEffort",
                                      "session_partition": flood_partition}
    assert set(scenarios["3"]["partitions_device_time_ns"]) >= {"guaranteed", "besteffort"}


def test_cpu_run_figures_are_positive_and_ordered(cpu_run) -> None:
    scenarios = cpu_run[1]["scenarios"]
    for sid in ("1", "2", "3"):
        victims = scenarios[sid]["victims"]
        assert set(victims) == {"matmul", "decode"}
        for kind, v in victims.items():
            assert v["count"] > 0, (sid, kind)
            assert 0 < v["p50_us"] <= v["p99_us"] <= v["p999_us"], (sid, kind, v)
            assert v["mean_us"] > 0
            if sid == "1":
                assert "ratio_p99" not in v  # the reference itself
                continue
            for key in ("ratio_p50", "ratio_p99", "ratio_p999"):
                assert v[key] > 0, (sid, kind, key)
            # The flood may be held back for the whole window: zero is a result, not an error.
            assert v["flood_tflops"] >= 0 and v["flood_ratio"] >= 0, (sid, kind)
    alone = scenarios["flood-gpukitd"]["flood"]
    assert alone["tflops"] > 0 and alone["matmuls"] > 0 and alone["window_s"] > 0
    for sid in ("2", "3"):
        assert scenarios[sid]["flood"]["ratio"] >= 0


def test_cpu_backend_refuses_the_gpu_only_scenarios() -> None:
    result = subprocess.run([sys.executable, str(BENCH), "--cpu", "--scenarios", "4"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "scenarios 1-3 only" in result.stderr


@pytest.mark.parametrize("samples, q, expected", [
    ([5.0], 0.999, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
    ([float(i) for i in range(1, 101)], 0.99, 99.0),
    ([float(i) for i in range(1, 101)], 0.999, 100.0),
    ([float(i) for i in range(1, 1001)], 0.999, 999.0),
])
def test_percentile_is_the_nearest_rank(bench, samples, q, expected) -> None:
    assert bench._percentile(samples, q) == expected


@pytest.mark.parametrize("requested, expected", [
    (["1"], ["1"]),
    (["3"], ["1", "flood-gpukitd", "3"]),
    (["6", "2"], ["1", "flood-gpukitd", "2", "plain-victim", "plain-flood", "6"]),
    (["plain-flood"], ["plain-flood"]),
])
def test_a_scenario_brings_its_references_in_run_order(bench, requested, expected) -> None:
    assert [s.id for s in bench._selected(requested)] == expected


def test_ratios_are_against_the_same_paths_alone_figures(bench) -> None:
    def victim(p50: float, p99: float, p999: float, **extra: float) -> dict:
        return {"p50_us": p50, "p99_us": p99, "p999_us": p999, **extra}

    results = {
        "1": {"status": "ok", "victims": {"matmul": victim(100, 200, 400)}},
        "flood-gpukitd": {"status": "ok", "flood": {"tflops": 500.0}},
        "3": {"status": "ok", "victims": {"matmul": victim(110, 240, 800, flood_tflops=400.0)},
              "flood": {"tflops": 450.0}},
        "plain-victim": {"status": "ok", "victims": {"matmul": victim(50, 100, 200)}},
        "plain-flood": {"status": "ok", "flood": {"tflops": 600.0}},
        "4": {"status": "ok", "victims": {"matmul": victim(500, 1000, 2000, flood_tflops=300.0)},
              "flood": {"tflops": 300.0}},
        "6": {"status": "skipped: MPS unavailable: test"},
    }
    bench._add_ratios(results)
    v3 = results["3"]["victims"]["matmul"]
    approx = pytest.approx
    assert (v3["ratio_p50"], v3["ratio_p99"], v3["ratio_p999"]) == approx((1.1, 1.2, 2.0))
    assert v3["flood_ratio"] == approx(0.8)
    assert v3["ratio_p99_to_plain_alone"] == approx(2.4)
    assert results["3"]["flood"]["ratio"] == approx(0.9)
    assert results["3"]["flood"]["ratio_to_plain_alone"] == approx(0.75)
    v4 = results["4"]["victims"]["matmul"]
    assert (v4["ratio_p50"], v4["ratio_p99"], v4["flood_ratio"]) == approx((10.0, 10.0, 0.5))
    assert "ratio_p99_to_plain_alone" not in v4  # torch's reference is plain torch already
    assert "ratio_p50" not in results["1"]["victims"]["matmul"]
    assert "ratio" not in results["flood-gpukitd"]["flood"]
    assert results["6"] == {"status": "skipped: MPS unavailable: test"}
