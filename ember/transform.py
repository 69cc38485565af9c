"""``ember.transform``: the pass infrastructure users reach for, named as ``tvm.transform``.

``with ember.transform.PassContext(opt_level=3, disabled_pass=[...], config={...}):``
around ``ember.lower`` / ``ember.build`` sets the options of every pass of those
builds; ``prim_func_pass`` makes a user pass that ``config={"tir.add_lower_pass":
[(phase, pass)]}`` adds to lowering. The classes live in ``ember.tir.transform``
(the passes' own layer); this module only names them for users.
"""

from ember.tir.transform.context import CONFIG_KEYS, PassContext, PassInfo, UnrollConfig
from ember.tir.transform.pipeline import Pass
from ember.tir.transform.prim_func_pass import prim_func_pass

__all__ = ["CONFIG_KEYS", "Pass", "PassContext", "PassInfo", "UnrollConfig", "prim_func_pass"]
