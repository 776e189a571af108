//! The gate's HTTPS server: `POST /validate` (the API server's AdmissionReviews), `GET /healthz`
//! and `GET /metrics` (Prometheus), an Event on the pod for every refusal and every transfer
//! it starts, and its certificate kept fresh from [`super::certs`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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
use tokio_util::sync::CancellationToken;

use super::callers::{self, Caller, CallerSettings};
use super::certs::{self, CertSettings};
use super::gate::KubeGate;
use crate::gate::review::{self, Parsed};
use crate::gate::{Code, Gate, Verdict};

/// How the gate serves.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub listen: SocketAddr,
    pub certs: CertSettings,
    /// How often the certificate and the webhook's CA are looked at (re-issued when due, put
    /// back when a re-apply of the webhook configuration blanked it).
    pub cert_check_every: Duration,
    pub shutdown: Shutdown,
    pub limits: Limits,
    /// Who may post reviews (`--client-ca`); `None`: whoever reaches the port.
    pub callers: Option<CallerSettings>,
    /// Where `/metrics` is served over plain HTTP (`--metrics-listen`), instead of on `listen`.
    pub metrics_listen: Option<SocketAddr>,
}

/// How the gate stops on SIGTERM (its own eviction, a rollout) or Ctrl-C: `/readyz` fails at
/// once and every answer closes its connection, so that the API server's next review opens a
/// new one (to a replica that is still ready); for `delay` it keeps answering whatever still
/// arrives; then it stops taking connections and waits (at most `drain_within`) for the
/// requests in flight, so no decision is cut off between its record's write and its answer.
#[derive(Debug, Clone, Copy)]
pub struct Shutdown {
    pub delay: Duration,
    pub drain_within: Duration,
}

/// What callers may hold of the server: whoever reaches its port (not only the API server)
/// cannot exhaust it, slow it or make it read without end.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections at once, from everyone.
    pub max_connections: usize,
    /// Connections at once from one address: well above what one API server opens for a
    /// drain (HTTP/1.1, one connection per review in flight: one per pod of the node in
    /// opted-in namespaces, and several drains at once), so that a flooding pod cannot take
    /// them all.
    pub per_peer: usize,
    /// The longest a client may take to complete its TLS handshake.
    pub handshake_within: Duration,
    /// The longest a new connection may go without its first request (the API server sends
    /// one as soon as it has connected).
    pub first_request_within: Duration,
    /// The longest a request's headers may take, and a kept-alive connection may sit idle:
    /// longer than the API server's own idle timeout (90 s), so that the client, never the
    /// gate, closes an idle connection (one closed as a review is sent on it fails that
    /// eviction with a 500, which makes kubectl drain give up).
    pub header_within: Duration,
    /// The longest a request's body may take to arrive.
    pub body_within: Duration,
    /// The largest body read (an Eviction's review is a few kilobytes; 3 MiB is the API
    /// server's own limit on a request's body).
    pub max_body: usize,
    /// The bytes of bodies being read at once, across all connections (each request's
    /// Content-Length, or `max_body` without one, taken before it is read).
    pub bodies_at_once: usize,
    /// The largest read buffer of a connection (a request's headers must fit in it).
    pub max_buffer: usize,
}

