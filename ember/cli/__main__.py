"""``python -m ember.cli ARGS``: the same as the ``ember`` command."""

from __future__ import annotations

from ember.cli import run

run()
