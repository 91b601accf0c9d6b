//! Images as attachments, from the three layouts, on the real captioned photos: every image
//! comes out byte-identical to its file, in order, with its source. The tar index is cached
//! per content. Bad input: one test each, an error that says where, never a panic.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int32Array, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field as ArrowField, Fields as ArrowFields};
use zephon_core::{BadRecords, Dataset, Datasets};
use zephon_io::{DatasetOptions, Error, Fields, Format, IMAGE, IMAGE_BYTES, IMAGE_SOURCE, open};
use zephon_operator::{OpError, Record, SampleId, Value};

use crate::bad_input::{run, spec_for};

/// One captioned photo of the test data.
struct Photo {
    id: String,
    source: String,
    caption: String,
    /// `jpg/<id>.jpg`, as `captions.jsonl` writes it.
    file: String,
    bytes: Vec<u8>,
}

fn captioned() -> PathBuf {
    zephon_testkit::testdata().join("images/captioned")
}

fn photos() -> Vec<Photo> {
    let dir = captioned();
    fs::read_to_string(dir.join("captions.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let s = |k: &str| v[k].as_str().unwrap().to_string();
            Photo {
                id: s("id"),
                source: s("source"),
                caption: s("caption"),
                bytes: fs::read(dir.join(s("file"))).unwrap(),
                file: s("file"),
            }
        })
        .collect()
}

/// The small photos (the `caer` ones, 9 to 50 kB), for tests that write many shards.
fn small_photos() -> Vec<Photo> {
    photos().into_iter().filter(|p| p.source == "caer").collect()
}

/// `(item, bytes, source)` of each attachment, checking that each is an unplaced image.
fn images_of(r: &Record) -> Vec<(u32, Vec<u8>, String)> {
    r.attachments()
        .iter()
        .map(|a| {
            assert_eq!(a.kind().as_str(), IMAGE);
            assert_eq!(a.span(), None, "unplaced until a tokenizer places it");
            let Some(Value::Bytes(b)) = a.get(IMAGE_BYTES) else { panic!("bytes: {:?}", a.get(IMAGE_BYTES)) };
            let Some(Value::Str(s)) = a.get(IMAGE_SOURCE) else { panic!("source: {:?}", a.get(IMAGE_SOURCE)) };
            (a.item(), b.to_vec(), s.to_string())
        })
        .collect()
}

fn options(cache: &Path, text: &str, extra: &[&str], images: Option<&str>) -> DatasetOptions {
    DatasetOptions {
        fields: Fields {
            text: Some(text.into()),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            images: images.map(String::from),
            ..Fields::default()
        },
        cache_dir: Some(cache.to_path_buf()),
        ..DatasetOptions::default()
    }
}

fn read_all(ds: Arc<dyn Dataset>) -> Vec<Result<Record, OpError>> {
    let rows = ds.manifest().rows();
    let mut out = Vec::new();
    ds.read(&(0..rows).map(|r| SampleId::new(0, 0, r)).collect::<Vec<_>>(), &mut out);
    out
}

