//! TLS to the replicas, the same on every route that carries bytes end to end (`--via direct`,
//! `--via port-forward`, `yield --local`, the gate): the replica's certificate verified
//! against the cluster's CA and the names its member is known by, and a client certificate
//! presented where the cluster has one. The material comes from a Secret the cluster's
//! writer labelled, or from the user's own files (`credentials::CredentialSource`); this
//! module only makes connections with it and says why one failed.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, DigitallySignedStruct, SignatureScheme};

/// TLS material as read, in PEM: each part optional (a CA alone verifies the server; a
/// certificate and key alone present the client).
#[derive(Clone, Default)]
pub struct TlsMaterial {
    pub ca: Option<Vec<u8>>,
    pub cert: Option<Vec<u8>>,
    pub key: Option<Vec<u8>>,
    /// Where it came from ("Secret db/etcd-client-tls", "files --tls-ca ..."), for messages.
    pub source: String,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.is_some())
            .field("cert", &self.cert.is_some())
            .field("key", &self.key.is_some())
            .field("source", &self.source)
            .finish()
    }
}

/// How one cluster's replicas are spoken to over TLS: built once per cluster from its
/// material and the user's choices, then used for every connection.
#[derive(Clone)]
pub struct Tls {
    /// The verifier of the cluster's CA; None with --tls-skip-verify.
    verifier: Option<Arc<WebPkiServerVerifier>>,
    client: Option<ClientIdentity>,
    /// --tls-server-name: the one name the replicas' certificates must carry.
    server_name: Option<String>,
    skip_verify: bool,
    /// Where the material came from, for messages.
    source: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
    /// A fingerprint of the material and choices: a kept connection is reused only by a
    /// transport with the same (`Transport`'s kept port-forwards are keyed by it).
    identity: u64,
}

#[derive(Clone)]
struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("verifies", &self.verifier.is_some())
            .field("client_certificate", &self.client.is_some())
            .field("server_name", &self.server_name)
            .field("skip_verify", &self.skip_verify)
            .field("source", &self.source)
            .finish()
    }
}

/// The user's choices that apply to every cluster (`--tls-server-name`, `--tls-skip-verify`).
#[derive(Debug, Clone, Default)]
pub struct TlsChoices {
    pub server_name: Option<String>,
    pub skip_verify: bool,
}

