"""Graph passes go through the runner the TIR passes use: disabled by name (also inside
``ember.compile``), seen by instruments, timed, dumped, verified, and a crash is an
InternalError naming the pass."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import ember
from ember.driver import target_passes
from ember.errors import ArgumentError, InternalError, InvalidModelError
from ember.frontend.graph import Graph, format_graph
from ember.frontend.passes import (
    DEFAULT_PASSES,
    eliminate_dead_code,
    fuse_ops,
    graph_pass,
    run_graph_passes,
)
from ember.target import Target
from ember.tir.transform.pipeline import default_passes
from ember.transform import PassContext
from tests.frontend.passes.graphs import GraphBuilder


def _chain(shape: tuple[int, ...] = (3, 5)) -> Graph:
    """x -> sigmoid -> exp -> y, and a dead relu. (A shape no other test compiles makes
    ``ember.compile`` build its kernels rather than find them in the kernel cache.)"""
    b = GraphBuilder()
    x = b.input("x", shape)
    b.node("relu", [x], shape, out="dead")
    s = b.node("sigmoid", [x], shape, out="s")
    return b.build(b.node("exp", [s], shape, out="y"))


class _Trace:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def run_before_pass(self, ir, info) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("before", info.name, type(ir).__name__))

    def run_after_pass(self, ir, info) -> None:  # type: ignore[no-untyped-def]
        self.events.append(("after", info.name, type(ir).__name__))


def test_a_graph_pass_is_disabled_by_name():
    with PassContext(disabled_pass=["fuse_ops"]):
        g = run_graph_passes(_chain(), DEFAULT_PASSES)
    assert [n.op for n in g.nodes] == ["sigmoid", "exp"]  # dead code went, fusion did not
    assert {n.group for n in g.nodes} == {None}
    assert {n.group for n in run_graph_passes(_chain(), DEFAULT_PASSES).nodes} == {0}


def test_compile_under_a_context_disabling_fusion_runs_one_kernel_per_node(rng):
    x = rng.standard_normal((3, 5)).astype("float32")
    fused = ember.compile(_chain())
    with PassContext(disabled_pass=["fuse_ops"]):  # the kernel builds accept the name
        plain = ember.compile(_chain())
    assert (len(fused.steps), len(plain.steps)) == (1, 2)
    want = np.exp(1 / (1 + np.exp(-x)))
    for lib in (fused, plain):
        np.testing.assert_allclose(lib.run({"x": x})[0], want, rtol=1e-5)


def test_a_misspelt_pass_name_is_still_refused():
    with PassContext(disabled_pass=["fuse_opz"]):
        with pytest.raises(ArgumentError, match="cannot disable pass 'fuse_opz'"):
            ember.compile(_chain((2, 7)))


def test_instruments_see_the_graph_passes_then_the_kernels_passes():
    trace = _Trace()
    with PassContext(instruments=[trace]):
        run_graph_passes(_chain(), DEFAULT_PASSES)
    before = [(name, ir) for kind, name, ir in trace.events if kind == "before"]
    assert before == [(p.name, "Graph") for p in DEFAULT_PASSES]
    assert len(trace.events) == 2 * len(DEFAULT_PASSES)

    trace = _Trace()
    with PassContext(instruments=[trace]):
        ember.compile(_chain((3, 7)), graph_passes=[eliminate_dead_code, fuse_ops])
    names = [name for kind, name, _ in trace.events if kind == "before"]
    assert names[:2] == ["eliminate_dead_code", "fuse_ops"]
    assert names[2:] == [p.name for p in target_passes(Target.parse("llvm"))]  # one kernel


def test_each_graph_pass_dumps_its_input_and_output(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_DUMP_DIR", str(tmp_path))
    g = _chain()
    after = run_graph_passes(g, [eliminate_dead_code, fuse_ops])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "main.00.eliminate_dead_code.after.graph",
        "main.00.eliminate_dead_code.before.graph",
        "main.01.fuse_ops.after.graph",
        "main.01.fuse_ops.before.graph",
    ]
    assert (tmp_path / files[1]).read_text() == format_graph(g) + "\n"
    assert (tmp_path / files[2]).read_text() == format_graph(after) + "\n"
    assert "group 0:" in (tmp_path / files[2]).read_text()


def test_a_pass_that_changes_nothing_dumps_only_its_output(tmp_path, monkeypatch):
    clean = run_graph_passes(_chain(), [eliminate_dead_code])
    monkeypatch.setenv("EMBER_DUMP_DIR", str(tmp_path))
    assert run_graph_passes(clean, [eliminate_dead_code]) is clean
    assert [p.name for p in tmp_path.iterdir()] == ["main.00.eliminate_dead_code.after.graph"]


def test_timings_add_up_per_pass():
    timings: dict[str, float] = {}
    run_graph_passes(_chain(), DEFAULT_PASSES, timings=timings)
    assert set(timings) == {p.name for p in DEFAULT_PASSES}
    assert all(t >= 0 for t in timings.values())


def test_a_crash_is_an_internal_error_naming_the_pass():
    @graph_pass
    def divides(graph: Graph) -> Graph:
        return graph if 1 / 0 else graph

    with pytest.raises(InternalError, match="pass 'divides' failed on graph 'main'") as err:
        run_graph_passes(_chain(), [eliminate_dead_code, divides])
    assert isinstance(err.value.__cause__, ZeroDivisionError)


def test_an_error_raised_on_purpose_keeps_its_type_and_gains_the_pass():
    def refuses(graph: Graph) -> Graph:  # a plain function: named by __name__
        raise InvalidModelError("no")

    with pytest.raises(InvalidModelError, match="no\n  in pass 'refuses' on graph 'main'"):
        run_graph_passes(_chain(), [refuses])


def test_a_pass_that_breaks_the_graph_is_caught_after_it():
    @graph_pass(name="drops_the_producer")
    def drop(graph: Graph) -> Graph:
        return replace(graph, nodes=graph.nodes[2:])

    with pytest.raises(InternalError, match="reads 's' before it is defined") as err:
        run_graph_passes(_chain(), [drop])
    assert "after graph pass 'drops_the_producer'" in str(err.value)


def test_opt_level_and_what_run_graph_passes_accepts():
    seen: list[str] = []

    @graph_pass(opt_level=3)
    def costly(graph: Graph) -> Graph:
        seen.append("costly")
        return graph

    run_graph_passes(_chain(), [costly])
    assert seen == []  # the default context runs passes up to level 2
    with PassContext(opt_level=3):
        run_graph_passes(_chain(), [costly])
    assert seen == ["costly"]
    assert fuse_ops(_chain()).nodes[0].group == 0  # a pass is still called directly
    with pytest.raises(ArgumentError, match="'simplify' is a pass over tir, not over a graph"):
        run_graph_passes(_chain(), [default_passes()[1]])
    with pytest.raises(ArgumentError, match="graph_passes takes graph passes"):
        run_graph_passes(_chain(), ["fuse_ops"])
