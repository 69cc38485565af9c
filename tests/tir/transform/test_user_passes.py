"""User passes (prim_func_pass + tir.add_lower_pass), opt_level, instruments, and the checks
on disabled_pass / disabled_passes, for both targets."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import te
from ember.codegen_cuda.pipeline import cuda_passes
from ember.driver import target_passes
from ember.errors import ArgumentError, InternalError
from ember.target import Target
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator, post_order_visit
from ember.tir.ir_module import IRModule
from ember.tir.transform.pipeline import default_passes, pass_names
from ember.transform import PassContext, prim_func_pass
from tests.numerics import assert_close, random_array

N, M = 7, 13  # odd, so split tails and guards appear


def _scaled_rows():  # type: ignore[no-untyped-def]
    A = te.placeholder((N, M), name="A")
    B = te.compute((N, M), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].vectorize(ji)
    return s, [A, B]


class _Double(Mutator):
    """Stores twice the value: a change a numpy comparison sees."""

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        return S.BufferStore(s.buffer, s.value * E.const(2.0, s.value.dtype), s.indices)


@prim_func_pass(opt_level=0)
def double_stores(func, mod, ctx):  # type: ignore[no-untyped-def]
    return _Double().visit_func(func)


def _index_counts(func: S.PrimFunc) -> set[int]:
    counts: set[int] = set()

    def visit(n: object) -> None:
        if isinstance(n, (S.BufferStore, E.BufferLoad)):
            counts.add(len(n.indices))

    post_order_visit(func.body, visit)
    return counts


def _has_ramp(func: S.PrimFunc) -> bool:
    found: list[object] = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, E.Ramp) else None)
    return bool(found)


def _recorder(seen: list):  # type: ignore[no-untyped-def]
    @prim_func_pass(opt_level=0, name="record")
    def record(func, mod, ctx):  # type: ignore[no-untyped-def]
        assert isinstance(mod, IRModule) and mod[func.name] is func
        assert isinstance(ctx, PassContext)
        seen.append(func)
        return func

    return record


@pytest.mark.parametrize(
    "phase,dims,vector", [(0, {2}, False), (1, {1}, False), (2, {1}, True), (3, {1}, True)]
)
def test_each_phase_sees_the_ir_of_its_point_in_the_pipeline(phase, dims, vector):
    seen: list[S.PrimFunc] = []
    s, args = _scaled_rows()
    with PassContext(config={"tir.add_lower_pass": [(phase, _recorder(seen))]}):
        ember.lower(s, args)
    (func,) = seen
    assert _index_counts(func) == dims, "phase 0 sees multi-dimensional buffers, later flat"
    assert _has_ramp(func) is vector, "phases 2 and 3 come after vectorize_loops"


def test_a_user_pass_changes_the_numbers_on_llvm_and_the_emulator(rng):
    s, args = _scaled_rows()
    a = random_array((N, M), "float32", rng)
    with PassContext(config={"tir.add_lower_pass": [(1, double_stores)]}):
        mod = ember.build(s, args, target="llvm")
    b = np.full((N, M), np.nan, "float32")
    mod(a, b)
    assert_close(b, (a + 1.0) * 2.0, "float32")

    A = te.placeholder((N * M,), name="A")
    B = te.compute((N * M,), lambda i: A[i] - 0.25, name="B")
    g = te.create_schedule(B.op)
    bx, tx = g[B].split(B.op.axis[0], factor=32)
    g[B].bind(bx, te.thread_axis("blockIdx.x"))
    g[B].bind(tx, te.thread_axis("threadIdx.x"))
    with PassContext(config={"tir.add_lower_pass": [(3, double_stores)]}):
        cuda = ember.build(g, [A, B], target="cuda -arch=sm_80")
    flat = a.reshape(-1)
    out = np.full(N * M, np.nan, "float32")
    cuda.emulate(flat, out)
    assert_close(out, (flat - 0.25) * 2.0, "float32")


def test_passes_of_one_phase_run_in_the_order_given():
    order: list[str] = []

    def tag(name: str):  # type: ignore[no-untyped-def]
        def run(func, mod, ctx):  # type: ignore[no-untyped-def]
            order.append(name)
            return func

        return run

    s, args = _scaled_rows()
    cfg = {"tir.add_lower_pass": [(3, tag("c")), (1, tag("a")), (3, tag("d")), (1, tag("b"))]}
    with PassContext(config=cfg):
        ember.lower(s, args)
    assert order == ["a", "b", "c", "d"]


def test_class_passes_and_phases_above_3():
    seen: list[S.PrimFunc] = []

    @prim_func_pass(opt_level=1)
    class Record:
        def transform_function(self, func, mod, ctx):  # type: ignore[no-untyped-def]
            seen.append(func)
            return func

    s, args = _scaled_rows()
    with PassContext(config={"tir.add_lower_pass": [(7, Record)]}):
        func = ember.lower(s, args)
    assert seen == [func], "a phase above 3 runs last"


def test_opt_level_skips_a_pass_above_the_context_level():
    seen: list[S.PrimFunc] = []

    @prim_func_pass(opt_level=3)
    def fancy(func, mod, ctx):  # type: ignore[no-untyped-def]
        seen.append(func)
        return func

    s, args = _scaled_rows()
    with PassContext(opt_level=2, config={"tir.add_lower_pass": [(1, fancy)]}):
        ember.lower(s, args)
    assert not seen
    with PassContext(opt_level=3, config={"tir.add_lower_pass": [(1, fancy)]}):
        ember.lower(s, args)
    assert len(seen) == 1
    cfg = {"tir.add_lower_pass": [(1, fancy)]}
    with PassContext(opt_level=0, required_pass=["fancy"], config=cfg):
        ember.lower(s, args)
    assert len(seen) == 2, "a required pass runs at any level"


def test_a_user_pass_that_returns_no_function_is_an_argument_error():
    s, args = _scaled_rows()
    with PassContext(config={"tir.add_lower_pass": [(2, lambda f, m, c: None)]}):
        with pytest.raises(ArgumentError, match="returned NoneType; a prim_func_pass must return"):
            ember.lower(s, args)


def test_a_crash_in_a_user_pass_is_an_internal_error_naming_it():
    def broken(func, mod, ctx):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("oops")

    s, args = _scaled_rows()
    with PassContext(config={"tir.add_lower_pass": [(1, broken)]}):
        with pytest.raises(InternalError, match="pass 'broken' failed on function 'main': oops"):
            ember.lower(s, args)


def test_prim_func_pass_argument_errors():
    with pytest.raises(ArgumentError, match="opt_level"):
        prim_func_pass(lambda f, m, c: f, opt_level=-1)
    with pytest.raises(ArgumentError, match="transform_function"):
        prim_func_pass(type("NoMethod", (), {}))


# -- instruments ----------------------------------------------------------------------------


class _Trace:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.entered = self.exited = 0

    def enter_pass_ctx(self) -> None:
        self.entered += 1

    def exit_pass_ctx(self) -> None:
        self.exited += 1

    def run_before_pass(self, ir, info) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("before", info.name, getattr(ir, "name", "<program>")))

    def run_after_pass(self, ir, info) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("after", info.name, getattr(ir, "name", "<program>")))


def test_instruments_see_every_pass_in_list_order_on_llvm():
    trace = _Trace()
    s, args = _scaled_rows()
    with PassContext(instruments=[trace]):
        ember.build(s, args, target="llvm")
    assert (trace.entered, trace.exited) == (1, 1)
    before = [name for kind, name, _ in trace.events if kind == "before"]
    assert before == [p.name for p in target_passes(Target.parse("llvm"))]  # the CPU's own last


def test_instruments_see_the_cuda_passes_per_kernel():
    trace = _Trace()
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((100,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for t in (B, C):
        bx, tx = s[t].split(t.op.axis[0], factor=64)
        s[t].bind(bx, te.thread_axis("blockIdx.x"))
        s[t].bind(tx, te.thread_axis("threadIdx.x"))
    with PassContext(instruments=[trace]):
        ember.build(s, [A, C], target="cuda")
    cuda = [(n, f) for kind, n, f in trace.events if kind == "before"][len(default_passes()) :]
    assert cuda[0] == ("split_host_device", "main")
    kernels = sorted({f for n, f in cuda[1:]})
    assert len(kernels) == 2
    for k in kernels:
        assert [n for n, f in cuda if f == k] == [p.name for p in cuda_passes()[1:]]


def test_should_run_false_skips_a_pass():
    class NoVectorize:
        def should_run(self, ir, info) -> bool:  # type: ignore[no-untyped-def]
            return info.name != "vectorize_loops"

    s, args = _scaled_rows()
    with PassContext(instruments=[NoVectorize()]):
        assert not _has_ramp(ember.lower(s, args))
    assert _has_ramp(ember.lower(s, args))


# -- disabled passes ----------------------------------------------------------------------------


def test_disabled_pass_in_the_context_changes_the_ir_and_not_the_numbers(rng):
    s, args = _scaled_rows()
    with PassContext(disabled_pass=["tir.VectorizeLoop"]):  # TVM's name for it
        func = ember.lower(s, args)
        mod = ember.build(s, args, target="llvm")
    assert not _has_ramp(func)
    a = random_array((N, M), "float32", rng)
    b = np.full((N, M), np.nan, "float32")
    mod(a, b)
    assert_close(b, a + 1.0, "float32")


@pytest.mark.parametrize(
    "target,name,why",
    [
        ("llvm", "inject_sync", "is not a pass"),
        ("llvm", "flatten_buffers", "is required"),
        ("llvm", "vectorise_loops", "is not a pass"),
        ("cuda", "split_host_device", "is required"),
        ("cuda", "verify_gpu", "is required"),
        ("cuda", "lower_thread_allreduce", "is required"),
    ],
)
def test_disabling_what_cannot_be_disabled_lists_what_can(target, name, why):
    s, args = _scaled_rows()
    passes = target_passes(Target.parse(target))
    required = {p.name for p in passes if p.required}
    assert {"flatten_buffers", "widen_index_dtypes"} <= required
    optional = [n for n in pass_names(passes) if n not in required]
    pattern = rf"cannot disable pass '{name}': it {why} when building for {target}.*"
    with pytest.raises(ArgumentError, match=pattern) as err:
        ember.build(s, args, target=target, disabled_passes=[name])
    assert str(err.value).split("may be disabled: ")[1].split("\n")[0] == ", ".join(optional)
    with PassContext(disabled_pass=[name]):
        with pytest.raises(ArgumentError, match=pattern):
            ember.build(s, args, target=target)


def test_cuda_only_pass_names_are_accepted_by_lower_but_not_by_an_llvm_build():
    s, args = _scaled_rows()
    ember.lower(s, args, disabled_passes=["inject_sync"])
    listed = "may be disabled: simplify, unswitch_selects, loop_partition"
    with pytest.raises(ArgumentError, match=listed):
        ember.build(s, args, target="llvm", disabled_passes=["inject_sync"])


def test_disabled_passes_must_be_a_list_of_names():
    s, args = _scaled_rows()
    with pytest.raises(ArgumentError, match="takes a list of pass names"):
        ember.lower(s, args, disabled_passes="simplify")
