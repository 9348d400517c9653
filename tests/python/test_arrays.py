"""Arrays: dtypes through a round trip, creation, description, astype/reshape/transpose."""

import ctypes
import gc

import numpy as np
import pytest

import gpukit
from gpukit import _dtypes


def random_data(rng, dtype, shape):
    if dtype == "bfloat16":  # float32 values that bfloat16 holds exactly
        bits = _dtypes.float32_to_bfloat16_bits(rng.standard_normal(shape) * 100)
        return _dtypes.bfloat16_bits_to_float32(bits)
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=np_dtype, endpoint=True)


ALL_DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "uint8"]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (0, 3)])
def test_every_dtype_round_trips_through_numpy(gk, rng, dtype, shape):
    data = random_data(rng, dtype, shape)
    a = gk.array(data, dtype=dtype)
    assert a.shape == shape
    assert a.dtype == dtype
    assert a.nbytes == data.size * (2 if dtype == "bfloat16" else data.itemsize)
    out = a.numpy()
    assert out.dtype == (np.float32 if dtype == "bfloat16" else np.dtype(dtype))
    np.testing.assert_array_equal(out, data)


def staging_mappings():
    """(address, bytes) of this process's mappings of staging regions: the memfds the C++
    client names "gpukit-staging" for transfers through host shared memory."""
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/memfd:gpukit-staging" in line:
                begin, end = (int(x, 16) for x in line.split()[0].split("-"))
                found.append((begin, end - begin))
    return found


@pytest.mark.parametrize("use_shared_memory", [True, False])
def test_large_array_round_trips_through_shared_memory_or_grpc(daemon, rng, use_shared_memory):
    gc.collect()  # sessions earlier tests left to the garbage collector close now
    before = staging_mappings()
    # 12 MiB + 20 KiB of float32: several gRPC chunks, and no power of two.
    data = rng.standard_normal((3, 1024, 1029)).astype(np.float32)
    with gpukit.connect(
        daemon.address, tenant="pytest", use_shared_memory=use_shared_memory
    ) as gk:
        small = rng.standard_normal(1000).astype(np.float32)  # 4 KB: always gRPC messages
        np.testing.assert_array_equal(gk.array(small).numpy(), small)
        assert staging_mappings() == before

        a = gk.array(data)
        np.testing.assert_array_equal(a.numpy(), data)
        doubled = (a * 2).numpy()
        np.testing.assert_array_equal(doubled, data * 2)
        added = [m for m in staging_mappings() if m not in before]
        if use_shared_memory:
            # One region, the next power of two, holding what the daemon computed: the bytes
            # of .numpy() came through it (gRPC messages never touch it).
            assert [size for _, size in added] == [16 << 20]
            assert ctypes.string_at(added[0][0], doubled.nbytes) == doubled.tobytes()
        else:
            assert added == []
    assert staging_mappings() == before  # closing the session unmapped it


def test_bfloat16_dtype_and_host_conversion(gk, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    a = gk.array(x, dtype=gpukit.bfloat16)
    assert a.dtype is gpukit.bfloat16 and a.dtype == "bfloat16" and a.itemsize == 2
    # The host's rounding (in gk.array) is the daemon's (astype): nearest, ties to even.
    np.testing.assert_array_equal(a.numpy(), gk.array(x).astype("bfloat16").numpy())
    bits = np.frombuffer(a.tobytes(), dtype=np.uint16).reshape(4, 5)
    np.testing.assert_array_equal(_dtypes.bfloat16_bits_to_float32(bits), a.numpy())
    np.testing.assert_array_equal(gk.from_bytes(bits, (4, 5), "bf16").numpy(), a.numpy())


def test_default_dtypes_of_host_data(gk):
    assert gk.array(np.zeros(3)).dtype == np.float32  # float64 has no gpukit twin
    assert gk.array([1, 2, 3]).dtype == np.int64
    assert gk.array([True, False]).dtype == np.uint8
    assert gk.array(2.5).shape == ()
    with pytest.raises(TypeError, match="float64"):
        gk.array(np.zeros(3), dtype=np.float64)
    with pytest.raises(TypeError, match="int16"):
        gk.array(np.zeros(3, dtype=np.int16))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_zeros_ones_full_and_empty(gk, dtype):
    assert gk.zeros((2, 3), dtype).numpy().tolist() == [[0] * 3] * 2
    assert gk.ones(4, dtype).numpy().tolist() == [1] * 4
    assert gk.full((2,), 7, dtype).numpy().tolist() == [7, 7]
    e = gk.empty((5, 2), dtype)
    assert e.shape == (5, 2) and e.dtype == dtype


def test_description_len_and_repr(gk):
    a = gk.zeros((4, 3), np.int32)
    assert len(a) == 4 and a.ndim == 2 and a.size == 12 and a.nbytes == 48
    assert a.handle.startswith("a-") and a.session is gk
    assert repr(a) == f"gpukit.Array(shape=(4, 3), dtype=int32, handle={a.handle!r})"
    with pytest.raises(TypeError):
        len(gk.array(1.0))
    np.testing.assert_array_equal(np.asarray(a), np.zeros((4, 3), np.int32))
    assert gk.array(np.float32(3.5)).item() == 3.5


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float16", "bfloat16", "float32"])
def test_astype_matches_numpy(gk, rng, dtype):
    x = (rng.standard_normal((3, 4)) * 50).astype(np.float32)
    if dtype == "uint8":
        x = np.abs(x)  # NumPy leaves negative floats to uint8 undefined; the daemon saturates
    out = gk.array(x).astype(dtype)
    assert out.dtype == dtype
    if dtype == "bfloat16":
        expected = _dtypes.bfloat16_bits_to_float32(_dtypes.float32_to_bfloat16_bits(x))
    else:
        expected = x.astype(dtype)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_reshape_transpose_and_T(gk, rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a = gk.array(x)
    np.testing.assert_array_equal(a.reshape(6, 4).numpy(), x.reshape(6, 4))
    np.testing.assert_array_equal(a.reshape((4, -1)).numpy(), x.reshape((4, -1)))
    np.testing.assert_array_equal(a.T.numpy(), x.T)
    np.testing.assert_array_equal(a.transpose(1, 0, 2).numpy(), x.transpose(1, 0, 2))
    np.testing.assert_array_equal(gpukit.transpose(a, (2, 0, 1)).numpy(), x.transpose(2, 0, 1))
    with pytest.raises(gpukit.InvalidArgument, match="cannot reshape"):
        a.reshape(5, 5).shape  # pipelined: the refusal comes with the op's answer
