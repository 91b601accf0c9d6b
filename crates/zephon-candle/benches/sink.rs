//! Sink conversion speed against a plain memcpy of the same bytes.
//!
//! `cargo bench -p zephon-candle --bench sink`
//!
//! - `text`: a local step of 64 packed rows of 2048 tokens (input_ids, labels, positions,
//!   segment_ids, loss_mask, cu_seqlens, max_seqlen, num_tokens: 2.1 MiB);
//! - `pixels`: 32 images of 256 patches × 1176 f32 as a ragged column (36.8 MiB).
//!
//! Each is converted four ways: `raw` (own dtypes, the batch owns its buffers: they move),
//! `raw-shared` (a clone of the batch is alive: one copy), `defaults` (labels to i64, positions
//! and segment ids to u32 ...; pixels to bf16), and `memcpy` (`to_vec` of the same bytes).
//! Throughput is in bytes of the batch's values.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use zephon_candle::Sink;
use zephon_candle::candle_core::{DType, Device};
use zephon_core::*;
use zephon_operator::*;

fn text_rows(rows: usize, t: usize) -> Vec<Record> {
    (0..rows)
        .map(|r| {
            let seg: Vec<i32> = (0..t).map(|i| 1 + (i / 300) as i32).collect();
            let mut cu: Vec<i32> = (0..=t / 300).map(|k| (k * 300) as i32).collect();
            cu.push(t as i32);
            cu.resize(66, t as i32);
            Record::new(Lineage::single(Fragment::range(SampleId::new(0, 0, r as u64), 0, 1).unwrap()))
                .with(&"input_ids".into(), Value::array((0..t as u32).map(|i| i * 7 % 50257).collect::<Vec<_>>()))
                .with(&"labels".into(), Value::array((0..t as i32).map(|i| i * 7 % 50257).collect::<Vec<_>>()))
                .with(&"positions".into(), Value::array((0..t as i32).map(|i| i % 300).collect::<Vec<_>>()))
                .with(&"segment_ids".into(), Value::array(seg))
                .with(&"cu_seqlens".into(), Value::array(cu))
                .with(&"max_seqlen".into(), Value::Int(300))
                .with(&"loss_mask".into(), Value::array(vec![1u8; t]))
                .with(&"num_tokens".into(), Value::Int(t as i64))
        })
        .collect()
}

fn pixel_rows(images: usize) -> Vec<Record> {
    (0..images)
        .map(|r| {
            let px: Vec<f32> = (0..256 * 1176).map(|i| (i % 255) as f32 / 255.0).collect();
            let mut rec = Record::new(Lineage::single(Fragment::range(SampleId::new(0, 0, r as u64), 0, 1).unwrap()))
                .with(&"n".into(), Value::Int(r as i64));
            rec.attach(
                Attachment::new(&"image".into(), 0)
                    .placed(Span::at(0, 256).unwrap(), true)
                    .with(&"pixel_values".into(), Value::Array(Array::with_shape(px, [256, 1176]).unwrap())),
            );
            rec
        })
        .collect()
}

fn value_bytes(b: &Batch) -> usize {
    b.columns()
        .iter()
        .map(|c| match &c.data {
            ColumnData::Dense(a) => a.len() * a.dtype().size(),
            ColumnData::Ragged(r) => r.values().len() * r.dtype().size(),
            _ => 0,
        })
        .sum()
}

fn bench_case(c: &mut Criterion, name: &str, rows: &[Record], defaults: &Sink) {
    let batch = Batch::from_rows(rows).unwrap();
    let bytes = value_bytes(&batch);
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(20);
    let raw = Sink::raw(Device::Cpu);
    g.bench_function("raw", |b| {
        b.iter_batched(|| Batch::from_rows(rows).unwrap(), |batch| raw.convert(batch).unwrap(), BatchSize::LargeInput)
    });
    g.bench_function("raw-shared", |b| {
        b.iter_batched(|| batch.clone(), |copy| raw.convert(copy).unwrap(), BatchSize::LargeInput)
    });
    g.bench_function("defaults", |b| {
        b.iter_batched(
            || Batch::from_rows(rows).unwrap(),
            |batch| defaults.convert(batch).unwrap(),
            BatchSize::LargeInput,
        )
    });
    let src = vec![7u8; bytes];
    g.bench_function("memcpy", |b| b.iter_batched(|| (), |()| src.to_vec(), BatchSize::LargeInput));
    g.finish();
}

fn sink(c: &mut Criterion) {
    bench_case(c, "text", &text_rows(64, 2048), &Sink::cpu());
    bench_case(c, "pixels", &pixel_rows(32), &Sink::cpu().floats(DType::BF16));
}

criterion_group!(benches, sink);
criterion_main!(benches);
