//! The image operator: every image a record carries becomes model-ready pixels.
//!
//! It runs in the engine's parallel part (a pure function of the record), before the tokenizer
//! that places each image's placeholder tokens in the text.

use std::fmt;
use std::sync::Arc;

use zephon_operator::{
    Array, Attachment, DType, Field, OpError, Operator, Record, RngKey, SampleId, Settings, SettingsValue, Shape, Value,
};

use crate::augment::{RandomFlip, RandomResizedCrop};
use crate::decode::{DecodeOptions, decode};
use crate::error::{Result, VisionError};
use crate::image::RgbImage;
use crate::normalize::{FloatElement, Normalize, PIXEL_DTYPES, not_a_pixel_dtype};
use crate::patch::{Patches, QwenPatching, qwen2_vl_patches, vit_patches};
use crate::resize::{ReducingGap, ResizeSpec, decode_resized};

pub use zephon_operator::columns::{IMAGE, IMAGE_BYTES, IMAGE_GRID_THW, IMAGE_SOURCE, IMAGE_TOKENS, PIXEL_VALUES};

/// How pixels are laid out in `pixel_values`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PixelLayout {
    /// The whole image channel-first, `[3, H, W]` (grid `(1, H, W)`).
    Chw,
    /// Plain ViT patches of side `patch`: `[gh·gw, 3·p·p]` (LLaVA / CLIP towers).
    Vit {
        /// Patch side in pixels.
        patch: u32,
    },
    /// Qwen2-VL's processor layout: `[t·h·w, 3·T·p·p]`, merged `merge × merge` per token.
    Qwen2Vl(QwenPatching),
}

/// How many placeholder tokens an image gets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ImageTokens {
    /// Always this many (LLaVA-1.5 at 336 px: 576).
    Fixed(u32),
    /// One per patch (ViT), or one per merged patch group (Qwen2-VL: t·h·w / merge²).
    FromPatches,
}

/// Every setting of the image operator.
#[derive(Clone, Debug)]
pub struct ImagesOptions {
    /// The attachment kind handled (`image`).
    pub kind: String,
    /// Pixel limit, orientation, JPEG backend.
    pub decode: DecodeOptions,
    /// Target size: fixed (crop, pad, stretch) or Qwen2-VL's dynamic resolution.
    pub resize: ResizeSpec,
    /// Decode at 1/2, 1/4 or 1/8 scale in the DCT domain when the target is small enough
    /// (opt-in: the pixels differ slightly from a full decode; needs the `turbojpeg` feature
    /// to have any effect).
    pub reduced_decode: Option<ReducingGap>,
    /// Augmentation: a random resized crop before the resize.
    pub crop: Option<RandomResizedCrop>,
    /// Augmentation: a random horizontal flip.
    pub flip: Option<RandomFlip>,
    /// Rescale and mean/std per channel.
    pub normalize: Normalize,
    /// Element type of `pixel_values`: f32, bf16 or f16 ([`PIXEL_DTYPES`]); [`Images::new`]
    /// refuses the others.
    pub dtype: DType,
    /// Layout of `pixel_values`.
    pub layout: PixelLayout,
    /// Placeholder tokens per image.
    pub tokens: ImageTokens,
    /// The seed augmentations draw from (with the sample id and image index).
    pub seed: u64,
}

impl ImagesOptions {
    /// LLaVA-1.5 style: 336×336 centre crop, CLIP normalisation, ViT patches of 14, 576 tokens,
    /// f32, no augmentation.
    pub fn llava(seed: u64) -> Result<Self> {
        Ok(ImagesOptions {
            kind: IMAGE.into(),
            decode: DecodeOptions::new(),
            resize: ResizeSpec::fixed(336, 336, crate::resize::Fit::CenterCrop)?,
            reduced_decode: None,
            crop: None,
            flip: None,
            normalize: Normalize::CLIP,
            dtype: DType::F32,
            layout: PixelLayout::Vit { patch: 14 },
            tokens: ImageTokens::FromPatches,
            seed,
        })
    }

    /// Qwen2-VL style: dynamic resolution (factor 28, 56² to 28²·1280 pixels), bicubic, CLIP
    /// normalisation, Qwen2-VL patches, one token per 2×2 merged patches, bf16.
    pub fn qwen2_vl(seed: u64) -> Self {
        ImagesOptions {
            kind: IMAGE.into(),
            decode: DecodeOptions::new(),
            resize: ResizeSpec::smart(crate::SmartResize::QWEN2_VL).with_filter(crate::resize::Filter::Bicubic),
            reduced_decode: None,
            crop: None,
            flip: None,
            normalize: Normalize::CLIP,
            dtype: DType::BF16,
            layout: PixelLayout::Qwen2Vl(QwenPatching::QWEN2_VL),
            tokens: ImageTokens::FromPatches,
            seed,
        }
    }

