//! `zephon-fault-proxy UPSTREAM [--latency-ms N] [--rate R] [--seed S] [--stall-s S]`: the
//! seeded fault proxy ([`zephon_testkit::FaultProxy`]) in front of an S3 server, for the
//! benchmarks. Prints its endpoint on the first line of stdout, then the requests it saw and
//! the faults it injected on stderr every ten seconds, until it is killed.

use std::time::Duration;

use zephon_testkit::{FaultProxy, Faults};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(upstream) = args.next() else {
        eprintln!("usage: zephon-fault-proxy UPSTREAM [--latency-ms N] [--rate R] [--seed S] [--stall-s S]");
        std::process::exit(2);
    };
    let mut faults = Faults::none();
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = |v: &str| -> f64 {
            v.parse().unwrap_or_else(|_| {
                eprintln!("{flag}: not a number: {v:?}");
                std::process::exit(2)
            })
        };
        match flag.as_str() {
            "--latency-ms" => faults.latency = Duration::from_secs_f64(number(&value) / 1000.0),
            "--rate" => faults.rate = number(&value),
            "--seed" => faults.seed = number(&value) as u64,
            "--stall-s" => faults.stall = Duration::from_secs_f64(number(&value)),
            other => {
                eprintln!("unknown flag {other}");
                std::process::exit(2);
            }
        }
    }
    let proxy = FaultProxy::start(&upstream, faults).unwrap_or_else(|e| {
        eprintln!("cannot start the proxy: {e}");
        std::process::exit(1)
    });
    println!("{}", proxy.endpoint());
    loop {
        std::thread::sleep(Duration::from_secs(10));
        let c = proxy.counts();
        eprintln!("requests {} faults {}", c.requests.load(std::sync::atomic::Ordering::Relaxed), c.total());
    }
}
