"""``te.scan``: a recurrence over the first axis of a tensor, as TVM's ``tvm.te.scan``.

A scan has a *state* placeholder that its update reads at earlier time steps,
an *init* giving the first rows and an *update* giving every later row::

    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X])   # cumulative sum

The output has the state's shape. Rows ``0 .. init.shape[0]`` come from init,
row ``t`` of the rest from update at ``t``, where reading ``s_state[t - k]``
reads the scan's own earlier rows. Lowering (``tir/schedule/scan_lower.py``)
runs init, then a serial loop over ``scan_axis`` with the update inside it; the
state, init and update all write and read the scan's one buffer. Its other axes
are scheduled on the init and update stages (``s[s_update].split/bind``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.errors import ArgumentError
from ember.tir import expr as E
from ember.tir.arith import Analyzer
from ember.tir.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Tensor


@dataclass(frozen=True, slots=True, eq=False)
class ScanOp(Operation):
    """Outputs ``state_placeholder``-shaped tensors filled by ``init`` then ``update``.

    ``scan_axis`` runs over the updated rows, ``[init.shape[0], update.shape[0])``;
    ``spatial_axis_`` holds the other axes of every state, as in TVM.
    """

    name: str
    scan_axis: IterVar
    init: tuple[Tensor, ...]
    update: tuple[Tensor, ...]
    state_placeholder: tuple[Tensor, ...]
    inputs: tuple[Tensor, ...] = ()
    spatial_axis_: tuple[IterVar, ...] = ()
    tag: str = ""
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def num_outputs(self) -> int:
        return len(self.update)

    @property
    def shape(self) -> tuple[E.PrimExpr, ...]:
        return self.state_placeholder[0].shape

    @property
    def dtype(self) -> str:
        return self.update[0].dtype

    def output_dtype(self, index: int) -> str:
        return self.update[index].dtype

    def output_shape(self, index: int) -> tuple[E.PrimExpr, ...]:
        return self.state_placeholder[index].shape

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        # as TVM's ScanOp: the init and update tensors (the state is the scan itself)
        return (*self.init, *self.update)

    @property
    def schedule_axes(self) -> tuple[IterVar, ...]:
        """The stage's one loop: the time axis the update stage is computed inside."""
        return (self.scan_axis,)

    def __repr__(self) -> str:
        return f"scan({self.name})"


def _as_list(value: Tensor | Sequence[Tensor], what: str) -> tuple[Tensor, ...]:
    items = (value,) if isinstance(value, Tensor) else tuple(value)
    for t in items:
        if not isinstance(t, Tensor):
            raise ArgumentError(f"scan: {what} must be tensors, got {t!r}")
    return items


def _same(a: E.PrimExpr, b: E.PrimExpr) -> bool:
    return Analyzer().can_prove(E.convert(a) == E.convert(b))


def scan(
    init: Tensor | Sequence[Tensor],
    update: Tensor | Sequence[Tensor],
    state_placeholder: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor] | None = None,
    name: str = "scan",
    tag: str = "",
    attrs: dict[str, Any] | None = None,
) -> Tensor | list[Tensor]:
    """The scan of ``update`` from ``init`` over the first axis (see the module docstring).

    As in TVM, one state gives one tensor and a list of states a list of tensors; every
    state's update runs in the same time step, reading any state's earlier rows.
    """
    inits = _as_list(init, "init")
    updates = _as_list(update, "update")
    states = _as_list(state_placeholder, "state_placeholder")
    extra = _as_list(inputs, "inputs") if inputs is not None else ()
    if not (len(inits) == len(updates) == len(states)) or not inits:
        raise ArgumentError(
            f"scan '{name}': init, update and state_placeholder must be as many tensors "
            f"(got {len(inits)}, {len(updates)}, {len(states)})"
        )
    for i, (ini, upd, st) in enumerate(zip(inits, updates, states)):
        _check_state(name, i, ini, upd, st)
    first = inits[0].shape[0]
    for i in range(1, len(states)):
        if not (
            _same(inits[i].shape[0], first) and _same(updates[i].shape[0], updates[0].shape[0])
        ):
            raise ArgumentError(
                f"scan '{name}': state {i} has {inits[i].shape[0]!r} init rows and "
                f"{updates[i].shape[0]!r} time steps; every state must have state 0's "
                f"({first!r} and {updates[0].shape[0]!r})"
            )
    axis = IterVar(E.Var(f"{name}.idx"), E.Range(first, updates[0].shape[0] - first))
    spatial = tuple(
        IterVar(E.Var(f"{name}.out{i}.i{k}"), E.Range.from_extent(st.shape[k]))
        for i, st in enumerate(states)
        for k in range(1, st.ndim)
    )
    op = ScanOp(
        name, axis, inits, updates, states, extra, spatial, tag, tuple((attrs or {}).items())
    )
    outs = [op.output(i) for i in range(len(updates))]
    return outs[0] if len(outs) == 1 else outs


def _check_state(name: str, i: int, ini: Tensor, upd: Tensor, st: Tensor) -> None:
    where = f"scan '{name}' state {i}"
    if not isinstance(st.op, PlaceholderOp):
        raise ArgumentError(f"{where}: state_placeholder must be a te.placeholder")
    for what, t in (("init", ini), ("update", upd)):
        if not isinstance(t.op, ComputeOp):
            raise ArgumentError(f"{where}: {what} must be a te.compute, got {t.op!r}")
        if t.dtype != st.dtype:
            raise ArgumentError(f"{where}: {what} has dtype {t.dtype} but the state has {st.dtype}")
        if t.ndim != st.ndim:
            raise ArgumentError(
                f"{where}: {what} has {t.ndim} dimensions but the state has {st.ndim}"
            )
        for k in range(1, st.ndim):
            if not _same(t.shape[k], st.shape[k]):
                raise ArgumentError(
                    f"{where}: {what} dimension {k} is {t.shape[k]!r}, the state's is "
                    f"{st.shape[k]!r}; all but the first (time) dimension must agree"
                )
    if not _same(upd.shape[0], st.shape[0]):
        raise ArgumentError(
            f"{where}: update has {upd.shape[0]!r} time steps but the state {st.shape[0]!r}; "
            "the update's shape is the state's"
        )
