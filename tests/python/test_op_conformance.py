"""The op conformance test: every op a running gpukitd lists (ListOps), on every dtype ListOps
says it accepts, against a NumPy reference.

The ops come from the daemon itself (its ListOps answer, through DaemonProbe.ops()), so an
op added to the table (runtime/builtin_ops.cc) is tested here without a change to this
file's walk; but it needs an entry in REFERENCES: an op ListOps lists without one
fails test_every_listed_op_has_a_reference. The test-only ops of fault-injection builds
(named "_test_...") are skipped.

Each reference entry makes cases for one input dtype: inputs (NumPy arrays uploaded in the
dtype under test, scalars, broadcasting shapes for the element-wise ops), attributes, and the
expected output computed in float64 (or in the integer dtype, wrapping as NumPy does) from the
inputs as the daemon holds them (an upload to float16 or bfloat16 rounds; the reference starts
from the rounded values). Results are compared with a tolerance per dtype, looser for float16
and bfloat16, and the output dtype must be the one the op's rules give.

The daemon is the suite's (conftest.py): the CPU backend in CI, the CUDA one on a GPU host
(deploy/run-gpu-tests.sh sets GPUKIT_TEST_BACKEND=cuda), so the same cases cover both. An op
whose backends (ListOps) do not include the daemon's is skipped, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import pytest

import gpukit
from conftest import BACKEND

# ---- The daemon's op table ----------------------------------------------------------------

_DTYPE_NAMES = {
    "DTYPE_FLOAT32": "float32",
    "DTYPE_FLOAT16": "float16",
    "DTYPE_BFLOAT16": "bfloat16",
    "DTYPE_INT32": "int32",
    "DTYPE_INT64": "int64",
    "DTYPE_UINT8": "uint8",
}
FLOATS = ("float32", "float16", "bfloat16")


def input_dtypes(info: dict, i: int) -> List[str]:
    """The dtypes ListOps says input `i` accepts (the last input's for a variadic op)."""
    inputs = info["inputs"]
    spec = inputs[min(i, len(inputs) - 1)]
    return [_DTYPE_NAMES[d] for d in spec["dtypes"]]


# ---- Cases and tolerances -------------------------------------------------------------------


@dataclass
class Case:
    """One run of an op: inputs are (NumPy data, dtype) pairs for arrays, or Python scalars."""

    inputs: List[Any]
    attrs: Dict[str, Any] = field(default_factory=dict)
    # The expected output from the inputs as the daemon holds them (float64 or integer
    # arrays; scalars as given), and the output's dtype name.
    expect: Callable[[List[Any]], np.ndarray] = lambda xs: xs[0]
    out_dtype: str = "float32"
    # The magnitude the error is relative to, beyond the output's own (a sum's terms).
    scale: float = 1.0
    label: str = ""


# (rtol, atol per unit of scale) by output dtype; integers must match exactly.
TOLERANCE = {"float32": (2e-5, 2e-5), "float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2)}


def arr(data: Any, dtype: str) -> tuple:
    return (np.asarray(data), dtype)


def floating_or_f32(dtype: str) -> str:
    return dtype if dtype in FLOATS else "float32"


def values(rng: np.random.Generator, shape: Sequence[int], dtype: str, low=-2.0, high=2.0):
    """Random inputs for `dtype`: floats in [low, high), integers in [low, high] rounded
    inwards (and >= 0 for uint8), small, so that no integer op overflows."""
    if dtype in FLOATS:
        return rng.uniform(low, high, size=shape).astype(np.float32)
    lo = int(math.ceil(low))
    if dtype == "uint8":
        lo = max(lo, 0)
    return rng.integers(lo, int(math.floor(high)) + 1, size=shape).astype(np.int64)


def np_int(dtype: str):
    return {"int32": np.int32, "int64": np.int64, "uint8": np.uint8}[dtype]


# ---- The reference table: one entry per op ---------------------------------------------------

# Broadcasting pairs for the element-wise binary ops.
BROADCAST_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((5,), ())]


def _arithmetic(op: str) -> Callable:
    def cases(rng, dtype, info):
        out = []
        for sa, sb in BROADCAST_SHAPES:
            a = values(rng, sa, dtype, 0.5 if op == "div" else -2, 4)
            b = values(rng, sb, dtype, 0.5 if op == "div" else -2, 4)
            out.append(
                Case(
                    [arr(a, dtype), arr(b, dtype)],
                    expect=lambda xs: _binary(op, xs[0], xs[1], dtype),
                    out_dtype="float32" if op == "div" and dtype not in FLOATS else dtype,
                    scale=4.0,
                    label=f"{sa} {op} {sb}",
                )
            )
        # Scalars on either side: an integer keeps the array's dtype, a float makes an integer
        # array compute in float32.
        a = values(rng, (2, 3), dtype, 1, 4)
        for scalar, first in ((3, False), (1.5, True), (2, True), (0.5, False)):
            float_scalar = isinstance(scalar, float)
            result = dtype
            if op == "div" or float_scalar:
                result = floating_or_f32(dtype)
            inputs = [scalar, arr(a, dtype)] if first else [arr(a, dtype), scalar]
            out.append(
                Case(
                    inputs,
                    expect=lambda xs, result=result: _binary(op, xs[0], xs[1], result),
                    out_dtype=result,
                    scale=4.0,
                    label=f"{'scalar first' if first else 'scalar second'} {scalar!r}",
                )
            )
        return out

    return cases


def _binary(op: str, a: Any, b: Any, dtype: str) -> np.ndarray:
    if dtype in FLOATS:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    else:  # integer arithmetic in the dtype, wrapping as NumPy's does
        a, b = np.asarray(a).astype(np_int(dtype)), np.asarray(b).astype(np_int(dtype))
    with np.errstate(over="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[op](
            a, b
        )


def _matmul(rng, dtype, info):
    out = []
    for sa, sb in [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (3, 4, 2))]:
        a, b = values(rng, sa, dtype, -1, 3), values(rng, sb, dtype, -1, 3)
        out.append(
            Case(
                [arr(a, dtype), arr(b, dtype)],
                expect=lambda xs: np.matmul(np.asarray(xs[0], np.float64), np.asarray(xs[1], np.float64)),
                out_dtype=dtype,
                scale=4 * 9.0,
                label=f"{sa} @ {sb}",
            )
        )
    return out


