"""``ember.te``: tensor expressions and their schedules, the language users write operators
in (TVM's ``tvm.te``).

The expressions live in ``ember.tir.te``, which the schedule code itself builds on; the
schedule names (``create_schedule``, ``Schedule``, ``Stage``, and the ``schedule`` module
as ``tvm.te.schedule``) sit above them in ``ember.tir.schedule``. This module joins the
two, so neither has to reach up into the other.
"""

from ember.tir.schedule import schedule
from ember.tir.schedule.schedule import Schedule, Stage, create_schedule
from ember.tir.te import *  # noqa: F403 - every expression name of ember.tir.te
from ember.tir.te import __all__ as _expression_names

__all__ = [*_expression_names, "Schedule", "Stage", "create_schedule", "schedule"]
