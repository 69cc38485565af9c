"""Schedule templates: the ``@template("<op>.<target>")`` registry and ``get_config()``.

A template is a function from workload arguments (shapes, dtypes) to ``(schedule,
tensors)`` that reads its tuning choices from ``get_config()``. Registering one names
it ``"<op>.<target>"`` (``"dense.llvm"``, ``"conv2d.cuda"``) so a task
(:mod:`ember.tuner.task`) can find it. Whoever runs a template decides which config it
sees by entering :func:`using_config`: the task passes a :class:`ConfigSpace` to collect
knobs, a :class:`ConfigEntity` to build a chosen config, or a :class:`FallbackConfig`.
Calling a decorated template directly runs it with the fallback config; records
(``apply_history_best``) plug in at :func:`config_for_direct_call`.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ember.backend import backend_kinds, get_backend
from ember.errors import ArgumentError, ConfigError
from ember.target import TARGET_KINDS
from ember.tuner.active_records import Where
from ember.tuner.space import Config, FallbackConfig

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TemplateInfo:
    """A registered template: its ``"<op>.<target>"`` name and the undecorated function.

    ``version`` goes into task keys, so records tuned before a template changed its
    schedule are not reused for it (bump it when the knobs' meaning changes).
    ``reference``, optional, computes the template's outputs from its input arrays with
    numpy (``reference(*inputs) -> array or tuple``): the measurer checks every
    candidate against it, independently of any schedule. A reference that cannot tell
    the output's shape from the inputs alone (a padded operand) declares a keyword
    parameter ``workload``, and is given the task's arguments there.
    """

    name: str
    func: Callable[..., Any]
    version: int = 1
    reference: Callable[..., Any] | None = None

    @property
    def op(self) -> str:
        return split_name(self.name)[0]

    @property
    def target_kind(self) -> str:
        """The target kind its name ends in; "" for a TVM-style name (any target)."""
        return split_name(self.name)[1]


_REGISTRY: dict[str, TemplateInfo] = {}
_ACTIVE = threading.local()


def split_name(name: Any) -> tuple[str, str]:
    """``"dense.llvm"`` -> ``("dense", "llvm")``. A name that does not end in a target kind
    (TVM's tutorials register ``"tutorial/matmul"``) is ``(name, "")``: a template for any
    target, which its task's ``target=`` picks. An empty name, or a target kind with no op
    before it, raises ``ConfigError``."""
    op, _, kind = name.rpartition(".") if isinstance(name, str) else ("", "", "")
    if not isinstance(name, str) or not name.strip() or (kind in TARGET_KINDS and not op):
        raise ConfigError(
            f"template name {name!r} must look like '<op>.<target>' with target one of "
            f"{tuple(TARGET_KINDS)}, or be any other non-empty name (a template for every target)"
        )
    return (op, kind) if kind in TARGET_KINDS else (name, "")


def template(
    name: str,
    *,
    override: bool = False,
    version: int = 1,
    reference: Callable[..., Any] | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as schedule template ``name`` ("<op>.<target>").

    Registering a name twice is an error unless ``override=True`` or it is the same
    function again (a module that was re-imported). ``version`` and ``reference``: see
    :class:`TemplateInfo`.
    """
    split_name(name)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(f"template '{name}': version must be a positive int, got {version!r}")
    if reference is not None and not callable(reference):
        raise ConfigError(f"template '{name}': reference must be callable, got {reference!r}")

    def register(func: F) -> F:
        old = _REGISTRY.get(name)
        same = old is not None and _qualname(old.func) == _qualname(func)
        if old is not None and not (override or same):
            raise ConfigError(
                f"template '{name}' is already registered by {_qualname(old.func)}; "
                "pass override=True to replace it"
            )
        _REGISTRY[name] = TemplateInfo(name, func, version, reference)

        @functools.wraps(func)
        def run_with_fallback(*args: Any, **kwargs: Any) -> Any:
            check_template_args(name, func, args, kwargs)
            with using_config(config_for_direct_call(name, args)):
                return func(*args, **kwargs)

        run_with_fallback.template_name = name  # type: ignore[attr-defined]
        return run_with_fallback  # type: ignore[return-value]

    return register


def check_template_args(
    name: str, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> None:
    """Refuse arguments that do not fit the template's parameters before it runs.

    Without this a wrong count escapes from deep inside the template as a bare
    ``TypeError``; the ``ArgumentError`` shows the signature to call it with.
    """
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return
    try:
        signature.bind(*args, **(kwargs or {}))
    except TypeError as e:
        raise ArgumentError(
            f"template '{name}' takes arguments {_parameters(signature)}, "
            f"got {len(args)} argument(s) {tuple(args)!r}: {e}"
        ) from None


def _parameters(signature: inspect.Signature) -> str:
    return "(" + ", ".join(p.name for p in signature.parameters.values()) + ")"


def _qualname(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


# Resolvers consulted, innermost first, for the config of a template run without a chosen
# config, given (name, args, where); ``apply_history_best`` (:mod:`ember.tuner.dispatch`)
# pushes one per block.
DIRECT_CALL_RESOLVERS: list[Callable[[str, tuple[Any, ...], Where], Config | None]] = []


def config_for_direct_call(name: str, args: tuple[Any, ...], where: Where = ()) -> Config:
    """The config a template called directly (not through a task) runs with: the best
    record of an enclosing ``apply_history_best`` block, else the fallback. ``where``
    (knob values, ``(("ic_bn", 16),)``): the best record among those measured with them,
    for a caller that can run only such configs; the fallback when none was."""
    for resolve in reversed(DIRECT_CALL_RESOLVERS):
        cfg = resolve(name, args, where)
        if cfg is not None:
            return cfg
    return FallbackConfig()


def lookup_template(name: str) -> TemplateInfo:
    """The template registered as ``name``; unknown names list the ones for that target."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    kind = name.rpartition(".")[2] if isinstance(name, str) else ""
    if kind in TARGET_KINDS and _load_builtin_templates(kind) and name in _REGISTRY:
        return _REGISTRY[name]
    known = registered_templates(kind if kind in TARGET_KINDS else None)
    where = f"for target '{kind}'" if kind in TARGET_KINDS else "in all"
    raise ConfigError(
        f"no schedule template named {name!r}; registered {where}: " + (", ".join(known) or "none")
    )


def _load_builtin_templates(kind: str) -> bool:
    """Load the target's built-in templates on first use, through its backend (False when
    the kind has none), so the tuner never names a code generator."""
    if kind not in backend_kinds():
        return False
    get_backend(kind).load_templates()
    return True


def registered_templates(target_kind: str | None = None) -> list[str]:
    """Sorted names of the registered templates, optionally only those for one target kind
    (the built-in templates of that kind, or of every kind, are loaded first)."""
    for kind in TARGET_KINDS if target_kind is None else (target_kind,):
        if kind in TARGET_KINDS:
            _load_builtin_templates(kind)
    return sorted(n for n, t in _REGISTRY.items() if target_kind in (None, t.target_kind))


def _stack() -> list[Config]:
    if not hasattr(_ACTIVE, "stack"):
        _ACTIVE.stack = []
    return _ACTIVE.stack  # type: ignore[no-any-return]


@contextmanager
def using_config(cfg: Config) -> Iterator[Config]:
    """Make ``cfg`` what ``get_config()`` returns inside the block (nests; per thread)."""
    if not isinstance(cfg, Config):
        raise ConfigError(f"expected a ConfigSpace, ConfigEntity or FallbackConfig, got {cfg!r}")
    cfg._start_run()
    stack = _stack()
    stack.append(cfg)
    try:
        yield cfg
    finally:
        stack.pop()


def get_config() -> Config:
    """The config of the template that is running now."""
    stack = _stack()
    if not stack:
        raise ConfigError(
            "get_config() was called outside a schedule template; call it inside a function "
            "decorated with @ember.tuner.template, run directly or via create_task(...)"
        )
    return stack[-1]
