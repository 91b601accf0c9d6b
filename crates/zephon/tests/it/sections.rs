//! Registered spec sections: a third-party operator's table (`[sentences]`, from
//! `examples/sentences`) read from TOML and from JSON alike, its operator placed at its stage
//! among the built-in ones, the same steps at every world size and across a resume; names
//! that cannot be registered are refused.

use std::path::Path;
use std::sync::Arc;

use zephon::operator::{OpError, Operator, Record, Section, SectionContext, SectionTable, Settings, Stage};
use zephon::{Sections, Spec};
use zephon_sentences::SentencesSection;

use zephon::testing::loaders;

use crate::tmp;

fn sentences() -> Sections {
    Sections::new().with(SentencesSection).unwrap()
}

fn corpus() -> String {
    zephon_testkit::testdata().join("corpora/a/jsonl").display().to_string()
}

#[test]
fn a_registered_table_reads_the_same_from_toml_and_json_and_keeps_every_step() {
    let toml = format!(
        "seed = 3\nlanes = 4\nrows_per_step = 8\n[[dataset]]\nname = \"a\"\npath = \"{}\"\nweight = 1.0\n\
         [source]\nchunk_size = 4\n[sentences]\nmin_bytes = 300\n[run]\nthreads = 2\n",
        corpus()
    );
    let json = serde_json::json!({
        "seed": 3, "lanes": 4, "rows_per_step": 8,
        "dataset": [{"name": "a", "path": corpus(), "weight": 1.0}],
        "source": {"chunk_size": 4},
        "sentences": {"min_bytes": 300},
        "run": {"threads": 2},
    })
    .to_string();
    let from_toml = Spec::parse_with(&toml, "s.toml", Path::new("/"), &sentences()).unwrap();
    let from_json = Spec::from_json_with(&json, "s.json", Path::new("/"), &sentences()).unwrap();
    assert_eq!(from_toml.registered.len(), 1);
    let reference = loaders(&from_toml, 1, 2, None).unwrap().fingerprints(4).unwrap();
    assert_eq!(loaders(&from_json, 1, 1, None).unwrap().fingerprints(4).unwrap(), reference, "JSON");
    assert_eq!(loaders(&from_toml, 4, 1, None).unwrap().fingerprints(4).unwrap(), reference, "W=4");
    let dir = tmp();
    let mut two = loaders(&from_toml, 2, 1, None).unwrap();
    let mut got = two.fingerprints(2).unwrap();
    two.checkpoint(dir.path()).unwrap();
    got.extend(loaders(&from_toml, 4, 2, Some(dir.path())).unwrap().fingerprints(2).unwrap());
    assert_eq!(got, reference, "2 -> 4 resume");
    // Another setting is another run.
    let other =
        Spec::parse_with(&toml.replace("min_bytes = 300", "min_bytes = 2000"), "s.toml", Path::new("/"), &sentences())
            .unwrap();
    assert_ne!(loaders(&other, 1, 2, None).unwrap().fingerprints(4).unwrap(), reference);
    // Without the section registered, the table is refused, naming what is registered.
    let e = Spec::parse(&toml, "s.toml", Path::new("/")).unwrap_err().to_string();
    assert!(e.contains("[sentences] is no built-in table") && e.contains("none in this build"), "{e}");
}

/// Passes records on; at the stage it is registered for.
struct Marker(Stage);

impl Operator for Marker {
    fn name(&self) -> &str {
        match self.0 {
            Stage::Records => "marker_records",
            Stage::Tokens => "marker_tokens",
            Stage::Rows => "marker_rows",
        }
    }
    fn fingerprint(&self) -> Settings {
        Settings::new(self.name(), 1)
    }
    fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.push(r);
        Ok(())
    }
}

