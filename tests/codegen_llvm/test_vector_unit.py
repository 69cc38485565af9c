"""Register tiles follow the target's vector registers (AVX-512's 32 of 64 bytes, AVX2's 16
of 32), read from the target in scope (``with Target(...)``, entered by ``ember.compile``
and by a tuning task), never assumed.

Tiles sized for AVX-512 on an AVX2 CPU (an AMD EPYC Zen 3 host) spilled: ResNet-18's
3x3 conv kernel stored 517 registers to the stack around its 360 multiply-adds.
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import ember
from ember.codegen_llvm.cpu_features import AVX2, AVX512, VectorUnit, vector_unit
from ember.frontend.passes.conv_blocks import channel_block, target_lanes
from ember.frontend.passes.pack_dense_weights import panel_width
from ember.target import Target
from ember.tir.topi.conv_nchwc import blocks
from ember.tuner.task import create_task

V3, V4 = "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"
x86 = pytest.mark.skipif(
    not ember.target.host_cpu_model() or "x86" not in __import__("platform").machine(),
    reason="x86-64 levels",
)


@x86
def test_levels_and_the_scope() -> None:
    assert vector_unit(V4) == AVX512 and vector_unit(V3) == AVX2
    assert vector_unit("llvm -mcpu=x86-64") == VectorUnit(16, 16)
    assert vector_unit("llvm -mcpu=x86-64-v3 -mattr=+avx512f") == AVX512
    assert vector_unit("llvm -mcpu=skylake-avx512") == AVX512  # named: by its name
    assert vector_unit("cuda") == vector_unit("llvm")  # not a CPU: the host's
    with Target(V3):
        assert vector_unit() == AVX2 and target_lanes() == 8
        with Target(V4):
            assert vector_unit() == AVX512 and target_lanes() == 16
        assert vector_unit() == AVX2
    assert Target.current() is None


@x86
def test_the_scope_is_per_thread() -> None:
    seen: list[VectorUnit] = []
    with Target(V4):
        t = threading.Thread(target=lambda: seen.append(vector_unit()))
        t.start()
        t.join()
    assert seen == [vector_unit("llvm")]  # the other thread saw no scope: the host's


def test_accumulator_budgets() -> None:
    assert AVX512.accumulators == (24, 16)  # as measured before the budgets were per CPU
    assert AVX2.accumulators == (13, 12)
    assert AVX2.lanes("float32") == 8 and AVX512.lanes("float16") == 32


@x86
@pytest.mark.parametrize("target,unit", [(V3, AVX2), (V4, AVX512)])
@pytest.mark.parametrize(
    "args",
    [
        (1, 64, 56, 56, 64, 3, 3, 1, 1),
        (1, 960, 7, 7, 160, 1, 1, 1, 0),
        (1, 3, 224, 224, 32, 3, 3, 2, 1),
        (1, 24, 15, 17, 40, 5, 5, 1, 2),
    ],
)
def test_conv_defaults_fit_the_targets_registers(target, unit, args) -> None:  # noqa: ANN001
    """The NCHWc template's default tile and its whole space hold the accumulators in the
    target's registers; blocks are the layout pass's for the same target."""
    task = create_task("conv2d_NCHWc.llvm", args, target=target)
    space = task.config_space
    lanes, (most, default) = unit.lanes("float32"), unit.accumulators
    d = space.default_entity()
    assert d["ow_bn"].val * blocks(d["oc_bn"].val, lanes) <= default
    with Target(target):
        assert d["oc_bn"].val == channel_block(args[4])
    for k in range(0, len(space), max(1, len(space) // 200)):
        c = space.get(k)
        if not space.violations(c):
            assert c["ow_bn"].val * blocks(c["oc_bn"].val, lanes) <= most


@x86
def test_gemm_defaults_fit_the_targets_registers() -> None:
    """The default micro-kernel takes 6 rows of 4 AVX-512 or 2 AVX2 registers, at most the
    accumulators the unit allows, and its code spills none of them (at a size its tiles
    divide and at one they do not)."""
    for target, unit in ((V3, AVX2), (V4, AVX512)):
        for shape in ((64, 512, 256), (61, 500, 256)):
            task = create_task("matmul.llvm", (*shape, "float32"), target=target)
            d = task.config_space.default_entity()
            regs = d["mr"].val * -(-d["nr"].val // unit.lanes("float32"))
            assert d["mr"].val == unit.gemm_rows == 6
            assert regs <= unit.accumulators[0], (target, d)
            s, tensors = task.instantiate()
            asm = ember.build(s, tensors, target=target).get_source("asm")
            assert _spills(asm) == 0 and re.search(r"vfmadd\w+", asm), (target, shape)
        with Target(target):
            assert panel_width(1000) == d["nr"].val == {AVX2: 16, AVX512: 64}[unit]


def _spills(asm: str) -> int:
    return len(re.findall(r"vmov[ua]ps\s+%[xyz]mm\d+, -?\d*\(%rsp\)", asm))


@x86
def test_an_avx2_conv_kernel_does_not_spill(rng) -> None:
    """Built for AVX2 (runs on any x86-64-v3 host), the default kernel of ResNet-18's 3x3
    conv at 14x14 keeps its tile in registers and computes the right numbers."""
    args = (1, 64, 14, 14, 64, 3, 3, 1, 1, 1, "float32")
    task = create_task("conv2d_NCHWc.llvm", args, target=V3)
    s, tensors = task.instantiate()
    f = ember.build(s, tensors, target=V3)
    asm = f.get_source("asm")
    # tiled for AVX-512 it stored 517 registers around 360 multiply-adds; the few left
    # (44 around 684) are in the row edges' code, none in a tile sized for 16 registers
    assert _spills(asm) * 8 < len(re.findall(r"vfmadd\w+", asm))
    if f.cannot_run_here is not None:
        pytest.skip(f.cannot_run_here)
    x, w, out = (t for t in tensors)
    X = rng.standard_normal([int(d) for d in x.shape]).astype("float32")
    W = rng.standard_normal([int(d) for d in w.shape]).astype("float32")
    got = np.full([int(d) for d in out.shape], np.nan, "float32")
    f(X, W, got)
    want = task.template.reference(X, W, task.args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@x86
@pytest.mark.parametrize("target", [V3, V4], ids=["avx2", "avx512"])
def test_a_grouped_pointwise_kernel_keeps_its_tile_in_registers(target) -> None:
    """ShuffleNet v1's grouped 1x1 conv (480 -> 120 channels in 3 groups at 14x14), built as
    a graph builds it: four rows of four 16-lane vectors took 32 of AVX2's 16 registers."""
    from ember.codegen_llvm.schedules.generic import schedule_group
    from ember.codegen_llvm.strategy import CPU_STRATEGY
    from ember.tir.te import operation as te

    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 3}
    with Target(target):
        x = te.placeholder((1, 480, 14, 14), "float32", name="x")
        w = te.placeholder((120, 160, 1, 1), "float32", name="w")
        outs, impl = CPU_STRATEGY.compute("conv", [x, w], attrs, None)
        s = schedule_group(outs, [impl])
        asm = ember.build(s, [x, w, outs[0]], target=target).get_source("asm")
    assert len(re.findall(r"vfmadd\w+", asm)) >= 12
    assert _spills(asm) == 0


