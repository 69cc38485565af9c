"""The target-independent TIR pass list, and the user passes' place in it.

The pass contract and the runner live in :mod:`.runner` (one runner for TIR and graph
passes); they are re-exported here, where the targets' pass lists import them.
``default_passes`` is the literal list run for every target after lowering (and
``codegen_cuda/pipeline.py`` the CUDA target's own).

User passes (``tir.add_lower_pass``) run after the built-in pass *phase* they
name, as in TVM: phase 0 before any built-in pass (multi-dimensional buffers),
1 after flattening, 2 after the loop transformations (partition, vectorize,
unroll), 3 at the end of the list (a phase above 3 counts as 3).
"""

from __future__ import annotations

from ember.tir.transform.context import PassContext
from ember.tir.transform.flatten_buffers import flatten_buffers
from ember.tir.transform.instrument_bound_checkers import instrument_bound_checkers
from ember.tir.transform.loop_partition import loop_partition
from ember.tir.transform.prim_func_pass import as_pass
from ember.tir.transform.runner import (
    TIR,
    IRKind,
    Pass,
    check_disabled,
    functions_of,
    pass_names,
    run_passes,
    with_functions,
)
from ember.tir.transform.simplify import simplify
from ember.tir.transform.unroll_loops import unroll_loops
from ember.tir.transform.unswitch_guards import unswitch_guards
from ember.tir.transform.unswitch_selects import unswitch_selects
from ember.tir.transform.vectorize_loops import vectorize_loops
from ember.tir.transform.widen_index_dtypes import widen_index_dtypes


def default_passes(ctx: PassContext | None = None) -> list[Pass]:
    """Target-independent optimisation after lowering, in order, with the user's passes."""
    user = user_passes_by_phase(ctx or PassContext.current())
    return [
        *user[0],
        # phase 1: one index per access. Index types widen before the simplifier folds
        # constants: (io * 4 + ii) * 1000000007 must not become ii * 1000000007 +
        # io * 4000000028 wrapped to int32
        Pass("widen_index_dtypes", widen_index_dtypes, required=True),
        Pass("simplify", simplify),
        Pass("flatten_buffers", flatten_buffers, required=True),
        Pass("widen_index_dtypes", widen_index_dtypes, required=True),  # flat index products
        Pass("simplify", simplify),
        *user[1],
        # phase 2: loop transformations
        Pass("unswitch_selects", unswitch_selects),
        Pass("loop_partition", loop_partition),
        Pass("simplify", simplify),
        Pass("vectorize_loops", vectorize_loops, uses_context=True),
        Pass("unroll_loops", unroll_loops, uses_context=True),
        *user[2],
        # phase 3: clean-up and instrumentation. Guards are unswitched once unrolling has
        # made them invariant and the simplifier has made equal ones equal
        Pass("simplify", simplify),
        Pass("unswitch_guards", unswitch_guards),
        Pass("instrument_bound_checkers", instrument_bound_checkers, uses_context=True),
        *user[3],
    ]


def user_passes_by_phase(ctx: PassContext) -> list[list[Pass]]:
    """The ``tir.add_lower_pass`` passes of ``ctx`` for phases 0..3, in the order given."""
    phases: list[list[Pass]] = [[], [], [], []]
    for phase, p in ctx.get("tir.add_lower_pass"):
        phases[min(phase, 3)].append(as_pass(p))
    return phases


__all__ = [
    "TIR",
    "IRKind",
    "Pass",
    "check_disabled",
    "default_passes",
    "functions_of",
    "pass_names",
    "run_passes",
    "user_passes_by_phase",
    "with_functions",
]