fn data_error(r: &Result<Record, OpError>) -> String {
    match r {
        Err(OpError::Data(m)) => m.clone(),
        other => panic!("expected a data error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// HF image Parquet

#[test]
fn hf_parquet_images_are_the_files_bytes_with_their_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = captioned().join("parquet/part-00000.parquet");
    let photos = photos();
    let ds = open("hf", &shard, &options(tmp.path(), "caption", &[], Some("image"))).unwrap();
    let rows = read_all(ds);
    assert_eq!(rows.len(), photos.len());
    for (r, p) in rows.into_iter().zip(&photos) {
        let r = r.unwrap();
        assert_eq!(r.str("caption"), Some(p.caption.as_str()));
        assert_eq!(images_of(&r), vec![(0, p.bytes.clone(), format!("{}.jpg", p.id))], "{}", p.id);
        assert!(r.get("image").is_none(), "images are attachments, not a field");
    }
    // Without `images`, rows carry no attachments.
    let plain = open("hf", &shard, &options(tmp.path(), "caption", &[], None)).unwrap();
    assert!(read_all(plain).iter().all(|r| r.as_ref().unwrap().attachments().is_empty()));
}

fn image_structs(elements: &[(Option<&[u8]>, Option<&str>)], valid: Vec<bool>) -> (ArrowFields, StructArray) {
    let fields = ArrowFields::from(vec![
        ArrowField::new("bytes", DataType::Binary, true),
        ArrowField::new("path", DataType::Utf8, true),
        // HF writers may add children; they are not read.
        ArrowField::new("width", DataType::Int32, true),
    ]);
    let bytes: ArrayRef = Arc::new(BinaryArray::from(elements.iter().map(|e| e.0).collect::<Vec<_>>()));
    let paths: ArrayRef = Arc::new(StringArray::from(elements.iter().map(|e| e.1).collect::<Vec<_>>()));
    let width: ArrayRef = Arc::new(Int32Array::from(vec![640; elements.len()]));
    let array = StructArray::try_new(fields.clone(), vec![bytes, paths, width], Some(NullBuffer::from(valid))).unwrap();
    (fields, array)
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn a_parquet_list_of_images_keeps_list_order_and_a_binary_column_reads_too() {
    let tmp = tempfile::tempdir().unwrap();
    let p = small_photos();
    let b = |i: usize| Some(&p[i].bytes[..]);
    // Rows: three images; an empty list; a null list; one image without a path; a null
    // element (bad); an image left outside the file (bad).
    let elements = [
        (b(2), Some("a/two.jpg")),
        (b(0), Some("zero.jpg")),
        (b(1), Some("")),
        (b(3), None),
        (b(4), Some("x.jpg")),
        (None, None),
        (None, Some("/data/outside.jpg")),
    ];
    let valid = vec![true, true, true, true, true, false, true];
    let (fields, values) = image_structs(&elements, valid);
    let item = Arc::new(ArrowField::new("item", DataType::Struct(fields), true));
    let offsets = OffsetBuffer::from_lengths([3, 0, 0, 1, 2, 1]);
    let lists = NullBuffer::from(vec![true, true, false, true, true, true]);
    let list: ArrayRef = Arc::new(ListArray::try_new(item, offsets, Arc::new(values), Some(lists)).unwrap());
    let raw: ArrayRef = Arc::new(BinaryArray::from(vec![b(5), None, Some(&b""[..]), b(6), b(7), b(8)]));
    let text: ArrayRef = Arc::new(StringArray::from(vec!["r0", "r1", "r2", "r3", "r4", "r5"]));
    let shard = tmp.path().join("list.parquet");
    write_parquet(&shard, vec![("text", text), ("imgs", list), ("raw", raw)]);
    let cache = tmp.path().join("cache");

    let rows = read_all(open("l", &shard, &options(&cache, "text", &[], Some("imgs"))).unwrap());
    let bytes = |i: usize| p[i].bytes.clone();
    let ok = |i: usize| images_of(rows[i].as_ref().unwrap());
    assert_eq!(
        ok(0),
        vec![(0, bytes(2), "a/two.jpg".into()), (1, bytes(0), "zero.jpg".into()), (2, bytes(1), "imgs[2]".into())]
    );
    assert_eq!(ok(1), vec![], "an empty list");
    assert_eq!(ok(2), vec![], "a null list");
    assert_eq!(ok(3), vec![(0, bytes(3), "imgs[0]".into())], "no path: the column names it");
    let e = data_error(&rows[4]);
    assert!(e.contains(r#"column "imgs": image 1 of the list is null"#), "{e}");
    let e = data_error(&rows[5]);
    assert!(e.contains(r#"image "/data/outside.jpg" has no bytes (it is not embedded in the file)"#), "{e}");

    let rows = read_all(open("r", &shard, &options(&cache, "text", &[], Some("raw"))).unwrap());
    let got: Vec<_> = rows.iter().map(|r| images_of(r.as_ref().unwrap())).collect();
    let one = |i: usize| vec![(0, bytes(i), "raw".to_string())];
    assert_eq!(got, vec![one(5), vec![], vec![(0, vec![], "raw".into())], one(6), one(7), one(8)]);
}

#[test]
fn a_parquet_images_column_of_another_type_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = captioned().join("parquet/part-00000.parquet");
    let err = open("hf", &shard, &options(tmp.path(), "caption", &[], Some("caption"))).err().unwrap();
    assert!(matches!(err, Error::Fields { .. }), "the text field cannot be the images field: {err}");
    let opts = DatasetOptions {
        fields: Fields { text: None, images: Some("caption".into()), ..Fields::default() },
        cache_dir: Some(tmp.path().into()),
        ..DatasetOptions::default()
    };
    let err = open("hf", &shard, &opts).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, Error::ColumnType { .. }), "{msg}");
    assert!(msg.contains("dataset hf") && msg.contains(&shard.display().to_string()), "{msg}");
    assert!(
        msg.contains(r#"column "caption" is Utf8"#) && msg.contains("struct<bytes: binary, path: string>"),
        "{msg}"
    );
    let err = open("hf", &shard, &options(tmp.path(), "caption", &[], Some("pixels"))).err().unwrap();
    assert!(matches!(err, Error::MissingColumn { .. }), "{err}");
}

// ---------------------------------------------------------------------------------------
// WebDataset tar

/// A member of a test tar.
enum Member<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    /// A member whose name is given by a pax `path` record.
    Pax(&'a str, &'a [u8]),
}

fn tar_header(kind: tar::EntryType, size: usize) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    h
}

/// Writes a tar with the `tar` crate (GNU headers: long names get `././@LongLink` members).
fn write_tar(path: &Path, members: &[Member]) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    for m in members {
        match m {
            Member::File(name, data) => {
                b.append_data(&mut tar_header(tar::EntryType::Regular, data.len()), name, *data).unwrap();
            }
            Member::Dir(name) => b.append_data(&mut tar_header(tar::EntryType::Directory, 0), name, &[][..]).unwrap(),
            Member::Pax(name, data) => {
                b.append_pax_extensions([("path", name.as_bytes())]).unwrap();
                b.append_data(&mut tar_header(tar::EntryType::Regular, data.len()), "pax-named.bin", *data).unwrap();
            }
        }
    }
    b.into_inner().unwrap().sync_all().unwrap();
}

/// The header offset of each member of the tar at `path`, by name (by the `tar` crate).
fn header_offsets(path: &Path) -> Vec<(String, u64)> {
    let mut a = tar::Archive::new(fs::File::open(path).unwrap());
    a.entries_with_seek()
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.path().unwrap().display().to_string(), e.raw_header_position())
        })
        .collect()
}

