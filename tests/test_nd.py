"""ember.runtime.nd: arrays on a device, taken by module calls without copies."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te


def _add_one(n: int = 37):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return ember.build(te.create_schedule(B.op), [A, B], target="llvm")


def test_cpu_arrays_are_written_in_place(rng):
    mod = _add_one()
    x = rng.uniform(-1, 1, 37).astype("float32")
    a, b = ember.nd.array(x), ember.nd.empty((37,), "float32")
    mod(a, b)
    np.testing.assert_array_equal(b.numpy(), x + 1)
    assert (a.shape, a.dtype_name, a.device) == ((37,), "float32", "cpu")
    assert repr(a) == "CPUArray(shape=(37,), dtype=float32, cpu)"
    assert np.asarray(b) is np.asarray(b)  # the array inside, not a copy
    x[0] = 100.0
    assert a.numpy()[0] != 100.0  # nd.array copied its input


def test_cpu_array_copy_from_and_bad_calls(rng):
    mod = _add_one()
    b = ember.nd.empty(37)
    b.copy_from(np.arange(37))
    assert b.numpy()[5] == 5.0
    with pytest.raises(ember.ArgumentError, match="expected shape"):
        b.copy_from(np.zeros(3))
    with pytest.raises(ember.ArgumentError, match="expects shape"):
        mod(ember.nd.empty((36,)), b)
    with pytest.raises(ember.ArgumentError, match="expects dtype"):
        mod(ember.nd.empty((37,), "float64"), b)
    with pytest.raises(ember.ArgumentError, match="unknown device"):
        ember.nd.array(np.zeros(3), device="tpu")
    with pytest.raises(ember.ArgumentError, match="unknown dtype"):
        ember.nd.empty((3,), "float31")
    with pytest.raises(ember.ArgumentError, match="non-negative"):
        ember.nd.empty((-1,))


def test_cuda_arrays_need_a_device(monkeypatch):
    from ember.codegen_cuda import device

    monkeypatch.setattr(device, "_probe", lambda: ([], "no driver here"))
    if device.device_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ember.DeviceError):
        ember.nd.array(np.zeros(4, "float32"), device="cuda")
