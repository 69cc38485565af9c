"""ONNX optimizer steps (Adagrad, Adam, Momentum of ``ai.onnx.preview.training``),
TensorScatter, Swish and ``ai.onnx.ml`` Binarizer: operators whose definition is a short
formula, written here as that formula over Ember's elementwise ops.

They share a file because none needs an Ember op of its own: each converter is its
operator's pseudo code, one Ember op per line. The optimizer steps take a learning rate
``R`` and an update count ``T`` (scalars, read at run time and broadcast, so a new step
count needs no new compile), then ``n`` tensors ``X1..Xn``, their gradients ``G1..Gn`` and
each state for all ``n`` in turn (Adagrad's ``H``, Momentum's ``V``, Adam's ``V`` and
``H``), and give ``X_new1..n`` then the new states in the same order; ``T``'s branches
(``T > 0``) become ``where`` on scalars. TensorScatter, the KV-cache write,
is a gather seen from the cache: each cache position along the sequence axis works out
which update row lands on it (``position - write_index`` modulo the cache length) and
reads it, or keeps its old value when none does. Like onnxruntime, circular mode wraps
only the sequence index (ONNX's reference also wraps the batch and head indices, which
its own text does not ask for). In linear mode every written position ``write_index +
j`` must lie on the cache, a negative one counting from the end as in the reference's
numpy indexing: the first and last of them are looked up in the cache's positions with
a ``gather``, whose index check (``frontend/ops/index_bounds.py``) refuses a write off
the cache at run time, as onnxruntime does, instead of dropping it; the looked-up first
position, now on the cache, then wraps like a circular one.
"""

from __future__ import annotations

import math

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.ops_indexing import emit_slice
from ember.frontend.onnx_import.registry import converter
from ember.frontend.ops.registry import normalize_axis
from ember.tir import dtype as dt

TRAINING = "ai.onnx.preview.training"
STEP_DTYPES = ("float32", "float64")  # ONNX's T3 for the optimizer tensors


def _const(ctx: ConvertContext, value: float, dtype: str) -> str:
    return ctx.const(np.array(value, dtype=dtype))


def _scalar(ctx: ConvertContext, i: int, dtype: str) -> str:
    """Input ``i`` (a scalar, or one element of any rank) as a 0-d tensor of ``dtype``."""
    t = ctx.type(i)
    if not t.is_static or t.size != 1:
        raise ArgumentError(f"{ctx.op_type}: input {i} must be a scalar, got {t}")
    value = ctx.input(i)
    if t.ndim:
        value = ctx.emit1("reshape", [value], {"shape": ()})
    return value if t.dtype == dtype else ctx.emit1("cast", [value], {"dtype": dtype})


def _first_step(ctx: ConvertContext) -> tuple[str, str]:
    """``T`` as a 0-d tensor, and whether ``T > 0`` (a later step than the first)."""
    t_dtype = ctx.type(1).dtype
    t = _scalar(ctx, 1, t_dtype)
    return t, ctx.emit1("greater", [t, ctx.const(np.array(0, dtype=t_dtype))])


def _groups(ctx: ConvertContext, per_group: int) -> tuple[list[tuple[str, ...]], str]:
    """The (X, G, state...) groups after R and T, one per optimized tensor, and their dtype."""
    rest = ctx.num_inputs - 2
    n = rest // per_group
    if n < 1 or rest % per_group or ctx.num_outputs != (per_group - 1) * n:
        raise ArgumentError(
            f"{ctx.op_type}: {ctx.num_inputs} inputs and {ctx.num_outputs} outputs are not "
            f"R, T and groups of {per_group} tensors giving {per_group - 1} outputs each"
        )
    groups = [tuple(ctx.input(2 + k * n + i) for k in range(per_group)) for i in range(n)]
    dtypes = {ctx.type_of(v).dtype for g in groups for v in g}
    if len(dtypes) != 1 or not dtypes <= set(STEP_DTYPES):
        raise ArgumentError(
            f"{ctx.op_type}: optimized tensors of dtypes {sorted(dtypes)} are not supported "
            f"(one of {', '.join(STEP_DTYPES)})"
        )
    return groups, dtypes.pop()


