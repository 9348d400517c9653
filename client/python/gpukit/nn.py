"""Neural-network ops of gpukit (the daemon's built-in nn ops; docs/api.md, "Built-in ops").

Each runs in the session of its input array and returns a new array. Floating inputs keep
their dtype; integer inputs compute in float32.

>>> import gpukit.nn as nn
>>> y = nn.softmax(nn.gelu(x @ w), axis=-1)
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _ops
from ._array import Array, run_op, session_of

__all__ = [
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softmax",
    "layernorm",
    "rmsnorm",
    "rope",
    "attention",
    "embedding",
]


def relu(x: Array) -> Array:
    """max(x, 0), element-wise; integer dtypes are kept."""
    return run_op(session_of(x), _ops.RELU, [x])


def gelu(x: Array) -> Array:
    """GELU, the exact erf form ``0.5 x (1 + erf(x / sqrt(2)))`` (PyTorch's default)."""
    return run_op(session_of(x), _ops.GELU, [x])


def silu(x: Array) -> Array:
    """``x * sigmoid(x)``, element-wise."""
    return run_op(session_of(x), _ops.SILU, [x])


def sigmoid(x: Array) -> Array:
    """``1 / (1 + exp(-x))``, element-wise."""
    return run_op(session_of(x), _ops.SIGMOID, [x])


def tanh(x: Array) -> Array:
    """Hyperbolic tangent, element-wise."""
    return run_op(session_of(x), _ops.TANH, [x])


def softmax(x: Array, axis: int = -1) -> Array:
    """``exp(x - max) / sum(exp(x - max))`` along `axis` (default the last)."""
    return run_op(session_of(x), _ops.SOFTMAX, [x], {"axis": int(axis)})


def layernorm(
    x: Array,
    weight: Optional[Array] = None,
    bias: Optional[Array] = None,
    eps: Optional[float] = None,
) -> Array:
    """Layer normalisation over the last axis.

    ``(x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance.

    Parameters
    ----------
    x : Array
    weight, bias : Array of shape ``[x.shape[-1]]``, optional
        A bias without a weight uses a weight of ones (uploaded).
    eps : float, optional
        Default 1e-5 (the daemon's).
    """
    session = session_of(x)
    inputs = [x]
    if weight is None and bias is not None:
        weight = session.ones(x.shape[-1], dtype=bias.dtype)
    if weight is not None:
        inputs.append(weight)
    if bias is not None:
        inputs.append(bias)
    attrs: Dict[str, Any] = {} if eps is None else {"eps": float(eps)}
    return run_op(session, _ops.LAYERNORM, inputs, attrs)


def rmsnorm(x: Array, weight: Optional[Array] = None, eps: Optional[float] = None) -> Array:
    """RMS normalisation over the last axis: ``x / sqrt(mean(x**2) + eps) * weight``.

    `eps` defaults to 1e-6 (the daemon's).
    """
    inputs = [x] if weight is None else [x, weight]
    attrs: Dict[str, Any] = {} if eps is None else {"eps": float(eps)}
    return run_op(session_of(x), _ops.RMSNORM, inputs, attrs)


def rope(x: Array, base: Optional[float] = None, offset: int = 0) -> Array:
    """Rotary position embedding of ``x [..., seq, dim]`` (dim even), rotate-half (GPT-NeoX)
    convention, positions ``offset + s``; `base` defaults to 10000."""
    attrs: Dict[str, Any] = {"offset": int(offset)}
    if base is not None:
        attrs["base"] = float(base)
    return run_op(session_of(x), _ops.ROPE, [x], attrs)


def attention(
    q: Array, k: Array, v: Array, causal: bool = False, scale: Optional[float] = None
) -> Array:
    """Scaled dot-product attention per head: ``softmax(scale * q @ k^T) @ v``.

    Parameters
    ----------
    q, k, v : Array
        ``[h, sq, d]``, ``[h, sk, d]`` and ``[h, sk, dv]``.
    causal : bool
        Mask keys after each query, aligned to the bottom right (query i sees keys
        ``j <= i + sk - sq``).
    scale : float, optional
        Default ``1 / sqrt(d)``.

    Returns
    -------
    Array
        ``[h, sq, dv]``.
    """
    attrs: Dict[str, Any] = {"causal": bool(causal)}
    if scale is not None:
        attrs["scale"] = float(scale)
    return run_op(session_of(q), _ops.ATTENTION, [q, k, v], attrs)


def embedding(table: Array, indices: Array) -> Array:
    """Rows of ``table [vocab, dim]`` at int32/int64 `indices` (any shape): shape
    ``indices.shape + (dim,)``; an index outside ``[0, vocab)`` gives a row of zeros."""
    return run_op(session_of(table), _ops.EMBEDDING, [table, indices])
