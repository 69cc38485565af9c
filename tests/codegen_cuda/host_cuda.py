"""Run printed CUDA C on the host: a test aid that checks the printer's arithmetic without a GPU.

The printed kernel is compiled by the system C++ compiler with a small shim
(``threadIdx``/``blockIdx`` as globals, ``half`` as ``_Float16``, the CUDA math
names CUDA adds to C's) and called once per thread, block by block, through
ctypes. Threads run one after another, so only kernels without barriers can run
this way; that is enough to check expressions, casts, intrinsics, floor division
and vector lanes numerically against numpy.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from itertools import product
from pathlib import Path

import numpy as np

from ember.codegen_cuda.printer_cuda import print_kernel
from ember.tir import stmt as S

SHIM = r"""
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <algorithm>
struct ember_dim3 { unsigned x, y, z; };
static ember_dim3 threadIdx, blockIdx;
extern "C" void ember_set_index(unsigned bx, unsigned by, unsigned bz,
                                unsigned tx, unsigned ty, unsigned tz) {
  blockIdx = {bx, by, bz};
  threadIdx = {tx, ty, tz};
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) alignas(n)
#define __syncthreads() ((void)0)
#define __trap() abort()
using std::min; using std::max; using std::isnan; using std::isinf; using std::isfinite;
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
typedef _Float16 half;
inline half __float2half(float x) { return (half)x; }
inline float __half2float(half x) { return (float)x; }
// CUDA's __hmin/__hmax: a NaN operand is dropped (as fminf/fmaxf), and +0.0 > -0.0
inline half __hmin(half a, half b) {
  if (a != a || b != b) return a != a ? b : a;
  if (a == 0 && b == 0) return std::signbit((float)a) ? a : b;
  return a < b ? a : b;
}
inline half __hmax(half a, half b) {
  if (a != a || b != b) return a != a ? b : a;
  if (a == 0 && b == 0) return std::signbit((float)a) ? b : a;
  return a > b ? a : b;
}
struct __nv_bfloat16 { unsigned short bits; };  // bfloat16 computes in float, rounds to even
inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned u = (unsigned)h.bits << 16; float f; std::memcpy(&f, &u, 4); return f;
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  unsigned u; std::memcpy(&u, &f, 4);
  if (f != f) return {(unsigned short)((u >> 16) | 0x40)};
  return {(unsigned short)((u + 0x7FFF + ((u >> 16) & 1)) >> 16)};
}
#define EMBER_BF16_OP(op) \
  inline __nv_bfloat16 operator op(__nv_bfloat16 a, __nv_bfloat16 b) { \
    return __float2bfloat16(__bfloat162float(a) op __bfloat162float(b)); }
EMBER_BF16_OP(+) EMBER_BF16_OP(-) EMBER_BF16_OP(*) EMBER_BF16_OP(/)
#define EMBER_BF16_CMP(op) \
  inline bool operator op(__nv_bfloat16 a, __nv_bfloat16 b) { \
    return __bfloat162float(a) op __bfloat162float(b); }
EMBER_BF16_CMP(<) EMBER_BF16_CMP(<=) EMBER_BF16_CMP(>) EMBER_BF16_CMP(>=) EMBER_BF16_CMP(==)
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) {
  float x = __bfloat162float(a), y = __bfloat162float(b);
  if (x != x || y != y) return x != x ? b : a;
  if (x == 0 && y == 0) return std::signbit(x) ? a : b;
  return x < y ? a : b;
}
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) {
  float x = __bfloat162float(a), y = __bfloat162float(b);
  if (x != x || y != y) return x != x ? b : a;
  if (x == 0 && y == 0) return std::signbit(x) ? b : a;
  return x > y ? a : b;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __int_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline double __longlong_as_double(long long v) { double f; std::memcpy(&f, &v, 8); return f; }
struct float2 { float x, y; };  struct float4 { float x, y, z, w; };
struct int2 { int x, y; };  struct int4 { int x, y, z, w; };
struct uint2 { unsigned x, y; };  struct uint4 { unsigned x, y, z, w; };
struct double2 { double x, y; };  struct longlong2 { long long x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }
"""


def have_compiler() -> bool:
    return shutil.which("g++") is not None


def compile_host(func: S.PrimFunc, workdir: Path) -> ctypes.CDLL:
    kernel = print_kernel(func)
    kernel = "\n".join(ln for ln in kernel.splitlines() if not ln.startswith("#include <cuda_"))
    source = SHIM + kernel
    cpp, lib = workdir / f"{func.name}.cpp", workdir / f"{func.name}.so"
    cpp.write_text(source)
    cmd = ["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-w", str(cpp), "-o", str(lib)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode:
        raise AssertionError(f"host compile failed:\n{result.stderr}\n{source}")
    return ctypes.CDLL(str(lib))


def run_on_host(func: S.PrimFunc, arrays: list[np.ndarray], workdir: Path) -> None:
    """Run ``func`` on ``arrays`` (one per parameter, written in place) thread by thread."""
    lib = compile_host(func, workdir)
    kernel = getattr(lib, func.name)
    kernel.restype = None
    grid, block = func.attr("launch")
    pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in arrays]
    for b in product(*(range(n) for n in reversed(grid))):
        for t in product(*(range(n) for n in reversed(block))):
            lib.ember_set_index(*reversed(b), *reversed(t))
            kernel(*pointers)
