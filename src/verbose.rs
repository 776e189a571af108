//! `-v` / `--v=N`, as kubectl's: what the plugin sends, on stderr, through `tracing`.
//!
//! - 0–3: nothing besides what the verbs print;
//! - 4: the plugin's own debug events;
//! - 6 and up: every API request (kube-rs' spans: method, URL, status, time) and every request
//!   to a replica (method, pod, port, the profile's path, status or failure, time).
//!
//! Never a header, a body or a credential at any level: a replica request is logged by its
//! profile's path (credentials only ever go in headers, their `${NAME}`s expanded at send time
//! and never kept; a transfer's path holds the target's percent-encoded id) made one line, and
//! a failure by its kind only (a replica's error text may echo what it was sent); the API
//! client carries its token in a header, and a `user:password@` in the server's address is
//! dropped when the configuration is read.

use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

/// The target of the replica requests' events (at TRACE: shown from level 6).
pub const REQUESTS: &str = "kubectl_raft::requests";

/// kube-client's `TraceLayer` (its span per request), and nothing else of kube-client's.
const KUBE_HTTP: &str = "kube_client::client::builder";

/// What a level shows.
pub fn filter(level: u8) -> Targets {
    let mut t = Targets::new();
    if level >= 2 {
        t = t.with_target("kubectl_raft", Level::INFO);
    }
    if level >= 4 {
        t = t.with_target("kubectl_raft", Level::DEBUG);
    }
    if level >= 6 {
        t = t
            .with_target(REQUESTS, Level::TRACE)
            // Only the HTTP span (method, URL, status, time): kube-client's other debug events
            // print answers' bodies (an error's text, a Secret that failed to parse).
            .with_target(KUBE_HTTP, Level::DEBUG);
    }
    t
}

/// The subscriber for `level`, writing to `writer` (stderr in the binary, a buffer in tests).
pub fn subscriber<W>(level: u8, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .with_target(false)
                .with_span_events(FmtSpan::CLOSE)
                .compact(),
        )
        .with(filter(level))
}

/// Installs the level's subscriber for the whole process (nothing below 1).
pub fn init(level: u8) {
    if level == 0 {
        return;
    }
    let _ = tracing::subscriber::set_global_default(subscriber(level, std::io::stderr));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'w self) -> Buffer {
            self.clone()
        }
    }

    fn logged(level: u8, f: impl FnOnce()) -> String {
        let buf = Buffer::default();
        tracing::subscriber::with_default(subscriber(level, buf.clone()), f);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        text
    }

    fn a_request() {
        tracing::trace!(target: REQUESTS, "GET db/etcd-0:2379/health 200 in 3 ms");
    }

    #[test]
    fn level_six_shows_each_replica_request() {
        assert!(logged(6, a_request).contains("GET db/etcd-0:2379/health 200"));
    }

    #[test]
    fn kube_clients_other_debug_events_are_never_shown() {
        let text = logged(10, || {
            tracing::debug!(target: "kube_client::client", "Unsuccessful data error parse: the-body");
            tracing::debug!(target: "kube_client::client::builder", "requesting");
        });
        assert!(!text.contains("the-body"), "{text}");
        assert!(text.contains("requesting"), "{text}");
    }

    #[test]
    fn below_six_no_request_is_shown() {
        for level in 0..6 {
            assert_eq!(logged(level, a_request), "", "level {level}");
        }
    }
}
