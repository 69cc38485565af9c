"""GPU benchmarks: Ember's CUDA templates beside cuBLAS (through CuPy or PyTorch).

Run: ``python benchmarks/bench_gpu.py``. On a machine with a CUDA device it times
each template's fallback configuration and the peer in the same process and
prints GFLOP/s and the ratio *peer time / Ember time*. Without a device it
prints the static resource table instead: registers, shared memory, spills and
occupancy of every kernel, as NVRTC reports them for sm_80 and sm_90.
"""

from __future__ import annotations

import argparse

import numpy as np

WORKLOADS = [
    ("matmul.cuda", (1024, 1024, 1024, "float32"), lambda M, N, K, _: 2.0 * M * N * K),
    ("matmul.cuda", (4096, 4096, 4096, "float32"), lambda M, N, K, _: 2.0 * M * N * K),
    ("elementwise_chain.cuda", (4096, 4096, "float32"), lambda R, C, _: 11.0 * R * C),
    ("reduce.cuda", (4096, 4096, "sum", "float32"), lambda R, C, *_: 1.0 * R * C),
    ("softmax.cuda", (4096, 1024, "float32"), lambda R, C, _: 5.0 * R * C),
    ("layer_norm.cuda", (4096, 1024, 1e-5, "float32"), lambda R, C, *_: 8.0 * R * C),
    ("batch_matmul.cuda", (12, 128, 128, 64, "float32"), lambda B, M, N, K, _: 2.0 * B * M * N * K),
    (
        "conv2d_nchw.cuda",
        (1, 64, 56, 56, 64, 3, 3, 1, 1, 1, "float32"),
        lambda N, C, H, W, O, KH, KW, *_: 2.0 * N * O * H * W * C * KH * KW,
    ),
]


def build(name: str, args: tuple, arch: str | None):  # noqa: ANN201
    """The template's fallback build; ``arch=None`` targets the visible device."""
    import ember
    from ember.tuner import create_task

    target = "cuda" if arch is None else f"cuda -arch={arch}"
    task = create_task(name, args=args, target=target)
    sch, tensors = task.instantiate()
    return ember.build(sch, tensors, target=target, name=name.split(".")[0])


def resource_table() -> None:
    from ember.codegen_cuda.resources import occupancy

    print("no CUDA device: static resources of each template's kernels (NVRTC, fallback config)")
    print(
        f"{'template':<24}{'args':<40}{'arch':<7}{'kernel':<22}{'regs':>5}{'smem B':>8}"
        f"{'spill B':>8}{'blocks/SM':>10}{'limited by':>12}"
    )
    for name, args, _ in WORKLOADS:
        for arch in ("sm_80", "sm_90"):
            mod = build(name, args, arch)
            for kernel in mod.kernels:
                use = mod.resource_usage()[kernel.name]
                _, block = kernel.attr("launch")
                occ = occupancy(use, block[0] * block[1] * block[2], arch)
                print(
                    f"{name:<24}{str(args[:-1]):<40}{arch:<7}{kernel.name:<22}"
                    f"{use.registers:>5}{use.shared_bytes:>8}{use.local_bytes:>8}"
                    f"{occ.blocks_per_sm:>10}{occ.limited_by:>12}"
                )


def peer_matmul():  # noqa: ANN201
    try:
        import cupy as cp

        return (
            "cuBLAS (CuPy)",
            lambda a, b: cp.matmul(a, b),
            cp.asarray,
            cp.cuda.Device().synchronize,
        )
    except ImportError:
        pass
    try:
        import torch

        return (
            "cuBLAS (PyTorch)",
            torch.matmul,
            lambda x: torch.from_numpy(x).cuda(),
            torch.cuda.synchronize,
        )
    except ImportError:
        return None


def device_bench() -> None:
    import time

    rng = np.random.default_rng(0)
    peer = peer_matmul()
    print("template args | ember GFLOP/s | peer | ratio (peer time / ember time)")
    for name, args, flops_of in WORKLOADS:
        mod = build(name, args, arch=None)
        flops = flops_of(*args)
        shapes = [tuple(int(s.value) for s in b.shape) for b in mod.program.params]
        arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
        t = mod.time_evaluator(number=10, repeat=5)(*arrays).median
        line = f"{name} {args[:-1]} | {flops / t / 1e9:9.1f}"
        if name.startswith("matmul") and peer is not None:
            label, fn, to_dev, sync = peer
            a, b = to_dev(arrays[0]), to_dev(arrays[1])
            fn(a, b)
            sync()
            start = time.perf_counter()
            for _ in range(10):
                fn(a, b)
            sync()
            tp = (time.perf_counter() - start) / 10
            line += f" | {label} {flops / tp / 1e9:9.1f} | {tp / t:.2f}x"
        print(line, flush=True)


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    try:
        from ember.codegen_cuda.device import device_available
    except ImportError:  # the runtime is not part of this build yet

        def device_available() -> bool:
            return False

    if device_available():
        device_bench()
    else:
        resource_table()


if __name__ == "__main__":
    main()
