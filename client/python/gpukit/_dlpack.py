"""DLPack, the Python array API's exchange protocol, for gpukit arrays.

Export (``Array.__dlpack__`` and ``Array.__dlpack_device__``): a capsule over the array's
device memory mapped into this process (:meth:`gpukit.Array.map`), so ``torch.from_dlpack(a)``
and ``cupy.from_dlpack(a)`` see it without a copy. The capsule keeps the array and its session
alive until the consumer lets go of the tensor. Where the memory cannot be mapped (gpukitd on
its CPU backend, no CUDA driver in this process, an empty array) these raise ``BufferError``,
as the standard asks of producers that cannot export.

Import (:func:`from_dlpack`, ``Session.from_dlpack``): another library's tensor as a new
gpukit array. Host memory (NumPy, CPU tensors) is copied into gpukitd, since gpukitd cannot
read this process's memory in place. CUDA memory is imported without a copy
(``Client::ImportDeviceMemory``); ``copy=True`` copies it through host memory instead.

The capsules themselves are made and read by the extension module (client/python/src/
dlpack.cc); this module speaks the Python side of the protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import _gpukit, _ops

if TYPE_CHECKING:
    from ._array import Array
    from ._session import Session

#: DLPack device types (DLDeviceType) that gpukit names.
KDL_CPU = 1
KDL_CUDA = 2
#: The DLPack version gpukit reads and writes, and asks producers for.
DLPACK_VERSION = (1, 0)
# The array API's stream value for CUDA's legacy default stream.
_LEGACY_DEFAULT_STREAM = 1


def _describe(array: "Array") -> str:
    return f"gpukit.Array of shape {array.shape} and dtype {array.dtype}"


def _mapping(array: "Array") -> Tuple[int, int, int]:
    """``array.map()``, with BufferError where gpukit cannot export the memory."""
    if array.size == 0 and not array.freed:
        raise BufferError(
            f"{_describe(array)} is empty: gpukitd exports no device memory for it, so it has "
            "no DLPack form"
        )
    try:
        return array._impl.map()
    except _gpukit.FailedPrecondition as error:
        raise BufferError(
            f"{_describe(array)} lives in gpukitd and cannot be mapped into this process "
            f"({error.message}); a.numpy() copies it to the host"
        ) from error


def dlpack_device(array: "Array") -> Tuple[int, int]:
    """``Array.__dlpack_device__``: ``(2, device_index)`` (kDLCUDA)."""
    _, _, device_index = _mapping(array)
    return (KDL_CUDA, device_index)


def _check_stream(stream: Any) -> None:
    # gpukitd's calls return once their work is done, so the memory is ready for any stream
    # of the consumer's: nothing to synchronise. The values are still checked as the array
    # API defines them for CUDA.
    if stream is None:
        return
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(
            f"stream must be None or an int (a CUDA stream), not {type(stream).__name__}"
        )
    if stream == 0:
        raise ValueError(
            "stream=0 is ambiguous for CUDA and the DLPack standard disallows it: pass None or 1 "
            "(the legacy default stream), 2 (the per-thread default stream), a stream handle, "
            "or -1 (no synchronisation)"
        )
    if stream < -1:
        raise ValueError(f"stream={stream} is not a CUDA stream (an int >= -1, not 0)")


def _versioned(max_version: Any) -> bool:
    if max_version is None:
        return False  # a consumer that names no version reads only the legacy capsule
    try:
        major, minor = (int(v) for v in max_version)
    except (TypeError, ValueError):
        raise TypeError(
            f"max_version must be a (major, minor) tuple of ints or None, not {max_version!r}"
        ) from None
    return major >= DLPACK_VERSION[0]


def export(
    array: "Array",
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: Optional[bool] = None,
) -> Any:
    """``Array.__dlpack__``: a PyCapsule over the array's device memory (see the module's
    documentation and :meth:`gpukit.Array.__dlpack__`)."""
    _check_stream(stream)
    versioned = _versioned(max_version)
    _, _, device_index = _mapping(array)
    if dl_device is not None:
        try:
            wanted = tuple(int(v) for v in dl_device)
        except (TypeError, ValueError):
            raise TypeError(
                f"dl_device must be a (device_type, device_id) tuple or None, not {dl_device!r}"
            ) from None
        if wanted != (KDL_CUDA, device_index):
            raise BufferError(
                f"dl_device={wanted}: {_describe(array)} is on CUDA device {device_index} "
                f"({KDL_CUDA}, {device_index}) and gpukit exports it nowhere else; "
                "a.numpy() copies it to the host"
            )
    source = array._impl
    if copy:  # a copy in gpukitd (astype to the same dtype), exported in its turn
        source = array._session._client.run_op(_ops.ASTYPE, [array._impl], {"dtype": source.dtype})
    try:
        return source.dlpack(versioned=versioned, is_copy=bool(copy))
    except _gpukit.FailedPrecondition as error:  # the copy could not be mapped
        raise BufferError(f"{_describe(array)}: {error.message}") from error


def _is_capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule"


def _request(x: Any, **kwargs: Any) -> Any:
    """``x.__dlpack__(max_version=(1, 0), **kwargs)``, or without max_version for producers
    older than the 2023 standard (a TypeError), as NumPy and PyTorch do."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, **kwargs)
    except TypeError:
        return x.__dlpack__(**kwargs)


def _host_copy(x: Any) -> Any:
    """A capsule of a host copy of CUDA tensor `x`, made by its producer."""
    try:
        return x.__dlpack__(max_version=DLPACK_VERSION, dl_device=(KDL_CPU, 0), copy=True)
    except (TypeError, BufferError, NotImplementedError) as error:
        raise BufferError(
            f"from_dlpack(copy=True): {type(x).__name__} cannot copy its CUDA tensor to the "
            f"host through DLPack ({error}); copy it to the host first (torch: x.cpu(), CuPy: "
            "x.get())"
        ) from error


def from_dlpack(session: "Session", x: Any, copy: Optional[bool] = None) -> "Array":
    """``Session.from_dlpack``: see there."""
    from ._array import Array

    if isinstance(x, Array) and x._session is session:
        return session.array(x) if copy else x  # the same memory, or a copy in gpukitd
    if _is_capsule(x):
        capsule = x
    else:
        if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
            raise TypeError(
                f"from_dlpack takes an object with __dlpack__ and __dlpack_device__ (a NumPy "
                f"array, a torch tensor, ...) or a DLPack capsule, not {type(x).__name__}"
            )
        device_type, _ = x.__dlpack_device__()
        if int(device_type) == KDL_CUDA and copy:
            capsule = _host_copy(x)
        elif int(device_type) == KDL_CUDA:
            # What zero-copy import will need: the producer's work ordered before the legacy
            # default stream, which the import then waits for (gpukitd is another process).
            capsule = _request(x, stream=_LEGACY_DEFAULT_STREAM)
        else:
            capsule = _request(x)
    return Array(session._client.from_dlpack(capsule, copy), session)
