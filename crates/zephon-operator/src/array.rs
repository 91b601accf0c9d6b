//! Typed arrays with a shape: one dtype vocabulary for record values and batch columns.

use std::fmt;

use half::{bf16, f16};

use crate::buffer::Buffer;

/// The element type of an array. The same vocabulary serves record values and batch columns,
/// so a sink maps a dtype once.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// Unsigned bytes (pixels, masks).
    U8,
    /// Signed 32-bit integers (labels with an ignore index, positions).
    I32,
    /// Unsigned 32-bit integers (token ids).
    U32,
    /// Signed 64-bit integers.
    I64,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
    /// bfloat16.
    BF16,
    /// IEEE 754 half precision.
    F16,
    /// Unsigned 16-bit integers (the dataset of each token).
    U16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::BF16 | DType::F16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The tag that names this dtype in the canonical encoding (see the README).
    pub const fn tag(self) -> u8 {
        match self {
            DType::U8 => 1,
            DType::I32 => 2,
            DType::U32 => 3,
            DType::I64 => 4,
            DType::F32 => 5,
            DType::F64 => 6,
            DType::BF16 => 7,
            DType::F16 => 8,
            DType::U16 => 9,
        }
    }

    /// The lowercase name (`u8`, `bf16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::U16 => "u16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that is one of the [`DType`]s. Sealed: the vocabulary is fixed, so sinks can
/// handle every case.
pub trait Element: Copy + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed {
    /// Its dtype.
    const DTYPE: DType;
    /// Little-endian bytes of one element (floats as their IEEE bits).
    fn write_le(self, out: &mut [u8]);
    /// Wraps a buffer of this type.
    fn wrap(buffer: Buffer<Self>) -> ArrayData;
    /// The buffer, if `data` holds this type.
    fn view(data: &ArrayData) -> Option<&Buffer<Self>>;
}

macro_rules! element {
    ($t:ty, $variant:ident, |$x:ident| $bits:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            #[inline]
            fn write_le(self, out: &mut [u8]) {
                let $x = self;
                out.copy_from_slice(&$bits.to_le_bytes());
            }
            fn wrap(buffer: Buffer<Self>) -> ArrayData {
                ArrayData::$variant(buffer)
            }
            fn view(data: &ArrayData) -> Option<&Buffer<Self>> {
                match data {
                    ArrayData::$variant(b) => Some(b),
                    _ => None,
                }
            }
        }
    };
}

element!(u8, U8, |x| x);
element!(i32, I32, |x| x);
element!(u32, U32, |x| x);
element!(u16, U16, |x| x);
element!(i64, I64, |x| x);
element!(f32, F32, |x| x.to_bits());
element!(f64, F64, |x| x.to_bits());
element!(bf16, BF16, |x| x.to_bits());
element!(f16, F16, |x| x.to_bits());

/// The elements of an array, by dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData {
    /// `u8` elements.
    U8(Buffer<u8>),
    /// `i32` elements.
    I32(Buffer<i32>),
    /// `u32` elements.
    U32(Buffer<u32>),
    /// `i64` elements.
    I64(Buffer<i64>),
    /// `f32` elements.
    F32(Buffer<f32>),
    /// `f64` elements.
    F64(Buffer<f64>),
    /// `bf16` elements.
    BF16(Buffer<bf16>),
    /// `f16` elements.
    F16(Buffer<f16>),
    /// `u16` elements.
    U16(Buffer<u16>),
}

/// Calls `$body` with `$b` bound to the typed buffer of `$data`, whatever its dtype.
macro_rules! with_buffer {
    ($data:expr, |$b:ident| $body:expr) => {
        match $data {
            ArrayData::U8($b) => $body,
            ArrayData::I32($b) => $body,
            ArrayData::U32($b) => $body,
            ArrayData::I64($b) => $body,
            ArrayData::F32($b) => $body,
            ArrayData::F64($b) => $body,
            ArrayData::BF16($b) => $body,
            ArrayData::F16($b) => $body,
            ArrayData::U16($b) => $body,
        }
    };
}

