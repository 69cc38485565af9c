"""The graph executor's cost per kernel call, beside the bare kernels and onnxruntime.

Run: ``python benchmarks/bench_overhead.py`` (``--rounds 5`` for more turns, ``--chains
10,50`` for other chain lengths). Each model is compiled once, checked against
onnxruntime, then timed four ways by turns, one block each per round with a pause after
it: ``run`` (``CompiledModel.run``: input checks, the copy in, the steps, the copies
out), ``run-py`` (the same with every step called from Python, the executor before the
native step loop), ``steps`` (the workspace's step program alone, as ``run`` calls it), ``python``
(the bound kernels called one by one from a Python loop, as the executor did before the
native step loop) and ``ctypes`` (each kernel's ctypes entry point called on its
pointers, no status check), and onnxruntime's ``run``. The models: chains of N tiny
elementwise kernels (Add/Mul with constants on a [4, 7] tensor, compiled without graph
passes so each node stays a kernel of its own: ``ctypes`` time is almost all call cost),
a chain of 1x1 convolutions with Relu, and the MLP (batch 1, 64-128-32), the small CNN
(16x16) and the speech LSTM of ``frontend/testing/models.py``. A figure is the best batch
of a round, the median over rounds; ``us/kernel`` is ``run`` time divided by the number
of steps, and ``py us/kernel`` the same of ``run-py``.

Timings move with the machine's load: rerun it alone, one thread (``--threads 1``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.frontend.testing.models import build_model, mlp, small_cnn, speech_lstm


def elementwise_chain(n: int, rng: np.random.Generator) -> tuple[Any, dict]:
    """``n`` alternating Add/Mul nodes with constants: a chain of tiny kernels."""
    # optional dependency: onnx
    from onnx import helper

    nodes, weights, prev = [], {}, "x"
    for k in range(n):
        op = "Add" if k % 2 == 0 else "Mul"
        c = rng.uniform(0.9, 1.1, (4, 7)).astype("float32")
        weights[f"c{k}"] = c
        nodes.append(helper.make_node(op, [prev, f"c{k}"], [f"v{k}"], name=f"{op.lower()}{k}"))
        prev = f"v{k}"
    x = rng.standard_normal((4, 7)).astype("float32")
    return build_model(nodes, {"x": x}, [prev], weights), {"x": x}


def conv_chain(n: int, rng: np.random.Generator) -> tuple[Any, dict]:
    """``n`` 1x1 convolutions with bias and Relu on [1, 16, 14, 14]."""
    # optional dependency: onnx
    from onnx import helper

    nodes, weights, prev = [], {}, "x"
    for k in range(n):
        weights[f"w{k}"] = (rng.standard_normal((16, 16, 1, 1)) / 4).astype("float32")
        weights[f"b{k}"] = rng.standard_normal(16).astype("float32")
        nodes.append(helper.make_node("Conv", [prev, f"w{k}", f"b{k}"], [f"c{k}"]))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        prev = f"r{k}"
    x = rng.standard_normal((1, 16, 14, 14)).astype("float32")
    return build_model(nodes, {"x": x}, [prev], weights), {"x": x}


def _best(fn: Callable[[], object], number: int, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def _session(model: Any, threads: int) -> Any:
    # optional dependency: onnxruntime
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _without_loop(lib: Any) -> Any:
    """A twin of ``lib`` (same graph, steps and kernels) whose workspaces call every step
    from Python: the executor as it was before the native step loop."""
    twin = getattr(lib, "_twin", None)
    if twin is None:
        from ember.graph.executor import CompiledModel, WorkspacePool

        twin = CompiledModel(lib.graph, lib.steps, lib.target)
        twin._loop = None
        twin._pool = WorkspacePool(twin._new_workspace)
        lib._twin = twin
    return twin


def _ways(lib: Any, inputs: dict) -> dict[str, Callable[[], object]]:
    """The ways of running ``lib`` that are timed, by label."""
    ws = lib._pool.acquire()  # held for the whole benchmark: the loops below reuse it
    ws.load(lib._check_inputs(inputs))
    calls = list(ws.calls)
    natives = []
    for call in calls:
        fn = getattr(call, "function", None)
        if fn is not None:
            natives.append((fn.native, call.pointers))

    def python_loop() -> None:
        for call in calls:
            call()

    def ctypes_loop() -> None:
        for native, pointers in natives:
            native(*pointers)

    ways: dict[str, Callable[[], object]] = {"run": lambda: lib.run(inputs)}
    if getattr(lib, "_loop", None) is not None:
        ways["run-py"] = lambda: _without_loop(lib).run(inputs)
    if hasattr(lib, "_call_steps"):
        ways["steps"] = lambda: lib._call_steps(ws)
    ways["python"] = python_loop
    if len(natives) == len(calls):
        ways["ctypes"] = ctypes_loop
    return ways


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", default="10,50,200", help="elementwise chain lengths")
    ap.add_argument("--models", default="conv,mlp,cnn,speech", help="other models to time")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--number", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import ember
    from ember.runtime.threads import set_num_threads

    set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    table: list[tuple[str, Any, Any]] = []
    for n in [int(c) for c in args.chains.split(",") if c]:
        model, inputs = elementwise_chain(n, rng)
        table.append((f"chain{n}", (model, inputs), ()))
    others = {
        "conv": lambda: conv_chain(8, rng),
        "mlp": lambda: mlp(rng, 1, (64, 128, 32)),
        "cnn": lambda: small_cnn(rng, 1, 16, 16),
        "speech": speech_lstm,
    }
    for name in [m for m in args.models.split(",") if m]:
        table.append((name, others[name](), None))

    labels = ["run", "run-py", "steps", "python", "ctypes", "ort"]
    print(f"threads {args.threads}; microseconds per run, best batch, median of {args.rounds}")
    print(
        f"{'model':10s}{'kernels':>8s}"
        + "".join(f"{x:>10s}" for x in labels)
        + f"{'us/kernel':>11s}{'py us/kernel':>13s}"
    )
    for name, (model, inputs), passes in table:
        lib = ember.compile(model, target="llvm", graph_passes=passes)
        sess = _session(model, args.threads)
        for got, want in zip(lib.run(inputs), sess.run(None, inputs)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        ways = {**_ways(lib, inputs), "ort": lambda: sess.run(None, inputs)}  # noqa: B023
        times: dict[str, list[float]] = {k: [] for k in ways}
        for _ in range(args.rounds):
            for label, fn in ways.items():
                times[label].append(_best(fn, args.number, args.repeat))
                time.sleep(0.05)
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        n = len(lib.steps)
        cells = "".join(f"{med[x]:10.1f}" if x in med else f"{'-':>10s}" for x in labels)
        per = f"{med['run'] / n:11.2f}{med.get('run-py', float('nan')) / n:13.2f}"
        print(f"{name:10s}{n:8d}{cells}{per}", flush=True)
    set_num_threads(None)


if __name__ == "__main__":
    main()
