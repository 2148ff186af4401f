#!/bin/sh
# FSDP in the trainer (issue 13 §2, §4): `vfm train` under ZeRO-2 (ddp.data_parallel_sharding_strategy
# optim_grads) and ZeRO-3 (optim_grads_params) against ZeRO-1 on CPU ranks. With
# ddp.fsdp_unsharded_accumulation=true the reductions run in ZeRO-1's order, so weights, EMA,
# Adam moments (optim.safetensors byte for byte), losses, gradient norms and validation losses
# must be bit for bit ZeRO-1's: at DP2 (two micro-batches per replica and step) and at DP4 with a
# model whose units do not divide by 4 (adaln-zero with an MLP of 257: every block unit and the
# whole buffer are padded), and at CP2 × TP2+SP × DP2 (8 ranks, the seeds' CP+TP+SP+FSDP). The
# default accumulation (a reduce-scatter per micro-batch: another float order) stays within 1e-6
# of ZeRO-1 after 4 steps and differs in the last bits (so the bitwise checks can fail). A checkpoint saved under ZeRO-3 resumes under ZeRO-1 and one saved
# under ZeRO-1 resumes under ZeRO-3, both reaching the straight run's bits. Contradictory key pairs
# exit 2 with one line naming the keys, through the real CLI (vfm train under mpirun). A NaN
# gradient under ZeRO-3 is skipped on every rank.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_fsdp.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "FSDP training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL --mca mpi_yield_when_idle 1"
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=4 train.global_batch_size=4 checkpoint.save_interval=0 train.threads=1 logger.level=info dataset.mock_shapes=[4x3x6x10,4x1x8x10,4x1x2x2,4x2x4x6] ema.enabled=true ema.decay=0.9 model.num_query_groups=2"
VAL="train.eval_interval=2 train.eval_iters=1 model.val_generation_num_steps=2"
Z2="ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads"
Z3="ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params"
EXACT="ddp.fsdp_unsharded_accumulation=true"
ODD="model.variant=adaln-zero model.ffn_hidden_size=257 model.num_query_groups=4 train.global_batch_size=8"

# train NAME NP OVERRIDES...: a run into $T/NAME
train() {
    name=$1; np=$2; shift 2
    timeout 300 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
}
# the step lines of metrics.jsonl without their timings, and the validation lines
numbers() { sed 's/, "seconds": [0-9.e+-]*//' "$1/metrics.jsonl"; }
bitwise() { # A B: weights, EMA, Adam moments and the logged numbers identical
    $VFM checkpoint diff "$1" "$2" --atol 0 --quiet > /dev/null && $VFM checkpoint diff "$1" "$2" --atol 0 --quiet --ema > /dev/null &&
        cmp -s "$1"/iter_0000004/optim.safetensors "$2"/iter_0000004/optim.safetensors &&
        numbers "$1" > $T/a.txt && numbers "$2" > $T/b.txt && cmp -s $T/a.txt $T/b.txt
}

train z1_dp2 2 $VAL
train z2_dp2 2 $VAL $Z2 $EXACT
train z3_dp2 2 $VAL $Z3 $EXACT logger.level=info
check "DP2: ZeRO-1 ran 4 steps with 2 validations" sh -c "test -f $T/z1_dp2/iter_0000004/DONE && test \$(grep -c val_loss $T/z1_dp2/metrics.jsonl) = 2"
check "DP2: the ZeRO-3 run says so in its log" grep -q "DP2 (ZeRO-3), 2 micro-batches" $T/z3_dp2.log
check "DP2: the logs state the strategies (optim, optim_grads, optim_grads_params)" sh -c \
    ". tests/e2e/common.inc; states $T/z1_dp2.log dp=2 sharding=optim && states $T/z2_dp2.log dp=2 sharding=optim_grads && states $T/z3_dp2.log dp=2 sharding=optim_grads_params"
check "DP2: ZeRO-2 = ZeRO-1 bit for bit (weights, EMA, Adam moments, losses, norms, validation)" bitwise $T/z1_dp2 $T/z2_dp2
check "DP2: ZeRO-3 = ZeRO-1 bit for bit" bitwise $T/z1_dp2 $T/z3_dp2
# activation recomputation replays blocks inside their gathered units (model/dit_recompute.c)
train z3_dp2_full 2 $VAL $Z3 $EXACT model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "DP2: ZeRO-3 with full recomputation (uniform 1) = ZeRO-3 without, bit for bit" bitwise $T/z3_dp2 $T/z3_dp2_full
check "and its log states the plan" states $T/z3_dp2_full.log sharding=optim_grads_params recompute=full,uniform,1
train z3_dp2_selective 2 $VAL $Z3 $EXACT model.recompute_granularity=selective
check "DP2: ZeRO-3 with selective recomputation = ZeRO-3 without, bit for bit" bitwise $T/z3_dp2 $T/z3_dp2_selective
check "and its log states the plan" states $T/z3_dp2_selective.log sharding=optim_grads_params recompute=selective

