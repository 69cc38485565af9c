"""GPU benchmarks: Ember's CUDA templates beside cuBLAS/cuDNN (through PyTorch or CuPy).

Run: ``python benchmarks/bench_gpu.py``. On a machine with a CUDA device it times
each template's fallback configuration (CUDA events) and its peer in the same
process (PyTorch's matmul, bmm, conv2d, reductions, softmax, layer norm and GELU
chain; else CuPy's cuBLAS GEMMs and reductions) and prints GFLOP/s and the
ratio *peer time / Ember time*. Without a device it
prints the static resource table instead: registers, shared memory, spills and
occupancy of every kernel, as NVRTC reports them for sm_80 and sm_90.

The tensor-core section (always printed; ``--tensorcore`` prints only it) gives, for
each tensor-core template at its default configuration, the registers, shared bytes
and spills NVRTC reports on a representative shape (fp16 GEMM 4096^3), and the SIMT
emulator's profile on a small shape: ``ldmatrix`` bank conflicts (0 expected) and all
shared-memory bank conflicts. With a device it also times the fp16 GEMM 4096^3
against cuBLAS (PyTorch or CuPy) in the same process; without one it says so and
prints no timing.

The attention section (``--attention``, printed alone) gives the fused
attention kernel's resources at BERT-base's heads for sequences 128 to 4,096 and, with a
device and PyTorch, its time beside PyTorch's ``scaled_dot_product_attention`` and the
unfused product, its error against the latter and the device memory each takes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

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
    (
        "conv2d_nchw_gemm.cuda",
        (1, 64, 56, 56, 64, 3, 3, 1, 1, 1, "float32"),
        lambda N, C, H, W, O, KH, KW, *_: 2.0 * N * O * H * W * C * KH * KW,
    ),
]


# (template, representative args for resources, small args for the emulator profile)
TENSORCORE = [
    ("matmul_tensorcore.cuda", (4096, 4096, 4096), (128, 128, 64)),
    ("batch_matmul_tensorcore.cuda", (16, 1024, 1024, 512), (2, 128, 64, 64)),
    ("conv2d_nhwc_tensorcore.cuda", (8, 56, 56, 64, 64, 3, 3, 1, 1), (1, 8, 8, 32, 64, 3, 3, 1, 1)),
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


def torch_peers() -> dict[str, Callable[..., Callable[[], object]]] | None:
    """For each template, ``make(args, *device_tensors) -> run()`` with PyTorch (cuBLAS,
    cuDNN and its own kernels), or None when PyTorch with CUDA is not installed."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def conv(args: tuple, x: Any, w: Any, *_: Any) -> Callable[[], object]:
        stride, padding, dilation = args[7:10]
        return lambda: F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)

    def reduce(args: tuple, x: Any, *_: Any) -> Callable[[], object]:
        kind = args[2]
        op = {"sum": torch.sum, "max": torch.amax, "min": torch.amin}[kind]
        return lambda: op(x, dim=1)

    def chain(args: tuple, x: Any, bias: Any, *_: Any) -> Callable[[], object]:
        return lambda: F.gelu(x * 2.0 + bias, approximate="tanh")

    return {
        "matmul.cuda": lambda args, a, b, *_: lambda: torch.matmul(a, b),
        "batch_matmul.cuda": lambda args, a, b, *_: lambda: torch.bmm(a, b),
        "conv2d_nchw.cuda": conv,
        "conv2d_nchw_gemm.cuda": conv,
        "reduce.cuda": reduce,
        "softmax.cuda": lambda args, x, *_: lambda: torch.softmax(x, dim=1),
        "layer_norm.cuda": lambda args, x, g, b, *_: (
            lambda: F.layer_norm(x, (x.shape[1],), g, b, args[2])
        ),
        "elementwise_chain.cuda": chain,
    }


def cupy_peers() -> dict[str, Callable[..., Callable[[], object]]] | None:
    """cuBLAS through CuPy for the GEMMs (and CuPy's reductions), when CuPy is installed."""
    try:
        import cupy as cp
    except ImportError:
        return None
    return {
        "matmul.cuda": lambda args, a, b, *_: lambda: cp.matmul(a, b),
        "batch_matmul.cuda": lambda args, a, b, *_: lambda: cp.matmul(a, b),
        "reduce.cuda": lambda args, x, *_: lambda: getattr(cp, args[2])(x, axis=1),
    }


def _time(run: Callable[[], object], elapsed_ms: Callable[[Callable[[], None]], float]) -> float:
    """Seconds per run of the peer, timed as Ember's ``time_evaluator`` times itself: one
    warm-up, then the median of 5 batches of 10 runs between two CUDA events (so neither
    side's figure includes Python's launch overhead that the other's leaves out)."""
    run()

    def batch() -> None:
        for _ in range(10):
            run()

    return float(np.median([elapsed_ms(batch) / 10 / 1e3 for _ in range(5)]))


