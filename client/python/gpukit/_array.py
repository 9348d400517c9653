"""gpukit.Array: a NumPy-like handle to an array in gpukitd's device memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _dlpack, _dtypes, _gpukit, _ops

if TYPE_CHECKING:
    from ._session import Session

#: A Python or NumPy number, usable wherever an arithmetic op takes a scalar.
Scalar = Union[int, float, np.integer, np.floating, np.bool_]
#: An axis argument of the reductions: None (all axes), one axis, or several.
Axis = Optional[Union[int, Sequence[int]]]


def _operand(value: Any, op: str, index: int) -> Union[_gpukit.Array, int, float]:
    """`value`, input `index` of `op`, as _gpukit's run_op takes it. The one check of an
    operand's type: _gpukit converts what it is given without checking again."""
    if isinstance(value, Array):
        return value._impl
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    hint = "; upload NumPy data with Session.array() first" if isinstance(value, np.ndarray) else ""
    raise TypeError(
        f"{op}: expected a gpukit.Array, int or float as inputs[{index}], got "
        f"{type(value).__name__}{hint}"
    )


def run_op(
    session: "Session", op: str, inputs: Sequence[Any], attrs: Optional[Mapping[str, Any]] = None
) -> "Array":
    """Runs built-in op `op` in `session` on `inputs` (Arrays and scalars) with `attrs`."""
    operands = [_operand(x, op, i) for i, x in enumerate(inputs)]
    impl = session._client.run_op(op, operands, dict(attrs or {}))
    return Array(impl, session)


def session_of(*values: Any) -> "Session":
    """The session of the first Array among `values` (the one an op of them runs in)."""
    for value in values:
        if isinstance(value, Array):
            return value._session
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, Array):
                    return item._session
    raise TypeError("at least one argument must be a gpukit.Array")


def reduce(session: "Session", op: str, a: "Array", axis: Axis, keepdims: bool) -> "Array":
    """sum, mean, max or min of `a` over `axis` (None: all; an int; or a tuple of ints), as
    one op in the daemon, which checks the axes as NumPy does."""
    attrs: dict = {"keepdims": True} if keepdims else {}
    if isinstance(axis, (int, np.integer)):
        attrs["axis"] = int(axis)
    elif axis is not None:
        attrs["axis"] = [int(x) for x in axis]
    return run_op(session, op, [a], attrs)


def argmax(session: "Session", a: "Array", axis: Optional[int], keepdims: bool) -> "Array":
    attrs: dict = {"keepdims": True} if keepdims else {}
    if axis is not None:
        attrs["axis"] = int(axis)
    return run_op(session, _ops.ARGMAX, [a], attrs)


def matmul(session: "Session", a: "Array", b: "Array") -> "Array":
    """NumPy's matmul as one op: the daemon reads a 1-d `a` as a row and a 1-d `b` as a column
    and drops that dimension from the result, and broadcasts the batch dimensions."""
    if not isinstance(a, Array) or not isinstance(b, Array):
        raise TypeError("matmul takes two gpukit.Arrays")
    return run_op(session, _ops.MATMUL, [a, b])


def reshape(session: "Session", a: "Array", shape: Sequence[int]) -> "Array":
    return run_op(session, _ops.RESHAPE, [a], {"shape": [int(d) for d in shape]})


def transpose(session: "Session", a: "Array", axes: Optional[Sequence[int]]) -> "Array":
    attrs = {} if axes is None else {"perm": [int(x) for x in axes]}
    return run_op(session, _ops.TRANSPOSE, [a], attrs)


def astype(session: "Session", a: "Array", dtype: _dtypes.DTypeLike) -> "Array":
    return run_op(session, _ops.ASTYPE, [a], {"dtype": _dtypes.to_gpukit(dtype)})


def _shape_args(shape: Tuple[Any, ...]) -> Tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(int(d) for d in shape[0])
    return tuple(int(d) for d in shape)


