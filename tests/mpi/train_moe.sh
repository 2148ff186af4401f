#!/bin/sh
# Expert parallelism in the trainer (issue 29; docs/parallel.md "Expert parallelism"): `vfm train`
# with model.expert_model_parallel_size=2 on CPU ranks against one rank from the same seed and
# global batch, the tiny model's MLP an MoE of 4 experts. Each run's layout line must state its ep.
#   - EP2 × DP2 (world 2, one EP group), expert choice and token choice top-2 (the load-balancing
#     and z losses, drops), validating with a generated sample at steps 2 and 4: within 1e-6 of
#     one rank after 4 steps;
#   - EP2 within DP4 (two EP groups, expert-data-parallel groups of 2) under ZeRO-1 and ZeRO-3:
#     within 1e-6 of one rank, and ZeRO-3 (unsharded accumulation) = ZeRO-1 bit for bit;
#   - PP2 × EP2 × DP2 under ZeRO-1 within 1e-6 of one rank;
#   - the seeds' EP rows: CP2 × TP2+SP × PP2 × ZeRO-1 × EP2 (8 ranks) and CP2 × TP2+SP × ZeRO-3 × EP2
#     (4 ranks), EP over the CP pair, within 1e-6 of one rank, the latter's broken variant not;
#   - EP4 × DP4 (one expert per rank) under ZeRO-1 within 1e-6 of one rank;
#   - the checkpoints stay layout-independent (EP4 ↔ EP1 too): the ZeRO-3 EP2 run's step-2 checkpoint resumed at
#     one rank (EP1), and the one-rank run's step-2 checkpoint resumed at EP2 × DP4 ZeRO-1, each
#     reach the uninterrupted run's weights within 1e-6;
#   - the broken variant (VFM_TEST_BREAK=ep: two rows of one dispatch all-to-all swapped, build/
#     vfm-faults) writes its last checkpoint and ends farther than 1e-6 from one rank (observed
#     1e-5: a swap of two slots' rows moves the gradients little);
#   - bad sizes exit 2 naming the key.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_moe.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "expert-parallel training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL --mca mpi_yield_when_idle 1"
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=4 train.global_batch_size=4 checkpoint.save_interval=2 train.threads=1 logger.level=info model.num_moe_experts=4"
VAL="train.eval_interval=2 train.eval_iters=1 model.val_generation_num_steps=2"
TC="model.moe_router_load_balancing_type=aux_loss model.moe_router_topk=2 model.moe_z_loss_coeff=0.01"
EP="model.expert_model_parallel_size=2"
Z1="ddp.use_distributed_optimizer=true"
Z3="ddp.use_megatron_fsdp=true ddp.data_parallel_sharding_strategy=optim_grads_params ddp.fsdp_unsharded_accumulation=true"

# train NAME NP OVERRIDES...: a run into $T/NAME
train() {
    name=$1; np=$2; shift 2
    timeout 300 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
}
# The bound of these checks: 1e-6, tighter than design §3's 1e-5 (observed: at most 2e-8), because
# the broken variant's swap of two dispatched rows of one rank ends only about 1e-5 away.
near() { $VFM checkpoint diff "$1" "$2" --atol 1e-6 --quiet; }

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/ec1 $VAL > $T/ec1.log 2>&1
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/tc1 $TC > $T/tc1.log 2>&1
check "one rank, 4 steps, both routers" test -f $T/ec1/iter_0000004/DONE -a -f $T/tc1/iter_0000004/DONE

train ec_ep2 2 $EP $VAL ddp.use_distributed_optimizer=false
check "EP2 × DP2 (expert choice, validating) states ep=2" states $T/ec_ep2.log world=2 dp=2 ep=2 sharding=no_shard
check "and matches one rank within 1e-6 after 4 steps" near $T/ec1 $T/ec_ep2
check "both wrote their validation samples at steps 2 and 4" sh -c \
    "test \$(ls $T/ec_ep2/validation_generation/step=*_rank=*.npy | wc -l) = 4 && test \$(grep -c val_loss $T/ec_ep2/metrics.jsonl) = 2"
train tc_ep2 2 $EP $TC
check "EP2 × DP2 token choice top-2 states ep=2" states $T/tc_ep2.log world=2 dp=2 ep=2
check "and matches one rank within 1e-6 after 4 steps" near $T/tc1 $T/tc_ep2

train ec_ep2_z1 4 $EP $Z1 ddp.overlap_grad_reduce=true
check "EP2 within DP4 under ZeRO-1 (buckets issued during backward) states ep=2" states $T/ec_ep2_z1.log world=4 dp=4 ep=2 sharding=optim
check "and matches one rank within 1e-6" near $T/ec1 $T/ec_ep2_z1
train ec_ep2_z3 4 $EP $Z3
check "EP2 within DP4 under ZeRO-3 states ep=2" states $T/ec_ep2_z3.log world=4 dp=4 ep=2 sharding=optim_grads_params
check "and equals ZeRO-1 at the same layout bit for bit (weights and Adam moments)" sh -c \
    "$VFM checkpoint diff $T/ec_ep2_z1 $T/ec_ep2_z3 --atol 0 --quiet && cmp -s $T/ec_ep2_z1/iter_0000004/optim.safetensors $T/ec_ep2_z3/iter_0000004/optim.safetensors"

# under pipeline parallelism: PP2 × EP2 (DP2, ZeRO-1), against one rank padding its packs as PP does
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/fixed1 train.fixed_pack_length=512 > $T/fixed1.log 2>&1
train pp2_ep2 4 $EP $Z1 model.pipeline_model_parallel_size=2
check "PP2 × EP2 × DP2 under ZeRO-1 states pp=2 ep=2" states $T/pp2_ep2.log world=4 dp=2 pp=2 ep=2 sharding=optim
check "and matches one rank (packs padded to 512 rows) within 1e-6" near $T/fixed1 $T/pp2_ep2

