"""Independent reference for zephon-vision's tests: Pillow (and NumPy when installed).

Usage: pillow_oracle.py JOBS.json OUT_DIR
JOBS.json is a list of jobs; each writes OUT_DIR/<out> (raw bytes) and gets an entry in
OUT_DIR/results.json (same order): {"w", "h"} or {"error": "..."} or {"grid": [t, h, w], ...}.

Jobs
  {"op": "decode", "src": path, "out": name}
      Image.open, ImageOps.exif_transpose, convert("RGB"); raw RGB8 rows.
  {"op": "resize", "src": path, "out": name, "mode": "stretch" | "center_crop" | "pad_square" |
   "smart", "w": int, "h": int, "filter": "bilinear" | "bicubic" | "lanczos", "fill": [r, g, b],
   "factor": int, "min_pixels": int, "max_pixels": int}
      decode as above, then what the HF processors do:
      center_crop  CLIPImageProcessor: shortest edge to w (== h), long = int(w * long / short),
                   then center_crop with offsets (resized - target) // 2
      pad_square   LLaVA expand2square(fill), then resize to (w, h)
      smart        Qwen2VLImageProcessor.smart_resize, then resize
  {"op": "qwen", "rgb": path, "w": int, "h": int, "out": name, "patch": 14, "temporal": 2,
   "merge": 2, "mean": [...], "std": [...], "rescale": float}
      Qwen2VLImageProcessor's rescale, normalize and flatten_patches on the given RGB8 bytes;
      float32 little-endian. Uses NumPy when importable, else a pure-Python re-implementation
      of the same reshape/permute with float32 rounding emulated (results say which).
"""

import io
import json
import math
import struct
import sys

from PIL import Image, ImageOps

FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS}


_last = (None, None)


def load(path):
    # Jobs come grouped by source: keep the last decoded image (Pillow images are not mutated).
    global _last
    if _last[0] == path:
        return _last[1]
    _last = (path, _load(path))
    return _last[1]


def _load(path):
    with open(path, "rb") as f:
        data = f.read()
    img = Image.open(io.BytesIO(data))
    img = ImageOps.exif_transpose(img)
    return img.convert("RGB")


def smart_resize(height, width, factor, min_pixels, max_pixels):
    # transformers' Qwen2VLImageProcessor (current main).
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def expand2square(img, fill):
    width, height = img.size
    if width == height:
        return img
    side = max(width, height)
    result = Image.new(img.mode, (side, side), tuple(fill))
    if width > height:
        result.paste(img, (0, (width - height) // 2))
    else:
        result.paste(img, ((height - width) // 2, 0))
    return result


def resize_job(job):
    img = load(job["src"])
    flt = FILTERS[job["filter"]]
    mode = job["mode"]
    if mode == "stretch":
        return img.resize((job["w"], job["h"]), flt)
    if mode == "center_crop":
        size = job["w"]
        assert job["h"] == size, "center_crop oracle is for square targets"
        w, h = img.size
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long / short)
        nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
        img = img.resize((nw, nh), flt)
        top, left = (nh - size) // 2, (nw - size) // 2
        return img.crop((left, top, left + size, top + size))
    if mode == "pad_square":
        return expand2square(img, job["fill"]).resize((job["w"], job["h"]), flt)
    if mode == "smart":
        w, h = img.size
        th, tw = smart_resize(h, w, job["factor"], job["min_pixels"], job["max_pixels"])
        return img.resize((tw, th), flt)
    raise ValueError(mode)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def qwen_pure(rgb, w, h, p, tt, m, mean, std, rescale):
    """flatten_patches without NumPy: same shapes, same permutation, float32 rounding."""
    mean32 = [f32(v) for v in mean]
    std32 = [f32(v) for v in std]
    # Channel-first [C, H, W] of normalised float32 values.
    lut = [[f32((f32(f32(v * rescale) - mean32[c])) / std32[c]) for v in range(256)] for c in range(3)]
    chw = [lut[c][rgb[(y * w + x) * 3 + c]] for c in range(3) for y in range(h) for x in range(w)]
    frames = chw * tt  # the still image repeated to temporal_patch_size frames
    gt, gh, gw = 1, h // p, w // p
    shape = (gt, tt, 3, gh // m, m, p, gw // m, m, p)
    perm = (0, 3, 6, 4, 7, 2, 1, 5, 8)
    strides = [1] * 9
    for i in range(7, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    out_shape = [shape[a] for a in perm]
    out_strides = [strides[a] for a in perm]
    out = []
    # Iterate the permuted shape in row-major order; each index maps back through the strides.
    idx = [0] * 9
    total = 1
    for s in out_shape:
        total *= s
    for _ in range(total):
        out.append(frames[sum(i * s for i, s in zip(idx, out_strides))])
        k = 8
        while k >= 0:
            idx[k] += 1
            if idx[k] < out_shape[k]:
                break
            idx[k] = 0
            k -= 1
    return struct.pack("<%df" % len(out), *out), [gt, gh, gw]


def qwen_numpy(np, rgb, w, h, p, tt, m, mean, std, rescale):
    img = np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3)
    x = (img.astype(np.float64) * rescale).astype(np.float32)
    x = (x - np.array(mean, dtype=np.float32)) / np.array(std, dtype=np.float32)
    x = x.transpose(2, 0, 1)
    patches = np.stack([x] * tt)
    c = patches.shape[1]
    gt, gh, gw = patches.shape[0] // tt, h // p, w // p
    patches = patches.reshape(gt, tt, c, gh // m, m, p, gw // m, m, p)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(gt * gh * gw, c * tt * p * p)
    return flat.astype("<f4").tobytes(), [gt, gh, gw]


def qwen_job(job, out_path):
    with open(job["rgb"], "rb") as f:
        rgb = f.read()
    args = (rgb, job["w"], job["h"], job["patch"], job["temporal"], job["merge"], job["mean"], job["std"], job["rescale"])
    try:
        import numpy as np  # noqa: PLC0415

        data, grid = qwen_numpy(np, *args)
        impl = "numpy " + np.__version__
    except ImportError:
        data, grid = qwen_pure(*args)
        impl = "pure-python"
    with open(out_path, "wb") as f:
        f.write(data)
    return {"grid": grid, "impl": impl}


def main():
    jobs_path, out_dir = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = []
    for job in jobs:
        out_path = f"{out_dir}/{job['out']}"
        try:
            if job["op"] == "qwen":
                results.append(qwen_job(job, out_path))
                continue
            img = load(job["src"]) if job["op"] == "decode" else resize_job(job)
            with open(out_path, "wb") as f:
                f.write(img.tobytes())
            results.append({"w": img.size[0], "h": img.size[1]})
        except Exception as e:  # noqa: BLE001 - the test reports every failure
            results.append({"error": f"{type(e).__name__}: {e}"})
    with open(f"{out_dir}/results.json", "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
