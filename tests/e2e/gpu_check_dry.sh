#!/bin/sh
# The prepared GPU checks on the CPU machine (issue "The GPU path's defects …" §3):
# GPU_CHECK_DRY=1 scripts/gpu_check.sh and gpu_check2.sh exit 0 with every step marked "no GPU"
# (their programs found), write the archive and the summary into $OUT, and stay within what comes
# back from the GPU machine (at most 8 files of 16 MiB, two folders deep, plain names); the limit
# check rejects each way of breaking them; and the step runner itself (scripts/gpu_check_lib.sh),
# run for real on stand-in steps: a hanging step is stopped by its timeout and the next still
# runs, a step whose every test was skipped counts as failed, a step may say it was not run.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_gpu_check.XXXXXX)
trap 'rm -rf "$T"' EXIT

dry() { # script summary archive steps
    GPU_CHECK_DRY=1 OUT=$T/out sh scripts/$1 > $T/$1.log 2>&1 || return 1
    test "$(grep -c '  no GPU  ' $T/out/$2)" = "$4" || return 1
    test "$(grep -c -v -E '  no GPU  |^total: ' $T/out/$2)" = 0 || return 1
    tar tzf $T/out/$3 > $T/$3.list || return 1
    test "$(grep -c '/logs/.*\.log$' $T/$3.list)" = "$4"
}
check "GPU_CHECK_DRY=1 gpu_check.sh: 8 steps marked no GPU, archive and summary" dry gpu_check.sh summary.txt gpu-check.tgz 8
check "GPU_CHECK_DRY=1 gpu_check2.sh: 6 steps marked no GPU, archive and summary" dry gpu_check2.sh summary2.txt gpu-check2.tgz 6
check "\$OUT holds the two archives and summaries, within the limits" \
    sh -c ". scripts/gpu_check_lib.sh; gc_check_out $T/out && test \$(ls $T/out | wc -l) = 4"

# each way of breaking the limits is caught
broken() { # what: builds $T/bad one way, then the check must fail
    rm -rf $T/bad && mkdir -p $T/bad
    case $1 in
    files) for i in 1 2 3 4 5 6 7 8 9; do : > $T/bad/f$i; done ;;
    deep) mkdir -p $T/bad/a/b/c && : > $T/bad/a/b/c/f ;;
    big) truncate -s 17M $T/bad/big ;;
    name) : > "$T/bad/a b" ;;
    esac
    ! sh -c ". scripts/gpu_check_lib.sh; gc_check_out $T/bad" > /dev/null
}
for w in files deep big name; do check "the limit check rejects: $w" broken $w; done

# the runner, for real, on stand-in steps (no GPU needed)
runner() {
    OUT=$T/run GPU_CHECK_SECONDS=60 GPU_CHECK_DRY=0 sh -c '
        . scripts/gpu_check_lib.sh
        gc_init fake fake.tgz fake.txt
        key_absent() { grep -m 1 "^NOT RUN" "$1"; }
        gc_step hang 2 gc_key_tail sleep 30
        gc_step failing 10 gc_key_tail false
        gc_step all-skipped 10 gc_key_result echo "0 passed, 0 failed, 3 skipped"
        gc_step absent 10 key_absent echo "NOT RUN: nothing to run it with"
        gc_step passing 10 gc_key_result echo "4 passed, 0 failed, 1 skipped"
        gc_finish' > $T/runner.log 2>&1
    rc=$?
    s=$T/run/fake.txt
    test $rc = 1 && grep -q -E '^hang .* TIMEOUT ' $s && grep -q -E '^failing .* FAIL ' $s &&
        grep -q -E '^all-skipped .* FAIL +every test skipped' $s && grep -q -E '^absent .* not run ' $s &&
        grep -q -E '^passing .* ok +4 passed' $s && test -f $T/run/fake.tgz
}
check "the step runner: a hang is stopped, later steps run, all-skipped fails, not-run is said" runner
finish
