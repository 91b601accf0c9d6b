//! Tensors hold exactly the batch's values: every dtype, dense and ragged, text and bytes,
//! target dtypes, and buffers handed over without a copy.

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use zephon_candle::{CuSeqlens, Error, Sink, Tensors};
use zephon_core::*;
use zephon_operator::half::{bf16, f16};
use zephon_operator::*;

fn rec(n: u64) -> Record {
    Record::new(Lineage::single(Fragment::range(SampleId::new(0, 0, n), 0, 1).unwrap()))
}

fn f(name: &str) -> Field {
    Field::new(name)
}

/// Rows `r` of a `[2, 3]` array of `T` per dtype, made from `x(r, i)`.
fn all_dtypes_row(r: u64) -> Record {
    let v = |i: usize| (r as i64) * 10 + i as i64 - 3;
    let arr = |a: Array| Value::Array(a.reshape([2, 3]).unwrap());
    rec(r)
        .with(&f("u8"), arr(Array::from_vec((0..6).map(|i| v(i) as u8).collect::<Vec<_>>())))
        .with(&f("i32"), arr(Array::from_vec((0..6).map(|i| v(i) as i32 * -1000).collect::<Vec<_>>())))
        .with(&f("u32"), arr(Array::from_vec((0..6).map(|i| (v(i) as u32).wrapping_mul(70_000)).collect::<Vec<_>>())))
        .with(&f("i64"), arr(Array::from_vec((0..6).map(|i| v(i) << 40).collect::<Vec<_>>())))
        .with(&f("f32"), arr(Array::from_vec((0..6).map(|i| v(i) as f32 * 0.37).collect::<Vec<_>>())))
        .with(&f("f64"), arr(Array::from_vec((0..6).map(|i| v(i) as f64 * 1e-9).collect::<Vec<_>>())))
        .with(&f("bf16"), arr(Array::from_vec((0..6).map(|i| bf16::from_f32(v(i) as f32 * 0.25)).collect::<Vec<_>>())))
        .with(&f("f16"), arr(Array::from_vec((0..6).map(|i| f16::from_f32(v(i) as f32 * 0.125)).collect::<Vec<_>>())))
        .with(&f("u16"), arr(Array::from_vec((0..6).map(|i| (v(i) as u16).wrapping_mul(9_000)).collect::<Vec<_>>())))
        .with(&f("int"), Value::Int(r as i64 - 1))
        .with(&f("float"), Value::Float(r as f64 * 0.5))
}

fn flat<T: candle_core::WithDType>(t: &Tensor) -> Vec<T> {
    t.flatten_all().unwrap().to_vec1::<T>().unwrap()
}

fn column<'a>(b: &'a Batch, name: &str) -> &'a Array {
    b.column(name).unwrap().dense().unwrap()
}

#[test]
fn every_dtype_dense_keeps_values_shape_and_dtype() {
    let rows: Vec<Record> = (0..3).map(all_dtypes_row).collect();
    let batch = Batch::from_rows(&rows).unwrap();
    let t = Sink::raw(Device::Cpu).convert(batch.clone()).unwrap();
    assert_eq!(t.rows(), 3);
    assert_eq!(
        t.names().collect::<Vec<_>>(),
        ["u8", "i32", "u32", "i64", "f32", "f64", "bf16", "f16", "u16", "int", "float"]
    );
    for name in ["u8", "i32", "u32", "i64", "f32", "f64", "bf16", "f16", "u16"] {
        assert_eq!(t.require(name).unwrap().dims(), &[3, 2, 3], "{name}");
    }
    assert_eq!(flat::<u8>(t.require("u8").unwrap()), column(&batch, "u8").as_u8().unwrap());
    assert_eq!(flat::<i32>(t.require("i32").unwrap()), column(&batch, "i32").as_i32().unwrap());
    assert_eq!(flat::<u32>(t.require("u32").unwrap()), column(&batch, "u32").as_u32().unwrap());
    assert_eq!(flat::<i64>(t.require("i64").unwrap()), column(&batch, "i64").as_i64().unwrap());
    assert_eq!(flat::<f32>(t.require("f32").unwrap()), column(&batch, "f32").as_f32().unwrap());
    assert_eq!(flat::<f64>(t.require("f64").unwrap()), column(&batch, "f64").as_slice::<f64>().unwrap());
    assert_eq!(flat::<bf16>(t.require("bf16").unwrap()), column(&batch, "bf16").as_slice::<bf16>().unwrap());
    assert_eq!(flat::<f16>(t.require("f16").unwrap()), column(&batch, "f16").as_slice::<f16>().unwrap());
    // candle has no u16: the values arrive as u32.
    let u16s: Vec<u32> = column(&batch, "u16").as_slice::<u16>().unwrap().iter().map(|&x| u32::from(x)).collect();
    assert_eq!(flat::<u32>(t.require("u16").unwrap()), u16s);
    assert_eq!(flat::<i64>(t.require("int").unwrap()), [-1, 0, 1]);
    assert_eq!(flat::<f64>(t.require("float").unwrap()), [0.0, 0.5, 1.0]);
    for (name, tensor) in t.iter() {
        let want = zephon_candle::candle_dtype(column(&batch, name).dtype());
        assert_eq!(tensor.dtype(), want, "{name}");
    }
}

