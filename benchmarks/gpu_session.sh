#!/usr/bin/env bash
# What to run when a GPU is lent for a few minutes: one command, most valuable first, each
# step bounded so that a hang costs only its own slot. Logs go to $OUT (default
# /tmp/gpu_session). Run from the repository root:
#
#     bash benchmarks/gpu_session.sh            # tests, attention, auto-scheduled kernels
#     STEPS="tests templates" bash benchmarks/gpu_session.sh
#
# Where the machine lacks the tuner's packages, put their wheels in .whl/ (ignored by git)
# and they are installed into /tmp/site first; Ember itself is installed in place without
# its dependencies (the machine's numpy, cuda-bindings and NVRTC serve).
set -u
OUT=${OUT:-/tmp/gpu_session}
STEPS=${STEPS:-"tests attention autosched"}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import ember; print('ember', ember.__version__, 'device:', \
ember.get_backend('cuda').device_available())" | tee -a "$OUT/gpu.txt"

for step in $STEPS; do
    case $step in
    tests)  # every gpu-marked test, NVRTC builds spread over the cores
        timeout 200 python3 -m pytest -m gpu -n 8 -q -p no:warnings -p no:cacheprovider \
            $(grep -rl "mark.gpu" tests | sort) 2>&1 | tee "$OUT/gpu_tests.log" ;;
    attention)  # the fused attention kernel beside PyTorch's SDPA and the unfused product
        timeout 120 python3 benchmarks/bench_gpu.py --attention 2>&1 | tee "$OUT/attention.log" ;;
    autosched)  # template-free CUDA kernels measured: generic vs auto vs PyTorch
        timeout 150 python3 benchmarks/bench_autosched_cuda.py --json "$OUT/autosched_cuda.json" --budget-s 110 \
            2>&1 | tee "$OUT/autosched_cuda.log" ;;
    templates)  # the templates and the tensor-core GEMM beside cuBLAS/cuDNN
        timeout 200 python3 benchmarks/bench_gpu.py 2>&1 | tee "$OUT/bench_gpu.log" ;;
    *) echo "unknown step $step" ;;
    esac
done
