# Helpers for the end-to-end tests (sourced): check NAME COMMAND... counts a pass when the command
# succeeds; finish prints "N passed, N failed, N skipped" and exits non-zero on failure.
PASSED=0; FAILED=0; SKIPPED=0
VFM=${VFM:-build/vfm}
check() {
    name=$1; shift
    if "$@"; then echo "ok    $name"; PASSED=$((PASSED + 1)); else echo "FAIL  $name"; FAILED=$((FAILED + 1)); fi
}
skip() { echo "skip  $1: $2"; SKIPPED=$((SKIPPED + 1)); }
finish() {
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" = 0 ]
}
# The "step loss" pairs of a run's metrics.jsonl, one per line.
losses() { sed -E 's/^\{"step": ([0-9]+), "loss": ([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
