#!/bin/sh
# Tensor, sequence and context parallelism end to end on CPU ranks (issue 12 §4): `vfm train` at
# every layout trains the single-rank model. The mock packs stress the splits: a 3-frame video of
# 45 tokens and a 2-frame one of 12 (lengths that are no multiple of CP), 20 tokens in a 64-row
# slot (at CP4 two ranks hold none of its queries), a 1-token image; GQA (2 kv heads) wherever TP
# divides them. Each layout runs 20 steps from the same seed and global batch as one rank and must
# end within 1e-5 of its weights and EMA weights (max|a-b| over every tensor; weights are O(0.1-1)). Why 1e-5: one
# step of every layout is within 1.1e-5·max|ref| of one rank, tensor by tensor
# (tests/mpi/test_dit_parallel.c, observed <= 2.4e-6 for gradients and 1e-7 for the stepped
# weights); AdamW moves an element by at most about lr = 2e-3 per step whatever the gradient's
# rounding, so 20 steps of differences at the 1e-7 level stay far below 1e-5 (observed 3e-8),
# while a broken reduction is off by 1e-3 and more after one step (the broken runs below). CP3
# pads slots to lcm(64, 3) = 192, so its packs and its one-rank reference use 192-row slots.
# Also: ZeRO-1 equals plain DP bitwise at DP2 × TP2+SP; a checkpoint saved at TP2+SP × CP2 resumes
# at one rank and at DP2 × TP2+SP and reaches the straight run within the bound; `vfm sample` reads
# it on one rank; DFM's dit_pretrain.yaml trains 2 steps at TP2 + SP + CP2; full recomputation at
# TP2+SP, selective at CP2 and full at PP2 V=2 give the runs without bitwise; bad layouts exit 2 with
# one line and no run directory; validation (loss and generated sample) runs at TP2+SP × CP2.
# The MoE MLP (expert choice) at TP2+SP and CP2, 4 steps, within the bound of one rank.
# Pipeline parallelism: PP2 1F1B, PP2 V=2, PP4, PP2 × DP2 ZeRO-1, PP2 × TP2+SP within the bound of
# one rank (PP2's first loss bitwise), a fixed pack length at one rank, the broken variant (embedder
# gradients not summed over the stages) far off, PP2 × TP2 saved and resumed at one rank, `vfm
# sample` on a PP checkpoint, validation at PP2, PP2 × TP2+SP, PP2 × DP2 and PP2 V=2 (losses within the
# bound of one rank, weights bitwise those without validation, the sample), and the bad PP layouts.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_parallel.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "tensor/context-parallel training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=20 train.global_batch_size=2 checkpoint.save_interval=0 train.threads=1 logger.level=info dataset.mock_shapes=[4x3x6x10,4x1x8x10,4x1x2x2,4x2x4x6] ema.enabled=true ema.decay=0.9"
GQA="model.num_query_groups=2"
BOUND=1e-5

# train NAME NP OVERRIDES...: a 20-step run into $T/NAME (one rank without mpirun)
train() {
    name=$1; np=$2; shift 2
    if [ "$np" = 1 ]; then timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
    else timeout 300 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; fi
}
close() { $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet > /dev/null && $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet --ema > /dev/null; }
# layout NAME NP REFERENCE "KEY=VALUE ..." OVERRIDES...: trains, checks that the run's log states the
# layout asked for (so a key silently falling back to plain DP fails), and checks it against the
# one-rank run REFERENCE
layout() { # (check sets $name: these are layout's own)
    run=$1; np=$2; ref=$3; want=$4; shift 4
    train "$run" "$np" "$@"
    check "$run: the log states the layout ($want)" states $T/$run.log $want
    check "$run: its steps within $BOUND of one rank ($($VFM checkpoint diff $T/$ref $T/$run 2>/dev/null | tail -1 | sed 's/.*max/max/'))" \
        close $T/$ref $T/$run $BOUND
}

train one 1 $GQA
train one_mha 1
train one_192 1 $GQA dataset.pad_multiple=192
check "one rank, 20 steps (GQA, MHA, 192-row slots)" sh -c "test -f $T/one/iter_0000020/DONE && test -f $T/one_mha/iter_0000020/DONE && test -f $T/one_192/iter_0000020/DONE"

