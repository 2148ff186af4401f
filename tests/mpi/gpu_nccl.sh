#!/bin/sh
# Every layout with a GPU per rank, where the gradients, FSDP's units and the TP, CP and PP
# activations go over NCCL (the other GPU scripts share one GPU between two ranks, which NCCL
# refuses, so they go over MPI): DP2, ZeRO-1 with buckets reduced during the backward, ZeRO-2,
# ZeRO-3, TP2+SP, CP2 (all-to-all) and PP2 each train GPU_TEST_STEPS (default 10) steps of the tiny
# model on two ranks, with a validation (loss and a generated sample) at the end, and end within
# 1e-4 of one rank's weights, their logs saying what went over NCCL, and so does EP2 of its MoE
# variant (4 experts, top-2) against the MoE model on one rank; ZeRO-3 killed by SIGKILL between
# its checkpoint of step N/2 and its last step, then resumed with --resume auto, gives the
# uninterrupted run's weights bit for bit.
# Skipped without mpirun, without a CUDA device, or with fewer GPUs than two (the lent single-GPU
# machine); tests/harness/gpu_runs.sh runs it on the CPU harness with two harness devices and its
# NCCL stand-in (tests/harness/nccl.cpp). VFM="scripts/gpu_run.sh build/vfm" on a GPU machine.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
CHECKS="GPU dp2 over NCCL within 1e-4 of one rank|GPU zero1_overlap over NCCL within 1e-4 of one rank|GPU zero2 over NCCL within 1e-4 of one rank|GPU zero3 over NCCL within 1e-4 of one rank|GPU tp2_sp over NCCL within 1e-4 of one rank|GPU cp2_a2a over NCCL within 1e-4 of one rank|GPU pp2 over NCCL within 1e-4 of one rank|GPU ep2 over NCCL within 1e-4 of one rank|GPU ZeRO-3 over NCCL: kill -9 + --resume auto bitwise"
names() { echo "$CHECKS" | tr '|' '\n'; }
skip_all() { names | while read -r c; do echo "skip  $c: $1"; done; echo "0 passed, 0 failed, $(names | wc -l) skipped"; exit 0; }
command -v mpirun >/dev/null 2>&1 || skip_all "mpirun is not installed"
[ -n "$(gpu_device)" ] || skip_all "no CUDA device"
gpus=$($VFM version 2>/dev/null | sed -n 's/^cuda: built in; device: .*(\([0-9]*\) devices\{0,1\})$/\1/p')
[ "${gpus:-1}" -ge 2 ] || skip_all "one GPU: NCCL needs a GPU per rank"
gpu_test_dir vfm_mpi_gpu_nccl
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL -x VFM_TEST_KILL_AFTER_STEP"
N=${GPU_TEST_STEPS:-10}; HALF=$((N / 2))
ARGS="--config configs/tiny-mock.yaml train.device=cuda train.train_iters=$N train.global_batch_size=4 checkpoint.save_interval=$HALF logger.level=info train.eval_interval=$N train.eval_iters=1 model.val_generation_num_steps=2 model.num_query_groups=2"
BOUND=1e-4
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/one > $T/one.log 2>&1
check "GPU, one rank, $N steps" test -f $T/one/iter_$(printf %07d $N)/DONE
Z3="ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params"
layout() { # NAME "WHAT WENT OVER NCCL" OVERRIDES...
    run=$1; what=$2; shift 2
    timeout 300 $MPIRUN -np 2 $VFM_FAULTS train $ARGS checkpoint.save=$T/$run "$@" > $T/$run.log 2>&1
    check "GPU $run over NCCL within $BOUND of one rank ($($VFM checkpoint diff $T/one $T/$run 2>/dev/null | tail -n 1 | sed 's/.*max/max/'))" \
        sh -c "grep -q '$what over NCCL' $T/$run.log && $VFM checkpoint diff $T/one $T/$run --atol $BOUND --quiet"
}
layout dp2 gradients ddp.use_distributed_optimizer=false
layout zero1_overlap gradients ddp.use_distributed_optimizer=true ddp.overlap_grad_reduce=true
layout zero2 gradients ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads
layout zero3 gradients $Z3
layout tp2_sp "TP activations" model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout cp2_a2a "CP activations" model.context_parallel_size=2 model.cp_comm_type=a2a
layout pp2 "PP activations" model.pipeline_model_parallel_size=2
MOE="model.num_moe_experts=4 model.moe_router_load_balancing_type=aux_loss model.moe_router_topk=2"
timeout $RUN_LIMIT $VFM train $ARGS $MOE checkpoint.save=$T/one_moe > $T/one_moe.log 2>&1
mv $T/one $T/one_dense && mv $T/one_moe $T/one  # layout() compares with $T/one
layout ep2 "EP activations" $MOE model.expert_model_parallel_size=2
mv $T/one $T/one_moe && mv $T/one_dense $T/one
export VFM_TEST_KILL_AFTER_STEP=$HALF
timeout 300 $MPIRUN -np 2 $VFM_FAULTS train $ARGS checkpoint.save=$T/killed $Z3 > $T/killed.1.log 2>&1
killed=$?
unset VFM_TEST_KILL_AFTER_STEP
# the kill happened (the run failed, before its last step) and the resume said where it started
stopped=no; [ "$killed" != 0 ] && [ ! -f $T/killed/iter_$(printf %07d $N)/DONE ] && stopped=yes
timeout 300 $MPIRUN -np 2 $VFM_FAULTS train $ARGS checkpoint.save=$T/killed $Z3 --resume auto > $T/killed.log 2>&1
check "GPU ZeRO-3 over NCCL: kill -9 + --resume auto bitwise" \
    sh -c "test $stopped = yes && grep -q 'resumed from' $T/killed.log && $VFM checkpoint diff $T/zero3 $T/killed --quiet"
finish
