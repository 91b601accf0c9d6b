//! Splitting a document and packing its pieces copies no payload: a counting global allocator
//! measures every byte allocated while a document with ten 1 MB attachments is split into
//! eight pieces and packed into rows.
//!
//! Its own test binary, because the allocator counts for the whole process.

// A global allocator is an unsafe trait: this one only counts and defers to the system's.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use zephon_operator::*;
use zephon_pack::{Algorithm, Pack, PackOptions};
use zephon_testkit::Split;

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size.saturating_sub(layout.size()), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const T: usize = 1024;
const MB: usize = 1 << 20;

#[test]
fn splitting_and_packing_a_document_with_ten_1mb_attachments_copies_no_payload() {
    // 8 rows' worth of tokens, an image every 800 tokens.
    let n = 8 * T;
    let sample = SampleId::new(0, 0, 0);
    let mut doc = Record::new(Lineage::single(Fragment::span(sample, Span::prefix(n as u32))))
        .with(&"tokens".into(), Value::seq((0..n as u32).collect::<Vec<u32>>()));
    for k in 0..10u32 {
        let pixels = Array::with_shape(vec![k as u8; MB], [512, 512, 4]).unwrap();
        let span = Span::at(k * 800 + 5, 16).unwrap();
        doc.attach(Attachment::new(&"image".into(), k).placed(span, true).with(&"pixels".into(), Value::Array(pixels)));
    }
    let pack = Pack::new(PackOptions::new(Algorithm::Wrap, T)).unwrap();
    let mut acc = pack.accumulator(LaneContext { lane: Lane(0), seed: 0 }).unwrap();

    let before = ALLOCATED.load(Ordering::Relaxed);
    let mut pieces = Vec::new();
    Split { max: T }.apply(doc.clone(), &mut pieces).unwrap();
    let mut rows = Vec::new();
    for p in pieces.iter().cloned() {
        acc.push(p, &mut rows).unwrap();
    }
    acc.finish(&mut rows).unwrap();
    let allocated = ALLOCATED.load(Ordering::Relaxed) - before;

    assert_eq!(pieces.len(), 8, "eight pieces of T tokens");
    let images: usize = rows.iter().map(|r| r.attachments().len()).sum();
    assert_eq!(images, 10, "every attachment reaches a row once");
    // The rows' own arrays (input ids, labels, positions, segment ids, loss mask: 17 bytes per
    // token) are new; any copy of an attachment would add a whole megabyte.
    let rows_bytes = rows.len() * T * 17;
    println!(
        "allocated {allocated} bytes while splitting and packing (rows' arrays {rows_bytes}); attachments hold {} bytes",
        10 * MB
    );
    assert!(allocated < rows_bytes + 512 * 1024, "{allocated} bytes allocated: a payload was copied");
    // The rows still point at the document's pixel buffers.
    let original =
        doc.attachments()[3].get("pixels").and_then(Value::as_array).unwrap().buffer::<u8>().unwrap().clone();
    let packed = rows
        .iter()
        .flat_map(|r| r.attachments())
        .find(|a| a.item() == 3)
        .and_then(|a| a.get("pixels")?.as_array()?.buffer::<u8>().cloned())
        .unwrap();
    assert!(packed.shares_memory_with(&original));
}
