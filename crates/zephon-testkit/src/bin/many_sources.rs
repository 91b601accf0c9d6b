//! Writes the many-sources mixture of the tests (`zephon_testkit::many_sources`) and a spec
//! for it, for `benches/many_sources.sh`:
//!
//! `many-sources OUT COUNT LANES ROWS [CHUNK_TOKENS]` writes COUNT datasets under OUT and
//! `OUT/spec.toml` at LANES lanes and ROWS rows a step.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: many-sources OUT COUNT LANES ROWS [CHUNK_TOKENS]";
    let [out, count, lanes, rows, rest @ ..] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let number = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("{usage}: {s:?} is not a number");
            std::process::exit(2)
        })
    };
    let out = std::path::Path::new(out);
    let many = zephon_testkit::many_sources(out, number(count) as usize, 1);
    let mut spec = many.spec(number(lanes) as u32, number(rows) as u32);
    if let Some(t) = rest.first() {
        spec = spec.set("source", "chunk_tokens", number(t));
    }
    std::fs::write(out.join("spec.toml"), spec.text()).expect("the spec");
}
