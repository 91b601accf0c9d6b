//! The run's policies for bad records and for the end of finite data: part of what a run
//! computes (its fingerprint), kept apart from the engine so that checkpoints name them without
//! depending on the engine.

/// What to do with a record that is malformed (an [`OpError::Data`](crate::OpError::Data) from a reader or a
/// stateless part).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRecords {
    /// Stop the run with an error naming dataset, shard and row.
    #[default]
    Fail,
    /// Skip the record and count it. The skip is a function of the record alone, so it is the
    /// same on every topology and after every restore.
    Skip,
}

/// What happens when the input ends and a lane cannot fill a whole step.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tail {
    /// The run ends at the first step some lane cannot fill (steps stay fixed-shape).
    #[default]
    Drop,
    /// Steps continue while any lane has rows; lanes give what they have (every sample is
    /// delivered).
    Partial,
}

impl BadRecords {
    /// The policy's name in specs and fingerprints: `fail` or `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            BadRecords::Fail => "fail",
            BadRecords::Skip => "skip",
        }
    }
}

impl Tail {
    /// The policy's name in specs and fingerprints: `drop` or `partial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Tail::Drop => "drop",
            Tail::Partial => "partial",
        }
    }
}
