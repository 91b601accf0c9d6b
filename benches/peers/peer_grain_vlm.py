#!/usr/bin/env python3
"""Vision-language peer: Google Grain (PyPI ``grain``) + Pillow, public API only.

Pipeline (the same steps as our `[images] preset = "llava"` + `one_per_row` spec, bench_vlm.py):
    src  = MapDataset.source(CaptionRows(captions.jsonl)).shuffle(seed).repeat()  # reshuffled per epoch
    rows = src.map(ImageCaption(...))    # per row, in the workers:
             json.loads(row); PIL.Image.open(dir/row["file"])
             ImageOps.exif_transpose(in_place=True); convert("RGB") unless already RGB
             shorter side to 336 (Image.BILINEAR, Pillow's convolution = antialiased), centre crop
             numpy: /255, (x - CLIP mean) / CLIP std, f32, [3, 336, 336] (channel-first)
             ids = [<image>] * 576 + Tokenizer.encode(caption) + [EOS]   (GPT-2 + <image> = 50257)
             padded to 640 with 50256
    it   = rows.to_iter_dataset(ReadOptions(num_threads=T, prefetch_buffer_size=P)).batch(16)
    [it  = it.mp_prefetch(MultiprocessingOptions(num_workers=N))]        # --worker-kind process
    state: DatasetIterator.get_state() / set_state()

Resize + crop: by default one `Image.resize((336, 336), BILINEAR, box=...)` over the source region
the crop keeps (`--crop box`). Pillow's convolution with a box uses the same sample positions and
weights as resizing the whole image to (336, int(336 * long / short)) and cropping the centre
(HF CLIPImageProcessor: `resize` then `center_crop`, offsets (resized - 336) // 2), without the
work on the cropped-away columns; that is also how ours works. On the 43 photos the two differ by
at most 1 level in < 0.12 % of the values (the box is given in float source coordinates). `--crop
after` does the HF order literally (resize the whole image, then `Image.crop`).

Not done (HF's CLIP processor does not do them either): `Image.draft` (JPEG DCT-domain downscale)
and `reducing_gap` (Pillow's box-reduce before the filter). Our side's `reduced_decode` is off too.

One image per row, so a batch of 16 rows = 16 images; non-pad tokens per row = 576 + caption + 1.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_common  # noqa: E402  (records process start before heavy imports)

import json  # noqa: E402

import grain  # noqa: E402
import numpy as np  # noqa: E402
import PIL  # noqa: E402
import tokenizers  # noqa: E402
from PIL import Image, ImageOps, features  # noqa: E402

EOT = "<|endoftext|>"
IMAGE = "<image>"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def base_args(ap) -> None:
    ap.add_argument("--captions", required=True, help="captions.jsonl: rows {id, file, caption, source}")
    ap.add_argument("--tokenizer", required=True, help="GPT-2 tokenizer.json with the added token <image>")
    ap.add_argument("--image-size", type=int, default=336)
    ap.add_argument("--image-tokens", type=int, default=576)
    ap.add_argument("--seq-len", type=int, default=640)
    ap.add_argument("--pad-id", type=int, default=50256)
    ap.add_argument("--batch-size", type=int, default=16, help="rows (= images) per step")
    peer_common.loop_args(ap)


def extra_args(ap) -> None:
    ap.add_argument("--crop", choices=("box", "after"), default="box",
                    help="box: one resize over the kept region (same pixels, less work); "
                         "after: resize the whole image, then crop (HF CLIPImageProcessor order)")
    ap.add_argument("--grain-read-threads", type=int, default=None,
                    help="ReadOptions.num_threads per process (default: N for --worker-kind thread, "
                         "1 for process workers)")
    ap.add_argument("--grain-prefetch-buffer", type=int, default=32,
                    help="ReadOptions.prefetch_buffer_size in rows (default 32 = ours: 2 steps of 16)")
    ap.add_argument("--grain-worker-buffer", type=int, default=1,
                    help="MultiprocessingOptions.per_worker_buffer_size (in batches of 16)")


def versions() -> dict:
    return {"grain": grain.__version__, "pillow": PIL.__version__,
            "libjpeg_turbo": features.version("libjpeg_turbo"), "tokenizers": tokenizers.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0]}


class CaptionRows:
    """RandomAccessDataSource over the non-blank lines of one JSONL file (bytes of the row)."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as fh:
            self.rows = [line for line in fh.read().splitlines() if line.strip()]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> bytes:
        return self.rows[int(i)]

    def __repr__(self) -> str:
        return f"CaptionRows({self.path!r}, {len(self.rows)} rows)"


def crop_box(w: int, h: int, side: int) -> tuple[tuple[int, int], tuple[float, float, float, float]]:
    """HF CLIP: shorter side to `side`, longer `int(side * long / short)`, centre crop
    `(resized - side) // 2`. Returns the resized size and the kept box in source pixels."""
    if w <= h:
        rw, rh = side, int(side * h / w)
    else:
        rw, rh = int(side * w / h), side
    left, top = (rw - side) // 2, (rh - side) // 2
    sx, sy = w / rw, h / rh
    return (rw, rh), (left * sx, top * sy, (left + side) * sx, (top + side) * sy)


