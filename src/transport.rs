//! The probing transport: one HTTP request to one replica's port, through the API server's
//! `pods/proxy` subresource (works wherever kubectl works) or straight to the pod IP.
//!
//! Every request has its own time limit and a cap on the answer's size, and every failure
//! becomes a `ProbeError` the user can act on; nothing here panics or blocks other replicas.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::credentials::Vars;
use crate::model::{Endpoint, HttpAnswer, ProbeError, MAX_ANSWER_BYTES};
use crate::preflight::Need;
use crate::profile::{HttpRequest, Scheme};
use crate::tls::{CertAsked, Tls, TlsChoices};

/// How often a probe refused by the API server for load (429) is tried again.
const THROTTLE_RETRIES: u32 = 5;

/// Requests whose answer may exceed `MAX_ANSWER_BYTES` (a profile's `max_bytes`: NATS's
/// listing of every stream and consumer) in flight at once, whatever `--max-inflight` says:
/// each may hold its cap in memory until it is parsed, so this bounds what any number of
/// replicas can make the plugin hold (here 2 × 64 MiB).
pub const LARGE_ANSWERS_AT_ONCE: usize = 2;

#[derive(Clone)]
enum Via {
    Proxy(kube::Client),
    Direct(HyperClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>),
    PortForward(kube::Client),
}

/// One cluster's part of a transport's bounds: its slots of `--max-inflight`, and one of the
/// `LARGE_ANSWERS_AT_ONCE` (a cluster's listings of every stream wait for each other, never
/// for another cluster's).
pub struct Share {
    slots: Semaphore,
    large: Semaphore,
}

impl Share {
    fn new(slots: usize) -> Self {
        Share {
            slots: Semaphore::new(slots.max(1)),
            large: Semaphore::new(1),
        }
    }
}

/// Each cluster's share of a transport's bounds, kept across calls for as long as a caller
/// holds it: `1/parts` of `--max-inflight` (at least 2 slots, as a survey's share), and one
/// large answer at a time. The gate's decisions are one cluster each and come and go as
/// evictions do; with these, one cluster's hung or slow replicas (a tenant's StatefulSet
/// that claims to be NATS, reviews of it posted in a flood) hold at most its part, and the
/// other clusters' decisions go on. The part is a bound even when the others need nothing:
/// a cluster with more hung requests than its slots waits for its own (a look of a 5-member
/// NATS with two members hung, 8 requests, takes two rounds of the probe limit).
#[derive(Clone)]
pub struct ClusterShares {
    parts: usize,
    held: Arc<std::sync::Mutex<HashMap<String, std::sync::Weak<Share>>>>,
}

impl ClusterShares {
    /// Shares of `1/parts` of the slots each.
    pub fn new(parts: usize) -> Self {
        ClusterShares {
            parts: parts.max(1),
            held: Arc::default(),
        }
    }

    /// `cluster`'s share of `total` slots: the one its callers hold now, else a new one.
    /// Shares nobody holds any more are forgotten (the map holds no share alive).
    fn of(&self, cluster: &str, total: usize) -> Arc<Share> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(share) = held.get(cluster).and_then(std::sync::Weak::upgrade) {
            return share;
        }
        held.retain(|_, w| w.strong_count() > 0);
        let share = Arc::new(Share::new((total / self.parts).max(2).min(total)));
        held.insert(cluster.to_string(), Arc::downgrade(&share));
        share
    }

    /// The clusters whose share some caller holds now.
    pub fn held(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.values().filter(|w| w.strong_count() > 0).count()
    }
}

/// Requests to replicas, at most `max_inflight` at once, whatever the number of callers.
#[derive(Clone)]
pub struct Transport {
    via: Via,
    inflight: Arc<Semaphore>,
    /// Its size, `--max-inflight`.
    max_inflight: usize,
    /// The bound on large answers in flight (`LARGE_ANSWERS_AT_ONCE`).
    large: Arc<Semaphore>,
    /// One cluster's share of `inflight` and `large` (`with_share`, `with_cluster_share`): a
    /// cluster whose replicas are slow holds at most its share, and the others' requests go on.
    share: Option<Arc<Share>>,
    /// What `${VAR}` in a request's headers (and a NATS request's user) is read from.
    vars: Arc<Vars>,
    /// How the cluster's HTTPS ports are spoken to (`with_tls`): its CA, its client
    /// certificate; by default none, so an HTTPS port is refused on the routes that verify.
    tls: Arc<Tls>,
    /// What the API server said when asked whether this user may proxy to a pod
    /// (`SelfSubjectAccessReview`), by (namespace, pod, verb): asked once per command.
    proxy_rights: Arc<std::sync::Mutex<HashMap<ProxyRight, bool>>>,
    /// Idle HTTP connections over port-forwards, by (namespace, pod, port): a command opens a
    /// port-forward to a replica once, not once per request.
    forwards: Arc<std::sync::Mutex<HashMap<PodPort, Vec<ForwardedHttp>>>>,
}

/// (namespace, pod, RBAC verb) of a pods/proxy request.
type ProxyRight = (String, String, &'static str);
/// (namespace, pod, port, the TLS identity of an HTTPS connection): a kept connection is
/// reused only for the same scheme and the same TLS material and choices.
type PodPort = (String, String, u16, Option<u64>);

/// How a command reaches the replicas (`--via` maps onto it in `cli`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The API server's pods/proxy (HTTP, and HTTPS it does not verify; raw TCP, and HTTPS
    /// with a CA or client certificate, go through a port-forward).
    Proxy,
    /// Pod IPs, from inside the cluster.
    Direct,
    /// The API server's pods/portforward.
    PortForward,
}

impl Transport {
    /// A transport along `route`; `client` must not retry on its own (see `proxy`).
    pub fn along(route: Route, client: &kube::Client, max_inflight: usize) -> Self {
        match route {
            Route::Proxy => Self::proxy(client.clone(), max_inflight),
            Route::Direct => Self::direct(max_inflight),
            Route::PortForward => Self::port_forward(client.clone(), max_inflight),
        }
    }

    /// Through the API server's pods/proxy. The client must not retry on its own (see
    /// `connect::Connection::probe_client`): a replica's 503 is an answer, not a hiccup.
    pub fn proxy(client: kube::Client, max_inflight: usize) -> Self {
        Self::new(Via::Proxy(client), max_inflight)
    }

