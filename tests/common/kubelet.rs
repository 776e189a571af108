//! The world's real-kubelet nodes (`kreal-1..N`: Kubernetes' own kubelet over containerd and
//! runc, tests/world/cmd/kworld/kubelet.go): placing a manifest's pods on them, a container's
//! host process there, the plugin's own image in their containerd, and the kubelet's own
//! account of its probes.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::*;

/// Real-kubelet nodes in the shared world: one more than a 3-member cluster needs, so that a
/// drained member's replacement has a node under required anti-affinity.
pub const REAL_NODES: u32 = 4;

/// Where a test's pods run: on the agent's nodes (`kworld-N`) or on real kubelets (`kreal-N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nodes {
    Agent,
    Kubelet,
}

impl Nodes {
    /// The node-name prefix of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Nodes::Agent => "kworld-",
            Nodes::Kubelet => "kreal-",
        }
    }
}

/// The real-kubelet nodes' names as the world names them (`kreal-1..N`).
pub fn real_node_names() -> Vec<String> {
    let prefix = Nodes::Kubelet.prefix();
    (1..=REAL_NODES).map(|i| format!("{prefix}{i}")).collect()
}

/// Holds the nodes a test cordons, drains or silences: one lane of the agent's, or every lane
/// for the real kubelets (one pool, in every lane).
pub fn exclusive_on(nodes: Nodes) -> NodesGuard {
    match nodes {
        Nodes::Agent => exclusive_nodes(),
        Nodes::Kubelet => exclusive_all_nodes(),
    }
}

/// The real-kubelet nodes' names, as the API lists them.
pub fn real_nodes() -> Vec<String> {
    let list = kubectl_json(&["get", "nodes", "-l", "kworld.local/node-kind=kubelet"]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    names.sort();
    names
}

/// A manifest's objects with every pod template (and bare pod) placed on the given kind of
/// node (`kworld place`, the world's one definition of placement: on real kubelets the
/// kind's node label selected, its taint tolerated and `example/shell` run from the busybox
/// image). On the agent's nodes the manifest is applied as it is.
pub fn placed(manifest: &str, nodes: Nodes) -> String {
    if nodes == Nodes::Agent {
        return manifest.to_string();
    }
    let f = tempfile(manifest);
    let out = Command::new(world_dir().join("bin/kworld"))
        .args(["place", "--kind", "kubelet", f.path_str()])
        .output()
        .expect("kworld place runs");
    assert!(
        out.status.success(),
        "kworld place: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("JSON")
}

/// Applies a manifest's text in a namespace, its pods on the given kind of node.
pub fn apply_on(ns: &str, manifest: &str, nodes: Nodes) {
    let f = tempfile(&placed(manifest, nodes));
    kubectl_ok(&["apply", "-n", ns, "-f", f.path_str()]);
}

/// The host process id of a container's first process, from its containerID, on either kind
/// of node (`kworld pid`).
pub fn host_pid_of(container_id: &str) -> i32 {
    let out = Command::new(world_dir().join("bin/kworld"))
        .args(["pid", container_id])
        .output()
        .expect("kworld pid runs");
    assert!(
        out.status.success(),
        "kworld pid {container_id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a pid")
}

static PLUGIN_IMAGE: OnceLock<Result<String, String>> = OnceLock::new();

/// The plugin's release image (tests/image.sh's OCI archive), imported into every real node's
/// containerd under the name docs/yield.md gives it; returns that name.
pub fn plugin_image() -> String {
    let r = PLUGIN_IMAGE.get_or_init(|| {
        // The world first: the image goes into its real nodes' containerd, and a test may call
        // this before anything else started the world (it takes no lanes).
        world();
        image_binary(); // builds the release image when it is missing
        let version = env!("CARGO_PKG_VERSION");
        let name = format!("ghcr.io/kubectl-raft/kubectl-raft:v{version}");
        let oci = world_dir().join("image/dist/kubectl-raft-image-linux-amd64.tar");
        let archive: PathBuf =
            std::env::temp_dir().join(format!("kraft-plugin-image-{}.tar", std::process::id()));
        let _ = std::fs::remove_file(&archive);
        let out = Command::new("skopeo")
            .args(["copy", "-q"])
            .arg(format!("oci-archive:{}:v{version}", oci.display()))
            .arg(format!("docker-archive:{}:{name}", archive.display()))
            .output()
            .map_err(|e| format!("cannot run skopeo: {e}"))?;
        if !out.status.success() {
            return Err(format!("skopeo: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let out = Command::new(world_dir().join("bin/kworld"))
            .arg("kubelet-import")
            .arg(&archive)
            .output()
            .map_err(|e| format!("cannot run kworld: {e}"))?;
        let _ = std::fs::remove_file(&archive);
        if !out.status.success() {
            return Err(format!(
                "kworld kubelet-import: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(name)
    });
    match r {
        Ok(n) => n.clone(),
        Err(e) => panic!("the plugin's image cannot be put on the real nodes: {e}"),
    }
}

/// The kubelet's own count of a container's probe results (`prober_probe_total` from the
/// node's /metrics/probes, through the API server's node proxy).
pub fn probe_count(node: &str, ns: &str, pod: &str, probe: &str, result: &str) -> Option<u64> {
    let out = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics/probes"),
        "--request-timeout=5s",
    ]);
    if !out.status.success() {
        return None;
    }
    let want = [
        format!("namespace=\"{ns}\""),
        format!("pod=\"{pod}\""),
        format!("probe_type=\"{probe}\""),
        format!("result=\"{result}\""),
    ];
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.starts_with("prober_probe_total{") && want.iter().all(|w| l.contains(w.as_str()))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum::<u64>()
        .into()
}

/// Waits until the kubelet has counted `more` further results of a pod's probe.
pub fn wait_probes(node: &str, ns: &str, pod: &str, probe: &str, result: &str, more: u64) {
    // The count to start from must be read: a failed read taken for 0 would pass at once.
    let mut from = None;
    wait_in(
        ns,
        Duration::from_secs(30),
        &format!("{node}'s probe metrics"),
        || {
            from = probe_count(node, ns, pod, probe, result);
            from.is_some()
        },
    );
    let from = from.unwrap();
    wait_in(
        ns,
        Duration::from_secs(60),
        &format!("{more} more {result} {probe} probes of {pod} by {node}'s kubelet"),
        || probe_count(node, ns, pod, probe, result).is_some_and(|n| n >= from + more),
    );
}

/// Asserts that every pod in the namespace runs on the given kind of node (a test meant for
/// real kubelets must not pass on the agent's nodes because a placement was lost).
pub fn assert_pods_on(ns: &str, nodes: Nodes) {
    let pods = kubectl_json(&["get", "pods", "-n", ns]);
    for p in pods["items"].as_array().into_iter().flatten() {
        let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
        assert!(
            node.starts_with(nodes.prefix()),
            "pod {} runs on {node:?}, not on a {:?} node",
            p["metadata"]["name"],
            nodes
        );
    }
}
