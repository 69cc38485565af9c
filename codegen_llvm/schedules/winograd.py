"""CPU template ``conv2d_winograd.llvm``: 3x3 stride-1 convolution by Winograd F(m x m, 3 x 3).

A direct 3x3 convolution already runs near the machine's peak multiply-add rate
(``conv2d_nchw.llvm``), so only fewer multiply-adds make it faster: Winograd's
minimal filtering computes an ``m x m`` output tile from an ``a x a`` input tile
(``a = m + 2``) with ``a * a`` products per channel pair instead of ``9 * m * m``,
2.25x fewer for ``m = 2`` and 4x fewer for ``m = 4`` (Lavin & Gray, 2015). The work
becomes one GEMM per tile position, over channels, between the transformed input
and the transformed weights, framed by cheap linear transforms:

1. ``X_tiles[n, h, w, c]``: the padded input in channels-last order (one gathering
   pass), so every later transform reads and writes whole channel vectors;
2. ``V[e1, e2, t, c] = (B^T d_{t,c} B)[e1, e2]`` for input tile ``t`` (vectorized
   over ``c``; the tile position loops are unrolled, so the coefficients fold and
   the row sums are shared between positions);
3. ``U[e1, e2, ob, c, z] = (G g_{o,c} G^T)[e1, e2]`` for ``o = ob * nr + z``: the
   weights, transformed straight into the GEMM's packed panels, on every call (a
   graph's constant weights are not yet transformed at compile time; that costs
   ``36 C O`` values per call, which is why the strategy keeps small images direct);
4. ``M[e1, e2, t, o] = sum_c V[e1, e2, t, c] * U[e1, e2, o, c]``: the batched GEMM,
   scheduled by the matmul template's register-blocked micro-kernel and knobs;
5. ``Y[n, y, x, o] = (A^T M_{t,o} A)[y % m, x % m]`` channels-last, then ``conv``,
   the NCHW result (plus ``bias[o]``): the stage a graph's elementwise tail is
   inlined into, a fused epilogue.

Float32 Winograd rounds differently from a direct sum: F(4x4) loses about one more
decimal digit than F(2x2) (the transforms scale values by up to 8 and 1/24), which
the tests bound (``tests/codegen_llvm/schedules/test_winograd.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction as F
from typing import Any

from ember.codegen_llvm.schedules.matmul import GemmTiles, define_gemm_knobs, schedule_gemm
from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.te.tensor import ComputeOp, Tensor
from ember.tuner.template import get_config, template

Matrix = Sequence[Sequence[F]]
ACC_LANES = 28 * 16  # accumulator lanes of the micro-kernel: 28 AVX-512 float registers
TRANSFORM_VECTOR = 16  # channel lanes of the transforms

# (B^T, G, A^T) of F(2x2, 3x3) and F(4x4, 3x3) (Lavin & Gray, "Fast Algorithms for
# Convolutional Neural Networks", 2015, with the interpolation points 0, +-1, +-2)
_H, _S, _T, _X = F(1, 2), F(1, 6), F(1, 12), F(1, 24)
MATRICES: dict[int, tuple[Matrix, Matrix, Matrix]] = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [_H, _H, _H], [_H, -_H, _H], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [F(1, 4), 0, 0],
            [-_S, -_S, -_S],
            [-_S, _S, -_S],
            [_X, _T, _S],
            [_X, -_T, _S],
            [0, 0, 1],
        ],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}


def _lin(coeffs: Sequence[Any], terms: Sequence[Any], dtype: str) -> Any:
    """``sum_k coeffs[k] * terms[k]`` over the nonzero coefficients, without multiplying
    by +-1 (the transforms are mostly additions)."""
    acc = None
    for c, term in zip(coeffs, terms):
        if c == 0:
            continue
        if abs(c) != 1:
            term, c = E.const(float(abs(c)), dtype) * term, (1 if c > 0 else -1)
        if acc is None:
            acc = term if c > 0 else E.const(0.0, dtype) - term
        else:
            acc = acc + term if c > 0 else acc - term
    return acc


def _pick(index: Any, values: Sequence[Any]) -> Any:
    """``values[index]`` for a loop variable ``index``: a select chain that folds to one
    value once the loop is unrolled."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = E.select(index == k, values[k], out)
    return out


def _sandwich(mat: Matrix, e1: Any, e2: Any, tap: Any, width: int, dtype: str) -> Any:
    """``(mat @ D @ mat^T)[e1, e2]`` with ``D[i][j] = tap(i, j)``: the inner row sums do
    not depend on ``e1``, so once both loops are unrolled they are computed once."""

    taps = [[tap(i, j) for j in range(width)] for i in range(width)]
    rows = [_pick(e2, [_lin(r, taps[i], dtype) for r in mat]) for i in range(width)]
    return _pick(e1, [_lin(r, rows, dtype) for r in mat])


