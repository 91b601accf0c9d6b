//! From RGB8 to normalised floats: `(v · rescale − mean[c]) / std[c]` as f32, bf16 or f16.
//!
//! The arithmetic is HF's image processors' to the bit: `rescale` multiplies in f64 and rounds to
//! f32 (`image.astype(np.float64) * scale` then `.astype(np.float32)`), mean and std are the f64
//! constants rounded to f32 (`np.array(mean, dtype=np.float32)`), and the subtraction and
//! division happen in f32. Because a channel has only 256 inputs, each [`Normalize`] becomes a
//! 256-entry table per channel and output type: the per-pixel cost is one lookup.

use crate::error::{Result, VisionError};
use crate::image::RgbImage;

use zephon_operator::{DType, Element};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// The dtypes normalised pixels can be, in the interface's one vocabulary ([`DType`]):
/// f32, bf16 and f16. Normalised values are fractions, so the integer dtypes would lose them,
/// and f64 would only widen values that are computed in f32 (as HF's processors compute them).
pub const PIXEL_DTYPES: [DType; 3] = [DType::F32, DType::BF16, DType::F16];

/// The error for a dtype normalised pixels cannot be (one not in [`PIXEL_DTYPES`]).
pub(crate) fn not_a_pixel_dtype(dtype: DType) -> VisionError {
    VisionError::invalid(format!(
        "normalised pixels can be f32, bf16 or f16, not {dtype} (they are fractions, computed in f32)"
    ))
}

/// An [`Element`] normalised pixels can be written as (f32, [`half::bf16`] or [`half::f16`]):
/// the interface's element trait plus the rounding from f32 that the lookup tables need. Its
/// dtype is [`Element::DTYPE`], one of [`PIXEL_DTYPES`].
pub trait FloatElement: Element + Default + sealed::Sealed {
    /// Rounds an f32 to this type (nearest, ties to even).
    fn from_f32(v: f32) -> Self;
    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
}

impl FloatElement for f32 {
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// bfloat16, rounded to nearest even from f32, as `tensor.to(torch.bfloat16)`.
impl FloatElement for half::bf16 {
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

/// IEEE binary16, rounded to nearest even from f32.
impl FloatElement for half::f16 {
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        self.to_f32()
    }
}

/// A validated per-channel normalisation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    mean: [f64; 3],
    std: [f64; 3],
    rescale: f64,
}

impl Normalize {
    /// OpenAI CLIP's constants (also Qwen2-VL's and LLaVA's), rescale 1/255.
    pub const CLIP: Normalize = Normalize {
        mean: [0.48145466, 0.4578275, 0.40821073],
        std: [0.26862954, 0.26130258, 0.27577711],
        rescale: 1.0 / 255.0,
    };

    /// ImageNet's constants, rescale 1/255.
    pub const IMAGENET: Normalize =
        Normalize { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], rescale: 1.0 / 255.0 };

    /// Mean and std 0.5 (SigLIP and others): values in [-1, 1].
    pub const HALF: Normalize = Normalize { mean: [0.5; 3], std: [0.5; 3], rescale: 1.0 / 255.0 };

    /// The raw byte values as floats (mean 0, std 1, rescale 1); useful to check layouts.
    pub const IDENTITY: Normalize = Normalize { mean: [0.0; 3], std: [1.0; 3], rescale: 1.0 };

    /// A normalisation; refuses non-finite values, a std or rescale that is not positive.
    pub fn new(mean: [f64; 3], std: [f64; 3], rescale: f64) -> Result<Self> {
        let ok = mean.iter().all(|m| m.is_finite())
            && std.iter().all(|s| s.is_finite() && *s as f32 > 0.0)
            && rescale.is_finite()
            && rescale > 0.0;
        if !ok {
            return Err(VisionError::invalid(format!(
                "normalize needs finite mean, std > 0 and rescale > 0; got mean {mean:?}, std {std:?}, rescale {rescale}"
            )));
        }
        Ok(Normalize { mean, std, rescale })
    }

    /// The per-channel means.
    pub fn mean(&self) -> [f64; 3] {
        self.mean
    }

    /// The per-channel standard deviations.
    pub fn std(&self) -> [f64; 3] {
        self.std
    }

    /// The factor applied to byte values first.
    pub fn rescale(&self) -> f64 {
        self.rescale
    }

    /// One byte value of channel `c` (0, 1, 2), normalised as f32.
    pub fn value(&self, c: usize, v: u8) -> f32 {
        let c = c.min(2);
        let x = (f64::from(v) * self.rescale) as f32;
        (x - self.mean[c] as f32) / self.std[c] as f32
    }

    /// The lookup table for output type `T`.
    pub fn table<T: FloatElement>(&self) -> Table<T> {
        let mut t = [[T::default(); 256]; 3];
        for (c, row) in t.iter_mut().enumerate() {
            for (v, slot) in row.iter_mut().enumerate() {
                *slot = T::from_f32(self.value(c, v as u8));
            }
        }
        Table(Box::new(t))
    }

    /// The image as `[3, H, W]` (channel planes), the layout of `pixel_values` for a fixed-size
    /// encoder (CLIP, SigLIP).
    pub fn to_chw<T: FloatElement>(&self, img: &RgbImage) -> Vec<T> {
        let t = self.table::<T>();
        let plane = img.width() as usize * img.height() as usize;
        let mut out = vec![T::default(); plane * 3];
        let (r, rest) = out.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (i, p) in img.as_raw().chunks_exact(3).enumerate() {
            r[i] = t.get(0, p[0]);
            g[i] = t.get(1, p[1]);
            b[i] = t.get(2, p[2]);
        }
        out
    }

    /// The image as `[H, W, 3]` (interleaved, the byte layout of [`RgbImage`]).
    pub fn to_hwc<T: FloatElement>(&self, img: &RgbImage) -> Vec<T> {
        let t = self.table::<T>();
        img.as_raw().chunks_exact(3).flat_map(|p| [t.get(0, p[0]), t.get(1, p[1]), t.get(2, p[2])]).collect()
    }
}

