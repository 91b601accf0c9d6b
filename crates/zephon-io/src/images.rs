//! Images as record attachments: what every reader makes of the images it finds.
//!
//! Readers find images their own way (a Parquet column, paths in a JSONL field, tar members);
//! this module turns them into attachments alike, so that a tokenizer sees the same thing
//! whatever the format. Images stay encoded: decoding is the vision operators' business.

use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use zephon_core::columns::{IMAGE, IMAGE_BYTES, IMAGE_SOURCE};
use zephon_core::{Attachment, Buffer, Field, OpError, Record, Value};

use crate::shard::open_regular;

/// One image of a row: its encoded bytes and where it came from.
pub(crate) struct Image {
    pub(crate) bytes: Buffer<u8>,
    pub(crate) source: Arc<str>,
}

/// The names attachments are made with, made once per dataset rather than once per image.
pub(crate) struct ImageHandles {
    kind: Field,
    bytes: Field,
    source: Field,
}

impl ImageHandles {
    pub(crate) fn new() -> Self {
        ImageHandles { kind: Field::new(IMAGE), bytes: Field::new(IMAGE_BYTES), source: Field::new(IMAGE_SOURCE) }
    }

    /// Attaches `images` to `record`, unplaced, numbered from 0 in the given order.
    pub(crate) fn attach(&self, record: &mut Record, images: Vec<Image>) -> Result<(), OpError> {
        for (k, image) in images.into_iter().enumerate() {
            let item =
                u32::try_from(k).map_err(|_| OpError::Data(format!("more than {} images in one row", u32::MAX)))?;
            record.attach(
                Attachment::new(&self.kind, item)
                    .with(&self.bytes, Value::Bytes(image.bytes))
                    .with(&self.source, Value::Str(image.source)),
            );
        }
        Ok(())
    }
}

/// Why an image file was not read.
pub(crate) enum ReadError {
    /// It could not be opened or read.
    Io(io::Error),
    /// It holds this many bytes, more than the row may still take.
    TooBig(u64),
}

/// Reads the image file at `path` whole. With `limit`, a file larger than `limit` bytes is
/// refused before it is read (a row limit must not cost the memory it guards). Anything but
/// a regular file is refused: a FIFO would block the reading thread forever.
pub(crate) fn read_file(path: &Path, limit: Option<u64>) -> Result<Vec<u8>, ReadError> {
    let (file, stat) = open_regular(path).map_err(ReadError::Io)?;
    if let Some(max) = limit
        && stat.size > max
    {
        return Err(ReadError::TooBig(stat.size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(stat.size).unwrap_or(0));
    // The file may grow after the stat; never read more than the limit allows.
    let cap = limit.map_or(u64::MAX, |max| max.saturating_add(1));
    file.take(cap).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    match limit {
        Some(max) if bytes.len() as u64 > max => Err(ReadError::TooBig(bytes.len() as u64)),
        _ => Ok(bytes),
    }
}
