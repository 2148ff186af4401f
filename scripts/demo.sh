#!/bin/sh
# make demo: prepare the synthetic image+video set, train the tiny DiT (on the GPU when there is one), sample one
# picture per caption of a fixed list beside a real example, and score the colours and the shapes.
# Everything goes to out/demo/. Environment: DEMO_ITERS overrides train.train_iters; DEMO_ARGS adds
# training overrides (e.g. DEMO_ARGS=diffusion.objective=flow, or train.device=cuda); DEMO_SAMPLE_ARGS
# adds sampling flags (--device cuda); VFM is the binary ("scripts/gpu_run.sh build/vfm" on the GPU
# machine).
set -e
cd "$(dirname "$0")/.."
VFM=${VFM:-build/vfm}
OUT=out/demo
start=$(date +%s)
mkdir -p $OUT
echo "== 1/3 prepare: synthetic shapes (2400 images, 200 short videos, centred) -> $OUT/data"
$VFM prepare synthetic --out $OUT/data --images 2400 --videos 200 --seed 7 --position-spread 0 --force
echo "== 2/3 train: tiny DiT (configs/demo.yaml${DEMO_ARGS:+ $DEMO_ARGS}) -> $OUT/run"
rm -rf $OUT/run
$VFM train --config configs/demo.yaml ${DEMO_ITERS:+train.train_iters=$DEMO_ITERS} $DEMO_ARGS
echo "== 3/3 sample: one picture per caption of configs/demo-prompts.txt, beside a real example"
$VFM sample --checkpoint $OUT/run --out $OUT --prompts configs/demo-prompts.txt --compare-dataset $OUT/data \
    --steps 18 --guidance 3 --seed 1 --score-colours --score-shapes $DEMO_SAMPLE_ARGS | tee $OUT/score.txt
end=$(date +%s)
echo "demo done in $((end - start)) s: $OUT/grid.png (pairs: a real example, then the generated picture),"
echo "$OUT/sample_*.png, $OUT/samples.json; the checkpoint is in $OUT/run"
