"""IR verification after passes (``EMBER_VERIFY_IR``): a pass that returns its input
unchanged is not verified again, but every form a function takes is checked once, the
input included, and an ill-formed result of any pass is caught and the pass named."""

from __future__ import annotations

import pytest

import ember
from ember import te
from ember.errors import InternalError
from ember.tir import expr as E
from ember.tir import stmt as S
from ember.tir.functor import Mutator
from ember.tir.transform import runner
from ember.tir.transform.runner import Pass, run_passes


def _func() -> S.PrimFunc:
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    return ember.lower(te.create_schedule(B.op), [A, B])


class _Stray(Mutator):
    """Loads read a variable nothing defines: ill-formed."""

    def visit_Var(self, v: E.Var) -> E.PrimExpr:
        return E.Var("stray", v.dtype) if v.name.startswith("i") else v


def _same(f: S.PrimFunc) -> S.PrimFunc:
    return f


def _copy(f: S.PrimFunc) -> S.PrimFunc:
    return f.with_body(S.seq(f.body))


def test_an_unchanged_function_is_verified_once(monkeypatch):
    func = _func()  # lowered first: lowering runs (and verifies) passes of its own
    seen: list[str] = []
    verify = runner.verify_well_formed

    def counted(func: S.PrimFunc, after: str = "") -> None:
        seen.append(after)
        verify(func, after=after)

    monkeypatch.setattr(runner, "verify_well_formed", counted)
    passes = [Pass("same1", _same), Pass("same2", _same), Pass("copy", _copy), Pass("same3", _same)]
    run_passes(func, passes, verify=True)
    assert seen == ["same1", "copy"]  # the input once, at the first pass; then each new form


def test_an_ill_formed_input_is_caught_though_no_pass_changes_it():
    bad = _Stray().visit_func(_func())
    with pytest.raises(InternalError, match="after pass 'same1'"):
        run_passes(bad, [Pass("same1", _same), Pass("same2", _same)], verify=True)


def test_an_ill_formed_result_names_the_pass_that_made_it():
    passes = [Pass("same1", _same), Pass("breaks", lambda f: _Stray().visit_func(f))]
    with pytest.raises(InternalError, match="after pass 'breaks'"):
        run_passes(_func(), passes, verify=True)
