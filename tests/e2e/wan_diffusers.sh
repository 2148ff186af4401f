#!/bin/sh
# Wan 2.1 in and out of diffusers (docs/models.md "Wan 2.1"): the save_pretrained folder of
# tests/fixtures/wan imports (also sharded with its index), exports with --format diffusers and
# imports back bit for bit, samples and fine-tunes; an image-to-video config and a non-wan export are
# refused with exit 2 naming the field; the presets' parameter counts; `vfm model info` at Wan's sizes.
# (reference/make_wan_fixtures.py --check DIR loads the export in diffusers with strict=True.)
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_wan.XXXXXX)
trap 'rm -rf "$T"' EXIT
W=tests/fixtures/wan/tiny

$VFM import --from $W --out $T/imp > $T/imp.log 2>&1
check "a diffusers folder imports as wan" grep -q "wan, hidden 32, 2 layers, 2 heads" $T/imp.log
$VFM export --checkpoint $T/imp --to $T/exp --format diffusers > $T/exp.log 2>&1
check "export --format diffusers writes config.json and the weights" \
    sh -c "test -f $T/exp/config.json && test -f $T/exp/diffusion_pytorch_model.safetensors"
$VFM import --from $T/exp --out $T/imp2 > /dev/null 2>&1
check "the export imports back bit for bit" cmp -s $T/imp/iter_0000000/model.safetensors $T/imp2/iter_0000000/model.safetensors
mkdir -p $T/sharded
cp $W/config.json $T/sharded/
cp $W/diffusion_pytorch_model.safetensors $T/sharded/diffusion_pytorch_model-00001-of-00001.safetensors
printf '{"metadata": {}, "weight_map": {"proj_out.bias": "diffusion_pytorch_model-00001-of-00001.safetensors"}}\n' \
    > $T/sharded/diffusion_pytorch_model.safetensors.index.json
$VFM import --from $T/sharded --out $T/imp3 > /dev/null 2>&1
check "a sharded folder (the index's shards) imports the same" \
    cmp -s $T/imp/iter_0000000/model.safetensors $T/imp3/iter_0000000/model.safetensors
mkdir -p $T/i2v
cp $W/diffusion_pytorch_model.safetensors $T/i2v/
sed 's/"image_dim": null/"image_dim": 1280/' $W/config.json > $T/i2v/config.json
$VFM import --from $T/i2v --out $T/imp4 > $T/i2v.log 2>&1
rc=$?
check "an image-to-video config exits 2 naming image_dim" sh -c "test $rc = 2 && grep -q 'image_dim is set' $T/i2v.log"

TINY="train.device=cpu train.threads=2 logger.level=info model.variant=wan model.hidden_size=32 model.num_attention_heads=2 \
 model.num_layers=2 model.ffn_hidden_size=48 model.in_channels=4 model.out_channels=4 model.crossattn_emb_size=24 \
 model.layernorm_epsilon=1e-6 dataset.mock=true dataset.context_embeddings_dim=24 diffusion.objective=flow"
timeout $RUN_LIMIT $VFM train $TINY train.train_iters=1 train.global_batch_size=1 checkpoint.save=$T/ft checkpoint.load=$T/imp \
    checkpoint.finetune=true > $T/ft.log 2>&1
check "the import fine-tunes" grep -q "fine-tuning from $T/imp/iter_0000000" $T/ft.log
$VFM sample --device cpu --checkpoint $T/imp --out $T/samples --steps 2 > /dev/null 2>&1
check "the import samples" test -f $T/samples/sample_000.npy
timeout $RUN_LIMIT $VFM train --config configs/tiny-mock.yaml train.device=cpu train.train_iters=1 train.threads=2 logger.level=warn \
    checkpoint.save=$T/dfm > /dev/null 2>&1
$VFM export --checkpoint $T/dfm --to $T/dfm_exp --format diffusers > $T/dfm.log 2>&1
rc=$?
check "export --format diffusers of a dfm checkpoint exits 2" sh -c "test $rc = 2 && grep -q 'model.variant=dfm' $T/dfm.log"

$VFM model info --preset wan2.1-1.3b > $T/small.txt
check "wan2.1-1.3b: 1,418,996,800 parameters" grep -q "parameters: 1418996800 " $T/small.txt
$VFM model info --preset wan2.1-14b --seq 75600 model.tensor_model_parallel_size=2 model.sequence_parallel=true \
    model.context_parallel_size=4 --world 128 > $T/big.txt
check "wan2.1-14b: 14,288,491,584 parameters" grep -q "parameters: 14288491584 " $T/big.txt
check "model info at 75,600 tokens prints FLOPs per token and per-rank memory" \
    sh -c "grep -q 'FLOPs for one sample of 75600 tokens' $T/big.txt && grep -qi 'per rank' $T/big.txt"
finish
