//! A write-load client for benchmarks and end-to-end tests: one sequential writer (each
//! write waits for the previous one) against etcd's JSON gateway, that counts every failed
//! and every slow write and measures the longest stall a client saw.
//!
//! Usage: writeload --endpoints http://10.250.0.5:2379,http://10.250.0.6:2379
//!                  [--endpoints-file FILE]
//!                  [--duration 60s] [--timeout 1s] [--slow 100ms] [--budget 5s]
//! With --endpoints-file, the endpoints are read again from FILE (comma- or line-separated)
//! every 200 ms and after every failed attempt, so pods replaced at new addresses (a drain) are
//! followed and pods leaving are dropped, as a client that resolves a Service name again would.
//! Runs until --duration or SIGTERM/SIGINT, then prints one JSON summary on stdout. A write
//! that fails or times out is counted (`failed`, with the first messages in `failures`) and
//! tried again on the next endpoint, as a client with several endpoints does; a write that
//! has not succeeded within --budget is given up (`givenUp`). Every acknowledged write is a
//! key of its own (etcd: `writeload/RUN/N` = N; NATS: the message at the sequence its PubAck
//! named, = N), and at the end every one is read back from the system itself: `lost` is the
//! acknowledged writes that are not there (as a read-back that fails counts them all lost,
//! with `readBackError`); `acknowledged` and `readBack` are the two counts. With
//! --first-ack-file FILE, FILE is created at the first acknowledged write (what a test waits
//! for before it acts, instead of a fixed head start). The stall is the longest time
//! between two successful writes; latency is a write's time from its first attempt.
//! Beside the writer, a watcher asks every endpoint for etcd's status every 20 ms and
//! measures the longest time without a leader that a majority of them agree on and that
//! itself answers as leader (followers go on naming a crashed leader until they time out).
//!
//! NATS JetStream instead: writeload --nats nats://IP:4222,... --monitors http://IP:8222,...
//!                                    [--monitors-file FILE] (read again, as --endpoints-file)
//!                                    --stream BENCH [--subject BENCH.w]
//!                                    [--user U --password P] [--ping 60s]
//! publishes to the stream (each publish waits for the stream leader's acknowledgement; one
//! client connected to every server, reconnecting as a NATS client does, as the user of the
//! stream's account), and the watcher reads the stream's leader from each server's /jsz
//! (the leader must itself say it leads).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn parse_endpoints(s: &str) -> Vec<String> {
    s.split([',', '\n'])
        .map(|s| s.trim().trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn duration(s: &str) -> Duration {
    let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = n.parse().expect("a number");
    Duration::from_secs_f64(match unit {
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        _ => n,
    })
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What is written to: etcd's JSON gateway (an endpoint per attempt, the next one after a
/// failure), or a JetStream stream through one NATS client.
enum Writer {
    Etcd(Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>),
    /// The client, the subject published to, the stream.
    Nats(async_nats::Client, String, String),
}

/// An acknowledged write: its number, and where the system said it put it (NATS's sequence).
type Acked = (u64, Option<u64>);

impl Writer {
    /// Writes number `n` of this run; where the system says it put it, when it says so.
    async fn write(&self, endpoint: &str, run: &str, n: u64) -> Result<Option<u64>, String> {
        match self {
            Writer::Etcd(client) => {
                let body = format!(
                    r#"{{"key":"{}","value":"{}"}}"#,
                    base64(etcd_key(run, n).as_bytes()),
                    base64(n.to_string().as_bytes())
                );
                let (status, body) =
                    post_json(client, &format!("{endpoint}/v3/kv/put"), body).await?;
                if status.is_success() && !body.windows(7).any(|w| w == b"\"error\"") {
                    Ok(None)
                } else {
                    Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
                }
            }
            Writer::Nats(client, subject, _) => {
                // A JetStream publish: answered by the stream leader's PubAck, or an error.
                let reply = client
                    .request(subject.clone(), n.to_string().into_bytes().into())
                    .await
                    .map_err(|e| e.to_string())?;
                let v: serde_json::Value = serde_json::from_slice(&reply.payload)
                    .map_err(|_| String::from_utf8_lossy(&reply.payload).into_owned())?;
                match v.get("error") {
                    None if v.get("seq").is_some() => Ok(v["seq"].as_u64()),
                    _ => Err(v.to_string()),
                }
            }
        }
    }

    /// How many of the acknowledged writes are not in the system now, read from it.
    async fn missing(
        &self,
        endpoints: &[String],
        run: &str,
        acked: &[Acked],
    ) -> Result<u64, String> {
        match self {
            Writer::Etcd(client) => {
                let prefix = format!("writeload/{run}/");
                // The range of every key with the prefix ('/' + 1 is '0').
                let body = format!(
                    r#"{{"key":"{}","range_end":"{}"}}"#,
                    base64(prefix.as_bytes()),
                    base64(format!("writeload/{run}0").as_bytes())
                );
                let mut last = String::from("no endpoint");
                for endpoint in endpoints {
                    let answer = async {
                        let url = format!("{endpoint}/v3/kv/range");
                        let (_, bytes) = post_json(client, &url, body.clone()).await?;
                        serde_json::from_slice::<serde_json::Value>(&bytes)
                            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&bytes)))
                    };
                    let v = match tokio::time::timeout(Duration::from_secs(10), answer).await {
                        Ok(Ok(v)) if v.get("error").is_none() => v,
                        Ok(Ok(v)) => {
                            last = format!("{endpoint}: {v}");
                            continue;
                        }
                        Ok(Err(e)) => {
                            last = format!("{endpoint}: {e}");
                            continue;
                        }
                        Err(_) => {
                            last = format!("{endpoint}: no answer within 10s");
                            continue;
                        }
                    };
                    let stored: std::collections::HashSet<(String, String)> = v["kvs"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|kv| {
                            (
                                kv["key"].as_str().unwrap_or("").to_string(),
                                kv["value"].as_str().unwrap_or("").to_string(),
                            )
                        })
                        .collect();
                    return Ok(acked
                        .iter()
                        .filter(|(n, _)| {
                            !stored.contains(&(
                                base64(etcd_key(run, *n).as_bytes()),
                                base64(n.to_string().as_bytes()),
                            ))
                        })
                        .count() as u64);
                }
                Err(last)
            }
            Writer::Nats(client, _, stream) => {
                let mut missing = 0;
                for (n, seq) in acked {
                    let Some(seq) = seq else {
                        missing += 1;
                        continue;
                    };
                    let reply = tokio::time::timeout(
                        Duration::from_secs(5),
                        client.request(
                            format!("$JS.API.STREAM.MSG.GET.{stream}"),
                            format!(r#"{{"seq":{seq}}}"#).into_bytes().into(),
                        ),
                    )
                    .await
                    .map_err(|_| format!("no answer for sequence {seq} within 5s"))?
                    .map_err(|e| format!("sequence {seq}: {e}"))?;
                    let v: serde_json::Value = serde_json::from_slice(&reply.payload)
                        .map_err(|e| format!("sequence {seq}: {e}"))?;
                    if v["message"]["data"].as_str()
                        != Some(base64(n.to_string().as_bytes()).as_str())
                    {
                        missing += 1;
                    }
                }
                Ok(missing)
            }
        }
    }
}

