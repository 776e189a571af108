//! The gate's certificates without cert-manager: a CA and a serving certificate kept in a
//! Secret (created by the first replica to start, read by the others), the CA put into the
//! gate's own ValidatingWebhookConfiguration, the serving certificate re-issued from the same
//! CA before it expires, so the API server never sees an unknown one.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::Client;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use time::{Duration as Days, OffsetDateTime};

use crate::errors::{api_context, status_of};

/// The CA's life (it is not renewed: a new Secret starts a new one).
const CA_DAYS: i64 = 3650;

/// How long a serving certificate lives, and how long before its end it is re-issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    pub validity: std::time::Duration,
    pub renew_before: std::time::Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            validity: std::time::Duration::from_secs(365 * 86400),
            renew_before: std::time::Duration::from_secs(30 * 86400),
        }
    }
}

fn span(d: std::time::Duration) -> Days {
    Days::seconds(i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2))
}
/// The annotation on the Secret that says when its serving certificate expires (RFC 3339).
const NOT_AFTER: &str = "kubectl-raft.io/not-after";
/// The annotation on the Secret that lists the names its serving certificate carries.
const NAMES: &str = "kubectl-raft.io/names";
/// The label of a Secret the gate made (it never writes over another).
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubectl-raft");

/// Where the certificates live and whom they name.
#[derive(Debug, Clone)]
pub struct CertSettings {
    pub namespace: String,
    pub secret: String,
    /// The names the serving certificate carries (the Service's DNS names; an IP for a URL
    /// webhook).
    pub names: Vec<String>,
    /// The ValidatingWebhookConfiguration whose webhooks get the CA (None: leave it alone).
    pub webhook: Option<String>,
    pub lifetimes: Lifetimes,
}

/// The PEMs a Secret holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pems {
    pub ca_cert: String,
    pub ca_key: String,
    pub cert: String,
    pub key: String,
    pub not_after: OffsetDateTime,
    /// The names the serving certificate carries (comma-separated).
    pub names: String,
}

fn ca_params() -> Result<CertificateParams> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.distinguished_name
        .push(DnType::CommonName, "kubectl-raft gate CA");
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Days::hours(1);
    p.not_after = now + Days::days(CA_DAYS);
    Ok(p)
}

/// A serving certificate for `names`, signed by the CA whose key is given (the CA's subject
/// is always [`ca_params`]'s, so the issuer is rebuilt from it and the key).
fn serving(
    ca_key: &str,
    names: &[String],
    validity: std::time::Duration,
) -> Result<(String, String, OffsetDateTime)> {
    let ca_key = KeyPair::from_pem(ca_key).context("the gate CA's key in its Secret")?;
    let issuer = Issuer::new(ca_params()?, ca_key);
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::new(names.to_vec())?;
    p.distinguished_name.push(
        DnType::CommonName,
        names
            .first()
            .cloned()
            .unwrap_or_else(|| "kubectl-raft-gate".into()),
    );
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Days::hours(1);
    p.not_after = now + span(validity);
    let cert = p.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), p.not_after))
}

/// A new CA and a serving certificate from it.
pub fn issue(names: &[String], validity: std::time::Duration) -> Result<Pems> {
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params()?, ca_key)?;
    let ca_cert = ca.pem();
    let (cert, key, not_after) = serving(&ca_key_pem, names, validity)?;
    Ok(Pems {
        ca_cert,
        ca_key: ca_key_pem,
        cert,
        key,
        not_after,
        names: names.join(","),
    })
}

/// Whether a serving certificate expiring at `not_after` is re-issued now.
pub fn due(
    not_after: OffsetDateTime,
    now: OffsetDateTime,
    renew_before: std::time::Duration,
) -> bool {
    not_after - now < span(renew_before)
}

fn text(s: &Secret, key: &str) -> Option<String> {
    let b = s.data.as_ref()?.get(key)?;
    String::from_utf8(b.0.clone()).ok()
}

/// The Secret's PEMs, as written; `not_after` and `names` are read from the serving
/// certificate itself by [`check`], never from the annotations (which are for people).
fn read(s: &Secret) -> Option<Pems> {
    Some(Pems {
        ca_cert: text(s, "ca.crt")?,
        ca_key: text(s, "ca.key")?,
        cert: text(s, "tls.crt")?,
        key: text(s, "tls.key")?,
        not_after: OffsetDateTime::UNIX_EPOCH,
        names: String::new(),
    })
}

