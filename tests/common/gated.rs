//! The eviction gate as the end-to-end tests run it: `kubectl-raft gate serve` beside the API
//! server, registered as a URL webhook scoped to one namespace, and the evictors that meet it
//! (plain `kubectl drain`, one Eviction).

use std::time::Duration;

use super::*;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The gate, serving the webhook that sends it the evictions of namespace `ns`; removed on
/// drop (first the webhook, so that nothing is sent to a gate that is gone).
pub struct Gated {
    pub webhook: String,
    pub gate: Running,
    pub port: u16,
}

impl Gated {
    pub fn start(ns: &str) -> Self {
        Self::start_with(ns, &[])
    }

    /// With further flags of `gate serve`.
    pub fn start_with(ns: &str, extra: &[&str]) -> Self {
        let port = free_port();
        let webhook = format!("kubectl-raft-gate-{ns}");
        kubectl_ok(&[
            "label",
            "namespace",
            ns,
            &format!("kubectl-raft.io/gate-test={ns}"),
        ]);
        let config = format!(
            r#"{{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration",
  "metadata":{{"name":"{webhook}"}},
  "webhooks":[{{"name":"evictions.gate.kubectl-raft.io","admissionReviewVersions":["v1"],
    "sideEffects":"NoneOnDryRun","failurePolicy":"Fail","timeoutSeconds":10,
    "namespaceSelector":{{"matchLabels":{{"kubectl-raft.io/gate-test":"{ns}"}}}},
    "rules":[{{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods/eviction"],"scope":"Namespaced"}}],
    "clientConfig":{{"url":"https://127.0.0.1:{port}/validate"}}}}]}}"#
        );
        let file = tempfile(&config);
        kubectl_ok(&["apply", "-f", file.path_str()]);
        let listen = format!("127.0.0.1:{port}");
        let mut args = vec![
            "gate",
            "serve",
            "-n",
            ns,
            "--listen",
            &listen,
            "--tls-name",
            "127.0.0.1",
            "--tls-secret",
            "gate-tls",
            "--webhook",
            &webhook,
            "--lock-namespace",
            LOCK_NS,
        ];
        args.extend_from_slice(extra);
        let mut gate = Running::start(&args);
        gate.wait_for("serving on", Duration::from_secs(60));
        Gated {
            webhook,
            gate,
            port,
        }
    }
}

impl Drop for Gated {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "validatingwebhookconfiguration", &self.webhook]);
        if std::thread::panicking() {
            eprintln!("the gate's log:\n{}", self.gate.stderr_so_far());
        }
    }
}

/// Plain `kubectl drain NODE ARGS` (the machine's own kubectl, as an operator runs it):
/// whether it succeeded, and all it said (it reports its retries on stdout or stderr, by
/// version).
pub fn plain_drain(node: &str, args: &[&str]) -> (bool, String) {
    let mut a = vec!["drain", node];
    a.extend_from_slice(args);
    let out = kubectl_with(&machine_kubectl_bin(), &a);
    (
        out.status.success(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

/// Plain `kubectl drain NODE` as a node upgrade runs it (DaemonSets ignored, emptyDir data
/// deleted, 180 s at most), which must succeed: what it said.
pub fn plain_drain_ok(node: &str) -> String {
    let (ok, said) = plain_drain(
        node,
        &[
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    );
    assert!(ok, "kubectl drain {node} failed: {said}");
    said
}

/// One Eviction of `pod` through the API server (what every evictor sends): whether it was
/// admitted, and what the API server answered.
pub fn evict(ns: &str, pod: &str) -> (bool, String) {
    let body = format!(
        r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{pod}","namespace":"{ns}"}}}}"#
    );
    let f = tempfile(&body);
    let out = kubectl(&[
        "create",
        "--raw",
        &format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"),
        "-f",
        f.path_str(),
    ]);
    (
        out.status.success(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

/// Plain `kubectl drain` of `pod`'s node with `args`, the node cordoned until the returned
/// guard goes: the drain succeeds and `pod` was evicted (its UID changed).
pub fn plain_drain_evicts(ns: &str, pod: &str, args: &[&str]) -> Cordoned {
    let node = node_of(ns, pod);
    let before = uids(ns);
    let cordoned = Cordoned(vec![node.clone()]);
    let (ok, said) = plain_drain(&node, args);
    assert!(ok, "kubectl drain {node}: {said}");
    assert_ne!(uids(ns).get(pod), before.get(pod), "{pod} was evicted");
    cordoned
}

/// A StatefulSet `web` of one plain HTTP server: no Raft system, which the gate never holds.
pub fn deploy_web(ns: &str) {
    deploy_python_sts(
        ns,
        "web",
        "import http.server\nhttp.server.HTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()",
        &[],
        None,
    );
}

/// One AdmissionReview of `pod`'s eviction posted straight to the gate on `port`, presenting the
/// world's client certificate `cert` (a file stem in its PKI: "admin" is the admin's) or none:
/// the HTTP status and the body.
pub fn post_review_as(port: u16, ns: &str, pod: &str, cert: Option<&str>) -> (String, String) {
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"posted","operation":"CREATE","resource":{{"group":"","version":"v1","resource":"pods"}},"subResource":"eviction","name":"{pod}","namespace":"{ns}","dryRun":false,"userInfo":{{"username":"someone"}}}}}}"#
    );
    let pki = world_dir().join("run/pki");
    let mut args: Vec<String> = [
        "-sk",
        "--max-time",
        "15",
        "-w",
        "\n%{http_code}",
        "-H",
        "content-type: application/json",
        "--data",
        &body,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if let Some(c) = cert {
        for (flag, ext) in [("--cert", "crt"), ("--key", "key")] {
            args.push(flag.into());
            args.push(pki.join(format!("{c}.{ext}")).display().to_string());
        }
    }
    args.push(format!("https://127.0.0.1:{port}/validate"));
    let out = std::process::Command::new("curl")
        .args(&args)
        .output()
        .expect("curl");
    let text = stdout(&out);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().to_string(), body.to_string())
}

/// One AdmissionReview of `pod`'s eviction posted straight to the gate on `port`, as anyone who
/// reaches its port can (the API server's reviews look the same): its answer's `response`.
pub fn review(port: u16, ns: &str, pod: &str, dry_run: bool) -> serde_json::Value {
    review_within(port, ns, pod, dry_run, None)
}

/// `review` with the API server's `?timeout=` (what is left of its `timeoutSeconds`), which
/// the gate's budget keeps within.
pub fn review_within(
    port: u16,
    ns: &str,
    pod: &str,
    dry_run: bool,
    timeout: Option<&str>,
) -> serde_json::Value {
    let query = timeout.map(|t| format!("?timeout={t}")).unwrap_or_default();
    let body = format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"posted","operation":"CREATE","resource":{{"group":"","version":"v1","resource":"pods"}},"subResource":"eviction","name":"{pod}","namespace":"{ns}","dryRun":{dry_run},"userInfo":{{"username":"someone"}}}}}}"#
    );
    let out = std::process::Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "15",
            "-H",
            "content-type: application/json",
            "--data",
            &body,
            &format!("https://127.0.0.1:{port}/validate{query}"),
        ])
        .output()
        .expect("curl");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .map_or(serde_json::Value::Null, |v| v["response"].clone())
}
