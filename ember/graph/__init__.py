"""The model compiler and its runtime: an ONNX graph in, a :class:`CompiledModel` out.

``compile.py`` is the driver, read top to bottom: import, graph passes, fusion,
strategies, kernels, memory plan, executor. ``kernels.py`` turns each fused group
into a built function through the target's ``Backend``; ``executor.py`` runs the
plan; ``control_flow.py`` and ``dynamic_model.py`` handle subgraphs and symbolic
shapes; ``artifact*.py`` write and read ``.ember`` files; ``model_tuning.py``
extracts tuning tasks from a model. Importing this package loads none of them.
"""
