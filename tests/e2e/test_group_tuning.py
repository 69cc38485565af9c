"""A model's fused groups as auto-scheduling tasks: extracted, tuned, their records applied.

The reference is onnxruntime on the same ONNX model (independent of Ember's schedules);
inputs are random. The measurer runs in this process (the isolated workers take seconds
to start) and checks each candidate against the group's fallback kernel's output on
random data before timing it.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.errors import ArgumentError, EmberError
from ember.frontend.testing.models import small_cnn
from ember.graph import group_tasks, kernels
from ember.graph.group_tasks import fused_group, group_task
from ember.graph.groups import group_from_spec, group_spec
from ember.tuner import tune
from ember.tuner.auto.space import is_fallback_choice
from ember.tuner.records import host_device_name
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.tune import fallback_entity

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def model():
    return small_cnn(np.random.default_rng(0), 1, 12, 12)


def _ort(model, inputs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


class InProcessMeasurer:
    """Builds each candidate, checks it against the fallback kernel on random inputs and
    times it; a candidate the task turns down is ``invalid_config``."""

    device_name = host_device_name()
    jobs = 1

    def __init__(self, fallback_cost=None):
        self.expected = {}
        self.fallback_cost = fallback_cost  # reported for the untuned kernel, if set

    def _expected(self, task):
        if task.key not in self.expected:
            rng = np.random.default_rng(1)
            s, tensors = task.instantiate()  # the fallback: the untuned model's schedule
            n_in = len(group_from_spec(task.args[0]).inputs)
            shapes = [[int(d.value) for d in t.shape] for t in tensors]
            ins = [rng.uniform(-1, 1, sh).astype(t.dtype) for sh, t in zip(shapes, tensors[:n_in])]
            outs = [np.empty(sh, t.dtype) for sh, t in zip(shapes[n_in:], tensors[n_in:])]
            ember.build(s, tensors, target="llvm")(*ins, *outs)
            self.expected[task.key] = ins, outs
        return self.expected[task.key]

    def measure(self, task, configs):
        ins, outs = self._expected(task)
        results = []
        for cfg in configs:
            try:
                s, tensors = task.instantiate(cfg)
                mod = ember.build(s, tensors, target="llvm")
            except EmberError as e:
                results.append(MeasureResult.failed(ErrorKind.INVALID_CONFIG, str(e)))
                continue
            got = [np.full_like(o, np.nan) for o in outs]
            costs = mod.time_evaluator(number=2, repeat=2)(*ins, *got).results
            if self.fallback_cost is not None and is_fallback_choice(cfg):
                costs = [self.fallback_cost] * len(costs)
            ok = all(np.allclose(g, o, rtol=1e-4, atol=1e-4) for g, o in zip(got, outs))
            results.append(
                MeasureResult(tuple(costs))
                if ok
                else MeasureResult.failed(ErrorKind.WRONG_RESULT, "differs from the fallback")
            )
        return results

    def close(self) -> None:
        pass


def test_search_modes_extract_groups_and_templates(model):
    onnx_model, _ = model
    templates = ember.extract_tasks(onnx_model, "llvm", search="templates")
    auto = ember.extract_tasks(onnx_model, "llvm", search="auto")
    both = ember.extract_tasks(onnx_model, "llvm", search="both")
    assert templates and all(not t.task.name.startswith("auto/") for t in templates)
    assert auto and all(t.task.name.startswith("auto/") for t in auto)
    assert len(both) == len(templates) + len(auto)
    # every ONNX node is in a group task (a Gemm becomes a matmul and a bias add, both
    # named after it)
    grouped = [n for t in auto for n in t.nodes]
    assert set(grouped) == {n.name for n in onnx_model.graph.node}
    conv = next(t for t in auto if "conv1" in t.nodes)
    assert conv.weight == 1 and "relu1" in conv.nodes  # the conv with its fused epilogue
    with pytest.raises(ArgumentError, match="search must be one of"):
        ember.extract_tasks(onnx_model, "llvm", search="everything")


def test_a_group_spec_round_trips_and_names_equal_groups_alike(model):
    onnx_model, _ = model
    auto = ember.extract_tasks(onnx_model, "llvm", search="auto")
    for t in auto:
        spec = t.task.args[0]
        assert group_spec(group_from_spec(spec)) == spec
    with pytest.raises(ArgumentError, match="malformed fused-group spec"):
        group_from_spec("{not json")


def test_the_fallback_is_the_kernel_the_untuned_model_runs(model):
    onnx_model, _ = model
    conv = next(
        t for t in ember.extract_tasks(onnx_model, "llvm", search="auto") if "conv1" in t.nodes
    )
    s, tensors = conv.task.instantiate()
    # the backend's group schedule attaches the epilogue and parallelizes: not TE's
    # default schedule, where every stage sits at the root
    assert any(st.attach.name != "ROOT" for st in s.stages)
    spec, target = conv.task.args
    assert len(fused_group(spec, target)) == len(tensors)


@pytest.fixture(scope="module")
def tuned(model, tmp_path_factory):
    onnx_model, _ = model
    records = tmp_path_factory.mktemp("groups") / "groups.jsonl"
    fc = next(t for t in ember.extract_tasks(onnx_model, "llvm", search="auto") if "fc" in t.nodes)
    # the untuned kernel reported slow, so a sketch's config is the best record
    measurer = InProcessMeasurer(fallback_cost=1.0)
    result = tune(fc.task, n_trials=4, records=records, measure=measurer, seed=0)
    return fc, result, records


def test_a_tuned_group_record_is_applied_and_the_model_still_matches_onnxruntime(
    model, tuned, monkeypatch
):
    onnx_model, inputs = model
    conv, result, records = tuned
    assert result.best_config is not None and len(result.trials) == 4
    applied = []
    real = group_tasks.tuned_group

    def spy(io, backend):
        got = real(io, backend)
        applied.append(got is not None)
        return got

    monkeypatch.setattr(kernels, "tuned_group", spy)
    cm = ember.compile(onnx_model, target="llvm", records=records)
    assert applied.count(True) == 1  # only the fc group has a record
    want = _ort(onnx_model, inputs)
    for got, ref in zip(cm.run(inputs), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_the_search_measures_the_untuned_kernel_first_and_its_record_changes_nothing(
    model, tmp_path, monkeypatch
):
    """The first trial is the kernel the untuned model runs (the summary's baseline, not
    a sketch's default); where nothing beats it, compiling with the records builds the
    untuned kernel."""
    onnx_model, inputs = model
    conv = next(
        t for t in ember.extract_tasks(onnx_model, "llvm", search="auto") if "conv1" in t.nodes
    )
    records = tmp_path / "fallback.jsonl"
    result = tune(conv.task, n_trials=3, records=records, measure=InProcessMeasurer(0.0), seed=0)
    first = result.trials[0].config
    assert is_fallback_choice(first) and first == fallback_entity(conv.task)
    assert sum(is_fallback_choice(t.config) for t in result.trials) == 1
    assert is_fallback_choice(result.best_config)
    untuned = [str(ember.lower(*conv.task.instantiate()))]
    assert str(ember.lower(*conv.task.instantiate(first))) == untuned[0]
    applied = []
    real = group_tasks.tuned_group
    monkeypatch.setattr(kernels, "tuned_group", lambda io, b: applied.append(real(io, b)))
    cm = ember.compile(onnx_model, target="llvm", records=records)
    assert applied and all(got is None for got in applied)
    for got, ref in zip(cm.run(inputs), _ort(onnx_model, inputs)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_a_group_task_rebuilds_in_another_process_from_its_spec(tuned):
    conv, _, _ = tuned
    again = group_task(group_from_spec(conv.task.args[0]), "llvm")
    assert again.key == conv.task.key


def test_a_group_no_sketch_fits_stays_untuned_rather_than_failing_extraction():
    """BERT's attention fuses into one extern kernel (an online softmax no sketch can
    write): extraction leaves that group out and lists the others."""
    from ember.backend import get_backend
    from ember.frontend.testing.catalog import CATALOG
    from ember.graph.compile import import_model, optimize

    model, _ = CATALOG["bert"](np.random.default_rng(0), True)
    graph = optimize(import_model(model), get_backend("llvm"))
    fused = {n.name for n in graph.nodes if n.op == "attention"}
    assert fused  # the pass fired: one attention node per layer
    auto = ember.extract_tasks(model, "llvm", search="auto")
    nodes = {n for t in auto for n in t.nodes}
    assert auto and not fused & nodes


# the blocks, tiles and panels these cases pin are AVX-512's, on any host (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("avx512_tiles")
