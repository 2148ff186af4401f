#!/bin/sh
# Whole GPU runs on the CPU harness: the GPU machine's own scripts with build/harness/vfm-faults
# (the CLI built on the harness's CUDA runtime, tests/harness/harness.mk) as their vfm, so that
# what the first GPU run would find in the trainer's GPU path is found here first:
#   tests/e2e/gpu_train.sh    losses against the CPU, repeatable bits, kill -9 + resume bitwise,
#                             checkpoints across devices (10 steps instead of 50)
#   tests/mpi/gpu_dp.sh       DP2 and ZeRO-1 with two ranks, each on its own harness device, the
#                             gradients staged through host memory (4 steps instead of 20)
#   tests/mpi/gpu_parallel.sh TP2+SP, CP2, PP2 and ZeRO-3 the same way, against one rank (its 10
#                             steps), and a TP2+SP and a CP2 run broken on purpose
#                             (VFM_TEST_BREAK) that must end farther than its bound
# Kernels run as fibers under AddressSanitizer (docs/ops.md "The CPU harness"): a tiny model's step
# takes about a second. Its last line adds up the three scripts' counts.
cd "$(dirname "$0")/../.." || exit 1
vfm=build/harness/vfm-faults
. tests/harness/harness.inc
need_harness_binary "$vfm" "GPU runs on the harness"
export VFM=$vfm VFM_FAULTS=$vfm GPU_TEST_BREAKS=1
# the process exits with what it still holds (the CUDA context's, MPI's): not leaks worth a failure
export ASAN_OPTIONS=detect_leaks=0
p=0 f=0 s=0
run() { # STEPS SCRIPT
    out=$(GPU_TEST_STEPS=$1 sh "$2" 2>&1); rc=$?
    echo "$out" | grep -v '^ok '
    echo "   $2 ($1 steps): $(echo "$out" | tail -n 1)"
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then f=$((f + 1)); return; fi
    set -- $line
    p=$((p + $1)); f=$((f + $3)); s=$((s + ${5:-0}))
    if [ "$rc" != 0 ] && [ "$3" = 0 ]; then f=$((f + 1)); fi
}
run 10 tests/e2e/gpu_train.sh
run 4 tests/mpi/gpu_dp.sh
run 10 tests/mpi/gpu_parallel.sh
echo "$p passed, $f failed, $s skipped"
[ "$f" = 0 ]
