//! Trust boundaries (docs/security.md): what a tenant who can write a StatefulSet and its
//! annotations in their own namespace can make an admin's `kubectl raft` do. Each test stages
//! the attack in the real world, with a tenant pod that records every request it receives.

use std::path::Path;

use crate::common::*;
use serde_json::Value;

/// A secret of the admin's shell, in a variable name nobody uses.
const ADMIN_SECRET: &str = "admin-secret-7c1e";

/// The tenant's recording server as StatefulSet `name` in `ns`, with `annotations`; the
/// directory its requests are recorded in.
fn tenant(ns: &str, name: &str, annotations: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = scratch_dir(ns).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    deploy_python_sts(
        ns,
        name,
        &recording_server("{'version': '1', 'role': 'follower'}"),
        annotations,
        Some(&dir),
    );
    dir
}

fn mentions_secret(dir: &Path, secret: &str) -> bool {
    recorded(dir).iter().any(|r| r.to_string().contains(secret))
}

#[test]
fn an_annotation_profile_cannot_make_status_all_send_the_admins_variables() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-vars");
    let profile = "name: t\nport: {numbers: [8080]}\nhealth: {request: {path: /health, headers: {X: \"${KRAFT_ADMIN_SECRET:-none}\"}}}\n";
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/profile", profile)]);
    let out = raft_env(
        &[("KRAFT_ADMIN_SECRET", ADMIN_SECRET)],
        &["status", "-A", "-o", "json"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the tenant's pod received the admin's variable: {:?}",
        recorded(&dir)
    );
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}/tenant", ns.name)) && err.contains("sets headers"),
        "the skipped StatefulSet is named with why: {err}"
    );
}

#[test]
fn a_tenant_claiming_to_be_consul_gets_no_token_from_status_all() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-consul");
    // The built-in consul profile reads the port named "http": the tenant's server.
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    let env = [("CONSUL_HTTP_TOKEN", ADMIN_SECRET)];
    let out = raft_env(&env, &["status", "-A", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        recorded(&dir).iter().any(|r| r["path"] == "/v1/agent/self"),
        "the tenant's pod was asked as Consul (else this test proves nothing): {:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the tenant's pod received the admin's token: {:?}",
        recorded(&dir)
    );
    // Named by the admin, it gets the token: the admin chose to talk to it.
    let out = raft_env(&env, &["status", "tenant", "-n", &ns.name]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(mentions_secret(&dir, ADMIN_SECRET), "{:?}", recorded(&dir));
}

#[test]
fn a_statefulset_whose_selector_matches_anothers_pods_reaches_none_of_them() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-selector");
    deploy_etcd(&ns.name, 3);
    // replicas: 0, a selector and template labels that match etcd's pods, and a "health"
    // request that would write a key into etcd.
    let thief = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: thief
  annotations:
    kubectl-raft.io/profile: |
      name: thief
      port: {numbers: [2379]}
      health: {request: {method: POST, path: /v3/kv/put, body: '{"key": "dGhpZWY=", "value": "eA=="}'}}
spec:
  serviceName: thief
  replicas: 0
  selector: {matchLabels: {app: etcd}}
  template:
    metadata: {labels: {app: etcd}}
    spec:
      containers: [{name: c, image: busybox, command: [/bin/sleep, "3600"]}]
"#;
    let f = tempfile(thief);
    kubectl_ok(&["apply", "-n", &ns.name, "-f", f.path_str()]);
    let out = raft(&["status", "-n", &ns.name, "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let range = etcd_post(&ns.name, "etcd-0", "/v3/kv/range", r#"{"key": "dGhpZWY="}"#)
        .expect("etcd answers");
    assert!(
        range["count"].as_str().is_none_or(|c| c == "0"),
        "the key was written: {range}"
    );
    // With a harmless profile, the thief is listed with no pods of its own.
    kubectl_ok(&[
        "annotate",
        "sts",
        "thief",
        "-n",
        &ns.name,
        "--overwrite",
        "kubectl-raft.io/profile=name: thief\nport: {numbers: [2379]}\nhealth: {request: {path: /health}}\n",
    ]);
    let report = status_json(&["-n", &ns.name]);
    let thief: Vec<&Value> = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "thief")
        .collect();
    assert!(
        thief
            .iter()
            .all(|c| c["replicas"].as_array().unwrap().is_empty()),
        "{thief:?}"
    );
    let etcd = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "etcd")
        .expect("etcd is listed");
    assert_eq!(etcd["replicas"].as_array().unwrap().len(), 3);
}