# the seeds' two EP rows (MoE under TP, SP and CP; EP over the CP pair, carved out of DP×CP), with
# grouped-query attention so that TP2 splits the kv heads
GQA="model.num_query_groups=2"
TPCP="model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=2"
timeout $RUN_LIMIT $VFM train $ARGS $GQA checkpoint.save=$T/gqa1 > $T/gqa1.log 2>&1
timeout $RUN_LIMIT $VFM train $ARGS $GQA checkpoint.save=$T/gqa1_fixed train.fixed_pack_length=512 > $T/gqa1_fixed.log 2>&1
train seed_pp 8 $EP $Z1 $GQA $TPCP model.pipeline_model_parallel_size=2
check "CP2 × TP2+SP × PP2 × ZeRO-1 × EP2 (8 ranks) states its layout" states $T/seed_pp.log world=8 dp=1 pp=2 cp=2 tp=2 sp=1 ep=2 sharding=optim
check "and matches one rank (packs padded to 512 rows) within 1e-6" near $T/gqa1_fixed $T/seed_pp
train seed_z3 4 $EP $Z3 $GQA $TPCP
check "CP2 × TP2+SP × ZeRO-3 × EP2 (4 ranks) states its layout" states $T/seed_z3.log world=4 dp=1 cp=2 tp=2 sp=1 ep=2 sharding=optim_grads_params
check "and matches one rank within 1e-6" near $T/gqa1 $T/seed_z3
VFM_TEST_BREAK=ep timeout 300 $MPIRUN -np 4 -x VFM_TEST_BREAK $VFM_FAULTS train $ARGS $EP $Z3 $GQA $TPCP \
    checkpoint.save=$T/seed_z3_broken > $T/seed_z3_broken.log 2>&1
check "and with an all-to-all's rows permuted ends farther than 1e-6 from one rank" far $T/gqa1 $T/seed_z3_broken 1e-6

# layout-independent checkpoints: EP2 → EP1 and EP1 → EP2, EP4 → EP1 and EP1 → EP4 (one expert per rank)
train ec_ep4 4 model.expert_model_parallel_size=4 $Z1
check "EP4 × DP4 under ZeRO-1 (one expert per rank) states ep=4" states $T/ec_ep4.log world=4 dp=4 ep=4 sharding=optim
check "and matches one rank within 1e-6" near $T/ec1 $T/ec_ep4
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/ep4_to_ep1 --resume $T/ec_ep4/iter_0000002 > $T/ep4_to_ep1.log 2>&1
check "the EP4 checkpoint of step 2 resumed at one rank reaches the uninterrupted run within 1e-6" \
    sh -c "grep -q 'resumed from $T/ec_ep4/iter_0000002 (step 2)' $T/ep4_to_ep1.log && $VFM checkpoint diff $T/ec1 $T/ep4_to_ep1 --atol 1e-6 --quiet"
train to_ep4 4 model.expert_model_parallel_size=4 $Z1 --resume $T/ec1/iter_0000002
check "the one-rank checkpoint of step 2 resumed at EP4 reaches it within 1e-6" \
    sh -c "grep -q 'resumed from $T/ec1/iter_0000002 (step 2)' $T/to_ep4.log && $VFM checkpoint diff $T/ec1 $T/to_ep4 --atol 1e-6 --quiet"
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/to_ep1 --resume $T/ec_ep2_z3/iter_0000002 > $T/to_ep1.log 2>&1
check "the ZeRO-3 EP2 checkpoint of step 2 resumed at one rank reaches the uninterrupted run within 1e-6" \
    sh -c "grep -q 'resumed from $T/ec_ep2_z3/iter_0000002 (step 2)' $T/to_ep1.log && $VFM checkpoint diff $T/ec1 $T/to_ep1 --atol 1e-6 --quiet"
train to_ep2 4 $EP $Z1 --resume $T/ec1/iter_0000002
check "the one-rank checkpoint of step 2 resumed at EP2 × DP4 ZeRO-1 reaches it within 1e-6" \
    sh -c "grep -q 'resumed from $T/ec1/iter_0000002 (step 2)' $T/to_ep2.log && $VFM checkpoint diff $T/ec1 $T/to_ep2 --atol 1e-6 --quiet"

# the broken variant: one dispatch all-to-all's rows permuted
VFM_TEST_BREAK=ep timeout 300 $MPIRUN -np 2 -x VFM_TEST_BREAK $VFM_FAULTS train $ARGS $EP checkpoint.save=$T/broken \
    > $T/broken.log 2>&1
check "EP2 with an all-to-all's rows permuted ends farther than 1e-6 from one rank" far $T/ec1 $T/broken 1e-6

# bad sizes: exit 2, one line naming the key
exit2() { # NP OVERRIDES...: exit 2 and the key named
    np=$1; shift
    timeout 120 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=null "$@" > $T/bad.log 2>&1
    rc=$?
    test $rc = 2 && grep -q "model.expert_model_parallel_size" $T/bad.log || { echo "   exit $rc:"; tail -3 $T/bad.log; return 1; }
}
check "EP that does not divide the experts exits 2" exit2 1 model.expert_model_parallel_size=3
check "EP without experts exits 2" exit2 1 model.num_moe_experts=0 model.expert_model_parallel_size=2
check "EP that does not divide DP exits 2" exit2 2 model.expert_model_parallel_size=4
finish
