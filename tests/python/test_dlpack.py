"""DLPack on the CPU backend: from_dlpack of host tensors (NumPy's, and tensors made by hand
with ctypes to reach every check: strides, dtypes, devices, versions, byte offsets, and that the
producer's deleter runs exactly once whatever happens), and the export's refusals where the
array cannot be mapped. The export itself needs a GPU: test_cuda_interop.py.
"""

from __future__ import annotations

import ctypes
import re
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pytest

import gpukit
from gpukit import _dtypes

from conftest import BACKEND

# --- hand-made DLPack tensors --------------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# Capsule names must outlive their capsules: module constants.
VERSIONED_NAME = b"dltensor_versioned"
LEGACY_NAME = b"dltensor"

KDL_CPU, KDL_CUDA, KDL_ROCM = 1, 2, 10
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_COMPLEX, KDL_BOOL = 0, 1, 2, 4, 5, 6


class HandMade:
    """A DLPack tensor built with ctypes over `memory` (kept alive here), as a producer
    would; its deleter counts its calls."""

    def __init__(
        self,
        memory: Optional[np.ndarray],
        shape: Sequence[int],
        *,
        code: int,
        bits: int,
        lanes: int = 1,
        strides: Optional[Sequence[int]] = None,
        device: Tuple[int, int] = (KDL_CPU, 0),
        byte_offset: int = 0,
        versioned: bool = True,
        version: Tuple[int, int] = (1, 0),
        data_pointer: Optional[int] = None,
    ) -> None:
        self.deleted = 0
        self.versioned = versioned
        self._memory = memory
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self._deleter = DELETER(self._delete)
        if data_pointer is None and memory is not None:
            data_pointer = memory.ctypes.data
        tensor = DLTensor(
            data=data_pointer,
            device=DLDevice(*device),
            ndim=len(shape),
            dtype=DLDataType(code, bits, lanes),
            shape=ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64)),
            strides=(
                None
                if self._strides is None
                else ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
            ),
            byte_offset=byte_offset,
        )
        if versioned:
            self.managed = DLManagedTensorVersioned(
                version=DLPackVersion(*version), deleter=self._deleter, dl_tensor=tensor
            )
        else:
            self.managed = DLManagedTensor(dl_tensor=tensor, deleter=self._deleter)

    def _delete(self, _: int) -> None:
        self.deleted += 1

    def capsule(self):
        name = VERSIONED_NAME if self.versioned else LEGACY_NAME
        return _capsule_new(ctypes.addressof(self.managed), name, None)


def of_numpy(data: np.ndarray, **kwargs) -> HandMade:
    """A hand-made tensor over NumPy `data` (compact), of its dtype unless `code`/`bits` say."""
    codes = {"f": KDL_FLOAT, "i": KDL_INT, "u": KDL_UINT, "b": KDL_BOOL, "c": KDL_COMPLEX}
    kwargs.setdefault("code", codes[data.dtype.kind])
    kwargs.setdefault("bits", data.dtype.itemsize * 8)
    return HandMade(data, data.shape, **kwargs)


class Producer:
    """An object that speaks DLPack with a capsule factory of its own, recording how it was
    asked."""

    def __init__(self, device: Tuple[int, int], make_capsule) -> None:
        self._device = device
        self._make_capsule = make_capsule
        self.calls: List[dict] = []

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._device

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self._make_capsule(kwargs)


# --- from_dlpack of host memory ----------------------------------------------------------

NUMPY_DTYPES = ["float32", "float16", "int32", "int64", "uint8"]


def random_data(rng, dtype: str, shape) -> np.ndarray:
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":  # (asarray: of shape (), NumPy gives a scalar, not an array)
        return np.asarray(rng.standard_normal(shape) * 100, dtype=np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=np_dtype, endpoint=True)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (2, 3, 4), (0, 3)])
def test_numpy_arrays_of_every_dtype_round_trip(gk, rng, dtype, shape):
    data = random_data(rng, dtype, shape)
    a = gk.from_dlpack(data)
    assert isinstance(a, gpukit.Array) and a.session is gk
    assert a.shape == shape and a.dtype == np.dtype(dtype)
    out = a.numpy()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, data)


def test_the_array_is_a_copy_of_the_host_data(gk):
    data = np.arange(6, dtype=np.int32)
    a = gk.from_dlpack(data)
    data[:] = -1
    np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.int32))
    np.testing.assert_array_equal(gk.from_dlpack(data, copy=True).numpy(), data)


