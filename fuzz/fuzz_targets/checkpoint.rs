//! Any bytes as a checkpoint file: an error or a summary, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = zephon_core::checkpoint::inspect(std::path::Path::new("fuzz.zck"), data);
});
