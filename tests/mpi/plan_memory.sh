#!/bin/sh
# `vfm plan`'s memory model against runs (issue 30 §3): for 14 layouts on CPU ranks at tiny sizes,
# `vfm train` (2 steps) reports what it held, the most of any rank (its "memory per rank" line: the
# parameters, gradients and optimizer state from the buffers it allocated, the activations' high-water
# mark from its arenas), and `vfm plan --gpu cpu` with the same keys predicts the same parts for vfm's
# CPU implementation (f32); each must be within 5%. The planner counts the activations with the
# code that sizes the arena (dit_activation_plan) for the layout it describes without running, and the
# pipeline's slots in flight from the schedule; the run measures what its forward carved.
# Every pack holds one 64-token sample (a 4x1x16x16 latent, patch 2) with 16 text rows, and the pack
# budget is 64 rows, so the pipeline's fixed pack length is that sample too.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_plan_memory.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "the planner's memory against runs" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"
MODEL="--config configs/tiny-mock.yaml model.num_layers=4 dataset.mock_shapes=[4x1x16x16] dataset.number_packed_samples=1 dataset.task_encoder_seq_length=64 dataset.context_seq_len=16 train.global_batch_size=2"
TRAIN="train.device=cpu train.train_iters=2 checkpoint.save_interval=0 train.threads=1 logger.level=info"
# every size fixed (the planner keeps keys given on its command line; a layout's own keys come after)
BASE="model.tensor_model_parallel_size=1 model.context_parallel_size=1 model.pipeline_model_parallel_size=1 model.virtual_pipeline_model_parallel_size=1"

# layout NAME NP KEYS...: trains NAME on NP ranks, plans the same layout, compares the four parts
layout() {
    name=$1; np=$2; shift 2
    set -- $BASE "$@"
    if [ "$np" = 1 ]; then timeout $RUN_LIMIT $VFM train $MODEL $TRAIN checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
    else timeout 120 $MPIRUN -np "$np" $VFM train $MODEL $TRAIN checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; fi
    $VFM plan $MODEL --seq 64 --text 16 --gpus "$np" --gpu cpu --json "$@" > $T/$name.json 2> $T/$name.plan.err
    run=$(sed -n 's/.*memory per rank (the most of any rank): parameters \([0-9]*\) B, gradients \([0-9]*\) B, optimizer state \([0-9]*\) B, EMA [0-9]* B, activations.* \([0-9]*\) B$/\1 \2 \3 \4/p' $T/$name.log)
    plan=$(sed -n 's/^{"layouts":\[{"layout":"\([^"]*\)".*"memory_parts":{"params":\([0-9.e+]*\),"grads":\([0-9.e+]*\),"optimizer":\([0-9.e+]*\),.*"activation_peak":\([0-9.e+]*\),.*/\2 \3 \4 \5 \1/p' $T/$name.json)
    verdict=$(echo "$run $plan" | awk '
        NF < 9 { print "no figures (run: " $1 ", plan: " $5 ")"; exit 1 }
        { worst = 0; out = ""; split("parameters gradients optimizer activations", part, " ")
          for (i = 1; i <= 4; i++) { d = ($i > 0 ? ($(i + 4) - $i) / $i : ($(i + 4) == 0 ? 0 : 1))
            if (d < 0) d = -d; if (d > worst) worst = d
            out = out sprintf(" %s %d/%d", part[i], $(i + 4), $i) }
          layout = $9; for (i = 10; i <= NF; i++) layout = layout " " $i
          printf "%s:%s (planned/run); worst %.2f%%\n", layout, out, 100 * worst
          exit worst <= 0.05 ? 0 : 1 }')
    check "$name: $verdict" test $? = 0
}

ZERO1="ddp.use_distributed_optimizer=true"
layout one 1 $ZERO1
layout tp2_sp 2 $ZERO1 model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout cp2_p2p 2 $ZERO1 model.context_parallel_size=2 model.cp_comm_type=p2p
layout cp2_a2a 2 $ZERO1 model.context_parallel_size=2 model.cp_comm_type=a2a
layout pp2 2 $ZERO1 model.pipeline_model_parallel_size=2
layout pp2_v2 2 $ZERO1 model.pipeline_model_parallel_size=2 model.virtual_pipeline_model_parallel_size=2
layout dp2_zero1 2 $ZERO1
layout dp2_plain 2 ddp.use_distributed_optimizer=false
layout dp2_zero2 2 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads
layout dp2_zero3 2 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params
layout tp2_sp_full_uniform1 2 $ZERO1 model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
layout cp2_selective 2 $ZERO1 model.context_parallel_size=2 model.recompute_granularity=selective
layout tp2_sp_cp2 4 $ZERO1 model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2
layout pp2_tp2_sp 4 $ZERO1 model.pipeline_model_parallel_size=2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout z3_tp2_dp2_block1 4 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params \
    model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=1
finish