layout tp2 2 one "world=2 dp=1 tp=2 sp=0 cp=1 pp=1" $GQA model.tensor_model_parallel_size=2
layout tp2_sp 2 one "dp=1 tp=2 sp=1" $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout tp4_sp 4 one_mha "dp=1 tp=4 sp=1" model.tensor_model_parallel_size=4 model.sequence_parallel=true
layout cp2_p2p 2 one "dp=1 cp=2 cp_comm_type=p2p" $GQA model.context_parallel_size=2
layout cp3_p2p 3 one_192 "dp=1 cp=3 cp_comm_type=p2p" $GQA model.context_parallel_size=3
layout cp2_a2a 2 one "dp=1 cp=2 cp_comm_type=a2a" $GQA model.context_parallel_size=2 model.cp_comm_type=a2a
layout cp4_a2a_p2p 4 one "dp=1 cp=4 cp_comm_type=a2a+p2p[2,2]" $GQA model.context_parallel_size=4 model.cp_comm_type=a2a+p2p "model.hierarchical_context_parallel_sizes=[2,2]"
layout tp2_sp_cp2 4 one "dp=1 tp=2 sp=1 cp=2" $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2
layout dp2_tp2_sp_zero1 4 one "dp=2 tp=2 sp=1 sharding=optim" $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true ddp.use_distributed_optimizer=true
layout dp2_cp2 4 one "dp=2 cp=2" $GQA model.context_parallel_size=2
# the MoE MLP (docs/models.md "The MoE layer") under TP2+SP (experts split over TP) and CP2 (the
# router's logits gathered over CP): expert choice with capacity factor 2, 4 steps (a routing that
# flipped on a rounding difference would show far above the bound)
MOE="model.num_moe_experts=4 model.moe_ffn_hidden_size=32 model.moe_expert_capacity_factor=2 train.train_iters=4"
train one_moe 1 $GQA $MOE
layout moe_tp2_sp 2 one_moe "dp=1 tp=2 sp=1" $GQA $MOE model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout moe_cp2 2 one_moe "dp=1 cp=2" $GQA $MOE model.context_parallel_size=2
check "TP2+SP × CP2 writes full tensors once: model.safetensors, optim.safetensors" \
    sh -c "test -f $T/tp2_sp_cp2/iter_0000020/model.safetensors && test -f $T/tp2_sp_cp2/iter_0000020/optim.safetensors && ! ls $T/tp2_sp_cp2/iter_0000020/optim.*.safetensors 2>/dev/null | grep -q 'optim\.[0-9]'"

# activation recomputation replays the TP regions' and the CP attention's collectives: the same bits
train tp2_sp_recompute 2 $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "TP2+SP with full recomputation (uniform 1) equals TP2+SP without, bitwise" close $T/tp2_sp $T/tp2_sp_recompute 0
check "and its log states the plan and the layout" states $T/tp2_sp_recompute.log tp=2 sp=1 recompute=full,uniform,1
train cp2_selective 2 $GQA model.context_parallel_size=2 model.recompute_granularity=selective
check "CP2 with selective recomputation equals CP2 without, bitwise" close $T/cp2_p2p $T/cp2_selective 0
check "and its log states the plan and the layout" states $T/cp2_selective.log cp=2 recompute=selective

train dp2_tp2_sp_plain 4 $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true ddp.use_distributed_optimizer=false
check "ZeRO-1 equals plain DP bitwise at DP2 × TP2+SP" close $T/dp2_tp2_sp_plain $T/dp2_tp2_sp_zero1 0
check "and the plain run's log states no sharding" states $T/dp2_tp2_sp_plain.log dp=2 tp=2 sharding=no_shard

