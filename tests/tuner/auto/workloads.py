"""Workload functions the auto-scheduling tests tune: module-level, so the measuring
worker imports them by module and name. Each returns the DAG's inputs, then outputs."""

from __future__ import annotations

from ember import te
from ember.tuner.auto import register_workload


@register_workload
def matmul_bias_relu(m: int, n: int, k: int) -> list:
    """relu(A @ B + bias): a matmul with an elementwise epilogue."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    bias = te.placeholder((n,), name="bias")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: c[i, j] + bias[j], name="D")
    e = te.compute((m, n), lambda i, j: te.max(d[i, j], 0.0), name="E")
    return [a, b, bias, e]


@register_workload
def matmul(m: int, n: int, k: int) -> list:
    """A @ B alone: the output has no epilogue to fuse (the cache_write rule)."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]


@register_workload
def row_sum(m: int, k: int) -> list:
    """Sums of a few long rows (the rfactor rule)."""
    a = te.placeholder((m, k), name="A")
    r = te.reduce_axis((0, k), name="k")
    s = te.compute((m,), lambda i: te.sum(a[i, r], axis=r), name="S")
    return [a, s]


@register_workload
def scale_add(m: int, n: int) -> list:
    """2 * A + b[j]: an elementwise chain with a broadcast."""
    a = te.placeholder((m, n), name="A")
    b = te.placeholder((n,), name="b")
    t = te.compute((m, n), lambda i, j: a[i, j] * 2.0, name="T")
    o = te.compute((m, n), lambda i, j: t[i, j] + b[j], name="O")
    return [a, b, o]


@register_workload
def conv2d_relu(c: int, h: int, w: int, f: int, kh: int) -> list:
    """A padded, stride-1 NCHW convolution (batch 1) with a ReLU."""
    x = te.placeholder((1, c, h, w), name="X")
    wt = te.placeholder((f, c, kh, kh), name="W")
    p = kh // 2
    pad = te.compute(
        (1, c, h + 2 * p, w + 2 * p),
        lambda n, ci, y, xx: te.if_then_else(
            te.all(y >= p, y < h + p, xx >= p, xx < w + p), x[n, ci, y - p, xx - p], 0.0
        ),
        name="pad",
    )
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    conv = te.compute(
        (1, f, h, w),
        lambda n, ff, y, xx: te.sum(
            pad[n, rc, y + ry, xx + rx] * wt[ff, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    out = te.compute((1, f, h, w), lambda *i: te.max(conv(*i), 0.0), name="relu")
    return [x, wt, out]


@register_workload
def softmax_rows(m: int, n: int) -> list:
    """Softmax over rows with its exponentials a stage of their own (read twice)."""
    a = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(a[i, k1], axis=k1), name="mx")
    ex = te.compute((m, n), lambda i, j: te.exp(a[i, j] - mx[i]), name="ex")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    out = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="out")
    return [a, out]


@register_workload
def norm_rows(m: int, n: int) -> list:
    """(A - mean) * rsqrt(mean square + 1) * g: a row reduction, an expensive per-row stage
    read by broadcast, and a broadcast operand."""
    a = te.placeholder((m, n), name="A")
    g = te.placeholder((n,), name="g")
    k1 = te.reduce_axis((0, n), name="k1")
    mean = te.compute((m,), lambda i: te.sum(a[i, k1] / n, axis=k1), name="mean")
    k2 = te.reduce_axis((0, n), name="k2")
    sq = te.compute((m,), lambda i: te.sum(a[i, k2] * a[i, k2] / n, axis=k2), name="sq")
    inv = te.compute((m,), lambda i: te.rsqrt(sq[i] + 1.0), name="inv")
    g2 = te.compute((n,), lambda j: g[j] * 2.0, name="g2")
    out = te.compute((m, n), lambda i, j: (a[i, j] - mean[i]) * inv[i] * g2[j], name="out")
    return [a, g, out]


@register_workload
def stencil_clip(c: int, n: int, taps: int) -> list:
    """A per-channel 1-D window (a depthwise conv's shape: reuse over a short reduction)
    with a ReLU6 over all but its last output, as Ember's depthwise conv computes a padded
    row and crops it (so the window's tile cannot fuse the epilogue)."""
    x = te.placeholder((c, n + taps - 1), name="X")
    wt = te.placeholder((c, taps), name="W")
    t = te.reduce_axis((0, taps), name="t")
    conv = te.compute((c, n), lambda i, j: te.sum(x[i, j + t] * wt[i, t], axis=t), name="C")
    out = te.compute((c, n - 1), lambda i, j: te.min(te.max(conv[i, j], 0.0), 6.0), name="O")
    return [x, wt, out]


@register_workload
def global_pool(c: int, h: int) -> list:
    """Global average pooling of (c, h, h) to (c, 1): one output per channel, no vector
    loop among the outputs (the reduction's vector lanes rule)."""
    x = te.placeholder((c, h, h), name="X")
    ry = te.reduce_axis((0, h), name="ry")
    rx = te.reduce_axis((0, h), name="rx")
    s = te.compute((c, 1), lambda i, j: te.sum(x[i, ry, rx + j], axis=[ry, rx]), name="S")
    return [x, te.compute((c, 1), lambda i, j: s[i, j] / (h * h), name="P")]
