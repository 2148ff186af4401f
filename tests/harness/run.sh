#!/bin/sh
# The harness suite: the GPU tests (cuda_*) and the harness's own tests (harness_*) run on the CPU
# harness (build/vfm_harness_tests, built by `make harness`; tests/harness/harness.mk), under
# AddressSanitizer. Its last line is the runner's "N passed, N failed, N skipped".
cd "$(dirname "$0")/../.." || exit 1
bin=build/vfm_harness_tests
. tests/harness/harness.inc
need_harness_binary "$bin" harness
exec "$bin" cuda_ harness_
