#!/bin/sh
# Training-time feedback end to end on pixel-space data (a small synthetic set): validation at the
# right steps writes its loss (metrics.jsonl), one picture per rank and TensorBoard scalars and
# images; the weights equal bit for bit those of the same run without validation. Flow matching
# and DDPM with a learned variance train on it, and `vfm sample` samples each with its own sampler
# (and judges colours and shapes).
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_validation.XXXXXX)
trap 'rm -rf "$T"' EXIT

$VFM prepare synthetic --out $T/data --images 48 --videos 4 --seed 5 --force > $T/prepare.log 2>&1
check "a small synthetic set" test -f $T/data/shard-000000.tar
ARGS="train.device=cpu --config configs/demo.yaml dataset.path=$T/data train.train_iters=6 checkpoint.save_interval=0 train.threads=2
      logger.level=warn model.val_generation_num_steps=3 train.eval_iters=1 dataset.task_encoder_seq_length=768"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/val train.eval_interval=3 > $T/val.log 2>&1
check "training with validation every 3 steps" test -f $T/val/iter_0000006/DONE
pictures() { ls "$1" | grep -E '\.(png|gif)$' | sed 's/\.[a-z]*$//' | tr '\n' ' '; }
check "validation pictures after steps 3 and 6" test "$(pictures $T/val/validation_generation)" = "step=3_rank=0 step=6_rank=0 "
check "an MP4 beside each validation GIF" sh -c \
    "cd $T/val/validation_generation && for f in \$(ls | grep 'gif\$'); do test -f \${f%.gif}.mp4 || exit 1; done"
check "two validation losses in metrics.jsonl, after step indices 2 and 5" sh -c \
    "test \"\$(grep -o '\"step\": [0-9]*, \"val_loss\"' $T/val/metrics.jsonl | tr -d -c '0-9\n' | tr '\n' ' ')\" = '2 5 '"
check "TensorBoard event file with the validation picture" sh -c \
    "f=\$(ls $T/val/tb_logs/events.out.tfevents.*) && grep -q 'val/generation' \$f && grep -q 'PNG' \$f && grep -q 'val/loss' \$f"

# enough validation packs to reach the set's videos: each kind's loss apart, its counts adding up
timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/kinds train.train_iters=1 train.eval_interval=1 train.eval_iters=12 \
    model.val_generation_num_steps=1 logger.level=info > $T/kinds.log 2>&1
check "validation names the image and the video samples' losses apart, their counts adding up" sh -c \
    "l=\$(grep -oE 'loss [0-9.]+ over [0-9]+ samples \\([0-9]+ packs\\) \\(images [0-9.]+ over [0-9]+, videos [0-9.]+ over [0-9]+\\)' $T/kinds.log) &&
     n=\$(echo \"\$l\" | sed -E 's/.* over ([0-9]+) samples.*images [0-9.]+ over ([0-9]+), videos [0-9.]+ over ([0-9]+).*/\\1 \\2 \\3/') &&
     set -- \$n && test \$1 = \$((\$2 + \$3)) && test \$3 -gt 0 &&
     grep -q '\"val_loss_images\": ' $T/kinds/metrics.jsonl && grep -q '\"val_loss_videos\": ' $T/kinds/metrics.jsonl"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/noval train.eval_interval=0 > $T/noval.log 2>&1
check "the same run without validation ends with bitwise equal weights" \
    cmp -s $T/val/iter_0000006/model.safetensors $T/noval/iter_0000006/model.safetensors

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/flow diffusion.objective=flow train.eval_interval=0 > $T/flow.log 2>&1
$VFM sample --device cpu --checkpoint $T/flow --out $T/flow_s --prompt "a red circle" --steps 4 --threads 2 > $T/flow_s.log 2>&1
check "flow matching trains and samples (Euler)" sh -c "grep -q 'flow, 4 steps' $T/flow_s.log && test -f $T/flow_s/sample_000.png"
printf 'a red circle\na blue cross\n' > $T/prompts.txt
$VFM sample --device cpu --checkpoint $T/flow --out $T/flow_j --prompts $T/prompts.txt --steps 4 --threads 2 \
    --score-colours --score-shapes > $T/flow_j.log 2>&1
check "sample --score-colours --score-shapes: both scores printed, each picture's verdicts in samples.json" sh -c \
    "grep -qE '^colour score: [0-9]+/2 = ' $T/flow_j.log && grep -qE '^shape score: [0-9]+/2 = ' $T/flow_j.log &&
     grep -q '\"shape_asked\": \"cross\"' $T/flow_j/samples.json && grep -q '\"shape_seen\"' $T/flow_j/samples.json &&
     grep -q '\"shape_score\"' $T/flow_j/samples.json && grep -q '\"colour_score\"' $T/flow_j/samples.json"
# each caption at its real example's canvas: the first samples of the set, with their captions and
# latent shapes read from the shard itself
: > $T/first.txt; : > $T/first_shapes.txt
for k in 00000000 00000001 00000002; do
    printf '%s\n' "$(tar -xOf $T/data/shard-000000.tar $k.json | sed -E 's/.*"caption":"([^"]*)".*/\1/')" >> $T/first.txt
    tar -xOf $T/data/shard-000000.tar $k.latent.npy | head -c 100 | grep -ao "'shape': ([0-9, ]*)" |
        sed -E "s/.*\((.*)\)/[\1]/; s/ //g" >> $T/first_shapes.txt
done
$VFM sample --device cpu --checkpoint $T/flow --out $T/flow_c --prompts $T/first.txt --steps 2 --threads 2 \
    --compare-dataset $T/data > $T/flow_c.log 2>&1
check "sample --compare-dataset: each caption sampled at its real example's canvas ($(tr '\n' ' ' < $T/first_shapes.txt))" sh -c \
    "tr -d ' \n' < $T/flow_c/samples.json | grep -o '\"shape\":\[[0-9,]*\]' | sed 's/\"shape\"://' > $T/got_shapes.txt &&
     cmp -s $T/first_shapes.txt $T/got_shapes.txt && test \$(sort -u $T/got_shapes.txt | wc -l) -gt 1"

timeout $RUN_LIMIT $VFM train $ARGS checkpoint.save=$T/ddpm diffusion.objective=ddpm model.learn_sigma=true train.eval_interval=0 \
    diffusion.p_mean=0 diffusion.p_std=1 > $T/ddpm.log 2>&1
$VFM sample --device cpu --checkpoint $T/ddpm --out $T/ddpm_s --prompt "a red circle" --steps 4 --ddim --threads 2 > $T/ddpm_s.log 2>&1
check "ddpm with a learned variance trains and samples (DDIM)" sh -c "grep -q 'ddpm, 4 steps' $T/ddpm_s.log && test -f $T/ddpm_s/sample_000.png"
$VFM sample --device cpu --checkpoint $T/ddpm --out $T/ddpm_c --class 3 --steps 4 > $T/ddpm_c.log 2>&1
check "--class on a model without classes exits 2" test $? = 2
finish
