//! Resizing to what a vision encoder takes: fixed size (stretch, centre crop, pad to square) or
//! Qwen2-VL's dynamic resolution, with Pillow's convolution filters (fast_image_resize).
//!
//! A [`ResizeSpec`] is validated once; [`ResizeSpec::plan`] turns it into the exact source
//! region and output size for one image, so a caller can size a reduced-scale decode before
//! decoding ([`decode_resized`]). Crops are folded into the resize (one pass over the source
//! region, never a resized copy of the whole image): Pillow's convolution with a source box
//! computes the same sample positions and weights as resizing the whole image and cropping.

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use crate::decode::{DecodeOptions, decode_with_info, probe};
use crate::error::{Result, VisionError};
use crate::image::{PixelLimit, RgbImage, rgb_len};
use crate::smart::SmartResize;

/// A convolution filter, with Pillow's kernels and support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Filter {
    /// Pillow `BILINEAR` (triangle, support 1).
    #[default]
    Bilinear,
    /// Pillow `BICUBIC` (Catmull-Rom, a = -0.5, support 2): what CLIP, LLaVA and Qwen2-VL's
    /// processors use.
    Bicubic,
    /// Pillow `LANCZOS` (support 3).
    Lanczos3,
}

impl Filter {
    fn fir(self) -> FilterType {
        match self {
            Filter::Bilinear => FilterType::Bilinear,
            Filter::Bicubic => FilterType::CatmullRom,
            Filter::Lanczos3 => FilterType::Lanczos3,
        }
    }
}

/// How a fixed target size is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fit {
    /// Resize to exactly the target, ignoring the aspect ratio.
    Stretch,
    /// Scale to cover the target, then cut the centre out. For a square target this is HF's CLIP
    /// processor: shorter side to the target, longer side `int(size * long / short)`, then
    /// `center_crop` with offsets `(resized - target) // 2`.
    CenterCrop,
    /// Pad to a square of the longer side with `fill`, the image centred (`(side - short) // 2`
    /// before it), then resize: LLaVA's `expand2square`. Costs one padded copy of the image.
    PadToSquare {
        /// The padding colour, e.g. [`mean_fill`] of the model's normalisation mean.
        fill: [u8; 3],
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    Fixed { width: u32, height: u32, fit: Fit },
    Smart(SmartResize),
}

/// A validated resize rule: a target and a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResizeSpec {
    target: Target,
    filter: Filter,
}

impl ResizeSpec {
    /// A fixed `width × height` output; refuses a zero side.
    pub fn fixed(width: u32, height: u32, fit: Fit) -> Result<Self> {
        rgb_len(width, height)?;
        Ok(ResizeSpec { target: Target::Fixed { width, height, fit }, filter: Filter::default() })
    }

    /// Qwen2-VL's dynamic resolution (use [`Filter::Bicubic`] to match its processor).
    pub fn smart(rule: SmartResize) -> Self {
        ResizeSpec { target: Target::Smart(rule), filter: Filter::default() }
    }

    /// The same rule with another filter.
    pub fn with_filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// The filter.
    pub fn filter(&self) -> Filter {
        self.filter
    }

    /// The source region and output size for a `width × height` image.
    pub fn plan(&self, width: u32, height: u32) -> Result<ResizePlan> {
        rgb_len(width, height)?;
        let full = Region::Crop { left: 0.0, top: 0.0, width: f64::from(width), height: f64::from(height) };
        let (out, region) = match self.target {
            Target::Smart(rule) => (rule.target(width, height)?, full),
            Target::Fixed { width: tw, height: th, fit } => match fit {
                Fit::Stretch => ((tw, th), full),
                Fit::PadToSquare { fill } => ((tw, th), Region::PadSquare { fill }),
                Fit::CenterCrop => ((tw, th), center_crop(width, height, tw, th)),
            },
        };
        Ok(ResizePlan { src: (width, height), out, region, filter: self.filter })
    }

