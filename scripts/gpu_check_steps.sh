#!/bin/sh
# The composite steps of scripts/gpu_check.sh and gpu_check2.sh, as programs so that each runs
# under its own `timeout` (which cannot run a shell function). Run from the repository root on the
# GPU machine:
#   scripts/gpu_check_steps.sh peer CONFIG CHECK_DIR   the PyTorch peer on CONFIG against vfm's check
#                                                      (written on the CPU first when the GPU bench
#                                                      step did not write it)
#   scripts/gpu_check_steps.sh demo-gpu LOG_DIR        make demo's steps on the GPU; grid.png and the
#                                                      colour score copied to LOG_DIR
#   scripts/gpu_check_steps.sh two-ranks               the multi-rank unit tests on 2 ranks sharing
#                                                      the GPU ("NOT RUN: ..." without mpirun)
#   scripts/gpu_check_steps.sh plan CONFIG BENCH_LOG [ARGS]
#                                                      `vfm plan` calibrated by BENCH_LOG (a `vfm bench
#                                                      --profile` run of CONFIG on this GPU; ARGS: more
#                                                      of vfm plan's, --text L when not 512) predicts the
#                                                      step of that run's layout (one GPU, no
#                                                      recomputation); last line "plan-vs-bench: ..."
#                                                      with the measured step and the ratio
cd "$(dirname "$0")/.." || exit 1
VFM="scripts/gpu_run.sh build/vfm"
case $1 in
peer)
    cfg=$2 check=$3
    if [ ! -f "$check/bench.json" ]; then
        echo "(no check from the GPU bench step: written on the CPU)"
        $VFM bench --config "$cfg" --check "$check" --check-only train.device=cpu || exit 1
    fi
    PYTHONUNBUFFERED=1 exec ${VFM_PYTHON:-python3} bench/torch_peer.py --from "$check" --warmup 3 --steps 3
    ;;
demo-gpu)
    VFM="$VFM" DEMO_ARGS="train.device=cuda" DEMO_SAMPLE_ARGS="--device cuda" scripts/demo.sh
    rc=$?
    cp out/demo/grid.png out/demo/score.txt "$2/" 2> /dev/null
    exit $rc
    ;;
two-ranks)
    command -v mpirun > /dev/null 2>&1 || { echo "NOT RUN: no mpirun on this machine"; exit 0; }
    exec mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2 \
        scripts/gpu_run.sh build/vfm_mpi_tests
    ;;
plan)
    cfg=$2 log=$3
    shift 3
    json=$(grep '^bench-json:' "$log" | tail -n 1)
    [ -n "$json" ] || { echo "no bench-json line in $log"; exit 1; }
    num() { echo "$json" | sed -nE "s/.*\"$1\":([0-9.e+-]+).*/\1/p"; }
    samples=$(num samples_per_step)
    seq=$(( $(num tokens_per_step) / samples ))
    case $(echo "$json" | sed -nE 's/.*"device":"([^"]*)".*/\1/p') in
    *H200*) gpu=h200-141gb ;; *B200*) gpu=b200-180gb ;; *A100*) gpu=a100-80gb ;; *) gpu=${PLAN_GPU:-h100-80gb} ;;
    esac
    # the layout vfm bench ran: one GPU, the whole model, no recomputation, its samples per step (one
    # sample of its tokens per pack, as bench/*.yaml and --seq make them)
    $VFM plan --config "$cfg" --seq "$seq" --gpus 1 --global-batch "$samples" --gpu "$gpu" --calibrate "$log" --explain --top 1 \
        model.tensor_model_parallel_size=1 model.sequence_parallel=false model.context_parallel_size=1 \
        model.pipeline_model_parallel_size=1 model.recompute_granularity=null "$@" || exit 1
    predicted=$($VFM plan --config "$cfg" --seq "$seq" --gpus 1 --global-batch "$samples" --gpu "$gpu" --calibrate "$log" --json \
        model.tensor_model_parallel_size=1 model.sequence_parallel=false model.context_parallel_size=1 \
        model.pipeline_model_parallel_size=1 model.recompute_granularity=null "$@" |
        grep -o '"step_seconds":[0-9.e+-]*' | head -n 1 | cut -d: -f2)
    [ -n "$predicted" ] || { echo "vfm plan gave no step_seconds"; exit 1; }
    echo "$predicted $(num ms_per_step)" | awk -v gpu="$gpu" '{ m = $2 / 1e3
        printf "plan-vs-bench: predicted %.4f s per step (%s, calibrated), measured %.4f s, ratio %.2f\n", $1, gpu, m, $1 / m }'
    ;;
*)
    echo "usage: scripts/gpu_check_steps.sh peer CONFIG CHECK_DIR | demo-gpu LOG_DIR | two-ranks | plan CONFIG BENCH_LOG [ARGS]" >&2
    exit 2
    ;;
esac
