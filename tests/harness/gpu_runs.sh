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
#   tests/mpi/gpu_nccl.sh     DP2, ZeRO-1/2/3 with a GPU per rank (VFM_HARNESS_DEVICES=2), over the
#                             harness's NCCL stand-in (tests/harness/nccl.cpp; 4 steps)
# and the GPU communication tests of build/harness/vfm_mpi_tests (test_nccl.c, test_comm_staged.c)
# on two ranks, sharing one device (MPI's staging) and with a device each (NCCL).
# Kernels run as fibers under AddressSanitizer (docs/ops.md "The CPU harness"): a tiny model's step
# takes about a second. Its last line adds up the counts.
cd "$(dirname "$0")/../.." || exit 1
vfm=build/harness/vfm-faults
. tests/harness/harness.inc
need_harness_binary "$vfm" "GPU runs on the harness"
export VFM=$vfm VFM_FAULTS=$vfm GPU_TEST_BREAKS=1
# the process exits with what it still holds (the CUDA context's, MPI's): not leaks worth a failure
export ASAN_OPTIONS=detect_leaks=0
p=0 f=0 s=0
add() { # LABEL OUTPUT RC: OUTPUT's failures and result line printed, its counts added (a non-zero
         # RC without a failure counted fails once)
    echo "$2" | grep -v '^ok \|^ *over \|^\[rank'
    echo "   $1: $(echo "$2" | tail -n 1)"
    line=$(echo "$2" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then f=$((f + 1)); return; fi
    rc=$3
    set -- $line
    p=$((p + $1)); f=$((f + $3)); s=$((s + ${5:-0}))
    if [ "$rc" != 0 ] && [ "$3" = 0 ]; then f=$((f + 1)); fi
}
run() { # STEPS SCRIPT
    out=$(GPU_TEST_STEPS=$1 sh "$2" 2>&1)
    add "$2 ($1 steps)" "$out" $?
}
comm_tests() { # DEVICES
    out=$(VFM_HARNESS_DEVICES=$1 timeout 600 $MPIRUN_LOCAL -x VFM_HARNESS_DEVICES -np 2 build/harness/vfm_mpi_tests \
          gpu_ comm_staged 2>&1)
    rc=$?
    add "GPU comm tests, 2 ranks, $1 device(s)" "$(echo "$out" | grep -E '^(ok|FAIL|skip) |^ +|^[0-9]+ passed')" $rc
}
. tests/e2e/common.inc
run 10 tests/e2e/gpu_train.sh
run 4 tests/mpi/gpu_dp.sh
run 10 tests/mpi/gpu_parallel.sh
export VFM_HARNESS_DEVICES=2
run 4 tests/mpi/gpu_nccl.sh
unset VFM_HARNESS_DEVICES
comm_tests 1
comm_tests 2
echo "$p passed, $f failed, $s skipped"
[ "$f" = 0 ]