    fn check(&self) -> Result<()> {
        if self.kind.is_empty() {
            return Err(VisionError::invalid("the attachment kind is empty"));
        }
        if !PIXEL_DTYPES.contains(&self.dtype) {
            return Err(not_a_pixel_dtype(self.dtype));
        }
        match (self.layout, self.tokens) {
            (_, ImageTokens::Fixed(0)) => Err(VisionError::invalid("an image needs at least 1 token")),
            (PixelLayout::Chw, ImageTokens::FromPatches) => {
                Err(VisionError::invalid("a [3, H, W] layout has no patches: give a fixed token count"))
            }
            (PixelLayout::Vit { patch: 0 }, _) => Err(VisionError::invalid("patch size 0")),
            _ => Ok(()),
        }
    }
}

/// The image operator (stateless): for each attachment of the configured kind carrying
/// [`IMAGE_BYTES`], decodes (EXIF orientation, pixel limit, truncation checks), optionally augments
/// (random resized crop, flip, drawn from `(seed, sample id, image index)` so every topology and
/// restore sees the same pixels), resizes, normalises and lays out the pixels, and sets
/// [`PIXEL_VALUES`], [`IMAGE_GRID_THW`] and [`IMAGE_TOKENS`], removing the bytes.
///
/// A bad image (truncated, corrupt, too large, unsupported, missing bytes) is an
/// [`OpError::Data`] naming the image's index and source: the bad-record policy stops the run
/// there or skips the whole sample, counted.
#[derive(Clone, Debug)]
pub struct Images {
    config: Arc<ImagesOptions>,
    kind: Field,
}

impl Images {
    /// The operator with `config`, after checking it.
    pub fn new(config: ImagesOptions) -> Result<Self> {
        config.check()?;
        let kind = Field::new(&config.kind);
        Ok(Images { config: Arc::new(config), kind })
    }

    /// The settings.
    pub fn config(&self) -> &ImagesOptions {
        &self.config
    }

    fn one(&self, sample: SampleId, a: &mut Attachment) -> Result<()> {
        let c = &*self.config;
        let bytes = match a.take(IMAGE_BYTES) {
            Some(Value::Bytes(b)) => b,
            Some(other) => {
                return Err(VisionError::invalid(format!("its {IMAGE_BYTES:?} value is {}", other.describe())));
            }
            None => {
                return Err(VisionError::invalid(format!(
                    "it has no {IMAGE_BYTES:?} value (read it with a dataset that yields images)"
                )));
            }
        };
        let img = if c.crop.is_none() && c.flip.is_none() {
            decode_resized(&bytes, &c.decode, &c.resize, c.reduced_decode)?
        } else {
            let key = RngKey::new(c.seed, "image-augment")
                .with(u64::from(sample.dataset))
                .with(u64::from(sample.shard))
                .with(sample.row)
                .with(u64::from(a.item()));
            let mut n = 0;
            let mut draw = move || {
                n += 1;
                key.unit_at(n)
            };
            let mut img = decode(&bytes, &c.decode)?;
            if let Some(crop) = &c.crop {
                let b = crop.params(img.width(), img.height(), &mut draw)?;
                img = img.crop(b.x, b.y, b.width, b.height)?;
            }
            let mut img = c.resize.apply(&img)?;
            if let Some(flip) = &c.flip {
                flip.apply(&mut img, &mut draw);
            }
            img
        };
        drop(bytes);
        let (pixels, grid, tokens) = match c.dtype {
            DType::F32 => self.lay_out::<f32>(&img)?,
            DType::BF16 => self.lay_out::<half::bf16>(&img)?,
            DType::F16 => self.lay_out::<half::f16>(&img)?,
            // `Images::new` refused it already; an error all the same, never a panic.
            other => return Err(not_a_pixel_dtype(other)),
        };
        a.set(&Field::new(PIXEL_VALUES), Value::Array(pixels));
        a.set(&Field::new(IMAGE_GRID_THW), Value::Array(Array::from_vec(grid.to_vec())));
        a.set(&Field::new(IMAGE_TOKENS), Value::Int(i64::from(tokens)));
        Ok(())
    }

