"""gpukit.Kernel: a CUDA C++ kernel compiled by the daemon (NVRTC) for one session."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _gpukit
from ._array import Array

if TYPE_CHECKING:
    from ._session import Session

#: Grid or block dimensions: ``256``, ``(64, 64)`` or ``(8, 8, 4)``.
Dim3Like = Union[int, Sequence[int]]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1

_NUMPY_SCALARS = (
    (np.float32, _gpukit.KernelArgument.f32),
    (np.float64, _gpukit.KernelArgument.f64),
    (np.int32, _gpukit.KernelArgument.i32),
    (np.int64, _gpukit.KernelArgument.i64),
    (np.uint32, _gpukit.KernelArgument.u32),
    (np.uint64, _gpukit.KernelArgument.u64),
)


def kernel_argument(value: Any, index: int = 0) -> _gpukit.KernelArgument:
    """The launch argument for `value`, with the C type described in :meth:`Kernel.__call__`."""
    if isinstance(value, Array):
        return _gpukit.KernelArgument.array(value._impl)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(
            f"args[{index}] is a bool; kernels take no bool by value here: pass np.int32(x)"
        )
    if isinstance(value, np.generic):
        for numpy_type, make in _NUMPY_SCALARS:
            if type(value) is numpy_type:
                return make(value.item())
        raise TypeError(
            f"args[{index}] is a {type(value).__name__}; kernel scalars are np.float32, "
            "np.float64, np.int32, np.int64, np.uint32 or np.uint64"
        )
    if isinstance(value, int):
        if not _INT32_MIN <= value <= _INT32_MAX:
            raise OverflowError(
                f"args[{index}] = {value} does not fit a C int (a Python int is passed as "
                "int32); pass np.int64(x), np.uint32(x) or np.uint64(x)"
            )
        return _gpukit.KernelArgument.i32(value)
    if isinstance(value, float):
        return _gpukit.KernelArgument.f32(value)
    raise TypeError(
        f"args[{index}] is a {type(value).__name__}; pass a gpukit.Array, a Python int "
        "or float, or a NumPy scalar"
    )


def _dims(value: Dim3Like, name: str) -> List[int]:
    dims = [int(value)] if isinstance(value, (int, np.integer)) else [int(d) for d in value]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{name} has {len(dims)} dimensions; give 1 to 3")
    if any(d < 0 for d in dims):
        raise ValueError(f"{name} = {tuple(dims)} must not be negative")
    return dims


class Kernel:
    """A kernel the daemon compiled for a session (:meth:`Session.compile`).

    Calling it launches it on the session's arrays and waits until it has run::

        k = gk.compile(source, "saxpy")
        k((n + 255) // 256, 256, 2.0, x, y, n)   # grid, block, then the kernel's arguments

    The daemon compiles on any backend (with NVRTC) but launches only on a GPU: on the CPU
    simulation backend a launch raises :class:`FailedPrecondition`. The kernel is freed in
    the daemon when the object is garbage collected, by :meth:`free`, or when the session
    closes; a session holds at most 256 kernels by default.
    """

    __slots__ = ("_impl", "_session")

    def __init__(self, impl: _gpukit.Kernel, session: "Session") -> None:
        self._impl = impl
        self._session = session

    @property
    def handle(self) -> str:
        """The daemon's handle ("k-...")."""
        return self._impl.handle

    @property
    def entries(self) -> List[str]:
        """The entries, as requested ("saxpy", "scale<float>")."""
        return list(self._impl.entries)

    @property
    def lowered_names(self) -> List[str]:
        """The entries' symbols in the compiled module (mangled for templates)."""
        return list(self._impl.lowered_names)

    @property
    def arch(self) -> str:
        """The architecture compiled for, e.g. "sm_90"."""
        return self._impl.arch

    @property
    def origin(self) -> str:
        """"compiled", or the cache it came from: "memory" or "disk"."""
        return self._impl.origin

    @property
    def compile_ms(self) -> float:
        """NVRTC's time in milliseconds; 0 for a cache hit."""
        return self._impl.compile_ms

    @property
    def log(self) -> str:
        """NVRTC's warnings, if any."""
        return self._impl.log

    @property
    def session(self) -> "Session":
        """The session the kernel belongs to."""
        return self._session

    def __repr__(self) -> str:
        return (
            f"gpukit.Kernel(entries={self.entries}, arch={self.arch!r}, handle={self.handle!r})"
        )

    def __call__(
        self,
        grid: Dim3Like,
        block: Dim3Like,
        *args: Any,
        shared_memory_bytes: int = 0,
        entry: str = "",
    ) -> float:
        """Launches the kernel over `grid` blocks of `block` threads and waits for it.

        Parameters
        ----------
        grid, block : int or tuple of 1 to 3 ints
            Blocks in the grid and threads per block (x, y, z; missing ones are 1).
        *args : Array, int, float or NumPy scalar
            The kernel's parameters, in order. Each must have the C type of its parameter:

            ========================== ===========================================
            argument                   passed as
            ========================== ===========================================
            :class:`gpukit.Array`      its device pointer (``float*``, ...)
            Python ``int``             ``int`` (int32; OverflowError outside it)
            Python ``float``           ``float`` (float32, as in ``2.0f``)
            ``np.float32`` / ``float64`` ``float`` / ``double``
            ``np.int32`` / ``int64``   ``int`` / ``long long``
            ``np.uint32`` / ``uint64`` ``unsigned`` / ``unsigned long long``, ``size_t``
            ========================== ===========================================
        shared_memory_bytes : int
            Dynamic shared memory per block.
        entry : str
            Which entry to launch; may be empty when the kernel has one.

        Returns
        -------
        float
            The device time the kernel took, in seconds.

        Raises
        ------
        FailedPrecondition
            The daemon runs on the CPU backend ("kernel launch requires a GPU; ...").
        InvalidArgument
            Grid or block beyond the device's limits, or arguments that do not match the
            kernel's parameters.
        NotFound
            An entry, array or kernel the session does not have.
        """
        arguments = [kernel_argument(arg, i) for i, arg in enumerate(args)]
        return self._impl.launch(
            entry, _dims(grid, "grid"), _dims(block, "block"), int(shared_memory_bytes), arguments
        )

    launch = __call__

    def free(self) -> None:
        """Frees the kernel in the daemon now; a second call does nothing."""
        self._impl.free()


def compile_kernel(
    session: "Session",
    source: str,
    entries: Union[str, Sequence[str]],
    options: Sequence[str] = (),
    headers: Optional[Mapping[str, str]] = None,
) -> Kernel:
    names: Tuple[str, ...] = (entries,) if isinstance(entries, str) else tuple(entries)
    impl = session._client.compile_kernel(
        source, list(names), list(options), list((headers or {}).items())
    )
    return Kernel(impl, session)