    pub fn direct(max_inflight: usize) -> Self {
        // No connect timeout of its own: every call is bounded by --probe-timeout.
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        Self::new(
            Via::Direct(HyperClient::builder(TokioExecutor::new()).build(connector)),
            max_inflight,
        )
    }

    /// Through the API server's pods/portforward: one port-forward per replica port, its
    /// HTTP connection kept for the command's next request there.
    pub fn port_forward(client: kube::Client, max_inflight: usize) -> Self {
        Self::new(Via::PortForward(client), max_inflight)
    }

    /// A transport that can carry raw TCP (a NATS request, a four-letter word): this one,
    /// or, for pods/proxy (HTTP only), a port-forward through the same API server.
    pub fn for_tcp(&self) -> Transport {
        match &self.via {
            Via::Proxy(client) => Transport {
                via: Via::PortForward(client.clone()),
                ..self.clone()
            },
            _ => self.clone(),
        }
    }

    /// A TCP connection to the endpoint's pod and port: straight to the pod IP, or a
    /// port-forward stream (pods/proxy cannot carry one: use `for_tcp` first).
    pub async fn tcp(&self, ep: &Endpoint) -> Result<TcpLink, String> {
        match &self.via {
            Via::Direct(_) => {
                let ip = ep.pod_ip.as_deref().ok_or("the pod has no IP yet")?;
                let s = tokio::net::TcpStream::connect((ip, ep.port))
                    .await
                    .map_err(|e| format!("{ip}:{}: {e}", ep.port))?;
                Ok(TcpLink {
                    stream: Box::new(s),
                    forward: None,
                })
            }
            Via::PortForward(client) => {
                let (stream, pf) = open_port_forward(client, ep)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(TcpLink {
                    stream: Box::new(stream),
                    forward: Some(pf),
                })
            }
            Via::Proxy(_) => Err("pods/proxy carries HTTP only".into()),
        }
    }

    fn new(via: Via, max_inflight: usize) -> Self {
        Transport {
            via,
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
            max_inflight: max_inflight.max(1),
            large: Arc::new(Semaphore::new(LARGE_ANSWERS_AT_ONCE)),
            share: None,
            vars: Arc::new(Vars::default()),
            tls: Arc::new(Tls::new(None, &TlsChoices::default()).expect("no material, no error")),
            proxy_rights: Arc::default(),
            forwards: Arc::default(),
        }
    }

    /// The same transport (same in-flight bound) with a cluster's credentials.
    pub fn with_vars(&self, vars: Arc<Vars>) -> Transport {
        Transport {
            vars,
            ..self.clone()
        }
    }

    /// The same transport (same bounds) for one cluster of `clusters` surveyed at once: its
    /// requests also take a slot of a share of its own, a fair part of `--max-inflight`
    /// (at least 2), so that one cluster's hung replicas cannot hold every slot. A transport
    /// that already has its cluster's share (`with_cluster_share`) keeps it.
    pub fn with_share(&self, clusters: usize) -> Transport {
        if self.share.is_some() {
            return self.clone();
        }
        let total = self.max_inflight;
        let share = total.div_ceil(clusters.max(1)).max(2).min(total);
        Transport {
            share: Some(Arc::new(Share::new(share))),
            ..self.clone()
        }
    }

    /// The same transport (same bounds) whose requests also take a slot of `cluster`'s share
    /// in `shares`: the same share for every caller that asks for the cluster while one holds
    /// it (the gate's concurrent looks at one cluster, its member asked again, its transfer).
    pub fn with_cluster_share(&self, shares: &ClusterShares, cluster: &str) -> Transport {
        Transport {
            share: Some(shares.of(cluster, self.max_inflight)),
            ..self.clone()
        }
    }

    /// The same transport (same bounds) with a cluster's TLS.
    pub fn with_tls(&self, tls: Arc<Tls>) -> Transport {
        Transport {
            tls,
            ..self.clone()
        }
    }

    /// How the cluster's HTTPS ports are spoken to.
    pub fn tls(&self) -> &Tls {
        &self.tls
    }

    /// Whether this transport reads HTTPS replicas without verifying them: with
    /// --tls-skip-verify, or through pods/proxy without TLS material (the API server does
    /// not verify a replica's certificate).
    pub fn reads_https_unverified(&self) -> bool {
        self.tls.skips_verification()
            || (matches!(self.via, Via::Proxy(_)) && !self.tls.needs_end_to_end())
    }

    /// Whether a TCP connection (NATS, a four-letter word) to a replica goes through a
    /// port-forward: every route but straight to the pods.
    pub fn forwards_tcp(&self) -> bool {
        !matches!(self.via, Via::Direct(_))
    }

    /// The credentials requests are sent with.
    pub fn vars(&self) -> &Vars {
        &self.vars
    }

    /// How often a waiting loop may ask each replica: every 25 ms straight to the pods, at
    /// most every 100 ms through the API server (pods/proxy, port-forward), so a handover's
    /// polling of N replicas costs the API server at most 10·N requests a second.
    pub fn poll_every(&self) -> Duration {
        match self.via {
            Via::Direct(_) => Duration::from_millis(25),
            Via::Proxy(_) | Via::PortForward(_) => Duration::from_millis(100),
        }
    }

