"""The passes under the tensor-core templates: ``swizzle_shared``'s layout and
``lower_warp_memory`` (the templates' end-to-end tests are in test_tensorcore_templates.py)."""

from __future__ import annotations

import pytest

from ember.codegen_cuda.transform.lower_warp_memory import lower_warp_memory
from ember.codegen_cuda.transform.swizzle_shared import swizzle_index
from ember.errors import LoweringError
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tir.ir_builder import IRBuilder


@pytest.mark.parametrize("width", [16, 32, 64, 128])
def test_swizzle_permutes_whole_chunks_within_each_row(width):
    rows = 16
    seen = set()
    for r in range(rows):
        row = [swizzle_index(r, c, width) for c in range(width)]
        assert sorted(row) == list(range(r * width, (r + 1) * width))
        for c in range(0, width, 8):  # a 16-byte chunk stays whole and in order
            assert row[c : c + 8] == list(range(row[c], row[c] + 8)) and row[c] % 8 == 0
        seen.update(row)
    assert len(seen) == rows * width


@pytest.mark.parametrize("width", [16, 32, 64, 128])
def test_swizzle_puts_an_ldmatrix_phase_in_eight_bank_groups(width):
    """8 consecutive rows at one 16-byte column: 8 distinct 16-byte slots of a 128-byte line."""
    for r0 in range(0, 32, 8):
        for c in range(0, width, 8):
            slots = {swizzle_index(r0 + i, c, width) * 2 // 16 % 8 for i in range(8)}
            assert len(slots) == 8, (width, r0, c)


def _kernel(size: int, index: int) -> S.PrimFunc:
    ib = IRBuilder()
    out = ib.param((32,), "float32", name="out")
    with ib.for_range(0, 32, name="tx", kind="thread_binding", thread_tag="threadIdx.x") as tx:
        acc = ib.allocate((size,), "float32", scope="warp", name="acc")
        ib.store(acc, index, 1.0)
        ib.store(out, tx, acc[index])
    return ib.get_func("k", attrs=(("kernel", True), ("launch", ((1, 1, 1), (32, 1, 1)))))


def _allocs(func: S.PrimFunc) -> list:
    found: list = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, S.Allocate) else None)
    return found


def test_warp_buffer_becomes_each_lanes_share():
    func = lower_warp_memory(_kernel(64, 1))
    (alloc,) = _allocs(func)
    assert alloc.buffer.scope == "local" and int(alloc.buffer.shape[0].value) == 2
    scopes: list[str] = []
    post_order_visit(
        func.body, lambda n: scopes.append(n.buffer.scope) if isinstance(n, S.BufferStore) else None
    )
    assert "warp" not in scopes


WARP_ERRORS = [(64, 2, "past a lane's share"), (48, 0, "multiple of the 32 lanes")]


@pytest.mark.parametrize(("size", "index", "match"), WARP_ERRORS)
def test_warp_buffer_errors(size, index, match):
    with pytest.raises(LoweringError, match=match):
        lower_warp_memory(_kernel(size, index))
