"""Every CUDA template on a real GPU, random shapes and sampled configs, against the CPU/numpy.

The same draws as ``test_template_properties`` (which runs them through the emulator), but
launched on the visible device, so what the emulator accepts is checked against what the
hardware computes. Marked ``gpu``: it skips on machines without a CUDA device.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ember
from ember.tuner import create_task
from tests.codegen_cuda.test_template_properties import WORKLOADS, _reference, _valid
from tests.nightly import examples


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_template_on_device(name):
    @settings(
        max_examples=examples(25),
        deadline=None,
        suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
    )
    @given(args=WORKLOADS[name], seed=st.integers(0, 2**16))
    def run(args, seed):
        assume(_valid(name, args))
        task = create_task(name, args=(*args, "float32"), target="cuda")
        config = task.config_space.sample(seed)
        s, tensors = task.instantiate(config)
        try:
            mod = ember.build(s, tensors, target="cuda")
        except ember.LoweringError as e:
            too_big = ("threads per block", "shared memory per block", "local memory per thread")
            assume(not any(words in str(e) for words in too_big))
            raise
        rng = np.random.default_rng(seed)
        inputs = [
            rng.uniform(-1, 1, tuple(int(d.value) for d in t.shape)).astype("float32")
            for t in tensors[:-1]
        ]
        out = np.full(tuple(int(d.value) for d in tensors[-1].shape), np.nan, "float32")
        mod(*inputs, out)
        want = _reference(name, args, tensors, inputs)
        np.testing.assert_allclose(out, want, rtol=2e-4, atol=2e-4, err_msg=f"{args} {config}")

    run()
