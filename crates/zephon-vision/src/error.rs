//! The crate's one error type and the coarse kind callers branch on.

use std::fmt;

/// Which image format an error concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// JPEG (JFIF, Exif, Adobe; baseline, extended or progressive Huffman coding).
    Jpeg,
    /// PNG.
    Png,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Jpeg => "JPEG",
            Format::Png => "PNG",
        })
    }
}

/// What went wrong, coarsely: the value a caller counts, reports or bases a skip policy on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// Zero bytes.
    Empty,
    /// The bytes start like no supported format.
    UnknownFormat,
    /// The data ends before the image does.
    Truncated,
    /// The data is malformed.
    Corrupt,
    /// A valid file using a feature this crate does not decode (12-bit, arithmetic coding...).
    Unsupported,
    /// The header declares more pixels than the configured limit.
    TooLarge,
    /// A well-formed image whose shape a transform cannot take (an extreme aspect ratio, a side
    /// smaller than a patch).
    BadShape,
    /// The caller passed an invalid value (a zero size, a negative scale...).
    InvalidArgument,
}

impl ErrorKind {
    /// A stable lower-case name, e.g. for metrics and skip reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Empty => "empty",
            ErrorKind::UnknownFormat => "unknown_format",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::BadShape => "bad_shape",
            ErrorKind::InvalidArgument => "invalid_argument",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every failure of this crate. Bad input always ends here, never in a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VisionError {
    /// Zero bytes of input.
    #[error("empty image data (0 bytes)")]
    Empty,
    /// The magic bytes match no supported format.
    #[error("unknown image format (first bytes {head:02x?}; supported: JPEG, PNG)")]
    UnknownFormat {
        /// Up to the first 8 bytes of the input.
        head: Vec<u8>,
    },
    /// The data ends before the image does.
    #[error("truncated {format} data: {detail}")]
    Truncated {
        /// The format being decoded.
        format: Format,
        /// Where the data ended.
        detail: String,
    },
    /// Malformed data.
    #[error("corrupt {format} data: {detail}")]
    Corrupt {
        /// The format being decoded.
        format: Format,
        /// What is malformed.
        detail: String,
    },
    /// A valid file using a feature this crate does not decode.
    #[error("unsupported {format} feature: {what}")]
    Unsupported {
        /// The format being decoded.
        format: Format,
        /// The feature, e.g. "arithmetic coding".
        what: String,
    },
    /// The header declares more pixels than allowed; nothing was allocated for them.
    #[error("{width}x{height} image ({} pixels) exceeds the limit of {limit} pixels", *width as u64 * *height as u64)]
    TooLarge {
        /// Declared width.
        width: u32,
        /// Declared height.
        height: u32,
        /// The limit in force.
        limit: u64,
    },
    /// A transform cannot take an image of this shape.
    #[error("image of {width}x{height} cannot be used: {reason}")]
    BadShape {
        /// Width of the image given to the transform.
        width: u32,
        /// Height of the image given to the transform.
        height: u32,
        /// Why not.
        reason: String,
    },
    /// An invalid argument from the caller.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl VisionError {
    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            VisionError::Empty => ErrorKind::Empty,
            VisionError::UnknownFormat { .. } => ErrorKind::UnknownFormat,
            VisionError::Truncated { .. } => ErrorKind::Truncated,
            VisionError::Corrupt { .. } => ErrorKind::Corrupt,
            VisionError::Unsupported { .. } => ErrorKind::Unsupported,
            VisionError::TooLarge { .. } => ErrorKind::TooLarge,
            VisionError::BadShape { .. } => ErrorKind::BadShape,
            VisionError::InvalidArgument(_) => ErrorKind::InvalidArgument,
        }
    }

    pub(crate) fn truncated(format: Format, detail: impl Into<String>) -> Self {
        VisionError::Truncated { format, detail: detail.into() }
    }

    pub(crate) fn corrupt(format: Format, detail: impl Into<String>) -> Self {
        VisionError::Corrupt { format, detail: detail.into() }
    }

    pub(crate) fn unsupported(format: Format, what: impl Into<String>) -> Self {
        VisionError::Unsupported { format, what: what.into() }
    }

    pub(crate) fn bad_shape(width: u32, height: u32, reason: impl Into<String>) -> Self {
        VisionError::BadShape { width, height, reason: reason.into() }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        VisionError::InvalidArgument(msg.into())
    }
}

/// `Result` with [`VisionError`].
pub type Result<T, E = VisionError> = std::result::Result<T, E>;
