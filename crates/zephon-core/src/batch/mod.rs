//! Columnar batches: named dense and ragged columns made from rows, with each row's lineage.

use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, OpError, Result};
use zephon_operator::{Array, ArrayData, Attachment, Buffer, DType, Element, Field, Lineage, Record, Shape, Value};

mod stack;

use stack::{attachment_columns, stack};

/// Items of varying shape, and a varying number of them per row: every item's elements
/// concatenated into one flat array, with offsets.
///
/// Item `i` is elements `item_offsets[i]..item_offsets[i + 1]` of `values`, of shape
/// `item_shapes[i]`; row `r` holds items `row_offsets[r]..row_offsets[r + 1]`. The
/// constructor checks all of that, so accessors never fail on a valid value.
#[derive(Clone, Debug, PartialEq)]
pub struct Ragged {
    values: Array,
    item_offsets: Vec<usize>,
    item_shapes: Vec<Shape>,
    row_offsets: Vec<usize>,
}

impl Ragged {
    /// Checks and builds a ragged column: `values` is one-dimensional, `item_offsets` starts at
    /// 0, never decreases, ends at the element count and has one more entry than
    /// `item_shapes`; each item's shape holds its elements; `row_offsets` starts at 0, never
    /// decreases and ends at the item count.
    pub fn new(
        values: Array,
        item_offsets: Vec<usize>,
        item_shapes: Vec<Shape>,
        row_offsets: Vec<usize>,
    ) -> Result<Ragged> {
        if values.shape().ndim() != 1 {
            return Err(Error::Batch(format!("ragged values must be one-dimensional, not {}", values.shape())));
        }
        let monotone = |o: &[usize], end: usize| o.first() == Some(&0) && o.last() == Some(&end) && o.is_sorted();
        if item_offsets.len() != item_shapes.len() + 1 || !monotone(&item_offsets, values.len()) {
            return Err(Error::Batch(format!(
                "{} item offsets for {} items over {} elements are inconsistent",
                item_offsets.len(),
                item_shapes.len(),
                values.len()
            )));
        }
        for (i, shape) in item_shapes.iter().enumerate() {
            let n = item_offsets[i + 1] - item_offsets[i];
            if shape.numel() != Some(n) {
                return Err(Error::Batch(format!("item {i} has {n} elements but shape {shape}")));
            }
        }
        if !monotone(&row_offsets, item_shapes.len()) {
            return Err(Error::Batch(format!("row offsets {row_offsets:?} do not cover {} items", item_shapes.len())));
        }
        Ok(Ragged { values, item_offsets, item_shapes, row_offsets })
    }

    /// Every item's elements, concatenated (one-dimensional).
    pub fn values(&self) -> &Array {
        &self.values
    }

    /// The dtype of the items.
    pub fn dtype(&self) -> DType {
        self.values.dtype()
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.row_offsets.len() - 1
    }

    /// Number of items over all rows.
    pub fn items(&self) -> usize {
        self.item_shapes.len()
    }

    /// The items of row `row`, as item indices.
    pub fn row_items(&self, row: usize) -> Range<usize> {
        match (self.row_offsets.get(row), self.row_offsets.get(row + 1)) {
            (Some(&a), Some(&b)) => a..b,
            _ => 0..0,
        }
    }

    /// Item `i` as an array of its own shape, sharing the elements.
    pub fn item(&self, i: usize) -> Option<Array> {
        let (start, end) = (*self.item_offsets.get(i)?, *self.item_offsets.get(i + 1)?);
        let data = self.values.data().slice(start, end)?;
        Array::new(data, self.item_shapes.get(i)?.clone()).ok()
    }

    /// Element offsets of the items (items + 1 entries).
    pub fn item_offsets(&self) -> &[usize] {
        &self.item_offsets
    }

    /// Shapes of the items.
    pub fn item_shapes(&self) -> &[Shape] {
        &self.item_shapes
    }

    /// Item offsets of the rows (rows + 1 entries).
    pub fn row_offsets(&self) -> &[usize] {
        &self.row_offsets
    }

    /// When every item has at least one dimension and all share their inner dimensions, the
    /// shape of the items stacked along their outermost one (`[Σ patches, C·p·p]` for patch
    /// arrays); `None` otherwise.
    pub fn stacked_shape(&self) -> Option<Shape> {
        let first = self.item_shapes.first()?;
        if first.ndim() == 0 || self.item_shapes.iter().any(|s| s.ndim() == 0 || s.dims()[1..] != first.dims()[1..]) {
            return None;
        }
        Some(first.with_outer(self.item_shapes.iter().map(Shape::outer).sum()))
    }