class WinogradShape:
    """Sizes of a 3x3 stride-1 convolution and of its ``m x m`` output tiles."""

    def __init__(self, N: int, C: int, H: int, W: int, O: int, padding: Any, m: int) -> None:
        pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding)
        if len(pads) == 2:
            pads = (pads[0], pads[1], pads[0], pads[1])
        if len(pads) != 4 or any(not isinstance(p, int) or p < 0 for p in pads):
            raise ArgumentError(
                "conv2d_winograd.llvm: padding must be an int, (top/bottom, left/right) or "
                f"(top, left, bottom, right) of non-negative ints, got {padding!r}"
            )
        if m not in MATRICES:
            raise ArgumentError(f"conv2d_winograd.llvm: tile size must be 2 or 4, got {m!r}")
        self.N, self.C, self.H, self.W, self.O, self.m = N, C, H, W, O, m
        self.pt, self.pl, pb, pr = pads
        self.OH, self.OW = H + self.pt + pb - 2, W + self.pl + pr - 2
        if self.OH <= 0 or self.OW <= 0:
            raise ArgumentError(
                f"conv2d_winograd.llvm: a 3x3 kernel does not fit the padded {H}x{W} input; "
                f"the output would be {self.OH}x{self.OW}"
            )
        self.a = m + 2
        self.TH, self.TW = -(-self.OH // m), -(-self.OW // m)
        self.T = N * self.TH * self.TW

    def tile(self, t: Any) -> tuple[Any, Any, Any]:
        """``(n, ty, tx)`` of flat tile index ``t``."""
        return t // (self.TH * self.TW), (t // self.TW) % self.TH, t % self.TW


def define_winograd_knobs(N: int, C: int, H: int, W: int, O: int) -> tuple[int, GemmTiles]:
    """Define the knobs (tile size ``m`` and the GEMM's micro-kernel) and read them."""
    cfg = get_config()
    cfg.define_knob("m", [2, 4], default=4 if min(H, W) >= 8 else 2)
    tiles = define_gemm_knobs(max(N * H * W // 16, 2), O)
    lanes = -(-O // 16) * 16
    cfg.add_constraint(
        lambda c: c["nr"].val <= max(16, lanes), "a panel is no wider than the output channels"
    )
    cfg.add_constraint(
        lambda c: c["mr"].val * c["nr"].val <= ACC_LANES,
        "the accumulator tile fits the vector registers",
    )
    return cfg["m"].val, tiles


def winograd_input(X: Tensor, g: WinogradShape) -> Tensor:
    """``V[e1, e2, t, c]``: the transformed input tiles (via the channels-last copy)."""
    dtype = X.dtype
    rows, cols = g.TH * g.m + 2, g.TW * g.m + 2

    def pad(n, h, w, c):  # noqa: ANN001, ANN202
        y, x = h - g.pt, w - g.pl
        inside = E.logical_and(E.logical_and(y >= 0, y < g.H), E.logical_and(x >= 0, x < g.W))
        yy, xx = E.max_(E.min_(y, g.H - 1), 0), E.max_(E.min_(x, g.W - 1), 0)
        return E.select(inside, X[n, c, yy, xx], E.const(0, dtype))

    Xt = te.compute((g.N, rows, cols, g.C), pad, name="X_tiles", tag="pad")
    BT = MATRICES[g.m][0]

    def transform(e1, e2, t, c):  # noqa: ANN001, ANN202
        n, ty, tx = g.tile(t)
        return _sandwich(BT, e1, e2, lambda i, j: Xt[n, ty * g.m + i, tx * g.m + j, c], g.a, dtype)

    return te.compute((g.a, g.a, g.T, g.C), transform, name="V", tag="winograd_input")


def winograd_weights(Wt: Tensor, m: int, nr: int) -> Tensor:
    """``U[e1, e2, ob, c, z] = (G Wt[o, c] G^T)[e1, e2]`` for ``o = ob * nr + z`` (zero
    past the last channel): the weights transformed into the GEMM's packed panels."""
    O, C = (int(d.value) for d in Wt.shape[:2])  # type: ignore[attr-defined]
    G = MATRICES[m][1]
    a = m + 2

    def f(e1, e2, ob, c, z):  # noqa: ANN001, ANN202
        o = ob * nr + z
        safe = E.min_(o, O - 1)
        value = _sandwich(G, e1, e2, lambda i, j: Wt[safe, c, i, j], 3, Wt.dtype)
        return E.select(o < O, value, E.const(0, Wt.dtype))

    return te.compute((a, a, -(-O // nr), C, nr), f, name="U", tag="winograd_weights")


def winograd_conv(
    X: Tensor, U: Tensor, bias: Tensor | None, g: WinogradShape, tiles: GemmTiles
) -> Tensor:
    """The template's compute from the transformed weights ``U`` on: the batched GEMM
    ``M`` (tagged ``winograd_gemm``, its knobs in the op's attrs), the output transform
    ``Y`` and the NCHW result ``conv`` (plus ``bias[o]`` when given)."""
    V = winograd_input(X, g)
    dtype, nr = X.dtype, tiles.nr
    c = te.reduce_axis((0, g.C), name="c")

    def gemm(e1, e2, t, o):  # noqa: ANN001, ANN202
        return te.sum(V[e1, e2, t, c.var] * U[e1, e2, o // nr, c.var, o % nr], axis=c)

    knobs = {"m": g.m, "mr": tiles.mr, "nr": nr, "ku": tiles.ku, "nc_panels": tiles.nc_panels}
    M = te.compute((g.a, g.a, g.T, g.O), gemm, name="M", tag="winograd_gemm", attrs=knobs)
    AT = MATRICES[g.m][2]

    def output(n, y, x, o):  # noqa: ANN001, ANN202
        t = (n * g.TH + y // g.m) * g.TW + x // g.m
        tap = lambda i, j: M[i, j, t, o]  # noqa: E731
        return _sandwich(AT, y % g.m, x % g.m, tap, g.a, dtype)

    Y = te.compute((g.N, g.TH * g.m, g.TW * g.m, g.O), output, name="Y", tag="winograd_output")

    def nchw(n, o, y, x):  # noqa: ANN001, ANN202
        return Y[n, y, x, o] + bias[o] if bias is not None else Y[n, y, x, o]

    return te.compute((g.N, g.O, g.OH, g.OW), nchw, name="conv", tag="conv2d_winograd")


def schedule_winograd(s: Schedule, out: Tensor, M: Tensor) -> None:
    """Schedule every stage of a Winograd convolution whose GEMM is ``M`` (its knobs in
    the op's attrs) and whose NCHW result reaches ``out``, an output stage of shape
    (N, O, OH, OW) into which ``conv`` (and any elementwise epilogue) is inlined."""
    knobs = dict(M.op.attrs)
    m = knobs["m"]
    V, U = M.op.input_tensors
    tiles = GemmTiles(knobs["mr"], knobs["nr"], knobs["ku"], knobs["nc_panels"])
    schedule_gemm(s, M, None, tiles)
    (Xt,) = V.op.input_tensors
    # the copies and transforms: whole channel vectors, tile positions unrolled
    n, h, w, c = s[Xt].op.axis
    s[Xt].vectorize(s[Xt].split(c, factor=TRANSFORM_VECTOR)[1])
    s[Xt].parallel(s[Xt].fuse(n, h))
    e1, e2, t, c = s[V].op.axis
    co, ci = s[V].split(c, factor=TRANSFORM_VECTOR)
    _unrolled_positions(s[V], [t, co], [e1, e2], ci)
    if isinstance(U.op, ComputeOp):  # a placeholder U (pre-transformed) needs nothing
        e1, e2, ob, c, z = s[U].op.axis
        _unrolled_positions(s[U], [ob, c], [e1, e2], z)
    (Yt,) = [t for t in _producers(out) if getattr(t.op, "tag", "") == "winograd_output"]
    n, y, x, o = s[Yt].op.axis
    yo, yi = s[Yt].split(y, factor=m)
    xo, xi = s[Yt].split(x, factor=m)
    oo, oi = s[Yt].split(o, factor=TRANSFORM_VECTOR)
    s[Yt].reorder(n, yo, xo, oo, yi, xi, oi)
    s[Yt].unroll(yi)
    s[Yt].unroll(xi)
    s[Yt].vectorize(oi)
    s[Yt].parallel(s[Yt].fuse(n, yo))
    # the NCHW result: a gathering copy, rows in vectors
    n, o, y, x = s[out].op.axis
    s[out].vectorize(s[out].split(x, factor=TRANSFORM_VECTOR)[1])
    s[out].parallel(s[out].fuse(n, o))


def _unrolled_positions(st: Any, outer: list[Any], positions: list[Any], lanes: Any) -> None:
    """Loop order ``outer, positions, lanes``: the tile-position loops unrolled (so the
    select chains of :func:`_pick` fold), the lanes vectorized, ``outer`` parallel."""
    st.reorder(*outer, *positions, lanes)
    for p in positions:
        st.unroll(p)
    st.vectorize(lanes)
    st.parallel(st.fuse(*outer))


def _producers(t: Tensor) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    stack = [t]
    while stack:
        for p in getattr(stack.pop().op, "input_tensors", ()):
            if id(p.op) not in seen:
                seen[id(p.op)] = p
                stack.append(p)
    return list(seen.values())


@template("conv2d_winograd.llvm")
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
    """Schedule a Winograd convolution ending in ``out`` (of shape (N, O, OH, OW)): its
    NCHW stage and any elementwise stages between it and ``out`` are inlined into
    ``out`` (a fused epilogue: bias, residual add, ReLU), the rest as the template
    does. Returns the ids of the ops scheduled."""
    (M,) = [t for t in _producers(out) if getattr(t.op, "tag", "") == "winograd_gemm"]
    V, U = M.op.input_tensors
    inner = {id(op) for op in (M.op, V.op, V.op.input_tensors[0].op, U.op)}
    inner |= {id(t.op) for t in _producers(out) if getattr(t.op, "tag", "") == "winograd_output"}
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
    from ember.tuner.template import using_config

    N, C, H, W, O, padding, _ = args
    with using_config(cfg):
        m, tiles = define_winograd_knobs(N, C, H, W, O)
    g = WinogradShape(N, C, H, W, O, padding, m)
    return winograd_conv(X, winograd_weights(Wt, m, tiles.nr), bias, g, tiles)
