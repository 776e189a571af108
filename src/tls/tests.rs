//! TLS through the transport, against a local HTTPS server that requires a client
//! certificate (as etcd's --client-cert-auth and Consul's verify_incoming do): what is
//! verified, what is presented, and what each refusal says.

use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use time::{Duration as Span, OffsetDateTime};

use super::*;
use crate::model::{Endpoint, ProbeError};
use crate::profile::{HttpRequest, Scheme};
use crate::transport::Transport;

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and key in PEM.
struct Issued {
    cert: String,
    key: String,
}

impl Ca {
    fn new() -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A subject of its own: a leaf with the CA's subject looks self-signed to OpenSSL
        // and Go (rcgen's default subject is the same for every certificate).
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kubectl-raft test CA");
        Ca {
            issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> Vec<u8> {
        self.issuer.pem().into_bytes()
    }

    /// A certificate for `names`, valid until `days` from now (negative: expired).
    fn issue(&self, names: &[&str], days: i64) -> Issued {
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
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
}

/// An HTTPS server on 127.0.0.1 with `server`'s certificate, requiring a client certificate
/// signed by `clients` (if given); it answers every request 200 "ok". Its port.
async fn serve(server: &Issued, clients: Option<&Ca>) -> u16 {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(server, clients)));
    crate::transport::test_server::serve(
        move |tcp| {
            let acceptor = acceptor.clone();
            async move { acceptor.accept(tcp).await.ok() }
        },
        || crate::transport::test_server::ok("ok"),
    )
    .await
}

/// As [`serve`] with a client certificate required, but a refusal is never said: the replica
/// closes the connection without its alert, as a reset that overtakes the alert leaves it to
/// the client (TLS 1.3 refuses a client certificate after the client's side of the handshake
/// is done, so the client has sent its request by then). It never answers.
fn serve_closing_unsaid(server: &Issued, clients: &Ca) -> u16 {
    let config = Arc::new(server_config(server, Some(clients)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { return };
            let mut conn = rustls::ServerConnection::new(config.clone()).unwrap();
            loop {
                while conn.wants_write() {
                    if conn.write_tls(&mut tcp).is_err() {
                        break;
                    }
                }
                if !matches!(conn.read_tls(&mut tcp), Ok(n) if n > 0) {
                    break;
                }
                // Refused: dropped with the alert unsent.
                if conn.process_new_packets().is_err() {
                    break;
                }
            }
        }
    });
    port
}

/// The server's configuration: its certificate, and a client certificate signed by `clients`
/// required (if given).
fn server_config(server: &Issued, clients: Option<&Ca>) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = vec![CertificateDer::from_pem_slice(server.cert.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(server.key.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    match clients {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.issuer.der().clone()).unwrap();
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    }
    .with_single_cert(chain, key)
    .unwrap()
}

const MEMBER: &str = "etcd-1.etcd.db.svc";

fn endpoint(port: u16) -> Endpoint {
    Endpoint {
        namespace: "db".into(),
        pod: "etcd-1".into(),
        pod_ip: Some("127.0.0.1".into()),
        port,
        scheme: Scheme::Https,
        names: member_names(Some("etcd-1"), Some("etcd"), "db", Some("127.0.0.1")),
    }
}

fn material(ca: Option<&Ca>, client: Option<&Issued>) -> TlsMaterial {
    TlsMaterial {
        ca: ca.map(Ca::pem),
        cert: client.map(|c| c.cert.clone().into_bytes()),
        key: client.map(|c| c.key.clone().into_bytes()),
        source: "Secret db/etcd-client-tls".into(),
    }
}

async fn ask(tls: Result<Tls, String>, port: u16) -> Result<String, ProbeError> {
    let transport = Transport::direct(4).with_tls(Arc::new(tls.unwrap()));
    let req: HttpRequest = serde_saphyr::from_str("path: /health").unwrap();
    transport
        .call(&endpoint(port), &req, Duration::from_secs(5))
        .await
        .map(|a| a.text())
}

fn tls_error(r: Result<String, ProbeError>) -> String {
    match r {
        Err(ProbeError::Tls(m)) => m,
        other => panic!("expected a TLS refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_replica_that_requires_a_client_certificate_answers_one_presented_with_its_ca() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], 30), Some(&ca)).await;
    let client = ca.issue(&["kubectl-raft"], 30);
    let tls = Tls::new(
        Some(&material(Some(&ca), Some(&client))),
        &TlsChoices::default(),
    );
    assert_eq!(ask(tls, port).await.unwrap(), "ok");
}

#[tokio::test]
async fn a_certificate_that_names_the_member_by_a_shorter_name_is_accepted() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&["etcd-1.etcd.db"], 30), None).await;
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    assert_eq!(ask(tls, port).await.unwrap(), "ok");
}

