//! The TOML spec: valid files parse, mistakes are errors that say where.

use zephon::Spec;

use crate::*;

const PACK: &str = "\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 512\npad_id = 50256\n";

#[test]
fn a_valid_spec_parses_and_explains() {
    let spec = parse(&spec_text("jsonl", 8, 16, "", PACK));
    assert_eq!((spec.lanes, spec.rows_per_step, spec.seed), (8, Some(16), 99));
    let text = spec.pipeline().unwrap().explain(&spec.topology(2, 1).unwrap()).unwrap();
    for want in
        ["  datasets\n", "[0] a", "[1] b", "tokens/row", "tokenize", "pack", "lanes 4..8", "accumulator", "parallel"]
    {
        assert!(text.contains(want), "explain lacks {want:?}:\n{text}");
    }
}

#[test]
fn unknown_keys_are_errors_naming_the_key() {
    let top = spec_text("jsonl", 8, 16, "colour = \"blue\"", PACK);
    let e = Spec::parse(&top, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("s.toml") && e.contains("colour"), "{e}");
    let nested = spec_text("jsonl", 8, 16, "", "\n[pack]\nalgorithm = \"wrap\"\nseq_len = 512\nsequence_length = 3\n");
    let e = Spec::parse(&nested, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("sequence_length") && e.contains("line"), "{e}");
}

#[test]
fn invalid_values_are_errors() {
    let bad_lanes = spec_text("jsonl", 8, 12, "", PACK);
    let e = Spec::parse(&bad_lanes, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("multiple of the lane count"), "{e}");
    let spec = parse(&spec_text("jsonl", 8, 16, "", PACK));
    let e = spec.topology(3, 0).unwrap_err().to_string();
    assert!(e.contains("world size (3) must divide the lane count (8)"), "{e}");
    let both = spec_text("jsonl", 8, 16, "", PACK).replacen("share = 0.5", "share = 0.5\nweight = 1.0", 1);
    assert!(Spec::parse(&both, "s", "/".as_ref()).unwrap_err().to_string().contains("not both"));
    let both_chunks =
        spec_text("jsonl", 8, 16, "", PACK).replace("chunk_size = 16", "chunk_size = 16\nchunk_tokens = 4096");
    let e = parse(&both_chunks).pipeline().err().unwrap().to_string();
    assert!(e.contains("chunk_size and chunk_tokens exclude each other"), "{e}");
    let algo = spec_text("jsonl", 8, 16, "", "\n[pack]\nalgorithm = \"tightest\"\nseq_len = 512\n");
    // A misspelt choice is refused when the file is read, with its line and the names allowed.
    let e = Spec::parse(&algo, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("line 26") && e.contains("unknown variant `tightest`") && e.contains("`best_fit`"), "{e}");
    for shuffle in ["[shuffle]\nbuffer = 4\nbuffer_total = 64\n", "[shuffle]\nwarm_up = true\n"] {
        let text = spec_text("jsonl", 8, 16, "", &format!("{PACK}\n{shuffle}"));
        let e = Spec::parse(&text, "s.toml", "/".as_ref()).unwrap_err().to_string();
        assert!(e.contains("`buffer` (per lane) or `buffer_total` (all lanes)"), "{e}");
    }
}

/// `buffer_total` splits one buffer size across the lanes, and `warm_up` says so in the plan,
/// for the shuffle and for the packer.
#[test]
fn a_run_wide_warming_up_shuffle_buffer_is_split_across_lanes() {
    let text = spec_text(
        "jsonl",
        8,
        16,
        "",
        &format!("{PACK}warm_up = true\n\n[shuffle]\nbuffer_total = 100\nwarm_up = true\n"),
    );
    let spec = parse(&text);
    let plan = spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap();
    assert!(plan.contains("buffer of 13 records per lane") && plan.contains("growing from empty"), "{plan}");
    assert!(plan.contains("warming up from 1 open row"), "{plan}");
}

/// `bins_total` splits one number of open rows across the lanes (rounded up); giving it and
/// `bins` is refused.
#[test]
fn run_wide_open_rows_are_split_across_lanes() {
    let per_lane = |pack_extra: &str, lanes: u32| {
        let text = spec_text("jsonl", lanes, 16, "", &format!("{PACK}{pack_extra}"));
        let spec = parse(&text);
        spec.pipeline().map(|p| p.explain(&spec.topology(1, 0).unwrap()).unwrap())
    };
    let plan = per_lane("bins_total = 100\n", 8).unwrap();
    assert!(plan.contains("over 13 open rows"), "{plan}");
    let plan = per_lane("bins_total = 100\n", 16).unwrap();
    assert!(plan.contains("over 7 open rows"), "{plan}");
    assert!(per_lane("", 8).unwrap().contains("over 64 open rows"), "the default is 64 a lane");
    let text = spec_text("jsonl", 8, 16, "", &format!("{PACK}bins = 4\nbins_total = 64\n"));
    let e = Spec::parse(&text, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("`bins` (per lane) or `bins_total` (all lanes)"), "{e}");
}

