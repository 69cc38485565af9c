"""Several configs of one ``conv2d_NCHWc.llvm`` convolution timed by turns in one process.

Run: ``python benchmarks/conv_knobs.py --shape 576,14,14,96,1,1 '{}' '{"outer": "channels"}'``
(``--shape C,H,W,O,K,stride``, padding ``K // 2``, batch 1, float32). Each argument is a
JSON object of knob values over the template's defaults (``'{}'``: the defaults, which
are printed). Every config is built first; then each round times every config
(``--number`` calls, ``--repeat`` times) with the caches flushed before each call down to
``--flush`` (``l2``: each core's L2, as a kernel finds the model's weights in L3;
``llc``: down to memory), the order reversed every other round so that a slow stretch of a
shared host falls on all of them. Printed: each config's median and fastest ms a call.

On a noisy 2-core guest a kernel alone moved 1.5x between processes a minute apart, so
only configs compared in one run, by turns, are comparable. Outputs are not checked here:
the template's tests check every knob against numpy (``tests/codegen_llvm``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np


def build(task: Any, knobs: dict[str, Any]) -> Any:
    """The module of ``task``'s defaults with ``knobs`` set."""
    import ember

    space = task.config_space
    choice = {name: knob.default_index for name, knob in space.knobs.items()}
    for name, value in knobs.items():
        values = list(space.knobs[name].candidates) if name in space.knobs else []
        if value not in values:
            raise SystemExit(f"{json.dumps(knobs)}: {name} is not one of {values}")
        choice[name] = values.index(value)
    cfg = space.from_choices(choice)
    bad = space.violations(cfg)
    if bad:
        raise SystemExit(f"{json.dumps(knobs)}: {'; '.join(bad)}")
    sch, tensors = task.instantiate(cfg)
    return ember.build(sch, tensors, target="llvm"), tensors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="+", help="knob values as JSON ('{}': the defaults)")
    ap.add_argument("--shape", required=True, help="C,H,W,O,K,stride")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--number", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--flush", choices=("l2", "llc"), default="l2")
    a = ap.parse_args()

    from ember.runtime.threads import set_num_threads
    from ember.tune_worker import time_flushed
    from ember.tuner.task import create_task

    c, h, w, o, k, stride = map(int, a.shape.split(","))
    args = (1, c, h, w, o, k, k, stride, k // 2, 1, "float32")
    task = create_task("conv2d_NCHWc.llvm", args=args, target="llvm")
    knobs = task.config_space.knobs
    print("defaults:", {n: kn.candidates[kn.default_index] for n, kn in knobs.items()})
    set_num_threads(a.threads)
    rng = np.random.default_rng(0)
    built = []
    for text in a.configs:
        mod, tensors = build(task, json.loads(text))
        shapes = [[int(d.value) for d in t.shape] for t in tensors]
        built.append((text, mod, [rng.standard_normal(s).astype("float32") for s in shapes]))
    times: dict[str, list[float]] = {text: [] for text, _, _ in built}
    for r in range(a.rounds):
        for text, mod, arrays in built if r % 2 == 0 else built[::-1]:
            times[text] += time_flushed(mod, arrays, a.number, a.repeat, a.flush)
    print(f"{a.threads} thread(s), {a.rounds} rounds by turns, {a.flush} flushed; ms a call")
    for text, got in times.items():
        print(f"{text:50s} median {statistics.median(got) * 1e3:.4f}  fastest {min(got) * 1e3:.4f}")


if __name__ == "__main__":
    main()
