"""Einstein summation lowered to one tensor-expression compute.

The equation (``"bij,bjk->bik"``; ``...`` for broadcast dims; no ``->`` for numpy's
implicit output) is parsed into one label per input dim; the output labels become
the compute's axes and every other label a reduce axis, so matmul, batch matmul,
transposes, sums, outer and inner products, and diagonals (a label repeated in one
input) are all the same ``sum(prod of the inputs at their labels)``. Ellipsis dims
broadcast numpy-style (size-1 dims read index 0). 16-bit floats accumulate in
float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.te import operation as te
from ember.tir.te.tensor import Tensor
from ember.tir.topi.transform import static_shape


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed equation: each input's labels, the output's labels and every label's size."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    sizes: dict[str, int]

    @property
    def reduced(self) -> tuple[str, ...]:
        seen = [lab for labels in self.inputs for lab in labels]
        return tuple(dict.fromkeys(lab for lab in seen if lab not in self.output))


def _term_labels(term: str, ndim: int, n_ell: int, equation: str) -> list[str]:
    """Labels of one input term; its ``...`` takes the last dims of the ``n_ell`` broadcast
    labels ``.0 .. .{n_ell-1}`` (right-aligned, as numpy broadcasts)."""
    letters = term.replace("...", "")
    if term.count("...") > 1 or (letters and not letters.isalpha()):
        raise ArgumentError(f"einsum: term {term!r} of {equation!r} is not valid")
    if "..." not in term:
        if len(letters) != ndim:
            raise ArgumentError(f"einsum: term {term!r} has {len(letters)} labels for {ndim} dims")
        return list(letters)
    own = ndim - len(letters)
    if own < 0:
        raise ArgumentError(f"einsum: term {term!r} has more labels than its {ndim} dims")
    head, tail = term.split("...")
    return [*head, *[f".{n_ell - own + j}" for j in range(own)], *tail]


def parse_einsum(equation: str, shapes: Sequence[Sequence[int]]) -> EinsumSpec:
    """Parse ``equation`` for inputs of ``shapes``; ArgumentError says what does not fit."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ArgumentError(f"einsum: {equation!r} has {len(terms)} terms for {len(shapes)} inputs")
    n_ell = max(
        (len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes) if "..." in t),
        default=0,
    )
    inputs = [_term_labels(t, len(s), n_ell, equation) for t, s in zip(terms, shapes)]
    sizes: dict[str, int] = {}
    for labels, shape in zip(inputs, shapes):
        for lab, n in zip(labels, shape):
            old = sizes.get(lab, n)
            if old != n and not (lab.startswith(".") and 1 in (old, n)):
                raise ArgumentError(f"einsum: label {lab!r} of {equation!r} is {old} and {n}")
            sizes[lab] = max(old, n) if lab.startswith(".") else n
    ell = [f".{j}" for j in range(n_ell)]
    if arrow:
        letters = rhs.replace("...", "")
        if rhs.count("...") > 1 or (letters and not letters.isalpha()):
            raise ArgumentError(f"einsum: output {rhs!r} of {equation!r} is not valid")
        head, _, tail = rhs.partition("...")
        output = [*head, *(ell if "..." in rhs else []), *tail]
    else:
        counts: dict[str, int] = {}
        for labels in inputs:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        output = ell + sorted(lab for lab, c in counts.items() if c == 1 and lab.isalpha())
    if len(set(output)) != len(output) or any(lab not in sizes for lab in output):
        raise ArgumentError(f"einsum: output labels of {equation!r} are repeated or unknown")
    return EinsumSpec(tuple(tuple(x) for x in inputs), tuple(output), sizes)


def einsum(equation: str, tensors: Sequence[Tensor], name: str = "einsum") -> Tensor:
    """``numpy.einsum(equation, *tensors)`` as one compute (a reduction if labels vanish)."""
    shapes = [static_shape(t) for t in tensors]
    if not tensors:
        raise ArgumentError("einsum: needs at least one input")
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise ArgumentError(f"einsum: inputs have different dtypes {sorted(dtypes)}")
    spec = parse_einsum(equation, shapes)
    dtype = tensors[0].dtype
    acc = "float32" if dtype in ("float16", "bfloat16") else dtype
    red = {
        lab: te.reduce_axis((0, spec.sizes[lab]), name=f"k{n}")
        for n, lab in enumerate(spec.reduced)
    }
    out_shape = tuple(spec.sizes[lab] for lab in spec.output)

    def f(*i: E.PrimExpr) -> E.PrimExpr:
        at = {lab: v for lab, v in zip(spec.output, i)}
        at.update({lab: r.var for lab, r in red.items()})
        term = None
        for t, labels, shape in zip(tensors, spec.inputs, shapes):
            idx = [
                E.const(0, "int32") if n == 1 and spec.sizes[lab] != 1 else at[lab]
                for lab, n in zip(labels, shape)
            ]
            v = t[tuple(idx)]
            v = v if acc == dtype else E.cast(acc, v)
            term = v if term is None else term * v
        assert term is not None
        return te.sum(term, axis=tuple(red.values())) if red else term

    body = te.compute(out_shape, f, name=name if acc == dtype else f"{name}_acc", tag="einsum")
    if acc == dtype:
        return body
    return te.compute(out_shape, lambda *i: E.cast(dtype, body[i]), name=name, tag="einsum")