# broken runs must fail the same check
MPIRUN_ONE=$MPIRUN
MPIRUN="$MPIRUN -x VFM_TEST_BREAK"
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS # the test build: its VFM_TEST_* hooks are live
export VFM_TEST_BREAK=tp
train broken_tp 2 $GQA model.tensor_model_parallel_size=2
check "a TP reduction skipped: TP2 writes its checkpoint, far from one rank's" far $T/one $T/broken_tp $BOUND
check "and it ran as TP2" states $T/broken_tp.log dp=1 tp=2
export VFM_TEST_BREAK=ring
train broken_ring 2 $GQA model.context_parallel_size=2
check "a ring step dropped: CP2 writes its checkpoint, far from one rank's" far $T/one $T/broken_ring $BOUND
check "and it ran as CP2 (ring)" states $T/broken_ring.log dp=1 cp=2 cp_comm_type=p2p
unset VFM_TEST_BREAK
MPIRUN=$MPIRUN_ONE; VFM=$VFM_PLAIN

# saved at TP2+SP × CP2 (step 10), resumed at one rank and at DP2 × TP2+SP
train re 4 $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2 \
    train.train_iters=10 checkpoint.save_interval=10
cp -r $T/re $T/re_dp2
train re 1 $GQA logger.level=info --resume auto
check "one rank resumes the TP2+SP × CP2 checkpoint of step 10" grep -q "resumed from $T/re/iter_0000010 (step 10)" $T/re.log
check "and reaches the straight run within $BOUND" close $T/one $T/re $BOUND
train re_dp2 4 $GQA model.tensor_model_parallel_size=2 model.sequence_parallel=true logger.level=info --resume auto
check "DP2 × TP2+SP resumes it" grep -q "resumed from $T/re_dp2/iter_0000010 (step 10)" $T/re_dp2.log
check "and reaches the straight run within $BOUND" close $T/one $T/re_dp2 $BOUND

$VFM sample --device cpu --checkpoint $T/tp2_sp_cp2 --out $T/samples --steps 2 > $T/sample.log 2>&1
check "vfm sample reads the TP2+SP × CP2 checkpoint on one rank" test -f $T/samples/sample_000.npy

# DFM's recipe as it is, with the layout set (its data and model size replaced by tiny mock ones)
timeout 300 $MPIRUN -np 4 $VFM train --config tests/fixtures/dfm/dit_pretrain.yaml model.tensor_model_parallel_size=2 \
    model.sequence_parallel=true model.context_parallel_size=2 model.preset=tiny dataset.mock=true dataset.path= \
    "dataset.mock_shapes=[4x3x6x10,4x1x8x10]" dataset.task_encoder_seq_length=512 dataset.num_workers=1 \
    train.train_iters=2 train.threads=1 checkpoint.save=$T/dfm checkpoint.load= > $T/dfm.log 2>&1
check "dit_pretrain.yaml trains 2 steps at TP2 + SP + CP2" sh -c "test -f $T/dfm/iter_0000002/DONE && grep -q 'TP2+SP × CP2' $T/dfm.log"

# validation (loss and the generated sample) under TP2+SP × CP2: the same loss as one rank
val_losses() { grep val_loss $T/$1/metrics.jsonl 2>/dev/null | sed 's/.*"val_loss": \([^,]*\),.*/\1/' | tr '\n' ' '; }
val_close() { # NAME REF: two val losses within 1e-6 (relative) of REF's
    val_losses $1 | tr ' ' '\n' | grep . > $T/$1.txt
    val_losses $2 | tr ' ' '\n' | grep . > $T/$2.txt
    awk 'NR == FNR { a[FNR] = $1; n = FNR; next } { d = $1 - a[FNR]; if (d < 0) d = -d; if (d > 1e-6 * a[FNR]) bad = 1; m = FNR }
         END { exit !(n == 2 && m == 2 && !bad) }' $T/$2.txt $T/$1.txt
}
VAL="train.train_iters=4 train.eval_interval=2 train.eval_iters=1 model.val_generation_num_steps=3 $GQA"
train val_one 1 $VAL
train val_par 4 $VAL model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2
check "validation at TP2+SP × CP2: two losses within 1e-6 of one rank's ($(val_losses val_par))" val_close val_par val_one
check "and the validation sample is generated there, written once per replica (rank 0)" \
    sh -c "test -f $T/val_par/validation_generation/step=4_rank=0.npy && ! test -e $T/val_par/validation_generation/step=4_rank=1.npy"

