"""NumPy's meaning of reductions over a tuple of axes and of 1-d and batched matmul, each one op
in the daemon: values and dtypes against NumPy for every dtype the ops take, NumPy's refusals,
and the daemon's own count of the RPCs (its Prometheus endpoint) for a two-axis reduction and a
1-d matmul: one each.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Iterator

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import gpukit
from conftest import gpukitd_with_metrics

DTYPES = ["float32", "float16", "bfloat16", "int32", "int64", "uint8"]


def upload(gk: gpukit.Session, rng: np.random.Generator, shape, dtype: str):
    """A random array of `dtype` in `gk`, and its values as float64 (bfloat16 as stored)."""
    if dtype in ("float32", "float16", "bfloat16"):
        host = rng.uniform(-2, 2, size=shape).astype(np.float32)
    elif dtype == "uint8":
        host = rng.integers(0, 40, size=shape)  # sums of up to 120 elements stay exact
    else:
        host = rng.integers(-100, 100, size=shape)
    target = gpukit.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    a = gk.array(host, dtype=target)
    return a, a.numpy().astype(np.float64)


def expected_dtype(op: str, dtype: str):
    integer = dtype in ("int32", "int64", "uint8")
    if op == "sum" and integer:
        return np.dtype(np.int64)
    if op == "mean" and integer:
        return np.dtype(np.float32)
    return gpukit.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)


def tolerance(dtype) -> float:
    """Half an ulp relative to the value: one rounding to the output dtype (the CPU backend
    accumulates in double and rounds once)."""
    if dtype == gpukit.bfloat16:
        return 2**-8
    return {np.dtype(np.float16): 2**-11, np.dtype(np.float32): 2**-24}[np.dtype(dtype)]


def smallest_step(dtype) -> float:
    """The spacing of the output dtype's subnormals (float16's are coarse)."""
    return 2**-24 if dtype == np.float16 else 2**-126


INTEGERS = ("int32", "int64", "uint8")


REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
AXES = [
    ((3, 4, 5), (0, 2)),  # apart
    ((3, 4, 5), (1, 2)),  # adjacent, the last ones
    ((3, 4, 5), (0, 1)),  # adjacent, the first ones
    ((3, 4, 5), (2, 0)),  # any order
    ((3, 4, 5), (-1, -3)),  # negative
    ((3, 4, 5), (0, 1, 2)),  # every axis named
    ((3, 4, 5), ()),  # none: each element is its own result
    ((2, 3, 4, 5), (1, 3)),  # two runs apart, kept axes around them
    ((2, 1, 4, 5), (0, 2)),  # apart only by an axis of 1
    ((2, 3, 4, 5), [0, 2, 3]),  # a list works as a tuple does
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", AXES, ids=[f"{s}-{a}" for s, a in AXES])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_a_tuple_of_axes_match_numpy(gk, rng, dtype, shape, axis, keepdims):
    a, x = upload(gk, rng, shape, dtype)
    for op, reference in REDUCTIONS.items():
        want = reference(x, axis=tuple(axis), keepdims=keepdims)
        for got in [
            getattr(a, op)(axis=axis, keepdims=keepdims),
            getattr(gpukit, op)(a, axis=axis, keepdims=keepdims),
        ]:
            assert got.shape == want.shape, op
            assert got.dtype == expected_dtype(op, dtype), op
            values = got.numpy()
            if dtype in INTEGERS and op != "mean":
                np.testing.assert_array_equal(values, want, err_msg=op)
            else:
                # One rounding of the exact result, plus float64's own error (NumPy's order).
                np.testing.assert_allclose(values, want, rtol=tolerance(got.dtype) + 1e-12,
                                           atol=smallest_step(got.dtype), err_msg=op)


def test_a_tuple_of_one_axis_is_that_axis_bit_for_bit(gk, rng):
    a, _ = upload(gk, rng, (6, 7, 8), "float32")
    for op in REDUCTIONS:
        for axis in (0, 1, 2, -1):
            one = getattr(a, op)(axis=axis).numpy()
            np.testing.assert_array_equal(getattr(a, op)(axis=(axis,)).numpy(), one)
            np.testing.assert_array_equal(getattr(a, op)(axis=[axis]).numpy(), one)


def test_numpy_integers_name_axes(gk, rng):
    a, x = upload(gk, rng, (3, 4, 5), "int32")
    got = a.sum(axis=(np.int64(0), np.int32(2)))
    np.testing.assert_array_equal(got.numpy(), x.sum(axis=(0, 2)))


def test_refuses_a_repeated_or_out_of_range_axis_as_numpy_does(gk):
    a = gk.zeros((2, 3, 4))
    repeated = r"attribute \"axis\" = \[0, -3\] repeats axis 0"
    with pytest.raises(gpukit.InvalidArgument, match=repeated):
        a.sum(axis=(0, -3)).numpy()
    with pytest.raises(gpukit.InvalidArgument, match=r"\"axis\"\[1\] = 3 is out of range"):
        a.mean(axis=(1, 3)).numpy()
    with pytest.raises(gpukit.InvalidArgument, match="no identity"):
        gk.zeros((2, 0, 3)).max(axis=(0, 1)).numpy()
    assert gk.zeros((2, 0, 3)).max(axis=(0, 2)).shape == (0,)
    with pytest.raises(TypeError):  # as np.argmax: one axis only
        gpukit.argmax(a, axis=(0, 1))
    with pytest.raises(gpukit.InvalidArgument, match=r"attribute \"axis\" must be an integer"):
        gk.run_op("argmax", a, axis=[0, 1]).numpy()  # the daemon refuses it too
    gk.sync()  # the session takes ops again


MATMULS = [
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((3,), (3,)),
    ((5, 2, 3), (3,)),
    ((3,), (5, 3, 4)),
    ((2, 1, 3, 4), (4,)),
    ((2, 1, 4, 5), (3, 5, 6)),
    ((4, 5), (5, 6)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape_a,shape_b", MATMULS, ids=[f"{a}x{b}" for a, b in MATMULS])
def test_matmul_of_vectors_and_batches_matches_numpy(gk, rng, dtype, shape_a, shape_b):
    if dtype == "uint8":  # small enough that no product wraps
        a = gk.array(rng.integers(0, 4, size=shape_a), dtype=np.uint8)
        b = gk.array(rng.integers(0, 4, size=shape_b), dtype=np.uint8)
        x, y = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    else:
        a, x = upload(gk, rng, shape_a, dtype)
        b, y = upload(gk, rng, shape_b, dtype)
    want = x @ y
    for got in [a @ b, gpukit.matmul(a, b), gk.matmul(a, b)]:
        assert got.shape == want.shape
        assert got.dtype == a.dtype
        values = got.numpy()
        if dtype in INTEGERS:
            np.testing.assert_array_equal(values, want)
        else:
            # One rounding of a dot product of k terms below 4 in magnitude.
            k = shape_a[-1]
            np.testing.assert_allclose(values, want, rtol=0, atol=2 * tolerance(got.dtype) * 4 * k)


def test_matmul_refuses_a_zero_dim_operand_with_numpys_message(gk):
    with pytest.raises(gpukit.InvalidArgument,
                       match=re.escape("matmul: Input operand 0 does not have enough dimensions "
                                       "(has 0, gufunc core with signature "
                                       "(n?,k),(k,m?)->(n?,m?) requires 1)")):
        (gk.array(np.float32(2)) @ gk.ones(3)).numpy()
    with pytest.raises(gpukit.InvalidArgument, match="inner dimensions differ"):
        (gk.ones(3) @ gk.ones(4)).numpy()


# ---- RPCs counted at the daemon ----


@pytest.fixture(scope="module")
def counted_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A gpukitd of its own with --metrics-address: (its address, its /metrics URL)."""
    directory = tmp_path_factory.mktemp("gpukitd-rpcs")
    with gpukitd_with_metrics(directory, {"jit": {"cacheDir": "none"}}) as (address, url, _):
        yield address, url


