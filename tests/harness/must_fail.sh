#!/bin/sh
# The must-fail runs: each variant under build/harness/break/ (made by `make harness`) is the harness
# binary with one deliberate defect compiled into the real sources (VFM_HARNESS_BREAK,
# src/ops/cuda/cuda_launch.h); the test that covers the defect must fail on it. A variant whose
# test passes fails this suite. Prints how each one failed (its first failure lines).
cd "$(dirname "$0")/../.." || exit 1
if [ -z "$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)" ] && [ ! -d build/harness/break ]; then
    echo "skip  must-fail: no nvcc here, so no CUDA headers to build the harness with"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
passed=0 failed=0
for spec in "off_by_one cuda_rmsnorm_matches_cpu" \
            "no_barrier cuda_attention_reference_kernel_matches_cpu" \
            "gemm_ld cuda_linear_matches_cpu" \
            "ragged_bytes cuda_attention_cudnn_matches_cpu_and_reference" \
            "vector_tail cuda_pointwise_activations_match_cpu"; do
    set -- $spec
    bin=build/harness/break/$1/vfm_harness_tests
    if [ ! -x "$bin" ]; then
        echo "FAIL  $1: $bin is missing (make harness)"
        failed=$((failed + 1))
        continue
    fi
    out=$("$bin" "$2" 2>&1)
    if echo "$out" | grep -q "^FAIL  $2"; then
        echo "ok    $1: $2 fails, as it must:"
        passed=$((passed + 1))
    else
        echo "FAIL  $1: $2 does not fail with the defect compiled in"
        failed=$((failed + 1))
    fi
    echo "$out" | grep -E "ERROR: AddressSanitizer|^    #0 |harness: fault|max\|got-ref\|" | head -3 | cut -c1-200 |
        sed 's/^ */        /'
done
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
