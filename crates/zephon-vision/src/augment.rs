//! Augmentations whose randomness comes from the caller.
//!
//! The engine draws from a counter-based RNG keyed by (sample id, image index), so an image gets
//! the same crop and flip on every topology and after a restore. Here a draw is any
//! `FnMut() -> f64` returning uniform values in `[0, 1)`; values outside are clamped (NaN counts
//! as 0), so a bad source cannot make a crop leave the image. Results depend only on the draws.

use crate::error::{Result, VisionError};
use crate::image::RgbImage;
use crate::resize::{Filter, resize_region};

/// A rectangle of an image, in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CropBox {
    /// Left column.
    pub x: u32,
    /// Top row.
    pub y: u32,
    /// Width (≥ 1).
    pub width: u32,
    /// Height (≥ 1).
    pub height: u32,
}

fn draw(src: &mut dyn FnMut() -> f64) -> f64 {
    let u = src();
    if u.is_nan() { 0.0 } else { u.clamp(0.0, 1.0 - f64::EPSILON / 2.0) }
}

/// Python's `round` (ties to even) to an integer, saturating.
fn round_py(v: f64) -> i64 {
    v.round_ties_even() as i64
}

/// torchvision's `RandomResizedCrop`: a random area fraction and log-uniform aspect ratio, up
/// to 10 attempts, then a centre crop clamped to the ratio range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomResizedCrop {
    scale: (f64, f64),
    ratio: (f64, f64),
}

impl RandomResizedCrop {
    /// torchvision's defaults: `scale = (0.08, 1.0)`, `ratio = (3/4, 4/3)`.
    pub const DEFAULT: RandomResizedCrop = RandomResizedCrop { scale: (0.08, 1.0), ratio: (3.0 / 4.0, 4.0 / 3.0) };

    /// Attempts before the centre-crop fallback (torchvision's constant).
    pub const ATTEMPTS: usize = 10;

    /// A crop rule; refuses `scale` outside `(0, 1]` or decreasing, `ratio` not positive or
    /// decreasing, and non-finite values.
    pub fn new(scale: (f64, f64), ratio: (f64, f64)) -> Result<Self> {
        let ok = scale.0 > 0.0
            && scale.0 <= scale.1
            && scale.1 <= 1.0
            && ratio.0 > 0.0
            && ratio.0 <= ratio.1
            && ratio.1.is_finite();
        if !ok {
            return Err(VisionError::invalid(format!("random resized crop scale {scale:?}, ratio {ratio:?}")));
        }
        Ok(RandomResizedCrop { scale, ratio })
    }

    /// The crop for a `width × height` image (torchvision's `get_params`). Each attempt takes
    /// two draws (area, then log-ratio); a successful one two more (top, then left, like
    /// `torch.randint(0, n - size + 1)` as `floor(u · (n - size + 1))`). Arithmetic is f64
    /// with Python's rounding, where torchvision's tensors are f32: same rule, not the same bits.
    pub fn params(&self, width: u32, height: u32, src: &mut dyn FnMut() -> f64) -> Result<CropBox> {
        if width == 0 || height == 0 {
            return Err(VisionError::bad_shape(width, height, "a side of 0"));
        }
        let (wf, hf) = (f64::from(width), f64::from(height));
        let area = wf * hf;
        let (lr0, lr1) = (self.ratio.0.ln(), self.ratio.1.ln());
        for _ in 0..Self::ATTEMPTS {
            let target_area = area * (self.scale.0 + (self.scale.1 - self.scale.0) * draw(src));
            let aspect = (lr0 + (lr1 - lr0) * draw(src)).exp();
            let w = round_py((target_area * aspect).sqrt());
            let h = round_py((target_area / aspect).sqrt());
            if 0 < w && w <= i64::from(width) && 0 < h && h <= i64::from(height) {
                let (w, h) = (w as u32, h as u32);
                let y = ((draw(src) * f64::from(height - h + 1)) as u32).min(height - h);
                let x = ((draw(src) * f64::from(width - w + 1)) as u32).min(width - w);
                return Ok(CropBox { x, y, width: w, height: h });
            }
        }
        let in_ratio = wf / hf;
        let (w, h) = if in_ratio < self.ratio.0 {
            (width, round_py(wf / self.ratio.0).clamp(1, i64::from(height)) as u32)
        } else if in_ratio > self.ratio.1 {
            (round_py(hf * self.ratio.1).clamp(1, i64::from(width)) as u32, height)
        } else {
            (width, height)
        };
        Ok(CropBox { x: (width - w) / 2, y: (height - h) / 2, width: w, height: h })
    }

    /// Crops with [`params`](Self::params) and resizes the crop to `out_width × out_height`.
    pub fn apply(
        &self,
        img: &RgbImage,
        out_width: u32,
        out_height: u32,
        filter: Filter,
        src: &mut dyn FnMut() -> f64,
    ) -> Result<RgbImage> {
        let b = self.params(img.width(), img.height(), src)?;
        resize_region(img, (b.x, b.y, b.width, b.height), out_width, out_height, filter)
    }
}

