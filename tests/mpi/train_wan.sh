#!/bin/sh
# Wan 2.1 (model.variant=wan) under the parallel layouts on CPU ranks: TP2+SP (the QK-norm over all
# heads sums its row statistics over TP; the text MLP's gradient sums over TP), CP2 (RoPE at each
# rank's chunk positions), PP2 (the text MLP and the shared modulation projection on both stages),
# ZeRO-3 at DP2 and full recomputation each train the single-rank model: 8 steps from the same seed end
# within 1e-5 of one rank's weights (tests/mpi/train_parallel.sh explains the bound); full
# recomputation gives TP2+SP's bits. Broken: the QK-norm statistic left unsummed over TP ends far off.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_wan.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "Wan under the parallel layouts" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL --mca mpi_yield_when_idle 1"
ARGS="train.device=cpu --config configs/tiny-mock.yaml model.variant=wan diffusion.objective=flow train.train_iters=8 \
 train.global_batch_size=2 checkpoint.save_interval=0 train.threads=1 logger.level=warn \
 dataset.mock_shapes=[4x3x6x10,4x1x8x10,4x1x2x2,4x2x4x6] model.layernorm_epsilon=1e-6"
BOUND=1e-5
train() {
    name=$1; np=$2; shift 2
    if [ "$np" = 1 ]; then timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
    else timeout 300 $MPIRUN -np "$np" -x VFM_TEST_BREAK $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; fi
}
diff_of() { $VFM checkpoint diff $T/one $T/$1 2>/dev/null | tail -1 | sed 's/.*max/max/'; }
layout() {
    name=$1; np=$2; shift 2
    train "$name" "$np" "$@"
    check "wan $name: 8 steps within $BOUND of one rank ($(diff_of $name))" \
        $VFM checkpoint diff $T/one $T/$name --atol $BOUND --quiet
}

train one 1
check "wan, one rank, 8 steps" test -f $T/one/iter_0000008/DONE
layout tp2_sp 2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout cp2 2 model.context_parallel_size=2
layout pp2 2 model.pipeline_model_parallel_size=2
layout zero3_dp2 2 ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params
train tp2_sp_recompute 2 model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
check "wan TP2+SP with full recomputation equals TP2+SP without, bitwise" \
    $VFM checkpoint diff $T/tp2_sp $T/tp2_sp_recompute --atol 0 --quiet
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS # the test build: its VFM_TEST_* hooks are live
export VFM_TEST_BREAK=qknorm
train broken_qknorm 2 model.tensor_model_parallel_size=2
unset VFM_TEST_BREAK
VFM=$VFM_PLAIN
check "the QK-norm statistic unsummed over TP: TP2 ends far from one rank ($(diff_of broken_qknorm))" \
    sh -c "test -f $T/broken_qknorm/iter_0000008/DONE && ! $VFM checkpoint diff $T/one $T/broken_qknorm --atol $BOUND --quiet > /dev/null"
finish