    /// The parts, moved out: values, item offsets, item shapes, row offsets.
    pub fn into_parts(self) -> (Array, Vec<usize>, Vec<Shape>, Vec<usize>) {
        (self.values, self.item_offsets, self.item_shapes, self.row_offsets)
    }

    /// The column as a sink lays it out for a tensor library, moving the values (no copy).
    ///
    /// Three layouts, each with `offsets` along the first dimension of the values: items of
    /// rank ≥ 2 that agree past their first dimension are concatenated along it (patch arrays,
    /// `[Σ n_i, C·p·p]`); equal vectors or scalars get a new leading dimension (image grids,
    /// spans, `[items, ...]`); anything else is flat, with each item's shape in `shapes`.
    pub fn into_layout(self) -> RaggedLayout {
        let rank_two = self.item_shapes.iter().all(|s| s.ndim() >= 2);
        let uniform = self.item_shapes.windows(2).all(|w| w[0] == w[1]);
        let stacked = self.stacked_shape();
        let (values, item_offsets, item_shapes, row_offsets) = self.into_parts();
        let (shape, offsets, shapes) = match (stacked, rank_two, uniform, item_shapes.first()) {
            (Some(s), true, _, _) => {
                let mut at = 0i64;
                let mut o = Vec::with_capacity(item_shapes.len() + 1);
                o.push(0);
                for s in &item_shapes {
                    at += s.outer() as i64;
                    o.push(at);
                }
                (s, o, None)
            }
            (_, _, true, Some(first)) if first.ndim() <= 1 => {
                (first.stacked(item_shapes.len()), (0..=item_shapes.len() as i64).collect(), None)
            }
            _ => {
                let o = item_offsets.iter().map(|&x| x as i64).collect();
                (Shape::vector(values.len()), o, Some(shape_table(&item_shapes)).filter(|(ndim, _)| *ndim > 0))
            }
        };
        // The shapes above hold exactly the values' elements, by construction of a `Ragged`.
        let values = Array::new(values.data().clone(), shape).unwrap_or(values);
        RaggedLayout {
            values,
            offsets,
            row_offsets: row_offsets.iter().map(|&x| x as i64).collect(),
            shapes: shapes.map(|(ndim, table)| (item_shapes.len(), ndim, table)),
        }
    }
}

/// A ragged column laid out for a tensor library ([`Ragged::into_layout`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RaggedLayout {
    /// The values, stacked or flat.
    pub values: Array,
    /// Item `i` is `values[offsets[i]..offsets[i + 1]]` along the first dimension.
    pub offsets: Vec<i64>,
    /// Row `r` holds items `row_offsets[r]..row_offsets[r + 1]`.
    pub row_offsets: Vec<i64>,
    /// For flat values: (items, ndim, every item's dimensions left-padded with 1 to the
    /// largest rank, row-major).
    pub shapes: Option<(usize, usize, Vec<i64>)>,
}

/// Every item's dimensions, left-padded with 1 to the largest rank (the element count stays
/// the same), as an `i64` table.
fn shape_table(shapes: &[Shape]) -> (usize, Vec<i64>) {
    let ndim = shapes.iter().map(Shape::ndim).max().unwrap_or(0);
    let mut table = Vec::with_capacity(shapes.len() * ndim);
    for s in shapes {
        table.extend(std::iter::repeat_n(1, ndim - s.ndim()));
        table.extend(s.dims().iter().map(|&d| d as i64));
    }
    (ndim, table)
}

/// The values of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// One array per row, all of one shape, stacked: shape `[rows, ...]`. Integer and float
    /// fields become `i64[rows]` and `f64[rows]`.
    Dense(Array),
    /// Arrays whose shape differs between rows (one item per row), or attachments (any number
    /// per row).
    Ragged(Ragged),
    /// One string per row.
    Str(Vec<Arc<str>>),
    /// One byte string per row.
    Bytes(Vec<Buffer<u8>>),
}