/// `hold_total` splits one number of held documents across the lanes (rounded up); giving it
/// and `hold` is refused.
#[test]
fn run_wide_held_documents_are_split_across_lanes() {
    let plan_with = |ensure: &str, lanes: u32| {
        let text = spec_text("jsonl", lanes, 16, "", &format!("{PACK}\n[ensure_mixture]\n{ensure}"));
        let spec = Spec::parse(&text, "s.toml", "/".as_ref()).map_err(|e| e.to_string())?;
        Ok::<_, String>(spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap())
    };
    let plan = plan_with("hold_total = 1000\n", 8).unwrap();
    assert!(plan.contains("holds up to 125 documents per lane"), "{plan}");
    let plan = plan_with("hold_total = 1000\n", 16).unwrap();
    assert!(plan.contains("holds up to 63 documents per lane"), "{plan}");
    assert!(plan_with("", 8).unwrap().contains("drops nothing"), "without a cap nothing is dropped");
    let e = plan_with("hold = 4\nhold_total = 64\n", 8).unwrap_err();
    assert!(e.contains("`hold` (per lane) or `hold_total` (all lanes)") && e.contains("s.toml"), "{e}");
}

/// The fit packers lay their open rows out into full rows at the end of finite data under
/// `drop` (where short last rows cost a dropped step), keep them as they are otherwise, and
/// say which in the plan; an unknown value names the choices.
#[test]
fn the_end_of_data_policy_defaults_to_full_rows_only_where_data_ends_under_drop() {
    let plan_with = |source: &str, extra: &str, tail: &str| {
        let text =
            spec_text("jsonl", 8, 16, "", &format!("\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 512\n{extra}"))
                .replace("chunk_size = 16", &format!("chunk_size = 16\n{source}"))
                .replace("threads = 2", &format!("threads = 2\ntail = \"{tail}\""));
        let spec = parse(&text);
        spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap()
    };
    let plan = |source: &str, extra: &str| plan_with(source, extra, "drop");
    let filled = "open rows re-laid into full rows at the end of the data";
    assert!(plan("exhaustion = \"stop\"", "").contains(filled));
    assert!(!plan("", "").contains(filled), "repeating data never ends");
    assert!(!plan_with("exhaustion = \"stop\"", "", "partial").contains(filled), "partial keeps every row anyway");
    let kept = plan("exhaustion = \"redistribute\"", "end_of_data = \"keep_pieces\"\n");
    assert!(!kept.contains(filled), "{kept}");
    assert!(plan("", "end_of_data = \"fill_rows\"\n").contains(filled));
    let text =
        spec_text("jsonl", 8, 16, "", "\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 512\nend_of_data = \"tidy\"\n");
    let e = Spec::parse(&text, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("unknown variant `tidy`, expected `keep_pieces` or `fill_rows`"), "{e}");
}

/// A packer that truncates sees only what tokenize passes on: tokenize then truncates by
/// default, and a split into pieces that each fit a row (which the packer would never cut) is
/// refused, naming both settings.
#[test]
fn a_truncating_packer_makes_tokenize_truncate_and_refuses_a_split() {
    let pack = "\n[pack]\nalgorithm = \"best_fit\"\nseq_len = 512\nlong_documents = \"truncate\"\n";
    let spec = parse(&spec_text("jsonl", 8, 16, "", pack));
    let plan = spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap();
    assert!(plan.contains("Truncate { max_tokens: 512 }"), "{plan}");
    let split = spec_text("jsonl", 8, 16, "", pack).replace("[tokenize]\n", "[tokenize]\nlong_documents = \"split\"\n");
    let split = parse(&split);
    let e = split.pipeline().unwrap().explain(&split.topology(1, 0).unwrap()).unwrap_err().to_string();
    assert!(e.contains("would cut nothing") && e.contains("[tokenize] long_documents = \"truncate\""), "{e}");
}

