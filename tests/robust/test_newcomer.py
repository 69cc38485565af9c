"""What a newcomer meets following the README (issue 22, items 34 and 36): hints that
name the way to fix a mistake where the user is (Python or the shell)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import ember
from ember.cli import main as cli_main
from ember.errors import ArgumentError
from ember.frontend.testing.models import mlp, small_cnn, symbolic_batch


@pytest.mark.parametrize("build", [small_cnn, mlp])
def test_item_34_tuning_a_symbolic_batch_names_both_fixes(tmp_path, capsys, build):
    """A symbolic batch used to give 'no tunable kernels' (MLP) or a from_onnx hint on
    the command line (CNN); now both say how to fix the shape, in Python and in the shell."""
    model, inputs = build(np.random.default_rng(0))
    path = tmp_path / "m.onnx"
    onnx.save(symbolic_batch(model), path)
    with pytest.raises(ArgumentError, match=r"shapes=\{name: shape\}.*--shape NAME="):
        ember.extract_tasks(str(path))
    assert cli_main(["tune", str(path), "--trials", "1", "--log", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert "--shape NAME=D0,D1" in err and "Traceback" not in err
    ((name, value),) = inputs.items()
    fixed = ember.extract_tasks(str(path), shapes={name: value.shape})
    assert fixed and all(t.weight >= 1 for t in fixed)