#[test]
fn a_bad_annotation_elsewhere_stops_neither_status_all_nor_a_drain_dry_run() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-bad");
    tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "nope")]);
    let out = raft(&["status", "-A", "-o", "json"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("{}/tenant", ns.name)) && err.contains("skipped"),
        "{err}"
    );
    let node = node_of(&ns.name, "tenant-0");
    let out = raft(&[
        "drain",
        &node,
        "--dry-run",
        "--ignore-daemonsets",
        "-o",
        "json",
    ]);
    let err = stderr(&out);
    assert!(
        !err.contains("error: "),
        "the dry run was not stopped: {err}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a report");
    assert_eq!(report["dryRun"], true, "{report}");
    // Named, it is an error: the user asked for exactly that one.
    let out = raft(&["status", "tenant", "-n", &ns.name]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unknown system"), "{}", stderr(&out));
}

#[test]
fn what_a_replica_says_cannot_steer_the_admins_terminal() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-escape");
    let dir = scratch_dir(&ns.name).join("esc");
    std::fs::create_dir_all(&dir).unwrap();
    deploy_python_sts(
        &ns.name,
        "esc",
        &recording_server(
            "{'version': '\\x1b]0;owned\\x07\\x1b[2J3.5', 'role': 'leader\\x1b[31m'}",
        ),
        &[],
        Some(&dir),
    );
    let profile = tempfile(
        "- name: esc\n  \
         detect: {images: [python]}\n  \
         port: {numbers: [8080]}\n  \
         health: {request: {path: /health}}\n  \
         requests:\n  \
         - name: info\n    \
           request: {path: /info}\n    \
           fields: {version: {json: /version}, role: {json: /role}}\n",
    );
    for output in ["table", "wide"] {
        let out = raft(&[
            "status",
            "esc",
            "-n",
            &ns.name,
            "--system",
            "esc",
            "--profiles",
            profile.path_str(),
            "-o",
            output,
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        for stream in [&out.stdout, &out.stderr] {
            assert!(
                !stream.contains(&0x1b) && !stream.contains(&0x07),
                "{output}: a control character was printed: {:?}",
                String::from_utf8_lossy(stream)
            );
        }
    }
}

#[test]
fn label_mode_says_which_pods_it_took_and_why() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-label");
    deploy_etcd(&ns.name, 3);
    let out = raft(&["status", "-n", &ns.name, "-l", "app=etcd"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "-l app=etcd in namespace {}: 3 pod(s) taken as one etcd cluster by their labels",
            ns.name
        )) && err.contains("etcd-0, etcd-1, etcd-2"),
        "{err}"
    );
}