impl Default for RandomResizedCrop {
    fn default() -> Self {
        RandomResizedCrop::DEFAULT
    }
}

/// A horizontal flip with probability `p`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomFlip {
    p: f64,
}

impl RandomFlip {
    /// torchvision's `RandomHorizontalFlip()` probability.
    pub const HALF: RandomFlip = RandomFlip { p: 0.5 };

    /// A flip with probability `p` in `[0, 1]`.
    pub fn new(p: f64) -> Result<Self> {
        if (0.0..=1.0).contains(&p) {
            Ok(RandomFlip { p })
        } else {
            Err(VisionError::invalid(format!("flip probability {p}")))
        }
    }

    /// Takes one draw; flips when it is below `p`. Returns whether it flipped.
    pub fn apply(&self, img: &mut RgbImage, src: &mut dyn FnMut() -> f64) -> bool {
        let flip = draw(src) < self.p;
        if flip {
            img.flip_horizontal();
        }
        flip
    }
}

impl RandomResizedCrop {
    /// The crop as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("random_resized_crop", 1)
            .set("scale", vec![self.scale.0, self.scale.1])
            .set("ratio", vec![self.ratio.0, self.ratio.1])
    }
}

impl RandomFlip {
    /// The flip as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("random_flip", 1).set("p", self.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed sequence of draws, then 0.5 forever.
    fn seq(v: &[f64]) -> impl FnMut() -> f64 + '_ {
        let mut i = 0;
        move || {
            i += 1;
            v.get(i - 1).copied().unwrap_or(0.5)
        }
    }

    #[test]
    fn first_attempt_worked_by_hand() {
        // 200x100, u = (0.5, 0.5, 0.25, 0.75): area 20000 · (0.08 + 0.92·0.5) = 10800;
        // ratio exp((ln 0.75 + ln 4/3)/2) = 1 → w = h = round(sqrt 10800) = round(103.92) = 104 > 100
        // fails; second attempt u = (0.1, 0.5): area 20000·0.172 = 3440, w = h = round(58.65) = 59;
        // top floor(0.25·42) = 10, left floor(0.75·142) = 106.
        let mut d = seq(&[0.5, 0.5, 0.1, 0.5, 0.25, 0.75]);
        let b = RandomResizedCrop::DEFAULT.params(200, 100, &mut d).unwrap();
        assert_eq!(b, CropBox { x: 106, y: 10, width: 59, height: 59 });
    }

    #[test]
    fn deterministic_given_the_draws_and_always_inside() {
        let rrc = RandomResizedCrop::DEFAULT;
        for seed in 0..200u64 {
            let mk = |s: u64| {
                let mut state = s.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                move || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 11) as f64 / (1u64 << 53) as f64
                }
            };
            let (w, h) = (37 + (seed as u32 * 13) % 500, 11 + (seed as u32 * 7) % 300);
            let a = rrc.params(w, h, &mut mk(seed)).unwrap();
            let b = rrc.params(w, h, &mut mk(seed)).unwrap();
            assert_eq!(a, b);
            assert!(a.width >= 1 && a.height >= 1 && a.x + a.width <= w && a.y + a.height <= h, "{a:?} in {w}x{h}");
        }
    }

    #[test]
    fn fallback_is_a_ratio_clamped_centre_crop() {
        // Draws of 1.0 (clamped below 1) give area ≈ 1.0·area and ratio 4/3 on a 1000x10 strip:
        // w = round(sqrt(10000·4/3)) = 115 fits, h = round(sqrt(10000·3/4)) = 87 > 10 fails.
        let mut ones = || 1.0;
        let b = RandomResizedCrop::DEFAULT.params(1000, 10, &mut ones).unwrap();
        // in_ratio 100 > 4/3: h = 10, w = round(10·4/3) = 13, centred.
        assert_eq!(b, CropBox { x: 493, y: 0, width: 13, height: 10 });
        let mut nan = || f64::NAN;
        let b = RandomResizedCrop::DEFAULT.params(10, 1000, &mut nan).unwrap();
        assert!(b.x + b.width <= 10 && b.y + b.height <= 1000);
    }

    #[test]
    fn flip_uses_one_draw() {
        let img = RgbImage::new(2, 1, vec![1, 1, 1, 2, 2, 2]).unwrap();
        let mut a = img.clone();
        assert!(RandomFlip::HALF.apply(&mut a, &mut || 0.2));
        assert_eq!(a.as_raw(), &[2, 2, 2, 1, 1, 1]);
        let mut b = img.clone();
        assert!(!RandomFlip::HALF.apply(&mut b, &mut || 0.7));
        assert_eq!(b, img);
        assert!(RandomFlip::new(1.5).is_err());
        assert!(RandomResizedCrop::new((0.5, 0.1), (1.0, 1.0)).is_err());
        let out = RandomResizedCrop::DEFAULT.apply(&img, 4, 4, Filter::Bilinear, &mut || 0.3).unwrap();
        assert_eq!(out.size(), (4, 4));
    }
}
