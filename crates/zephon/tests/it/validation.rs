//! A validation pass from the spec, on real documents and on real conversations: every record
//! exactly once, one a row, the same steps at every world size and across a resume at another,
//! the last step padded so that every rank ends after the same step.

use std::collections::BTreeMap;

use zephon::lane_core::testing::{Rank, Ranks};
use zephon::{Error, Spec, ValidationLoader, Value};
use zephon_core::LocalStep;
use zephon_operator::{SampleId, Step};

use crate::{one_line_documents, parse, spec_text, tmp};

/// A validation loader is a rank as a loader is: the core's runner drives it.
impl Rank for Wrapped {
    type Error = Error;
    fn next_step(&mut self) -> Result<Option<LocalStep>, Error> {
        self.0.next_step()
    }
    fn position(&self) -> Step {
        Step(self.0.position())
    }
    fn checkpoint(&self, dir: &std::path::Path) -> Result<(), Error> {
        self.0.checkpoint(dir).map(|_| ())
    }
}

struct Wrapped(ValidationLoader);

fn ranks(spec: &Spec, w: u32, resume: Option<&std::path::Path>) -> Ranks<Wrapped> {
    Ranks::start(w, |rank| {
        let v = spec.validation()?.expect("the spec has [validation]");
        let t = spec.topology(w, rank)?;
        Ok::<_, Error>(Wrapped(match resume {
            Some(dir) => v.restore(t, dir)?,
            None => v.build(t)?,
        }))
    })
    .unwrap()
}

/// The corpus A documents of `held_out` as a validation set of a run over corpora A and B.
fn validation_spec(held_out: &std::path::Path) -> String {
    spec_text(
        "jsonl",
        4,
        8,
        "",
        "[pack]\nalgorithm = \"best_fit\"\nseq_len = 64\npad_id = 50256\n[shuffle]\nbuffer = 4\n",
    ) + &format!("\n[validation]\n\n[[validation.dataset]]\nname = \"held-out\"\npath = \"{}\"\n", held_out.display())
}

#[test]
fn every_record_once_the_same_steps_everywhere_and_every_rank_ends_together() {
    let dir = tmp();
    let held_out = one_line_documents(dir.path(), 20..120, 301);
    let spec = parse(&validation_spec(&held_out));
    // Every record once, one a row, in the order the datasets list them.
    let mut seen: BTreeMap<SampleId, usize> = BTreeMap::new();
    let mut padding = 0;
    let mut one = ranks(&spec, 1, None);
    let steps = one
        .steps(1000, |parts| {
            for row in parts.iter().flat_map(|p| p.rows()) {
                match row.lineage().first_sample() {
                    Some(s) => *seen.entry(s).or_default() += 1,
                    None => {
                        padding += 1;
                        let mask = row.get("loss_mask").and_then(Value::as_array).and_then(|a| a.as_u8()).unwrap();
                        assert!(mask.iter().all(|&m| m == 0), "padding is never trained on");
                    }
                }
            }
        })
        .unwrap()
        .len();
    assert!(seen.values().all(|&n| n == 1), "a record came twice");
    assert_eq!(seen.len(), 301, "every record, none skipped");
    // 301 records over 4 lanes: 76 rows on lane 0, 75 on the others; 2 rows a lane a step.
    assert_eq!((steps, padding), (38, 38 * 8 - seen.len()));
    let reference = ranks(&spec, 1, None).fingerprints(100).unwrap();
    assert_eq!(reference.len(), 38);
    for w in [2, 4] {
        // Every rank delivers every step, padding or not, and ends after the same one.
        assert_eq!(ranks(&spec, w, None).fingerprints(100).unwrap(), reference, "W={w}");
    }
    let ckpt = tmp();
    let mut two = ranks(&spec, 2, None);
    let mut got = two.fingerprints(20).unwrap();
    two.checkpoint(ckpt.path()).unwrap();
    got.extend(ranks(&spec, 4, Some(ckpt.path())).fingerprints(100).unwrap());
    assert_eq!(got, reference);
}

/// After its records ran out a rank delivers only padding, and a checkpoint then is refused,
/// saying so.
#[test]
fn a_rank_whose_records_ran_out_pads_and_refuses_a_checkpoint() {
    let dir = tmp();
    let held_out = one_line_documents(dir.path(), 20..120, 13);
    let spec = parse(&validation_spec(&held_out));
    let mut loaders: Vec<ValidationLoader> =
        (0..4).map(|r| spec.validation().unwrap().unwrap().build(spec.topology(4, r).unwrap()).unwrap()).collect();
    // 13 records: lane 0 has 4, the others 3; 2 rows a lane a step: 2 steps.
    assert!(loaders.iter().all(|l| l.steps() == 2));
    for l in &mut loaders {
        assert!(l.next_step().unwrap().is_some() && l.next_step().unwrap().is_some());
        assert!(l.next_step().unwrap().is_none(), "every rank ends after step 1");
    }
    let e = loaders[3].checkpoint(dir.path()).unwrap_err().to_string();
    assert!(e.contains("only padding steps are left"), "{e}");
}

/// What a validation pass cannot do is refused when the spec is read.
#[test]
fn validation_settings_that_cannot_work_are_refused() {
    let dir = tmp();
    let held_out = one_line_documents(dir.path(), 20..120, 10);
    let base = validation_spec(&held_out);
    for (text, want) in [
        (base.replace("\n[pack]\nalgorithm", "\n[no_pack]\nalgorithm"), "unknown field"),
        (base.replace("name = \"held-out\"", "name = \"held-out\"\nweight = 2.0"), "do not apply"),
        (base.replace("[validation]\n", "[validation]\nrows_per_step = 6\n"), "multiple of lanes"),
    ] {
        let e = Spec::parse(&text, "v.toml", std::path::Path::new("/")).unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?}: {e}");
    }
    let no_pack = spec_text("jsonl", 4, 8, "", "")
        + &format!("\n[validation]\n[[validation.dataset]]\nname = \"v\"\npath = \"{}\"\n", held_out.display());
    let e = Spec::parse(&no_pack, "v.toml", std::path::Path::new("/")).unwrap_err().to_string();
    assert!(e.contains("[validation] needs [pack]"), "{e}");
}