/// POSTs `body` (JSON) to `url`: the status and the whole answer.
async fn post_json(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: &str,
    body: String,
) -> Result<(http::StatusCode, Bytes), String> {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, bytes))
}

/// The key of write `n` of run `run` (numbered so that the keys sort as they were written).
fn etcd_key(run: &str, n: u64) -> String {
    format!("writeload/{run}/{n:012}")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(servers) = arg(&args, "--nats") {
        return nats_main(&args, parse_endpoints(&servers)).await;
    }
    let file = arg(&args, "--endpoints-file");
    let read_file = |f: &str| -> Vec<String> {
        std::fs::read_to_string(f)
            .map(|t| parse_endpoints(&t))
            .unwrap_or_default()
    };
    let endpoints: Vec<String> = match (arg(&args, "--endpoints"), &file) {
        (Some(e), _) => parse_endpoints(&e),
        (None, Some(f)) => read_file(f),
        (None, None) => panic!("--endpoints URL[,URL...] or --endpoints-file FILE"),
    };
    assert!(!endpoints.is_empty(), "no endpoints");
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let watcher = tokio::spawn(watch_leader(
        client.clone(),
        Sampler::Etcd,
        endpoints.clone(),
        file.clone(),
    ));
    run(Writer::Etcd(client), endpoints, file, watcher, &args).await;
}

