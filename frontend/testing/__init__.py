"""Test helpers shipped with the frontend (the ONNX backend node-test runner)."""
