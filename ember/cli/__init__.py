"""The ``ember`` command line: ``ember demo``, ``ember info``, ``ember tune`` and
``ember records`` (the last two in :mod:`ember.tune_cli`).

A user error prints its message and exits 1; ``EMBER_DEBUG=1`` shows the traceback. An
unknown flag is reported with the verb's usage; a closed stdout pipe (``| head``) ends the
command quietly with status 141; ``--threads`` applies before any verb runs.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from ember import config
from ember.cli_common import silence_broken_pipe, use_threads, verb_parser
from ember.errors import EmberError
from ember.target import host_cpu_model


def _cmd_demo(ns: argparse.Namespace) -> int:
    from ember.demo import main as demo_main

    return demo_main(size=ns.size, threads=ns.threads)


def _cmd_info(ns: argparse.Namespace) -> int:
    import llvmlite.binding as llvm

    import ember

    print(f"ember {ember.__version__}")
    version = ".".join(map(str, llvm.llvm_version_info))
    print(f"llvm {version}, host cpu {llvm.get_host_cpu_name()} (LLVM's guess)")
    print(f"cpu model: {host_cpu_model()}")
    feats = llvm.get_host_cpu_features()
    print("avx512f:", "yes" if feats.get("avx512f") else "no")
    from ember.codegen_cuda.device import describe

    for line in describe():
        print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ember", description="Ember deep-learning compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build a matmul and a fused elementwise chain for the CPU")
    demo.add_argument("--size", type=int, default=1024, help="matmul size M=N=K")
    demo.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    demo.set_defaults(fn=_cmd_demo)
    info = sub.add_parser("info", help="print versions, the host CPU, NVRTC and CUDA devices")
    info.set_defaults(fn=_cmd_info)
    from ember.model_cli import add_parsers as add_model_parsers
    from ember.tune_cli import add_parsers

    add_model_parsers(sub)
    add_parsers(sub)
    ns, extra = parser.parse_known_args(argv)
    if extra:  # reported by the verb's own parser, with its usage, not the top level's
        verb_parser(parser, ns).error("unrecognized arguments: " + " ".join(extra))
    try:
        if ns.command != "demo":  # the demo reads its own --threads
            use_threads(ns)
        status = int(ns.fn(ns) or 0)
        sys.stdout.flush()  # a pipe's buffered output fails here, not at interpreter exit
        return status
    except BrokenPipeError:  # `ember inspect m.onnx | head`: the reader has what it wanted
        return silence_broken_pipe()
    except EmberError as e:
        if config.debug():
            traceback.print_exc()
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # one line: workers ignore SIGINT (ember.tuner.workers)
        hint = " (a tuning run continues with --resume)" if ns.command == "tune" else ""
        print(f"ember: interrupted{hint}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
