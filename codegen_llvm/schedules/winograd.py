"""CPU template ``conv2d_winograd.llvm``: 3x3 stride-1 convolution by Winograd F(m x m, 3 x 3).

A direct 3x3 convolution already runs near the machine's peak multiply-add rate
(``conv2d_nchw.llvm``), so only fewer multiply-adds make it faster: Winograd's
minimal filtering computes an ``m x m`` output tile from an ``a x a`` input tile
(``a = m + 2``) with ``a * a`` products per channel pair instead of ``9 * m * m``,
2.25x fewer for ``m = 2`` and 4x fewer for ``m = 4`` (Lavin & Gray, 2015). The work
becomes one GEMM per tile position, over channels, between the transformed input
and the transformed weights, framed by cheap linear transforms. Each transform is
vectorized along the axis its data is contiguous in, so nothing is transposed by
gathers:

1. ``X_pad[n, c, h, w]``: the zero-padded input, one channel plane at a time (it
   stays in L1 for the input transform of that channel);
2. ``V[e1, e2, c, t] = (B^T d_{t,c} B)[e1, e2]`` for input tile ``t``, vectorized
   over a row of tiles (a tap of each tile in the row: one load with a stride of
   ``m``, a masked load and a shuffle); the tile position loops are unrolled, so the
   coefficients fold and the row sums are shared between positions;
3. ``U[e1, e2, ob, c, z] = (G g_{o,c} G^T)[e1, e2]`` for ``o = ob * nr + z``: the
   weights, transformed into the GEMM's packed panels on every call (a graph's
   constant weights are not yet transformed at compile time; that costs ``36 C O``
   values per call, which is why the strategy keeps small images direct);
4. ``M[e1, e2, t, o] = sum_c V[e1, e2, c, t] * U[e1, e2, o, c]``: the batched GEMM,
   tiles as its rows and output channels as its vector lanes, scheduled by the
   matmul template's register-blocked micro-kernel and knobs (the ``mr`` tiles a
   step broadcasts are neighbours in ``V``);
5. ``conv[n, o, y, x] = (A^T M_{t,o} A)[y % m, x % m]`` (plus ``bias[o]``), NCHW,
   a tile at a time with the channels along the lanes (its stores are scattered a
   plane apart): the stage a graph's elementwise tail is inlined into, a fused
   epilogue.

Version 1 transformed with the channels along the lanes throughout: a channels-last
copy of the input and an NHWC result, transposed by gathers. At two threads on
ResNet-18's 64->64 layer at 56x56 its input and output transforms took 0.12 and 0.19
ms against 0.07 and 0.07 now, and the whole kernel 0.77 ms against 0.57. Making the
tiles the GEMM's vector lanes as well (``M[e1, e2, o, t]``) made the transforms
cheap but the GEMM 2x slower: 196 tiles leave a partial panel, and its guard on
lanes inside the fused parallel loop was not partitioned away, so it was not
vectorized (the LLVM backend now versions such guards; that layout was not timed
again). Computing each row of tiles' ``V`` and ``M`` inside the output loop
(so they stay in cache) needs tighter bounds than bound inference gives today.

Float32 Winograd rounds differently from a direct sum: F(4x4) loses about one more
decimal digit than F(2x2) (the transforms scale values by up to 8 and 1/24), which
the tests bound (``tests/codegen_llvm/schedules/test_winograd.py``).
"""

from __future__ import annotations

from typing import Any

from ember.codegen_llvm.cpu_features import vector_unit
from ember.codegen_llvm.schedules.matmul import GemmTiles, define_gemm_knobs, schedule_gemm
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tir.topi.winograd import WinogradShape, winograd_conv2d, winograd_weights
from ember.tuner.template import get_config, template, using_config

TRANSFORM_VECTOR = 16  # channel lanes of the transforms


