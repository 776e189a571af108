//! The gate's HTTPS server: `POST /validate` (the API server's AdmissionReviews), `GET /healthz`
//! and `GET /metrics` (Prometheus), an Event on the pod for every refusal and every transfer
//! it starts, and its certificate kept fresh from [`super::certs`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certs::{self, CertSettings};
use super::gate::KubeGate;
use crate::gate::review::{self, Parsed};
use crate::gate::{Code, Gate, Verdict};

/// The longest a client may take to complete its TLS handshake.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(5);

/// The largest review read (an Eviction's is a few kilobytes).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// How the gate serves.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    pub certs: CertSettings,
    /// How often the certificate and the webhook's CA are looked at (re-issued when due, put
    /// back when a re-apply of the webhook configuration blanked it).
    pub cert_check_every: Duration,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    verdict: String,
    reason: String,
}

/// The gate's metrics (all prefixed `kubectl_raft_gate_`).
struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    latency: Histogram,
    transfers: Counter,
    held: Histogram,
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("kubectl_raft_gate");
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "decisions",
            "Evictions decided, by verdict and reason",
            decisions.clone(),
        );
        let buckets = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
        let latency = Histogram::new(buckets);
        registry.register(
            "decision_seconds",
            "Time to decide one eviction",
            latency.clone(),
        );
        let transfers = Counter::default();
        registry.register(
            "transfers",
            "Leadership transfers started",
            transfers.clone(),
        );
        let held = Histogram::new([
            1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
        ]);
        registry.register(
            "held_seconds",
            "How long a member's eviction was refused before it was allowed",
            held.clone(),
        );
        Metrics {
            registry,
            decisions,
            latency,
            transfers,
            held,
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The serving certificate, swapped when it is re-issued.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().expect("not poisoned").clone())
    }
}

struct Server {
    gate: Gate<KubeGate>,
    metrics: Metrics,
    recorder: Recorder,
    /// When a pod's eviction was first refused (for `held_seconds`).
    first_refused: Mutex<HashMap<String, Instant>>,
}

impl Server {
    async fn validate(self: &Arc<Self>, body: &[u8]) -> (StatusCode, String) {
        let started = Instant::now();
        let parsed = match review::parse(body) {
            Ok(p) => p,
            Err(e) => return (StatusCode::BAD_REQUEST, e),
        };
        let (uid, request, user) = match parsed {
            Parsed::Other { uid, what } => {
                tracing::warn!("sent {what}, which the gate does not decide: allowed (check the webhook's rules)");
                return (StatusCode::OK, review::allow(&uid).to_string());
            }
            Parsed::Pod { uid, request, user } => (uid, request, user),
        };
        let verdict = self.gate.review(&request).await;
        let key = format!("{}/{}", request.namespace, request.pod);
        self.metrics
            .latency
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .decisions
            .get_or_create(&DecisionLabels {
                verdict: if verdict.allowed() {
                    "allowed"
                } else {
                    "refused"
                }
                .into(),
                reason: verdict.reason(),
            })
            .inc();
        tracing::info!(pod = %key, user = %user, dry_run = request.dry_run, verdict = %verdict.reason(), "{}", verdict.message());
        if !request.dry_run {
            self.remember(&key, &verdict);
            // After the answer, never before it: a slow API server must not make the answer
            // miss the webhook's timeout (a 500, which makes kubectl drain give up).
            let (server, request, verdict) = (self.clone(), request.clone(), verdict.clone());
            tokio::spawn(async move { server.event(&request, &verdict).await });
        }
        (StatusCode::OK, review::answer(&uid, &verdict).to_string())
    }

    fn remember(&self, key: &str, verdict: &Verdict) {
        let mut first = self.first_refused.lock().expect("not poisoned");
        match verdict {
            Verdict::Allow(_) => {
                if let Some(since) = first.remove(key) {
                    self.metrics.held.observe(since.elapsed().as_secs_f64());
                }
            }
            Verdict::Refuse(code, _) => {
                if *code == Code::TransferStarted {
                    self.metrics.transfers.inc();
                }
                // Evictions given up on are forgotten after a day.
                first.retain(|_, since| since.elapsed() < Duration::from_secs(86400));
                first.entry(key.to_string()).or_insert_with(Instant::now);
            }
        }
    }

