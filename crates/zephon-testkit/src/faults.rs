//! A seeded fault proxy: an HTTP/1.1 proxy between a loader and an object store that injects
//! the faults object stores really have (503 SlowDown, a connection reset after some body
//! bytes, a stall, a truncated body, objects replaced between requests) and a latency per
//! request. Tests and the benchmarks (`zephon-fault-proxy`) put it in front of moto.
//!
//! Which request gets which fault is a function of the seed and the request's number, so a
//! run's fault rate is what it asks for; which of the loader's requests come first depends on
//! its threads, so the faults a given read meets do not repeat exactly, and need not: retries
//! must never change bytes.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One kind of fault.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `503 Slow Down` with S3's `SlowDown` error body, no byte of the object.
    SlowDown,
    /// The response head and part of the body, then a TCP reset.
    Reset,
    /// The response head and part of the body, then nothing for [`Faults::stall`], then the
    /// connection closes.
    Stall,
    /// The response head announcing the whole body, part of it, then a clean close.
    Truncate,
}

impl Fault {
    /// Every kind.
    pub const ALL: [Fault; 4] = [Fault::SlowDown, Fault::Reset, Fault::Stall, Fault::Truncate];

    fn index(self) -> usize {
        Fault::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }
}

/// What the proxy does to the requests it passes.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Seeds which requests get a fault, and which.
    pub seed: u64,
    /// The share of GET and HEAD requests that get a fault (0 to 1).
    pub rate: f64,
    /// The kinds drawn from, uniformly.
    pub kinds: Vec<Fault>,
    /// How long a stalled response sends nothing before it closes.
    pub stall: Duration,
    /// Latency added before every response.
    pub latency: Duration,
}

impl Faults {
    /// No fault, no latency: a plain proxy.
    pub fn none() -> Faults {
        Faults {
            seed: 0,
            rate: 0.0,
            kinds: Fault::ALL.to_vec(),
            stall: Duration::from_secs(30),
            latency: Duration::ZERO,
        }
    }

    /// `rate` of the requests get one of every kind of fault, drawn by `seed`.
    pub fn at_rate(seed: u64, rate: f64) -> Faults {
        Faults { seed, rate, ..Faults::none() }
    }

    /// The fault of request `n`, if any.
    fn of(&self, n: u64) -> Option<Fault> {
        if self.kinds.is_empty() || self.rate <= 0.0 {
            return None;
        }
        let h = splitmix(self.seed ^ splitmix(n));
        let draw = (h >> 11) as f64 / (1u64 << 53) as f64;
        (draw < self.rate).then(|| self.kinds[(splitmix(h) % self.kinds.len() as u64) as usize])
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What the proxy has done so far.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Requests received.
    pub requests: AtomicU64,
    /// Faults injected, by kind (in [`Fault::ALL`] order).
    pub faults: [AtomicU64; 4],
    /// Reads refused because the object looked replaced.
    pub replaced: AtomicU64,
    /// Stalled responses whose client gave up (closed the connection) before the stall ended.
    pub stalls_abandoned: AtomicU64,
}

impl FaultCounts {
    /// Faults of `kind` injected.
    pub fn of(&self, kind: Fault) -> u64 {
        self.faults[kind.index()].load(Ordering::Relaxed)
    }

    /// Every fault injected.
    pub fn total(&self) -> u64 {
        self.faults.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A running proxy on a loopback port; stops accepting when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    counts: Arc<FaultCounts>,
    stop: Arc<AtomicBool>,
    replaced: Arc<AtomicBool>,
}

impl FaultProxy {
    /// A proxy to `upstream` (`127.0.0.1:PORT` or `http://127.0.0.1:PORT`) doing `faults`.
    pub fn start(upstream: &str, faults: Faults) -> io::Result<FaultProxy> {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(FaultCounts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let replaced = Arc::new(AtomicBool::new(false));
        let (c, s, r) = (counts.clone(), stop.clone(), replaced.clone());
        let faults = Arc::new(faults);
        std::thread::Builder::new().name("fault-proxy".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (up, f, c, r) = (upstream.clone(), faults.clone(), c.clone(), r.clone());
                let _ = std::thread::Builder::new()
                    .name("fault-proxy-conn".into())
                    .spawn(move || serve(conn, &up, &f, &c, &r));
            }
        })?;
        Ok(FaultProxy { addr, counts, stop, replaced })
    }

    /// From now on every object looks replaced: responses carry another ETag, and a read
    /// conditional on the old one is refused with `412 Precondition Failed`.
    pub fn replace_objects(&self) {
        self.replaced.store(true, Ordering::Relaxed);
    }

    /// `http://127.0.0.1:PORT`, the endpoint a loader is given.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it has done so far.
    pub fn counts(&self) -> &FaultCounts {
        &self.counts
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// An HTTP message: its head lines and body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn set_header(&mut self, name: &str, value: String) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value));
    }

