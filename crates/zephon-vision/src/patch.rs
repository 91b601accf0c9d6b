//! Patch layouts: normalised pixels flattened into the `[num_patches, patch_dim]` matrices that
//! vision encoders embed with one linear layer.
//!
//! Normalisation is fused in (one table lookup per element, no intermediate float image).
//!
//! **ViT** ([`vit_patches`], patch size `p`, image `H × W` with both multiples of `p`):
//! `[gh · gw, 3 · p · p]` with `gh = H/p`, `gw = W/p`. Row `r = py · gw + px` (patches in
//! raster order); column `c · p² + dy · p + dx` (channel-first inside a patch); element =
//! pixel `(y = py·p + dy, x = px·p + dx)`, channel `c`. In PyTorch terms, from `pixel_values`
//! `[3, H, W]`: `x.reshape(3, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh*gw, 3*p*p)`.
//!
//! **Qwen2-VL** ([`qwen2_vl_patches`], patch `p` = 14, temporal patch `T` = 2, merge `m` = 2):
//! exactly `Qwen2VLImageProcessor`'s `flatten_patches`. Frames (one still image is repeated to
//! `T` frames; a clip is padded with its last frame to a multiple of `T`) of `H × W`, both
//! multiples of `p · m`; grid `(t, h, w) = (frames/T, H/p, W/p)`. The processor reshapes
//! `[frames, 3, H, W]` to `(t, T, 3, h/m, m, p, w/m, m, p)`, permutes it to
//! `(t, h/m, w/m, m, m, 3, T, p, p)` and flattens to `[t·h·w, 3·T·p·p]`. So row
//! `((ti · h/m + bh) · w/m + bw) · m² + mh · m + mw` holds the patch at patch row `bh·m + mh`,
//! patch column `bw·m + mw` of temporal slot `ti` (the `m × m` patches that the merger fuses
//! into one token are consecutive rows), and column `((c · T + tp) · p + dy) · p + dx` holds
//! channel `c` of frame `ti·T + tp` at pixel `(bh·m·p + mh·p + dy, bw·m·p + mw·p + dx)`.

use crate::error::{Result, VisionError};
use crate::image::RgbImage;
use crate::normalize::{FloatElement, Normalize};

/// Which layout a [`Patches`] is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Plain ViT patches of side `patch`.
    Vit {
        /// Patch side in pixels.
        patch: u32,
    },
    /// Qwen2-VL's processor layout.
    Qwen2Vl(QwenPatching),
}

/// Qwen2-VL's patch geometry, validated (each part ≥ 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QwenPatching {
    patch: u32,
    temporal: u32,
    merge: u32,
}

impl QwenPatching {
    /// Qwen2-VL and Qwen2.5-VL: patch 14, temporal patch 2, merge 2.
    pub const QWEN2_VL: QwenPatching = QwenPatching { patch: 14, temporal: 2, merge: 2 };

    /// A geometry; refuses zeros and products over 2^16.
    pub fn new(patch: u32, temporal: u32, merge: u32) -> Result<Self> {
        let ok = patch > 0 && temporal > 0 && merge > 0 && u64::from(patch) * u64::from(merge) <= 1 << 16;
        if !ok || temporal > 64 {
            return Err(VisionError::invalid(format!(
                "patch geometry patch={patch} temporal={temporal} merge={merge}"
            )));
        }
        Ok(QwenPatching { patch, temporal, merge })
    }

    /// Spatial patch side.
    pub fn patch(&self) -> u32 {
        self.patch
    }

    /// Frames per temporal patch.
    pub fn temporal(&self) -> u32 {
        self.temporal
    }

    /// Patches merged per side into one token.
    pub fn merge(&self) -> u32 {
        self.merge
    }

    /// The side multiple an image must have (`patch · merge`, the `factor` of `smart_resize`).
    pub fn factor(&self) -> u32 {
        self.patch * self.merge
    }
}

impl Default for QwenPatching {
    fn default() -> Self {
        QwenPatching::QWEN2_VL
    }
}

/// A `[rows, cols]` row-major matrix of patches and the grid it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Patches<T> {
    data: Vec<T>,
    rows: usize,
    cols: usize,
    grid: [u32; 3],
    layout: Layout,
}

