"""Each model's roofline: the least time its multiply-adds and its weights allow on this
machine, how close Ember and onnxruntime run to it, and so how far any runtime could still
beat onnxruntime there.

Run: ``ember bench MODELS --threads 2 --report bench.json`` first (a report of catalog
models at one thread count), then ``python benchmarks/roofline.py --report bench.json``
(``--sgemm`` adds numpy's 2048³ SGEMM rate). Neither bound uses Ember's code:

- FLOPs: 2 × each model's multiply-adds, counted from its ONNX graph at the benchmark's
  input sizes (Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU and RNN of the main graph;
  elementwise ops, pooling and normalization count nothing), the shapes taken from one
  onnxruntime run with every node output made a graph output.
- Peak: the float32 FLOP/s of one kernel of ``CHAINS`` independent FMAs of the widest
  vector this CPU has (512 bits with AVX-512, else 256) per thread, compiled here through
  llvmlite, at the report's thread count (``--peak`` to give it). 512-bit vectors on an
  AVX2 CPU are split in two: 12 chains then need 24 of its 16 registers, and the spills
  read a Zen 3 guest's peak as 64 GFLOP/s at 2 threads where numpy's SGEMM ran 163.
- Bytes: the initializers the multiply-add ops take, over the read bandwidth of one vector
  summing loop per thread over a buffer far larger than the last-level cache
  (``--bandwidth`` to give it). A model whose weights fit in the cache may beat it.

The floor is the larger of FLOPs / peak and bytes / bandwidth (``bound`` names which);
``ember %`` and ``ort %`` are the floor over each runtime's time, and ``ceiling`` the
ort/ember ratio a runtime running at the floor would get. A runtime that does fewer
multiply-adds than the graph says (Winograd convolutions) can pass 100%. Elsewhere a
target ratio near the ceiling asks for that share of the peak on every layer, depthwise
convolutions and K=16 GEMMs included, where a large SGEMM gets about 85-90%.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np


def _host_lanes() -> int:
    """float32 lanes of this CPU's widest vector register: 16 with AVX-512, else 8."""
    import llvmlite.binding as llvm

    return 16 if llvm.get_host_cpu_features().get("avx512f") else 8


LANES = _host_lanes()
CHAINS = 12  # independent accumulators: more than an FMA's latency times its issue rate
MAC_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN"})


