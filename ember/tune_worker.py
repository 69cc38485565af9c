"""The tuner's worker process: prepares tasks, builds candidates, runs and checks them.

The tuner (``ember.tuner``) may not import the compiler driver, so the process that
builds and runs candidates lives here, on top, and the package root registers
:func:`serve` as the global function ``"tuner.worker"``; the tuner's
:mod:`ember.tuner.workers` starts it in ``spawn``-ed processes and sends requests:

- ``("prepare", spec, workdir, seed, check, config)``: random inputs (seeded) and
  reference outputs for the tensors of ``config`` (None: the fallback's), saved as
  ``.npy`` files (see :mod:`ember.tuner.measure` for where the reference comes from);
- ``("build", spec, config, lib_path)``: instantiate the config and build it, exported
  to ``lib_path`` (``{"lib": None}`` when the module cannot be exported), and name its
  argument signature (``signature``: shapes and dtypes, the layout it takes);
- ``("run", spec, config, lib_path, workdir, timing)``: load (or build) the candidate,
  time it, then check its output once.

Answers are dicts; an error is ``{"error": <ErrorKind value>, "message": ...}``.
``None`` asks the worker to exit.
"""

from __future__ import annotations

import ctypes
import importlib
import inspect
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ember.codegen_llvm.cpu_features import HOST_CACHE_DIR, host_cache_sizes
from ember.driver import build, lower
from ember.errors import ArgumentError, EmberError
from ember.runtime import load_module
from ember.runtime.aligned import aligned_array, aligned_copy
from ember.tir.interp import run as interpret
from ember.tir.schedule.schedule import create_schedule
from ember.tir.te import operation as te
from ember.tuner import create_task
from ember.tuner.records import host_device_name
from ember.tuner.space import ConfigEntity, FallbackConfig

INTERP_LIMIT = 1 << 16  # tensor elements up to which the interpreter computes references
# Untimed calls of a candidate before it is timed, for at least this long (see warm_up).
WARMUP_S = 0.05