def _torch_elapsed_ms(batch: Callable[[], None]) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    batch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _cupy_elapsed_ms(batch: Callable[[], None]) -> float:
    import cupy as cp

    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    batch()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end)


def device_bench() -> None:
    rng = np.random.default_rng(0)
    peers, label, to_dev, elapsed = None, "", None, None
    table = torch_peers()
    if table is not None:
        import torch

        peers, label = table, "PyTorch (cuBLAS/cuDNN)"
        to_dev, elapsed = (lambda x: torch.from_numpy(x).cuda()), _torch_elapsed_ms
    else:
        table = cupy_peers()
        if table is not None:
            import cupy as cp

            peers, label = table, "CuPy (cuBLAS)"
            to_dev, elapsed = cp.asarray, _cupy_elapsed_ms
    print(f"peer: {label or 'none installed (pip install torch or cupy)'}")
    print("template args | ember GFLOP/s | peer GFLOP/s | ratio (peer time / ember time)")
    for name, args, flops_of in WORKLOADS:
        mod = build(name, args, arch=None)
        flops = flops_of(*args)
        shapes = [tuple(int(s.value) for s in b.shape) for b in mod.program.params]
        arrays = [rng.standard_normal(s).astype("float32") for s in shapes]
        t = mod.time_evaluator(number=10, repeat=5)(*arrays).median
        line = f"{name} {args[:-1]} | {flops / t / 1e9:9.1f}"
        if peers is not None and name in peers:
            run = peers[name](args, *[to_dev(x) for x in arrays[:-1]])
            tp = _time(run, elapsed)
            line += f" | {flops / tp / 1e9:9.1f} | {tp / t:.2f}x"
        print(line, flush=True)


def tensorcore_table() -> None:
    """Resources (NVRTC) and the emulator's bank-conflict profile of each tensor-core
    template at its default config."""
    rng = np.random.default_rng(0)
    print("tensor-core templates, default config (fp16 in, fp32 accumulate and out)")
    print(
        f"{'template':<30}{'args':<34}{'arch':<7}{'regs':>5}{'smem B':>8}{'spill B':>8}"
        f"  | emulated on{'':<25}{'ldmatrix conflicts':>19}{'smem conflicts':>15}"
    )
    for name, args, small in TENSORCORE:
        mod = build(name, small, "sm_80")
        inputs = [rng.uniform(-1, 1, p.shape).astype(p.dtype) for p in mod.signatures[0].params]
        (prof,) = mod.emulate(*inputs, profile=True)
        for arch in ("sm_80", "sm_90"):
            use = next(iter(build(name, args, arch).resource_usage().values()))
            smem = use.shared_bytes + use.dynamic_shared_bytes
            print(
                f"{name:<30}{str(args):<34}{arch:<7}{use.registers:>5}{smem:>8}"
                f"{use.local_bytes:>8}  | {str(small):<36}{prof.ldmatrix_bank_conflicts:>19}"
                f"{prof.shared_bank_conflicts:>15}",
                flush=True,
            )


def tensorcore_device_bench() -> None:
    """fp16 GEMM 4096^3 on the tensor cores beside cuBLAS (PyTorch, else CuPy)."""
    M = N = K = 4096
    flops = 2.0 * M * N * K
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (M, K)).astype("float16")
    b = rng.uniform(-1, 1, (K, N)).astype("float16")
    c = np.zeros((M, N), "float32")
    mod = build("matmul_tensorcore.cuda", (M, N, K), arch=None)
    t = mod.time_evaluator(number=10, repeat=5)(a, b, c).median
    line = f"matmul_tensorcore fp16 {M}x{N}x{K} | ember {flops / t / 1e12:6.1f} TFLOP/s"
    if torch_peers() is not None:
        import torch

        da, db = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tp = _time(lambda: torch.matmul(da, db), _torch_elapsed_ms)
        line += f" | cuBLAS (PyTorch) {flops / tp / 1e12:6.1f} TFLOP/s | {tp / t:.2f}x"
    elif cupy_peers() is not None:
        import cupy as cp

        da, db = cp.asarray(a), cp.asarray(b)
        tp = _time(lambda: cp.matmul(da, db), _cupy_elapsed_ms)
        line += f" | cuBLAS (CuPy) {flops / tp / 1e12:6.1f} TFLOP/s | {tp / t:.2f}x"
    print(line, flush=True)


ATTENTION_SEQS = (128, 1024, 4096)  # BERT-base's heads (12 of 64), batch 1, float32
ATTENTION_ROWS = (64, 128)  # query rows (threads) per block: each is timed, the best shown


