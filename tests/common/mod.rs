//! The end-to-end test helper: the real test world (control plane built from Kubernetes'
//! source, pods as processes; tests/world), a namespace per test, and runners for kubectl
//! and the plugin. If the world cannot start, the test fails and says why.
#![allow(dead_code)] // each test binary uses its own part of the helper

pub mod gated;
pub mod kubelet;
pub mod lanes;
pub mod load;
pub mod pki;
pub mod rbac;
pub mod running;
#[allow(unused_imports)] // not every test binary meets the gate
pub use gated::*;
#[allow(unused_imports)]
pub use kubelet::*;
#[allow(unused_imports)]
pub use lanes::*;
#[allow(unused_imports)]
pub use load::*;
#[allow(unused_imports)]
pub use pki::*;
#[allow(unused_imports)]
pub use rbac::*;
#[allow(unused_imports)]
pub use running::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The agent's nodes in the shared test world: its lanes of seven (tests/common/lanes.rs).
pub const NODES: u32 = LANES * LANE_NODES;

pub struct World {
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn world_dir() -> PathBuf {
    PathBuf::from(std::env::var("KWORLD_DIR").unwrap_or_else(|_| "/var/tmp/kraft-world".into()))
}

static IMAGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Waits until no build holds `$KWORLD_DIR/<lock>` (the script named holds it while it runs).
pub fn wait_for_lock(lock: &str, script: &str) -> Result<(), String> {
    let lock = world_dir().join(lock);
    let _ = std::fs::create_dir_all(world_dir());
    let waited = Command::new("flock")
        .arg(&lock)
        .arg("true")
        .status()
        .map_err(|e| format!("cannot run flock to wait for {script}: {e}"))?;
    if !waited.success() {
        return Err(format!("flock {} true: {waited}", lock.display()));
    }
    Ok(())
}

/// The release image's binary, unpacked (`tests/image.sh`, which CI runs in the background
/// beside the tests and a test runs on first use when it is missing: a static build, some
/// minutes cold). Waits first for an image step under way (it holds `image.lock`), so a test
/// never takes the binary of the run before, or a half-written one.
pub fn image_binary() -> PathBuf {
    let r = IMAGE.get_or_init(|| {
        wait_for_lock("image.lock", "tests/image.sh")?;
        let bin = world_dir().join("image/rootfs/kubectl-raft");
        if !bin.exists() {
            let status = Command::new("bash")
                .arg(repo().join("tests/image.sh"))
                .stderr(Stdio::inherit())
                .status()
                .map_err(|e| format!("cannot run tests/image.sh: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "tests/image.sh failed ({status}): its output is above"
                ));
            }
        }
        if bin.exists() {
            Ok(bin)
        } else {
            Err(format!("tests/image.sh left no {}", bin.display()))
        }
    });
    match r {
        Ok(p) => p.clone(),
        Err(e) => panic!("the release image cannot be had: {e}"),
    }
}

static WORLD: OnceLock<Result<World, String>> = OnceLock::new();

/// The shared world, started (and built) on first use.
pub fn world() -> &'static World {
    let w = WORLD.get_or_init(|| {
        let out = Command::new("bash")
            .arg(repo().join("tests/world/up.sh"))
            .args(["--nodes", &NODES.to_string()])
            .args(["--kubelets", &REAL_NODES.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run tests/world/up.sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tests/world/up.sh failed ({}); see its output above and the logs in {}/run/logs",
                out.status,
                world_dir().display()
            ));
        }
        let kubeconfig = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        if !kubeconfig.exists() {
            return Err(format!(
                "tests/world/up.sh printed {kubeconfig:?}, which does not exist"
            ));
        }
        label_lanes(&kubeconfig)?;
        Ok(World {
            kubeconfig,
            dir: world_dir(),
        })
    });
    match w {
        Ok(w) => w,
        Err(e) => panic!("the test world could not start: {e}"),
    }
}

