#!/bin/sh
# Runs the fuzz targets built by `make fuzz` (build/fuzz/NAME, from tests/fuzz/fuzz_NAME.c), each for
# VFM_FUZZ_SECONDS (default 20) under ASan/UBSan, VFM_FUZZ_JOBS (default 2) at a time, starting from
# the committed seeds (tests/fuzz/corpus/NAME) plus what earlier runs added (build/fuzz/corpus/NAME).
# A crash, leak, timeout or out-of-memory fails that target: the input is saved under
# build/fuzz/crashes/ and named in the output (replay it with `build/fuzz/NAME FILE`); the full log
# is build/fuzz/logs/NAME.log. Ends with "N passed, N failed, N skipped".
#   tests/fuzz/run.sh                   every target
#   VFM_FUZZ_SECONDS=300 tests/fuzz/run.sh tar npy    the named targets, 5 minutes each
cd "$(dirname "$0")/../.." || exit 1
seconds=${VFM_FUZZ_SECONDS:-20}
jobs=${VFM_FUZZ_JOBS:-2}
if [ $# -gt 0 ]; then
    names="$*"
else
    names=$(for f in tests/fuzz/fuzz_*.c; do basename "$f" .c | sed 's/^fuzz_//'; done)
fi
mkdir -p build/fuzz/logs build/fuzz/crashes

run_one() {
    t=$1
    log=build/fuzz/logs/$t.log
    if [ ! -x "build/fuzz/$t" ]; then
        echo "build/fuzz/$t is not built (make fuzz)" >"$log"
        echo 127 >"$log.rc"
        return
    fi
    mkdir -p "build/fuzz/corpus/$t"
    dict=""
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
    # -timeout: one input taking 10 s is a hang; -rss_limit_mb/-malloc_limit_mb: a reader asking for
    # more than 1 GiB for a small input is a bug
    ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
        "build/fuzz/$t" "build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" $dict -max_total_time="$seconds" \
        -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/crashes/$t-" >"$log" 2>&1
    echo $? >"$log.rc"
}

report() {
    t=$1
    log=build/fuzz/logs/$t.log
    rc=$(cat "$log.rc" 2>/dev/null || echo 1)
    runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log" | tail -1)
    corp=$(grep -E '^#[0-9]+' "$log" | sed -nE 's/.* corp: ([0-9]+)\/.*/\1/p' | tail -1)
    cov=$(grep -E '^#[0-9]+' "$log" | sed -nE 's/.* cov: ([0-9]+) .*/\1/p' | tail -1)
    seed=$(sed -nE 's/^INFO: Seed: ([0-9]+).*/\1/p' "$log" | head -1)
    if [ "$rc" = 0 ]; then
        echo "   ok    $t: ${runs:-?} runs in ${seconds} s, corpus ${corp:-?} inputs, coverage ${cov:-?} edges (seed $seed)"
        passed=$((passed + 1))
    else
        saved=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
        echo "   FAIL  $t: exit $rc after ${runs:-?} runs (seed $seed); input saved as ${saved:-(none)}; log $log"
        if grep -qE 'ERROR: |runtime error|fuzz check failed' "$log"; then
            grep -E 'ERROR: |runtime error|fuzz check failed|SUMMARY|^    #[0-9] ' "$log" | head -14 | sed 's/^/         /'
        else
            tail -5 "$log" | sed 's/^/         /'
        fi
        failed=$((failed + 1))
    fi
}

start=$(date +%s)
passed=0; failed=0
batch=""; n=0
for t in $names; do
    run_one "$t" &
    batch="$batch $t"; n=$((n + 1))
    if [ "$n" -ge "$jobs" ]; then
        wait
        for b in $batch; do report "$b"; done
        batch=""; n=0
    fi
done
wait
for b in $batch; do report "$b"; done
echo "   fuzz: $(( $(date +%s) - start )) s for $(echo $names | wc -w) targets, $seconds s each, $jobs at a time"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" = 0 ]