def _shapes(model: Any, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Every value's shape at the feeds' sizes: the initializers' from the graph, the rest
    from one onnxruntime run with every node output made a graph output (shape inference
    leaves the decode steps' reshaped MatMul inputs unknown: their shapes are computed)."""
    import onnx
    import onnxruntime as ort

    model = onnx.ModelProto.FromString(model.SerializeToString())
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    known = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in known:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    for name, value in zip(names, session.run(names, feeds)):
        shapes[name] = tuple(np.shape(value))
    shapes.update({name: value.shape for name, value in feeds.items()})
    return shapes


def _attr(node: Any, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def node_macs(node: Any, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """The multiply-adds ``node`` does; 0 for ops that do none worth counting, None where a
    shape it needs is unknown."""
    need = [*node.input[:2], *node.output[:1]]
    if node.op_type not in MAC_OPS:
        return 0
    if any(name and name not in shapes for name in need):
        return None
    x, w = shapes[node.input[0]], shapes[node.input[1]]
    out = shapes[node.output[0]] if node.output[0] else ()
    if node.op_type == "Conv":  # W [OC, IC/groups, k...]: each output sums IC/groups * k...
        return math.prod(out) * math.prod(w[1:])
    if node.op_type == "ConvTranspose":  # W [IC, OC/groups, k...]: each input feeds OC/g * k...
        return math.prod(x) * math.prod(w[1:])
    if node.op_type == "MatMul":
        return math.prod(out) * (x[-1] if len(x) > 1 else x[0])
    if node.op_type == "Gemm":
        return math.prod(out) * (x[0] if _attr(node, "transA", 0) else x[-1])
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[node.op_type]
    seq, batch, width = x
    hidden = _attr(node, "hidden_size", w[1] // gates)
    return seq * batch * w[0] * gates * hidden * (width + hidden)


def model_flops(model: Any, feeds: dict[str, np.ndarray]) -> tuple[float, int]:
    """2 × the main graph's multiply-adds, and how many counted nodes had unknown shapes
    (their work is missing from the count; subgraphs of If/Loop are not walked)."""
    shapes = _shapes(model, feeds)
    macs, unknown = 0, 0
    for node in model.graph.node:
        n = node_macs(node, shapes)
        if n is None:
            unknown += 1
        else:
            macs += n
    return 2.0 * macs, unknown


_VEC = f"<{LANES} x float>"
_FMA = f"@llvm.fma.v{LANES}f32"

# four vector loads summed per step, n floats (a multiple of 4 * LANES) from %p
_STREAM_IR = f"""
define void @stream(ptr %p, i64 %n, ptr %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.next, %loop]
  %acc = phi {_VEC} [zeroinitializer, %entry], [%s3, %loop]
  %p0 = getelementptr float, ptr %p, i64 %i
  %p1 = getelementptr float, ptr %p0, i64 {LANES}
  %p2 = getelementptr float, ptr %p0, i64 {2 * LANES}
  %p3 = getelementptr float, ptr %p0, i64 {3 * LANES}
  %v0 = load {_VEC}, ptr %p0, align 4
  %v1 = load {_VEC}, ptr %p1, align 4
  %v2 = load {_VEC}, ptr %p2, align 4
  %v3 = load {_VEC}, ptr %p3, align 4
  %a = fadd {_VEC} %v0, %v1
  %b = fadd {_VEC} %v2, %v3
  %c = fadd {_VEC} %a, %b
  %s3 = fadd {_VEC} %acc, %c
  %i.next = add i64 %i, {4 * LANES}
  %done = icmp uge i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  store {_VEC} %s3, ptr %out, align 4
  ret void
}}
"""


def _peak_ir() -> str:
    """``fma_peak(n, io)``: ``CHAINS`` independent vector FMA chains run ``n`` times, their
    sum stored to ``io`` (so nothing folds away)."""
    lines = ["define void @fma_peak(i64 %n, ptr %io) {", "entry:"]
    lines += [f"  %a = load {_VEC}, ptr %io, align 4", "  br label %loop", "loop:"]
    lines.append("  %i = phi i64 [0, %entry], [%i.next, %loop]")
    lines += [f"  %c{k} = phi {_VEC} [%a, %entry], [%d{k}, %loop]" for k in range(CHAINS)]
    lines += [
        f"  %d{k} = call {_VEC} {_FMA}({_VEC} %c{k}, {_VEC} %a, {_VEC} %a)" for k in range(CHAINS)
    ]
    lines += ["  %i.next = add i64 %i, 1", "  %done = icmp eq i64 %i.next, %n"]
    lines += ["  br i1 %done, label %exit, label %loop", "exit:", f"  %s0 = fadd {_VEC} %d0, %d0"]
    lines += [f"  %s{k} = fadd {_VEC} %s{k - 1}, %d{k}" for k in range(1, CHAINS)]
    lines += [f"  store {_VEC} %s{CHAINS - 1}, ptr %io, align 4", "  ret void", "}"]
    lines.append(f"declare {_VEC} {_FMA}({_VEC}, {_VEC}, {_VEC})")
    return "\n".join(lines)


def _jit(ir: str, name: str, *argtypes: Any) -> tuple[Any, Any]:
    """``name`` from ``ir`` compiled for this CPU, as a ctypes function, with the execution
    engine that owns its code (keep it alive while calling)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(ir), target)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
    return fn, engine


def _run_threads(fn: Any, args: list[tuple]) -> float:
    """Seconds for one thread per ``args`` entry to run ``fn(*entry)`` at once (ctypes
    lets go of the GIL)."""
    workers = [threading.Thread(target=fn, args=a) for a in args]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def fma_peak(threads: int, seconds: float = 0.2, repeat: int = 5) -> float:
    """The float32 FLOP/s of ``threads`` copies of the FMA kernel run at once, best of
    ``repeat`` runs of about ``seconds`` each."""
    fn, _engine = _jit(_peak_ir(), "fma_peak", ctypes.c_int64, ctypes.c_void_p)
    ios = [np.full(LANES, 0.5, dtype=np.float32) for _ in range(threads)]

    def run(n: int) -> float:
        return _run_threads(fn, [(n, io.ctypes.data) for io in ios])

    n = 1 << 16
    while run(n) < seconds / 4:
        n *= 2
    n = int(n * seconds / max(run(n), 1e-6))
    best = min(run(n) for _ in range(repeat))
    return threads * n * 2 * LANES * CHAINS / best


def read_bandwidth(threads: int, mib: int = 256, repeat: int = 5) -> float:
    """Bytes/s ``threads`` threads read from memory at once, each summing a buffer of its
    own ``mib`` MiB (several times any last-level cache) with vector loads."""
    fn, _engine = _jit(_STREAM_IR, "stream", ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
    floats = mib * 2**20 // 4 // (4 * LANES) * (4 * LANES)
    bufs = [np.full(floats, 1.0, dtype=np.float32) for _ in range(threads)]
    outs = [np.zeros(LANES, dtype=np.float32) for _ in range(threads)]
    args = [(b.ctypes.data, floats, o.ctypes.data) for b, o in zip(bufs, outs)]
    best = min(_run_threads(fn, args) for _ in range(repeat))
    return threads * floats * 4 / best


def sgemm_rate(threads: int, size: int = 2048) -> float:
    """numpy's SGEMM FLOP/s at ``size``³ with ``threads`` OpenBLAS threads, in a process of
    its own (the thread count is read when numpy loads)."""
    code = (
        "import numpy as np, time\n"
        f"a = np.random.default_rng(0).standard_normal(({size}, {size}), dtype=np.float32)\n"
        "a @ a\n"
        "best = min((lambda t: (a @ a, time.perf_counter() - t)[1])(time.perf_counter())"
        " for _ in range(5))\n"
        f"print(2 * {size} ** 3 / best)\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(out.stdout.strip()) if out.returncode == 0 else float("nan")


def weight_bytes(model: Any) -> int:
    """Bytes of the initializers the multiply-add ops take: what a run must read at least
    once (an embedding table a Gather reads a few rows of is left out)."""
    from onnx import numpy_helper

    used = {name for node in model.graph.node if node.op_type in MAC_OPS for name in node.input}
    inits = model.graph.initializer
    return sum(numpy_helper.to_array(i).nbytes for i in inits if i.name in used)


def main() -> None:
    from ember.frontend.testing.catalog import CATALOG

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", required=True, help="an ember bench / bench_models JSON report")
    ap.add_argument("--peak", type=float, help="the FMA peak in GFLOP/s (default: measured)")
    ap.add_argument("--bandwidth", type=float, help="memory read GB/s (default: measured)")
    ap.add_argument("--sgemm", action="store_true", help="also time numpy's 2048³ SGEMM")
    args = ap.parse_args()
    with open(args.report) as f:
        rows = json.load(f)["models"]
    threads = {int(r.get("threads", 1)) for r in rows.values()}
    if len(threads) != 1:
        ap.error(f"the report mixes thread counts {sorted(threads)}; give one per report")
    (t,) = threads
    peak = args.peak * 1e9 if args.peak else fma_peak(t)
    bandwidth = args.bandwidth * 1e9 if args.bandwidth else read_bandwidth(t)
    how = {True: "given", False: "measured"}
    print(f"float32 FMA peak at {t} thread(s): {peak / 1e9:.1f} GFLOP/s ({how[bool(args.peak)]})")
    print(f"memory read at {t} thread(s): {bandwidth / 1e9:.1f} GB/s ({how[bool(args.bandwidth)]})")
    if args.sgemm:
        rate = sgemm_rate(t)
        share = f"{rate / peak:.0%} of the peak"
        print(f"numpy SGEMM 2048^3 at {t} thread(s): {rate / 1e9:.1f} GFLOP/s, {share}")
    print(
        f"{'model':22s}{'GFLOP':>8s}{'weight MB':>10s}{'ember ms':>10s}{'ort ms':>9s}"
        f"{'ort/ember':>10s}{'bound':>7s}{'ember %':>9s}{'ort %':>7s}{'ceiling':>9s}"
    )
    for name, row in rows.items():
        if name not in CATALOG:
            continue
        model, feeds = CATALOG[name](np.random.default_rng(0), False)
        flops, unknown = model_flops(model, feeds)
        weights = weight_bytes(model)
        compute_ms, memory_ms = flops / peak * 1e3, weights / bandwidth * 1e3
        floor_ms = max(compute_ms, memory_ms)
        e, o = row["ember_ms"], row["ort_ms"]
        note = f"  ({unknown} node(s) of unknown shape left out)" if unknown else ""
        print(
            f"{name:22s}{flops / 1e9:8.3f}{weights / 1e6:10.1f}{e:10.3f}{o:9.3f}"
            f"{row.get('ratio', o / e):10.2f}{'flops' if compute_ms >= memory_ms else 'bytes':>7s}"
            f"{floor_ms / e:9.0%}{floor_ms / o:7.0%}{o / floor_ms:9.2f}{note}"
        )


if __name__ == "__main__":
    main()
