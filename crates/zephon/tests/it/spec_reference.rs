//! The spec reference page (`docs/guide/spec-reference.md`) lists exactly the keys `zephon::spec`
//! accepts: a key added to the spec without its row in the page, or a row for a key the spec
//! does not have, fails here.

use std::collections::BTreeSet;

use serde_reflection::{ContainerFormat, Format, Tracer, TracerConfig};

/// (table, key) pairs the spec's types accept: top-level keys (tables among them) under "",
/// a table's keys under its TOML name (`dataset` for `[[dataset]]`).
fn spec_keys() -> BTreeSet<(String, String)> {
    let mut tracer = Tracer::new(TracerConfig::default());
    // Every choice (a unit enum) is traced on its own, so that all its variants are known.
    macro_rules! choices {
        ($($t:ty),+) => {$(tracer.trace_simple_type::<$t>().expect("a choice traces");)+};
    }
    use zephon::spec::*;
    choices!(
        SourceOrder,
        TokenizeLongDocuments,
        PackAlgorithm,
        PackLongDocuments,
        PackEndOfData,
        ImagePreset,
        ImageFit,
        ImageFilter,
        ImageNormalize,
        ImageDtype,
        ImageLayout,
        JpegDecoder,
        ChatLossOn,
        ChatAssistantSpan,
        ChatLongConversations,
        EvictionSpec,
        zephon::Exhaustion,
        zephon::Balance,
        zephon::BadRecords,
        zephon::Tail
    );
    tracer.trace_simple_type::<zephon::Spec>().expect("the spec's types trace");
    let registry = tracer.registry().expect("every type of the spec is known");
    let fields = |name: &str| match registry.get(name) {
        Some(ContainerFormat::Struct(fields)) => fields.clone(),
        other => panic!("{name} is not a struct in the trace: {other:?}"),
    };
    // The table a field opens, if its value is a struct (directly, optional or a list).
    fn table(f: &Format) -> Option<&str> {
        match f {
            Format::TypeName(n) => Some(n),
            Format::Option(inner) | Format::Seq(inner) => table(inner),
            _ => None,
        }
    }
    let mut keys = BTreeSet::new();
    for top in fields("Spec") {
        // A table is a key of the top level too (the page lists `dataset`, `source`, ...).
        keys.insert((String::new(), top.name.clone()));
        if let Some(ty) = table(&top.value).filter(|n| matches!(registry.get(*n), Some(ContainerFormat::Struct(_)))) {
            for f in fields(ty) {
                // A nested table (`[schedule.ramp]`) is listed under its dotted name.
                if let Some(inner) =
                    table(&f.value).filter(|n| matches!(registry.get(*n), Some(ContainerFormat::Struct(_))))
                {
                    for g in fields(inner) {
                        assert!(
                            table(&g.value)
                                .is_none_or(|n| !matches!(registry.get(n), Some(ContainerFormat::Struct(_)))),
                            "[{}.{}] {} nests a third level: extend this test",
                            top.name,
                            f.name,
                            g.name
                        );
                        keys.insert((format!("{}.{}", top.name, f.name), g.name));
                    }
                }
                keys.insert((top.name.clone(), f.name));
            }
        }
    }
    keys
}

/// (table, key) pairs the page documents: `## Top level` or ``## `[table]` `` / ``## `[[table]]` ``
/// headings, then table rows whose first cell is a backticked key.
fn page_keys(page: &str) -> BTreeSet<(String, String)> {
    let mut keys = BTreeSet::new();
    let mut section: Option<String> = None;
    for line in page.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            let h = h.trim();
            section = if h.eq_ignore_ascii_case("top level") {
                Some(String::new())
            } else {
                h.strip_prefix('`')
                    .and_then(|s| s.strip_suffix('`'))
                    .map(|s| s.trim_start_matches('[').trim_end_matches(']').to_string())
            };
            continue;
        }
        let Some(s) = &section else { continue };
        let Some(rest) = line.strip_prefix("| `") else { continue };
        let Some((key, _)) = rest.split_once('`') else { continue };
        assert!(keys.insert((s.clone(), key.to_string())), "the page lists [{s}] {key} twice");
    }
    keys
}

#[test]
fn the_spec_reference_lists_every_key_of_the_spec_and_no_other() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guide/spec-reference.md");
    let page = std::fs::read_to_string(path).expect("docs/guide/spec-reference.md exists");
    let (spec, documented) = (spec_keys(), page_keys(&page));
    let show = |s: &BTreeSet<&(String, String)>| {
        s.iter()
            .map(|(t, k)| if t.is_empty() { k.clone() } else { format!("[{t}] {k}") })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let undocumented: BTreeSet<_> = spec.difference(&documented).collect();
    let unknown: BTreeSet<_> = documented.difference(&spec).collect();
    assert!(undocumented.is_empty(), "keys of zephon::spec missing from the spec reference: {}", show(&undocumented));
    assert!(unknown.is_empty(), "keys in the spec reference that zephon::spec does not accept: {}", show(&unknown));
    assert!(spec.len() > 40, "the trace found only {} keys", spec.len());
    // The names no registered section may take are exactly the spec's own top-level keys.
    let top: BTreeSet<&str> = spec.iter().filter(|(t, _)| t.is_empty()).map(|(_, k)| k.as_str()).collect();
    let reserved: BTreeSet<&str> = zephon::Sections::built_in_tables().iter().copied().collect();
    assert_eq!(top, reserved);
}

#[test]
fn the_page_parser_reads_headings_and_rows() {
    let page = "## Top level\n| key | type |\n|---|---|\n| `seed` | integer |\n\n## `[[dataset]]`\n| `name` | text |\n\
                ## `[run]`\n| `threads` | integer |\nprose with | `not a row` after a pipe\n";
    let keys = page_keys(page);
    let want: BTreeSet<(String, String)> = [("", "seed"), ("dataset", "name"), ("run", "threads")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(keys, want);
}