impl Limits {
    /// The metrics port's share (`--metrics-listen`): a scraper or two, never the webhook's
    /// budget again beside it.
    pub fn for_metrics(webhook: Limits) -> Limits {
        Limits {
            max_connections: 64,
            per_peer: 16,
            ..webhook
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 2048,
            per_peer: 512,
            handshake_within: Duration::from_secs(5),
            first_request_within: Duration::from_secs(10),
            header_within: Duration::from_secs(120),
            body_within: Duration::from_secs(10),
            max_body: 3 * 1024 * 1024,
            bodies_at_once: 32 * 1024 * 1024,
            max_buffer: 64 * 1024,
        }
    }
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
    unauthenticated: Counter,
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
        let unauthenticated = Counter::default();
        registry.register(
            "unauthenticated_reviews",
            "Reviews refused (403) because their caller did not prove itself with a certificate --client-ca signed and --client-name names",
            unauthenticated.clone(),
        );
        Metrics {
            registry,
            decisions,
            latency,
            transfers,
            held,
            unauthenticated,
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

/// When a request's time began as its sender counts it: for the first request on a
/// connection that comes within [`PROMPT`] of its handshake, the connection's accept (the API
/// server's timeout began before it connected and shook hands); otherwise the request's own
/// arrival (its headers read).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived(pub tokio::time::Instant);

/// The address a request's connection came from, as the gate sees it: logged with each
/// decision, so that an operator can see where the API server's calls come from (the
/// NetworkPolicy's `--allow-from`) before writing it down.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::IpAddr);

/// The least time a review's body is given, its budget spent or not (the API server sends
/// the body with its headers: a second is plenty).
const BODY_FLOOR: Duration = Duration::from_secs(1);

/// How soon after its connection's handshake a first request must come to be charged the
/// connection's time too: the API server dialled for it. One that comes later was sent on a
/// connection kept idle since (Go's transport pools a connection it dialled and did not use).
const PROMPT: Duration = Duration::from_secs(1);

/// What the gate keeps of the time the API server says it waits, for the rounding of that
/// time up to a second and for the answer's way back: with the default `timeoutSeconds: 10`,
/// the 8 s of `--decide-within`'s default.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(2);

/// The most a review may take from its arrival: `decide_within`, or less where the API server
/// waits less. It sends how long it waits with each call (`?timeout=10s`: what is left of the
/// webhook's `timeoutSeconds`, rounded up to a second); the gate answers [`TIMEOUT_MARGIN`]
/// before that. A webhook installed with a shorter timeout than the default is then answered
/// in time, rather than with the 500 that makes kubectl drain give up.
pub(crate) fn budget(query: Option<&str>, decide_within: Duration) -> Duration {
    let waits = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|v| humantime::parse_duration(v).ok());
    match waits {
        Some(w) => decide_within.min(w.saturating_sub(TIMEOUT_MARGIN)),
        None => decide_within,
    }
}

struct Server {
    gate: Gate<KubeGate>,
    limits: Limits,
    /// The bytes of bodies read at once, in KiB (`Limits::bodies_at_once`).
    bodies: tokio::sync::Semaphore,
    /// Set on SIGTERM: not ready any more.
    stopping: CancellationToken,
    metrics: Metrics,
    recorder: Recorder,
    /// When a pod's eviction was first refused (for `held_seconds`).
    first_refused: Mutex<HashMap<String, Instant>>,
    /// The names a caller's client certificate must carry (`--client-ca`: `Some`, empty for
    /// any); `None`: every caller may post reviews.
    callers: Option<Vec<String>>,
    /// `/metrics` is served on its own port (`--metrics-listen`), not here.
    metrics_apart: bool,
}

impl Server {
    /// The answer to the review in `body`, which arrived at `arrived` with `budget` to be
    /// answered in (the body's time included).
    async fn validate(
        self: &Arc<Self>,
        body: &[u8],
        arrived: tokio::time::Instant,
        budget: Duration,
        from: &str,
    ) -> (StatusCode, String) {
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
        let answered = self.gate.review_by(&request, arrived, budget).await;
        let verdict = answered.verdict;
        let key = format!("{}/{}", request.namespace, request.pod);
        self.metrics
            .latency
            .observe(arrived.elapsed().as_secs_f64());
        self.metrics
            .decisions
            .get_or_create(&DecisionLabels {
                verdict: match &verdict {
                    Verdict::Would { .. } => "would-refuse",
                    v if v.allowed() => "allowed",
                    _ => "refused",
                }
                .into(),
                reason: verdict.reason(),
            })
            .inc();
        tracing::info!(pod = %key, user = %user, source_ip = %from, dry_run = request.dry_run, verdict = %verdict.reason(), "{}", verdict.message());
        // A refusal anyone could provoke for any pod (its node not being drained, or a review
        // sent too slowly or with a short `?timeout=` to be decided before that is known)
        // writes nothing, not even an Event on the pod (which status would show as its last
        // refusal), nor starts a clock of how long a real eviction of it was held: logged and
        // counted.
        if !request.dry_run && answered.acted_on {
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
            Verdict::Allow(_) | Verdict::Warn(..) | Verdict::Would { .. } => {
                if let Some(since) = first.remove(key) {
                    self.metrics.held.observe(since.elapsed().as_secs_f64());
                }
            }
            Verdict::Refuse(code, _) => {
                if *code == Code::TransferStarted {
                    self.metrics.transfers.inc();
                }
                // Evictions given up on are forgotten after a day; at most MAX_HELD at once.
                first.retain(|_, since| since.elapsed() < Duration::from_secs(86400));
                if first.len() < MAX_HELD {
                    first.entry(key.to_string()).or_insert_with(Instant::now);
                }
            }
        }
    }