/// The first certificate of a PEM text, parsed.
fn first_cert(pem: &str, what: &str) -> Result<Vec<u8>, String> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or(format!("{what} holds no certificate"))?
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| format!("{what}: {e}"))
}

/// Whether `key_pem` is the private key of the certificate `der`.
fn key_matches(der: &[u8], key_pem: &str, what: &str) -> Result<(), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("{what}: {e}"))?;
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("{what}'s key: {e}"))?;
    if key.public_key_raw() == cert.public_key().subject_public_key.data.as_ref() {
        Ok(())
    } else {
        Err(format!("{what}'s key is not the key of {what}"))
    }
}

/// Whether the CA half of a Secret can issue: its certificate is a CA's and its key is its key.
fn check_ca(ca_cert: &str, ca_key: &str) -> Result<(), String> {
    let der = first_cert(ca_cert, "ca.crt")?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| format!("ca.crt: {e}"))?;
    if !cert.is_ca() {
        return Err("ca.crt is not a CA's certificate".into());
    }
    key_matches(&der, ca_key, "ca.crt")
}

/// What the gate would serve from `p`, checked as the API server will check it, before it is
/// served: its key is its key; it chains to the Secret's CA (rustls' webpki verifier, now)
/// and names each of `names`. Its expiry and names, read from the certificate itself. (Whether
/// the CA can issue again is [`check_ca`]'s.)
fn check(p: &Pems, names: &[String]) -> Result<(OffsetDateTime, String), String> {
    let der = first_cert(&p.cert, "tls.crt")?;
    key_matches(&der, &p.key, "tls.crt")?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(|e| format!("tls.crt: {e}"))?;
    let not_after = cert.validity().not_after.to_datetime();
    use rustls::client::danger::ServerCertVerifier;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(p.ca_cert.as_bytes()) {
        let c = c.map_err(|e| format!("ca.crt: {e}"))?;
        roots.add(c).map_err(|e| format!("ca.crt: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("ca.crt: {e}"))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(p.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    for name in names {
        let server = rustls::pki_types::ServerName::try_from(name.as_str())
            .map_err(|e| format!("{name}: {e}"))?;
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &server,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .map_err(|e| format!("tls.crt does not serve {name} under ca.crt: {e}"))?;
    }
    Ok((not_after, names.join(",")))
}

/// Whether the gate made this Secret.
fn ours(s: &Secret) -> bool {
    s.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY.0))
        .is_some_and(|v| v == MANAGED_BY.1)
}

