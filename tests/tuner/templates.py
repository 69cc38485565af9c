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