def test_bool_becomes_uint8_as_in_gk_array(gk):
    data = np.array([[True, False, True], [False, False, True]])
    a = gk.from_dlpack(data)
    assert a.dtype == np.uint8 and a.shape == (2, 3)
    np.testing.assert_array_equal(a.numpy(), data.astype(np.uint8))


def test_bfloat16_bits_round_trip(gk, rng):
    values = rng.standard_normal((4, 6)).astype(np.float32) * 50
    bits = _dtypes.float32_to_bfloat16_bits(values)
    producer = of_numpy(bits, code=KDL_BFLOAT, bits=16)
    a = gk.from_dlpack(producer.capsule())
    assert a.dtype == gpukit.bfloat16 and a.shape == (4, 6)
    assert a.tobytes() == bits.tobytes()
    assert producer.deleted == 1


def test_capsules_versioned_and_legacy_and_used_once(gk):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    for capsule in (data.__dlpack__(max_version=(1, 0)), data.__dlpack__()):
        np.testing.assert_array_equal(gk.from_dlpack(capsule).numpy(), data)
        assert "used_dltensor" in repr(capsule)  # consumed, as the protocol says
        with pytest.raises(ValueError, match="already consumed"):
            gk.from_dlpack(capsule)


def test_the_producers_deleter_runs_once_right_after_the_copy(gk):
    for versioned in (True, False):
        data = np.arange(10, dtype=np.int64)
        producer = of_numpy(data, versioned=versioned)
        a = gk.from_dlpack(producer.capsule())
        assert producer.deleted == 1  # before the array is even used
        np.testing.assert_array_equal(a.numpy(), data)
        assert producer.deleted == 1


def test_byte_offset_and_null_strides(gk):
    data = np.arange(20, dtype=np.int32)
    producer = HandMade(data, (3, 4), code=KDL_INT, bits=32, byte_offset=4 * 5)
    np.testing.assert_array_equal(
        gk.from_dlpack(producer.capsule()).numpy(), data[5:17].reshape(3, 4)
    )
    assert producer.deleted == 1


def test_strides_of_extents_of_one_do_not_matter(gk):
    # PyTorch gives size-1 dimensions arbitrary strides; the layout is still compact.
    data = np.arange(6, dtype=np.float32)
    producer = HandMade(data, (2, 1, 3), code=KDL_FLOAT, bits=32, strides=(3, 99, 1))
    np.testing.assert_array_equal(gk.from_dlpack(producer.capsule()).numpy(), data.reshape(2, 1, 3))


def test_empty_and_zero_d_tensors(gk):
    empty = HandMade(None, (0, 3), code=KDL_FLOAT, bits=32, strides=(3, 1))  # no data pointer
    a = gk.from_dlpack(empty.capsule())
    assert a.shape == (0, 3) and a.numpy().shape == (0, 3) and empty.deleted == 1
    scalar = np.array(-2.5, dtype=np.float16)
    b = gk.from_dlpack(scalar)
    assert b.shape == () and b.dtype == np.float16 and b.item() == -2.5


# --- what from_dlpack refuses, releasing the producer's tensor ---------------------------