#[test]
fn webdataset_samples_carry_their_images_in_member_order() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = photos();
    let small = small_photos();
    // Keys hold `/`; one is longer than a ustar name; samples differ in layout:
    // i % 3 == 0: the caption as its own member; else only in the `.json` member.
    // i % 5 == 1: a second image, written before the first (member order counts).
    // i % 7 == 2: no image at all.
    let keys: Vec<String> = photos
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if i == 4 {
                format!("{}/{}/{}", p.source, "deep".repeat(30), p.id)
            } else {
                format!("{}/{}", p.source, p.id)
            }
        })
        .collect();
    let jsons: Vec<Vec<u8>> = photos
        .iter()
        .map(|p| serde_json::to_vec(&serde_json::json!({"caption": p.caption, "id": p.id, "n": [1, 2]})).unwrap())
        .collect();
    let names: Vec<[String; 4]> = keys
        .iter()
        .map(|k| [format!("{k}.caption"), format!("{k}.1.png"), format!("{k}.jpg"), format!("{k}.json")])
        .collect();
    let mut members = vec![Member::Dir("caer/"), Member::File("__meta__", b"ignored"), Member::File("README", b"x")];
    let mut want = Vec::new();
    for (i, p) in photos.iter().enumerate() {
        let [caption, second, jpg, json] = &names[i];
        let mut images = Vec::new();
        if i % 3 == 0 {
            members.push(Member::File(caption, p.caption.as_bytes()));
        }
        if i % 5 == 1 {
            let other = &small[i % small.len()];
            members.push(Member::File(second, &other.bytes));
            images.push((images.len() as u32, other.bytes.clone(), second.clone()));
        }
        if i % 7 != 2 {
            // Every 11th image is named by a pax header.
            members.push(if i % 11 == 0 { Member::Pax(jpg, &p.bytes) } else { Member::File(jpg, &p.bytes) });
            images.push((images.len() as u32, p.bytes.clone(), jpg.clone()));
        }
        members.push(Member::File(json, &jsons[i]));
        want.push((keys[i].clone(), p.caption.clone(), p.id.clone(), images));
    }
    let shard = tmp.path().join("shard-000000.tar");
    write_tar(&shard, &members);
    let ds = open("wds", &shard, &options(tmp.path(), "caption", &["id", "__key__"], Some("jpg,png"))).unwrap();
    assert_eq!(ds.manifest().rows(), photos.len() as u64);
    let rows = read_all(ds);
    for (r, (key, caption, id, images)) in rows.into_iter().zip(want) {
        let r = r.unwrap();
        assert_eq!(r.str("caption"), Some(caption.as_str()), "{key}");
        assert_eq!(r.str("id"), Some(id.as_str()));
        assert_eq!(r.str("__key__"), Some(key.as_str()));
        assert_eq!(images_of(&r), images, "{key}");
    }
}