#[test]
fn a_replica_answering_like_an_rbac_refusal_is_not_taken_for_one() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-status");
    // Every request answered 403 with the body the API server sends when RBAC refuses.
    let program = "import http.server, json\n\
        BODY = json.dumps({'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'message': 'pods \"x\" is forbidden: User \"admin\" cannot get resource \"pods/proxy\"', 'reason': 'Forbidden', 'code': 403}).encode()\n\
        class H(http.server.BaseHTTPRequestHandler):\n    \
            def do_GET(self):\n        \
                self.send_response(403)\n        \
                self.send_header('Content-Type', 'application/json')\n        \
                self.send_header('Content-Length', str(len(BODY)))\n        \
                self.end_headers()\n        \
                self.wfile.write(BODY)\n    \
            def log_message(self, *a):\n        \
                pass\n\
        http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()";
    deploy_python_sts(&ns.name, "fake403", program, &[], None);
    let profile = tempfile(
        "- name: fake403\n  \
         detect: {images: [python]}\n  \
         port: {numbers: [8080]}\n  \
         health: {request: {path: /health}}\n",
    );
    let out = raft(&[
        "status",
        "fake403",
        "-n",
        &ns.name,
        "--system",
        "fake403",
        "--profiles",
        profile.path_str(),
        "-o",
        "json",
    ]);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(
        out.status.success(),
        "the replica's own 403 was taken for the API server's refusal: {err}"
    );
    assert!(
        !stdout.contains("pods/proxy (docs/rbac.yaml)") && !err.contains("docs/rbac.yaml"),
        "the report blames RBAC: {stdout}{err}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let replica = &report["clusters"][0]["replicas"][0];
    assert_eq!(replica["raft"]["health"]["state"], "failing", "{replica}");
    assert!(
        replica["raft"]["health"]["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("HTTP 403")),
        "{replica}"
    );
}

/// A keep-alive HTTP/1.1 server on 8080 that records, per request, the client port it came
/// from (`port`); it closes a connection idle for `idle_close` seconds.
fn keepalive_recorder(idle_close: f32) -> String {
    format!(
        "import http.server, json\n\
         BODY = b'{{}}'\n\
         class H(http.server.BaseHTTPRequestHandler):\n    \
             protocol_version = 'HTTP/1.1'\n    \
             timeout = {idle_close}\n    \
             def do_GET(self):\n        \
                 with open('/rec/requests', 'a') as f:\n            \
                     f.write(json.dumps({{'path': self.path, 'port': self.client_address[1]}}) + '\\n')\n        \
                 self.send_response(200)\n        \
                 self.send_header('Content-Length', str(len(BODY)))\n        \
                 self.end_headers()\n        \
                 self.wfile.write(BODY)\n    \
             def log_message(self, *a):\n        \
                 pass\n\
         http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()"
    )
}

/// Watches StatefulSet `name` (a keep-alive recorder) through port-forwards for ~5 s, every
/// 500ms; the requests its pod recorded, and the watch's stdout.
fn watched_through_port_forwards(ns: &str, name: &str, idle_close: f32) -> (Vec<Value>, String) {
    let dir = scratch_dir(ns).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    deploy_python_sts(ns, name, &keepalive_recorder(idle_close), &[], Some(&dir));
    let profile = tempfile(&format!(
        "- name: {name}\n  \
         detect: {{images: [python]}}\n  \
         port: {{numbers: [8080]}}\n  \
         health: {{request: {{path: /health}}}}\n"
    ));
    let mut w = Running::start(&[
        "status",
        name,
        "-n",
        ns,
        "--system",
        name,
        "--profiles",
        profile.path_str(),
        "--via",
        "port-forward",
        "--watch",
        "--interval",
        "500ms",
        "-o",
        "json",
    ]);
    w.wait_for("watching 1 cluster(s)", std::time::Duration::from_secs(60));
    std::thread::sleep(std::time::Duration::from_secs(5));
    signal(w.pid(), "INT");
    let (code, out, err) = w.finish(std::time::Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
    (recorded(&dir), out)
}

#[test]
fn a_command_keeps_one_port_forward_per_replica_port() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-pf");
    let (requests, _) = watched_through_port_forwards(&ns.name, "keepalive", 60.0);
    let ports: std::collections::BTreeSet<_> =
        requests.iter().filter_map(|r| r["port"].as_u64()).collect();
    assert!(
        requests.len() >= 5,
        "a watch of 5 s at 500ms asks several times: {requests:?}"
    );
    assert_eq!(
        ports.len(),
        1,
        "{} requests came over {} connections (a port-forward each): {requests:?}",
        requests.len(),
        ports.len()
    );
}

#[test]
fn a_kept_port_forward_the_server_closed_is_replaced_without_a_failed_probe() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-pf-idle");
    // The server closes connections idle for 0.2 s; the watch asks every 500ms.
    let (requests, out) = watched_through_port_forwards(&ns.name, "idleclose", 0.2);
    assert!(requests.len() >= 5, "{requests:?}");
    let ports: std::collections::BTreeSet<_> =
        requests.iter().filter_map(|r| r["port"].as_u64()).collect();
    assert!(
        ports.len() > 1,
        "the server closed no connection: {requests:?}"
    );
    assert!(
        !out.contains("failing") && !out.contains("unreachable") && !out.contains("no answer"),
        "a probe failed on a connection the server had closed: {out}"
    );
}