def load_rgb(path: str) -> Image.Image:
    img = Image.open(path)
    ImageOps.exif_transpose(img, in_place=True)  # decodes; rotates only when EXIF says so
    if img.mode != "RGB":  # convert("RGB") on an RGB image would copy it
        img = img.convert("RGB")
    return img


def resize_crop(img: Image.Image, side: int, mode: str = "box") -> Image.Image:
    (rw, rh), box = crop_box(img.width, img.height, side)
    if mode == "box":
        return img.resize((side, side), Image.BILINEAR, box=box)
    left, top = (rw - side) // 2, (rh - side) // 2
    return img.resize((rw, rh), Image.BILINEAR).crop((left, top, left + side, top + side))


_MEAN = np.asarray(CLIP_MEAN, dtype=np.float32).reshape(3, 1, 1)
_ISTD = (1.0 / np.asarray(CLIP_STD, dtype=np.float32)).reshape(3, 1, 1)


def normalise_chw(img: Image.Image) -> np.ndarray:
    """uint8 HWC -> f32 CHW, x / 255, (x - mean) / std (as CLIPImageProcessor: rescale, normalise)."""
    x = np.asarray(img, dtype=np.float32).transpose(2, 0, 1)
    x = x * np.float32(1 / 255)
    x -= _MEAN
    x *= _ISTD
    return np.ascontiguousarray(x)


class ImageCaption(grain.transforms.Map):
    """JSON row -> {"pixel_values": f32[3, S, S], "input_ids": int32[seq], "length": int32}."""

    def __init__(self, root: str, tokenizer: str, side: int, image_tokens: int, seq_len: int,
                 pad_id: int, crop: str) -> None:
        self.root, self.tokenizer, self.side = root, tokenizer, side
        self.image_tokens, self.seq_len, self.pad_id, self.crop = image_tokens, seq_len, pad_id, crop
        self._tok = None

    def _ensure(self):
        if self._tok is None:
            self._tok = tokenizers.Tokenizer.from_file(self.tokenizer)
            self._image_id = self._tok.token_to_id(IMAGE)
            self._eos = self._tok.token_to_id(EOT)
            if self._image_id is None:
                raise ValueError(f"{self.tokenizer} has no {IMAGE} token")
        return self._tok

    def map(self, raw: bytes):
        tok = self._ensure()
        row = json.loads(raw)
        with load_rgb(os.path.join(self.root, row["file"])) as img:
            px = normalise_chw(resize_crop(img, self.side, self.crop))
        ids = [self._image_id] * self.image_tokens + tok.encode(row["caption"], add_special_tokens=False).ids
        ids.append(self._eos)
        if len(ids) > self.seq_len:  # never with these captions (longest: 576 + 62 + 1)
            raise ValueError(f"{row['id']}: {len(ids)} tokens > {self.seq_len}")
        out = np.full(self.seq_len, self.pad_id, dtype=np.int32)
        out[: len(ids)] = ids
        return {"pixel_values": px, "input_ids": out, "length": np.int32(len(ids))}

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_tok"] = None
        return d


class _Handle:
    def __init__(self, ds, state) -> None:
        self.it = iter(ds)
        if state is not None:
            self.it.set_state(state)

    def next_batch(self):
        b = next(self.it)
        px = b["pixel_values"]
        return b["input_ids"], int(np.sum(b["length"])), {"images": int(px.shape[0]), "arrays": (px,)}

    def get_state(self) -> dict:
        return self.it.get_state()

    def close(self) -> None:
        close = getattr(self.it, "close", None)
        if close is not None:
            close()


def build(args, state):
    root = os.path.dirname(os.path.abspath(args.captions))
    src = grain.MapDataset.source(CaptionRows(args.captions)).shuffle(seed=args.seed).repeat()
    rows = src.map(ImageCaption(root, args.tokenizer, args.image_size, args.image_tokens, args.seq_len,
                                args.pad_id, args.crop))
    procs = args.workers if (args.workers > 0 and args.worker_kind == "process") else 0
    threads = args.grain_read_threads
    if threads is None:
        threads = args.workers if (args.workers > 0 and args.worker_kind == "thread") else 1
    args.grain_read_threads_effective = threads
    it = rows.to_iter_dataset(grain.ReadOptions(num_threads=threads,
                                                prefetch_buffer_size=args.grain_prefetch_buffer))
    batched = it.batch(args.batch_size, drop_remainder=True)
    if procs > 0:
        batched = batched.mp_prefetch(grain.MultiprocessingOptions(
            num_workers=procs, per_worker_buffer_size=args.grain_worker_buffer))
    return _Handle(batched, state)


if __name__ == "__main__":
    peer_common.run("grain_vlm", build, extra_args, versions, base_args=base_args)
