#!/bin/sh
# The second GPU check, of gpu_check.sh's shape (one command of at most 9 minutes, each step under
# its own `timeout`, every log in one archive): what a GPU session runs once gpu_check.sh passes.
#   nvidia-smi          the device and its driver
#   pair-d4096          bench/run_pair.sh on bench/d4096-l8.yaml: vfm (with --profile) and the
#                       PyTorch peer, their ratio
#   demo-gpu            `make demo`'s steps with the prebuilt binary, training and sampling on the
#                       GPU: the colour score and the time (grid.png and the score come back)
#   mpi-two-ranks       the multi-rank unit tests on 2 ranks sharing the GPU (MPI's staged device
#                       buffers where NCCL refuses two ranks on one GPU)
#   gpu-dp              tests/mpi/gpu_dp.sh: DP=2 and ZeRO-1 on one GPU against one rank
#   gpu-parallel        tests/mpi/gpu_parallel.sh: DP2, TP2+SP, CP2, PP2, ZeRO-3 on one GPU
# $OUT (default out/gpu-check) gets gpu-check2.tgz and summary2.txt. GPU_CHECK_DRY=1: as in
# gpu_check.sh (no step runs; the archive and summary are written and checked).
cd "$(dirname "$0")/.." || exit 1
. scripts/gpu_check_lib.sh
gc_init gpu-check2 gpu-check2.tgz summary2.txt
VFM="scripts/gpu_run.sh build/vfm"

key_smi() { grep -m 1 -o 'Driver Version: [0-9.]*' "$1" || gc_key_tail "$1"; }
key_pair() {
    grep -m 1 -E "^vfm is .*the peer's tokens/s" "$1" || grep -m 1 -E '^run_pair: ' "$1" || gc_key_tail "$1"
}
key_demo() {
    echo "$(grep -i -m 1 -E 'colour' "$1" | cut -c1-100) $(grep -m 1 -o 'demo done in [0-9]* s' "$1")"
}
key_mpi() {
    if grep -q '^NOT RUN: ' "$1"; then grep -m 1 '^NOT RUN: ' "$1"; else gc_key_result "$1"; fi
}
gc_step nvidia-smi 15 key_smi nvidia-smi
gc_step pair-d4096 180 key_pair env PAIR_DIR="$GC_LOGS/pair-d4096" CHECK_DIR="$GC_TMP/check-d4096" PROFILE=1 \
    VFM=build/vfm bench/run_pair.sh bench/d4096-l8.yaml
gc_step demo-gpu 160 key_demo scripts/gpu_check_steps.sh demo-gpu "$GC_LOGS"
gc_step mpi-two-ranks 50 key_mpi scripts/gpu_check_steps.sh two-ranks
gc_step gpu-dp 60 gc_key_result env VFM="$VFM" GPU_TEST_LOGS="$GC_LOGS/gpu-dp" sh tests/mpi/gpu_dp.sh
gc_step gpu-parallel 80 gc_key_result env VFM="$VFM" GPU_TEST_LOGS="$GC_LOGS/gpu-parallel" sh tests/mpi/gpu_parallel.sh
gc_finish