    pub fn describe(&self) -> &'static str {
        match self.via {
            Via::Proxy(_) => "pods/proxy",
            Via::Direct(_) => "direct",
            Via::PortForward(_) => "port-forward",
        }
    }

    /// One request, bounded by `limit` once it is under way (waiting for a free slot under
    /// the in-flight bound does not count against the replica). An API server that refuses
    /// the request for load (HTTP 429) is asked again with backoff, up to a few times.
    pub async fn call(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        limit: Duration,
    ) -> Result<HttpAnswer, ProbeError> {
        self.call_then(ep, req, limit, |a| a).await
    }

    /// `call`, and `then` on its answer before the answer's bound is given back: a large
    /// answer (a listing of every stream) is read and parsed within `LARGE_ANSWERS_AT_ONCE`,
    /// so no more than that many are in memory at once however fast they arrive.
    pub async fn call_then<T>(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        limit: Duration,
        then: impl FnOnce(HttpAnswer) -> T,
    ) -> Result<T, ProbeError> {
        // A large answer's bounds, the cluster's own first (the same order as the slots').
        let (_own_large, _large) = if req.answer_limit() > MAX_ANSWER_BYTES {
            let own = match &self.share {
                Some(s) => Some(s.large.acquire().await.expect("never closed")),
                None => None,
            };
            (own, Some(self.large.acquire().await.expect("never closed")))
        } else {
            (None, None)
        };
        let mut backoff = Duration::from_millis(50);
        let mut attempt = 0;
        // A replica can answer 429 in the API server's words too: the retries' waits together
        // stay within one `limit`, so neither can hold a survey longer than two of them.
        let mut waited = Duration::ZERO;
        loop {
            let result = {
                // The cluster's share first, so that a cluster waiting for its own slots
                // holds none of everyone's (a large answer's bound is held around it all).
                let _share = match &self.share {
                    Some(s) => Some(s.slots.acquire().await.expect("never closed")),
                    None => None,
                };
                let _permit = self.inflight.acquire().await.expect("never closed");
                let asked = tokio::time::Instant::now();
                let r = match tokio::time::timeout(limit, self.call_unbounded(ep, req)).await {
                    Ok(r) => r,
                    Err(_) => Err(ProbeError::Timeout(limit)),
                };
                log_request(ep, req, &r, asked.elapsed());
                r
            };
            match result {
                Err(ProbeError::Throttled { retry_after, .. })
                    if attempt < THROTTLE_RETRIES
                        && waited + throttle_wait(retry_after, backoff) <= limit =>
                {
                    attempt += 1;
                    let wait = throttle_wait(retry_after, backoff);
                    waited += wait;
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other.map(then),
            }
        }
    }

    async fn call_unbounded(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
    ) -> Result<HttpAnswer, ProbeError> {
        let body = req.body.clone().unwrap_or_default();
        match &self.via {
            // pods/proxy neither verifies a replica's certificate nor presents a client
            // certificate: a cluster whose TLS needs either is reached end to end through a
            // port-forward, never without.
            Via::Proxy(client) if ep.scheme == Scheme::Https && self.tls.needs_end_to_end() => {
                self.forwarded(client, ep, req, body).await
            }
            Via::Proxy(client) => {
                let port = match ep.scheme {
                    Scheme::Http => format!("{}:{}", ep.pod, ep.port),
                    Scheme::Https => format!("https:{}:{}", ep.pod, ep.port),
                };
                let uri = format!(
                    "/api/v1/namespaces/{}/pods/{}/proxy{}",
                    ep.namespace, port, req.path
                );
                let request = build_request(req, &uri, body.into_bytes(), &self.vars)?;
                let resp = client
                    .send(request.map(kube::client::Body::from))
                    .await
                    .map_err(|e| {
                        ProbeError::Other(format!("the API server did not answer: {e}"))
                    })?;
                let status = resp.status().as_u16();
                let retry = resp
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(Duration::from_secs);
                let body = read_capped(resp.into_body(), req.answer_limit()).await?;
                let answer = HttpAnswer { status, body };
                match classify_proxy_answer(answer.clone(), &ep.pod) {
                    // Carry the server's Retry-After to the retry loop.
                    Err(ProbeError::Throttled { message, .. }) => Err(ProbeError::Throttled {
                        message,
                        retry_after: retry,
                    }),
                    // A replica can answer 403 with a body shaped like the API server's
                    // refusal: only the API server can say whether RBAC refused.
                    Err(ProbeError::Forbidden(m)) => {
                        match self.may_proxy(client, ep, &req.method).await {
                            Ok(true) => Ok(answer),
                            Ok(false) => Err(ProbeError::Forbidden(m)),
                            Err(e) => Err(ProbeError::Forbidden(format!(
                                "{m} (as the API server or the replica said; asking the API server which failed: {e})"
                            ))),
                        }
                    }
                    other => other,
                }
            }
            Via::PortForward(client) => self.forwarded(client, ep, req, body).await,
            Via::Direct(client) => {
                let ip = ep
                    .pod_ip
                    .as_deref()
                    .ok_or_else(|| ProbeError::Unreachable("the pod has no IP yet".into()))?;
                if ep.scheme == Scheme::Https {
                    return self.direct_tls(ip, ep, req, body).await;
                }
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_string()
                };
                let uri = format!("http://{host}:{}{}", ep.port, req.path);
                let request = build_request(req, &uri, body.into_bytes(), &self.vars)?;
                let resp = client
                    .request(request.map(|b| Full::new(Bytes::from(b))))
                    .await
                    .map_err(|e| ProbeError::Unreachable(crate::errors::chain(&e)))?;
                let status = resp.status().as_u16();
                let body = read_capped(resp.into_body(), req.answer_limit()).await?;
                Ok(HttpAnswer { status, body })
            }
        }
    }

    /// One request over a port-forward to the endpoint's pod and port (TLS end to end on an
    /// HTTPS port: the API server carries only bytes), on a kept connection where one is idle.
    async fn forwarded(
        &self,
        client: &kube::Client,
        ep: &Endpoint,
        req: &HttpRequest,
        body: String,
    ) -> Result<HttpAnswer, ProbeError> {
        let request = || build_request(req, &req.path, body.clone().into_bytes(), &self.vars);
        let key = (
            ep.namespace.clone(),
            ep.pod.clone(),
            ep.port,
            (ep.scheme == Scheme::Https).then(|| self.tls.identity()),
        );
        let cap = req.answer_limit();
        if let Some(mut conn) = self.idle_forward(&key) {
            match conn.send(request()?, cap, &self.tls, ep).await {
                Ok((answer, reusable)) => {
                    if reusable {
                        self.keep_forward(key, conn);
                    }
                    return Ok(answer);
                }
                // The kept connection had been closed by the server: a request it
                // never carried, or one safe to repeat, goes on a fresh one.
                Err(f) if f.unsent || proxy_verb(&req.method) == "get" => {}
                Err(f) => return Err(f.error),
            }
        }
        let mut conn = ForwardedHttp::open(client, ep, &self.tls).await?;
        let (answer, reusable) = conn
            .send(request()?, cap, &self.tls, ep)
            .await
            .map_err(|f| f.error)?;
        if reusable {
            self.keep_forward(key, conn);
        }
        Ok(answer)
    }

    /// One request over TLS straight to the pod (a connection of its own).
    async fn direct_tls(
        &self,
        address: &str,
        ep: &Endpoint,
        req: &HttpRequest,
        body: String,
    ) -> Result<HttpAnswer, ProbeError> {
        let tcp = tokio::net::TcpStream::connect((address, ep.port))
            .await
            .map_err(|e| ProbeError::Unreachable(format!("{address}:{}: {e}", ep.port)))?;
        let (stream, asked) = tls_handshake(&self.tls, ep, tcp).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| failure(&self.tls, &e))?;
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let _driver = AbortOnDrop(driver);
        let mut request = build_request(req, &req.path, body.into_bytes(), &self.vars)?
            .map(|b| Full::new(Bytes::from(b)));
        set_host(&mut request, ep);
        let resp = sender
            .send_request(request)
            .await
            .map_err(|e| failure_after(&self.tls, Some(&asked), &e))?;
        let status = resp.status().as_u16();
        let body = read_capped(resp.into_body(), req.answer_limit()).await?;
        Ok(HttpAnswer { status, body })
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The request's Host: the name the replica is verified by (its first DNS name), else its
/// address.
fn set_host(request: &mut http::Request<Full<Bytes>>, ep: &Endpoint) {
    let host = match ep.names.first() {
        Some(n) if n.contains(':') => format!("[{n}]"),
        Some(n) => n.clone(),
        None => "localhost".into(),
    };
    if let Ok(v) = http::HeaderValue::from_str(&format!("{host}:{}", ep.port)) {
        request.headers_mut().insert(http::header::HOST, v);
    }
}

