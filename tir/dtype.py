"""Data types as short strings (``"float32"``, ``"int8"``, ``"float32x8"``), for the IR.

The helpers live in :mod:`ember.runtime.dtype` (the bottom layer, since compiled modules
check argument dtypes with them at call time); the IR and everything above it keep
reading them here, under the name they always had.
"""

from __future__ import annotations

from ember.runtime.dtype import *  # noqa: F403 - the same names, re-exported
from ember.runtime.dtype import __all__ as __all__