impl Tls {
    /// TLS with `material` (None: nothing given) as `choices` say. Without a CA, a server is
    /// verified only if `--tls-skip-verify` says not to: there is no public CA for pods.
    pub fn new(material: Option<&TlsMaterial>, choices: &TlsChoices) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let source = material
            .map(|m| m.source.clone())
            .unwrap_or_else(|| "nothing given".into());
        let verifier = match (material.and_then(|m| m.ca.as_deref()), choices.skip_verify) {
            (_, true) => None,
            (Some(pem), false) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = certs(pem).map_err(|e| format!("the CA of {source}: {e}"))?;
                for c in certs {
                    roots
                        .add(c)
                        .map_err(|e| format!("the CA of {source}: {e}"))?;
                }
                Some(
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("the CA of {source}: {e}"))?,
                )
            }
            (None, false) => None,
        };
        let client = match material.map(|m| (m.cert.as_deref(), m.key.as_deref())) {
            Some((Some(cert), Some(key))) => {
                let chain = certs(cert).map_err(|e| format!("the client certificate of {source}: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                    format!("the client key of {source}: no private key in PEM ({e})")
                })?;
                Some(ClientIdentity {
                    chain,
                    key: Arc::new(key),
                })
            }
            Some((Some(_), None)) => {
                return Err(format!(
                    "{source} has a client certificate and no key (tls.key, or --tls-key): give both or neither"
                ))
            }
            Some((None, Some(_))) => {
                return Err(format!(
                    "{source} has a client key and no certificate (tls.crt, or --tls-cert): give both or neither"
                ))
            }
            _ => None,
        };
        let identity = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            material.map(|m| (&m.ca, &m.cert, &m.key)).hash(&mut h);
            choices.server_name.hash(&mut h);
            choices.skip_verify.hash(&mut h);
            h.finish()
        };
        Ok(Tls {
            verifier,
            client,
            server_name: choices.server_name.clone(),
            skip_verify: choices.skip_verify,
            source,
            provider,
            identity,
        })
    }

    /// The fingerprint of the material and choices (see `identity`).
    pub fn identity(&self) -> u64 {
        self.identity
    }

    /// Whether the replicas' certificates are not verified (`--tls-skip-verify`): `status`
    /// marks every line it reads this way.
    pub fn skips_verification(&self) -> bool {
        self.skip_verify
    }

    /// Whether this TLS needs the connection end to end (a CA to verify with, or a client
    /// certificate): the API server's pods/proxy neither verifies a replica nor presents a
    /// client certificate, so such a cluster's HTTPS goes through a port-forward.
    pub fn needs_end_to_end(&self) -> bool {
        self.verifier.is_some() || (self.client.is_some() && !self.skip_verify)
    }

    /// Whether replicas are verified against a CA of the cluster (not `--tls-skip-verify`):
    /// a cluster with a CA is one whose replicas speak TLS, so a connection that could go
    /// plain (NATS's client port, which the server's INFO would decide) is TLS or nothing.
    pub fn verifies(&self) -> bool {
        self.verifier.is_some() && !self.skip_verify
    }

    /// A client configuration that trusts no server (no CA given): a replica that requires
    /// TLS of a client library that makes its connection itself is then refused with what to
    /// give ("unknown CA"), and never trusted through the machine's public roots.
    pub fn trusting_none(&self) -> Result<rustls::ClientConfig, String> {
        Ok(
            rustls::ClientConfig::builder_with_provider(self.provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(TrustsNone(Unverified(
                    self.provider.clone(),
                ))))
                .with_no_client_auth(),
        )
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// A connector for one connection to the member known by `names` (its DNS names and IP,
    /// most specific first): the server's certificate must be signed by the CA and carry one
    /// of them (or `--tls-server-name`); the first DNS name is sent as SNI. With it, what its
    /// handshake will tell of the replica's asking for a client certificate.
    pub fn connector(
        &self,
        names: &[String],
    ) -> Result<(tokio_rustls::TlsConnector, ServerName<'static>, CertAsked), String> {
        let (config, sni, asked) = self.client_config(names)?;
        Ok((
            tokio_rustls::TlsConnector::from(Arc::new(config)),
            sni,
            asked,
        ))
    }

    /// The rustls configuration `connector` uses, for a client library that makes its TLS
    /// connection itself (async-nats): it verifies the member by `names` whatever server name
    /// the library passes (a port-forward's 127.0.0.1 included).
    pub fn client_config(
        &self,
        names: &[String],
    ) -> Result<(rustls::ClientConfig, ServerName<'static>, CertAsked), String> {
        let accepted: Vec<String> = match &self.server_name {
            Some(n) => vec![n.clone()],
            None => names.to_vec(),
        };
        let parsed: Vec<ServerName<'static>> = accepted
            .iter()
            .filter_map(|n| ServerName::try_from(n.clone()).ok())
            .collect();
        let sni = parsed
            .iter()
            .find(|n| matches!(n, ServerName::DnsName(_)))
            .or(parsed.first())
            .cloned()
            .ok_or_else(|| {
                format!(
                    "no name to verify the replica's certificate by ({}): pass --tls-server-name",
                    accepted.join(", ")
                )
            })?;
        let verifier: Arc<dyn ServerCertVerifier> = match (&self.verifier, self.skip_verify) {
            (_, true) => Arc::new(Unverified(self.provider.clone())),
            (Some(v), false) => Arc::new(MemberNames {
                inner: v.clone(),
                names: parsed,
            }),
            (None, false) => {
                return Err(format!(
                    "no CA to verify the replica's certificate with ({}): give the CA that signed it (ca.crt in the cluster's TLS Secret, or --tls-ca for a cluster you name), or --tls-skip-verify to skip the check",
                    self.source
                ))
            }
        };
        let builder = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        // A client certificate goes only to a replica that proved it is one: never with
        // --tls-skip-verify, whoever answers at the address.
        let mut config = match self.client.as_ref().filter(|_| !self.skip_verify) {
            Some(id) => builder
                .with_client_auth_cert(id.chain.clone(), id.key.clone_key())
                .map_err(|e| format!("the client certificate of {}: {e}", self.source))?,
            None => builder.with_no_client_auth(),
        };
        let asked = CertAsked::default();
        config.client_auth_cert_resolver = Arc::new(NotingResolver {
            inner: config.client_auth_cert_resolver.clone(),
            asked: asked.clone(),
        });
        Ok((config, sni, asked))
    }

    /// What it means that a replica that asked for a client certificate in the handshake
    /// then closed the connection without answering: it refused the certificate given, or
    /// required one where none was. (TLS 1.3 says so after the client's side of the handshake
    /// is done: a reset that overtakes the alert leaves only the closed connection.)
    pub fn closed_after_asking(&self) -> String {
        if self.presents_certificate() {
            format!(
                "the replica refused the client certificate of {} (it asked for one, was given it, and closed the connection without answering: expired, or not signed by the CA the replica trusts for clients): give one signed by that CA and valid now",
                self.source
            )
        } else {
            self.none_given()
        }
    }

    /// Whether a client certificate is sent to a replica that asks (never with
    /// --tls-skip-verify).
    fn presents_certificate(&self) -> bool {
        self.client.is_some() && !self.skip_verify
    }

    fn none_given(&self) -> String {
        format!(
            "the replica requires a client certificate and none was given ({}): put tls.crt and tls.key in the cluster's TLS Secret, or pass --tls-cert and --tls-key for a cluster you name (none is sent with --tls-skip-verify)",
            self.source
        )
    }

    /// What a failed TLS connection or request means, in one line with what to do, if the
    /// failure was TLS's (found anywhere in the error's chain).
    pub fn explain(&self, e: &(dyn std::error::Error + 'static)) -> Option<String> {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(t) = err.downcast_ref::<rustls::Error>() {
                return Some(self.explain_rustls(t));
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                if let Some(t) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    return Some(self.explain_rustls(t));
                }
            }
            cur = err.source();
        }
        None
    }

    fn explain_rustls(&self, e: &rustls::Error) -> String {
        let src = &self.source;
        let ca = "give the CA that signed it (ca.crt in the cluster's TLS Secret, or --tls-ca)";
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                    "the replica's certificate is not signed by the CA of {src} (unknown CA): {ca}"
                ),
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    let names = self
                        .server_name
                        .clone()
                        .unwrap_or_else(|| {
                            "pod.service.namespace[.svc[.cluster.local]], or the address of a replica without these".into()
                        });
                    format!(
                        "the replica's certificate does not name it ({names}; name mismatch): pass --tls-server-name with a name the certificate carries"
                    )
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the replica's certificate has expired: renew it (the replica is not trusted until then)".into()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "the replica's certificate is not valid yet: check the clocks, or wait for its start".into()
                }
                CertificateError::Revoked => "the replica's certificate is revoked".into(),
                other => format!("the replica's certificate was refused: {other:?}"),
            },
            rustls::Error::AlertReceived(alert) => match (alert, self.presents_certificate()) {
                (AlertDescription::CertificateRequired | AlertDescription::BadCertificate, false) => self.none_given(),
                (AlertDescription::HandshakeFailure, false) => format!(
                    "the replica ended the TLS handshake (HandshakeFailure): it requires a client certificate and none was given ({src}: tls.crt and tls.key, or --tls-cert and --tls-key; none is sent with --tls-skip-verify), or it shares no TLS version or cipher with the plugin (TLS 1.2 or 1.3)"
                ),
                (AlertDescription::CertificateExpired, true) => format!(
                    "the replica refused the client certificate of {src}: it has expired; renew it"
                ),
                (AlertDescription::HandshakeFailure, true) => format!(
                    "the replica ended the TLS handshake (HandshakeFailure): it refused the client certificate of {src} (give one signed by the CA it trusts for clients), or it shares no TLS version or cipher with the plugin (TLS 1.2 or 1.3)"
                ),
                (
                    AlertDescription::UnknownCA
                    | AlertDescription::BadCertificate
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::CertificateRequired,
                    true,
                ) => format!(
                    "the replica refused the client certificate of {src} ({alert:?}): give one signed by the CA the replica trusts for clients"
                ),
                (other, _) => format!("the replica ended the TLS handshake: {other:?}"),
            },
            rustls::Error::InvalidMessage(_) => {
                "the replica does not speak TLS on this port: is the port plain HTTP? (kubectl-raft.io/scheme: http)".into()
            }
            other => format!("TLS failed: {other}"),
        }
    }
}

