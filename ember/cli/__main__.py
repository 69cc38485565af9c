"""``python -m ember.cli ARGS``: the same as the ``ember`` command."""

from __future__ import annotations

import sys

from ember.cli import main

sys.exit(main())
