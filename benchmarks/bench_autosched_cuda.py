"""Template-free CUDA kernels (sketches) against the generic CUDA schedule and PyTorch.

The GPU side of ``bench_autosched_groups.py``: for each workload of
:mod:`autosched_group_workloads` (softmax, layer norm, BERT's scale+mask+softmax, depthwise
conv + ReLU6, global average pooling, GELU + residual) this takes the model's fused groups
as auto tasks for ``cuda -arch=<the visible device's, else --arch>``, draws ``--trials``
distinct random configs of their sketches (seeded; :func:`ember.tuner.dryrun.pick_configs`)
and builds each with NVRTC. Every output is checked against the group's compute built
unscheduled for the CPU (LLVM).

- With a CUDA device each candidate runs on the GPU, is checked, and is timed with the
  module's ``time_evaluator`` (CUDA events); then, by turns over ``--rounds``, the generic
  schedule of every group, the best candidate of every group, and PyTorch on the same op
  (CUDA events, warm-up first; ``bench_gpu``'s timer). Each workload runs in a process of
  its own (``--no-isolate`` to stay in one), so a candidate that leaves the CUDA context
  broken (an illegal address is sticky) costs that workload only, and ``--budget-s`` bounds
  the whole run: a workload stops drawing candidates when its share is spent.
- Without one, candidates can be built and ranked but not timed: the script says so, builds
  them, and with ``--emulate`` runs generic and candidates on the SIMT emulator (races
  checked; use ``--tiny`` shapes), with ``--cost-model RECORDS`` ranks them by the learned
  cost model trained on those records (needs lightgbm).

A failing candidate (invalid, compile error, launch error, wrong result) is counted by its
error kind and never stops the run. ``--json`` writes every figure, ``--records`` the
measured candidates as tuning records (for the cost model).

    python3 benchmarks/bench_autosched_cuda.py --json autosched_cuda.json
    python benchmarks/bench_autosched_cuda.py --tiny --emulate --trials 4     # no GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import autosched_group_workloads as W  # noqa: E402
from bench_gpu import _time, _torch_elapsed_ms  # noqa: E402  (the peer timer bench_gpu uses)

import ember  # noqa: E402
from ember.codegen_cuda import device as cuda_device  # noqa: E402
from ember.tir.schedule.schedule import create_schedule  # noqa: E402
from ember.tuner.dryrun import pick_configs  # noqa: E402
from ember.tuner.space import FallbackConfig  # noqa: E402

# the workload function's small shapes (--tiny): a few thousand elements, for the emulator
TINY: dict[str, dict[str, int]] = {
    "softmax": {"rows": 8, "cols": 64},
    "layer_norm": {"rows": 4, "cols": 48},
    "scale_mask_softmax": {"heads": 2, "seq": 16},
    "depthwise_relu6": {"channels": 4, "size": 8},
    "global_avg_pool": {"channels": 32, "size": 3},
    "gelu_residual": {"rows": 4, "cols": 64},
}

Peer = Callable[[Any, Any, dict[str, Any]], Callable[[], Any]]
# PyTorch's version of each workload, on the model's inputs and initializers (by ONNX name)
PEERS: dict[str, Peer] = {
    "softmax": lambda t, F, v: lambda: t.softmax(v["X"], -1),
    "layer_norm": lambda t, F, v: lambda: F.layer_norm(v["X"], v["G"].shape, v["G"], v["B"], 1e-5),
    "scale_mask_softmax": lambda t, F, v: lambda: t.softmax(v["S"] * v["scale"] + v["M"], -1),
    "depthwise_relu6": lambda t, F, v: (
        lambda: F.conv2d(v["X"], v["W"], v["b"], padding=1, groups=v["W"].shape[0]).clamp_(0.0, 6.0)
    ),
    "global_avg_pool": lambda t, F, v: lambda: F.adaptive_avg_pool2d(v["X"], 1),
    "gelu_residual": lambda t, F, v: lambda: F.gelu(v["X"]) + v["R"],
}

NUMBER, REPEAT = 10, 3  # a candidate's timing: the median of REPEAT batches of NUMBER runs
QUEUED_NUMBER, SLEEP_CYCLES = 20, 10_000_000  # ~5 ms of GPU spin ahead of 20 queued runs
RTOL, ATOL = 1e-3, 1e-4  # the tuner's result check (atol scaled by the output's magnitude)


def workloads(tiny: bool) -> dict[str, Callable[[np.random.Generator], tuple[Any, dict]]]:
    """Name -> model maker: the benchmark's shapes, or ``TINY``'s."""
    if not tiny:
        return dict(W.WORKLOADS)
    out = {}
    for make in W.WORKLOADS.values():
        kw = TINY[make.__name__]
        name = f"{make.__name__} " + "x".join(str(v) for v in kw.values())
        out[name] = lambda rng, make=make, kw=kw: make(rng, **kw)
    return out


def _kind(name: str, tiny: bool) -> str:
    """The workload function's name (the key of ``PEERS``)."""
    return name.split()[0] if tiny else W.WORKLOADS[name].__name__


