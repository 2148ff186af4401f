#!/bin/sh
# The first thing to run whenever a GPU machine is available: one command of at most 9 minutes
# (GPU_CHECK_SECONDS, default 540), with the binaries built on the CPU machine and carried
# (`make gpu-bundle` here; the device tool's carry: ["build/gpu-bundle.tgz"]). Steps, by value,
# each under its own `timeout`; a failing or hanging step never stops the next:
#   nvidia-smi          the device and its driver
#   version             `vfm version`: which cuBLASLt, cuDNN, NVRTC, NCCL loaded, from where (the
#                       check stops here when cuBLASLt or cuDNN did not load, or there is no GPU)
#   unit-cuda           the cuda_* unit tests with VFM_CUDA_SYNC=1 (a fault names its op)
#   memcheck            compute-sanitizer --tool memcheck over a 2-step tiny training run (recorded
#                       as not run where compute-sanitizer does not support the device)
#   gpu-train           tests/e2e/gpu_train.sh: 50 steps against the CPU's losses, repeatability,
#                       kill -9 + resume, checkpoints across devices (its logs kept on failure)
#   bench-dit-xl        vfm bench on bench/dit-xl.yaml with --profile (and the peer's check)
#   plan-dit-xl         `vfm plan --calibrate` with that profile: its predicted step for the
#                       benchmarked layout against the measured one (docs/plan.md)
#   peer-dit-xl         the PyTorch peer on the same config: its figure, or a line saying it gave
#                       none within its time box
# Everything goes into $OUT (default out/gpu-check): gpu-check.tgz (every log) and summary.txt (one
# line per step: name, exit, seconds, status, the key figure) — two files, within what comes back
# from the GPU machine (scripts/gpu_check_lib.sh checks it). A step whose every test was skipped
# counts as failed. Exit 1 when a step failed.
# GPU_CHECK_DRY=1 (the CPU machine; `make test` runs it): no step runs, each is marked "no GPU"
# once its program is found; the archive and the summary are written and checked; exit 0.
cd "$(dirname "$0")/.." || exit 1
. scripts/gpu_check_lib.sh
gc_init gpu-check gpu-check.tgz summary.txt
VFM="scripts/gpu_run.sh build/vfm"
CHECK_DIR=$GC_TMP/check-dit-xl

key_smi() {
    name=$(grep -m 1 -E 'NVIDIA (H|A|B|L|GeForce|RTX)' "$1" | sed -E 's/^\| *[0-9]+ +//; s/ +(On|Off) +\|.*//')
    driver=$(grep -m 1 -o 'Driver Version: [0-9.]*' "$1")
    echo "${name:-no GPU listed}; ${driver:-no driver}"
}
key_version() {
    awk -F': ' '/^cuda: built in; device:/ {d=$2} /^cuBLASLt:/ {b=$2} /^cuDNN:/ {c=$2} /^NCCL:/ {n=$2}
        END {printf "device %s; cuBLASLt %s; cuDNN %s; NCCL %s\n", d, b, c, n}' "$1" | cut -c1-200
}
key_memcheck() {
    if grep -q -i -E 'device not supported|not supported on this (device|platform)' "$1"; then
        echo "NOT RUN: compute-sanitizer does not support this device ($(grep -m 1 -i 'not supported' "$1" | cut -c1-80))"
    elif grep -q -E 'compute-sanitizer: (not found|No such file)' "$1"; then
        echo "NOT RUN: no compute-sanitizer on this machine"
    else
        grep -m 1 'ERROR SUMMARY' "$1" || gc_key_tail "$1"
    fi
}
key_bench() {
    line=$(grep '^bench-json:' "$1" | tail -n 1)
    if [ -n "$line" ]; then
        echo "$line" | sed -E 's/.*"tokens_per_s":([0-9.]+).*"mfu":([0-9.e-]+).*/tokens\/s \1 MFU \2/' | cut -c1-80
        grep -m 1 '^attention:' "$1"
    else
        grep -m 1 -E 'error|refused|reference kernel' "$1" || gc_key_tail "$1"
    fi | tr '\n' ' '
    echo
}
key_peer() {
    line=$(grep '^bench-json:' "$1" | tail -n 1)
    if [ -n "$line" ]; then
        echo "$line" | sed -E 's/.*"tokens_per_s":([0-9.]+).*"mfu":([0-9.e-]+).*/peer tokens\/s \1 MFU \2/' | cut -c1-80
    elif grep -q -E 'Traceback|Error' "$1"; then
        grep -E 'Error' "$1" | tail -n 1 | cut -c1-160
    else
        echo "NOT RUN: the peer printed no figure within its time box (skipped; torch.compile may need longer)"
    fi
}
key_plan() {
    if grep -q '^plan-vs-bench:' "$1"; then grep -m 1 '^plan-vs-bench:' "$1" | sed 's/^plan-vs-bench: //' | cut -c1-160
    else gc_key_tail "$1"; fi
}
gc_step nvidia-smi 30 key_smi nvidia-smi
gc_step version 60 key_version $VFM version
if [ "$GC_DRY" != 1 ]; then
    v=$GC_LOGS/version.log
    if ! grep -q '^cuBLASLt: [0-9]' "$v" || ! grep -q '^cuDNN: [0-9]' "$v"; then
        gc_stop "stopped: cuBLASLt or cuDNN did not load (version.log says where vfm looked)"
    elif grep -q -E '^cuda: built in; device: no CUDA device' "$v" || ! grep -q '^cuda: built in' "$v"; then
        gc_stop "stopped: vfm sees no CUDA device"
    fi
fi
gc_step unit-cuda 150 gc_key_result env VFM_CUDA_SYNC=1 scripts/gpu_run.sh build/vfm_tests cuda_
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || echo compute-sanitizer)
gc_step memcheck 100 key_memcheck scripts/gpu_run.sh "$SAN" --tool memcheck --error-exitcode 99 --print-limit 20 \
    build/vfm train --config configs/tiny-mock.yaml train.train_iters=2 train.device=cuda \
    checkpoint.save="$GC_TMP/memcheck-run"
gc_step gpu-train 170 gc_key_result env VFM="$VFM" VFM_FAULTS="scripts/gpu_run.sh build/vfm-faults" GPU_TEST_LOGS="$GC_LOGS/gpu-train" sh tests/e2e/gpu_train.sh
gc_step bench-dit-xl 100 key_bench $VFM bench --config bench/dit-xl.yaml --profile --warmup 2 --steps 3 \
    --check "$CHECK_DIR" train.device=cuda
gc_step plan-dit-xl 30 key_plan scripts/gpu_check_steps.sh plan bench/dit-xl.yaml "$GC_LOGS/bench-dit-xl.log"
gc_step peer-dit-xl 120 key_peer scripts/gpu_check_steps.sh peer bench/dit-xl.yaml "$CHECK_DIR"
gc_finish
