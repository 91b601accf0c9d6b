//! Token ids stored with the data (tokenized offline) as a record's token sequence.
//!
//! A record as read has no sequence axis: its lineage is the whole sample. Packers, splits and
//! restores work on token positions, so whatever produces tokens must also say which positions
//! of the sample they are. `Tokenize` does that for text; [`PreTokenized`] does it for a field
//! that already holds the ids (a JSON array of integers, a Parquet `list<int>` column).

use zephon_operator::{ArrayData, Extent, Field, Fragment, Lineage, OpError, Operator, Record, Settings, Span, Value};

/// Reads a field of token ids and makes it the record's token sequence: a `u32` [`Value::Seq`]
/// (by default in `tokens`, where the packer looks) whose positions are `0..n` of the sample,
/// optionally with an EOS id appended.
///
/// Ids are checked, never cast blindly: a negative id, one above `u32::MAX` or one at or over
/// the vocabulary size (when given) is a bad record naming its position, as are a missing
/// field, a value that is not a one-dimensional integer array, and an empty one. The ids may
/// be stored as any integer dtype (`u8`, `i32`, `u32`, `i64`).
///
/// It is a stateless map, so it runs on every core. It must come first, on records as read:
/// a record that already has a sequence axis is refused.
#[derive(Clone, Debug)]
pub struct PreTokenized {
    input: Field,
    output: Field,
    eos: Option<u32>,
    vocab_size: Option<u32>,
}

impl PreTokenized {
    /// Ids from `field`, into `tokens`, nothing appended, any `u32` id accepted.
    pub fn new(field: &str) -> Self {
        PreTokenized { input: Field::new(field), output: Field::new("tokens"), eos: None, vocab_size: None }
    }

    /// Writes the sequence to `field` instead of `tokens`.
    #[must_use]
    pub fn output(mut self, field: &str) -> Self {
        self.output = Field::new(field);
        self
    }

    /// Appends `id` to every document (stored data often leaves the separator to the
    /// loader). Refused when it is outside the vocabulary size given.
    pub fn eos(mut self, id: u32) -> Result<Self, crate::Error> {
        self.eos = Some(id);
        self.check()?;
        Ok(self)
    }

    /// Refuses ids at or over `n` (as bad records): data tokenized with another tokenizer
    /// shows up here instead of as an index error in the model.
    pub fn vocab_size(mut self, n: u32) -> Result<Self, crate::Error> {
        if n == 0 {
            return Err(crate::Error::Config("pretokenized: a vocabulary size of 0".into()));
        }
        self.vocab_size = Some(n);
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> Result<(), crate::Error> {
        match (self.eos, self.vocab_size) {
            (Some(e), Some(n)) if e >= n => {
                Err(crate::Error::Config(format!("pretokenized: EOS id {e} is outside the vocabulary size {n}")))
            }
            _ => Ok(()),
        }
    }

    /// The ids of `value` as `u32`, checked.
    fn ids(&self, value: &Value) -> Result<Vec<u32>, String> {
        let field = self.input.as_str();
        let array = match value {
            Value::Array(a) | Value::Seq(a) if a.shape().dims().len() == 1 => a,
            other => {
                return Err(format!(
                    "field {field:?} is {}; expected a one-dimensional array of token ids",
                    other.describe()
                ));
            }
        };
        let extra = usize::from(self.eos.is_some());
        let mut ids = Vec::with_capacity(array.len() + extra);
        let limit = self.vocab_size.map_or(u64::from(u32::MAX) + 1, u64::from);
        let mut push = |i: usize, id: i128| -> Result<(), String> {
            if id < 0 || id >= i128::from(limit) {
                let bound = self.vocab_size.map_or(String::new(), |n| format!(" (vocabulary size {n})"));
                return Err(format!("field {field:?} holds token id {id} at position {i}{bound}"));
            }
            ids.push(id as u32);
            Ok(())
        };
        match array.data() {
            ArrayData::U8(b) => b.as_slice().iter().enumerate().try_for_each(|(i, &v)| push(i, v.into()))?,
            ArrayData::I32(b) => b.as_slice().iter().enumerate().try_for_each(|(i, &v)| push(i, v.into()))?,
            ArrayData::U32(b) => b.as_slice().iter().enumerate().try_for_each(|(i, &v)| push(i, v.into()))?,
            ArrayData::I64(b) => b.as_slice().iter().enumerate().try_for_each(|(i, &v)| push(i, v.into()))?,
            _ => return Err(format!("field {field:?} is {}; token ids are integers", value.describe())),
        }
        if ids.is_empty() {
            return Err(format!("field {field:?} holds no token ids"));
        }
        ids.extend(self.eos);
        Ok(ids)
    }
}

impl Operator for PreTokenized {
    fn name(&self) -> &str {
        "pretokenized"
    }