@pytest.mark.parametrize("target", [V3, V4], ids=["avx2", "avx512"])
def test_grouped_1x1_convs_in_part_register_blocks_stay_nchw(target, rng) -> None:
    """ShuffleNet v1's 4-group 1x1 convs (68 channels a group) after a blocked conv: only a
    block of 4 divides 68, half an AVX2 register, so they run NCHW's grouped 1x1 template
    on AVX2 as on AVX-512 (whose blocks do not divide 68 at all)."""
    from onnx import helper

    from ember.frontend.passes import alter_conv_layout, run_graph_passes
    from tests.frontend.onnx_models import make_model, run_ort

    w = {
        "A": rng.standard_normal((272, 8, 3, 3)).astype("float32") * 0.2,
        "G": rng.standard_normal((272, 68, 1, 1)).astype("float32") * 0.2,
    }
    nodes = [
        helper.make_node("Conv", ["x", "A"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "G"], ["y"], group=4),
    ]
    x = rng.standard_normal((1, 8, 9, 9)).astype("float32")
    model = make_model(nodes, {"x": x}, ["y"], w)
    with Target(target):
        graph = run_graph_passes(ember.frontend.from_onnx(model), [alter_conv_layout])
    convs = [(nd.op, nd.attrs.get("group")) for nd in graph.nodes if nd.op.startswith("conv")]
    assert convs == [("conv_nchwc", None), ("conv", 4)]
    got = ember.compile(model, target="llvm").run({"x": x})[0]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_value_chunks_fit_the_accumulators() -> None:
    """Fused attention's ``P V`` tile: rows x chunk within the default accumulator budget,
    a whole number of registers dividing the head dim where one does."""
    from ember.codegen_llvm.schedules.attention import value_chunk

    with Target(V4):
        assert value_chunk(4, 64) == 64  # 4 x 4 of AVX-512's registers: unchanged
        assert value_chunk(4, 80) == 64  # then 16: no wide whole number of registers divides 80
    with Target(V3):
        assert value_chunk(4, 64) == 16  # 4 x 2 of AVX2's 16, not 4 x 8
        assert value_chunk(4, 80) == 16
        assert value_chunk(1, 64) == 64
        assert value_chunk(4, 24) == 24
        assert value_chunk(4, 8) == 8


