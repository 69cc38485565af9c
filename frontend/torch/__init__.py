"""``ember.frontend.torch``: PyTorch programs straight into Ember's graph (the
``torch.compile(model, backend="ember")`` backend that uses it is ``ember/torch_backend.py``).

torch stays optional: ``import ember`` never imports it, and this package imports it only
when one of its functions is called. :func:`from_module` traces a module (or any callable)
on example inputs with ``make_fx`` and the core ATen decompositions, parameters and buffers
becoming constants; :func:`from_fx` imports an ATen-level ``torch.fx.GraphModule``;
:func:`from_exported` a ``torch.export.ExportedProgram``. Each gives an Ember graph for
``ember.compile``, which also takes an ``ExportedProgram`` itself: exported with
``dynamic_shapes``, it gives a DynamicModel whose symbolic dims are the program's symbols,
guarded by their ranges (``source.py``). An op Ember lacks is reported with every other
one at once, each with the source line PyTorch recorded for it
(:class:`ember.UnsupportedOperatorError`).
"""

from ember.frontend.torch.importer import from_exported, from_fx, from_module

__all__ = ["from_exported", "from_fx", "from_module"]