/// A token of the admin's own credentials file, in a variable the Consul profile sends.
const ADMIN_FILE_SECRET: &str = "admin-file-secret-51d2";

#[test]
fn a_tenant_claiming_to_be_consul_on_a_drained_node_gets_no_token_from_the_drain() {
    let _nodes = exclusive_nodes();
    let ns = TestNamespace::new("trust-drain");
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    let node = node_of(&ns.name, "tenant-0");
    wait_node_alone(&node, &ns.name);
    let _cordoned = Cordoned(vec![node.clone()]);
    // The drain acts on the tenant's cluster (its pod is on the node): it looks at it again
    // by name before every step. It stops there (no member list): what it sent is the test.
    let _ = raft_env(
        &[("CONSUL_HTTP_TOKEN", ADMIN_SECRET)],
        &["drain", &node, "--ignore-daemonsets", "--timeout", "10s"],
    );
    let asked = recorded(&dir)
        .iter()
        .filter(|r| r["path"] == "/v1/agent/self")
        .count();
    assert!(
        asked >= 2,
        "the drain looked at the tenant's cluster again (else this test proves nothing): {:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the tenant's pod received the admin's token during the drain: {:?}",
        recorded(&dir)
    );
}

#[test]
fn a_tenant_matched_by_restart_l_gets_no_token() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-restart-l");
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    kubectl_ok(&["label", "sts", "tenant", "-n", &ns.name, "kraft-trust=yes"]);
    // The restart stops at the tenant (no member list); the label matched it, the admin did
    // not name it.
    let _ = raft_env(
        &[("CONSUL_HTTP_TOKEN", ADMIN_SECRET)],
        &["restart", "-l", "kraft-trust=yes", "-A", "--timeout", "10s"],
    );
    assert!(
        recorded(&dir).iter().any(|r| r["path"] == "/v1/agent/self"),
        "the tenant's pod was asked as Consul (else this test proves nothing): {:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the tenant's pod received the admin's token: {:?}",
        recorded(&dir)
    );
}

/// `-v=10`, the most a user can ask: every request is shown, and the token the named cluster
/// receives is in none of it.
#[test]
fn a_verbose_run_shows_each_request_but_never_a_token() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-verbose");
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    let env = [("CONSUL_HTTP_TOKEN", ADMIN_SECRET)];
    let out = raft_env(&env, &["status", "tenant", "-n", &ns.name, "-v=10"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        mentions_secret(&dir, ADMIN_SECRET),
        "the named cluster received the token (else this test proves nothing): {:?}",
        recorded(&dir)
    );
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        e.contains(&format!("GET {}/tenant-0:", ns.name)) && e.contains("/v1/agent/self"),
        "each replica request is shown: {e}"
    );
    assert!(
        e.contains("http.url") && e.contains("/api/v1/"),
        "each API request is shown: {e}"
    );
    assert!(
        !o.contains(ADMIN_SECRET) && !e.contains(ADMIN_SECRET),
        "the token was printed: {e}"
    );
}