class Array:
    """An array in gpukitd's device memory, owned by a :class:`Session`.

    Arrays are made by a session (``gk.array(np_data)``, ``gk.zeros((2, 3))``) and by ops on
    arrays. Every op runs in the daemon and returns a new array; nothing is computed on the
    host, and data crosses to the host only through :meth:`numpy` (or ``np.asarray(a)``).

    Operators ``+ - * /`` broadcast as NumPy does and take Python or NumPy scalars on either
    side (``2 * a``, ``a - 1.5``); ``@`` is matmul; ``-a`` and ``abs(a)`` are element-wise.
    DTypes follow the daemon's promotion rules (docs/api.md, "DType promotion"), which differ
    from NumPy's where NumPy would give float64: ``int32_array / 2`` is float32, for example.

    The device memory is freed when the Array is garbage collected, by :meth:`free`, or when
    its session closes (a free is queued on the session's stream: it never waits for the
    daemon). An Array keeps its session open while it lives.

    In a pipelined session (the default of :func:`gpukit.connect`) an op returns its Array at
    once, before the daemon has answered: it can be the next op's operand right away. Its
    :attr:`shape`, :attr:`dtype` and :attr:`nbytes` wait for the daemon's answer (which comes
    once the op is queued, not run); :meth:`numpy` waits for the op to run. If the op was
    refused, those raise the error, naming the op (``"op #12 (add): shapes ..."``), as does
    :meth:`Session.sync`.

    Examples
    --------
    >>> a = gk.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> b = (2 * a + 1).sum(axis=0)
    >>> b.numpy()
    array([ 8., 12., 16.], dtype=float32)
    """

    __slots__ = ("_impl", "_session", "__weakref__")
    # NumPy defers to Array's reflected operators (np.float32(2) * a runs in the daemon)
    # instead of converting the array; a NumPy array operand is a TypeError, not a download.
    __array_ufunc__ = None

    def __init__(self, impl: _gpukit.Array, session: "Session") -> None:
        self._impl = impl
        self._session = session

    # --- description (no daemon call; a pending op's result waits for its answer) --------

    @property
    def shape(self) -> Tuple[int, ...]:
        """Dimensions, as a tuple of ints."""
        return self._impl.shape

    @property
    def dtype(self) -> Union[np.dtype, _dtypes.BFloat16Type]:
        """Element type: a NumPy dtype, or :data:`gpukit.bfloat16`."""
        return _dtypes.to_public(self._impl.dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._impl.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self._impl.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of device memory the array takes."""
        return self._impl.size_bytes

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._impl.dtype.itemsize

    @property
    def handle(self) -> str:
        """The daemon's handle of the array ("a-..."), valid in its session only."""
        return self._impl.handle

    @property
    def session(self) -> "Session":
        """The session that owns the array."""
        return self._session

    @property
    def freed(self) -> bool:
        """True after :meth:`free`."""
        return self._impl.freed

    def __len__(self) -> int:
        if not self._impl.shape:
            raise TypeError("len() of a 0-d gpukit.Array")
        return self._impl.shape[0]

    def __repr__(self) -> str:
        state = ", freed" if self._impl.freed else ""
        try:
            layout = f"shape={self.shape}, dtype={self.dtype}"
        except _gpukit.Error as error:  # a refused op of a pipelined session
            layout = f"failed={error.message!r}"
        return f"gpukit.Array({layout}, handle={self.handle!r}{state})"

    # --- host transfers -------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """Downloads the array into a new NumPy array.

        Returns
        -------
        numpy.ndarray
            Of the array's shape and dtype; for bfloat16, float32 (exact: every bfloat16 is
            a float32). :meth:`tobytes` gives the raw bfloat16 bits.

        Raises
        ------
        NotFound
            The array was freed, or its session closed.
        Error
            In a pipelined session: the op that was to make the array was refused, or an
            earlier op of the session failed since the last :meth:`Session.sync` (the first
            such failure is raised, naming its op; the session then takes ops again).
        """
        if self._impl.dtype == _gpukit.DType.bfloat16:
            bits = np.empty(self.shape, dtype=np.uint16)
            self._impl.read_into(bits)
            return _dtypes.bfloat16_bits_to_float32(bits)
        out = np.empty(self.shape, dtype=_dtypes.host_dtype(self._impl.dtype))
        self._impl.read_into(out)
        return out

    # --- zero-copy device memory ----------------------------------------------------------

    def map(self) -> Tuple[int, int, int]:
        """Maps the array's device memory into this process, without copying it.

        The first call has gpukitd export the memory and maps it here (about 0.5 ms on an
        H100 host); later calls return the same mapping (under a microsecond). The mapping lives until the array is freed or
        its session closes, and the array is never spilled from then on. gpukitd's calls
        return once their work is done; work done through the pointer must finish before the
        array is used by gpukitd again.

        Returns
        -------
        tuple of int
            ``(device_pointer, size_bytes, device_index)``: a CUDA device pointer of this
            process, on the CUDA device of that ordinal.

        Raises
        ------
        FailedPrecondition
            The daemon runs on the CPU backend (use host transfers), or this process has no
            CUDA driver.
        """
        return self._impl.map()

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA Array Interface (version 3) over :meth:`map`'s mapping, so that
        ``torch.as_tensor(a, device="cuda")`` or ``cupy.asarray(a)`` see the array's device
        memory without a copy. An ``AttributeError`` where the array cannot be mapped (a CPU
        backend, no CUDA driver here, an empty array: no memory) or has no interface type
        string (bfloat16).
        """
        if self._impl.dtype == _gpukit.DType.bfloat16:
            raise AttributeError("bfloat16 has no CUDA Array Interface type string")
        if self.size == 0:
            raise AttributeError("an empty array has no device memory to map")
        try:
            pointer, _, _ = self._impl.map()
        except _gpukit.FailedPrecondition as error:
            raise AttributeError(f"__cuda_array_interface__: {error}") from error
        return {
            "shape": self.shape,
            "typestr": np.dtype(_dtypes.host_dtype(self._impl.dtype)).str,
            "data": (pointer, False),
            "strides": None,
            "version": 3,
        }

    def __dlpack_device__(self) -> Tuple[int, int]:
        """The DLPack device of the array: ``(2, device_index)``, kDLCUDA and the CUDA ordinal
        of :meth:`map`'s mapping (which this maps, if it was not mapped yet).

        Raises
        ------
        BufferError
            The array cannot be mapped into this process: gpukitd runs on its CPU backend (the
            array lives in the daemon; :meth:`numpy` copies it to the host), this process has
            no CUDA driver, or the array is empty.
        """
        return _dlpack.dlpack_device(self)

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """Exports the array as a DLPack capsule, for ``torch.from_dlpack(a)``,
        ``cupy.from_dlpack(a)`` and other consumers (the Python array API standard).

        The capsule's tensor is :meth:`map`'s mapping, without a copy: kDLCUDA on the mapping's
        device, compact row-major with explicit strides, writable, ``byte_offset`` 0; bfloat16
        is kDLBfloat. It keeps the array and its session alive until the consumer releases it:
        the consumer's tensor stays valid after ``del a``, and :meth:`free` meanwhile frees
        the memory only once the consumer lets go. Closing the session ends it regardless.

        Parameters
        ----------
        stream : int, optional
            The consumer's CUDA stream. gpukitd's calls return once their work is done, so
            the memory is ready for any stream and nothing is synchronised. Checked as the
            standard defines it: None, -1 (no synchronisation), 1 (legacy default stream), 2
            (per-thread default stream) or a stream handle; 0 is a ``ValueError``.
        max_version : tuple of int, optional
            The newest DLPack version the consumer reads: ``(1, x)`` or newer gives a
            ``"dltensor_versioned"`` capsule (DLPack 1.0), None or an older one a legacy
            ``"dltensor"`` capsule.
        dl_device : tuple of int, optional
            The device the consumer wants the tensor on; only the array's own,
            :meth:`__dlpack_device__`, can be had.
        copy : bool, optional
            True exports a copy made in gpukitd (flagged as a copy in a versioned capsule);
            False and None export the array's own memory.

        Raises
        ------
        BufferError
            The array cannot be mapped (see :meth:`__dlpack_device__`), or `dl_device` names
            another device.
        NotFound
            The array was freed, or its session closed.
        """
        return _dlpack.export(self, stream, max_version, dl_device, copy)

    def tobytes(self) -> bytes:
        """Downloads the array's raw bytes (row-major, the host's byte order)."""
        out = bytearray(self._impl.size_bytes)
        self._impl.read_into(out)
        return bytes(out)

    def tolist(self) -> Any:
        """The elements as (nested) Python lists, as ``numpy().tolist()``."""
        return self.numpy().tolist()

    def item(self) -> Union[int, float]:
        """The only element of a one-element array, as a Python number."""
        if self.size != 1:
            raise ValueError(f"item() needs an array of one element, not {self.size}")
        return self.numpy().reshape(()).item()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def free(self) -> None:
        """Frees the device memory now. Later use of the array raises :class:`NotFound`."""
        self._impl.free()

    # --- ops ----------------------------------------------------------------------------

    def astype(self, dtype: _dtypes.DTypeLike) -> "Array":
        """Converts to `dtype` in the daemon (docs/api.md, "astype": floats truncate toward
        zero and saturate when converted to integers)."""
        return astype(self._session, self, dtype)

    def reshape(self, *shape: Union[int, Sequence[int]]) -> "Array":
        """Same elements in a new shape: ``a.reshape(2, 3)`` or ``a.reshape((2, -1))``.
        Copies (no array is a view of another)."""
        return reshape(self._session, self, _shape_args(shape))

    def transpose(self, *axes: Union[int, Sequence[int]]) -> "Array":
        """Permutes the axes (reverses them when none are given). Copies."""
        return transpose(self._session, self, _shape_args(axes) if axes else None)

    @property
    def T(self) -> "Array":
        """The array with its axes reversed (a copy)."""
        return transpose(self._session, self, None)

    def sum(self, axis: Axis = None, keepdims: bool = False) -> "Array":
        """See :func:`gpukit.sum`."""
        return reduce(self._session, _ops.SUM, self, axis, keepdims)

    def mean(self, axis: Axis = None, keepdims: bool = False) -> "Array":
        """See :func:`gpukit.mean`."""
        return reduce(self._session, _ops.MEAN, self, axis, keepdims)

    def max(self, axis: Axis = None, keepdims: bool = False) -> "Array":
        """See :func:`gpukit.max`."""
        return reduce(self._session, _ops.MAX, self, axis, keepdims)

    def min(self, axis: Axis = None, keepdims: bool = False) -> "Array":
        """See :func:`gpukit.min`."""
        return reduce(self._session, _ops.MIN, self, axis, keepdims)

    def argmax(self, axis: Optional[int] = None, keepdims: bool = False) -> "Array":
        """See :func:`gpukit.argmax`."""
        return argmax(self._session, self, axis, keepdims)

    def _binary(self, op: str, a: Any, b: Any) -> "Array":
        # Two Arrays, the common case, skip _operand's checks: Python's own work is most of
        # what it adds to an op's round trip (docs/benchmarks.md, "Python client overhead").
        if type(a) is Array and type(b) is Array:
            operands = [a._impl, b._impl]
        else:
            try:
                operands = [_operand(a, op, 0), _operand(b, op, 1)]
            except TypeError:
                return NotImplemented
        session = self._session
        return Array(session._client.run_op(op, operands, {}), session)

    def __add__(self, other: Any) -> "Array":
        return self._binary(_ops.ADD, self, other)

    def __radd__(self, other: Any) -> "Array":
        return self._binary(_ops.ADD, other, self)

    def __sub__(self, other: Any) -> "Array":
        return self._binary(_ops.SUB, self, other)

    def __rsub__(self, other: Any) -> "Array":
        return self._binary(_ops.SUB, other, self)

    def __mul__(self, other: Any) -> "Array":
        return self._binary(_ops.MUL, self, other)

    def __rmul__(self, other: Any) -> "Array":
        return self._binary(_ops.MUL, other, self)

    def __truediv__(self, other: Any) -> "Array":
        return self._binary(_ops.DIV, self, other)

    def __rtruediv__(self, other: Any) -> "Array":
        return self._binary(_ops.DIV, other, self)

    def __matmul__(self, other: Any) -> "Array":
        if not isinstance(other, Array):
            return NotImplemented
        return matmul(self._session, self, other)

    def __rmatmul__(self, other: Any) -> "Array":
        if not isinstance(other, Array):
            return NotImplemented
        return matmul(self._session, other, self)

    def __neg__(self) -> "Array":
        return run_op(self._session, _ops.NEG, [self])

    def __abs__(self) -> "Array":
        return run_op(self._session, _ops.ABS, [self])