    fn fingerprint(&self) -> Settings {
        Settings::new("pretokenized", 1)
            .set("input", self.input.as_str())
            .set("output", self.output.as_str())
            .set("eos", self.eos)
            .set("vocab_size", self.vocab_size)
    }

    fn describe(&self) -> String {
        format!(
            "token ids from {:?} → {:?}, EOS {}, {}",
            self.input.as_str(),
            self.output.as_str(),
            self.eos.map_or("none".into(), |e| e.to_string()),
            self.vocab_size.map_or("any u32 id".into(), |n| format!("ids below {n}"))
        )
    }

    fn apply(&self, mut record: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let sample = match record.lineage().as_single() {
            Some(Fragment { sample, extent: Extent::Whole }) => *sample,
            _ => {
                return Err(OpError::Fatal(
                    "pretokenized must come first: its input already has a sequence axis".into(),
                ));
            }
        };
        let value = record
            .take(self.input.as_str())
            .ok_or_else(|| OpError::Data(format!("no field {:?} (the token ids)", self.input.as_str())))?;
        let ids = self.ids(&value).map_err(OpError::Data)?;
        let n = u32::try_from(ids.len())
            .map_err(|_| OpError::Data(format!("{} token ids: more than a sample's axis holds", ids.len())))?;
        record.set_lineage(Lineage::single(Fragment::span(sample, Span::prefix(n))));
        record.set(&self.output, Value::seq(ids));
        out.push(record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_operator::SampleId;

    fn read(value: Value) -> Record {
        let mut r = Record::new(Lineage::single(Fragment::whole(SampleId { dataset: 0, shard: 1, row: 2 })));
        r.set(&Field::new("input_ids"), value);
        r
    }

    fn run(op: &PreTokenized, value: Value) -> Result<Record, OpError> {
        let mut out = Vec::new();
        op.apply(read(value), &mut out)?;
        Ok(out.remove(0))
    }

    #[test]
    fn ids_become_the_token_axis_with_eos() {
        let op = PreTokenized::new("input_ids").eos(9).unwrap();
        let r = run(&op, Value::array(vec![5i64, 6, 7])).unwrap();
        assert_eq!(r.get("tokens").and_then(Value::as_array).and_then(|a| a.as_u32()), Some(&[5, 6, 7, 9][..]));
        assert_eq!(r.lineage().as_single().and_then(Fragment::positions), Span::new(0, 4));
        assert!(r.get("input_ids").is_none(), "the input field is consumed");
    }

    #[test]
    fn bad_ids_are_bad_records_naming_the_position() {
        let op = PreTokenized::new("input_ids").vocab_size(100).unwrap();
        let msg = |v| match run(&op, v) {
            Err(OpError::Data(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(msg(Value::array(vec![1i64, -3])).contains("token id -3 at position 1"));
        assert!(msg(Value::array(vec![1i32, 100])).contains("token id 100 at position 1 (vocabulary size 100)"));
        assert!(msg(Value::array(Vec::<u32>::new())).contains("no token ids"));
        assert!(msg(Value::array(vec![1.5f32])).contains("integers"));
        assert!(msg(Value::text("1 2 3")).contains("one-dimensional array"));
        assert!(PreTokenized::new("x").vocab_size(10).unwrap().eos(10).is_err());
        let big = PreTokenized::new("input_ids");
        assert!(matches!(run(&big, Value::array(vec![1i64 << 32])), Err(OpError::Data(_))));
    }
}
