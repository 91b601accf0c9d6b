//! The one error an operator returns.

/// The error an operator or reader returns for one record.
///
/// `Data` errors are about the record (malformed, empty, too long): the run's bad-record policy
/// decides whether they stop the run or are skipped and counted. `Fatal` errors always stop it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// The record is bad; skippable under a skip policy.
    #[error("{0}")]
    Data(String),
    /// Something other than this record is wrong; never skipped.
    #[error("{0}")]
    Fatal(String),
}