def _attention_kernel(S: int, arch: str | None, rows: int = 64) -> Any:
    import ember
    from ember import te
    from ember.codegen_cuda.schedules.attention import flash_attention_cuda
    from ember.tir.topi.attention import AttentionLayout

    shape, mask = (1, 12, S, 64), (1, 1, 1, S)
    ph = [te.placeholder(x, name=n) for x, n in zip((shape,) * 3 + (mask,), "qkvm")]
    out = flash_attention_cuda(*ph[:3], ph[3], 0.125, AttentionLayout(), rows=rows)
    target = "cuda" if arch is None else f"cuda -arch={arch}"
    return ember.build(te.create_schedule(out.op), [*ph, out], target=target, name="attention")


def _torch_attention(q: Any, k: Any, v: Any, mask: Any) -> tuple[Callable, Callable]:
    """PyTorch's unfused attention (the scores stored) and its fused SDPA, on device tensors."""
    import torch
    import torch.nn.functional as F

    def unfused() -> Any:
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125 + mask, -1) @ v

    def sdpa() -> Any:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125)

    return unfused, sdpa


def attention_bench(gpu: bool) -> None:
    """The fused attention kernel (``codegen_cuda/schedules/attention.py``: online softmax,
    no stored scores) at BERT-base's heads with a padding mask. Always: NVRTC's registers,
    shared bytes and spills. With a device and PyTorch: its time beside PyTorch's
    ``scaled_dot_product_attention`` and the unfused ``softmax(Q Kᵀ s + mask) V`` (the
    scores stored), its result checked against the unfused one, and the device memory each
    takes beyond its inputs and output (PyTorch's allocator peak; Ember's kernel allocates
    none)."""
    print("fused attention, 12 heads x 64, batch 1, float32, padding mask")
    for S in ATTENTION_SEQS:
        for arch in ("sm_80", "sm_90"):
            use = next(iter(_attention_kernel(S, arch).resource_usage().values()))
            print(
                f"  S={S:<5} {arch}: {use.registers} registers, {use.shared_bytes} shared "
                f"bytes, {use.local_bytes} spilled",
                flush=True,
            )
    if not gpu or torch_peers() is None:
        print("  attention timing: needs a CUDA device and PyTorch; not timed here")
        return
    import torch

    rng = np.random.default_rng(0)
    print(
        "S | ember us | unfused (PyTorch) us | SDPA (PyTorch) us | unfused/ember | SDPA/ember"
        " | max |err| vs unfused | extra MiB unfused / SDPA / ember"
    )
    for S in ATTENTION_SEQS:
        q, k, v = (rng.standard_normal((1, 12, S, 64)).astype("float32") for _ in range(3))
        mask = np.zeros((1, 1, 1, S), "float32")
        mask[..., S - S // 8 :] = -10000.0
        out = np.zeros_like(q)
        mods = {rows: _attention_kernel(S, None, rows) for rows in ATTENTION_ROWS}
        times = {
            rows: mod.time_evaluator(number=10, repeat=5)(q, k, v, mask, out).median
            for rows, mod in mods.items()
        }
        rows = min(times, key=times.__getitem__)
        t = times[rows]
        mods[rows](q, k, v, mask, out)
        unfused, sdpa = _torch_attention(*(torch.from_numpy(x).cuda() for x in (q, k, v, mask)))
        extra = []
        for fn in (unfused, sdpa):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            want = fn()
            torch.cuda.synchronize()
            extra.append((torch.cuda.max_memory_allocated() - base - want.nbytes) / 2**20)
        err = float(np.abs(unfused().cpu().numpy() - out).max())
        tu, ts = _time(unfused, _torch_elapsed_ms), _time(sdpa, _torch_elapsed_ms)
        print(
            f"{S} | {t * 1e6:9.1f} | {tu * 1e6:9.1f} | {ts * 1e6:9.1f} | {tu / t:.2f}x | "
            f"{ts / t:.2f}x | {err:.1e} | {extra[0]:.1f} / {extra[1]:.1f} / 0 | rows "
            + ", ".join(f"{r}: {x * 1e6:.1f} us" for r, x in times.items()),
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tensorcore", action="store_true", help="only the tensor-core section")
    parser.add_argument("--attention", action="store_true", help="only the attention section")
    opts = parser.parse_args()
    try:
        from ember.codegen_cuda.device import device_available
    except ImportError:  # the runtime is not part of this build yet

        def device_available() -> bool:
            return False

    gpu = device_available()
    if opts.attention:
        attention_bench(gpu)
        return
    if not opts.tensorcore:
        device_bench() if gpu else resource_table()
    tensorcore_table()
    if gpu:
        tensorcore_device_bench()
    else:
        print("tensor-core GEMM timing: no CUDA device here, not timed on a GPU")


if __name__ == "__main__":
    main()