def _is_input(t: Any) -> bool:
    return type(t.op).__name__ == "PlaceholderOp"


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    return bool(np.allclose(got, want, rtol=RTOL, atol=ATOL * scale))


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


class Group:
    """One fused group: inputs, the CPU reference, the generic kernel, the candidates."""

    def __init__(self, task: Any, weight: int, seed: int, mode: str) -> None:
        self.task, self.weight, self.mode = task, weight, mode
        s, tensors = task.instantiate(FallbackConfig())
        self.roles = [_is_input(t) for t in tensors]
        rng = np.random.default_rng(seed)
        shapes = [tuple(int(d.value) for d in t.shape) for t in tensors]
        self.args = [
            rng.uniform(-1.0, 1.0, sh).astype(str(t.dtype))
            if is_in
            else np.full(sh, np.nan, str(t.dtype))
            for t, sh, is_in in zip(tensors, shapes, self.roles)
        ]
        # the same compute unscheduled, on the CPU: nothing of the CUDA path in the reference
        ref = ember.build(create_schedule([t for t, i in zip(tensors, self.roles) if not i]),
                          tensors, target="llvm")  # fmt: skip
        work = [a.copy() for a in self.args]
        ref(*work)
        self.want = [w for w, is_in in zip(work, self.roles) if not is_in]
        self.generic = ember.build(s, tensors, target=task.target)
        self.generic_error = self.check(self.generic)
        self.generic_us = math.nan
        self.results: list[dict[str, Any]] = []
        self.best: Any = None
        self.best_us = math.inf
        self.best_cfg: Any = None
        self.context_lost = ""
        self.sleep = sleeper() if mode == "gpu" else None

    def run(self, mod: Any) -> list[np.ndarray] | None:
        """The outputs of one run (GPU or emulator), or None when nothing can run here."""
        args = [a if is_in else np.full_like(a, np.nan) for a, is_in in zip(self.args, self.roles)]
        if self.mode == "gpu":
            mod(*args)
        elif self.mode == "emulate":
            mod.emulate(*args)  # race-checked
        else:
            return None
        return [a for a, is_in in zip(args, self.roles) if not is_in]

    def check(self, mod: Any) -> str:
        """``""`` when ``mod``'s outputs match the reference (or it cannot run here), else
        the error kind."""
        try:
            got = self.run(mod)
        except ember.EmberError as e:
            self._note_context(e)
            return "runtime"
        if got is None:
            return ""
        return "" if all(_close(g, w) for g, w in zip(got, self.want)) else "wrong_result"

    def _note_context(self, e: Exception) -> None:
        """After a launch error, whether the context still runs the generic kernel (an
        illegal address leaves it broken for good: the workload ends there)."""
        if self.mode != "gpu":
            return
        try:
            self.run(self.generic)
        except ember.EmberError:
            self.context_lost = _short(e)

    def time_us(self, mod: Any, repeat: int = REPEAT) -> float:
        """Microseconds per run by ``time_evaluator`` (launches from Python included)."""
        result = mod.time_evaluator(number=NUMBER, repeat=repeat)(*self.args)
        return 1e6 * result.median

    def kernel_us(self, mod: Any, repeat: int = REPEAT) -> float:
        """Microseconds per run of the kernels alone (:func:`queued_us`), else NaN."""
        return math.nan if self.sleep is None else queued_us(mod, self.args, self.sleep, repeat)

    def search(self, trials: int, seed: int, deadline: float) -> None:
        """Build (and where possible check and time) ``trials`` distinct random configs."""
        configs = [c for c in pick_configs(self.task, trials + 1, seed) if _sketch(c) != "fallback"]
        for cfg in configs[:trials]:
            if time.monotonic() > deadline or self.context_lost:
                break
            self.results.append(self._try(cfg))

    def _try(self, cfg: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"config": cfg.index, "sketch": _sketch(cfg), "error": "ok"}
        start = time.perf_counter()
        try:
            s, tensors = self.task.instantiate(cfg)
            mod = ember.build(s, tensors, target=self.task.target)
        except ember.EmberError as e:
            invalid = "verify_gpu" in str(e) or type(e).__name__ == "ConfigError"
            return {
                **out,
                "error": "invalid_config" if invalid else "compile",
                "message": _short(e),
            }
        except Exception as e:  # noqa: BLE001 - a crashing candidate is a result, not the end
            return {**out, "error": "crash", "message": _short(e)}
        out["build_s"] = round(time.perf_counter() - start, 3)
        out["cfg"] = cfg
        error = self.check(mod)
        if error:
            return {**out, "error": error}
        if self.mode != "gpu":
            return out
        try:
            us, kernel = self.time_us(mod), self.kernel_us(mod)
        except ember.EmberError as e:
            self._note_context(e)
            return {**out, "error": "runtime", "message": _short(e)}
        key = us if math.isnan(kernel) else kernel  # the kernels' own time where it is known
        if key < self.best_us:
            self.best, self.best_us, self.best_cfg = mod, key, cfg
        return {**out, "us": us, "kernel_us": kernel}

    def counts(self) -> dict[str, int]:
        return dict(Counter(r["error"] for r in self.results))


