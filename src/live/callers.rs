//! Who may make the gate decide: with `--client-ca`, only a caller that proves itself with a
//! client certificate that CA signed (the API server, given one through its
//! AdmissionConfiguration's kubeConfigFile) and, with `--client-name`, whose certificate names
//! one of those names (its subject's common name, as Kubernetes' own
//! `--requestheader-allowed-names`, or a DNS name). A caller that presents a certificate the CA
//! did not sign fails the TLS handshake; one that presents none may still read `/healthz`,
//! `/readyz` and `/metrics` (the kubelet's probes and Prometheus carry no certificate), but
//! its reviews are answered 403 before their body is read.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;

/// `gate serve --client-ca` and `--client-name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerSettings {
    /// The CA (PEM) whose client certificates are the API server's.
    pub ca: PathBuf,
    /// The names a caller's certificate must carry one of; empty: any certificate the CA
    /// signed.
    pub names: Vec<String>,
}

/// The caller of one connection, as its TLS handshake showed it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Caller {
    /// No certificate (or no TLS: the tests' plain server).
    #[default]
    Anonymous,
    /// A certificate the client CA signed, with the names it carries (common name first).
    Certified(Vec<String>),
}

impl Caller {
    /// The caller of a connection whose handshake ended: certified if it presented a
    /// certificate (which the verifier has checked against the CA by then).
    pub fn of(conn: &rustls::ServerConnection) -> Self {
        match conn.peer_certificates().and_then(|c| c.first()) {
            Some(leaf) => Caller::Certified(names_of(leaf)),
            None => Caller::Anonymous,
        }
    }
}

/// The names a certificate carries: its subject's common names, then its DNS names.
pub fn names_of(der: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push(d.to_string());
            }
        }
    }
    names
}

/// Whether `caller` may post reviews: `Ok` when no client CA is required (`names` is `None`),
/// or when it presented a certificate carrying one of `names` (any, if empty); otherwise why
/// not, in words for the caller and the gate's log.
pub fn admit(names: Option<&[String]>, caller: &Caller) -> Result<(), String> {
    let Some(names) = names else {
        return Ok(());
    };
    match caller {
        Caller::Anonymous => Err(
            "the gate takes reviews only from callers with a client certificate its --client-ca signed (the API server's); none was presented".into(),
        ),
        Caller::Certified(_) if names.is_empty() => Ok(()),
        Caller::Certified(has) if has.iter().any(|n| names.contains(n)) => Ok(()),
        Caller::Certified(has) => Err(format!(
            "the client certificate names {}, none of the gate's --client-name ({})",
            if has.is_empty() {
                "nothing".to_string()
            } else {
                has.join(", ")
            },
            names.join(", ")
        )),
    }
}

