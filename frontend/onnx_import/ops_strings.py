"""ONNX string operators: StringConcat, StringSplit, RegexFullMatch, StringNormalizer.

String tensors are compile-time constants in Ember (``frontend/string_tensors.py``: a
string graph input makes the model compile per value of it), so these converters read
their inputs with ``ctx.constant`` and compute with Python's ``str`` and ``re`` at
import; the results are constants of the graph. The semantics are the ONNX spec's, and
where it is silent those of ``onnx.reference`` (``op_string_concat.py``,
``op_string_split.py``, ``op_regex_full_match.py``, ``op_string_normalizer.py``), which
made the backend tests' expected outputs. Where the implementations differ:

- RegexFullMatch patterns are RE2 syntax. Ember runs them with Python ``re`` in ASCII
  mode, which matches RE2 on the common syntax (``\\w``, ``\\d``, ``\\s`` and ``\\b`` are
  ASCII classes in RE2; ``onnx.reference`` leaves them Unicode, so it differs from
  onnxruntime on non-ASCII text). Python also takes what RE2 refuses (backreferences,
  lookaround), and refuses what only RE2 has (``\\pL``, ``\\Q...\\E``: an error here);
  RE2's POSIX classes (``[[:alpha:]]``) mean something else to Python and are refused.
- StringNormalizer drops the elements equal to a stopword, then changes case, as the
  spec and onnxruntime do; ``onnx.reference`` instead drops stopwords word by word inside
  each element, strips accents, drops empty strings, and with ``case_change_action``
  NONE compares case-sensitively whatever ``is_case_sensitive`` says. Without case
  sensitivity both sides are compared lower-cased for LOWER, else upper-cased (as
  onnxruntime). Case changes are Unicode's default mappings for every ``locale`` (as
  ``onnx.reference``; onnxruntime uses the C++ locale's, and fails without it).
- StringSplit on whitespace keeps the trailing whitespace of a rest left unsplit by
  ``maxsplit``, and splits an empty string on a delimiter into one empty string (Python's
  ``str.split``, as ``onnx.reference``; onnxruntime strips the one, gives no part for the
  other).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.errors import ArgumentError
from ember.frontend.onnx_import.context import ConvertContext
from ember.frontend.onnx_import.registry import converter
from ember.frontend.string_tensors import STRING, STRING_NUMPY, string_array


def _strings(ctx: ConvertContext, i: int) -> np.ndarray:
    """Input ``i``, which must be a string tensor (always a constant)."""
    t = ctx.type(i)
    if t.dtype != STRING:
        raise ArgumentError(f"{ctx.op_type} input {i} must be a string tensor, got {t}")
    return ctx.constant(i)


def _map(fn: Callable[[str], Any], x: np.ndarray, dtype: Any) -> np.ndarray:
    """``fn`` of every element of ``x``, an array of ``x``'s shape (0-d and empty too)."""
    flat = [fn(s) for s in x.reshape(-1).tolist()]
    out = np.empty(len(flat), dtype=dtype)
    out[:] = flat
    return out.reshape(x.shape)


@converter("StringConcat", since=20)
def string_concat(ctx: ConvertContext) -> list[str]:
    """ONNX StringConcat: the elementwise concatenation of two string tensors, broadcast
    as numpy does."""
    x, y = np.broadcast_arrays(_strings(ctx, 0), _strings(ctx, 1))
    joined = [a + b for a, b in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist())]
    return [ctx.const(string_array(joined, x.shape))]


@converter("StringSplit", since=20)
def string_split(ctx: ConvertContext) -> list[str]:
    """ONNX StringSplit: each element split on ``delimiter`` (on runs of whitespace, with
    none at either end, when it is unset or empty) at most ``maxsplit`` times (unset or
    negative: no limit, as Python's ``str.split`` and ``onnx.reference``), the parts
    padded with empty strings to the longest row (a last axis of that length), and the
    number of parts of each element (int64)."""
    x = _strings(ctx, 0)
    delimiter = ctx.attr("delimiter", "") or None
    maxsplit = int(ctx.attr("maxsplit", -1))
    parts = [s.split(delimiter, maxsplit) for s in x.reshape(-1).tolist()]
    width = max((len(p) for p in parts), default=0)
    out = np.full((len(parts), width), "", dtype=STRING_NUMPY)
    for row, p in zip(out, parts):
        row[: len(p)] = p
    lengths = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    return [ctx.const(out.reshape(*x.shape, width)), ctx.const(lengths)]


_POSIX_CLASS = re.compile(r"\[:\^?[a-z]+:\]")


def compile_re2(pattern: str) -> re.Pattern[str]:
    """``pattern`` (RE2 syntax) as a Python regex with RE2's ASCII classes; an
    ArgumentError for one Python cannot read or would read differently."""
    if _POSIX_CLASS.search(pattern):
        raise ArgumentError(
            f"RegexFullMatch: the POSIX character classes of pattern {pattern!r} are not "
            "supported (write them as ranges, [[:alpha:]] as [A-Za-z])"
        )
    try:
        return re.compile(pattern, re.ASCII)
    except re.error as e:
        raise ArgumentError(
            f"RegexFullMatch: pattern {pattern!r} is not supported: {e} (Ember reads RE2 "
            "syntax with Python's re)"
        ) from e


@converter("RegexFullMatch", since=20)
def regex_full_match(ctx: ConvertContext) -> list[str]:
    """ONNX RegexFullMatch: whether each element matches ``pattern`` as a whole (bool)."""
    regex = compile_re2(str(ctx.attr("pattern")))
    x = _strings(ctx, 0)
    return [ctx.const(_map(lambda s: regex.fullmatch(s) is not None, x, np.bool_))]


_CASES = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}


@converter("StringNormalizer", since=10)
def string_normalizer(ctx: ConvertContext) -> list[str]:
    """ONNX StringNormalizer on a [C] or [1, C] tensor: the elements equal to a stopword
    removed (compared in one case when ``is_case_sensitive`` is 0: see the notes), the rest
    lower- or upper-cased as ``case_change_action`` says; nothing left gives one empty
    string ([1] or [1, 1])."""
    x = _strings(ctx, 0)
    if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
        raise ArgumentError(f"StringNormalizer: input must be [C] or [1, C], got {list(x.shape)}")
    action = str(ctx.attr("case_change_action", "NONE"))
    if action not in _CASES:
        raise ArgumentError(
            f"StringNormalizer: case_change_action must be NONE, LOWER or UPPER, got {action!r}"
        )
    sensitive = bool(ctx.attr("is_case_sensitive", 0))
    fold = _CASES["NONE" if sensitive else "LOWER" if action == "LOWER" else "UPPER"]
    stops = {fold(w) for w in ctx.attr("stopwords", ())}
    kept = [_CASES[action](s) for s in x.reshape(-1).tolist() if fold(s) not in stops]
    out = string_array(kept or [""])
    return [ctx.const(out.reshape(1, -1) if x.ndim == 2 else out)]
