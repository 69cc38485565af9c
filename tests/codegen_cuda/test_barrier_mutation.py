"""Every barrier of every GPU template is needed: drop any one and the emulator reports a race.

Each template registered for CUDA is built with its fallback config on a small
workload (not a multiple of the tiles where that is cheap); then each barrier of
each kernel is removed in turn and the emulator must raise ``RaceError`` on
random inputs. The number of barriers is not fixed here, since schedules change
(a pipelined K loop needs fewer than a plain one) while the property does not:
a template that stages through shared memory has at least one barrier and none
to spare; one that reads global memory directly has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import ember
from ember.codegen_cuda.module import CUDAModule
from ember.tir import dtype as dt
from ember.tir import stmt as S
from ember.tir.functor import post_order_visit
from ember.tuner import create_task
from ember.tuner.template import registered_templates
from tests.codegen_cuda.test_cuda_build import _DropBarrier

CASES: list[tuple[str, tuple[Any, ...]]] = [
    ("matmul.cuda", (64, 64, 32, "float32")),  # pipelined
    ("matmul.cuda", (70, 50, 33, "float32")),
    ("batch_matmul.cuda", (2, 17, 13, 9, "float32")),
    ("conv2d_nchw.cuda", (1, 3, 9, 11, 5, 3, 3, 2, 1, 1, "float32")),
    ("conv2d_nchw.cuda", (2, 16, 8, 8, 12, 3, 3, 1, 1, 1, "float32")),  # pipelined
    ("conv2d_nchw_gemm.cuda", (2, 5, 7, 9, 6, 3, 3, 1, 1, 1, "float32")),  # zero-filled copies
    ("depthwise_conv2d_nchw.cuda", (1, 3, 9, 11, 3, 3, 2, 1, "float32")),
    ("elementwise_chain.cuda", (4, 100, "float32")),
    ("layer_norm.cuda", (2, 37, 1e-5, "float32")),
    ("layer_norm.cuda", (2, 300, 1e-5, "float32")),
    ("pool2d.cuda", (1, 3, 9, 11, (3, 3), (2, 2), 1, "max", "float32")),
    ("reduce.cuda", (2, 37, "sum", "float32")),
    ("reduce.cuda", (3, 300, "max", "float32")),
    ("softmax.cuda", (2, 37, "float32")),
    ("softmax.cuda", (2, 300, "float32")),
    # tensor cores: the barrier between the cp.async stage and ldmatrix, and the one between
    # the accumulator's shared tile and the epilogue
    ("matmul_tensorcore.cuda", (37, 53, 29)),
    ("matmul_tensorcore.cuda", (40, 24, 100)),  # pipelined over 4 K steps
    ("batch_matmul_tensorcore.cuda", (2, 17, 13, 40)),
    ("conv2d_nhwc_tensorcore.cuda", (1, 7, 9, 13, 19, 3, 3, 2, 1)),  # zero-filled im2col
]

# One thread per output, reading global memory directly: nothing is shared, nothing to wait for.
WITHOUT_SHARED = {"depthwise_conv2d_nchw.cuda", "elementwise_chain.cuda", "pool2d.cuda"}


def _count(kernel: S.PrimFunc, kind: type) -> int:
    found: list[Any] = []
    post_order_visit(kernel.body, lambda n: found.append(n) if isinstance(n, kind) else None)
    return len(found)


def _shared_allocations(kernel: S.PrimFunc) -> int:
    found: list[Any] = []

    def visit(n: Any) -> None:
        if isinstance(n, S.Allocate) and n.buffer.scope == "shared":
            found.append(n)

    post_order_visit(kernel.body, visit)
    return len(found)


def _case_id(case: tuple[str, tuple[Any, ...]]) -> str:
    name, args = case
    return f"{name.split('.')[0]}-" + "x".join(str(a) for a in args if isinstance(a, int))


def test_every_cuda_template_has_a_case():
    import ember.codegen_cuda.schedules  # noqa: F401 - registers the templates

    # auto-scheduled workloads register generic "auto/..." templates: their sketches are
    # checked by tests/tuner/auto (every CUDA sketch run in the emulator, race-checked)
    hand_written = {n for n in registered_templates("cuda") if not n.startswith("auto/")}
    assert {name for name, _ in CASES} == hand_written


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_dropping_any_one_barrier_is_a_race(rng, case):
    name, args = case
    task = create_task(name, args=args, target="cuda")
    s, tensors = task.instantiate()  # the fallback config
    mod = ember.build(s, tensors, target="cuda")
    params = mod.signatures[0].params
    inputs = [rng.uniform(-1, 1, p.shape).astype(dt.numpy_dtype(p.dtype)) for p in params]
    mod.emulate(*[x.copy() for x in inputs])  # the intact kernels are race-free

    program = mod.program
    barriers = [_count(k, S.Barrier) for k in program.kernels]
    if name in WITHOUT_SHARED:
        assert sum(barriers) == 0 and not any(map(_shared_allocations, program.kernels))
        return
    assert all(_shared_allocations(k) for k in program.kernels), "expected shared staging"
    assert all(n >= 1 for n in barriers), barriers

    unnoticed = []
    for at, kernel in enumerate(program.kernels):
        for index in range(barriers[at]):
            broken = _DropBarrier(index).visit_func(kernel)
            assert _count(broken, S.Barrier) == barriers[at] - 1
            kernels = program.kernels[:at] + (broken,) + program.kernels[at + 1 :]
            mutant = CUDAModule(dataclasses.replace(program, kernels=kernels), mod.arch)
            try:
                mutant.emulate(*[x.copy() for x in inputs])
            except ember.RaceError:
                continue
            unnoticed.append(f"barrier {index} of {barriers[at]} in kernel '{kernel.name}'")
    assert not unnoticed, f"{name}{args}: dropping these went unnoticed: {unnoticed}"