    /// Plans for `img` and applies the plan.
    pub fn apply(&self, img: &RgbImage) -> Result<RgbImage> {
        self.plan(img.width(), img.height())?.apply(img)
    }
}

/// The part of the source a plan reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Region {
    /// A box in source pixels (fractional: Pillow's `box` argument).
    Crop { left: f64, top: f64, width: f64, height: f64 },
    /// The whole image on a square canvas of `fill`.
    PadSquare { fill: [u8; 3] },
}

/// HF CLIP's resize-shortest-edge then centre crop, as a box in source pixels.
fn center_crop(w: u32, h: u32, tw: u32, th: u32) -> Region {
    let (w64, h64, tw64, th64) = (u64::from(w), u64::from(h), u64::from(tw), u64::from(th));
    // Scale so that the image covers the target; the side that decides is set exactly, the
    // other is `int(size * long / short)` as in HF (never below the target).
    let (rw, rh) = if tw64 * h64 >= th64 * w64 {
        (tw64, (tw64 * h64 / w64).max(th64))
    } else {
        ((th64 * w64 / h64).max(tw64), th64)
    };
    let (left, top) = ((rw - tw64) / 2, (rh - th64) / 2);
    let (sx, sy) = (w as f64 / rw as f64, h as f64 / rh as f64);
    Region::Crop { left: left as f64 * sx, top: top as f64 * sy, width: tw as f64 * sx, height: th as f64 * sy }
}

/// One image's resize: the source region and the output size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResizePlan {
    src: (u32, u32),
    out: (u32, u32),
    region: Region,
    filter: Filter,
}

impl ResizePlan {
    /// `(width, height)` of the result.
    pub fn output_size(&self) -> (u32, u32) {
        self.out
    }

    /// `(width, height)` of the image the plan was made for.
    pub fn source_size(&self) -> (u32, u32) {
        self.src
    }

    /// The smallest source size at which the read region still has `gap ×` the output's
    /// pixels per side: how far a reduced-scale decode may go without upsampling.
    pub fn min_source_size(&self, gap: ReducingGap) -> (u32, u32) {
        let (sw, sh) = (f64::from(self.src.0), f64::from(self.src.1));
        let (rw, rh) = match self.region {
            Region::Crop { width, height, .. } => (width, height),
            Region::PadSquare { .. } => (sw.max(sh), sw.max(sh)),
        };
        let g = gap.get();
        let w = (sw * f64::from(self.out.0) * g / rw).ceil();
        let h = (sh * f64::from(self.out.1) * g / rh).ceil();
        (w.min(sw) as u32, h.min(sh) as u32)
    }

    /// Resizes `img`. It may be a reduced-scale decode of the planned source: the region is
    /// scaled by the ratio of the sizes.
    pub fn apply(&self, img: &RgbImage) -> Result<RgbImage> {
        let (ow, oh) = self.out;
        match self.region {
            Region::PadSquare { fill } => {
                let square = pad_to_square(img, fill)?;
                let side = f64::from(square.width());
                resize_box(&square, (0.0, 0.0, side, side), ow, oh, self.filter)
            }
            Region::Crop { left, top, width, height } => {
                let (sx, sy) = scale_of(self.src, img.size());
                let (iw, ih) = (f64::from(img.width()), f64::from(img.height()));
                // A DCT-scaled decode rounds its sides up (a partial last block): clip the
                // scaled box to the pixels that exist.
                let (l, t) = (left * sx, top * sy);
                let b = (l, t, (width * sx).min(iw - l), (height * sy).min(ih - t));
                resize_box(img, b, ow, oh, self.filter)
            }
        }
    }
}

/// The factors from planned source coordinates to `got`'s: exactly `1/d` when `got` is a
/// libjpeg 1/`d` decode (sides `ceil(side / d)`), else the ratio of the sides.
fn scale_of(src: (u32, u32), got: (u32, u32)) -> (f64, f64) {
    for d in [1u32, 2, 4, 8] {
        if (src.0.div_ceil(d), src.1.div_ceil(d)) == got {
            let s = 1.0 / f64::from(d);
            return (s, s);
        }
    }
    (f64::from(got.0) / f64::from(src.0), f64::from(got.1) / f64::from(src.1))
}

