"""Pass ``verify_gpu``: reject kernels the GPU cannot run, before any compiler sees them.

Expects: a kernel (attrs ``kernel`` and ``launch``) for an architecture.
Guarantees: at most 1024 threads per block (or the target's ``-max-threads-per-block``),
each block and grid dimension within CUDA's own limit (a launch past one fails at run
time with an opaque "invalid argument", or on the emulator not at all), shared memory
within the architecture's per-block limit (``resources.ARCH_LIMITS``, one row per
architecture NVRTC offers, or the target's ``-max-shared-memory-per-block``), and
per-thread local arrays within a budget, where
``warp`` buffers and ``wmma`` fragments count per warp (a 32nd of their size per
lane), fragments hold whole 16x16 tiles of a tensor-core type and warp buffers a
multiple of 32 elements, and each tensor-core instruction exists on the architecture
(``mma.sync`` m16n8k16/m16n8k8 and bf16 ``wmma`` from sm_80, ``ldmatrix`` from sm_75,
``wmma`` from sm_70);
otherwise a ``LoweringError`` saying which limit, by how much, and what to change.
"""

from __future__ import annotations

from ember.codegen_cuda.resources import ARCH_LIMITS, arch_limits, arch_number
from ember.errors import LoweringError
from ember.tir import dtype as dt
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import post_order_stmts, post_order_visit
from ember.tir.scopes import FRAGMENT_DTYPES, FRAGMENT_ELEMENTS, WARP_SIZE, is_fragment, is_per_warp
from ember.tir.tensor_core import TENSOR_CORE_OPS

MAX_THREADS_PER_BLOCK = 1024
# CUDA's per-dimension limits (the same for every architecture since sm_30).
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
MAX_LOCAL_BYTES_PER_THREAD = 16 * 1024


def _bytes(buf: object) -> int:
    (size,) = buf.shape  # type: ignore[attr-defined]
    if not isinstance(size, E.IntImm):
        raise LoweringError(f"buffer '{buf.name}' has a non-constant size on the GPU")  # type: ignore[attr-defined]
    return size.value * dt.bytes_of(buf.dtype)  # type: ignore[attr-defined]


def _check_dims(
    kernel: str, what: str, tag: str, dims: tuple[int, ...], limits: tuple[int, ...]
) -> None:
    for axis, size, limit in zip("xyz", dims, limits):
        if isinstance(size, int) and size > limit:
            raise LoweringError(
                f"kernel '{kernel}' has {what}.{axis} = {size}; CUDA allows at most {limit}: "
                f"bind fewer iterations to {tag}.{axis} (split the axis, or move work to "
                f"another dimension)"
            )


def _check_warp_storage(kernel: str, buf: object) -> None:
    """A fragment holds whole 16x16 tiles of a type the tensor cores take; warp memory
    spreads evenly over the 32 lanes."""
    (size,) = buf.shape  # type: ignore[attr-defined]
    n = size.value if isinstance(size, E.IntImm) else 0
    scope, name, dtype = buf.scope, buf.name, buf.dtype  # type: ignore[attr-defined]
    if is_fragment(scope):
        if dtype not in FRAGMENT_DTYPES[scope]:
            raise LoweringError(
                f"kernel '{kernel}': fragment '{name}' in '{scope}' holds {dtype}; it takes "
                f"{', '.join(FRAGMENT_DTYPES[scope])}"
            )
        if n % FRAGMENT_ELEMENTS:
            raise LoweringError(
                f"kernel '{kernel}': fragment '{name}' in '{scope}' has {n} elements, not a "
                f"whole number of 16x16 tiles ({FRAGMENT_ELEMENTS} each): a wmma fragment is "
                "computed per warp, not per thread; tile its stage by 16 x 16"
            )
    elif n % WARP_SIZE:
        raise LoweringError(
            f"kernel '{kernel}': warp buffer '{name}' has {n} elements, not a multiple of "
            f"the {WARP_SIZE} lanes that hold it"
        )


