#!/bin/sh
# Training on a metadataset blend (issue 10): two synthetic datasets, the first with an Energon
# split written by `vfm data index --split`, blended 3:1 by a MetadatasetV2 YAML. A run killed with
# SIGKILL mid-epoch and resumed with --resume auto trains the same packs: every step's loss and
# the final weights bitwise equal to the straight run; resumed at 2 data-parallel replicas (under
# mpirun) it reaches the straight run's weights within 1e-5 (the same packs; only the order of
# the gradient sum differs).
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_blend.XXXXXX)
trap 'rm -rf "$T"' EXIT
$VFM prepare synthetic --out $T/a --images 24 --seed 1 --samples-per-shard 8 --factor 4 > /dev/null 2>&1
$VFM prepare synthetic --out $T/b --images 16 --seed 2 --samples-per-shard 8 --factor 4 > /dev/null 2>&1
$VFM data index $T/a --split 2,1,0 > $T/index.log 2>&1
check "vfm data index --split 2,1,0 writes the Energon split" grep -q "wrote split.yaml: train 2, val 1, test 0 shards" $T/index.log
cat > $T/blend.yaml <<EOF
__module__: megatron.energon
__class__: MetadatasetV2
splits:
  train:
    blend:
      - weight: 3
        path: a
      - weight: 1
        path: b
EOF
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ARGS="train.device=cpu --config configs/demo.yaml dataset.path=$T/blend.yaml train.train_iters=12 train.global_batch_size=2 checkpoint.save_interval=6 train.threads=1 dataset.task_encoder_seq_length=256 model.num_layers=2 logger.level=warn"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/straight logger.level=info > $T/straight.log 2>&1
check "straight run of 12 steps on the blend" test -f $T/straight/iter_0000012/DONE
check "the blend reads the train split of a (16) and all of b (16)" grep -q "split train: 32 samples, 32 usable" $T/straight.log

VFM_TEST_KILL_AFTER_STEP=9 timeout $RUN_LIMIT $VFM_FAULTS train $ARGS checkpoint.save=$T/killed > $T/killed.log 2>&1
rc=$?
check "killed by SIGKILL after step 9 (exit $rc)" test "$rc" = 137
cp -r $T/killed $T/dp2
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/killed --resume auto logger.level=info > $T/resumed.log 2>&1
check "resume auto continues from iter_0000006" grep -q "resumed from $T/killed/iter_0000006 (step 6)" $T/resumed.log
losses $T/straight > $T/a.txt; losses $T/killed > $T/b.txt
check "every step's loss is bitwise equal (12 steps)" sh -c "test \$(wc -l < $T/a.txt) = 12 && cmp -s $T/a.txt $T/b.txt"
check "final weights are bitwise equal" cmp -s $T/straight/iter_0000012/model.safetensors $T/killed/iter_0000012/model.safetensors

if command -v mpirun >/dev/null 2>&1; then
    MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"
    timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/dp2 --resume auto logger.level=info > $T/dp2.log 2>&1
    check "2 replicas resume the 1-replica checkpoint of step 6" grep -q "resumed from $T/dp2/iter_0000006 (step 6)" $T/dp2.log
    check "and reach the straight run's weights within 1e-5" $VFM checkpoint diff $T/straight $T/dp2 --atol 1e-5 --quiet
else
    skip "resume at 2 replicas" "mpirun is not installed"
fi
finish