def _regularized(ctx: ConvertContext, x: str, g: str, dtype: str) -> str:
    """``norm_coefficient * X + G``, the gradient of the L2 term added."""
    norm = float(ctx.attr("norm_coefficient", 0.0))
    scaled = ctx.emit1("multiply", [_const(ctx, norm, dtype), x])
    return ctx.emit1("add", [scaled, g])


def _interleave(per_output: list[list[str]]) -> list[str]:
    """Per-group outputs ``[[X1', H1'], [X2', H2']]`` as ONNX lists them: X1', X2', H1', H2'."""
    return [out[k] for k in range(len(per_output[0])) for out in per_output]


@converter("Adagrad", since=1, domain=TRAINING)
def adagrad(ctx: ConvertContext) -> list[str]:
    """ADAGRAD: ``X - R / (1 + T·decay) · G' / (sqrt(H + G'²) + epsilon)``."""
    groups, dtype = _groups(ctx, 3)
    decay = float(ctx.attr("decay_factor", 0.0))
    epsilon = _const(ctx, float(ctx.attr("epsilon", 1e-6)), dtype)
    steps = ctx.emit1("multiply", [_scalar(ctx, 1, dtype), _const(ctx, decay, dtype)])
    steps = ctx.emit1("add", [_const(ctx, 1.0, dtype), steps])
    rate = ctx.emit1("divide", [_scalar(ctx, 0, dtype), steps])
    outs = []
    for x, g, h in groups:
        g = _regularized(ctx, x, g, dtype)
        h_new = ctx.emit1("add", [h, ctx.emit1("multiply", [g, g])])
        root = ctx.emit1("add", [ctx.emit1("sqrt", [h_new]), epsilon])
        step = ctx.emit1("divide", [ctx.emit1("multiply", [rate, g]), root])
        outs.append([ctx.emit1("subtract", [x, step]), h_new])
    return _interleave(outs)


@converter("Momentum", since=1, domain=TRAINING)
def momentum(ctx: ConvertContext) -> list[str]:
    """SGD with standard or Nesterov momentum; ``beta`` counts from the second step."""
    groups, dtype = _groups(ctx, 3)
    mode = ctx.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise ArgumentError(f"Momentum: mode '{mode}' is not 'standard' or 'nesterov'")
    alpha = _const(ctx, float(ctx.attr("alpha")), dtype)
    _, later = _first_step(ctx)
    beta = _const(ctx, float(ctx.attr("beta")), dtype)
    beta = ctx.emit1("where", [later, beta, _const(ctx, 1.0, dtype)])
    rate = _scalar(ctx, 0, dtype)
    outs = []
    for x, g, v in groups:
        g = _regularized(ctx, x, g, dtype)
        v_new = ctx.emit1("multiply", [alpha, v])
        v_new = ctx.emit1("add", [v_new, ctx.emit1("multiply", [beta, g])])
        direction = v_new
        if mode == "nesterov":
            direction = ctx.emit1("add", [g, ctx.emit1("multiply", [alpha, v_new])])
        x_new = ctx.emit1("subtract", [x, ctx.emit1("multiply", [rate, direction])])
        outs.append([x_new, v_new])
    return _interleave(outs)


def _adam_rate(ctx: ConvertContext, alpha: float, beta: float, dtype: str) -> str:
    """``R·sqrt(1 - beta^T) / (1 - alpha^T)`` when ``T > 0``, else ``R`` (no bias
    correction). The powers see ``T = 1`` in place of 0 so the unused branch stays finite."""
    t, later = _first_step(ctx)
    t_dtype = ctx.type_of(t).dtype
    steps = ctx.emit1("where", [later, t, ctx.const(np.array(1, dtype=t_dtype))])
    if t_dtype != dtype:
        steps = ctx.emit1("cast", [steps], {"dtype": dtype})
    one = _const(ctx, 1.0, dtype)

    def one_minus_power(base: float) -> str:
        power = ctx.emit1("pow", [_const(ctx, base, dtype), steps])
        return ctx.emit1("subtract", [one, power])

    r = _scalar(ctx, 0, dtype)
    corrected = ctx.emit1("multiply", [r, ctx.emit1("sqrt", [one_minus_power(beta)])])
    corrected = ctx.emit1("divide", [corrected, one_minus_power(alpha)])
    return ctx.emit1("where", [later, corrected, r])


