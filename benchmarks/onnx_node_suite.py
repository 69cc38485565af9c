"""ONNX backend node tests through Ember (llvm): the pass rate and a per-op table.

python benchmarks/onnx_node_suite.py            # cases of the ops Ember converts
python benchmarks/onnx_node_suite.py --all      # every case (unsupported ops count)
python benchmarks/onnx_node_suite.py --op Conv  # only cases using this op type
python benchmarks/onnx_node_suite.py --freeze   # shape-carrying inputs frozen first
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from ember.frontend.onnx_import import supported_op_types
from ember.frontend.testing.node_suite import CaseResult, list_cases, node_test_root, run_case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="run every case, not only supported ops")
    ap.add_argument("--op", action="append", default=[], help="only cases using this op type")
    ap.add_argument(
        "--target", default="llvm", help="llvm, or cuda (set EMBER_CUDA_EMULATE=1 without a GPU)"
    )
    ap.add_argument(
        "--freeze",
        action="store_true",
        help="make the inputs Ember needs at compile time initializers first (the older "
        "count; by default every input is fed at run time, as the tests are written)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    args = ap.parse_args()

    import onnx

    supported = set(supported_op_types())
    results: list[CaseResult] = []
    start = time.perf_counter()
    for name in list_cases():
        model = onnx.load(str(node_test_root() / name / "model.onnx"), load_external_data=False)
        ops = {n.op_type for n in model.graph.node}
        if args.op and not ops & set(args.op):
            continue
        if not args.all and not (ops and ops <= supported):
            continue
        r = run_case(name, target=args.target, freeze=args.freeze)
        results.append(r)
        if args.verbose and r.status != "pass":
            print(f"{r.name:60s} {r.status:12s} {r.detail[:100]}")
    elapsed = time.perf_counter() - start

    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        for op in r.op_types or ("?",):
            per_op[op][r.status] += 1
    kinds = ["pass", "mismatch", "error", "unsupported", "random"]
    print(f"{'op':24s}" + "".join(f"{k:>12s}" for k in kinds))
    for op in sorted(per_op):
        print(f"{op:24s}" + "".join(f"{per_op[op][k]:12d}" for k in kinds))
    passed = sum(r.status == "pass" for r in results)
    total = len(results)
    print(f"\n{passed}/{total} cases pass ({100 * passed / max(total, 1):.1f}%) in {elapsed:.1f} s")


if __name__ == "__main__":
    main()
