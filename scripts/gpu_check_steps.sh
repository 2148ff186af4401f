#!/bin/sh
# The composite steps of scripts/gpu_check.sh and gpu_check2.sh, as programs so that each runs
# under its own `timeout` (which cannot run a shell function). Run from the repository root on the
# GPU machine:
#   scripts/gpu_check_steps.sh peer CONFIG CHECK_DIR   the PyTorch peer on CONFIG against vfm's check
#                                                      (written on the CPU first when the GPU bench
#                                                      step did not write it)
#   scripts/gpu_check_steps.sh demo-gpu LOG_DIR        make demo's steps on the GPU; grid.png and the
#                                                      colour score copied to LOG_DIR
#   scripts/gpu_check_steps.sh two-ranks               the multi-rank unit tests on 2 ranks sharing
#                                                      the GPU ("NOT RUN: ..." without mpirun)
cd "$(dirname "$0")/.." || exit 1
VFM="scripts/gpu_run.sh build/vfm"
case $1 in
peer)
    cfg=$2 check=$3
    if [ ! -f "$check/bench.json" ]; then
        echo "(no check from the GPU bench step: written on the CPU)"
        $VFM bench --config "$cfg" --check "$check" --check-only train.device=cpu || exit 1
    fi
    PYTHONUNBUFFERED=1 exec ${VFM_PYTHON:-python3} bench/torch_peer.py --from "$check" --warmup 3 --steps 3
    ;;
demo-gpu)
    VFM="$VFM" DEMO_ARGS="train.device=cuda" DEMO_SAMPLE_ARGS="--device cuda" scripts/demo.sh
    rc=$?
    cp out/demo/grid.png out/demo/score.txt "$2/" 2> /dev/null
    exit $rc
    ;;
two-ranks)
    command -v mpirun > /dev/null 2>&1 || { echo "NOT RUN: no mpirun on this machine"; exit 0; }
    exec mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2 \
        scripts/gpu_run.sh build/vfm_mpi_tests
    ;;
*)
    echo "usage: scripts/gpu_check_steps.sh peer CONFIG CHECK_DIR | demo-gpu LOG_DIR | two-ranks" >&2
    exit 2
    ;;
esac
