#!/bin/sh
# The test runner's time limits: a suite that hangs is stopped at its limit and counted as a
# failure naming it (tests/run_all.sh, tests/suite.inc); the unit runner's per-test limit is
# tests/unit/test_runner.c.
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
finish
