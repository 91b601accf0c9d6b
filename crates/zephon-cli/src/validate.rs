//! `zephon validate`: one rank of the spec's validation pass, with its own report of what it
//! read.

use std::collections::BTreeMap;
use std::path::PathBuf;

use zephon::lane_core::HashLogLine;

use crate::CliError;
use crate::run::topology;

/// What `validate` was asked to do.
#[derive(Clone, Debug, clap::Args)]
pub struct ValidateArgs {
    #[arg(long)]
    pub spec: PathBuf,
    #[arg(long)]
    pub world_size: Option<u32>,
    #[arg(long)]
    pub rank: Option<u32>,
    /// Write each step's lane digests here (step, lane, SHA-256), as `run --hash-log` does.
    #[arg(long)]
    pub hash_log: Option<PathBuf>,
    /// Write the report here as JSON.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

/// What a validation pass read on this rank.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ValidateReport {
    /// Steps of the pass (the same on every rank).
    pub steps: u64,
    /// Rows of records this rank delivered, and padding rows.
    pub rows: u64,
    pub padding_rows: u64,
    /// Records (documents or conversations) per dataset, and their tokens.
    pub records: BTreeMap<String, u64>,
    pub tokens: BTreeMap<String, u64>,
    /// What the lanes left out (bad records skipped, conversations truncated or skipped).
    pub data: zephon::DataReport,
}

pub fn validate(args: &ValidateArgs) -> Result<ValidateReport, CliError> {
    let spec = crate::read_spec(&args.spec)?;
    let validation = spec
        .validation()?
        .ok_or_else(|| CliError::Usage(format!("{} has no [validation] table", args.spec.display())))?;
    let topology = topology(&spec, args.world_size, args.rank)?;
    let mut loader = validation.build(topology)?;
    let names: Vec<String> = spec.validation.iter().flat_map(|v| v.datasets.iter().map(|d| d.name.clone())).collect();
    let mut report = ValidateReport { steps: loader.steps(), ..ValidateReport::default() };
    let mut log = String::new();
    while let Some(step) = loader.next_step()? {
        for row in step.rows() {
            let Some(d) = row.lineage().first_sample().map(|s| s.dataset as usize) else { continue };
            let name = names.get(d).cloned().unwrap_or_else(|| format!("#{d}"));
            report.rows += 1;
            *report.records.entry(name.clone()).or_default() += 1;
            *report.tokens.entry(name).or_default() += step_tokens_of(row);
        }
        for (lane, digest) in step.lane_digests() {
            log.push_str(&format!("{}\n", HashLogLine { step: step.step(), lane, digest }));
        }
    }
    report.padding_rows = loader.padding_rows();
    report.data = loader.report();
    if let Some(path) = &args.hash_log {
        zephon::lane_core::disk::write_atomic(path, |f| std::io::Write::write_all(f, log.as_bytes()))
            .map_err(|e| CliError::Io(path.clone(), e))?;
    }
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report).unwrap_or_default();
        crate::write_file(path, json)?;
    }
    for line in report.data.lines() {
        eprintln!("zephon: {line}");
    }
    Ok(report)
}

/// Non-pad tokens of a row (rows made by the packer carry `num_tokens`).
fn step_tokens_of(row: &zephon::Record) -> u64 {
    match row.get("num_tokens") {
        Some(zephon::Value::Int(n)) => *n as u64,
        _ => 0,
    }
}