@pytest.mark.parametrize(
    "view, strides",
    [
        (lambda x: x.T, "(1, 4)"),
        (lambda x: x[:, ::2], "(4, 2)"),
        (lambda x: x[::2], "(8, 1)"),
    ],
)
def test_numpy_views_that_are_not_compact_are_a_value_error(gk, view, strides):
    data = view(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(ValueError, match=r"strides \(.*contiguous") as error:
        gk.from_dlpack(data)
    assert f"shape {data.shape} has strides {strides}" in str(error.value)
    np.testing.assert_array_equal(gk.from_dlpack(np.ascontiguousarray(data)).numpy(), data)


@pytest.mark.parametrize(
    "code, bits, lanes, name",
    [
        (KDL_FLOAT, 64, 1, "float64"),
        (KDL_INT, 16, 1, "int16"),
        (KDL_INT, 8, 1, "int8"),
        (KDL_UINT, 16, 1, "uint16"),
        (KDL_COMPLEX, 64, 1, "complex64"),
        (KDL_FLOAT, 32, 4, "float32x4"),
        (KDL_BFLOAT, 32, 1, "bfloat32"),
        (KDL_BOOL, 1, 1, "bool (1 bits)"),
        (3, 64, 1, "type code 3"),
    ],
)
def test_element_types_gpukit_lacks_are_a_type_error(gk, code, bits, lanes, name):
    producer = HandMade(np.zeros(64, np.uint8), (4,), code=code, bits=bits, lanes=lanes)
    with pytest.raises(TypeError, match=re.escape(f"element type {name}")):
        gk.from_dlpack(producer.capsule())
    assert producer.deleted == 1


def test_numpy_dtypes_gpukit_lacks_are_a_type_error(gk):
    with pytest.raises(TypeError, match="float64 to float32"):
        gk.from_dlpack(np.zeros(3))
    with pytest.raises(TypeError, match="int16"):
        gk.from_dlpack(np.zeros(3, np.int16))


@pytest.mark.parametrize(
    "shape, strides, match",
    [
        ((3, 4), (1, 3), r"strides \(1, 3\)"),
        ((2, 3), (6, 2), r"strides \(6, 2\).*compact row-major \(3, 1\)"),
        ((4,), (2,), r"strides \(2,\)"),
        ((2, -3), None, r"shape\[1\] is negative"),
    ],
)
def test_layouts_gpukit_cannot_take_are_a_value_error(gk, shape, strides, match):
    producer = HandMade(np.zeros(64, np.float32), shape, code=KDL_FLOAT, bits=32, strides=strides)
    with pytest.raises(ValueError, match=match):
        gk.from_dlpack(producer.capsule())
    assert producer.deleted == 1


def test_devices_gpukit_cannot_read_are_a_buffer_error(gk):
    rocm = HandMade(np.zeros(4, np.float32), (4,), code=KDL_FLOAT, bits=32, device=(KDL_ROCM, 0))
    with pytest.raises(BufferError, match="ROCm device"):
        gk.from_dlpack(rocm.capsule())
    assert rocm.deleted == 1


def test_cuda_memory_that_is_not_device_memory_is_refused_and_released(gk):
    # A CUDA tensor is never read on the host: a fake device pointer is safe here. Without a
    # CUDA driver the import fails for want of one; on a GPU host because the pointer names no
    # device memory. Either way the producer gets its tensor back.
    fake = 0x7F0000000000
    cuda = HandMade(None, (2, 3), code=KDL_FLOAT, bits=32, device=(KDL_CUDA, 0), data_pointer=fake)
    with pytest.raises((gpukit.FailedPrecondition, gpukit.InvalidArgument)):
        gk.from_dlpack(cuda.capsule())
    assert cuda.deleted == 1
    strided = HandMade(
        None, (2, 3), code=KDL_FLOAT, bits=32, strides=(1, 2), device=(KDL_CUDA, 0),
        data_pointer=fake,
    )
    with pytest.raises(ValueError, match="strides"):  # checked whatever the device
        gk.from_dlpack(strided.capsule())
    assert strided.deleted == 1


def test_another_major_version_is_released_unread(gk):
    producer = HandMade(np.zeros(4, np.float32), (4,), code=KDL_FLOAT, bits=32, version=(2, 0))
    with pytest.raises(BufferError, match="version 2.0"):
        gk.from_dlpack(producer.capsule())
    assert producer.deleted == 1


def test_copy_false_refuses_host_memory(gk):
    producer = of_numpy(np.ones(3, np.float32))
    with pytest.raises(BufferError, match="copy=False"):
        gk.from_dlpack(producer.capsule(), copy=False)
    assert producer.deleted == 1


def test_objects_without_dlpack_are_a_type_error(gk):
    with pytest.raises(TypeError, match="__dlpack__"):
        gk.from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="capsule"):
        gk._client.from_dlpack(np.ones(2))


# --- the producer's side of from_dlpack ---------------------------------------------------


def test_host_producers_are_asked_for_a_versioned_capsule(gk):
    data = np.arange(4, dtype=np.float32)
    producer = Producer((KDL_CPU, 0), lambda kwargs: data.__dlpack__(**kwargs))
    np.testing.assert_array_equal(gk.from_dlpack(producer).numpy(), data)
    assert producer.calls == [{"max_version": (1, 0)}]


def test_producers_older_than_max_version_are_asked_again_without_it(gk):
    data = np.arange(4, dtype=np.int32)

    class Old:
        def __dlpack_device__(self):
            return (KDL_CPU, 0)

        def __dlpack__(self, stream=None):
            return data.__dlpack__(stream=stream)

    np.testing.assert_array_equal(gk.from_dlpack(Old()).numpy(), data)


