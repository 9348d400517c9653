"""Zero-copy interop on a GPU host: gpukitd's arrays seen by PyTorch (and CuPy, where
installed) through the CUDA Array Interface and DLPack, both ways, without copies. Runs with
$GPUKIT_TEST_BACKEND=cuda (the daemon on the GPU) where torch with CUDA is installed; skipped
elsewhere, which is what CI sees.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpukit

from conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "cuda", reason="needs gpukitd on a GPU "
                                "($GPUKIT_TEST_BACKEND=cuda)")
torch = pytest.importorskip("torch")


def test_torch_sees_the_arrays_memory_and_writes_to_it_in_place(gk):
    rng = np.random.default_rng(7)
    data = rng.uniform(-4, 4, size=(64, 48)).astype(np.float32)
    a = gk.array(data)
    t = torch.as_tensor(a, device="cuda")
    assert t.shape == (64, 48) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    pointer, size_bytes, _ = a.map()
    assert t.data_ptr() == pointer and size_bytes == data.nbytes  # the same memory
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), data * 2)  # the daemon reads torch's write
    b = a + a
    np.testing.assert_array_equal(torch.as_tensor(b, device="cuda").cpu().numpy(), data * 4)


def test_half_precision_and_integer_arrays_keep_their_types(gk):
    halves = np.linspace(-1, 1, 1000, dtype=np.float16)
    ints = np.arange(-500, 500, dtype=np.int32)
    th = torch.as_tensor(gk.array(halves), device="cuda")
    ti = torch.as_tensor(gk.array(ints), device="cuda")
    assert th.dtype == torch.float16 and ti.dtype == torch.int32
    np.testing.assert_array_equal(th.cpu().numpy(), halves)
    np.testing.assert_array_equal(ti.cpu().numpy(), ints)


# --- DLPack --------------------------------------------------------------------------------

KDL_CUDA = 2


def arrays_held(daemon, gk) -> int:
    """The number of arrays gpukitd holds for `gk`'s session (`gpukitctl sessions`)."""
    sessions = daemon.ctl("sessions")
    for session in sessions.get("sessions", []):
        if session["sessionId"] == gk.session_id:
            return int(session.get("arrays", 0))  # proto JSON leaves out a 0
    raise AssertionError(f"session {gk.session_id} not listed: {sessions}")


def test_torch_from_dlpack_shares_the_arrays_memory_both_ways(gk):
    data = np.random.default_rng(11).uniform(-4, 4, size=(64, 48)).astype(np.float32)
    a = gk.array(data)
    pointer, size_bytes, device_index = a.map()
    assert a.__dlpack_device__() == (KDL_CUDA, device_index)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == pointer and size_bytes == data.nbytes  # the same memory
    assert t.device == torch.device("cuda", device_index)
    assert t.shape == (64, 48) and t.dtype == torch.float32 and t.is_contiguous()
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    t.add_(1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), data + 1)  # gpukitd reads torch's write
    b = a * 2
    np.testing.assert_array_equal(torch.from_dlpack(b).cpu().numpy(), (data + 1) * 2)


def test_the_tensor_keeps_the_array_alive_until_it_dies(gk, daemon):
    data = np.arange(4096, dtype=np.float32)
    a = gk.array(data)
    t = torch.from_dlpack(a)
    held = arrays_held(daemon, gk)
    del a
    gc.collect()
    assert arrays_held(daemon, gk) == held  # the tensor holds the array
    t.mul_(3)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), data * 3)
    del t
    gc.collect()
    assert arrays_held(daemon, gk) == held - 1  # freed with the tensor


def test_free_while_a_tensor_holds_the_memory_takes_effect_when_it_dies(gk, daemon):
    data = np.arange(100, dtype=np.int32)
    a = gk.array(data)
    t = torch.from_dlpack(a)
    held = arrays_held(daemon, gk)
    a.free()
    with pytest.raises(gpukit.NotFound):
        a.numpy()
    assert arrays_held(daemon, gk) == held
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    del t
    gc.collect()
    assert arrays_held(daemon, gk) == held - 1


def test_versioned_and_legacy_capsules(gk, daemon):
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    a = gk.array(data)
    pointer = a.map()[0]
    versioned = a.__dlpack__(max_version=(1, 0))
    legacy = a.__dlpack__()
    assert '"dltensor_versioned"' in repr(versioned) and '"dltensor"' in repr(legacy)
    for capsule in (versioned, legacy):
        t = torch.utils.dlpack.from_dlpack(capsule)
        assert "used_dltensor" in repr(capsule)  # torch took it over
        assert t.data_ptr() == pointer and t.shape == (2, 3, 4) and t.stride() == (12, 4, 1)
        np.testing.assert_array_equal(t.cpu().numpy(), data)
    # A capsule nobody consumed releases the array when it is collected.
    b = gk.array(data)
    unused = b.__dlpack__(max_version=(1, 0))
    held = arrays_held(daemon, gk)
    del b
    gc.collect()
    assert arrays_held(daemon, gk) == held
    del unused
    gc.collect()
    assert arrays_held(daemon, gk) == held - 1


