//! Moving the leaders of a server's other Raft groups (NATS: streams and consumers) off it,
//! and waiting until the server reports it leads none of them: `yield --streams`, and
//! `drain` before it evicts a server. What to send is decided by `plan::groups`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::model::ClusterTarget;
use crate::nats::{self, Who};
use crate::observe::{endpoint, read_groups};
use crate::plan::groups::{
    after_unanswered, still_led, GroupCall, GroupMoves, GroupSkip, Unanswered,
};
use crate::transport::{dial, Transport};

pub use crate::actions::GroupsMoved;

/// How often the server is asked again while the groups elect their new leaders.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// The planned moves sent (one connection per account), then the server's own list of groups
/// read again until it leads none of them. All of it within `timeout`: a server that lists
/// thousands of groups, or answers each stepdown slowly, gets what fits and the rest is
/// reported not sent.
pub async fn move_off(
    transport: &Transport,
    target: &ClusterTarget,
    pod: &Pod,
    moves: &GroupMoves,
    timeout: Duration,
) -> GroupsMoved {
    let started = Instant::now();
    let limit = Duration::from_secs(2).min(timeout);
    let mut out = GroupsMoved {
        server: pod.name_any(),
        ..Default::default()
    };
    out.failed.extend(
        moves
            .skips
            .iter()
            .map(|GroupSkip { group, reason }| format!("{group}: {reason}")),
    );
    let mut by_account: BTreeMap<Option<String>, Vec<&GroupCall>> = BTreeMap::new();
    for c in &moves.calls {
        by_account.entry(c.account.clone()).or_default().push(c);
    }
    let deadline = started + timeout;
    let mut sent = vec![];
    for (account, calls) in by_account {
        let who = account.map_or(Who::System, Who::Account);
        let send = Sending {
            transport,
            target,
            pod,
            member: &moves.member,
            limit,
            deadline,
        };
        match send.all(&who, &calls).await {
            Ok(results) => {
                for (c, r) in calls.iter().zip(results) {
                    match r {
                        Ok(()) => {
                            out.moved.push(c.group.clone());
                            sent.push((*c).clone());
                        }
                        Err(e) => out.failed.push(format!("{}: {e}", c.group)),
                    }
                }
            }
            Err(e) => out
                .failed
                .extend(calls.iter().map(|c| format!("{}: {e}", c.group))),
        }
    }
    // Wait until the server's own list shows the groups led elsewhere (only that list is
    // read: the member id is known).
    loop {
        out.still_led = match read_groups(transport, &target.profile, pod, limit).await {
            Some(Ok(listed)) => still_led(&listed, &moves.member, &sent),
            _ => sent.iter().map(|c| c.group.clone()).collect(),
        };
        if out.still_led.is_empty() || Instant::now() + POLL_EVERY >= deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    out.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    out
}

/// Where and within what the stepdowns of one server's groups are sent.
struct Sending<'a> {
    transport: &'a Transport,
    target: &'a ClusterTarget,
    pod: &'a Pod,
    /// The server's member id: whose leadership a group's listing is judged against.
    member: &'a str,
    limit: Duration,
    deadline: Instant,
}

