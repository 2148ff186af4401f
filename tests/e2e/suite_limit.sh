#!/bin/sh
# The test runner's time limits: a suite that hangs is stopped at its limit and counted as a
# failure naming it (tests/run_all.sh, tests/suite.inc); the unit runner's per-test limit is
# tests/unit/test_runner.c. Every single-rank `vfm train` of the test scripts runs under `timeout`
# (multi-rank ones under mpirun's), so a hang fails its check instead of stopping the suite.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_limit.XXXXXX)
trap 'rm -rf "$T"' EXIT
cat > $T/hang.sh <<'HANG'
echo "1 passed, 0 failed, 0 skipped"
sleep 60
HANG
# run_all.sh's loop over a fake tree holding only the hanging suite
mkdir -p $T/tree/tests/e2e $T/tree/build
cp tests/run_all.sh tests/suite.inc $T/tree/tests/
cp $T/hang.sh $T/tree/tests/e2e/hang.sh
printf '#!/bin/sh\necho "0 passed, 0 failed, 0 skipped"\n' > $T/tree/build/vfm_tests
printf 'echo "0 passed, 0 failed, 0 skipped"\n' > $T/tree/tests/fuzz_run.sh
mkdir -p $T/tree/tests/fuzz && cp $T/tree/tests/fuzz_run.sh $T/tree/tests/fuzz/run.sh
chmod +x $T/tree/build/vfm_tests
start=$(date +%s)
VFM_SUITE_TIMEOUT=2 sh $T/tree/tests/run_all.sh > $T/out.txt 2>&1
rc=$?; took=$(( $(date +%s) - start ))
check "a hanging suite is stopped at its limit (${took} s)" test $took -lt 30
check "and named with the limit, counted as a failure" sh -c "grep -q 'tests/e2e/hang.sh: timed out after 2 s' $T/out.txt && test $rc != 0 && tail -1 $T/out.txt | grep -q ', 1 failed,'"

# single-rank vfm train calls not under timeout: continued lines joined, comments dropped, a train
# command in command position (after env assignments, then/else/;/&&/||) is one without timeout
untimed() { # FILES...
    for f in "$@"; do
        sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$f" | grep -v '^[[:space:]]*#' |
            grep -E '(^|then|else|;|&&|\|\|)[[:space:]]*([A-Z_]+=[^ ]* )*"?(\$\{?VFM(_FAULTS)?\}?|build/vfm(-faults)?)"? train( |$)' |
            sed "s|^|$f: |"
    done
}
untimed $(ls tests/e2e/*.sh tests/mpi/*.sh | grep -v suite_limit.sh) > $T/untimed.txt # (this one: its sample below)
check "every single-rank vfm train of tests/e2e and tests/mpi runs under timeout$(head -3 $T/untimed.txt | sed 's/^/; not: /' | tr '\n' ' ')" \
    test ! -s $T/untimed.txt
# the scan finds the two untimed calls of a script that has them (and not the timed ones)
cat > $T/bad.sh <<'BAD'
if [ "$np" = 1 ]; then $VFM train $ARGS \
    checkpoint.save=x > x.log 2>&1
else timeout 300 $MPIRUN -np 2 $VFM train $ARGS > y.log 2>&1; fi
VFM_TEST_KILL_AFTER_STEP=3 $VFM_FAULTS train $ARGS
VFM_TEST_KILL_AFTER_STEP=3 timeout $RUN_LIMIT $VFM_FAULTS train $ARGS
# $VFM train in a comment
BAD
check "the scan finds an untimed call" test "$(untimed $T/bad.sh | wc -l)" = 2
finish