@pytest.mark.parametrize(
    "dtype, torch_dtype",
    [
        ("float32", torch.float32),
        ("float16", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("int32", torch.int32),
        ("int64", torch.int64),
        ("uint8", torch.uint8),
    ],
)
def test_every_dtype_maps_to_its_torch_dtype(gk, dtype, torch_dtype):
    # Small integers: exact in every dtype, bfloat16 included.
    values = np.arange(120).reshape(8, 15) - (0 if dtype == "uint8" else 60)
    a = gk.array(values.astype(np.float32), dtype=dtype)
    t = torch.from_dlpack(a)
    assert t.dtype == torch_dtype and t.shape == (8, 15)
    assert t.data_ptr() == a.map()[0]
    np.testing.assert_array_equal(t.to(torch.float64).cpu().numpy(), values)


def test_copy_true_exports_a_copy_made_in_gpukitd(gk):
    data = np.arange(16, dtype=np.float32)
    a = gk.array(data)
    t = torch.utils.dlpack.from_dlpack(a.__dlpack__(max_version=(1, 0), copy=True))
    assert t.data_ptr() != a.map()[0]
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    t.zero_()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), data)  # the copy is the consumer's alone


def test_stream_and_device_arguments(gk):
    a = gk.array(np.ones(8, np.float32))
    device_index = a.map()[2]
    side_stream = torch.cuda.Stream()
    for stream in (None, -1, 1, 2, side_stream.cuda_stream):
        t = torch.utils.dlpack.from_dlpack(a.__dlpack__(stream=stream, max_version=(1, 0)))
        assert t.data_ptr() == a.map()[0]
    with pytest.raises(ValueError, match="stream=0"):
        a.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="dl_device"):
        a.__dlpack__(dl_device=(1, 0))
    a.__dlpack__(dl_device=(KDL_CUDA, device_index))  # its own device is fine


def test_empty_arrays_are_a_buffer_error(gk):
    with pytest.raises(BufferError, match="empty"):
        torch.from_dlpack(gk.empty((0, 3)))


def test_cupy_from_dlpack_shares_the_memory(gk):
    cp = pytest.importorskip("cupy")
    data = np.arange(30, dtype=np.float16).reshape(5, 6)
    a = gk.array(data)
    c = cp.from_dlpack(a)
    assert c.data.ptr == a.map()[0] and c.dtype == np.float16 and c.shape == (5, 6)
    np.testing.assert_array_equal(cp.asnumpy(c), data)


def test_from_dlpack_of_torch_tensors(gk):
    host = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    np.testing.assert_array_equal(gk.from_dlpack(host).numpy(), host.numpy())
    half = torch.linspace(-2, 2, 9, dtype=torch.bfloat16)
    b = gk.from_dlpack(half)
    assert b.dtype == gpukit.bfloat16
    np.testing.assert_array_equal(b.numpy(), half.float().numpy())
    with pytest.raises(ValueError, match=r"contiguous\(\)"):
        gk.from_dlpack(host.t())
    device = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    copied = gk.from_dlpack(device, copy=True)
    assert copied.map()[0] != device.data_ptr()
    np.testing.assert_array_equal(copied.numpy(), device.cpu().numpy())


FILL = r"""
extern "C" __global__ void fill(float* y, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = value + i;
}
"""


def test_from_dlpack_imports_torch_cuda_memory_without_a_copy(gk, daemon):
    t = torch.arange(4096, dtype=torch.float32, device="cuda").reshape(64, 64)
    before = arrays_held(daemon, gk)
    a = gk.from_dlpack(t)
    assert a.shape == (64, 64) and a.dtype == np.float32
    assert a.map()[0] == t.data_ptr()  # the client's own memory, not a mapping of gpukitd's
    assert arrays_held(daemon, gk) == before + 1
    np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())
    t.mul_(3)  # torch writes; gpukitd reads the write (from_dlpack waited; numpy() after sync)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())
    np.testing.assert_array_equal((a + a).numpy(), (t + t).cpu().numpy())
    # gpukitd writes into torch's memory: a kernel launched on the imported array.
    k = gk.compile(FILL, "fill")
    k((16,), (256,), a, np.float32(0.5), np.int32(4096))
    expected = np.arange(4096, dtype=np.float32).reshape(64, 64) + 0.5
    np.testing.assert_array_equal(t.cpu().numpy(), expected)
    # A view at an offset into torch's allocation imports that part only.
    row = gk.from_dlpack(t[10])
    assert row.map()[0] == t[10].data_ptr()
    np.testing.assert_array_equal(row.numpy(), expected[10])
    # Freeing the arrays unmaps them in gpukitd; the tensor is torch's and lives on.
    del a, row
    gc.collect()
    assert arrays_held(daemon, gk) == before
    t.add_(1)
    np.testing.assert_array_equal(t.cpu().numpy(), expected + 1)


def test_an_empty_array_has_no_interface_and_says_so(gk):
    empty = gk.zeros(0)
    assert not hasattr(empty, "__cuda_array_interface__")
    with pytest.raises(BufferError):
        empty.__dlpack__()


def test_from_dlpack_keeps_the_tensor_alive_while_the_array_lives(gk, daemon):
    t = torch.full((1 << 20,), 7.0, dtype=torch.float32, device="cuda")
    pointer = t.data_ptr()
    a = gk.from_dlpack(t)
    del t
    gc.collect()
    torch.cuda.empty_cache()  # the array still holds torch's tensor: its memory stays
    np.testing.assert_array_equal(a.numpy()[:4], np.full(4, 7.0, np.float32))
    assert a.map()[0] == pointer
    a.free()


def test_from_dlpack_refuses_read_only_and_non_contiguous_cuda_tensors(gk):
    t = torch.zeros((8, 8), dtype=torch.float32, device="cuda")
    with pytest.raises(ValueError, match=r"contiguous\(\)"):
        gk.from_dlpack(t.t())
    with pytest.raises(TypeError):
        gk.from_dlpack(torch.zeros(4, dtype=torch.float64, device="cuda"))