#[tokio::test]
async fn a_replica_signed_by_another_ca_is_refused_as_unknown() {
    let (ca, other) = (Ca::new(), Ca::new());
    let port = serve(&other.issue(&[MEMBER], 30), None).await;
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    let m = tls_error(ask(tls, port).await);
    assert!(
        m.contains("unknown CA") && m.contains("Secret db/etcd-client-tls"),
        "{m}"
    );
}

#[tokio::test]
async fn a_replica_whose_certificate_names_another_host_is_refused_as_a_mismatch() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&["etcd-1.other.db.svc"], 30), None).await;
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    let m = tls_error(ask(tls, port).await);
    assert!(
        m.contains("name mismatch") && m.contains("--tls-server-name"),
        "{m}"
    );
}

#[tokio::test]
async fn the_server_name_given_is_the_one_name_accepted() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&["etcd.example.com"], 30), None).await;
    let choices = TlsChoices {
        server_name: Some("etcd.example.com".into()),
        skip_verify: false,
    };
    let tls = Tls::new(Some(&material(Some(&ca), None)), &choices);
    assert_eq!(ask(tls, port).await.unwrap(), "ok");
}

#[tokio::test]
async fn a_name_without_the_namespace_does_not_stand_for_the_member() {
    // A CA shared across namespaces (a cluster-wide issuer) signs `etcd-1.etcd` and pod IPs
    // for anyone: neither may stand for the member etcd-1 of namespace db.
    let ca = Ca::new();
    for name in ["etcd-1.etcd", "127.0.0.1"] {
        let port = serve(&ca.issue(&[name], 30), None).await;
        let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
        let m = tls_error(ask(tls, port).await);
        assert!(m.contains("name mismatch"), "{name}: {m}");
    }
}

#[tokio::test]
async fn skipping_verification_presents_no_client_certificate() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], 30), Some(&ca)).await;
    let client = ca.issue(&["kubectl-raft"], 30);
    let choices = TlsChoices {
        server_name: None,
        skip_verify: true,
    };
    let tls = Tls::new(Some(&material(Some(&ca), Some(&client))), &choices);
    let m = tls_error(ask(tls, port).await);
    assert!(m.contains("requires a client certificate"), "{m}");
}

#[test]
fn the_same_material_has_the_same_identity_and_other_material_another() {
    let ca = Ca::new();
    let a = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default()).unwrap();
    let b = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default()).unwrap();
    let other = Tls::new(
        Some(&material(Some(&Ca::new()), None)),
        &TlsChoices::default(),
    )
    .unwrap();
    assert_eq!(a.identity(), b.identity());
    assert_ne!(a.identity(), other.identity());
}

#[tokio::test]
async fn an_expired_replica_certificate_is_refused_as_expired() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], -1), None).await;
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    let m = tls_error(ask(tls, port).await);
    assert!(m.contains("expired"), "{m}");
}

/// Asked with `ca` and no client certificate, the replica at `port` is named as requiring one.
async fn assert_refused_without_a_certificate(ca: &Ca, port: u16) {
    let tls = Tls::new(Some(&material(Some(ca), None)), &TlsChoices::default());
    let m = tls_error(ask(tls, port).await);
    assert!(
        m.contains("requires a client certificate") && m.contains("tls.key"),
        "{m}"
    );
}