def _mix(ctx: ConvertContext, keep: float, old: str, new: str, dtype: str) -> str:
    """``keep · old + (1 - keep) · new``, an exponential moving average."""
    kept = ctx.emit1("multiply", [_const(ctx, keep, dtype), old])
    return ctx.emit1("add", [kept, ctx.emit1("multiply", [_const(ctx, 1 - keep, dtype), new])])


@converter("Adam", since=1, domain=TRAINING)
def adam(ctx: ConvertContext) -> list[str]:
    """Adam with bias correction from ``T > 0`` and optional post-update decay."""
    groups, dtype = _groups(ctx, 4)
    alpha, beta = float(ctx.attr("alpha", 0.9)), float(ctx.attr("beta", 0.999))
    epsilon = _const(ctx, float(ctx.attr("epsilon", 1e-6)), dtype)
    post = float(ctx.attr("norm_coefficient_post", 0.0))
    rate = _adam_rate(ctx, alpha, beta, dtype)
    outs = []
    for x, g, v, h in groups:
        g = _regularized(ctx, x, g, dtype)
        v_new = _mix(ctx, alpha, v, g, dtype)
        h_new = _mix(ctx, beta, h, ctx.emit1("multiply", [g, g]), dtype)
        root = ctx.emit1("add", [ctx.emit1("sqrt", [h_new]), epsilon])
        step = ctx.emit1("multiply", [rate, ctx.emit1("divide", [v_new, root])])
        x_new = ctx.emit1("subtract", [x, step])
        x_new = ctx.emit1("multiply", [_const(ctx, 1 - post, dtype), x_new])
        outs.append([x_new, v_new, h_new])
    return _interleave(outs)


def _scatter_shapes(ctx: ConvertContext, axis: int) -> tuple[tuple[int, ...], int]:
    """The cache's shape and the update's length along ``axis``, checked to fit."""
    cache, update = ctx.type(0), ctx.type(1)
    if not (cache.is_static and update.is_static):
        raise ArgumentError(f"TensorScatter: dynamic shapes ({cache}, {update}) are not supported")
    shape, upd = cache.dims, update.dims
    others_differ = any(a != b for d, (a, b) in enumerate(zip(shape, upd)) if d != axis)
    if len(shape) != len(upd) or others_differ or upd[axis] > shape[axis]:
        raise ArgumentError(
            f"TensorScatter: update {update} does not fit cache {cache} along axis {axis}"
        )
    return shape, upd[axis]


def _checked_start(ctx: ConvertContext, start: str, batch: int, size: int, length: int) -> str:
    """Each batch's linear write index as a cache position in ``[0, size)``, checked at
    run time: its first and last written rows (``start``, ``start + length - 1``) index
    the ``size`` cache positions through a ``gather``, which refuses one off the cache."""
    rows = ctx.const(np.array([0, length - 1], dtype=np.int64))
    ends = ctx.emit1("add", [ctx.emit1("reshape", [start], {"shape": (batch, 1)}), rows])
    positions = ctx.const(np.arange(size, dtype=np.int64))
    found = ctx.emit1("gather", [positions, ends], {"axis": 0})  # (batch, 2)
    first = emit_slice(ctx, found, (batch, 2), {1: (0, 1, 1)})
    return ctx.emit1("reshape", [first], {"shape": (batch,)})


