"""The pass runner and the target-independent pass list.

A pass is a named pure function ``PrimFunc -> PrimFunc``. ``run_passes`` applies
a list of them in order, skipping names in ``disabled``; it can verify the IR
after each pass (``EMBER_VERIFY_IR=1``, on in tests), dump the text before and
after each pass to ``EMBER_DUMP_DIR``, and time each pass. A crash inside a
pass becomes an ``InternalError`` naming the pass and the function, with the
cause chained; an ``EmberError`` raised on purpose passes through with that
context added.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ember.errors import EmberError, InternalError
from ember.tir.stmt import PrimFunc

PassFn = Callable[[PrimFunc], PrimFunc]


@dataclass(frozen=True)
class Pass:
    name: str
    fn: PassFn

    def __call__(self, func: PrimFunc) -> PrimFunc:
        return self.fn(func)


def default_passes() -> list[Pass]:
    """Target-independent optimisation after lowering, in order."""
    from ember.tir.transform.flatten_buffers import flatten_buffers
    from ember.tir.transform.loop_partition import loop_partition
    from ember.tir.transform.simplify import simplify
    from ember.tir.transform.unroll_loops import unroll_loops
    from ember.tir.transform.vectorize_loops import vectorize_loops
    from ember.tir.transform.widen_index_dtypes import widen_index_dtypes

    return [
        # before the simplifier folds constants: (io * 4 + ii) * 1000000007 must not
        # become ii * 1000000007 + io * 4000000028 wrapped to int32
        Pass("widen_index_dtypes", widen_index_dtypes),
        Pass("simplify", simplify),
        Pass("flatten_buffers", flatten_buffers),
        Pass("widen_index_dtypes", widen_index_dtypes),  # the flat index's products
        Pass("simplify", simplify),
        Pass("loop_partition", loop_partition),
        Pass("simplify", simplify),
        Pass("vectorize_loops", vectorize_loops),
        Pass("unroll_loops", unroll_loops),
        Pass("simplify", simplify),
    ]


PASS_NAMES = (
    "simplify",
    "flatten_buffers",
    "widen_index_dtypes",
    "loop_partition",
    "vectorize_loops",
    "unroll_loops",
)

# Passes that cannot be skipped: later stages rely on what they guarantee.
REQUIRED = frozenset({"flatten_buffers", "widen_index_dtypes"})


def run_passes(
    func: PrimFunc,
    passes: Sequence[Pass],
    disabled: Sequence[str] = (),
    verify: bool | None = None,
    timings: dict[str, float] | None = None,
) -> PrimFunc:
    from ember import config

    if verify is None:
        verify = config.verify_ir()
    dump_dir = config.dump_dir()
    for step, p in enumerate(passes):
        if p.name in disabled and p.name not in REQUIRED:
            continue
        before = func
        start = time.perf_counter()
        try:
            func = p(func)
        except EmberError as e:
            raise e.add_context(f"in pass '{p.name}' on function '{func.name}'") from None
        except Exception as e:
            raise InternalError(f"pass '{p.name}' failed on function '{func.name}': {e}") from e
        if timings is not None:
            timings[p.name] = timings.get(p.name, 0.0) + time.perf_counter() - start
        if dump_dir:
            _dump(dump_dir, step, p.name, before, func)
        if verify:
            from ember.tir.verify import verify_well_formed

            verify_well_formed(func, after=p.name)
    return func


def _dump(folder: Path, step: int, name: str, before: PrimFunc, after: PrimFunc) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{after.name}.{step:02d}.{name}"
    if before is not after:
        (folder / f"{stem}.before.tir").write_text(repr(before) + "\n")
    (folder / f"{stem}.after.tir").write_text(repr(after) + "\n")