    /// An Event on the pod for a refusal or a transfer (kube's recorder folds repeats of the
    /// same reason into a series, so a drain retrying every 5 s makes one Event, counted).
    async fn event(&self, req: &crate::gate::Request, verdict: &Verdict) {
        let (code, message) = match verdict {
            Verdict::Refuse(code, message) | Verdict::Would { code, message, .. } => {
                (code, message)
            }
            _ => return,
        };
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(req.namespace.clone()),
            name: Some(req.pod.clone()),
            ..Default::default()
        };
        let ev = Event {
            // A transfer started is news; a refusal, or one a trial mode would have made, a
            // warning.
            type_: if *code == Code::TransferStarted && matches!(verdict, Verdict::Refuse(..)) {
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

    /// `--metrics-listen`'s server: `GET /metrics` and nothing else.
    async fn handle_metrics(self: Arc<Self>, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (code, ctype, body) = match (req.method(), req.uri().path()) {
            (&Method::GET, "/metrics") => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.render(),
            ),
            _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        };
        Response::builder()
            .status(code)
            .header("content-type", ctype)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
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
            (&Method::GET, "/readyz") if self.stopping.is_cancelled() => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "stopping\n".into(),
            ),
            (&Method::GET, "/readyz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            (&Method::GET, "/metrics") if !self.metrics_apart => reply(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.metrics.render(),
            ),
            (&Method::POST, "/validate") => {
                let from = req
                    .extensions()
                    .get::<Peer>()
                    .map_or_else(|| "unknown".to_string(), |f| f.0.to_string());
                let caller = req
                    .extensions()
                    .get::<Caller>()
                    .cloned()
                    .unwrap_or_default();
                if let Err(why) = callers::admit(self.callers.as_deref(), &caller) {
                    // Before the body is read: a caller that is not the API server costs a
                    // handshake and its headers, never a decision.
                    self.metrics.unauthenticated.inc();
                    tracing::warn!("a review from {from} refused 403: {why}");
                    return reply(StatusCode::FORBIDDEN, "text/plain", format!("{why}\n"));
                }
                // One budget from the review's arrival (for a connection's first review, the
                // connection's: the API server's timeout began before it connected): its body,
                // then its decision, so that a slow body or handshake leaves the decision less
                // time rather than the answer later than the API server waits.
                let arrived = req
                    .extensions()
                    .get::<Arrived>()
                    .map_or_else(tokio::time::Instant::now, |a| a.0);
                let budget = budget(req.uri().query(), self.gate.settings.decide_within);
                // At least BODY_FLOOR for the body, whose review's uid the answer must carry: a
                // budget spent already is answered 429 (`CannotDecide`), never 408.
                let left =
                    (arrived + budget).saturating_duration_since(tokio::time::Instant::now());
                let limits = Limits {
                    body_within: self.limits.body_within.min(left.max(BODY_FLOOR)),
                    ..self.limits
                };
                let body = match read_body(req, &limits, &self.bodies).await {
                    Ok(b) => b,
                    Err((code, why)) => return reply(code, "text/plain", format!("{why}\n")),
                };
                let (code, json) = self.validate(&body, arrived, budget, &from).await;
                reply(code, "application/json", json)
            }
            _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }
}

/// Runs the gate until it fails or the process is told to stop.
pub async fn serve(gate: Gate<KubeGate>, client: Client, s: ServeSettings) -> Result<()> {
    // A bad --client-ca stops the gate before it touches the cluster.
    let verifier = s.callers.as_ref().map(callers::verifier).transpose()?;
    // Both ports before the cluster is touched: one that cannot be had stops the gate before
    // it writes its certificate or its webhook's CA.
    let listener = tokio::net::TcpListener::bind(s.listen)
        .await
        .with_context(|| format!("listening on {}", s.listen))?;
    let metrics_listener = match s.metrics_listen {
        Some(addr) => Some((
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr} (--metrics-listen)"))?,
            addr,
        )),
        None => None,
    };
    let pems = certs::ensure(&client, &s.certs).await?;
    let mode = gate.settings.mode.as_str();
    if let Some(w) = &s.certs.webhook {
        if certs::inject_ca(&client, w, &pems.ca_cert, mode).await? {
            tracing::info!(
                "put the gate's CA and its mode ({mode}) into ValidatingWebhookConfiguration {w}"
            );
        }
    }
    let current = Arc::new(Current(RwLock::new(certs::certified_key(&pems)?)));
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS versions")?;
    let tls = match verifier {
        Some(v) => tls.with_client_cert_verifier(v),
        None => tls.with_no_client_auth(),
    }
    .with_cert_resolver(current.clone());
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let stopping = CancellationToken::new();
    let server = Arc::new(Server {
        gate,
        limits: s.limits,
        bodies: tokio::sync::Semaphore::new(s.limits.bodies_at_once / 1024),
        stopping: stopping.clone(),
        metrics: Metrics::new(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: crate::model::GATE_COMPONENT.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        first_refused: Mutex::new(HashMap::new()),
        callers: s.callers.as_ref().map(|c| c.names.clone()),
        metrics_apart: s.metrics_listen.is_some(),
    });
    // The certificate: looked at every minute, re-issued from the same CA when due; the CA
    // put back into the webhook when something blanked it.
    {
        let (client, c, current) = (client.clone(), s.certs.clone(), current.clone());
        let every = s.cert_check_every;
        let mut served_ca = pems.ca_cert.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match certs::ensure(&client, &c).await.and_then(|p| {
                    let k = certs::certified_key(&p)?;
                    Ok((p, k))
                }) {
                    Ok((p, k)) => {
                        // The webhook trusts the CA before a certificate of it is served: a
                        // new CA whose injection failed is not served yet (the certificate of
                        // the CA the webhook trusts still is), and is tried again next time.
                        let trusted = match &c.webhook {
                            None => true,
                            Some(w) => match certs::inject_ca(&client, w, &p.ca_cert, mode).await {
                                Ok(_) => true,
                                Err(e) => {
                                    tracing::warn!("could not check the CA in {w}: {e:#}");
                                    p.ca_cert == served_ca
                                }
                            },
                        };
                        if trusted {
                            *current.0.write().expect("not poisoned") = k;
                            served_ca = p.ca_cert;
                        }
                    }
                    Err(e) => tracing::warn!("could not renew the serving certificate: {e:#}"),
                }
            }
        });
    }
    tracing::info!(
        "kubectl-raft gate serving on https://{} ({mode} mode)",
        s.listen
    );
    eprintln!(
        "kubectl-raft gate: serving on https://{} ({mode} mode)",
        s.listen
    );
    {
        let stopping = stopping.clone();
        tokio::spawn(async move {
            let why = stop_signal().await;
            tracing::info!("{why}: not ready any more; answering what still arrives");
            stopping.cancel();
        });
    }
    if let Some((listener, addr)) = metrics_listener {
        eprintln!("kubectl-raft gate: metrics on http://{addr}/metrics");
        let server = server.clone();
        let service = move |req| server.clone().handle_metrics(req);
        tokio::spawn(serve_connections(
            listener,
            None,
            service,
            stopping.clone(),
            s.shutdown,
            Limits::for_metrics(s.limits),
        ));
    }
    let service = move |req| server.clone().handle(req);
    serve_connections(
        listener,
        Some(acceptor),
        service,
        stopping,
        s.shutdown,
        s.limits,
    )
    .await;
    eprintln!("kubectl-raft gate: stopped");
    Ok(())
}