# pipeline parallelism (docs/parallel.md "Pipeline parallelism"): every pack padded to the fixed
# length (the 512-token budget), the packs of a step through this stage's schedule, the loss from
# the last stage; the same bound against one rank (one step of PP is bitwise one rank's except the
# replicated embedders, summed over the stages: tests/mpi/test_dit_pp.c)
train one_l4 1 $GQA model.num_layers=4
layout one_fixed 1 one "world=1 pp=1" $GQA train.fixed_pack_length=1024
layout pp2 2 one "dp=1 pp=2 vp=1" $GQA model.pipeline_model_parallel_size=2
check "PP2: the first step's loss is one rank's, bit for bit (from the last stage)" \
    sh -c "head -1 $T/one/metrics.jsonl | cut -d, -f1,2 > $T/one.loss && head -1 $T/pp2/metrics.jsonl | cut -d, -f1,2 | cmp -s - $T/one.loss && test -s $T/one.loss"
layout pp2_v2 2 one_l4 "dp=1 pp=2 vp=2" $GQA model.num_layers=4 model.pipeline_model_parallel_size=2 model.virtual_pipeline_model_parallel_size=2
train pp2_v2_recompute 2 $GQA model.num_layers=4 model.pipeline_model_parallel_size=2 \
    model.virtual_pipeline_model_parallel_size=2 model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "PP2 V=2 with full recomputation (uniform 1) equals PP2 V=2 without, bitwise" close $T/pp2_v2 $T/pp2_v2_recompute 0
check "and its log states the plan and the layout" states $T/pp2_v2_recompute.log pp=2 vp=2 recompute=full,uniform,1
layout pp4 4 one_l4 "dp=1 pp=4" $GQA model.num_layers=4 model.pipeline_model_parallel_size=4
layout pp2_dp2_zero1 4 one "dp=2 pp=2 sharding=optim" $GQA model.pipeline_model_parallel_size=2 ddp.use_distributed_optimizer=true
layout pp2_tp2_sp 4 one "dp=1 pp=2 tp=2 sp=1" $GQA model.pipeline_model_parallel_size=2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
# validation under PP: the val packs padded to the fixed length through the forward-only schedule,
# the losses from the last stage (the same bound as TP2+SP × CP2 above against one rank), and the
# weights bitwise those of the same run without validation; the sample's network forwards run
# chunk by chunk over the stages (with lr = 0, the weights being one rank's exactly, the sample is
# one rank's bit for bit; trained weights 1e-8 apart give samples ~1e-4 apart after 3 EDM steps
# from σ = 80), written once per replica (rank 0)
PP2="model.pipeline_model_parallel_size=2"
train val_pp2 2 $VAL $PP2
train noval_pp2 2 $VAL $PP2 train.eval_interval=0
check "validation at PP2: two losses within 1e-6 of one rank's ($(val_losses val_pp2))" val_close val_pp2 val_one
check "and PP2's weights after 4 steps are bitwise those without validation" close $T/noval_pp2 $T/val_pp2 0
train val_pp2_tp2_sp 4 $VAL $PP2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
check "validation at PP2 × TP2+SP: two losses within 1e-6 of one rank's ($(val_losses val_pp2_tp2_sp))" val_close val_pp2_tp2_sp val_one
train val_dp2 2 $VAL
train val_pp2_dp2 4 $VAL $PP2
check "validation at PP2 × DP2: two losses within 1e-6 of DP2's ($(val_losses val_pp2_dp2))" val_close val_pp2_dp2 val_dp2
train val_one_l4 1 $VAL model.num_layers=4 train.eval_iters=2
train val_pp2_v2 2 $VAL $PP2 model.num_layers=4 model.virtual_pipeline_model_parallel_size=2 train.eval_iters=2
check "validation at PP2 V=2 (interleaved forward-only, eval_iters 2: two rounds of M): two losses within 1e-6 of one rank's ($(val_losses val_pp2_v2))" val_close val_pp2_v2 val_one_l4
LR0="train.train_iters=2 optimizer.lr=0 optimizer.min_lr=0"
train val_one_lr0 1 $VAL $LR0
train val_pp2_lr0 2 $VAL $LR0 $PP2
check "the validation sample at PP2 with lr = 0 is one rank's bit for bit, written once (rank 0)" \
    sh -c "cmp -s $T/val_one_lr0/validation_generation/step=2_rank=0.npy $T/val_pp2_lr0/validation_generation/step=2_rank=0.npy && ! test -e $T/val_pp2_lr0/validation_generation/step=2_rank=1.npy"