/// A per-channel lookup table from byte values to normalised `T`.
#[derive(Clone)]
pub struct Table<T: FloatElement>(Box<[[T; 256]; 3]>);

impl<T: FloatElement> Table<T> {
    /// The value for byte `v` of channel `c` (0, 1, 2; larger values read channel 2).
    #[inline]
    pub fn get(&self, c: usize, v: u8) -> T {
        self.0[c.min(2)][usize::from(v)]
    }
}

impl Normalize {
    /// The constants as fingerprint settings.
    pub(crate) fn settings(&self) -> zephon_operator::Settings {
        zephon_operator::Settings::new("normalize", 1)
            .set("mean", self.mean.to_vec())
            .set("std", self.std.to_vec())
            .set("rescale", self.rescale)
    }
}

impl<T: FloatElement> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Table(3 × 256 entries)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn clip_values_follow_numpy_float32_arithmetic() {
        let n = Normalize::CLIP;
        // (np.float32(0/255) - np.float32(0.48145466)) / np.float32(0.26862954)
        let want = (0.0f32 - 0.48145466f64 as f32) / 0.26862954f64 as f32;
        assert_eq!(n.value(0, 0), want);
        let x = (255.0f64 * (1.0 / 255.0)) as f32;
        assert_eq!(x, 1.0);
        assert_eq!(n.value(2, 255), (1.0 - 0.40821073f64 as f32) / 0.27577711f64 as f32);
        assert!((n.value(0, 0) + 1.7922626).abs() < 1e-6);
    }

    #[test]
    fn tables_round_to_nearest_even() {
        let n = Normalize::CLIP;
        let tb = n.table::<bf16>();
        let th = n.table::<f16>();
        for c in 0..3 {
            for v in 0..=255u8 {
                assert_eq!(tb.get(c, v), bf16::from_f32(n.value(c, v)));
                assert_eq!(th.get(c, v), f16::from_f32(n.value(c, v)));
            }
        }
        // 1 + 2^-8 is halfway between two bf16 values: ties to the even one (1.0).
        assert_eq!(bf16::from_f32(1.0 + 1.0 / 256.0).to_f32(), 1.0);
    }

    #[test]
    fn chw_and_hwc_layouts() {
        let img = RgbImage::new(2, 1, vec![1, 2, 3, 4, 5, 6]).unwrap();
        let chw = Normalize::IDENTITY.to_chw::<f32>(&img);
        assert_eq!(chw, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let hwc = Normalize::IDENTITY.to_hwc::<f32>(&img);
        assert_eq!(hwc, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }

    #[test]
    fn constructor_refuses_bad_values() {
        assert!(Normalize::new([0.0; 3], [0.0, 1.0, 1.0], 1.0).is_err());
        assert!(Normalize::new([f64::NAN, 0.0, 0.0], [1.0; 3], 1.0).is_err());
        assert!(Normalize::new([0.0; 3], [1.0; 3], -1.0).is_err());
        assert!(Normalize::new([0.0; 3], [1e-300, 1.0, 1.0], 1.0).is_err(), "std rounds to 0 in f32");
        assert!(Normalize::new([0.5; 3], [0.5; 3], 1.0 / 255.0).is_ok());
    }
}