/// The JetStream mode: one client for every server, the stream's leader watched on the
/// monitor ports.
async fn nats_main(args: &[String], servers: Vec<String>) {
    // --monitors-file: read again as --endpoints-file is, so servers replaced at new addresses
    // (a restart) are watched.
    let monitors_file = arg(args, "--monitors-file");
    let monitors = match (arg(args, "--monitors"), &monitors_file) {
        (Some(m), _) => parse_endpoints(&m),
        (None, Some(f)) => parse_endpoints(&std::fs::read_to_string(f).unwrap_or_default()),
        (None, None) => panic!("--monitors URL[,URL...] or --monitors-file FILE"),
    };
    let stream = arg(args, "--stream").expect("--stream NAME");
    let subject = arg(args, "--subject").unwrap_or_else(|| format!("{stream}.w"));
    let user = arg(args, "--user").unwrap_or_default();
    let password = arg(args, "--password").unwrap_or_default();
    let timeout = duration(&arg(args, "--timeout").unwrap_or_else(|| "1s".into()));
    // A connection attempt gets as long as a publish: a server replaced at a new address
    // leaves its old one behind, which does not answer (as a deleted pod's IP does not), and
    // the client's default of 5 s per attempt on it would be the stall measured.
    let mut options = async_nats::ConnectOptions::with_user_and_password(user, password)
        .request_timeout(Some(timeout))
        .connection_timeout(timeout)
        .retry_on_initial_connect();
    // --ping: how often the client PINGs its server (the client's default, 60 s, unless given).
    // A connection to a server whose pod is gone is never reset (its address just stops
    // answering), so the client notices only when its PINGs go unanswered: without a short
    // interval every publish in between times out.
    if let Some(ping) = arg(args, "--ping") {
        options = options.ping_interval(duration(&ping));
    }
    let nats = options
        .connect(servers.as_slice())
        .await
        .expect("a NATS connection");
    let http: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let watcher = tokio::spawn(watch_leader(
        http,
        Sampler::NatsStream(stream.clone()),
        monitors,
        monitors_file,
    ));
    // The writer's "endpoint" is only a label here: the client picks its server.
    run(
        Writer::Nats(nats, subject, stream),
        vec!["nats".into()],
        None,
        watcher,
        args,
    )
    .await;
}