impl ArrayData {
    /// The dtype.
    pub fn dtype(&self) -> DType {
        with_buffer!(self, |b| element_dtype(b))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_buffer!(self, |b| b.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `start..end`, sharing memory; `None` when out of bounds.
    pub fn slice(&self, start: usize, end: usize) -> Option<ArrayData> {
        Some(with_buffer!(self, |b| Element::wrap(b.slice(start..end)?)))
    }

    /// Feeds the elements as little-endian bytes to `sink`, through a stack buffer (no
    /// allocation).
    pub fn feed_le(&self, sink: &mut dyn FnMut(&[u8])) {
        match self {
            // Bytes need no conversion.
            ArrayData::U8(b) => sink(b),
            other => with_buffer!(other, |b| feed_le(b, sink)),
        }
    }
}

fn element_dtype<T: Element>(_: &Buffer<T>) -> DType {
    T::DTYPE
}

fn feed_le<T: Element>(v: &[T], sink: &mut dyn FnMut(&[u8])) {
    let size = T::DTYPE.size();
    let mut buf = [0u8; 4096];
    for chunk in v.chunks(buf.len() / size) {
        for (i, &x) in chunk.iter().enumerate() {
            x.write_le(&mut buf[i * size..(i + 1) * size]);
        }
        sink(&buf[..chunk.len() * size]);
    }
}

/// The dimensions of an array, outermost first. A scalar has no dimensions; the element count
/// is the product of the dimensions.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Shape(Dims);

/// Up to four dimensions inline (every shape the pipelines make), more on the heap.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Dims {
    Inline { n: u8, dims: [usize; 4] },
    Heap(Box<[usize]>),
}

impl Shape {
    /// A shape of `dims`, outermost first.
    pub fn new(dims: &[usize]) -> Self {
        if dims.len() <= 4 {
            let mut inline = [0; 4];
            inline[..dims.len()].copy_from_slice(dims);
            Shape(Dims::Inline { n: dims.len() as u8, dims: inline })
        } else {
            Shape(Dims::Heap(dims.into()))
        }
    }

    /// A one-dimensional shape of `n` elements.
    pub fn vector(n: usize) -> Self {
        Shape::new(&[n])
    }

    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        match &self.0 {
            Dims::Inline { n, dims } => &dims[..*n as usize],
            Dims::Heap(d) => d,
        }
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.dims().len()
    }

