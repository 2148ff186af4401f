#!/bin/sh
# MovieGen (model.variant=moviegen, docs/models.md) through `vfm train` on CPU ranks: the tiny preset
# as MovieGen (GQA: 2 kv heads, SwiGLU, RMSNorm blocks, the cross-attention feeding the MLP, the
# learned position before every block) at TP2+SP, CP2 p2p, CP2 a2a, PP2 and DP2 ZeRO-3 trains the
# one-rank model: 10 steps from the same seed and global batch end within 1e-5 of its weights and
# EMA weights (tests/mpi/train_parallel.sh says why 1e-5); full recomputation at TP2+SP is bitwise
# TP2+SP, and a TP reduction skipped ends far off. Both objectives train it: EDM (NeMo's) and Movie
# Gen's flow matching (diffusion.flow_sigma_min=1e-5, logit-normal time), and the flow run samples
# with the 50-step linear-quadratic Euler schedule. A tiny MovieGen trains on a small synthetic set and
# is sampled and scored. Also: export/import of its weights, and `vfm model info` of the 30B preset at
# 73,728 tokens.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_moviegen.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "MovieGen training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL --mca mpi_yield_when_idle 1" # common.inc's flags
ARGS="train.device=cpu --config configs/tiny-mock.yaml model.variant=moviegen model.num_query_groups=2 train.train_iters=10 train.global_batch_size=2 checkpoint.save_interval=0 train.threads=1 logger.level=warn dataset.mock_shapes=[4x3x6x10,4x1x8x10,4x1x2x2,4x2x4x6] ema.enabled=true ema.decay=0.9"
BOUND=1e-5

train() { # NAME NP OVERRIDES...: a 10-step run into $T/NAME (one rank without mpirun)
    name=$1; np=$2; shift 2
    if [ "$np" = 1 ]; then timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
    else timeout 300 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; fi
}
down() { test -f "$1/iter_0000010/DONE" && losses "$1" | awk 'NR == 1 { a = $2 } { b = $2 } END { exit !(NR >= 2 && b < a) }'; }
close() { $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet > /dev/null && $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet --ema > /dev/null; }
layout() { # NAME NP OVERRIDES...: trains and checks against the one-rank run
    name=$1; np=$2; shift 2
    train "$name" "$np" "$@"
    check "moviegen $name: 10 steps within $BOUND of one rank ($($VFM checkpoint diff $T/one $T/$name 2>/dev/null | tail -1 | sed 's/.*max/max/'))" \
        close $T/one $T/$name $BOUND
}

train one 1
check "moviegen, one rank: 10 steps, the loss goes down" down $T/one
layout tp2_sp 2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout cp2_p2p 2 model.context_parallel_size=2
layout cp2_a2a 2 model.context_parallel_size=2 model.cp_comm_type=a2a
layout pp2 2 model.pipeline_model_parallel_size=2
layout dp2_zero3 2 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params
train tp2_sp_recompute 2 model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "moviegen TP2+SP with full recomputation equals TP2+SP without, bitwise" close $T/tp2_sp $T/tp2_sp_recompute 0
MPIRUN_ONE=$MPIRUN
MPIRUN="$MPIRUN -x VFM_TEST_BREAK"
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS # the test build: its VFM_TEST_* hooks are live
VFM_TEST_BREAK=tp train broken_tp 2 model.tensor_model_parallel_size=2
VFM=$VFM_PLAIN; MPIRUN=$MPIRUN_ONE
check "moviegen with a TP reduction skipped: TP2 ends far from one rank" \
    sh -c "test -f $T/broken_tp/iter_0000010/DONE && ! $VFM checkpoint diff $T/one $T/broken_tp --atol $BOUND --quiet > /dev/null"

# Movie Gen's flow matching, and the 50-step linear-quadratic Euler sampler
train flow 1 diffusion.objective=flow diffusion.flow_sigma_min=1e-5
check "moviegen trains with Movie Gen's flow matching (σ_min 1e-5): the loss goes down" down $T/flow
$VFM sample --checkpoint $T/flow --out $T/flow_samples --steps 50 --num 1 > $T/flow_sample.log 2>&1
check "and samples with the 50-step Euler sampler" test -f $T/flow_samples/sample_000.npy

# a tiny MovieGen on a small synthetic set (the demo's settings; docs/models.md has its scores after
# a longer run): pixel-space images and videos from WebDataset shards, sampled and scored
$VFM prepare synthetic --out $T/syn --images 48 --videos 4 --seed 5 --force > $T/syn_prepare.log 2>&1
timeout $RUN_LIMIT $VFM train train.device=cpu --config configs/demo.yaml model.variant=moviegen dataset.path=$T/syn train.train_iters=6 \
    train.eval_interval=0 checkpoint.save_interval=0 train.threads=1 logger.level=warn \
    dataset.task_encoder_seq_length=768 checkpoint.save=$T/syn_run > $T/syn_train.log 2>&1
printf 'a red circle\na blue cross\n' > $T/syn_prompts.txt
$VFM sample --device cpu --checkpoint $T/syn_run --out $T/syn_s --prompts $T/syn_prompts.txt --steps 4 --threads 1 \
    --score-colours --score-shapes > $T/syn_s.log 2>&1
check "a tiny MovieGen trains on the synthetic set, samples it, and its colour and shape scores are printed" sh -c \
    "test -f $T/syn_run/iter_0000006/DONE && grep -q 'variant: moviegen' $T/syn_run/config.yaml &&
     grep -qE '^colour score: [0-9]+/2 = ' $T/syn_s.log && grep -qE '^shape score: [0-9]+/2 = ' $T/syn_s.log"

# its weights move through vfm export / import unchanged
$VFM export --checkpoint $T/one --to $T/one.safetensors > /dev/null 2>&1
$VFM import --from $T/one.safetensors --variant moviegen --out $T/imported --preset tiny model.num_query_groups=2 > /dev/null 2>&1
check "a moviegen checkpoint exported and imported gives its model.safetensors byte for byte" \
    cmp -s $T/one/iter_0000010/model.safetensors $T/imported/iter_0000000/model.safetensors

# the 30B preset at Movie Gen's 73,728-token clip: parameters, FLOPs per token, and per rank at a layout
$VFM model info --preset moviegen-30b --seq 73728 model.tensor_model_parallel_size=4 model.sequence_parallel=true \
    model.context_parallel_size=2 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params \
    --world 64 > $T/info.txt 2>&1
check "vfm model info --preset moviegen-30b --seq 73728: 36.92 B parameters, 1.323e+11 forward FLOPs per token, memory per rank under ZeRO-3 at TP4+SP × CP2 × DP8" \
    sh -c "grep -q 'parameters: 36921762368' $T/info.txt && grep -q 'forward 9.756e+15 (1.323e+11 per token)' $T/info.txt && \
           grep -q 'per rank at TP4+SP × CP2 p2p × DP8 (64 ranks)' $T/info.txt && grep -q 'memory, optim_grads_params (ZeRO-3)' $T/info.txt"
finish
