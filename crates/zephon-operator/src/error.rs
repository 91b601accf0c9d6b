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

impl OpError {
    /// The same message as an error that stops the run: for a caller to whom a record that
    /// cannot be cut is a bug of its own, not bad data.
    #[must_use]
    pub fn fatal(self) -> OpError {
        match self {
            OpError::Data(m) | OpError::Fatal(m) => OpError::Fatal(m),
        }
    }
}