impl ColumnData {
    fn describe(&self) -> String {
        match self {
            ColumnData::Dense(a) => format!("{}{}", a.dtype(), a.shape()),
            ColumnData::Ragged(r) => {
                format!("ragged {} ({} items in {} rows)", r.dtype(), r.items(), r.rows())
            }
            ColumnData::Str(v) => format!("str[{}]", v.len()),
            ColumnData::Bytes(v) => format!("bytes[{}]", v.len()),
        }
    }
}

/// One named column.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// The field name (for attachments: `kind.field`, and `kind.span`).
    pub name: Field,
    /// The values.
    pub data: ColumnData,
}

impl Column {
    /// The stacked array of a dense column.
    pub fn dense(&self) -> Option<&Array> {
        match &self.data {
            ColumnData::Dense(a) => Some(a),
            _ => None,
        }
    }

    /// The ragged values of a ragged column.
    pub fn ragged(&self) -> Option<&Ragged> {
        match &self.data {
            ColumnData::Ragged(r) => Some(r),
            _ => None,
        }
    }

    /// The elements of a dense `u32` column (row-major).
    pub fn as_u32(&self) -> Option<&[u32]> {
        self.dense()?.as_u32()
    }

    /// The elements of a dense `i32` column (row-major).
    pub fn as_i32(&self) -> Option<&[i32]> {
        self.dense()?.as_i32()
    }

    /// The elements of a dense `i64` column (row-major).
    pub fn as_i64(&self) -> Option<&[i64]> {
        self.dense()?.as_i64()
    }

    /// The elements of a dense `u8` column (row-major).
    pub fn as_u8(&self) -> Option<&[u8]> {
        self.dense()?.as_u8()
    }

    /// The elements of a dense `f32` column (row-major).
    pub fn as_f32(&self) -> Option<&[f32]> {
        self.dense()?.as_f32()
    }
}

/// Rows stacked into columns, with each row's lineage (which samples and token ranges made
/// it).
///
/// - Fields: every row must have the same fields with the same kind of value. An array field
///   whose shape is the same in every row becomes a dense column `[rows, ...shape]`;
///   otherwise a ragged column with one item per row.
/// - Attachments: for each kind `k` and value `f`, a ragged column `k.f` of the row's
///   attachments in order, and `k.span`, an `i32[2]` item per attachment: its start on the
///   row's axis and its length (`[-1, 0]` if unplaced).
///
/// Building a batch of several rows copies their arrays once into contiguous columns; a batch
/// then hands its buffers over without another copy ([`Batch::into_columns`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    rows: usize,
    columns: Vec<Column>,
    lineage: Vec<Lineage>,
}

impl Batch {
    /// Stacks `rows` in order: row fields in the first row's order, then attachment columns.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = &'a Record>) -> Result<Batch, OpError> {
        let rows: Vec<&Record> = rows.into_iter().collect();
        let Some(first) = rows.first() else {
            return Ok(Batch::default());
        };
        let mut columns = Vec::new();
        for (name, _) in first.fields() {
            let mut values = Vec::with_capacity(rows.len());
            for (i, row) in rows.iter().enumerate() {
                values.push(row.get(name.as_str()).ok_or_else(|| {
                    OpError::Data(format!("row {i} of the batch has no field {name} (rows of a batch must match)"))
                })?);
            }
            let data = stack(&values).map_err(|m| OpError::Data(format!("field {name}: {m}")))?;
            columns.push(Column { name: name.clone(), data });
        }
        for (i, row) in rows.iter().enumerate() {
            if row.fields().len() != first.fields().len() {
                return Err(OpError::Data(format!(
                    "row {i} of the batch has {} fields, row 0 has {} (rows of a batch must match)",
                    row.fields().len(),
                    first.fields().len()
                )));
            }
        }
        columns.extend(attachment_columns(&rows)?);
        Ok(Batch { rows: rows.len(), columns, lineage: rows.iter().map(|r| r.lineage().clone()).collect() })
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

    /// The lineage of row `row`: which samples and token ranges made it.
    pub fn lineage(&self, row: usize) -> Option<&Lineage> {
        self.lineage.get(row)
    }

    /// Every row's lineage, in row order.
    pub fn lineages(&self) -> &[Lineage] {
        &self.lineage
    }

    /// The columns, moved out with their buffers (no copy), and the rows' lineage.
    pub fn into_parts(self) -> (Vec<Column>, Vec<Lineage>) {
        (self.columns, self.lineage)
    }

    /// The columns, moved out with their buffers (no copy).
    pub fn into_columns(self) -> Vec<Column> {
        self.columns
    }

