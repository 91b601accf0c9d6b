//! Images stored in a Parquet column, as the Hugging Face `datasets` library writes them: an
//! `Image` feature is `struct<bytes: binary, path: string>`, a `Sequence(Image)` a list of
//! them; plain `binary` columns are read too.

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::schema::types::SchemaDescriptor;
use zephon_operator::{Buffer, OpError};

use crate::images::Image;

/// What a column must be to hold images, for the open error.
const EXPECTED: &str = "an images column must be struct<bytes: binary, path: string> (an HF Image), a list of \
                        them, or binary";

fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// Checks that a column of type `t` holds images, or says what it should be.
pub(crate) fn check_type(t: &DataType) -> Result<(), String> {
    match t {
        DataType::List(item) | DataType::LargeList(item) => check_one(item.data_type()),
        t => check_one(t),
    }
}

/// One image: binary, or a struct with binary `bytes` and, if it has one, a string `path`.
fn check_one(t: &DataType) -> Result<(), String> {
    match t {
        t if is_binary(t) => Ok(()),
        DataType::Struct(children) => {
            let bytes = children.iter().find(|c| c.name() == "bytes");
            let path = children.iter().find(|c| c.name() == "path");
            if !bytes.is_some_and(|b| is_binary(b.data_type())) {
                return Err(format!("{EXPECTED}; this struct has no binary `bytes`"));
            }
            if path.is_some_and(|p| !is_string(p.data_type())) {
                return Err(format!("{EXPECTED}; this struct's `path` is not a string"));
            }
            Ok(())
        }
        _ => Err(EXPECTED.into()),
    }
}

/// The leaves of root column `root` an images column needs: all of a binary column, only
/// `bytes` and `path` of a struct (HF structs may carry more children; they are not read).
pub(crate) fn leaves(descr: &SchemaDescriptor, root: usize) -> Vec<usize> {
    let all: Vec<usize> = (0..descr.num_columns()).filter(|&l| descr.get_column_root_idx(l) == root).collect();
    let parts = |l: usize| descr.column(l).path().parts().to_vec();
    // The struct's own children are its shallowest `bytes` leaf's siblings; list nesting
    // (`image.list.element.bytes`) varies with the writer, so depth is measured, not assumed.
    let depth = all.iter().map(|&l| parts(l)).filter(|p| p.last().is_some_and(|n| n == "bytes")).map(|p| p.len()).min();
    match depth {
        None => all,
        Some(d) => all
            .into_iter()
            .filter(|&l| {
                let p = parts(l);
                p.len() == d && p.last().is_some_and(|n| n == "bytes" || n == "path")
            })
            .collect(),
    }
}

/// The images of row `i` of `col` (an images column checked by [`check_type`], decoded),
/// with `column` its name for sources and messages.
pub(crate) fn images_at(col: &dyn Array, i: usize, column: &str) -> Result<Vec<Image>, OpError> {
    if col.is_null(i) {
        return Ok(Vec::new());
    }
    match col.data_type() {
        DataType::List(_) => list(col.as_list::<i32>().value(i), column),
        DataType::LargeList(_) => list(col.as_list::<i64>().value(i), column),
        _ => Ok(one(col, i, column, None)?.into_iter().collect()),
    }
}

/// Every element of a list is an image: a null one is refused rather than skipped, because
/// skipping would renumber the images after it.
fn list(values: ArrayRef, column: &str) -> Result<Vec<Image>, OpError> {
    (0..values.len())
        .map(|j| {
            one(values.as_ref(), j, column, Some(j))?.ok_or_else(|| {
                OpError::Data(format!("column {column:?}: image {j} of the list is null (no bytes, no path)"))
            })
        })
        .collect()
}

