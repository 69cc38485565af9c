"""``ember.contrib.utils``: ``tvm.contrib.utils``'s temporary folders, for TVM scripts that
save and load built modules (``temp = utils.tempdir(); temp.relpath("myadd.so")``).

A :class:`TempDirectory` is removed when it is garbage-collected or its ``with`` block
ends, unless ``keep_for_debug`` (or ``TempDirectory.set_keep_for_debug()``) keeps it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError


class TempDirectory:
    """A fresh folder; ``relpath(name)`` names a file in it, ``listdir()`` lists it."""

    _KEEP_FOR_DEBUG = False

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool | None = None) -> None:
        self._keep = self._KEEP_FOR_DEBUG if keep_for_debug is None else bool(keep_for_debug)
        if custom_path is not None:
            try:
                os.makedirs(custom_path, exist_ok=False)
            except OSError as e:
                raise ArgumentError(f"tempdir: cannot create '{custom_path}': {e}") from e
            self.temp_dir = os.path.realpath(custom_path)
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="ember-")

    @classmethod
    def set_keep_for_debug(cls, keep: bool = True) -> None:
        """Keep every temporary folder made from now on (to look at what a build wrote)."""
        cls._KEEP_FOR_DEBUG = bool(keep)

    def relpath(self, name: str) -> str:
        """The path of ``name`` inside the folder (as a string, as TVM gives it)."""
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list[str]:
        return os.listdir(self.temp_dir)

    @property
    def path(self) -> Path:
        return Path(self.temp_dir)

    def remove(self) -> None:
        """Delete the folder now (a kept one too)."""
        if self.temp_dir and os.path.isdir(self.temp_dir):
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> TempDirectory:
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._keep:
            self.remove()

    def __del__(self) -> None:
        if not getattr(self, "_keep", True):
            self.remove()

    def __repr__(self) -> str:
        return f"TempDirectory({self.temp_dir!r})"


def tempdir(custom_path: str | None = None, keep_for_debug: bool | None = None) -> TempDirectory:
    """A new temporary folder (``custom_path``: create exactly that one)."""
    return TempDirectory(custom_path, keep_for_debug)


def which(exec_name: str) -> str | None:
    """The full path of ``exec_name`` on ``PATH``, or None."""
    return shutil.which(exec_name)


__all__ = ["TempDirectory", "tempdir", "which"]