@x86
@pytest.mark.parametrize("target", [V3, V4], ids=["avx2", "avx512"])
def test_the_attention_kernel_keeps_its_tiles_in_registers(target, rng) -> None:
    """ViT's attention (12 heads of 64, 197 positions) built for each target: its tiles
    stay in registers. On AVX2 the ``P V`` tile of 4 rows x 64 took 32 of its 16 registers (4.8 ms
    a call on a Zen 3 core; 2.5 ms with tiles of 4 x 16)."""
    from ember.codegen_llvm.schedules.attention import flash_attention
    from ember.tir.schedule.schedule import create_schedule
    from ember.tir.te import operation as te
    from ember.tir.topi.attention import AttentionLayout

    with Target(target):
        q, k, v = (te.placeholder((1, 12, 197, 64), "float32", name=n) for n in "qkv")
        out = flash_attention(q, k, v, None, 0.125, AttentionLayout())
        f = ember.build(create_schedule(out.op), [q, k, v, out], target=target)
    asm = f.get_source("asm")
    assert len(re.findall(r"vfmadd\w+", asm)) >= 16
    # before: 73 spill stores on AVX2 and 30 on AVX-512; AVX2's 3 left are constants
    # saved once before the loops, AVX-512's 6-row tiles save the rows' inverse sums once
    # a tile, around the loop of multiply-adds
    assert _spills(asm) <= 6
    blocks = re.split(r"\n\.LBB\d+_\d+:|\n\tj\w+\s[^\n]*", asm)  # at labels and jumps
    assert not any(_spills(b) for b in blocks if re.search(r"vfmadd\w+", b))


def test_depthwise_row_tiles_leave_no_lone_pixel() -> None:
    """The depthwise template's default row tile: a dividing tile of 4 or more, else the
    whole row where it fits. MobileNetV2's 7-pixel rows ran 6 + 1 on AVX2 (39 us for 960
    channels on a Zen 3 core against 15 in one tile of 7)."""
    from ember.codegen_llvm.schedules.depthwise_conv2d_nchwc import default_row_tile

    assert [default_row_tile(ow, 1, AVX2) for ow in (7, 14, 28, 56, 112)] == [7, 6, 4, 4, 4]
    assert [default_row_tile(ow, 1, AVX512) for ow in (7, 14, 28, 56, 112)] == [7, 7, 7, 8, 8]
    assert default_row_tile(13, 1, AVX2) == 6  # 13 is no tile size: the widest that fits


def test_cache_sizes_are_read_from_the_cpus_cache_description(tmp_path) -> None:
    """``l2_bytes`` reads the host's L2 from Linux's cache description (a Zen 3 guest: 512
    KB, an Intel Xeon guest: 2 MB); a folder naming no such level, or one it cannot
    parse, gives None, and a CPU other than the host's the default."""
    from ember.codegen_llvm.cpu_features import DEFAULT_L2_BYTES, host_cache_bytes, l2_bytes

    def index(n: int, level: int, kind: str, size: str) -> None:
        folder = tmp_path / f"index{n}"
        folder.mkdir()
        for name, text in (("level", f"{level}\n"), ("type", f"{kind}\n"), ("size", f"{size}\n")):
            (folder / name).write_text(text)

    index(0, 1, "Data", "48K")
    index(1, 1, "Instruction", "32K")
    index(2, 2, "Unified", "512K")
    index(3, 3, "Unified", "32768K")
    assert host_cache_bytes(1, tmp_path) == 48 << 10  # the data cache, not the instructions
    assert host_cache_bytes(2, tmp_path) == 512 << 10
    assert host_cache_bytes(3, tmp_path) == 32 << 20
    assert host_cache_bytes(4, tmp_path) is None
    assert host_cache_bytes(2, tmp_path / "missing") is None
    (tmp_path / "index2" / "size").write_text("lots\n")
    assert host_cache_bytes(2, tmp_path) is None
    assert l2_bytes("llvm -mcpu=x86-64-v3") == DEFAULT_L2_BYTES  # not this CPU: unknown
    assert l2_bytes() >= 64 << 10


def test_named_zen_cpus_have_their_l2() -> None:
    """A target named for a Zen CPU other than the host's sizes its tiles by that CPU's
    L2 (Zen 3 512 KB, Zen 4 1 MB); the host's own comes from ``/sys``."""
    from ember.codegen_llvm.cpu_features import host_cpu, l2_bytes

    for cpu, size in (("znver3", 512 << 10), ("znver4", 1 << 20)):
        if host_cpu()[0] != cpu:
            assert l2_bytes(f"llvm -mcpu={cpu}") == size