/// A TLS session over `io` with the endpoint's replica, its certificate verified by the
/// cluster's TLS, and whether the replica asked for a client certificate; a failure says
/// what it means.
async fn tls_handshake<IO>(
    tls: &Tls,
    ep: &Endpoint,
    io: IO,
) -> Result<(tokio_rustls::client::TlsStream<IO>, CertAsked), ProbeError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (connector, name, asked) = tls.connector(&ep.names).map_err(ProbeError::Tls)?;
    match connector.connect(name, io).await {
        Ok(stream) => Ok((stream, asked)),
        Err(e) => Err(failure_after(tls, Some(&asked), &e)),
    }
}

/// A failed connection or request: TLS's failure explained, else unreachable.
fn failure(tls: &Tls, e: &(dyn std::error::Error + 'static)) -> ProbeError {
    failure_after(tls, None, e)
}

/// A failed connection or request on a connection whose handshake may have `asked` for a
/// client certificate (None: no handshake, or one whose replica has answered since). A
/// replica that asked and then closed the connection without answering refused the
/// certificate given (or required one where none was), even where the reset overtook the
/// alert that said so: that is a TLS failure, not an unreachable replica.
fn failure_after(
    tls: &Tls,
    asked: Option<&CertAsked>,
    e: &(dyn std::error::Error + 'static),
) -> ProbeError {
    match tls.explain(e) {
        Some(m) => ProbeError::Tls(m),
        None if asked.is_some_and(CertAsked::get) && closed_by_peer(e) => {
            ProbeError::Tls(tls.closed_after_asking())
        }
        None => ProbeError::Unreachable(crate::errors::chain(e)),
    }
}

/// Whether the failure is the peer's closing of the connection (a reset, the end of the stream
/// before an answer, or a request the closed connection never carried), anywhere in the
/// error's chain.
fn closed_by_peer(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(|h| h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

impl Transport {
    /// Whether the API server lets this user proxy `method` requests to the endpoint's pod,
    /// by a `SelfSubjectAccessReview` (remembered for the rest of the command).
    async fn may_proxy(
        &self,
        client: &kube::Client,
        ep: &Endpoint,
        method: &str,
    ) -> Result<bool, String> {
        let verb = proxy_verb(method);
        let key = (ep.namespace.clone(), ep.pod.clone(), verb);
        if let Some(known) = self.proxy_rights.lock().expect("not poisoned").get(&key) {
            return Ok(*known);
        }
        let need = Need::new(verb, "pods/proxy", "ask the replica")
            .in_namespace(&ep.namespace)
            .named(&ep.pod);
        let allowed = crate::preflight::missing(client, std::slice::from_ref(&need))
            .await?
            .is_empty();
        self.proxy_rights
            .lock()
            .expect("not poisoned")
            .insert(key, allowed);
        Ok(allowed)
    }
}

/// The RBAC verb a pods/proxy request of this HTTP method is authorised as.
fn proxy_verb(method: &str) -> &'static str {
    match method.to_ascii_uppercase().as_str() {
        "GET" | "HEAD" | "OPTIONS" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "create",
    }
}

/// A TCP connection to a pod: the stream, and the port-forward that carries it (if one does;
/// it ends when the link is dropped).
pub struct TcpLink {
    pub stream: Box<dyn TcpStreamLike>,
    forward: Option<kube::api::Portforwarder>,
}

impl Drop for TcpLink {
    fn drop(&mut self) {
        if let Some(pf) = &self.forward {
            pf.abort();
        }
    }
}

pub trait TcpStreamLike: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> TcpStreamLike for T {}

/// A port-forward to the endpoint's pod and port, through the API server; a refusal names the
/// permission it needs.
async fn open_port_forward(
    client: &kube::Client,
    ep: &Endpoint,
) -> Result<(tokio::io::DuplexStream, kube::api::Portforwarder), ProbeError> {
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &ep.namespace);
    let mut pf = api
        .portforward(&ep.pod, &[ep.port])
        .await
        .map_err(|e| match crate::errors::status_of(&e) {
            Some(s) if s.code == 403 => ProbeError::Forbidden(format!(
                "{} (the plugin needs `get` and `create` on `pods/portforward` (docs/rbac.yaml's kubectl-raft-port-forward) for --via port-forward and for requests that are not HTTP)",
                s.message
            )),
            Some(s) if s.code == 404 => ProbeError::Other(format!("pod {} is gone: {}", ep.pod, s.message)),
            _ => ProbeError::Unreachable(format!("port-forward to {}:{}: {}", ep.pod, ep.port, crate::errors::chain(&e))),
        })?;
    let stream = pf.take_stream(ep.port).ok_or_else(|| {
        ProbeError::Unreachable(format!(
            "port-forward to {}:{} gave no stream",
            ep.pod, ep.port
        ))
    })?;
    Ok((stream, pf))
}

/// At most this many idle connections are kept per replica port.
const IDLE_FORWARDS_PER_PORT: usize = 4;

impl Transport {
    /// An idle connection to that pod and port that is still open, if one is kept.
    fn idle_forward(&self, key: &PodPort) -> Option<ForwardedHttp> {
        let mut idle = self.forwards.lock().expect("not poisoned");
        let kept = idle.get_mut(key)?;
        while let Some(conn) = kept.pop() {
            if !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    fn keep_forward(&self, key: PodPort, conn: ForwardedHttp) {
        let mut idle = self.forwards.lock().expect("not poisoned");
        let kept = idle.entry(key).or_default();
        if kept.len() < IDLE_FORWARDS_PER_PORT {
            kept.push(conn);
        }
    }
}

/// An HTTP/1.1 connection over a port-forward; dropping it ends both.
struct ForwardedHttp {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    driver: tokio::task::JoinHandle<()>,
    forward: kube::api::Portforwarder,
    /// TLS inside the tunnel.
    https: bool,
    /// Whether its handshake asked for a client certificate, until the replica first answers.
    asked: Option<CertAsked>,
}

/// A request that got no answer: why, and whether it never left (safe to send elsewhere).
struct SendFailure {
    error: ProbeError,
    unsent: bool,
}

impl ForwardedHttp {
    /// A connection over a new port-forward: TLS end to end on an HTTPS port.
    async fn open(
        client: &kube::Client,
        ep: &Endpoint,
        tls: &Tls,
    ) -> Result<ForwardedHttp, ProbeError> {
        let (stream, forward) = open_port_forward(client, ep).await?;
        let (io, asked): (Box<dyn TcpStreamLike>, _) = if ep.scheme == Scheme::Https {
            match tls_handshake(tls, ep, stream).await {
                Ok((s, asked)) => (Box::new(s), Some(asked)),
                Err(e) => {
                    forward.abort();
                    return Err(e);
                }
            }
        } else {
            (Box::new(stream), None)
        };
        let (sender, conn) =
            match hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await {
                Ok(handshake) => handshake,
                Err(e) => {
                    forward.abort();
                    return Err(failure(tls, &e));
                }
            };
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(ForwardedHttp {
            sender,
            driver,
            forward,
            https: ep.scheme == Scheme::Https,
            asked,
        })
    }

    /// One request, the answer capped in size; whether the connection can carry another
    /// (the whole answer was read).
    async fn send(
        &mut self,
        request: http::Request<Vec<u8>>,
        cap: usize,
        tls: &Tls,
        ep: &Endpoint,
    ) -> Result<(HttpAnswer, bool), SendFailure> {
        let mut request = request.map(|b| Full::new(Bytes::from(b)));
        if self.https {
            set_host(&mut request, ep);
        } else {
            request.headers_mut().insert(
                http::header::HOST,
                http::HeaderValue::from_static("localhost"),
            );
        }
        let resp = self.sender.try_send_request(request).await.map_err(|e| {
            let unsent = e.message().is_some();
            SendFailure {
                error: failure_after(tls, self.asked.as_ref(), e.error()),
                unsent,
            }
        })?;
        self.asked = None;
        let status = resp.status().as_u16();
        match read_capped(resp.into_body(), cap).await {
            Ok(body) => Ok((HttpAnswer { status, body }, true)),
            Err(error) => Err(SendFailure {
                error,
                unsent: false,
            }),
        }
    }
}

impl Drop for ForwardedHttp {
    fn drop(&mut self) {
        self.driver.abort();
        self.forward.abort();
    }
}

/// One replica request at `-v=6` (`crate::verbose`): the profile's path, made one line, and
/// how it ended; never a header (where credentials go), a body or a replica's error text.
fn log_request(
    ep: &Endpoint,
    req: &HttpRequest,
    r: &Result<HttpAnswer, ProbeError>,
    took: Duration,
) {
    let outcome = match r {
        Ok(a) => a.status.to_string(),
        // The kind only: a replica's own error text may echo what it was sent.
        Err(e) => format!("failed ({})", e.kind()),
    };
    tracing::trace!(
        target: crate::verbose::REQUESTS,
        "{}",
        crate::model::text::one_line(
            &format!(
                "{} {}/{}:{}{} {outcome} in {} ms",
                req.method,
                ep.namespace,
                ep.pod,
                ep.port,
                req.path,
                took.as_millis()
            ),
            512
        )
    );
}

fn build_request(
    req: &HttpRequest,
    uri: &str,
    body: Vec<u8>,
    vars: &Vars,
) -> Result<http::Request<Vec<u8>>, ProbeError> {
    let method = req.method.as_str();
    let mut b = http::Request::builder().method(method).uri(uri);
    if !body.is_empty() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    for (name, template) in &req.headers {
        let value =
            crate::model::profile::expand_env(template, |v| vars.get(v)).map_err(|var| {
                ProbeError::Other(if vars.env {
                    format!(
                        "{method} {} needs ${var} for its {name} header: export {var}=..., or put it in a Secret named by --credentials-secret (the token is sent, never printed)",
                        req.path
                    )
                } else {
                    format!(
                        "{method} {} needs ${var} for its {name} header: put it in a Secret named by --credentials-secret or the annotation kubectl-raft.io/credentials-secret, or name the cluster, or pass --credentials-from-env (your environment is not sent to clusters you did not name)",
                        req.path
                    )
                })
            })?;
        b = b.header(name.as_str(), value);
    }
    b.body(body)
        .map_err(|e| ProbeError::Other(format!("bad request {method} {uri}: {e}")))
}

async fn read_capped<B>(body: B, cap: usize) -> Result<Vec<u8>, ProbeError>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // Straight into one buffer, sized by the body's own hint: a large answer is held once,
    // not collected into chunks and copied twice.
    let limited = Limited::new(body, cap);
    let hint = http_body::Body::size_hint(&limited).lower() as usize;
    let mut out = Vec::with_capacity(hint.min(cap));
    let mut body = std::pin::pin!(limited);
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(mut data) = f.into_data() {
                    use bytes::Buf;
                    while data.has_remaining() {
                        let chunk = data.chunk();
                        let n = chunk.len();
                        out.extend_from_slice(chunk);
                        data.advance(n);
                    }
                }
            }
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(ProbeError::TooLarge(cap))
            }
            Err(e) => {
                return Err(ProbeError::Unreachable(format!(
                    "the answer broke off: {e}"
                )))
            }
        }
    }
    Ok(out)
}

