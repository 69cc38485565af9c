"""``ember tune model.onnx``: tune every template task behind a model's graph kernels.

:mod:`ember.cli.tune` hands a ``tune`` command that names a model here: the tasks come
from :func:`ember.graph.model_tuning.extract_tasks` (``--shape NAME=D0,D1,...`` fixes
symbolic input dims), :func:`ember.tuner.tune_tasks` spends ``--trials`` on them in
rounds, each to the task whose weighted cost (how many kernels run it times its best
cost) is expected to drop most, appending to ``--log``. Candidates are timed with the
caches flushed before each call (``--no-flush-cache`` to time them warm), as the model's
kernels find their weights: down to memory, or, where the weights fit in half the last-
level cache and so stay there between runs, only each core's own caches. Then (``--no-
model-check`` skips it) the model is compiled with and without the records and timed by
turns, and the records of tasks that make it slower are dropped
(:func:`ember.graph.model_tuning.check_records`: moved to ``LOG.dropped``). A table
summarises each task's failed candidates by error kind, its fallback and best cost, the
pick's speedup timed again against the fallback by turns after the search (``--retime-
rounds``; :mod:`ember.tuner.retime`: a pick slower than its fallback loses its records
before the model check), then in the model (the model compiled with that task's records
alone, profiled by turns against the untuned one: the speedup the prediction uses, and
a pick slower there loses its records too) and the untuned model's time in its kernels;
below it, the model's measured change (with the middle half of its block pairs' ratios)
beside the one the tuned kernels predict, the records dropped, and the groups no
template covers with their share of the model's time. ``ember compile model.onnx
--records LOG`` then builds the model with the kept configs.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection
from typing import Any

from ember.cli.common import (
    best_result,
    console,
    error_examples,
    measured_text,
    ms_text,
    parse_shapes,
    table,
)
from ember.errors import ArgumentError
from ember.tuner import LocalMeasurer, tune_tasks
from ember.tuner.records import move_records
from ember.tuner.retime import Retimed, retime
from ember.tuner.tune import fallback_entity, make_cost_model


def _flush_for(ns: argparse.Namespace, option: Any) -> Any:
    """``option`` with the flush the model's kernels meet: where ``--flush-cache`` was not
    given and the weights fit in half the last-level cache, they stay there from one run
    of the model to the next, so only each core's private caches are flushed (``l2``);
    otherwise everything (``llc``). Prints which, and why.

    Why not always cold, as TVM's ``enable_cpu_cache_flush``: the BERT encoder's 13 MB of
    weights live in a 32 MB L3, so a kernel timed from memory is timed slower than the
    model runs it (its FFN GEMM: 0.33-0.39 ms flushed to memory, 0.31-0.34 with the L2
    only, 0.33 in the model)."""
    if not option.flush_cache or getattr(ns, "flush_cache", None) is not None:
        return option
    from ember.graph.model_tuning import weight_bytes
    from ember.tune_worker import last_level_cache_bytes

    weights, llc = weight_bytes(ns.model, parse_shapes(ns.shape) or None), last_level_cache_bytes()
    warm = weights <= llc // 2
    where = "fit in half" if warm else "exceed half"
    how = "each core's own caches flushed" if warm else "the caches flushed"
    print(
        f"candidates timed with {how}: the weights' {weights / 2**20:.1f} MiB {where} "
        f"the {llc / 2**20:.0f} MiB last-level cache (--flush-cache: always flushed)"
    )
    return dataclasses.replace(option, flush_level="l2" if warm else "llc")


def cmd_tune_model(ns: argparse.Namespace, measure_option: Any) -> int:
    """Tune the tasks of ``ns.model`` with ``measure_option`` and print the summary."""
    if ns.op is not None:
        raise ArgumentError("ember tune: pass a model or --op, not both")
    if ns.dry_run or ns.rpc or ns.plot or ns.transfer or ns.storage or ns.resume:
        raise ArgumentError(
            "ember tune MODEL: --dry-run, --rpc, --plot, --transfer, --storage and --resume "
            "apply to tuning one --op only"
        )
    # start-up cost: the model compiler (importer, graph passes) loads only when tuning runs
    from ember.graph.model_tuning import check_records, extract_tasks

    tasks = extract_tasks(ns.model, ns.target, parse_shapes(ns.shape) or None, search=ns.search)
    if not tasks:
        print(f"{ns.model}: no tunable kernels for {ns.target}")
        return 0
    print(f"{ns.model}: {len(tasks)} task(s), {ns.trials} trial(s), in rounds by gain")

    measure_option = _flush_for(ns, measure_option)
    labels = {id(mt.task): task_label(mt) for mt in tasks}

    def started(k: int, task: Any, trials: int) -> None:
        print(f"[{k + 1}/{len(tasks)}] {labels[id(task)]}: {trials} more trial(s)", flush=True)

    # one cost model for every task, warm-started from the records file (Ansor's shared model)
    model = make_cost_model(True, ns.log, ns.seed, None) if ns.cost_model else None
    with LocalMeasurer(measure_option) as measurer:
        results = tune_tasks(
            tasks, n_trials=ns.trials, records=ns.log, measure=measurer, sampler=ns.sampler,
            seed=ns.seed, early_stopping=ns.early_stopping, on_task=started,
            timeout=ns.timeout, cost_model=model,
        )  # fmt: skip
        retimed = retime_picks(measurer, results, getattr(ns, "retime_rounds", 3))
    slower = drop_slower_picks(ns.log, retimed)
    check = None
    timed_there: dict[str, Retimed] = {}
    if ns.log and getattr(ns, "model_check", True) and any(r.best_config for r in results):
        every = {mt.task.key for mt in tasks}
        names = {mt.task.key: task_label(mt) for mt in tasks}
        shapes = parse_shapes(ns.shape) or None
        picked = {r.task.key for r in results if _picked(r)}
        timed_there = retime_in_model_picks(
            ns, [t for t in tasks if t.task.key in picked], shapes, names
        )
        slower += drop_slower_picks(ns.log, timed_there, "in the model")
        print("checking the records on the whole model (timed with and without them, by turns)")

        def timed(kept: frozenset[str], ratio: float) -> None:
            left_out = sorted(every - kept)
            what = "with no records" if not kept else "with every record"
            if kept and len(left_out) == 1:
                what = f"without {names[left_out[0]]}"
            elif kept and left_out:
                what = f"with {len(kept)} task(s)' records"
            print(f"  {what}: {ratio:.3f}x the untuned model", flush=True)

        check = check_records(ns.model, ns.log, tasks, ns.target, shapes, on_time=timed)
    print_model_summary(tasks, results, ns.log, check, retimed, slower, timed_there)
    return 0


def _picked(res: Any) -> bool:
    """Whether the search picked a config other than the task's fallback (the kernel the
    untuned model runs): only then can its records change the model."""
    return res.best_config is not None and res.best_config != fallback_entity(res.task)


def retime_in_model_picks(
    ns: argparse.Namespace, tasks: list[Any], shapes: Any, names: dict[str, str]
) -> dict[str, Retimed]:
    """Each kept pick of ``tasks`` (those whose pick is not their fallback) timed again
    where the model runs it (its records alone against none,
    :func:`ember.graph.model_tuning.retime_in_model`), by task key; printed as it goes.
    A pick that is the fallback is not timed: it runs the same kernel, and on MobileNetV2
    such pairs read 0.84-1.17x in the model, the noise of a profile of small kernels."""
    from ember.graph.model_tuning import records_by_task, retime_in_model

    rounds = getattr(ns, "retime_rounds", 3)
    picked = records_by_task(ns.log, {mt.task.key for mt in tasks})
    if rounds < 1 or not picked:
        return {}
    print(f"re-timing {len(picked)} pick(s) in the model (each task's records alone against "
          f"none, {rounds} rounds by turns)")  # fmt: skip

    def done(key: str, got: Retimed) -> None:
        print(f"  {names.get(key, key)}: {got.speedup:.2f}x in the model", flush=True)

    return retime_in_model(ns.model, ns.log, tasks, ns.target, shapes, rounds, on_task=done)


def drop_slower_picks(log: str | None, retimed: dict[str, Retimed], where: str = "") -> list[str]:
    """Move out of ``log`` the records of the tasks whose pick, timed again by turns (alone,
    or ``where`` says: in the model), ran slower than the fallback (a search's best is the
    luckiest of many noisy timings: on the BERT encoder five of eight picks re-timed at
    0.85-0.99x); the model then runs the fallback there, which is what a tuned kernel must
    never be slower than. Their keys, in the order given."""
    slower = [key for key, again in retimed.items() if again.speedup < 1.0]
    if slower and log:
        moved = move_records(log, set(slower))
        print(f"dropping {moved} record line(s) of {len(slower)} task(s) whose pick re-timed "
              f"slower than its fallback{' ' + where if where else ''} (moved to "
              "<log>.dropped)")  # fmt: skip
    return slower if log else []


def retime_picks(measurer: Any, results: list[Any], rounds: int) -> dict[str, Retimed]:
    """Each task's pick timed again against its fallback, by turns (:mod:`ember.tuner.retime`),
    by task key; tasks whose pick is the fallback, or that failed, are left out."""
    if rounds < 1:
        return {}
    picked = []
    for res in results:
        fallback, first = fallback_entity(res.task), fallback_result(res)
        if fallback is None or first is None or not first.ok:
            continue  # no fallback measured: nothing to time the pick against
        if _picked(res):
            picked.append((res, fallback))
    if picked:
        print(f"re-timing {len(picked)} pick(s) against their fallbacks ({rounds} rounds by turns)")
    found = {}
    for res, fallback in picked:
        got = retime(measurer, res.task, fallback, res.best_config, rounds)
        if got is not None:
            found[res.task.key] = got
    return found


def fallback_result(res: Any) -> Any:
    """The result of the task's fallback config among its trials (the first trial of a
    fresh study), or None where it was not measured (a default outside the space)."""
    fallback = fallback_entity(res.task)
    return next((t.result for t in res.trials if t.config == fallback), None)


def print_model_summary(
    tasks: list[Any],
    results: list[Any],
    log: str | None,
    check: Any = None,
    retimed: dict[str, Retimed] | None = None,
    slower: list[str] | None = None,
    timed_there: dict[str, Retimed] | None = None,
) -> None:
    """One row per task: weight, trials, failed candidates (kinds and counts), fallback
    and best cost, speedup, and (with ``check``) the untuned model's time in the task's
    kernels. A cost whose repeats say the machine was busy is flagged, and so is a speedup
    taken from one: neither says what the kernel does on an idle machine. Then the
    whole model's measured change beside the one the kernels predict (from each pick's
    speedup in the model, ``timed_there``, where it was timed there; else re-timed alone),
    which records were dropped (``slower``: by :func:`drop_slower_picks`), and which
    groups stayed untuned."""
    columns = ("task", "weight", "trials", "failed", "fallback", "best", "speedup", "in model")
    out = table(f"model tuning summary (records: {log or 'not written'})", columns)
    messages: list[str] = []
    saved: dict[str, float] = {}  # the fraction of its kernels' time each task's best saves
    for mt, res in zip(tasks, results):
        first, best = fallback_result(res), best_result(res.trials)
        failed = sum(res.errors.values())
        errors = ", ".join(f"{k} {n}" for k, n in res.errors.items())
        in_model = check.task_s.get(mt.task.key) if check is not None else None
        again = (retimed or {}).get(mt.task.key)
        there = (timed_there or {}).get(mt.task.key)
        if mt.task.key in (slower or ()):
            saved[mt.task.key] = 0.0  # its records were dropped: the fallback runs
        elif there is not None:
            saved[mt.task.key] = there.saved
        elif again is not None:
            saved[mt.task.key] = again.saved
        elif first is not None and first.ok and best is not None:
            saved[mt.task.key] = 1 - best.cost / first.cost
        out.add_row(
            task_label(mt), str(mt.weight), str(len(res.trials)),
            f"{failed} ({errors})" if failed else "0", measured_text(first),
            measured_text(best), _speedup(first, best, again, there),
            "-" if in_model is None else ms_text(in_model),
        )  # fmt: skip
        for kind, message in error_examples(res.trials).items():
            messages.append(f"{task_label(mt)} {kind}: {message}")
    screen = console(width=160)
    screen.print(out)
    for line in messages:
        screen.print(line, markup=False, highlight=False)
    total = sum(len(r.trials) for r in results)
    failed = sum(sum(r.errors.values()) for r in results)
    print(f"failed candidates: {failed} of {total} measured")
    names = {mt.task.key: task_label(mt) for mt in tasks}
    for key in slower or ():
        print(f"dropped (pick re-timed slower than its fallback): {names.get(key, key)}")
    if check is not None:
        kept = {k: v for k, v in saved.items() if k in check.choice.kept}
        for line in check_lines(tasks, check, predicted_saving(check.kernels, kept)):
            print(line)


def predicted_saving(
    kernels: list[tuple[float, tuple[str, ...]]], saved: dict[str, float]
) -> float:
    """Seconds the tuned kernels should save per run: each kernel's untuned time times the
    largest fraction saved by a task covering it (a kernel that a template task and an
    auto task both cover is replaced by one pick, not both)."""
    return sum(
        seconds * max((saved.get(k, 0.0) for k in keys), default=0.0) for seconds, keys in kernels
    )


def saved_in_profile(
    kernels: list[tuple[float, tuple[str, ...]]], tuned: list[float], kept: Collection[str]
) -> float | None:
    """Seconds the kernels of the ``kept`` tasks took less in the tuned model's profile than
    in the untuned one's (``tuned``: each of ``kernels``' seconds there), or None without
    that profile. Beside the prediction it says whether a kernel's speedup timed alone
    held where the model runs it (its neighbours' data in the caches, its own cold)."""
    if not tuned:
        return None
    return sum(
        before - after for (before, keys), after in zip(kernels, tuned) if set(keys) & set(kept)
    )


def check_lines(tasks: list[Any], check: Any, predicted: float) -> list[str]:
    """The model check's findings as lines: measured against predicted change, records
    dropped, untuned groups and their share of the model's time."""
    base = check.untuned_s
    names = {mt.task.key: task_label(mt) for mt in tasks}
    spread = check.final_spread
    noise = ""
    if spread is not None:
        lo, hi = (100 * (r - 1) for r in spread)
        noise = f"; middle half of the block pairs {lo:+.1f}% to {hi:+.1f}%"
    lines = [
        f"model: untuned {ms_text(base)}, with every record {_change(check.tuned, base)}, "
        f"with the kept records {_change(check.final, base)} (measured by turns; the kept "
        f"records timed once more, longer{noise})",
        f"predicted by the kept records' kernels (speedups timed in the model, else re-timed "
        f"alone, times their time in the model): "
        f"{0.0 - predicted * 1e3:+.3f} ms ({0.0 - 100 * predicted / base:+.1f}%)"  # no -0.000
        + _against(1 - predicted / base, spread),
    ]
    in_model = saved_in_profile(check.kernels, check.tuned_kernels, check.choice.kept)
    if in_model is not None:
        lines.append(
            f"the same kernels in the model's profile with every record: "
            f"{0.0 - in_model * 1e3:+.3f} ms ({0.0 - 100 * in_model / base:+.1f}%)"
        )
    kept = len(check.choice.kept)
    lines.append(f"records kept for {kept} of {kept + len(check.choice.dropped)} task(s)")
    for key in check.choice.dropped:
        lines.append(f"  dropped (slowed the model): {names.get(key, key)}")
    if check.moved:
        lines.append(f"  {check.moved} record line(s) moved to <log>.dropped")
    rest = check.untuned_groups
    share = 100 * sum(s for _, s in rest) / check.profile_s if check.profile_s else 0.0
    top = ", ".join(f"{ops} {ms_text(s)}" for ops, s in rest[:5])
    lines.append(
        f"untuned groups (no template): {len(rest)} kernel(s), {share:.1f}% of the model's "
        f"time{': ' + top if top else ''}"
    )
    return lines


def _against(ratio: float, spread: tuple[float, float] | None) -> str:
    """Whether a predicted ratio to the untuned model lies within the middle half of the
    measured block pairs' ratios: within the noise of the measured change, or outside."""
    if spread is None:
        return ""
    lo, hi = spread
    return ", within the measured range" if lo <= ratio <= hi else ", outside the measured range"


def _change(ratio: float, base: float) -> str:
    return f"{ms_text(ratio * base)} ({100 * (ratio - 1):+.1f}%)"


def task_label(mt: Any) -> str:
    """How the summary names a task: a template task by name and arguments, a fused
    group's auto task by its nodes (its argument is the group's whole JSON spec); the knobs
    a task holds fixed (a blocked conv's channel blocks) follow, since one workload at two
    places with other blocks is two tasks."""
    if mt.task.name.startswith("auto/"):
        nodes = "+".join(dict.fromkeys(mt.nodes))
        return f"auto: {nodes if len(nodes) <= 60 else nodes[:57] + '...'}"
    fixed = getattr(mt.task, "fixed", None)
    knobs = " " + ",".join(f"{k}={v}" for k, v in fixed.items()) if fixed else ""
    return f"{mt.task.name}{mt.task.args}{knobs}"


def _speedup(
    first: Any, best: Any, again: Retimed | None = None, there: Retimed | None = None
) -> str:
    if first is None or best is None or not first.ok:
        return "-"
    text = f"{first.cost / best.cost:.2f}x"
    if again is not None:
        text = f"{again.speedup:.2f}x re-timed (search: {text})"
    elif first.busy or best.busy:
        text = f"{text} (unreliable: busy machine)"
    return text if there is None else f"{text}; {there.speedup:.2f}x in the model"