/// Asked with an expired client certificate of `ca`, the replica at `port` is named as
/// refusing it.
async fn assert_refused_an_expired_certificate(ca: &Ca, port: u16) {
    let client = ca.issue(&["kubectl-raft"], -1);
    let tls = Tls::new(
        Some(&material(Some(ca), Some(&client))),
        &TlsChoices::default(),
    );
    let m = tls_error(ask(tls, port).await);
    assert!(
        m.contains("refused the client certificate") && m.contains("expired"),
        "{m}"
    );
}

#[tokio::test]
async fn a_replica_that_requires_a_client_certificate_says_so_when_none_is_given() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], 30), Some(&ca)).await;
    assert_refused_without_a_certificate(&ca, port).await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_named_as_refused_and_expired() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], 30), Some(&ca)).await;
    assert_refused_an_expired_certificate(&ca, port).await;
}

#[tokio::test]
async fn a_replica_that_closes_after_asking_for_a_certificate_none_given_requires_one() {
    let ca = Ca::new();
    let port = serve_closing_unsaid(&ca.issue(&[MEMBER], 30), &ca);
    assert_refused_without_a_certificate(&ca, port).await;
}

#[tokio::test]
async fn a_replica_that_closes_after_taking_a_certificate_refused_it() {
    let ca = Ca::new();
    let port = serve_closing_unsaid(&ca.issue(&[MEMBER], 30), &ca);
    assert_refused_an_expired_certificate(&ca, port).await;
}

#[tokio::test]
async fn a_replica_that_closes_without_asking_for_a_certificate_is_unreachable() {
    let ca = Ca::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            drop(tcp);
        }
    });
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    let r = ask(tls, port).await;
    assert!(matches!(r, Err(ProbeError::Unreachable(_))), "{r:?}");
}

#[tokio::test]
async fn an_https_port_without_a_ca_is_refused_naming_where_to_give_one() {
    let ca = Ca::new();
    let port = serve(&ca.issue(&[MEMBER], 30), None).await;
    let m = tls_error(ask(Tls::new(None, &TlsChoices::default()), port).await);
    assert!(
        m.contains("no CA") && m.contains("--tls-skip-verify"),
        "{m}"
    );
}

#[tokio::test]
async fn skipping_verification_reaches_a_replica_of_an_unknown_ca() {
    let other = Ca::new();
    let port = serve(&other.issue(&["anything"], 30), None).await;
    let choices = TlsChoices {
        server_name: None,
        skip_verify: true,
    };
    let tls = Tls::new(None, &choices).unwrap();
    assert!(tls.skips_verification());
    assert_eq!(ask(Ok(tls), port).await.unwrap(), "ok");
}

#[tokio::test]
async fn a_plain_http_port_spoken_to_over_tls_is_named() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        }
    });
    let ca = Ca::new();
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default());
    let m = tls_error(ask(tls, port).await);
    assert!(m.contains("does not speak TLS"), "{m}");
}

#[test]
fn a_client_certificate_without_its_key_is_refused_before_anything_is_sent() {
    let ca = Ca::new();
    let client = ca.issue(&["kubectl-raft"], 30);
    let mut m = material(Some(&ca), Some(&client));
    m.key = None;
    let e = Tls::new(Some(&m), &TlsChoices::default()).unwrap_err();
    assert!(e.contains("no key"), "{e}");
}

#[test]
fn a_ca_that_is_not_pem_is_named() {
    let mut m = material(None, None);
    m.ca = Some(b"not a certificate".to_vec());
    let e = Tls::new(Some(&m), &TlsChoices::default()).unwrap_err();
    assert!(e.contains("the CA of Secret db/etcd-client-tls"), "{e}");
}

