//! Rows stacked into columns: one value per row into a dense or ragged column, and the rows'
//! attachments into columns of their own.

use super::*;

/// One column from one value per row.
pub(super) fn stack(values: &[&Value]) -> Result<ColumnData, String> {
    let mismatch = |i: usize, v: &Value, want: &str| format!("row {i} has {}, row 0 has {want}", v.describe());
    match values[0] {
        Value::Str(_) => values
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Str(s) => Ok(s.clone()),
                other => Err(mismatch(i, other, "text")),
            })
            .collect::<Result<_, _>>()
            .map(ColumnData::Str),
        Value::Bytes(_) => values
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Bytes(b) => Ok(b.clone()),
                other => Err(mismatch(i, other, "bytes")),
            })
            .collect::<Result<_, _>>()
            .map(ColumnData::Bytes),
        Value::Int(_) => {
            let v: Vec<i64> = values
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::Int(x) => Ok(*x),
                    other => Err(mismatch(i, other, "an integer")),
                })
                .collect::<Result<_, _>>()?;
            Ok(ColumnData::Dense(Array::from_vec(v)))
        }
        Value::Float(_) => {
            let v: Vec<f64> = values
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::Float(x) => Ok(*x),
                    other => Err(mismatch(i, other, "a float")),
                })
                .collect::<Result<_, _>>()?;
            Ok(ColumnData::Dense(Array::from_vec(v)))
        }
        Value::Array(first) | Value::Seq(first) => {
            let mut arrays = Vec::with_capacity(values.len());
            for (i, v) in values.iter().enumerate() {
                match v.as_array() {
                    Some(a) if a.dtype() == first.dtype() => arrays.push(a),
                    Some(a) => return Err(format!("row {i} is {}, row 0 is {}", a.dtype(), first.dtype())),
                    None => return Err(mismatch(i, v, "an array")),
                }
            }
            if arrays.iter().all(|a| a.shape() == first.shape()) {
                let data = concat(&arrays)?;
                let shape = first.shape().stacked(arrays.len());
                Ok(ColumnData::Dense(Array::new(data, shape).map_err(|e| e.to_string())?))
            } else {
                let shapes = arrays.iter().map(|a| a.shape().clone()).collect();
                ragged(&arrays, shapes, (0..=arrays.len()).collect())
            }
        }
    }
}

/// A ragged column of `items` (arrays of one dtype), with `row_offsets` into them.
fn ragged(items: &[&Array], shapes: Vec<Shape>, row_offsets: Vec<usize>) -> Result<ColumnData, String> {
    let mut item_offsets = Vec::with_capacity(items.len() + 1);
    item_offsets.push(0);
    let mut at = 0;
    for a in items {
        at += a.len();
        item_offsets.push(at);
    }
    let data = concat(items)?;
    let values = Array::new(data, Shape::vector(at)).map_err(|e| e.to_string())?;
    Ok(ColumnData::Ragged(Ragged::new(values, item_offsets, shapes, row_offsets).map_err(|e| e.to_string())?))
}

/// The elements of `arrays` (one dtype) end to end. A single array is shared, not copied.
fn concat(arrays: &[&Array]) -> Result<ArrayData, String> {
    fn cat<T: Element>(arrays: &[&Array]) -> Result<ArrayData, String> {
        if let [only] = arrays {
            return Ok(only.data().clone());
        }
        let mut v: Vec<T> = Vec::with_capacity(arrays.iter().map(|a| a.len()).sum());
        for a in arrays {
            v.extend_from_slice(
                a.as_slice::<T>().ok_or_else(|| format!("mixed dtypes: {} and {}", T::DTYPE, a.dtype()))?,
            );
        }
        Ok(T::wrap(Buffer::new(v)))
    }
    let Some(first) = arrays.first() else {
        return Ok(ArrayData::U8(Buffer::default()));
    };
    match first.dtype() {
        DType::U8 => cat::<u8>(arrays),
        DType::I32 => cat::<i32>(arrays),
        DType::U32 => cat::<u32>(arrays),
        DType::I64 => cat::<i64>(arrays),
        DType::F32 => cat::<f32>(arrays),
        DType::F64 => cat::<f64>(arrays),
        DType::BF16 => cat::<half::bf16>(arrays),
        DType::F16 => cat::<half::f16>(arrays),
        DType::U16 => cat::<u16>(arrays),
    }
}

/// The ragged columns of the rows' attachments: `kind.field` per value, `kind.span` per kind,
/// in order of first appearance.
pub(super) fn attachment_columns(rows: &[&Record]) -> Result<Vec<Column>, OpError> {
    let mut kinds: Vec<(&Field, Vec<&Field>)> = Vec::new();
    for row in rows {
        for a in row.attachments() {
            let i = match kinds.iter().position(|(k, _)| *k == a.kind()) {
                Some(i) => i,
                None => {
                    kinds.push((a.kind(), Vec::new()));
                    kinds.len() - 1
                }
            };
            for (name, _) in a.values() {
                if !kinds[i].1.contains(&name) {
                    kinds[i].1.push(name);
                }
            }
        }
    }
    let mut columns = Vec::new();
    for (kind, names) in kinds {
        let mut row_offsets = vec![0];
        let mut of_kind: Vec<&Attachment> = Vec::new();
        for row in rows {
            of_kind.extend(row.attachments().iter().filter(|a| a.kind() == kind));
            row_offsets.push(of_kind.len());
        }
        for name in names {
            let bad = |m: String| OpError::Data(format!("attachment column {kind}.{name}: {m}"));
            // Scalars and byte strings become arrays so that every item is an array.
            let owned: Vec<Array> = of_kind
                .iter()
                .map(|a| match a.get(name.as_str()) {
                    Some(Value::Array(x) | Value::Seq(x)) => Ok(x.clone()),
                    Some(Value::Int(x)) => Ok(Array::with_shape(vec![*x], Shape::new(&[])).map_err(|e| e.to_string())?),
                    Some(Value::Float(x)) => {
                        Ok(Array::with_shape(vec![*x], Shape::new(&[])).map_err(|e| e.to_string())?)
                    }
                    Some(Value::Bytes(b)) => Ok(Array::vector(b.clone())),
                    Some(Value::Str(s)) => Ok(Array::from_vec(s.as_bytes().to_vec())),
                    None => Err(format!("{kind} #{} has no value {name}, others of its kind do", a.item())),
                })
                .collect::<Result<_, String>>()
                .map_err(bad)?;
            let items: Vec<&Array> = owned.iter().collect();
            if let Some(odd) = items.iter().find(|a| a.dtype() != items[0].dtype()) {
                return Err(bad(format!("items of dtypes {} and {}", items[0].dtype(), odd.dtype())));
            }
            let shapes = items.iter().map(|a| a.shape().clone()).collect();
            let data = ragged(&items, shapes, row_offsets.clone()).map_err(bad)?;
            columns.push(Column { name: Field::new(&format!("{kind}.{name}")), data });
        }
        let spans: Vec<Array> = of_kind
            .iter()
            .map(|a| {
                let (s, n) = a.span().map_or((-1, 0), |s| (s.start() as i32, s.len() as i32));
                Array::from_vec(vec![s, n])
            })
            .collect();
        let items: Vec<&Array> = spans.iter().collect();
        let shapes = items.iter().map(|a| a.shape().clone()).collect();
        let data = ragged(&items, shapes, row_offsets)
            .map_err(|m| OpError::Data(format!("attachment column {kind}.span: {m}")))?;
        columns.push(Column { name: Field::new(&format!("{kind}.span")), data });
    }
    Ok(columns)
}
