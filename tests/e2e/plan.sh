#!/bin/sh
# `vfm plan` from the command line (issue 30; docs/plan.md): bad inputs exit 2 with one line (an
# unknown preset, --gpus 0, a world too small for any layout, which says by how much), the table and
# the overrides of the best layout, keys on the command line kept fixed, --json best first with every
# field, --versus, the overrides the planner prints train as they are (2 CPU ranks), and --calibrate
# from a `vfm bench --profile` file. (The memory model against runs: tests/mpi/plan_memory.sh; the
# seeds' table: tests/unit/test_layout_plan.c.)
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
T=$(mktemp -d /tmp/vfm_plan.XXXXXX)
trap 'rm -rf "$T"' EXIT

# one_line_exit2 NAME ARGS...: exit 2, one line on stderr, nothing on stdout
one_line_exit2() {
    $VFM plan "$@" > $T/out 2> $T/err
    rc=$?
    [ "$rc" = 2 ] && [ "$(wc -l < $T/err)" = 1 ] && [ ! -s $T/out ]
}
check "an unknown preset: exit 2, one line" one_line_exit2 --preset dit-99b --seq 8192 --gpus 8
check "--gpus 0: exit 2, one line" one_line_exit2 --preset dit-7b --seq 8192 --gpus 0
check "DiT-28B on one H100: exit 2, one line saying by how much" \
    sh -c "$VFM plan --preset dit-28b --seq 8192 --gpus 1 > $T/o 2> $T/e; test \$? = 2 && grep -q 'GiB more than the' $T/e && test \$(wc -l < $T/e) = 1"
check "an unknown --gpu: exit 2, one line" one_line_exit2 --preset dit-7b --seq 8192 --gpus 8 --gpu h100

$VFM plan --preset dit-7b --seq 8192 --gpus 256 --explain > $T/seven.txt 2>&1
check "DiT-7B 8k on 256 H100s: a table, the best layout's vfm train line, the explanation" \
    sh -c "grep -q '^ 1  ' $T/seven.txt && grep -q '^  vfm train --config F model.tensor_model_parallel_size=' $T/seven.txt && grep -q '^  total ' $T/seven.txt"
$VFM plan --preset dit-7b --seq 8192 --gpus 256 --json model.tensor_model_parallel_size=4 > $T/tp4.json
check "--json: best first, with every field; a key on the command line is kept" \
    sh -c "grep -q '^{\"layouts\":\[{\"layout\":\"TP4' $T/tp4.json && grep -q '\"fits\":true' $T/tp4.json &&
           for k in overrides memory_bytes_per_gpu step_seconds tokens_per_second_per_gpu model_tflops_per_gpu dominant_cost; do
               grep -q \"\\\"\$k\\\":\" $T/tp4.json || exit 1; done; ! grep -q 'tensor_model_parallel_size\":\"[^4]' $T/tp4.json"
$VFM plan --preset dit-7b --seq 8192 --gpus 256 --top 1 \
    --versus "model.tensor_model_parallel_size=2 model.sequence_parallel=true model.context_parallel_size=1 model.pipeline_model_parallel_size=1" > $T/versus.txt
check "--versus: the seeds' TP2+SP beside the best, and why" grep -q '^versus TP2+SP × DP128.* per step against' $T/versus.txt

if command -v mpirun >/dev/null 2>&1; then
    $VFM plan --config configs/tiny-mock.yaml --seq 64 --gpus 2 --gpu cpu > $T/tiny.txt
    overrides=$(sed -n 's/^  vfm train --config F //p' $T/tiny.txt)
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
    check "the overrides of the best layout on 2 CPU ranks train ($overrides)" \
        timeout 120 $MPIRUN_LOCAL -np 2 $VFM train --config configs/tiny-mock.yaml $overrides train.device=cpu \
        train.train_iters=1 train.threads=1 checkpoint.save=$T/run logger.level=warn
else
    skip "the overrides of the best layout train" "mpirun is not installed"
fi

$VFM bench --preset tiny --seq 256 --text 16 --steps 2 --warmup 1 --profile train.device=cpu train.threads=1 > $T/bench.txt 2>&1
$VFM plan --preset dit-7b --seq 8192 --gpus 256 --top 1 --explain --calibrate $T/bench.txt > $T/cal.txt 2>&1
check "--calibrate: the GEMM and attention rates of a vfm bench --profile run" grep -q '^  GEMMs .*, calibrated)' $T/cal.txt
# the GPU check's plan step (scripts/gpu_check.sh plan-dit-xl) on this CPU run: the plumbing only — a
# CPU's measured rates under an H100's memory and link figures predict nothing
printf 'model:\n  preset: tiny\n' > $T/tiny.yaml
scripts/gpu_check_steps.sh plan $T/tiny.yaml $T/bench.txt --text 16 > $T/pvb.txt 2>&1
# its prediction is the step --explain prints for the best layout (the first of --json), and the
# measured step is the bench's
plan_vs_bench() {
    explained=$(sed -nE 's/^  step +([0-9.]+) s .*/\1/p' $T/pvb.txt)
    measured=$(sed -nE 's/.*"ms_per_step":([0-9.e+-]+).*/\1/p' $T/bench.txt | awk '{printf "%.4f", $1 / 1e3}')
    [ -n "$explained" ] && [ -n "$measured" ] &&
        grep -qE "^plan-vs-bench: predicted $explained s per step \(h100-80gb, calibrated\), measured $measured s, ratio [0-9.]+\$" $T/pvb.txt
}
check "the GPU check's plan step: the calibrated prediction of the benchmarked layout beside the measured step" plan_vs_bench
grep -v '"profile"' $T/bench.txt | sed 's/,"profile":.*}$/}/' > $T/noprofile.txt
check "--calibrate with a bench run without --profile: exit 2, one line" \
    one_line_exit2 --preset dit-7b --seq 8192 --gpus 256 --calibrate $T/noprofile.txt
finish