check "and after training at PP2 × TP2+SP it is written (rank 0 only)" \
    sh -c "test -f $T/val_pp2_tp2_sp/validation_generation/step=4_rank=0.npy && test \$(ls $T/val_pp2_tp2_sp/validation_generation | wc -l) = 2"

MPIRUN_ONE=$MPIRUN
MPIRUN="$MPIRUN -x VFM_TEST_BREAK"
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS
export VFM_TEST_BREAK=pp
train broken_pp 2 $GQA model.pipeline_model_parallel_size=2
check "embedder gradients not summed over the stages: the trainer's per-step assertion stops PP2, naming the drift" \
    grep -q "replicated embedders (REDUCE_PP entries) of stage 1 differ" $T/broken_pp.log
pp_stopped() { states $T/broken_pp.log pp=2 && test ! -e $T/broken_pp/iter_0000020; }
check "and it ran as PP2 and stopped before its checkpoint" pp_stopped
unset VFM_TEST_BREAK
MPIRUN=$MPIRUN_ONE; VFM=$VFM_PLAIN
train re_pp 4 $GQA model.pipeline_model_parallel_size=2 model.tensor_model_parallel_size=2 train.train_iters=10 checkpoint.save_interval=10
train re_pp 1 $GQA logger.level=info --resume auto
check "one rank resumes the PP2 × TP2 checkpoint of step 10" grep -q "resumed from $T/re_pp/iter_0000010 (step 10)" $T/re_pp.log
check "and reaches the straight run within $BOUND" close $T/one $T/re_pp $BOUND
$VFM sample --checkpoint $T/pp2_tp2_sp --out $T/samples_pp --steps 2 > $T/sample_pp.log 2>&1
check "vfm sample reads the PP2 × TP2+SP checkpoint on one rank" test -f $T/samples_pp/sample_000.npy

# bad layouts: exit 2, one line naming the key, before any work
bad() {
    name=$1; np=$2; want=$3; shift 3
    timeout 60 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/bad "$@" > $T/bad.log 2>&1
    rc=$?
    lines=$(grep -c '^vfm' $T/bad.log)
    check "$name: exit $rc (2), $lines line (1) naming '$want', no run directory" \
        sh -c "test $rc = 2 && test $lines = 1 && grep -q -F '$want' $T/bad.log && test ! -e $T/bad"
}
bad "heads not divisible by TP" 3 "model.num_attention_heads (4) is not a multiple of model.tensor_model_parallel_size (3)" \
    model.tensor_model_parallel_size=3
bad "world size not divisible" 3 "world size 3 is not divisible by TP·PP·CP = 2" model.tensor_model_parallel_size=2
bad "a2a with heads not divisible by CP" 3 "model.cp_comm_type a2a: 4 attention heads per TP rank do not divide over model.context_parallel_size = 3" \
    model.context_parallel_size=3 model.cp_comm_type=a2a
bad "fewer layers than pipeline chunks" 2 "model.num_layers = 2 is smaller than model.pipeline_model_parallel_size × model.virtual_pipeline_model_parallel_size = 2 × 2" \
    model.pipeline_model_parallel_size=2 model.virtual_pipeline_model_parallel_size=2
bad "interleaved with fewer micro-batches than stages" 4 "needs at least model.pipeline_model_parallel_size = 4 micro-batches" \
    model.num_layers=8 model.pipeline_model_parallel_size=4 model.virtual_pipeline_model_parallel_size=2
bad "PP: world size not divisible" 3 "world size 3 is not divisible by TP·PP·CP = 2" model.pipeline_model_parallel_size=2
finish
