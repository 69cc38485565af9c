"""CPU template ``conv2d_winograd_NCHWc.llvm``: the kernel a graph's blocked Winograd
convolution runs, as a tuning task.

A 3x3 stride-1 convolution of a graph runs blocked (NCHW[c]) and on weights that
``transform_winograd_weights`` transformed at compile time (``conv_winograd_nchwc``); the
NCHW template ``conv2d_winograd.llvm`` transforms its weights on every call and reads
and writes NCHW, so its timings are not this kernel's. Tuning ResNet-18 with it measured
the 128-channel layer's untuned kernel at 1.09 ms where the model's took 0.42, and
picks that looked 1.3-1.7x faster made the model no faster. This template takes the
blocked input and the transformed weights ``U`` (``[a, a, ceil(O/nr), C/cb * cb, nr]``)
as its inputs, with the graph's channel blocks among its arguments, and is scheduled as
the graph's kernel is (:func:`.winograd.schedule_winograd_output`). Its knobs are
``conv2d_winograd.llvm``'s. A config with another tile size or panel width reads another
``U``, so the measurer checks each against :func:`winograd_nchwc_reference`, Winograd's
algebra in numpy on the same random ``U``: it needs no weights, and it shares no code
with the compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.codegen_llvm.schedules.winograd import (
    define_winograd_knobs,
    knob_attrs,
    schedule_winograd_output,
)
from ember.tir.schedule.schedule import Schedule, create_schedule
from ember.tir.te import operation as te
from ember.tir.topi.winograd import MATRICES, WinogradShape, winograd_conv2d_nchwc
from ember.tuner.template import template

TEMPLATE = "conv2d_winograd_NCHWc.llvm"


def winograd_nchwc_reference(X: np.ndarray, U: np.ndarray, workload: tuple[Any, ...]) -> np.ndarray:
    """The blocked output from the blocked ``X`` and transformed weights ``U`` by numpy,
    in float64: each input tile's ``B^T d B``, the products with ``U`` summed over every
    blocked channel, each result tile's ``A^T M A``; the tile size and panel width are read
    from ``U``'s shape."""
    N, C, H, W, O, padding, _, _, ob = workload
    a = U.shape[0]
    g = WinogradShape(N, C, H, W, O, padding, a - 2)
    BT, _, AT = (np.array(mat, dtype=np.float64) for mat in MATRICES[g.m])
    _, CB, _, _, cb = X.shape
    x = X.transpose(0, 1, 4, 2, 3).reshape(N, CB * cb, H, W).astype(np.float64)
    xp = np.zeros((N, CB * cb, g.TH * g.m + 2, g.TW * g.m + 2))
    xp[:, :, g.pt : g.pt + H, g.pl : g.pl + W] = x  # whole tiles cover pt + H rows and more
    tiles = np.empty((N, CB * cb, g.TH, g.TW, a, a))
    for i in range(a):
        for j in range(a):
            tiles[..., i, j] = xp[:, :, i : i + g.TH * g.m : g.m, j : j + g.TW * g.m : g.m]
    V = np.einsum("pi,qj,ncyxij->pqncyx", BT, BT, tiles)
    OB = -(-O // ob)
    u = U.astype(np.float64).transpose(0, 1, 2, 4, 3).reshape(a, a, -1, CB * cb)[:, :, : OB * ob]
    M = np.einsum("pqncyx,pqoc->pqnoyx", V, u)
    Y = np.einsum("kp,lq,pqnoyx->noykxl", AT, AT, M).reshape(N, OB * ob, g.TH * g.m, g.TW * g.m)
    out = Y[:, :, : g.OH, : g.OW].reshape(N, OB, ob, g.OH, g.OW).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(out.astype(X.dtype))


@template(TEMPLATE, reference=winograd_nchwc_reference)
def conv2d_winograd_nchwc_llvm(
    N: int,
    C: int,
    H: int,
    W: int,
    O: int,
    padding: Any = 1,
    dtype: str = "float32",
    ic_bn: int = 16,
    oc_bn: int = 16,
) -> tuple[Schedule, list[Any]]:
    """``conv[n, o // oc_bn, y, x, o % oc_bn]``: the blocked Winograd convolution of ``X``
    (``[N, C/ic_bn, H, W, ic_bn]``) with the transformed weights ``U``, a 3x3 kernel and
    stride 1, as a graph's ``conv_winograd_nchwc`` node computes it."""
    m, tiles = define_winograd_knobs(N, C, H, W, O)
    g = WinogradShape(N, C, H, W, O, padding, m)
    CB, OB = -(-C // ic_bn), -(-O // oc_bn)
    X = te.placeholder((N, CB, H, W, ic_bn), dtype, name="X")
    U = te.placeholder((g.a, g.a, -(-OB * oc_bn // tiles.nr), CB * ic_bn, tiles.nr), dtype, "U")
    out = winograd_conv2d_nchwc(X, U, None, g, oc_bn, knob_attrs(m, tiles))
    s = create_schedule(out.op)
    schedule_winograd_output(s, out)
    return s, [X, U, out]
