"""The workloads ``bench_autosched.py`` tunes without a template, and the template tasks
they are compared with.

Module-level and registered with ``@register_workload``, so the tuner's measuring
workers (spawned with this process's ``sys.path``) import them by module and name. The
computes are the ones a model's graph gets (``tir/topi``): ``nn.matmul`` and
``conv.conv_nd`` (its padding a stage of its own), so the sketches see the DAG a fused
group would give them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ember import te
from ember.tir.topi import conv, nn
from ember.tuner.auto import register_workload


@register_workload
def matmul(m: int, n: int, k: int) -> list[Any]:
    """``C = A @ B`` with A (m, k) and B (k, n), float32."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    return [a, b, nn.matmul(a, b)]


@register_workload
def conv2d(c: int, h: int, w: int, f: int, kh: int) -> list[Any]:
    """A stride-1, 'same'-padded NCHW convolution, batch 1, float32 (ResNet's 3x3 convs)."""
    x = te.placeholder((1, c, h, w), name="X")
    wt = te.placeholder((f, c, kh, kh), name="W")
    p = kh // 2
    return [x, wt, conv.conv_nd(x, wt, None, (1, 1), (p, p, p, p), (1, 1))]


@dataclass(frozen=True)
class BenchTask:
    """One row of the tables: an auto-scheduled workload and the template task that has
    the same computation (the template space's best is what ``reach`` aims at)."""

    name: str
    workload: Any
    args: tuple[Any, ...]
    template: str
    template_args: tuple[Any, ...]


def conv_task(c: int, hw: int, f: int, template: str) -> BenchTask:
    """The 3x3 same-padded conv ``c -> f`` channels at ``hw`` x ``hw``."""
    return BenchTask(
        f"conv{c}->{f}@{hw}",
        conv2d,
        (c, hw, hw, f, 3),
        template,
        (1, c, hw, hw, f, 3, 3, 1, 1, 1, "float32"),
    )


def matmul_task(m: int, n: int, k: int) -> BenchTask:
    """The GEMM ``m x n x k`` (``matmul.llvm``)."""
    return BenchTask(f"matmul{m}x{n}x{k}", matmul, (m, n, k), "matmul.llvm", (m, n, k, "float32"))


def tasks(quick: bool, conv_template: str = "conv2d_NCHWc.llvm") -> list[BenchTask]:
    """The issue's two reach tasks (matmul 1024^3, ResNet-18's 64->64 3x3 conv at 56^2), or
    their small stand-ins for ``--quick`` (matmul 128^3, a 16->16 conv at 14^2)."""
    if quick:
        return [matmul_task(128, 128, 128), conv_task(16, 14, 16, conv_template)]
    return [matmul_task(1024, 1024, 1024), conv_task(64, 56, 64, conv_template)]


def new_shape_task(quick: bool) -> BenchTask:
    """The shape the warm-start test tunes after the others' records: a GEMM of another shape."""
    return matmul_task(96, 160, 112) if quick else matmul_task(512, 768, 384)
