#!/bin/sh
# Weights in and out of the DiT reference's world (docs/models.md): an adaln-zero checkpoint exported
# with the reference's pos_embed, imported back into a new run bit for bit (and exported again to the
# same bytes), sampled and fine-tuned from; torch.save state dicts (plain, and a training checkpoint
# through --prefix); the refusals (pos_embed of a dfm model, an existing run, a size without a head
# count); and docs/models.md's preset table is what `vfm model presets --markdown` prints.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_interop.XXXXXX)
trap 'rm -rf "$T"' EXIT
AZ="train.device=cpu --config configs/tiny-mock.yaml model.variant=adaln-zero model.num_classes=10 train.threads=2 logger.level=warn"

timeout $RUN_LIMIT $VFM train $AZ train.train_iters=2 checkpoint.save=$T/run > $T/train.log 2>&1
check "adaln-zero trains 2 steps" test -f $T/run/iter_0000002/DONE
$VFM export --checkpoint $T/run --to $T/dit.safetensors --input-size 16 > $T/export.log 2>&1
check "export --input-size 16 writes pos_embed [1, 64, 64]" grep -q "pos_embed \[1, 64, 64\] for input size 16" $T/export.log
$VFM import --from $T/dit.safetensors --variant adaln-zero --out $T/imported > $T/import.log 2>&1
check "import finds 4 heads from the preset and skips pos_embed" grep -q "pos_embed skipped.*4 heads" $T/import.log
check "imported weights equal the checkpoint's bit for bit" \
    cmp -s $T/run/iter_0000002/model.safetensors $T/imported/iter_0000000/model.safetensors
$VFM export --checkpoint $T/imported --to $T/dit2.safetensors --input-size 16 > /dev/null 2>&1
check "exporting the import gives the same file" cmp -s $T/dit.safetensors $T/dit2.safetensors
$VFM sample --device cpu --checkpoint $T/imported --out $T/samples --steps 2 > /dev/null 2>&1
check "the imported run samples" test -f $T/samples/sample_000.npy
timeout $RUN_LIMIT $VFM train $AZ train.train_iters=1 checkpoint.save=$T/ft checkpoint.load=$T/imported checkpoint.finetune=true \
    logger.level=info > $T/ft.log 2>&1
check "the imported run fine-tunes" grep -q "fine-tuning from $T/imported/iter_0000000" $T/ft.log

timeout $RUN_LIMIT $VFM train --config configs/tiny-mock.yaml train.device=cpu train.train_iters=1 train.threads=2 logger.level=warn \
    checkpoint.save=$T/dfm > /dev/null 2>&1
$VFM export --checkpoint $T/dfm --to $T/dfm.safetensors --input-size 16 > $T/dfm_export.log 2>&1
rc=$?
check "export --input-size of a dfm checkpoint exits 2 naming the variant" \
    sh -c "test $rc = 2 && grep -q 'only model.variant=adaln-zero' $T/dfm_export.log"
$VFM export --checkpoint $T/dfm --to $T/dfm.safetensors > /dev/null 2>&1
check "plain export writes a PyTorch state dict (format pt; its tensors: the import below, bit for bit)" \
    sh -c "head -c 65536 $T/dfm.safetensors | grep -q '\"format\": *\"pt\"'"
# torch.save state dicts (reference/make_model_fixtures.py): a tiny DiT with learned sigma and pos_embed
PT=tests/fixtures/models
$VFM import --from $PT/dit_tiny.pt --variant adaln-zero --out $T/pt > $T/pt.log 2>&1
rc=$?
check "a .pt of a size no preset has asks for the head count (exit 2)" \
    sh -c "test $rc = 2 && grep -q 'model.num_attention_heads=H' $T/pt.log"
$VFM import --from $PT/dit_tiny.pt --variant adaln-zero --out $T/pt model.num_attention_heads=2 > $T/pt.log 2>&1
check "a torch.save state dict imports (learned sigma, 3 classes, pos_embed skipped)" \
    sh -c "grep -q 'imported 21 tensors.*pos_embed skipped' $T/pt.log && grep -q 'learn_sigma: true' $T/pt/iter_0000000/meta.json"
$VFM export --checkpoint $T/pt --to $T/pt.safetensors --input-size 8 > /dev/null 2>&1
$VFM import --from $T/pt.safetensors --variant adaln-zero --out $T/pt2 model.num_attention_heads=2 > /dev/null 2>&1
check "its safetensors export imports to the same weights" \
    cmp -s $T/pt/iter_0000000/model.safetensors $T/pt2/iter_0000000/model.safetensors
$VFM import --from $PT/dit_tiny_train_ckpt.pt --prefix ema --variant adaln-zero --out $T/pt3 \
    model.num_attention_heads=2 > /dev/null 2>&1
check "--prefix ema takes a training checkpoint's EMA weights" \
    cmp -s $T/pt/iter_0000000/model.safetensors $T/pt3/iter_0000000/model.safetensors
$VFM import --from $PT/dit_tiny_train_ckpt.pt --variant adaln-zero --out $T/pt4 > $T/pt4.log 2>&1
rc=$?
check "without --prefix a nested checkpoint is refused (exit 2), naming the prefix" \
    sh -c "test $rc = 2 && grep -q 'pass --prefix model' $T/pt4.log"
$VFM import --from $T/dit.safetensors --variant adaln-zero --out $T/run > $T/again.log 2>&1
rc=$?
check "import into a run with checkpoints exits 2" test $rc = 2
$VFM import --from $T/dfm.safetensors --variant adaln-zero --out $T/wrong > $T/wrong.log 2>&1
rc=$?
check "import of a dfm state dict as adaln-zero fails naming the tensor" \
    sh -c "test $rc != 0 && grep -q 'x_embedder.proj.weight' $T/wrong.log"
$VFM import --from $T/dfm.safetensors --variant dfm --out $T/dfm_imported --preset tiny > /dev/null 2>&1
check "a dfm state dict imports with its preset, bit for bit" \
    cmp -s $T/dfm/iter_0000001/model.safetensors $T/dfm_imported/iter_0000000/model.safetensors

$VFM model presets --markdown > $T/presets.md
check "docs/models.md holds the table vfm model presets --markdown prints" \
    sh -c "sed -n '/<!-- vfm model presets --markdown -->/,/<!-- end -->/p' docs/models.md | sed '1d;\$d' | cmp -s - $T/presets.md"
$VFM model info --preset dit-xl --dit-paper > $T/info.txt
check "DiT-XL/2 in the paper's setting: 674.8 M trainable" grep -q "trainable 674834720 (674.8 M)" $T/info.txt
finish
