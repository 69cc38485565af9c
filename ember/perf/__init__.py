"""Ember beside onnxruntime on whole models, and the gate that keeps Ember ahead.

The flow of ``ember bench`` (:mod:`ember.cli.bench`) and ``benchmarks/bench_models.py``:
:mod:`~ember.perf.models` turns a name or an ``.onnx`` path into a model and inputs;
:mod:`~ember.perf.timing` checks both runtimes agree and times each alone, by turns
(through :mod:`~ember.perf.runners`, in worker processes of :mod:`~ember.perf.workers`);
:mod:`~ember.perf.report` writes the JSON report and its tables, :mod:`~ember.perf.chart`
the PNG; :mod:`~ember.perf.gate` compares a report with a baseline.
"""
