"""Small templates for the tuner's tests, in an importable module so that worker
processes (which import a task's template module) find them.

``tiny_add.llvm``: ``C = A + 1`` with a 3-way split, an ordered knob, a boolean knob
and a constraint (inner tile <= 16). ``fault.llvm``: a knob ``mode`` whose candidates
behave well, abort the runner, hang, compute the wrong values, make a schedule the
compiler refuses, or abort the builder.
"""

from __future__ import annotations

import os
import time

import ember
from ember import te, tir
from ember.tuner import ConfigEntity, get_config, template

LAST: dict[str, object] = {}  # template name -> the config its last run saw


@template("tiny_add.llvm", override=True, reference=lambda a: a + 1)
def tiny_add(n: int):
    cfg = get_config()
    LAST["tiny_add"] = cfg
    A = te.placeholder((n,), "float32", name="A")
    C = te.compute((n,), lambda i: A[i] + 1, name="C")
    s = te.create_schedule(C.op)
    cfg.define_split("tile", C.op.axis[0], num_outputs=3)
    cfg.define_knob("vec", [1, 2, 4, 8], default=1)
    cfg.define_knob("unroll", [True, False], default=False)
    cfg.add_constraint(lambda c: c["tile"].size[1] * c["tile"].size[2] <= 16, "inner <= 16")
    cfg["tile"].apply(s, C, C.op.axis[0])
    return s, [A, C]


@template("narrow.llvm", override=True, reference=lambda a: a + 1)
def narrow(n: int):
    """A space shaped like ``matmul.llvm``'s GEMV: mode "narrow" takes only ``a == 1``,
    ``b == 1`` and ``c`` off, and a ``split`` other than 1 only in narrow mode, so that
    about 1 in 10 of the valid points, and 1 in 48 of the narrow ones, are narrow."""
    cfg = get_config()
    A = te.placeholder((n,), "float32", name="A")
    C = te.compute((n,), lambda i: A[i] + 1, name="C")
    s = te.create_schedule(C.op)
    cfg.define_knob("a", [1, 2, 4, 6, 8, 12], default=4)
    cfg.define_knob("d", [1, 2, 4, 8, 16], default=4)
    cfg.define_knob("b", [1, 2, 4, 8], default=2)
    cfg.define_knob("c", [True, False], default=True)
    cfg.define_knob("mode", ["wide", "narrow"], default="wide")
    cfg.define_knob("split", [1, 2, 4, 8], default=1)
    cfg.add_constraint(lambda c: c["mode"].val == "narrow" or c["split"].val == 1, "split")
    cfg.add_constraint(
        lambda c: (
            c["mode"].val == "wide" or (c["a"].val == 1 and c["b"].val == 1 and not c["c"].val)
        ),
        "narrow mode: a = b = 1, c off",
    )
    return s, [A, C]


def _abort(x, y):
    os.abort()


def _hang(x, y):
    time.sleep(600)


ember.register_func("tests.tuner.abort", _abort, override=True)
ember.register_func("tests.tuner.hang", _hang, override=True)
MODES = ["ok", "crash", "hang", "wrong", "bad_schedule", "crash_build"]


@template("fault.llvm", override=True, reference=lambda a: a * 2 + 1)
def fault(n: int):
    cfg = get_config()
    cfg.define_knob("mode", MODES, default="ok")
    mode = cfg["mode"].val
    if mode == "crash_build" and isinstance(cfg, ConfigEntity):
        os.abort()  # the builder process dies while instantiating this config
    A = te.placeholder((n,), "float32", name="A")
    if mode in ("crash", "hang"):
        name = "tests.tuner.abort" if mode == "crash" else "tests.tuner.hang"
        B = te.extern((n,), [A], lambda ins, outs: tir.call_packed(name, ins[0], outs[0]))
        C = te.compute((n,), lambda i: B[i] + 1, name="C")
    else:
        scale = 3.0 if mode == "wrong" else 2.0
        C = te.compute((n,), lambda i: A[i] * scale + 1, name="C")
    s = te.create_schedule(C.op)
    if mode == "bad_schedule":
        s[C].split(C.op.axis[0], factor=0)  # the schedule refuses it: an invalid config
    return s, [A, C]


@template("blocked_scale.llvm", override=True)
def blocked_scale(n: int):
    """``C = 2 A + 1`` on ``A`` laid out as ``[n / block, block]``: a knob that chooses the
    tensors' shapes, and no numpy reference (the measurer computes one from the compute)."""
    cfg = get_config()
    cfg.define_knob("block", [2, 4, 8], default=4)
    b = cfg["block"].val
    A = te.placeholder((n // b, b), "float32", name="A")
    C = te.compute((n // b, b), lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[1])
    return s, [A, C]
