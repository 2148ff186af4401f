#!/bin/sh
# Activation recomputation through `vfm train` (docs/parallel.md "Activation recomputation"): runs
# with model.recompute_granularity full (uniform and block) and selective end with weights and EMA
# bit for bit those of the run without it, the log line's activation high-water mark ("act N MiB")
# is lower with full recomputation, and bad key combinations exit 2 with one line naming the key.
# (Under TP2+SP: tests/mpi/train_parallel.sh.)
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_recompute.XXXXXX)
trap 'rm -rf "$T"' EXIT
ARGS="--config configs/tiny-mock.yaml train.device=cpu model.num_layers=4 train.train_iters=4 checkpoint.save_interval=0 train.threads=1
      logger.log_interval=4 ema.enabled=true ema.decay=0.9"

train() { name=$1; shift; timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; }
same() { cmp -s $T/none/iter_0000004/model.safetensors $T/$1/iter_0000004/model.safetensors &&
         cmp -s $T/none/iter_0000004/ema.safetensors $T/$1/iter_0000004/ema.safetensors; }
act() { sed -n 's/.*| act \([0-9.]*\) MiB.*/\1/p' $T/$1.log | tail -1; }

train none
check "no recomputation: 4 steps, the log line shows the activations ($(act none) MiB)" \
    sh -c "test -f $T/none/iter_0000004/DONE && test -n '$(act none)'"
train uniform1 model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "full, uniform 1: the same weights and EMA bit for bit" same uniform1
check "full, uniform 1: fewer activation bytes ($(act uniform1) < $(act none) MiB)" \
    awk -v a="$(act uniform1)" -v b="$(act none)" 'BEGIN { exit !(a != "" && a + 0 < b + 0) }'
train uniform3 model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=3
check "full, uniform 3 (groups of 3 and 1): the same weights and EMA bit for bit" same uniform3
train block2 model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=2
check "full, block 2: the same weights and EMA bit for bit ($(act block2) MiB)" same block2
train selective model.recompute_granularity=selective
check "selective: the same weights and EMA bit for bit ($(act selective) MiB)" same selective

# bad combinations: exit 2, one line naming the key, no run directory
bad() { # NAME KEY OVERRIDES...
    name=$1; key=$2; shift 2
    timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/bad "$@" > $T/bad.log 2>&1; rc=$?
    check "$name: exit 2 naming $key" sh -c "test $rc = 2 && grep -q '$key' $T/bad.log && test ! -e $T/bad"
}
bad "full without a method" model.recompute_method model.recompute_granularity=full model.recompute_num_layers=1
bad "full with 5 of 4 layers" model.recompute_num_layers model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=5
bad "selective with a method" model.recompute_method model.recompute_granularity=selective model.recompute_method=uniform
bad "a method without a granularity" model.recompute_method model.recompute_method=uniform
bad "an unknown granularity" model.recompute_granularity model.recompute_granularity=some
finish
