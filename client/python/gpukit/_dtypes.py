"""DTypes: gpukit's six element types, as NumPy dtypes where NumPy has them.

NumPy has no bfloat16, so the dtype of a bfloat16 array is :data:`gpukit.bfloat16`, an object
of its own that compares equal to the string ``"bfloat16"`` (and to ``ml_dtypes.bfloat16``
when that package is in use). Host data of a bfloat16 array is exchanged as float32, which
holds every bfloat16 value exactly: :meth:`gpukit.Array.numpy` returns float32, and
:meth:`gpukit.Session.array` rounds float data to bfloat16 (to nearest, ties to even, as the
daemon's ``astype`` does). :meth:`gpukit.Array.tobytes` gives the raw 16-bit patterns.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from . import _gpukit


class BFloat16Type:
    """The dtype of bfloat16 arrays (``gpukit.bfloat16``): the upper 16 bits of a float32.

    NumPy has no bfloat16, so this stands in for one. It has the ``name``, ``itemsize`` and
    ``kind`` a NumPy dtype has, and compares equal to ``"bfloat16"``, ``"bf16"`` and to a
    NumPy dtype named ``bfloat16`` (``ml_dtypes.bfloat16``).
    """

    name = "bfloat16"
    itemsize = 2
    kind = "f"

    def __repr__(self) -> str:
        return "gpukit.bfloat16"

    def __str__(self) -> str:
        return "bfloat16"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BFloat16Type):
            return True
        if isinstance(other, str):
            return other in ("bfloat16", "bf16")
        return getattr(other, "name", None) == "bfloat16" and getattr(other, "itemsize", 0) == 2

    def __hash__(self) -> int:
        return hash("bfloat16")


bfloat16 = BFloat16Type()

#: Anything gpukit accepts where a dtype is expected: a NumPy dtype or scalar type
#: (``np.float32``), a name (``"float16"``, ``"bf16"``), ``gpukit.bfloat16``, or the Python
#: types ``float`` (float32: gpukit has no float64) and ``int`` (int64).
DTypeLike = Union[str, np.dtype, type, BFloat16Type, _gpukit.DType]

_BY_NAME = {
    "float32": _gpukit.DType.float32,
    "f32": _gpukit.DType.float32,
    "float16": _gpukit.DType.float16,
    "f16": _gpukit.DType.float16,
    "half": _gpukit.DType.float16,
    "bfloat16": _gpukit.DType.bfloat16,
    "bf16": _gpukit.DType.bfloat16,
    "int32": _gpukit.DType.int32,
    "i32": _gpukit.DType.int32,
    "int64": _gpukit.DType.int64,
    "i64": _gpukit.DType.int64,
    "uint8": _gpukit.DType.uint8,
    "u8": _gpukit.DType.uint8,
}

_TO_NUMPY = {
    _gpukit.DType.float32: np.dtype(np.float32),
    _gpukit.DType.float16: np.dtype(np.float16),
    _gpukit.DType.int32: np.dtype(np.int32),
    _gpukit.DType.int64: np.dtype(np.int64),
    _gpukit.DType.uint8: np.dtype(np.uint8),
}

_SUPPORTED = "float32, float16, bfloat16, int32, int64, uint8"


def to_gpukit(dtype: DTypeLike) -> _gpukit.DType:
    """The gpukit DType of `dtype`; TypeError for a type gpukit does not have."""
    if isinstance(dtype, _gpukit.DType):
        return dtype
    if isinstance(dtype, BFloat16Type):
        return _gpukit.DType.bfloat16
    if dtype is float:
        return _gpukit.DType.float32
    if dtype is int:
        return _gpukit.DType.int64
    if isinstance(dtype, str):
        name = dtype.lower()
    else:
        name = getattr(dtype, "name", None)
        if not isinstance(name, str) or name not in _BY_NAME:
            try:
                name = np.dtype(dtype).name
            except TypeError:
                name = repr(dtype)
    if name in _BY_NAME:
        return _BY_NAME[name]
    hint = " (gpukit has no float64; use float32)" if name == "float64" else ""
    raise TypeError(f"dtype {name} is not supported by gpukit{hint}; it has {_SUPPORTED}")


def to_public(dtype: _gpukit.DType) -> Union[np.dtype, BFloat16Type]:
    """What ``Array.dtype`` returns: a NumPy dtype, or ``gpukit.bfloat16``."""
    return bfloat16 if dtype == _gpukit.DType.bfloat16 else _TO_NUMPY[dtype]


def host_dtype(dtype: _gpukit.DType) -> np.dtype:
    """The NumPy dtype of host copies: float32 for bfloat16."""
    return np.dtype(np.float32) if dtype == _gpukit.DType.bfloat16 else _TO_NUMPY[dtype]


def default_for(data: np.ndarray) -> _gpukit.DType:
    """The gpukit dtype an array of host `data` gets when none is asked for.

    float64 (NumPy's default float) becomes float32 and bool becomes uint8; other types
    gpukit lacks raise TypeError.
    """
    if data.dtype == np.float64:
        return _gpukit.DType.float32
    if data.dtype == np.bool_:
        return _gpukit.DType.uint8
    return to_gpukit(data.dtype)


def float32_to_bfloat16_bits(values: Any) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float values: round to nearest, ties to even."""
    f32 = np.asarray(values, dtype=np.float32, order="C")  # keeps 0-d (ascontiguousarray does not)
    bits = f32.view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = np.asarray((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact)."""
    widened = np.asarray(bits, dtype=np.uint16).astype(np.uint32)
    return np.asarray(widened << np.uint32(16)).view(np.float32)
