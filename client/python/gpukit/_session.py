"""gpukit.Session and gpukit.connect: one client session with gpukitd."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np

from . import _array, _dlpack, _dtypes, _gpukit, _kernel, _ops
from ._array import Array, Axis

ShapeLike = Union[int, Sequence[int]]


def _shape(shape: ShapeLike) -> Tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


class Session:
    """A session with gpukitd: the owner of the arrays and kernels it creates.

    Made by :func:`gpukit.connect`. A background thread keeps the session's lease alive.
    Closing it (:meth:`close`, the end of a ``with`` block, or the garbage collection of the
    session and all its arrays) frees everything it holds in the daemon.

    Ops are pipelined by default: ``c = a + b`` returns at once, and errors surface at
    :meth:`sync`, at :meth:`Array.numpy` or when a refused op's ``shape`` is read (see
    :func:`connect`'s ``pipeline``).

    Examples
    --------
    >>> with gpukit.connect() as gk:
    ...     a = gk.array(np.ones((2, 3), dtype=np.float32))
    ...     print(gk.qos_class, (a * 2).sum().item())
    BestEffort 12.0
    """

    def __init__(self, client: _gpukit.Client, pipeline: bool = False) -> None:
        self._client = client
        self._closed = False
        self._pipeline = pipeline

    # --- the session --------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The daemon's id of the session ("s-...")."""
        return self._client.session_id

    @property
    def address(self) -> str:
        """The daemon's address ("unix:///...")."""
        return self._client.address

    @property
    def partition(self) -> str:
        """The partition the daemon placed the session in."""
        return self._client.partition

    @property
    def qos_class(self) -> str:
        """"Guaranteed", "Burstable" or "BestEffort", derived from the requests and limits."""
        return self._client.qos_class

    @property
    def device_index(self) -> int:
        """The device the session's arrays live on."""
        return self._client.device_index

    @property
    def lease_s(self) -> float:
        """The lease the daemon granted, in seconds."""
        return self._client.lease_s

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def pipeline(self) -> bool:
        """Whether ops are pipelined (``connect(pipeline=...)``)."""
        return self._pipeline

    def sync(self) -> None:
        """Waits until every op of this session written so far has run in the daemon.

        Raises
        ------
        Error
            The first op that failed since the previous sync point (refused, or failed on the
            device), as the subclass of its code, with a message that names it:
            ``"op #12 (add): shapes [2, 3] and [4] cannot be broadcast together"``. The ops
            written after it up to this sync were not run (their arrays raise
            :class:`gpukit.Aborted`). After it the session takes ops again. A call that raised a
            failure already (``numpy()``, ``shape``) was a sync point itself.
        """
        self._client.sync()

    def keep_alive(self) -> None:
        """Renews the lease now (the background thread does this by itself)."""
        self._client.keep_alive()

    def close(self) -> None:
        """Closes the session; the daemon frees its arrays and kernels. Idempotent."""
        self._closed = True
        self._client.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.close()
        except _gpukit.Error:
            if exc is None:  # never hide the exception that ended the block
                raise

    def __repr__(self) -> str:
        state = ", closed" if self._closed else ""
        return (
            f"gpukit.Session(session_id={self.session_id!r}, partition={self.partition!r}, "
            f"qos_class={self.qos_class!r}, address={self.address!r}{state})"
        )

    # --- arrays -------------------------------------------------------------------------

    def array(self, data: Any, dtype: Optional[_dtypes.DTypeLike] = None) -> Array:
        """Uploads host data into a new array of this session.

        Parameters
        ----------
        data : array_like
            A NumPy array, nested lists, a scalar, or any object ``np.asarray`` accepts.
            ``ml_dtypes.bfloat16`` arrays are taken as bfloat16.
        dtype : dtype-like, optional
            The array's dtype. Default: the data's, except that float64 (NumPy's default
            float) becomes float32 and bool becomes uint8, as gpukit has neither. Data of
            another dtype is converted on the host first (bfloat16: rounded to nearest even).

        Returns
        -------
        Array

        Raises
        ------
        TypeError
            A dtype gpukit does not have (float64 asked for explicitly, int16, complex, ...).
        ResourceExhausted
            Admission refused the memory (``reason`` says why).
        """
        if isinstance(data, Array) and data._session is self:  # a copy in the daemon
            return data.astype(dtype if dtype is not None else data._impl.dtype)
        host = np.asarray(data)
        if dtype is None and getattr(host.dtype, "name", "") == "bfloat16" and host.itemsize == 2:
            target = _gpukit.DType.bfloat16
            payload = np.asarray(host, order="C").view(np.uint16)
        else:
            target = _dtypes.to_gpukit(dtype) if dtype is not None else _dtypes.default_for(host)
            if target == _gpukit.DType.bfloat16:
                payload = _dtypes.float32_to_bfloat16_bits(host)
            else:
                payload = np.asarray(host, dtype=_dtypes.host_dtype(target), order="C")
        impl = self._client.from_buffer(payload, list(host.shape), target)
        return Array(impl, self)

    asarray = array

    def from_bytes(self, data: Any, shape: ShapeLike, dtype: _dtypes.DTypeLike) -> Array:
        """A new array holding the raw bytes of `data` (any C-contiguous buffer: bytes,
        a NumPy array, memoryview), which must be exactly the size of `shape` and `dtype`.
        Use it for bfloat16 bit patterns."""
        impl = self._client.from_buffer(data, list(_shape(shape)), _dtypes.to_gpukit(dtype))
        return Array(impl, self)

    def from_dlpack(self, x: Any, *, copy: Optional[bool] = None) -> Array:
        """A new array of this session from another library's tensor, through DLPack.

        Parameters
        ----------
        x : object
            Anything with ``__dlpack__`` and ``__dlpack_device__`` (a NumPy array, a torch
            tensor, a CuPy array, ...), or a DLPack capsule (``torch.utils.dlpack.to_dlpack``).
            The tensor must be compact row-major (C-contiguous) and of a gpukit dtype; bool is
            taken as uint8, as :meth:`array` does. A gpukit array of this session is returned
            as it is (or copied in gpukitd with ``copy=True``).
        copy : bool, optional
            The array API's: None copies only where needed, True always copies, False never.
            Host memory (NumPy, CPU tensors) is always copied into gpukitd, which cannot use
            this process's memory in place: the same as ``gk.array(np.from_dlpack(x))``, and a
            ``BufferError`` with ``copy=False``. CUDA memory can only be copied, through host
            memory by its producer, with ``copy=True``: gpukit cannot import it without a copy
            yet (``BufferError`` otherwise).

        Returns
        -------
        Array
            With the tensor's shape and dtype. The producer's tensor is released as soon as
            it is copied.

        Raises
        ------
        ValueError
            Strides that are not compact row-major (the message gives them): pass
            ``x.contiguous()`` (torch) or ``np.ascontiguousarray(x)``; or a capsule that was
            already consumed.
        TypeError
            An element type gpukit does not have (float64, int16, complex, vector types), or
            `x` speaks no DLPack.
        BufferError
            A device gpukit cannot take, or a copy `copy` forbids.
        """
        return _dlpack.from_dlpack(self, x, copy)

    def empty(self, shape: ShapeLike, dtype: _dtypes.DTypeLike = np.float32) -> Array:
        """A new array with undefined contents (no data crosses to the daemon)."""
        return Array(self._client.empty(list(_shape(shape)), _dtypes.to_gpukit(dtype)), self)

    def full(
        self, shape: ShapeLike, fill_value: Union[int, float], dtype: _dtypes.DTypeLike = np.float32
    ) -> Array:
        """A new array of `fill_value`. The daemon has no fill op, so the values are uploaded."""
        target = _dtypes.to_gpukit(dtype)
        host = np.full(_shape(shape), fill_value, dtype=_dtypes.host_dtype(target))
        return self.array(host, dtype=target)

    def zeros(self, shape: ShapeLike, dtype: _dtypes.DTypeLike = np.float32) -> Array:
        """A new array of zeros (uploaded; see :meth:`full`)."""
        return self.full(shape, 0, dtype)

    def ones(self, shape: ShapeLike, dtype: _dtypes.DTypeLike = np.float32) -> Array:
        """A new array of ones (uploaded; see :meth:`full`)."""
        return self.full(shape, 1, dtype)

    # --- ops in this session ------------------------------------------------------------

    def run_op(self, op: str, *inputs: Any, **attrs: Any) -> Array:
        """Runs any built-in op by name (docs/api.md, "Built-in ops"):
        ``gk.run_op("clamp", a, min=0.0, max=1.0)``. Inputs are Arrays and scalars;
        attributes are ints, floats, bools, dtypes, strings or lists of ints."""
        dtype_like = (np.dtype, _dtypes.BFloat16Type, type)
        converted = {
            k: (_dtypes.to_gpukit(v) if isinstance(v, dtype_like) else v) for k, v in attrs.items()
        }
        return _array.run_op(self, op, inputs, converted)

    def sum(self, a: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        """See :func:`gpukit.sum`; runs in this session."""
        return _array.reduce(self, _ops.SUM, a, axis, keepdims)

    def mean(self, a: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        """See :func:`gpukit.mean`; runs in this session."""
        return _array.reduce(self, _ops.MEAN, a, axis, keepdims)

    def max(self, a: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        """See :func:`gpukit.max`; runs in this session."""
        return _array.reduce(self, _ops.MAX, a, axis, keepdims)

    def min(self, a: Array, axis: Axis = None, keepdims: bool = False) -> Array:
        """See :func:`gpukit.min`; runs in this session."""
        return _array.reduce(self, _ops.MIN, a, axis, keepdims)

    def argmax(self, a: Array, axis: Optional[int] = None, keepdims: bool = False) -> Array:
        """See :func:`gpukit.argmax`; runs in this session."""
        return _array.argmax(self, a, axis, keepdims)

    def matmul(self, a: Array, b: Array) -> Array:
        """See :func:`gpukit.matmul`; runs in this session."""
        return _array.matmul(self, a, b)

    # --- custom kernels -----------------------------------------------------------------

    def compile(
        self,
        source: str,
        entries: Union[str, Sequence[str]],
        options: Sequence[str] = (),
        headers: Optional[Mapping[str, str]] = None,
    ) -> _kernel.Kernel:
        """Compiles CUDA C++ `source` in the daemon (NVRTC, cached) for the session's device.

        Parameters
        ----------
        source : str
            CUDA C++. It may ``#include`` only `headers`: the daemon compiles where no file of
            its host is visible.
        entries : str or sequence of str
            The kernels to export: ``extern "C"`` names, or template name expressions
            (``"scale<float>"``).
        options : sequence of str
            NVRTC options from the daemon's allow-list (``"-DN=4"``, ``"--use_fast_math"``).
        headers : mapping of str to str, optional
            Headers the source may ``#include``, by name: ``{"tile.h": "..."}``.

        Returns
        -------
        Kernel

        Raises
        ------
        InvalidArgument
            The source does not compile (the message holds the start of NVRTC's log;
            :meth:`last_compile_log` has all of it), or a refused option, header or entry name.
        FailedPrecondition
            The daemon has no NVRTC.
        ResourceExhausted
            The session holds its limit of kernels.
        """
        return _kernel.compile_kernel(self, source, entries, options, headers)

    def last_compile_log(self) -> str:
        """NVRTC's whole log of this session's last :meth:`compile`, failed or not."""
        return self._client.last_compile_log()


def connect(
    address: Optional[str] = None,
    *,
    tenant: str = "",
    partition: Optional[str] = None,
    memory_request_bytes: Optional[int] = None,
    memory_limit_bytes: Optional[int] = None,
    compute_request: Optional[float] = None,
    compute_limit: Optional[float] = None,
    lease_s: Optional[float] = None,
    priority: int = 0,
    queue_timeout_s: Optional[float] = None,
    call_timeout_s: float = 60.0,
    connect_timeout_s: float = 5.0,
    client_name: Optional[str] = None,
    use_shared_memory: bool = True,
    pipeline: bool = True,
    token: Optional[str] = None,
    tls_ca: Optional[str] = None,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    submit_socket: bool = True,
) -> Session:
    """Connects to gpukitd and opens a session.

    Parameters
    ----------
    address : str, optional
        ``"unix:///path.sock"`` or ``"host:port"``. Default: ``$GPUKIT_ADDR``, else the
        default socket, as for the C++ client and ``gpukitctl``.
    tenant : str
        The tenant the session acts for (1-63 of ``[A-Za-z0-9._-]``). Empty (default): the
        caller's own, which the daemon derives from its uid on the unix socket or from its
        token over TCP; only admins may name another (:class:`PermissionDenied`).
    partition : str, optional
        The partition to open the session in; default ``$GPUKIT_PARTITION`` (which
        gpukit-device-plugin sets in a Kubernetes container), else ``"default"``.
    memory_request_bytes, memory_limit_bytes : int, optional
        Device memory the session requests and may use at most. An allocation above the
        limit raises :class:`ResourceExhausted` with reason
        ``"REASON_SESSION_LIMIT_EXCEEDED"``.
    compute_request, compute_limit : float, optional
        Shares of the device (0 to 1). With none of the four set, the partition's defaults
        apply. The QoS class follows from them as in Kubernetes: Guaranteed when memory and
        compute have limits equal to their requests (a limit alone sets its request),
        BestEffort when nothing is set, Burstable otherwise.
    lease_s : float, optional
        The lease to ask for; default the daemon's (30 s). Renewed in the background.
    priority : int
        Priority of this session's ops in its partition's queue, -100 to 100.
    queue_timeout_s : float, optional
        Longest wait of an op in the queue (:class:`DeadlineExceeded` past it).
    call_timeout_s : float
        Deadline of each call.
    connect_timeout_s : float
        How long to wait for the daemon to accept the connection.
    client_name : str, optional
        Shown to operators in ``gpukitctl sessions``; default the program's name.
    use_shared_memory : bool
        Whether :meth:`Session.array`, :meth:`Array.numpy` and the other transfers of 256 KiB
        or more may go through host shared memory that the session shares with the daemon
        (a memcpy each side) instead of gRPC messages. It only applies to a daemon on a unix
        socket, and falls back to gRPC messages by itself where the daemon offers none.
    pipeline : bool
        True (default): ops (``a + b``, ``gk.sum(a)``, ...) are written to the session's
        stream and return their Array at once, without a round trip; the daemon runs them in
        order. A refused op raises at :meth:`Session.sync`, at ``numpy()`` (of any array of
        the session) or when its result's ``shape``/``dtype`` is read, naming the op. False:
        each op waits for the daemon's answer and raises its error at the call.
    token : str, optional
        Bearer token for a daemon reached over TCP, which maps it to a tenant. Default:
        ``$GPUKIT_TOKEN``, if set. Not needed on a unix socket.
    tls_ca : str, optional
        Path of the PEM file of the CA that signed the daemon's TLS certificate; set: the
        TCP connection uses TLS.
    tls_cert, tls_key : str, optional
        Paths of the PEM files of this client's certificate and key, for a daemon that
        requires client certificates (``access.tls.clientCaFile``); both or neither.
    submit_socket : bool
        Whether ops and frees go through the daemon's submit socket (True, default, where the
        daemon on a unix socket offers one) instead of gRPC: the same results and errors.
        With ``pipeline=False`` each op is a shorter round trip, for which the calling thread
        polls instead of sleeping (``GPUKIT_CLIENT_SPIN_US``, 20 ms by default on hosts of 8
        or more cores); with ``pipeline=True`` the session's stream runs on it, with no gRPC
        thread to wake at a burst's start or its sync point.

    Returns
    -------
    Session
        Usable as a context manager, which closes it.

    Raises
    ------
    Unavailable
        No daemon answers at the address.
    InvalidArgument, NotFound, ResourceExhausted
        The daemon refused the session (bad tenant, unknown partition, requests that do not
        fit: ``reason`` says why).
    PermissionDenied
        Another tenant than the caller's, or a partition its tenant may not use.
    Unauthenticated
        Over TCP, no valid token.
    """
    client = _gpukit.Client.connect(
        address=address or "",
        tenant=tenant,
        partition=partition or "",
        memory_request_bytes=memory_request_bytes,
        memory_limit_bytes=memory_limit_bytes,
        compute_request=compute_request,
        compute_limit=compute_limit,
        lease_s=lease_s or 0.0,
        priority=priority,
        queue_timeout_s=queue_timeout_s or 0.0,
        call_timeout_s=call_timeout_s,
        connect_timeout_s=connect_timeout_s,
        client_name=client_name or "",
        use_shared_memory=use_shared_memory,
        pipeline=pipeline,
        token=token or "",
        tls_ca=tls_ca or "",
        tls_cert=tls_cert or "",
        tls_key=tls_key or "",
        submit_socket=submit_socket,
    )
    return Session(client, pipeline)