def sleeper() -> Callable[[], None] | None:
    """A kernel that keeps the GPU busy ~5 ms (PyTorch's ``_sleep``, on the legacy default
    stream that Ember launches on too), or None without PyTorch. The runs timed after it
    queue up meanwhile and execute back to back, so their events time the kernels alone:
    most of these kernels take a few microseconds, less than a launch from Python."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or not hasattr(torch.cuda, "_sleep"):
        return None
    return lambda: torch.cuda._sleep(SLEEP_CYCLES)


def queued_us(mod: Any, args: list[np.ndarray], sleep: Callable[[], None], repeat: int) -> float:
    """Microseconds per run of ``mod``'s kernels queued behind ``sleep`` (the median of
    ``repeat`` batches), arguments on the device as ``time_evaluator`` puts them."""
    from ember.codegen_cuda.runtime import bind_arguments, call, ensure_context, synchronize

    sig = mod.get_function(mod.entry_name).signature
    bound = bind_arguments(sig, args)
    try:
        mod.device_module()
        bound.copy_in()
        ensure_context()

        def launch() -> None:
            mod._launch_all(sig.name, bound.pointers, sizes=bound.sizes)

        launch()
        synchronize()
        start, end = call("cuEventCreate", 0), call("cuEventCreate", 0)
        try:
            ms = []
            for _ in range(repeat):
                sleep()
                call("cuEventRecord", start, 0)
                for _ in range(QUEUED_NUMBER):
                    launch()
                call("cuEventRecord", end, 0)
                call("cuEventSynchronize", end)
                ms.append(float(call("cuEventElapsedTime", start, end)) / QUEUED_NUMBER)
        finally:
            call("cuEventDestroy", start)
            call("cuEventDestroy", end)
    finally:
        bound.close()
    return 1e3 * statistics.median(ms)


def torch_queued_us(run: Callable[[], Any], sleep: Callable[[], None], repeat: int) -> float:
    """:func:`queued_us` for PyTorch's version (its events, its current stream)."""
    import torch

    run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(repeat):
        sleep()
        start.record()
        for _ in range(QUEUED_NUMBER):
            run()
        end.record()
        end.synchronize()
        ms.append(start.elapsed_time(end) / QUEUED_NUMBER)
    return 1e3 * statistics.median(ms)


def _sketch(cfg: Any) -> str:
    return str(cfg["sketch"].val)


def torch_peer(kind: str, model: Any, feed: dict[str, np.ndarray]) -> tuple[Any, Any] | None:
    """``(run, torch)`` for the workload in PyTorch on the GPU, or None without it."""
    try:
        import torch
        import torch.nn.functional as F
        from onnx import numpy_helper
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values.update(feed)
    dev = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in values.items()}
    return PEERS[kind](torch, F, dev), torch


