"""``ember info``: the versions, the host CPU as LLVM and Ember see it, and the CUDA side
(NVRTC, devices) as :func:`ember.codegen_cuda.device.describe` reports it."""

from __future__ import annotations

import argparse
from typing import Any

import ember
from ember.codegen_cuda import device
from ember.target import host_cpu_model


def add_parser(sub: Any) -> None:
    """Register ``ember info``."""
    info = sub.add_parser("info", help="print versions, the host CPU, NVRTC and CUDA devices")
    info.set_defaults(fn=_cmd_info)


def _cmd_info(ns: argparse.Namespace) -> int:
    # start-up cost: llvmlite (~20 ms) stays out of `ember --help` and the other verbs
    import llvmlite.binding as llvm

    print(f"ember {ember.__version__}")
    version = ".".join(map(str, llvm.llvm_version_info))
    print(f"llvm {version}, host cpu {llvm.get_host_cpu_name()} (LLVM's guess)")
    print(f"cpu model: {host_cpu_model()}")
    feats = llvm.get_host_cpu_features()
    print("avx512f:", "yes" if feats.get("avx512f") else "no")
    for line in device.describe():
        print(line)
    return 0