/// How much larger than the resize target a reduced-scale decode must stay (per side); like
/// Pillow's `reducing_gap`. At least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReducingGap(f64);

impl ReducingGap {
    /// Pillow's `thumbnail` default: the reduced image keeps twice the target's side.
    pub const DEFAULT: ReducingGap = ReducingGap(2.0);

    /// A gap of `g`; refuses values below 1 and non-finite ones.
    pub fn new(g: f64) -> Result<Self> {
        if g.is_finite() && g >= 1.0 {
            Ok(ReducingGap(g))
        } else {
            Err(VisionError::invalid(format!("reducing gap {g} (must be finite and ≥ 1)")))
        }
    }

    /// The factor.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for ReducingGap {
    fn default() -> Self {
        ReducingGap::DEFAULT
    }
}

/// Decodes and resizes in one call. With `reduce = Some(gap)` and the `turbojpeg` feature, a
/// large JPEG is decoded at 1/2, 1/4 or 1/8 scale first, keeping `gap ×` the target per side.
pub fn decode_resized(
    data: &[u8],
    opts: &DecodeOptions,
    spec: &ResizeSpec,
    reduce: Option<ReducingGap>,
) -> Result<RgbImage> {
    let mut opts = *opts;
    if let Some(gap) = reduce {
        let info = probe(data)?;
        opts.pixel_limit().check(info.width, info.height)?;
        let (w, h) = if opts.applies_orientation() { info.display_size() } else { (info.width, info.height) };
        let (mw, mh) = spec.plan(w, h)?.min_source_size(gap);
        opts = opts.min_size(mw, mh);
    }
    let (info, img) = decode_with_info(data, &opts)?;
    // Plan on the full-scale size: a reduced decode must land on the same output.
    let (w, h) = if opts.applies_orientation() { info.display_size() } else { (info.width, info.height) };
    spec.plan(w, h)?.apply(&img)
}

