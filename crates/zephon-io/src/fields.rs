//! Which fields a dataset yields, and the checks every row's text gets.

use zephon_core::{Field, OpError, Record, Value};

/// What to read from each row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The text field: required, a string, checked by the rules below. `None` for datasets
    /// without text (images only).
    pub text: Option<String>,
    /// Other fields to copy when present (ids, sources, images, captions).
    pub extra: Vec<String>,
    /// Whether an empty text is a valid document (default: a bad record).
    pub allow_empty: bool,
    /// The largest row accepted, in bytes of the stored row; larger rows are bad records.
    pub max_row_bytes: Option<u64>,
}

impl Default for Fields {
    fn default() -> Self {
        Fields { text: Some("text".into()), extra: Vec::new(), allow_empty: false, max_row_bytes: None }
    }
}

impl Fields {
    /// Every field name to read, text first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.text.iter().chain(self.extra.iter()).map(String::as_str)
    }

    pub(crate) fn handles(&self) -> Vec<Field> {
        self.names().map(Field::new).collect()
    }

    /// Checks a finished record's text field.
    pub(crate) fn check(&self, record: &Record) -> Result<(), OpError> {
        let Some(name) = &self.text else { return Ok(()) };
        match record.get(name) {
            None => Err(OpError::Data(format!("no field {name:?}"))),
            Some(Value::Str(s)) if s.is_empty() && !self.allow_empty => {
                Err(OpError::Data(format!("empty document (field {name:?} is \"\")")))
            }
            Some(Value::Str(_)) => Ok(()),
            Some(other) => Err(OpError::Data(format!("field {name:?} is {}, not text", kind(other)))),
        }
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

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Str(_) => "text",
        Value::Bytes(_) => "bytes",
        Value::Int(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Array(_) | Value::Seq(_) => "an array",
    }
}