#[test]
fn the_admins_credentials_file_goes_only_to_clusters_the_admin_names() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-file");
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    let file = tempfile(&format!("CONSUL_HTTP_TOKEN={ADMIN_FILE_SECRET}\n"));
    let out = raft(&[
        "status",
        "-A",
        "-o",
        "json",
        "--credentials-file",
        file.path_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        recorded(&dir).iter().any(|r| r["path"] == "/v1/agent/self"),
        "{:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_FILE_SECRET),
        "status -A sent the file's token to a cluster the admin did not name: {:?}",
        recorded(&dir)
    );
    // Named, it gets the file's token.
    let out = raft(&[
        "status",
        "tenant",
        "-n",
        &ns.name,
        "--credentials-file",
        file.path_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        mentions_secret(&dir, ADMIN_FILE_SECRET),
        "{:?}",
        recorded(&dir)
    );
}

#[test]
fn a_secret_the_tenant_names_but_did_not_label_is_never_sent() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-secret");
    // A platform-managed Secret in the tenant's namespace, not meant for the tenant's pods.
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "platform-token",
        "-n",
        &ns.name,
        &format!("--from-literal=CONSUL_HTTP_TOKEN={ADMIN_SECRET}"),
    ]);
    let dir = tenant(
        &ns.name,
        "tenant",
        &[
            ("kubectl-raft.io/system", "consul"),
            ("kubectl-raft.io/credentials-secret", "platform-token"),
        ],
    );
    let out = raft(&["status", "-A", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        recorded(&dir).iter().any(|r| r["path"] == "/v1/agent/self"),
        "{:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the admin read the Secret and sent it to the tenant's pod: {:?}",
        recorded(&dir)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = cluster(&report, &ns.name);
    assert!(
        c["warnings"].as_array().unwrap().iter().any(|w| {
            w["code"] == "CredentialsUnreadable"
                && w["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not labelled kubectl-raft.io/credentials=true"))
        }),
        "the report says why: {c:#}"
    );
    // Its writer labels it: now it is used.
    kubectl_ok(&[
        "label",
        "secret",
        "platform-token",
        "-n",
        &ns.name,
        "kubectl-raft.io/credentials=true",
    ]);
    let out = raft(&["status", "-A", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(mentions_secret(&dir, ADMIN_SECRET), "{:?}", recorded(&dir));
}

#[test]
fn a_tenant_chosen_by_yield_l_gets_no_token() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-yield-l");
    let dir = tenant(&ns.name, "tenant", &[("kubectl-raft.io/system", "consul")]);
    // Pods chosen by their labels are not a cluster the admin named.
    let _ = raft_env(
        &[("CONSUL_HTTP_TOKEN", ADMIN_SECRET)],
        &[
            "yield",
            "-l",
            "app=tenant",
            "-n",
            &ns.name,
            "--system",
            "consul",
            "--timeout",
            "5s",
        ],
    );
    assert!(
        recorded(&dir).iter().any(|r| r["path"] == "/v1/agent/self"),
        "the tenant's pod was asked as Consul (else this test proves nothing): {:?}",
        recorded(&dir)
    );
    assert!(
        !mentions_secret(&dir, ADMIN_SECRET),
        "the tenant's pod received the admin's token: {:?}",
        recorded(&dir)
    );
}

#[test]
fn an_annotation_profile_named_with_a_newline_prints_no_line_of_its_own() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-forge");
    let forged = "name: \"x\\nkube-system/etcd (etcd, StatefulSet): QUORUM LOST\"\nport: {numbers: [8080]}\nhealth: {request: {path: /health}}\n";
    tenant(&ns.name, "tenant", &[("kubectl-raft.io/profile", forged)]);
    let out = raft(&["status", "-A"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for stream in [stdout(&out), stderr(&out)] {
        assert!(
            !stream.lines().any(|l| l.starts_with("kube-system/etcd")),
            "a tenant's profile printed a line of its own: {stream}"
        );
    }
}

/// A tenant's HTTPS server on 8080 whose certificate the admin's CA signed (a cluster-wide
/// issuer), asking every client for a certificate of that CA (optional) and recording, for
/// each request, whether one came: what a tenant's pod learns of the admin's client key.
fn tls_recording_server() -> String {
    "import http.server, json, ssl\n\
     class H(http.server.BaseHTTPRequestHandler):\n    \
         def handle_one(self):\n        \
             rec = {'method': self.command, 'path': self.path, 'client_cert': bool(self.connection.getpeercert())}\n        \
             with open('/rec/requests', 'a') as f:\n            \
                 f.write(json.dumps(rec) + '\\n')\n        \
             body = b'{}'\n        \
             self.send_response(200)\n        \
             self.send_header('Content-Length', str(len(body)))\n        \
             self.end_headers()\n        \
             self.wfile.write(body)\n    \
         do_GET = do_POST = do_PUT = handle_one\n    \
         def log_message(self, *a):\n        \
             pass\n\
     srv = http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H)\n\
     ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
     ctx.load_cert_chain('/rec/tls.crt', '/rec/tls.key')\n\
     ctx.load_verify_locations('/rec/ca.crt')\n\
     ctx.verify_mode = ssl.CERT_OPTIONAL\n\
     srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n\
     srv.serve_forever()"
        .to_string()
}

#[test]
fn a_tenant_claiming_an_https_system_never_receives_the_admins_client_certificate() {
    let _nodes = shared_nodes();
    let ns = TestNamespace::new("trust-tls");
    let ca = TestCa::new();
    let dir = scratch_dir(&ns.name).join("tenant");
    let server = ca.issue(&TestCa::member_names("tenant", &ns.name), 30);
    let files = [
        ("ca.crt", ca.pem()),
        ("tls.crt", server.cert),
        ("tls.key", server.key),
    ];
    for (k, v) in &files {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(k), v).unwrap();
    }
    deploy_python_sts(
        &ns.name,
        "tenant",
        &tls_recording_server(),
        &[
            ("kubectl-raft.io/system", "consul"),
            ("kubectl-raft.io/scheme", "https"),
        ],
        Some(&dir),
    );
    let client = ca.issue(&["admin".to_string()], 30);
    let admin = tls_files(
        &ns.name,
        "admin",
        &[
            ("ca.crt", &ca.pem()),
            ("tls.crt", &client.cert),
            ("tls.key", &client.key),
        ],
    );
    let flags = |f: &str| admin.join(f).to_str().unwrap().to_string();
    let (ca_f, cert_f, key_f) = (flags("ca.crt"), flags("tls.crt"), flags("tls.key"));
    let tls = [
        "--tls-ca",
        &ca_f,
        "--tls-cert",
        &cert_f,
        "--tls-key",
        &key_f,
    ];
    // Not named: asked (verification skipped, so a connection is made), never with the key.
    let mut args = vec![
        "status",
        "-A",
        "-o",
        "json",
        "--tls-skip-verify",
        "--via",
        "direct",
    ];
    args.extend_from_slice(&tls);
    let out = raft(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let asked = recorded(&dir);
    assert!(
        asked.iter().any(|r| r["path"] == "/v1/agent/self"),
        "the tenant's pod was asked as Consul over TLS (else this test proves nothing): {asked:?}"
    );
    assert!(
        asked.iter().all(|r| r["client_cert"] == false),
        "status -A presented the admin's client certificate to a cluster the admin did not name: {asked:?}"
    );
    // Named by the admin, it gets the certificate: the admin chose to talk to it.
    let mut args = vec!["status", "tenant", "-n", &ns.name, "--via", "direct"];
    args.extend_from_slice(&tls);
    let out = raft(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        recorded(&dir).iter().any(|r| r["client_cert"] == true),
        "{:?}",
        recorded(&dir)
    );
}
