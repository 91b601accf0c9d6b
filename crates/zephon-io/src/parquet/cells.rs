//! One Arrow cell as a record value: the column types zephon reads (text, binary, numbers,
//! lists of integers, nested values as JSON text), checked once per shard and converted per row.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_schema::DataType;
use zephon_operator::Value;

use crate::fields::Cell;

pub(super) fn approx_size(c: &Cell) -> usize {
    match c {
        Cell::Value(Value::Str(s)) => s.len(),
        Cell::Value(Value::Bytes(b)) => b.len(),
        _ => 8,
    }
}

/// The text field is tokenized, so it must hold strings: a binary column would be refused row
/// by row, after the run has started.
pub(super) fn check_text_type(t: &DataType) -> Result<(), String> {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        _ => Err("the text field must be a string column (Utf8, LargeUtf8 or Utf8View)".into()),
    }
}

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

pub(super) fn check_type(t: &DataType) -> Result<(), String> {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::Boolean
        | DataType::Float32
        | DataType::Float64 => Ok(()),
        t if is_integer(t) => Ok(()),
        // Token ids tokenized offline: a list of integers per row.
        DataType::List(f) | DataType::LargeList(f) if is_integer(f.data_type()) => Ok(()),
        // HF `Image`/`Audio` features: struct<bytes: binary, path: string>; the bytes are read.
        DataType::Struct(children) if children.iter().any(|c| c.name() == "bytes" && is_binary(c.data_type())) => {
            Ok(())
        }
        _ => Err("zephon reads string, binary, integer, float and boolean columns, lists of integers \
                  (token ids) and HF image structs (struct<bytes: binary, ...>)"
            .into()),
    }
}

/// A JSON field may be any column whose values can be written as JSON: scalars, and lists and
/// structs of them, however nested.
pub(super) fn check_json_type(t: &DataType) -> Result<(), String> {
    match t {
        DataType::Null | DataType::Boolean | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Ok(()),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Ok(()),
        t if is_integer(t) => Ok(()),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => check_json_type(f.data_type()),
        DataType::Struct(children) => children.iter().try_for_each(|c| check_json_type(c.data_type())),
        other => Err(format!("a JSON field is written from scalars, lists and structs, not {other}")),
    }
}

/// Row `i` of `col` (a JSON field) as JSON text: structs keep their field order.
pub(super) fn json_at(col: &dyn Array, i: usize) -> Cell {
    if col.is_null(i) {
        return Cell::Null;
    }
    let mut out = String::new();
    match write_json(col, i, &mut out) {
        Ok(()) => Cell::Value(Value::text(out)),
        Err(what) => Cell::Unsupported(what),
    }
}

fn write_json(col: &dyn Array, i: usize, out: &mut String) -> Result<(), &'static str> {
    use std::fmt::Write as _;
    if col.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    let text = |s: &str, out: &mut String| out.push_str(&serde_json::Value::from(s).to_string());
    let float = |f: f64, out: &mut String| match serde_json::Number::from_f64(f) {
        Some(n) => out.push_str(&n.to_string()),
        None => out.push_str("null"),
    };
    let list = |items: &dyn Array, out: &mut String| -> Result<(), &'static str> {
        out.push('[');
        for j in 0..items.len() {
            if j > 0 {
                out.push(',');
            }
            write_json(items, j, out)?;
        }
        out.push(']');
        Ok(())
    };
    match col.data_type() {
        DataType::Null => out.push_str("null"),
        DataType::Boolean => out.push_str(if col.as_boolean().value(i) { "true" } else { "false" }),
        DataType::Utf8 => text(col.as_string::<i32>().value(i), out),
        DataType::LargeUtf8 => text(col.as_string::<i64>().value(i), out),
        DataType::Utf8View => text(col.as_string_view().value(i), out),
        DataType::Float16 => {
            float(f64::from(col.as_primitive::<arrow_array::types::Float16Type>().value(i).to_f32()), out)
        }
        DataType::Float32 => float(f64::from(col.as_primitive::<Float32Type>().value(i)), out),
        DataType::Float64 => float(col.as_primitive::<Float64Type>().value(i), out),
        DataType::List(_) => list(col.as_list::<i32>().value(i).as_ref(), out)?,
        DataType::LargeList(_) => list(col.as_list::<i64>().value(i).as_ref(), out)?,
        DataType::FixedSizeList(_, _) => list(col.as_fixed_size_list().value(i).as_ref(), out)?,
        DataType::Struct(fields) => {
            let s = col.as_struct();
            out.push('{');
            for (j, (f, c)) in fields.iter().zip(s.columns()).enumerate() {
                if j > 0 {
                    out.push(',');
                }
                text(f.name(), out);
                out.push(':');
                write_json(c.as_ref(), i, out)?;
            }
            out.push('}');
        }
        _ => match value_at(col, i) {
            Cell::Value(Value::Int(n)) => {
                let _ = write!(out, "{n}");
            }
            Cell::TooBig(n) => {
                let _ = write!(out, "{n}");
            }
            _ => return Err("a value zephon cannot write as JSON"),
        },
    }
    Ok(())
}

