"""Ops against NumPy: arithmetic with broadcasting and scalars, reductions, matmul, nn ops."""

import math

import numpy as np
import pytest

import gpukit
import gpukit.nn as nn


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


BROADCAST_SHAPES = [
    ((3, 4), (3, 4)),
    ((2, 1, 3), (4, 3)),
    ((4, 1), (1, 5)),
    ((3,), (2, 3)),
    ((), (2, 2)),
]


@pytest.mark.parametrize("shape_a,shape_b", BROADCAST_SHAPES)
def test_arithmetic_broadcasts_like_numpy(gk, rng, shape_a, shape_b):
    x, y = f32(rng, *shape_a), f32(rng, *shape_b) + 3  # y away from 0 for the division
    a, b = gk.array(x), gk.array(y)
    for got, want in [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y)]:
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_python_and_numpy_scalars_on_either_side(gk, rng):
    x = f32(rng, 3, 4) + 5
    a = gk.array(x)
    cases = [
        (2 * a, 2 * x),
        (a * 2, x * 2),
        (a - 1.5, x - 1.5),
        (1.5 - a, 1.5 - x),
        (a + 1, x + 1),
        (10 / a, 10 / x),
        (a / 4, x / 4),
        (np.float32(3) * a, 3 * x),
        (a - np.int64(2), x - 2),
        (-a, -x),
        (abs(a - 5), np.abs(x - 5)),
    ]
    for got, want in cases:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_integer_arithmetic_keeps_dtype_and_division_gives_float32(gk):
    x = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.int32)
    a = gk.array(x)
    assert (a + 1).dtype == np.int32
    np.testing.assert_array_equal((a * 3 - 1).numpy(), x * 3 - 1)
    q = a / 2
    assert q.dtype == np.float32
    np.testing.assert_allclose(q.numpy(), x / 2)
    assert (a + 0.5).dtype == np.float32
    wrapped = gk.array(np.array([250, 1, 0], np.uint8)) + 300  # uint8 wraps, as in the daemon
    np.testing.assert_array_equal(wrapped.numpy(), [38, 45, 44])


def test_a_numpy_array_operand_is_a_type_error_not_a_download(gk):
    a = gk.zeros(3)
    with pytest.raises(TypeError):
        a + np.ones(3)
    with pytest.raises(TypeError):
        np.ones(3) + a


REDUCTIONS = [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]


@pytest.mark.parametrize("name,reference", REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy(gk, rng, name, reference, axis, keepdims):
    x = f32(rng, 3, 4, 5)
    want = reference(x.astype(np.float64), axis=axis, keepdims=keepdims)
    for got in [
        getattr(gk, name)(gk.array(x), axis=axis, keepdims=keepdims),
        getattr(gpukit, name)(gk.array(x), axis=axis, keepdims=keepdims),
        getattr(gk.array(x), name)(axis=axis, keepdims=keepdims),
    ]:
        assert got.shape == np.shape(want) and got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_integer_sum_is_int64_and_mean_float32(gk):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert gk.sum(gk.array(x)).dtype == np.int64
    assert gk.sum(gk.array(x)).item() == 66
    m = gk.mean(gk.array(x), axis=0)
    assert m.dtype == np.float32
    np.testing.assert_allclose(m.numpy(), x.mean(axis=0))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_matches_numpy(gk, rng, axis, keepdims):
    x = f32(rng, 4, 6)
    got = gk.argmax(gk.array(x), axis=axis, keepdims=keepdims)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), np.argmax(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((3, 4), (4, 5)), ((2, 1, 4, 5), (3, 5, 6)), ((5,), (5, 2)), ((3, 5), (5,)), ((4,), (4,))],
)
def test_matmul_matches_numpy(gk, rng, shape_a, shape_b):
    x, y = f32(rng, *shape_a), f32(rng, *shape_b)
    want = x.astype(np.float64) @ y.astype(np.float64)
    for got in [gk.array(x) @ gk.array(y), gpukit.matmul(gk.array(x), gk.array(y))]:
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_math_functions(gk, rng):
    x = np.abs(f32(rng, 3, 4)) + 0.5
    a = gk.array(x)
    np.testing.assert_allclose(gpukit.exp(a).numpy(), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(gpukit.log(a).numpy(), np.log(x), rtol=1e-6)
    np.testing.assert_allclose(gpukit.sqrt(a).numpy(), np.sqrt(x), rtol=1e-6)
    np.testing.assert_allclose(gpukit.clip(a, 0.8, 1.2).numpy(), np.clip(x, 0.8, 1.2))
    cond = gk.array((x > 1).astype(np.uint8))
    np.testing.assert_allclose(gpukit.where(cond, a, 0.0).numpy(), np.where(x > 1, x, 0))
    joined = gpukit.concatenate([a, a], axis=1)
    np.testing.assert_array_equal(joined.numpy(), np.concatenate([x, x], 1))


def gelu_reference(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def softmax_reference(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_elementwise_nn_ops_match_numpy(gk, rng):
    x = f32(rng, 4, 8).astype(np.float64)
    a = gk.array(x)
    sigmoid = 1 / (1 + np.exp(-x))
    for got, want in [
        (nn.relu(a), np.maximum(x, 0)),
        (nn.sigmoid(a), sigmoid),
        (nn.tanh(a), np.tanh(x)),
        (nn.silu(a), x * sigmoid),
        (nn.gelu(a), gelu_reference(x)),
        (nn.softmax(a), softmax_reference(x)),
        (nn.softmax(a, axis=0), softmax_reference(x, axis=0)),
    ]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_norms_match_numpy(gk, rng):
    x, w, b = f32(rng, 3, 8), f32(rng, 8), f32(rng, 8)
    xd = x.astype(np.float64)
    normed = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
    a = gk.array(x)
    np.testing.assert_allclose(nn.layernorm(a).numpy(), normed, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        nn.layernorm(a, gk.array(w), gk.array(b)).numpy(), normed * w + b, rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        nn.layernorm(a, bias=gk.array(b)).numpy(), normed + b, rtol=1e-4, atol=1e-5
    )
    rms = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(
        nn.rmsnorm(a, gk.array(w), eps=1e-3).numpy(), rms * w, rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_numpy(gk, rng, causal):
    h, sq, sk, d, dv = 2, 3, 5, 4, 6
    q, k, v = f32(rng, h, sq, d), f32(rng, h, sk, d), f32(rng, h, sk, dv)
    scores = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        mask = np.arange(sk)[None, :] > np.arange(sq)[:, None] + (sk - sq)
        scores = np.where(mask, -np.inf, scores)
    want = softmax_reference(scores) @ v
    got = nn.attention(gk.array(q), gk.array(k), gk.array(v), causal=causal)
    assert got.shape == (h, sq, dv)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_rope_and_embedding_match_numpy(gk, rng):
    seq, dim, half = 4, 6, 3
    x = f32(rng, 2, seq, dim)
    pos = 2 + np.arange(seq)[:, None]
    theta = pos * 10000.0 ** (-2 * np.arange(half) / dim)
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    cos, sin = np.cos(theta), np.sin(theta)
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    np.testing.assert_allclose(nn.rope(gk.array(x), offset=2).numpy(), want, rtol=1e-5, atol=1e-5)

    table = f32(rng, 10, 4)
    idx = np.array([[0, 9], [3, 3]], dtype=np.int32)
    np.testing.assert_array_equal(nn.embedding(gk.array(table), gk.array(idx)).numpy(), table[idx])