/// How long to wait before asking again after a refusal for load: the Retry-After sent,
/// else the backoff, at most 2 s.
fn throttle_wait(retry_after: Option<Duration>, backoff: Duration) -> Duration {
    retry_after.unwrap_or(backoff).min(Duration::from_secs(2))
}

#[derive(Deserialize)]
struct ApiStatus {
    kind: Option<String>,
    message: Option<String>,
    reason: Option<String>,
}

/// Where a client library that dials an address itself (async-nats) reaches the endpoint:
/// the pod IP with --via direct; else a local port bridged through a port-forward, for one
/// connection, closed with the returned task.
pub async fn dial(
    transport: &Transport,
    ep: Endpoint,
) -> Result<(String, u16, Option<tokio::task::JoinHandle<()>>), String> {
    if let (Via::Direct(_), Some(ip)) = (&transport.via, &ep.pod_ip) {
        return Ok((ip.clone(), ep.port, None));
    }
    let (port, bridge) = local_bridge(transport.for_tcp(), ep).await?;
    Ok(("127.0.0.1".into(), port, Some(bridge)))
}

/// A local TCP port bridged to the endpoint's pod and port through `transport` (a client
/// library that dials an address, such as async-nats, then reaches the pod wherever the
/// transport can): one connection, closed with the returned task.
pub async fn local_bridge(
    transport: Transport,
    ep: Endpoint,
) -> Result<(u16, tokio::task::JoinHandle<()>), String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("a local port for the bridge: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let task = tokio::spawn(async move {
        let Ok((mut local, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut link) = transport.tcp(&ep).await else {
            return;
        };
        let _ = tokio::io::copy_bidirectional(&mut local, &mut link.stream).await;
    });
    Ok((port, task))
}