#[test]
fn target_dtypes_convert_values() {
    let rows: Vec<Record> = (0..3).map(all_dtypes_row).collect();
    let batch = Batch::from_rows(&rows).unwrap();
    let t = Sink::raw(Device::Cpu)
        .dtype("i32", DType::I64)
        .dtype("u8", DType::F32)
        .dtype("bf16", DType::F32)
        .floats(DType::BF16)
        .convert(batch.clone())
        .unwrap();
    let i32s: Vec<i64> = column(&batch, "i32").as_i32().unwrap().iter().map(|&x| x as i64).collect();
    assert_eq!(flat::<i64>(t.require("i32").unwrap()), i32s);
    let u8s: Vec<f32> = column(&batch, "u8").as_u8().unwrap().iter().map(|&x| x as f32).collect();
    assert_eq!(flat::<f32>(t.require("u8").unwrap()), u8s);
    // Named beats `floats`; other floats narrow to bf16, rounding as half does.
    let b: Vec<f32> = column(&batch, "bf16").as_slice::<bf16>().unwrap().iter().map(|x| x.to_f32()).collect();
    assert_eq!(flat::<f32>(t.require("bf16").unwrap()), b);
    let f32s: Vec<bf16> = column(&batch, "f32").as_f32().unwrap().iter().map(|&x| bf16::from_f32(x)).collect();
    assert_eq!(flat::<bf16>(t.require("f32").unwrap()), f32s);
    let f16s: Vec<bf16> =
        column(&batch, "f16").as_slice::<f16>().unwrap().iter().map(|x| bf16::from_f32(x.to_f32())).collect();
    assert_eq!(flat::<bf16>(t.require("f16").unwrap()), f16s);
    assert_eq!(t.require("float").unwrap().dtype(), DType::BF16);
    assert_eq!(t.require("i64").unwrap().dtype(), DType::I64, "integers ignore `floats`");
    let t = Sink::raw(Device::Cpu).floats(DType::F16).convert(batch.clone()).unwrap();
    let f32s: Vec<f16> = column(&batch, "f32").as_f32().unwrap().iter().map(|&x| f16::from_f32(x)).collect();
    assert_eq!(flat::<f16>(t.require("f32").unwrap()), f32s);
}

fn cpu_ptr(t: &Tensor) -> usize {
    let (s, _) = t.storage_and_layout();
    match &*s {
        Storage::Cpu(CpuStorage::U32(v)) => v.as_ptr() as usize,
        Storage::Cpu(CpuStorage::F32(v)) => v.as_ptr() as usize,
        other => panic!("unexpected storage {:?}", other.dtype()),
    }
}

#[test]
fn exclusive_buffers_move_shared_ones_are_copied_once() {
    let rows: Vec<Record> =
        (0..4u32).map(|r| rec(r as u64).with(&f("ids"), Value::seq((0..1000).map(|i| i * r).collect()))).collect();
    let batch = Batch::from_rows(&rows).unwrap();
    let ptr = batch.column("ids").unwrap().as_u32().unwrap().as_ptr() as usize;
    let t = Sink::cpu().convert(batch).unwrap();
    assert_eq!(cpu_ptr(t.require("ids").unwrap()), ptr, "a batch's own buffer becomes the tensor's storage");

    let batch = Batch::from_rows(&rows).unwrap();
    let kept = batch.clone();
    let t = Sink::cpu().convert(batch).unwrap();
    let ids = t.require("ids").unwrap();
    assert_ne!(cpu_ptr(ids), kept.column("ids").unwrap().as_u32().unwrap().as_ptr() as usize);
    assert_eq!(flat::<u32>(ids), kept.column("ids").unwrap().as_u32().unwrap(), "a shared buffer is copied");

    // A batch of one row shares the row's buffer: once the row is gone it moves too.
    let row = rec(9).with(&f("px"), Value::Array(Array::from_vec(vec![0.5f32; 4096])));
    let ptr = row.get("px").unwrap().as_array().unwrap().as_f32().unwrap().as_ptr() as usize;
    let batch = Batch::from_rows([&row]).unwrap();
    drop(row);
    let t = Sink::cpu().convert(batch).unwrap();
    assert_eq!(cpu_ptr(t.require("px").unwrap()), ptr);
}

