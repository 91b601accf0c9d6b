//! Images as record attachments: what every reader makes of the images it finds.
//!
//! Readers find images their own way (a Parquet column, paths in a JSONL field, tar members);
//! this module turns them into attachments alike, so that a tokenizer sees the same thing
//! whatever the format. Images stay encoded: decoding is the vision operators' business.

use std::io;
use std::sync::Arc;

use zephon_operator::columns::{IMAGE, IMAGE_BYTES, IMAGE_SOURCE};
use zephon_operator::{Attachment, Buffer, Field, OpError, Record, Value};

use crate::storage::Object;

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

/// Reads an image object whole, as opened (`object`). With `limit`, an object larger than
/// `limit` bytes is refused before it is read (a row limit must not cost the memory it guards).
/// A local file that is not a regular file was refused when opened: a FIFO would block the
/// reading thread forever.
pub(crate) fn read_object(object: io::Result<Arc<dyn Object>>, limit: Option<u64>) -> Result<Vec<u8>, ReadError> {
    let object = object.map_err(ReadError::Io)?;
    let size = object.size();
    if let Some(max) = limit
        && size > max
    {
        return Err(ReadError::TooBig(size));
    }
    let mut bytes = vec![0u8; usize::try_from(size).map_err(|_| ReadError::TooBig(size))?];
    object.read_exact_at(&mut bytes, 0).map_err(ReadError::Io)?;
    Ok(bytes)
}
