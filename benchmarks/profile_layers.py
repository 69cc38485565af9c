"""A model's convolutions (and GEMMs) one by one: onnxruntime's node profile beside Ember's
``profile()``.

Run: ``python benchmarks/profile_layers.py`` (``--size 224 --threads 2 --rounds 3
--number 10``). The model is ``frontend/testing/zoo.py``'s ResNet-18 (seeded weights),
or with ``--model NAME`` any model of ``bench_models.py``'s catalog that has
convolutions (``--model mobilenet_v2``; ``--size`` is then the catalog's).
Each runtime is timed alone in a process of its own, the two taking turns for
``--rounds`` rounds with a ``--pause`` after each turn. In a turn, onnxruntime runs the
model ``--number`` times with its profiler on (``SessionOptions.enable_profiling``; the
JSON trace's ``"Node"`` events, their ``dur``), after one warm-up run whose events are
dropped; Ember runs ``CompiledModel.profile(number=...)``. A layer's time in a turn is
its median over the runs, and the table shows the median over the rounds.

Layers are matched by the ONNX conv they come from. Ember's steps name their nodes
(``Step.where``: "fused group of ONNX node 'conv_19' (Conv), ..."). onnxruntime names a
fused node after one of the nodes it absorbed (Conv+BatchNormalization+Relu becomes
``relu_8`` or ``batchnormalization_24``, plus a suffix such as ``_nchwc``); walking the
original graph back through first inputs from that node reaches its conv. Where one
Ember kernel computes several convs (MobileNetV2's depthwise conv fused into the 1x1 conv
after it: "ONNX node 'conv_22' (Conv) (fused with ONNX node 'conv_12' (Conv), ...)"),
its row is ``conv_12+conv_22`` against the sum of onnxruntime's times for both.

ratio = onnxruntime ms / Ember ms, as in ``bench_models.py``: above 1 Ember is faster;
the acceptance bar of issue 25 is 0.95 or more for every conv. On a shared machine a
layer's figure moves by 5-10% between rounds: rerun it on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

import ember
from ember.runtime.threads import set_num_threads

ANCHORS = ("Conv", "Gemm", "MatMul")  # the layers a table row stands for
_ANCHOR = re.compile(r"ONNX node '([^']+)' \((?:Conv|Gemm|MatMul)\)")
# onnxruntime's kernels for them (its fused ones keep the anchor's inputs first)
ORT_OPS = {"Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"}


def build(model: str, size: int) -> tuple[Any, dict[str, np.ndarray]]:
    """The seeded ResNet-18 at ``size`` x ``size``, or the catalog's ``model``, and its input."""
    # optional dependency: onnx (the zoo and the catalog build models with onnx.helper)
    from ember.frontend.testing import zoo
    from ember.frontend.testing.catalog import CATALOG

    if model == "resnet18":
        return zoo.resnet18(np.random.default_rng(0), size=size)
    return CATALOG[model](np.random.default_rng(0), False)


def conv_of(model: Any) -> dict[str, str]:
    """For every node name of ``model``: the conv (or Gemm, MatMul) its first-input chain
    starts from."""
    nodes = {n.name: n for n in model.graph.node}
    producer = {out: n for n in model.graph.node for out in n.output}
    found: dict[str, str] = {}
    for name, node in nodes.items():
        n = node
        while n is not None and n.op_type not in ANCHORS and n.input:
            n = producer.get(n.input[0])
        if n is not None and n.op_type in ANCHORS:
            found[name] = n.name
    return found


def ort_layers(model: Any, inputs: dict, threads: int, number: int) -> dict[str, Any]:
    """onnxruntime's per-conv median node time (seconds) and shapes, from its profiler."""
    # optional dependency: onnxruntime
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(number + 1):
        sess.run(None, inputs)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    convs = conv_of(model)
    times: dict[str, list[float]] = {}
    shapes: dict[str, str] = {}
    for e in events:
        if e.get("cat") != "Node" or e.get("args", {}).get("op_name") not in ORT_OPS:
            continue
        # "matmul_56/MatMulAddFusion_kernel_time": the part before "/" names the node
        name = e["name"].removesuffix("_kernel_time").partition("/")[0]
        while name and name not in convs:  # drop the fusion suffixes (_nchwc, ...)
            name = name.rpartition("_")[0]
        if not name:
            continue
        conv = convs[name]
        times.setdefault(conv, []).append(e["dur"] * 1e-6)
        x, w = (s["float"] for s in e["args"]["input_type_shape"][:2])
        shapes[conv] = f"{'x'.join(map(str, x))} * {'x'.join(map(str, w))}"
    runs = [e["dur"] * 1e-6 for e in events if e.get("name") == "model_run"]
    return {
        "seconds": {c: statistics.median(ts[1:] or ts) for c, ts in times.items()},
        "shapes": shapes,
        "total": statistics.median(runs[1:] or runs),
    }


def step_layers(where: str) -> str | None:
    """The key of the step named ``where``: its convs joined by "+" (None if it has none)."""
    found = _ANCHOR.findall(where)
    return "+".join(dict.fromkeys(found)) if found else None


