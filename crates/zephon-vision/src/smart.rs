//! Qwen2-VL's dynamic resolution (`smart_resize`), reproduced to the last rounding.
//!
//! The formula is that of transformers' `Qwen2VLImageProcessor` (also used by Qwen2.5-VL):
//!
//! ```python
//! if max(height, width) / min(height, width) > 200: raise ValueError(...)
//! h_bar = round(height / factor) * factor          # Python round: ties to even
//! w_bar = round(width / factor) * factor
//! if h_bar * w_bar > max_pixels:
//!     beta = math.sqrt((height * width) / max_pixels)
//!     h_bar = max(factor, math.floor(height / beta / factor) * factor)
//!     w_bar = max(factor, math.floor(width / beta / factor) * factor)
//! elif h_bar * w_bar < min_pixels:
//!     beta = math.sqrt(min_pixels / (height * width))
//!     h_bar = math.ceil(height * beta / factor) * factor
//!     w_bar = math.ceil(width * beta / factor) * factor
//! return h_bar, w_bar
//! ```
//!
//! Every operation is the same IEEE f64 operation in the same order (Python's int/int true
//! division is correctly rounded, as is f64 division of exactly representable integers), so the
//! sizes agree bit for bit. Older transformers releases also refused sides below `factor`;
//! this follows the current one, which sizes such images up instead.

use crate::error::{Result, VisionError};

/// Qwen2-VL's aspect-ratio limit.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// A validated dynamic-resolution rule: sides multiples of `factor` (patch × merge), area in
/// `[min_pixels, max_pixels]`, aspect ratio kept as closely as the grid allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmartResize {
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
}

impl SmartResize {
    /// Qwen2-VL's processor defaults: factor 28 (patch 14 × merge 2), 56·56 to 28·28·1280
    /// pixels.
    pub const QWEN2_VL: SmartResize = SmartResize { factor: 28, min_pixels: 56 * 56, max_pixels: 28 * 28 * 1280 };

    /// A rule; refuses a zero factor, a zero `max_pixels` and `min_pixels > max_pixels`.
    pub fn new(factor: u32, min_pixels: u64, max_pixels: u64) -> Result<Self> {
        if factor == 0 || max_pixels == 0 || min_pixels > max_pixels {
            return Err(VisionError::invalid(format!(
                "smart resize needs factor ≥ 1 and 0 < min_pixels ≤ max_pixels, got factor {factor}, \
                 [{min_pixels}, {max_pixels}]"
            )));
        }
        // Beyond 2^53 the f64 steps would no longer mirror Python's exact integers.
        if max_pixels > 1 << 52 || min_pixels > 1 << 52 {
            return Err(VisionError::invalid("smart resize pixel bounds above 2^52"));
        }
        Ok(SmartResize { factor, min_pixels, max_pixels })
    }

    /// Side multiple.
    pub fn factor(&self) -> u32 {
        self.factor
    }

    /// Lower area bound.
    pub fn min_pixels(&self) -> u64 {
        self.min_pixels
    }

    /// Upper area bound.
    pub fn max_pixels(&self) -> u64 {
        self.max_pixels
    }

    /// The target `(width, height)` for a `width × height` image.
    pub fn target(&self, width: u32, height: u32) -> Result<(u32, u32)> {
        let (h, w) = smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)?;
        Ok((w, h))
    }
}

impl Default for SmartResize {
    fn default() -> Self {
        SmartResize::QWEN2_VL
    }
}

/// The Python function itself, same argument and result order: `(height, width)` in,
/// `(h_bar, w_bar)` out. Refuses a zero side, an aspect ratio over 200 and an invalid rule.
pub fn smart_resize(height: u32, width: u32, factor: u32, min_pixels: u64, max_pixels: u64) -> Result<(u32, u32)> {
    SmartResize::new(factor, min_pixels, max_pixels)?;
    if height == 0 || width == 0 {
        return Err(VisionError::bad_shape(width, height, "a side of 0"));
    }
    let (hf, wf, f) = (f64::from(height), f64::from(width), f64::from(factor));
    let ratio = hf.max(wf) / hf.min(wf);
    if ratio > MAX_ASPECT_RATIO {
        return Err(VisionError::bad_shape(
            width,
            height,
            format!("aspect ratio {ratio} exceeds {MAX_ASPECT_RATIO} (Qwen2-VL's limit)"),
        ));
    }
    let fu = u64::from(factor);
    let round_by = |x: f64| (x / f).round_ties_even() as u64 * fu;
    let (mut h_bar, mut w_bar) = (round_by(hf), round_by(wf));
    // Both < 2^32 · 2^32 / factor: the product fits u64 (Python ints never overflow).
    let area = u128::from(h_bar) * u128::from(w_bar);
    if area > u128::from(max_pixels) {
        let beta = ((u64::from(height) * u64::from(width)) as f64 / max_pixels as f64).sqrt();
        h_bar = fu.max((hf / beta / f).floor() as u64 * fu);
        w_bar = fu.max((wf / beta / f).floor() as u64 * fu);
    } else if area < u128::from(min_pixels) {
        let beta = (min_pixels as f64 / (u64::from(height) * u64::from(width)) as f64).sqrt();
        h_bar = (hf * beta / f).ceil() as u64 * fu;
        w_bar = (wf * beta / f).ceil() as u64 * fu;
    }
    match (u32::try_from(h_bar), u32::try_from(w_bar)) {
        (Ok(h), Ok(w)) => Ok((h, w)),
        _ => Err(VisionError::bad_shape(width, height, format!("target {w_bar}x{h_bar} does not fit u32"))),
    }
}

