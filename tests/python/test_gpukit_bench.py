"""gpukit-bench (gpukit.bench, issue 18's benchmark tool) on the CPU backend: a --quick run
against the suite's gpukitd writes JSON of the documented schema with positive figures, and
one against a gpukitd it starts itself; and compare mode on hand-made files: a figure worse
by more than the threshold in its own direction (lower-is-better and higher-is-better) exits
1 with --fail-on-regression, and 0 within the threshold, without the flag, for a reference
figure, or for a figure only one file has. The rows that need torch on CUDA or a pipelining
client run here with stand-ins (FakeTorch over NumPy, a synchronous session with sync()), so
that their code runs in CI before it meets a GPU. No timing is asserted.

The tool runs as `python -m gpukit.bench` with the package under test on PYTHONPATH, or as a
bundle's bin/gpukit-bench launcher (deploy/bundle.sh) when this suite runs from a bundle.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

import gpukit
from conftest import BACKEND, _binary
from gpukit import _bench_suites as bench_suites
from gpukit import bench

ROOT = Path(__file__).resolve().parents[2]  # the repository, or a bundle
PACKAGE_PARENT = Path(gpukit.__file__).resolve().parents[1]


def gpukit_bench(args: Sequence[str], timeout_s: float = 600) -> subprocess.CompletedProcess:
    launcher = ROOT / "bin" / "gpukit-bench"
    env = dict(os.environ)
    if launcher.exists():  # a bundle's: it puts the bundle's python/ first by itself
        command = [str(launcher)]
        env["PYTHON"] = sys.executable
    else:
        command = [sys.executable, "-m", "gpukit.bench"]
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PACKAGE_PARENT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run(command + list(args), capture_output=True, text=True, env=env,
                          timeout=timeout_s)


def check_schema(report: Dict) -> Dict[str, Dict]:
    """The documented shape of a saved run; returns the figures by name."""
    assert report["schema"] == "gpukit-bench"
    assert report["schema_version"] == 1
    assert report["gpukit_version"] == gpukit.__version__
    assert report["daemon_version"]
    assert report["backend"] == BACKEND
    assert isinstance(report["device"], str) and report["device"]
    assert isinstance(report["figures"], list) and report["figures"]
    figures = {}
    for f in report["figures"]:
        assert set(f) == {"name", "value", "unit", "higher_is_better", "reference"}, f
        assert isinstance(f["name"], str) and f["name"] not in figures, f
        assert isinstance(f["value"], (int, float)) and not isinstance(f["value"], bool), f
        assert math.isfinite(f["value"]) and f["value"] > 0, f
        assert isinstance(f["unit"], str) and f["unit"], f
        assert isinstance(f["higher_is_better"], bool), f
        assert isinstance(f["reference"], bool), f
        figures[f["name"]] = f
    for s in report["skipped"]:
        assert set(s) == {"name", "reason"} and s["reason"], s
    return figures


@pytest.fixture(scope="module")
def quick_run(daemon, tmp_path_factory: pytest.TempPathFactory):
    saved = tmp_path_factory.mktemp("bench") / "quick.json"
    run = gpukit_bench(["--address", daemon.address, "--quick", "--save", str(saved)])
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run, json.loads(saved.read_text())


def test_quick_run_saves_every_suite_with_positive_figures(quick_run) -> None:
    run, report = quick_run
    figures = check_schema(report)
    assert report["quick"] is True
    assert report["submit_socket"] is True
    assert report["suites"] == list(bench.SUITES)
    expected = {
        "ping_p50_us": ("us", False), "ping_p99_us": ("us", False),
        "ping_after_idle_p50_us": ("us", False), "runop_p50_us": ("us", False), "runop_p99_us": ("us", False),
        "free_p50_us": ("us", False), "runop_p50_vs_ping": ("x", False),
        "chain_sync_ops_per_s": ("ops/s", True),
        "matmul_64_float32_ms": ("ms", False), "matmul_128_bfloat16_tflops": ("TFLOP/s", True),
        "matmul_128_float16_ms": ("ms", False),
        "add_1MiB_gbps": ("GB/s", True),
        "upload_4MiB_gbps": ("GB/s", True), "download_4MiB_gbps": ("GB/s", True),
    }
    for name, (unit, higher) in expected.items():
        assert name in figures, f"{name} missing; figures: {sorted(figures)}"
        assert (figures[name]["unit"], figures[name]["higher_is_better"]) == (unit, higher), name
        assert name in run.stdout, f"{name} not in the table"
    assert figures["ping_p99_us"]["value"] >= figures["ping_p50_us"]["value"]
    assert figures["runop_p99_us"]["value"] >= figures["runop_p50_us"]["value"]


def test_quick_run_lists_what_it_could_not_measure_with_the_reason(quick_run) -> None:
    run, report = quick_run
    figures = {f["name"] for f in report["figures"]}
    skipped = {s["name"]: s["reason"] for s in report["skipped"]}
    # The pipelined chain is measured where the client can pipeline, else listed.
    assert ("pipelined_ops_per_s" in figures) != ("pipelined_ops_per_s" in skipped)
    # torch's references: measured with torch on the cuda backend, else listed with why.
    if report["torch"] is None:
        assert {"torch_chain_ops_per_s", "matmul_*_vs_torch", "add_1MiB_vs_copy"} <= set(skipped)
        assert not any(f.endswith("_vs_torch") for f in figures)
        assert "skipped" in run.stdout
    else:
        assert {"torch_chain_ops_per_s", "matmul_128_bfloat16_vs_torch"} <= figures
    if report["backend"] == "cpu":
        assert "matmul_64_tf32" in skipped  # tf32 is float32 on the CPU backend
    else:
        assert "matmul_64_tf32_ms" in figures


def test_run_against_a_gpukitd_it_starts_with_only_some_suites(tmp_path: Path) -> None:
    saved = tmp_path / "own.json"
    run = gpukit_bench(["--gpukitd", str(_binary("GPUKITD", "daemon/gpukitd")), "--backend",
                        BACKEND, "--only", "ping,transfer", "--quick", "--iterations", "20",
                        "--save", str(saved)])
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    report = json.loads(saved.read_text())
    figures = check_schema(report)
    assert report["suites"] == ["ping", "transfer"]
    assert set(figures) == {"ping_p50_us", "ping_p99_us", "ping_after_idle_p50_us",
                            "upload_4MiB_gbps",
                            "download_4MiB_gbps"}


def test_no_submit_socket_runs_the_synchronous_rows_over_grpc_and_says_so(
        daemon, tmp_path: Path) -> None:
    saved = tmp_path / "grpc.json"
    run = gpukit_bench(["--address", daemon.address, "--only", "runop", "--quick",
                        "--iterations", "20", "--no-submit-socket", "--save", str(saved)])
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    report = json.loads(saved.read_text())
    assert report["submit_socket"] is False
    assert "ops over gRPC" in run.stdout
    assert "runop_p50_us" in check_schema(report)


def test_a_gpukitd_that_does_not_answer_exits_3_with_the_reason(tmp_path: Path) -> None:
    run = gpukit_bench(["--address", f"unix://{tmp_path}/none.sock", "--quick"])
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Unavailable" in run.stderr and "none.sock" in run.stderr


def test_unknown_suite_is_a_usage_error() -> None:
    run = gpukit_bench(["--only", "ping,warp"])
    assert run.returncode == 2
    assert "warp" in run.stderr


# --- compare mode --------------------------------------------------------------------------


def saved_run(path: Path, figures: List[tuple]) -> Path:
    """A hand-made saved run: figures are (name, value, higher_is_better[, reference])."""
    path.write_text(json.dumps({
        "schema": "gpukit-bench", "schema_version": 1, "gpukit_version": "0", "daemon_version": "0",
        "backend": "cpu", "device": "test", "figures": [
            {"name": f[0], "value": f[1], "unit": "u", "higher_is_better": f[2],
             "reference": f[3] if len(f) > 3 else False} for f in figures],
        "skipped": []}))
    return path


BASE = [("runop_p50_us", 100.0, False), ("pipelined_ops_per_s", 50000.0, True),
        ("torch_chain_ops_per_s", 90000.0, True, True)]


@pytest.mark.parametrize(
    "changed, flags, status, verdict",
    [
        # lower is better: 20% slower, 5% slower, 20% faster
        (("runop_p50_us", 120.0, False), ["--fail-on-regression"], 1, "REGRESSION"),
        (("runop_p50_us", 120.0, False), [], 0, "REGRESSION"),
        (("runop_p50_us", 120.0, False), ["--fail-on-regression", "--threshold", "0.25"], 0,
         "same"),
        (("runop_p50_us", 105.0, False), ["--fail-on-regression"], 0, "same"),
        (("runop_p50_us", 80.0, False), ["--fail-on-regression"], 0, "better"),
        # higher is better: 20% fewer ops/s, 5% fewer, 20% more
        (("pipelined_ops_per_s", 40000.0, True), ["--fail-on-regression"], 1, "REGRESSION"),
        (("pipelined_ops_per_s", 40000.0, True), [], 0, "REGRESSION"),
        (("pipelined_ops_per_s", 47500.0, True), ["--fail-on-regression"], 0, "same"),
        (("pipelined_ops_per_s", 60000.0, True), ["--fail-on-regression"], 0, "better"),
        # a reference (torch) that got worse is not gpukit's regression
        (("torch_chain_ops_per_s", 50000.0, True, True), ["--fail-on-regression"], 0,
         "worse (reference)"),
    ],
)
def test_compare_fails_only_on_a_regression_beyond_the_threshold(
        tmp_path: Path, capsys, changed, flags, status, verdict) -> None:
    old = saved_run(tmp_path / "old.json", BASE)
    new = saved_run(tmp_path / "new.json", [changed if f[0] == changed[0] else f for f in BASE])
    assert bench.main(["--compare", str(old), str(new), *flags]) == status
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    assert rows[changed[0]].rstrip().endswith(verdict), rows[changed[0]]
    for f in BASE:
        if f[0] != changed[0]:
            assert rows[f[0]].rstrip().endswith("same"), rows[f[0]]


def test_compare_lists_figures_only_one_file_has_and_does_not_fail_on_them(
        tmp_path: Path, capsys) -> None:
    old = saved_run(tmp_path / "old.json", [("runop_p50_us", 100.0, False),
                                            ("matmul_8192_bfloat16_ms", 2.0, False)])
    new = saved_run(tmp_path / "new.json", [("runop_p50_us", 101.0, False),
                                            ("pipelined_ops_per_s", 50000.0, True)])
    assert bench.main(["--compare", str(old), str(new), "--fail-on-regression"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = {line.split()[0]: line for line in lines if line.split()}
    assert "only in old" in row["matmul_8192_bfloat16_ms"]
    assert "only in new" in row["pipelined_ops_per_s"]
    assert "same" in row["runop_p50_us"]


def test_compare_notes_runs_of_different_devices_or_sizes(tmp_path: Path, capsys) -> None:
    old = saved_run(tmp_path / "old.json", BASE)
    data = json.loads(old.read_text())
    data.update(device="other", quick=True)
    new = tmp_path / "new.json"
    new.write_text(json.dumps(data))
    assert bench.main(["--compare", str(old), str(new), "--fail-on-regression"]) == 0
    out = capsys.readouterr().out
    assert "note: device differs: old 'test', new 'other'" in out
    assert "note: quick differs" in out
    assert "note: backend" not in out


def test_compare_through_the_command_line_exits_1_on_a_regression(tmp_path: Path) -> None:
    old = saved_run(tmp_path / "old.json", BASE)
    new = saved_run(tmp_path / "new.json", [("runop_p50_us", 120.0, False)] + BASE[1:])
    run = gpukit_bench(["--compare", str(old), str(new), "--fail-on-regression"])
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REGRESSION" in run.stdout and "+20.0%" in run.stdout


def test_compare_refuses_a_file_that_is_not_a_saved_run(tmp_path: Path, capsys) -> None:
    old = saved_run(tmp_path / "old.json", BASE)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"figures": []}))
    assert bench.main(["--compare", str(old), str(other)]) == 2
    assert "not a gpukit-bench file" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"schema": "gpukit-bench", "schema_version": 1,
                                  "figures": [{"name": "x", "value": "fast"}]}))
    assert bench.main(["--compare", str(old), str(broken)]) == 2
    assert "figures[0]" in capsys.readouterr().err


def test_percentile_is_nearest_rank() -> None:
    samples = [float(x) for x in range(100, 0, -1)]  # 100 .. 1, unsorted
    assert bench.percentile(samples, 50) == 50.0
    assert bench.percentile(samples, 99) == 99.0
    assert bench.percentile(samples, 100) == 100.0
    assert bench.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


class FakePipelinedSession:
    """A synchronous session dressed as the pipelined one of issue 18 (gpukit.connect(...,
    pipeline=True) with sync()), so the bench's pipelined rows run where the client has no
    pipelining yet; it counts the syncs."""

    def __init__(self, session) -> None:
        self._session = session
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1

    def __getattr__(self, name: str):
        return getattr(self._session, name)


def test_pipelined_rows_are_measured_where_the_client_has_pipelining(
        daemon, monkeypatch, tmp_path: Path) -> None:
    real_connect = gpukit.connect
    # A synchronous session also where this client pipelines by default.
    sync_only = {"pipeline": False} if "pipeline" in inspect.signature(real_connect).parameters \
        else {}
    pipelined: List[FakePipelinedSession] = []

    def connect(address=None, *, pipeline: bool = False, **kwargs):
        session = real_connect(address, **kwargs, **sync_only)
        if pipeline:
            pipelined.append(FakePipelinedSession(session))
            return pipelined[-1]
        return session

    monkeypatch.setattr(gpukit, "connect", connect)
    monkeypatch.setattr(bench, "load_torch", lambda backend: (FakeTorch(), ""))
    saved = tmp_path / "pipelined.json"
    assert bench.main(["--address", daemon.address, "--quick", "--only", "chain,matmul",
                       "--matmul-sizes", "32", "--matmul-dtypes", "float32",
                       "--save", str(saved)]) == 0
    figures = check_schema(json.loads(saved.read_text()))
    assert {"pipelined_ops_per_s", "matmul_32_float32_pipelined_ms",
            "matmul_32_float32_pipelined_vs_torch"} <= set(figures)
    assert len(pipelined) == 1
    # The chain: a warm-up and a timed run; the matmul: a warm-up burst and the median's.
    assert pipelined[0].syncs == 2 + 1 + bench_suites.PIPELINED_BURSTS
    assert pipelined[0].closed


class FakeTensor:
    """Just enough of a torch CUDA tensor, over NumPy, for the bench's reference rows."""

    def __init__(self, data) -> None:
        self.data = data

    def __add__(self, other: "FakeTensor") -> "FakeTensor":
        return FakeTensor(self.data + other.data)

    def __matmul__(self, other: "FakeTensor") -> "FakeTensor":
        return FakeTensor(self.data @ other.data)

    def copy_(self, source: "FakeTensor") -> "FakeTensor":
        self.data[...] = source.data
        return self