impl<T: FloatElement> Patches<T> {
    /// The elements, row-major.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// Takes the elements.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// The grid `(t, h, w)` in patches (`t` = 1 for ViT): Qwen2-VL's `image_grid_thw`.
    pub fn grid_thw(&self) -> [u32; 3] {
        self.grid
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Puts the elements back into `[frames, 3, H, W]` (ViT: one frame; Qwen: `t · T`
    /// frames, repeats included): the inverse of patchifying, for checks and visualisation.
    pub fn to_frames_chw(&self) -> Vec<T> {
        let mut out = vec![T::default(); self.data.len()];
        self.for_each_index(|row_col, frame_c_y_x| {
            if let (Some(dst), Some(src)) = (out.get_mut(frame_c_y_x), self.data.get(row_col)) {
                *dst = *src;
            }
        });
        out
    }

    /// Calls `f(index in data, index in [frames, 3, H, W])` for every element.
    fn for_each_index(&self, mut f: impl FnMut(usize, usize)) {
        let [_, gh, gw] = self.grid.map(|v| v as usize);
        match self.layout {
            Layout::Vit { patch } => {
                let p = patch as usize;
                let (h, w) = (gh * p, gw * p);
                for r in 0..self.rows {
                    let (py, px) = (r / gw, r % gw);
                    for col in 0..self.cols {
                        let (c, dy, dx) = (col / (p * p), col / p % p, col % p);
                        f(r * self.cols + col, (c * h + py * p + dy) * w + px * p + dx);
                    }
                }
            }
            Layout::Qwen2Vl(q) => {
                let (p, tt, m) = (q.patch as usize, q.temporal as usize, q.merge as usize);
                let (h, w) = (gh * p, gw * p);
                for r in 0..self.rows {
                    let (mw, mh) = (r % m, r / m % m);
                    let blocks = r / (m * m);
                    let (bw, bh, ti) = (blocks % (gw / m), blocks / (gw / m) % (gh / m), blocks / (gw / m * (gh / m)));
                    let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                    for col in 0..self.cols {
                        let (dx, dy, tp, c) = (col % p, col / p % p, col / (p * p) % tt, col / (p * p * tt));
                        let frame = ti * tt + tp;
                        f(r * self.cols + col, ((frame * 3 + c) * h + y0 + dy) * w + x0 + dx);
                    }
                }
            }
        }
    }
}

/// Plain ViT patches (layout in the module docs); both sides must be multiples of `patch`.
pub fn vit_patches<T: FloatElement>(img: &RgbImage, patch: u32, norm: &Normalize) -> Result<Patches<T>> {
    if patch == 0 {
        return Err(VisionError::invalid("patch size 0"));
    }
    let (w, h) = img.size();
    if w % patch != 0 || h % patch != 0 {
        return Err(VisionError::bad_shape(w, h, format!("sides are not multiples of the patch size {patch}")));
    }
    let p = patch as usize;
    let (gh, gw) = ((h / patch) as usize, (w / patch) as usize);
    let (rows, cols) = (gh * gw, 3 * p * p);
    let t = norm.table::<T>();
    let mut data = Vec::with_capacity(rows * cols);
    let stride = w as usize * 3;
    let px = img.as_raw();
    for py in 0..gh {
        for pxi in 0..gw {
            for c in 0..3 {
                for dy in 0..p {
                    let start = (py * p + dy) * stride + pxi * p * 3;
                    let row = px.get(start..start + p * 3).unwrap_or(&[]);
                    data.extend(row.chunks_exact(3).map(|q| t.get(c, q[c])));
                }
            }
        }
    }
    finish(data, rows, cols, [1, gh as u32, gw as u32], Layout::Vit { patch })
}

/// Qwen2-VL patches of one still image (repeated to `temporal` frames, as the processor does).
pub fn qwen2_vl_patches<T: FloatElement>(
    img: &RgbImage,
    geometry: QwenPatching,
    norm: &Normalize,
) -> Result<Patches<T>> {
    qwen2_vl_video_patches(std::slice::from_ref(img), geometry, norm)
}

/// Qwen2-VL patches of a clip: frames of one size, padded with the last frame to a multiple of
/// the temporal patch.
pub fn qwen2_vl_video_patches<T: FloatElement>(
    frames: &[RgbImage],
    geometry: QwenPatching,
    norm: &Normalize,
) -> Result<Patches<T>> {
    let first = frames.first().ok_or_else(|| VisionError::invalid("no frames"))?;
    let (w, h) = first.size();
    if let Some(other) = frames.iter().find(|f| f.size() != (w, h)) {
        let (ow, oh) = other.size();
        return Err(VisionError::invalid(format!("frames of different sizes: {w}x{h} and {ow}x{oh}")));
    }
    let factor = geometry.factor();
    if w % factor != 0 || h % factor != 0 {
        return Err(VisionError::bad_shape(w, h, format!("sides are not multiples of patch × merge = {factor}")));
    }
    let (p, tt, m) = (geometry.patch as usize, geometry.temporal as usize, geometry.merge as usize);
    let n_frames = frames.len().div_ceil(tt) * tt;
    let (gt, gh, gw) = (n_frames / tt, (h / geometry.patch) as usize, (w / geometry.patch) as usize);
    let (rows, cols) = (gt * gh * gw, 3 * tt * p * p);
    let t = norm.table::<T>();
    let stride = w as usize * 3;
    let mut data = Vec::with_capacity(rows * cols);
    for ti in 0..gt {
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * p, (bw * m + mw) * p);
                        for c in 0..3 {
                            for tp in 0..tt {
                                // Frames past the end repeat the last one.
                                let f = (ti * tt + tp).min(frames.len() - 1);
                                let px = frames.get(f).map_or(&[][..], |fr| fr.as_raw());
                                for dy in 0..p {
                                    let start = (y0 + dy) * stride + x0 * 3;
                                    let row = px.get(start..start + p * 3).unwrap_or(&[]);
                                    data.extend(row.chunks_exact(3).map(|q| t.get(c, q[c])));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    finish(data, rows, cols, [gt as u32, gh as u32, gw as u32], Layout::Qwen2Vl(geometry))
}

fn finish<T>(data: Vec<T>, rows: usize, cols: usize, grid: [u32; 3], layout: Layout) -> Result<Patches<T>> {
    if data.len() != rows * cols {
        return Err(VisionError::invalid(format!("patch matrix has {} elements, not {rows}x{cols}", data.len())));
    }
    Ok(Patches { data, rows, cols, grid, layout })
}

impl QwenPatching {
    /// The patching as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("qwen2_vl", 1)
            .set("patch", self.patch)
            .set("temporal", self.temporal)
            .set("merge", self.merge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pixel distinct in its (x, y, c) so misplacements show.
    fn coded(w: u32, h: u32) -> RgbImage {
        let data = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| [(x % 251) as u8, (y % 241) as u8, ((x * 3 + y * 7) % 256) as u8]));
        RgbImage::new(w, h, data.collect()).unwrap()
    }

    fn chw(img: &RgbImage) -> Vec<f32> {
        Normalize::IDENTITY.to_chw::<f32>(img)
    }

    #[test]
    fn vit_round_trips_and_matches_the_documented_index() {
        let img = coded(48, 32);
        let p = vit_patches::<f32>(&img, 16, &Normalize::IDENTITY).unwrap();
        assert_eq!(p.shape(), [6, 768]);
        assert_eq!(p.grid_thw(), [1, 2, 3]);
        assert_eq!(p.to_frames_chw(), chw(&img));
        // Row 4 = patch (py 1, px 1); column 1·256 + 3·16 + 5 = green at (y 19, x 21).
        assert_eq!(p.data()[4 * 768 + 256 + 3 * 16 + 5], f32::from(img.pixel(21, 19).unwrap()[1]));
        assert!(vit_patches::<f32>(&coded(47, 32), 16, &Normalize::IDENTITY).is_err());
    }

    #[test]
    fn qwen_round_trips_and_matches_the_documented_index() {
        let img = coded(56, 84);
        let q = QwenPatching::QWEN2_VL;
        let p = qwen2_vl_patches::<f32>(&img, q, &Normalize::IDENTITY).unwrap();
        assert_eq!(p.grid_thw(), [1, 6, 4]);
        assert_eq!(p.shape(), [24, 3 * 2 * 14 * 14]);
        let frames = p.to_frames_chw();
        let one = chw(&img);
        assert_eq!(&frames[..one.len()], &one[..]);
        assert_eq!(&frames[one.len()..], &one[..], "the still image is repeated");
        // bh = 1, bw = 1, mh = 1, mw = 0 → row ((0·3 + 1)·2 + 1)·4 + 1·2 + 0 = 14, which is
        // patch row 1·2 + 1 = 3, patch column 1·2 + 0 = 2; column ((2·2 + 1)·14 + 4)·14 + 6 = blue of frame 1 at
        // (y 3·14 + 4 = 46, x 2·14 + 6 = 34).
        let col = ((2 * 2 + 1) * 14 + 4) * 14 + 6;
        assert_eq!(p.data()[14 * p.shape()[1] + col], f32::from(img.pixel(34, 46).unwrap()[2]));
        assert!(qwen2_vl_patches::<f32>(&coded(42, 84), q, &Normalize::IDENTITY).is_err());
    }

    #[test]
    fn qwen_video_pads_with_the_last_frame() {
        let a = coded(28, 28);
        let mut b = a.clone();
        b.flip_horizontal();
        let q = QwenPatching::QWEN2_VL;
        let p = qwen2_vl_video_patches::<f32>(&[a.clone(), b.clone(), a.clone()], q, &Normalize::IDENTITY).unwrap();
        assert_eq!(p.grid_thw(), [2, 2, 2]);
        let frames = p.to_frames_chw();
        let n = 3 * 28 * 28;
        assert_eq!(&frames[..n], &chw(&a)[..]);
        assert_eq!(&frames[n..2 * n], &chw(&b)[..]);
        assert_eq!(&frames[3 * n..], &chw(&a)[..]);
        assert!(qwen2_vl_video_patches::<f32>(&[a, coded(56, 28)], q, &Normalize::IDENTITY).is_err());
    }
}