    /// An Event on the pod for a refusal or a transfer (kube's recorder folds repeats of the
    /// same reason into a series, so a drain retrying every 5 s makes one Event, counted).
    async fn event(&self, req: &crate::gate::Request, verdict: &Verdict) {
        let Verdict::Refuse(code, message) = verdict else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(req.namespace.clone()),
            name: Some(req.pod.clone()),
            ..Default::default()
        };
        let ev = Event {
            type_: if *code == Code::TransferStarted {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: code.reason(),
            note: Some(message.chars().take(1000).collect()),
            action: "Evict".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(
                "could not record an Event on {}/{}: {e}",
                req.namespace,
                req.pod
            );
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let reply = |code: StatusCode, ctype: &str, body: String| {
            Response::builder()
                .status(code)
                .header("content-type", ctype)
                .body(Full::new(Bytes::from(body)))
                .expect("a valid response")
        };
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            (&Method::GET, "/metrics") => reply(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.render(),
            ),
            (&Method::POST, "/validate") => {
                let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
                    Ok(b) => b.to_bytes(),
                    Err(e) => {
                        return reply(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n"))
                    }
                };
                let (code, json) = self.validate(&body).await;
                reply(code, "application/json", json)
            }
            _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }
}

/// Runs the gate until it fails or the process is told to stop.
pub async fn serve(gate: Gate<KubeGate>, client: Client, s: ServeSettings) -> Result<()> {
    let pems = certs::ensure(&client, &s.certs).await?;
    if let Some(w) = &s.certs.webhook {
        if certs::inject_ca(&client, w, &pems.ca_cert).await? {
            tracing::info!("put the gate's CA into ValidatingWebhookConfiguration {w}");
        }
    }
    let current = Arc::new(Current(RwLock::new(certs::certified_key(&pems)?)));
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS versions")?
    .with_no_client_auth()
    .with_cert_resolver(current.clone());
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .with_context(|| format!("listening on {}", s.listen))?;
    let server = Arc::new(Server {
        gate,
        metrics: Metrics::new(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::model::GATE_COMPONENT.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        first_refused: Mutex::new(HashMap::new()),
    });
    // The certificate: looked at every minute, re-issued from the same CA when due; the CA
    // put back into the webhook when something blanked it.
    {
        let (client, c, current) = (client.clone(), s.certs.clone(), current.clone());
        let every = s.cert_check_every;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match certs::ensure(&client, &c).await.and_then(|p| {
                    let k = certs::certified_key(&p)?;
                    Ok((p, k))
                }) {
                    Ok((p, k)) => {
                        *current.0.write().expect("not poisoned") = k;
                        if let Some(w) = &c.webhook {
                            if let Err(e) = certs::inject_ca(&client, w, &p.ca_cert).await {
                                tracing::warn!("could not check the CA in {w}: {e:#}");
                            }
                        }
                    }
                    Err(e) => tracing::warn!("could not renew the serving certificate: {e:#}"),
                }
            }
        });
    }
    tracing::info!("kubectl-raft gate serving on https://{}", s.listen);
    eprintln!("kubectl-raft gate: serving on https://{}", s.listen);
    loop {
        let (tcp, peer) = listener.accept().await.context("accepting a connection")?;
        let (acceptor, server) = (acceptor.clone(), server.clone());
        tokio::spawn(async move {
            // A client that connects and says nothing does not hold a task for ever.
            let tls = match tokio::time::timeout(HANDSHAKE_WITHIN, acceptor.accept(tcp)).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("no TLS handshake from {peer} within {HANDSHAKE_WITHIN:?}");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |req| {
                let server = server.clone();
                async move { Ok::<_, std::convert::Infallible>(server.handle(req).await) }
            });
            // No read timeout on the connection: the API server keeps it open between reviews,
            // and one closed under it as it sends a review fails that eviction with a 500
            // ("connection reset by peer"), which makes kubectl drain give up.
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await
            {
                tracing::debug!("connection from {peer}: {e}");
            }
        });
    }
}