/// SIGTERM (the pod's deletion) or Ctrl-C, whichever comes first.
async fn stop_signal() -> &'static str {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "interrupted",
    }
}

/// The most evictions whose first refusal is remembered at once (for `held_seconds`).
const MAX_HELD: usize = 10_000;

/// A request's body, within the limits: 413 past `max_body` (read no further), 408 past
/// `body_within`.
async fn read_body(
    req: Request<Incoming>,
    limits: &Limits,
    budget: &tokio::sync::Semaphore,
) -> Result<Bytes, (StatusCode, String)> {
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a review is at most {} bytes", limits.max_body),
        )
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_body) {
        return Err(too_large());
    }
    let deadline = tokio::time::Instant::now() + limits.body_within;
    let share = declared.unwrap_or(limits.max_body).max(1);
    let permits = u32::try_from(share.div_ceil(1024)).unwrap_or(u32::MAX);
    let Ok(Ok(_share)) = tokio::time::timeout_at(deadline, budget.acquire_many(permits)).await
    else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "too many bodies being read at once".into(),
        ));
    };
    match tokio::time::timeout_at(
        deadline,
        Limited::new(req.into_body(), limits.max_body).collect(),
    )
    .await
    {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err((StatusCode::BAD_REQUEST, e.to_string())),
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!("the body did not arrive within {:?}", limits.body_within),
        )),
    }
}

