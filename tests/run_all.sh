#!/bin/sh
# The whole test suite: unit tests, multi-rank tests, end-to-end tests and the fuzz targets
# (tests/fuzz/run.sh: each target VFM_FUZZ_SECONDS, default 20, under ASan/UBSan). Each suite prints
# its own "N passed, N failed, N skipped" line; this script adds them up and prints the total
# as its last line, after each suite's wall-clock seconds. Exit status 1 when anything failed.
# Every suite runs under a time limit (VFM_SUITE_TIMEOUT seconds, default 1800): a suite that hangs
# fails naming itself and the limit, and the rest still run (each unit test has its own limit too,
# tests/unit/test_main.c).
cd "$(dirname "$0")/.." || exit 1
export VFM_ROOT="$PWD"
. tests/suite.inc
total_p=0; total_f=0; total_s=0
run_suite() {
    name=$1; shift
    echo "== $name"
    t0=$(date +%s)
    out=$(suite_run "$@" 2>&1); rc=$?
    echo "$out"
    echo "   $name: $(( $(date +%s) - t0 )) s"
    if suite_timed_out $rc; then
        echo "   $name: timed out after $SUITE_LIMIT s (the limit per suite; VFM_SUITE_TIMEOUT): counted as 1 failure"
        total_f=$((total_f + 1)); return
    fi
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' | tail -1)
    if [ -z "$line" ]; then
        echo "   $name: no result line (exit $rc): counted as 1 failure"
        total_f=$((total_f + 1)); return
    fi
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.* ([0-9]+) skipped$/\1/p'); s=${s:-0}
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
}
run_suite unit build/vfm_tests
for t in tests/e2e/*.sh tests/mpi/*.sh tests/harness/*.sh; do
    [ -f "$t" ] || continue
    run_suite "$t" sh "$t"
done
run_suite fuzz sh tests/fuzz/run.sh
echo "$total_p passed, $total_f failed, $total_s skipped"
[ "$total_f" = 0 ]