/// The verifier of callers' certificates for `s`: a certificate, when presented, must chain
/// to `s.ca`; none may be presented (the probes), and [`admit`] then refuses its reviews.
pub fn verifier(s: &CallerSettings) -> Result<Arc<dyn ClientCertVerifier>> {
    let pem =
        std::fs::read(&s.ca).with_context(|| format!("reading --client-ca {}", s.ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| anyhow!("--client-ca {}: {e}", s.ca.display()))?;
        roots
            .add(c)
            .map_err(|e| anyhow!("--client-ca {}: {e}", s.ca.display()))?;
    }
    if roots.is_empty() {
        anyhow::bail!(
            "--client-ca {} holds no PEM certificate: give the CA that signed the API server's webhook client certificate (docs/gate.md, \"Only the API server\")",
            s.ca.display()
        );
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| anyhow!("--client-ca {}: {e}", s.ca.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certified(names: &[&str]) -> Caller {
        Caller::Certified(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn without_a_client_ca_every_caller_is_admitted() {
        assert_eq!(admit(None, &Caller::Anonymous), Ok(()));
    }

    #[test]
    fn with_a_client_ca_a_caller_without_a_certificate_is_refused() {
        let err = admit(Some(&[]), &Caller::Anonymous).unwrap_err();
        assert!(err.contains("none was presented"), "{err}");
    }

    #[test]
    fn with_a_client_ca_and_no_names_any_certified_caller_is_admitted() {
        assert_eq!(admit(Some(&[]), &certified(&["anyone"])), Ok(()));
    }

    #[test]
    fn a_certificate_naming_none_of_the_client_names_is_refused_naming_both() {
        let names = vec!["kube-apiserver-webhook-client".to_string()];
        let err = admit(Some(&names), &certified(&["kworld-admin"])).unwrap_err();
        assert!(
            err.contains("kworld-admin") && err.contains("kube-apiserver-webhook-client"),
            "{err}"
        );
    }

    #[test]
    fn a_certificate_naming_a_client_name_is_admitted() {
        let names = vec!["kube-apiserver-webhook-client".to_string()];
        assert_eq!(
            admit(
                Some(&names),
                &certified(&["x", "kube-apiserver-webhook-client"])
            ),
            Ok(())
        );
    }

    /// Over TLS, through the gate's own connection handling: what a caller presents decides
    /// what it may do.
    mod over_tls {
        use std::net::SocketAddr;
        use std::time::Duration;

        use bytes::Bytes;
        use http_body_util::Full;
        use hyper::body::Incoming;
        use hyper::{Request, Response, StatusCode};
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa,
            KeyPair,
        };
        use rustls::pki_types::{PrivateKeyDer, ServerName};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_util::sync::CancellationToken;

        use super::super::*;
        use crate::live::webhook::{serve_connections, Limits, Shutdown};

        struct Ca(CertifiedIssuer<'static, KeyPair>);

        impl Ca {
            fn new(cn: &str) -> Ca {
                let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
                p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
                p.distinguished_name = rcgen::DistinguishedName::new();
                p.distinguished_name.push(rcgen::DnType::CommonName, cn);
                Ca(CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap())
            }

            /// A certificate with common name `cn` (and `dns` names), for `usage`; DER and key.
            fn issue(
                &self,
                cn: &str,
                dns: &[&str],
                usage: ExtendedKeyUsagePurpose,
            ) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
                let mut p =
                    CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                        .unwrap();
                p.distinguished_name = rcgen::DistinguishedName::new();
                p.distinguished_name.push(rcgen::DnType::CommonName, cn);
                p.extended_key_usages = vec![usage];
                let key = KeyPair::generate().unwrap();
                let cert = p.signed_by(&key, &self.0).unwrap();
                (
                    cert.der().clone(),
                    PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
                )
            }
        }

        struct World {
            addr: SocketAddr,
            server_ca: Ca,
            clients: Ca,
            _stop: tokio_util::sync::DropGuard,
        }

        /// The gate's connection handling with a client CA and `names`; its service answers a
        /// review 403 as the gate does, or 200 naming the caller.
        async fn start(names: &[&str]) -> World {
            let (server_ca, clients) = (Ca::new("gate CA"), Ca::new("webhook clients"));
            // A directory of this server's own: the tests run at once.
            static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "callers-tls-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let ca_file = dir.join("clients.pem");
            std::fs::write(&ca_file, clients.0.pem()).unwrap();
            let settings = CallerSettings {
                ca: ca_file,
                names: names.iter().map(|n| n.to_string()).collect(),
            };
            let (chain, key) =
                server_ca.issue("gate", &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier(&settings).unwrap())
            .with_single_cert(vec![chain], key)
            .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let required = settings.names.clone();
            let service = move |req: Request<Incoming>| {
                let required = required.clone();
                async move {
                    let caller = req
                        .extensions()
                        .get::<Caller>()
                        .cloned()
                        .unwrap_or_default();
                    let (code, text) = match admit(Some(&required), &caller) {
                        Ok(()) => (StatusCode::OK, format!("{caller:?}")),
                        Err(why) => (StatusCode::FORBIDDEN, why),
                    };
                    Response::builder()
                        .status(code)
                        .body(Full::new(Bytes::from(text)))
                        .unwrap()
                }
            };
            let stop = CancellationToken::new();
            let limits = Limits::default();
            tokio::spawn(serve_connections(
                listener,
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                service,
                stop.clone(),
                Shutdown {
                    delay: Duration::ZERO,
                    drain_within: Duration::from_secs(1),
                },
                limits,
            ));
            World {
                addr,
                server_ca,
                clients,
                _stop: stop.drop_guard(),
            }
        }

        /// A POST of a review by a client presenting `identity`; the status line and body, or
        /// the handshake's error.
        async fn post(
            w: &World,
            identity: Option<(CertificateDer<'static>, PrivateKeyDer<'static>)>,
        ) -> Result<String, String> {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(w.server_ca.0.der().clone()).unwrap();
            let b = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
            let config = match identity {
                Some((c, k)) => b.with_client_auth_cert(vec![c], k).unwrap(),
                None => b.with_no_client_auth(),
            };
            let tcp = tokio::net::TcpStream::connect(w.addr).await.unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .map_err(|e| e.to_string())?;
            let body = "{}";
            let req = format!(
                "POST /validate HTTP/1.1\r\nhost: gate\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            tls.write_all(req.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            tls.read_to_string(&mut out)
                .await
                .map_err(|e| e.to_string())?;
            Ok(out)
        }

        #[tokio::test]
        async fn a_caller_without_a_certificate_connects_and_its_review_is_refused_403() {
            let w = start(&["kube-apiserver-webhook-client"]).await;
            let out = post(&w, None).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 403"), "{out}");
        }

        #[tokio::test]
        async fn a_certificate_another_ca_signed_fails_the_handshake() {
            let w = start(&[]).await;
            let stranger = Ca::new("webhook clients");
            let id = stranger.issue(
                "kube-apiserver-webhook-client",
                &[],
                ExtendedKeyUsagePurpose::ClientAuth,
            );
            let out = post(&w, Some(id)).await;
            assert!(
                out.as_ref().map_or(true, |o| !o.starts_with("HTTP/")),
                "no answer at all, the handshake failed: {out:?}"
            );
        }

        #[tokio::test]
        async fn a_certificate_of_the_client_ca_with_another_name_is_refused_403() {
            let w = start(&["kube-apiserver-webhook-client"]).await;
            let id = w
                .clients
                .issue("kworld-admin", &[], ExtendedKeyUsagePurpose::ClientAuth);
            let out = post(&w, Some(id)).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 403"), "{out}");
            assert!(out.contains("kworld-admin"), "{out}");
        }

        #[tokio::test]
        async fn the_api_servers_certificate_is_admitted_by_its_common_name() {
            let w = start(&["kube-apiserver-webhook-client"]).await;
            let id = w.clients.issue(
                "kube-apiserver-webhook-client",
                &[],
                ExtendedKeyUsagePurpose::ClientAuth,
            );
            let out = post(&w, Some(id)).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        }

        #[tokio::test]
        async fn a_certificate_is_admitted_by_a_dns_name_it_carries() {
            let w = start(&["apiserver.example"]).await;
            let id = w.clients.issue(
                "someone",
                &["apiserver.example"],
                ExtendedKeyUsagePurpose::ClientAuth,
            );
            let out = post(&w, Some(id)).await.unwrap();
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        }
    }

    #[test]
    fn a_client_ca_file_without_a_certificate_is_refused_at_start() {
        let dir = std::env::temp_dir().join(format!("callers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("empty.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let err = verifier(&CallerSettings {
            ca: f,
            names: vec![],
        })
        .expect_err("refused")
        .to_string();
        assert!(err.contains("holds no PEM certificate"), "{err}");
    }
}