thread_local! {
    // The resizer keeps its scratch buffers between calls.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// Resizes the whole image to `width × height`.
pub fn resize(img: &RgbImage, width: u32, height: u32, filter: Filter) -> Result<RgbImage> {
    resize_box(img, (0.0, 0.0, f64::from(img.width()), f64::from(img.height())), width, height, filter)
}

/// Resizes the integer rectangle `(x, y, w, h)` of `img` to `width × height` (crop then
/// resize, in one pass), e.g. for a random resized crop.
pub fn resize_region(
    img: &RgbImage,
    region: (u32, u32, u32, u32),
    width: u32,
    height: u32,
    filter: Filter,
) -> Result<RgbImage> {
    let (x, y, w, h) = region;
    let inside = x.checked_add(w).is_some_and(|r| r <= img.width())
        && y.checked_add(h).is_some_and(|b| b <= img.height())
        && w > 0
        && h > 0;
    if !inside {
        return Err(VisionError::invalid(format!(
            "region {w}x{h} at ({x}, {y}) is not a non-empty part of a {}x{} image",
            img.width(),
            img.height()
        )));
    }
    resize_box(img, (f64::from(x), f64::from(y), f64::from(w), f64::from(h)), width, height, filter)
}

/// Resizes the box `(left, top, width, height)` (source pixels, fractional) to `ow × oh`.
fn resize_box(img: &RgbImage, b: (f64, f64, f64, f64), ow: u32, oh: u32, filter: Filter) -> Result<RgbImage> {
    rgb_len(ow, oh)?;
    let (left, top, bw, bh) = b;
    let (iw, ih) = (f64::from(img.width()), f64::from(img.height()));
    // A tiny tolerance: boxes computed in f64 may overshoot the edge by an ulp.
    let eps = 1e-9;
    let valid = [left, top, bw, bh].iter().all(|v| v.is_finite())
        && left >= 0.0
        && top >= 0.0
        && bw > 0.0
        && bh > 0.0
        && left + bw <= iw + eps
        && top + bh <= ih + eps;
    if !valid {
        return Err(VisionError::invalid(format!("resize box {b:?} outside a {iw}x{ih} image")));
    }
    let (bw, bh) = (bw.min(iw - left), bh.min(ih - top));
    let src = ImageRef::new(img.width(), img.height(), img.as_raw(), PixelType::U8x3)
        .map_err(|e| VisionError::invalid(format!("source image: {e}")))?;
    let mut dst = Image::new(ow, oh, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(filter.fir())).crop(left, top, bw, bh);
    RESIZER.with(|r| {
        let mut r = r.try_borrow_mut().map_err(|_| VisionError::invalid("resizer re-entered"))?;
        r.resize(&src, &mut dst, &options).map_err(|e| VisionError::invalid(format!("resize: {e}")))
    })?;
    RgbImage::new(ow, oh, dst.into_vec())
}

/// The image centred on a square canvas of `fill` with the side of its longer side (LLaVA's
/// `expand2square`: offset `(side - short) // 2`). A square image comes back as a copy.
/// Refuses a canvas over [`PixelLimit::DEFAULT`]: a 65535 × 1 strip, harmless to decode, would
/// otherwise ask for a 4-gigapixel canvas.
pub fn pad_to_square(img: &RgbImage, fill: [u8; 3]) -> Result<RgbImage> {
    let (w, h) = img.size();
    let side = w.max(h);
    if PixelLimit::DEFAULT.check(side, side).is_err() {
        return Err(VisionError::bad_shape(w, h, format!("padding to a {side}x{side} square exceeds the pixel limit")));
    }
    let mut out = RgbImage::filled(side, side, fill)?;
    let (ox, oy) = ((side - w) / 2, (side - h) / 2);
    let stride = side as usize * 3;
    let row_len = w as usize * 3;
    for (y, row) in img.as_raw().chunks_exact(row_len).enumerate() {
        let start = (oy as usize + y) * stride + ox as usize * 3;
        if let Some(dst) = out.as_raw_mut().get_mut(start..start + row_len) {
            dst.copy_from_slice(row);
        }
    }
    Ok(out)
}

/// LLaVA's padding colour from a normalisation mean: `tuple(int(x * 255) for x in mean)`.
pub fn mean_fill(mean: [f64; 3]) -> [u8; 3] {
    mean.map(|m| (m * 255.0).clamp(0.0, 255.0) as u8)
}

impl ResizeSpec {
    /// The spec as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        use zephon_operator::Settings;
        let filter = match self.filter {
            Filter::Bilinear => "bilinear",
            Filter::Bicubic => "bicubic",
            Filter::Lanczos3 => "lanczos3",
        };
        let s = Settings::new("resize", 1).set("filter", filter);
        match self.target {
            Target::Fixed { width, height, fit } => {
                let s = s.set("width", width).set("height", height);
                match fit {
                    Fit::Stretch => s.set("fit", "stretch"),
                    Fit::CenterCrop => s.set("fit", "center_crop"),
                    Fit::PadToSquare { fill } => s.set("fit", "pad_to_square").set("fill", fill.to_vec()),
                }
            }
            Target::Smart(smart) => s.set("smart", smart.settings()),
        }
    }
}

