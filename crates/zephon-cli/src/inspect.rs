//! `zephon inspect`: which documents (dataset, shard, row, token range) made each row of a
//! step.

use std::path::PathBuf;

use zephon::Value;
use zephon::operator::columns;

use crate::CliError;
use crate::run::resolve_checkpoint;

pub struct InspectArgs {
    pub spec: PathBuf,
    pub step: u64,
    pub resume_from: Option<PathBuf>,
    pub threads: Option<usize>,
}

pub fn inspect(args: &InspectArgs) -> Result<(), CliError> {
    let spec = crate::read_spec(&args.spec)?;
    let topology = spec.topology(1, 0)?;
    let mut exec = spec.exec();
    if let Some(t) = args.threads {
        exec.threads = t;
    }
    let pipeline = spec.pipeline()?.exec(exec);
    let mut loader = match &args.resume_from {
        Some(dir) => pipeline.restore(topology, &resolve_checkpoint(dir, spec.lanes)?)?,
        None => pipeline.build(topology)?,
    };
    if loader.position().0 > args.step {
        return Err(CliError::Usage(format!(
            "the checkpoint is at step {}, after step {}",
            loader.position().0,
            args.step
        )));
    }
    let names = loader.dataset_names();
    let shards: Vec<Vec<String>> = (0..names.len()).map(|d| loader.shard_paths(d)).collect();
    loop {
        let step =
            loader.next_step()?.ok_or_else(|| CliError::Usage(format!("the data ends before step {}", args.step)))?;
        if step.step().0 < args.step {
            continue;
        }
        println!("step {} ({} rows, fingerprint {})", step.step().0, step.len(), step.local_fingerprint());
        for lane in step.lanes() {
            for (i, row) in lane.rows().iter().enumerate() {
                let tokens = match row.get("num_tokens") {
                    Some(Value::Int(n)) => format!("{n} tokens"),
                    _ => String::new(),
                };
                println!("  lane {} row {i}: {} segment(s) {tokens}", lane.lane().0, row.lineage().fragments().len());
                for f in row.lineage().fragments() {
                    let d = f.sample.dataset as usize;
                    let name = names.get(d).map_or("?", String::as_str);
                    let shard = shards.get(d).and_then(|s| s.get(f.sample.shard as usize)).map_or("?", String::as_str);
                    let extent = match f.positions() {
                        Some(p) => format!("tokens {p}"),
                        None => "whole".to_string(),
                    };
                    println!("    {name} shard {} row {} {extent}  {shard}", f.sample.shard, f.sample.row);
                }
                // Images (and other attachments): which sample, which of its images, and from where.
                for a in row.attachments() {
                    let frag = match a.get("segment") {
                        Some(Value::Int(k)) => row.lineage().fragments().get((*k as usize).saturating_sub(1)),
                        _ => row.lineage().fragments().first(),
                    };
                    let Some(f) = frag else { continue };
                    let d = f.sample.dataset as usize;
                    let name = names.get(d).map_or("?", String::as_str);
                    let source = match a.get(columns::IMAGE_SOURCE) {
                        Some(Value::Str(s)) => s.to_string(),
                        _ => "?".into(),
                    };
                    let span = a.span().map_or("unplaced".to_string(), |s| format!("tokens {s}"));
                    println!(
                        "    {} #{} of {name} shard {} row {}: {source}, {span}",
                        a.kind(),
                        a.item(),
                        f.sample.shard,
                        f.sample.row
                    );
                }
            }
        }
        return Ok(());
    }
}
