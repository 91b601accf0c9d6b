//! Which fields a dataset yields, and the checks every row's fields get.

use zephon_operator::{Field, OpError, Record, Value};

use crate::Error;

/// What to read from each row.
///
/// In JSONL and Parquet a field is a key or a column. In a WebDataset tar a field names a
/// member extension (`txt`: the sample's `KEY.txt`, read as UTF-8 text), else a key of the
/// sample's `KEY.json` member; [`crate::KEY_FIELD`] (`__key__`) is the sample's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The text field: required, a string, checked by the rules below. `None` for datasets
    /// without text (images only).
    pub text: Option<String>,
    /// Other fields to copy when present (ids, sources, images, captions): strings, numbers,
    /// booleans (as 0/1), bytes, or arrays of integers (token ids tokenized offline: a JSON array
    /// or a Parquet `list<int>`, read as a one-dimensional `i64` array; see
    /// `zephon_core::PreTokenized`). Any other JSON array, or
    /// an object, is a bad record; a Parquet file without the column is refused when it is
    /// opened.
    pub extra: Vec<String>,
    /// Fields to copy as their JSON text, whatever they hold (a conversation's list of
    /// messages, nested objects): in JSONL the value as written (keys in their order); in
    /// Parquet a column of any type, nested lists and structs included, written as JSON with
    /// the struct's field order; in a WebDataset tar a key of the sample's `KEY.json`. A row
    /// without the field, or with it null, has no such value.
    pub json: Vec<String>,
    /// Where each row's images come from, or `None` to read none (rows then carry no
    /// attachments). Every image becomes one unplaced attachment of
    /// kind `image`, numbered from 0 in the row's order, with the values `bytes` (the encoded
    /// file, not decoded) and `source` (text, for provenance). Per format:
    ///
    /// - **Parquet**: a column of type `struct<bytes: binary, path: string>` (an HF `Image`:
    ///   one image; a null struct, or null bytes with no path, is no image), a list of such
    ///   structs (several; a null list is none, a null element is a bad record), or `binary`.
    ///   Only the struct's `bytes` and `path` are read. `source` is `path`, or when the file
    ///   has none, the column name (`image`, or `image[k]` for element `k` of a list). Null
    ///   bytes with a path (an image left outside the file) is a bad record, not a missing
    ///   image. Any other column type is refused when the shard is opened.
    /// - **JSONL**: a field holding one path or an array of paths, relative to the shard's
    ///   folder (absolute paths are allowed). Each file is read whole. An absent or null field
    ///   or an empty array is no image; any other value, a null or empty element, or a file
    ///   that cannot be read is a bad record. `source` is the path as written.
    /// - **WebDataset tar**: a comma-separated list of extensions (`"jpg,png"`); a member is
    ///   an image when its extension is one of them or ends with `.` and one of them (`jpg`
    ///   matches `KEY.jpg` and `KEY.0.jpg`; case is ignored). A sample's images are in member
    ///   order; a sample without any has no attachments. `source` is the member name.
    ///
    /// Images count toward [`Fields::max_row_bytes`]. The field must not also be the text
    /// field or an extra field.
    pub images: Option<String>,
    /// Whether an empty text is a valid document (default: a bad record).
    pub allow_empty: bool,
    /// The largest row accepted, in bytes of the stored row; larger rows are bad records.
    pub max_row_bytes: Option<u64>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields {
            text: Some("text".into()),
            extra: Vec::new(),
            json: Vec::new(),
            images: None,
            allow_empty: false,
            max_row_bytes: None,
        }
    }
}

/// A requested field as one row holds it, before it becomes a record value. Readers say what
/// they found; [`Fields::put`] alone decides what is accepted and what the user is told, so
/// JSONL and Parquet rows are judged alike.
#[derive(Debug, PartialEq)]
pub(crate) enum Cell {
    /// The row has no such field.
    Absent,
    /// The field is there and null.
    Null,
    /// A boolean, kept apart from integers so that a message can say which the user wrote.
    Bool(bool),
    /// An integer beyond what [`Value::Int`] holds; stored as anything else it would change.
    TooBig(u64),
    /// A value stored as it is.
    Value(Value),
    /// A value zephon does not read, described for the user ("a JSON array").
    Unsupported(&'static str),
}

impl Fields {
    /// Every field name to read: the text, the extra fields, then the JSON fields.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.text.iter().chain(self.extra.iter()).chain(self.json.iter()).map(String::as_str)
    }

    /// The index in [`Fields::names`] of the first JSON field.
    pub(crate) fn json_from(&self) -> usize {
        usize::from(self.text.is_some()) + self.extra.len()
    }

    pub(crate) fn handles(&self) -> Vec<Field> {
        self.names().map(Field::new).collect()
    }

