#!/bin/sh
# The harness suite: the GPU tests (cuda_*) and the harness's own tests (harness_*) run on the CPU
# harness (build/vfm_harness_tests, built by `make harness`; tests/harness/harness.mk), under
# AddressSanitizer. Its last line is the runner's "N passed, N failed, N skipped".
cd "$(dirname "$0")/../.." || exit 1
bin=build/vfm_harness_tests
if [ ! -x "$bin" ]; then
    if [ -z "$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)" ]; then
        echo "skip  harness: no nvcc here, so no CUDA headers to build the harness with"
        echo "0 passed, 0 failed, 1 skipped"
        exit 0
    fi
    echo "FAIL  harness: $bin is missing (make harness)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
exec "$bin" cuda_ harness_