def _peer_check(run: Any, model: Any, feed: dict[str, np.ndarray]) -> str:
    """Whether PyTorch computes what the ONNX model does (onnxruntime on the CPU)."""
    try:
        import onnxruntime as ort

        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feed)[0]
    except Exception as e:  # noqa: BLE001 - a missing or failing peer is reported, not fatal
        return f"not checked ({type(e).__name__})"
    got = run().cpu().numpy()
    return "ok" if got.shape == want.shape and _close(got, want) else "MISMATCH"


def run_workload(name: str, opts: argparse.Namespace, mode: str, budget_s: float) -> dict:
    """Search (and on a GPU time) one workload; its row for the table and the JSON."""
    start = time.monotonic()
    make = workloads(opts.tiny)[name]
    model, feed = make(np.random.default_rng(opts.seed))
    tasks = ember.extract_tasks(model, f"cuda -arch={opts.arch}", search="auto")
    row: dict[str, Any] = {"name": name, "groups": len(tasks)}
    groups = [Group(mt.task, mt.weight, opts.seed + k, mode) for k, mt in enumerate(tasks)]
    # leave a fifth of the share for the final timing and PyTorch
    search_end = start + 0.8 * budget_s
    for k, g in enumerate(groups):
        share = (search_end - time.monotonic()) / (len(groups) - k)
        g.search(opts.trials, opts.seed + k, time.monotonic() + share)
    row["candidates"] = sum(len(g.results) for g in groups)
    row["built"] = sum(1 for g in groups for r in g.results if "build_s" in r)
    row["errors"] = dict(sum((Counter(g.counts()) for g in groups), Counter()))
    row["generic_errors"] = [g.generic_error for g in groups if g.generic_error]
    row["sketches"] = ",".join("-" if g.best_cfg is None else _sketch(g.best_cfg) for g in groups)
    row["context_lost"] = next((g.context_lost for g in groups if g.context_lost), "")
    if opts.cost_model:
        row["ranked"] = [rank(g, opts.cost_model) for g in groups]
    if mode == "gpu" and not row["context_lost"]:
        _time_by_turns(row, groups, _kind(name, opts.tiny), model, feed, opts.rounds)
    row["groups_detail"] = [_group_json(g) for g in groups]
    if opts.records:
        write_records(opts.records, groups)
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def _time_by_turns(row: dict, groups: list[Group], kind: str, model: Any, feed: dict,
                   rounds: int) -> None:  # fmt: skip
    """Generic, best auto and PyTorch timed by turns; the medians (us) and ratios."""
    peer = torch_peer(kind, model, feed)
    fns: dict[str, Callable[[], float]] = {
        "generic_us": lambda: sum(g.weight * g.time_us(g.generic, 5) for g in groups),
        "auto_us": lambda: sum(g.weight * g.time_us(g.best or g.generic, 5) for g in groups),
    }
    sleep = groups[0].sleep
    if sleep is not None:
        fns["generic_kernel_us"] = lambda: sum(g.weight * g.kernel_us(g.generic, 5) for g in groups)
        fns["auto_kernel_us"] = lambda: sum(
            g.weight * g.kernel_us(g.best or g.generic, 5) for g in groups
        )
    if peer is not None:
        run, torch = peer
        row["torch"] = torch.__version__
        row["torch_check"] = _peer_check(run, model, feed)
        fns["torch_us"] = lambda: 1e6 * _time(run, _torch_elapsed_ms)
        if sleep is not None:
            fns["torch_kernel_us"] = lambda: torch_queued_us(run, sleep, 5)
    times: dict[str, list[float]] = {k: [] for k in fns}
    try:
        for r in range(rounds):
            for k in list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]:
                times[k].append(fns[k]())
    except Exception as e:  # noqa: BLE001 - report the failure, keep the other workloads
        row["timing_error"] = _short(e)
        return
    row.update({k: statistics.median(v) for k, v in times.items()})
    for tail in ("_us", "_kernel_us"):
        gen, auto, peer_us = (row.get(k + tail) for k in ("generic", "auto", "torch"))
        what = "" if tail == "_us" else " kernel"
        if gen is not None and auto is not None:
            row["gen/auto" + what] = gen / auto
        if peer_us is not None and auto is not None:
            row["torch/auto" + what] = peer_us / auto
            row["torch/generic" + what] = peer_us / gen


