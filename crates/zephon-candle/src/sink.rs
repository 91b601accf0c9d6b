//! The sink's settings: where tensors go, which dtype each column becomes, how varlen metadata
//! is laid out.
//!
//! The work is elsewhere, each part beside what it makes: `convert.rs` holds
//! [`Sink::convert`] (a batch to tensors), `step.rs` holds [`Sink::step`] (a local step to
//! [`StepTensors`](crate::StepTensors)). Both read these settings; this module reads neither.

use std::collections::BTreeMap;

use candle_core::{DType, Device};

/// The packed-text column names, from the list the operators that write them and the sinks
/// share (`zephon_operator::columns`, re-exported by `zephon_core`); [`Sink::new`] gives several
/// of them model dtypes.
pub mod columns {
    pub use zephon_operator::columns::{CU_SEQLENS, INPUT_IDS, LABELS, LOSS_MASK, MAX_SEQLEN, POSITIONS, SEGMENT_IDS};
}

/// How the `cu_seqlens` column becomes a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum CuSeqlens {
    /// One cumulative-length vector for the batch flattened to `[rows · T]` tokens: 0, every
    /// sequence end of row 0, then of row 1 shifted by T, and so on, with the repeats that pad
    /// each row's vector removed (shape `[n + 1]` for n sequences, padding runs counting as
    /// sequences). This is what varlen attention kernels take, with
    /// [`Tensors::max_seqlen`](crate::Tensors::max_seqlen) as their `max_seqlen`.
    #[default]
    Flat,
    /// The column as it is: `[rows, S + 2]`, each row's own vector.
    PerRow,
}

/// Turns batches and local steps into named candle tensors on one device.
///
/// Each column keeps its name. Dense columns become one tensor `[rows, ...]`; ragged columns
/// (images, their patches, attachment spans) a flat values tensor plus offsets (see
/// [`Tensors`](crate::Tensors)); text and byte columns their UTF-8 / raw bytes as `u8` plus offsets. No
/// column is dropped.
///
/// Dtypes: a column named in the map becomes that dtype; any other float column becomes the
/// float dtype when one is set ([`Sink::floats`], e.g. pixel values as `bf16`); everything
/// else keeps its own dtype. [`Sink::new`] starts from the map models usually want for packed
/// text: `input_ids` u32, `labels` i64 (cross-entropy with an ignore index), `positions`,
/// `segment_ids`, `cu_seqlens` and `max_seqlen` u32; `loss_mask` stays u8.
///
/// On the CPU a column whose buffer the batch owns alone moves into its tensor without a
/// copy; a shared one is copied once. A dtype change costs one pass, made on the host when it
/// narrows (fewer bytes to upload) and on the device when it widens.
#[derive(Clone, Debug)]
pub struct Sink {
    pub(crate) device: Device,
    pub(crate) dtypes: BTreeMap<String, DType>,
    pub(crate) floats: Option<DType>,
    pub(crate) offsets: DType,
    pub(crate) cu_seqlens: CuSeqlens,
}

impl Sink {
    /// A sink onto `device` with the packed-text defaults (see the type's documentation).
    pub fn new(device: Device) -> Self {
        let dtypes = [
            (columns::INPUT_IDS, DType::U32),
            (columns::LABELS, DType::I64),
            (columns::POSITIONS, DType::U32),
            (columns::SEGMENT_IDS, DType::U32),
            (columns::CU_SEQLENS, DType::U32),
            (columns::MAX_SEQLEN, DType::U32),
        ]
        .into_iter()
        .map(|(n, d)| (n.to_string(), d))
        .collect();
        Sink { device, dtypes, floats: None, offsets: DType::U32, cu_seqlens: CuSeqlens::Flat }
    }

    /// A sink onto the CPU with the packed-text defaults.
    pub fn cpu() -> Self {
        Sink::new(Device::Cpu)
    }

    /// A sink onto `device` that keeps every column's own dtype and every layout as it is
    /// (`cu_seqlens` per row).
    pub fn raw(device: Device) -> Self {
        Sink { device, dtypes: BTreeMap::new(), floats: None, offsets: DType::U32, cu_seqlens: CuSeqlens::PerRow }
    }

    /// Column `column` (for a ragged column: its values) becomes `dtype`.
    #[must_use]
    pub fn dtype(mut self, column: &str, dtype: DType) -> Self {
        self.dtypes.insert(column.to_string(), dtype);
        self
    }

    /// Column `column` keeps its own dtype (undoes a default).
    #[must_use]
    pub fn keep_dtype(mut self, column: &str) -> Self {
        self.dtypes.remove(column);
        self
    }

    /// Float columns not named in the map become `dtype` (pixel values as `bf16`, say).
    #[must_use]
    pub fn floats(mut self, dtype: DType) -> Self {
        self.floats = Some(dtype);
        self
    }

    /// The dtype of offset tensors (`.offsets`, `.row_offsets`): `U32` (the default), `I32`
    /// or `I64`. A batch whose offsets do not fit is an error, never truncated.
    #[must_use]
    pub fn offsets(mut self, dtype: DType) -> Self {
        self.offsets = dtype;
        self
    }

    /// How `cu_seqlens` is laid out.
    #[must_use]
    pub fn cu_seqlens(mut self, layout: CuSeqlens) -> Self {
        self.cu_seqlens = layout;
        self
    }

    /// The device tensors are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The dtype column `column` becomes when its own is `native`.
    pub fn target(&self, column: &str, native: DType) -> DType {
        match (self.dtypes.get(column), self.floats) {
            (Some(&d), _) => d,
            (None, Some(f)) if native.is_float() => f,
            _ => native,
        }
    }
}
