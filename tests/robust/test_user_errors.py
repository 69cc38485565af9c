"""Mistakes that used to escape as bare Python exceptions now raise Ember errors naming
the argument, and integer max pooling (which overflowed building -inf) computes the
right numbers on the CPU and through the CUDA emulator."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError, DLPackExportError, EmberError
from ember.runtime import nd
from ember.tir import expr as E
from ember.tuner import create_task
from ember.tuner.template import template


def _max_pool_reference(x: np.ndarray, k: int, s: int, pad: int) -> np.ndarray:
    """Max over the in-bounds part of each window only (no padding value involved)."""
    N, C, H, W = x.shape
    OH = (H + 2 * pad - k) // s + 1
    OW = (W + 2 * pad - k) // s + 1
    out = np.empty((N, C, OH, OW), x.dtype)
    for y in range(OH):
        for z in range(OW):
            r0, c0 = y * s - pad, z * s - pad
            rows = slice(max(r0, 0), min(r0 + k, H))
            cols = slice(max(c0, 0), min(c0 + k, W))
            out[:, :, y, z] = x[:, :, rows, cols].max(axis=(2, 3))
    return out


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8"])
@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_integer_max_pool_pads_with_the_lowest_value(dtype: str, target: str) -> None:
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    # all-negative windows at the border: a zero padding value would win there
    x = rng.integers(info.min, min(info.max, 0) + 1, size=(2, 3, 7, 9)).astype(dtype)
    if dtype == "uint8":
        x = rng.integers(0, 256, size=(2, 3, 7, 9)).astype(dtype)
    task = create_task(f"pool2d.{target}", args=(2, 3, 7, 9, (3, 3), (2, 2), 1, "max", dtype))
    sch, args = task.instantiate()
    mod = ember.build(sch, args, target=task.target)
    want = _max_pool_reference(x, 3, 2, 1)
    y = np.zeros(want.shape, dtype) + 7
    if target == "llvm":
        mod(x, y)
    else:
        mod.emulate(x, y)
    np.testing.assert_array_equal(y, want)


def test_integer_constant_of_infinity_is_an_argument_error() -> None:
    with pytest.raises(ArgumentError, match="int32 constant of inf"):
        E.const(float("inf"), "int32")


@pytest.mark.parametrize(
    ("name", "args", "phrase"),
    [
        ("conv2d_nchw.llvm", (1, 3, 8, 8, 4, 3, 3, 0), "stride"),
        ("conv2d_nchw.cuda", (1, 3, 8, 8, 4, 3, 3, 0), "stride"),
        ("conv2d_nchw_gemm.cuda", (1, 3, 8, 8, 4, 3, 3, 0), "stride"),
        ("conv2d_nchw.cuda", (1, 3, 8, 8, 4, 3, 3, 1, 0, 0), "dilation"),
        ("conv2d_nchw.llvm", (1, 3, 8, 8, 4, 3, 3, 1, 0, 0), "dilation"),
        ("depthwise_conv2d_nchw.cuda", (1, 3, 8, 8, 3, 3, 0), "stride"),
        ("pool2d.cuda", (1, 3, 8, 8, (2, 2), (0, 2), 0, "max"), "stride"),
        ("pool2d.llvm", (1, 3, 8, 8, (2, 2), (2, 0), 0, "avg"), "stride"),
        ("pool2d.cuda", (1, 3, 8, 8, (0, 2), (1, 1), 0, "max"), "kernel"),
    ],
)
def test_zero_stride_dilation_or_kernel_is_an_argument_error(
    name: str, args: tuple, phrase: str
) -> None:
    with pytest.raises(ArgumentError, match=f"{phrase} must be a positive int"):
        create_task(name, args=args)


@pytest.mark.parametrize("args", [(4, 4), (4, 4, 4, "float32", 5), ()])
def test_task_with_the_wrong_number_of_arguments(args: tuple) -> None:
    with pytest.raises(ArgumentError, match=r"'matmul.llvm' takes arguments \(M, N, K, dtype\)"):
        create_task("matmul.llvm", args=args)


def test_task_args_must_be_a_tuple() -> None:
    with pytest.raises(ArgumentError, match="args must be a tuple"):
        create_task("matmul.llvm", args=4)  # type: ignore[arg-type]


def test_template_called_directly_with_wrong_arguments() -> None:
    @template("robust_two_args.llvm", override=True)
    def two(a: int, b: int):  # noqa: ANN202
        raise AssertionError("must not run")

    with pytest.raises(ArgumentError, match=r"'robust_two_args.llvm' takes arguments \(a, b\)"):
        two(1)
    with pytest.raises(ArgumentError, match="unexpected keyword"):
        two(1, 2, c=3)


class _Failing:
    """A producer whose ``__dlpack__`` fails the way real ones do."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __dlpack__(self, **kwargs):  # noqa: ANN003, ANN204
        raise self.error

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _add_one():  # noqa: ANN202
    A = ember.te.placeholder((5,), name="A")
    B = ember.te.compute((5,), lambda i: A[i] + 1.0, name="B")
    return ember.build(ember.te.create_schedule(B.op), [A, B], target="llvm", name="add_one")


@pytest.mark.parametrize(
    "error", [ValueError("bad"), BufferError("bad"), AttributeError("bad"), KeyError("bad")]
)
def test_failing_dlpack_producer_is_an_argument_error(error: Exception) -> None:
    mod = _add_one()
    with pytest.raises(ArgumentError, match="argument 'A'.*through DLPack"):
        mod(_Failing(error), np.zeros(5, np.float32))


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [({"stream": 1}, "stream"), ({"dl_device": (2, 0)}, "device")],
)
def test_cpu_array_dlpack_refusals_are_ember_errors(kwargs: dict, phrase: str) -> None:
    a = nd.array(np.arange(4, dtype=np.float32))
    with pytest.raises(DLPackExportError, match=phrase) as info:
        a.__dlpack__(**kwargs)
    assert isinstance(info.value, BufferError)  # what DLPack consumers catch
    assert isinstance(info.value, EmberError)


def test_big_endian_array_error_names_the_byte_order() -> None:
    mod = _add_one()
    a = np.arange(5, dtype=">f4")
    with pytest.raises(ArgumentError) as info:
        mod(a, np.zeros(5, np.float32))
    message = str(info.value)
    assert "got float32 (big-endian)" in message
    assert "newbyteorder" in message
    b = np.zeros(5, np.float32)
    mod(a.astype(a.dtype.newbyteorder("=")), b)  # the suggested fix works
    np.testing.assert_array_equal(b, np.arange(5, dtype=np.float32) + 1)
