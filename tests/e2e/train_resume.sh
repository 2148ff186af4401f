#!/bin/sh
# Bitwise-exact resume on the CPU: 20 steps straight equal 13 steps, kill -9, `--resume auto`
# (from the checkpoint at step 10), 10 more — the same loss at every step and the same final
# weights and optimizer state byte for byte. A checkpoint cut off mid-write (inside its temporary
# directory, or renamed but without DONE) is never loaded. `vfm sample` runs from the result. The
# kills come from the test build (build/vfm-faults); build/vfm ignores the same variables.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_resume.XXXXXX)
trap 'rm -rf "$T"' EXIT
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=20 checkpoint.save_interval=10 train.threads=2 logger.level=warn"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/straight > $T/straight.log 2>&1
check "straight run of 20 steps" test -f $T/straight/iter_0000020/DONE

VFM_TEST_KILL_AFTER_STEP=13 timeout $RUN_LIMIT $VFM_FAULTS train $ARGS checkpoint.save=$T/killed > $T/killed.log 2>&1
rc=$?
check "killed by SIGKILL after step 13 (exit $rc)" test "$rc" = 137
check "only the step-10 checkpoint exists after the kill" sh -c "test -f $T/killed/iter_0000010/DONE && test ! -e $T/killed/iter_0000020"
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/killed --resume auto logger.level=info > $T/resumed.log 2>&1
check "resume auto continues from iter_0000010" grep -q "resumed from $T/killed/iter_0000010 (step 10)" $T/resumed.log
losses $T/straight > $T/a.txt; losses $T/killed > $T/b.txt
check "every step's loss is bitwise equal (20 steps)" sh -c "test \$(wc -l < $T/a.txt) = 20 && cmp -s $T/a.txt $T/b.txt"
check "final weights are bitwise equal" cmp -s $T/straight/iter_0000020/model.safetensors $T/killed/iter_0000020/model.safetensors
check "final optimizer state is bitwise equal" cmp -s $T/straight/iter_0000020/optim.safetensors $T/killed/iter_0000020/optim.safetensors

for phase in files rename; do
    VFM_TEST_KILL_DURING_SAVE=20:$phase timeout $RUN_LIMIT $VFM_FAULTS train $ARGS checkpoint.save=$T/cut_$phase > $T/cut_$phase.log 2>&1
    check "killed while saving step 20 ($phase)" sh -c "test ! -e $T/cut_$phase/iter_0000020/DONE"
    timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/cut_$phase --resume auto logger.level=info > $T/cut_${phase}_resumed.log 2>&1
    check "the cut-off checkpoint is not loaded ($phase)" grep -q "resumed from $T/cut_$phase/iter_0000010 (step 10)" $T/cut_${phase}_resumed.log
    check "and the run still ends bitwise equal ($phase)" cmp -s $T/straight/iter_0000020/model.safetensors $T/cut_$phase/iter_0000020/model.safetensors
done

$VFM sample --device cpu --checkpoint $T/killed --out $T/samples --steps 6 --frames 2 --height 8 --width 12 --num 2 > $T/sample.log 2>&1
check "vfm sample runs from the checkpoint and finds every value finite" grep -q "wrote 2 samples" $T/sample.log
check "the latent has the requested shape" sh -c "head -c 128 $T/samples/sample_001.npy | grep -q \"'shape': (4, 2, 8, 12)\""

# the binary users run has no fault hooks (src/train/fault_hooks.h): with every VFM_TEST_* variable
# set, build/vfm trains on untouched
VFM_TEST_KILL_AFTER_STEP=13 VFM_TEST_KILL_DURING_SAVE=10:files VFM_TEST_INJECT_NAN=3,4 VFM_TEST_BREAK=tp \
    timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/keep checkpoint.keep=1 > $T/keep.log 2>&1
check "checkpoint.keep=1 keeps only the newest checkpoint" sh -c "test -f $T/keep/iter_0000020/DONE && test ! -e $T/keep/iter_0000010"
check "build/vfm ignores the VFM_TEST_* hooks: the straight run's weights, bit for bit" \
    cmp -s $T/straight/iter_0000020/model.safetensors $T/keep/iter_0000020/model.safetensors

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/fresh --resume auto logger.level=info > $T/fresh.log 2>&1
check "resume auto without a checkpoint starts fresh" grep -q "no complete checkpoint" $T/fresh.log
finish