/// One address's share of the connections, given back when the connection ends.
struct PeerSlot {
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PeerSlot {
    fn take(peers: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, max: usize) -> Option<Self> {
        let mut p = peers.lock().expect("not poisoned");
        let n = p.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut p = self.peers.lock().expect("not poisoned");
        if let Some(n) = p.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                p.remove(&self.ip);
            }
        }
    }
}

/// Serves connections on `listener` (TLS through `tls`, plain HTTP without: the tests') with
/// `service` until `stopping` is cancelled and `shutdown.delay` has passed, then waits for the
/// requests in flight. Accept errors (out of file descriptors) are waited out, never the end.
pub(crate) async fn serve_connections<S, F>(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    service: S,
    stopping: CancellationToken,
    shutdown: Shutdown,
    limits: Limits,
) where
    S: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let peers: Arc<Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let total = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let stop_taking = {
        let stopping = stopping.clone();
        async move {
            stopping.cancelled().await;
            tokio::time::sleep(shutdown.delay).await;
        }
    };
    tokio::pin!(stop_taking);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop_taking => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("accepting a connection: {e}; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let accepted = tokio::time::Instant::now();
        let Some(slot) = PeerSlot::take(&peers, peer.ip(), limits.per_peer) else {
            tracing::debug!(
                "{peer}: {} connections from its address already; closed",
                limits.per_peer
            );
            continue;
        };
        let Ok(permit) = total.clone().try_acquire_owned() else {
            tracing::warn!(
                "{} connections at once; {peer}'s closed",
                limits.max_connections
            );
            continue;
        };
        let (tls, watcher, stopping) = (tls.clone(), graceful.watcher(), stopping.clone());
        // Every answer given while stopping closes its connection: the next review comes on a
        // new one, which the Service sends to a replica that is still ready.
        let service = {
            let service = service.clone();
            move |req| {
                let (service, stopping) = (service.clone(), stopping.clone());
                async move {
                    let mut resp = service(req).await;
                    if stopping.is_cancelled() {
                        resp.headers_mut().insert(
                            hyper::header::CONNECTION,
                            "close".parse().expect("a header"),
                        );
                    }
                    Ok::<_, std::convert::Infallible>(resp)
                }
            }
        };
        tokio::spawn(async move {
            let _held = (slot, permit);
            let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
            // When the connection's handshake ended (its accept, without TLS).
            let handshaken: Arc<std::sync::OnceLock<tokio::time::Instant>> = Arc::default();
            // Who the connection's handshake showed its caller to be, on each of its requests.
            let caller: Arc<std::sync::OnceLock<Caller>> = Arc::default();
            let svc = {
                let (served, caller, handshaken) =
                    (served.clone(), caller.clone(), handshaken.clone());
                hyper::service::service_fn(move |mut req: Request<Incoming>| {
                    let first = !served.swap(true, std::sync::atomic::Ordering::Relaxed);
                    let now = tokio::time::Instant::now();
                    let shaken = handshaken.get().copied().unwrap_or(accepted);
                    req.extensions_mut().insert(Arrived(
                        if first && now.duration_since(shaken) <= PROMPT {
                            accepted
                        } else {
                            now
                        },
                    ));
                    req.extensions_mut()
                        .insert(caller.get().cloned().unwrap_or_default());
                    req.extensions_mut().insert(Peer(peer.ip()));
                    service(req)
                })
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_within)
                .max_buf_size(limits.max_buffer);
            // A connection that has sent no request by then is closed: idle connections opened
            // by anyone do not hold the slots the API server needs.
            let first = async {
                tokio::time::sleep(limits.first_request_within).await;
                if served.load(std::sync::atomic::Ordering::Relaxed) {
                    std::future::pending::<()>().await;
                }
            };
            let conn = async {
                match tls {
                    None => {
                        watcher
                            .watch(http.serve_connection(TokioIo::new(tcp), svc))
                            .await
                    }
                    Some(acceptor) => {
                        // A client that connects and says nothing does not hold a task for ever.
                        let stream = match tokio::time::timeout(
                            limits.handshake_within,
                            acceptor.accept(tcp),
                        )
                        .await
                        {
                            Ok(Ok(t)) => t,
                            Ok(Err(e)) if e.to_string().contains("certificate") => {
                                // A caller's certificate refused (--client-ca): an API server
                                // whose certificate the gate does not take fails here.
                                tracing::warn!("TLS handshake with {peer} failed: {e}");
                                return Ok(());
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("TLS handshake with {peer} failed: {e}");
                                return Ok(());
                            }
                            Err(_) => {
                                tracing::debug!(
                                    "no TLS handshake from {peer} within {:?}",
                                    limits.handshake_within
                                );
                                return Ok(());
                            }
                        };
                        let _ = caller.set(Caller::of(stream.get_ref().1));
                        let _ = handshaken.set(tokio::time::Instant::now());
                        watcher
                            .watch(http.serve_connection(TokioIo::new(stream), svc))
                            .await
                    }
                }
            };
            tokio::select! {
                served = conn => if let Err(e) = served {
                    tracing::debug!("connection from {peer}: {e}");
                },
                _ = first => tracing::debug!(
                    "{peer} sent no request within {:?}; closed",
                    limits.first_request_within
                ),
            }
        });
    }
    drop(listener);
    tracing::info!("no longer taking connections; waiting for the requests in flight");
    if tokio::time::timeout(shutdown.drain_within, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after {:?}; stopping all the same",
            shutdown.drain_within
        );
    }
}