fn small_tar(path: &Path, photos: &[Photo], with_text: bool) {
    let names: Vec<(String, String)> =
        photos.iter().map(|p| (format!("{}.jpg", p.id), format!("{}.txt", p.id))).collect();
    let mut members = Vec::new();
    for (p, (jpg, txt)) in photos.iter().zip(&names) {
        members.push(Member::File(jpg, &p.bytes));
        if with_text {
            members.push(Member::File(txt, p.caption.as_bytes()));
        }
    }
    write_tar(path, &members);
}

#[test]
fn the_tar_index_is_cached_and_rebuilt_when_the_tar_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let shard = tmp.path().join("s.tar");
    small_tar(&shard, &photos[..4], true);
    let opts = options(&tmp.path().join("cache"), "txt", &[], Some("jpg"));
    let first = open("w", &shard, &opts).unwrap();
    let index_dir = tmp.path().join("cache/tar-index");
    let indexes: Vec<PathBuf> = fs::read_dir(&index_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(indexes.len(), 1, "one index written");
    let before = fs::metadata(&indexes[0]).unwrap();
    let bytes = fs::read(&indexes[0]).unwrap();

    // The cached index is read, not rewritten: a rewrite renames a new file into place,
    // which changes the inode.
    let again = open("w", &shard, &opts).unwrap();
    assert_eq!(again.manifest(), first.manifest());
    let after = fs::metadata(&indexes[0]).unwrap();
    assert_eq!((after.ino(), after.modified().unwrap()), (before.ino(), before.modified().unwrap()));
    assert_eq!(fs::read(&indexes[0]).unwrap(), bytes);
    assert_eq!(fs::read_dir(&index_dir).unwrap().count(), 1);
    assert_eq!(images_of(read_all(again)[0].as_ref().unwrap())[0].2, "caer-black_cat.jpg");
    // And an open reads the cached index instead of the tar: a key doctored in the index
    // (same length, still well-formed) is what the next open reports.
    let (real, doctored) = (b"caer-black_cat", b"doctored-key!!");
    let mut edited = bytes.clone();
    let i = edited.windows(real.len()).position(|w| w == real).unwrap();
    edited[i..i + real.len()].copy_from_slice(doctored);
    fs::write(&indexes[0], &edited).unwrap();
    let believed = read_all(open("w", &shard, &opts).unwrap());
    assert_eq!(images_of(believed[0].as_ref().unwrap())[0].2, "doctored-key!!.jpg");
    fs::write(&indexes[0], &bytes).unwrap();

    // A changed tar is another content: a second index, the new rows, a new version.
    small_tar(&shard, &photos[..5], true);
    let changed = open("w", &shard, &opts).unwrap();
    assert_eq!(fs::read_dir(&index_dir).unwrap().count(), 2);
    assert_eq!(changed.manifest().rows(), first.manifest().rows() + 1);
    assert_ne!(changed.manifest().fingerprint(), first.manifest().fingerprint());
    let last = read_all(changed).pop().unwrap().unwrap();
    assert_eq!(last.str("txt"), Some(photos[4].caption.as_str()));
    assert_eq!(images_of(&last), vec![(0, photos[4].bytes.clone(), format!("{}.jpg", photos[4].id))]);
}

