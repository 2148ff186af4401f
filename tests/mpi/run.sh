#!/bin/sh
# Multi-rank tests (picked up by tests/run_all.sh):
#  1. build/vfm_mpi_tests as one plain process: no launcher, so MPI must stay untouched (checked
#     by Open MPI's session directory: MPI_Init would create ompi.* under TMPDIR);
#  2. the same binary under mpirun at 1, 2, 3 and 4 ranks, and at 8 for dit_pp_world8 alone;
#  3. a rank that dies (exit 3, SIGKILL, launch_abort) while the others wait in collectives: the
#     job must end non-zero within the timeout, with a message naming the cause;
#  4. `vfm version` without launcher variables: no MPI output, no MPI session, start-up time shown.
# Ends with "N passed, N failed, N skipped" (each vfm_mpi_tests run adds its counts; the other
# checks count one each). Open MPI runs as root, oversubscribed on few cores; the single-copy
# mechanism is off because containers usually forbid the ptrace CMA it needs.
cd "$(dirname "$0")/../.." || exit 1
BIN=build/vfm_mpi_tests
passed=0 failed=0 skipped=0
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# run without any launcher's variables
plain() { env $(env | sed -n 's/^\(OMPI_[A-Za-z0-9_]*\|PMIX_[A-Za-z0-9_]*\|PMI_[A-Za-z0-9_]*\|SLURM_[A-Za-z0-9_]*\)=.*/-u \1/p') "$@"; }
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 \
  --mca btl_vader_single_copy_mechanism none --mca orte_base_help_aggregate 0 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"

verdict() { # name status(0 pass, 1 fail, 2 skip) detail
    case $2 in
    0) passed=$((passed + 1)); echo "ok    $1${3:+  ($3)}" ;;
    2) skipped=$((skipped + 1)); echo "skip  $1: $3" ;;
    *) failed=$((failed + 1)); echo "FAIL  $1: $3" ;;
    esac
}

add_counts() { # name output exit-status
    line=$(printf '%s\n' "$2" | grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -1)
    printf '%s\n' "$2" | grep -v -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | sed "s/^/  [$1] /"
    if [ -z "$line" ]; then verdict "$1" 1 "no result line (exit $3)"; return; fi
    p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; s=${line#*failed, }; s=${s%% skipped*}
    [ "$3" != 0 ] && [ "$f" = 0 ] && f=1
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

if [ ! -x "$BIN" ]; then
    echo "$BIN is missing (run make)"; echo "0 passed, 1 failed, 0 skipped"; exit 1
fi

# 1. one plain process
session=$(mktemp -d)
out=$(plain env TMPDIR="$session" timeout 120 $BIN 2>&1); rc=$?
add_counts "plain" "$out" $rc
if [ -z "$(ls -A "$session")" ]; then verdict "plain process leaves MPI alone" 0
else verdict "plain process leaves MPI alone" 1 "found $(ls "$session") in its TMPDIR"; fi
rm -rf "$session"

if ! command -v mpirun >/dev/null 2>&1; then
    verdict "mpirun runs" 2 "mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)"
    echo "$passed passed, $failed failed, $skipped skipped"; [ "$failed" = 0 ]; exit
fi

# 2. under mpirun
for np in 1 2 3 4; do
    out=$(plain timeout 180 $MPIRUN -np $np $BIN 2>&1); rc=$?
    add_counts "np $np" "$out" $rc
done
# eight ranks for the one layout that needs them (CP2 × TP2+SP × PP2, the smallest shapes)
out=$(plain timeout 180 $MPIRUN -np 8 $BIN dit_pp_world8 2>&1); rc=$?
add_counts "np 8" "$out" $rc

# 3. a dying rank ends the job
for mode in exit kill abort; do
    case $mode in
    exit) want='Exit code: *3' ;;
    kill) want='exited on signal 9' ;;
    abort) want='vfm: rank 1 of 3: fatal: simulated failure' ;;
    esac
    t0=$(date +%s)
    out=$(plain timeout 60 $MPIRUN -np 3 $BIN --fault $mode 2>&1); rc=$?
    secs=$(( $(date +%s) - t0 ))
    if [ $rc = 124 ]; then verdict "rank 1 $mode ends the job" 1 "still running after 60 s (hang)"
    elif [ $rc = 0 ]; then verdict "rank 1 $mode ends the job" 1 "mpirun exited 0"
    elif ! printf '%s\n' "$out" | grep -q -E "$want"; then
        verdict "rank 1 $mode ends the job" 1 "exit $rc but no '$want' in: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-400)"
    else verdict "rank 1 $mode ends the job" 0 "mpirun exit $rc after ${secs} s"; fi
done

# 4. vfm version: no launcher, no MPI
if [ -x build/vfm ]; then
    session=$(mktemp -d)
    out=$(plain env TMPDIR="$session" build/vfm version 2>&1); rc=$?
    if [ $rc != 0 ]; then verdict "vfm version without a launcher" 1 "exit $rc: $out"
    elif printf '%s\n' "$out" | grep -q -i -E 'orte|pmix|mpi_init|open mpi|^-----'; then
        verdict "vfm version without a launcher" 1 "MPI output: $out"
    elif [ -n "$(ls -A "$session")" ]; then verdict "vfm version without a launcher" 1 "an MPI session appeared: $(ls "$session")"
    else
        t0=$(date +%s%N); for i in 1 2 3 4 5 6 7 8 9 10; do build/vfm version >/dev/null; done; t1=$(date +%s%N)
        verdict "vfm version without a launcher" 0 "start-up $(( (t1 - t0) / 10000000 )) ms per run"
    fi
    rm -rf "$session"
else
    verdict "vfm version without a launcher" 2 "build/vfm is missing"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
