#!/bin/sh
# The work of one GPU session, on the GPU machine, with the binaries built on the CPU machine
# (`make gpu-bundle` there; carry build/gpu-bundle.tgz): nothing is built or installed here.
#   scripts/gpu_session.sh tests   vfm version (which cuBLASLt / cuDNN / NVRTC / NCCL were loaded),
#                                  the GPU unit tests (cuda_*, VFM_CUDA_SYNC=1: the model and every
#                                  gradient against the CPU among them), tests/e2e/gpu_train.sh (50
#                                  steps against the CPU's loss, repeatability, kill -9 + resume,
#                                  checkpoints across devices), the multi-rank tests as one process
#                                  (NCCL one rank; MPI on GPU buffers) and, when mpirun exists, on 2
#                                  ranks sharing the GPU, with tests/mpi/gpu_dp.sh (GPU DP=2 over MPI)
#   scripts/gpu_session.sh demo    `make demo`'s steps with the prebuilt binary, training and sampling
#                                  on the GPU; the colour score and the time (demo-cpu: the same on
#                                  the CPU, for the comparison)
#   scripts/gpu_session.sh bench   bench/run_pair.sh on both pinned configs (vfm and the PyTorch peer),
#                                  then vfm bench --profile on each (the per-op table); `pair CONFIG`
#                                  and `profile [CONFIG]` do one part (each fits one 10-minute call)
#   scripts/gpu_session.sh all     tests, demo, bench
# Logs go to $OUT/gpu-session (the device tool's folder) or out/gpu-session. Exit 1 when a step failed.
cd "$(dirname "$0")/.." || exit 1
what=${1:-all}
LOG=${OUT:-out}/gpu-session
mkdir -p "$LOG"
if [ -f build/gpu-bundle.tgz ] && { [ ! -x build/vfm ] || [ build/gpu-bundle.tgz -nt build/vfm ]; }; then
    tar xzf build/gpu-bundle.tgz || exit 1
fi
for b in build/vfm build/vfm-faults build/vfm_tests build/vfm_mpi_tests; do
    [ -x $b ] || { echo "gpu_session: $b is missing: run make gpu-bundle on the build machine and carry build/gpu-bundle.tgz" >&2; exit 1; }
done
failed=0
step() { # name command...: runs it, logs to $LOG/<name>.log, prints its last lines
    name=$1; shift
    echo "== $name: $*"
    t0=$(date +%s)
    "$@" > "$LOG/$name.log" 2>&1
    rc=$?
    tail -n 25 "$LOG/$name.log"
    echo "   $name: exit $rc, $(( $(date +%s) - t0 )) s"
    [ $rc = 0 ] || failed=1
}

tests() {
    nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1 && head -n 15 "$LOG/nvidia-smi.txt"
    step version scripts/gpu_run.sh build/vfm version
    step unit-cuda env VFM_CUDA_SYNC=${VFM_CUDA_SYNC:-1} scripts/gpu_run.sh build/vfm_tests cuda_
    step gpu-train env VFM="scripts/gpu_run.sh build/vfm" VFM_FAULTS="scripts/gpu_run.sh build/vfm-faults" \
        sh tests/e2e/gpu_train.sh
    step mpi-one-rank env OMP_NUM_THREADS=1 scripts/gpu_run.sh build/vfm_mpi_tests
    if command -v mpirun > /dev/null 2>&1; then
        step mpi-two-ranks-one-gpu mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
            -x OMP_NUM_THREADS=1 scripts/gpu_run.sh build/vfm_mpi_tests
        step gpu-dp-two-ranks-one-gpu env VFM="scripts/gpu_run.sh build/vfm" sh tests/mpi/gpu_dp.sh
    else
        echo "== mpi-two-ranks-one-gpu: skipped (no mpirun on this machine)"
    fi
}

CONFIGS="bench/dit-xl.yaml bench/d4096-l8.yaml"

bench() {
    for cfg in $CONFIGS; do
        name=pair-$(basename "$cfg" .yaml)
        export PAIR_DIR="$LOG/$name" CHECK_DIR="/tmp/vfm-check-$name"
        before=$failed
        step "$name" bench/run_pair.sh "$cfg"
        if [ $failed != $before ] && ! grep -q '^bench-json:' "$PAIR_DIR/torch.log" 2> /dev/null; then
            echo "   (vfm bench failed on the GPU: the peer alone, with vfm's check from the CPU, for its figures)"
            step "$name-peer" bench/run_pair.sh --peer-only "$cfg"
        fi
    done
}

demo() { # $1: cuda or cpu
    step demo-$1 env VFM="scripts/gpu_run.sh build/vfm" DEMO_ARGS="train.device=$1 ${DEMO_ARGS:-}" \
        DEMO_SAMPLE_ARGS="--device $1" scripts/demo.sh
    grep -E "colour|demo done" "$LOG/demo-$1.log" | tail -n 3
}

profile() {
    for cfg in $CONFIGS; do
        step "profile-$(basename "$cfg" .yaml)" scripts/gpu_run.sh build/vfm bench --config "$cfg" --profile \
            --warmup 2 --steps 3 train.device=cuda
    done
}

case $what in
tests) tests ;;
demo) demo cuda ;;
demo-cpu) demo cpu ;;
bench) bench; profile ;;
pair) CONFIGS=${2:?pair needs a config}; bench ;;
profile) CONFIGS=${2:-$CONFIGS}; profile ;;
all) tests; demo cuda; bench; profile ;;
*) echo "usage: scripts/gpu_session.sh tests|demo|demo-cpu|bench|pair CONFIG|profile [CONFIG]|all" >&2; exit 2 ;;
esac
echo "gpu_session: $what done; logs in $LOG; $([ $failed = 0 ] && echo 'every step passed' || echo 'a step FAILED')"
[ $failed = 0 ]