#[test]
fn a_truncated_tar_is_refused_naming_the_member_and_its_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let shard = tmp.path().join("t.tar");
    small_tar(&shard, &photos, true);
    let (name, at) = header_offsets(&shard).into_iter().find(|(n, _)| n == "caer-puppy.jpg").unwrap();
    let len = fs::metadata(&shard).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&shard).unwrap();
    f.set_len(at + 512 + 1000).unwrap();
    drop(f);
    assert!(at + 1512 < len);
    let err = open("w", &shard, &options(&tmp.path().join("cache"), "txt", &[], Some("jpg"))).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, Error::Open { .. }), "{msg}");
    assert!(msg.contains("dataset w") && msg.contains(&shard.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("member {name:?} (header at offset {at}) has {} bytes", photos[5].bytes.len())),
        "{msg}"
    );
    assert!(msg.contains("the file ends 1000 bytes after its header: truncated?"), "{msg}");
    assert!(fs::read_dir(tmp.path().join("cache/tar-index")).map_or(0, |d| d.count()) == 0, "no index kept");
}

#[test]
fn a_corrupt_header_checksum_is_refused_naming_the_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("c.tar");
    small_tar(&shard, &small_photos(), true);
    let at = header_offsets(&shard)[3].1;
    let mut bytes = fs::read(&shard).unwrap();
    bytes[at as usize + 2] ^= 0x01; // a letter of the name: valid-looking, but summed differently
    fs::write(&shard, &bytes).unwrap();
    let err = open("w", &shard, &options(&tmp.path().join("cache"), "txt", &[], Some("jpg"))).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, Error::Open { .. }), "{msg}");
    assert!(msg.contains(&shard.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("the header at offset {at} is damaged: checksum mismatch")), "{msg}");
}

