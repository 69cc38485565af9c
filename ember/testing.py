"""``ember.testing``: the helpers of ``tvm.testing`` that TVM's tutorials and tests use most,
so a TVM script runs with only its imports changed.

``assert_allclose`` (TVM's defaults: ``rtol=atol=1e-7``, shapes compared first, Ember and
numpy arrays alike), ``device_enabled`` / ``enabled_targets`` (``llvm`` always, ``cuda``
where a GPU is visible), the ``requires_*`` / ``uses_gpu`` pytest decorators,
``parametrize_targets`` and ``main``. It sits on top of the package (imports ``ember.nd``
and the CUDA device probe lazily) and needs pytest only for the decorators.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend import get_backend
from ember.errors import ArgumentError
from ember.runtime.nd import device

DEFAULT_TARGETS = ("llvm", "cuda")


def _as_numpy(value: Any) -> np.ndarray:
    """An Ember ``nd`` array (``.numpy()``), or anything numpy takes."""
    numpy = getattr(value, "numpy", None)
    return np.asanyarray(numpy() if callable(numpy) else value)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``desired`` have the same shape and
    agree within ``atol + rtol * |desired|`` elementwise, as ``tvm.testing.assert_allclose``
    (whose tolerances are tighter than numpy's ``atol=0`` default on purpose: pass looser
    ones for reduced-precision results)."""
    a, d = _as_numpy(actual), _as_numpy(desired)
    np.testing.assert_equal(a.shape, d.shape, err_msg="shapes differ")
    np.testing.assert_allclose(a, d, rtol=rtol, atol=atol, verbose=True)


def device_enabled(target: Any) -> bool:
    """Whether ``target`` (a string or ``Target``) can run here: ``llvm`` always, ``cuda``
    where the driver reports a GPU (its backend says)."""
    return get_backend(target).device_available()


def enabled_targets() -> list[tuple[str, str]]:
    """``(target, device)`` of each default target that can run here, as TVM's."""

    return [(t, device(t, 0)) for t in DEFAULT_TARGETS if device_enabled(t)]


def _skip_unless(condition: Callable[[], bool], reason: str) -> Callable[[Any], Any]:
    def mark(func: Any) -> Any:
        # optional dependency: pytest (only test code calls these)
        import pytest

        return pytest.mark.skipif(not condition(), reason=reason)(func)

    return mark


requires_llvm = _skip_unless(lambda: True, "needs LLVM")
requires_cuda = _skip_unless(lambda: device_enabled("cuda"), "needs a CUDA GPU")
requires_gpu = requires_cuda


def uses_gpu(func: Any) -> Any:
    """TVM marks a test that runs on a GPU when there is one, and on the CPU anyway."""
    return func


def parametrize_targets(*targets: Any) -> Callable[[Any], Any]:
    """Run a test once per target (``llvm`` and ``cuda`` by default), skipping one that
    cannot run here; a test with a ``dev`` parameter also gets the device name. Usable
    bare (``@parametrize_targets``) or with targets (``@parametrize_targets("llvm")``)."""
    if len(targets) == 1 and callable(targets[0]):
        return parametrize_targets()(targets[0])
    chosen = [str(t) for t in targets] or list(DEFAULT_TARGETS)

    def decorate(func: Any) -> Any:
        # optional dependency: pytest (only test code calls these)
        import pytest

        params = []
        for t in chosen:
            marks = [] if device_enabled(t) else [pytest.mark.skip(reason=f"{t} cannot run here")]
            values = (t, device(t, 0)) if _takes(func, "dev") else (t,)
            params.append(pytest.param(*values, marks=marks, id=t))
        names = "target,dev" if _takes(func, "dev") else "target"
        return pytest.mark.parametrize(names, params)(func)

    return decorate


def _takes(func: Any, name: str) -> bool:
    return name in inspect.signature(func).parameters


def main() -> None:
    """Run the calling test file with pytest (``if __name__ == "__main__":
    ember.testing.main()``)."""
    # optional dependency: pytest (only test code calls these)
    import pytest

    if not sys.argv or not sys.argv[0]:
        raise ArgumentError("ember.testing.main() runs the script it is called from")
    sys.exit(pytest.main([sys.argv[0], *sys.argv[1:]]))


__all__ = [
    "assert_allclose",
    "device_enabled",
    "enabled_targets",
    "main",
    "parametrize_targets",
    "requires_cuda",
    "requires_gpu",
    "requires_llvm",
    "uses_gpu",
]