def test_cuda_producers_copy_to_the_host_with_copy_true(gk):
    data = np.arange(6, dtype=np.float16).reshape(2, 3)

    def host_copy(kwargs):
        assert kwargs.get("dl_device") == (KDL_CPU, 0) and kwargs.get("copy") is True
        return data.__dlpack__(max_version=(1, 0))

    producer = Producer((KDL_CUDA, 0), host_copy)
    a = gk.from_dlpack(producer, copy=True)
    np.testing.assert_array_equal(a.numpy(), data)
    assert producer.calls == [{"max_version": (1, 0), "dl_device": (KDL_CPU, 0), "copy": True}]


def test_cuda_producers_without_a_host_copy_are_a_buffer_error(gk):
    def refuse(kwargs):
        raise BufferError("no cross-device copies here")

    with pytest.raises(BufferError, match="copy it to the host first"):
        gk.from_dlpack(Producer((KDL_CUDA, 0), refuse), copy=True)


def test_cuda_producers_are_asked_for_the_legacy_default_stream(gk):
    made: List[HandMade] = []

    def device_capsule(kwargs):
        made.append(HandMade(None, (4,), code=KDL_INT, bits=64, device=(KDL_CUDA, 0),
                             data_pointer=0x7F0000000000))
        return made[-1].capsule()

    producer = Producer((KDL_CUDA, 0), device_capsule)
    with pytest.raises((gpukit.FailedPrecondition, gpukit.InvalidArgument)):  # a fake pointer
        gk.from_dlpack(producer)
    assert producer.calls == [{"max_version": (1, 0), "stream": 1}]
    assert made[0].deleted == 1


def test_a_gpukit_array_of_the_session_is_itself_or_a_copy(gk):
    a = gk.array(np.arange(5, dtype=np.int32))
    assert gk.from_dlpack(a) is a and gpukit.from_dlpack(a) is a
    b = gk.from_dlpack(a, copy=True)
    assert b.handle != a.handle
    np.testing.assert_array_equal(b.numpy(), a.numpy())


def test_module_level_from_dlpack_needs_a_session_for_foreign_data(gk):
    data = np.arange(3, dtype=np.uint8)
    with pytest.raises(TypeError, match="session"):
        gpukit.from_dlpack(data)
    a = gpukit.from_dlpack(data, session=gk)
    assert a.session is gk
    np.testing.assert_array_equal(a.numpy(), data)


# --- export where the array cannot be mapped ---------------------------------------------


@pytest.mark.skipif(BACKEND != "cpu", reason="a daemon on the CPU backend exports nothing")
def test_export_on_the_cpu_backend_is_a_buffer_error_that_says_why(gk):
    a = gk.array(np.ones((2, 3), np.float32))
    for export in (
        a.__dlpack_device__,
        a.__dlpack__,
        lambda: a.__dlpack__(max_version=(1, 0)),
        lambda: a.__dlpack__(stream=1, max_version=(1, 0), dl_device=(KDL_CUDA, 0), copy=False),
    ):
        with pytest.raises(BufferError, match=r"cannot be mapped.*numpy\(\) copies it"):
            export()
    np.testing.assert_array_equal(a.numpy(), np.ones((2, 3)))  # still usable


def test_numpy_from_dlpack_of_an_array_raises_a_buffer_error(gk):
    a = gk.array(np.ones(4, np.float32))
    with pytest.raises(BufferError):
        np.from_dlpack(a)


def test_empty_and_freed_arrays_have_no_export(gk):
    with pytest.raises(BufferError, match="empty"):
        gk.empty((0, 4)).__dlpack__()
    a = gk.ones(3)
    a.free()
    with pytest.raises(gpukit.NotFound):
        a.__dlpack_device__()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"stream": 0}, ValueError, "stream=0"),
        ({"stream": -2}, ValueError, "stream=-2"),
        ({"stream": "default"}, TypeError, "stream must be"),
        ({"stream": True}, TypeError, "stream must be"),
        ({"max_version": "1.0"}, TypeError, "max_version"),
        ({"max_version": (1,)}, TypeError, "max_version"),
    ],
)
def test_export_arguments_are_checked_before_anything_else(gk, kwargs, error, match):
    a = gk.ones(3)
    with pytest.raises(error, match=match):
        a.__dlpack__(**kwargs)
