"""Zero-copy interop on a GPU host: gpukitd's arrays seen by PyTorch through the CUDA Array
Interface, both ways, without copies. Runs with $GPUKIT_TEST_BACKEND=cuda (the daemon on the
GPU) where torch with CUDA is installed; skipped elsewhere, which is what CI sees.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import BACKEND

pytestmark = pytest.mark.skipif(BACKEND != "cuda", reason="needs gpukitd on a GPU "
                                "($GPUKIT_TEST_BACKEND=cuda)")
torch = pytest.importorskip("torch")


def test_torch_sees_the_arrays_memory_and_writes_to_it_in_place(gk):
    rng = np.random.default_rng(7)
    data = rng.uniform(-4, 4, size=(64, 48)).astype(np.float32)
    a = gk.array(data)
    t = torch.as_tensor(a, device="cuda")
    assert t.shape == (64, 48) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.cpu().numpy(), data)
    pointer, size_bytes, _ = a.map()
    assert t.data_ptr() == pointer and size_bytes == data.nbytes  # the same memory
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.numpy(), data * 2)  # the daemon reads torch's write
    b = a + a
    np.testing.assert_array_equal(torch.as_tensor(b, device="cuda").cpu().numpy(), data * 4)


def test_half_precision_and_integer_arrays_keep_their_types(gk):
    halves = np.linspace(-1, 1, 1000, dtype=np.float16)
    ints = np.arange(-500, 500, dtype=np.int32)
    th = torch.as_tensor(gk.array(halves), device="cuda")
    ti = torch.as_tensor(gk.array(ints), device="cuda")
    assert th.dtype == torch.float16 and ti.dtype == torch.int32
    np.testing.assert_array_equal(th.cpu().numpy(), halves)
    np.testing.assert_array_equal(ti.cpu().numpy(), ints)
