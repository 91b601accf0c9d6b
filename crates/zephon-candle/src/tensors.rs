//! Named tensors made from one batch.

use candle_core::Tensor;

use crate::error::{Error, Result};

/// The tensors of one batch, by name, in column order.
///
/// For a column `c`:
/// - dense: `c`, shape `[rows, ...]`;
/// - ragged (items of varying shape, any number per row): `c`, the items' values
///   concatenated — stacked along the first dimension as `[Σ firsts, rest...]` when every item
///   shares its other dimensions (patch arrays `[patches, C·p·p]`, image grids `[images, 3]`),
///   flat `[elements]` otherwise; `c.offsets`, `[items + 1]`, where each item starts along the
///   first dimension of `c`; `c.row_offsets`, `[rows + 1]`, where each row's items start; and,
///   when the values are flat and items have dimensions, `c.shapes`, `[items, ndim]`, each
///   item's shape (left-padded with 1 when items differ in rank);
/// - text or bytes: `c`, the rows' bytes concatenated (`u8`), and `c.offsets`, `[rows + 1]`.
#[derive(Clone, Debug, Default)]
pub struct Tensors {
    rows: usize,
    names: Vec<String>,
    tensors: Vec<Tensor>,
    max_seqlen: Option<usize>,
}

impl Tensors {
    pub(crate) fn new(rows: usize) -> Self {
        Tensors { rows, ..Tensors::default() }
    }

    pub(crate) fn push(&mut self, name: String, tensor: Tensor) {
        self.names.push(name);
        self.tensors.push(tensor);
    }

    pub(crate) fn set_max_seqlen(&mut self, n: usize) {
        self.max_seqlen = Some(n);
    }

    /// Rows of the batch.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The longest sequence over the batch (the maximum of the `max_seqlen` column), as the
    /// host number varlen attention kernels take; `None` without such a column.
    pub fn max_seqlen(&self) -> Option<usize> {
        self.max_seqlen
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.names.iter().position(|n| n == name).map(|i| &self.tensors[i])
    }

    /// The tensor called `name`, or an error listing the names there are.
    pub fn require(&self, name: &str) -> Result<&Tensor> {
        self.get(name).ok_or_else(|| Error::Missing { name: name.to_string(), available: self.names.join(", ") })
    }

    /// Removes and returns the tensor called `name`.
    pub fn take(&mut self, name: &str) -> Option<Tensor> {
        let i = self.names.iter().position(|n| n == name)?;
        self.names.remove(i);
        Some(self.tensors.remove(i))
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// `(name, tensor)` pairs, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.names.iter().map(String::as_str).zip(&self.tensors)
    }

    /// Total bytes of all tensors (what a device holds for this batch).
    pub fn bytes(&self) -> usize {
        self.tensors.iter().map(|t| t.elem_count() * t.dtype().size_in_bytes()).sum()
    }
}

impl IntoIterator for Tensors {
    type Item = (String, Tensor);
    type IntoIter = std::iter::Zip<std::vec::IntoIter<String>, std::vec::IntoIter<Tensor>>;

    fn into_iter(self) -> Self::IntoIter {
        self.names.into_iter().zip(self.tensors)
    }
}
