#!/bin/sh
# Runs a prebuilt vfm program on the GPU machine with the CUDA libraries vfm loads at run time
# (cuBLASLt, cuDNN, NVRTC) taken from the PyTorch wheels there: every site-packages/nvidia/*/lib
# folder of python3 (VFM_PYTHON names another interpreter) goes into VFM_CUDA_LIB_DIRS (which
# vfm searches first) and LD_LIBRARY_PATH (for the libraries' own dependencies), after
# build/gpu-libs (what `make gpu-bundle` copied). Nothing is installed or built.
#   scripts/gpu_run.sh build/vfm_tests cuda_
#   scripts/gpu_run.sh build/vfm version
cd "$(dirname "$0")/.." || exit 1
if [ $# -lt 1 ]; then
    echo "usage: scripts/gpu_run.sh PROGRAM [ARGS...]" >&2
    exit 2
fi
py=${VFM_PYTHON:-python3}
dirs=$("$py" - <<'PYEOF' 2>/dev/null
import glob, os, sys
found = []
for p in sys.path:
    for d in sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib"))):
        if os.path.isdir(d) and d not in found:
            found.append(d)
print(":".join(found))
PYEOF
)
if [ -z "$dirs" ] && [ -z "$VFM_CUDA_LIB_DIRS" ]; then
    echo "gpu_run: no site-packages/nvidia/*/lib found with $py; the loader's default path is used" >&2
fi
VFM_CUDA_LIB_DIRS="${VFM_CUDA_LIB_DIRS:+$VFM_CUDA_LIB_DIRS:}$dirs"
LD_LIBRARY_PATH="build/gpu-libs${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export VFM_CUDA_LIB_DIRS LD_LIBRARY_PATH VFM_ROOT="${VFM_ROOT:-$PWD}"
exec "$@"