class FakeTorch:
    """The parts of the torch module that gpukit.bench uses, counting synchronizations."""

    __version__ = "0.0-fake"
    float32 = float16 = bfloat16 = "float32"  # NumPy computes them all in float32

    def __init__(self) -> None:
        import types

        self.synchronizations = 0
        self.backends = types.SimpleNamespace(
            cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)))
        self.cuda = types.SimpleNamespace(synchronize=self._synchronize)

    def _synchronize(self) -> None:
        self.synchronizations += 1

    def zeros(self, n, device, dtype="float32"):
        import numpy as np

        return FakeTensor(np.zeros(n, dtype=dtype))

    def ones(self, n, device, dtype="float32"):
        import numpy as np

        return FakeTensor(np.ones(n, dtype=dtype))

    def randn(self, *shape, device, dtype="float32"):
        import numpy as np

        return FakeTensor(np.random.default_rng(0).standard_normal(shape).astype(dtype))

    def empty_like(self, tensor: FakeTensor) -> FakeTensor:
        import numpy as np

        return FakeTensor(np.empty_like(tensor.data))


def test_torch_reference_rows_are_measured_where_torch_runs(
        daemon, monkeypatch, tmp_path: Path) -> None:
    torch = FakeTorch()
    monkeypatch.setattr(bench, "load_torch", lambda backend: (torch, ""))
    saved = tmp_path / "torch.json"
    assert bench.main(["--address", daemon.address, "--quick", "--only",
                       "chain,matmul,elementwise", "--matmul-sizes", "16", "--matmul-dtypes",
                       "float32,bfloat16", "--save", str(saved)]) == 0
    report = json.loads(saved.read_text())
    figures = check_schema(report)
    assert report["torch"] == "0.0-fake"
    for name in ("torch_chain_ops_per_s", "copy_1MiB_torch_gbps"):
        assert figures[name]["reference"] is True, name
    for name in ("matmul_16_float32_vs_torch", "matmul_16_bfloat16_vs_torch", "add_1MiB_vs_copy"):
        assert figures[name]["reference"] is False and figures[name]["unit"] == "x", name
    assert torch.synchronizations > 0
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored
