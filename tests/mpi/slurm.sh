#!/bin/sh
# vfm on a real Slurm (a one-node cluster started by this test, tests/mpi/slurm_cluster.inc):
#  - `sbatch scripts/train.sbatch` with 2 tasks trains the single-rank weights within 1e-5 (design
#    §3's bound for data parallelism, as train_dp.sh) and its log names the launcher;
#  - a job sent SIGTERM mid-run (`scancel --signal=TERM`: what preemption and the time limit send)
#    checkpoints, exits 75, is requeued by the script, resumes and ends on the uninterrupted job's
#    weights bit for bit;
#  - a rank killed with SIGKILL ends the job within seconds, and the job requeued resumes from the
#    last complete checkpoint to the same weights bit for bit;
#  - `srun` without --mpi and `srun --mpi=pmi2` are refused with one line (vfm's Open MPI joins a
#    Slurm step through PMIx only).
# A requeued job waits about two minutes before Slurm starts it again; the test moves its start
# time to now (scontrol update StartTime=now), as an administrator could, once the earlier run's
# step daemons have ended.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
. tests/mpi/slurm_cluster.inc
for c in munged slurmctld slurmd sbatch srun scontrol; do
    if ! command -v $c >/dev/null 2>&1; then
        skip "Slurm" "$c is not installed (scripts/deps.sh installs slurm-wlm and munge)"; finish; exit
    fi
done
T=$(mktemp -d /tmp/vfm_slurm.XXXXXX)
trap 'slurm_stop "$T/cluster"; rm -rf "$T"' EXIT
if ! slurm_start "$T/cluster"; then
    check "a one-node Slurm cluster starts" false; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# hidden 256 makes a step take tens of milliseconds even on a quiet machine, so the SIGKILL below lands
# mid-run: at the tiny preset's 10 ms a step the whole run could end before the kill (seen on an idle CI)
ARGS="train.device=cpu --config configs/tiny-mock.yaml model.hidden_size=256 train.train_iters=20 train.global_batch_size=4 checkpoint.save_interval=5 train.threads=1 logger.log_interval=1"
JOB="--ntasks=2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 --time=10 --output=$T/%x-%j.out"

# submit NAME [ENV=VALUE ...]: the shipped script, run directory $T/NAME; prints the job id
submit() {
    name=$1; shift
    env "$@" VFM="$PWD/$VFM" VFM_RUN_DIR="$T/$name" sbatch --parsable --job-name="$name" $JOB scripts/train.sbatch $ARGS
}
# finish_job JOB SECONDS: waits for the job to leave the queue, starting a requeued job at once
finish_job() {
    i=0
    while [ $i -lt $(($2 * 5)) ]; do
        state=$(squeue -h -j "$1" -o "%T %r" 2>/dev/null)
        [ -z "$state" ] && return 0
        # once the earlier run's step daemons are gone (a step id is used again after a requeue)
        [ "$state" = "PENDING BeginTime" ] && ! pgrep -f "slurmstepd: \[$1\." >/dev/null &&
            scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
        sleep 0.2; i=$((i + 1))
    done
    return 1
}
# at_step RUN N SECONDS: waits until the run's metrics hold step N
at_step() {
    i=0
    while [ $i -lt $(($3 * 5)) ]; do
        grep -q "^{\"step\": $2," "$T/$1/metrics.jsonl" 2>/dev/null && return 0
        sleep 0.2; i=$((i + 1))
    done
    return 1
}

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/one > $T/one.log 2>&1
check "single rank, 20 steps" test -f $T/one/iter_0000020/DONE

id=$(submit plain)
finish_job "$id" 120
check "sbatch of scripts/train.sbatch (2 tasks) completes 20 steps" \
    sh -c "test -f $T/plain/iter_0000020/DONE && grep -q 'training done: 20 steps' $T/plain-$id.out"
check "the job's log names the launcher in its first line" \
    sh -c "grep -m1 'launch:' $T/plain-$id.out | grep -q 'launch: srun with PMIx: rank 0 of 2'"
check "and its weights equal the single rank's within 1e-5" $VFM checkpoint diff $T/one $T/plain --atol 1e-5 --quiet

id=$(submit term)
at_step term 3 60
scancel --signal=TERM "$id"
finish_job "$id" 120
check "SIGTERM mid-run: the job checkpointed and stopped (exit 75)" grep -q "stopped by SIGTERM after step" $T/term-$id.out
check "the script requeued it" grep -q "stopped with a checkpoint (exit 75): requeueing" $T/term-$id.out
check "the requeued job resumed from that checkpoint" grep -q "resumed from $T/term/iter_" $T/term-$id.out
check "and ended on the uninterrupted job's weights bit for bit" $VFM checkpoint diff $T/plain $T/term --atol 0 --quiet

id=$(submit kill)
at_step kill 6 60
start=$(date +%s)
pkill -KILL -n -f "^$PWD/$VFM train .*checkpoint.save=$T/kill" # one rank: the newest
finish_job "$id" 60
took=$(( $(date +%s) - start ))
last=$(ls -d $T/kill/iter_*/DONE 2>/dev/null | tail -1 | xargs -r dirname)
check "a rank killed with SIGKILL ends the job within seconds (${took} s)" \
    sh -c "test $took -lt 20 && test -n '$last' && ! test -e $T/kill/iter_0000020"
scontrol requeue "$id" >/dev/null 2>&1
finish_job "$id" 120
check "the requeued job resumes from the last complete checkpoint (${last##*/})" grep -q "resumed from $last " $T/kill-$id.out
check "and ends on the uninterrupted job's weights bit for bit" $VFM checkpoint diff $T/plain $T/kill --atol 0 --quiet

timeout 120 srun -n 2 $VFM train $ARGS checkpoint.save=$T/nompi > $T/nompi.log 2>&1
rc=$?
check "srun without --mpi is refused (exit $rc) with one line" sh -c \
    "test $rc = 2 && test \$(grep -c 'joins a Slurm step through PMIx only' $T/nompi.log) = 1 && ! test -e $T/nompi/iter_0000001"
timeout 120 srun --mpi=pmi2 -n 2 $VFM train $ARGS checkpoint.save=$T/pmi2 > $T/pmi2.log 2>&1
rc=$?
check "srun --mpi=pmi2 is refused (exit $rc) with one line" sh -c \
    "test $rc = 2 && test \$(grep -c 'joins a Slurm step through PMIx only' $T/pmi2.log) = 1"
[ "$FAILED" = 0 ] || { for f in $T/*.out $T/*.log; do echo "== $f"; tail -20 "$f"; done; }
finish
