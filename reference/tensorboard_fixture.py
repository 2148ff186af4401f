"""TensorBoard's own writer makes the event file that tests/unit/test_tensorboard.c compares vfm's
writer with, record by record (wall time ignored): the file-version event, three scalars (step 0,
a zero value, a negative value) and one PNG image (tests/fixtures/tensorboard/pattern.png).
Needs the `tensorboard` package (PyPI; a venv outside the repository), not run by CI:
    python reference/tensorboard_fixture.py --out tests/fixtures/tensorboard

`--check RUN_OR_TB_DIR` instead reads a run's event files with TensorBoard's EventAccumulator and
prints every scalar series and image it finds (the read-back check of a real training run).
"""
import argparse
import glob
import os
import shutil
import tempfile


def write_fixture(out):
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    with open(os.path.join(out, "pattern.png"), "rb") as f:
        png = f.read()
    tmp = tempfile.mkdtemp()
    w = EventFileWriter(tmp)
    for step, tag, value in [(0, "train/loss", 1.5), (7, "train/lr", 0.0), (300, "val/loss", -2.25e-3)]:
        w.add_event(Event(wall_time=1.0, step=step, summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))
    image = Summary.Image(height=2, width=3, colorspace=3, encoded_image_string=png)
    w.add_event(Event(wall_time=1.0, step=300, summary=Summary(value=[Summary.Value(tag="val/generation", image=image)])))
    w.close()
    (path,) = glob.glob(os.path.join(tmp, "events.out.tfevents.*"))
    shutil.copy(path, os.path.join(out, "python.tfevents"))
    shutil.rmtree(tmp)
    print("wrote", os.path.join(out, "python.tfevents"))


def check(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = os.path.join(run, "tb_logs") if os.path.isdir(os.path.join(run, "tb_logs")) else run
    acc = EventAccumulator(tb, size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    tags = acc.Tags()
    for tag in sorted(tags["scalars"]):
        ev = acc.Scalars(tag)
        print(f"scalar {tag}: {len(ev)} values, steps {ev[0].step}..{ev[-1].step}, last {ev[-1].value:.6g}")
    for tag in sorted(tags["images"]):
        ev = acc.Images(tag)
        print(f"image {tag}: {len(ev)} pictures at steps {[e.step for e in ev]}, "
              f"{ev[-1].width}x{ev[-1].height}, {len(ev[-1].encoded_image_string)} bytes")
    if not tags["scalars"]:
        raise SystemExit("no scalars found in " + tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tensorboard"))
    ap.add_argument("--check", help="a run directory (or its tb_logs) to read back")
    args = ap.parse_args()
    if args.check:
        check(args.check)
    else:
        write_fixture(args.out)


if __name__ == "__main__":
    main()
