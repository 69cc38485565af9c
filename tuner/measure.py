"""Measuring candidates in isolated processes: parallel builds, one runner, checked results.

Sits under ``tune`` (:mod:`ember.tuner.tune`) and over the worker processes
(:mod:`ember.tuner.workers`). For a batch of configs of one task, a
:class:`LocalMeasurer`

1. prepares the task once per layout, in a builder process: random inputs (seeded,
   never zeros) and the reference outputs, saved as ``.npy`` files, for each distinct
   argument signature (shapes, dtypes) the built candidates have: a config may choose
   its tensors' layout (``conv2d_NCHWc.llvm``'s channel blocks). The reference is the
   template's numpy ``reference`` when it has one; otherwise the template's *fallback*
   schedule (where its layout is the candidate's) or the candidate's compute with no
   schedule, run by the reference interpreter (``ember.tir.interp``) for small tasks,
   or built by the compiler for large ones. Either way it does not depend on the
   candidate's schedule;
2. builds the candidates in ``jobs`` builder processes at once, each exported as a
   shared library (a module that calls back into Python cannot be exported and is
   built by the runner instead);
3. runs them one by one in a single runner process that does nothing else (no numpy
   BLAS, no builds of others' code: a kernel timed just after an OpenBLAS call runs
   slower for tens of milliseconds), with AutoTVM's timing: one warm-up call, then
   ``repeat`` batches of ``number`` calls, each batch lengthened to at least
   ``min_repeat_ms``; the cost is the median batch's seconds per call. With
   ``flush_cache`` the caches are flushed before each call (see :class:`MeasureOption`);
4. checks the output of the last timed call against the reference, once per candidate.

A worker that overruns ``timeout`` (``build_timeout`` for builds) is killed, one that
crashes is noticed; both are restarted and the candidate gets its :class:`ErrorKind`.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ember.errors import ArgumentError, CompileError
from ember.tuner.result import ErrorKind, MeasureResult
from ember.tuner.space import ConfigEntity
from ember.tuner.workers import Reply, WorkerProcess

FLUSH_LEVELS = ("llc", "l2")  # down to memory; only each core's private caches


@dataclass(frozen=True)
class MeasureOption:
    """How candidates are measured (AutoTVM's ``number``/``repeat``/``min_repeat_ms``).

    The defaults are AutoTVM's for CPUs: ``min_repeat_ms=0``. A batch lengthened for a
    microsecond kernel can run thousands of calls, which on a loaded machine (parallel
    loops stall when a core is taken) may overrun ``timeout``; raise it with care.

    ``timeout``: seconds a run may take (timing included); ``build_timeout``: seconds a
    build may take; ``jobs``: builder processes; ``rtol``/``atol``: the result check
    for floats (integers must match exactly); ``check``: compare with the reference.
    ``flush_cache`` (TVM's ``enable_cpu_cache_flush``): before each timed call the runner
    writes over a buffer twice the last-level cache and reads the first argument back, so
    each call finds its weights and outputs cold, as a model's kernel does, and only the
    call is timed (each repeat is then the mean of ``number`` single calls).
    ``flush_level``: ``"llc"`` flushes down to memory (the default, TVM's); ``"l2"``
    overwrites only each core's private caches, leaving most of the last-level cache as it
    was: a model whose weights fit there finds them in it, not in memory, run after run.
    """

    number: int = 10
    repeat: int = 3
    min_repeat_ms: float = 0.0
    timeout: float = 10.0
    build_timeout: float = 60.0
    jobs: int = 1
    check: bool = True
    rtol: float = 1e-3
    atol: float = 1e-4
    seed: int = 0
    dry_run: bool = False
    flush_cache: bool = False
    flush_level: str = "llc"

    def __post_init__(self) -> None:
        if self.flush_level not in FLUSH_LEVELS:
            raise ArgumentError(
                f"MeasureOption: flush_level must be one of {FLUSH_LEVELS}, "
                f"got {self.flush_level!r}"
            )
        for name in ("number", "repeat", "jobs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ArgumentError(f"MeasureOption: {name} must be a positive int, got {value!r}")
        for name in ("min_repeat_ms", "timeout", "build_timeout", "rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ArgumentError(f"MeasureOption: {name} must be >= 0, got {value!r}")
        if self.timeout <= 0 or self.build_timeout <= 0:
            raise ArgumentError("MeasureOption: timeout and build_timeout must be positive")


def task_spec(task: Any) -> dict[str, Any]:
    """What a worker needs to rebuild ``task``: the template's module (imported there, so
    templates registered outside Ember work), name, arguments, target and fixed knobs."""
    return {
        "module": getattr(task.template.func, "__module__", ""),
        "name": task.name,
        "args": task.args,
        "target": str(task.target),
        "key": task.key,
        "fixed": dict(getattr(task, "fixed", {})),
    }


class LocalMeasurer:
    """Builds and runs candidates on this machine in worker processes."""

    def __init__(self, option: MeasureOption | None = None) -> None:
        self.option = option or MeasureOption()
        self.jobs = self.option.jobs
        self._builders = [WorkerProcess("builder") for _ in range(self.jobs)]
        self._runner = WorkerProcess("runner")
        self._dir = Path(tempfile.mkdtemp(prefix="ember-tune-"))
        self._prepared: dict[tuple[str, str], Path] = {}
        self._lock = threading.Lock()
        self._count = 0

    @property
    def device_name(self) -> str:
        if not self._runner.hello:
            self._runner.start()
        return str(self._runner.hello.get("device", "unknown"))

    @property
    def restarts(self) -> int:
        return self._runner.restarts + sum(b.restarts for b in self._builders)

    def measure(self, task: Any, configs: list[ConfigEntity]) -> list[MeasureResult]:
        spec = self._begin(task)
        free: queue.SimpleQueue[WorkerProcess] = queue.SimpleQueue()
        for builder in self._builders:
            free.put(builder)

        def build(cfg: ConfigEntity) -> MeasureResult | dict[str, Any]:
            builder = free.get()
            try:
                return self._build(builder, spec, cfg)
            finally:
                free.put(builder)

        pool = ThreadPoolExecutor(max_workers=self.jobs)
        try:
            builds = list(pool.map(build, configs))
            results = []
            for cfg, built in zip(configs, builds):
                if isinstance(built, MeasureResult):
                    results.append(built)
                    continue
                workdir = self._prepare(task, built.get("signature"), cfg)
                if isinstance(workdir, MeasureResult):
                    results.append(workdir)
                else:
                    results.append(self._run(spec, cfg, built, workdir))
        except KeyboardInterrupt:
            # Ctrl-C: stop now. Waiting would build every queued config first (workers
            # ignore SIGINT, see workers._sigint_blocked); retiring the workers ends the
            # build threads' waits at once, and the next measure() starts fresh ones.
            pool.shutdown(wait=False, cancel_futures=True)
            for worker in [*self._builders, self._runner]:
                worker.retire()
            raise
        pool.shutdown()
        return results

    def _begin(self, task: Any) -> dict[str, Any]:
        """Workers revived and the fallback's layout prepared (an unpreparable task fails
        here); the task's spec for the workers."""
        for worker in [*self._builders, self._runner]:
            worker.revive()
        self._prepare(task, None)
        return task_spec(task)

    def measure_by_turns(
        self, task: Any, configs: list[ConfigEntity], rounds: int
    ) -> list[list[MeasureResult]]:
        """Each of ``configs`` built once, then timed by turns ``rounds`` times (one result
        per config per round): what :func:`ember.tuner.retime.retime` compares, without
        rebuilding a config each round."""
        spec = self._begin(task)
        ready: list[MeasureResult | tuple[dict[str, Any], Path]] = []
        for cfg in configs:
            built = self._build(self._builders[0], spec, cfg)
            if isinstance(built, MeasureResult):
                ready.append(built)
                continue
            workdir = self._prepare(task, built.get("signature"), cfg)
            ready.append(workdir if isinstance(workdir, MeasureResult) else (built, workdir))
        try:
            return [
                [
                    r if isinstance(r, MeasureResult) else self._run(spec, cfg, *r, keep=True)
                    for cfg, r in zip(configs, ready)
                ]
                for _ in range(rounds)
            ]
        finally:
            for r in ready:
                if not isinstance(r, MeasureResult) and r[0].get("lib"):
                    Path(r[0]["lib"]).unlink(missing_ok=True)

    def _prepare(
        self, task: Any, signature: Any, cfg: ConfigEntity | None = None
    ) -> Path | MeasureResult:
        """The folder holding inputs and reference outputs for the candidates of ``task``
        whose arguments have ``signature`` (shapes and dtypes; None: the fallback's),
        prepared with ``cfg``'s tensors the first time. A template's config may choose
        its tensors' layout (``conv2d_NCHWc.llvm``'s channel blocks), so each layout
        gets its own inputs and reference. The fallback's layout that cannot be prepared
        raises ``CompileError``; another one fails the candidate that brought it."""
        key = (task.key, json.dumps(signature))
        if key in self._prepared:
            return self._prepared[key]
        with self._lock:
            self._count += 1
            workdir = self._dir / task.key / f"layout{self._count}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = None if cfg is None else cfg.to_json()
        request = ("prepare", task_spec(task), str(workdir), self.option.seed,
                   self.option.check, config)  # fmt: skip
        reply = self._builders[0].call(request, self.option.build_timeout * 5)
        if reply.status != "ok" or reply.value.get("error"):
            detail = reply.value.get("message") if reply.status == "ok" else reply.value
            text = (
                f"cannot prepare inputs and reference outputs of task '{task.name}' "
                f"{task.args}: {detail}"
            )
            if cfg is None:
                raise CompileError(text)
            return MeasureResult.failed(ErrorKind.RUNTIME, f"prepare: {text}")
        self._prepared[key] = workdir
        if signature is None:  # the fallback's layout under its own signature too
            self._prepared[(task.key, json.dumps(reply.value.get("signature")))] = workdir
        return workdir

    def _build(
        self, builder: WorkerProcess, spec: dict[str, Any], cfg: ConfigEntity
    ) -> MeasureResult | dict[str, Any]:
        with self._lock:
            self._count += 1
            lib = self._dir / f"cand{self._count}.so"
        reply = builder.call(("build", spec, cfg.to_json(), str(lib)), self.option.build_timeout)
        if reply.status != "ok":
            kind = ErrorKind.TIMEOUT if reply.status == "timeout" else ErrorKind.CRASH
            return MeasureResult.failed(kind, f"build: {reply.value}", build_s=reply.seconds)
        value = reply.value
        if value.get("error"):
            return MeasureResult.failed(
                ErrorKind(value["error"]), value.get("message", ""), build_s=reply.seconds
            )
        value["build_s"] = reply.seconds
        return value

    def _run(
        self,
        spec: dict[str, Any],
        cfg: ConfigEntity,
        built: dict[str, Any],
        workdir: Path,
        keep: bool = False,
    ) -> MeasureResult:
        timing = asdict(self.option)
        request = ("run", spec, cfg.to_json(), built.get("lib"), str(workdir), timing)
        reply: Reply = self._runner.call(request, self.option.timeout)
        build_s = float(built.get("build_s", 0.0))
        if built.get("lib") and not keep:
            Path(built["lib"]).unlink(missing_ok=True)
        if reply.status != "ok":
            kind = ErrorKind.TIMEOUT if reply.status == "timeout" else ErrorKind.CRASH
            return MeasureResult.failed(
                kind, str(reply.value), build_s=build_s, run_s=reply.seconds
            )
        value = reply.value
        if value.get("error"):
            return MeasureResult.failed(
                ErrorKind(value["error"]),
                value.get("message", ""),
                build_s=build_s,
                run_s=reply.seconds,
            )
        message = "checked, not timed (dry run)" if self.option.dry_run else ""
        return MeasureResult(tuple(value["costs"]), ErrorKind.OK, message, build_s, reply.seconds)

    def close(self) -> None:
        for worker in [*self._builders, self._runner]:
            worker.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> LocalMeasurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