@converter("TensorScatter", since=24)
def tensor_scatter(ctx: ConvertContext) -> list[str]:
    """The cache with ``update`` written along ``axis`` from each batch's write index."""
    ndim = ctx.type(0).ndim
    axis = normalize_axis(int(ctx.attr("axis", -2)), ndim, "TensorScatter axis")
    if axis == 0:
        raise ArgumentError("TensorScatter: axis 0 is the batch axis, not a sequence axis")
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ArgumentError(f"TensorScatter: mode '{mode}' is not 'linear' or 'circular'")
    shape, length = _scatter_shapes(ctx, axis)
    size = shape[axis]

    def int64(value: int) -> str:
        return ctx.const(np.array(value, dtype=np.int64))

    along = [1] * ndim
    along[axis] = size
    offset = ctx.const(np.arange(size, dtype=np.int64).reshape(along))  # cache positions
    if ctx.num_inputs > 2 and ctx.has_input(2):
        index_type = ctx.type(2)
        if index_type.shape != (shape[0],):
            raise ArgumentError(
                f"TensorScatter: write_indices {index_type} is not one per batch ({shape[0]})"
            )
        start = ctx.input(2)
        if index_type.dtype != "int64":
            start = ctx.emit1("cast", [start], {"dtype": "int64"})
        if mode == "linear":
            start = _checked_start(ctx, start, shape[0], size, length)
        start = ctx.emit1("reshape", [start], {"shape": (shape[0],) + (1,) * (ndim - 1)})
        offset = ctx.emit1("subtract", [offset, start])  # the update row each position gets
    offset = ctx.emit1("mod", [offset, int64(size)])
    written = ctx.emit1(
        "logical_and",
        [
            ctx.emit1("greater_equal", [offset, int64(0)]),
            ctx.emit1("less", [offset, int64(length)]),
        ],
    )
    row = ctx.emit1("where", [written, offset, int64(0)])
    if ctx.type_of(row).shape != shape:
        row = ctx.emit1("expand", [row], {"shape": shape})
    read = ctx.emit1("gather_elements", [ctx.input(1), row], {"axis": axis})
    return [ctx.emit1("where", [written, read, ctx.input(0)])]


@converter("Swish", since=24)
def swish(ctx: ConvertContext) -> list[str]:
    """``x · sigmoid(alpha · x)``."""
    x, dtype = ctx.input(0), ctx.type(0).dtype
    if not dt.is_float(dtype):
        raise ArgumentError(f"Swish: {dtype} input is not supported (floats only)")
    alpha = float(ctx.attr("alpha", 1.0))
    scaled = x if alpha == 1.0 else ctx.emit1("multiply", [_const(ctx, alpha, dtype), x])
    return [ctx.emit1("multiply", [x, ctx.emit1("sigmoid", [scaled])])]


def _integer_test(threshold: float, dtype: str) -> tuple[str, int]:
    """``x > threshold`` for integers ``x`` as a comparison with an integer in range."""
    info = np.iinfo(dtype)
    if math.isnan(threshold) or threshold >= info.max:
        return "greater", int(info.max)  # no element is above it
    if threshold < info.min:
        return "greater_equal", int(info.min)  # every element is
    return "greater_equal", math.floor(threshold) + 1


@converter("Binarizer", since=1, domain="ai.onnx.ml")
def binarizer(ctx: ConvertContext) -> list[str]:
    """1 where ``x > threshold``, else 0, in the input's dtype."""
    x, dtype = ctx.input(0), ctx.type(0).dtype
    threshold = float(ctx.attr("threshold", 0.0))
    if dt.is_int(dtype):
        op, bound = _integer_test(threshold, dtype)
        above = ctx.emit1(op, [x, ctx.const(np.array(bound, dtype=dtype))])
    elif dt.is_float(dtype):
        # the float32 attribute is exact in float32 and float64; narrower inputs widen to it
        wide = dtype if dtype == "float64" else "float32"
        xw = x if wide == dtype else ctx.emit1("cast", [x], {"dtype": wide})
        above = ctx.emit1("greater", [xw, _const(ctx, threshold, wide)])
    else:
        raise ArgumentError(f"Binarizer: {dtype} input is not supported (numbers only)")
    return [ctx.emit1("cast", [above], {"dtype": dtype})]
