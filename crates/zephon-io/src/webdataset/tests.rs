//! The header scan against an independent writer (the `tar` crate), and damaged input: every
//! truncation and every flipped header byte ends in an error or a result, never a panic.

use std::fs;
use std::io::Write;
use std::path::Path;

use super::header::{Member, scan};
use super::*;

fn header(kind: ::tar::EntryType, size: usize, gnu: bool) -> ::tar::Header {
    let mut h = if gnu { ::tar::Header::new_gnu() } else { ::tar::Header::new_ustar() };
    h.set_entry_type(kind);
    h.set_size(size as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    h
}

/// A tar of `(name, data)` members, every naming scheme a writer uses for long names.
fn build(members: &[(&str, &[u8])], gnu: bool) -> Vec<u8> {
    let mut b = ::tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = header(::tar::EntryType::Regular, data.len(), gnu);
        // `append_data` writes a GNU long-name member for GNU headers, and a ustar prefix
        // (or an error) for ustar headers.
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

/// Scans `bytes` as an object in memory.
fn scan_bytes(bytes: &[u8]) -> std::result::Result<Vec<Member>, String> {
    use crate::storage::{MemoryStore, Store};
    let store = MemoryStore::new("scratch");
    store.put("x.tar", bytes.to_vec());
    let object = store.open("x.tar").unwrap();
    scan(object.as_ref(), bytes.len() as u64)
}

fn data_of(bytes: &[u8], m: &Member) -> Vec<u8> {
    bytes[m.offset as usize..(m.offset + m.size) as usize].to_vec()
}

#[test]
fn gnu_long_names_ustar_prefixes_and_pax_paths_are_read() {
    let long_key = format!("shard/{}", "k".repeat(180));
    let long_gnu = format!("{long_key}.jpg");
    let prefixed = format!("{}/{}.txt", "p".repeat(120), "s".repeat(40));
    let gnu = build(&[(&long_gnu, b"jpeg bytes"), ("a.txt", b"")], true);
    let members = scan_bytes(&gnu).unwrap();
    assert_eq!(members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), vec![long_gnu.as_str(), "a.txt"]);
    assert_eq!(data_of(&gnu, &members[0]), b"jpeg bytes");
    assert_eq!(members[0].header, 0, "a long name's member starts at its long-name header");
    assert_eq!(members[1].size, 0);

    let ustar = build(&[(&prefixed, b"caption")], false);
    let members = scan_bytes(&ustar).unwrap();
    assert_eq!(members[0].name, prefixed);
    assert_eq!(data_of(&ustar, &members[0]), b"caption");

    // pax: a `path` record overrides the header's name; directories and symlinks are skipped.
    let mut b = ::tar::Builder::new(Vec::new());
    b.append_data(&mut header(::tar::EntryType::Directory, 0, false), "dir/", &[][..]).unwrap();
    let mut link = header(::tar::EntryType::Symlink, 0, false);
    link.set_link_name("a.jpg").unwrap();
    b.append_data(&mut link, "dir/b.jpg", &[][..]).unwrap();
    let pax_name = format!("dir/{}.json", "é".repeat(90));
    b.append_pax_extensions([("path", pax_name.as_bytes()), ("mtime", &b"1.5"[..])]).unwrap();
    b.append_data(&mut header(::tar::EntryType::Regular, 2, false), "short.json", &b"{}"[..]).unwrap();
    let mut old = ::tar::Header::new_old();
    old.set_size(3);
    old.set_mode(0o644);
    old.set_path("old/v7.txt").unwrap();
    old.set_cksum();
    b.append(&old, &b"old"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let members = scan_bytes(&bytes).unwrap();
    let names: Vec<_> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec![pax_name.as_str(), "old/v7.txt"]);
    assert_eq!(data_of(&bytes, &members[0]), b"{}");
    assert_eq!(data_of(&bytes, &members[1]), b"old");
}

#[test]
fn every_truncation_is_an_error_and_the_end_marker_is_required() {
    let long = format!("{}.jpg", "x".repeat(150));
    let bytes = build(&[("a.txt", b"some caption"), (&long, &[7u8; 700]), ("b.txt", b"")], true);
    let whole = scan_bytes(&bytes).unwrap();
    // The end-of-archive marker is the first zero block after the last member.
    let last = whole.last().unwrap();
    let marker = (last.offset + last.size).div_ceil(512) * 512;
    for cut in 0..bytes.len() {
        let r = scan_bytes(&bytes[..cut]);
        if cut as u64 >= marker + 512 {
            assert_eq!(r.as_ref(), Ok(&whole), "cut at {cut}");
        } else {
            let e = r.expect_err(&format!("cut at {cut}"));
            assert!(e.contains("truncated?") || e.contains("with no member for it"), "cut at {cut}: {e}");
        }
    }
    // a.txt: header and data at 0..1024; the long name's header and name at 1024..2048;
    // the member's header at 2048, its data from 2560.
    let e = scan_bytes(&bytes[..2560 + 100]).unwrap_err();
    assert!(e.contains(&format!("member {long:?} (header at offset 1024) has 700 bytes")), "{e}");
    assert!(e.contains("the file ends 100 bytes after its header: truncated?"), "{e}");
}

#[test]
fn flipped_header_bytes_never_panic_and_checksums_catch_them() {
    let bytes = build(&[("k/a.txt", b"first"), ("k/a.jpg", &[1u8; 600]), ("k/b.txt", b"third")], false);
    let whole = scan_bytes(&bytes).unwrap();
    let mut damaged = 0;
    let last = whole.last().unwrap();
    let marker = (last.offset + last.size).div_ceil(512) * 512;
    let blocks: Vec<u64> = whole.iter().map(|m| m.header).chain([marker]).collect();
    assert_eq!(blocks, vec![0, 1024, 2560, 3584]);
    for at in blocks.iter().flat_map(|&b| b as usize..b as usize + 512) {
        for flip in [0x01u8, 0x20, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[at] ^= flip;
            // Any change to a header's bytes changes its checksum, except a checksum field
            // that still reads as the same number (a NUL terminator turned into a space);
            // data and padding are not looked at.
            match scan_bytes(&b) {
                Ok(m) => assert_eq!(m, whole, "flip {flip:#x} at {at}"),
                Err(e) => {
                    assert!(e.contains("offset"), "flip {flip:#x} at {at}: {e}");
                    damaged += 1;
                }
            }
        }
    }
    // Every flip in three headers and the end marker, less the few benign checksum flips.
    assert!(damaged >= 4 * 512 * 4 - 16, "{damaged}");
    // A name byte of the second header: its checksum no longer matches.
    let mut b = bytes.clone();
    b[1024 + 3] ^= 0x01;
    let e = scan_bytes(&b).unwrap_err();
    assert!(e.contains("header at offset 1024 is damaged: checksum mismatch"), "{e}");
}

fn write_tar(path: &Path, members: &[(&str, &[u8])]) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&build(members, true)).unwrap();
}