fn secret(c: &CertSettings, p: &Pems, base: Option<&Secret>) -> Result<Secret> {
    let mut s = base.cloned().unwrap_or_else(|| Secret {
        metadata: ObjectMeta {
            name: Some(c.secret.clone()),
            namespace: Some(c.namespace.clone()),
            labels: Some([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())].into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        ..Default::default()
    });
    let when = p
        .not_after
        .format(&time::format_description::well_known::Rfc3339)?;
    let annotations = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(NOT_AFTER.into(), when);
    annotations.insert(NAMES.into(), p.names.clone());
    let data = [
        ("ca.crt", &p.ca_cert),
        ("ca.key", &p.ca_key),
        ("tls.crt", &p.cert),
        ("tls.key", &p.key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    s.data = Some(data);
    Ok(s)
}

/// What to do with the Secret as found: serve what it holds (with a warning to log), or write
/// what to serve.
#[derive(Debug)]
enum Next {
    Serve(Pems, Option<String>),
    /// With why what it held cannot be served (None: it was due, or there was none).
    Write(Pems, Option<String>),
}

/// The decision `ensure` acts on, from the Secret alone (`now` for expiry):
/// - its serving certificate passes [`check`] and is not due: served as it is (a CA that
///   could not issue again is only warned of: the certificate it signed still serves);
/// - else, when its CA can issue ([`check_ca`]; a missing or broken serving half does not
///   matter): a serving certificate issued again from it, the CA unchanged;
/// - else a new CA, with the old CA's certificate kept after it in `ca.crt` when it is one
///   (so the webhook's caBundle trusts both while replicas reload).
fn decide(found: Option<&Secret>, c: &CertSettings, now: OffsetDateTime) -> Result<Next> {
    let names = c.names.join(",");
    let ca = found.and_then(|s| Some((text(s, "ca.crt")?, text(s, "ca.key")?)));
    let ca_ok = ca.as_ref().map(|(cert, key)| check_ca(cert, key));
    let whole = found.and_then(read);
    let served = match &whole {
        Some(p) => Some(check(p, &c.names)),
        None if found.is_some() => Some(Err("it lacks tls.crt or tls.key".to_string())),
        None => None,
    };
    if let (Some(p), Some(Ok((not_after, _)))) = (&whole, &served) {
        if !due(*not_after, now, c.lifetimes.renew_before) {
            let warning = match &ca_ok {
                Some(Err(why)) => Some(format!(
                    "its CA cannot issue ({why}); the serving certificate it holds is served, and a new CA will be made when that one is due"
                )),
                _ => None,
            };
            return Ok(Next::Serve(
                Pems {
                    not_after: *not_after,
                    names,
                    ..p.clone()
                },
                warning,
            ));
        }
    }
    let why = served.and_then(|r| r.err());
    if let (Some((ca_cert, ca_key)), Some(Ok(()))) = (&ca, &ca_ok) {
        let (cert, key, not_after) = serving(ca_key, &c.names, c.lifetimes.validity)?;
        return Ok(Next::Write(
            Pems {
                ca_cert: ca_cert.clone(),
                ca_key: ca_key.clone(),
                cert,
                key,
                not_after,
                names,
            },
            why.map(|w| format!("{w}; its serving certificate is issued again from its CA")),
        ));
    }
    let mut fresh = issue(&c.names, c.lifetimes.validity)?;
    if let Some(old) = ca
        .as_ref()
        .and_then(|(cert, _)| pem_blocks(cert).into_iter().next())
    {
        fresh.ca_cert = format!("{}\n{old}\n", fresh.ca_cert.trim_end());
    }
    let ca_why = match &ca_ok {
        Some(Err(e)) => e.clone(),
        _ => "it holds no CA".into(),
    };
    Ok(Next::Write(
        fresh,
        found.map(|_| {
            format!(
                "{}its CA cannot issue ({ca_why}): a new CA is made, the old one kept beside it in ca.crt and the webhook's caBundle",
                why.map(|w| format!("{w}; ")).unwrap_or_default()
            )
        }),
    ))
}

/// The certificates to serve with: read from the Secret, created there when it has none,
/// re-issued from its CA when due (a 409 means another replica wrote first: its are used).
pub async fn ensure(client: &Client, c: &CertSettings) -> Result<Pems> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &c.namespace);
    let secrets = |e, verb| api_context(e, verb, "secrets", &c.namespace);
    for _ in 0..3 {
        let current = api
            .get_opt(&c.secret)
            .await
            .map_err(|e| secrets(e, "get"))?;
        if current.as_ref().is_some_and(|s| !ours(s)) {
            return Err(anyhow!(
                "the Secret {}/{} exists and was not made by the gate (no label {}={}): it is never written over; name another with --tls-secret",
                c.namespace,
                c.secret,
                MANAGED_BY.0,
                MANAGED_BY.1
            ));
        }
        let wanted = match decide(current.as_ref(), c, OffsetDateTime::now_utc())? {
            Next::Serve(p, warning) => {
                if let Some(w) = warning {
                    tracing::warn!("the gate's Secret {}/{}: {w}", c.namespace, c.secret);
                }
                return Ok(p);
            }
            Next::Write(p, why) => {
                if let Some(why) = why {
                    tracing::warn!(
                        "the gate's Secret {}/{} cannot be served as it is: {why}",
                        c.namespace,
                        c.secret
                    );
                }
                p
            }
        };
        let s = secret(c, &wanted, current.as_ref())?;
        let written = match &current {
            None => api.create(&PostParams::default(), &s).await,
            Some(_) => api.replace(&c.secret, &PostParams::default(), &s).await,
        };
        match written {
            Ok(_) => return Ok(wanted),
            Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => continue,
            Err(e) => {
                return Err(secrets(
                    e,
                    if current.is_none() {
                        "create"
                    } else {
                        "update"
                    },
                ))
            }
        }
    }
    Err(anyhow!(
        "the gate's Secret {}/{} kept changing while it was written; retry",
        c.namespace,
        c.secret
    ))
}

/// Puts the CA into every webhook of the gate's ValidatingWebhookConfiguration that lacks it,
/// and the mode the gate runs in into its annotation (`model::GATE_MODE_ANNOTATION`).
pub async fn inject_ca(client: &Client, webhook: &str, ca_pem: &str, mode: &str) -> Result<bool> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = |e, verb| {
        api_context(
            e,
            verb,
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            "",
        )
    };
    for _ in 0..3 {
        let mut cfg = api.get(webhook).await.map_err(|e| vwc(e, "get"))?;
        let annotations = cfg
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        let mut changed = annotations
            .get(crate::model::GATE_MODE_ANNOTATION)
            .map(String::as_str)
            != Some(mode);
        annotations.insert(crate::model::GATE_MODE_ANNOTATION.into(), mode.into());
        for w in cfg.webhooks.iter_mut().flatten() {
            let current = w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice());
            if let Some(bundle) = bundle_with(current, ca_pem) {
                w.client_config.ca_bundle = Some(ByteString(bundle.into_bytes()));
                changed = true;
            }
        }
        if !changed {
            return Ok(false);
        }
        match api.replace(webhook, &PostParams::default(), &cfg).await {
            Ok(_) => return Ok(true),
            Err(e) if status_of(&e).is_some_and(|s| s.code == 409) => continue,
            Err(e) => return Err(vwc(e, "update")),
        }
    }
    Err(anyhow!("the ValidatingWebhookConfiguration {webhook} kept changing while the gate put its CA in; retry"))
}