struct MarkerSection(Stage, &'static str);

impl Section for MarkerSection {
    fn name(&self) -> &str {
        self.1
    }
    fn stage(&self) -> Stage {
        self.0
    }
    fn build(&self, _: &SectionTable, _: &SectionContext) -> Result<Arc<dyn Operator>, String> {
        Ok(Arc::new(Marker(self.0)))
    }
}

#[test]
fn sections_run_at_their_stage_among_the_built_in_operators() {
    let sections = Sections::new()
        .with(MarkerSection(Stage::Rows, "r"))
        .and_then(|s| s.with(MarkerSection(Stage::Tokens, "t")))
        .and_then(|s| s.with(MarkerSection(Stage::Records, "c")))
        .unwrap();
    let text = crate::spec_text(
        "jsonl",
        4,
        8,
        "",
        "[pack]\nalgorithm = \"best_fit\"\nseq_len = 64\n[shuffle]\nbuffer = 4\n[r]\n[t]\n[c]\n",
    );
    let spec = Spec::parse_with(&text, "s.toml", Path::new("/"), &sections).unwrap();
    let plan = spec.pipeline().unwrap().explain(&spec.topology(1, 0).unwrap()).unwrap();
    let at = |name: &str| plan.find(name).unwrap_or_else(|| panic!("{name} not in {plan}"));
    let (tokenize, pack, shuffle) = (at("tokenize: stateless"), at("pack: accumulator"), at("shuffle: accumulator"));
    assert!(at("marker_records:") < tokenize, "{plan}");
    assert!(tokenize < at("marker_tokens:") && at("marker_tokens:") < pack, "{plan}");
    assert!(pack < at("marker_rows:") && at("marker_rows:") < shuffle, "{plan}");
}

#[test]
fn names_that_are_built_in_or_taken_are_refused() {
    for name in ["pack", "dataset", "seed", ""] {
        let e = Sections::new().with(MarkerSection(Stage::Records, name)).unwrap_err().to_string();
        assert!(e.contains("cannot be registered"), "{name}: {e}");
    }
    let e = sentences().with(SentencesSection).unwrap_err().to_string();
    assert!(e.contains("\"sentences\"") && e.contains("[sentences]"), "{e}");
}

/// Counts the records each lane passes on, per dataset: its state is the counts, and it
/// reports them (and its largest count) through `Operator::report`.
struct Counter;

struct Counts(Vec<u64>);

impl zephon::operator::Accumulator for Counts {
    fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        let d = r.lineage().first_sample().map_or(0, |s| s.dataset as usize);
        if self.0.len() <= d {
            self.0.resize(d + 1, 0);
        }
        self.0[d] += 1;
        out.push(r);
        Ok(())
    }
    fn export(&self) -> zephon::operator::AccumulatorState {
        zephon::operator::AccumulatorState { values: self.0.clone(), buffered: Vec::new() }
    }
    fn import(&mut self, state: zephon::operator::AccumulatorState, _: Vec<Record>) -> Result<(), OpError> {
        self.0 = state.values;
        Ok(())
    }
}

impl Operator for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn fingerprint(&self) -> Settings {
        Settings::new("counter", 1)
    }
    fn kind(&self) -> zephon::operator::OperatorKind {
        zephon::operator::OperatorKind::MapThenAccumulate
    }
    fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> {
        out.push(r);
        Ok(())
    }
    fn accumulator(&self, _: zephon::operator::LaneContext) -> Option<Box<dyn zephon::operator::Accumulator>> {
        Some(Box::new(Counts(Vec::new())))
    }
    fn report(&self, state: &zephon::operator::AccumulatorState, datasets: usize) -> Vec<zephon::operator::Tally> {
        use zephon::operator::Tally;
        let values: Vec<u64> = (0..datasets).map(|d| state.values.get(d).copied().unwrap_or(0)).collect();
        let most = values.iter().copied().max().unwrap_or(0);
        vec![Tally::PerDataset { name: "records_counted", values }, Tally::Peak { name: "most_counted", value: most }]
    }
}

/// A third-party operator's counts reach the run's report by name, through the operator
/// interface: per dataset added up over lanes, a peak the largest over lanes.
#[test]
fn an_operators_own_counts_reach_the_report() {
    let text = crate::spec_text("jsonl", 4, 8, "", "[pack]\nalgorithm = \"best_fit\"\nseq_len = 64\n");
    let spec = crate::parse(&text);
    let pipeline = spec.pipeline().unwrap().then(Counter);
    let mut loader = pipeline.build(spec.topology(1, 0).unwrap()).unwrap();
    for _ in 0..3 {
        loader.next_step().unwrap().unwrap();
    }
    let report = loader.report();
    let counted: Vec<u64> =
        report.datasets.iter().map(|d| d.counts.get("records_counted").copied().unwrap_or(0)).collect();
    assert!(counted.iter().all(|&n| n > 0), "{report:?}");
    let most = report.peaks.get("most_counted").copied().unwrap_or(0);
    assert!(most > 0 && most <= counted.iter().sum::<u64>(), "{report:?}");
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["datasets"][0]["counts"]["records_counted"].as_u64().is_some_and(|n| n > 0), "{json}");
}
