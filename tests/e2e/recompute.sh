#!/bin/sh
# Activation recomputation through `vfm train` (docs/parallel.md "Activation recomputation"): runs
# with model.recompute_granularity full (uniform and block) and selective end with weights and EMA
# bit for bit those of the run without it; for every plan the log states it (`layout: ...
# recompute=...`), its line counts the blocks recomputed ("recomputed N", so it ran) and its
# activation high-water mark ("act N MiB") is lower than without; bad key combinations exit 2 with
# one line naming the key.
# (Under TP2+SP: tests/mpi/train_parallel.sh.)
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_recompute.XXXXXX)
trap 'rm -rf "$T"' EXIT
ARGS="--config configs/tiny-mock.yaml train.device=cpu model.num_layers=4 train.train_iters=4 checkpoint.save_interval=0 train.threads=1
      logger.log_interval=4 logger.level=info ema.enabled=true ema.decay=0.9"

train() { name=$1; shift; timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; }
same() { cmp -s $T/none/iter_0000004/model.safetensors $T/$1/iter_0000004/model.safetensors &&
         cmp -s $T/none/iter_0000004/ema.safetensors $T/$1/iter_0000004/ema.safetensors; }
act() { sed -n 's/.*| act \([0-9.]*\) MiB.*/\1/p' $T/$1.log | tail -1; }

train none
check "no recomputation: 4 steps, the log line shows the activations ($(act none) MiB)" \
    sh -c "test -f $T/none/iter_0000004/DONE && test -n '$(act none)'"
# every plan: bitwise the same training, recomputation ran (the log line's count of recomputed
# blocks), and the activations' high-water mark fell
ran() { # NAME: "recomputed N" with N > 0 and fewer activation bytes than without
    n=$(sed -n 's/.* | recomputed \([0-9]*\).*/\1/p' $T/$1.log | tail -1)
    states $T/$1.log "recompute=$2" &&
        awk -v n="$n" -v a="$(act $1)" -v b="$(act none)" 'BEGIN { exit !(n + 0 > 0 && a != "" && a + 0 < b + 0) }'
}
plan() { # NAME PLAN OVERRIDES... (check sets $name: these are the plan's own)
    plan_run=$1; plan_want=$2; shift 2
    train $plan_run "$@"
    check "$plan_want: the same weights and EMA bit for bit" same $plan_run
    check "$plan_want: it ran (recomputed $(sed -n 's/.* | recomputed \([0-9]*\).*/\1/p' $T/$plan_run.log | tail -1)) and the activations fell ($(act $plan_run) < $(act none) MiB)" \
        ran $plan_run $plan_want
}
plan uniform1 full,uniform,1 model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
plan uniform3 full,uniform,3 model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=3
plan block2 full,block,2 model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=2
plan selective selective model.recompute_granularity=selective
check "without recomputation the log counts none" sh -c "! grep -q '| recomputed' $T/none.log && grep -q 'recompute=none' $T/none.log"

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