/// The certificates of a PEM bundle, each block as written, whitespace aside.
fn pem_blocks(text: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    text.split_inclusive(END)
        .filter_map(|b| {
            let b = &b[b.find("-----BEGIN CERTIFICATE-----")?..];
            b.ends_with(END).then(|| b.to_string())
        })
        .collect()
}

fn same_block(a: &str, b: &str) -> bool {
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    squeeze(a) == squeeze(b)
}

/// The caBundle that trusts `ca_pem`, when `current` does not yet (None when it does): the CA
/// first, then the one CA the bundle trusted before it, so that a replica still serving a
/// certificate of the previous CA (it reloads within a minute) keeps its handshakes while the
/// CA changes. At most two CAs: the one before the previous is dropped.
fn bundle_with(current: Option<&[u8]>, ca_pem: &str) -> Option<String> {
    let current = current
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(pem_blocks)
        .unwrap_or_default();
    let want = pem_blocks(ca_pem);
    if !want.is_empty()
        && want
            .iter()
            .all(|w| current.iter().any(|c| same_block(c, w)))
    {
        return None;
    }
    let mut bundle = ca_pem.trim_end().to_string();
    bundle.push('\n');
    if let Some(previous) = current
        .iter()
        .find(|c| !want.iter().any(|w| same_block(c, w)))
    {
        bundle.push_str(previous);
        bundle.push('\n');
    }
    Some(bundle)
}