/// Whether the replica asked for a client certificate in one connection's handshake (a
/// CertificateRequest), told by the resolver rustls asks for one then.
#[derive(Debug, Clone, Default)]
pub struct CertAsked(Arc<AtomicBool>);

impl CertAsked {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// One that was asked: for tests of what follows from it.
    #[cfg(test)]
    pub(crate) fn noted() -> Self {
        CertAsked(Arc::new(AtomicBool::new(true)))
    }
}

/// The connection's client certificate resolver (the identity given, or none), noting that
/// it was asked.
#[derive(Debug)]
struct NotingResolver {
    inner: Arc<dyn ResolvesClientCert>,
    asked: CertAsked,
}

impl ResolvesClientCert for NotingResolver {
    fn resolve(
        &self,
        root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.0.store(true, Ordering::Relaxed);
        self.inner.resolve(root_hint_subjects, sigschemes)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.inner.only_raw_public_keys()
    }

    fn has_certs(&self) -> bool {
        self.inner.has_certs()
    }
}

fn certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let out: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("not PEM certificates ({e})"))?;
    if out.is_empty() {
        return Err("no certificate in it (PEM, -----BEGIN CERTIFICATE-----)".into());
    }
    Ok(out)
}

/// The CA's verifier, accepting a certificate that names the member by any of its names: a
/// StatefulSet's replica is `pod.service.namespace.svc[.cluster.local]`, `pod.service`, its
/// IP, and certificates carry some of these.
#[derive(Debug)]
struct MemberNames {
    inner: Arc<WebPkiServerVerifier>,
    names: Vec<ServerName<'static>>,
}