fn image(item: u32, at: u32, patches: usize, grid: [i64; 3]) -> Attachment {
    let px: Vec<f32> = (0..patches * 6).map(|i| item as f32 * 100.0 + i as f32).collect();
    Attachment::new(&f("image"), item)
        .placed(Span::at(at, 2).unwrap(), true)
        .with(&f("pixel_values"), Value::Array(Array::with_shape(px, [patches, 6]).unwrap()))
        .with(&f("image_grid_thw"), Value::array(grid.to_vec()))
        .with(&f("segment"), Value::Int(1))
}

#[test]
fn ragged_columns_become_values_and_offsets() {
    let mut r0 = rec(0).with(&f("ids"), Value::seq(vec![1u32, 2, 3]));
    r0.attach(image(0, 0, 2, [1, 1, 2]));
    r0.attach(image(1, 4, 3, [1, 3, 1]));
    let r1 = rec(1).with(&f("ids"), Value::seq(vec![4u32]));
    let mut r2 = rec(2).with(&f("ids"), Value::seq(vec![5u32, 6]));
    r2.attach(image(2, 1, 1, [1, 1, 1]));
    let batch = Batch::from_rows([&r0, &r1, &r2]).unwrap();
    let t = Sink::cpu().floats(DType::BF16).convert(batch.clone()).unwrap();

    let px = t.require("image.pixel_values").unwrap();
    assert_eq!(px.dims(), &[6, 6], "patches of all images stacked");
    assert_eq!(px.dtype(), DType::BF16);
    let want: Vec<bf16> = batch
        .column("image.pixel_values")
        .unwrap()
        .ragged()
        .unwrap()
        .values()
        .as_f32()
        .unwrap()
        .iter()
        .map(|&x| bf16::from_f32(x))
        .collect();
    assert_eq!(flat::<bf16>(px), want);
    assert_eq!(flat::<u32>(t.require("image.pixel_values.offsets").unwrap()), [0, 2, 5, 6]);
    assert_eq!(flat::<u32>(t.require("image.pixel_values.row_offsets").unwrap()), [0, 2, 2, 3]);
    assert!(t.get("image.pixel_values.shapes").is_none(), "stacked items need no shape table");

    let grid = t.require("image.image_grid_thw").unwrap();
    assert_eq!(grid.dims(), &[3, 3]);
    assert_eq!(grid.to_vec2::<i64>().unwrap(), [[1, 1, 2], [1, 3, 1], [1, 1, 1]]);
    assert_eq!(flat::<u32>(t.require("image.image_grid_thw.offsets").unwrap()), [0, 1, 2, 3]);
    assert_eq!(t.require("image.segment").unwrap().to_vec1::<i64>().unwrap(), [1, 1, 1]);
    assert_eq!(t.require("image.span").unwrap().to_vec2::<i32>().unwrap(), [[0, 2], [4, 2], [1, 2]]);

    // Token rows of different lengths: flat values, element offsets.
    let ids = t.require("ids").unwrap();
    assert_eq!(ids.to_vec1::<u32>().unwrap(), [1, 2, 3, 4, 5, 6]);
    assert_eq!(flat::<u32>(t.require("ids.offsets").unwrap()), [0, 3, 4, 6]);
    assert_eq!(flat::<u32>(t.require("ids.row_offsets").unwrap()), [0, 1, 2, 3]);
}