/// The serving certificate as rustls serves it.
pub fn certified_key(p: &Pems) -> Result<Arc<CertifiedKey>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(p.cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("the gate's serving certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(p.key.as_bytes())
        .map_err(|e| anyhow!("the gate's serving key: {e}"))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| anyhow!("the gate's serving key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_serving_certificate_is_signed_by_the_new_ca_and_loads() {
        let p = issue(
            &["kubectl-raft-gate.kubectl-raft.svc".into()],
            Lifetimes::default().validity,
        )
        .unwrap();
        assert!(p.ca_cert.contains("BEGIN CERTIFICATE"));
        assert!(certified_key(&p).is_ok());
        assert!(!due(
            p.not_after,
            OffsetDateTime::now_utc(),
            Lifetimes::default().renew_before
        ));
    }

    /// Whether the serving certificate chains to the CA for its first name, as the API server
    /// checks it (rustls' webpki verifier).
    fn verifies(p: &Pems) -> bool {
        use rustls::client::danger::ServerCertVerifier;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(p.ca_cert.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(p.cert.as_bytes())
            .map(|c| c.unwrap())
            .collect();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .is_ok()
    }

    #[test]
    fn a_new_serving_certificate_chains_to_its_ca() {
        let p = issue(&["127.0.0.1".into()], Lifetimes::default().validity).unwrap();
        assert!(verifies(&p));
    }

    #[test]
    fn a_certificate_from_another_ca_does_not_chain() {
        let p = issue(&["127.0.0.1".into()], Lifetimes::default().validity).unwrap();
        let other = issue(&["127.0.0.1".into()], Lifetimes::default().validity).unwrap();
        assert!(!verifies(&Pems {
            ca_cert: other.ca_cert,
            ..p
        }));
    }

    #[test]
    fn a_certificate_is_renewed_a_month_before_it_expires() {
        let now = OffsetDateTime::now_utc();
        let month = Lifetimes::default().renew_before;
        assert!(due(now + Days::days(29), now, month));
        assert!(!due(now + Days::days(31), now, month));
    }

    #[test]
    fn a_renewed_certificate_comes_from_the_same_ca() {
        let names = vec!["127.0.0.1".to_string()];
        let p = issue(&names, Lifetimes::default().validity).unwrap();
        let (cert, key, _) = serving(&p.ca_key, &names, Lifetimes::default().validity).unwrap();
        assert_ne!(cert, p.cert);
        let renewed = Pems {
            cert,
            key,
            ..p.clone()
        };
        assert!(
            verifies(&renewed),
            "the renewed certificate chains to the CA"
        );
    }

    #[test]
    fn the_secret_round_trips_what_it_stores() {
        let c = CertSettings {
            namespace: "kubectl-raft".into(),
            secret: "gate-tls".into(),
            names: vec!["a".into()],
            webhook: None,
            lifetimes: Lifetimes::default(),
        };
        let p = issue(&c.names, Lifetimes::default().validity).unwrap();
        let s = secret(&c, &p, None).unwrap();
        let back = read(&s).unwrap();
        assert_eq!(back.cert, p.cert);
        let (not_after, _) = check(&back, &c.names).unwrap();
        assert_eq!(not_after.unix_timestamp(), p.not_after.unix_timestamp());
    }

    #[test]
    fn an_empty_bundle_gets_the_ca() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let b = bundle_with(None, &p.ca_cert).unwrap();
        assert_eq!(pem_blocks(&b).len(), 1);
        assert!(same_block(&pem_blocks(&b)[0], &p.ca_cert));
    }

    #[test]
    fn a_bundle_that_trusts_the_ca_is_left_as_it_is() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let old = issue(&names(), Lifetimes::default().validity).unwrap();
        assert_eq!(bundle_with(Some(p.ca_cert.as_bytes()), &p.ca_cert), None);
        let both = format!("{}{}", p.ca_cert, old.ca_cert);
        assert_eq!(bundle_with(Some(both.as_bytes()), &p.ca_cert), None);
    }

    /// A new CA (the Secret deleted, or its CA unable to issue) is put first and the previous
    /// kept: a replica still serving the previous CA's certificate keeps its handshakes until
    /// it reloads. (Before, the bundle was replaced: its handshakes failed, every eviction 500.)
    #[test]
    fn a_new_ca_is_added_before_the_previous_one() {
        let old = issue(&names(), Lifetimes::default().validity).unwrap();
        let new = issue(&names(), Lifetimes::default().validity).unwrap();
        let b = bundle_with(Some(old.ca_cert.as_bytes()), &new.ca_cert).unwrap();
        let blocks = pem_blocks(&b);
        assert_eq!(blocks.len(), 2);
        assert!(same_block(&blocks[0], &new.ca_cert));
        assert!(same_block(&blocks[1], &old.ca_cert));
        assert!(verifies(&Pems {
            ca_cert: b.clone(),
            ..old
        }));
        assert!(verifies(&Pems { ca_cert: b, ..new }));
    }

    #[test]
    fn the_bundle_keeps_two_cas_at_most() {
        let [a, b, c] = [0, 1, 2].map(|_| issue(&names(), Lifetimes::default().validity).unwrap());
        let two = format!("{}{}", b.ca_cert, a.ca_cert);
        let bundle = bundle_with(Some(two.as_bytes()), &c.ca_cert).unwrap();
        let blocks = pem_blocks(&bundle);
        assert_eq!(blocks.len(), 2);
        assert!(same_block(&blocks[0], &c.ca_cert));
        assert!(same_block(&blocks[1], &b.ca_cert));
    }

    #[test]
    fn a_bundle_of_garbage_is_replaced_by_the_ca() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let b = bundle_with(Some(b"not a pem"), &p.ca_cert).unwrap();
        assert_eq!(pem_blocks(&b).len(), 1);
    }

    fn names() -> Vec<String> {
        vec!["gate.gates.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn a_certificate_as_issued_passes_the_check() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        assert!(check(&p, &names()).is_ok());
    }

    #[test]
    fn a_serving_key_that_is_not_the_certificates_is_not_served() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let other = issue(&names(), Lifetimes::default().validity).unwrap();
        let e = check(
            &Pems {
                key: other.key,
                ..p
            },
            &names(),
        )
        .unwrap_err();
        assert!(e.contains("is not the key of tls.crt"), "{e}");
    }

    #[test]
    fn a_serving_certificate_of_another_ca_is_not_served() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let other = issue(&names(), Lifetimes::default().validity).unwrap();
        let e = check(
            &Pems {
                cert: other.cert,
                key: other.key,
                ..p
            },
            &names(),
        )
        .unwrap_err();
        assert!(e.contains("does not serve"), "{e}");
    }

    #[test]
    fn a_certificate_without_a_wanted_name_is_not_served() {
        let p = issue(&names()[..1], Lifetimes::default().validity).unwrap();
        let e = check(&p, &names()).unwrap_err();
        assert!(e.contains("does not serve 127.0.0.1"), "{e}");
    }

    #[test]
    fn a_ca_key_that_is_not_the_cas_cannot_issue() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let other = issue(&names(), Lifetimes::default().validity).unwrap();
        let e = check_ca(&p.ca_cert, &other.ca_key).unwrap_err();
        assert!(e.contains("is not the key of ca.crt"), "{e}");
    }

    fn settings() -> CertSettings {
        CertSettings {
            namespace: "gates".into(),
            secret: "gate-tls".into(),
            names: names(),
            webhook: None,
            lifetimes: Lifetimes::default(),
        }
    }

    fn stored(p: &Pems) -> Secret {
        secret(&settings(), p, None).unwrap()
    }

    fn without(mut s: Secret, key: &str) -> Secret {
        s.data.as_mut().unwrap().remove(key);
        s
    }

    fn decided(s: Option<&Secret>) -> Next {
        decide(s, &settings(), OffsetDateTime::now_utc()).unwrap()
    }

    #[test]
    fn a_secret_that_passes_is_served_as_it_is() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        match decided(Some(&stored(&p))) {
            Next::Serve(q, None) => assert_eq!(q.cert, p.cert),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_serving_key_is_issued_again_from_the_same_ca() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        match decided(Some(&without(stored(&p), "tls.key"))) {
            Next::Write(q, Some(why)) => {
                assert_eq!(q.ca_cert, p.ca_cert, "the same CA");
                assert!(why.contains("lacks tls.crt or tls.key"), "{why}");
                assert!(verifies(&q));
            }
            other => panic!("{other:?}"),
        }
    }

    /// The expiry is the certificate's own: an annotation edited to a later date does not keep
    /// a certificate that is due from being issued again.
    #[test]
    fn a_due_certificate_is_issued_again_whatever_the_annotation_says() {
        let p = issue(&names(), std::time::Duration::from_secs(10 * 86400)).unwrap();
        let mut s = stored(&p);
        s.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(NOT_AFTER.into(), "2099-01-01T00:00:00Z".into());
        match decided(Some(&s)) {
            Next::Write(q, None) => {
                assert_eq!(q.ca_cert, p.ca_cert);
                assert_ne!(q.cert, p.cert);
            }
            other => panic!("{other:?}"),
        }
    }

    /// A CA key that cannot issue does not stop a good serving certificate from being served:
    /// a new CA now would fail the replicas still serving the old one.
    #[test]
    fn a_broken_ca_key_beside_a_good_certificate_is_only_warned_of() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let other = issue(&names(), Lifetimes::default().validity).unwrap();
        let s = stored(&Pems {
            ca_key: other.ca_key,
            ..p.clone()
        });
        match decided(Some(&s)) {
            Next::Serve(q, Some(w)) => {
                assert_eq!(q.cert, p.cert);
                assert!(w.contains("its CA cannot issue"), "{w}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Neither half usable: a new CA, the old one kept after it in ca.crt, so the webhook's
    /// caBundle (which gets ca.crt) trusts the certificates of both while replicas reload.
    #[test]
    fn a_new_ca_keeps_the_old_one_beside_it() {
        let p = issue(&names(), Lifetimes::default().validity).unwrap();
        let other = issue(&names(), Lifetimes::default().validity).unwrap();
        let s = without(
            stored(&Pems {
                ca_key: other.ca_key,
                ..p.clone()
            }),
            "tls.crt",
        );
        match decided(Some(&s)) {
            Next::Write(q, Some(why)) => {
                let blocks = pem_blocks(&q.ca_cert);
                assert_eq!(blocks.len(), 2);
                assert!(same_block(&blocks[1], &p.ca_cert));
                assert!(verifies(&q), "the new certificate under the new ca.crt");
                assert!(verifies(&Pems {
                    ca_cert: q.ca_cert.clone(),
                    ..p
                }));
                assert!(why.contains("a new CA is made"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_secret_is_a_new_ca_without_a_warning() {
        assert!(matches!(decided(None), Next::Write(_, None)));
    }
}
