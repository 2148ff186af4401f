#!/bin/sh
# Data parallelism end to end on CPU ranks (Open MPI): after 20 steps with the same global batch
# and seed, DP=2 and DP=4 reach the single-rank weights within 1e-5 (not bitwise: a replica sums
# its own micro-batches before the rank-order mean, a different order of float additions than one
# rank summing all of them); ZeRO-1 equals plain DP bitwise; a run saved at DP=4 at step 10 and
# resumed at DP=2 reaches the straight DP=4 weights within 1e-5; a rank killed mid-run brings the
# job down with a clear message and no hang, and --resume auto recovers bitwise. The MoE MLP (both
# routers) at DP=2 matches one rank within 1e-5 after 4 steps.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_train.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "data-parallel training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The README's launch line (sizes aside): root in a container, oversubscribed cores.
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS"
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=20 train.global_batch_size=4 checkpoint.save_interval=10 train.threads=1 logger.level=info"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/dp1 > $T/dp1.log 2>&1
check "single rank, 20 steps" test -f $T/dp1/iter_0000020/DONE
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/dp2 ddp.use_distributed_optimizer=false > $T/dp2.log 2>&1
check "DP=2 (plain), 20 steps" test -f $T/dp2/iter_0000020/DONE
check "DP=2 writes the Adam moments once, as full tensors (optim.safetensors, no per-rank files)" sh -c "test -f $T/dp2/iter_0000020/optim.safetensors && ! test -e $T/dp2/iter_0000020/optim.0.safetensors"
check "DP=2 matches one rank within 1e-5" $VFM checkpoint diff $T/dp1 $T/dp2 --atol 1e-5 --quiet
check "and its log states DP=2 without sharding" states $T/dp2.log world=2 dp=2 sharding=no_shard
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/dp2z ddp.use_distributed_optimizer=true \
    ddp.overlap_grad_reduce=true > $T/dp2z.log 2>&1
check "ZeRO-1 at DP=2, buckets issued during backward, equals plain DP bitwise" $VFM checkpoint diff $T/dp2 $T/dp2z --atol 0 --quiet
check "and its log states ZeRO-1" states $T/dp2z.log dp=2 sharding=optim
timeout 300 $MPIRUN -np 4 $VFM train $ARGS checkpoint.save=$T/dp4 train.eval_interval=10 train.eval_iters=1 \
    model.val_generation_num_steps=2 > $T/dp4.log 2>&1
check "DP=4 (ZeRO-1, validating at steps 10 and 20) matches one rank within 1e-5" \
    $VFM checkpoint diff $T/dp1 $T/dp4 --atol 1e-5 --quiet
check "and its log states DP=4" states $T/dp4.log world=4 dp=4 sharding=optim
check "every rank writes its validation sample at steps 10 and 20" sh -c \
    "test \$(ls $T/dp4/validation_generation/step=10_rank=*.npy $T/dp4/validation_generation/step=20_rank=*.npy | wc -l) = 8"
check "one validation loss per validation in metrics.jsonl" sh -c "test \$(grep -c val_loss $T/dp4/metrics.jsonl) = 2"

# the mixture-of-experts MLP (docs/models.md "The MoE layer") under DP: expert choice, and token
# choice top-2 with drops and the load-balancing and z losses (scaled per micro-batch like the loss)
for moe in "ec:model.num_moe_experts=4" \
    "tc:model.num_moe_experts=4 model.moe_router_load_balancing_type=aux_loss model.moe_router_topk=2 model.moe_z_loss_coeff=0.01"; do
    mname=${moe%%:*}; keys=${moe#*:}
    timeout $RUN_LIMIT $VFM train $ARGS train.train_iters=4 checkpoint.save_interval=4 $keys checkpoint.save=$T/moe1_$mname > $T/moe1_$mname.log 2>&1
    timeout 300 $MPIRUN -np 2 $VFM train $ARGS train.train_iters=4 checkpoint.save_interval=4 $keys \
        checkpoint.save=$T/moe2_$mname > $T/moe2_$mname.log 2>&1
    check "MoE ($mname) trains 4 steps at one rank and at DP=2" test -f $T/moe2_$mname/iter_0000004/DONE -a -f $T/moe1_$mname/iter_0000004/DONE
    check "MoE ($mname) at DP=2 matches one rank within 1e-5" $VFM checkpoint diff $T/moe1_$mname $T/moe2_$mname --atol 1e-5 --quiet
done

# saved at DP=4 at step 10, resumed at DP=2
timeout 300 $MPIRUN -np 4 $VFM train $ARGS train.train_iters=10 checkpoint.save=$T/re > $T/re4.log 2>&1
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/re --resume auto logger.level=info > $T/re2.log 2>&1
check "DP=2 resumes the DP=4 checkpoint of step 10" grep -q "resumed from $T/re/iter_0000010 (step 10)" $T/re2.log
check "and reaches the straight DP=4 weights within 1e-5" $VFM checkpoint diff $T/dp4 $T/re --atol 1e-5 --quiet

# a rank killed mid-run
start=$(date +%s)
VFM_TEST_KILL_AFTER_STEP=13 VFM_TEST_KILL_RANK=1 timeout 120 $MPIRUN -np 2 -x VFM_TEST_KILL_AFTER_STEP -x VFM_TEST_KILL_RANK \
    $VFM_FAULTS train $ARGS checkpoint.save=$T/kill > $T/kill.log 2>&1
rc=$?; took=$(( $(date +%s) - start ))
check "a killed rank brings the job down (exit $rc, ${took}s, no hang)" sh -c "test $rc != 0 && test $rc != 124"
check "with a clear message" grep -q -i -E "signal 9|killed" $T/kill.log
timeout 300 $MPIRUN -np 2 $VFM train $ARGS checkpoint.save=$T/kill --resume auto > $T/kill2.log 2>&1
check "--resume auto recovers and matches the straight DP=2 run bitwise" $VFM checkpoint diff $T/dp2z $T/kill --atol 0 --quiet
finish