def _reduction(op: str) -> Callable:
    ref = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op]

    def cases(rng, dtype, info):
        out_dtype = dtype
        if op == "sum" and dtype not in FLOATS:
            out_dtype = "int64"
        if op == "mean":
            out_dtype = floating_or_f32(dtype)
        x = values(rng, (3, 4, 5), dtype)
        out = []
        for attrs in ({}, {"axis": 0}, {"axis": -1, "keepdims": True}, {"keepdims": True}):
            def expect(xs, attrs=attrs):
                axis = attrs.get("axis")
                return ref(np.asarray(xs[0], np.float64), axis=axis, keepdims=attrs.get("keepdims", False))

            # A sum's error grows with its terms; a mean's, max's and min's stay at theirs.
            scale = 2.0 * x.size if op == "sum" else 4.0
            out.append(Case([arr(x, dtype)], attrs, expect, out_dtype, scale, label=str(attrs)))
        return out

    return cases


def _argmax(rng, dtype, info):
    x = values(rng, (4, 6), dtype, -2, 8)
    return [
        Case(
            [arr(x, dtype)],
            attrs,
            lambda xs, attrs=attrs: np.argmax(
                np.asarray(xs[0]), axis=attrs.get("axis"), keepdims=attrs.get("keepdims", False)
            ),
            "int64",
            label=str(attrs),
        )
        for attrs in ({}, {"axis": 1}, {"axis": 0, "keepdims": True})
    ]