def serve(conn: Any, role: str = "worker") -> None:
    """Answer requests on ``conn`` until it closes or a ``None`` arrives."""
    _die_with_parent()
    # Ctrl-C is the tuner's to handle (it then closes its workers): a worker that died of
    # its own KeyboardInterrupt printed a traceback. The tuner starts workers with SIGINT
    # blocked; ignoring it here covers threads that unblock it (the OpenMP pool's).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    # No keep_openmp_spin(): candidates are timed with the OpenMP spin a model runs with
    # (ember.runtime.threads). With libgomp's own, on a machine busier than its cores the
    # worker timed ResNet-18's convolutions 3-10x slower than the model ran them, and by
    # chance: tuning picked noise. A model's spin outlasts the gaps between timed calls.

    conn.send({"device": host_device_name(), "role": role})
    worker = _Worker()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        kind, *rest = request
        try:
            reply = getattr(worker, kind)(*rest)
        except Exception as e:  # a worker answers; the tuner decides what a failure means
            reply = {"error": "runtime", "message": _describe(e)}
        conn.send(reply)


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the tuner dies (even by SIGKILL), so a worker
    stuck in a hanging candidate does not outlive it; elsewhere, a closed pipe ends it."""

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _describe(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if not hasattr(e, "add_context"):  # a bare Python error: where it came from helps
        text += "\n" + "".join(traceback.format_tb(e.__traceback__)[-3:])
    return text[-2000:]


def task_from_spec(spec: dict[str, Any]) -> Any:
    """The task a :func:`ember.tuner.measure.task_spec` describes, importing the template's
    module first (templates defined outside Ember register on import)."""

    module = spec.get("module", "")
    if module and module not in ("__main__", "__mp_main__") and module not in sys.modules:
        importlib.import_module(module)
    return create_task(spec["name"], tuple(spec["args"]), spec["target"], spec.get("fixed"))


class _Worker:
    def __init__(self) -> None:
        self.tasks: dict[str, Any] = {}
        self.inputs: dict[str, tuple[list[np.ndarray], dict[str, Any]]] = {}

    def task(self, spec: dict[str, Any]) -> Any:
        if spec["key"] not in self.tasks:
            self.tasks[spec["key"]] = task_from_spec(spec)
        return self.tasks[spec["key"]]

    # -- prepare -------------------------------------------------------------------------

    def prepare(
        self, spec: dict[str, Any], workdir: str, seed: int, check: bool, config: Any = None
    ) -> dict:
        """Inputs and reference outputs for the tensors of ``config`` (None: the fallback).

        A template's config may choose its tensors' layout (``conv2d_NCHWc.llvm``'s channel
        blocks), so the measurer prepares once per distinct argument signature, with the
        config of the first candidate that has it."""
        task = self.task(spec)
        # None: the task's fallback (with its fixed knobs: the layout every candidate has)
        _, tensors = task.instantiate(None if config is None else self._entity(task, config))
        roles = [_is_input(t) for t in tensors]
        rng = np.random.default_rng(seed)
        arrays = [_random(t, rng) if is_in else _empty(t) for t, is_in in zip(tensors, roles)]
        out = Path(workdir)
        for i, (a, is_in) in enumerate(zip(arrays, roles)):
            if is_in:
                np.save(out / f"arg{i}.npy", a)
        shapes = [[list(a.shape), str(a.dtype)] for a in arrays]
        (out / "shapes.json").write_text(json.dumps(shapes))
        meta = {"roles": roles, "check": check}
        if check:
            for i, expected in _reference(task, tensors, arrays, roles).items():
                np.save(out / f"expected{i}.npy", expected)
        (out / "meta.json").write_text(json.dumps(meta))
        return {"ok": True, "signature": signature_of(tensors)}

    def _entity(self, task: Any, config: dict) -> ConfigEntity:
        return ConfigEntity.from_json(config, task.config_space)

    # -- build ---------------------------------------------------------------------------

    def build(self, spec: dict[str, Any], config: dict, lib: str) -> dict:
        """Build ``config``; the answer names the library and the candidate's argument
        signature (shapes and dtypes: the layout its inputs must be prepared in)."""
        built = self._compile(spec, config)
        if isinstance(built, dict):
            return built
        mod, tensors = built
        signature = signature_of(tensors)
        if not hasattr(mod, "export_library"):  # a CUDA module: the runner builds it again
            return {"lib": None, "signature": signature}
        try:
            mod.export_library(lib)
        except ArgumentError:  # calls back into Python: the runner builds it itself
            return {"lib": None, "signature": signature}
        return {"lib": lib, "signature": signature}

    def _compile(self, spec: dict[str, Any], config: dict) -> Any:
        """``(module, tensors)`` of ``config``, or an error answer."""
        task = self.task(spec)
        try:
            cfg = self._entity(task, config)
            sch, tensors = task.instantiate(cfg)
        except EmberError as e:
            return {"error": "invalid_config", "message": _describe(e)}
        try:
            return build(sch, tensors, target=task.target), tensors
        except EmberError as e:
            kind = "invalid_config" if "verify_gpu" in str(e) else "compile"
            return {"error": kind, "message": _describe(e)}
        except Exception as e:
            return {"error": "compile", "message": _describe(e)}

    # -- run -----------------------------------------------------------------------------

    def run(self, spec: dict, config: dict, lib: str | None, workdir: str, timing: dict) -> dict:

        if lib:
            mod = load_module(lib)
        else:
            built = self._compile(spec, config)
            if isinstance(built, dict):
                return built
            mod = built[0]
        inputs, meta = self._inputs(workdir)
        # fresh copies (a candidate may write its inputs), on cache lines as the prepared
        # arrays and a model's are: numpy's own copy starts 16 bytes into a line, where
        # an AVX-512 access straddles two (no difference showed on ResNet-18's kernels,
        # but a candidate should be timed on the memory it will run on)
        args = [aligned_copy(a, force=True) for a in inputs]
        for a, is_in in zip(args, meta["roles"]):
            if not is_in:
                a.fill(_sentinel(a.dtype))
        if timing.get("dry_run"):
            return self._check_once(mod, args, workdir, meta, timing)
        try:
            if timing.get("flush_cache") and hasattr(mod, "get_function"):
                level = timing.get("flush_level", "llc")
                costs = time_flushed(mod, args, timing["number"], timing["repeat"], level)
            else:
                evaluate = mod.time_evaluator(
                    number=timing["number"],
                    repeat=timing["repeat"],
                    min_repeat_ms=timing["min_repeat_ms"],
                )
                if mod.kind != "cuda":  # a CPU module: its thread pool woken first
                    warm_up(lambda: mod(*args))
                costs = list(evaluate(*args).results)
        except EmberError as e:
            return {"error": "runtime", "message": _describe(e)}
        if meta["check"]:
            wrong = _check(args, workdir, meta["roles"], timing["rtol"], timing["atol"])
            if wrong:
                return {"error": "wrong_result", "message": wrong}
        return {"costs": costs}

    def _check_once(self, mod: Any, args: list, workdir: str, meta: dict, timing: dict) -> dict:
        """One untimed run (a CUDA module on the SIMT emulator) and the result check."""

        try:
            if hasattr(mod, "emulate"):
                mod.emulate(*args)
            else:
                mod(*args)
        except EmberError as e:
            return {"error": "runtime", "message": _describe(e)}
        if meta["check"]:
            wrong = _check(args, workdir, meta["roles"], timing["rtol"], timing["atol"])
            if wrong:
                return {"error": "wrong_result", "message": wrong}
        return {"costs": []}

    def _inputs(self, workdir: str) -> tuple[list[np.ndarray], dict]:
        if workdir not in self.inputs:
            meta = json.loads((Path(workdir) / "meta.json").read_text())
            shapes = json.loads((Path(workdir) / "shapes.json").read_text())
            # on cache lines, as a compiled model's arrays are: a candidate is timed on
            # the memory it will run on
            arrays = []
            for i, is_in in enumerate(meta["roles"]):
                if is_in:
                    arrays.append(aligned_copy(np.load(Path(workdir) / f"arg{i}.npy")))
                else:
                    arrays.append(aligned_array(shapes[i][0], shapes[i][1]))
            self.inputs[workdir] = (arrays, meta)
        return self.inputs[workdir]


def _cache_sizes() -> dict[int, int]:
    """Bytes of cpu0's data or unified cache at each level (Linux sysfs), the largest where
    a level lists several; empty where sysfs has none."""
    return host_cache_sizes(HOST_CACHE_DIR)


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size (Linux sysfs), or 32 MiB where it cannot be read."""
    return max(_cache_sizes().values(), default=32 << 20)


