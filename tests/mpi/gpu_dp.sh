#!/bin/sh
# Data parallelism on the GPU with two ranks sharing one GPU (NCCL refuses that, so the MPI backend
# moves the GPU gradients through host memory): after GPU_TEST_STEPS (default 20) steps DP=2 reaches the one-rank GPU
# weights within 1e-3 (bf16 activations; the replicas' gradients add in another order), and ZeRO-1
# with buckets reduced during the backward (ddp.overlap_grad_reduce) equals plain DP=2 bitwise.
# Skipped without mpirun or a CUDA device. On the GPU machine: VFM="scripts/gpu_run.sh build/vfm".
# The logs of a failing run are copied to GPU_TEST_LOGS when that is set (scripts/gpu_check2.sh).
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
gpu_mpi_start vfm_mpi_gpu "GPU DP=2 on one GPU matches one rank" \
    "GPU ZeRO-1 + overlapped buckets equal plain DP bitwise" "GPU DP=2 and ZeRO-1: the logs state the layouts" || exit 0
N=${GPU_TEST_STEPS:-20}
ARGS="--config configs/tiny-mock.yaml train.train_iters=$N train.global_batch_size=4 checkpoint.save_interval=$N train.device=cuda"
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/dp1 > $T/dp1.log 2>&1
check "GPU, one rank, $N steps" test -f $T/dp1/iter_$(printf %07d $N)/DONE
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/dp2 ddp.use_distributed_optimizer=false > $T/dp2.log 2>&1
check "GPU DP=2 on one GPU: gradients through host memory" grep -q "gradients over MPI through host memory" $T/dp2.log
check "GPU DP=2 on one GPU matches one rank (1e-3)" $VFM checkpoint diff $T/dp1 $T/dp2 --atol 1e-3 --quiet
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/dp2z ddp.use_distributed_optimizer=true \
    ddp.overlap_grad_reduce=true > $T/dp2z.log 2>&1
check "GPU ZeRO-1 + overlapped buckets equal plain DP bitwise" $VFM checkpoint diff $T/dp2 $T/dp2z --atol 0 --quiet
layouts() { states $T/dp2.log world=2 dp=2 sharding=no_shard && states $T/dp2z.log world=2 dp=2 sharding=optim; }
check "GPU DP=2 and ZeRO-1: the logs state the layouts" layouts
finish
