"""Arithmetic analysis of integer index expressions: simplification, bounds, interval sets.

Bound inference, loop partitioning and guard elimination all ask the same
questions about index arithmetic; :class:`Analyzer` answers them. The pieces:
``const_int_bound`` (constant intervals), ``linear`` (canonical sums),
``pattern`` + ``rewrite_rules`` (the simplifier's rule table), ``simplifier``
(the mutator applying it), ``int_set`` (symbolic intervals) and ``analyzer``
(the entry point holding what is known about variables).
"""

from ember.tir.arith.analyzer import Analyzer
from ember.tir.arith.const_int_bound import NEG_INF, POS_INF, const_int_bound
from ember.tir.arith.int_set import IntSet, infinity, int_set
from ember.tir.arith.struct_key import expr_key, same

__all__ = [
    "NEG_INF",
    "POS_INF",
    "Analyzer",
    "IntSet",
    "const_int_bound",
    "expr_key",
    "infinity",
    "int_set",
    "same",
]
