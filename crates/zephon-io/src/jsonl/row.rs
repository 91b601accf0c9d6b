//! One JSONL row parsed for the wanted fields only: other fields are skipped unparsed,
//! arrays and objects are not built unless they are what is wanted.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use zephon_operator::{Field, Value};

use crate::fields::Cell;

/// The wanted fields of one row, as found.
#[derive(Debug)]
pub(crate) struct Row {
    pub(crate) cells: Vec<Cell>,
    /// The image paths, when an images field was asked for.
    pub(crate) images: ImagePaths,
    /// A wanted field the row holds more than once (`names.len()` for the images field).
    pub(crate) duplicate: Option<usize>,
}

/// A row's images field as found.
#[derive(Debug, PartialEq)]
pub(crate) enum ImagePaths {
    /// The paths, in order; none when the field is absent, null or an empty array.
    Paths(Vec<String>),
    /// Not a path or an array of paths: how it is not, for the message ("is a number",
    /// "element 2 is null").
    Bad(String),
}

/// Parses one JSON object, keeping only the named fields and the images field (others are
/// skipped unparsed).
/// Fields from `json_from` on are kept as their JSON text.
pub(crate) fn parse_row(
    bytes: &[u8],
    names: &[Field],
    json_from: usize,
    images: Option<&Field>,
) -> std::result::Result<Row, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let row = PickFields { names, json_from, images }.deserialize(&mut de)?;
    de.end()?;
    Ok(row)
}

struct PickFields<'a> {
    names: &'a [Field],
    json_from: usize,
    images: Option<&'a Field>,
}

impl<'de> DeserializeSeed<'de> for PickFields<'_> {
    type Value = Row;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PickFields<'_> {
    type Value = Row;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut row = Row {
            cells: self.names.iter().map(|_| Cell::Absent).collect(),
            images: ImagePaths::Paths(Vec::new()),
            duplicate: None,
        };
        let mut images_seen = false;
        while let Some(slot) = map.next_key_seed(KeyIndex { names: self.names, images: self.images })? {
            match slot {
                Some(i) if i == self.names.len() => {
                    row.images = map.next_value_seed(ImagesSeed)?;
                    if images_seen {
                        row.duplicate.get_or_insert(i);
                    }
                    images_seen = true;
                }
                Some(i) => {
                    let cell = if i >= self.json_from {
                        match map.next_value::<Box<serde_json::value::RawValue>>()?.get() {
                            "null" => Cell::Null,
                            raw => Cell::Value(Value::text(raw)),
                        }
                    } else {
                        map.next_value_seed(CellSeed)?
                    };
                    if row.cells[i] != Cell::Absent {
                        row.duplicate.get_or_insert(i);
                    }
                    row.cells[i] = cell;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(row)
    }
}

/// Maps a key to the index of the wanted field it names (`names.len()` for the images
/// field), without allocating.
struct KeyIndex<'a> {
    names: &'a [Field],
    images: Option<&'a Field>,
}

impl<'de> DeserializeSeed<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
        if self.images.is_some_and(|f| f.as_str() == v) {
            return Ok(Some(self.names.len()));
        }
        Ok(self.names.iter().position(|n| n.as_str() == v))
    }
}

/// A wanted field's JSON value as a [`Cell`]. Objects, and arrays of anything but integers,
/// are skipped unbuilt: they are refused, so building them would be wasted.
struct CellSeed;

impl<'de> DeserializeSeed<'de> for CellSeed {
    type Value = Cell;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CellSeed {
    type Value = Cell;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Cell, E> {
        Ok(Cell::Null)
    }
    fn visit_none<E>(self) -> std::result::Result<Cell, E> {
        Ok(Cell::Null)
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Cell, E> {
        Ok(Cell::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Cell, E> {
        Ok(Cell::Value(Value::Int(v)))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Cell, E> {
        Ok(i64::try_from(v).map_or(Cell::TooBig(v), |i| Cell::Value(Value::Int(i))))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Cell, E> {
        Ok(Cell::Value(Value::Float(v)))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Cell, E> {
        Ok(Cell::Value(Value::text(v)))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Cell, E> {
        Ok(Cell::Value(Value::text(v)))
    }
    /// An array of integers (token ids stored with the data) becomes a one-dimensional `i64`
    /// array; any other array is refused.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Cell, A::Error> {
        let mut ints = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut other = false;
        while let Some(v) = seq.next_element_seed(IntSeed)? {
            match v {
                Some(i) if !other => ints.push(i),
                _ => other = true,
            }
        }
        Ok(if other { Cell::Unsupported("a JSON array") } else { Cell::Value(Value::array(ints)) })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Cell, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Cell::Unsupported("a JSON object"))
    }
}

/// An array element: `Some` for an integer that fits `i64`, `None` for anything else (skipped
/// unbuilt).
struct IntSeed;

impl<'de> DeserializeSeed<'de> for IntSeed {
    type Value = Option<i64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IntSeed {
    type Value = Option<i64>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Self::Value, E> {
        Ok(i64::try_from(v).ok())
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// The images field's JSON value: a path, an array of paths, or null.
struct ImagesSeed;

impl<'de> DeserializeSeed<'de> for ImagesSeed {
    type Value = ImagePaths;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ImagesSeed {
    type Value = ImagePaths;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Paths(Vec::new()))
    }
    fn visit_none<E>(self) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Paths(Vec::new()))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<ImagePaths, E> {
        Ok(match path(v) {
            Ok(p) => ImagePaths::Paths(vec![p]),
            Err(what) => ImagePaths::Bad(format!("is {what}")),
        })
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Bad("is a boolean".into()))
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Bad("is a number".into()))
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Bad("is a number".into()))
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<ImagePaths, E> {
        Ok(ImagePaths::Bad("is a number".into()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<ImagePaths, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ImagePaths::Bad("is a JSON object".into()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<ImagePaths, A::Error> {
        let mut paths = Vec::new();
        let mut bad = None;
        let mut k = 0usize;
        // The whole array is consumed even after a bad element: the row must still parse.
        while let Some(element) = seq.next_element_seed(PathSeed)? {
            match element {
                Ok(p) if bad.is_none() => paths.push(p),
                Ok(_) => {}
                Err(what) => {
                    bad.get_or_insert_with(|| format!("element {k} is {what}"));
                }
            }
            k += 1;
        }
        Ok(bad.map_or(ImagePaths::Paths(paths), ImagePaths::Bad))
    }
}

/// A path as written, or what the value is instead.
fn path(v: &str) -> std::result::Result<String, &'static str> {
    if v.is_empty() { Err("an empty string") } else { Ok(v.to_string()) }
}

/// One element of an array of image paths. A null element is refused rather than skipped:
/// skipping it would renumber the images after it, and item `k` would no longer be the
/// array's element `k`.
struct PathSeed;

impl<'de> DeserializeSeed<'de> for PathSeed {
    type Value = std::result::Result<String, &'static str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PathSeed {
    type Value = std::result::Result<String, &'static str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(Err("null"))
    }
    fn visit_none<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(Err("null"))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Self::Value, E> {
        Ok(path(v))
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(Err("a boolean"))
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(Err("a number"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Err("a JSON array"))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Err("a JSON object"))
    }
}