impl SmartResize {
    /// The rule as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("smart_resize", 1)
            .set("factor", self.factor)
            .set("min_pixels", self.min_pixels)
            .set("max_pixels", self.max_pixels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn qwen(h: u32, w: u32) -> (u32, u32) {
        smart_resize(h, w, 28, 56 * 56, 28 * 28 * 1280).unwrap()
    }

    /// Each expected value worked through the Python formula by hand (and checked in CPython).
    #[test]
    fn matches_the_python_formula() {
        // Within bounds: 480/28 = 17.14 → 17·28 = 476; 640/28 = 22.86 → 23·28 = 644.
        assert_eq!(qwen(480, 640), (476, 644));
        // 427/28 = 15.25 → 420.
        assert_eq!(qwen(427, 640), (420, 644));
        // 100/28 = 3.57 → 4 → 112; 112² = 12544 ≥ 3136.
        assert_eq!(qwen(100, 100), (112, 112));
        // Too big: 3164·5628 > 1003520; beta = sqrt(3172·5640/1003520) = 4.2222;
        // 3172/beta/28 = 26.83 → 728, 5640/beta/28 = 47.71 → 1316.
        assert_eq!(qwen(3172, 5640), (728, 1316));
        // beta = sqrt(12e6/1003520) = 3.4580: 30.98 → 840, 41.31 → 1148.
        assert_eq!(qwen(3000, 4000), (840, 1148));
        // 1080p lands on the same grid as the wallpaper: 26.03 → 728, 46.27 → 1316.
        assert_eq!(qwen(1080, 1920), (728, 1316));
        // Ties to even: 42/28 = 1.5 → 2, 70/28 = 2.5 → 2 (half-up would give 56 × 84).
        assert_eq!(qwen(42, 70), (56, 56));
        // Too small: 14/28 = 0.5 → 0; beta = sqrt(3136/196) = 4; ceil(14·4/28) = 2 → 56.
        assert_eq!(qwen(14, 14), (56, 56));
        // 1×200 (ratio exactly 200 passes): beta = sqrt(3136/200) = 3.9598;
        // ceil(3.9598/28) = 1 → 28, ceil(200·3.9598/28) = ceil(28.28) = 29 → 812.
        assert_eq!(qwen(1, 200), (28, 812));
        // 2×300: beta = sqrt(3136/600) = 2.2862; ceil(0.163) → 28, ceil(24.49) = 25 → 700.
        assert_eq!(qwen(2, 300), (28, 700));
        // A smaller budget (max 128·28·28 = 100352): beta = 13.352; 8.48 → 224, 15.09 → 420.
        assert_eq!(smart_resize(3172, 5640, 28, 3136, 128 * 28 * 28).unwrap(), (224, 420));
    }

    #[test]
    fn refuses_extreme_shapes_and_bad_rules() {
        assert_eq!(smart_resize(1, 201, 28, 3136, 1003520).unwrap_err().kind(), ErrorKind::BadShape);
        assert_eq!(smart_resize(0, 20, 28, 3136, 1003520).unwrap_err().kind(), ErrorKind::BadShape);
        assert_eq!(SmartResize::new(0, 1, 2).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(SmartResize::new(28, 3, 2).unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(SmartResize::QWEN2_VL.target(640, 480).unwrap(), (644, 476));
    }

    #[test]
    fn results_are_on_the_grid_and_within_budget_for_moderate_shapes() {
        let r = SmartResize::QWEN2_VL;
        for h in (20..3000).step_by(97) {
            for w in (20..3000).step_by(89) {
                let (tw, th) = r.target(w, h).unwrap();
                assert!(tw % 28 == 0 && th % 28 == 0 && tw > 0 && th > 0);
                let area = u64::from(tw) * u64::from(th);
                assert!(area <= r.max_pixels(), "{w}x{h} -> {tw}x{th}");
            }
        }
    }
}
