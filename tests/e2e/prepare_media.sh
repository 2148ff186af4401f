#!/bin/sh
# vfm prepare images|videos end to end, on inputs made here with Debian's ffmpeg: 200 captioned
# PNG pictures of five sizes and 3 short videos (H.264 in MP4 with a 90-degree rotation,
# MPEG-4 in MKV, VP9 in WebM) become pixel-space shards that `vfm data inspect` describes with the
# right shapes, that train a few steps of the tiny demo model, and that sample (an MP4 beside the
# GIF for the video run). A broken picture stops `prepare images` naming it and leaves nothing behind.
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/common.inc
if ! command -v ffmpeg >/dev/null 2>&1 || ! command -v ffprobe >/dev/null 2>&1; then
    check "ffmpeg and ffprobe are installed (scripts/deps.sh installs Debian's ffmpeg)" false
    finish
    exit 1
fi
T=$(mktemp -d /tmp/vfm_e2e_prepare.XXXXXX)
trap 'rm -rf "$T"' EXIT
FF="ffmpeg -hide_banner -loglevel error -nostdin"
TRAIN="train.device=cpu --config configs/demo.yaml train.train_iters=3 checkpoint.save_interval=3 train.threads=1 logger.level=warn
       dataset.task_encoder_seq_length=512 dataset.num_workers=1"

# ---- pictures: 5 sizes x 40 PNGs, each with a caption (every tenth in a .json with a class) ----
mkdir -p $T/pics/png $T/pics/more
$FF -f lavfi -i testsrc2=size=64x48:rate=1 -frames:v 40 $T/pics/png/wide_%03d.png
$FF -f lavfi -i testsrc2=size=48x64:rate=1 -frames:v 40 $T/pics/png/tall_%03d.png
$FF -f lavfi -i testsrc2=size=40x40:rate=1 -frames:v 40 $T/pics/png/square_%03d.png
$FF -f lavfi -i testsrc=size=100x30:rate=1 -frames:v 40 $T/pics/more/strip_%03d.png
$FF -f lavfi -i testsrc=size=30x90:rate=1 -frames:v 40 $T/pics/more/column_%03d.png
i=0
for f in $T/pics/png/*.png $T/pics/more/*.png; do
    i=$((i + 1))
    if [ $((i % 10)) = 0 ]; then echo "{\"caption\": \"test pattern $i\", \"class\": $((i % 4))}" > "${f%.*}.json"
    else echo "a test pattern, picture $i" > "${f%.*}.txt"; fi
done
check "ffmpeg made 200 captioned PNGs of 5 sizes" test "$(ls $T/pics/png/*.png $T/pics/more/*.png | wc -l)" = 200

$VFM prepare images $T/pics --out $T/img --buckets 32x32,32x48,48x32 --samples-per-shard 64 > $T/img.log 2> $T/img.err
check "prepare images: 200 samples in 4 shards, buckets by aspect" \
    grep -q "^prepared 200 samples (200 images; buckets 32x32: 40, 32x48: 80, 48x32: 80) in 4 shards" $T/img.log
check "prepare images: progress on stderr" grep -q "^prepare: 200/200 samples, 4 shards" $T/img.err
check "prepare images: shards and vfm_dataset.json" \
    sh -c "test -f $T/img/shard-000003.tar && test -f $T/img/shard-000003.tar.idx && grep -q '\"kind\": \"images\"' $T/img/vfm_dataset.json"
$VFM data inspect $T/img --config configs/demo.yaml > $T/img_inspect.log 2>&1
rc=$?
check "inspect: every sample usable (exit $rc)" sh -c "test $rc = 0 && grep -q '  samples: 200, 200 usable under this config, 0 skipped' $T/img_inspect.log"
check "inspect: latent shapes per bucket" sh -c "grep -q '    3 x 1 x 16 x 24 (image)  80' $T/img_inspect.log && \
    grep -q '    3 x 1 x 24 x 16 (image)  80' $T/img_inspect.log && grep -q '    3 x 1 x 16 x 16 (image)  40' $T/img_inspect.log"
check "inspect: parts, dtypes and shapes" sh -c "grep -q '    latent.npy  200 samples  npy  float32  shapes \[3,1,16,24\] x80, \[3,1,24,16\] x80, \[3,1,16,16\] x40' $T/img_inspect.log && \
    grep -q '    json        200 samples  json' $T/img_inspect.log"
check "inspect: samples per shard" grep -q "  shards: 4; samples per shard: min 8, median 64, max 64" $T/img_inspect.log
timeout $RUN_LIMIT $VFM train $TRAIN dataset.path=$T/img checkpoint.save=$T/img_run > $T/img_train.log 2>&1
check "train on the pictures (3 steps)" sh -c "test -f $T/img_run/iter_0000003/DONE && test \$(wc -l < $T/img_run/metrics.jsonl) = 3"
$VFM sample --device cpu --checkpoint $T/img_run --out $T/img_samples --prompt "a test pattern" --steps 3 --threads 1 > $T/img_sample.log 2>&1
check "sample a picture" sh -c "test -f $T/img_samples/sample_000.png && test -f $T/img_samples/grid.png"

# ---- videos ----
mkdir -p $T/vids
$FF -f lavfi -i testsrc2=size=64x48:rate=24 -t 1 -pix_fmt yuv420p -c:v libx264 $T/a.mp4
$FF -i $T/a.mp4 -c copy -metadata:s:v:0 rotate=90 $T/vids/a.mp4   # shown turned: 48 wide, 64 high
$FF -f lavfi -i testsrc=size=48x64:rate=10 -t 1 -c:v mpeg4 $T/vids/b.mkv
$FF -f lavfi -i mandelbrot=size=40x40:rate=30 -t 0.5 -c:v libvpx-vp9 -deadline realtime $T/vids/c.webm
for v in a b c; do echo "a moving test pattern $v" > $T/vids/$v.txt; done
check "ffmpeg made 3 short videos" test "$(ls $T/vids/*.mp4 $T/vids/*.mkv $T/vids/*.webm | wc -l)" = 3
$VFM prepare videos $T/vids --out $T/vid --buckets 32x32,32x48,48x32 --fps 8 --frames 6 > $T/vid.log 2>&1
check "prepare videos: 16 frames at 8 fps (6 + 6 + 4 of a half-second clip), the turned clip upright" \
    grep -q "^prepared 3 samples (3 videos, 16 frames at 8 fps; buckets 32x32: 1, 48x32: 2) in 1 shard" $T/vid.log
$VFM data inspect $T/vid --config configs/demo.yaml > $T/vid_inspect.log 2>&1
check "inspect: video latent shapes" sh -c "grep -q '    latent.npy  3 samples  npy  float32  shapes \[3,6,24,16\] x2, \[3,4,16,16\] x1' $T/vid_inspect.log"
timeout $RUN_LIMIT $VFM train $TRAIN dataset.path=$T/vid checkpoint.save=$T/vid_run > $T/vid_train.log 2>&1
check "train on the videos (3 steps)" test -f $T/vid_run/iter_0000003/DONE
$VFM sample --device cpu --checkpoint $T/vid_run --out $T/vid_samples --prompt "a moving test pattern" --steps 3 --threads 1 > $T/vid_sample.log 2>&1
check "sample a video: GIF and MP4" sh -c "test -f $T/vid_samples/sample_000.gif && test -f $T/vid_samples/sample_000.mp4"
probe=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=codec_name,nb_read_frames,r_frame_rate \
        -of csv=p=0 $T/vid_samples/sample_000.mp4)
frames=$(tr -d ' \n' < $T/vid_samples/samples.json | sed -nE 's/.*"shape":\[3,([0-9]+),.*/\1/p')
check "the MP4 is H.264 at the data's 8 fps with every frame ($probe; T=$frames)" \
    sh -c "echo '$probe' | grep -Eq '^h264,8/1,$frames\$'"