fn scans() -> u64 {
    SCANS.with(|c| c.get())
}

#[test]
fn the_index_is_scanned_once_per_content() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("s.tar");
    write_tar(&shard, &[("a.txt", b"one"), ("b.txt", b"two")]);
    let opts = DatasetOptions {
        fields: Fields { text: Some("txt".into()), ..Fields::default() },
        cache_dir: Some(tmp.path().join("cache")),
        ..DatasetOptions::default()
    };
    let before = scans();
    let first = TarDataset::open("w", &[ShardRef::local(&shard)], &opts).unwrap();
    assert_eq!(scans(), before + 1);
    let again = TarDataset::open("w", &[ShardRef::local(&shard)], &opts).unwrap();
    assert_eq!(scans(), before + 1, "the cached index was used");
    assert_eq!(again.manifest(), first.manifest());
    // A copy elsewhere has the same content: its index is the same cache entry.
    let copy = tmp.path().join("copy.tar");
    fs::copy(&shard, &copy).unwrap();
    TarDataset::open("w", &[ShardRef::local(&copy)], &opts).unwrap();
    assert_eq!(scans(), before + 1, "keyed by content, not by path");
    write_tar(&shard, &[("a.txt", b"one"), ("b.txt", b"two"), ("c.txt", b"three")]);
    let changed = TarDataset::open("w", &[ShardRef::local(&shard)], &opts).unwrap();
    assert_eq!(scans(), before + 2, "a new content is scanned");
    assert_eq!(changed.manifest().rows(), 3);
    let mut out = Vec::new();
    changed.read(&[SampleId::new(0, 0, 2)], &mut out);
    assert_eq!(out.remove(0).unwrap().str("txt"), Some("three"));
}

#[test]
fn image_extensions_match_the_last_parts() {
    let ext = extensions("jpg, .PNG,seg.webp").unwrap();
    assert_eq!(ext, vec!["jpg", "png", "seg.webp"]);
    for (e, want) in [
        ("jpg", true),
        ("JPG", true),
        ("0.jpg", true),
        ("left.png", true),
        ("xjpg", false),
        ("jpg.txt", false),
        ("seg.webp", true),
        ("a.seg.webp", true),
        ("webp", false),
        ("é.jpg", true),
        ("é", false),
    ] {
        assert_eq!(is_image(e, &ext), want, "{e}");
    }
    assert!(extensions("jpg,,png").is_err());
    assert!(extensions("a/b").is_err());
}
