#!/bin/sh
# The work of one GPU session, on the GPU machine, with the binaries built on the CPU machine
# (`make gpu-bundle` there; carry build/gpu-bundle.tgz): nothing is built or installed here.
#   scripts/gpu_session.sh tests   vfm version (which cuBLASLt / cuDNN / NVRTC / NCCL were loaded),
#                                  the GPU unit tests (cuda_*, VFM_CUDA_SYNC=1), the multi-rank tests
#                                  as one process (NCCL one rank; MPI on GPU buffers) and, when
#                                  mpirun exists, on 2 ranks sharing the GPU
#   scripts/gpu_session.sh bench   bench/run_pair.sh on both pinned configs (vfm and the PyTorch peer;
#                                  the peer alone, with vfm's check from the CPU, while the DiT does
#                                  not train on the GPU)
#   scripts/gpu_session.sh all     both
# Logs go to $OUT/gpu-session (the device tool's folder) or out/gpu-session. Exit 1 when a step failed.
cd "$(dirname "$0")/.." || exit 1
what=${1:-all}
LOG=${OUT:-out}/gpu-session
mkdir -p "$LOG"
if [ -f build/gpu-bundle.tgz ] && { [ ! -x build/vfm ] || [ build/gpu-bundle.tgz -nt build/vfm ]; }; then
    tar xzf build/gpu-bundle.tgz || exit 1
fi
for b in build/vfm build/vfm_tests build/vfm_mpi_tests; do
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
    step mpi-one-rank env OMP_NUM_THREADS=1 scripts/gpu_run.sh build/vfm_mpi_tests
    if command -v mpirun > /dev/null 2>&1; then
        step mpi-two-ranks-one-gpu scripts/gpu_run.sh mpirun --allow-run-as-root --oversubscribe --bind-to none \
            -np 2 -x OMP_NUM_THREADS=1 -x VFM_CUDA_LIB_DIRS -x LD_LIBRARY_PATH build/vfm_mpi_tests
    else
        echo "== mpi-two-ranks-one-gpu: skipped (no mpirun on this machine)"
    fi
}

bench() {
    for cfg in bench/dit-xl.yaml bench/d4096-l8.yaml; do
        name=pair-$(basename "$cfg" .yaml)
        export PAIR_DIR="$LOG/$name" CHECK_DIR="/tmp/vfm-check-$name"
        before=$failed
        step "$name" bench/run_pair.sh "$cfg"
        if grep -q "trains on the CPU in this version" "$PAIR_DIR/vfm.log" 2> /dev/null; then
            echo "   (the DiT does not train on the GPU in this build: the peer alone, with vfm's check from the CPU)"
            failed=$before
            step "$name-peer" bench/run_pair.sh --peer-only "$cfg"
        fi
    done
}

case $what in
tests) tests ;;
bench) bench ;;
all) tests; bench ;;
*) echo "usage: scripts/gpu_session.sh tests|bench|all" >&2; exit 2 ;;
esac
echo "gpu_session: $what done; logs in $LOG; $([ $failed = 0 ] && echo 'every step passed' || echo 'a step FAILED')"
[ $failed = 0 ]
