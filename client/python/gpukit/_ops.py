"""The daemon's built-in ops that the gpukit package runs: each op's name, spelled once, and
where the package offers it.

The functions and operators themselves are written out in _functions.py, nn.py and
_array.py, so that their signatures, type hints and docstrings are plain Python for IDEs and
type checkers; each sends the constant below, never a string of its own. :data:`REACH` is
the table of where each op is reached. tests/python/test_op_surface.py holds it against a
running gpukitd's ListOps (both ways: every op here is listed, every listed op is reached)
and checks that each entry runs the op of its row, with one request.

Adding an op the daemon has: a constant, its row in REACH, and the function (or operator)
that sends the constant.
"""

from __future__ import annotations

from typing import Dict, Tuple

ADD = "add"
SUB = "sub"
MUL = "mul"
DIV = "div"
MATMUL = "matmul"
SUM = "sum"
MEAN = "mean"
MAX = "max"
MIN = "min"
ARGMAX = "argmax"
ASTYPE = "astype"
RESHAPE = "reshape"
TRANSPOSE = "transpose"
EXP = "exp"
LOG = "log"
SQRT = "sqrt"
RSQRT = "rsqrt"
NEG = "neg"
ABS = "abs"
CLAMP = "clamp"
WHERE = "where"
CONCAT = "concat"
RELU = "relu"
GELU = "gelu"
SILU = "silu"
SIGMOID = "sigmoid"
TANH = "tanh"
SOFTMAX = "softmax"
LAYERNORM = "layernorm"
RMSNORM = "rmsnorm"
ROPE = "rope"
ATTENTION = "attention"
EMBEDDING = "embedding"

#: Op -> where the package offers it, as attribute paths from the package: ``"add"`` is
#: ``gpukit.add``, ``"nn.relu"`` is ``gpukit.nn.relu``, ``"Array.__add__"`` the ``+`` of
#: :class:`gpukit.Array`, ``"Session.sum"`` a method of :class:`gpukit.Session`. Every entry
#: sends its op, once. (Session.run_op runs any op by name.)
REACH: Dict[str, Tuple[str, ...]] = {
    ADD: ("add", "Array.__add__", "Array.__radd__"),
    SUB: ("subtract", "Array.__sub__", "Array.__rsub__"),
    MUL: ("multiply", "Array.__mul__", "Array.__rmul__"),
    DIV: ("divide", "Array.__truediv__", "Array.__rtruediv__"),
    MATMUL: ("matmul", "Array.__matmul__", "Array.__rmatmul__", "Session.matmul"),
    SUM: ("sum", "Array.sum", "Session.sum"),
    MEAN: ("mean", "Array.mean", "Session.mean"),
    MAX: ("max", "Array.max", "Session.max"),
    MIN: ("min", "Array.min", "Session.min"),
    ARGMAX: ("argmax", "Array.argmax", "Session.argmax"),
    ASTYPE: ("astype", "Array.astype"),
    RESHAPE: ("reshape", "Array.reshape"),
    TRANSPOSE: ("transpose", "Array.transpose", "Array.T"),
    EXP: ("exp",),
    LOG: ("log",),
    SQRT: ("sqrt",),
    RSQRT: ("rsqrt",),
    NEG: ("negative", "Array.__neg__"),
    ABS: ("abs", "Array.__abs__"),
    CLAMP: ("clip",),
    WHERE: ("where",),
    CONCAT: ("concatenate",),
    RELU: ("nn.relu",),
    GELU: ("nn.gelu",),
    SILU: ("nn.silu",),
    SIGMOID: ("nn.sigmoid",),
    TANH: ("nn.tanh",),
    SOFTMAX: ("nn.softmax",),
    LAYERNORM: ("nn.layernorm",),
    RMSNORM: ("nn.rmsnorm",),
    ROPE: ("nn.rope",),
    ATTENTION: ("nn.attention",),
    EMBEDDING: ("nn.embedding",),
}
