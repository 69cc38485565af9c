"""The streaming GEMV knobs of matmul.llvm (``gemv``, ``k_split``): every config on odd
shapes against numpy, K blocks that do not divide K, and a hypothesis test over the
one-row space."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from tests.codegen_llvm.schedules.template_helpers import task_of
from tests.nightly import examples
from tests.numerics import check


def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


def stream_config(task, k_split: int, nr: int, ku: int):  # noqa: ANN001, ANN201
    space = task.config_space
    choices = {n: k.default_index for n, k in space.knobs.items()}
    values = {"gemv": "stream", "k_split": k_split, "nr": nr, "ku": ku, "mr": 1}
    values.update(nc_panels=1, pack="none")
    for name, value in values.items():
        choices[name] = list(space.knobs[name].candidates).index(value)
    return space.from_choices(choices)


@pytest.mark.parametrize("k_split", [1, 2, 4, 8])
@pytest.mark.parametrize("shape", [(1, 37, 53), (1, 300, 17), (1, 16, 5)], ids=str)
def test_stream_configs_match_numpy(shape, k_split, rng):  # noqa: ANN001
    task = task_of("matmul.llvm", *shape, "float32")
    cfg = stream_config(task, k_split, nr=32, ku=4)
    assert cfg.is_valid()
    s, args = task.instantiate(cfg)
    check(s, args, ref, rng)


def test_stream_splits_k_across_threads_and_reads_rows_in_order():
    task = task_of("matmul.llvm", 1, 256, 64, "float32")
    s, args = task.instantiate(stream_config(task, 4, nr=64, ku=2))
    text = str(ember.lower(s, args))
    assert "parallel(" in text and "C.rf" in text


def test_only_one_row_products_have_the_knobs():
    assert "gemv" in task_of("matmul.llvm", 1, 64, 64, "float32").config_space.knobs
    assert "gemv" not in task_of("matmul.llvm", 2, 64, 64, "float32").config_space.knobs
    assert "gemv" not in task_of("dense.llvm", 1, 64, 64, "float32").config_space.knobs


def test_constraints_leave_no_duplicate_stream_programs():
    space = task_of("matmul.llvm", 1, 64, 64, "float32").config_space
    valid = [space.get(i) for i in range(len(space)) if space.get(i).is_valid()]
    stream = [c for c in valid if c["gemv"].val == "stream"]
    assert len(stream) == 6 * 4 * 4  # nr x ku x k_split
    assert len(valid) - len(stream) == 1728  # the tiled GEMM's space, unchanged


@settings(max_examples=examples(8), deadline=None)
@given(
    n=st.integers(1, 90),
    k=st.integers(1, 70),
    pick=st.integers(0, 10**6),
    stream=st.booleans(),
)
def test_any_one_row_config_matches_numpy(n, k, pick, stream):  # noqa: ANN001
    task = task_of("matmul.llvm", 1, n, k, "float32")
    space = task.config_space
    cfg = space.sample(np.random.default_rng(pick))
    if stream:  # a random streaming config (a small part of the space, so drawn apart)
        r = np.random.default_rng(pick)
        knobs = space.knobs
        pick_of = {name: knobs[name].candidates[r.integers(len(knobs[name]))] for name in knobs}
        cfg = stream_config(task, pick_of["k_split"], pick_of["nr"], pick_of["ku"])
    s, args = task.instantiate(cfg)
    check(s, args, ref, np.random.default_rng(pick), executors=("llvm",))