    /// Sets field `field`, the `i`-th of [`Fields::names`], from `cell` in `record`, or says
    /// why the row is bad.
    pub(crate) fn put(&self, record: &mut Record, i: usize, field: &Field, cell: Cell) -> Result<(), OpError> {
        let name = field.as_str();
        if i == 0 && self.text.is_some() {
            let what = match cell {
                Cell::Value(Value::Str(s)) => {
                    if s.is_empty() && !self.allow_empty {
                        return Err(OpError::Data(format!("empty document (field {name:?} is \"\")")));
                    }
                    record.set(field, Value::Str(s));
                    return Ok(());
                }
                Cell::Absent => return Err(OpError::Data(format!("no field {name:?}"))),
                Cell::Null => return Err(OpError::Data(format!("field {name:?} is null"))),
                Cell::Bool(_) => "a boolean",
                Cell::TooBig(_) => "an integer",
                Cell::Value(v) => kind(&v),
                Cell::Unsupported(k) => k,
            };
            return Err(OpError::Data(format!("field {name:?} is {what}, not text")));
        }
        match cell {
            Cell::Absent | Cell::Null => {}
            Cell::Bool(b) => record.set(field, Value::Int(i64::from(b))),
            Cell::Value(v) => record.set(field, v),
            Cell::TooBig(n) => {
                return Err(OpError::Data(format!(
                    "field {name:?} is {n}, beyond the 64-bit signed integers zephon stores"
                )));
            }
            Cell::Unsupported(k) => {
                return Err(OpError::Data(format!(
                    "field {name:?} is {k}; zephon reads strings, numbers, booleans and arrays of integers"
                )));
            }
        }
        Ok(())
    }

    /// Refuses configurations no file could satisfy, before any file is opened.
    pub(crate) fn check(&self, dataset: &str) -> Result<(), Error> {
        let bad = |message: String| Err(Error::Fields { dataset: dataset.to_string(), message });
        if let Some(images) = &self.images {
            if images.trim().is_empty() {
                return bad("`images` is empty; leave it unset to read no images".into());
            }
            // Images become attachments; a field of the same name would be read twice, once
            // as a value and once as images, and JSONL could not tell which was meant.
            if self.names().any(|n| n == images) {
                return bad(format!(
                    "{images:?} is both the `images` field and the text or an extra field; images are \
                     read as attachments, not fields"
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn check_size(&self, bytes: usize) -> Result<(), OpError> {
        match self.max_row_bytes {
            Some(max) if bytes as u64 > max => {
                Err(OpError::Data(format!("row of {bytes} bytes is over the limit of {max} bytes (max_row_bytes)")))
            }
            _ => Ok(()),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Str(_) => "a string",
        Value::Bytes(_) => "bytes",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Array(_) | Value::Seq(_) => "an array",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_operator::SampleId;

    fn put(fields: &Fields, i: usize, cell: Cell) -> Result<Record, String> {
        let mut r = Record::from_sample(SampleId::new(0, 0, 0));
        let names = fields.handles();
        fields.put(&mut r, i, &names[i], cell).map(|()| r).map_err(|e| e.to_string())
    }

    #[test]
    fn every_message_names_the_field_the_user_configured() {
        let f = Fields { text: Some("body".into()), extra: vec!["tags".into()], ..Fields::default() };
        for (cell, want) in [
            (Cell::Absent, r#"no field "body""#),
            (Cell::Null, r#"field "body" is null"#),
            (Cell::Bool(true), r#"field "body" is a boolean, not text"#),
            (Cell::Value(Value::Int(4)), r#"field "body" is an integer, not text"#),
            (Cell::TooBig(u64::MAX), r#"field "body" is an integer, not text"#),
            (Cell::Value(Value::Float(0.5)), r#"field "body" is a float, not text"#),
            (Cell::Unsupported("a JSON array"), r#"field "body" is a JSON array, not text"#),
            (Cell::Value(Value::text("")), r#"empty document (field "body" is "")"#),
        ] {
            let err = put(&f, 0, cell).unwrap_err();
            assert!(err.contains(want), "{err}");
            assert!(!err.contains("\"text\""), "{err}");
        }
        let err = put(&f, 1, Cell::Unsupported("a JSON object")).unwrap_err();
        assert!(
            err.contains(
                r#"field "tags" is a JSON object; zephon reads strings, numbers, booleans and arrays of integers"#
            ),
            "{err}"
        );
        let err = put(&f, 1, Cell::TooBig(u64::MAX)).unwrap_err();
        assert!(err.contains(r#"field "tags" is 18446744073709551615"#), "{err}");
        assert_eq!(put(&f, 1, Cell::Bool(true)).unwrap().get("tags"), Some(&Value::Int(1)));
        assert_eq!(put(&f, 1, Cell::Null).unwrap().get("tags"), None);
    }
}