#[test]
fn items_of_different_shapes_are_flat_with_a_shape_table() {
    // A native f16 value per image, of a different length each: flat, with shapes.
    let weights = |item: u32| (0..=item).map(|i| f16::from_f32(i as f32 * 0.5 - item as f32)).collect::<Vec<_>>();
    let img = |item: u32, h: usize, w: usize| {
        let px: Vec<u8> = (0..h * w * 3).map(|i| (i + item as usize) as u8).collect();
        Attachment::new(&f("image"), item)
            .placed(Span::at(item, 1).unwrap(), true)
            .with(&f("pixels"), Value::Array(Array::with_shape(px, [h, w, 3]).unwrap()))
            .with(&f("weights"), Value::array(weights(item)))
    };
    let mut r = rec(0).with(&f("ids"), Value::seq(vec![7u32, 7, 7]));
    r.attach(img(0, 2, 3));
    r.attach(img(1, 1, 1));
    r.attach(img(2, 4, 2));
    let batch = Batch::from_rows([&r]).unwrap();
    let want = batch.column("image.pixels").unwrap().ragged().unwrap().values().as_u8().unwrap().to_vec();
    let t = Sink::cpu().offsets(DType::I64).convert(batch).unwrap();
    assert_eq!(t.require("image.pixels").unwrap().to_vec1::<u8>().unwrap(), want);
    assert_eq!(
        t.require("image.weights").unwrap().to_vec1::<f16>().unwrap(),
        weights(0).into_iter().chain(weights(1)).chain(weights(2)).collect::<Vec<_>>()
    );
    assert_eq!(t.require("image.weights.offsets").unwrap().to_vec1::<i64>().unwrap(), [0, 1, 3, 6]);
    assert_eq!(t.require("image.weights.shapes").unwrap().to_vec2::<i64>().unwrap(), [[1], [2], [3]]);
    assert_eq!(t.require("image.pixels.row_offsets").unwrap().to_vec1::<i64>().unwrap(), [0, 3]);
    assert_eq!(t.require("image.pixels.offsets").unwrap().to_vec1::<i64>().unwrap(), [0, 18, 21, 45]);
    assert_eq!(t.require("image.pixels.shapes").unwrap().to_vec2::<i64>().unwrap(), [[2, 3, 3], [1, 1, 3], [4, 2, 3]]);
}

#[test]
fn text_and_bytes_become_u8_with_offsets() {
    let rows = [
        rec(0).with(&f("t"), Value::text("héllo")).with(&f("b"), Value::Bytes(Buffer::new(vec![0, 255]))),
        rec(1).with(&f("t"), Value::text("")).with(&f("b"), Value::Bytes(Buffer::new(vec![9]))),
    ];
    let t = Sink::cpu().convert(Batch::from_rows(&rows).unwrap()).unwrap();
    assert_eq!(t.require("t").unwrap().to_vec1::<u8>().unwrap(), "héllo".as_bytes());
    assert_eq!(t.require("t.offsets").unwrap().to_vec1::<u32>().unwrap(), [0, 6, 6]);
    assert_eq!(t.require("b").unwrap().to_vec1::<u8>().unwrap(), [0, 255, 9]);
    assert_eq!(t.require("b.offsets").unwrap().to_vec1::<u32>().unwrap(), [0, 2, 3]);
}

fn varlen_row(n: u64, cu: Vec<i32>, max: i64) -> Record {
    rec(n).with(&f("cu_seqlens"), Value::array(cu)).with(&f("max_seqlen"), Value::Int(max))
}

#[test]
fn cu_seqlens_flatten_over_the_batch() {
    let rows = [varlen_row(0, vec![0, 5, 8, 8, 8], 5), varlen_row(1, vec![0, 3, 6, 8, 8], 3)];
    let t = Sink::cpu().convert(Batch::from_rows(&rows).unwrap()).unwrap();
    let cu = t.require("cu_seqlens").unwrap();
    assert_eq!(cu.dtype(), DType::U32);
    assert_eq!(cu.to_vec1::<u32>().unwrap(), [0, 5, 8, 11, 14, 16]);
    assert_eq!(t.max_seqlen(), Some(5));
    assert_eq!(t.require("max_seqlen").unwrap().to_vec1::<u32>().unwrap(), [5, 3]);

    let t = Sink::cpu().cu_seqlens(CuSeqlens::PerRow).convert(Batch::from_rows(&rows).unwrap()).unwrap();
    assert_eq!(t.require("cu_seqlens").unwrap().to_vec2::<u32>().unwrap(), [[0, 5, 8, 8, 8], [0, 3, 6, 8, 8]]);

    let bad = [varlen_row(0, vec![0, 5, 3, 8, 8], 5)];
    let e = Sink::cpu().convert(Batch::from_rows(&bad).unwrap()).unwrap_err();
    assert!(matches!(e, Error::Column { .. }) && e.to_string().contains("row 0"), "{e}");
}

#[test]
fn offsets_that_do_not_fit_are_errors() {
    let rows = [rec(0).with(&f("t"), Value::text("x".repeat(300)))];
    let e = Sink::cpu().offsets(DType::U8).convert(Batch::from_rows(&rows).unwrap()).unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
}

#[test]
fn require_names_what_there_is() {
    let t = Tensors::default();
    assert!(t.require("x").unwrap_err().to_string().contains("no tensor x"));
}
