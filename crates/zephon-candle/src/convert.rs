//! Batch columns to tensors ([`Sink::convert`]): buffers handed over where the batch owns them
//! alone, copied once otherwise; offsets and varlen metadata derived on the host.

use candle_core::{DType, Device, Tensor, WithDType};
use zephon_core::{Batch, ColumnData, Ragged};
use zephon_operator::{Array, ArrayData, Buffer};

use crate::error::{Error, Result, candle};
use crate::sink::{CuSeqlens, Sink, columns};
use crate::tensors::Tensors;

/// The candle dtype of a zephon dtype: the same one, but `u16` (which candle lacks) becomes
/// `u32`.
pub fn candle_dtype(d: zephon_operator::DType) -> DType {
    match d {
        zephon_operator::DType::U8 => DType::U8,
        zephon_operator::DType::I32 => DType::I32,
        zephon_operator::DType::U32 => DType::U32,
        zephon_operator::DType::I64 => DType::I64,
        zephon_operator::DType::F32 => DType::F32,
        zephon_operator::DType::F64 => DType::F64,
        zephon_operator::DType::BF16 => DType::BF16,
        zephon_operator::DType::F16 => DType::F16,
        zephon_operator::DType::U16 => DType::U32,
    }
}

impl Sink {
    /// The batch's columns as tensors. Consumes the batch so that buffers it owns alone move
    /// into tensors without a copy.
    pub fn convert(&self, batch: Batch) -> Result<Tensors> {
        let mut out = Tensors::new(batch.rows());
        for column in batch.into_columns() {
            let name = column.name.as_str().to_string();
            match column.data {
                ColumnData::Dense(a) => dense(self, name, a, &mut out)?,
                ColumnData::Ragged(r) => ragged(self, name, r, &mut out)?,
                ColumnData::Str(rows) => byte_rows(self, name, rows.iter().map(|s| s.as_bytes()), &mut out)?,
                ColumnData::Bytes(rows) => byte_rows(self, name, rows.iter().map(|b| b.as_slice()), &mut out)?,
            }
        }
        Ok(out)
    }
}

fn dense(sink: &Sink, name: String, a: Array, out: &mut Tensors) -> Result<()> {
    if name == columns::MAX_SEQLEN
        && let Some(v) = ints(a.data())
    {
        out.set_max_seqlen(v.iter().copied().max().unwrap_or(0).max(0) as usize);
    }
    let tensor = if name == columns::CU_SEQLENS && sink.cu_seqlens == CuSeqlens::Flat {
        flat_cu_seqlens(sink, &name, &a)?
    } else {
        let target = sink.target(&name, candle_dtype(a.dtype()));
        array_tensor(a, target, &sink.device).map_err(candle(&name))?
    };
    out.push(name, tensor);
    Ok(())
}

/// One `[n + 1]` vector for the batch flattened to `[rows · T]`: each row's ends shifted by
/// the tokens of the rows before it, the repeats that pad a row's vector removed.
fn flat_cu_seqlens(sink: &Sink, name: &str, a: &Array) -> Result<Tensor> {
    let bad = |m: String| Error::Column {
        column: name.to_string(),
        message: format!("{m} (CuSeqlens::PerRow converts the column as it is)"),
    };
    let &[rows, k] = a.shape().dims() else {
        return Err(bad(format!("the flat layout needs a [rows, n] column, not {}", a.shape())));
    };
    let v = ints(a.data()).ok_or_else(|| bad(format!("the flat layout needs integers, not {}", a.dtype())))?;
    let mut flat = Vec::with_capacity(rows * k.saturating_sub(1) + 1);
    flat.push(0i64);
    let mut base = 0i64;
    for (r, row) in v.chunks(k.max(1)).take(rows).enumerate() {
        if row.first() != Some(&0) || !row.is_sorted() {
            return Err(bad(format!("row {r} is not a cumulative-length vector from 0: {row:?}")));
        }
        for &end in &row[1..] {
            let at = base + end;
            // Rows pad their vector by repeating the last end: keep each end once.
            if flat.last().is_some_and(|&l| at > l) {
                flat.push(at);
            }
        }
        base += row.last().copied().unwrap_or(0);
    }
    let target = sink.target(name, DType::U32);
    index_tensor(name, flat, target, &sink.device)
}

fn ragged(sink: &Sink, name: String, r: Ragged, out: &mut Tensors) -> Result<()> {
    let layout = r.into_layout();
    let target = sink.target(&name, candle_dtype(layout.values.dtype()));
    let t = array_tensor(layout.values, target, &sink.device).map_err(candle(&name))?;
    out.push(name.clone(), t);
    let offsets_name = format!("{name}.offsets");
    out.push(offsets_name.clone(), index_tensor(&offsets_name, layout.offsets, sink.offsets, &sink.device)?);
    let rows_name = format!("{name}.row_offsets");
    out.push(rows_name.clone(), index_tensor(&rows_name, layout.row_offsets, sink.offsets, &sink.device)?);
    if let Some((items, ndim, table)) = layout.shapes {
        let shapes_name = format!("{name}.shapes");
        let t = Tensor::from_vec(table, (items, ndim), &sink.device).map_err(candle(&shapes_name))?;
        out.push(shapes_name, t);
    }
    Ok(())
}

