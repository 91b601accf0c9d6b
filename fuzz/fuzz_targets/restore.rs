//! A mutated checkpoint body (inflated: JSON, then the coded lineage), compressed and with
//! its checksum recomputed and the run's fingerprint put back, so that decoding and restore
//! themselves are fuzzed: an error or a running engine, never a
//! panic, a hang or an allocation the size of a claimed count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zephon_core::{Engine, Topology};
use zephon_testkit::opts;

fuzz_target!(|data: &[u8]| {
    let Some((json, lineage)) = zephon_fuzz::split_body(data) else { return };
    let Ok(mut body) = serde_json::from_slice::<serde_json::Value>(json) else { return };
    if let Some(obj) = body.as_object_mut() {
        // Keep the fingerprint valid so the restore goes past the identity check.
        obj.insert("fingerprint".into(), serde_json::to_value(zephon_fuzz::fingerprint()).unwrap_or_default());
    }
    let Ok(json) = serde_json::to_vec(&body) else { return };
    let mut raw = format!("{}\n", json.len()).into_bytes();
    raw.extend_from_slice(&json);
    raw.extend_from_slice(lineage);
    let Ok(dir) = tempfile::tempdir() else { return };
    if std::fs::write(dir.path().join("lanes-000000-000003.zck"), zephon_fuzz::file_bytes(&raw)).is_err() {
        return;
    }
    let Ok(t) = Topology::builder().lanes(zephon_fuzz::LANES).rows_per_step(zephon_fuzz::ROWS).build() else { return };
    if let Ok(mut e) = Engine::restore(zephon_fuzz::run_spec(), t, opts(1, 2, 1), dir.path()) {
        for _ in 0..2 {
            if !matches!(e.next_step(), Ok(Some(_))) {
                break;
            }
        }
    }
});
