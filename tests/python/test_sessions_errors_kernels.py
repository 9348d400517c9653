"""Sessions, errors and custom kernels; and that blocking calls release the GIL."""

import math
import os
import threading
import time

import numpy as np
import pytest

import gpukit
from gpukit._kernel import kernel_argument

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
"""


# --- sessions -------------------------------------------------------------------------------


def test_context_manager_closes_the_session(daemon):
    before = daemon.status()["sessions"]
    with gpukit.connect(daemon.address, tenant="ctx") as gk:
        assert daemon.status()["sessions"] == before + 1
        assert gk.session_id.startswith("s-") and gk.partition == "default"
        a = gk.ones(4)
    assert gk.closed
    assert daemon.status()["sessions"] == before
    with pytest.raises(gpukit.NotFound):
        a.numpy()
    gk.close()  # a second close does nothing


def test_qos_class_follows_requests_and_limits(daemon):
    with gpukit.connect(daemon.address) as gk:
        assert gk.qos_class == "BestEffort"
    with gpukit.connect(daemon.address, memory_limit_bytes=1 << 20) as gk:
        assert gk.qos_class == "Burstable"
    with gpukit.connect(daemon.address, memory_limit_bytes=1 << 20, compute_limit=0.1) as gk:
        assert gk.qos_class == "Guaranteed"


def test_lease_and_gpukit_addr(daemon, monkeypatch):
    monkeypatch.setenv("GPUKIT_ADDR", daemon.address)
    with gpukit.connect(lease_s=5) as gk:
        assert gk.address == daemon.address
        assert gk.lease_s == 5.0
        gk.keep_alive()


def test_no_daemon_is_unavailable(tmp_path):
    with pytest.raises(gpukit.Unavailable) as error:
        gpukit.connect(f"unix://{tmp_path}/nothing.sock", connect_timeout_s=0.2)
    assert error.value.code == "UNAVAILABLE"


def test_unknown_partition_is_not_found(daemon):
    with pytest.raises(gpukit.NotFound, match='partition "gold" does not exist'):
        gpukit.connect(daemon.address, partition="gold")


def test_gpukit_partition_is_the_partition_when_none_is_named(daemon, monkeypatch):
    # As in a Kubernetes container that gpukit-device-plugin gave a gpukit.io/gold device.
    monkeypatch.setenv("GPUKIT_PARTITION", "gold")
    with pytest.raises(gpukit.NotFound, match='partition "gold" does not exist'):
        gpukit.connect(daemon.address)
    with gpukit.connect(daemon.address, partition="default") as gk:  # named: it wins
        assert gk.partition == "default"
    monkeypatch.setenv("GPUKIT_PARTITION", "default")
    with gpukit.connect(daemon.address) as gk:
        assert gk.partition == "default"


# --- errors ---------------------------------------------------------------------------------


def test_error_hierarchy():
    for cls in [
        gpukit.InvalidArgument,
        gpukit.NotFound,
        gpukit.ResourceExhausted,
        gpukit.FailedPrecondition,
        gpukit.PermissionDenied,
        gpukit.DeadlineExceeded,
        gpukit.Unavailable,
        gpukit.Internal,
        gpukit.Cancelled,
    ]:
        assert issubclass(cls, gpukit.Error) and issubclass(cls, Exception)
    assert gpukit.NotFound.code == "NOT_FOUND" and gpukit.Error.reason is None


def test_shape_mismatch_is_invalid_argument(gk):
    # Pipelined (the default): the error comes at the sync point, naming the op.
    a = gk.zeros((2, 3)) + gk.zeros((4,))
    with pytest.raises(gpukit.InvalidArgument) as error:
        gk.sync()
    assert error.value.code == "INVALID_ARGUMENT"
    assert error.value.message == "op #0 (add): shapes [2, 3] and [4] cannot be broadcast together"
    assert error.value.reason is None
    with pytest.raises(gpukit.InvalidArgument, match="cannot be broadcast"):
        a.shape
    with pytest.raises(gpukit.InvalidArgument, match="inner dimensions"):
        (gk.zeros((2, 3)) @ gk.zeros((2, 3))).numpy()


def test_shape_mismatch_is_invalid_argument_at_the_call_without_pipelining(daemon):
    with gpukit.connect(daemon.address, tenant="pytest", pipeline=False) as gk:
        with pytest.raises(gpukit.InvalidArgument) as error:
            gk.zeros((2, 3)) + gk.zeros((4,))
        assert error.value.code == "INVALID_ARGUMENT"
        assert error.value.message == "shapes [2, 3] and [4] cannot be broadcast together"
        assert error.value.reason is None
        with pytest.raises(gpukit.InvalidArgument, match="inner dimensions"):
            gk.zeros((2, 3)) @ gk.zeros((2, 3))


def test_foreign_array_is_not_found(gk, daemon):
    mine = gk.ones(3)
    with gpukit.connect(daemon.address, tenant="other") as other:
        theirs = other.ones(3)
        with pytest.raises(gpukit.NotFound, match="not found in this session"):
            other.sum(mine).numpy()
        with pytest.raises(gpukit.NotFound, match="not found in this session"):
            (mine + theirs).numpy()


def test_freed_array_is_not_found(gk):
    a = gk.ones(3)
    handle = a.handle
    a.free()
    assert a.freed and "freed" in repr(a)
    for use in [a.numpy, lambda: a + 1, lambda: gpukit.sum(a)]:
        with pytest.raises(gpukit.NotFound, match=handle):
            use()
    a.free()  # a second free does nothing


def test_memory_limit_is_resource_exhausted_with_reason(daemon):
    with gpukit.connect(daemon.address, memory_limit_bytes=1 << 20) as gk:
        held = gk.empty((1 << 18,), "float32")  # exactly the limit
        assert held.nbytes == 1 << 20
        with pytest.raises(gpukit.ResourceExhausted) as error:
            gk.empty((16,), "float32")
    assert error.value.code == "RESOURCE_EXHAUSTED"
    assert error.value.reason == "REASON_SESSION_LIMIT_EXCEEDED"
    assert "above its limits.memory" in error.value.message
    assert str(error.value).endswith("(reason REASON_SESSION_LIMIT_EXCEEDED)")


# --- kernels --------------------------------------------------------------------------------


def test_kernel_arguments_get_the_documented_c_types():
    assert kernel_argument(2)  # int -> int32
    with pytest.raises(OverflowError, match="np.int64"):
        kernel_argument(1 << 31)
    with pytest.raises(TypeError, match="bool"):
        kernel_argument(True)
    with pytest.raises(TypeError, match="np.float32"):
        kernel_argument(np.int16(3))
    with pytest.raises(TypeError):
        kernel_argument("x")
    scalars = [np.float32(1), np.float64(1), np.int32(1), np.int64(1 << 40), np.uint32(1)]
    for value in [1.5, np.uint64(1), *scalars]:
        kernel_argument(value)


def test_compile_and_launch(gk, daemon):
    if not daemon.has_nvrtc():
        with pytest.raises(gpukit.FailedPrecondition, match="NVRTC JIT compiler not available"):
            gk.compile(SAXPY, "saxpy")
        pytest.skip("the daemon found no NVRTC on this host, so it compiles no kernels")
    k = gk.compile(SAXPY, "saxpy")
    assert k.entries == ["saxpy"] and k.lowered_names == ["saxpy"]
    assert k.arch.startswith("sm_") and k.origin == "compiled" and k.handle.startswith("k-")
    assert gk.compile(SAXPY, ["saxpy"]).origin == "memory"
    n = 1000
    x, y = gk.ones(n), gk.zeros(n)
    if os.environ.get("GPUKIT_TEST_BACKEND", "cpu") == "cpu":
        with pytest.raises(gpukit.FailedPrecondition) as error:
            k((n + 255) // 256, 256, 2.0, x, y, n)
        assert "kernel launch requires a GPU; the kernel compiled" in error.value.message
        with pytest.raises(gpukit.FailedPrecondition):
            k.launch((4, 1, 1), (256,), np.float32(2), x, y, np.int32(n), entry="saxpy")
    else:  # a GPU runs it: y += 2 x, twice
        assert k((n + 255) // 256, 256, 2.0, x, y, n) > 0
        k.launch((4, 1, 1), (256,), np.float32(2), x, y, np.int32(n), entry="saxpy")
        np.testing.assert_array_equal(y.numpy(), np.full(n, 4.0, np.float32))
    k.free()
    with pytest.raises(gpukit.NotFound):
        k(1, 1, 2.0, x, y, n)


def test_compile_error_is_invalid_argument_with_nvrtc_log(gk, daemon):
    if not daemon.has_nvrtc():
        pytest.skip("the daemon found no NVRTC on this host, so it compiles no kernels")
    with pytest.raises(gpukit.InvalidArgument) as error:
        gk.compile('extern "C" __global__ void bad() { undeclared_thing = 1; }', "bad")
    assert "kernel compilation failed" in error.value.message
    assert 'identifier "undeclared_thing" is undefined' in error.value.message


# --- the GIL --------------------------------------------------------------------------------


def test_a_source_includes_its_headers_and_no_host_file(gk, daemon, tmp_path):
    if not daemon.has_nvrtc():
        pytest.skip("the daemon found no NVRTC on this host, so it compiles no kernels")
    secret = tmp_path / "secret.h"
    secret.write_text("gpukit-python-secret-5d2e\n")
    with pytest.raises(gpukit.InvalidArgument) as refused:
        gk.compile(f'#include "{secret}"\nextern "C" __global__ void k() {{}}', "k")
    assert "Permission denied" in str(refused.value)
    assert "gpukit-python-secret" not in str(refused.value)
    kernel = gk.compile(
        '#include "n.h"\nextern "C" __global__ void k(int* x) { x[0] = kN; }',
        "k",
        headers={"n.h": "constexpr int kN = 7;"},
    )
    assert kernel.entries == ["k"]
    assert gk.last_compile_log() == ""


def test_last_compile_log_holds_what_the_error_message_cut(gk, daemon):
    if not daemon.has_nvrtc():
        pytest.skip("the daemon found no NVRTC on this host, so it compiles no kernels")
    name = "q" * 2000
    source = "".join(f"int v{i} = {name}{i};\n" for i in range(40))
    with pytest.raises(gpukit.InvalidArgument) as refused:
        gk.compile(source, "k")
    assert "GetCompileLog returns the whole log" in str(refused.value)
    assert len(str(refused.value)) < 8192
    log = gk.last_compile_log()
    assert len(log) > 16384 and f"{name}39" in log


def test_blocking_calls_release_the_gil(gk):
    """A thread waits in long daemon calls while the main thread keeps running Python.

    A C call that holds the GIL is never preempted, so while it runs the main thread could
    not run at all: its ticks would show a gap as long as the call. Released, the main thread
    ticks throughout, and no gap comes near the call's length.
    """
    # As many matmuls as make the wait last about 0.2 s on this machine (at most 1024), timed
    # as the worker runs them: queued at once. The GPU must be the one busy, not the request
    # path: where a 768^2 matmul goes faster than 2 ms a queued op (a GPU), 4096^2 ones do.
    def per_op(n):
        a = gk.ones((n, n))
        begin = time.monotonic()
        probe = [gpukit.matmul(a, a) for _ in range(4)]
        gk.sync()
        took = (time.monotonic() - begin) / len(probe)
        for c in probe:
            c.free()
        return a, took

    a, each = per_op(768)  # about 0.01 to 0.5 s on the CPU backend, by the machine
    if each < 0.002:
        a, each = per_op(4096)
    count = min(1024, max(1, math.ceil(0.2 / max(each, 1e-5))))
    window = {}
    started = threading.Event()

    def worker():
        started.set()
        window["start"] = time.monotonic()
        # Pipelined; a client with its window of ops in flight full waits in the submit, so
        # the waiting is split between the submits and the sync: both must release the GIL.
        results = [gpukit.matmul(a, a) for _ in range(count)]
        gk.sync()
        window["end"] = time.monotonic()
        for c in results:
            c.free()

    thread = threading.Thread(target=worker)
    ticks = []
    thread.start()
    started.wait()
    while thread.is_alive():
        ticks.append(time.monotonic())
    thread.join()
    duration = window["end"] - window["start"]
    assert duration > 0.03, f"the call took {duration:.4f}s, too short to tell"
    inside = [window["start"]] + [t for t in ticks if window["start"] < t < window["end"]]
    inside.append(window["end"])
    longest_gap = max(later - earlier for earlier, later in zip(inside, inside[1:]))
    assert longest_gap < duration / 2, (
        f"the main thread stood still for {longest_gap:.3f}s of a {duration:.3f}s call: "
        "the call held the GIL"
    )


# --- zero-copy device memory -------------------------------------------------------------


@pytest.mark.skipif(os.environ.get("GPUKIT_TEST_BACKEND", "cpu") != "cpu",
                    reason="the CPU backend's refusal")
def test_mapping_device_memory_on_the_cpu_backend_is_refused_clearly(gk):
    a = gk.array(np.arange(4, dtype=np.float32))
    with pytest.raises(gpukit.FailedPrecondition, match="use host shared memory"):
        a.map()
    # Consumers probe the interface with hasattr: on the CPU backend it is absent.
    assert not hasattr(a, "__cuda_array_interface__")
    assert not hasattr(gk.array(np.ones(2, dtype=np.float32)).astype("bfloat16"),
                       "__cuda_array_interface__")
    np.testing.assert_array_equal(a.numpy(), np.arange(4, dtype=np.float32))