/// Puts each agent's node in its lane, and the real kubelets in every lane (lanes.rs).
fn label_lanes(kubeconfig: &Path) -> Result<(), String> {
    for l in (0..LANES).map(Lane) {
        let mut args = vec!["label".to_string(), "node".to_string()];
        args.extend(l.nodes());
        args.extend(kubelet::real_node_names());
        args.push(format!("{}=yes", l.label()));
        args.push("--overwrite".to_string());
        let out = Command::new(kubectl_bin())
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .output()
            .map_err(|e| format!("cannot run kubectl label: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

pub fn kubectl_bin() -> PathBuf {
    world_dir().join("bin/kubectl")
}

fn run(mut cmd: Command, what: &str, limit: Duration) -> Output {
    // The namespace it names (`-n NS`), whose state a hang reports.
    let ns = cmd
        .get_args()
        .skip_while(|a| *a != "-n" && *a != "--namespace")
        .nth(1)
        .map(|a| a.to_string_lossy().into_owned());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    // Both pipes are read while the command runs: one that writes more than a pipe holds
    // (`kubectl get nodes -o json` of the world's 18 nodes) would otherwise block, unread,
    // until the limit called it hung.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {limit:?} (hung)\nstdout: {}\nstderr: {}\n{}",
                String::from_utf8_lossy(&out.join().unwrap_or_default()),
                String::from_utf8_lossy(&err.join().unwrap_or_default()),
                ns.map(|ns| diagnose(&world().kubeconfig, &ns))
                    .unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The kubectl a user of this machine has (its own install), else the world's.
pub fn machine_kubectl_bin() -> PathBuf {
    let installed = PathBuf::from("/usr/bin/kubectl");
    if installed.exists() {
        installed
    } else {
        kubectl_bin()
    }
}

pub fn kubectl(args: &[&str]) -> Output {
    kubectl_with(&kubectl_bin(), args)
}

pub fn kubectl_with(bin: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(bin);
    c.args(args).env("KUBECONFIG", &world().kubeconfig);
    run(
        c,
        &format!("kubectl {}", args.join(" ")),
        Duration::from_secs(180),
    )
}

/// kubectl that must succeed; returns stdout. When the API server itself did not answer,
/// the failure carries the world's diagnosis (free disk and memory, daemons, log tails).
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        panic!(
            "kubectl {} failed: {}{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            stderr,
            if api_server_unwell(&stderr) {
                world_diagnosis()
            } else {
                String::new()
            }
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kubectl's words for an API server that did not answer (as opposed to one that refused).
fn api_server_unwell(stderr: &str) -> bool {
    [
        "Unable to connect to the server",
        "context deadline exceeded",
        "the server was unable to return a response",
        "connection refused",
        "was refused",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// `kworld doctor`: what the world's machine and control plane look like right now.
pub fn world_diagnosis() -> String {
    match Command::new(world_dir().join("bin/kworld"))
        .arg("doctor")
        .output()
    {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("(kworld doctor could not run: {e})"),
    }
}

pub fn kubectl_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&kubectl_ok(&a)).expect("kubectl printed JSON")
}

/// The plugin, as a user runs it, with a kubeconfig.
pub fn raft_with(kubeconfig: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"));
    c.args(args).env("KUBECONFIG", kubeconfig);
    run(
        c,
        &format!("kubectl raft {}", args.join(" ")),
        Duration::from_secs(60),
    )
}

pub fn raft(args: &[&str]) -> Output {
    raft_with(&world().kubeconfig, args)
}

/// The plugin with extra environment variables (credentials a system reads from it).
pub fn raft_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"));
    c.args(args).env("KUBECONFIG", &world().kubeconfig);
    for (k, v) in env {
        c.env(k, v);
    }
    run(
        c,
        &format!("kubectl raft {}", args.join(" ")),
        Duration::from_secs(180),
    )
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A namespace of the test's own, deleted when the test ends.
pub struct TestNamespace {
    pub name: String,
    /// When it was created: its life is the test's time (tests/run.sh prints the slowest).
    created: Instant,
}

impl TestNamespace {
    pub fn new(prefix: &str) -> Self {
        world();
        let name = format!("{prefix}-{}", unique());
        // In the lane the test holds, its pods are placed on that lane's nodes only.
        let annotations = match current_lane() {
            Some(l) => format!(
                r#","annotations":{{"scheduler.alpha.kubernetes.io/node-selector":"{}=yes"}}"#,
                l.label()
            ),
            None => String::new(),
        };
        let f = tempfile(&format!(
            r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}"{annotations}}}}}"#
        ));
        kubectl_ok(&["create", "-f", f.path_str()]);
        // The ServiceAccount admission needs the namespace's default ServiceAccount.
        wait_until(Duration::from_secs(30), "default ServiceAccount", || {
            kubectl(&["get", "sa", "default", "-n", &name])
                .status
                .success()
        });
        TestNamespace {
            name,
            created: Instant::now(),
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // One line per namespace: seconds, the suite, the test (libtest names its thread after
        // it: `suite::test` in the e2e binary, whose suites are modules); tests/run.sh sorts them.
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let binary = match test.split_once("::") {
            Some((suite, _)) => suite.to_string(),
            None => std::env::current_exe()
                .ok()
                .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .map(|s| s.split('-').next().unwrap_or("").to_string())
                .unwrap_or_default(),
        };
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(world_dir().join("timings.tsv"))
        {
            use std::io::Write;
            let _ = writeln!(
                f,
                "{:.1}\t{binary}\t{test}\t{}",
                self.created.elapsed().as_secs_f64(),
                self.name
            );
        }
        let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
        let _ = std::fs::remove_dir_all(scratch_root().join(&self.name));
    }
}

fn scratch_root() -> PathBuf {
    std::env::temp_dir().join("kraft-scratch")
}

/// A directory on this machine for the test of namespace `ns` (stand-ins' shared state as a
/// hostPath, a load client's endpoints file), removed with the namespace.
pub fn scratch_dir(ns: &str) -> PathBuf {
    let d = scratch_root().join(ns);
    std::fs::create_dir_all(&d).expect("a scratch directory");
    d
}

/// A name part no other caller in this run gets (milliseconds, then a counter).
pub fn unique() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 100_000;
    format!("{t}{}", N.fetch_add(1, Ordering::SeqCst))
}

pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What the world looks like in a namespace, for a failure message: nodes, pods, claims,
/// events, EndpointSlices, and the end of the agent's log.
pub fn diagnose(kubeconfig: &Path, ns: &str) -> String {
    let run = |args: &[&str]| {
        let out = Command::new(kubectl_bin())
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output();
        match out {
            Ok(o) => format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("kubectl {}: {e}\n", args.join(" ")),
        }
    };
    let agent_log =
        std::fs::read_to_string(world_dir().join("run/logs/agent.log")).unwrap_or_default();
    // The agent's lines of this namespace (its pods' terminations, step by step).
    let mut tail: Vec<&str> = agent_log
        .lines()
        .rev()
        .filter(|l| l.contains(ns))
        .take(40)
        .collect();
    tail.reverse();
    format!(
        "{}{}{}{}--- agent.log (its last lines of {ns})\n{}",
        run(&["get", "nodes"]),
        run(&["get", "pods,pvc", "-o", "wide", "-n", ns]),
        run(&["get", "events", "-n", ns, "--sort-by=.lastTimestamp"]),
        run(&["get", "endpointslices", "-n", ns]),
        tail.join("\n")
    )
}

/// Like wait_until, but a timeout reports the state of the namespace.
pub fn wait_in(ns: &str, limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            panic!(
                "timed out after {limit:?} waiting for {what}\n{}",
                diagnose(&world().kubeconfig, ns)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until no pod of another namespace is on the node (earlier tests' namespaces are
/// deleted in the background), so that a drain moves only this test's pods.
pub fn wait_node_alone(node: &str, ns: &str) {
    wait_node_holds_only(node, &[ns]);
}

/// Waits until every pod on the node belongs to one of these namespaces.
pub fn wait_node_holds_only(node: &str, namespaces: &[&str]) {
    wait_until(
        Duration::from_secs(90),
        &format!("node {node} free of other tests' pods"),
        || {
            kubectl_json(&[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &format!("spec.nodeName={node}"),
            ])["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| {
                    namespaces
                        .iter()
                        .any(|ns| p["metadata"]["namespace"] == *ns)
                })
        },
    );
}

/// Applies tests/manifests/zookeeper-3.yaml and waits for a leader and 3 healthy, Ready servers.
/// ZooKeeper with server.1 … server.5 in its configuration but 3 pods (replicas: 3): three of
/// five form the quorum, so the cluster has no fault tolerance left.
pub fn deploy_zookeeper_five_on_three(ns: &str) {
    let manifest =
        std::fs::read_to_string(repo().join("tests/manifests/zookeeper-3.yaml")).unwrap();
    let five = manifest.replace("for i in 0 1 2; do", "for i in 0 1 2 3 4; do");
    assert_ne!(five, manifest, "the manifest's server loop changed");
    let f = tempfile(&five);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_in(
        ns,
        Duration::from_secs(180),
        "3 of 5 ZooKeeper servers with a leader",
        || {
            let v = status_json(&["zk", "-n", ns]);
            v["clusters"][0]["summary"]["leader"].is_string()
                && v["clusters"][0]["summary"]["healthyVoters"] == 3
        },
    );
}

pub fn deploy_zookeeper(ns: &str) {
    let manifest = repo().join("tests/manifests/zookeeper-3.yaml");
    kubectl_ok(&["apply", "-n", ns, "-f", manifest.to_str().unwrap()]);
    wait_in(
        ns,
        Duration::from_secs(180),
        "3 ZooKeeper servers with a leader",
        || {
            let out = raft(&["status", "zk", "-n", ns, "-o", "json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["clusters"][0]["summary"]["leader"].is_string()
                && v["clusters"][0]["summary"]["healthyVoters"] == 3
                && v["clusters"][0]["summary"]["readyPods"] == 3
        },
    );
}

/// Applies tests/manifests/etcd-N.yaml and waits until every member is Ready.
/// The hashicorp/raft stand-in (tests/manifests/hraft-5.yaml: hraft-0..2 vote, hraft-3/4 do
/// not): applies the manifest and waits until one server leads, every pod is Ready and the three
/// voters are healthy.
pub fn deploy_hraft(ns: &str) -> Value {
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/hraft-5.yaml")).unwrap();
    deploy_hraft_manifest(ns, &manifest)
}

/// [`deploy_hraft`] with the manifest's text as given (hraft-5.yaml changed by a test).
pub fn deploy_hraft_manifest(ns: &str, manifest: &str) -> Value {
    let f = tempfile(manifest);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    let mut report = Value::Null;
    wait_in(
        ns,
        Duration::from_secs(180),
        "5 Ready hraft servers, one leading, 3 healthy voters",
        || {
            report = status_json(&["hraft", "-n", ns]);
            let c = &report["clusters"][0];
            c["summary"]["leader"].is_string()
                && c["summary"]["healthyVoters"] == 3
                && c["summary"]["readyPods"] == 5
        },
    );
    report["clusters"][0].clone()
}

/// The leader's pod and the Raft term, as hashicorp/raft's own Stats() on each voter of the
/// stand-in say it (exactly one "Leader"), read through pods/proxy.
pub fn hraft_leader(ns: &str) -> Option<(String, u64)> {
    let mut leaders = vec![];
    for i in 0..3 {
        let path = format!("/api/v1/namespaces/{ns}/pods/hraft-{i}:8500/proxy/v1/agent/self");
        let out = kubectl(&["get", "--raw", &path, "--request-timeout=2s"]);
        let Ok(me) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        let raft = &me["Stats"]["raft"];
        if raft["state"] == "Leader" {
            leaders.push((format!("hraft-{i}"), raft["term"].as_str()?.parse().ok()?));
        }
    }
    (leaders.len() == 1).then(|| leaders.remove(0))
}

/// The elections the stand-in's voters `pods` held in the last `within` for a term later than
/// `term` because they had not heard from a leader, by hashicorp/raft's own log: a candidate
/// by heartbeat timeout runs a pre-vote first and logs "pre-vote successful, starting
/// election" once a majority, hearing no leader either, grants it; a transfer's target
/// (`TimeoutNow`) skips the pre-vote, and a follower merely slow to hear the leader has its
/// pre-vote refused by the others. The logs are read by whole seconds, so they may reach back
/// before `term` (a cold CI run's hraft-0 had its start-up election of term 2 there): those are
/// left out.
pub fn elections_after(ns: &str, pods: &[&str], within: Duration, term: u64) -> Vec<String> {
    let since = format!("--since={}s", within.as_secs() + 1);
    pods.iter()
        .flat_map(|p| {
            let logs = kubectl_ok(&["logs", p, "-n", ns, &since]);
            logs.lines()
                .filter(|l| l.contains("pre-vote successful, starting election"))
                .filter(|l| {
                    l.split("term=")
                        .nth(1)
                        .and_then(|t| t.split_whitespace().next())
                        .and_then(|t| t.parse::<u64>().ok())
                        .is_none_or(|t| t > term)
                })
                .map(|l| format!("{p}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Where a member's preStop hook logs in the tests' manifests: `prestop.log` on its volume,
/// read through the PersistentVolume's hostPath.
pub fn hook_log(ns: &str, pod: &str) -> std::path::PathBuf {
    let pvc = kubectl_json(&["get", "pvc", &format!("data-{pod}"), "-n", ns]);
    let pv = kubectl_json(&["get", "pv", pvc["spec"]["volumeName"].as_str().unwrap()]);
    std::path::PathBuf::from(pv["spec"]["hostPath"]["path"].as_str().unwrap()).join("prestop.log")
}

/// NATS JetStream (tests/manifests/nats-N.yaml), `servers` Ready with a meta leader.
pub fn deploy_nats(ns: &str, servers: u32) {
    deploy_nats_on(ns, servers, Nodes::Agent);
}

/// tests/manifests/nats-N.yaml with its pods on the given kind of node.
pub fn deploy_nats_on(ns: &str, servers: u32, nodes: Nodes) {
    deploy_nats_manifest(ns, servers, nodes, &nats_manifest(servers));
}

/// tests/manifests/nats-N.yaml as it is.
pub fn nats_manifest(servers: u32) -> String {
    std::fs::read_to_string(repo().join(format!("tests/manifests/nats-{servers}.yaml")))
        .expect("the NATS manifest")
}

/// `manifest`, a NATS cluster of `servers`, with its pods on the given kind of node, every
/// server Ready and a meta leader.
pub fn deploy_nats_manifest(ns: &str, servers: u32, nodes: Nodes, manifest: &str) {
    apply_on(ns, manifest, nodes);
    wait_in(
        ns,
        Duration::from_secs(120),
        &format!("{servers} NATS servers Ready with a meta leader"),
        || {
            kubectl_json(&["get", "sts", "nats", "-n", ns])["status"]["readyReplicas"] == servers
                && meta_leader(ns, "nats-0").is_some()
        },
    );
    assert_pods_on(ns, nodes);
}

/// The meta leader as `server` names it in its own /jsz (through the API server).
pub fn meta_leader(ns: &str, server: &str) -> Option<String> {
    meta_leader_at(ns, &format!("{server}:8222"))
}

/// The meta leader as the server at `pod_port` ("nats-0:8222", "https:nats-0:8222") names it
/// in its own /jsz (through the API server's pods/proxy).
pub fn meta_leader_at(ns: &str, pod_port: &str) -> Option<String> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{pod_port}/proxy/jsz"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["meta_cluster"]["leader"]
        .as_str()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

/// `f` with a client of the account APP's user (app/app in the manifests), connected straight
/// to `server`'s pod IP; None when it cannot connect.
fn as_app<T, F: std::future::Future<Output = Option<T>>>(
    ns: &str,
    server: &str,
    f: impl FnOnce(async_nats::Client) -> F,
) -> Option<T> {
    let ip = pod_json(ns, server)["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::ConnectOptions::with_user_and_password("app".into(), "app".into())
            .connect(format!("nats://{ip}:4222"))
            .await
            .ok()?;
        f(client).await
    })
}

/// A JetStream API request as the account APP's user, straight to the server's pod IP; the
/// reply, or None when there was none.
pub fn js_app(ns: &str, server: &str, subject: &str, body: &str) -> Option<Value> {
    as_app(ns, server, |client| async move {
        let reply = client
            .request(subject.to_string(), body.to_string().into_bytes().into())
            .await
            .ok()?;
        serde_json::from_slice(&reply.payload).ok()
    })
}

/// `count` messages of `size` bytes published to stream `stream` (subject `STREAM.fill`) as
/// the account APP's user, straight to `server`'s pod IP, 1024 at a time: how many the stream
/// acknowledged (a JetStream publish is a request answered with the message's sequence).
pub fn publish_burst(ns: &str, server: &str, stream: &str, count: usize, size: usize) -> usize {
    use futures::StreamExt;
    as_app(ns, server, |client| async move {
        let payload = bytes::Bytes::from(vec![b'x'; size]);
        let subject = format!("{stream}.fill");
        let acknowledged = futures::stream::iter(0..count)
            .map(|_| {
                let (client, payload, subject) = (client.clone(), payload.clone(), subject.clone());
                async move {
                    let reply = client.request(subject, payload).await.ok()?;
                    let ack: Value = serde_json::from_slice(&reply.payload).ok()?;
                    ack["seq"].as_u64()
                }
            })
            .buffer_unordered(1024)
            .filter(|seq| futures::future::ready(seq.is_some()))
            .count()
            .await;
        Some(acknowledged)
    })
    .unwrap_or(0)
}

/// Whether `server` answers its whole /healthz with 200: NATS's own word that its JetStream
/// assets (every stream and consumer it holds) are current, beyond the readiness probe's
/// `js-enabled-only`.
pub fn nats_current(ns: &str, server: &str) -> bool {
    kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{server}:8222/proxy/healthz"),
    ])
    .status
    .success()
}

/// The JetStream meta group's term as `server` reports it (/raftz).
pub fn meta_term(ns: &str, server: &str) -> Option<u64> {
    meta_term_at(ns, &format!("{server}:8222"))
}

/// The meta group's term as the server at `target` (pods/proxy's `[scheme:]pod:port`) reports
/// it in its /raftz.
pub fn meta_term_at(ns: &str, target: &str) -> Option<u64> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{target}/proxy/raftz?acc=SYS&group=_meta_"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["SYS"]["_meta_"]["term"].as_u64()
}

/// The system account's user, in a Secret the gate may use (to move the meta leader): named
/// by the StatefulSet and labelled by its writer.
pub fn nats_ops_credentials(ns: &str) {
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "nats-ops",
        "-n",
        ns,
        "--from-literal=NATS_USER=sys",
        "--from-literal=NATS_PASSWORD=sys-secret",
    ]);
    kubectl_ok(&[
        "label",
        "secret",
        "nats-ops",
        "-n",
        ns,
        "kubectl-raft.io/credentials=true",
    ]);
    annotate_credentials(ns, "nats-ops");
}

/// The StatefulSet names its credentials Secret, as an operator sets it once.
pub fn annotate_credentials(ns: &str, secret: &str) {
    kubectl_ok(&[
        "annotate",
        "sts",
        "nats",
        "-n",
        ns,
        &format!("kubectl-raft.io/credentials-secret={secret}"),
    ]);
}

/// An R3 stream `name` (subjects `NAME.>`) in the account APP, created through `server`,
/// with a leader.
pub fn create_stream(ns: &str, server: &str, name: &str) {
    let body = format!(r#"{{"name":"{name}","subjects":["{name}.>"],"num_replicas":3}}"#);
    wait_in(
        ns,
        Duration::from_secs(60),
        &format!("stream {name} created"),
        || {
            js_app(ns, server, &format!("$JS.API.STREAM.CREATE.{name}"), &body)
                .is_some_and(|r| r["config"].is_object() || r["error"]["err_code"] == 10058)
        },
    );
    wait_in(
        ns,
        Duration::from_secs(60),
        &format!("stream {name} has a leader"),
        || {
            js_app(ns, server, &format!("$JS.API.STREAM.INFO.{name}"), "")
                .is_some_and(|r| r["cluster"]["leader"].is_string())
        },
    );
}

pub fn deploy_etcd(ns: &str, members: u32) {
    deploy_etcd_on(ns, members, Nodes::Agent);
}

/// tests/manifests/etcd-N.yaml with its pods on the given kind of node, every member Ready.
pub fn deploy_etcd_on(ns: &str, members: u32, nodes: Nodes) {
    let manifest =
        std::fs::read_to_string(repo().join(format!("tests/manifests/etcd-{members}.yaml")))
            .expect("the etcd manifest");
    apply_on(ns, &manifest, nodes);
    wait_etcd_ready(ns, members);
    assert_pods_on(ns, nodes);
}

pub fn wait_etcd_ready(ns: &str, members: u32) {
    wait_in(
        ns,
        Duration::from_secs(180),
        &format!("{members} etcd members Ready in {ns}"),
        || {
            let sts = kubectl_json(&["get", "sts", "etcd", "-n", ns]);
            sts["status"]["readyReplicas"].as_u64() == Some(members as u64)
        },
    );
    // The EndpointSlice controller follows pod readiness asynchronously; tests that read
    // Services start from a settled state.
    for service in ["etcd", "etcd-client"] {
        wait_in(
            ns,
            Duration::from_secs(60),
            &format!("Service {service} to publish {members} ready endpoints"),
            || ready_endpoints(ns, service) == members as usize,
        );
    }
    // So does the disruption controller the PodDisruptionBudget's status (disruptionsAllowed).
    let pdb = kubectl(&["get", "pdb", "etcd", "-n", ns, "-o", "json"]);
    if pdb.status.success() {
        wait_in(
            ns,
            Duration::from_secs(60),
            &format!("PodDisruptionBudget etcd to count {members} healthy pods"),
            || {
                let pdb = kubectl_json(&["get", "pdb", "etcd", "-n", ns]);
                pdb["status"]["currentHealthy"].as_u64() == Some(members as u64)
                    && pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"]
            },
        );
    }
}

/// Endpoints with ready=true across a Service's EndpointSlices.
pub fn ready_endpoints(ns: &str, service: &str) -> usize {
    let slices = kubectl_json(&[
        "get",
        "endpointslices",
        "-n",
        ns,
        "-l",
        &format!("kubernetes.io/service-name={service}"),
    ]);
    slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == true)
        .count()
}
/// etcd's own POST /v3/maintenance/status on one member, through pods/proxy.
pub fn etcd_status(ns: &str, pod: &str) -> Option<Value> {
    etcd_post(ns, pod, "/v3/maintenance/status", "{}")
}

pub fn etcd_post(ns: &str, pod: &str, path: &str, body: &str) -> Option<Value> {
    let f = tempfile(body);
    let uri = format!("/api/v1/namespaces/{ns}/pods/{pod}:2379/proxy{path}");
    let out = kubectl(&[
        "create",
        "--raw",
        &uri,
        "-f",
        f.path_str(),
        "--request-timeout=3s",
    ]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

pub struct TempFile(PathBuf);
impl TempFile {
    pub fn path_str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn tempfile(content: &str) -> TempFile {
    let p = std::env::temp_dir().join(format!("kraft-test-{}-{}", std::process::id(), unique()));
    std::fs::write(&p, content).expect("write temp file");
    TempFile(p)
}

/// The pods of the etcd StatefulSet in a namespace: (name, node, status JSON).
pub fn etcd_pods(ns: &str) -> Vec<Value> {
    let list = kubectl_json(&["get", "pods", "-n", ns, "-l", "app=etcd"]);
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The Raft term a member reports.
pub fn etcd_term(ns: &str, pod: &str) -> Option<u64> {
    etcd_status(ns, pod)?["raftTerm"]
        .as_str()
        .and_then(|t| t.parse().ok())
}

/// The leader's pod name and member id, as the members themselves report it (exactly one claimant).
pub fn etcd_leader(ns: &str) -> Option<(String, String)> {
    let mut leaders = vec![];
    for p in etcd_pods(ns) {
        let name = p["metadata"]["name"].as_str()?.to_string();
        if let Some(st) = etcd_status(ns, &name) {
            let me = st["header"]["member_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if !me.is_empty() && st["leader"].as_str() == Some(me.as_str()) {
                leaders.push((name, me));
            }
        }
    }
    (leaders.len() == 1).then(|| leaders.remove(0))
}

/// The leader, once the members agree on one: readiness need not imply a leader (a TCP
/// readiness probe passes as soon as the port listens, before the first election ends).
pub fn await_etcd_leader(ns: &str) -> (String, String) {
    let mut found = None;
    wait_in(
        ns,
        Duration::from_secs(60),
        "one etcd member to claim leadership",
        || {
            found = etcd_leader(ns);
            found.is_some()
        },
    );
    found.expect("a leader")
}

/// The host process id of a pod's first container, on either kind of node.
pub fn container_pid(ns: &str, pod: &str) -> i32 {
    let p = kubectl_json(&["get", "pod", pod, "-n", ns]);
    host_pid_of(
        p["status"]["containerStatuses"][0]["containerID"]
            .as_str()
            .expect("containerID"),
    )
}

pub fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

/// Runs `f` while the process is stopped with SIGSTOP (it hangs: TCP still connects, nothing
/// answers); the process is continued whatever `f` does, then `f`'s panic, if any, goes on.
pub fn while_frozen<T>(pid: i32, f: impl FnOnce() -> T + std::panic::UnwindSafe) -> T {
    signal(pid, "STOP");
    let result = std::panic::catch_unwind(f);
    signal(pid, "CONT");
    result.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Runs the plugin with `-o json` and parses the report.
pub fn status_json(args: &[&str]) -> Value {
    let mut a = vec!["status"];
    a.extend_from_slice(args);
    a.extend(["-o", "json"]);
    let out = raft(&a);
    assert!(
        out.status.success(),
        "kubectl raft {} failed: {}",
        a.join(" "),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(&out)))
}

/// Runs a verb of the plugin with `-o json`; (exit code, report, stderr).
pub fn verb_json(verb: &str, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut a = vec![verb];
    a.extend_from_slice(args);
    a.extend(["-o", "json"]);
    let out = raft(&a);
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), report, stderr(&out))
}

/// `kubectl raft yield ARGS -o json`.
pub fn yield_json(args: &[&str]) -> (Option<i32>, Value, String) {
    verb_json("yield", args)
}

/// `kworld node-pause|node-resume|node-down NODE [args]`.
pub fn kworld(args: &[&str]) {
    let ok = Command::new(world_dir().join("bin/kworld"))
        .args(args)
        .status()
        .expect("run kworld")
        .success();
    assert!(ok, "kworld {} failed", args.join(" "));
}

/// Runs `f` with `node` paused (or down with `down`); the node is resumed whatever `f` does.
pub fn with_node<T>(node: &str, down: bool, f: impl FnOnce() -> T + std::panic::UnwindSafe) -> T {
    if down {
        kworld(&["node-down", node, "--for", "10m"]);
    } else {
        kworld(&["node-pause", node]);
    }
    let result = std::panic::catch_unwind(f);
    kworld(&["node-resume", node]);
    result.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// The pod, or None while it does not exist (between a deletion and its replacement).
pub fn pod_json_opt(ns: &str, name: &str) -> Option<Value> {
    let out = kubectl(&["get", "pod", name, "-n", ns, "-o", "json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

pub fn pod_json(ns: &str, name: &str) -> Value {
    kubectl_json(&["get", "pod", name, "-n", ns])
}

/// How many of `replicas` etcd members in `ns` are down (missing, terminating or not Ready)
/// by one list of the pods: two lists would count a member that went between them twice.
pub fn etcd_members_down(ns: &str, replicas: usize) -> usize {
    let pods = etcd_pods(ns);
    let down = pods
        .iter()
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_null() || !pod_ready(p))
        .count();
    down + replicas.saturating_sub(pods.len())
}

/// The most etcd members of `ns` down at once while it runs, sampled every 200 ms from a
/// thread; `most()` stops it and says.
pub struct MostDown {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<usize>,
}

impl MostDown {
    pub fn watch(ns: &str, replicas: usize) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (ns, stop) = (ns.to_string(), stop.clone());
            std::thread::spawn(move || {
                let mut most = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    most = most.max(etcd_members_down(&ns, replicas));
                    std::thread::sleep(Duration::from_millis(200));
                }
                most
            })
        };
        MostDown { stop, sampler }
    }

    pub fn most(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.sampler.join().unwrap()
    }
}

pub fn pod_ready(p: &Value) -> bool {
    p["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

pub fn node_of(ns: &str, pod: &str) -> String {
    pod_json(ns, pod)["spec"]["nodeName"]
        .as_str()
        .expect("scheduled")
        .to_string()
}

/// Asks the world's cluster DNS (10.250.0.1:53) for NAME's A records: Ok(addresses), or
/// Err(rcode) (3 is NXDOMAIN).
pub fn dns_a(name: &str) -> Result<Vec<std::net::Ipv4Addr>, u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    sock.send_to(&q, "10.250.0.1:53").expect("send DNS query");
    let mut buf = [0u8; 1500];
    let n = sock.recv(&mut buf).expect("DNS answer");
    let a = &buf[..n];
    let rcode = a[3] & 0x0f;
    if rcode != 0 {
        return Err(rcode);
    }
    let answers = u16::from_be_bytes([a[6], a[7]]) as usize;
    // Skip the question, then read each answer's RDATA (names are compressed pointers here).
    let mut i = q.len();
    let mut out = vec![];
    for _ in 0..answers {
        while a[i] != 0 && a[i] & 0xc0 != 0xc0 {
            i += a[i] as usize + 1;
        }
        i += if a[i] == 0 { 1 } else { 2 };
        let (typ, len) = (
            u16::from_be_bytes([a[i], a[i + 1]]),
            u16::from_be_bytes([a[i + 8], a[i + 9]]) as usize,
        );
        i += 10;
        if typ == 1 && len == 4 {
            out.push(std::net::Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
        }
        i += len;
    }
    Ok(out)
}

/// A report's one cluster in namespace `ns` (a node may also hold other tests' members).
pub fn cluster<'a>(report: &'a Value, ns: &str) -> &'a Value {
    let clusters = report["clusters"]
        .as_array()
        .unwrap_or_else(|| panic!("no clusters in {report:#}"));
    let mine: Vec<&Value> = clusters.iter().filter(|c| c["namespace"] == ns).collect();
    assert_eq!(mine.len(), 1, "one cluster of {ns} in {report:#}");
    mine[0]
}

/// Uncordons the nodes when the test ends, however it ends.
pub struct Cordoned(pub Vec<String>);

/// `node` cordoned (as every drainer leaves a node it drains) until the guard goes.
pub fn cordon(node: &str) -> Cordoned {
    kubectl_ok(&["cordon", node]);
    Cordoned(vec![node.to_string()])
}

impl Drop for Cordoned {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = kubectl(&["uncordon", n]);
        }
    }
}

/// Sets PodDisruptionBudget `name`'s maxUnavailable and waits until its controller allows
/// `allowed` disruptions.
pub fn set_pdb(ns: &str, name: &str, max_unavailable: u32, allowed: u32) {
    kubectl_ok(&[
        "patch",
        "pdb",
        name,
        "-n",
        ns,
        "--type=merge",
        "-p",
        &format!(r#"{{"spec":{{"maxUnavailable":{max_unavailable}}}}}"#),
    ]);
    wait_in(
        ns,
        Duration::from_secs(30),
        &format!("the PDB {name} to allow {allowed} disruption(s)"),
        || kubectl_json(&["get", "pdb", name, "-n", ns])["status"]["disruptionsAllowed"] == allowed,
    );
}

/// The codes of a cluster's warnings in a status report.
pub fn warning_codes(c: &Value) -> Vec<&str> {
    c["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect()
}

/// A drained cluster's (evictions, transfers, elections), as its DrainReport counts them.
pub fn drain_counts(c: &Value) -> (Option<u64>, Option<u64>, Option<u64>) {
    (
        c["evictions"].as_u64(),
        c["transfers"].as_u64(),
        c["elections"].as_u64(),
    )
}

/// A one-replica StatefulSet `name` whose port 8080 runs a Python `program`, with
/// `annotations` on the StatefulSet, Ready by a TCP probe; `host_dir`, when given, mounted
/// at /rec (what a recording server writes there, the test reads). Waits until it is Ready.
pub fn deploy_python_sts(
    ns: &str,
    name: &str,
    program: &str,
    annotations: &[(&str, &str)],
    host_dir: Option<&Path>,
) {
    let indented: String = program
        .lines()
        .map(|l| format!("            {l}\n"))
        .collect();
    let ann: String = annotations
        .iter()
        .map(|(k, v)| format!("    {k}: {}\n", serde_json::Value::String(v.to_string())))
        .collect();
    let (mounts, volumes) = match host_dir {
        Some(d) => (
            "        volumeMounts: [{name: rec, mountPath: /rec}]\n".to_string(),
            format!(
                "      volumes: [{{name: rec, hostPath: {{path: {}}}}}]\n",
                d.display()
            ),
        ),
        None => (String::new(), String::new()),
    };
    let manifest = format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  annotations:
{ann}spec:
  serviceName: {name}
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: server
        image: python:3
        command:
        - /usr/bin/python3
        - -c
        - |
{indented}        ports: [{{name: http, containerPort: 8080}}]
        readinessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
{mounts}{volumes}"#
    );
    let f = tempfile(&manifest);
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
    wait_in(
        ns,
        Duration::from_secs(60),
        &format!("{name}-0 Ready"),
        || {
            let p = kubectl_json(&["get", "pods", "-n", ns, "-l", &format!("app={name}")]);
            p["items"][0]["status"]["conditions"]
                .as_array()
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        },
    );
}

/// A Python HTTP server on 8080 that answers every request 200 with `body` (JSON) and
/// appends each request (method, path, headers) to /rec/requests: what a tenant's pod
/// records of what the plugin sent it.
pub fn recording_server(body: &str) -> String {
    format!(
        "import http.server, json\n\
         BODY = json.dumps({body}).encode()\n\
         class H(http.server.BaseHTTPRequestHandler):\n    \
             def handle_one(self):\n        \
                 n = int(self.headers.get('Content-Length') or 0)\n        \
                 rec = {{'method': self.command, 'path': self.path, 'headers': dict(self.headers), 'body': self.rfile.read(n).decode('latin-1')}}\n        \
                 with open('/rec/requests', 'a') as f:\n            \
                     f.write(json.dumps(rec) + '\\n')\n        \
                 self.send_response(200)\n        \
                 self.send_header('Content-Type', 'application/json')\n        \
                 self.send_header('Content-Length', str(len(BODY)))\n        \
                 self.end_headers()\n        \
                 self.wfile.write(BODY)\n    \
             do_GET = do_POST = do_PUT = handle_one\n    \
             def log_message(self, *a):\n        \
                 pass\n\
         http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()"
    )
}

/// What a recording server wrote: one JSON object per request.
pub fn recorded(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Pod name -> UID, for the pods of a namespace.
pub fn uids(ns: &str) -> std::collections::BTreeMap<String, String> {
    kubectl_json(&["get", "pods", "-n", ns])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["metadata"]["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The pods `{prefix}-0` … `{prefix}-{n-1}` other than `leader`, in order.
pub fn others_than(leader: &str, prefix: &str, n: u32) -> Vec<String> {
    (0..n)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|p| p != leader)
        .collect()
}

/// The ZooKeeper ensemble `zk`'s leader in `ns`, as `kubectl raft status` names it.
pub fn zk_leader(ns: &str) -> String {
    status_json(&["zk", "-n", ns])["clusters"][0]["summary"]["leader"]
        .as_str()
        .expect("a ZooKeeper leader")
        .to_string()
}