def ember_layers(model: Any, inputs: dict, threads: int, number: int) -> dict[str, Any]:
    """Ember's median step time (seconds) per conv, or per group of convs one kernel
    computes (keyed "conv_12+conv_22"), from ``CompiledModel.profile``."""
    lib = ember.compile(model, target="llvm")
    set_num_threads(threads)
    prof = lib.profile(inputs, number=number)
    seconds: dict[str, float] = {}
    for step in prof.steps:
        key = step_layers(step.where)
        if key:
            seconds[key] = seconds.get(key, 0.0) + step.seconds
    return {"seconds": seconds, "shapes": {}, "total": prof.total}


def worker(args: argparse.Namespace) -> None:
    """One turn of one runtime: its layer times as JSON on stdout."""
    model, inputs = build(args.model, args.size)
    run = ort_layers if args.worker == "ort" else ember_layers
    print(json.dumps(run(model, inputs, args.threads, args.number)))


def turn(args: argparse.Namespace, runtime: str) -> dict[str, Any]:
    """Run one runtime's turn in a fresh process."""
    cmd = [sys.executable, __file__, "--worker", runtime, "--size", str(args.size)]
    cmd += ["--model", args.model]
    cmd += ["--threads", str(args.threads), "--number", str(args.number)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def rows(ort: list[dict], emb: list[dict]) -> list[tuple[str, list[str]]]:
    """The table's rows in onnxruntime's order: (Ember's key, the convs it covers in that
    order); a conv of no Ember step is a row of its own (its Ember time then reads 0)."""
    order = list(ort[0]["shapes"])
    keys = {part: key for r in emb for key in r["seconds"] for part in key.split("+")}
    out: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for conv in order:
        key = keys.get(conv, conv)
        if key in seen:
            continue
        seen.add(key)
        out.append((key, sorted(key.split("+"), key=lambda c: order.index(c) if c in order else 0)))
    return out


def table(ort: list[dict], emb: list[dict]) -> str:
    """Per conv (or group of convs one Ember kernel computes), in onnxruntime's order: the
    medians over rounds and their ratio."""
    shapes = ort[0]["shapes"]
    layout = rows(ort, emb)
    found: list[tuple[str, str, float, float]] = []  # (layers, shapes, ort s, ember s)
    for key, parts in layout:
        if not all(p in r["seconds"] for r in ort for p in parts):
            continue
        if not all(key in r["seconds"] for r in emb):
            continue
        o = statistics.median(sum(r["seconds"][p] for p in parts) for r in ort)
        e = statistics.median(r["seconds"][key] for r in emb)
        weights = (shapes[p].partition(" * ")[2] for p in parts[1:])
        found.append(("+".join(parts), " + ".join([shapes[parts[0]], *weights]), o, e))
    wl = max([10, *(len(f[0]) for f in found)])
    ws = max([34, *(len(f[1]) for f in found)])
    lines = [
        f"{'layer':{wl}s} {'input * weight':{ws}s} {'ort ms':>8s} {'ember ms':>9s} {'ratio':>6s}"
    ]
    ratios = []
    for layers, shape, o, e in found:
        ratios.append(o / e)
        flag = "" if o / e >= 0.95 else "  <0.95"
        lines.append(
            f"{layers:{wl}s} {shape:{ws}s} {o * 1e3:8.3f} {e * 1e3:9.3f} {o / e:6.2f}{flag}"
        )
    o_sum = sum(statistics.median(r["seconds"][c] for r in ort) for c in shapes)
    e_sum = sum(statistics.median(r["seconds"].get(key, 0.0) for r in emb) for key, _ in layout)
    both = f"{o_sum / e_sum:6.2f}" if e_sum else "  none of Ember's steps matched"
    lines.append(f"{'all layers':{wl + ws + 1}s} {o_sum * 1e3:8.3f} {e_sum * 1e3:9.3f} {both}")
    o_run = statistics.median(r["total"] for r in ort)
    e_run = statistics.median(r["total"] for r in emb)
    run = f"{o_run * 1e3:8.3f} {e_run * 1e3:9.3f} {o_run / e_run:6.2f}"
    lines.append(f"{'whole run, profiled':{wl + ws + 1}s} {run}")
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        lines.append(f"geometric mean ratio {geo:.2f}; {sum(r < 0.95 for r in ratios)} below 0.95")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", help="a catalog model with convolutions")
    ap.add_argument("--size", type=int, default=224, help="ResNet-18's input height and width")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--number", type=int, default=10, help="profiled runs per turn")
    ap.add_argument("--rounds", type=int, default=3, help="turns each runtime takes")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds after each turn")
    ap.add_argument("--worker", choices=("ort", "ember"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    ort: list[dict] = []
    emb: list[dict] = []
    for _ in range(args.rounds):
        ort.append(turn(args, "ort"))
        time.sleep(args.pause)
        emb.append(turn(args, "ember"))
        time.sleep(args.pause)
    shown = f"ResNet-18 {args.size}x{args.size}" if args.model == "resnet18" else args.model
    print(f"{shown}, {args.threads} threads, {args.rounds} rounds")
    print("ratio = onnxruntime / Ember (above 1: Ember faster)")
    print(table(ort, emb))


if __name__ == "__main__":
    main()
