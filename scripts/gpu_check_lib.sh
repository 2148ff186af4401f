# Shared by scripts/gpu_check.sh and scripts/gpu_check2.sh (sourced): steps that each run under
# their own `timeout` and inside the whole check's time budget, never stopping the next step; one
# summary line per step; every log packed into one archive. What comes back from the GPU machine is
# at most 8 files of at most 16 MiB, at most two folders deep, named in letters, digits, '.', '_'
# and '-': $OUT gets exactly two files (the archive and the summary) and gc_finish checks them.
#
# GPU_CHECK_DRY=1 (the CPU machine, `make test`): no step runs; each is marked "no GPU" after
# checking that its program exists; the archive and the summary are written and checked all the
# same.

# gc_init NAME ARCHIVE SUMMARY: NAME of the check; the two files it leaves in $OUT.
gc_init() {
    GC_NAME=$1 GC_ARCHIVE=$2 GC_SUMMARY=$3
    OUT=${OUT:-out/gpu-check}
    mkdir -p "$OUT" || exit 1
    rm -f "$OUT/$GC_ARCHIVE" "$OUT/$GC_SUMMARY"
    GC_TMP=$(mktemp -d "/tmp/$GC_NAME.XXXXXX") || exit 1
    GC_WORK=$GC_TMP/$GC_NAME
    GC_LOGS=$GC_WORK/logs
    mkdir -p "$GC_LOGS" || exit 1
    : > "$GC_WORK/summary.txt"
    GC_START=$(date +%s)
    GC_BUDGET=${GPU_CHECK_SECONDS:-540}
    GC_DRY=${GPU_CHECK_DRY:-0}
    GC_STOP=""
    GC_FAILED=0
    if [ "$GC_DRY" != 1 ] && [ -f build/gpu-bundle.tgz ] && { [ ! -x build/vfm ] || [ build/gpu-bundle.tgz -nt build/vfm ]; }; then
        tar xzf build/gpu-bundle.tgz || echo "$GC_NAME: cannot unpack build/gpu-bundle.tgz" >&2
    fi
    { date -u +%Y-%m-%dT%H:%M:%SZ; uname -a; git log --oneline -1 2> /dev/null; } > "$GC_LOGS/context.txt" 2>&1
    echo "== $GC_NAME: budget $GC_BUDGET s, logs packed into $OUT/$GC_ARCHIVE, summary $OUT/$GC_SUMMARY"
}

# The program a step runs: its command line less env, VAR=value and scripts/gpu_run.sh (the dry run
# checks that it exists; nvidia-smi and compute-sanitizer are on the GPU machine only).
gc_program() {
    for a in "$@"; do
        case $a in env|*=*|scripts/gpu_run.sh|sh) ;; *) echo "$a"; return ;; esac
    done
}

gc_elapsed() { echo $(( $(date +%s) - GC_START )); }

# gc_line NAME EXIT SECONDS STATUS KEY: one summary line (also printed).
gc_line() {
    line=$(printf '%-22s exit %-4s %5s s  %-8s %s' "$1" "$2" "$3" "$4" "$5")
    echo "$line" >> "$GC_WORK/summary.txt"
    echo "$line"
}

# "N passed, N failed, N skipped" with nothing passed and something skipped: a step whose every
# test was skipped proved nothing, so it counts as failed.
gc_all_skipped() {
    grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$1" | tail -n 1 | \
        awk '{ exit !($1 == 0 && $5 > 0) }'
}

