//! Columnar batches: named arrays with a shape, made from rows.

use crate::error::OpError;
use crate::record::{Array, Field, Record, Value};

/// The values of one column, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// Unsigned bytes.
    U8(Vec<u8>),
    /// 32-bit signed integers.
    I32(Vec<i32>),
    /// 32-bit unsigned integers.
    U32(Vec<u32>),
    /// 64-bit signed integers.
    I64(Vec<i64>),
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// One string per row.
    Str(Vec<String>),
    /// One byte string per row.
    Bytes(Vec<Vec<u8>>),
}

impl ColumnData {
    fn type_name(&self) -> &'static str {
        match self {
            ColumnData::U8(_) => "u8",
            ColumnData::I32(_) => "i32",
            ColumnData::U32(_) => "u32",
            ColumnData::I64(_) => "i64",
            ColumnData::F32(_) => "f32",
            ColumnData::F64(_) => "f64",
            ColumnData::Str(_) => "str",
            ColumnData::Bytes(_) => "bytes",
        }
    }
}

/// One named column: `shape[0]` is the row count.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// The field name.
    pub name: Field,
    /// Dimensions, rows first.
    pub shape: Vec<usize>,
    /// The values.
    pub data: ColumnData,
}

/// Rows stacked into columns. Every row must have the same fields, and array fields the same
/// length in every row (rows of a training step are fixed-shape).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    rows: usize,
    columns: Vec<Column>,
}

impl Batch {
    /// Stacks `rows` in order; columns in the first row's field order.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a Record>) -> Result<Batch, OpError> {
        let rows: Vec<&Record> = rows.into_iter().collect();
        let Some(first) = rows.first() else {
            return Ok(Batch::default());
        };
        let mut columns = Vec::new();
        for (name, proto) in first.fields() {
            let mismatch = |i: usize, what: &str| {
                OpError::Data(format!("row {i} of the batch: field {name} {what} (rows of a batch must match)"))
            };
            let mut data = empty_like(proto);
            let mut width: Option<usize> = None;
            for (i, row) in rows.iter().enumerate() {
                let v = row.get(name.as_str()).ok_or_else(|| mismatch(i, "is missing"))?;
                let n = push_value(&mut data, v).ok_or_else(|| mismatch(i, "has another type"))?;
                if let Some(n) = n {
                    match width {
                        None => width = Some(n),
                        Some(w) if w != n => return Err(mismatch(i, &format!("has {n} elements, row 0 has {w}"))),
                        _ => {}
                    }
                }
            }
            let shape = match width {
                Some(w) => vec![rows.len(), w],
                None => vec![rows.len()],
            };
            columns.push(Column { name: name.clone(), shape, data });
        }
        Ok(Batch { rows: rows.len(), columns })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The columns.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The column called `name`.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name.as_str() == name)
    }

    /// A one-line summary per column: name, type, shape.
    pub fn describe(&self) -> String {
        self.columns
            .iter()
            .map(|c| format!("{}: {}{:?}", c.name, c.data.type_name(), c.shape))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn empty_like(v: &Value) -> ColumnData {
    match v {
        Value::Str(_) => ColumnData::Str(Vec::new()),
        Value::Bytes(_) => ColumnData::Bytes(Vec::new()),
        Value::Int(_) => ColumnData::I64(Vec::new()),
        Value::Float(_) => ColumnData::F64(Vec::new()),
        Value::Array(a) | Value::Seq(a) => match a {
            Array::U8(_) => ColumnData::U8(Vec::new()),
            Array::I32(_) => ColumnData::I32(Vec::new()),
            Array::U32(_) => ColumnData::U32(Vec::new()),
            Array::I64(_) => ColumnData::I64(Vec::new()),
            Array::F32(_) => ColumnData::F32(Vec::new()),
        },
    }
}

/// Appends `v` to `data`; returns `Some(Some(len))` for arrays, `Some(None)` for scalars,
/// `None` on a type mismatch.
fn push_value(data: &mut ColumnData, v: &Value) -> Option<Option<usize>> {
    match (data, v) {
        (ColumnData::Str(d), Value::Str(s)) => d.push(s.clone()),
        (ColumnData::Bytes(d), Value::Bytes(b)) => d.push(b.clone()),
        (ColumnData::I64(d), Value::Int(i)) => d.push(*i),
        (ColumnData::F64(d), Value::Float(x)) => d.push(*x),
        (data, Value::Array(a) | Value::Seq(a)) => {
            match (data, a) {
                (ColumnData::U8(d), Array::U8(a)) => d.extend_from_slice(a),
                (ColumnData::I32(d), Array::I32(a)) => d.extend_from_slice(a),
                (ColumnData::U32(d), Array::U32(a)) => d.extend_from_slice(a),
                (ColumnData::I64(d), Array::I64(a)) => d.extend_from_slice(a),
                (ColumnData::F32(d), Array::F32(a)) => d.extend_from_slice(a),
                _ => return None,
            }
            return Some(Some(a.len()));
        }
        _ => return None,
    }
    Some(None)
}