/// Element `i` of a binary or image-struct array, `None` when it holds no image; `element`
/// is its index in the row's list, if in one.
fn one(col: &dyn Array, i: usize, column: &str, element: Option<usize>) -> Result<Option<Image>, OpError> {
    if col.is_null(i) {
        return Ok(None);
    }
    let unnamed = || match element {
        Some(j) => format!("{column}[{j}]"),
        None => column.to_string(),
    };
    if let Some(bytes) = binary(col, i) {
        return Ok(Some(Image { bytes: Buffer::from(bytes), source: unnamed().into() }));
    }
    let DataType::Struct(_) = col.data_type() else {
        return Err(OpError::Fatal(format!("column {column:?} is {}, not images", col.data_type())));
    };
    let s = col.as_struct();
    let path = s.column_by_name("path").and_then(|p| string(p.as_ref(), i)).filter(|p| !p.is_empty());
    let bytes = s
        .column_by_name("bytes")
        .ok_or_else(|| OpError::Fatal(format!("column {column:?}: `bytes` missing from the decoded struct")))?;
    match binary(bytes.as_ref(), i) {
        Some(b) => Ok(Some(Image { bytes: Buffer::from(b), source: path.map_or_else(unnamed, str::to_string).into() })),
        // An HF image kept outside the file has a path and no bytes: dropping it silently
        // would change the data, and the path is the writer's, not one zephon can resolve.
        None => match path {
            Some(p) => Err(OpError::Data(format!(
                "column {column:?}: image {p:?} has no bytes (it is not embedded in the file); zephon reads \
                 embedded images only"
            ))),
            None => Ok(None),
        },
    }
}

/// Element `i` of a binary array; `None` when null or not binary.
fn binary(col: &dyn Array, i: usize) -> Option<&[u8]> {
    if col.is_null(i) {
        return None;
    }
    match col.data_type() {
        DataType::Binary => Some(col.as_binary::<i32>().value(i)),
        DataType::LargeBinary => Some(col.as_binary::<i64>().value(i)),
        DataType::BinaryView => Some(col.as_binary_view().value(i)),
        _ => None,
    }
}

/// Element `i` of a string array; `None` when null or not a string.
fn string(col: &dyn Array, i: usize) -> Option<&str> {
    if col.is_null(i) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 => Some(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(col.as_string_view().value(i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{Field, Fields, Schema};
    use parquet::arrow::ArrowSchemaConverter;

    use super::*;

    fn image_struct() -> DataType {
        DataType::Struct(Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("width", DataType::Int32, true),
            Field::new("path", DataType::Utf8, true),
            Field::new("meta", DataType::Struct(Fields::from(vec![Field::new("path", DataType::Utf8, true)])), true),
        ]))
    }

    /// The leaf paths `leaves` picks for each column of a schema.
    fn picked(columns: Vec<(&str, DataType)>) -> Vec<Vec<String>> {
        let fields: Vec<Field> = columns.into_iter().map(|(n, t)| Field::new(n, t, true)).collect();
        let descr = ArrowSchemaConverter::new().convert(&Schema::new(fields.clone())).unwrap();
        (0..fields.len())
            .map(|root| leaves(&descr, root).into_iter().map(|l| descr.column(l).path().string()).collect())
            .collect()
    }

    #[test]
    fn only_bytes_and_path_of_an_image_struct_are_read() {
        let list = DataType::List(Arc::new(Field::new("item", image_struct(), true)));
        let got = picked(vec![
            ("text", DataType::Utf8),
            ("image", image_struct()),
            ("images", list),
            ("raw", DataType::Binary),
            ("raws", DataType::LargeList(Arc::new(Field::new("item", DataType::Binary, true)))),
        ]);
        assert_eq!(got[1], vec!["image.bytes", "image.path"], "not width, not meta.path");
        assert_eq!(got[2], vec!["images.list.item.bytes", "images.list.item.path"]);
        assert_eq!(got[3], vec!["raw"]);
        assert_eq!(got[4], vec!["raws.list.item"]);
    }

    #[test]
    fn image_column_types() {
        assert!(check_type(&image_struct()).is_ok());
        assert!(check_type(&DataType::LargeList(Arc::new(Field::new("item", DataType::BinaryView, true)))).is_ok());
        let no_bytes = DataType::Struct(Fields::from(vec![Field::new("path", DataType::Utf8, true)]));
        assert!(check_type(&no_bytes).unwrap_err().contains("no binary `bytes`"));
        let int_path = DataType::Struct(Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Int64, true),
        ]));
        assert!(check_type(&int_path).unwrap_err().contains("`path` is not a string"));
        for t in [DataType::Utf8, DataType::Int32, DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))] {
            assert!(check_type(&t).unwrap_err().starts_with("an images column must be"), "{t}");
        }
    }
}
