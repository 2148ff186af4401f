#!/bin/sh
# Train on an Energon-prepared dataset's train split and validate on its val split (issue 10):
# with the learning rate at 0 the weights stay at their initial values, so the validation loss
# depends only on which samples validation reads. It must equal the loss over a copy of the
# dataset whose train split is the val shard (validated with use_train_split_for_val), and differ
# from validating on the train split.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_train_val.XXXXXX)
trap 'rm -rf "$T"' EXIT
# A copy: the length index is cached beside the shards, and fixtures stay untouched.
DATA=$T/data/prepared
mkdir -p $T/data && cp -r tests/fixtures/energon/prepared $T/data/
ARGS="train.device=cpu --config configs/tiny-mock.yaml dataset.mock=false train.train_iters=2 train.eval_interval=2 train.eval_iters=1
      optimizer.lr=0 optimizer.min_lr=0 scheduler.lr_warmup_iters=0 checkpoint.save_interval=0 logger.log_interval=1 train.threads=1"
val_loss() { grep -o '"val_loss": [^,}]*' "$1/metrics.jsonl" | head -1 | sed 's/.*: //'; }

timeout $RUN_LIMIT $VFM train $ARGS dataset.path=$DATA checkpoint.save=$T/val > $T/val.log 2>&1
check "trains on the train split (9 samples)" grep -q "split train: 9 samples, 9 usable" $T/val.log
check "validates on the val split (3 samples)" grep -q "split val: 3 samples, 3 usable" $T/val.log
check "a validation loss after step 2" test -n "$(val_loss $T/val)"

# The same shards, with the val shard as the only training shard (same folder name: it keys the
# samples' random draws).
mkdir -p $T/copy/prepared/.nv-meta
cp $DATA/*.tar $DATA/*.tar.idx $T/copy/prepared/
cp $DATA/.nv-meta/.info.json $DATA/.nv-meta/dataset.yaml $T/copy/prepared/.nv-meta/
printf 'split_parts:\n  train:\n  - part-003.tar\n  val: []\n  test: []\nexclude: []\n' > $T/copy/prepared/.nv-meta/split.yaml
timeout $RUN_LIMIT $VFM train $ARGS dataset.path=$T/copy/prepared dataset.use_train_split_for_val=true checkpoint.save=$T/copy_run > $T/copy.log 2>&1
check "the val shard as a train split validates to the same loss, bit for bit" \
    test "$(val_loss $T/val)" = "$(val_loss $T/copy_run)" -a -n "$(val_loss $T/copy_run)"

timeout $RUN_LIMIT $VFM train $ARGS dataset.path=$DATA dataset.use_train_split_for_val=true checkpoint.save=$T/train_val > $T/train_val.log 2>&1
check "validating on the train split gives another loss" \
    test "$(val_loss $T/val)" != "$(val_loss $T/train_val)" -a -n "$(val_loss $T/train_val)"
finish
