"""The pool2d.llvm template: max and average pooling, fallback and sampled configs."""

from __future__ import annotations

import numpy as np
import pytest

from ember.codegen_llvm.schedules.pool2d import pool2d_llvm
from ember.errors import ArgumentError
from tests.codegen_llvm.schedules.template_helpers import sampled_configs, task_of
from tests.numerics import check


def pool_ref(x: np.ndarray, kernel, stride, padding, kind: str) -> np.ndarray:  # noqa: ANN001
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    pt, pl, pb, pr = (padding,) * 4 if isinstance(padding, int) else padding
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    OH, OW = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    acc = np.full(x.shape[:2] + (OH, OW), fill)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i : i + sh * (OH - 1) + 1 : sh, j : j + sw * (OW - 1) + 1 : sw]
            acc = np.maximum(acc, win) if kind == "max" else acc + win
    if kind == "avg":
        acc = acc / (kh * kw)  # the window includes the padding (count_include_pad)
    return acc.astype(x.dtype)


CASES = [
    # N, C, H, W, kernel, stride, padding
    (1, 3, 7, 9, 3, 2, 1),
    (2, 2, 8, 8, 2, 2, 0),
    (1, 3, 11, 5, (3, 2), (1, 2), (1, 0, 1, 1)),
    (1, 2, 6, 37, 3, 1, 1),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_fallback(case, kind, rng):  # noqa: ANN001
    *shape, kernel, stride, padding = case
    s, args = pool2d_llvm(*shape, kernel, stride, padding, kind)
    check(s, args, lambda x: pool_ref(x, kernel, stride, padding, kind), rng)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_fallback_medium_llvm(kind, rng):  # noqa: ANN001
    s, args = pool2d_llvm(2, 16, 56, 56, 3, 2, 1, kind)
    check(s, args, lambda x: pool_ref(x, 3, 2, 1, kind), rng, executors=("llvm",))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_sampled_configs(kind, rng):  # noqa: ANN001
    task = task_of("pool2d.llvm", 1, 2, 9, 21, 3, 2, 1, kind, "float32")
    for cfg in sampled_configs(task, 4, seed=7):
        s, args = task.instantiate(cfg)
        check(s, args, lambda x: pool_ref(x, 3, 2, 1, kind), rng)


@pytest.mark.parametrize("pad", ["inline", "row", "root"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_every_pad_placement_vectorized(pad, kind, rng):  # noqa: ANN001
    task = task_of("pool2d.llvm", 1, 2, 7, 11, 3, 2, 1, kind, "float32")
    knobs = task.config_space.knobs
    choices = {"vec": 0, "pad": knobs["pad"].candidates.index(pad), "simd": 0}
    assert knobs["simd"].candidates[0] is True
    s, args = task.instantiate(choices)
    check(s, args, lambda x: pool_ref(x, 3, 2, 1, kind), rng)


def test_errors():
    with pytest.raises(ArgumentError, match="kind must be 'max' or 'avg'"):
        pool2d_llvm(1, 2, 8, 8, 2, 2, 0, "median")
    with pytest.raises(ArgumentError, match="does not fit"):
        pool2d_llvm(1, 2, 2, 2, 5, 1, 0, "max")
    with pytest.raises(ArgumentError, match="stride must be a positive int"):
        pool2d_llvm(1, 2, 8, 8, 2, -1, 0, "max")
