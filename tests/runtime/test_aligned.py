"""``data_address`` reads an array's data pointer from the array object itself."""

import numpy as np
import pytest

from ember.runtime import aligned
from ember.runtime.aligned import aligned_array, data_address


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    base = rng.standard_normal((7, 9, 5)).astype(np.float32)
    return [
        base,
        base[2:, 3:, 1:],  # a view starting inside its base
        base[::2, ::-1],  # strided, reversed
        base.T,
        np.frombuffer(bytearray(40), dtype=np.int64),
        np.empty(0, dtype=np.float64),
        aligned_array((3, 5), "float16"),
        np.full((), 3.5, dtype=np.float32),  # 0-d
    ]


@pytest.mark.parametrize("k", range(8))
def test_data_address_is_the_arrays_data_pointer(k):
    a = _arrays()[k]
    assert data_address(a) == a.ctypes.data


def test_data_address_without_the_field_asks_ctypes(monkeypatch):
    monkeypatch.setattr(aligned, "_DATA_FIELD", None)
    for a in _arrays():
        assert data_address(a) == a.ctypes.data


def test_the_field_is_found_on_this_interpreter():
    assert aligned._DATA_FIELD is not None