def _astype(rng, dtype, info):
    # Non-negative values under 100, so that every conversion is in range.
    x = values(rng, (3, 5), dtype, 0, 99)
    out = []
    for target in ("float32", "float16", "bfloat16", "int32", "int64", "uint8"):
        def expect(xs, target=target):
            v = np.asarray(xs[0], np.float64)
            return v if target in FLOATS else np.trunc(v)

        as_attr = gpukit.bfloat16 if target == "bfloat16" else np.dtype(target)
        out.append(
            Case([arr(x, dtype)], {"dtype": as_attr}, expect, target, scale=100.0, label=target)
        )
    return out


def _reshape(rng, dtype, info):
    x = values(rng, (2, 3, 4), dtype)
    return [
        Case([arr(x, dtype)], {"shape": shape}, lambda xs, s=shape: np.reshape(xs[0], s), dtype,
             label=str(shape))
        for shape in ([4, 6], [-1, 2], [24], [2, 1, 12])
    ]


def _transpose(rng, dtype, info):
    x = values(rng, (2, 3, 4), dtype)
    return [
        Case([arr(x, dtype)], {}, lambda xs: np.transpose(xs[0]), dtype, label="reversed"),
        Case([arr(x, dtype)], {"perm": [1, 0, 2]},
             lambda xs: np.transpose(xs[0], (1, 0, 2)), dtype, label="[1, 0, 2]"),
        Case([arr(x, dtype)], {"perm": [-1, 0, 1]},
             lambda xs: np.transpose(xs[0], (2, 0, 1)), dtype, label="[-1, 0, 1]"),
    ]


def _concat(rng, dtype, info):
    a, b, c = (values(rng, s, dtype) for s in ((2, 3), (1, 3), (4, 3)))
    d = values(rng, (2, 5), dtype)
    return [
        Case([arr(a, dtype), arr(b, dtype), arr(c, dtype)], {},
             lambda xs: np.concatenate(xs, axis=0), dtype, label="axis 0"),
        Case([arr(a, dtype), arr(d, dtype)], {"axis": -1},
             lambda xs: np.concatenate(xs, axis=-1), dtype, label="axis -1"),
    ]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# name -> (float64 reference, whether an integer input keeps its dtype, input range)
UNARY = {
    "exp": (np.exp, False, (-2, 2)),
    "log": (np.log, False, (0.25, 6)),
    "sqrt": (np.sqrt, False, (0.25, 6)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), False, (0.25, 6)),
    "abs": (np.abs, True, (-3, 3)),
    "neg": (np.negative, True, (-3, 3)),
    "relu": (lambda x: np.maximum(x, 0), True, (-3, 3)),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), False, (-3, 3)),
    "silu": (lambda x: x / (1 + np.exp(-x)), False, (-3, 3)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), False, (-3, 3)),
    "tanh": (np.tanh, False, (-3, 3)),
}


def _unary(op: str) -> Callable:
    ref, keeps_integers, (low, high) = UNARY[op]

    def cases(rng, dtype, info):
        out_dtype = dtype if keeps_integers or dtype in FLOATS else "float32"
        out = []
        for shape in ((3, 4), (), (0, 2)):
            x = values(rng, shape, dtype, low, high)

            def expect(xs):
                if out_dtype in FLOATS:
                    return ref(np.asarray(xs[0], np.float64))
                with np.errstate(over="ignore"):  # -x of a uint8 wraps, as NumPy's does
                    return ref(np.asarray(xs[0]).astype(np_int(out_dtype)))

            out.append(Case([arr(x, dtype)], {}, expect, out_dtype, scale=8.0, label=str(shape)))
        return out

    return cases