fn is_integer(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

/// A list of integers as a one-dimensional `i64` array (as JSONL reads an array of integers);
/// a null element or one beyond `i64` is refused, not dropped or wrapped.
fn int_list(items: &dyn Array) -> Cell {
    if items.null_count() > 0 {
        return Cell::Unsupported("a list of integers with a null element");
    }
    let ids: Vec<i64> = match items.data_type() {
        DataType::Int8 => items.as_primitive::<Int8Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::Int16 => items.as_primitive::<Int16Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::Int32 => items.as_primitive::<Int32Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::Int64 => items.as_primitive::<Int64Type>().values().to_vec(),
        DataType::UInt8 => items.as_primitive::<UInt8Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::UInt16 => items.as_primitive::<UInt16Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::UInt32 => items.as_primitive::<UInt32Type>().values().iter().map(|&v| v.into()).collect(),
        DataType::UInt64 => {
            let values = items.as_primitive::<UInt64Type>().values();
            match values.iter().map(|&v| i64::try_from(v)).collect::<Result<Vec<i64>, _>>() {
                Ok(ids) => ids,
                Err(_) => return Cell::Unsupported("a list of integers beyond the 64-bit signed integers"),
            }
        }
        _ => return Cell::Unsupported("a list of something other than integers"),
    };
    Cell::Value(Value::array(ids))
}

/// Row `i` of `col` as a [`Cell`]. Types were checked at open; any other is refused, not
/// dropped.
pub(super) fn value_at(col: &dyn Array, i: usize) -> Cell {
    if col.is_null(i) {
        return Cell::Null;
    }
    Cell::Value(match col.data_type() {
        DataType::Utf8 => Value::text(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Value::text(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Value::text(col.as_string_view().value(i)),
        DataType::Binary => Value::Bytes(col.as_binary::<i32>().value(i).into()),
        DataType::LargeBinary => Value::Bytes(col.as_binary::<i64>().value(i).into()),
        DataType::BinaryView => Value::Bytes(col.as_binary_view().value(i).into()),
        DataType::Boolean => return Cell::Bool(col.as_boolean().value(i)),
        DataType::Int8 => Value::Int(col.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => Value::Int(col.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => Value::Int(col.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => Value::Int(col.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => Value::Int(col.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => Value::Int(col.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => Value::Int(col.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => {
            let v = col.as_primitive::<UInt64Type>().value(i);
            // `as i64` would wrap ids above 2^63 to negative numbers.
            return i64::try_from(v).map_or(Cell::TooBig(v), |v| Cell::Value(Value::Int(v)));
        }
        DataType::Float32 => Value::Float(col.as_primitive::<Float32Type>().value(i).into()),
        DataType::Float64 => Value::Float(col.as_primitive::<Float64Type>().value(i)),
        DataType::List(_) => return int_list(col.as_list::<i32>().value(i).as_ref()),
        DataType::LargeList(_) => return int_list(col.as_list::<i64>().value(i).as_ref()),
        DataType::Struct(_) => {
            return match col.as_struct().column_by_name("bytes") {
                Some(bytes) => value_at(bytes.as_ref(), i),
                None => Cell::Unsupported("a struct without bytes"),
            };
        }
        _ => return Cell::Unsupported("a column of a type zephon does not read"),
    })
}
