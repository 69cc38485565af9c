"""Where a stage is computed: at the root of the program, inlined into its consumers, or
inside one of another stage's loops (``compute_at``).

Its own module because bound inference, the attach-tree checks and the scan and extern
lowering all read a stage's attach kind, while the schedule, which sets it, calls into
some of them (``cache_read``, ``rfactor``, ``normalize``).
"""

from __future__ import annotations

import enum


class AttachKind(enum.Enum):
    """Where a stage is computed: ``Stage.attach`` (with ``attach_stage``/``attach_ivar``
    naming the loop for ``SCOPE``)."""

    ROOT = "root"
    INLINE = "inline"
    SCOPE = "scope"  # compute_at
