"""Whole models through ``ember.compile`` beside onnxruntime, at 1 and 2 threads.

Run: ``python benchmarks/bench_models.py`` (``--models resnet18,bert`` for a subset,
``--quick`` for small inputs, ``--compile-only`` to print only compile times,
``--graph-passes default,-alter_conv_layout`` to compile without a pass). Each model is
built with onnx.helper from seeded random weights (``frontend/testing/zoo*.py``,
``models.py``), except the ``light_*`` models: the ONNX model zoo's CNNs that ship in the
onnx wheel, with seeded random weights in place of their placeholders (always 224x224).
The GPT-2 decode step runs at cache lengths 128 and 1,024 through its symbolic dim (its
compile time includes specializing to that length). Ember's output is checked against
onnxruntime's before anything is timed. Compile time is cold: the in-process kernel
cache is emptied first and the disk cache is off (``benchmarks/bench_compile_cache.py``
times a warm compile). The two runtimes take
turns for ``--rounds`` rounds, with a pause after each so the other's threads have gone
idle; in a round each is timed as the best of ``--repeat`` batches of ``--number``
runs. A latency is the median over the rounds, the ratio (onnxruntime time / Ember
time, so above 1 Ember is faster) the median of the rounds' ratios, printed with their
range: on a shared machine one round alone moves by 5-10% with its load. Rerun on a
quiet machine, or take single-thread figures with ``--threads 1 --cpu-time`` (the
process's CPU time).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from ember.frontend.testing import zoo, zoo_audio, zoo_cnn, zoo_light, zoo_transformer
from ember.frontend.testing.models import mlp, small_cnn, speech_lstm


def _best(fn: Callable[[], object], number: int, repeat: int, clock: Callable[[], float]) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = clock()
        for _ in range(number):
            fn()
        times.append((clock() - start) / number)
    return min(times)


def _cold_compile(model: object, passes: tuple[object, ...] | None, inputs: dict) -> object:
    """``ember.compile`` with the disk kernel cache off, so no earlier run's kernels count;
    a model with symbolic dims is specialized to the sizes of ``inputs`` too."""
    import ember

    saved = os.environ.get("EMBER_DISK_CACHE")
    os.environ["EMBER_DISK_CACHE"] = "0"
    try:
        lib = ember.compile(model, target="llvm", graph_passes=passes)
        if hasattr(lib, "specialize"):  # a DynamicModel: compile the benchmarked size now
            lib.specialize(dict(lib.bind(inputs)[0]))
        return lib
    finally:
        if saved is None:
            del os.environ["EMBER_DISK_CACHE"]
        else:
            os.environ["EMBER_DISK_CACHE"] = saved


def models(quick: bool) -> dict[str, Callable[[np.random.Generator], tuple[object, dict]]]:
    """Every benchmark model by name: the first six, then the bigger and the real ones."""
    size, seq = (64, 32) if quick else (224, 128)
    light = zoo_light.light_builders()  # the wheel's real models; none without onnx
    return {
        "resnet18": lambda rng: zoo.resnet18(rng, 1, size),
        "mobilenet_v2": lambda rng: zoo.mobilenet_v2(rng, 1, size),
        "bert": lambda rng: zoo.bert_encoder(rng, 1, seq, layers=4, hidden=256, heads=4),
        "cnn": lambda rng: small_cnn(rng, 8, 64, 64),
        "mlp": lambda rng: mlp(rng, 64, (512, 1024, 256)),
        "speech": lambda rng: speech_lstm(),  # tiny: per-call overhead
        "resnet50": lambda rng: zoo_cnn.resnet50(rng, quick),
        "squeezenet": lambda rng: zoo_cnn.squeezenet(rng, quick),
        "shufflenet_v2": lambda rng: zoo_cnn.shufflenet_v2(rng, quick),
        "bert_base": lambda rng: zoo_transformer.bert_base(rng, quick),
        "vit": lambda rng: zoo_transformer.vit(rng, quick),
        "gpt2_past128": lambda rng: zoo_transformer.gpt2_decode(rng, quick, past=128),
        "gpt2_past1024": lambda rng: zoo_transformer.gpt2_decode(rng, quick, past=1024),
        "mel_spectrogram": lambda rng: zoo_audio.mel_spectrogram(rng, quick),
        "kws_dscnn": lambda rng: zoo_audio.kws_dscnn(rng, quick),
        **{name: functools.partial(build, quick=quick) for name, build in light.items()},
    }


def _session(model: object, threads: int) -> object:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    data = model.SerializeToString()  # type: ignore[attr-defined]
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def graph_passes(spec: str) -> tuple[object, ...] | None:
    """The passes ``--graph-passes`` names (None: the target's defaults)."""
    if not spec:
        return None
    import ember
    from ember import frontend

    chosen: list[object] = []
    for name in spec.split(","):
        if name == "default":
            chosen += ember.get_backend("llvm").graph_passes(frontend.passes.DEFAULT_PASSES)
        elif name.startswith("-"):
            chosen = [p for p in chosen if getattr(p, "name", "") != name[1:]]
        else:
            chosen.append(getattr(frontend.passes, name))
    return tuple(chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated subset of the models")
    ap.add_argument("--quick", action="store_true", help="small inputs (64x64 images, 32 tokens)")
    ap.add_argument(
        "--compile-only",
        action="store_true",
        help="compile each model cold, check it against onnxruntime and print one line of "
        "compile time per model; time nothing",
    )
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="turns each runtime takes")
    ap.add_argument("--threads", default="1,2", help="thread counts to time")
    ap.add_argument(
        "--graph-passes",
        default="",
        help="comma-separated graph pass names from ember.frontend.passes replacing the "
        "target's defaults; 'default' stands for those, '-name' drops one "
        "(e.g. default,-alter_conv_layout)",
    )
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process's CPU time rather than the wall clock: on a loaded "
        "machine it leaves out the time other processes hold the cores (1 thread only: "
        "at more, threads waiting for each other count too)",
    )
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter

    from ember.graph.kernels import clear_cache
    from ember.runtime.threads import set_num_threads

    passes = graph_passes(args.graph_passes)
    table = models(args.quick)
    chosen = [m for m in args.models.split(",") if m] or list(table)
    unknown = [m for m in chosen if m not in table]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {', '.join(table)}")
    threads = [int(t) for t in args.threads.split(",")]
    head = "".join(
        f"{f'ember {t}t ms':>13s}{f'ort {t}t ms':>12s}{'ort/ember':>10s}{'range':>12s}"
        for t in threads
    )
    print(f"{'model':20s}{'compile s':>10s}{'' if args.compile_only else head}")
    for name in chosen:
        model, inputs = table[name](np.random.default_rng(0))
        clear_cache()
        start = time.perf_counter()
        lib = _cold_compile(model, passes, inputs)
        compile_s = time.perf_counter() - start
        want = _session(model, max(threads)).run(None, inputs)
        for got, ref in zip(lib.run(inputs), want):
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
        row = f"{name:20s}{compile_s:10.1f}"
        if args.compile_only:
            print(row, flush=True)
            continue
        for t in threads:
            set_num_threads(t)
            sess = _session(model, t)
            embers, orts = [], []
            for _ in range(args.rounds):
                embers.append(_best(lambda: lib.run(inputs), args.number, args.repeat, clock))  # noqa: B023
                time.sleep(0.2)  # let the other runtime's threads go idle
                orts.append(_best(lambda: sess.run(None, inputs), args.number, args.repeat, clock))  # noqa: B023
                time.sleep(0.2)
            ratios = [o / e for o, e in zip(orts, embers)]
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            row += f"{statistics.median(embers) * 1e3:13.2f}{statistics.median(orts) * 1e3:12.2f}"
            row += f"{statistics.median(ratios):10.2f}{spread:>12s}"
        set_num_threads(None)
        print(row, flush=True)


if __name__ == "__main__":
    main()
