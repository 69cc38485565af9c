"""Operator fusion: group nodes so that each group compiles to one kernel.

Expects a verified graph in topological order; gives the same graph with every
node's ``group`` set (groups numbered in topological order of their first node).
It follows TVM's FuseOps on the op pattern kinds (``frontend/op_kinds.py``) over a
post-dominator tree: a node may join the group of its immediate post-dominator
when every path between them stays fusible, so diamonds (a value read by two
injective branches that meet again) fuse whole, and a group never has a path that
leaves it and comes back (each group runs as one kernel in topological order).

- An ``OUT_ELEMWISE_FUSABLE`` anchor (conv, matmul) takes the elementwise and
  broadcast ops up to its post-dominator into its epilogue.
- An injective op joins its post-dominator when that is injective (a chain of
  reshapes and arithmetic becomes one loop nest) or a reduction (it is inlined
  into the reduction's reads).
- ``OPAQUE`` ops and graph outputs' producers keep what cannot run inside a group:
  a value read outside its group is written by the group as one of its outputs.
- An index tensor (a gather's or scatter's indices) is never made inside the group
  that reads it: it stays a kernel input, so the executor checks its range before the
  kernel runs (``ember/index_guard.py``).
Each group holds at most one op that is not injective.
"""

from __future__ import annotations

from dataclasses import replace

from ember.frontend.graph import Graph, Node
from ember.frontend.op_kinds import BROADCAST, COMM_REDUCE, INJECTIVE, OUT_ELEMWISE_FUSABLE, OpKind
from ember.frontend.ops.index_bounds import index_input
from ember.frontend.ops.registry import get_op
from ember.frontend.passes.graph_pass import graph_pass

SINK = -1  # the virtual node after every graph output
MAX_GROUP = 64  # keep kernels (and their compile time) bounded


def op_kind(node: Node) -> OpKind:
    """The fusion kind of a node's operator, which decides what it may fuse with."""
    return get_op(node.op).kind


def post_dominators(graph: Graph) -> list[int]:
    """The immediate post-dominator of each node (an index, or SINK)."""
    nodes = graph.nodes
    index = {out: k for k, n in enumerate(nodes) for out in n.outputs}
    users: list[set[int]] = [set() for _ in nodes]
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if i in index:
                users[index[i]].add(k)
    outputs = set(graph.output_names)
    ipdom = [SINK] * len(nodes)
    depth = [0] * len(nodes)

    def lca(a: int, b: int) -> int:
        while a != b:
            if a == SINK or b == SINK:
                return SINK
            if depth[a] >= depth[b]:
                a = ipdom[a]
            else:
                b = ipdom[b]
        return a

    for k in range(len(nodes) - 1, -1, -1):
        succ = sorted(users[k])
        if any(o in outputs for o in nodes[k].outputs) or not succ:
            ipdom[k] = SINK
        else:
            p = succ[0]
            for s in succ[1:]:
                p = lca(p, s)
            ipdom[k] = p
        depth[k] = 0 if ipdom[k] == SINK else depth[ipdom[k]] + 1
    return ipdom


class _Groups:
    """Union-find over node indices, with each group's members and its anchor's kind."""

    def __init__(self, kinds: list[OpKind], users: list[set[int]], preds: list[set[int]]):
        self.parent = list(range(len(kinds)))
        self.members: dict[int, set[int]] = {k: {k} for k in range(len(kinds))}
        self.anchor = [k if k > INJECTIVE else None for k in kinds]
        self.users, self.preds, self.kinds = users, preds, kinds

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def can_merge(self, nodes: set[int]) -> bool:
        roots = {self.find(m) for m in nodes}
        anchors = [self.anchor[r] for r in roots if self.anchor[r] is not None]
        union = set().union(*(self.members[r] for r in roots))
        if len(anchors) > 1 or len(union) > MAX_GROUP:
            return False
        if anchors == [OUT_ELEMWISE_FUSABLE]:
            # an epilogue holds elementwise and broadcast ops only (not a layout transform)
            if sum(self.kinds[m] > BROADCAST for m in union) > 1:
                return False
        return self._convex(union)

    def _convex(self, group: set[int]) -> bool:
        """No node outside ``group`` is reached from it and reaches back into it."""
        below = _closure(group, self.users) - group
        above = _closure(group, self.preds) - group
        return not below & above

    def merge(self, nodes: set[int]) -> None:
        roots = sorted({self.find(m) for m in nodes})
        head = roots[0]
        for r in roots[1:]:
            self.parent[r] = head
            self.members[head] |= self.members.pop(r)
            if self.anchor[r] is not None:
                self.anchor[head] = self.anchor[r]