    /// The same batch with every dense column's array replaced by `f(array)` (a sink
    /// widening integer columns, say); ragged, text and byte columns are kept as they are.
    pub fn map_dense(mut self, mut f: impl FnMut(Array) -> Array) -> Batch {
        for c in &mut self.columns {
            if let ColumnData::Dense(a) = &mut c.data {
                let taken = std::mem::replace(a, Array::from_vec::<u8>(Vec::new()));
                *a = f(taken);
            }
        }
        self
    }

    /// A one-line summary per column: name, type, shape.
    pub fn describe(&self) -> String {
        self.columns.iter().map(|c| format!("{}: {}", c.name, c.data.describe())).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zephon_operator::{Fragment, SampleId, Span};

    fn row(n: u32, images: &[(u32, u32, usize)]) -> Record {
        let frag = Fragment::range(SampleId::new(0, 0, n as u64), 0, n).unwrap();
        let mut r = Record::new(Lineage::single(frag))
            .with(&"ids".into(), Value::seq((0..n).collect::<Vec<u32>>()))
            .with(&"n".into(), Value::Int(n as i64));
        for (k, &(at, len, side)) in images.iter().enumerate() {
            let px = Array::with_shape(vec![k as u8; side * side * 3], [side, side, 3]).unwrap();
            r.attach(
                Attachment::new(&"image".into(), k as u32)
                    .placed(Span::at(at, len).unwrap(), true)
                    .with(&"pixels".into(), Value::Array(px)),
            );
        }
        r
    }

    #[test]
    fn equal_shapes_stack_dense_others_go_ragged() {
        let rows = [row(3, &[]), row(3, &[])];
        let b = Batch::from_rows(&rows).unwrap();
        assert_eq!(b.column("ids").unwrap().dense().unwrap().shape().dims(), &[2, 3]);
        assert_eq!(b.column("n").unwrap().as_i64(), Some(&[3, 3][..]));
        let rows = [row(2, &[]), row(3, &[])];
        let b = Batch::from_rows(&rows).unwrap();
        let r = b.column("ids").unwrap().ragged().unwrap();
        assert_eq!((r.rows(), r.items()), (2, 2));
        assert_eq!(r.item(1).unwrap().as_u32(), Some(&[0, 1, 2][..]));
        assert_eq!(b.lineage(1), Some(rows[1].lineage()));
    }

    #[test]
    fn attachments_become_ragged_columns_per_row() {
        let rows = [row(8, &[(0, 2, 2), (4, 2, 3)]), row(8, &[]), row(8, &[(1, 3, 1)])];
        let b = Batch::from_rows(&rows).unwrap();
        let px = b.column("image.pixels").unwrap().ragged().unwrap();
        assert_eq!(px.row_offsets(), &[0, 2, 2, 3]);
        assert_eq!(px.item_shapes()[1].dims(), &[3, 3, 3]);
        assert_eq!(px.item(2).unwrap().as_u8(), Some(&[0u8, 0, 0][..]));
        assert!(px.stacked_shape().is_none(), "items differ in inner dimensions");
        let spans = b.column("image.span").unwrap().ragged().unwrap();
        assert_eq!(spans.values().as_i32(), Some(&[0, 2, 4, 2, 1, 3][..]));
    }

    #[test]
    fn into_columns_moves_buffers() {
        let rows = [row(4, &[]), row(4, &[])];
        let b = Batch::from_rows(&rows).unwrap();
        let ptr = b.column("ids").unwrap().as_u32().unwrap().as_ptr();
        let cols = b.into_columns();
        let ids = cols.into_iter().find(|c| c.name.as_str() == "ids").unwrap();
        let ColumnData::Dense(a) = ids.data else { panic!("dense") };
        let ArrayData::U32(buf) = a.into_data() else { panic!("u32") };
        assert!(buf.is_exclusive());
        let v = buf.into_vec();
        assert_eq!(v.as_ptr(), ptr, "moved out, not copied");
    }

    #[test]
    fn mismatched_rows_are_errors() {
        let a = row(3, &[]);
        let b = row(3, &[]).with(&"n".into(), Value::text("x"));
        assert!(Batch::from_rows([&a, &b]).unwrap_err().to_string().contains("field n: row 1 has text"));
        let c = row(3, &[]).with(&"extra".into(), Value::Int(1));
        assert!(Batch::from_rows([&a, &c]).is_err());
    }
}
