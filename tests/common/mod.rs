//! The end-to-end test helper: the real test world (control plane built from Kubernetes'
//! source, pods as processes; tests/world), a namespace per test, and runners for kubectl
//! and the plugin. If the world cannot start, the test fails and says why.
#![allow(dead_code)] // each test binary uses its own part of the helper

pub mod gated;
#[allow(unused_imports)] // not every test binary meets the gate
pub use gated::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Nodes of the shared test world: two more than the 5-member etcd needs (with required
/// anti-affinity, draining two of its nodes needs two spare ones).
pub const NODES: u32 = 7;

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

/// The release image's binary, unpacked (`tests/image.sh`, which CI runs before the tests and
/// a test runs on first use when it is missing: a static build, some minutes cold).
pub fn image_binary() -> PathBuf {
    let r = IMAGE.get_or_init(|| {
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

/// Tests that cordon, drain or silence nodes take this exclusively; the others share it.
static NODES_LOCK: RwLock<()> = RwLock::new(());

pub fn shared_nodes() -> RwLockReadGuard<'static, ()> {
    NODES_LOCK.read().unwrap_or_else(|e| e.into_inner())
}

pub fn exclusive_nodes() -> RwLockWriteGuard<'static, ()> {
    NODES_LOCK.write().unwrap_or_else(|e| e.into_inner())
}

pub fn kubectl_bin() -> PathBuf {
    world_dir().join("bin/kubectl")
}

fn run(mut cmd: Command, what: &str, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{what} did not finish within {limit:?} (hung)\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
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
}

impl TestNamespace {
    pub fn new(prefix: &str) -> Self {
        world();
        let name = format!("{prefix}-{}", unique());
        kubectl_ok(&["create", "namespace", &name]);
        // The ServiceAccount admission needs the namespace's default ServiceAccount.
        wait_until(Duration::from_secs(30), "default ServiceAccount", || {
            kubectl(&["get", "sa", "default", "-n", &name])
                .status
                .success()
        });
        TestNamespace { name }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
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

fn unique() -> String {
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
    let mut tail: Vec<&str> = agent_log.lines().rev().take(30).collect();
    tail.reverse();
    format!(
        "{}{}{}{}--- agent.log (last lines)\n{}",
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
    let manifest = repo().join("tests/manifests/hraft-5.yaml");
    kubectl_ok(&["apply", "-n", ns, "-f", manifest.to_str().unwrap()]);
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

/// NATS JetStream (tests/manifests/nats-N.yaml), `servers` Ready with a meta leader.
pub fn deploy_nats(ns: &str, servers: u32) {
    let manifest = repo().join(format!("tests/manifests/nats-{servers}.yaml"));
    kubectl_ok(&["apply", "-n", ns, "-f", manifest.to_str().unwrap()]);
    wait_in(
        ns,
        Duration::from_secs(120),
        &format!("{servers} NATS servers Ready with a meta leader"),
        || {
            kubectl_json(&["get", "sts", "nats", "-n", ns])["status"]["readyReplicas"] == servers
                && meta_leader(ns, "nats-0").is_some()
        },
    );
}

/// The meta leader as `server` names it in its own /jsz (through the API server).
pub fn meta_leader(ns: &str, server: &str) -> Option<String> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{server}:8222/proxy/jsz"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["meta_cluster"]["leader"]
        .as_str()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

/// A JetStream API request as the account APP's user (app/app in the manifests), straight to
/// the server's pod IP; the reply, or None when there was none.
pub fn js_app(ns: &str, server: &str, subject: &str, body: &str) -> Option<Value> {
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
        let reply = client
            .request(subject.to_string(), body.to_string().into_bytes().into())
            .await
            .ok()?;
        serde_json::from_slice(&reply.payload).ok()
    })
}

/// The JetStream meta group's term as `server` reports it (/raftz).
pub fn meta_term(ns: &str, server: &str) -> Option<u64> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{server}:8222/proxy/raftz?acc=SYS&group=_meta_"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v["SYS"]["_meta_"]["term"].as_u64()
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
    let manifest = repo().join(format!("tests/manifests/etcd-{members}.yaml"));
    kubectl_ok(&["apply", "-n", ns, "-f", manifest.to_str().unwrap()]);
    wait_etcd_ready(ns, members);
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

/// The host process id of a pod's first container (the agent reports kworld://PID).
pub fn container_pid(ns: &str, pod: &str) -> i32 {
    let p = kubectl_json(&["get", "pod", pod, "-n", ns]);
    let id = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .expect("containerID")
        .to_string();
    id.trim_start_matches("kworld://")
        .parse()
        .expect("kworld://PID")
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
        let child = Command::new(example_bin("writeload"))
            .args(args)
            .args(["--duration", "300s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start writeload");
        // Let it write a little before anything happens.
        std::thread::sleep(Duration::from_millis(500));
        Load { child, follower }
    }

    /// Like `start`, but the writer follows members to their new addresses (a drain replaces
    /// pods): a thread rewrites its endpoints file from the live pods every 300 ms.
    pub fn start_following(ns: &str) -> Self {
        let (file, follower) = follow(ns, "endpoints", live_etcd_endpoints);
        Load::spawn(
            &["--endpoints-file", file.to_str().unwrap()],
            Some(follower),
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
    /// Stops the writer; its summary: writes, ok, failed, lost, slow, longestStallMs, p99Ms, ...
    pub fn finish(mut self) -> Value {
        if let Some((stop, thread)) = self.follower.take() {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = thread.join();
        }
        signal(self.child.id() as i32, "TERM");
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().expect("true"))
            .wait_with_output()
            .expect("writeload output");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "writeload printed no summary ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
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

/// A ServiceAccount of a test namespace bound to copies of roles from docs/rbac.yaml (its
/// verb's ClusterRole cluster-wide, optional ClusterRoles, the lock Role in the lock
/// namespace), and a kubeconfig that authenticates as it. The copies are the test's own, so
/// rules can be taken away without touching other tests; they and their bindings go when the
/// test ends.
pub struct RbacSubject {
    pub kubeconfig: PathBuf,
    pub sa: String,
    ns: String,
    roles: Vec<Bound>,
}

/// One role copy bound to the subject.
struct Bound {
    role: Value,
    /// Where `kubectl auth can-i` checks its rules: the test namespace for ClusterRoles, the
    /// Role's own namespace for a Role.
    check_ns: String,
}

impl Bound {
    fn name(&self) -> &str {
        self.role["metadata"]["name"].as_str().unwrap()
    }

    fn namespace(&self) -> Option<&str> {
        self.role["metadata"]["namespace"].as_str()
    }

    fn grants(&self, verb: &str, resource: &str) -> bool {
        self.role["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|x| x == verb)
        })
    }
}

/// The namespace of drain's and restart's locks (docs/rbac.yaml).
pub const LOCK_NS: &str = "kubectl-raft";

/// The Lease that locks StatefulSet `sts` of namespace `ns` (in LOCK_NS).
pub fn lock_lease(ns: &str, sts: &str) -> String {
    format!("kubectl-raft.{ns}.{sts}")
}

/// An object of docs/rbac.yaml by name.
fn rbac_doc(name: &str) -> Value {
    rbac_doc_in("docs/rbac.yaml", None, name)
}

/// A role of file `file` (in the repository) by name, of `kind` where two kinds share it.
fn rbac_doc_in(file: &str, kind: Option<&str>, name: &str) -> Value {
    let docs = repo().join(file);
    // kubectl prints one JSON object per document.
    let text = kubectl_ok(&[
        "create",
        "--dry-run=client",
        "-o",
        "json",
        "-f",
        docs.to_str().unwrap(),
    ]);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .map(|r| r.expect("kubectl printed JSON"))
        .find(|r| {
            r["metadata"]["name"] == name
                && kind.map_or(r["kind"] != "Namespace", |k| r["kind"] == k)
        })
        .unwrap_or_else(|| panic!("{file} has no role {name}"))
}

/// `role`'s rules without `verb` on `resource`.
fn rules_without(role: &Value, verb: &str, resource: &str) -> Value {
    let mut rules = vec![];
    for rule in role["rules"].as_array().unwrap() {
        let strings = |k: &str| -> Vec<Value> { rule[k].as_array().unwrap().clone() };
        if !strings("resources").iter().any(|r| r == resource) {
            rules.push(rule.clone());
            continue;
        }
        let others: Vec<Value> = strings("resources")
            .into_iter()
            .filter(|r| r != resource)
            .collect();
        if !others.is_empty() {
            let mut r = rule.clone();
            r["resources"] = Value::Array(others);
            rules.push(r);
        }
        let verbs: Vec<Value> = strings("verbs").into_iter().filter(|v| v != verb).collect();
        if !verbs.is_empty() {
            let mut r = rule.clone();
            r["resources"] = Value::Array(vec![Value::String(resource.into())]);
            r["verbs"] = Value::Array(verbs);
            rules.push(r);
        }
    }
    let mut out = role.clone();
    out["rules"] = Value::Array(rules);
    out
}

impl RbacSubject {
    /// `role` is a ClusterRole name from docs/rbac.yaml, e.g. `kubectl-raft-status`.
    pub fn bound_to(role: &str, ns: &str) -> Self {
        Self::account(ns).and(role)
    }

    /// The ServiceAccount and its kubeconfig, bound to nothing yet.
    pub fn account(ns: &str) -> Self {
        let sa = "operator".to_string();
        kubectl_ok(&["create", "serviceaccount", &sa, "-n", ns]);
        let out = Command::new(world_dir().join("bin/kworld"))
            .args(["kubeconfig-for", ns, &sa])
            .output()
            .expect("kworld kubeconfig-for");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        RbacSubject {
            kubeconfig: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string()),
            sa,
            ns: ns.to_string(),
            roles: vec![],
        }
    }

    /// Also bound to a copy of ClusterRole or Role `role` of docs/rbac.yaml (a Role in its own
    /// namespace: kubectl-raft-lock in the lock namespace, as docs/rbac.yaml says to bind it).
    pub fn and(self, role: &str) -> Self {
        let found = rbac_doc(role);
        self.and_role(found)
    }

    /// Also bound to a copy of the `kind` named `role` in `file` (docs/gate.yaml's
    /// ClusterRole and Role share one name).
    pub fn and_from(self, file: &str, kind: &str, role: &str) -> Self {
        let found = rbac_doc_in(file, Some(kind), role);
        self.and_role(found)
    }

    fn and_role(mut self, mut found: Value) -> Self {
        let role = found["metadata"]["name"].as_str().unwrap().to_string();
        let copy = format!("{role}-{}", self.ns);
        found["metadata"]["name"] = Value::String(copy.clone());
        let subject = format!("--serviceaccount={}:{}", self.ns, self.sa);
        let bound = match found["metadata"]["namespace"].as_str().map(str::to_string) {
            Some(role_ns) => {
                self.apply(&found);
                let role_ref = format!("--role={copy}");
                kubectl_ok(&[
                    "create",
                    "rolebinding",
                    &copy,
                    "-n",
                    &role_ns,
                    &role_ref,
                    &subject,
                ]);
                Bound {
                    role: found,
                    check_ns: role_ns,
                }
            }
            None => {
                self.apply(&found);
                let role_ref = format!("--clusterrole={copy}");
                kubectl_ok(&["create", "clusterrolebinding", &copy, &role_ref, &subject]);
                Bound {
                    role: found,
                    check_ns: self.ns.clone(),
                }
            }
        };
        self.wait_can(&role_rule_probe(&bound.role), &bound.check_ns, true);
        self.roles.push(bound);
        self
    }

    /// Also bound to the lock Role (drain and restart write their Leases there).
    pub fn with_lock(self) -> Self {
        self.and("kubectl-raft-lock")
    }

    fn apply(&self, role: &Value) {
        let f = tempfile(&role.to_string());
        kubectl_ok(&["apply", "-f", f.path_str()]);
    }

    /// Every (verb, resource) the subject's roles grant.
    pub fn grants(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        for b in &self.roles {
            for rule in b.role["rules"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    for v in rule["verbs"].as_array().unwrap() {
                        out.push((v.as_str().unwrap().into(), r.as_str().unwrap().into()));
                    }
                }
            }
        }
        out
    }

    /// For every right the roles grant but `optional` (verb, resource, why it is optional):
    /// without it, `args` exits 1 with a message naming it, and `state` (what must not move:
    /// pods, a cordon, the leader) reads the same after as before. Each right is restored
    /// before the next is taken away.
    pub fn each_required_right_is_named(
        &self,
        optional: &[(&str, &str, &str)],
        args: &[&str],
        state: &dyn Fn() -> String,
    ) {
        let required: Vec<(String, String)> = self
            .grants()
            .into_iter()
            .filter(|(v, r)| !optional.iter().any(|(ov, or, _)| ov == v && or == r))
            .collect();
        let mut wrong = vec![];
        for (verb, resource) in &required {
            self.without(verb, resource);
            let before = state();
            let (code, out, err) = self.raft(args);
            let after = state();
            self.restore();
            let right = format!("{verb} {resource}");
            if code != Some(1) {
                wrong.push(format!("without {right} it exited {code:?}: {out}{err}"));
            } else if !(err.contains("forbidden")
                && err.contains(verb.as_str())
                && err.contains(resource.as_str()))
            {
                wrong.push(format!(
                    "without {right} the message does not name it: {err}"
                ));
            }
            if before != after {
                wrong.push(format!(
                    "without {right} it changed {before} into {after}: {err}"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "`kubectl raft {}` with each right taken away:\n{}",
            args.join(" "),
            wrong.join("\n---\n")
        );
    }

    /// The roles without `verb` on `resource` (e.g. "create", "pods/proxy"), until restored.
    pub fn without(&self, verb: &str, resource: &str) {
        let granting: Vec<&Bound> = self
            .roles
            .iter()
            .filter(|b| b.grants(verb, resource))
            .collect();
        assert!(!granting.is_empty(), "no role grants {verb} on {resource}");
        for b in &granting {
            self.apply(&rules_without(&b.role, verb, resource));
        }
        self.wait_can(
            &[verb.to_string(), resource.to_string()],
            &granting[0].check_ns,
            false,
        );
    }

    /// Every rule of the roles as docs/rbac.yaml has them.
    pub fn restore(&self) {
        for b in &self.roles {
            self.apply(&b.role);
        }
        for b in &self.roles {
            self.wait_can(&role_rule_probe(&b.role), &b.check_ns, true);
        }
    }

    /// Waits until the authorizer answers `kubectl auth can-i VERB RESOURCE -n NS` as the
    /// ServiceAccount with `allowed` (RBAC changes reach it through an informer).
    fn wait_can(&self, verb_resource: &[String], ns: &str, allowed: bool) {
        let who = format!("system:serviceaccount:{}:{}", self.ns, self.sa);
        let (verb, resource) = (&verb_resource[0], &verb_resource[1]);
        wait_until(
            Duration::from_secs(30),
            &format!("can-i {verb} {resource} as {who} to be {allowed}"),
            || {
                // `pods/proxy` is a subresource; `kubectl auth can-i get pods/x` would name a pod.
                let (base, sub) = match resource.split_once('/') {
                    Some((b, s)) => (b, format!("--subresource={s}")),
                    None => (resource.as_str(), "--subresource=".to_string()),
                };
                let out = kubectl(&["auth", "can-i", verb, base, &sub, "-n", ns, "--as", &who]);
                out.status.success() == allowed
            },
        );
    }

    /// The verb as this subject: (exit code, stdout, stderr).
    pub fn raft(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = raft_with(&self.kubeconfig, args);
        (out.status.code(), stdout(&out), stderr(&out))
    }
}

/// A (verb, resource) the role grants, to tell when the role has reached the authorizer.
fn role_rule_probe(role: &Value) -> Vec<String> {
    let rule = &role["rules"][0];
    vec![
        rule["verbs"][0].as_str().unwrap().to_string(),
        rule["resources"][0].as_str().unwrap().to_string(),
    ]
}

impl Drop for RbacSubject {
    fn drop(&mut self) {
        for b in &self.roles {
            let name = b.name();
            match b.namespace() {
                Some(ns) => {
                    for kind in ["rolebinding", "role"] {
                        let _ = kubectl(&["delete", kind, name, "-n", ns, "--wait=false"]);
                    }
                }
                None => {
                    for kind in ["clusterrolebinding", "clusterrole"] {
                        let _ = kubectl(&["delete", kind, name, "--wait=false"]);
                    }
                }
            }
        }
    }
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

/// The plugin running in the background, its stderr read as it comes, so a test can wait on
/// what it says (a condition) instead of sleeping.
pub struct Running {
    child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
    what: String,
}

impl Running {
    pub fn start(args: &[&str]) -> Self {
        Self::start_env(&[], args)
    }

    pub fn start_env(env: &[(&str, &str)], args: &[&str]) -> Self {
        use std::io::BufRead;
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-raft"));
        c.args(args)
            .env("KUBECONFIG", &world().kubeconfig)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("kubectl-raft starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr piped");
        let sink = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Running {
            child,
            stderr,
            reader: Some(reader),
            what: format!("kubectl raft {}", args.join(" ")),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until its stderr contains `text` (panics after `limit`, or if it exits first).
    pub fn wait_for(&mut self, text: &str, limit: Duration) {
        let what = format!("{:?} on the stderr of {}", text, self.what);
        let start = Instant::now();
        loop {
            if self.stderr_so_far().contains(text) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited ({status}) before saying {text:?}:\n{}",
                    self.what,
                    self.stderr_so_far()
                );
            }
            assert!(
                start.elapsed() < limit,
                "no {what} within {limit:?}:\n{}",
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until its stderr contains `text` (true) or it exits (false); panics after `limit`.
    pub fn says_or_exits(&mut self, text: &str, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.stderr_so_far().contains(text) {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            assert!(
                start.elapsed() < limit,
                "{} neither said {text:?} nor exited within {limit:?}:\n{}",
                self.what,
                self.stderr_so_far()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for it to end (killed after `limit`): exit code, stdout, stderr.
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String, String) {
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > limit {
                let _ = self.child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        let status = self.child.wait().expect("it ends");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status.code(), out, self.stderr_so_far())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
