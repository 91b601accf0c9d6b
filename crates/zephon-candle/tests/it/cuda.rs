//! On a GPU (feature `cuda`): the same values on the device, through every conversion path
//! (uploads of owned and shared buffers, narrowing on the host, widening on the device), and
//! the prefetcher uploading ahead. `scripts/cuda-tests.sh` runs these.

use candle_core::{DType, Device, Tensor};
use zephon_candle::{EngineSource, PrefetchOptions, Prefetcher, Sink};
use zephon_core::*;
use zephon_operator::half::bf16;
use zephon_operator::*;
use zephon_testkit as kit;

fn gpu() -> Device {
    Device::new_cuda(0).expect("a CUDA device (these tests run only with the cuda feature)")
}

fn flat<T: candle_core::WithDType>(t: &Tensor) -> Vec<T> {
    t.flatten_all().unwrap().to_vec1::<T>().unwrap()
}

fn row(n: u64) -> Record {
    Record::new(Lineage::single(Fragment::range(SampleId::new(0, 0, n), 0, 1).unwrap()))
        .with(&"ids".into(), Value::seq((0..512u32).map(|i| i * 7 + n as u32).collect()))
        .with(&"labels".into(), Value::seq((0..512i32).map(|i| if i % 9 == 0 { -100 } else { i }).collect()))
        .with(&"px".into(), Value::Array(Array::from_vec((0..300).map(|i| i as f32 / 7.0).collect::<Vec<_>>())))
}

#[test]
fn values_survive_the_upload_on_every_path() {
    let rows: Vec<Record> = (0..4).map(row).collect();
    let batch = Batch::from_rows(&rows).unwrap();
    let kept = batch.clone(); // shared buffers: uploaded from the borrowed slice
    let sink = Sink::new(gpu()).dtype("ids", DType::U32).dtype("labels", DType::I64).floats(DType::BF16);
    for t in [sink.convert(batch).unwrap(), sink.convert(Batch::from_rows(&rows).unwrap()).unwrap()] {
        for (name, tensor) in t.iter() {
            assert!(tensor.device().is_cuda(), "{name}");
        }
        let col = |n: &str| kept.column(n).unwrap();
        assert_eq!(flat::<u32>(t.require("ids").unwrap()), col("ids").as_u32().unwrap());
        let labels: Vec<i64> = col("labels").as_i32().unwrap().iter().map(|&x| x as i64).collect();
        assert_eq!(flat::<i64>(t.require("labels").unwrap()), labels, "widened on the device");
        let px: Vec<bf16> = col("px").as_f32().unwrap().iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(flat::<bf16>(t.require("px").unwrap()), px, "narrowed on the host");
    }
}

#[test]
fn the_prefetcher_uploads_ahead_and_keeps_the_data() {
    let spec = || kit::spec(kit::corpus(200, 30, 4), kit::operators(32, 3), 5, 1, Tail::Drop);
    let topology = Topology::builder().lanes(4).rows_per_step(8).build().unwrap();
    let mut engine = Engine::start(spec(), topology, kit::opts(2, 4, 2)).unwrap();
    let source = EngineSource::start(spec(), topology, kit::opts(2, 4, 2)).unwrap();
    let mut pre = Prefetcher::start(source, Sink::new(gpu()), PrefetchOptions { depth: 3, microbatch: None }).unwrap();
    while let Some(direct) = engine.next_step().unwrap() {
        let ahead = pre.next_step().unwrap().unwrap();
        assert_eq!(ahead.local_fingerprint(), direct.local_fingerprint());
        let ids = ahead.tensors().unwrap().require("input_ids").unwrap();
        assert!(ids.device().is_cuda());
        let want: Vec<u32> = direct
            .rows()
            .flat_map(|r| r.get("input_ids").unwrap().as_array().unwrap().as_u32().unwrap().to_vec())
            .collect();
        assert_eq!(flat::<u32>(ids), want);
    }
}
