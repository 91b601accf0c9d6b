//! The pure image layer of zephon: bytes in, model-ready pixel arrays out.
//!
//! - [`decode`]: JPEG (zune-jpeg, or libjpeg-turbo with the `turbojpeg` feature) and PNG to
//!   [`RgbImage`] (RGB8, `H×W×3`), EXIF orientation applied, grey/CMYK/YCCK made RGB as Pillow's
//!   `convert("RGB")` does.
//! - [`resize`]: Pillow-compatible convolution resizes (bilinear, bicubic, Lanczos3) to a fixed
//!   size with centre crop or pad-to-square, or to Qwen2-VL's dynamic resolution
//!   ([`smart_resize`]).
//! - [`normalize`] and [`patch`]: rescale and per-channel mean/std to f32, bf16 or f16, laid out
//!   channel-first, as ViT patches, or exactly as Qwen2-VL's processor flattens them.
//! - [`augment`]: random resized crop and flip, drawing from randomness the caller supplies.
//!
//! **The design decision: bad input is data, not a crash, and never a silent grey image.**
//! Every decode first walks the headers and refuses, before allocating, an image over the
//! [`PixelLimit`] (decompression bombs); it then proves the JPEG stream whole (each scan ends at
//! a marker, EOI is reached, every component is coded), because the decoder underneath happily
//! returns half-grey pictures for truncated files. Every failure is a [`VisionError`] with an
//! [`ErrorKind`] that the engine can count and skip on. No function of this crate panics on
//! input bytes, and none loops longer than its input.
//!
//! Randomness is an argument: augmentations take draws from the caller (the engine's counter RNG
//! keyed by sample and image), so results are the same on every topology and after a restore.
//!
//! ```no_run
//! use zephon_vision::normalize::Normalize;
//! use zephon_vision::patch::{QwenPatching, qwen2_vl_patches};
//! use zephon_vision::resize::{Filter, ResizeSpec};
//! use zephon_vision::{DecodeOptions, SmartResize, decode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("photo.jpg")?;
//! let img = decode(&bytes, &DecodeOptions::new())?;
//! let img = ResizeSpec::smart(SmartResize::QWEN2_VL).with_filter(Filter::Bicubic).apply(&img)?;
//! let patches = qwen2_vl_patches::<zephon_vision::half::bf16>(&img, QwenPatching::QWEN2_VL, &Normalize::CLIP)?;
//! let [t, h, w] = patches.grid_thw(); // Qwen2-VL's image_grid_thw
//! assert_eq!(patches.shape(), [(t * h * w) as usize, 3 * 2 * 14 * 14]);
//! # Ok(())
//! # }
//! ```
//!
//! [`Images`] is the engine operator built on these: it turns the image attachments a reader
//! put on a record into `pixel_values`, `image_grid_thw` and a placeholder count, in the
//! parallel part of the pipeline. This crate knows no datasets, placeholders in token streams
//! or batches (the tokenizer places images; packers move them). It does no colour
//! management (ICC profiles are ignored, as Pillow's `convert` ignores them) and decodes no GIF,
//! WebP or video.

#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod augment;
mod decode;
mod error;
mod image;
mod jpeg;
pub mod normalize;
mod op;
mod orientation;
pub mod patch;
mod png;
pub mod resize;
mod smart;

#[cfg(feature = "turbojpeg")]
pub use decode::decode_jpeg_turbo;
pub use decode::{DecodeOptions, ImageInfo, decode, decode_with_info, probe, sniff};
pub use error::{ErrorKind, Format, Result, VisionError};
/// The `half` crate, for the [`bf16`](half::bf16) and [`f16`](half::f16) element types.
pub use half;
pub use image::{PixelLimit, RgbImage};
pub use jpeg::JpegBackend;
/// The image attachment's kind and value names, from the one list the readers, the tokenizer
/// and the sinks share (`zephon_operator::columns`).
pub use op::{IMAGE, IMAGE_BYTES, IMAGE_GRID_THW, IMAGE_SOURCE, IMAGE_TOKENS, PIXEL_VALUES};
pub use op::{ImageTokens, Images, ImagesOptions, PixelLayout};
pub use orientation::Orientation;
pub use smart::{SmartResize, smart_resize};
