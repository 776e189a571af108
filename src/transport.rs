//! The probing transport: one HTTP request to one replica's port, through the API server's
//! `pods/proxy` subresource (works wherever kubectl works) or straight to the pod IP.
//!
//! Every request has its own time limit and a cap on the answer's size, and every failure
//! becomes a `ProbeError` the user can act on; nothing here panics or blocks other replicas.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use crate::profile::extract::HttpAnswer;
use crate::profile::{HttpRequest, Scheme};

/// Answers larger than this are cut off and reported: health endpoints answer in bytes.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Where one request goes.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub namespace: String,
    pub pod: String,
    pub pod_ip: Option<String>,
    pub port: u16,
    pub scheme: Scheme,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// No answer within the time limit (a hung or stopped process).
    Timeout(Duration),
    /// The connection was refused or could not be made.
    Unreachable(String),
    /// RBAC refused the proxy request.
    Forbidden(String),
    /// The answer exceeded MAX_ANSWER_BYTES.
    TooLarge,
    /// Anything else: the API server failed, the pod has no IP, ...
    Other(String),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Timeout(d) => {
                write!(f, "no answer within {}", crate::render::human_duration(*d))
            }
            ProbeError::Unreachable(m) => write!(f, "unreachable: {m}"),
            ProbeError::Forbidden(m) => write!(f, "forbidden: {m}"),
            ProbeError::TooLarge => write!(f, "answer larger than {} bytes", MAX_ANSWER_BYTES),
            ProbeError::Other(m) => write!(f, "{m}"),
        }
    }
}

#[derive(Clone)]
pub enum Transport {
    Proxy(kube::Client),
    Direct(HyperClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>),
}

impl Transport {
    pub fn proxy(client: kube::Client) -> Self {
        Transport::Proxy(client)
    }

    pub fn direct() -> Self {
        // No connect timeout of its own: every call is bounded by --probe-timeout.
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        Transport::Direct(HyperClient::builder(TokioExecutor::new()).build(connector))
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Transport::Proxy(_) => "pods/proxy",
            Transport::Direct(_) => "direct",
        }
    }

    pub async fn call(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
        limit: Duration,
    ) -> Result<HttpAnswer, ProbeError> {
        match tokio::time::timeout(limit, self.call_unbounded(ep, req)).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(limit)),
        }
    }

    async fn call_unbounded(
        &self,
        ep: &Endpoint,
        req: &HttpRequest,
    ) -> Result<HttpAnswer, ProbeError> {
        let body = req.body.clone().unwrap_or_default();
        match self {
            Transport::Proxy(client) => {
                let port = match ep.scheme {
                    Scheme::Http => format!("{}:{}", ep.pod, ep.port),
                    Scheme::Https => format!("https:{}:{}", ep.pod, ep.port),
                };
                let uri = format!(
                    "/api/v1/namespaces/{}/pods/{}/proxy{}",
                    ep.namespace, port, req.path
                );
                let request = build_request(&req.method, &uri, body.into_bytes())?;
                let resp = client
                    .send(request.map(kube::client::Body::from))
                    .await
                    .map_err(|e| {
                        ProbeError::Other(format!("the API server did not answer: {e}"))
                    })?;
                let status = resp.status().as_u16();
                let body = read_capped(resp.into_body()).await?;
                classify_proxy_answer(HttpAnswer { status, body }, &ep.pod)
            }
            Transport::Direct(client) => {
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
                let request = build_request(&req.method, &uri, body.into_bytes())?;
                let resp = client
                    .request(request.map(|b| Full::new(Bytes::from(b))))
                    .await
                    .map_err(|e| ProbeError::Unreachable(error_chain(&e)))?;
                let status = resp.status().as_u16();
                let body = read_capped(resp.into_body()).await?;
                Ok(HttpAnswer { status, body })
            }
        }
    }
}

fn build_request(
    method: &str,
    uri: &str,
    body: Vec<u8>,
) -> Result<http::Request<Vec<u8>>, ProbeError> {
    let mut b = http::Request::builder().method(method).uri(uri);
    if !body.is_empty() {
        b = b.header(http::header::CONTENT_TYPE, "application/json");
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
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
    if !matches!(ans.status, 403 | 404 | 500 | 502 | 503) {
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
            "{msg} (the plugin needs `get` on `pods/proxy`, or use --via direct from inside the cluster)"
        ))),
        (404, Some("NotFound")) => Err(ProbeError::Other(format!("pod {pod} is gone: {msg}"))),
        (500 | 502 | 503, _) if msg.contains("error trying to reach service") || msg.contains("dial tcp") => {
            Err(ProbeError::Unreachable(short_dial_error(&msg)))
        }
        _ => Ok(ans),
    }
}

/// "error trying to reach service: dial tcp 10.1.2.3:2379: connect: connection refused"
/// -> "connection refused (10.1.2.3:2379)"
fn short_dial_error(msg: &str) -> String {
    let tail = msg.rsplit(": ").next().unwrap_or(msg);
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
        let gone = r#"{"kind":"Status","message":"pods \"etcd-0\" not found","reason":"NotFound","code":404}"#;
        assert!(matches!(
            classify_proxy_answer(ans(404, gone), "etcd-0"),
            Err(ProbeError::Other(_))
        ));
    }
}
