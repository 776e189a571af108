//! Certificates made by the test (rcgen, the crate the gate's CA uses): a CA, servers'
//! certificates for a StatefulSet's members, clients' certificates; written into Secrets and
//! files, and an independent TLS client (curl) to read the truth from a TLS server.

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::Value;
use time::{Duration as Span, OffsetDateTime};

use super::*;

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    pub fn new() -> TestCa {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A subject of its own: a leaf with the CA's subject looks self-signed to OpenSSL
        // and Go (rcgen's default subject is the same for every certificate).
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kubectl-raft test CA");
        TestCa {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names, wildcards, IPs), valid until `days` from now
    /// (negative: expired).
    pub fn issue(&self, names: &[String], days: i64) -> Issued {
        let mut p = CertificateParams::new(names.to_vec()).unwrap();
        let now = OffsetDateTime::now_utc();
        p.not_before = now - Span::days(400);
        p.not_after = now + Span::days(days);
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(first) = names.first() {
            p.distinguished_name
                .push(rcgen::DnType::CommonName, first.to_string());
        }
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// The names a member of StatefulSet `service` in `ns` is served by.
    pub fn member_names(service: &str, ns: &str) -> Vec<String> {
        vec![
            format!("*.{service}.{ns}.svc.cluster.local"),
            format!("*.{service}.{ns}.svc"),
            format!("*.{service}"),
            "localhost".into(),
            "127.0.0.1".into(),
        ]
    }
}

/// A Secret of `ns` with these keys (PEM text), and these labels.
pub fn tls_secret(ns: &str, name: &str, keys: &[(&str, &str)], labels: &[&str]) {
    let dir = scratch_dir(ns).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut args: Vec<String> = vec![
        "create".into(),
        "secret".into(),
        "generic".into(),
        name.into(),
        "-n".into(),
        ns.into(),
    ];
    for (k, v) in keys {
        let f = dir.join(k);
        std::fs::write(&f, v).unwrap();
        args.push(format!("--from-file={k}={}", f.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kubectl_ok(&args);
    for l in labels {
        kubectl_ok(&["label", "secret", name, "-n", ns, l]);
    }
}

/// PEM files of the test's own, for flags (--tls-ca ...): their directory.
pub fn tls_files(ns: &str, name: &str, keys: &[(&str, &str)]) -> PathBuf {
    let dir = scratch_dir(ns).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (k, v) in keys {
        std::fs::write(dir.join(k), v).unwrap();
    }
    dir
}

/// PATH on one member of the StatefulSet `service` over TLS with a client certificate, by curl
/// straight to the pod's IP on `port` (an independent client: not the plugin's TLS), POSTing
/// `body` if given: the answer, or None.
pub fn curl_tls(
    (ns, service, pod): (&str, &str, &str),
    port: u16,
    client: &Path,
    path: &str,
    body: Option<&str>,
) -> Option<Value> {
    let ip = pod_json(ns, pod)["status"]["podIP"].as_str()?.to_string();
    let host = format!("{pod}.{service}.{ns}.svc");
    let mut curl = Command::new("curl");
    curl.args(["-sS", "--max-time", "3", "--cacert"])
        .arg(client.join("ca.crt"))
        .arg("--cert")
        .arg(client.join("tls.crt"))
        .arg("--key")
        .arg(client.join("tls.key"))
        .args(["--resolve", &format!("{host}:{port}:{ip}")]);
    if let Some(b) = body {
        curl.args(["-d", b]);
    }
    let out = curl
        .arg(format!("https://{host}:{port}{path}"))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// etcd's POST PATH on one member over TLS with a client certificate (curl).
pub fn etcd_tls_post(ns: &str, pod: &str, client: &Path, path: &str) -> Option<Value> {
    curl_tls((ns, "etcd", pod), 2379, client, path, Some("{}"))
}

/// The leader's pod and the Raft term, as the TLS etcd's members say it (exactly one
/// claimant), read with curl.
pub fn etcd_tls_leader(ns: &str, client: &Path) -> Option<(String, u64)> {
    let mut leaders = vec![];
    for p in etcd_pods(ns) {
        let name = p["metadata"]["name"].as_str()?.to_string();
        if let Some(st) = etcd_tls_post(ns, &name, client, "/v3/maintenance/status") {
            let me = st["header"]["member_id"].as_str().unwrap_or_default();
            let term = st["raftTerm"].as_str().and_then(|t| t.parse().ok());
            if !me.is_empty() && st["leader"].as_str() == Some(me) {
                leaders.push((name, term?));
            }
        }
    }
    (leaders.len() == 1).then(|| leaders.remove(0))
}

/// A 3-member etcd that requires client certificates (tests/manifests/etcd-3-tls.yaml), its
/// server certificates from `ca`, every member Ready; the directory of a client's files
/// (ca.crt, tls.crt, tls.key) signed by `ca`.
pub fn deploy_etcd_tls(ns: &str, ca: &TestCa) -> PathBuf {
    deploy_etcd_tls_with(ns, ca, |m| m)
}

/// `deploy_etcd_tls` with its manifest changed by `edit` (which must change it).
pub fn deploy_etcd_tls_with(ns: &str, ca: &TestCa, edit: impl Fn(String) -> String) -> PathBuf {
    let client = server_secret_and_client(ns, ca, "etcd", "etcd-server-tls");
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/etcd-3-tls.yaml"))
        .expect("the TLS etcd manifest");
    let manifest = edit(manifest);
    apply_on(ns, &manifest, Nodes::Agent);
    wait_etcd_ready(ns, 3);
    client
}

/// The Secret `secret` (ca.crt, and a server certificate from `ca` for the members of the
/// StatefulSet whose governing Service is `service`), and the directory of a client's files
/// (ca.crt, tls.crt, tls.key) signed by `ca`.
fn server_secret_and_client(ns: &str, ca: &TestCa, service: &str, secret: &str) -> PathBuf {
    let server = ca.issue(&TestCa::member_names(service, ns), 30);
    let ca_pem = ca.pem();
    tls_secret(
        ns,
        secret,
        &[
            ("ca.crt", &ca_pem),
            ("tls.crt", &server.cert),
            ("tls.key", &server.key),
        ],
        &[],
    );
    let client = ca.issue(&["kubectl-raft".to_string()], 30);
    tls_files(
        ns,
        "client",
        &[
            ("ca.crt", &ca_pem),
            ("tls.crt", &client.cert),
            ("tls.key", &client.key),
        ],
    )
}

/// The Consul stand-in's GET PATH on one server over HTTPS with a client certificate (curl).
pub fn hraft_tls_get(ns: &str, pod: &str, client: &Path, path: &str) -> Option<Value> {
    curl_tls((ns, "hraft", pod), 8501, client, path, None)
}

/// The leader's pod and the Raft term, as hashicorp/raft's own Stats() on each server of the
/// TLS stand-in say it (exactly one "Leader"), read with curl.
pub fn hraft_tls_leader(ns: &str, client: &Path) -> Option<(String, u64)> {
    let mut leaders = vec![];
    for i in 0..3 {
        let pod = format!("hraft-{i}");
        if let Some(me) = hraft_tls_get(ns, &pod, client, "/v1/agent/self") {
            let raft = &me["Stats"]["raft"];
            if raft["state"] == "Leader" {
                leaders.push((pod, raft["term"].as_str()?.parse().ok()?));
            }
        }
    }
    (leaders.len() == 1).then(|| leaders.remove(0))
}

/// Three voters of the Consul stand-in on HTTPS only, client certificates required
/// (tests/manifests/hraft-3-tls.yaml), their server certificate from `ca`, every server Ready,
/// one leading and all three healthy by autopilot (the leader's own
/// `/v1/operator/autopilot/health`, read with curl: the servers' word, which the plugin reads
/// too; right after the election it counts the followers unhealthy until its first round); the
/// directory of a client's files (ca.crt, tls.crt, tls.key) signed by `ca`.
pub fn deploy_hraft_tls(ns: &str, ca: &TestCa) -> PathBuf {
    let client = server_secret_and_client(ns, ca, "hraft", "hraft-server-tls");
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/hraft-3-tls.yaml"))
        .expect("the TLS stand-in's manifest");
    apply_on(ns, &manifest, Nodes::Agent);
    wait_in(
        ns,
        Duration::from_secs(180),
        "3 Ready servers of the TLS stand-in, one leading, all healthy by autopilot",
        || {
            let sts = kubectl_json(&["get", "sts", "hraft", "-n", ns]);
            sts["status"]["readyReplicas"].as_u64() == Some(3)
                && hraft_tls_leader(ns, &client).is_some_and(|(leader, _)| {
                    let path = "/v1/operator/autopilot/health";
                    hraft_tls_get(ns, &leader, &client, path).is_some_and(|h| {
                        h["Servers"]
                            .as_array()
                            .is_some_and(|s| s.len() == 3 && s.iter().all(|x| x["Healthy"] == true))
                    })
                })
        },
    );
    client
}

/// Three NATS servers with TLS (tests/manifests/nats-3-tls.yaml): the client port TLS only,
/// client certificates required, the monitor HTTPS only; their server certificate from `ca`,
/// every server Ready and a meta leader; the directory of a client's files (ca.crt, tls.crt,
/// tls.key) signed by `ca`.
pub fn deploy_nats_tls(ns: &str, ca: &TestCa) -> PathBuf {
    let client = server_secret_and_client(ns, ca, "nats-headless", "nats-server-tls");
    let manifest = std::fs::read_to_string(repo().join("tests/manifests/nats-3-tls.yaml"))
        .expect("the TLS NATS manifest");
    apply_on(ns, &manifest, Nodes::Agent);
    wait_in(
        ns,
        Duration::from_secs(120),
        "3 TLS NATS servers Ready with a meta leader",
        || {
            kubectl_json(&["get", "sts", "nats", "-n", ns])["status"]["readyReplicas"] == 3
                && nats_tls_meta_leader(ns, "nats-0").is_some()
        },
    );
    client
}

/// The meta leader as `server` names it in its own /jsz, over HTTPS through the API server's
/// pods/proxy (which verifies no certificate: the server's word, not the plugin's TLS).
pub fn nats_tls_meta_leader(ns: &str, server: &str) -> Option<String> {
    meta_leader_at(ns, &format!("https:{server}:8222"))
}
