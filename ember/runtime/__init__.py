"""Ember's runtime: compiled modules, loading exported libraries, the CPU thread count.

Importing this package is light (numpy only); compilers import it, not the
other way round.
"""

from __future__ import annotations

from ember.runtime.load import load_module
from ember.runtime.module import Function, Module, TimingResult
from ember.runtime.signature import FunctionSignature, ParamSpec
from ember.runtime.threads import get_num_threads, set_num_threads

__all__ = [
    "Function",
    "FunctionSignature",
    "Module",
    "ParamSpec",
    "TimingResult",
    "get_num_threads",
    "load_module",
    "set_num_threads",
]
