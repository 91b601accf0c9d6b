//! A run never waits for ever. Lanes that race ahead pause with units they have not drained;
//! those count against the executor's window of work in flight, and could fill it: if the
//! window then held back the one lane the consumer waits for, every thread would sleep. The
//! window never holds that lane back.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use zephon_core::*;
use zephon_testkit::{ByteTokenize, Split, WrapPack, opts, spec};

/// Chunks of 4 documents, each chunk all long (2,000 bytes: 125 rows of 16) or all tiny
/// (4 bytes: a quarter of a row), so that at any time some lanes make rows far faster than
/// others.
fn uneven() -> Datasets {
    let texts: Vec<String> =
        (0..4096).map(|i| if (i / 4) % 3 == 0 { format!("{:<2000}", i) } else { format!("{:<4}", i % 1000) }).collect();
    Datasets::new(vec![Arc::new(MemoryDataset::from_texts("uneven", "text", vec![texts]))])
}

#[test]
fn lanes_far_apart_never_stall_the_run() {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let ops = Operators::new().then(ByteTokenize).then(Split { max: 16 }).then(WrapPack { len: 16 });
        let s = spec(uneven(), ops, 4, 1000, Tail::Drop);
        let mut steps = 0u64;
        for _ in 0..6 {
            let mut e =
                Engine::start(s.clone(), Topology::builder().lanes(8).rows_per_step(8).build().unwrap(), opts(2, 1, 2))
                    .unwrap();
            for _ in 0..1500 {
                e.next_step().unwrap().unwrap();
                steps += 1;
            }
        }
        let _ = done.send(steps);
    });
    // Not a speed bound: a stalled run never sends (the whole loop takes seconds).
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(steps) => assert_eq!(steps, 6 * 1500),
        Err(_) => panic!("the run stalled: no step for minutes while lanes were far apart"),
    }
}