async fn run(
    writer: Writer,
    mut endpoints: Vec<String>,
    file: Option<String>,
    watcher: tokio::task::JoinHandle<()>,
    args: &[String],
) {
    let read_file = |f: &str| -> Vec<String> {
        std::fs::read_to_string(f)
            .map(|t| parse_endpoints(&t))
            .unwrap_or_default()
    };
    let run_for = duration(&arg(args, "--duration").unwrap_or_else(|| "60s".into()));
    let timeout = duration(&arg(args, "--timeout").unwrap_or_else(|| "1s".into()));
    let slow = duration(&arg(args, "--slow").unwrap_or_else(|| "100ms".into()));
    let budget = duration(&arg(args, "--budget").unwrap_or_else(|| "5s".into()));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let start = Instant::now();
    let (mut ok, mut failed, mut slow_writes, mut given_up) = (0u64, 0u64, 0u64, 0u64);
    let mut first_try: Option<Instant> = None;
    let mut latencies: Vec<f64> = vec![];
    let mut last_ok = start;
    let mut longest_stall = Duration::ZERO;
    let mut failures: Vec<String> = vec![];
    let mut current = 0usize;
    // This run's writes apart from any other's in the same cluster.
    let run_id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let first_ack_file = arg(args, "--first-ack-file");
    let mut acked: Vec<Acked> = vec![];
    let mut n = 0u64;
    let mut last_read = Instant::now();
    while start.elapsed() < run_for {
        // Follow the endpoints file: an endpoint that left it (a member being deleted) is
        // not written to again, as a client that re-resolves its Service would not.
        if let Some(f) = file
            .as_deref()
            .filter(|_| last_read.elapsed() >= Duration::from_millis(200))
        {
            last_read = Instant::now();
            let fresh = read_file(f);
            if !fresh.is_empty() && fresh != endpoints {
                let at = fresh
                    .iter()
                    .position(|e| *e == endpoints[current])
                    .unwrap_or(0);
                endpoints = fresh;
                current = at;
            }
        }
        n += 1;
        let t0 = Instant::now();
        let began = *first_try.get_or_insert(t0);
        let result = tokio::select! {
            r = tokio::time::timeout(timeout, writer.write(&endpoints[current], &run_id, n))
                => r.unwrap_or_else(|_| Err(format!("no answer within {timeout:?}"))),
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        };
        let took = began.elapsed();
        match result {
            Ok(at) => {
                first_try = None;
                ok += 1;
                acked.push((n, at));
                if ok == 1 {
                    if let Some(f) = &first_ack_file {
                        let _ = std::fs::write(f, "acknowledged\n");
                    }
                }
                latencies.push(took.as_secs_f64() * 1000.0);
                if took > slow {
                    slow_writes += 1;
                }
                let now = Instant::now();
                longest_stall = longest_stall.max(now - last_ok);
                last_ok = now;
            }
            Err(e) => {
                failed += 1;
                if failures.len() < 20 {
                    failures.push(format!(
                        "{:.3}s {}: {e}",
                        t0.duration_since(start).as_secs_f64(),
                        endpoints[current]
                    ));
                }
                if let Some(f) = &file {
                    let fresh = read_file(f);
                    if !fresh.is_empty() {
                        endpoints = fresh;
                    }
                }
                current = (current + 1) % endpoints.len();
                if began.elapsed() > budget {
                    given_up += 1;
                    first_try = None;
                } else {
                    n -= 1; // the same write again
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    longest_stall = longest_stall.max(Instant::now() - last_ok);
    watcher.abort();
    let leaderless = LONGEST_LEADERLESS_US.load(std::sync::atomic::Ordering::SeqCst);
    latencies.sort_by(f64::total_cmp);
    // The truth: every acknowledged write read back from the system itself.
    if let Some(f) = &file {
        let fresh = read_file(f);
        if !fresh.is_empty() {
            endpoints = fresh;
        }
    }
    let (lost, read_back_error) = match writer.missing(&endpoints, &run_id, &acked).await {
        Ok(m) => (m, None),
        Err(e) => (ok, Some(e)),
    };
    let summary = serde_json::json!({
        "writes": ok + given_up,
        "ok": ok,
        "acknowledged": ok,
        "readBack": ok - lost,
        "readBackError": read_back_error,
        "givenUp": given_up,
        "failed": failed,
        "lost": lost,
        "slow": slow_writes,
        "slowThresholdMs": slow.as_secs_f64() * 1000.0,
        "longestStallMs": (longest_stall.as_secs_f64() * 1e4).round() / 10.0,
        "p50Ms": (percentile(&latencies, 0.5) * 10.0).round() / 10.0,
        "p99Ms": (percentile(&latencies, 0.99) * 10.0).round() / 10.0,
        "maxMs": (latencies.last().copied().unwrap_or(0.0) * 10.0).round() / 10.0,
        "longestLeaderlessMs": (leaderless as f64 / 100.0).round() / 10.0,
        "leaderChanges": LEADER_CHANGES.load(std::sync::atomic::Ordering::SeqCst),
        "termsAdvanced": LAST_TERM
            .load(std::sync::atomic::Ordering::SeqCst)
            .saturating_sub(FIRST_TERM.load(std::sync::atomic::Ordering::SeqCst)),
        "seconds": (start.elapsed().as_secs_f64() * 100.0).round() / 100.0,
        "failures": failures,
    });
    println!("{summary}");
}

static LONGEST_LEADERLESS_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Changes of the agreed leader, and the first and highest Raft term any member reported.
static LEADER_CHANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FIRST_TERM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static LAST_TERM: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What the watcher asks each endpoint: etcd's status, or a NATS server's /jsz for one
/// stream (with the server's own name from /varz).
enum Sampler {
    Etcd,
    NatsStream(String),
}

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn get_json(client: &Http, req: http::Request<Full<Bytes>>) -> Option<serde_json::Value> {
    let resp = tokio::time::timeout(Duration::from_millis(500), client.request(req))
        .await
        .ok()?
        .ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

impl Sampler {
    /// (who answers, the leader it names), or None when it does not answer.
    async fn sample(
        &self,
        client: &Http,
        endpoint: &str,
    ) -> Option<(Option<String>, Option<String>)> {
        use std::sync::atomic::Ordering::SeqCst;
        match self {
            Sampler::Etcd => {
                let req = http::Request::post(format!("{endpoint}/v3/maintenance/status"))
                    .body(Full::new(Bytes::from_static(b"{}")))
                    .ok()?;
                let v = get_json(client, req).await?;
                let me = v["header"]["member_id"].as_str().map(str::to_string);
                let term = v["raftTerm"].as_str().and_then(|t| t.parse::<u64>().ok());
                if let Some(t) = term {
                    FIRST_TERM.compare_exchange(0, t, SeqCst, SeqCst).ok();
                    LAST_TERM.fetch_max(t, SeqCst);
                }
                Some((me, v["leader"].as_str().map(str::to_string)))
            }
            Sampler::NatsStream(stream) => {
                let get =
                    |path: String| http::Request::get(path).body(Full::new(Bytes::new())).ok();
                let (varz, jsz) = tokio::join!(
                    get_json(client, get(format!("{endpoint}/varz"))?),
                    get_json(
                        client,
                        get(format!("{endpoint}/jsz?accounts=true&streams=true"))?
                    ),
                );
                let me = varz?["server_name"].as_str().map(str::to_string);
                let jsz = jsz?;
                let leader = jsz["account_details"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
                    .find(|s| s["name"] == stream.as_str())
                    .and_then(|s| s["cluster"]["leader"].as_str())
                    .filter(|l| !l.is_empty())
                    .map(str::to_string);
                Some((me, leader))
            }
        }
    }
}

/// Every 20 ms, every endpoint: the leader a majority of the endpoints name, that answers
/// itself as leader (none when any answering member says it has none). Records the longest
/// run of samples without one.
async fn watch_leader(
    client: Http,
    sampler: Sampler,
    mut endpoints: Vec<String>,
    file: Option<String>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut since: Option<Instant> = None;
    let mut last_leader: Option<String> = None;
    loop {
        let t0 = Instant::now();
        if let Some(fresh) = file
            .as_deref()
            .and_then(|f| std::fs::read_to_string(f).ok())
        {
            let fresh = parse_endpoints(&fresh);
            if !fresh.is_empty() {
                endpoints = fresh;
            }
        }
        let majority = endpoints.len() / 2 + 1;
        let answers =
            futures::future::join_all(endpoints.iter().map(|e| sampler.sample(&client, e))).await;
        let answered: Vec<(Option<String>, Option<String>)> =
            answers.into_iter().flatten().collect();
        let leader = answered
            .iter()
            .find(|(me, l)| {
                me.is_some()
                    && me == l
                    && answered.iter().filter(|(_, x)| x == l).count() >= majority
            })
            .and_then(|(me, _)| me.clone());
        let agreed = !answered.iter().any(|(_, l)| l.is_none()) && leader.is_some();
        if agreed {
            if last_leader.is_some() && last_leader != leader {
                LEADER_CHANGES.fetch_add(1, SeqCst);
            }
            last_leader = leader;
        }
        let at = t0 + t0.elapsed() / 2;
        match (agreed, since) {
            (false, None) => since = Some(at),
            (true, Some(s)) => {
                let us = (at - s).as_micros() as u64;
                LONGEST_LEADERLESS_US.fetch_max(us, std::sync::atomic::Ordering::SeqCst);
                since = None;
            }
            _ => {}
        }
        tokio::time::sleep_until((t0 + Duration::from_millis(20)).into()).await;
    }
}