/// The README's quick start in Rust and its TOML are the same run: the same run fingerprint
/// (the row length reaches tokenize from the packer by one route, for both) and the same steps.
#[test]
fn the_readmes_rust_quick_start_and_its_toml_are_the_same_run() {
    use zephon::*;
    let data = zephon_testkit::testdata();
    let (web, code) = (data.join("corpora/a/jsonl"), data.join("corpora/b/jsonl"));
    let tokenizer = data.join("tokenizers/gpt2/tokenizer.json");
    let topology = || Topology::builder().lanes(8).rows_per_step(16).build().unwrap();
    // As the README writes it (its `text_field("content")` is this corpus's `text`).
    let mixture = Mixture::new()
        .dataset(Dataset::new("web", &web).share(0.7))
        .dataset(Dataset::new("code", &code).share(0.3).text_field("text"));
    let mut rust = Pipeline::new(mixture)
        .tokenize(Tokenize::new(Tokenizer::from_file(&tokenizer).unwrap()).eos("<|endoftext|>").unwrap())
        .ensure_mixture(EnsureMixture::slack_tokens(4096))
        .pack(Pack::new(PackOptions::new(Algorithm::BestFit { bins: 64 }, 2048)).unwrap())
        .shuffle(Shuffle::buffer(64).unwrap())
        .seed(1234)
        .exec(ExecOptions { snapshot_every: 100, ..ExecOptions::default() })
        .build(topology())
        .unwrap();
    let toml = format!(
        "seed = 1234\nlanes = 8\nrows_per_step = 16\n\n[[dataset]]\nname = \"web\"\npath = \"{}\"\nshare = 0.7\n\
         [[dataset]]\nname = \"code\"\npath = \"{}\"\nshare = 0.3\ntext_field = \"text\"\n\n[tokenize]\n\
         tokenizer = \"{}\"\neos = \"<|endoftext|>\"\n\n[ensure_mixture]\nslack_tokens = 4096\n\n[pack]\n\
         algorithm = \"best_fit\"\nseq_len = 2048\n\n[shuffle]\nbuffer = 64\n",
        web.display(),
        code.display(),
        tokenizer.display()
    );
    let mut spec = parse(&toml).pipeline().unwrap().build(topology()).unwrap();
    assert_eq!(rust.fingerprint(), spec.fingerprint(), "run fingerprints");
    for _ in 0..2 {
        let (a, b) = (rust.next_step().unwrap().unwrap(), spec.next_step().unwrap().unwrap());
        assert_eq!(a.local_fingerprint(), b.local_fingerprint(), "step {:?}", a.step());
    }
}

#[test]
fn a_tokenizer_file_that_does_not_parse_names_the_file() {
    let dir = tmp();
    let bad = write(dir.path(), "tokenizer.json", "{\"model\": \"not really\"}");
    let text = spec_text("jsonl", 8, 16, "", PACK).replace(
        &zephon_testkit::testdata().join("tokenizers/gpt2/tokenizer.json").display().to_string(),
        &bad.display().to_string(),
    );
    let e = parse(&text).pipeline().err().unwrap().to_string();
    assert!(e.contains(&bad.display().to_string()) && e.contains("not a valid tokenizer.json"), "{e}");
    let unknown = spec_text("jsonl", 8, 16, "", PACK).replace("eos = \"<|endoftext|>\"", "eos = \"<|nope|>\"");
    let e = parse(&unknown).pipeline().err().unwrap().to_string();
    assert!(e.contains("no token \"<|nope|>\""), "{e}");
}

/// A cap on what ensure_mixture holds would drop documents: the spec says so before a run
/// starts; without one (at any exhaustion policy, redistribute included) it says nothing.
#[test]
fn an_ensure_mixture_hold_cap_is_warned_about_before_the_run() {
    let with = |exhaustion: &str, ensure: &str| {
        let text = spec_text("jsonl", 8, 16, "", &format!("{PACK}{ensure}"))
            .replace("chunk_size = 16", &format!("chunk_size = 16\nexhaustion = \"{exhaustion}\""));
        parse(&text).warnings()
    };
    let w = with("repeat", "\n[ensure_mixture]\nslack_tokens = 4096\nhold = 64\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("[ensure_mixture] hold") && w[0].contains("dropped"), "{w:?}");
    for exhaustion in ["stop", "repeat", "redistribute"] {
        assert!(with(exhaustion, "\n[ensure_mixture]\nslack_tokens = 4096\n").is_empty(), "{exhaustion}");
    }
}

/// Settings that contradict the algorithm or have nothing to act on are refused.
#[test]
fn contradicting_or_idle_settings_are_refused() {
    let one = spec_text("jsonl", 8, 16, "", "\n[pack]\nalgorithm = \"one_per_row\"\nseq_len = 512\nmax_segments = 4\n");
    let e = parse(&one).pipeline().err().unwrap().to_string();
    assert!(e.contains("one_per_row") && e.contains("max_segments = 4"), "{e}");
    let ok = spec_text("jsonl", 8, 16, "", "\n[pack]\nalgorithm = \"one_per_row\"\nseq_len = 512\nmax_segments = 1\n");
    assert!(parse(&ok).pipeline().is_ok());
    let marker = spec_text("jsonl", 8, 16, "", PACK).replace("[tokenize]\n", "[tokenize]\nimage_token = \"<image>\"\n");
    let e = Spec::parse(&marker, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("image_token") && e.contains("no [images] table"), "{e}");
    let images = spec_text("jsonl", 8, 16, "", PACK).replacen("share = 0.5", "share = 0.5\nimages = \"image\"", 1);
    let e = Spec::parse(&images, "s.toml", "/".as_ref()).unwrap_err().to_string();
    assert!(e.contains("dataset a") && e.contains("[images]"), "{e}");
}