impl Sending<'_> {
    /// One connection as `who` to the server (through a port-forward when replicas are
    /// reached by pods/proxy), every call on it.
    async fn all(
        &self,
        who: &Who,
        calls: &[&GroupCall],
    ) -> Result<Vec<Result<(), String>>, String> {
        if Instant::now() >= self.deadline {
            return Err("not sent: the time for moving the groups ran out".into());
        }
        let port = &calls[0].port;
        let ep = endpoint(&self.target.profile, self.pod, Some(port)).map_err(|e| e.to_string())?;
        let tls = nats::NatsTls::to(self.transport.tls(), &ep);
        let (host, port, bridge) = dial(self.transport, ep).await?;
        let result = async {
            let client =
                nats::connect(&host, port, self.limit, self.transport.vars(), who, &tls).await?;
            let mut results = vec![];
            for c in calls {
                results.push(self.one(&client, who, c).await);
            }
            let _ = client.drain().await;
            Ok(results)
        }
        .await;
        if let Some(b) = bridge {
            b.abort();
        }
        result
    }

    /// One group's stepdown, asked again while the server's own list says the group is
    /// electing a leader (`plan::groups::after_unanswered`), all before the deadline.
    async fn one(
        &self,
        client: &async_nats::Client,
        who: &Who,
        c: &GroupCall,
    ) -> Result<(), String> {
        let ran_out = || "not sent: the time for moving the groups (--timeout) ran out".to_string();
        let mut asked_again = 0;
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ran_out());
            }
            let silence = match nats::ask(
                client,
                &c.subject,
                c.body.as_deref(),
                self.limit.min(left),
                self.transport.vars(),
                who,
            )
            .await
            {
                Err(nats::AskError::Unanswered(why)) => why,
                answered => return answered.map_err(String::from),
            };
            loop {
                let listed =
                    read_groups(self.transport, &self.target.profile, self.pod, self.limit)
                        .await
                        .and_then(Result::ok);
                match after_unanswered(listed.as_deref(), self.member, &c.group, asked_again) {
                    // Counted as moved: the wait below confirms it is led elsewhere.
                    Unanswered::NotLedHere => return Ok(()),
                    Unanswered::GiveUp => return Err(silence),
                    Unanswered::AskAgain => {
                        asked_again += 1;
                        break;
                    }
                    Unanswered::Electing => {
                        if Instant::now() + POLL_EVERY >= self.deadline {
                            return Err(
                                "its stepdown was not answered: the group was electing a leader until the time for moving the groups (--timeout) ran out".into(),
                            );
                        }
                        tokio::time::sleep(POLL_EVERY).await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a scripted NATS server (the client protocol, each stepdown answered or not as
    //! the script says) and its monitor port (the server's own /jsz list of groups).
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::credentials::Vars;
    use crate::model::{Group, OwnerKind};
    use crate::plan::groups::plan_group_moves;
    use crate::profile::Catalog;

    /// What the server does: whether each stepdown in turn is answered (the last repeats),
    /// and the consumer's leader in each /jsz read in turn (the last repeats).
    struct Script {
        answers: Vec<bool>,
        leaders: Vec<Option<&'static str>>,
        asked: usize,
        listed: usize,
    }

    fn nth<T: Clone>(v: &[T], i: usize) -> T {
        v[i.min(v.len() - 1)].clone()
    }

    async fn nats_server(script: Arc<Mutex<Script>>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let script = script.clone();
                tokio::spawn(async move {
                    let (r, mut w) = tcp.into_split();
                    let mut r = BufReader::new(r);
                    let info = r#"INFO {"server_id":"fake","server_name":"nats-2","version":"2.10.0","proto":1,"max_payload":1048576,"headers":false}"#;
                    w.write_all(format!("{info}\r\n").as_bytes()).await.unwrap();
                    let mut inboxes: Vec<(String, String)> = vec![];
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let words: Vec<String> =
                            line.split_whitespace().map(str::to_string).collect();
                        match words.first().map(|w| w.to_ascii_uppercase()).as_deref() {
                            Some("PING") => w.write_all(b"PONG\r\n").await.unwrap(),
                            Some("SUB") => inboxes.push((
                                words[1].trim_end_matches('*').to_string(),
                                words.last().unwrap().clone(),
                            )),
                            Some(verb @ ("PUB" | "HPUB")) => {
                                let len: usize = words.last().unwrap().parse().unwrap();
                                let mut payload = vec![0; len + 2];
                                r.read_exact(&mut payload).await.unwrap();
                                let reply = (words.len() == if verb == "PUB" { 4 } else { 5 })
                                    .then(|| words[2].clone());
                                let answered = {
                                    let mut s = script.lock().unwrap();
                                    s.asked += 1;
                                    nth(&s.answers, s.asked - 1)
                                };
                                let Some(reply) = reply.filter(|_| answered) else {
                                    continue;
                                };
                                let sid = inboxes
                                    .iter()
                                    .find(|(prefix, _)| reply.starts_with(prefix.as_str()))
                                    .map(|(_, sid)| sid.clone())
                                    .unwrap();
                                let body = r#"{"type":"io.nats.jetstream.api.v1.consumer_leader_stepdown_response","success":true}"#;
                                let msg = format!("MSG {reply} {sid} {}\r\n{body}\r\n", body.len());
                                w.write_all(msg.as_bytes()).await.unwrap();
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        port
    }

    async fn monitor(script: Arc<Mutex<Script>>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let script = script.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |_req| {
                        let leader = {
                            let mut s = script.lock().unwrap();
                            s.listed += 1;
                            nth(&s.leaders, s.listed - 1)
                        };
                        let cluster = leader
                            .map_or(serde_json::json!({}), |l| serde_json::json!({"leader": l}));
                        let jsz = serde_json::json!({"account_details": [{"name": "APP", "stream_detail": [{
                            "name": "ORDERS", "cluster": {"leader": "nats-0"},
                            "consumer_detail": [{"name": "work", "cluster": cluster}],
                        }]}]});
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(jsz.to_string()),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        port
    }

    /// The consumer APP/ORDERS/work, led by nats-2 at the look, moved off nats-2.
    async fn move_consumer(
        answers: Vec<bool>,
        leaders: Vec<Option<&'static str>>,
    ) -> (GroupsMoved, usize) {
        let script = Arc::new(Mutex::new(Script {
            answers,
            leaders,
            asked: 0,
            listed: 0,
        }));
        let (client, http) = (
            nats_server(script.clone()).await,
            monitor(script.clone()).await,
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "nats-2", "namespace": "mq"},
            "spec": {"containers": [{"name": "nats", "ports": [
                {"name": "client", "containerPort": client},
                {"name": "monitor", "containerPort": http},
            ]}]},
            "status": {"podIP": "127.0.0.1"},
        }))
        .unwrap();
        let profile = Catalog::builtin().get("nats").cloned().unwrap();
        let looked = Group {
            kind: "consumers".into(),
            names: vec!["APP".into(), "ORDERS".into(), "work".into()],
            leader: Some("nats-2".into()),
        };
        let (calls, skips) =
            plan_group_moves(profile.groups.as_ref().unwrap(), [&looked], "nats-2");
        let moves = GroupMoves {
            member: "nats-2".into(),
            calls,
            skips,
        };
        let target = ClusterTarget {
            namespace: "mq".into(),
            name: "nats".into(),
            owner_kind: OwnerKind::StatefulSet,
            profile,
            desired_replicas: 3,
            pods: vec![pod.clone()],
            credentials_secret: None,
            tls_secret: None,
            gate_assume: None,
            named: true,
        };
        let vars = BTreeMap::from([
            ("NATS_APP_USER".to_string(), "app".to_string()),
            ("NATS_APP_PASSWORD".to_string(), "secret".to_string()),
        ]);
        let transport = Transport::direct(4).with_vars(Arc::new(Vars::new(vars, "the test")));
        let moved = move_off(&transport, &target, &pod, &moves, Duration::from_secs(20)).await;
        let asked = script.lock().unwrap().asked;
        (moved, asked)
    }

    #[tokio::test]
    async fn a_stepdown_unanswered_while_the_group_elects_is_asked_again_once_it_has_a_leader() {
        // Silent while the consumer has no leader; it elects nats-2 again, and the second
        // stepdown is answered and moves it to nats-1.
        let (moved, asked) = move_consumer(
            vec![false, true],
            vec![None, None, Some("nats-2"), Some("nats-1")],
        )
        .await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(moved.moved, vec!["consumers APP/ORDERS/work"]);
        assert_eq!(asked, 2);
    }

    #[tokio::test]
    async fn a_group_that_elected_another_leader_meanwhile_is_not_asked_again() {
        let (moved, asked) = move_consumer(vec![false], vec![None, Some("nats-0")]).await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(asked, 1);
    }

    #[tokio::test]
    async fn a_stepdown_never_answered_while_the_server_still_leads_is_given_up_after_asking_twice()
    {
        // What a user of another account meets: the group keeps its leader, and the reason
        // names the account's user.
        let (moved, asked) = move_consumer(vec![false], vec![Some("nats-2")]).await;
        assert!(!moved.succeeded());
        assert_eq!(asked, 2);
        assert!(
            moved.failed[0].contains("is NATS_APP_USER (or NATS_APP_CREDS) a user of account APP?"),
            "{moved:?}"
        );
    }
}