/// A four-letter word (ZooKeeper's and ClickHouse Keeper's admin protocol) on a raw TCP port
/// of the endpoint's pod: write the word, read the answer until the server closes, within
/// `limit`. No answer at all means the word is unknown or not allowed (the server only logs it).
pub async fn four_letter_word(
    transport: &Transport,
    ep: &Endpoint,
    word: &str,
    limit: Duration,
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let at = format!("{}:{}", ep.pod, ep.port);
    let exchange = async {
        let mut link = transport.tcp(ep).await?;
        link.stream
            .write_all(word.as_bytes())
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let mut answer = Vec::new();
        (&mut link.stream)
            .take(MAX_ANSWER_BYTES as u64)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        Ok::<_, String>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| format!("no answer from {at} within {limit:?}"))??;
    if answer.trim().is_empty() {
        return Err(format!(
            "{at} did not answer `{word}`: the word is unknown or not in four_letter_word_allow_list"
        ));
    }
    Ok(answer)
}

/// Tells the API server's own failures (it could not reach the pod, RBAC refused, the pod
/// is gone) from the replica's answers, which pass through unchanged.
pub fn classify_proxy_answer(ans: HttpAnswer, pod: &str) -> Result<HttpAnswer, ProbeError> {
    if !matches!(ans.status, 403 | 404 | 429 | 500 | 502 | 503) {
        return Ok(ans);
    }
    let Ok(st) = serde_json::from_slice::<ApiStatus>(&ans.body) else {
        return Ok(ans);
    };
    if st.kind.as_deref() != Some("Status") {
        return Ok(ans);
    }
    // A replica can send this body too: its words are one line at most.
    let msg = crate::model::text::message(&st.message.unwrap_or_default());
    match (ans.status, st.reason.as_deref()) {
        (403, _) => Err(ProbeError::Forbidden(format!(
            "{msg} (the plugin needs `get` on `pods/proxy` (kubectl-raft-status), and `create` on it for POSTs such as etcd's status API (kubectl-raft-proxy-post, bound in that namespace): docs/rbac.yaml; or use --via direct from inside the cluster)"
        ))),
        (404, Some("NotFound")) => Err(ProbeError::Other(format!("pod {pod} is gone: {msg}"))),
        // API Priority and Fairness (or --max-requests-inflight) refused it: not the replica's fault.
        (429, _) => Err(ProbeError::Throttled {
            message: msg,
            retry_after: None,
        }),
        (500 | 502 | 503, _) if msg.contains("error trying to reach service") || msg.contains("dial tcp") => {
            Err(ProbeError::Unreachable(short_dial_error(&msg)))
        }
        _ => Ok(ans),
    }
}

/// "error trying to reach service: dial tcp 10.1.2.3:2379: connect: connection refused"
/// -> "connection refused (10.1.2.3:2379)";
/// "error trying to reach service: EOF" -> "the connection was closed without an answer (EOF)"
/// (as the API server's Go transport says it, "EOF", a reset, or "server closed idle
/// connection" when the close came before the request was written: which one depends on
/// timing alone).
fn short_dial_error(msg: &str) -> String {
    let tail = msg.rsplit(": ").next().unwrap_or(msg);
    if tail == "EOF"
        || tail.contains("connection reset by peer")
        || tail.contains("server closed idle connection")
    {
        return format!("the connection was closed without an answer ({tail})");
    }
    match msg
        .split("dial tcp ")
        .nth(1)
        .and_then(|r| r.split(": ").next())
    {
        Some(addr) => format!("{tail} ({addr})"),
        None => tail.to_string(),
    }
}

