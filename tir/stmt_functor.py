"""TVM's ``tvm.tir.stmt_functor``: walk and rewrite TIR with plain Python functions.

``ir_transform(stmt, preorder, postorder, only_enable)`` is the rewrite TVM programs use in
custom lowering passes (``tir.add_lower_pass``): ``preorder`` sees a node before its
children and, by returning a node, replaces it whole (its children are not visited);
otherwise the children are rewritten first and ``postorder`` sees the rebuilt node and may
return its replacement. ``None`` keeps the node. ``only_enable`` limits both callbacks to
the named node types, in TVM's spelling (``"tir.For"``, ``"tir.Evaluate"``) or Ember's
class names (``"For"``). ``post_order_visit`` and ``substitute`` are Ember's own
(:mod:`ember.tir.functor`), which mean what TVM's do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ember.errors import ArgumentError
from ember.tir.functor import Mutator, Node, post_order_visit, substitute

Callback = Callable[[Any], Any] | None


def _type_names(only_enable: Iterable[str] | None) -> frozenset[str] | None:
    if only_enable is None:
        return None
    if isinstance(only_enable, str):
        only_enable = [only_enable]
    names = []
    for key in only_enable:
        if not isinstance(key, str):
            raise ArgumentError(f"ir_transform: only_enable takes type names, got {key!r}")
        names.append(key.removeprefix("tir."))
    return frozenset(names)


def ir_transform(
    stmt: Node,
    preorder: Callback,
    postorder: Callback,
    only_enable: Iterable[str] | None = None,
) -> Node:
    """``stmt`` rewritten by ``preorder`` / ``postorder`` (see the module docstring)."""
    for name, fn in (("preorder", preorder), ("postorder", postorder)):
        if fn is not None and not callable(fn):
            raise ArgumentError(f"ir_transform: {name} must be a function or None, got {fn!r}")
    enabled = _type_names(only_enable)

    def wanted(node: Any) -> bool:
        return enabled is None or any(k.__name__ in enabled for k in type(node).__mro__)

    class _Transform(Mutator):
        def visit(self, node: Any) -> Any:
            use = wanted(node)
            if use and preorder is not None:
                replaced = preorder(node)
                if replaced is not None:
                    return replaced
            new = Mutator.visit(self, node)
            if use and postorder is not None:
                replaced = postorder(new)
                if replaced is not None:
                    return replaced
            return new

    return _Transform().visit(stmt)


__all__ = ["ir_transform", "post_order_visit", "substitute"]
