"""gpukit: NumPy-like arrays and custom CUDA kernels on GPUs shared through gpukitd.

A thin, Pythonic skin over libgpukit, the C++ client (the extension module
``gpukit._gpukit``); every call is a request to the daemon, which owns the GPUs (or
simulates one on its CPU backend).

>>> import numpy as np, gpukit
>>> with gpukit.connect() as gk:                            # $GPUKIT_ADDR or the default socket
...     a = gk.array(np.arange(6, dtype=np.float32).reshape(2, 3))
...     b = gk.ones(3)
...     c = gpukit.nn.relu(2 * a - b) @ a.T                # runs in the daemon
...     print(c.numpy(), gk.qos_class)

Errors are :class:`gpukit.Error` and its subclasses, one per gRPC status code, with
``code``, ``message`` and ``reason`` (the admission reason of a refusal).
"""

from __future__ import annotations

from . import nn
from ._array import Array
from ._dtypes import BFloat16Type, DTypeLike, bfloat16
from ._functions import (
    abs,
    add,
    argmax,
    astype,
    clip,
    concatenate,
    divide,
    exp,
    from_dlpack,
    log,
    matmul,
    max,
    mean,
    min,
    multiply,
    negative,
    reshape,
    rsqrt,
    sqrt,
    subtract,
    sum,
    transpose,
    where,
)
from ._gpukit import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from ._gpukit import __version__
from ._kernel import Kernel
from ._session import Session, connect

import numpy as _np

#: gpukit's dtypes; all but bfloat16 are NumPy's own.
float32 = _np.dtype(_np.float32)
float16 = _np.dtype(_np.float16)
int32 = _np.dtype(_np.int32)
int64 = _np.dtype(_np.int64)
uint8 = _np.dtype(_np.uint8)

__all__ = [
    "Array",
    "BFloat16Type",
    "DTypeLike",
    "Kernel",
    "Session",
    "connect",
    "nn",
    "bfloat16",
    "float16",
    "float32",
    "int32",
    "int64",
    "uint8",
    "abs",
    "add",
    "argmax",
    "astype",
    "clip",
    "concatenate",
    "divide",
    "exp",
    "from_dlpack",
    "log",
    "matmul",
    "max",
    "mean",
    "min",
    "multiply",
    "negative",
    "reshape",
    "rsqrt",
    "sqrt",
    "subtract",
    "sum",
    "transpose",
    "where",
    "Error",
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "DataLoss",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "Unauthenticated",
    "ResourceExhausted",
    "Unavailable",
    "Unimplemented",
    "__version__",
]