def private_cache_bytes() -> int:
    """One core's L2 (the level below the last; Linux sysfs), or 1 MiB where unknown."""
    sizes = _cache_sizes()
    below = [size for level, size in sizes.items() if level < max(sizes, default=0)]
    return max(below, default=1 << 20)


class CacheFlusher:
    """Evicts the CPU caches the way a model's kernel finds them: a parallel kernel writes
    one buffer the size of the last-level cache from another (twice its size touched, on
    every core, so each core's own L2 is overwritten too), then the numpy read of
    ``first`` (the kernel's input, which in a model the layer before has just written)
    brings that back. What TVM's ``cache_flush_cpu_non_first_arg`` leaves, without
    ``clflush``; and the kernel leaves the thread pool's threads spinning, as the kernel
    before does in a model, rather than asleep.

    It runs on the pool the candidate runs on (``invoke`` points the module at it and sets
    its thread count). Called through the bare native entry, as it once was, it ran on
    libgomp's team, whose idle thread then spun on a core through the timed call: every
    parallel candidate was timed at about its one-thread speed (a 128x1024x256 GEMM at
    0.57-0.60 ms flushed against 0.31-0.33 warm and 0.33 in the BERT encoder)."""

    def __init__(self, level: str = "llc") -> None:
        # "l2": twice each core's L2 touched on every core, which the last-level cache
        # (a victim cache on AMD) mostly absorbs, so a model's resident weights stay there
        if level == "llc":
            n = last_level_cache_bytes() // 4
        else:
            n = private_cache_bytes() * (os.cpu_count() or 1) // 4
        A = te.placeholder((n,), "float32", name="A")
        B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
        s = create_schedule(B.op)
        outer, inner = s[B].split(B.op.axis[0], factor=1024)
        s[B].parallel(outer)
        s[B].vectorize(s[B].split(inner, factor=16)[1])
        mod = build(s, [A, B], target="llvm", name="flush_caches")
        self.fn = mod.get_function(mod.entry_name)
        buffers = [aligned_array((n,), "float32") for _ in range(2)]
        self.arrays, self.pointers = self.fn.prepare(buffers)

    def __call__(self, first: np.ndarray | None) -> None:
        self.fn.invoke(self.pointers)
        if first is not None:
            first.sum()


_FLUSHERS: dict[str, CacheFlusher] = {}  # made on first use: a CUDA worker never needs one


def warm_up(call: Callable[[], Any], seconds: float | None = None) -> None:
    """``call()`` repeated, untimed, until ``seconds`` (``WARMUP_S``) have passed (at least
    once), so a candidate is timed with the thread pool's threads awake, as a model's
    kernel finds them after the kernel before it.

    The runner idles between candidates while they are built, and the pool's threads go
    to sleep. A woken thread joins the parallel loops only once its CPU runs it, and on
    this project's 2-core guests that took longer than a whole measurement about half
    the time, which then read the kernel's one-thread time: in the runner, MobileNetV2's
    192->32 1x1 conv at 28x28 (0.044 ms at 2 threads) and another config of it, timed by
    turns (``LocalMeasurer.measure_by_turns``, 4 calls of 3 rounds, 24 readings), read
    0.085-0.091 ms 6 times with one untimed call first, 4 times after 10 ms of calls, 3
    after 25 ms, none after 50. The tuner had timed that conv's fallback at 0.086 ms, and a
    pick no faster in the model re-timed 1.86x faster than it. 50 ms a candidate is
    about 1 minute of a 40-minute search (1,163 candidates on MobileNetV2)."""
    deadline = time.perf_counter() + (WARMUP_S if seconds is None else seconds)
    call()
    while time.perf_counter() < deadline:
        call()


