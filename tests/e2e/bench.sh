#!/bin/sh
# vfm bench on the CPU (a smoke test, never a time bound): a tiny model's timed steps print every
# figure positive (ms/step, tokens/s, samples/s, TFLOP/s, MFU with and without attention, peak
# memory) in the text block and the bench-json line; --profile prints the per-op table; --check
# writes the forward check the PyTorch peer reads; bad command lines exit 2.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_e2e_bench.XXXXXX)
trap 'rm -rf "$T"' EXIT

# a bench-json field as a number (empty when absent)
field() { sed -nE "s/^bench-json: .*\"$2\":([-0-9.eE+]+).*/\1/p" "$1"; }
positive() { v=$(field "$1" "$2"); [ -n "$v" ] && awk -v v="$v" 'BEGIN { exit !(v > 0) }'; }

$VFM bench --preset tiny --seq 128 --text 8 --warmup 1 --steps 2 --profile --check $T/check train.threads=1 train.device=cpu \
    > $T/out.txt 2> $T/err.txt
check "bench --preset tiny --seq 128 runs" test $? = 0
for f in ms_per_step tokens_per_s samples_per_s tflops mfu mfu_no_attn flops_per_step peak_host_bytes params; do
    check "bench-json $f is positive" positive $T/out.txt $f
done
check "bench-json: one sample of 128 tokens per step" grep -q '"tokens_per_step":128,"samples_per_step":1' $T/out.txt
for label in "ms/step:" "tokens/s:" "samples/s:" "model TFLOP/s:" "MFU:" "peak memory:"; do
    check "prints '$label'" grep -q "^$label" $T/out.txt
done
check "MFU line gives both figures" grep -qE '^MFU: +[0-9.]+% of [0-9.]+ TFLOP/s .*without attention FLOPs [0-9.]+%' $T/out.txt
check "--profile: per-op table with linear_forward and attention_backward" \
    sh -c "grep -q '^per-op time (wall clock' $T/out.txt && grep -qE '^  linear_forward +cpu +[0-9.]+ +[0-9.]+' $T/out.txt \
           && grep -qE '^  attention_backward +cpu' $T/out.txt && grep -q 'adamw_step' $T/out.txt"
check "--check writes model, check and bench.json" \
    sh -c "test -s $T/check/model.safetensors && test -s $T/check/check.safetensors && grep -q '\"flops_per_step\"' $T/check/bench.json"

$VFM bench --config configs/tiny-mock.yaml --warmup 0 --steps 1 train.threads=1 train.device=cpu > $T/cfg.txt 2>&1
check "bench --config tiny-mock (2 packs per step) runs" sh -c "grep -q '^step: *2 packs' $T/cfg.txt && grep -q '^bench-json' $T/cfg.txt"

$VFM bench --preset tiny --seq 64 --check $T/only --check-only train.threads=1 train.device=cpu > $T/only.txt 2>&1
check "--check-only writes the check and times nothing" \
    sh -c "test -s $T/only/bench.json && grep -q 'nothing timed' $T/only.txt && ! grep -q '^bench-json' $T/only.txt"

expect2() { name=$1; shift; "$@" > $T/bad.txt 2>&1; rc=$?; check "$name exits 2" test $rc = 2; }
expect2 "--steps 0" $VFM bench --preset tiny --seq 64 --steps 0
expect2 "--seq abc" $VFM bench --preset tiny --seq abc
expect2 "no model given" $VFM bench
expect2 "--text without --seq" $VFM bench --preset tiny --text 8
expect2 "--check-only without --check" $VFM bench --preset tiny --seq 64 --check-only
expect2 "an unknown key" $VFM bench --preset tiny --seq 64 modle.hidden_size=8
finish