def _closure(start: set[int], edges: list[set[int]]) -> set[int]:
    seen, stack = set(start), list(start)
    while stack:
        for nxt in edges[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _paths_between(src: int, dst: int, users: list[set[int]]) -> set[int] | None:
    """Every node on a path from ``src`` to ``dst`` (both included), or None when some
    path from ``src`` ends elsewhere without reaching ``dst``."""
    on_path: dict[int, bool] = {dst: True}

    def reaches(k: int) -> bool:
        if k in on_path:
            return on_path[k]
        succ = users[k]
        on_path[k] = bool(succ) and all(reaches(s) for s in succ)
        return on_path[k]

    if not reaches(src):
        return None
    return {k for k, ok in on_path.items() if ok}


@graph_pass
def fuse_ops(graph: Graph) -> Graph:
    """The graph with ``group`` set on every node (see the module docstring)."""
    nodes = graph.nodes
    if not nodes:
        return graph
    kinds = [op_kind(n) for n in nodes]
    index = {out: k for k, n in enumerate(nodes) for out in n.outputs}
    users: list[set[int]] = [set() for _ in nodes]
    for k, n in enumerate(nodes):
        for i in n.inputs:
            if i in index:
                users[index[i]].add(k)
    preds: list[set[int]] = [set() for _ in nodes]
    for k, succ in enumerate(users):
        for u in succ:
            preds[u].add(k)
    outputs = set(graph.output_names)
    ipdom = post_dominators(graph)
    groups = _Groups(kinds, users, preds)
    apart = _index_edges(graph, index)
    for k in range(len(nodes)):
        dst = ipdom[k]
        if dst == SINK or any(o in outputs for o in nodes[k].outputs):
            continue
        path = _paths_between(k, dst, users)
        if path is None:
            continue
        inner = path - {k, dst}
        if not _fusible(kinds[k], [kinds[i] for i in inner], kinds[dst]):
            continue
        if any(o in outputs for i in inner for o in nodes[i].outputs):
            continue
        if groups.can_merge(path) and not _joins_index_edge(groups, path, apart):
            groups.merge(path)
    return _numbered(graph, groups)


def _index_edges(graph: Graph, index: dict[str, int]) -> list[tuple[int, int]]:
    """(producer, consumer) of every index tensor made by a node and read as indices."""
    edges = []
    for k, n in enumerate(graph.nodes):
        pos = index_input(n.op, [graph.values[i].type for i in n.inputs], n.attrs)
        if pos is not None and n.inputs[pos] in index:
            edges.append((index[n.inputs[pos]], k))
    return edges


def _joins_index_edge(groups: _Groups, path: set[int], edges: list[tuple[int, int]]) -> bool:
    """Whether merging ``path`` would put both ends of an index edge in one group."""
    roots = {groups.find(m) for m in path}
    return any(groups.find(a) in roots and groups.find(b) in roots for a, b in edges)


def _fusible(src: OpKind, inner: list[OpKind], dst: OpKind) -> bool:
    if src == OUT_ELEMWISE_FUSABLE:
        return all(k <= BROADCAST for k in inner) and dst <= BROADCAST
    if src <= INJECTIVE:
        return all(k <= INJECTIVE for k in inner) and (dst <= INJECTIVE or dst == COMM_REDUCE)
    return False


def _numbered(graph: Graph, groups: _Groups) -> Graph:
    numbers: dict[int, int] = {}
    new_nodes = []
    for k, n in enumerate(graph.nodes):
        root = groups.find(k)
        gid = numbers.setdefault(root, len(numbers))
        new_nodes.append(replace(n, group=gid))
    return replace(graph, nodes=new_nodes)