fn byte_rows<'a>(sink: &Sink, name: String, rows: impl Iterator<Item = &'a [u8]>, out: &mut Tensors) -> Result<()> {
    let mut bytes = Vec::new();
    let mut offsets = vec![0i64];
    for r in rows {
        bytes.extend_from_slice(r);
        offsets.push(bytes.len() as i64);
    }
    let n = bytes.len();
    let t = Tensor::from_vec(bytes, n, &sink.device).map_err(candle(&name))?;
    out.push(name.clone(), t);
    let offsets_name = format!("{name}.offsets");
    out.push(offsets_name.clone(), index_tensor(&offsets_name, offsets, sink.offsets, &sink.device)?);
    Ok(())
}

/// The integers of an integer array, widened.
fn ints(data: &ArrayData) -> Option<Vec<i64>> {
    Some(match data {
        ArrayData::U8(b) => b.iter().map(|&x| x as i64).collect(),
        ArrayData::I32(b) => b.iter().map(|&x| x as i64).collect(),
        ArrayData::U32(b) => b.iter().map(|&x| x as i64).collect(),
        ArrayData::U16(b) => b.iter().map(|&x| x as i64).collect(),
        ArrayData::I64(b) => b.to_vec(),
        _ => return None,
    })
}

/// A vector of non-negative host integers (offsets, lengths) as `dtype`; values that do not
/// fit are an error, never wrapped.
fn index_tensor(name: &str, values: Vec<i64>, dtype: DType, device: &Device) -> Result<Tensor> {
    let max = values.iter().copied().max().unwrap_or(0);
    let limit = match dtype {
        DType::U8 => u8::MAX as i64,
        DType::I16 => i16::MAX as i64,
        DType::U32 => u32::MAX as i64,
        DType::I32 => i32::MAX as i64,
        DType::I64 => i64::MAX,
        // Integers are exact in a float up to 2^(mantissa bits + 1).
        DType::F32 => 1 << 24,
        DType::F64 => 1 << 53,
        DType::BF16 => 1 << 8,
        DType::F16 => 1 << 11,
        other => {
            return Err(Error::Column { column: name.to_string(), message: format!("offsets cannot be {other:?}") });
        }
    };
    if max > limit {
        return Err(Error::Column {
            column: name.to_string(),
            message: format!("value {max} does not fit {dtype:?}; choose a wider dtype (Sink::offsets, Sink::dtype)"),
        });
    }
    let n = values.len();
    let t = match dtype {
        DType::U32 => Tensor::from_vec(values.into_iter().map(|x| x as u32).collect::<Vec<_>>(), n, device),
        DType::I32 => Tensor::from_vec(values.into_iter().map(|x| x as i32).collect::<Vec<_>>(), n, device),
        DType::I64 => Tensor::from_vec(values, n, device),
        other => {
            Tensor::from_vec(values, n, &Device::Cpu).and_then(|t| t.to_dtype(other)).and_then(|t| t.to_device(device))
        }
    };
    t.map_err(candle(name))
}

/// An array as a tensor of `target` on `device`, without a copy where the array owns its
/// buffer alone and no conversion is asked for on the CPU.
pub(crate) fn array_tensor(array: Array, target: DType, device: &Device) -> candle_core::Result<Tensor> {
    let shape = candle_core::Shape::from_dims(array.shape().dims());
    let native = candle_dtype(array.dtype());
    // A narrowing conversion runs on the host before an upload (fewer bytes cross the bus); a
    // widening one on the device after it, for the same reason.
    let host_first = !device.is_cpu() && target != native && target.size_in_bytes() < native.size_in_bytes();
    let stage = if host_first { Device::Cpu } else { device.clone() };
    let t = match array.into_data() {
        ArrayData::U8(b) => buffer_tensor(b, shape, &stage),
        ArrayData::I32(b) => buffer_tensor(b, shape, &stage),
        ArrayData::U32(b) => buffer_tensor(b, shape, &stage),
        ArrayData::I64(b) => buffer_tensor(b, shape, &stage),
        ArrayData::F32(b) => buffer_tensor(b, shape, &stage),
        ArrayData::F64(b) => buffer_tensor(b, shape, &stage),
        ArrayData::BF16(b) => buffer_tensor(b, shape, &stage),
        ArrayData::F16(b) => buffer_tensor(b, shape, &stage),
        ArrayData::U16(b) => Tensor::from_vec(b.iter().map(|&x| u32::from(x)).collect::<Vec<_>>(), shape, &stage),
    }?;
    let t = if t.dtype() == target { t } else { t.to_dtype(target)? };
    if host_first { t.to_device(device) } else { Ok(t) }
}

/// The buffer's `Vec` moves into the tensor when the buffer is its only owner (on the CPU
/// that is the tensor's storage, no copy); a shared or partial buffer is copied once.
fn buffer_tensor<T: WithDType>(
    b: Buffer<T>,
    shape: candle_core::Shape,
    device: &Device,
) -> candle_core::Result<Tensor> {
    if b.is_exclusive() { Tensor::from_vec(b.into_vec(), shape, device) } else { Tensor::from_slice(&b, shape, device) }
}
