#!/bin/sh
# vfm and its PyTorch peer (bench/torch_peer.py) on one benchmark config, on this machine's GPU:
# `vfm bench` times vfm's training step and writes its fixed-input forward check; the peer checks
# itself against that output, times the same model, pack and step in PyTorch 2 (bf16 autocast,
# SDPA, torch.compile, fused AdamW); then both figures and vfm/peer ratios are printed. Run from
# the repository root on the GPU machine with the prebuilt binary (`make gpu-bundle` here).
#   bench/run_pair.sh bench/dit-xl.yaml [a.b=v ...]
#   bench/run_pair.sh --peer-only bench/dit-xl.yaml   # vfm only writes its check (on the CPU);
#                                                     # the peer alone is timed
# Environment: VFM (default build/vfm), VFM_PYTHON (a python3 with torch; default python3),
# PAIR_DIR (where the logs go; default a new /tmp/vfm_pair.* folder), CHECK_DIR (vfm's check for the
# peer, gigabytes of weights for the large config; default PAIR_DIR/check), PROFILE=1 adds vfm's
# per-op table (CUDA events), PEER_ARGS extra torch_peer.py flags.
cd "$(dirname "$0")/.." || exit 1
peer_only=0
if [ "$1" = "--peer-only" ]; then peer_only=1; shift; fi
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: bench/run_pair.sh [--peer-only] CONFIG.yaml [a.b=v ...]" >&2
    exit 2
fi
cfg=$1; shift
VFM=${VFM:-build/vfm}
PY=${VFM_PYTHON:-python3}
OUT=${PAIR_DIR:-$(mktemp -d /tmp/vfm_pair.XXXXXX)}
CHECK=${CHECK_DIR:-$OUT/check}
mkdir -p "$OUT"
echo "== $cfg ($(date -u +%Y-%m-%dT%H:%MZ)); logs in $OUT"
if [ $peer_only = 1 ]; then
    scripts/gpu_run.sh "$VFM" bench --config "$cfg" --check "$CHECK" --check-only train.device=cpu "$@" \
        > "$OUT/vfm.log" 2>&1
    rc=$?
    tail -n 1 "$OUT/vfm.log"
else
    prof=""
    [ "${PROFILE:-0}" = 1 ] && prof=--profile
    scripts/gpu_run.sh "$VFM" bench --config "$cfg" --check "$CHECK" $prof train.device=cuda "$@" 2>&1 \
        | tee "$OUT/vfm.log"
    if grep -q '^bench-json:' "$OUT/vfm.log"; then rc=0; else rc=1; fi
fi
if [ "$rc" != 0 ] || [ ! -f "$CHECK/bench.json" ]; then
    echo "run_pair: vfm bench failed (see $OUT/vfm.log); the peer needs its check" >&2
    exit 1
fi
# shellcheck disable=SC2086
"$PY" bench/torch_peer.py --from "$CHECK" $PEER_ARGS 2>&1 | tee "$OUT/torch.log"
if ! grep -q '^bench-json:' "$OUT/torch.log"; then
    echo "run_pair: the PyTorch peer failed (see $OUT/torch.log)" >&2
    exit 1
fi
"$PY" - "$OUT/vfm.log" "$OUT/torch.log" <<'PYEOF'
import json, sys
def result(path):
    for line in open(path):
        if line.startswith("bench-json:"):
            return json.loads(line[len("bench-json:"):])
    return None
v, t = result(sys.argv[1]), result(sys.argv[2])
rows = [("tokens/s", "tokens_per_s", "%.0f"), ("ms/step", "ms_per_step", "%.1f"), ("model TFLOP/s", "tflops", "%.1f"),
        ("MFU", "mfu", "%.3f"), ("MFU w/o attention", "mfu_no_attn", "%.3f"),
        ("peak GPU memory (GiB)", "peak_device_bytes", "%.1f")]
print("\n%-24s %14s %14s %10s" % ("", "vfm", "torch peer", "vfm/peer"))
for name, key, fmt in rows:
    scale = 2.0 ** -30 if key == "peak_device_bytes" else 1.0
    tv = t[key] * scale
    vv = v[key] * scale if v else None
    ratio = "%.3f" % (vv / tv) if v and tv else "-"
    print("%-24s %14s %14s %10s" % (name, fmt % vv if v else "-", fmt % tv, ratio))
if v:
    print("\nvfm is %.2fx the peer's tokens/s (target >= 1.25x)" % (v["tokens_per_s"] / t["tokens_per_s"]))
PYEOF