def _clamp(rng, dtype, info):
    x = values(rng, (4, 5), dtype, -3, 8)
    out = []
    for attrs in ({"min": 1, "max": 5}, {"min": 2}, {"max": 3}, {"min": -0.5, "max": 2.5}):
        if dtype == "uint8" and any(isinstance(v, int) and v < 0 for v in attrs.values()):
            continue
        float_bound = any(isinstance(v, float) for v in attrs.values())
        out_dtype = floating_or_f32(dtype) if float_bound else dtype
        out.append(
            Case(
                [arr(x, dtype)],
                attrs,
                lambda xs, attrs=attrs: np.clip(
                    np.asarray(xs[0], np.float64), attrs.get("min"), attrs.get("max")
                ),
                out_dtype,
                scale=8.0,
                label=str(attrs),
            )
        )
    return out


def _where(rng, dtype, info):
    out = []
    for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (3, 4)), ((4,), (2, 4), ())]:
        cond = rng.integers(0, 2, size=sc) * 2  # 0 or 2 (nonzero is true)
        a = values(rng, sa, dtype)
        b = values(rng, sb, dtype)
        out.append(
            Case(
                [arr(cond, dtype), arr(a, dtype), arr(b, dtype)],
                expect=lambda xs: np.where(np.asarray(xs[0]) != 0, np.asarray(xs[1], np.float64),
                                           np.asarray(xs[2], np.float64)),
                out_dtype=dtype,
                label=f"{sc} {sa} {sb}",
            )
        )
    cond = rng.integers(0, 2, size=(2, 3))
    a = values(rng, (2, 3), dtype)
    for b, result in ((0, dtype), (0.5, floating_or_f32(dtype))):
        out.append(
            Case(
                [arr(cond, dtype), arr(a, dtype), b],
                expect=lambda xs: np.where(np.asarray(xs[0]) != 0, np.asarray(xs[1], np.float64),
                                           xs[2]),
                out_dtype=result,
                label=f"scalar {b!r}",
            )
        )
    return out


def _softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _softmax(rng, dtype, info):
    x = values(rng, (3, 5), dtype, -3, 3)
    return [
        Case([arr(x, dtype)], attrs,
             lambda xs, axis=attrs.get("axis", -1): _softmax_ref(np.asarray(xs[0], np.float64), axis),
             floating_or_f32(dtype), label=str(attrs))
        for attrs in ({}, {"axis": 0})
    ]


def _layernorm(rng, dtype, info):
    x, w, b = values(rng, (4, 8), dtype, -3, 6), values(rng, (8,), dtype), values(rng, (8,), dtype)

    def ref(xs, eps=1e-5):
        v = np.asarray(xs[0], np.float64)
        y = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps)
        if len(xs) > 1:
            y = y * np.asarray(xs[1], np.float64)
        if len(xs) > 2:
            y = y + np.asarray(xs[2], np.float64)
        return y

    out_dtype = floating_or_f32(dtype)
    return [
        Case([arr(x, dtype)], {}, ref, out_dtype, scale=4.0, label="x"),
        Case([arr(x, dtype), arr(w, dtype)], {}, ref, out_dtype, scale=8.0, label="x, weight"),
        Case([arr(x, dtype), arr(w, dtype), arr(b, dtype)], {"eps": 0.5},
             lambda xs: ref(xs, 0.5), out_dtype, scale=8.0, label="x, weight, bias, eps"),
    ]


def _rmsnorm(rng, dtype, info):
    x, w = values(rng, (4, 8), dtype, -3, 6), values(rng, (8,), dtype)

    def ref(xs, eps=1e-6):
        v = np.asarray(xs[0], np.float64)
        y = v / np.sqrt(np.mean(v * v, -1, keepdims=True) + eps)
        return y * np.asarray(xs[1], np.float64) if len(xs) > 1 else y

    out_dtype = floating_or_f32(dtype)
    return [
        Case([arr(x, dtype)], {}, ref, out_dtype, scale=4.0, label="x"),
        Case([arr(x, dtype), arr(w, dtype)], {"eps": 1}, lambda xs: ref(xs, 1.0), out_dtype,
             scale=8.0, label="x, weight, eps"),
    ]