def _check_tensor_cores(func: S.PrimFunc, arch: str) -> None:
    """Every tensor-core call's instruction exists on ``arch``."""
    have = arch_number(arch)  # sm_90a is 90: the suffix selects features, not a generation
    bf16_fragments: set[E.Var] = set()
    calls: list[E.Call] = []

    def visit(node: object) -> None:
        if isinstance(node, S.Allocate) and node.buffer.dtype == "bfloat16":
            bf16_fragments.add(node.buffer.data)
        elif isinstance(node, E.Call) and node.op in TENSOR_CORE_OPS:
            calls.append(node)

    post_order_visit(func.body, visit, once=True)
    for call in calls:
        if call.op is E.Intrinsic.PTX_MMA:
            floor, what = 80, f"mma.sync.aligned.{call.args[0].value}"  # type: ignore[attr-defined]
        elif call.op is E.Intrinsic.PTX_LDMATRIX:
            floor, what = 75, "ldmatrix"
        elif any(a in bf16_fragments for a in call.args):
            floor, what = 80, "bf16 wmma"
        else:
            floor, what = 70, "wmma"
        if have < floor:
            raise LoweringError(
                f"kernel '{func.name}' uses {what}, which needs sm_{floor} or newer; the build "
                f"targets {arch}: build for a newer architecture or schedule without tensor cores"
            )


def verify_gpu(
    func: S.PrimFunc,
    arch: str = "sm_80",
    max_threads: int | None = None,
    max_shared: int | None = None,
) -> S.PrimFunc:
    """Check ``func`` against ``arch``'s limits (:data:`~ember.codegen_cuda.resources.
    ARCH_LIMITS`); ``max_threads`` and ``max_shared`` (bytes), from the target's
    ``-max-threads-per-block`` and ``-max-shared-memory-per-block``, replace the
    architecture's per-block limits, as TVM's ``verify_gpu_code`` takes them from the target."""
    # An architecture without a row (sm_35, sm_99) is one no supported NVRTC offers (a test
    # holds the table to nvrtcGetSupportedArchs); NVRTC refuses it with its list, so here it
    # is held to the limits every architecture has: 1024 threads, 48 KiB of static shared.
    known = arch_number(arch) and f"sm_{arch_number(arch)}" in ARCH_LIMITS
    portable_shared = 48 * 1024
    shared_cap = arch_limits(arch).max_shared_per_block if known else portable_shared
    thread_limit = max_threads or MAX_THREADS_PER_BLOCK
    where = "the target's -max-threads-per-block" if max_threads else f"{arch}'s limit"
    grid, block = func.attr("launch")
    threads = block[0] * block[1] * block[2]
    if threads > thread_limit:
        raise LoweringError(
            f"kernel '{func.name}' uses {threads} threads per block ({block[0]}x{block[1]}x"
            f"{block[2]}); {where} is {thread_limit}: split the thread axes smaller"
        )
    _check_dims(func.name, "blockDim", "threadIdx", block, MAX_BLOCK_DIM)
    _check_dims(func.name, "gridDim", "blockIdx", grid, MAX_GRID_DIM)
    shared = 0
    local = 0

    def visit(node: object) -> None:
        nonlocal shared, local
        if isinstance(node, S.Allocate):
            buf = node.buffer
            if buf.scope == "shared":
                shared += _bytes(buf)
            elif buf.scope == "local":
                local += _bytes(buf)
            elif is_per_warp(buf.scope):  # a warp's 32 lanes hold it between them
                _check_warp_storage(func.name, buf)
                local += -(-_bytes(buf) // WARP_SIZE)

    post_order_stmts(func.body, visit)
    _check_tensor_cores(func, arch)
    limit = max_shared or shared_cap
    if shared > limit:
        who = "the target's -max-shared-memory-per-block" if max_shared else arch
        raise LoweringError(
            f"kernel '{func.name}' needs {shared} bytes of shared memory per block; {who} "
            f"allows {limit}: use smaller tiles for the shared stages"
        )
    if local > MAX_LOCAL_BYTES_PER_THREAD:
        raise LoweringError(
            f"kernel '{func.name}' needs {local} bytes of local memory per thread (limit "
            f"{MAX_LOCAL_BYTES_PER_THREAD}): use smaller register tiles"
        )
    return func
