//! Real packed rows (zephon-pack, best-fit with padding) through the default sink: every
//! text column with the dtype models want, values unchanged.

use candle_core::{DType, Tensor};
use zephon_candle::Sink;
use zephon_core::*;
use zephon_operator::*;
use zephon_pack::{Algorithm, Pack, PackOptions};

fn flat<T: candle_core::WithDType>(t: &Tensor) -> Vec<T> {
    t.flatten_all().unwrap().to_vec1::<T>().unwrap()
}

fn doc(row: u64, n: u32) -> Record {
    let ids: Vec<u32> = (0..n).map(|i| 1000 + row as u32 * 10 + i).collect();
    Record::new(Lineage::single(Fragment::span(SampleId::new(0, 0, row), Span::prefix(n))))
        .with(&"tokens".into(), Value::seq(ids))
}

fn packed_rows() -> Vec<Record> {
    let pack =
        Pack::new(PackOptions { max_segments: 4, ..PackOptions::new(Algorithm::BestFit { bins: 2 }, 16) }).unwrap();
    let mut acc = pack.accumulator(LaneContext { lane: Lane(0), seed: 3 }).unwrap();
    let mut rows = Vec::new();
    for (i, n) in [5, 9, 3, 12, 2, 7, 4].into_iter().enumerate() {
        acc.push(doc(i as u64, n), &mut rows).unwrap();
    }
    acc.finish(&mut rows).unwrap();
    rows
}

#[test]
fn packed_text_columns_get_model_dtypes_and_keep_values() {
    let rows = packed_rows();
    assert!(rows.len() >= 3);
    let batch = Batch::from_rows(&rows).unwrap();
    let t = Sink::cpu().convert(batch.clone()).unwrap();
    let (r, tt) = (rows.len(), 16);
    let col = |n: &str| batch.column(n).unwrap();

    let ids = t.require("input_ids").unwrap();
    assert_eq!((ids.dtype(), ids.dims()), (DType::U32, &[r, tt][..]));
    assert_eq!(flat::<u32>(ids), col("input_ids").as_u32().unwrap());

    let labels = t.require("labels").unwrap();
    assert_eq!((labels.dtype(), labels.dims()), (DType::I64, &[r, tt][..]));
    let want: Vec<i64> = col("labels").as_i32().unwrap().iter().map(|&x| x as i64).collect();
    assert!(want.contains(&-100), "the ignore index survives the widening");
    assert_eq!(flat::<i64>(labels), want);

    for name in ["positions", "segment_ids"] {
        let x = t.require(name).unwrap();
        assert_eq!((x.dtype(), x.dims()), (DType::U32, &[r, tt][..]), "{name}");
        let want: Vec<u32> = col(name).as_i32().unwrap().iter().map(|&x| x as u32).collect();
        assert_eq!(flat::<u32>(x), want, "{name}");
    }
    let mask = t.require("loss_mask").unwrap();
    assert_eq!((mask.dtype(), flat::<u8>(mask)), (DType::U8, col("loss_mask").as_u8().unwrap().to_vec()));

    // cu_seqlens: the rows' vectors, shifted and joined, matching the segment ids.
    let cu = t.require("cu_seqlens").unwrap().to_vec1::<u32>().unwrap();
    let seg = col("segment_ids").as_i32().unwrap();
    let mut want = vec![0u32];
    for i in 1..=seg.len() {
        if i == seg.len() || i % tt == 0 || seg[i] != seg[i - 1] {
            want.push(i as u32);
        }
    }
    assert_eq!(cu, want);
    let per_row_max = col("max_seqlen").as_i64().unwrap();
    assert_eq!(t.max_seqlen(), per_row_max.iter().max().map(|&m| m as usize));
    let lens: Vec<u32> = cu.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(lens.iter().max().map(|&m| m as usize), t.max_seqlen());
    assert_eq!(flat::<i64>(t.require("num_tokens").unwrap()), col("num_tokens").as_i64().unwrap());
}
