#!/bin/sh
# Runs a prebuilt vfm program on the GPU machine. vfm finds cuBLASLt, cuDNN, NVRTC and NCCL itself
# (core/lib_search.h: VFM_CUDA_LIB_DIRS, the nvidia/*/lib wheels of every Python on the machine, the
# CUDA toolkit). This script only makes the libraries `make gpu-bundle` carried (build/gpu-libs)
# visible — and only those the machine's loader does not already know, through a folder of links
# (build/gpu-libs-active), so that no carried library shadows the machine's own. Nothing is
# installed or built.
#   scripts/gpu_run.sh build/vfm_tests cuda_
#   scripts/gpu_run.sh build/vfm version
cd "$(dirname "$0")/.." || exit 1
if [ $# -lt 1 ]; then
    echo "usage: scripts/gpu_run.sh PROGRAM [ARGS...]" >&2
    exit 2
fi
active=build/gpu-libs-active
if [ -d build/gpu-libs ] && { [ ! -d $active ] || [ build/gpu-libs -nt $active ]; }; then
    rm -rf $active.tmp && mkdir -p $active.tmp
    known=$(ldconfig -p 2> /dev/null | awk 'NR > 1 {print $1}')
    for f in build/gpu-libs/*; do
        [ -e "$f" ] || continue
        so=$(basename "$f")
        printf '%s\n' "$known" | grep -qxF "$so" || ln -s "$PWD/$f" "$active.tmp/$so"
    done
    rm -rf $active && mv $active.tmp $active
fi
[ -d $active ] && LD_LIBRARY_PATH="$PWD/$active${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH VFM_ROOT="${VFM_ROOT:-$PWD}"
exec "$@"
