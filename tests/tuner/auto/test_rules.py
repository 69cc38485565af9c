"""Each sketch rule on a small DAG: the sketches (symbolic step lists) it makes.

Symbols print as ``$knob[lo:hi]`` (the product of a split knob's factors lo..hi, outer
factor 0) or ``$knob`` (a choice knob's value); ``s<k>.`` prefixes sketch k's knobs.
"""

from __future__ import annotations

import pytest

from ember import te
from ember.errors import ConfigError
from ember.tir.topi import conv as conv_topi
from ember.tuner.auto import rules as R
from ember.tuner.auto.dag import DagInfo
from ember.tuner.auto.sketch import dag_info, generate_sketches
from tests.tuner.auto import workloads as w


def sketches(tensors, rules) -> dict[str, str]:
    return {sk.name: sk.describe() for sk in generate_sketches(tensors, rules)}


def test_dag_analysis_finds_reuse_injective_stages_and_the_epilogue():
    info: DagInfo = dag_info(w.matmul_bias_relu(6, 10, 7))
    c, d, e = info.stages["C"], info.stages["D"], info.stages["E"]
    assert c.has_reuse and c.reduce == (7,) and c.spatial == (6, 10) and not c.is_output
    assert d.injective and not d.has_reuse and e.is_output
    assert info.elementwise_consumer("C") == "E"  # through D, which is inlined
    conv = dag_info(w.conv2d_relu(3, 5, 5, 4, 3))
    assert conv.stages["conv"].has_reuse and conv.elementwise_consumer("conv") == "relu"
    rows = dag_info(w.row_sum(3, 70))  # every spatial loop indexes A: no reuse
    assert not rows.stages["S"].has_reuse and rows.stages["S"].reduce_size == 70


def test_a_transposing_consumer_is_not_fused():
    from tests.tuner.auto.random_dag import build

    tensors, _ = build([("matmul", 5), ("transpose", 1)], 3, 4)
    info = dag_info(tensors)
    assert info.elementwise_consumer("matmul0") is None


