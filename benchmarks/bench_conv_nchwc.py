"""The ResNet-18 3x3 layers: ``conv2d_NCHWc.llvm`` beside ``conv2d_nchw.llvm`` and onnxruntime.

Run: ``python benchmarks/bench_conv_nchwc.py`` (``--quick`` for the 64->64 56x56 layer
only). Default (fallback) knobs of both templates; each result is checked against
onnxruntime first. The NCHWc kernel is timed on blocked tensors, as the graph runs it
once ``alter_conv_layout`` has blocked the activations (the layout transforms at the
graph's boundaries are not in this figure). Ratios are peer time / NCHWc time.
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_cpu import CONVS, best_time, build, onnx_conv, ort_session, time_module

from ember.tir.topi.conv_nchwc import pack_nchwc_weights


def _blocked(x: np.ndarray, cb: int) -> np.ndarray:
    n, c, h, w = x.shape
    cbs = -(-c // cb)
    padded = np.zeros((n, cbs * cb, h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cbs, cb, h, w).transpose(0, 1, 3, 4, 2))


def _build_blocked(args: tuple) -> tuple[object, int, int]:
    """The NCHWc template's module for ``args`` and its (ic_bn, oc_bn)."""
    import ember
    from ember.tuner import create_task

    sch, tensors = create_task("conv2d_NCHWc.llvm", args=args, target="llvm").instantiate()
    x, w = tensors[0], tensors[1]
    icb, ocb = int(x.shape[4].value), int(w.shape[5].value)
    return ember.build(sch, tensors, target="llvm", name="conv2d_nchwc"), icb, ocb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args()
    rng = np.random.default_rng(0)
    print("3x3 pad 1 fp32, all threads (GFLOP/s; ratio = peer time / NCHWc time)")
    print(f"{'layer':24s}{'NCHWc':>8s}{'NCHW tmpl':>16s}{'onnxruntime':>16s}")
    for C, H, W, O, stride in CONVS[:1] if ns.quick else CONVS:
        OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
        flops = 2.0 * O * OH * OW * C * 9
        args = (1, C, H, W, O, 3, 3, stride, 1, 1, "float32")
        x = rng.standard_normal((1, C, H, W), dtype=np.float32)
        w = rng.standard_normal((O, C, 3, 3), dtype=np.float32)
        sess = ort_session(onnx_conv(C, H, W, O, stride, w))
        want = sess.run(None, {"X": x})[0]
        blk, icb, ocb = _build_blocked(args)
        xb, wb = _blocked(x, icb), pack_nchwc_weights(w, icb, ocb)
        yb = np.empty((1, -(-O // ocb), OH, OW, ocb), np.float32)
        blk(xb, wb, yb)
        np.testing.assert_allclose(yb, _blocked(want, ocb), rtol=2e-3, atol=2e-3)
        t = time_module(blk, xb, wb, yb)
        flat = build("conv2d_nchw.llvm", args)
        y = np.empty((1, O, OH, OW), np.float32)
        t_flat = time_module(flat, x, w, y)
        t_ort = best_time(lambda s=sess, x=x: s.run(None, {"X": x}))
        cells = [f"{C},{H}x{W}->{O},s{stride} ic{icb}/oc{ocb}", f"{flops / t / 1e9:8.1f}"]
        for tp in (t_flat, t_ort):
            cells.append(f"{flops / tp / 1e9:8.1f} {tp / t:5.2f}x")
        print(" ".join(cells), flush=True)


if __name__ == "__main__":
    main()
