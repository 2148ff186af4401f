#!/bin/sh
# vfm's CPU backend against PyTorch 2.x eager on this machine's CPU: the same model (the demo's
# tiny DiT, configs/demo.yaml), the same weights and the same packs, at 1 and 2 threads.
#
# For each shape `vfm bench --check-only` writes the initial weights, the benchmark's pack and a
# fixed-input forward check; bench/torch_peer.py (fp32, eager, SDPA, one call per sample of the
# pack) checks that it computes vfm's output on that input, else nothing is timed. Then, REPEATS
# times in turn, vfm bench and the peer each time the training step (the same warm-up and timed
# steps), so that both see the same machine load; printed per shape and thread count: each side's
# ms/step (median of the runs, min and max) and the ratio peer/vfm taken run pair by run pair
# (> 1: vfm is faster).
#
# Shapes: demo = the demo's packs (16 images of 8 x 8 = 64 tokens, 8 caption rows each, 1024
# tokens a pack); 1024, 4096, 8192 = one sample of that many tokens with 8 caption rows.
#
#   bench/run_cpu_pair.sh                        # every shape at 1 and 2 threads
#   SHAPES="demo 4096" THREADS=2 REPEATS=5 bench/run_cpu_pair.sh
#   PROFILE=1 SHAPES=8192 bench/run_cpu_pair.sh   # also vfm's per-op table (one extra run)
#
# PyTorch: the first use installs PyPI's torch 2.x (and NumPy) into a venv outside the repository,
# $VFM_TORCH_VENV (default ~/.cache/vfm-bench/torch2; about 3 GB, several minutes) and says so;
# later runs reuse it. Environment: VFM (default build/vfm), SHAPES, THREADS (default "1 2"),
# REPEATS (default 3), STEPS (vfm bench's step flags for every shape, e.g. "--warmup 1 --steps 1"), PAIR_DIR (logs and checks; default a new /tmp/vfm_cpu_pair.* folder).
cd "$(dirname "$0")/.." || exit 1
VFM=${VFM:-build/vfm}
SHAPES=${SHAPES:-demo 1024 4096 8192}
THREADS=${THREADS:-1 2}
REPEATS=${REPEATS:-3}
VENV=${VFM_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vfm-bench/torch2}
OUT=${PAIR_DIR:-$(mktemp -d /tmp/vfm_cpu_pair.XXXXXX)}
mkdir -p "$OUT"

if [ ! -x "$VFM" ]; then
    echo "run_cpu_pair: $VFM is not built (run make)" >&2
    exit 1
fi
PY=$VENV/bin/python
# The peer's model (reference/model_torch.py) needs NumPy too, which torch's wheel no longer pulls in.
if ! "$PY" -c 'import numpy, torch, sys; sys.exit(0 if int(torch.__version__.split(".")[0]) == 2 else 1)' 2>/dev/null; then
    echo "run_cpu_pair: installing PyTorch 2.x and NumPy from PyPI into $VENV (first use only; about 3 GB, several minutes)"
    python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet 'torch>=2,<3' numpy ||
        { echo "run_cpu_pair: could not install PyTorch and NumPy into $VENV" >&2; exit 1; }
fi

# The vfm bench arguments of one shape.
shape_args() {
    case $1 in
        demo) echo "dataset.mock_shapes=[3x1x16x16] dataset.number_packed_samples=16" \
                   "dataset.task_encoder_seq_length=1024 dataset.context_seq_len=8" \
                   "dataset.context_embeddings_dim=64 train.global_batch_size=1" ;;
        *[!0-9]*|'') return 1 ;;
        *) echo "--seq $1 --text 8" ;;
    esac
}

# Warm-up and timed steps: fewer for the long samples (seconds a step); STEPS overrides.
steps_for() {
    [ -n "${STEPS:-}" ] && { echo "$STEPS"; return; }
    case $1 in
        demo|1024) echo "--warmup 2 --steps 10" ;;
        *) echo "--warmup 1 --steps 2" ;;
    esac
}

# The bench-json field $2 of log $1.
field() {
    "$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("bench-json:"):
        print(json.loads(line[len("bench-json:"):])[sys.argv[2]])' "$1" "$2"
}

echo "== vfm CPU vs PyTorch ($("$PY" -c 'import torch; print("torch", torch.__version__)')), $(date -u +%Y-%m-%dT%H:%MZ)," \
     "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); logs in $OUT"
summary=$OUT/summary.txt
: > "$summary"
for shape in $SHAPES; do
    args=$(shape_args "$shape") || { echo "run_cpu_pair: unknown shape '$shape'" >&2; exit 2; }
    check=$OUT/check-$shape
    # shellcheck disable=SC2086
    if ! "$VFM" bench --config configs/demo.yaml $args $(steps_for "$shape") --check "$check" --check-only \
            train.threads=1 > "$OUT/check-$shape.log" 2>&1; then
        echo "run_cpu_pair: vfm bench --check-only failed for $shape (see $OUT/check-$shape.log)" >&2
        exit 1
    fi
    for t in $THREADS; do
        for r in $(seq 1 "$REPEATS"); do
            vlog=$OUT/vfm-$shape-t$t-$r.log
            plog=$OUT/torch-$shape-t$t-$r.log
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=$t "$VFM" bench --config configs/demo.yaml $args $(steps_for "$shape") \
                train.threads="$t" > "$vlog" 2>&1
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=$t "$PY" bench/torch_peer.py --from "$check" --device cpu --dtype f32 --no-compile \
                --threads "$t" > "$plog" 2>&1
            v=$(field "$vlog" ms_per_step) && p=$(field "$plog" ms_per_step) && [ -n "$v" ] && [ -n "$p" ] || {
                echo "run_cpu_pair: a run failed ($vlog, $plog)" >&2
                exit 1
            }
            echo "$shape $t $v $p" >> "$summary"
            printf '%-5s %d thread%s run %d: vfm %9.1f ms/step, torch %9.1f ms/step\n' "$shape" "$t" \
                "$([ "$t" = 1 ] || echo s)" "$r" "$v" "$p"
        done
    done
    if [ "${PROFILE:-0}" = 1 ]; then
        for t in $THREADS; do
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=$t "$VFM" bench --config configs/demo.yaml $args $(steps_for "$shape") --profile \
                train.threads="$t" > "$OUT/profile-$shape-t$t.log" 2>&1
            echo "profile of $shape at $t thread(s): $OUT/profile-$shape-t$t.log"
        done
    fi
done

"$PY" - "$summary" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    shape, t, v, p = line.split()
    rows.setdefault((shape, int(t)), []).append((float(v), float(p)))
def mmm(xs, fmt):
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(xs), min(xs), max(xs))
print("\n%-6s %7s %26s %26s %22s" % ("shape", "threads", "vfm ms/step med (min-max)", "torch ms/step med (min-max)",
                                    "torch/vfm med (min-max)"))
for (shape, t), runs in rows.items():
    vs, ps = [v for v, _ in runs], [p for _, p in runs]
    ratios = [p / v for v, p in runs]
    print("%-6s %7d %26s %26s %22s" % (shape, t, mmm(vs, "%.1f"), mmm(ps, "%.1f"), mmm(ratios, "%.2f")))
print("\ntorch/vfm > 1: vfm's step is faster (the goal: >= 1 everywhere)")
PYEOF
