"""Pipelined submission from Python (the default of gpukit.connect): ops return arrays at
once, errors surface at sync(), numpy() or a refused op's shape, naming the op; frees never
wait; pipeline=False keeps the error at the call."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import gpukit


def arrays_held(daemon, gk) -> int:
    """The number of arrays gpukitd holds for `gk`'s session (`gpukitctl sessions`)."""
    for session in daemon.ctl("sessions").get("sessions", []):
        if session["sessionId"] == gk.session_id:
            return int(session.get("arrays", 0))  # proto JSON leaves out a 0
    raise AssertionError(f"session {gk.session_id} not listed")


def test_sessions_pipeline_by_default(gk, daemon):
    assert gk.pipeline
    with gpukit.connect(daemon.address, tenant="pytest", pipeline=False) as unary:
        assert not unary.pipeline


def test_chain_of_200_dependent_adds_gives_numpy_values(gk, daemon, rng):
    x_host = rng.standard_normal(16).astype(np.float32)
    step_host = rng.standard_normal(16).astype(np.float32)
    x, step = gk.array(x_host), gk.array(step_host)
    for _ in range(200):
        x = x + step  # the previous x is freed on the stream as it goes
        x_host = x_host + step_host
    gk.sync()
    np.testing.assert_array_equal(x.numpy(), x_host)
    assert x.shape == (16,) and x.dtype == np.float32
    assert arrays_held(daemon, gk) == 2


def test_error_in_a_chain_surfaces_at_sync_naming_the_op(gk):
    a = gk.ones(16)
    chain = [a + 1]  # op #0
    for _ in range(3):
        chain.append(chain[-1] + 1)  # ops #1 to #3
    bad = chain[-1] + gk.ones(3)  # op #4: shapes that do not broadcast; no error yet
    later = bad * 2  # op #5: not run
    with pytest.raises(gpukit.InvalidArgument) as error:
        gk.sync()
    assert error.value.code == "INVALID_ARGUMENT"
    assert error.value.message == "op #4 (add): shapes [16] and [3] cannot be broadcast together"
    # The refused op's array raises its refusal from shape and numpy(); the op after it
    # was not run.
    with pytest.raises(gpukit.InvalidArgument, match=r"^op #4 \(add\)"):
        bad.shape
    with pytest.raises(gpukit.Aborted, match=r"not run") as not_run:
        later.numpy()
    assert not_run.value.code == "ABORTED"
    assert "failed=" in repr(bad)
    # After the sync point the session takes ops again, on what was made before the error.
    np.testing.assert_array_equal((chain[-1] * 10).numpy(), np.full(16, 50, np.float32))
    gk.sync()


def test_numpy_of_any_array_raises_the_first_failure_once(gk):
    a = gk.array(np.arange(4, dtype=np.int32).reshape(2, 2))
    b = a + 1
    bad = b.reshape(3)  # op #1 is refused: 4 elements do not make [3]
    del bad
    with pytest.raises(gpukit.InvalidArgument, match=r"^op #1 \(reshape\)"):
        a.numpy()
    # That was a sync point: the same read now works, and sync() has nothing to report.
    np.testing.assert_array_equal(b.numpy(), [[1, 2], [3, 4]])
    gk.sync()


def test_shape_of_a_pending_result(gk):
    n = 256
    a = gk.ones((n, n))
    c = a @ a  # answered once queued, before the matmul has run
    assert c.shape == (n, n)
    assert c.nbytes == n * n * 4
    d = (c + 1).sum()
    assert d.shape == ()
    assert d.item() == n * n * (n + 1)


def test_frees_by_del_are_queued_and_gone_after_sync(gk, daemon):
    kept = gk.ones(8)
    doomed = [kept * i for i in range(10)]
    gk.sync()
    assert arrays_held(daemon, gk) == 11
    del doomed
    gc.collect()
    gk.sync()  # the frees were queued on the stream; sync waits for them too
    assert arrays_held(daemon, gk) == 1
    np.testing.assert_array_equal(kept.numpy(), np.ones(8, np.float32))


def test_free_of_an_array_in_use_by_a_queued_op(gk):
    n = 128
    host = np.arange(n * n, dtype=np.float32).reshape(n, n) % 7
    a = gk.array(host)
    c = a @ a
    a.free()  # while the matmul that reads it may still be queued
    assert a.freed and a.shape == (n, n)
    np.testing.assert_array_equal(c.numpy(), host @ host)


def test_unpipelined_session_raises_at_the_call(daemon):
    with gpukit.connect(daemon.address, tenant="pytest", pipeline=False) as gk:
        with pytest.raises(gpukit.InvalidArgument) as error:
            gk.zeros((2, 3)) + gk.zeros((4,))
        assert error.value.message == "shapes [2, 3] and [4] cannot be broadcast together"
        gk.sync()  # nothing pipelined: nothing to report
        np.testing.assert_array_equal((gk.ones(2) + 1).numpy(), [2, 2])


def test_free_of_a_refused_result_leaves_the_error_to_sync(gk):
    bad = gk.ones(4) + gk.ones(3)  # op #0 is refused
    bad.free()  # nothing to free in the daemon; the error is not swallowed
    assert bad.freed
    with pytest.raises(gpukit.InvalidArgument, match=r"^op #0 \(add\)"):
        gk.sync()
    gk.sync()