    /// The element count, or `None` if it overflows.
    pub fn numel(&self) -> Option<usize> {
        self.dims().iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// The outermost dimension (1 for a scalar).
    pub fn outer(&self) -> usize {
        self.dims().first().copied().unwrap_or(1)
    }

    /// Elements per step of the outermost dimension (the product of the others).
    pub fn inner(&self) -> usize {
        self.dims().iter().skip(1).product()
    }

    /// The same shape with its outermost dimension set to `n`.
    pub fn with_outer(&self, n: usize) -> Shape {
        let mut d = self.dims().to_vec();
        match d.first_mut() {
            Some(first) => *first = n,
            None => d.push(n),
        }
        Shape::new(&d)
    }

    /// `[n, dims...]`: this shape stacked `n` times.
    pub fn stacked(&self, n: usize) -> Shape {
        let mut d = Vec::with_capacity(self.ndim() + 1);
        d.push(n);
        d.extend_from_slice(self.dims());
        Shape::new(&d)
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Self {
        Shape::new(dims)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Self {
        Shape::new(&dims)
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.dims(), f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.dims(), f)
    }
}

/// An array whose shape does not hold its elements.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("shape {shape} needs {} elements, the data has {len}", shape.numel().map_or("more than usize::MAX".to_string(), |n| n.to_string()))]
pub struct ShapeError {
    /// The shape asked for.
    pub shape: Shape,
    /// The number of elements given.
    pub len: usize,
}

/// A typed array with a shape. The element count always equals the shape's product: the
/// constructors refuse anything else.
///
/// Cloning and [`Array::slice_outer`] share the elements (see [`Buffer`]).
#[derive(Clone, PartialEq)]
pub struct Array {
    data: ArrayData,
    shape: Shape,
}

impl Array {
    /// `data` viewed as `shape`; fails when the element count differs.
    pub fn new(data: ArrayData, shape: Shape) -> Result<Array, ShapeError> {
        if shape.numel() != Some(data.len()) {
            return Err(ShapeError { shape, len: data.len() });
        }
        Ok(Array { data, shape })
    }

    /// A one-dimensional array of `elements` (no copy).
    pub fn from_vec<T: Element>(elements: Vec<T>) -> Array {
        Array::vector(Buffer::new(elements))
    }

    /// A one-dimensional array over `buffer`.
    pub fn vector<T: Element>(buffer: Buffer<T>) -> Array {
        let shape = Shape::vector(buffer.len());
        Array { data: T::wrap(buffer), shape }
    }

    /// `elements` viewed as `shape` (no copy); fails when the element count differs.
    pub fn with_shape<T: Element>(
        elements: impl Into<Buffer<T>>,
        shape: impl Into<Shape>,
    ) -> Result<Array, ShapeError> {
        Array::new(T::wrap(elements.into()), shape.into())
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements.
    pub fn data(&self) -> &ArrayData {
        &self.data
    }

    /// The elements, moved out.
    pub fn into_data(self) -> ArrayData {
        self.data
    }

    /// The elements as `T`, if that is the dtype.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::view(&self.data).map(Buffer::as_slice)
    }

    /// The shared buffer as `T`, if that is the dtype.
    pub fn buffer<T: Element>(&self) -> Option<&Buffer<T>> {
        T::view(&self.data)
    }

    /// The elements if this is a `u8` array.
    pub fn as_u8(&self) -> Option<&[u8]> {
        self.as_slice()
    }

    /// The elements if this is an `i32` array.
    pub fn as_i32(&self) -> Option<&[i32]> {
        self.as_slice()
    }

    /// The elements if this is a `u32` array.
    pub fn as_u32(&self) -> Option<&[u32]> {
        self.as_slice()
    }

    /// The elements if this is an `i64` array.
    pub fn as_i64(&self) -> Option<&[i64]> {
        self.as_slice()
    }

    /// The elements if this is an `f32` array.
    pub fn as_f32(&self) -> Option<&[f32]> {
        self.as_slice()
    }

    /// Rows `start..end` of the outermost dimension, sharing the elements; `None` when out of
    /// bounds or the array is a scalar.
    pub fn slice_outer(&self, start: usize, end: usize) -> Option<Array> {
        if self.shape.ndim() == 0 || start > end || end > self.shape.outer() {
            return None;
        }
        let inner = self.shape.inner();
        let data = self.data.slice(start * inner, end * inner)?;
        Some(Array { data, shape: self.shape.with_outer(end - start) })
    }

    /// The same elements viewed as `shape`; fails when the element count differs.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Array, ShapeError> {
        Array::new(self.data.clone(), shape.into())
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype(), self.shape)?;
        with_buffer!(&self.data, |b| write!(f, " {b:?}"))
    }
}

impl<T: Element> From<Vec<T>> for Array {
    fn from(elements: Vec<T>) -> Self {
        Array::from_vec(elements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_must_hold_the_elements() {
        assert!(Array::with_shape(vec![1u8; 12], [2, 2, 3]).is_ok());
        let e = Array::with_shape(vec![1u8; 12], [2, 2, 2]).unwrap_err();
        assert!(e.to_string().contains("needs 8 elements, the data has 12"), "{e}");
        assert!(Array::with_shape(vec![1u8; 1], Shape::new(&[])).is_ok(), "a scalar has one element");
        assert!(Array::with_shape(vec![0u8; 0], [usize::MAX, 2]).is_err(), "overflowing shapes are refused");
    }

    #[test]
    fn slice_outer_shares_and_keeps_inner_dims() {
        let a = Array::with_shape((0..24).collect::<Vec<i32>>(), [4, 3, 2]).unwrap();
        let s = a.slice_outer(1, 3).unwrap();
        assert_eq!(s.shape().dims(), &[2, 3, 2]);
        assert_eq!(s.as_i32().unwrap(), &(6..18).collect::<Vec<_>>()[..]);
        assert!(s.buffer::<i32>().unwrap().shares_memory_with(a.buffer::<i32>().unwrap()));
        assert!(a.slice_outer(3, 5).is_none());
        assert!(a.as_u32().is_none());
    }

    #[test]
    fn feed_le_matches_per_element_encoding() {
        let v: Vec<u32> = (0..3000).map(|i| i * 7919).collect();
        let mut got = Vec::new();
        ArrayData::U32(Buffer::new(v.clone())).feed_le(&mut |b| got.extend_from_slice(b));
        let want: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(got, want);
        let h = vec![bf16::from_f32(1.5), bf16::from_f32(-2.0)];
        let mut got = Vec::new();
        ArrayData::BF16(Buffer::new(h.clone())).feed_le(&mut |b| got.extend_from_slice(b));
        assert_eq!(got, h.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<_>>());
    }
}