    fn head_bytes(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// Reads a message head, its body not yet (`None` at a clean end of the connection).
fn read_head(r: &mut impl BufRead) -> io::Result<Option<Message>> {
    let mut start = String::new();
    if r.read_line(&mut start)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a message head cut short"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok(Some(Message { start: start.trim_end().to_string(), headers, body: Vec::new() }))
}

/// Reads a body as its head describes it: a length, chunks, or (a response) to the end.
fn read_body(r: &mut impl BufRead, m: &Message, response_to_head: bool) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if response_to_head {
        return Ok(body);
    }
    if m.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                return Ok(body);
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    match m.header("content-length") {
        Some(n) => {
            let n: usize = n.parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        }
        None if m.start.starts_with("HTTP/") => {
            r.read_to_end(&mut body)?;
        }
        None => {}
    }
    Ok(body)
}

/// Serves one client connection, request after request.
fn serve(
    client: TcpStream,
    upstream: &str,
    faults: &Faults,
    counts: &FaultCounts,
    replaced: &AtomicBool,
) -> io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    while let Some(mut request) = read_head(&mut reader)? {
        request.body = read_body(&mut reader, &request, false)?;
        let n = counts.requests.fetch_add(1, Ordering::Relaxed);
        let method = request.start.split(' ').next().unwrap_or("").to_string();
        let is_read = method == "GET" || method == "HEAD";
        if !faults.latency.is_zero() {
            std::thread::sleep(faults.latency);
        }
        let replaced = is_read && replaced.load(Ordering::Relaxed);
        if replaced && request.header("if-match").is_some() {
            counts.replaced.fetch_add(1, Ordering::Relaxed);
            let body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>PreconditionFailed</Code>\
                         <Message>At least one of the pre-conditions you specified did not hold</Message></Error>";
            respond(&mut client, "HTTP/1.1 412 Precondition Failed", body)?;
            continue;
        }
        let fault = if is_read { faults.of(n) } else { None };
        if fault == Some(Fault::SlowDown) {
            counts.faults[Fault::SlowDown.index()].fetch_add(1, Ordering::Relaxed);
            let body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
                         <Message>Please reduce your request rate.</Message></Error>";
            respond(&mut client, "HTTP/1.1 503 Slow Down", body)?;
            continue;
        }
        let mut response = forward(upstream, &mut request)?;
        if replaced && let Some(etag) = response.header("etag").map(|e| format!("\"replaced-{}\"", e.trim_matches('"')))
        {
            response.set_header("ETag", etag);
        }
        let head = response.head_bytes();
        let body_len = if method == "HEAD" { 0 } else { response.body.len() };
        match fault {
            Some(kind @ (Fault::Reset | Fault::Stall | Fault::Truncate)) if body_len > 1 => {
                counts.faults[kind.index()].fetch_add(1, Ordering::Relaxed);
                client.write_all(&head)?;
                client.write_all(&response.body[..body_len / 2])?;
                client.flush()?;
                match kind {
                    Fault::Reset => {
                        // A linger of zero makes the close a reset.
                        socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO))?;
                    }
                    Fault::Stall if client_gone_within(&client, faults.stall) => {
                        counts.stalls_abandoned.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
                let _ = client.shutdown(Shutdown::Both);
                return Ok(());
            }
            _ => {
                client.write_all(&head)?;
                if method != "HEAD" {
                    client.write_all(&response.body)?;
                }
                client.flush()?;
            }
        }
    }
    Ok(())
}

/// Waits up to `limit` for the client to close its side; whether it did.
fn client_gone_within(client: &TcpStream, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    let mut buf = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || client.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match (&*client).read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

/// Passes `request` to the server on a connection of its own and reads the whole response.
fn forward(upstream: &str, request: &mut Message) -> io::Result<Message> {
    let mut up = TcpStream::connect(upstream)?;
    request.set_header("Connection", "close".into());
    if !request.body.is_empty() || request.header("content-length").is_some() {
        request.set_header("Content-Length", request.body.len().to_string());
    }
    request.headers.retain(|(k, _)| !k.eq_ignore_ascii_case("transfer-encoding"));
    up.write_all(&request.head_bytes())?;
    up.write_all(&request.body)?;
    up.flush()?;
    let mut reader = BufReader::new(up);
    let mut response = read_head(&mut reader)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed without a response"))?;
    let to_head = request.start.starts_with("HEAD ");
    response.body = read_body(&mut reader, &response, to_head)?;
    // The client keeps its connection: the body goes with its length.
    response
        .headers
        .retain(|(k, _)| !k.eq_ignore_ascii_case("connection") && !k.eq_ignore_ascii_case("transfer-encoding"));
    if !to_head {
        response.set_header("Content-Length", response.body.len().to_string());
    }
    Ok(response)
}

/// A whole response of `status` with an XML `body`.
fn respond(client: &mut TcpStream, status: &str, body: &[u8]) -> io::Result<()> {
    let head = format!("{status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n", body.len());
    client.write_all(head.as_bytes())?;
    client.write_all(body)?;
    client.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_of_faults_is_the_rate_asked() {
        let f = Faults::at_rate(7, 0.1);
        let hit = (0..100_000).filter(|&n| f.of(n).is_some()).count();
        assert!((9_000..11_000).contains(&hit), "{hit}");
        let kinds: std::collections::HashSet<_> = (0..1000).filter_map(|n| f.of(n)).collect();
        assert_eq!(kinds.len(), 4, "every kind is drawn");
        assert_eq!((0..1000).filter_map(|n| Faults::none().of(n)).count(), 0);
    }
}