def define_winograd_knobs(N: int, C: int, H: int, W: int, O: int) -> tuple[int, GemmTiles]:
    """Define the knobs (tile size ``m`` and the GEMM's micro-kernel) and read them."""
    cfg = get_config()
    cfg.define_knob("m", [2, 4], default=4 if min(H, W) >= 8 else 2)
    tiles = define_gemm_knobs(max(N * H * W // 16, 2), O, whole_blocks=True)
    lanes = -(-O // 16) * 16
    cfg.add_constraint(
        lambda c: c["nr"].val <= max(16, lanes), "a panel is no wider than the output channels"
    )
    unit = vector_unit()  # all but 4 registers: 28 of AVX-512's 32, 12 of AVX2's 16
    acc_lanes = (unit.registers - 4) * unit.lanes("float32")
    cfg.add_constraint(
        lambda c: c["mr"].val * c["nr"].val <= acc_lanes,
        "the accumulator tile fits the vector registers",
    )
    return cfg["m"].val, tiles


def winograd_conv(
    X: Tensor, U: Tensor, bias: Tensor | None, g: WinogradShape, tiles: GemmTiles
) -> Tensor:
    """The template's compute from the transformed weights ``U`` on
    (:func:`~ember.tir.topi.winograd.winograd_conv2d`), the GEMM tagged with the knobs
    ``tiles`` of the micro-kernel that schedules it."""
    return winograd_conv2d(X, U, bias, g, knob_attrs(g.m, tiles))


def knob_attrs(m: int, tiles: GemmTiles) -> dict[str, int]:
    """The GEMM op's attrs (and a blocked Winograd node's knobs): tile size ``m`` and the
    micro-kernel ``tiles``, which :func:`schedule_winograd` reads back."""
    return {"m": m, "mr": tiles.mr, "nr": tiles.nr, "ku": tiles.ku, "nc_panels": tiles.nc_panels}


def schedule_winograd(s: Schedule, out: Tensor, M: Tensor) -> None:
    """Schedule every stage of a Winograd convolution whose GEMM is ``M`` (its knobs in
    the op's attrs) and whose result is ``out``, an output stage of shape (N, O, OH, OW),
    or (N, O/ob, OH, OW, ob) for the blocked variant, into which ``conv`` (and any
    elementwise epilogue) is inlined."""
    knobs = dict(M.op.attrs)
    V, U = M.op.input_tensors
    tiles = GemmTiles(knobs["mr"], knobs["nr"], knobs["ku"], knobs["nc_panels"])
    schedule_gemm(s, M, None, tiles)
    blocked = out.ndim == 5
    (_schedule_input_nchwc if blocked else _schedule_input)(s, V, out, knobs["m"])
    if isinstance(U.op, ComputeOp):  # a placeholder U (pre-transformed) needs nothing
        e1, e2, ob, c, z = s[U].op.axis
        s[U].reorder(ob, c, e1, e2, z)
        s[U].parallel(s[U].fuse(ob, c))
        _unroll_positions(s[U], [e1, e2], z, knobs["nr"])
    (_schedule_output_nchwc if blocked else _schedule_output)(s, out, knobs["m"])


def _schedule_input(s: Schedule, V: Tensor, out: Tensor, m: int) -> None:
    """The input transform, a channel at a time: its padded plane stays in L1."""
    (Xp,) = V.op.input_tensors
    tw = -(-int(out.shape[3].value) // m)  # type: ignore[attr-defined]
    e1, e2, c, t = s[V].op.axis
    row, tx = s[V].split(t, factor=tw)
    s[V].reorder(c, row, e1, e2, tx)
    s[V].parallel(c)
    _unroll_positions(s[V], [e1, e2], tx, tw)
    s[Xp].compute_at(s[V], c)
    *_, w = s[Xp].op.axis
    s[Xp].vectorize(s[Xp].split(w, factor=TRANSFORM_VECTOR)[1])


def _schedule_input_nchwc(s: Schedule, V: Tensor, out: Tensor, m: int) -> None:
    """The blocked input transform, a row of tiles and a channel block at a time, the
    block's lanes as the vector: the row's padded strip (``m + 2`` rows) stays in L1 and
    every load and store is contiguous."""
    (Xp,) = V.op.input_tensors
    cb = int(Xp.shape[4].value)  # type: ignore[attr-defined]
    tw = -(-int(out.shape[3].value) // m)  # type: ignore[attr-defined]
    e1, e2, t, c = s[V].op.axis  # type: ignore[attr-defined]
    row, tx = s[V].split(t, factor=tw)
    co, ci = s[V].split(c, factor=cb)
    s[V].reorder(row, co, tx, e1, e2, ci)
    s[V].parallel(row)
    _unroll_positions(s[V], [e1, e2], ci, cb)
    s[Xp].compute_at(s[V], co)
    *_, i = s[Xp].op.axis  # type: ignore[attr-defined]
    s[Xp].vectorize(s[Xp].split(i, factor=TRANSFORM_VECTOR)[1])


def _schedule_output(s: Schedule, out: Tensor, m: int) -> None:
    """The output transform, a tile at a time, channels along the lanes, stored NCHW."""
    n, o, y, x = s[out].op.axis
    ty, yi = s[out].split(y, factor=m)
    tx, xi = s[out].split(x, factor=m)
    oo, oi = s[out].split(o, factor=TRANSFORM_VECTOR)
    s[out].reorder(n, ty, tx, oo, yi, xi, oi)
    s[out].parallel(s[out].fuse(n, ty, tx))
    _unroll_positions(s[out], [yi, xi], oi, TRANSFORM_VECTOR)


def _schedule_output_nchwc(s: Schedule, out: Tensor, m: int) -> None:
    """The blocked output transform, a tile at a time, the block's lanes as the vector."""
    n, ok, y, x, oi = s[out].op.axis  # type: ignore[attr-defined]
    ob = int(out.shape[4].value)  # type: ignore[attr-defined]
    ty, yi = s[out].split(y, factor=m)
    tx, xi = s[out].split(x, factor=m)
    s[out].reorder(n, ok, ty, tx, yi, xi, oi)
    s[out].parallel(s[out].fuse(n, ok, ty))
    _unroll_positions(s[out], [yi, xi], oi, ob)


def _unroll_positions(st: Any, positions: list[Any], lanes: Any, extent: int) -> None:
    """The tile-position loops unrolled (so the select chains of the transforms, see
    ``ember.tir.topi.winograd._pick``, fold), ``lanes`` (of ``extent``) vectorized, in
    pieces of ``TRANSFORM_VECTOR`` when longer."""
    for p in positions:
        st.unroll(p)
    if extent > TRANSFORM_VECTOR:
        lo, lanes = st.split(lanes, factor=TRANSFORM_VECTOR)
        st.reorder(lo, *positions, lanes)
    st.vectorize(lanes)


def _producers(t: Tensor) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    stack = [t]
    while stack:
        for p in getattr(stack.pop().op, "input_tensors", ()):
            if id(p.op) not in seen:
                seen[id(p.op)] = p
                stack.append(p)
    return list(seen.values())


@template("conv2d_winograd.llvm", version=2)  # 2: transforms without gathers
def conv2d_winograd_llvm(
    N: int, C: int, H: int, W: int, O: int, padding: Any = 1, dtype: str = "float32"
) -> tuple[Schedule, list[Any]]:
    """``out[n, o, y, x] = sum_{c, ky, kx} X[n, c, y + ky - pt, x + kx - pl] *
    Wt[o, c, ky, kx]`` with zero padding, a 3x3 kernel and stride 1; X is (N, C, H, W),
    Wt is (O, C, 3, 3). The weight transform is part of the kernel (and its time)."""
    m, tiles = define_winograd_knobs(N, C, H, W, O)
    g = WinogradShape(N, C, H, W, O, padding, m)
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((O, C, 3, 3), dtype, name="W")
    U = winograd_weights(Wt, m, tiles.nr)
    out = winograd_conv(X, U, None, g, tiles)
    s = create_schedule(out.op)
    schedule_winograd_output(s, out)
    return s, [X, Wt, out]


def schedule_winograd_output(s: Schedule, out: Tensor) -> set[int]:
    """Schedule a Winograd convolution ending in ``out`` (of shape (N, O, OH, OW), or
    blocked (N, O/ob, OH, OW, ob)): its output stage and any elementwise stages between
    it and ``out`` are inlined into ``out`` (a fused epilogue: bias, residual add, ReLU),
    the rest as the template does. Returns the ids of the ops scheduled."""
    (M,) = [t for t in _producers(out) if getattr(t.op, "tag", "") == "winograd_gemm"]
    V, U = M.op.input_tensors
    inner = {id(op) for op in (M.op, V.op, V.op.input_tensors[0].op, U.op)}
    for st in list(s.stages):
        op = st.op
        if isinstance(op, ComputeOp) and op is not out.op and id(op) not in inner:
            if not op.reduce_axis:
                st.compute_inline()
    before = {id(st.op) for st in s.stages}
    schedule_winograd(s, out, M)
    return inner | {id(out.op)} | ({id(st.op) for st in s.stages} - before)


def winograd_for_call(
    X: Tensor, Wt: Tensor, bias: Tensor | None, args: tuple[Any, ...], cfg: Any
) -> Tensor:
    """The template's compute on given tensors (a graph's convolution), with the knobs
    ``cfg`` (a record's config, or a ``FallbackConfig``) chooses for the task ``args``."""

    N, C, H, W, O, padding, _ = args
    with using_config(cfg):
        m, tiles = define_winograd_knobs(N, C, H, W, O)
    g = WinogradShape(N, C, H, W, O, padding, m)
    return winograd_conv(X, winograd_weights(Wt, m, tiles.nr), bias, g, tiles)