def time_flushed(
    mod: Any, args: list[np.ndarray], number: int, repeat: int, level: str = "llc"
) -> list[float]:
    """Seconds per call of ``mod``'s entry, one per repeat (the mean of ``number`` calls),
    the caches flushed down to ``level`` (``MeasureOption.flush_level``) before each call
    and only the call timed."""
    fn = mod.get_function(mod.entry_name)
    arrays, pointers = fn.prepare(args)
    fn.invoke(pointers)  # the only status check
    native, first = fn.native, args[0] if args else None
    if level not in _FLUSHERS:
        _FLUSHERS[level] = CacheFlusher(level)
    flush = _FLUSHERS[level]

    def flushed_call() -> None:
        flush(first)
        native(*pointers)

    warm_up(flushed_call)  # code, page tables, the thread pool
    costs = []
    for _ in range(repeat):
        total = 0.0
        for _ in range(number):
            flush(first)
            start = time.perf_counter()
            native(*pointers)
            total += time.perf_counter() - start
        costs.append(total / number)
    del arrays
    return costs


def _is_input(tensor: Any) -> bool:
    return type(tensor.op).__name__ == "PlaceholderOp"


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in tensor.shape)


def _empty(tensor: Any) -> np.ndarray:
    return np.zeros(_shape(tensor), dtype=str(tensor.dtype))


def _random(tensor: Any, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(str(tensor.dtype))
    shape = _shape(tensor)
    if dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(1, 8, shape).astype(dtype)


def _sentinel(dtype: np.dtype) -> Any:
    return np.nan if dtype.kind == "f" else (np.iinfo(dtype).max if dtype.kind in "iu" else 0)


def _reference(task: Any, tensors: list, arrays: list, roles: list) -> dict[int, np.ndarray]:
    """Expected outputs, by position in the template's tensor list: the template's numpy
    ``reference`` where it has one; else the fallback schedule where its tensors are the
    candidate's, else the candidate's compute with no schedule (every stage at the root,
    in its default loop order) on the CPU. Either is interpreted for small tasks and
    compiled for large ones; none depends on the candidate's schedule."""

    outputs = [i for i, is_in in enumerate(roles) if not is_in]
    reference = task.template.reference
    if reference is not None:
        inputs = [a for a, is_in in zip(arrays, roles) if is_in]
        if "workload" in inspect.signature(reference).parameters:
            got = reference(*inputs, workload=tuple(task.args))
        else:
            got = reference(*inputs)
        got = got if isinstance(got, (tuple, list)) else [got]
        return {i: np.asarray(g, dtype=arrays[i].dtype) for i, g in zip(outputs, got)}
    sch, fallback = task.instantiate(FallbackConfig())
    target = task.target
    if signature_of(fallback) == signature_of(tensors):
        tensors = fallback
    else:  # another layout than the fallback's: the same compute, unscheduled
        sch, target = create_schedule([tensors[i] for i in outputs]), "llvm"
    work = [a.copy() for a in arrays]
    if sum(a.size for a in arrays) <= INTERP_LIMIT:
        interpret(lower(sch, tensors), *work)
    else:
        build(sch, tensors, target=target)(*work)
    return {i: work[i] for i in outputs}


def signature_of(tensors: list) -> list[list[Any]]:
    """``[[shape, dtype], ...]`` of a candidate's tensors, in argument order."""
    return [[list(_shape(t)), str(t.dtype)] for t in tensors]


def _check(args: list, workdir: str, roles: list, rtol: float, atol: float) -> str:
    for i, is_in in enumerate(roles):
        if is_in:
            continue
        expected = np.load(Path(workdir) / f"expected{i}.npy")
        got = args[i]
        if got.dtype.kind == "f":
            scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
            bad = ~np.isclose(got, expected, rtol=rtol, atol=atol * scale)
        else:
            bad = got != expected
        if np.any(bad):
            where = tuple(int(k) for k in np.argwhere(bad)[0])
            return (
                f"output #{i}: {int(np.sum(bad))} of {got.size} values differ from the "
                f"reference; first at {where}: {got[where]!r} != {expected[where]!r}"
            )
    return ""
