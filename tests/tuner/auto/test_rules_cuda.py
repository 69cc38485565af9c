"""The CUDA sketch rules on small DAGs: the sketches they make, and each run on the
SIMT emulator against numpy with knob values drawn at random."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.tuner.auto.rules_cuda import CUDA_RULES
from ember.tuner.auto.sketch import generate_sketches
from ember.tuner.auto.space import define_sketch_space, steps_for
from ember.tuner.auto.steps import apply_steps
from ember.tuner.space import ConfigSpace
from tests.tuner.auto import workloads as w


def sketches(tensors) -> dict[str, str]:
    return {sk.name: sk.describe() for sk in generate_sketches(tensors, CUDA_RULES)}


def test_rule_tile_gpu_binds_tiles_and_stages_the_inputs_in_shared_memory():
    got = sketches(w.matmul_bias_relu(6, 10, 7))
    assert list(got) == ["tile+fuse"]
    assert got["tile+fuse"].splitlines() == [
        "compute_inline D",
        "split C 0 [$s0.C.tile0[1:2],$s0.C.tile0[2:3],$s0.C.tile0[3:4]]",
        "split C 4 [$s0.C.tile1[1:2],$s0.C.tile1[2:3],$s0.C.tile1[3:4]]",
        "split C 8 [$s0.C.rtile0[1:2],$s0.C.rtile0[2:3]]",
        "reorder C [0,4,1,5,8,9,2,6,10,3,7]",  # S0 S1 R0 R1 S2 R2 S3
        "split E 0 [$s0.C.tile0[1:2],$s0.C.tile0[2:4]]",
        "split E 3 [$s0.C.tile1[1:2],$s0.C.tile1[2:4]]",
        "reorder E [0,3,1,4,2,5]",
        "fuse E [0,1]",
        "bind E 0 blockIdx.x",
        "fuse E [1,2]",
        "bind E 1 threadIdx.x",
        "compute_at C E 1",
        "cache_read A shared [C]",
        "compute_at A.shared C 4",
        "fuse A.shared [0,1]",
        "split A.shared 0 [$s0.C.tile0[1:2]*$s0.C.tile1[1:2]]",  # cooperative fetching
        "bind A.shared 1 threadIdx.x",
        "cache_read B shared [C]",
        "compute_at B.shared C 4",
        "fuse B.shared [0,1]",
        "split B.shared 0 [$s0.C.tile0[1:2]*$s0.C.tile1[1:2]]",
        "bind B.shared 1 threadIdx.x",
        "pragma C 0 auto_unroll_max_step $s0.C.unroll",
    ]
    assert "cache_write C local" in sketches(w.matmul(6, 10, 7))["cache+tile"]


def test_rule_reduction_gpu_makes_a_cross_thread_and_a_per_thread_sketch():
    assert sketches(w.row_sum(3, 70)) == {
        "cross-thread": "split S 1 [$s0.S.reduce_threads]\n"
        "bind S 2 threadIdx.x\n"
        "bind S 0 blockIdx.x",
        "thread-per-output": "split S 0 [$s1.S.threads]\n"
        "bind S 0 blockIdx.x\n"
        "bind S 1 threadIdx.x\n"
        "pragma S 0 auto_unroll_max_step $s1.S.unroll",
    }


def test_rule_elementwise_gpu_spreads_the_fused_loops_over_blocks_and_threads():
    assert sketches(w.scale_add(5, 7)) == {
        "default": "fuse O [0,1]\n"
        "split O 0 [$s0.O.threads]\n"
        "bind O 0 blockIdx.x\n"
        "bind O 1 threadIdx.x\n"
        "compute_inline T"
    }


def test_a_block_never_gets_more_than_1024_threads():
    space = ConfigSpace()
    define_sketch_space(space, generate_sketches(w.matmul(64, 64, 8), CUDA_RULES))
    space.freeze()
    for seed in range(20):
        cfg = space.sample(seed)
        t0, t1 = cfg["s0.C.local.tile0"].size, cfg["s0.C.local.tile1"].size
        assert t0[1] * t1[1] <= 1024 and t0[2] * t0[3] * t1[2] * t1[3] <= 64


@pytest.mark.parametrize(
    ("workload", "args", "sketch", "reference"),
    [
        (w.matmul_bias_relu, (7, 12, 5), "tile+fuse", lambda a, b, c: np.maximum(a @ b + c, 0)),
        (w.row_sum, (3, 70), "cross-thread", lambda a: a.sum(1)),
    ],
)
def test_sketches_run_on_the_emulator_and_match_numpy(workload, args, sketch, reference):
    sks = generate_sketches(workload(*args), CUDA_RULES)
    space = ConfigSpace()
    define_sketch_space(space, sks)
    space.freeze()
    k = [sk.name for sk in sks].index(sketch)
    for seed in range(10):
        cfg = space.from_choices({**space.sample(seed).choices, "sketch": k})
        if cfg.is_valid():
            break
    s, tensors = apply_steps(workload(*args), steps_for(cfg, sks))
    mod = ember.build(s, tensors, target="cuda")
    rng = np.random.default_rng(k)
    arrays = [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype("float32") for t in tensors]
    arrays[-1][...] = np.nan
    mod.emulate(*arrays)
    np.testing.assert_allclose(arrays[-1], reference(*arrays[:-1]), rtol=1e-4, atol=1e-4)