#[test]
fn a_member_is_known_by_its_service_names_then_its_address() {
    assert_eq!(
        member_names(Some("etcd-0"), Some("etcd"), "db", Some("10.0.0.5")),
        [
            "etcd-0.etcd.db.svc.cluster.local",
            "etcd-0.etcd.db.svc",
            "etcd-0.etcd.db",
        ]
    );
    assert_eq!(
        member_names(None, None, "local", Some("127.0.0.1")),
        ["127.0.0.1", "localhost"]
    );
}

#[test]
fn debug_never_shows_the_key() {
    let ca = Ca::new();
    let client = ca.issue(&["kubectl-raft"], 30);
    let m = material(Some(&ca), Some(&client));
    let shown = format!("{m:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

/// A NATS server at a local port of `ip` that says in its INFO it does not require TLS (as
/// one a tenant's pod or an address's next owner could say): the first bytes the client sends.
async fn nats_server_without_tls(ip: &str) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = tokio::spawn(async move {
        let Ok(Ok((mut s, _))) =
            tokio::time::timeout(Duration::from_secs(3), listener.accept()).await
        else {
            return vec![];
        };
        s.write_all(b"INFO {\"server_id\":\"x\",\"version\":\"2.15.2\",\"proto\":1,\"max_payload\":1048576,\"tls_required\":false}\r\n")
            .await
            .unwrap();
        let mut buf = vec![0; 4096];
        let read = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await;
        buf.truncate(read.ok().and_then(Result::ok).unwrap_or(0));
        buf
    });
    (port, seen)
}

/// A NATS connection to `host` at the endpoint's port with `tls`, as the system user sys
/// with the password s3cret-pass.
async fn nats_connect(
    tls: &Tls,
    ep: &Endpoint,
    host: &str,
) -> Result<async_nats::Client, crate::nats::ConnectError> {
    let vars = crate::credentials::Vars::new(
        [("NATS_USER", "sys"), ("NATS_PASSWORD", "s3cret-pass")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        "file ops.env",
    );
    crate::nats::connect(
        host,
        ep.port,
        Duration::from_secs(2),
        &vars,
        &crate::nats::Who::System,
        &crate::nats::NatsTls::to(tls, ep),
    )
    .await
}

/// NATS's client connection to a member of a cluster with a CA is TLS or nothing, whatever
/// the answering server's INFO says: its password is never sent in the clear.
#[tokio::test]
async fn a_nats_server_not_asking_for_tls_is_sent_no_password_where_the_cluster_has_a_ca() {
    let ca = Ca::new();
    let tls = Tls::new(Some(&material(Some(&ca), None)), &TlsChoices::default()).unwrap();
    let (port, seen) = nats_server_without_tls("127.0.0.1").await;
    // The monitor read over plain HTTP: only the CA says the cluster speaks TLS.
    let ep = Endpoint {
        scheme: Scheme::Http,
        ..endpoint(port)
    };
    let connected = nats_connect(&tls, &ep, "127.0.0.1").await;
    let sent = String::from_utf8_lossy(&seen.await.unwrap()).into_owned();
    assert!(connected.is_err(), "a plain server was taken");
    assert!(
        !sent.contains("s3cret-pass") && !sent.starts_with("CONNECT"),
        "sent in the clear: {sent}"
    );
}

/// An IPv6 pod IP (`--via direct` on an IPv6 cluster) is dialled as one: the server hears
/// the client (a plain cluster, no CA: its CONNECT comes).
#[tokio::test]
async fn a_nats_server_at_an_ipv6_address_is_reached() {
    let tls = Tls::new(None, &TlsChoices::default()).unwrap();
    let (port, seen) = nats_server_without_tls("::1").await;
    let ep = Endpoint {
        scheme: Scheme::Http,
        ..endpoint(port)
    };
    let _ = nats_connect(&tls, &ep, "::1").await;
    let sent = String::from_utf8_lossy(&seen.await.unwrap()).into_owned();
    assert!(sent.starts_with("CONNECT"), "the server heard: {sent:?}");
}
