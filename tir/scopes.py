"""Storage scopes: where a buffer lives, and the rules each scope brings.

``global`` (device or host memory), ``shared`` (a GPU block's), ``warp`` (memory a
warp's 32 lanes hold between them, exchanged by shuffles: TVM's warp memory),
``local`` (a thread's registers or stack) and the tensor-core fragments of the
``wmma`` API, ``wmma.matrix_a``, ``wmma.matrix_b`` and ``wmma.accumulator``: a
16x16 tile held by a whole warp, each lane a share, used only through
``wmma::load_matrix_sync`` / ``mma_sync`` / ``store_matrix_sync`` (tensor
intrinsics). :func:`thread_rank_relaxed` is TVM's rule (``NeedRelax``) for which
thread-bound loops outside a stage's attach point its region spans; bound
inference and ``verify_gpu`` read the rest from here.
"""

from __future__ import annotations

FRAGMENT_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")
STORAGE_SCOPES = ("global", "shared", "warp", "local", *FRAGMENT_SCOPES)
ON_CHIP_SCOPES = frozenset(STORAGE_SCOPES) - {"global"}
WARP_SIZE = 32
FRAGMENT_ELEMENTS = 16 * 16  # one m16n16k16 fragment's tile
# The element types each fragment may hold (tf32 fragments hold float32).
FRAGMENT_DTYPES = {
    "wmma.matrix_a": ("float16", "bfloat16", "int8", "uint8", "float32"),
    "wmma.matrix_b": ("float16", "bfloat16", "int8", "uint8", "float32"),
    "wmma.accumulator": ("float32", "float16", "int32"),
}


def is_fragment(scope: str) -> bool:
    """Whether ``scope`` is a tensor-core fragment, held in registers across a warp."""
    return scope in FRAGMENT_SCOPES


def is_per_warp(scope: str) -> bool:
    """Storage a warp holds together, not each thread: its size is not per thread."""
    return scope == "warp" or scope in FRAGMENT_SCOPES


def thread_rank_relaxed(scope: str, thread_tag: str) -> bool:
    """Does a stage in ``scope`` computed inside a loop bound to ``thread_tag`` cover every
    iteration of that loop? ``global``: every block and thread loop (each iteration's
    values are visible to all); ``shared``: the thread loops (one copy serves the block);
    ``warp``: ``threadIdx.x`` (the lanes of the warp); ``local`` and fragments: none."""
    if scope == "global":
        return True
    if scope == "shared":
        return thread_tag.startswith("threadIdx")
    if scope == "warp":
        return thread_tag == "threadIdx.x"
    return False