#[test]
fn a_sample_without_its_text_member_is_a_data_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let shard = tmp.path().join("m.tar");
    let json = br#"{"id": "x"}"#;
    write_tar(
        &shard,
        &[
            Member::File("s/a.txt", b"first"),
            Member::File("s/a.jpg", &photos[0].bytes),
            Member::File("s/b.jpg", &photos[1].bytes),
            Member::File("s/c.json", json),
            Member::File("s/c.jpg", &photos[2].bytes),
        ],
    );
    let rows = read_all(open("w", &shard, &options(&tmp.path().join("cache"), "txt", &[], Some("jpg"))).unwrap());
    assert_eq!(rows[0].as_ref().unwrap().str("txt"), Some("first"));
    let e = data_error(&rows[1]);
    assert_eq!(e, r#"no member "s/b.txt" (the sample has s/b.jpg)"#);
    let e = data_error(&rows[2]);
    assert!(e.starts_with(r#"no member "s/c.txt", and member "s/c.json" has no field "txt""#), "{e}");
}

#[test]
fn a_run_over_a_tar_stops_at_the_sample_without_text_naming_dataset_shard_row_and_member() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("run.tar");
    let names: Vec<String> = (0..40).map(|i| format!("s/{i:03}.{}", if i == 23 { "jpg" } else { "text" })).collect();
    let texts: Vec<String> = (0..40).map(|i| format!("sample number {i} of the shard")).collect();
    let members: Vec<Member> = names.iter().zip(&texts).map(|(n, t)| Member::File(n, t.as_bytes())).collect();
    write_tar(&shard, &members);
    let opts = DatasetOptions { cache_dir: Some(tmp.path().join("cache")), ..DatasetOptions::default() };
    let ds = || open("wds", &shard, &opts).unwrap();
    let err = run(spec_for(ds(), BadRecords::Fail)).unwrap_err();
    assert!(err.contains("wds shard 0 row 23") && err.contains(r#"no member "s/023.text""#), "{err}");
    assert_eq!(run(spec_for(ds(), BadRecords::Skip)), Ok(1), "skipped and counted under the skip policy");
}

#[test]
fn a_folder_of_tar_shards_is_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let dir = tmp.path().join("wds");
    fs::create_dir(&dir).unwrap();
    small_tar(&dir.join("shard-000001.tar"), &photos[3..], true);
    small_tar(&dir.join("shard-000000.tar"), &photos[..3], true);
    assert_eq!(Format::of("x.TAR".as_ref()), Some(Format::Tar));
    assert_eq!(Format::of("x.tar.gz".as_ref()), None, "compressed tars are not read");
    let ds = open("w", &dir, &options(&tmp.path().join("cache"), "txt", &[], Some("jpg"))).unwrap();
    let m = ds.manifest();
    assert_eq!(m.shards.iter().map(|s| s.rows).collect::<Vec<_>>(), vec![3, photos.len() as u64 - 3]);
    assert!(m.shards[0].path.ends_with("shard-000000.tar"));
    let first = Datasets::new(vec![ds]).read(&[SampleId::new(0, 1, 0)]).remove(0).unwrap();
    assert_eq!(first.str("txt"), Some(photos[3].caption.as_str()));
    fs::copy(corpus_jsonl(), dir.join("a.jsonl")).unwrap();
    let err = open("w", &dir, &DatasetOptions::default()).err().unwrap();
    assert!(matches!(err, Error::MixedFormats { .. }), "{err}");
}

fn corpus_jsonl() -> PathBuf {
    crate::data::corpus_dir("a-exact", "jsonl").join("part-00000.jsonl")
}

// ---------------------------------------------------------------------------------------
// JSONL with image paths

#[test]
fn jsonl_image_paths_are_read_relative_to_the_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = photos();
    // The fetched captions name their files relative to their own folder.
    let ds =
        open("c", &captioned().join("captions.jsonl"), &options(tmp.path(), "caption", &["id"], Some("file"))).unwrap();
    let rows = read_all(ds);
    assert_eq!(rows.len(), photos.len());
    for (r, p) in rows.into_iter().zip(&photos) {
        let r = r.unwrap();
        assert_eq!(r.str("id"), Some(p.id.as_str()));
        assert_eq!(images_of(&r), vec![(0, p.bytes.clone(), p.file.clone())]);
    }
}

/// An interleaved (OBELICS-style) shard in `dir`: some paths relative (to `img/`), one
/// absolute; rows with several images, none, null, an absent field, a single string.
fn interleaved(dir: &Path, photos: &[Photo]) -> Vec<Vec<(u32, Vec<u8>, String)>> {
    fs::create_dir_all(dir.join("img")).unwrap();
    for p in photos {
        fs::write(dir.join("img").join(format!("{}.jpg", p.id)), &p.bytes).unwrap();
    }
    let rel = |i: usize| format!("img/{}.jpg", photos[i].id);
    let abs = dir.join("img").join(format!("{}.jpg", photos[3].id)).display().to_string();
    let rows = [
        serde_json::json!({"text": "<image> a <image> then <image>", "images": [rel(2), abs, rel(0)]}),
        serde_json::json!({"text": "no images", "images": []}),
        serde_json::json!({"text": "null", "images": null}),
        serde_json::json!({"text": "absent"}),
        serde_json::json!({"images": rel(1), "text": "<image> one, given as a string"}),
    ];
    let mut f = fs::File::create(dir.join("interleaved.jsonl")).unwrap();
    for r in rows {
        writeln!(f, "{r}").unwrap();
    }
    let img = |k: u32, i: usize, source: String| (k, photos[i].bytes.clone(), source);
    vec![
        vec![
            img(0, 2, rel(2)),
            img(1, 3, dir.join("img").join(format!("{}.jpg", photos[3].id)).display().to_string()),
            img(2, 0, rel(0)),
        ],
        vec![],
        vec![],
        vec![],
        vec![img(0, 1, rel(1))],
    ]
}

#[test]
fn interleaved_jsonl_reads_every_image_in_order_even_compressed() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let dir = tmp.path().join("data");
    let want = interleaved(&dir, &photos);
    let cache = tmp.path().join("cache");
    let plain = dir.join("interleaved.jsonl");
    // A compressed copy is decompressed into the cache, but its paths still start from the
    // shard's own folder.
    let gz = dir.join("interleaved.jsonl.gz");
    let mut enc = flate2::write::GzEncoder::new(fs::File::create(&gz).unwrap(), flate2::Compression::fast());
    enc.write_all(&fs::read(&plain).unwrap()).unwrap();
    enc.finish().unwrap();
    for shard in [plain, gz] {
        let rows = read_all(open("i", &shard, &options(&cache, "text", &[], Some("images"))).unwrap());
        let got: Vec<_> = rows.iter().map(|r| images_of(r.as_ref().unwrap())).collect();
        assert_eq!(got, want, "{}", shard.display());
    }
}

