//! How remote reads meet faults: every request is tried again after a backoff with jitter when
//! the store was slow or the connection failed, and a read that stops making progress is cut
//! by a stall timeout, not by a whole-request timeout (which either kills large reads or never
//! fires).
//!
//! - Tried again: 5xx and 429 answers (S3's `SlowDown`), resets, bodies cut short, stalls.
//!   Not tried again: a missing object, refused credentials, a changed ETag (412): the store
//!   answered, and asking again gives the same answer.
//! - A retry reads the same range of the same version (every read is conditional on the ETag
//!   the object was opened with), so retries never change bytes.
//! - When the tries run out, the error names the object, the range and the last failure.

use std::fmt;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

/// The retry and stall settings of a store.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Patience {
    /// Tries after the first.
    pub(crate) retries: u32,
    /// How long a request may go without a byte arriving.
    pub(crate) stall: Duration,
    /// The first backoff; each next doubles, up to `max_backoff`.
    pub(crate) backoff: Duration,
    pub(crate) max_backoff: Duration,
}

impl Patience {
    pub(crate) fn of(options: &crate::StorageOptions) -> Patience {
        Patience {
            retries: options.retries(),
            stall: options.stall_timeout(),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }

    /// The pause before retry `attempt` (1 = the first): the backoff doubling from its first
    /// value up to its cap, of which half is drawn at random (jitter), so that the ranks of a
    /// node that failed together do not come back together.
    fn pause(&self, attempt: u32) -> Duration {
        let cap = self.backoff.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(self.max_backoff);
        cap.mul_f64(jitter())
    }
}

/// A number in [0.5, 1): half the backoff is kept, the other half drawn.
fn jitter() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    // Clock and a counter: different in every process and every call, which is all jitter needs.
    let seed = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
        ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = seed;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    0.5 + ((x ^ (x >> 31)) >> 11) as f64 / (1u64 << 54) as f64
}

/// Why one try failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The store's error.
    Store(object_store::Error),
    /// No byte for the stall timeout.
    Stall(Duration),
    /// A body shorter or longer than the range asked.
    Length { got: u64, want: u64 },
}

/// Whether asking again may give another answer.
fn transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    match e {
        E::NotFound { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::AlreadyExists { .. }
        | E::UnknownConfigurationKey { .. } => false,
        // A status the store chose (4xx other than a timeout or too many requests) is its
        // answer; anything else (5xx, 429, no answer, a body cut) is worth asking again.
        e => !client_error(&e.to_string()),
    }
}

/// Whether `message` carries a 4xx status other than 408 and 429.
fn client_error(message: &str) -> bool {
    const MARK: &str = "status code: ";
    message.match_indices(MARK).any(|(i, _)| {
        let code = &message[i + MARK.len()..];
        code.starts_with('4') && !code.starts_with("408") && !code.starts_with("429")
    })
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Store(e) => write!(f, "{e}"),
            Failure::Stall(d) => write!(f, "no byte arrived for {:.1} s (the stall timeout)", d.as_secs_f64()),
            Failure::Length { got, want } => write!(f, "the body held {got} bytes instead of {want}"),
        }
    }
}

/// Counters of retries, for reports.
#[derive(Debug, Default)]
pub(crate) struct RetryStats {
    pub(crate) retries: AtomicU64,
    pub(crate) stalls: AtomicU64,
}

/// Runs `attempt` until it succeeds, fails for good, or the tries run out. Errors name
/// `location` and, for a ranged read, `range`.
pub(crate) async fn patiently<T, F, Fut>(
    patience: Patience,
    stats: &RetryStats,
    location: &str,
    range: Option<&Range<u64>>,
    mut attempt: F,
) -> io::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let start = Instant::now();
    let mut tries = 0u32;
    loop {
        tries += 1;
        let failure = match attempt().await {
            Ok(v) => return Ok(v),
            Err(f) => f,
        };
        if let Failure::Stall(_) = failure {
            stats.stalls.fetch_add(1, Ordering::Relaxed);
        }
        match failure {
            Failure::Store(e) if !transient(&e) => return Err(super::store_error(location, e)),
            _ if tries > patience.retries => {
                let what =
                    range.map_or_else(|| location.to_string(), |r| format!("{location} bytes {}..{}", r.start, r.end));
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{what}: gave up after {tries} tries in {:.1} s; the last: {failure}",
                        start.elapsed().as_secs_f64()
                    ),
                ));
            }
            _ => {}
        }
        stats.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(patience.pause(tries)).await;
    }
}

/// The bytes of a ranged read, each wait for the answer and for the next piece of the body cut
/// by the stall timeout.
pub(crate) async fn read_all(
    stall: Duration,
    want: u64,
    get: impl Future<Output = object_store::Result<object_store::GetResult>>,
) -> Result<Vec<u8>, Failure> {
    let result = tokio::time::timeout(stall, get).await.map_err(|_| Failure::Stall(stall))?.map_err(Failure::Store)?;
    let mut body = result.into_stream();
    let mut out = Vec::with_capacity(want as usize);
    loop {
        match tokio::time::timeout(stall, body.next()).await {
            Err(_) => return Err(Failure::Stall(stall)),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(Failure::Store(e)),
            Ok(Some(Ok(piece))) => out.extend_from_slice(&piece),
        }
    }
    if out.len() as u64 != want {
        return Err(Failure::Length { got: out.len() as u64, want });
    }
    Ok(out)
}

/// `fut` cut by the stall timeout (an answer without a body: metadata, a listing page).
pub(crate) async fn within<T>(
    stall: Duration,
    fut: impl Future<Output = object_store::Result<T>>,
) -> Result<T, Failure> {
    tokio::time::timeout(stall, fut).await.map_err(|_| Failure::Stall(stall))?.map_err(Failure::Store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_are_answers_and_the_rest_is_asked_again() {
        assert!(client_error("Server returned non-2xx status code: 400 Bad Request: "));
        assert!(!client_error("Server returned non-2xx status code: 429 Too Many Requests: "));
        assert!(!client_error("Server returned non-2xx status code: 503 Service Unavailable: SlowDown"));
        assert!(!client_error("error sending request: connection reset"));
    }

    #[test]
    fn backoff_grows_to_its_cap_with_jitter() {
        let p = Patience {
            retries: 3,
            stall: Duration::from_secs(1),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        for attempt in 1..20 {
            let cap = Duration::from_millis(100).saturating_mul(1 << (attempt - 1).min(16)).min(Duration::from_secs(1));
            let d = p.pause(attempt);
            assert!(d >= cap / 2 && d <= cap, "{attempt}: {d:?}");
        }
    }
}