    /// `pixel_values`, the grid and the token count of a resized image.
    fn lay_out<T: FloatElement>(&self, img: &RgbImage) -> Result<(Array, [i64; 3], u32)> {
        let c = &*self.config;
        let patches = |p: Patches<T>, per_token: u32| -> Result<(Array, [i64; 3], u32)> {
            let shape = p.shape();
            let [t, h, w] = p.grid_thw();
            let from_patches = (t * h * w) / per_token.max(1);
            let tokens = match c.tokens {
                ImageTokens::Fixed(n) => n,
                ImageTokens::FromPatches => from_patches,
            };
            let array = Array::with_shape(p.into_data(), shape).map_err(|e| VisionError::invalid(e.to_string()))?;
            Ok((array, [i64::from(t), i64::from(h), i64::from(w)], tokens))
        };
        match c.layout {
            PixelLayout::Chw => {
                let (w, h) = img.size();
                let data: Vec<T> = c.normalize.to_chw(img);
                let shape = Shape::new(&[3, h as usize, w as usize]);
                let array = Array::with_shape(data, shape).map_err(|e| VisionError::invalid(e.to_string()))?;
                let tokens = match c.tokens {
                    ImageTokens::Fixed(n) => n,
                    ImageTokens::FromPatches => 0,
                };
                Ok((array, [1, i64::from(h), i64::from(w)], tokens))
            }
            PixelLayout::Vit { patch } => patches(vit_patches::<T>(img, patch, &c.normalize)?, 1),
            PixelLayout::Qwen2Vl(g) => patches(qwen2_vl_patches::<T>(img, g, &c.normalize)?, g.merge() * g.merge()),
        }
    }
}

impl Operator for Images {
    fn name(&self) -> &str {
        "images"
    }

    fn offer(&self) -> zephon_operator::Offer {
        zephon_operator::Offer::none().with_decodes(&self.config.kind)
    }

    fn fingerprint(&self) -> Settings {
        let c = &*self.config;
        let layout: SettingsValue = match c.layout {
            PixelLayout::Chw => "chw".into(),
            PixelLayout::Vit { patch } => Settings::new("vit", 1).set("patch", patch).into(),
            PixelLayout::Qwen2Vl(g) => g.settings().into(),
        };
        let tokens: SettingsValue = match c.tokens {
            ImageTokens::Fixed(n) => n.into(),
            ImageTokens::FromPatches => "from_patches".into(),
        };
        Settings::new("images", 1)
            .set("kind", &c.kind)
            .set("backend", c.decode.backend().name())
            .set("orientation", c.decode.applies_orientation())
            .set("limit", c.decode.pixel_limit().get())
            .set("resize", c.resize.settings())
            .set("reduced", c.reduced_decode.map_or(SettingsValue::None, |g| g.settings()))
            .set("crop", c.crop.map(|x| x.settings()))
            .set("flip", c.flip.map(|x| x.settings()))
            .set("normalize", c.normalize.settings())
            .set("dtype", c.dtype.name())
            .set("layout", layout)
            .set("tokens", tokens)
            .set("seed", c.seed)
    }

    fn describe(&self) -> String {
        let c = &*self.config;
        format!(
            "decode ({} backend{}), resize {:?}{}{}, normalise {:?}, {} {:?}, {} tokens per image",
            c.decode.backend().name(),
            if c.reduced_decode.is_some() { ", reduced-scale decode" } else { "" },
            c.resize,
            if c.crop.is_some() { ", random resized crop" } else { "" },
            if c.flip.is_some() { ", random flip" } else { "" },
            c.normalize,
            c.dtype,
            c.layout,
            match c.tokens {
                ImageTokens::Fixed(n) => n.to_string(),
                ImageTokens::FromPatches => "patch-grid".into(),
            }
        )
    }

    fn apply(&self, mut record: Record, out: &mut Vec<Record>) -> std::result::Result<(), OpError> {
        let sample = record
            .lineage()
            .first_sample()
            .ok_or_else(|| OpError::Fatal("images expects records read from storage".into()))?;
        for a in record.attachments_mut().filter(|a| a.kind() == &self.kind) {
            let source = match a.get(IMAGE_SOURCE) {
                Some(Value::Str(s)) => format!(" ({s})"),
                _ => String::new(),
            };
            let item = a.item();
            self.one(sample, a).map_err(|e| OpError::Data(format!("{} #{item}{source}: {e}", self.kind)))?;
        }
        out.push(record);
        Ok(())
    }
}

impl fmt::Display for PixelLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PixelLayout::Chw => f.write_str("chw"),
            PixelLayout::Vit { patch } => write!(f, "vit patch {patch}"),
            PixelLayout::Qwen2Vl(g) => write!(f, "qwen2-vl patch {} merge {}", g.patch(), g.merge()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixel_values_are_floats() {
        for dtype in PIXEL_DTYPES {
            assert!(Images::new(ImagesOptions { dtype, ..ImagesOptions::qwen2_vl(0) }).is_ok(), "{dtype}");
        }
        for dtype in [DType::U8, DType::I32, DType::U32, DType::I64, DType::F64] {
            let e = Images::new(ImagesOptions { dtype, ..ImagesOptions::qwen2_vl(0) }).unwrap_err().to_string();
            assert!(e.contains("f32, bf16 or f16") && e.contains(&format!("not {dtype}")), "{e}");
        }
    }
}
