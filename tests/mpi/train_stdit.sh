#!/bin/sh
# ST-DiT's hybrid parallelism end to end on CPU ranks (issue 28; docs/parallel.md "ST-DiT's hybrid
# parallelism"): `vfm train` of model.variant=stdit (2 ST-DiT layers: spatial, temporal, full,
# temporal blocks) at CP2, CP3 and CP4 with model.cp_comm_type hybrid (the default for stdit),
# TP2+SP × CP2 and PP2 × CP2, each 20 steps from the same seed and global batch as one rank; the
# weights and EMA weights must end within 1e-5 of one rank's (max|a-b| over every tensor). Why
# 1e-5: one step of each layout is within 1.1e-5·max|ref| of one rank tensor by tensor
# (tests/mpi/test_dit_parallel.c, observed <= 3.5e-6 for gradients and 1e-7 for the stepped
# weights), and AdamW moves an element by at most about lr = 2e-3 per step whatever the gradient's
# rounding, so 20 steps keep differences at the 1e-7 level; a broken run (VFM_TEST_BREAK=st: block
# 1's all-to-all skipped) is off by 1e-2 after one step. The mock packs mix a 3-frame video (frames
# no multiple of 2 or 4, positions 15 no multiple of 2 or 4), a 2-frame one, an image and a 1-token
# image. CP3 pads slots to lcm(64, 3) = 192, so its one-rank reference uses 192-row slots.
# Also: plain p2p trains the same; selective and full recomputation give CP2 hybrid's bits; ZeRO-3
# over DP2 × CP2 trains DP2's model; combinations that make no sense exit 2 with one line naming the key.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_mpi_stdit.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v mpirun >/dev/null 2>&1; then
    skip "ST-DiT hybrid training" "mpirun is not installed"; finish; exit
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$MPIRUN_LOCAL --mca mpi_yield_when_idle 1 -x VFM_TEST_BREAK" # common.inc's flags
ARGS="train.device=cpu --config configs/tiny-mock.yaml train.train_iters=20 train.global_batch_size=2 checkpoint.save_interval=0 train.threads=1 logger.level=warn dataset.mock_shapes=[4x3x6x10,4x2x4x6,4x1x8x10,4x1x2x2] ema.enabled=true ema.decay=0.9 model.variant=stdit model.num_layers=2 model.stdit_full_attention_every=2 model.num_query_groups=2"
BOUND=1e-5

train() { # NAME NP OVERRIDES...: a 20-step run into $T/NAME (one rank without mpirun)
    name=$1; np=$2; shift 2
    if [ "$np" = 1 ]; then timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1
    else timeout 300 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/$name "$@" > $T/$name.log 2>&1; fi
}
close() { $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet > /dev/null && $VFM checkpoint diff "$1" "$2" --atol "$3" --quiet --ema > /dev/null; }
layout() { # NAME NP REFERENCE OVERRIDES...
    name=$1; np=$2; ref=$3; shift 3
    train "$name" "$np" "$@"
    check "$name: 20 steps within $BOUND of one rank ($($VFM checkpoint diff $T/$ref $T/$name 2>/dev/null | tail -1 | sed 's/.*max/max/'))" \
        close $T/$ref $T/$name $BOUND
}

train one 1
train one_192 1 dataset.pad_multiple=192
check "one rank, 20 steps (64- and 192-row slots)" sh -c "test -f $T/one/iter_0000020/DONE && test -f $T/one_192/iter_0000020/DONE"
layout cp2_hybrid 2 one model.context_parallel_size=2
layout cp3_hybrid 3 one_192 model.context_parallel_size=3
layout cp4_hybrid 4 one model.context_parallel_size=4
layout cp2_p2p 2 one model.context_parallel_size=2 model.cp_comm_type=p2p
layout tp2_sp_cp2_hybrid 4 one model.context_parallel_size=2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
layout pp2_cp2_hybrid 4 one model.context_parallel_size=2 model.pipeline_model_parallel_size=2
layout cp4_hybrid_full_a2a_p2p 4 one model.context_parallel_size=4 model.stdit_full_cp_comm_type=a2a+p2p \
    "model.hierarchical_context_parallel_sizes=[2,2]"

# recomputation replays the all-to-alls and rings: the same bits; ZeRO-3 over DP2 × CP2 within the bound
train cp2_selective 2 model.context_parallel_size=2 model.recompute_granularity=selective
check "CP2 hybrid with selective recomputation equals CP2 hybrid without, bitwise" close $T/cp2_hybrid $T/cp2_selective 0
train cp2_full 2 model.context_parallel_size=2 model.recompute_granularity=full model.recompute_method=uniform \
    model.recompute_num_layers=1
check "CP2 hybrid with full recomputation (uniform 1) equals CP2 hybrid without, bitwise" close $T/cp2_hybrid $T/cp2_full 0
train dp2_one 2
layout dp2_cp2_zero3 4 dp2_one model.context_parallel_size=2 ddp.use_megatron_fsdp=true \
    ddp.data_parallel_sharding_strategy=optim_grads_params train.global_batch_size=2

export VFM_TEST_BREAK=st
VFM_PLAIN=$VFM; VFM=$VFM_FAULTS # the test build: its VFM_TEST_* hooks are live
train broken_st 2 model.context_parallel_size=2
VFM=$VFM_PLAIN
check "an all-to-all skipped: CP2 hybrid ends far from one rank" sh -c "! $VFM checkpoint diff $T/one $T/broken_st --atol $BOUND --quiet > /dev/null"
unset VFM_TEST_BREAK

$VFM model info --preset stdit3-xl --seq 98304 --frames 24 model.context_parallel_size=4 \
    model.stdit_full_attention_every=7 > $T/info.log 2>&1
check "vfm model info prints the CP bytes per block of each span ($(grep -o 'spatial 0.00 + 0.00 MB (24 blocks), temporal [0-9.]* + [0-9.]* MB' $T/info.log))" \
    grep -q 'CP bytes per block (one sample of 24 frames of 4096 tokens.*full .* MB (4 blocks), spatial 0.00 + 0.00 MB (24 blocks), temporal .* MB (28 blocks)' $T/info.log

bad() { # NAME NP WANT OVERRIDES...: exit 2, one line naming WANT, no run directory
    name=$1; np=$2; want=$3; shift 3
    timeout 60 $MPIRUN -np "$np" $VFM train $ARGS checkpoint.save=$T/bad "$@" > $T/bad.log 2>&1
    rc=$?
    lines=$(grep -c '^vfm' $T/bad.log)
    check "$name: exit $rc (2), $lines line (1) naming '$want', no run directory" \
        sh -c "test $rc = 2 && test $lines = 1 && grep -q -F '$want' $T/bad.log && test ! -e $T/bad"
}
bad "hybrid for a variant without factorised attention" 2 "model.cp_comm_type" model.variant=dfm \
    model.stdit_full_attention_every=0 model.context_parallel_size=2 model.cp_comm_type=hybrid
bad "stdit under a2a" 2 "model.cp_comm_type" model.context_parallel_size=2 model.cp_comm_type=a2a
bad "the full attention's scheme without hybrid" 2 "model.stdit_full_cp_comm_type" model.context_parallel_size=2 \
    model.cp_comm_type=p2p model.stdit_full_cp_comm_type=a2a
bad "full attention every k for another variant" 2 "model.stdit_full_attention_every" model.variant=dfm
finish
