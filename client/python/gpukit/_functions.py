"""NumPy-style functions on gpukit arrays; each runs in the session of its (first) array."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from . import _array, _dtypes, _ops
from ._array import Array, Axis, Scalar, run_op, session_of

if TYPE_CHECKING:
    from ._session import Session


def sum(a: Array, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Sum of the elements, over all axes or over `axis`: one op in the daemon, however many
    axes.

    Parameters
    ----------
    a : Array
    axis : int or tuple of ints, optional
        Axes to reduce, with NumPy's meaning: negative ones count from the end, the order does
        not matter, none may repeat, and ``()`` reduces nothing (each element is its own
        result, in the output dtype). None reduces all.
    keepdims : bool
        Keep each reduced axis as a dimension of 1.

    Returns
    -------
    Array
        Floating inputs keep their dtype; integer ones give int64 (wrapping). On the CPU
        backend the sum accumulates in double and is rounded once.

    Raises
    ------
    InvalidArgument
        An axis out of range or repeated (in a pipelined session: when the result is used).
    """
    return _array.reduce(session_of(a), _ops.SUM, a, axis, keepdims)


def mean(a: Array, axis: Axis = None, keepdims: bool = False) -> Array:
    """Mean of the elements (see :func:`sum`); integer inputs give float32, an empty extent NaN."""
    return _array.reduce(session_of(a), _ops.MEAN, a, axis, keepdims)


def max(a: Array, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Maximum (see :func:`sum`); keeps the dtype, propagates NaN, and raises
    :class:`InvalidArgument` for an empty extent."""
    return _array.reduce(session_of(a), _ops.MAX, a, axis, keepdims)


def min(a: Array, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """Minimum (see :func:`max`)."""
    return _array.reduce(session_of(a), _ops.MIN, a, axis, keepdims)


def argmax(a: Array, axis: Optional[int] = None, keepdims: bool = False) -> Array:
    """int64 index of the first maximum, of the flattened array or along `axis` (one int, as
    NumPy's argmax takes; NaN counts as the maximum, as in NumPy)."""
    return _array.argmax(session_of(a), a, axis, keepdims)


def matmul(a: Array, b: Array) -> Array:
    """Matrix product with NumPy's rules, one op in the daemon: leading (batch) dimensions
    broadcast, and a 1-d operand is a row (left) or a column (right) vector whose dimension is
    left out of the result (``[k] @ [k, n]`` is ``[n]``, ``[k] @ [k]`` is 0-d). Same as
    ``a @ b``. A 0-d operand raises :class:`InvalidArgument` with NumPy's message."""
    return _array.matmul(session_of(a, b), a, b)


def add(a: Union[Array, Scalar], b: Union[Array, Scalar]) -> Array:
    """``a + b``, broadcasting."""
    return run_op(session_of(a, b), _ops.ADD, [a, b])


def subtract(a: Union[Array, Scalar], b: Union[Array, Scalar]) -> Array:
    """``a - b``, broadcasting."""
    return run_op(session_of(a, b), _ops.SUB, [a, b])


def multiply(a: Union[Array, Scalar], b: Union[Array, Scalar]) -> Array:
    """``a * b``, broadcasting."""
    return run_op(session_of(a, b), _ops.MUL, [a, b])


def divide(a: Union[Array, Scalar], b: Union[Array, Scalar]) -> Array:
    """``a / b`` (true division; integer inputs give float32)."""
    return run_op(session_of(a, b), _ops.DIV, [a, b])


def astype(a: Array, dtype: _dtypes.DTypeLike) -> Array:
    """``a.astype(dtype)``."""
    return a.astype(dtype)


def reshape(a: Array, shape: Sequence[int]) -> Array:
    """``a.reshape(shape)``."""
    return a.reshape(shape)


def transpose(a: Array, axes: Optional[Sequence[int]] = None) -> Array:
    """Permutes the axes; reverses them when `axes` is None."""
    return _array.transpose(session_of(a), a, axes)


def exp(x: Array) -> Array:
    """Element-wise e**x (integer inputs give float32)."""
    return run_op(session_of(x), _ops.EXP, [x])


def log(x: Array) -> Array:
    """Element-wise natural logarithm (integer inputs give float32)."""
    return run_op(session_of(x), _ops.LOG, [x])


def sqrt(x: Array) -> Array:
    """Element-wise square root (integer inputs give float32)."""
    return run_op(session_of(x), _ops.SQRT, [x])


def rsqrt(x: Array) -> Array:
    """Element-wise 1 / sqrt(x) (integer inputs give float32)."""
    return run_op(session_of(x), _ops.RSQRT, [x])


def negative(x: Array) -> Array:
    """Element-wise -x (integers wrap); same as ``-x``."""
    return run_op(session_of(x), _ops.NEG, [x])


def abs(x: Array) -> Array:  # noqa: A001
    """Element-wise |x| (integers wrap); same as ``abs(x)``."""
    return run_op(session_of(x), _ops.ABS, [x])


def clip(
    x: Array, a_min: Optional[Union[int, float]] = None, a_max: Optional[Union[int, float]] = None
) -> Array:
    """Limits the values to [a_min, a_max] (either may be None); the daemon's ``clamp``."""
    attrs = {}
    if a_min is not None:
        attrs["min"] = a_min
    if a_max is not None:
        attrs["max"] = a_max
    return run_op(session_of(x), _ops.CLAMP, [x], attrs)


def where(cond: Array, a: Union[Array, Scalar], b: Union[Array, Scalar]) -> Array:
    """Elements of `a` where `cond` is nonzero, else of `b`; the three shapes broadcast."""
    return run_op(session_of(cond, a, b), _ops.WHERE, [cond, a, b])


def concatenate(arrays: Sequence[Array], axis: int = 0) -> Array:
    """Joins 2 to 64 arrays along an existing axis."""
    return run_op(session_of(list(arrays)), _ops.CONCAT, list(arrays), {"axis": int(axis)})


def from_dlpack(
    x: Any, /, *, session: Optional["Session"] = None, copy: Optional[bool] = None
) -> Array:
    """The array API's ``from_dlpack``: `x` (a NumPy array, a torch tensor, a DLPack capsule,
    ...) as a new array of `session`; see :meth:`Session.from_dlpack`, which this calls.

    A gpukit array has no session of its own to go to, so `session` is required unless `x` is
    a :class:`gpukit.Array` (then its own session, where `x` is returned as it is, or copied
    with ``copy=True``).
    """
    if session is None:
        if not isinstance(x, Array):
            raise TypeError(
                f"gpukit.from_dlpack needs the session to create the array in (x is a "
                f"{type(x).__name__}, not a gpukit.Array): gk.from_dlpack(x), or "
                "gpukit.from_dlpack(x, session=gk)"
            )
        session = x.session
    return session.from_dlpack(x, copy=copy)