impl ReducingGap {
    /// The gap as a fingerprint value.
    pub(crate) fn settings(&self) -> zephon_operator::SettingsValue {
        self.0.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> RgbImage {
        let data = (0..h).flat_map(|y| (0..w).flat_map(move |x| [(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8]));
        RgbImage::new(w, h, data.collect()).unwrap()
    }

    #[test]
    fn center_crop_matches_hf_sizes() {
        // 640x427 → shortest edge 336: 336 x int(336*640/427) = 503; crop left (503-336)//2 = 83.
        let Region::Crop { left, top, width, height } = center_crop(640, 427, 336, 336) else { panic!() };
        let s = 427.0 / 336.0;
        assert!((left - 83.0 * 640.0 / 503.0).abs() < 1e-9, "{left}");
        assert_eq!(top, 0.0);
        assert!((width - 336.0 * 640.0 / 503.0).abs() < 1e-9);
        assert!((height - 336.0 * s).abs() < 1e-9);
    }

    #[test]
    fn crop_folded_into_resize_equals_resize_then_crop() {
        let img = gradient(97, 61);
        let spec = ResizeSpec::fixed(32, 32, Fit::CenterCrop).unwrap();
        let one_pass = spec.apply(&img).unwrap();
        // HF: shorter side 61 → 32, longer int(32*97/61) = 50; crop left (50-32)//2 = 9.
        let full = resize(&img, 50, 32, Filter::Bilinear).unwrap();
        let two_pass = full.crop(9, 0, 32, 32).unwrap();
        let max_diff = one_pass.as_raw().iter().zip(two_pass.as_raw()).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        assert!(max_diff <= 1, "max diff {max_diff}");
    }

    #[test]
    fn pad_to_square_centres() {
        let img = RgbImage::filled(4, 2, [9, 9, 9]).unwrap();
        let sq = pad_to_square(&img, [1, 2, 3]).unwrap();
        assert_eq!(sq.size(), (4, 4));
        assert_eq!(sq.pixel(0, 0), Some([1, 2, 3]));
        assert_eq!(sq.pixel(0, 1), Some([9, 9, 9]));
        assert_eq!(sq.pixel(3, 2), Some([9, 9, 9]));
        assert_eq!(sq.pixel(3, 3), Some([1, 2, 3]));
        assert_eq!(mean_fill([0.48145466, 0.4578275, 0.40821073]), [122, 116, 104]);
        let strip = RgbImage::filled(20000, 1, [0; 3]).unwrap();
        assert_eq!(pad_to_square(&strip, [0; 3]).unwrap_err().kind(), crate::ErrorKind::BadShape);
    }

    #[test]
    fn smart_plan_and_sizes() {
        let spec = ResizeSpec::smart(SmartResize::QWEN2_VL).with_filter(Filter::Bicubic);
        let out = spec.apply(&gradient(640, 480)).unwrap();
        assert_eq!(out.size(), (644, 476));
        assert!(ResizeSpec::fixed(0, 3, Fit::Stretch).is_err());
        assert_eq!(spec.plan(1, 300).unwrap_err().kind(), crate::ErrorKind::BadShape, "aspect ratio 300 is refused");
    }

    #[test]
    fn constant_image_stays_constant() {
        let img = RgbImage::filled(50, 30, [200, 10, 77]).unwrap();
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos3] {
            let out = resize(&img, 17, 23, f).unwrap();
            assert!(out.as_raw().chunks_exact(3).all(|p| p == [200, 10, 77]), "{f:?}");
        }
    }

    #[test]
    fn region_checks() {
        let img = gradient(10, 10);
        assert!(resize_region(&img, (5, 5, 6, 1), 3, 3, Filter::Bilinear).is_err());
        assert!(resize_region(&img, (5, 5, 5, 5), 3, 3, Filter::Bilinear).is_ok());
        let same = resize_region(&img, (2, 3, 4, 5), 4, 5, Filter::Bilinear).unwrap();
        assert_eq!(same, img.crop(2, 3, 4, 5).unwrap());
    }

    #[test]
    fn min_source_size_for_reduced_decode() {
        let spec = ResizeSpec::fixed(336, 336, Fit::CenterCrop).unwrap();
        let plan = spec.plan(5640, 3172).unwrap();
        let (w, h) = plan.min_source_size(ReducingGap::DEFAULT);
        assert_eq!(h, 672);
        assert!(w >= 672 * 5640 / 3172);
        assert!(ReducingGap::new(0.5).is_err());
        assert_eq!(scale_of((5641, 3172), (706, 397)), (0.125, 0.125));
        assert_eq!(scale_of((100, 50), (50, 25)), (0.5, 0.5));
        assert_eq!(scale_of((100, 50), (30, 10)), (0.3, 0.2));
    }
}