def run_op_calls(url: str) -> float:
    """Ops calls the daemon has answered, whatever their code: ComputeService/RunOp calls and
    requests on the submit socket, where a synchronous session sends its ops."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode("utf-8")
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name == "gpukit_rpc_requests_total"
                    and sample.labels.get("method") in ("gpukit.v1.ComputeService/RunOp",
                                                        "gpukit.v1.SubmitSocket/Request")):
                total += sample.value
    return total


def test_a_two_axis_reduction_and_a_1d_matmul_cost_one_rpc_each(counted_daemon):
    address, url = counted_daemon
    # Without pipelining every op is one RunOp call; uploads and downloads are other methods.
    with gpukit.connect(address, tenant="rpcs", pipeline=False) as gk:
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        a = gk.array(x)
        v, m = gk.array(np.ones(4, np.float32)), gk.array(np.ones((4, 5), np.float32))
        before = run_op_calls(url)
        total = a.sum(axis=(0, 2))
        after_reduction = run_op_calls(url)
        product = v @ m
        after_matmul = run_op_calls(url)
        np.testing.assert_array_equal(total.numpy(), x.sum(axis=(0, 2)))
        np.testing.assert_array_equal(product.numpy(), np.full(5, 4, np.float32))
    assert after_reduction - before == 1  # was 2: one op per axis
    assert after_matmul - after_reduction == 1  # was 3: reshape, matmul, reshape