#[cfg(test)]
mod tests {
    //! The HTTP layer alone, over plain TCP on the loopback: what a caller that is not the API
    //! server can and cannot do to it, and how it stops.

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    fn limits() -> Limits {
        Limits {
            max_connections: 8,
            per_peer: 3,
            handshake_within: Duration::from_secs(1),
            first_request_within: Duration::from_millis(300),
            header_within: Duration::from_millis(300),
            body_within: Duration::from_millis(300),
            max_body: 1024,
            bodies_at_once: 4096,
            max_buffer: 8192,
        }
    }

    /// A server whose service reads the body within the limits and answers its length after
    /// `takes`; its address, its stop token and its end.
    async fn start(
        takes: Duration,
        delay: Duration,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let lim = limits();
        let budget = Arc::new(tokio::sync::Semaphore::new(lim.bodies_at_once / 1024));
        let service = move |req: Request<Incoming>| {
            let budget = budget.clone();
            async move {
                tokio::time::sleep(takes).await;
                let (code, text) = match read_body(req, &lim, &budget).await {
                    Ok(b) => (StatusCode::OK, format!("read {}", b.len())),
                    Err((c, why)) => (c, why),
                };
                Response::builder()
                    .status(code)
                    .body(Full::new(Bytes::from(text)))
                    .unwrap()
            }
        };
        start_serving(service, delay, limits()).await
    }