check "vfm loads FFmpeg at run time (not linked: the GPU bundle stays small)" \
    sh -c "! ldd $VFM | grep -q libavcodec && $VFM version | grep -q '^video: FFmpeg (libavformat.so.'"

# ---- a broken picture: named, nothing left behind ----
head -c 300 $T/pics/png/wide_001.png > $T/pics/png/wide_002.png
$VFM prepare images $T/pics --out $T/broken --buckets 32x32 > $T/broken.log 2>&1
rc=$?
check "a truncated PNG stops the run (exit $rc) naming it" sh -c "test $rc = 1 && grep -q 'png/wide_002.png: not a readable PNG' $T/broken.log"
check "and leaves no output and no staging folder" sh -c "test ! -e $T/broken && ! ls -a $T | grep -q vfm-prepare"
# ---- a photograph at the default buckets (256x256 ... 384x160: up to 4,096 tokens at patch 2, more
# than the demo's 1,024): prepare prints the keys that fit, and inspect judges the set by them ----
mkdir -p $T/photo
$FF -f lavfi -i testsrc2=size=640x480:rate=1 -frames:v 1 $T/photo/p.jpg
echo "a photograph" > $T/photo/p.txt
$VFM prepare images $T/photo --out $T/photo_set > $T/photo.log 2>&1
keys=$(sed -n "s|^train on it with: vfm train --config configs/demo.yaml dataset.path=$T/photo_set ||p" $T/photo.log)
check "prepare prints the train keys that fit: 3 channels, a pack of 4096 tokens ($keys)" sh -c \
    "echo ' $keys ' | grep -q ' model.in_channels=3 .* dataset.task_encoder_seq_length=4096 '"
$VFM data inspect $T/photo_set > $T/photo_inspect.log 2>&1
rc=$?
check "inspect without a config judges it by them: usable (exit $rc)" sh -c \
    "test $rc = 0 && grep -q '1 usable under this config' $T/photo_inspect.log"
$VFM data inspect $T/photo_set --config configs/demo.yaml $keys > $T/photo_demo.log 2>&1
rc=$?
check "and so does the demo config with the printed keys (exit $rc)" sh -c \
    "test $rc = 0 && grep -q '1 usable under this config' $T/photo_demo.log"
finish
