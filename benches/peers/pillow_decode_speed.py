#!/usr/bin/env python3
"""Single-thread Pillow rates on the captioned photos (the Python side's raw decode speed).

For every JPEG under --dir (bytes read into memory first, so no file I/O is timed), best of
--reps, one thread:
  decode          Image.open(BytesIO).load()                              (libjpeg-turbo)
  decode+resize   + exif_transpose + shorter side to 336 BILINEAR + centre crop (one resize, box)
  decode+resize (crop after)   the same, resizing the whole image then cropping (HF order)
  per-image map   decode+resize + CLIP normalise to f32 [3, 336, 336]  (= peer_grain_vlm's map
                  minus the JSON row and the caption tokenizing)
Prints and writes (--json-out) images/s and source Mpx/s per mode, over all files and over the
baseline (non-progressive) ones only, comparable with
`cargo run --release -p zephon-vision --example decode_speed` on our side.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import PIL  # noqa: E402
from PIL import Image, ImageOps, features  # noqa: E402

from peer_grain_vlm import normalise_chw, resize_crop  # noqa: E402


def modes(side: int):
    def decode(b):
        with Image.open(io.BytesIO(b)) as im:
            im.load()

    def prep(b):
        im = Image.open(io.BytesIO(b))
        ImageOps.exif_transpose(im, in_place=True)
        return im if im.mode == "RGB" else im.convert("RGB")

    return {
        "decode": decode,
        "decode+resize": lambda b: resize_crop(prep(b), side, "box"),
        "decode+resize (crop after)": lambda b: resize_crop(prep(b), side, "after"),
        "per-image map": lambda b: normalise_chw(resize_crop(prep(b), side, "box")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder of *.jpg")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--side", type=int, default=336)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.dir, "*.jpg")))
    data = []
    for f in files:
        with open(f, "rb") as fh:
            b = fh.read()
        with Image.open(io.BytesIO(b)) as im:
            data.append((os.path.basename(f), b, im.width * im.height, bool(im.info.get("progressive"))))
    out = {"pillow": PIL.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"), "files": len(data),
           "mpx": round(sum(d[2] for d in data) / 1e6, 3), "reps": a.reps, "best_of": a.reps, "modes": {}}
    for name, fn in modes(a.side).items():
        per_file = []
        for fname, b, px, prog in data:
            best = float("inf")
            for _ in range(a.reps):
                t = time.perf_counter()
                fn(b)
                best = min(best, time.perf_counter() - t)
            per_file.append((fname, px, prog, best))
        row = {}
        for subset, keep in (("all", lambda p: True), ("baseline", lambda p: not p), ("progressive", lambda p: p)):
            sel = [x for x in per_file if keep(x[2])]
            secs = sum(x[3] for x in sel)
            row[subset] = {"images": len(sel), "seconds": round(secs, 4),
                           "images_per_s": round(len(sel) / secs, 2) if secs else None,
                           "mpx_per_s": round(sum(x[1] for x in sel) / 1e6 / secs, 1) if secs else None}
        row["per_file_s"] = {x[0]: round(x[3], 5) for x in per_file}
        out["modes"][name] = row
        print(f"{name:28s} all: {row['all']['images_per_s']:7.2f} img/s {row['all']['mpx_per_s']:6.1f} Mpx/s | "
              f"baseline: {row['baseline']['mpx_per_s']:6.1f} Mpx/s | progressive: "
              f"{row['progressive']['mpx_per_s']:6.1f} Mpx/s", file=sys.stderr)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