def _rope_ref(x: np.ndarray, base: float, offset: int) -> np.ndarray:
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    pos = (offset + np.arange(seq, dtype=np.float64))[:, None]
    theta = pos * base ** (-2.0 * np.arange(half, dtype=np.float64) / dim)
    c, s = np.cos(theta), np.sin(theta)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _rope(rng, dtype, info):
    x = values(rng, (2, 5, 8), dtype)
    return [
        Case([arr(x, dtype)], attrs,
             lambda xs, base=attrs.get("base", 10000.0), offset=attrs.get("offset", 0):
             _rope_ref(np.asarray(xs[0], np.float64), base, offset),
             floating_or_f32(dtype), scale=4.0, label=str(attrs))
        for attrs in ({}, {"base": 100.0, "offset": 3})
    ]


def _attention_ref(q, k, v, causal: bool, scale: Optional[float]) -> np.ndarray:
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    sq, sk, d = q.shape[1], k.shape[1], q.shape[2]
    scores = np.einsum("hqd,hkd->hqk", q, k) * (scale if scale is not None else 1 / math.sqrt(d))
    if causal:  # query i sees keys up to i + sk - sq
        visible = np.arange(sk)[None, :] <= (np.arange(sq)[:, None] + sk - sq)
        scores = np.where(visible[None], scores, -np.inf)
    return np.einsum("hqk,hkd->hqd", _softmax_ref(scores, -1), v)


def _attention(rng, dtype, info):
    q, k, v = values(rng, (2, 3, 4), dtype), values(rng, (2, 5, 4), dtype), values(rng, (2, 5, 6), dtype)
    return [
        Case([arr(q, dtype), arr(k, dtype), arr(v, dtype)], attrs,
             lambda xs, attrs=attrs: _attention_ref(*xs, attrs.get("causal", False), attrs.get("scale")),
             floating_or_f32(dtype), scale=4.0, label=str(attrs))
        for attrs in ({}, {"causal": True}, {"scale": 0.25})
    ]


def _embedding(rng, dtype, info):
    table = values(rng, (10, 4), dtype)
    out = []
    for index_dtype in input_dtypes(info, 1):
        indices = np.array([[0, 3, 9], [9, 12, 1]])  # 12 is out of range: a row of zeros

        def expect(xs):
            t = np.asarray(xs[0], np.float64)
            idx = np.asarray(xs[1])
            rows = np.where(((idx >= 0) & (idx < t.shape[0]))[..., None], t[np.clip(idx, 0, 9)], 0)
            return rows

        out.append(
            Case([arr(table, dtype), arr(indices, index_dtype)], {}, expect, dtype,
                 label=f"indices {index_dtype}")
        )
    return out


# Every op ListOps may list, with the cases that check it. A new op needs an entry here.
REFERENCES: Dict[str, Callable[[np.random.Generator, str, dict], List[Case]]] = {
    **{op: _arithmetic(op) for op in ("add", "sub", "mul", "div")},
    "matmul": _matmul,
    **{op: _reduction(op) for op in ("sum", "mean", "max", "min")},
    "argmax": _argmax,
    "astype": _astype,
    "reshape": _reshape,
    "transpose": _transpose,
    "concat": _concat,
    **{op: _unary(op) for op in UNARY},
    "clamp": _clamp,
    "where": _where,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "rope": _rope,
    "attention": _attention,
    "embedding": _embedding,
}


# ---- The tests ------------------------------------------------------------------------------


