//! The probing transport: one HTTP request to one replica's port, through the API server's
//! `pods/proxy` subresource (works wherever kubectl works) or straight to the pod IP.
//!
//! Every request has its own time limit and a cap on the answer's size, and every failure
//! becomes a `ProbeError` the user can act on; nothing here panics or blocks other replicas.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::model::{Endpoint, HttpAnswer, ProbeError, MAX_ANSWER_BYTES};
use crate::profile::{HttpRequest, Scheme};

/// How often a probe refused by the API server for load (429) is tried again.
const THROTTLE_RETRIES: u32 = 5;

#[derive(Clone)]
enum Via {
    Proxy(kube::Client),
    Direct(HyperClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>),
}

/// Requests to replicas, at most `max_inflight` at once, whatever the number of callers.
#[derive(Clone)]
pub struct Transport {
    via: Via,
    inflight: Arc<Semaphore>,
}

impl Transport {
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

    fn new(via: Via, max_inflight: usize) -> Self {
        Transport {
            via,
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
        }
    }

    /// Straight to pod IPs (so other protocols than HTTP can reach them too).
    pub fn is_direct(&self) -> bool {
        matches!(self.via, Via::Direct(_))
    }

    pub fn describe(&self) -> &'static str {
        match self.via {
            Via::Proxy(_) => "pods/proxy",
            Via::Direct(_) => "direct",
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
        let mut backoff = Duration::from_millis(50);
        let mut attempt = 0;
        loop {
            let result = {
                let _permit = self.inflight.acquire().await.expect("never closed");
                match tokio::time::timeout(limit, self.call_unbounded(ep, req)).await {
                    Ok(r) => r,
                    Err(_) => Err(ProbeError::Timeout(limit)),
                }
            };
            match result {
                Err(ProbeError::Throttled(m)) if attempt < THROTTLE_RETRIES => {
                    attempt += 1;
                    let wait = retry_after(&m)
                        .unwrap_or(backoff)
                        .min(Duration::from_secs(2));
                    tokio::time::sleep(wait).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other,
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
            Via::Proxy(client) => {
                let port = match ep.scheme {
                    Scheme::Http => format!("{}:{}", ep.pod, ep.port),
                    Scheme::Https => format!("https:{}:{}", ep.pod, ep.port),
                };
                let uri = format!(
                    "/api/v1/namespaces/{}/pods/{}/proxy{}",
                    ep.namespace, port, req.path
                );
                let request = build_request(req, &uri, body.into_bytes())?;
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
                    .and_then(|v| v.parse::<u64>().ok());
                let body = read_capped(resp.into_body()).await?;
                classify_proxy_answer(HttpAnswer { status, body }, &ep.pod).map_err(|e| match e {
                    // Carry the server's Retry-After to the retry loop.
                    ProbeError::Throttled(m) => ProbeError::Throttled(match retry {
                        Some(s) => format!("{m} (retry after {s}s)"),
                        None => m,
                    }),
                    e => e,
                })
            }
            Via::Direct(client) => {
                if ep.scheme == Scheme::Https {
                    return Err(ProbeError::Other(
                        "--via direct speaks plain HTTP only; use --via proxy for HTTPS ports"
                            .into(),
                    ));
                }
                let ip = ep
                    .pod_ip
                    .as_deref()
                    .ok_or_else(|| ProbeError::Unreachable("the pod has no IP yet".into()))?;
                let host = if ip.contains(':') {
                    format!("[{ip}]")
                } else {
                    ip.to_string()
                };
                let uri = format!("http://{host}:{}{}", ep.port, req.path);
                let request = build_request(req, &uri, body.into_bytes())?;
                let resp = client
                    .request(request.map(|b| Full::new(Bytes::from(b))))
                    .await
                    .map_err(|e| ProbeError::Unreachable(crate::errors::chain(&e)))?;
                let status = resp.status().as_u16();
                let body = read_capped(resp.into_body()).await?;
                Ok(HttpAnswer { status, body })
            }
        }
    }
}

fn build_request(
    req: &HttpRequest,
    uri: &str,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, ProbeError> {
    let method = req.method.as_str();
    let mut b = http::Request::builder().method(method).uri(uri);
    if !body.is_empty() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
    }
    for (name, template) in &req.headers {
        let value = crate::model::profile::expand_env(template, |v| std::env::var(v).ok())
            .map_err(|var| {
                ProbeError::Other(format!(
                    "{method} {} needs ${var} for its {name} header: export {var}=... (the token is sent, never printed)",
                    req.path
                ))
            })?;
        b = b.header(name.as_str(), value);
    }
    b.body(body)
        .map_err(|e| ProbeError::Other(format!("bad request {method} {uri}: {e}")))
}

async fn read_capped<B>(body: B) -> Result<Vec<u8>, ProbeError>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_ANSWER_BYTES).collect().await {
        Ok(c) => Ok(c.to_bytes().to_vec()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ProbeError::TooLarge),
        Err(e) => Err(ProbeError::Unreachable(format!(
            "the answer broke off: {e}"
        ))),
    }
}

/// The Retry-After the API server sent, as carried in a Throttled message.
fn retry_after(msg: &str) -> Option<Duration> {
    let secs = msg.rsplit_once("(retry after ")?.1.strip_suffix("s)")?;
    secs.parse().ok().map(Duration::from_secs)
}

#[derive(Deserialize)]
struct ApiStatus {
    kind: Option<String>,
    message: Option<String>,
    reason: Option<String>,
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
    let msg = st.message.unwrap_or_default();
    match (ans.status, st.reason.as_deref()) {
        (403, _) => Err(ProbeError::Forbidden(format!(
            "{msg} (the plugin needs `get` and `create` on `pods/proxy` (docs/rbac.yaml), or use --via direct from inside the cluster)"
        ))),
        (404, Some("NotFound")) => Err(ProbeError::Other(format!("pod {pod} is gone: {msg}"))),
        // API Priority and Fairness (or --max-requests-inflight) refused it: not the replica's fault.
        (429, _) => Err(ProbeError::Throttled(msg)),
        (500 | 502 | 503, _) if msg.contains("error trying to reach service") || msg.contains("dial tcp") => {
            Err(ProbeError::Unreachable(short_dial_error(&msg)))
        }
        _ => Ok(ans),
    }
}

/// "error trying to reach service: dial tcp 10.1.2.3:2379: connect: connection refused"
/// -> "connection refused (10.1.2.3:2379)";
/// "error trying to reach service: EOF" -> "the connection was closed without an answer (EOF)"
fn short_dial_error(msg: &str) -> String {
    let tail = msg.rsplit(": ").next().unwrap_or(msg);
    if tail == "EOF" || tail.contains("connection reset by peer") {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(status: u16, body: &str) -> HttpAnswer {
        HttpAnswer::new(status, body)
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
            Err(ProbeError::Throttled(_))
        ));
        // A replica's own 429 (Vault's standby, say) is its answer.
        let own = ans(429, r#"{"initialized":true,"standby":true}"#);
        assert_eq!(classify_proxy_answer(own.clone(), "p").unwrap(), own);
        assert_eq!(
            retry_after("Too many requests (retry after 3s)"),
            Some(Duration::from_secs(3))
        );
        assert_eq!(retry_after("Too many requests"), None);
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
        let gone = r#"{"kind":"Status","message":"pods \"etcd-0\" not found","reason":"NotFound","code":404}"#;
        assert!(matches!(
            classify_proxy_answer(ans(404, gone), "etcd-0"),
            Err(ProbeError::Other(_))
        ));
    }
}
