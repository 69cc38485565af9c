"""Runs ONNX's backend node tests (``onnx/backend/test/data/node/test_*``) through Ember.

Each case is a one-node model with inputs and expected outputs as TensorProto
files (SequenceProto and OptionalProto for sequence- and optional-typed values, read
as lists of arrays and None). :func:`run_case` imports and compiles it with
``ember.compile`` and compares with the expected outputs (exact for integers and
booleans), classifying the outcome: ``pass``, ``unsupported`` (an op or form Ember
rejects as unsupported), ``error`` (any other error), ``mismatch`` (wrong numbers
or shapes) or ``random`` (a random op's draws, which no other generator reproduces:
shape, dtype and support checked). The pytest suite and
``benchmarks/onnx_node_suite.py`` both use it.
"""

from __future__ import annotations

import glob
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # models are onnx ModelProtos; onnx is optional

import numpy as np

import ember
from ember.frontend.onnx_import.value_inputs import freeze_inputs

# ops whose expected outputs are another generator's draws (see ``_random_result``)
RANDOM_OPS = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
     "RandomUniformLike"}
)  # fmt: skip
RTOL = 1e-4
ATOL = 1e-4
# float16 outputs: four float16 ulps at 1.0. Ember accumulates float16 reductions in
# float32, where ONNX's reference outputs were rounded to float16 at every step.
HALF_TOL = 4e-3


@dataclass
class CaseResult:
    """The outcome of one ONNX backend node test: pass, unsupported, error, mismatch or
    random."""

    name: str
    op_types: tuple[str, ...]
    status: str  # pass | unsupported | error | mismatch | random
    detail: str = ""


def node_test_root() -> Path:
    """Where the installed onnx package keeps its backend node tests."""
    # optional dependency: onnx
    import onnx

    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "node"


def list_cases() -> list[str]:
    """The names of every node test case shipped with onnx."""
    return sorted(p.name for p in node_test_root().iterdir() if (p / "model.onnx").exists())


def load_case(name: str) -> tuple[Any, list[Any], list[Any]]:
    """The model, inputs and expected outputs of case ``name`` (test data set 0): arrays,
    and for sequence- or optional-typed values lists of arrays and None (what onnxruntime
    takes and gives, and a run of an Ember model too)."""
    # optional dependency: onnx
    import onnx

    root = node_test_root() / name
    model = onnx.load(str(root / "model.onnx"))

    def read(pattern: str, declared: Any) -> list[Any]:
        files = sorted(
            glob.glob(str(root / "test_data_set_0" / pattern)),
            key=lambda f: int(f.rsplit("_", 1)[1].split(".")[0]),
        )
        types = [vi.type for vi in declared]
        return [
            read_value(Path(f).read_bytes(), types[k] if k < len(types) else None)
            for k, f in enumerate(files)
        ]

    return model, read("input_*.pb", model.graph.input), read("output_*.pb", model.graph.output)


def read_value(data: bytes, type_proto: Any) -> Any:
    """A serialized test value as its declared type (a TypeProto, None for a tensor) says
    to read it: a TensorProto as an array, a SequenceProto as a list, an OptionalProto as
    its value or None."""
    # optional dependency: onnx
    import onnx
    from onnx import numpy_helper

    if type_proto is not None and type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto is not None and type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def compare(got: Any, want: Any) -> str:
    """Empty when ``got`` matches ``want`` (arrays, or lists of them and None for sequences
    and optionals), else why not."""
    if want is None or got is None:
        return "" if got is None and want is None else f"got {_kind(got)}, expected {_kind(want)}"
    if isinstance(want, list) or isinstance(got, list):
        if not (isinstance(want, list) and isinstance(got, list)):
            return f"got {_kind(got)}, expected {_kind(want)}"
        if len(got) != len(want):
            return f"a sequence of {len(got)} tensors, expected {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w)
            if why:
                return f"element {k}: {why}"
        return ""
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != expected {want.dtype}"
    if want.dtype == object:  # strings, compared exactly
        bad = sum(g != w for g, w in zip(got.reshape(-1).tolist(), want.reshape(-1).tolist()))
        return f"{bad} strings differ" if bad else ""
    if want.dtype.kind in "iub":
        bad = int(np.sum(got != want))
        return f"{bad} elements differ" if bad else ""
    tol = HALF_TOL if want.dtype == np.float16 else None
    if not np.allclose(got, want, rtol=tol or RTOL, atol=tol or ATOL, equal_nan=True):
        err = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
        return f"max abs error {err:.3g}"
    return ""


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"an array {getattr(value, 'dtype', type(value).__name__)}"