def test_every_listed_op_has_a_reference(listed_ops: Dict[str, dict]) -> None:
    missing = sorted(set(listed_ops) - set(REFERENCES))
    assert not missing, (
        f"ListOps lists {missing} without a reference in tests/python/test_op_conformance.py's "
        "REFERENCES: add one for each new op"
    )
    stale = sorted(set(REFERENCES) - set(listed_ops))
    assert not stale, f"REFERENCES has ops ListOps does not list: {stale}"


def test_listops_reports_attribute_specs_and_input_dtypes(listed_ops: Dict[str, dict]) -> None:
    for name, info in listed_ops.items():
        assert [a["name"] for a in info["attr_info"]] == info["attrs"], name
        for attr in info["attr_info"]:
            assert attr["type"] != "ATTR_TYPE_UNSPECIFIED", (name, attr)
            assert attr["doc"], (name, attr)
            assert attr["required"] == (attr["default_value"] == ""), (name, attr)
        assert info["inputs"], name
        for spec in info["inputs"]:
            assert spec["dtypes"], (name, spec)
    axis = next(a for a in listed_ops["sum"]["attr_info"] if a["name"] == "axis")
    assert axis["default_value"] == "all axes"
    assert listed_ops["astype"]["attr_info"][0]["required"]
    assert input_dtypes(listed_ops["embedding"], 1) == ["int32", "int64"]
    assert listed_ops["add"]["inputs"][1]["scalar_ok"]
    assert not listed_ops["matmul"]["inputs"][1]["scalar_ok"]


def _upload(gk: gpukit.Session, value: Any) -> Any:
    if isinstance(value, tuple):
        data, dtype = value
        return gk.array(data, dtype=dtype)
    return value


def _check(got: np.ndarray, want: np.ndarray, out_dtype: str, scale: float) -> Optional[str]:
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if out_dtype not in FLOATS:
        want_ints = want.astype(np_int(out_dtype))
        if not np.array_equal(got, want_ints):
            return f"got\n{got}\nexpected\n{want_ints}"
        return None
    rtol, atol = TOLERANCE[out_dtype]
    got64 = got.astype(np.float64)
    bad = ~(np.abs(got64 - want) <= atol * scale + rtol * np.abs(want))
    if np.any(bad):
        worst = np.max(np.abs(got64 - want))
        return f"{int(bad.sum())} of {got.size} elements off (worst by {worst:g})\ngot\n{got}\nexpected\n{want}"
    return None


@pytest.mark.parametrize("op", sorted(REFERENCES))
def test_op_matches_numpy_on_every_listed_dtype(
    op: str, listed_ops: Dict[str, dict], gk: gpukit.Session, rng: np.random.Generator
) -> None:
    if op not in listed_ops:
        pytest.fail(f"{op} has a reference but ListOps does not list it")
    info = listed_ops[op]
    if BACKEND not in info["backends"]:
        pytest.skip(f"{op} does not run on the {BACKEND} backend (ListOps: {info['backends']})")
    failures = []
    ran = 0
    for dtype in input_dtypes(info, 0):
        for case in REFERENCES[op](rng, dtype, info):
            what = f"{op} [{dtype}] {case.label} attrs={case.attrs}"
            inputs = [_upload(gk, x) for x in case.inputs]
            # The reference starts from the values the daemon holds (float16 and bfloat16 round).
            held = [x.numpy() if isinstance(x, gpukit.Array) else x for x in inputs]
            try:
                result = gk.run_op(op, *inputs, **case.attrs)
                got = result.numpy()
            except gpukit.Error as error:
                failures.append(f"{what}: {type(error).__name__}: {error}")
                continue
            ran += 1
            if str(result.dtype) != case.out_dtype:
                failures.append(f"{what}: dtype {result.dtype}, expected {case.out_dtype}")
                continue
            problem = _check(got, case.expect(held), case.out_dtype, case.scale)
            if problem:
                failures.append(f"{what}: {problem}")
    assert ran > 0, f"no case of {op} ran"
    assert not failures, f"{len(failures)} case(s) of {op} failed:\n" + "\n\n".join(failures)
