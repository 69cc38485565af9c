"""ResNet-18's 64->64 3x3 layer at 56x56: the conv templates beside onnxruntime.

Run: ``python benchmarks/bench_conv.py [--threads 2] [--trials 0] [--tune nchwc,winograd]
[--configs m=4,mr=4,...]`` (``--shape N,C,H,W,O`` for another 3x3 stride-1 pad-1 layer).
In one process, with one thread count for everyone (``EMBER_NUM_THREADS`` and
onnxruntime's ``intra_op_num_threads``), it builds the fallbacks of ``conv2d_nchw.llvm``
(direct, NCHW), ``conv2d_NCHWc.llvm`` (direct on channel-blocked tensors, as a graph
runs it once ``alter_conv_layout`` has blocked the activations: the layout transforms
at a graph's boundaries are not in its time) and ``conv2d_winograd.llvm`` (weight
transform included in its time), any Winograd ``--configs`` given, and a one-node
ONNX ``Conv`` model in onnxruntime, checks every output against onnxruntime's, then
times them interleaved (``--rounds`` rounds, the best round each: the machine is
shared, so the fastest round is the least disturbed), with a pause after each
onnxruntime round so its spinning threads are idle again. Printed: each kernel's
time and its ratio to the direct fallback and to onnxruntime. With ``--trials N`` it
first tunes the ``--tune`` tasks with ``ember.tuner.tune`` (TPE, isolated measuring
workers, records in ``--records``) and times the best config of each beside the others.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

ORT_SPIN_PAUSE_S = 0.1


def ort_session(w: np.ndarray, x_shape: tuple[int, ...], threads: int) -> Any:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def blocked_runner(task: Any, cfg: Any, x: np.ndarray, w: np.ndarray) -> tuple[Any, Any]:
    """A ``conv2d_NCHWc.llvm`` runner on ``x`` and ``w`` blocked as ``cfg`` asks, and a
    function giving its output back in NCHW."""
    from ember.tir.topi.conv_nchwc import pack_nchwc_weights

    _, args = task.instantiate(cfg)
    icb, ocb = int(args[0].shape[4].value), int(args[1].shape[5].value)
    n, c, h, wd = x.shape
    padded = np.zeros((n, -(-c // icb) * icb, h, wd), x.dtype)
    padded[:, :c] = x
    xb = np.ascontiguousarray(padded.reshape(n, -1, icb, h, wd).transpose(0, 1, 3, 4, 2))
    run, out = ember_runner(task, cfg, xb, pack_nchwc_weights(w, icb, ocb))

    def nchw() -> np.ndarray:
        flat = out.transpose(0, 1, 4, 2, 3).reshape(out.shape[0], -1, *out.shape[2:4])
        return flat[:, : w.shape[0]]

    return run, nchw


def ember_runner(task: Any, cfg: Any, x: np.ndarray, w: np.ndarray) -> tuple[Any, np.ndarray]:
    import ember
    from ember.runtime.aligned import aligned_array, aligned_copy

    s, args = task.instantiate(cfg)
    mod = ember.build(s, args, target="llvm")
    out = aligned_array([int(d.value) for d in args[-1].shape], "float32")
    fn = mod.get_function(mod.entry_name)
    # on cache lines, as a compiled model's arrays are (ember.graph.executor)
    arrays, pointers = fn.prepare([aligned_copy(x), aligned_copy(w), out])
    fn.invoke(pointers)
    native = fn.native

    def run() -> None:
        native(*pointers)  # the module and arrays stay alive with ``run.keep``

    run.keep = (mod, fn, arrays)  # type: ignore[attr-defined]
    return run, out


def best_ms(fn: Any, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number * 1e3


def parse_config(task: Any, text: str) -> Any:
    want = {k: v for k, v in (kv.split("=") for kv in text.split(","))}
    space = task.config_space
    for i in range(len(space)):
        cfg = space.get(i)
        if all(str(cfg[k].val) == v for k, v in want.items()):
            return cfg
    raise SystemExit(f"no config of {task.name} matches {text}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trials", type=int, default=0, help="tune the --tune tasks first")
    p.add_argument("--tune", default="winograd", help="tasks to tune: nchwc, winograd, direct")
    p.add_argument("--configs", nargs="*", default=[], help="Winograd configs, k=v,k=v")
    p.add_argument("--tune-timeout", type=float, default=None, help="seconds for tuning")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--number", type=int, default=10)
    p.add_argument("--records", default="bench_conv.jsonl")
    p.add_argument("--shape", default="1,64,56,56,64", help="N,C,H,W,O (3x3, stride 1, pad 1)")
    args = p.parse_args()
    os.environ["EMBER_NUM_THREADS"] = str(args.threads)
    from ember.tuner import FallbackConfig, MeasureOption, create_task, tune

    N, C, H, W, O = (int(d) for d in args.shape.split(","))
    direct = create_task("conv2d_nchw.llvm", args=(N, C, H, W, O, 3, 3, 1, 1, 1, "float32"))
    blocked = create_task("conv2d_NCHWc.llvm", args=(N, C, H, W, O, 3, 3, 1, 1, 1, "float32"))
    wino = create_task("conv2d_winograd.llvm", args=(N, C, H, W, O, 1, "float32"))
    tasks = {"direct": direct, "nchwc": blocked, "winograd": wino}
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (N, C, H, W)).astype("float32")
    w = rng.uniform(-1, 1, (O, C, 3, 3)).astype("float32")
    candidates = [("direct fallback", direct, FallbackConfig())]
    candidates.append(("NCHWc fallback", blocked, FallbackConfig()))
    candidates.append(("winograd fallback", wino, FallbackConfig()))
    candidates += [(f"winograd {c}", wino, parse_config(wino, c)) for c in args.configs]
    for which in [t for t in args.tune.split(",") if t] if args.trials else []:
        option = MeasureOption(number=5, repeat=3, timeout=60.0, build_timeout=300.0)
        task = tasks[which]
        start = time.time()
        result = tune(
            task,
            n_trials=args.trials,
            records=args.records,
            seed=0,
            measure=option,
            timeout=args.tune_timeout,
        )
        done = len(result.trials)
        print(f"  tuned {task.name}: {done} trials in {time.time() - start:.0f} s, best "
              f"{result.best_cost * 1e3:.3f} ms {result.best_config}", flush=True)  # fmt: skip
        candidates.append((f"{which} tuned ({done} trials)", task, result.best_config))
    sess = ort_session(w, x.shape, args.threads)
    ref = sess.run(None, {"x": x})[0]
    runners = {"onnxruntime Conv": lambda: sess.run(None, {"x": x})}
    for name, task, cfg in candidates:
        if task is blocked:
            run, result_nchw = blocked_runner(task, cfg, x, w)
            out = result_nchw()
        else:
            run, out = ember_runner(task, cfg, x, w)
        err = float(np.abs(out - ref).max())
        print(f"  built {name}: {cfg}  max |ember - onnxruntime| {err:.2e}", flush=True)
        if err > 1e-2:
            raise SystemExit(f"{name} does not match onnxruntime (max error {err:.2e})")
        runners[name] = run
    best = dict.fromkeys(runners, float("inf"))
    for _ in range(args.rounds):
        for name, run in runners.items():
            run()
            best[name] = min(best[name], best_ms(run, args.number))
            if name == "onnxruntime Conv":
                # onnxruntime's pool threads spin for a while after a run and would take
                # the cores from the Ember kernel timed next (measured: the direct
                # template at 2 threads ran 1.7x slower right after it)
                time.sleep(ORT_SPIN_PAUSE_S)
    ort_ms, fb_ms = best["onnxruntime Conv"], best["direct fallback"]
    print(
        f"\nconv 3x3 {(N, C, H, W, O)} pad 1, {args.threads} threads (best of {args.rounds} rounds)"
    )
    for name, ms in best.items():
        print(f"  {name:<28} {ms:7.3f} ms  vs direct fallback {fb_ms / ms:5.2f}x  "
              f"vs onnxruntime {ort_ms / ms:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