    /// A server of `service` under `lim`; its address, its stop token and its end.
    async fn start_serving<S, F>(
        service: S,
        delay: Duration,
        lim: Limits,
    ) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>)
    where
        S: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
        F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stopping = CancellationToken::new();
        let shutdown = Shutdown {
            delay,
            drain_within: Duration::from_secs(5),
        };
        let ended = tokio::spawn(serve_connections(
            listener,
            None,
            service,
            stopping.clone(),
            shutdown,
            lim,
        ));
        (addr, stopping, ended)
    }

    /// A server that answers how long ago each request arrived (its `Arrived`), in ms; a
    /// connection may wait 3 s for its first request.
    async fn start_arrivals() -> SocketAddr {
        let service = |req: Request<Incoming>| async move {
            let ms = req
                .extensions()
                .get::<Arrived>()
                .map(|a| a.0.elapsed().as_millis())
                .unwrap_or(u128::MAX);
            Response::new(Full::new(Bytes::from(ms.to_string())))
        };
        let lim = Limits {
            first_request_within: Duration::from_secs(3),
            header_within: Duration::from_secs(3),
            ..limits()
        };
        start_serving(service, Duration::ZERO, lim).await.0
    }

    /// The number an answer of `start_arrivals` ends with.
    fn millis(answer: &str) -> u128 {
        let n = answer.rsplit("\r\n\r\n").next().unwrap_or("");
        n.parse()
            .unwrap_or_else(|_| panic!("an answer in ms: {answer}"))
    }

    /// A connection's first request arrived, as the API server counts it, when the connection
    /// was accepted: its handshake and the wait for its headers count against the decision.
    #[tokio::test]
    async fn a_connections_first_request_arrived_when_it_was_accepted() {
        let addr = start_arrivals().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.write_all(post("x").as_bytes()).await.unwrap();
        let a = read_answer(&mut c).await;
        assert!(millis(&a) >= 150, "{a}");
    }

    /// A first request that comes long after its connection's handshake was sent on a
    /// connection kept idle since (Go's transport pools one it dialled and did not use): it
    /// arrived when it came, or it would find its budget spent.
    #[tokio::test]
    async fn a_first_request_long_after_its_handshake_arrived_when_it_came() {
        let addr = start_arrivals().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(PROMPT + Duration::from_millis(300)).await;
        c.write_all(post("x").as_bytes()).await.unwrap();
        let a = read_answer(&mut c).await;
        assert!(millis(&a) < PROMPT.as_millis(), "{a}");
    }

    /// Each request carries the address its connection came from (the decision's log line
    /// says it: where the API server's calls come from, for `--allow-from`).
    #[tokio::test]
    async fn a_request_carries_the_address_it_came_from() {
        let service = |req: Request<Incoming>| async move {
            let from = req
                .extensions()
                .get::<Peer>()
                .map_or_else(|| "none".to_string(), |p| p.0.to_string());
            Response::new(Full::new(Bytes::from(from)))
        };
        let (addr, _, _) = start_serving(service, Duration::ZERO, limits()).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(post("x").as_bytes()).await.unwrap();
        let a = read_answer(&mut c).await;
        assert!(a.ends_with("\r\n\r\n127.0.0.1"), "{a}");
    }

    /// A later request on a kept-alive connection arrived when it came, not when the
    /// connection was accepted.
    #[tokio::test]
    async fn a_later_request_on_a_connection_arrived_when_it_came() {
        let addr = start_arrivals().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(post("x").as_bytes()).await.unwrap();
        read_answer(&mut c).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        c.write_all(post("x").as_bytes()).await.unwrap();
        let a = read_answer(&mut c).await;
        assert!(millis(&a) < 150, "{a}");
    }

    #[test]
    fn the_budget_is_decide_within_when_the_api_server_says_no_timeout() {
        assert_eq!(
            budget(Some("other=1"), Duration::from_secs(8)),
            Duration::from_secs(8)
        );
    }

    /// A webhook installed with `timeoutSeconds: 5`: the API server sends `?timeout=5s`, and
    /// the gate answers within 3 s, not `--decide-within`'s 8.
    #[test]
    fn the_budget_is_what_the_api_server_waits_less_a_margin() {
        assert_eq!(
            budget(Some("timeout=5s"), Duration::from_secs(8)),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn the_budget_is_never_more_than_decide_within() {
        assert_eq!(
            budget(Some("timeout=30s"), Duration::from_secs(8)),
            Duration::from_secs(8)
        );
    }

    fn post(body: &str) -> String {
        format!(
            "POST /validate HTTP/1.1\r\nhost: gate\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Sends `raw` on a new connection and reads until the server closes it or answers.
    async fn send(addr: SocketAddr, raw: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(raw.as_bytes()).await.unwrap();
        read_answer(&mut c).await
    }

    async fn read_answer(c: &mut TcpStream) -> String {
        let mut out = vec![];
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => {
                    out.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&out);
                    if let Some(head) = text.find("\r\n\r\n") {
                        let len = text[..head]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|n| n.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if out.len() >= head + 4 + len {
                            break;
                        }
                    }
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn a_review_is_answered() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let a = send(addr, &post("hello")).await;
        assert!(
            a.starts_with("HTTP/1.1 200") && a.ends_with("read 5"),
            "{a}"
        );
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused_413_without_reading_it_all() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let a = send(addr, &post(&"x".repeat(4096))).await;
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
    }

    #[tokio::test]
    async fn a_body_that_does_not_arrive_is_given_up_on() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let raw = "POST /validate HTTP/1.1\r\nhost: gate\r\ncontent-length: 100\r\n\r\nonly this";
        let a = send(addr, raw).await;
        assert!(a.starts_with("HTTP/1.1 408"), "{a}");
    }

    /// A body declared larger than the limit is refused before a byte of it is read.
    #[tokio::test]
    async fn a_body_declared_past_the_limit_is_refused_before_it_is_sent() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let raw = "POST /validate HTTP/1.1\r\nhost: gate\r\ncontent-length: 100000\r\n\r\n";
        let a = send(addr, raw).await;
        assert!(a.starts_with("HTTP/1.1 413"), "{a}");
    }

    /// A connection that never sends a request does not keep its slot.
    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "closed by the server: {read:?}"
        );
    }

    /// Headers larger than a connection's buffer are not kept growing.
    #[tokio::test]
    async fn headers_past_the_buffer_are_refused() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let raw = format!(
            "POST /validate HTTP/1.1\r\nhost: gate\r\nx-big: {}\r\ncontent-length: 1\r\n\r\nx",
            "a".repeat(64 * 1024)
        );
        let a = send(addr, &raw).await;
        assert!(!a.contains("200"), "{a}");
    }

    /// A client that sends half a header and then nothing is closed (slowloris).
    #[tokio::test]
    async fn a_header_that_does_not_arrive_closes_the_connection() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let a = send(addr, "POST /validate HTTP/1.1\r\nhost: ga").await;
        assert!(!a.contains("200"), "{a}");
        // The connection was closed by the server, not by the reader's own 5 s limit: a new
        // one is served.
        assert!(send(addr, &post("x")).await.ends_with("read 1"));
    }

    /// One address holds at most `per_peer` connections: the next is closed unanswered, and
    /// once one of its own ends, it is served again.
    #[tokio::test]
    async fn one_address_cannot_take_every_connection() {
        let (addr, _, _) = start(Duration::ZERO, Duration::ZERO).await;
        let mut held = vec![];
        for _ in 0..limits().per_peer {
            let mut c = TcpStream::connect(addr).await.unwrap();
            // Served: the slot is taken once the server has accepted it.
            c.write_all(post("k").as_bytes()).await.unwrap();
            assert!(read_answer(&mut c).await.ends_with("read 1"));
            held.push(c);
        }
        let a = send(addr, &post("x")).await;
        assert_eq!(a, "", "closed unanswered");
        held.pop();
        // The server sees the close on its next read; give it that moment.
        let mut answered = String::new();
        for _ in 0..50 {
            answered = send(addr, &post("x")).await;
            if !answered.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(answered.ends_with("read 1"), "{answered}");
    }

    /// A review in flight when SIGTERM comes is answered (not cut off), and its connection then
    /// closed so the next review goes to another replica; reviews still arriving during the
    /// delay are answered; then the server ends.
    #[tokio::test]
    async fn on_sigterm_reviews_in_flight_and_arriving_are_answered_then_it_ends() {
        let (addr, stopping, ended) =
            start(Duration::from_millis(200), Duration::from_millis(500)).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(post("in flight").as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stopping.cancel();
        let a = read_answer(&mut c).await;
        assert!(a.ends_with("read 9"), "{a}");
        assert!(a.to_lowercase().contains("connection: close"), "{a}");
        let during = send(addr, &post("late")).await;
        assert!(during.ends_with("read 4"), "{during}");
        tokio::time::timeout(Duration::from_secs(10), ended)
            .await
            .expect("the server ends after its delay")
            .unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "no longer listening"
        );
    }
}