impl ServerCertVerifier for MemberNames {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut first = None;
        for name in &self.names {
            match self
                .inner
                .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
            {
                Ok(v) => return Ok(v),
                // Only a name mismatch is worth another name; anything else is the answer.
                Err(
                    e @ rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. },
                    ),
                ) => {
                    first.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first.unwrap_or(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName,
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// No CA: no server's certificate is trusted (its signatures checked as `Unverified` does,
/// never reached).
#[derive(Debug)]
struct TrustsNone(Unverified);

impl ServerCertVerifier for TrustsNone {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `--tls-skip-verify`: any certificate, its signatures still checked.
#[derive(Debug)]
struct Unverified(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The names a StatefulSet's replica is known by, most specific first: with its pod's
/// hostname and subdomain (the governing Service), `host.sub.ns.svc.cluster.local`,
/// `host.sub.ns.svc`, `host.sub.ns`: each names the namespace, so a certificate from a CA
/// shared across namespaces cannot stand for a pod of another. Only without them, the address
/// (a pod IP, or the host a member URL gave), and `localhost` for a replica reached on the
/// loopback (`yield --local`): a pod IP is reused by other pods once its own is gone.
pub fn member_names(
    hostname: Option<&str>,
    subdomain: Option<&str>,
    namespace: &str,
    address: Option<&str>,
) -> Vec<String> {
    let mut out = vec![];
    if let (Some(h), Some(s)) = (hostname, subdomain) {
        out.push(format!("{h}.{s}.{namespace}.svc.cluster.local"));
        out.push(format!("{h}.{s}.{namespace}.svc"));
        out.push(format!("{h}.{s}.{namespace}"));
        return out;
    }
    if let Some(a) = address {
        out.push(a.to_string());
        if a == "127.0.0.1" || a == "::1" {
            out.push("localhost".into());
        }
    }
    out
}

#[cfg(test)]
mod tests;
