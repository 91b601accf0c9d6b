//! Any text as a spec file: parsed and turned into a pipeline (which refuses missing files), an
//! error naming the problem or a pipeline, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(spec) = zephon::Spec::parse(text, "fuzz.toml", std::path::Path::new("/nonexistent")) {
        let _ = spec
            .pipeline()
            .map(|p| p.explain(&zephon::Topology::builder().lanes(1).rows_per_step(1).build().expect("valid")));
    }
});