train z1_dp4 4 $ODD
train z2_dp4 4 $ODD $Z2 $EXACT
train z3_dp4 4 $ODD $Z3 $EXACT
check "DP4, units not divisible by 4: ZeRO-2 = ZeRO-1 bit for bit" bitwise $T/z1_dp4 $T/z2_dp4
check "DP4, units not divisible by 4: ZeRO-3 = ZeRO-1 bit for bit" bitwise $T/z1_dp4 $T/z3_dp4
check "DP4: the logs state ZeRO-2 and ZeRO-3" sh -c \
    ". tests/e2e/common.inc; states $T/z2_dp4.log dp=4 sharding=optim_grads && states $T/z3_dp4.log dp=4 sharding=optim_grads_params"

train z3_dp2_rs 2 $VAL $Z3
check "DP2, a reduce-scatter per micro-batch: within 1e-6 of ZeRO-1" sh -c \
    "$VFM checkpoint diff $T/z1_dp2 $T/z3_dp2_rs --atol 1e-6 --quiet > /dev/null && $VFM checkpoint diff $T/z1_dp2 $T/z3_dp2_rs --atol 1e-6 --quiet --ema > /dev/null"
if bitwise $T/z1_dp2 $T/z3_dp2_rs; then same=1; else same=0; fi
check "and not bit for bit (the bitwise checks above tell another float order apart)" test $same = 0

LAYOUT="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2"
train z1_cp2_tp2 8 $LAYOUT
train z3_cp2_tp2 8 $LAYOUT $Z3 $EXACT
check "CP2 × TP2+SP × DP2 (8 ranks): ZeRO-3 = ZeRO-1 bit for bit" bitwise $T/z1_cp2_tp2 $T/z3_cp2_tp2
check "and its log states the layout" states $T/z3_cp2_tp2.log dp=2 cp=2 tp=2 sp=1 sharding=optim_grads_params
train one_rank 1
check "CP2 × TP2+SP × DP2 ZeRO-1 (the seeds' CP+TP+SP+distopt; and so ZeRO-3, CP+TP+SP+FSDP) within 1e-5 of one rank" \
    $VFM checkpoint diff $T/one_rank $T/z1_cp2_tp2 --atol 1e-5 --quiet
check "and its log states the layout" states $T/z1_cp2_tp2.log dp=2 cp=2 tp=2 sp=1 sharding=optim

# save at step 2 under one strategy, resume under the other: the straight run's bits
train z1_plain 2
train re_31 2 $Z3 $EXACT train.train_iters=2
train re_31 2 --resume auto logger.level=info
check "ZeRO-3's checkpoint resumes under ZeRO-1" grep -q "resumed from $T/re_31/iter_0000002 (step 2)" $T/re_31.log
check "and ends on ZeRO-1's straight run, bit for bit" sh -c \
    "$VFM checkpoint diff $T/z1_plain $T/re_31 --atol 0 --quiet > /dev/null && $VFM checkpoint diff $T/z1_plain $T/re_31 --atol 0 --quiet --ema > /dev/null"
train re_13 2 train.train_iters=2
train re_13 2 $Z3 $EXACT --resume auto logger.level=info
check "ZeRO-1's checkpoint resumes under ZeRO-3" grep -q "resumed from $T/re_13/iter_0000002 (step 2)" $T/re_13.log
check "and ends on the straight run, bit for bit" sh -c \
    "$VFM checkpoint diff $T/z1_plain $T/re_13 --atol 0 --quiet > /dev/null && $VFM checkpoint diff $T/z1_plain $T/re_13 --atol 0 --quiet --ema > /dev/null"

# a non-finite gradient under ZeRO-3 (test hook: every rank poisons its flat shard) is skipped on every rank
MPIRUN_PLAIN=$MPIRUN
MPIRUN="$MPIRUN -x VFM_TEST_INJECT_NAN"
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS # the test build: its VFM_TEST_* hooks are live
export VFM_TEST_INJECT_NAN=1
train nan_z3 2 $Z3 train.train_iters=3 logger.level=info
unset VFM_TEST_INJECT_NAN
MPIRUN=$MPIRUN_PLAIN; VFM=$VFM_PLAIN
check "ZeRO-3: a NaN gradient at step 1 is skipped on both ranks, the run goes on" sh -c \
    "test \$(grep -c 'step 1: non-finite gradient' $T/nan_z3.log) = 2 && test -f $T/nan_z3/iter_0000003/DONE && test \$(grep -c '\"skipped\": true' $T/nan_z3/metrics.jsonl) = 1"

# contradictory key pairs: exit 2, one line naming the keys, no run directory
bad() {
    name=$1; want=$2; shift 2
    timeout 60 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/bad "$@" > $T/bad.log 2>&1
    rc=$?
    lines=$(grep -c '^vfm' $T/bad.log)
    check "$name: exit $rc (2), $lines line (1) naming '$want', no run directory" \
        sh -c "test $rc = 2 && test $lines = 1 && grep -q -F '$want' $T/bad.log && test ! -e $T/bad"
}
bad "optim_grads without FSDP" "optim_grads needs ddp.use_megatron_fsdp: true" ddp.data_parallel_sharding_strategy=optim_grads
bad "FSDP with use_distributed_optimizer false" "ddp.use_distributed_optimizer" ddp.use_megatron_fsdp=true ddp.use_distributed_optimizer=false
bad "no_shard with use_distributed_optimizer true" "contradicts" ddp.data_parallel_sharding_strategy=no_shard ddp.use_distributed_optimizer=true
bad "ZeRO-3 with pipeline parallelism" "model.pipeline_model_parallel_size" $Z3 model.pipeline_model_parallel_size=2
finish