/// Scripted HTTP servers for unit tests: one accept loop, whatever each test answers.
#[cfg(test)]
pub(crate) mod test_server {
    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncRead, AsyncWrite};
    use tokio::net::TcpStream;

    /// What a scripted server answers one request with.
    pub type Answer = hyper::Response<Full<Bytes>>;

    /// An HTTP/1 server on 127.0.0.1 that answers every request with `answer()`; its port.
    pub async fn http(answer: impl Fn() -> Answer + Clone + Send + Sync + 'static) -> u16 {
        serve(|tcp| async move { Some(tcp) }, answer).await
    }

    /// As [`http`], each connection first through `accept` (a TLS handshake; None drops it).
    pub async fn serve<S, A, AF>(
        accept: A,
        answer: impl Fn() -> Answer + Clone + Send + Sync + 'static,
    ) -> u16
    where
        A: Fn(TcpStream) -> AF + Clone + Send + Sync + 'static,
        AF: std::future::Future<Output = Option<S>> + Send,
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (accept, answer) = (accept.clone(), answer.clone());
                tokio::spawn(async move {
                    let Some(io) = accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |_req| {
                        let a = answer();
                        async move { Ok::<_, std::convert::Infallible>(a) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
                        .await;
                });
            }
        });
        port
    }

    /// 200 with `body`.
    pub fn ok(body: impl Into<Bytes>) -> Answer {
        hyper::Response::new(Full::new(body.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that accepts connections and never answers (a frozen replica), and how many
    /// it has accepted.
    async fn hung_server() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((tcp, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(tcp);
            }
        });
        (port, accepted)
    }

    /// A server that answers every request 200 `ok`.
    async fn answering_server() -> u16 {
        test_server::http(|| test_server::ok("ok")).await
    }

    fn local(pod: &str, port: u16) -> Endpoint {
        Endpoint {
            namespace: "db".into(),
            pod: pod.into(),
            pod_ip: Some("127.0.0.1".into()),
            port,
            scheme: Scheme::Http,
            names: vec![],
        }
    }

    /// Eight requests of `tenant` to a replica that never answers, started and holding what
    /// they may (`held` says when: its share's bound or everyone's is used up) before the
    /// test goes on; aborted by the caller.
    async fn hung_requests(
        tenant: &Transport,
        req: &HttpRequest,
        held: impl Fn(&Transport, &Share) -> bool,
    ) -> Vec<tokio::task::JoinHandle<Result<HttpAnswer, ProbeError>>> {
        let (hung, accepted) = hung_server().await;
        let stuck = (0..8)
            .map(|i| {
                let (tenant, req) = (tenant.clone(), req.clone());
                tokio::spawn(async move {
                    let ep = local(&format!("fake-nats-{i}"), hung);
                    tenant.call(&ep, &req, Duration::from_secs(120)).await
                })
            })
            .collect();
        let share = tenant.share.clone().expect("a share");
        while accepted.load(std::sync::atomic::Ordering::SeqCst) == 0 || !held(tenant, &share) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stuck
    }

    /// `other`'s request to a replica that answers, while `stuck` still wait.
    async fn answered_meanwhile(
        other: &Transport,
        req: &HttpRequest,
        stuck: Vec<tokio::task::JoinHandle<Result<HttpAnswer, ProbeError>>>,
    ) {
        let ok = answering_server().await;
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            other.call(&local("etcd-0", ok), req, Duration::from_secs(60)),
        )
        .await
        .expect("answered while the other cluster's replicas hang")
        .expect("the replica's answer");
        assert_eq!(answer.status, 200);
        assert!(
            stuck.iter().all(|h| !h.is_finished()),
            "the hung cluster's requests still wait"
        );
        for h in stuck {
            h.abort();
        }
    }

    /// The gate's case: a cluster's replicas hang (or its reviews come in a flood) while
    /// another cluster's decision asks its own replicas. With the slots shared by all (one
    /// `ClusterShares` part), the hung cluster takes all four and the other waits for their
    /// time limit; with a share each (two slots), it is answered at once.
    #[tokio::test]
    async fn a_clusters_hung_replicas_hold_only_its_share_of_the_slots() {
        let transport = Transport::direct(4);
        let shares = ClusterShares::new(4);
        let req: HttpRequest = serde_saphyr::from_str("path: /health").unwrap();
        let tenant = transport.with_cluster_share(&shares, "tenant/fake-nats");
        let stuck = hung_requests(&tenant, &req, |t, s| {
            s.slots.available_permits() == 0 || t.inflight.available_permits() == 0
        })
        .await;
        let other = transport.with_cluster_share(&shares, "db/etcd");
        answered_meanwhile(&other, &req, stuck).await;
    }

    /// Four tenants' replicas that never answer, five requests each (300 ms limit) through
    /// `through` (a tenant's name to its transport), all 8 slots held by their first wave;
    /// then another cluster's request to a replica that answers. How many of the tenants'
    /// requests had reached their replica when it was answered.
    async fn hung_requests_reached_before_another_is_answered(
        transport: &Transport,
        through: impl Fn(&str) -> Transport,
        other: Transport,
    ) -> usize {
        let req: HttpRequest = serde_saphyr::from_str("path: /health").unwrap();
        let (hung, reached) = hung_server().await;
        let mut tenants = vec![];
        for t in ["a", "b", "c", "d"] {
            let tenant = through(&format!("tenant-{t}/fake"));
            for i in 0..5 {
                let (tenant, req) = (tenant.clone(), req.clone());
                tenants.push(tokio::spawn(async move {
                    let ep = local(&format!("fake-{i}"), hung);
                    tenant.call(&ep, &req, Duration::from_millis(300)).await
                }));
            }
        }
        while reached.load(std::sync::atomic::Ordering::SeqCst) < 8
            || transport.inflight.available_permits() > 0
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The twelve others are queued by now (spawned before, nothing else to wait for).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ok = answering_server().await;
        let answer = other
            .call(&local("etcd-0", ok), &req, Duration::from_secs(60))
            .await
            .expect("the replica's answer");
        assert_eq!(answer.status, 200);
        let n = reached.load(std::sync::atomic::Ordering::SeqCst);
        for t in tenants {
            t.abort();
        }
        n
    }

    /// #39's "four clusters whose replicas hang hold every slot": they do (a quarter each),
    /// but another cluster's request takes the first slot their requests free, never waiting
    /// behind the ones they queue meanwhile (those wait for their own share first): its
    /// decision is slowed by at most one request's time limit a request, not starved. Eight
    /// slots: the first wave holds all 8, and the other cluster is answered within the second
    /// (at most 7 more of theirs reached), not after all 20.
    #[tokio::test]
    async fn four_hung_clusters_holding_every_slot_do_not_queue_another_clusters_request_behind_theirs(
    ) {
        let transport = Transport::direct(8);
        let shares = ClusterShares::new(4);
        let other = transport.with_cluster_share(&shares, "db/etcd");
        let reached = hung_requests_reached_before_another_is_answered(
            &transport,
            |c| transport.with_cluster_share(&shares, c),
            other,
        )
        .await;
        assert!(reached <= 15, "{reached} of the hung requests went first");
    }

    /// The control: without a share per cluster the same request waits behind every hung
    /// request queued before it (the third wave).
    #[tokio::test]
    async fn without_shares_another_clusters_request_waits_behind_every_hung_one() {
        let transport = Transport::direct(8);
        let reached = hung_requests_reached_before_another_is_answered(
            &transport,
            |_| transport.clone(),
            transport.clone(),
        )
        .await;
        assert!(
            reached >= 16,
            "only {reached} of the hung requests went first"
        );
    }

    /// The same for listings of every stream (answers that may be 64 MiB, two at once): a
    /// cluster whose replicas hang holds one of the two, and another cluster's listing goes on.
    #[tokio::test]
    async fn a_clusters_hung_listings_hold_only_one_of_the_large_answers() {
        let transport = Transport::direct(32);
        let shares = ClusterShares::new(4);
        let req: HttpRequest = serde_saphyr::from_str("{path: /jsz, max_bytes: 67108864}").unwrap();
        let tenant = transport.with_cluster_share(&shares, "tenant/fake-nats");
        let stuck = hung_requests(&tenant, &req, |t, s| {
            s.large.available_permits() == 0 || t.large.available_permits() == 0
        })
        .await;
        let other = transport.with_cluster_share(&shares, "db/nats");
        answered_meanwhile(&other, &req, stuck).await;
    }

    #[test]
    fn a_clusters_share_is_one_while_held_and_forgotten_when_nobody_holds_it() {
        let shares = ClusterShares::new(4);
        let transport = Transport::direct(32);
        let look = transport.with_cluster_share(&shares, "db/etcd");
        let asked_again = transport.with_cluster_share(&shares, "db/etcd");
        let (a, b) = (
            look.share.clone().unwrap(),
            asked_again.share.clone().unwrap(),
        );
        assert!(Arc::ptr_eq(&a, &b), "one share for the cluster's callers");
        assert_eq!(a.slots.available_permits(), 8, "a quarter of 32");
        assert_eq!(a.large.available_permits(), 1, "one large answer at a time");
        assert_eq!(shares.held(), 1);
        drop((look, asked_again, a, b));
        assert_eq!(shares.held(), 0);
        let _nats = transport.with_cluster_share(&shares, "db/nats");
        assert_eq!(shares.held.lock().unwrap().len(), 1, "etcd's forgotten");
    }

    #[test]
    fn a_share_kept_for_the_cluster_is_not_replaced_by_a_surveys_own() {
        let shares = ClusterShares::new(4);
        let transport = Transport::direct(32).with_cluster_share(&shares, "db/etcd");
        let surveyed = transport.with_share(1);
        assert!(Arc::ptr_eq(
            transport.share.as_ref().unwrap(),
            surveyed.share.as_ref().unwrap()
        ));
    }

    fn ans(status: u16, body: &str) -> HttpAnswer {
        HttpAnswer::new(status, body)
    }

    #[tokio::test]
    async fn an_answer_is_read_up_to_the_requests_cap_and_no_further() {
        let body = || Full::new(Bytes::from(vec![b'x'; 2048]));
        assert_eq!(read_capped(body(), 2048).await.unwrap().len(), 2048);
        assert_eq!(
            read_capped(body(), 2047).await.unwrap_err(),
            ProbeError::TooLarge(2047)
        );
    }

    #[test]
    fn a_request_without_max_bytes_is_capped_at_one_mebibyte() {
        let req: HttpRequest = serde_saphyr::from_str("path: /health").unwrap();
        assert_eq!(req.answer_limit(), MAX_ANSWER_BYTES);
        let req: HttpRequest = serde_saphyr::from_str("{path: /jsz, max_bytes: 4096}").unwrap();
        assert_eq!(req.answer_limit(), 4096);
    }

    #[test]
    fn a_proxy_request_is_authorised_by_the_verb_of_its_method() {
        assert_eq!(proxy_verb("GET"), "get");
        assert_eq!(proxy_verb("post"), "create");
        assert_eq!(proxy_verb("PUT"), "update");
        assert_eq!(proxy_verb("DELETE"), "delete");
    }

    #[test]
    fn replica_answers_pass_through() {
        let a = ans(503, r#"{"health":"false"}"#);
        assert_eq!(classify_proxy_answer(a.clone(), "p").unwrap(), a);
        let a = ans(404, "404 page not found");
        assert_eq!(classify_proxy_answer(a.clone(), "p").unwrap(), a);
    }

    #[test]
    fn an_api_server_refusal_for_load_is_throttling_not_the_replicas_failure() {
        let apf = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}"#;
        assert!(matches!(
            classify_proxy_answer(ans(429, apf), "p"),
            Err(ProbeError::Throttled { .. })
        ));
        // A replica's own 429 (Vault's standby, say) is its answer.
        let own = ans(429, r#"{"initialized":true,"standby":true}"#);
        assert_eq!(classify_proxy_answer(own.clone(), "p").unwrap(), own);
    }

    #[test]
    fn a_refusal_for_load_is_retried_after_the_retry_after_sent_within_two_seconds() {
        let backoff = Duration::from_millis(50);
        assert_eq!(
            throttle_wait(Some(Duration::from_secs(1)), backoff),
            Duration::from_secs(1)
        );
        assert_eq!(
            throttle_wait(Some(Duration::from_secs(30)), backoff),
            Duration::from_secs(2)
        );
        assert_eq!(throttle_wait(None, backoff), backoff);
    }

    #[test]
    fn a_refusal_for_load_says_the_retry_after_it_carries() {
        let e = ProbeError::Throttled {
            message: "Too many requests".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(
            e.to_string(),
            "refused for load (HTTP 429 in the API server's words, from it or from the replica): Too many requests (retry after 3s)"
        );
    }

    #[test]
    fn api_server_failures_are_told_apart() {
        let refused = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"error trying to reach service: dial tcp 10.250.1.3:2379: connect: connection refused","reason":"ServiceUnavailable","code":503}"#;
        assert_eq!(
            classify_proxy_answer(ans(503, refused), "p").unwrap_err(),
            ProbeError::Unreachable("connection refused (10.250.1.3:2379)".into())
        );
        let forbidden = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"etcd-0\" is forbidden: User \"x\" cannot get resource \"pods/proxy\" in API group \"\" in the namespace \"db\"","reason":"Forbidden","code":403}"#;
        let e = classify_proxy_answer(ans(403, forbidden), "etcd-0").unwrap_err();
        assert!(
            matches!(e, ProbeError::Forbidden(ref m) if m.contains("pods/proxy")),
            "{e}"
        );
        let closed = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"error trying to reach service: EOF","reason":"ServiceUnavailable","code":503}"#;
        assert_eq!(
            classify_proxy_answer(ans(503, closed), "p").unwrap_err(),
            ProbeError::Unreachable("the connection was closed without an answer (EOF)".into())
        );
        // The same close, seen by the API server's transport before it wrote the request.
        let closed_first = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"error trying to reach service: http: server closed idle connection","reason":"ServiceUnavailable","code":503}"#;
        assert_eq!(
            classify_proxy_answer(ans(503, closed_first), "p").unwrap_err(),
            ProbeError::Unreachable(
                "the connection was closed without an answer (server closed idle connection)"
                    .into()
            )
        );
        let gone = r#"{"kind":"Status","message":"pods \"etcd-0\" not found","reason":"NotFound","code":404}"#;
        assert!(matches!(
            classify_proxy_answer(ans(404, gone), "etcd-0"),
            Err(ProbeError::Other(_))
        ));
    }
}