def rank(g: Group, records: str) -> list[dict[str, Any]]:
    """The built candidates, best predicted first, by the cost model of ``records``."""
    from ember.tuner.auto.cost_model import warm_start
    from ember.tuner.auto.features import features_of_config

    try:
        model = warm_start(records, save=False)
        built = [r for r in g.results if "cfg" in r]
        scores = model.predict([features_of_config(g.task, r["cfg"]) for r in built])
    except Exception as e:  # noqa: BLE001 - no lightgbm, unreadable records: say so
        return [{"error": _short(e)}]
    order = sorted(range(len(built)), key=lambda i: -scores[i])
    return [{"config": built[i]["config"], "score": float(scores[i])} for i in order]


def _group_json(g: Group) -> dict[str, Any]:
    return {
        "task_args": str(g.task.args[0])[:200],
        "weight": g.weight,
        "generic_error": g.generic_error,
        "best_config": None if g.best_cfg is None else g.best_cfg.to_json(),
        "best_search_us": None if g.best is None else g.best_us,
        "candidates": [{k: v for k, v in r.items() if k != "cfg"} for r in g.results],
    }


def write_records(path: str, groups: list[Group]) -> None:
    """The built candidates as tuning records (costs where they were timed), appended."""
    from ember.tuner.records import Record, RecordWriter, ember_version

    dev = cuda_device._probe()[0]
    name = dev[0][0] if dev else "none"
    with RecordWriter(path) as w:
        for g in groups:
            t = g.task
            for r in g.results:
                if "cfg" not in r:
                    continue
                costs = (r["us"] * 1e-6,) if "us" in r else ()
                w.write(Record(t.key, t.name, t.workload_key, t.template.version, str(t.target),
                               r["cfg"].to_json(), costs, r["error"], name, ember_version(),
                               r.get("message", "")))  # fmt: skip