def test_a_cropping_consumer_is_not_fused():
    a = te.placeholder((6, 40), name="A")  # a long reduction: tiled, not done by rows
    b = te.placeholder((40, 5), name="B")
    k = te.reduce_axis((0, 40), name="k")
    c = te.compute((6, 5), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    crop = te.compute((3, 5), lambda i, j: c[i, j] + 1.0, name="crop")
    assert dag_info([a, b, crop]).elementwise_consumer("C") is None
    assert list(sketches([a, b, crop], R.CPU_RULES)) == ["cache+fuse1", "cache+fuse2", "tile"]


def test_rule_inline_and_rule_elementwise():
    assert sketches(w.scale_add(5, 7), [R.rule_inline, R.rule_elementwise]) == {
        "default": "split O 1 [$s0.O.vec[1:2]]\n"
        "fuse O [0,1]\n"
        "annotate O 0 $s0.O.parallel\n"
        "annotate O 1 $s0.O.vectorize\n"
        "compute_inline T"
    }


FUSED_TILE = (
    "split C 0 [$s{k}.C.tile0[1:2],$s{k}.C.tile0[2:3],$s{k}.C.tile0[3:4]]\n"
    "split C 4 [$s{k}.C.tile1[1:2],$s{k}.C.tile1[2:3],$s{k}.C.tile1[3:4]]\n"
    "split C 8 [$s{k}.C.rtile0[1:2]]\n"
    "reorder C [0,4,1,5,8,2,6,9,3,7]\n"  # S0 S1 R0 S2 R1 S3
)


def test_rule_tile_with_fusion_fuses_the_epilogue_at_two_levels():
    got = sketches(
        w.matmul_bias_relu(6, 10, 7),
        [R.rule_inline, R.rule_fused_consumer, R.rule_tile_with_fusion],
    )
    assert got == {
        "tile+fuse1": "compute_inline D\n"
        + FUSED_TILE.format(k=0)
        + "split E 0 [$s0.C.tile0[1:3],$s0.C.tile0[3:4]]\n"
        "split E 3 [$s0.C.tile1[1:3],$s0.C.tile1[3:4]]\n"
        "reorder E [0,3,1,4,2,5]\n"
        "fuse E [0,1]\n"
        "annotate E 0 $s0.E.parallel\n"
        "annotate E 4 $s0.E.vectorize\n"
        "compute_at C E 0\n"
        "annotate C 9 $s0.C.vectorize\n"
        "pragma C 0 auto_unroll_max_step $s0.C.unroll",
        "tile+fuse2": "compute_inline D\n"
        + FUSED_TILE.format(k=1)
        + "split E 0 [$s1.C.tile0[1:2],$s1.C.tile0[2:3],$s1.C.tile0[3:4]]\n"
        "split E 4 [$s1.C.tile1[1:2],$s1.C.tile1[2:3],$s1.C.tile1[3:4]]\n"
        "reorder E [0,4,1,5,2,6,3,7]\n"
        "fuse E [0,1]\n"
        "annotate E 0 $s1.E.parallel\n"
        "annotate E 6 $s1.E.vectorize\n"
        "compute_at C E 2\n"
        "annotate C 9 $s1.C.vectorize\n"
        "pragma C 0 auto_unroll_max_step $s1.C.unroll",
    }


def test_rule_cache_write_caches_an_output_or_tiles_it_alone():
    got = sketches(w.matmul(6, 10, 7), [R.rule_cache_write])
    assert list(got) == ["cache+fuse1", "cache+fuse2", "tile"]
    assert got["cache+fuse1"].splitlines()[:2] == [
        "cache_write C local",
        "split C.local 0 [$s0.C.local.tile0[1:2],$s0.C.local.tile0[2:3],$s0.C.local.tile0[3:4]]",
    ]
    assert "compute_at C.local C 0" in got["cache+fuse1"]
    assert "compute_at C.local C 2" in got["cache+fuse2"]
    assert got["tile"] == (
        FUSED_TILE.format(k=2) + "fuse C [0,1]\n"
        "annotate C 0 $s2.C.parallel\n"
        "annotate C 8 $s2.C.vectorize\n"
        "pragma C 0 auto_unroll_max_step $s2.C.unroll"
    )


def test_rule_rfactor_factors_a_reduction_over_few_outputs():
    got = sketches(w.row_sum(3, 70), [R.rule_rfactor])
    assert got == {
        "rfactor": "split S 1 [$s0.S.rfactor[1:2]]\n"
        "rfactor S 2 0\n"
        "fuse S.rf [0,1]\n"
        "annotate S.rf 0 $s0.S.rf.parallel\n"
        "pragma S.rf 0 auto_unroll_max_step $s0.S.rf.unroll",
        "reduce": "split S 0 [$s1.S.vec[1:2]]\n"
        "reorder S [0,2,1]\n"
        "annotate S 0 $s1.S.parallel\n"
        "annotate S 2 $s1.S.vectorize\n"
        "pragma S 0 auto_unroll_max_step $s1.S.unroll",
    }


def test_rule_rfactor_leaves_wide_or_short_reductions_alone():
    rules = [R.rule_rfactor, R.rule_reduction]
    assert list(sketches(w.row_sum(40, 70), rules)) == ["reduce"]  # enough rows
    # short rows: not factored across the cores; 3 outputs make no vector loop: lanes
    assert list(sketches(w.row_sum(3, 20), rules)) == ["reduce", "reduce+lanes"]


def test_all_cpu_rules_on_a_conv_with_padding_and_relu():
    got = sketches(w.conv2d_relu(3, 5, 5, 4, 3), R.CPU_RULES)
    assert list(got) == ["tile+fuse1", "tile+fuse2", "tile+fuse1+pad", "tile+fuse2+pad"]
    first = got["tile+fuse1"].splitlines()
    assert first[-1] == "compute_inline pad"  # stages are visited from the output back
    # 4 spatial loops in 4 levels, 3 reduction loops in 2: S0 S1 R0 S2 R1 S3
    assert first[7] == "reorder conv [0,4,8,12,1,5,9,13,16,18,20,2,6,10,14,17,19,21,3,7,11,15]"
    assert first[13:17] == [
        "fuse relu [0,1,2,3]",
        "annotate relu 0 $s0.relu.parallel",
        "annotate relu 8 $s0.relu.vectorize",
        "compute_at conv relu 0",
    ]


def test_rule_padding_inlines_or_copies_a_convs_padding_first():
    """The padding a conv reads: inlined, or a padded copy at the root with its outer loops
    fused and parallel; the conv's sketches are the same either way."""
    got = sketches(w.conv2d_relu(3, 5, 5, 4, 3), R.CPU_RULES)
    inlined, copied = got["tile+fuse1"].splitlines(), got["tile+fuse1+pad"].splitlines()
    assert inlined[-1] == "compute_inline pad"
    assert copied[-2:] == ["fuse pad [0,1,2]", "annotate pad 0 parallel"]
    assert [x.replace("$s2.", "$s0.") for x in copied[:-2]] == inlined[:-1]
    # Ember's topi tags its padding; a pad read by no reuse stage (an add) is inlined
    x = te.placeholder((1, 2, 6, 6), name="X")
    pad = conv_topi.pad_spatial(x, (1, 1), (1, 1))
    add = te.compute(pad.shape, lambda *i: pad[i] + 1.0, name="add")
    assert R.rule_padding(None, dag_info([x, add]), "pad") is None
    wt = te.placeholder((3, 2, 3, 3), name="W")
    out = conv_topi.conv_nd(x, wt, None, (1, 1), (1, 1, 1, 1), (1, 1))
    conv = dag_info([x, wt, out])
    assert [v[0] for v in R.rule_padding(None, conv, "conv_pad")] == ["", "pad"]


def test_a_symbolic_extent_is_a_config_error():
    n = te.var("n")
    a = te.placeholder((n, 4), name="A")
    b = te.compute((n, 4), lambda i, j: a[i, j] + 1.0, name="B")
    with pytest.raises(ConfigError, match="constant loop extents"):
        generate_sketches([a, b], R.CPU_RULES)


def test_an_expensive_stage_is_not_inlined_where_it_would_be_repeated():
    soft = dag_info(w.softmax_rows(5, 24))  # exp read by the sum and by the output
    assert soft.stages["ex"].expensive and not soft.should_inline("ex")
    norm = dag_info(w.norm_rows(3, 7))  # rsqrt of a row read by every element of it
    assert not norm.should_inline("inv")
    assert norm.should_inline("g2")  # cheap: inlined whatever reads it
    chain = dag_info(w.scale_add(5, 7))
    assert chain.should_inline("T") and not chain.should_inline("O")  # O is the output


def test_row_producers_are_the_kept_stages_read_within_a_row():
    assert dag_info(w.softmax_rows(5, 24)).row_producers("out") == ["mx", "ex", "sm"]
    assert dag_info(w.norm_rows(3, 7)).row_producers("out") == ["mean", "sq", "inv"]
    assert dag_info(w.scale_add(5, 7)).row_producers("O") is None  # nothing kept
    assert dag_info(w.matmul_bias_relu(6, 10, 40)).row_producers("E") is None  # tiled
    # a short reduction with reuse (a 3-tap stencil's window) is computed row by row
    assert dag_info(w.matmul_bias_relu(6, 10, 3)).row_producers("E") == ["C"]
    a = te.placeholder((6, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    s = te.compute((6,), lambda i: te.sum(a[i, k], axis=k), name="S")
    across = te.compute((6, 6), lambda i, j: a[i, j] / s[j], name="O")  # another row's sum
    assert dag_info([a, across]).row_producers("O") is None


def test_rule_reduce_at_rows_computes_softmax_at_the_row_loop():
    got = sketches(w.softmax_rows(5, 24), [R.rule_reduce_at_rows])
    row = (
        "split out 1 [$s{k}.out.vec]\n"
        "annotate out 2 $s{k}.out.vectorize\n"
        "annotate out 0 $s{k}.out.parallel\n"
    )
    want = {
        "rows": row.format(k=0) + "compute_at mx out 0\n"
        "split ex 1 [$s0.ex.vec]\n"
        "annotate ex 2 $s0.ex.vectorize\n"
        "compute_at ex out 0\n"
        "compute_at sm out 0",
        "rows+rf": row.format(k=1) + "split mx 1 [$s1.mx.lanes]\n"
        "rfactor mx 2 1\n"  # mx.rf[i, lane] = max over the outer part
        "reorder mx.rf [0,2,1]\n"  # lanes innermost ...
        "annotate mx.rf 2 $s1.mx.rf.vectorize\n"  # ... and vectorized
        "compute_at mx.rf out 0\n"
        "compute_at mx out 0\n"
        "split ex 1 [$s1.ex.vec]\n"
        "annotate ex 2 $s1.ex.vectorize\n"
        "compute_at ex out 0\n"
        "split sm 1 [$s1.sm.lanes]\n"
        "rfactor sm 2 1\n"
        "reorder sm.rf [0,2,1]\n"
        "annotate sm.rf 2 $s1.sm.rf.vectorize\n"
        "compute_at sm.rf out 0\n"
        "compute_at sm out 0",
    }
    assert got == want
    space = generate_sketches(w.softmax_rows(5, 24), [R.rule_reduce_at_rows])[1].knobs
    assert space["s1.sm.lanes"].candidates == (8, 4)  # the vector widths dividing 24


def test_rule_reduce_at_rows_on_a_norm_with_odd_rows():
    got = sketches(w.norm_rows(3, 7), R.CPU_RULES)
    assert list(got) == ["rows", "rows+rf"]
    # no vector width divides 7: a split knob; the per-row rsqrt is not split
    assert got["rows"].splitlines() == [
        "split out 1 [$s0.out.vec[1:2]]",
        "annotate out 2 $s0.out.vectorize",
        "annotate out 0 $s0.out.parallel",
        "compute_at mean out 0",
        "compute_at sq out 0",
        "compute_at inv out 0",
        "compute_inline g2",
    ]


@pytest.mark.parametrize("make", [w.softmax_rows, w.norm_rows, w.stencil_clip, w.global_pool])
def test_row_sketches_compute_what_numpy_does(make):
    import numpy as np

    import ember
    from ember.tuner.auto.space import define_sketch_space, steps_for
    from ember.tuner.auto.steps import apply_steps
    from ember.tuner.space import ConfigSpace

    m, n = 5, 24
    if make is w.global_pool:
        n = 7  # 49 values: no vector width divides them (an odd split)
    args = (m, n, 3) if make is w.stencil_clip else (m, n)
    sks = generate_sketches(make(*args), R.CPU_RULES)
    space = ConfigSpace()
    define_sketch_space(space, sks)
    space.freeze()
    rng = np.random.default_rng(3)
    a = rng.uniform(-2, 2, (m, n)).astype("float32")
    g = rng.uniform(-2, 2, n).astype("float32")
    if make is w.softmax_rows:
        e = np.exp(a - a.max(1, keepdims=True))
        want, ins = e / e.sum(1, keepdims=True), [a]
    elif make is w.stencil_clip:
        x, wt = rng.uniform(-9, 9, (m, n + 2)).astype("float32"), a[:, :3].copy()
        want = np.clip(sum(x[:, t : t + n] * wt[:, t : t + 1] for t in range(3)), 0, 6)
        ins, want = [x, wt], want[:, :-1]
    elif make is w.global_pool:
        x = rng.uniform(-2, 2, (m, n, n)).astype("float32")
        want, ins = x.mean((1, 2))[:, None], [x]
    else:
        mean, sq = a.mean(1, keepdims=True), (a * a).mean(1, keepdims=True)
        want, ins = (a - mean) / np.sqrt(sq + 1) * g * 2, [a, g]
    for pick in range(len(sks)):
        cfg = space.from_choices({**space.sample(pick).choices, "sketch": pick})
        s, tensors = apply_steps(make(*args), steps_for(cfg, sks))
        out = np.full(want.shape, np.nan, "float32")
        ember.build(s, tensors, target="llvm")(*ins, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_rule_reduce_at_rows_vectorizes_a_stencil_across_its_row():
    tensors = w.stencil_clip(4, 16, 3)
    assert dag_info(tensors).stages["C"].has_reuse
    # the crop keeps the window's tiles from fusing the epilogue; no sum without a row of
    # its own, so no rfactor variant
    assert sketches(tensors, R.CPU_RULES) == {
        "rows": "split O 1 [$s0.O.vec[1:2]]\n"  # 15: no vector width divides it
        "annotate O 2 $s0.O.vectorize\n"
        "annotate O 0 $s0.O.parallel\n"
        "split C 1 [$s0.C.vec]\n"
        "reorder C [0,1,3,2]\n"  # the window's loop between the row's parts
        "annotate C 3 $s0.C.vectorize\n"
        "annotate C 2 $s0.C.unroll\n"
        "compute_at C O 0"
    }


def test_rule_reduction_adds_vector_lanes_where_the_outputs_have_no_vector_loop():
    got = sketches(w.global_pool(6, 4), [R.rule_inline, R.rule_reduction, R.rule_elementwise])
    assert list(got) == ["reduce", "reduce+lanes"]
    assert got["reduce+lanes"].splitlines()[4:] == [
        "fuse S [2,3]",  # the 4 x 4 window: 16 values ...
        "split S 2 [$s1.S.lanes]",  # ... in 16, 8 or 4 lanes
        "rfactor S 3 2",
        "reorder S.rf [0,1,3,2]",
        "annotate S.rf 3 $s1.S.rf.vectorize",
        "fuse S [0,1]",
        "annotate S 0 $s1.S.parallel",
        "compute_at S.rf S 0",
    ]
    rules = [R.rule_rfactor, R.rule_reduction]
    assert list(sketches(w.row_sum(40, 70), rules)) == ["reduce"]  # 40 outputs in a row
