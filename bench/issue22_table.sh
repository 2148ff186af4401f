#!/bin/sh
# Issue 22's side-by-side table in one command: vfm's CPU step against PyTorch 2.x eager (fp32,
# SDPA) at 1 and 2 threads on the demo's packs and on one 1,024-, 4,096- and 8,192-token sample,
# with the machine it ran on, as a Markdown table ready for docs/bench.md. Run it on a quiet machine
# (nothing else compiling or testing): on a busy 2-core machine the figures swing by 2x.
#
#   bench/issue22_table.sh                     # the whole table (about 6-8 minutes on 2 cores)
#   QUICK=1 bench/issue22_table.sh             # a smoke run: demo and a 256-token sample, 1 step each
#   PROFILE=1 bench/issue22_table.sh           # and vfm's per-op profile of every shape and thread
#                                              # count (one more vfm run each; about 2 minutes more)
#
# It calls bench/run_cpu_pair.sh once per shape (alternating vfm and the peer, each run checked
# against vfm's fixed-input forward first) with the repeats and steps below, then prints the table.
# Environment: VFM (default build/vfm, built by `make` first if missing), THREADS (default "1 2"),
# VFM_TORCH_VENV (default: /opt/venv-wan when it holds torch 2.x, else run_cpu_pair.sh's
# ~/.cache/vfm-bench/torch2, installed on first use), OUT (default a new /tmp/vfm_issue22.* folder).
cd "$(dirname "$0")/.." || exit 1
VFM=${VFM:-build/vfm}
THREADS=${THREADS:-1 2}
OUT=${OUT:-$(mktemp -d /tmp/vfm_issue22.XXXXXX)}
mkdir -p "$OUT"
if [ -z "${VFM_TORCH_VENV:-}" ] && /opt/venv-wan/bin/python -c \
        'import numpy, torch, sys; sys.exit(0 if torch.__version__.startswith("2.") else 1)' 2>/dev/null; then
    VFM_TORCH_VENV=/opt/venv-wan
fi
[ -n "${VFM_TORCH_VENV:-}" ] && export VFM_TORCH_VENV
[ -x "$VFM" ] || make -j2 "$VFM" >/dev/null || { echo "issue22_table: could not build $VFM" >&2; exit 1; }

# shape : repeats : vfm/peer step flags. The long samples take seconds a step, so fewer runs.
if [ "${QUICK:-0}" = 1 ]; then
    PLAN="demo:1:--warmup 1 --steps 1
256:1:--warmup 1 --steps 1"
    echo "issue22_table: QUICK smoke run (demo, 256 tokens; 1 step each): 1-3 minutes"
else
    PLAN="demo:3:--warmup 2 --steps 10
1024:3:--warmup 2 --steps 10
4096:2:--warmup 1 --steps 2
8192:1:--warmup 1 --steps 2"
    # Estimate (a quiet 2-core Sapphire Rapids VM, from the busy-machine runs of docs/bench.md scaled
    # down): per thread count about 30 s for demo, 40 s for 1024, 60 s for 4096, 120 s for 8192.
    n=$(echo "$THREADS" | wc -w)
    echo "issue22_table: expected run time about $((n * 4)) minutes on a quiet 2-core machine" \
         "(twice that on a busy one); logs in $OUT"
fi

t0=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$OUT/summary.txt"
echo "$PLAN" | while IFS=: read -r shape reps steps; do
    [ -n "$shape" ] || continue
    dir=$OUT/$shape
    SHAPES=$shape THREADS=$THREADS REPEATS=$reps STEPS=$steps PAIR_DIR=$dir VFM=$VFM PROFILE=${PROFILE:-0} \
        sh bench/run_cpu_pair.sh > "$OUT/pair-$shape.log" 2>&1
    rc=$?
    grep -E '^(demo|[0-9]+) ' "$OUT/pair-$shape.log" | grep 'run ' | sed 's/^/  /'
    if [ $rc != 0 ] || [ ! -s "$dir/summary.txt" ]; then
        echo "issue22_table: the pair run of $shape failed (exit $rc); see $OUT/pair-$shape.log:" >&2
        tail -5 "$OUT/pair-$shape.log" >&2
        exit 1
    fi
    cat "$dir/summary.txt" >> "$OUT/summary.txt"
done || exit 1
load1=$(cut -d' ' -f1-3 /proc/loadavg)

PY=${VFM_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vfm-bench/torch2}/bin/python
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -m1 '^flags' /proc/cpuinfo)
isa=$(for f in avx512f amx_tile avx2 fma; do case " $flags " in *" $f "*) printf '%s ' "$f" ;; esac; done)
isa=${isa% }
blas=$(ldd "$VFM" 2>/dev/null | grep -o 'libopenblas[^ ]*' | head -1)
blasver=$(dpkg-query -W -f '${Version}' libopenblas0-openmp 2>/dev/null || dpkg-query -W -f '${Version}' libopenblas0 2>/dev/null)
{
    echo "Machine: $(nproc) cores of $cpu ($isa), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo);" \
         "$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(gcc --version | head -1), ${blas:-OpenBLAS} ${blasver};" \
         "$("$PY" -c 'import torch; print("PyPI torch", torch.__version__, "(" + torch.backends.cpu.get_cpu_capability() + ")")' 2>/dev/null)," \
         "fp32 eager. Load average before / after: $load0 / $load1. vfm $(git rev-parse --short HEAD)."
    echo "Command: $([ "${QUICK:-0}" = 1 ] && echo 'QUICK=1 ')bench/issue22_table.sh (THREADS=\"$THREADS\"; $(( $(date +%s) - t0 )) s)."
    echo
    python3 - "$OUT/summary.txt" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    shape, t, v, p = line.split()
    rows.setdefault((shape, int(t)), []).append((float(v), float(p)))
names = {"demo": "demo (16 x 64 tokens)"}
def mmm(xs, fmt):
    if len(xs) == 1:
        return fmt % xs[0]
    return (fmt + " (" + fmt + "-" + fmt + ")") % (statistics.median(xs), min(xs), max(xs))
print("| shape | threads | vfm ms/step | torch ms/step | torch/vfm, median (min-max) | runs |")
print("|---|---|---|---|---|---|")
for (shape, t), runs in rows.items():
    vs, ps, rs = [v for v, _ in runs], [p for _, p in runs], [p / v for v, p in runs]
    name = names[shape] if shape in names else "one %s-token sample" % format(int(shape), ",")
    print("| %s | %d | %s | %s | **%s** | %d |" % (name, t, mmm(vs, "%.0f"), mmm(ps, "%.0f"), mmm(rs, "%.2f"), len(runs)))
print("\ntorch/vfm > 1: vfm's step is faster (the goal: >= 1 in every row).")
PYEOF
} | tee "$OUT/table.md"

[ "${PROFILE:-0}" = 1 ] && ls "$OUT"/*/profile-*.log 2>/dev/null | sed "s/^/vfm's per-op profile: /"
echo "table: $OUT/table.md"