def _child(name: str, opts: argparse.Namespace, budget_s: float) -> dict:
    """Run one workload in a fresh process; its row, or one that says how it ended."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        cmd = [sys.executable, __file__, "--child", name, "--child-out", str(out),
               "--trials", str(opts.trials), "--seed", str(opts.seed), "--rounds",
               str(opts.rounds), "--arch", opts.arch, "--budget-s", str(budget_s)]  # fmt: skip
        cmd += ["--tiny"] * opts.tiny + ["--records", opts.records] * bool(opts.records)
        cmd += ["--cost-model", opts.cost_model] * bool(opts.cost_model)
        try:
            proc = subprocess.run(cmd, timeout=budget_s + 60, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            return {"name": name, "failed": f"timed out after {budget_s + 60:.0f} s"}
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"name": name, "failed": f"exit {proc.returncode}: {' | '.join(tail)}"}
        return json.loads(out.read_text())


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(int(spec.split(".")[0]))
    return format(v, spec)


def print_row(r: dict[str, Any], mode: str) -> None:
    if "failed" in r:
        print(f"{r['name']:32} FAILED: {r['failed']}", flush=True)
        return
    errs = ",".join(f"{k}:{v}" for k, v in sorted(r["errors"].items()) if k != "ok") or "-"
    built = f"{r['built']}/{r['candidates']}"
    if mode == "gpu":
        print(
            f"{r['name']:32} {_fmt(r.get('generic_us'), '10.1f')} {_fmt(r.get('auto_us'), '9.1f')} "
            f"{_fmt(r.get('gen/auto'), '8.2f')} {_fmt(r.get('torch_us'), '9.1f')} "
            f"{_fmt(r.get('torch/auto'), '10.2f')} {built:>7}  {r['sketches']}  ({errs})",
            flush=True,
        )
        if r.get("auto_kernel_us") is not None:
            print(
                f"{'  kernels alone (queued)':32} {_fmt(r.get('generic_kernel_us'), '10.1f')} "
                f"{_fmt(r.get('auto_kernel_us'), '9.1f')} {_fmt(r.get('gen/auto kernel'), '8.2f')} "
                f"{_fmt(r.get('torch_kernel_us'), '9.1f')} "
                f"{_fmt(r.get('torch/auto kernel'), '10.2f')}",
                flush=True,
            )
    else:
        ok = r["errors"].get("ok", 0) if mode == "emulate" else "-"
        print(f"{r['name']:32} {r['groups']:6} {built:>7} {ok:>9}  ({errs})", flush=True)
    for key in ("generic_errors", "context_lost", "timing_error"):
        if r.get(key):
            print(f"    {key}: {r[key]}")
    if r.get("torch_check", "ok") != "ok":
        print(f"    PyTorch vs onnxruntime: {r['torch_check']}")
    for k, ranked in enumerate(r.get("ranked", [])):
        top = ", ".join(f"#{c['config']}" if "config" in c else c["error"] for c in ranked[:3])
        print(f"    group {k}: predicted best first: {top or '(none built)'}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=24, help="random configs per group")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3, help="turns of the final timing (GPU)")
    p.add_argument("--budget-s", type=float, default=120.0, help="seconds for the whole run")
    p.add_argument("--arch", default="", help="without a device (default sm_90)")
    p.add_argument("--only", default="", help="the workloads whose name contains this")
    p.add_argument("--tiny", action="store_true", help="small shapes (tests, the emulator)")
    p.add_argument("--emulate", action="store_true", help="no GPU: check on the emulator")
    p.add_argument("--no-isolate", action="store_true", help="GPU: all workloads in one process")
    p.add_argument("--cost-model", default="", help="records to train the ranking model on")
    p.add_argument("--json", default="", help="write the results here")
    p.add_argument("--records", default="", help="append measured candidates as records")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--child-out", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    gpu = cuda_device.device_available()
    opts.arch = opts.arch or cuda_device.visible_arch() or "sm_90"
    mode = "gpu" if gpu else ("emulate" if opts.emulate else "build")
    if opts.child:  # one workload, in the process the parent started for it
        row = run_workload(opts.child, opts, mode, opts.budget_s)
        Path(opts.child_out).write_text(json.dumps(_plain(row)))
        return 0
    start = time.monotonic()
    devices = cuda_device._probe()[0]
    print(
        f"device: {devices[0][0] if devices else 'none'}  arch={opts.arch}  trials={opts.trials} "
        f"seed={opts.seed}  rounds={opts.rounds}  budget={opts.budget_s:.0f}s  mode={mode}"
    )
    if not gpu:
        print(
            "no CUDA device: candidates are built with NVRTC"
            + (" and checked on the SIMT emulator (races checked)" if opts.emulate else "")
            + " but cannot be measured (timing needs a GPU); they can be ranked by a cost "
            "model (--cost-model RECORDS)" + (", ranked below" if opts.cost_model else "")
        )
        print(f"{'workload':32} {'groups':>6} {'built':>7} {'checked':>9}  (error kinds)")
    else:
        print(
            f"{'workload':32} {'generic us':>10} {'auto us':>9} {'gen/auto':>8} {'torch us':>9} "
            f"{'torch/auto':>10} {'built':>7}  best sketch  (error kinds)"
        )
    names = [n for n in workloads(opts.tiny) if opts.only in n]
    rows = []
    for k, name in enumerate(names):
        share = max(opts.budget_s - (time.monotonic() - start), 5.0) / (len(names) - k)
        if gpu and not opts.no_isolate:
            row = _child(name, opts, share)
        else:
            try:
                row = run_workload(name, opts, mode, share)
            except Exception as e:  # noqa: BLE001 - one workload failing is a row, not the end
                row = {"name": name, "failed": _short(e)}
        print_row(row, mode)
        rows.append(row)
    total = time.monotonic() - start
    if gpu:
        for what in ("", " kernel"):
            done = [r for r in rows if "gen/auto" + what in r]
            if done:
                med = statistics.median(r["gen/auto" + what] for r in done)
                peers = [r["torch/auto" + what] for r in done if "torch/auto" + what in r]
                line = f"median gen/auto{what} {med:.2f}"
                if peers:
                    line += f"  median torch/auto{what} {statistics.median(peers):.2f}"
                print(line)
        print(
            "us: time_evaluator (CUDA events, launches from Python included); kernels alone: "
            "runs queued behind a GPU spin, so the events time the GPU only. gen/auto > 1: the "
            "sketches beat the generic schedule; torch/auto > 1: Ember is faster"
        )
    print(f"total {total:.0f} s")
    if opts.json:
        report = {"device": devices[0][0] if devices else None, "arch": opts.arch, "mode": mode,
                  "trials": opts.trials, "seed": opts.seed, "rounds": opts.rounds,
                  "tiny": opts.tiny, "seconds": round(total, 1), "workloads": rows}  # fmt: skip
        Path(opts.json).write_text(json.dumps(_plain(report), indent=1))
    return 0


def _plain(value: Any) -> Any:
    """JSON-ready: configs (``cfg``) dropped, floats kept finite."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "cfg"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


if __name__ == "__main__":
    raise SystemExit(main())
