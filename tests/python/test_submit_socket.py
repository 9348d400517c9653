"""A synchronous session's ops over gpukitd's submit socket (``connect(pipeline=False)``, the
default ``submit_socket=True``) against the same session kind over gRPC calls
(``submit_socket=False``): the same values, the same exceptions and reasons, frees that never
wait and are applied before the next op."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpukit


def _came_through_the_socket(array: gpukit.Array) -> bool:
    # A pipeline's result is "<prefix>.<index>"; a unary RunOp's has no dot.
    return "." in array.handle


@pytest.fixture
def sessions(daemon):
    with gpukit.connect(daemon.address, tenant="pytest", pipeline=False) as fast, \
            gpukit.connect(daemon.address, tenant="pytest", pipeline=False,
                           submit_socket=False) as grpc:
        yield fast, grpc


def test_same_values_either_way(sessions, rng):
    a_host = rng.standard_normal((3, 4)).astype(np.float32)
    b_host = rng.standard_normal((4,)).astype(np.float32)
    for session, through_socket in zip(sessions, (True, False)):
        a, b = session.array(a_host), session.array(b_host)
        c = (a * b + 1.0).sum(axis=0)
        assert _came_through_the_socket(c) == through_socket
        np.testing.assert_allclose(c.numpy(), (a_host * b_host + 1.0).sum(axis=0), rtol=1e-6)


def test_same_error_either_way_and_the_session_goes_on(sessions):
    raised = []
    for session in sessions:
        x = session.array(np.ones(3, np.float32))
        y = session.array(np.ones(2, np.float32))
        with pytest.raises(gpukit.InvalidArgument) as error:
            x + y
        raised.append(error.value)
        np.testing.assert_array_equal((x + x).numpy(), np.full(3, 2, np.float32))
    assert str(raised[0]) == str(raised[1])
    assert raised[0].reason == raised[1].reason


def test_freed_memory_is_there_for_the_next_op(daemon):
    # Room for three arrays of 1 MiB, not four: each new one fits only once the free of the
    # one before was applied, which the client did not wait for.
    limit = 3 * (1 << 20) + (256 << 10)
    with gpukit.connect(daemon.address, tenant="pytest", pipeline=False,
                        memory_request_bytes=limit, memory_limit_bytes=limit) as gk:
        x = gk.array(np.ones(1 << 18, np.float32))
        y = x + x
        for _ in range(20):
            y = y + x  # the old y is freed as it is replaced
            gc.collect()
        assert _came_through_the_socket(y)
        np.testing.assert_array_equal(y.numpy(), np.full(1 << 18, 22, np.float32))