# gc_step NAME LIMIT_SECONDS KEYFN COMMAND...: runs COMMAND with its output in logs/NAME.log under
# `timeout` (LIMIT, less when the budget has less left); KEYFN LOG prints the key figure. COMMAND
# is a program (`timeout` cannot run a shell function: the checks' composite steps are
# subcommands of scripts/gpu_check_steps.sh).
# A step whose KEYFN prints a line starting "NOT RUN" is recorded as not run (not a failure).
gc_step() {
    name=$1 limit=$2 keyfn=$3
    shift 3
    log=$GC_LOGS/$name.log
    if [ -n "$GC_STOP" ]; then
        gc_line "$name" - 0 "not run" "$GC_STOP"
        return
    fi
    if [ "$GC_DRY" = 1 ]; then
        prog=$(gc_program "$@")
        if [ -e "$prog" ] || command -v "$prog" > /dev/null 2>&1 || [ "$prog" = compute-sanitizer ] || [ "$prog" = nvidia-smi ]; then
            echo "GPU_CHECK_DRY=1: would run: $*" > "$log"
            gc_line "$name" - 0 "no GPU" "(dry run: $prog is there)"
        else
            echo "GPU_CHECK_DRY=1: $prog is missing" > "$log"
            gc_line "$name" - 0 FAIL "$prog is missing"
            GC_FAILED=1
        fi
        return
    fi
    left=$(( GC_BUDGET - $(gc_elapsed) - 10 ))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$left" -lt 5 ]; then
        gc_line "$name" - 0 "not run" "out of time ($(gc_elapsed) s of $GC_BUDGET s used)"
        return
    fi
    echo "== $name (at most $limit s): $*" | tee "$log"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" >> "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    key=$($keyfn "$log" 2> /dev/null | head -n 1)
    status=ok
    case $key in "NOT RUN"*) status="not run" key=${key#NOT RUN: } ;; esac
    if [ "$status" = ok ]; then
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            status=TIMEOUT key="stopped after $limit s; $key"
        elif [ $rc != 0 ]; then
            status=FAIL
        elif gc_all_skipped "$log"; then
            status=FAIL key="every test skipped; $key"
        fi
    fi
    case $status in FAIL|TIMEOUT) GC_FAILED=1 ;; esac
    gc_line "$name" "$rc" "$secs" "$status" "$key"
    tail -n 5 "$log" | sed 's/^/   | /'
}

# No later step runs (they are listed as not run, with why).
gc_stop() { GC_STOP=$1; }

# Key figures.
gc_key_result() { grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$1" | tail -n 1; }
gc_key_tail() { grep -v '^ *$' "$1" | tail -n 1 | cut -c1-160; }

# A log larger than 4 MiB keeps its first 1 MiB and its last 2 MiB (the archive must come back).
gc_trim_logs() {
    find "$GC_LOGS" -type f | while read -r f; do
        bytes=$(wc -c < "$f")
        [ "$bytes" -le 4194304 ] && continue
        { head -c 1048576 "$f"; printf '\n[... %s bytes left out ...]\n' "$bytes"; tail -c 2097152 "$f"; } > "$f.trim"
        mv "$f.trim" "$f"
    done
}

# gc_check_out DIR: DIR holds at most 8 files of at most 16 MiB, none deeper than two folders,
# every name in [A-Za-z0-9._-]. Prints what is wrong; status 1 then.
gc_check_out() {
    dir=$1 bad=0
    n=$(find "$dir" -type f | wc -l)
    [ "$n" -le 8 ] || { echo "gpu check: $n files in $dir (at most 8 come back)"; bad=1; }
    big=$(find "$dir" -type f -size +16777216c)
    [ -z "$big" ] || { echo "gpu check: larger than 16 MiB: $big"; bad=1; }
    deep=$(find "$dir" -mindepth 4 -type f)
    [ -z "$deep" ] || { echo "gpu check: more than two folders deep: $deep"; bad=1; }
    odd=$(cd "$dir" && find . -mindepth 1 | sed 's|^\./||' | tr '/' '\n' | grep -v -E '^[A-Za-z0-9._-]+$')
    [ -z "$odd" ] || { echo "gpu check: names outside [A-Za-z0-9._-]: $odd"; bad=1; }
    other=$(find "$dir" -mindepth 1 ! -type f ! -type d)
    [ -z "$other" ] || { echo "gpu check: not plain files: $other"; bad=1; }
    return $bad
}

# Packs the logs and the summary, checks $OUT; exit status: 1 when a step failed or a limit is
# broken (a dry run: only the latter).
gc_finish() {
    echo "total: $(gc_elapsed) s of $GC_BUDGET s" >> "$GC_WORK/summary.txt"
    gc_trim_logs
    cp "$GC_WORK/summary.txt" "$OUT/$GC_SUMMARY"
    tar czf "$OUT/$GC_ARCHIVE" -C "$GC_TMP" "$GC_NAME" || GC_FAILED=1
    rm -rf "$GC_TMP"
    echo "== $GC_NAME summary ($OUT/$GC_SUMMARY; logs in $OUT/$GC_ARCHIVE, $(du -k "$OUT/$GC_ARCHIVE" | cut -f1) KiB)"
    cat "$OUT/$GC_SUMMARY"
    gc_check_out "$OUT" || GC_FAILED=1
    [ "$GC_FAILED" = 0 ]
}
