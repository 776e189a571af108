//! The write-load client (tests/load/writeload.rs) as the tests run it beside a verb: etcd's
//! writer, NATS's publisher, each following the pods to their new addresses.

use super::*;

/// Numbers each load's first-acknowledgement file.
static FIRST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The write-load client (tests/load/writeload.rs, built by `cargo test` as an example):
/// one sequential writer against every etcd member's pod IP, counting failed attempts (each
/// retried on the next member), lost writes and slow writes.
pub struct Load {
    child: std::process::Child,
    /// With `start_following`: the thread that keeps the endpoints file current.
    follower: Option<Follower>,
}

/// A stop flag and the thread it stops.
type Follower = (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
);

/// The client URLs of the etcd pods that run and are not being deleted.
fn live_etcd_endpoints(ns: &str) -> Vec<String> {
    etcd_pods(ns)
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["status"]["podIP"].as_str())
        .map(|ip| format!("http://{ip}:2379"))
        .collect()
}

pub fn example_bin(name: &str) -> PathBuf {
    // target/debug/deps/<test> -> target/debug/examples/<name>
    let exe = std::env::current_exe().expect("test executable");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: `cargo test` builds examples; run `cargo build --example {name}`",
        bin.display()
    );
    bin
}

impl Load {
    pub fn start(ns: &str) -> Self {
        let endpoints: Vec<String> = etcd_pods(ns)
            .iter()
            .filter_map(|p| p["status"]["podIP"].as_str())
            .map(|ip| format!("http://{ip}:2379"))
            .collect();
        assert!(!endpoints.is_empty(), "etcd pods with IPs in {ns}");
        Load::spawn(&["--endpoints", &endpoints.join(",")], None)
    }

    fn spawn(args: &[&str], follower: Option<Follower>) -> Self {
        Load::spawn_for(args, follower, Duration::from_secs(300))
    }

    fn spawn_for(args: &[&str], follower: Option<Follower>, duration: Duration) -> Self {
        let first = std::env::temp_dir().join(format!(
            "writeload-first-{}-{}",
            std::process::id(),
            FIRST.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let _ = std::fs::remove_file(&first);
        let child = Command::new(example_bin("writeload"))
            .args(args)
            .args([
                "--duration",
                &format!("{}s", duration.as_secs()),
                "--first-ack-file",
                first.to_str().unwrap(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start writeload");
        let mut load = Load { child, follower };
        // Nothing happens before the system has acknowledged a write.
        wait_until(
            Duration::from_secs(60),
            "the write load's first acknowledged write",
            || first.exists() || load.child.try_wait().ok().flatten().is_some(),
        );
        let _ = std::fs::remove_file(&first);
        load
    }

    /// Like `start`, but the writer follows members to their new addresses (a drain replaces
    /// pods): a thread rewrites its endpoints file from the live pods every 300 ms.
    pub fn start_following(ns: &str) -> Self {
        Load::start_following_for(ns, Duration::from_secs(300))
    }

    /// `start_following` for a run longer than the usual 300 s (the nemesis' schedules).
    pub fn start_following_for(ns: &str, duration: Duration) -> Self {
        let (file, follower) = follow(ns, "endpoints", live_etcd_endpoints);
        Load::spawn_for(
            &["--endpoints-file", file.to_str().unwrap()],
            Some(follower),
            duration,
        )
    }

    /// NATS: publishes to stream `stream` as the account APP's user, through a client that
    /// knows every server's address as it was at the start (a NATS client's server list);
    /// the stream's leader is watched on the monitor ports of the servers as they are.
    pub fn start_nats(ns: &str, stream: &str) -> Self {
        let servers: Vec<String> = live_nats_urls(ns, 4222, "nats");
        let (file, follower) = follow(ns, "monitors", |ns| live_nats_urls(ns, 8222, "http"));
        Load::spawn(
            &[
                "--nats",
                &servers.join(","),
                "--monitors-file",
                file.to_str().unwrap(),
                "--stream",
                stream,
                "--user",
                "app",
                "--password",
                "app",
            ],
            Some(follower),
        )
    }
}

/// `scheme://IP:port` of each NATS server that runs and is not being deleted.
fn live_nats_urls(ns: &str, port: u16, scheme: &str) -> Vec<String> {
    let pods = kubectl_json(&["get", "pods", "-n", ns, "-l", "app=nats"]);
    pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|p| p["status"]["podIP"].as_str())
        .map(|ip| format!("{scheme}://{ip}:{port}"))
        .collect()
}

/// A file `name` of addresses kept current from `live` every 300 ms by a thread, until the
/// returned flag is set.
fn follow(ns: &str, name: &str, live: fn(&str) -> Vec<String>) -> (PathBuf, Follower) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let file = scratch_dir(ns).join(name);
    std::fs::write(&file, live(ns).join(",")).expect("endpoints file");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let thread = {
        let (stop, file, ns) = (stop.clone(), file.clone(), ns.to_string());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let eps = live(&ns);
                if !eps.is_empty() {
                    let tmp = file.with_extension("tmp");
                    if std::fs::write(&tmp, eps.join(",")).is_ok() {
                        let _ = std::fs::rename(&tmp, &file);
                    }
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    (file, (stop, thread))
}

impl Load {
    /// Stops the writer; its summary: writes, ok, acknowledged, readBack, lost (acknowledged
    /// and not read back from the system), givenUp, failed, slow, longestStallMs, p99Ms, ...
    /// A load that had no write acknowledged, or whose writes could not be read back, proves
    /// nothing of "no write lost": that fails here, whatever the test asserts next.
    pub fn finish(mut self) -> Value {
        if let Some((stop, thread)) = self.follower.take() {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = thread.join();
        }
        signal(self.child.id() as i32, "TERM");
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().expect("true"))
            .wait_with_output()
            .expect("writeload output");
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "writeload printed no summary ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        assert!(
            summary["acknowledged"].as_u64().unwrap_or(0) > 0,
            "the write load had no write acknowledged: {summary}"
        );
        assert!(
            summary["readBackError"].is_null(),
            "the acknowledged writes could not be read back: {summary}"
        );
        summary
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some((stop, _)) = &self.follower {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
