//! numpy arrays over the buffers the engine made, without a copy.
//!
//! A [`RustBuffer`] owns one column's elements and is the `.base` of the array over them. A
//! buffer that is its column's alone (the usual case: stacking rows makes new buffers) is lent
//! writeable, and the Rust side never touches its elements again until the array is gone; a
//! buffer still shared with other Rust values (a batch of one row keeps its row's buffer) is
//! lent read-only. `torch.from_numpy` and DLPack take either without a copy.

// Lending Rust buffers to numpy without a copy needs raw pointers: every unsafe block here
// says what makes it sound.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, PyArrayDyn};
use pyo3::prelude::*;
use zephon::operator::half::{bf16, f16};
use zephon::operator::{Array, ArrayData, DType};

/// A column's elements, owned by Rust, lent to a numpy array (its `.base`).
#[pyclass(frozen, module = "zephon_rs._native", name = "RustBuffer")]
pub struct RustBuffer {
    memory: Memory,
    dtype: DType,
    len: usize,
}

enum Memory {
    /// Still shared with other Rust values: lent read-only.
    Shared(ArrayData),
    /// This buffer's alone: lent writeable. After the array is made, Rust only drops it.
    Exclusive(UnsafeCell<Elements>),
}

// SAFETY: the elements behind `Exclusive` are reached from Rust exactly once, when the array
// over them is made (`base_ptr`, right after construction, before the object is shared); from
// then on only numpy reads and writes them, under the GIL's rules for ndarrays, until `Drop`.
// `Shared` holds immutable, reference-counted buffers, which are `Sync` themselves.
unsafe impl Sync for RustBuffer {}

macro_rules! elements {
    ($($variant:ident($t:ty)),* $(,)?) => {
        /// Owned elements, by dtype.
        enum Elements { $($variant(Vec<$t>)),* }

        impl Elements {
            /// The whole allocation of `data` when nothing else shares it.
            fn take(data: ArrayData) -> Result<Elements, ArrayData> {
                match data {
                    $(ArrayData::$variant(b) if b.is_exclusive() => Ok(Elements::$variant(b.into_vec())),)*
                    other => Err(other),
                }
            }

            fn as_mut_ptr(&mut self) -> *mut u8 {
                match self { $(Elements::$variant(v) => v.as_mut_ptr().cast(),)* }
            }
        }

        fn shared_ptr(data: &ArrayData) -> *const u8 {
            match data { $(ArrayData::$variant(b) => b.as_slice().as_ptr().cast(),)* }
        }
    };
}

elements!(U8(u8), I32(i32), U32(u32), I64(i64), F32(f32), F64(f64), BF16(bf16), F16(f16), U16(u16));

impl RustBuffer {
    /// Where the elements start, and whether numpy may write them.
    fn base_ptr(&self) -> (*const u8, bool) {
        match &self.memory {
            Memory::Shared(d) => (shared_ptr(d), false),
            // SAFETY: see the `Sync` impl: this is the one access from Rust.
            Memory::Exclusive(cell) => (unsafe { (*cell.get()).as_mut_ptr() }.cast_const(), true),
        }
    }
}

#[pymethods]
impl RustBuffer {
    /// The element type as zephon names it (`u32`, `bf16`, ...); `bf16` and `f16` reach numpy
    /// as `uint16` bit patterns.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// Number of elements.
    fn __len__(&self) -> usize {
        self.len
    }

    /// Whether arrays over this buffer may be written (it is shared with nothing else).
    #[getter]
    fn writeable(&self) -> bool {
        matches!(self.memory, Memory::Exclusive(_))
    }

    fn __repr__(&self) -> String {
        format!(
            "<zephon_rs RustBuffer {} × {}{}>",
            self.len,
            self.dtype.name(),
            if self.writeable() { "" } else { ", read-only" }
        )
    }

    fn __reduce__(&self) -> PyResult<Py<PyAny>> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a RustBuffer cannot be pickled; copy the array (numpy.array(a)) instead",
        ))
    }
}

/// A numpy array of `array`'s shape over its elements, whose base is a new [`RustBuffer`].
pub(crate) fn to_numpy<'py>(py: Python<'py>, array: Array) -> PyResult<Bound<'py, PyAny>> {
    let dims: Vec<usize> = array.shape().dims().to_vec();
    let dtype = array.dtype();
    let len = array.len();
    let memory = match Elements::take(array.into_data()) {
        Ok(e) => Memory::Exclusive(UnsafeCell::new(e)),
        Err(shared) => Memory::Shared(shared),
    };
    let owner = Bound::new(py, RustBuffer { memory, dtype, len })?;
    let (ptr, writeable) = owner.get().base_ptr();
    let arr = match dtype {
        DType::U8 => view::<u8>(&owner, &dims, ptr)?,
        DType::I32 => view::<i32>(&owner, &dims, ptr)?,
        DType::U32 => view::<u32>(&owner, &dims, ptr)?,
        DType::I64 => view::<i64>(&owner, &dims, ptr)?,
        DType::F32 => view::<f32>(&owner, &dims, ptr)?,
        DType::F64 => view::<f64>(&owner, &dims, ptr)?,
        // Same size and alignment: bf16 and f16 are transparent wrappers of u16.
        DType::U16 => view::<u16>(&owner, &dims, ptr)?,
        DType::BF16 | DType::F16 => view::<u16>(&owner, &dims, ptr)?,
    };
    if !writeable {
        set_read_only(&arr)?;
    }
    Ok(arr)
}

fn view<'py, T: Element>(
    owner: &Bound<'py, RustBuffer>,
    dims: &[usize],
    ptr: *const u8,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `ptr` starts `owner`'s elements, of type `T` (or of a transparent wrapper of
    // it), which hold exactly the product of `dims` elements in row-major order; `owner`
    // becomes the array's base and keeps them alive and in place for as long as it lives.
    let view = unsafe { ArrayViewD::from_shape_ptr(IxDyn(dims), ptr.cast::<T>()) };
    let arr: Bound<'py, PyArrayDyn<T>> = unsafe { PyArrayDyn::borrow_from_array(&view, owner.clone().into_any()) };
    Ok(arr.into_any())
}

fn set_read_only(arr: &Bound<'_, PyAny>) -> PyResult<()> {
    let kwargs = pyo3::types::PyDict::new(arr.py());
    kwargs.set_item("write", false)?;
    arr.call_method("setflags", (), Some(&kwargs))?;
    Ok(())
}

/// A numpy array of `values` (a new buffer of its own, lent writeable).
pub(crate) fn vec_to_numpy<'py>(py: Python<'py>, values: Vec<i64>, dims: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    let array = Array::with_shape(zephon::operator::Buffer::new(values), dims)
        .map_err(|e| crate::errors::Error::new_err(format!("internal error: {e}")))?;
    to_numpy(py, array)
}