def run_case(name: str, target: str = "llvm", freeze: bool = False) -> CaseResult:
    """Compiles and runs one node test case and compares with its expected outputs.

    Every input is fed at run time, as the tests are written and onnxruntime runs them
    (a shape-carrying input makes a model compiled per value, ``dynamic_model.py``);
    ``freeze`` instead makes the inputs Ember needs at compile time initializers first,
    the older way, kept to compare."""
    try:
        model, inputs, expected = load_case(name)
    except Exception as e:  # test data onnx's own readers cannot read (maps)
        return CaseResult(name, (), "unsupported", f"test data cannot be read: {e}")
    ops = tuple(sorted({n.op_type for n in model.graph.node}))
    frozen: list[str] = []
    try:
        if freeze:
            lib, model, inputs, frozen = _compile_freezing(model, inputs, target)
        else:
            lib = ember.compile(model, target=target)
        outs = lib.run(inputs[: len(lib.input_names)])
    except ember.UnsupportedOperatorError as e:
        return CaseResult(name, ops, "unsupported", e.message.splitlines()[-1].strip())
    except ember.EmberError as e:
        kind = "unsupported" if "not supported" in str(e) else "error"
        return CaseResult(name, ops, kind, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    except Exception as e:  # a crash is a bug to report, not a reason to stop the suite
        tb = traceback.format_exc(limit=-2).strip().splitlines()[-1]
        return CaseResult(name, ops, "error", f"crash {type(e).__name__}: {e} ({tb})")
    if len(outs) != len(expected):
        return CaseResult(name, ops, "mismatch", f"{len(outs)} outputs, expected {len(expected)}")
    if set(ops) & RANDOM_OPS:
        return _random_result(name, ops, outs, expected)
    for k, (g, w) in enumerate(zip(outs, expected)):
        why = compare(g, w)
        if why:
            return CaseResult(name, ops, "mismatch", f"output {k}: {why}")
    return CaseResult(name, ops, "pass", f"frozen constant inputs {frozen}" if frozen else "")


def _random_result(
    name: str, ops: tuple[str, ...], outs: list[Any], expected: list[Any]
) -> CaseResult:
    """A case whose expected outputs are numpy's draws, which no other generator makes:
    ``random`` (neither a pass nor a mismatch) when each output has the expected shape
    and dtype and, where the expected values are all 0 or 1 (Bernoulli), so are Ember's;
    the draws' statistics are tested in ``tests/frontend/ops/test_random.py``."""
    for k, (g, w) in enumerate(zip(outs, expected)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return CaseResult(name, ops, "mismatch", f"output {k}: {g.dtype}{list(g.shape)}")
        if np.isin(w, (0, 1)).all() and not np.isin(g, (0, 1)).all():
            return CaseResult(name, ops, "mismatch", f"output {k}: values other than 0 and 1")
    return CaseResult(name, ops, "random", "shape, dtype and support checked; the draws differ")


def _compile_freezing(
    model: Any, inputs: list[np.ndarray], target: str
) -> tuple[Any, Any, list[np.ndarray], list[str]]:
    """Compile ``model``; Ember needs shape-like inputs at compile time, and the suite feeds
    them as graph inputs, so on "must be a constant" freeze the integer inputs into
    initializers, then any other input an error names (float scales, a bool condition),
    and compile again."""
    frozen: list[str] = []
    for attempt in range(len(inputs) + 2):
        try:
            return ember.compile(model, target=target), model, inputs, frozen
        except ember.ArgumentError as e:
            named = re.search(r"input \d+ \('([^']+)'\) must be a constant", str(e))
            if "must be a constant" not in str(e) or (attempt and not named):
                raise
            only = None if attempt == 0 else {named.group(1)}  # type: ignore[union-attr]
            model, inputs, more = freeze_integer_inputs(model, inputs, only)
            if attempt and not more:
                raise
            frozen += more
    raise AssertionError("unreachable")


def freeze_integer_inputs(
    model: Any, inputs: list[np.ndarray], only: set[str] | None = None
) -> tuple[Any, list[np.ndarray], list[str]]:
    """A copy of ``model`` whose integer inputs (or, given ``only``, the inputs it names) are
    initializers holding the given data."""
    values, rest = {}, []
    for vi, arr in zip(model.graph.input, inputs):
        integer = isinstance(arr, np.ndarray) and arr.dtype.kind in "iu"  # not a sequence
        if integer if only is None else (vi.name in only):
            values[vi.name] = arr
        else:
            rest.append(arr)
    return freeze_inputs(model, values), rest, list(values)