#[test]
fn a_missing_image_file_is_a_data_error_naming_the_path_as_written_and_resolved() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    interleaved(&dir, &small_photos());
    let shard = dir.join("x.jsonl");
    fs::write(&shard, "{\"text\": \"<image>\", \"images\": [\"img/caer-puppy.jpg\", \"img/gone.jpg\"]}\n").unwrap();
    let rows = read_all(open("x", &shard, &options(&tmp.path().join("cache"), "text", &[], Some("images"))).unwrap());
    let e = data_error(&rows[0]);
    let resolved = dir.join("img/gone.jpg");
    assert!(
        e.starts_with(&format!(r#"field "images": image 1 "img/gone.jpg" (resolved to {}): "#, resolved.display())),
        "{e}"
    );
    assert!(e.contains("No such file"), "{e}");
}

#[test]
fn image_fields_that_are_not_paths_are_data_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let shard = tmp.path().join("bad.jsonl");
    let rows = [
        r#"{"text": "t", "images": 3}"#,
        r#"{"text": "t", "images": ["a.jpg", null]}"#,
        r#"{"text": "t", "images": [""]}"#,
        r#"{"text": "t", "images": {"path": "a.jpg"}}"#,
        r#"{"text": "t", "images": [["a.jpg"]]}"#,
        r#"{"text": "t", "images": [], "images": ["a.jpg"]}"#,
    ];
    fs::write(&shard, rows.join("\n")).unwrap();
    let got: Vec<String> =
        read_all(open("b", &shard, &options(&tmp.path().join("cache"), "text", &[], Some("images"))).unwrap())
            .iter()
            .map(data_error)
            .collect();
    let suffix = "; image paths are a string or an array of strings";
    assert_eq!(
        got,
        vec![
            format!(r#"field "images" is a number{suffix}"#),
            format!(r#"field "images" element 1 is null{suffix}"#),
            format!(r#"field "images" element 0 is an empty string{suffix}"#),
            format!(r#"field "images" is a JSON object{suffix}"#),
            format!(r#"field "images" element 0 is a JSON array{suffix}"#),
            r#"field "images" appears twice in the row; which one is meant is ambiguous"#.to_string(),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// All layouts

#[test]
fn a_zero_byte_image_passes_through_undecoded() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = zephon_testkit::testdata().join("images/edge/gen_empty.jpg");
    assert_eq!(fs::metadata(&empty).unwrap().len(), 0);
    let cache = tmp.path().join("cache");
    let jsonl = tmp.path().join("e.jsonl");
    fs::write(&jsonl, format!("{}\n", serde_json::json!({"text": "t", "images": [empty.display().to_string()]})))
        .unwrap();
    let tar = tmp.path().join("e.tar");
    write_tar(&tar, &[Member::File("k.txt", b"t"), Member::File("k.jpg", b"")]);
    for (shard, text, images) in [(&jsonl, "text", "images"), (&tar, "txt", "jpg")] {
        let rows = read_all(open("e", shard, &options(&cache, text, &[], Some(images))).unwrap());
        let got = images_of(rows[0].as_ref().unwrap());
        assert_eq!(got.len(), 1, "{}", shard.display());
        assert!(got[0].1.is_empty());
    }
}

#[test]
fn images_count_toward_max_row_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let photos = small_photos();
    let cache = tmp.path().join("cache");
    let dir = tmp.path().join("d");
    interleaved(&dir, &photos);
    let jsonl = dir.join("one.jsonl");
    let line = format!("{}\n", serde_json::json!({"text": "t", "images": [format!("img/{}.jpg", photos[0].id)]}));
    fs::write(&jsonl, &line).unwrap();
    let tar = tmp.path().join("one.tar");
    write_tar(&tar, &[Member::File("k.txt", b"t"), Member::File("k.jpg", &photos[0].bytes)]);
    let image = photos[0].bytes.len() as u64;
    let hf = captioned().join("parquet/part-00000.parquet");
    let first = &self::photos()[0];
    let first_hf = (first.bytes.len() + first.caption.len()) as u64;
    for (shard, text, images, row) in [
        (&jsonl, "text", "images", line.len() as u64 + image),
        (&tar, "txt", "jpg", 1 + image),
        (&hf, "caption", "image", first_hf),
    ] {
        let mut opts = options(&cache, text, &[], Some(images));
        opts.fields.max_row_bytes = Some(row);
        let ok = read_all(open("m", shard, &opts).unwrap()).remove(0);
        assert_eq!(images_of(ok.as_ref().unwrap()).len(), 1, "{}: exactly at the limit", shard.display());
        opts.fields.max_row_bytes = Some(row - 1);
        let e = data_error(&read_all(open("m", shard, &opts).unwrap())[0]);
        assert!(e.contains("over the limit of") && e.contains("(max_row_bytes)"), "{}: {e}", shard.display());
    }
}

#[test]
fn images_misconfigured_are_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let tar = tmp.path().join("k.tar");
    write_tar(&tar, &[Member::File("k.txt", b"t")]);
    for (images, extra, want) in [
        ("jpg,,png", vec![], r#""" is not an extension"#),
        ("  ", vec![], "`images` is empty"),
        ("id", vec!["id"], r#""id" is both the `images` field and the text or an extra field"#),
    ] {
        let err = open("k", &tar, &options(&cache, "txt", &extra, Some(images))).err().unwrap();
        assert!(matches!(err, Error::Fields { .. }) && err.to_string().contains(want), "{images}: {err}");
    }
    let err = open("k", &corpus_jsonl(), &options(&cache, "text", &["id"], Some("id"))).err().unwrap();
    assert!(matches!(err, Error::Fields { .. }), "{err}");
}
