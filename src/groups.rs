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

/// How often, and how long at most, a group the server lists without a leader is waited for
/// after its stepdown went unanswered: twice NATS's 10 s lost-quorum interval, after which the
/// group has most likely lost a majority of its replicas, and waiting longer would hold the
/// other groups (and the drain) for all of --timeout. Each look reads the server's whole list.
const ELECTION_POLL: Duration = Duration::from_millis(500);
const ELECTION_WAIT: Duration = Duration::from_secs(20);

/// What became of one group's stepdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The leader answered: it steps down.
    Moved,
    /// Unanswered, and another server led it by then: nothing was left to move.
    LedElsewhere,
}

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
    move_off_waiting(transport, target, pod, moves, timeout, ELECTION_WAIT).await
}

/// `move_off`, a group's election waited for at most `election_wait`.
async fn move_off_waiting(
    transport: &Transport,
    target: &ClusterTarget,
    pod: &Pod,
    moves: &GroupMoves,
    timeout: Duration,
    election_wait: Duration,
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
            election_wait,
        };
        match send.all(&who, &calls).await {
            Ok(results) => {
                for (c, r) in calls.iter().zip(results) {
                    match r {
                        Ok(Sent::Moved) => {
                            out.moved.push(c.group.clone());
                            sent.push((*c).clone());
                        }
                        Ok(Sent::LedElsewhere) => out.led_elsewhere.push(c.group.clone()),
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
    election_wait: Duration,
}

impl Sending<'_> {
    /// One connection as `who` to the server (through a port-forward when replicas are
    /// reached by pods/proxy), every call on it. Once one group's stepdown is given up, the
    /// server is not left (the run stops), so the account's others are asked once each, for
    /// the report: a silence again most likely has the same cause, and each wait would cost
    /// seconds and reads of the server's whole list.
    async fn all(
        &self,
        who: &Who,
        calls: &[&GroupCall],
    ) -> Result<Vec<Result<Sent, String>>, String> {
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
            let mut patient = true;
            for c in calls {
                let r = self.one(&client, who, c, patient).await;
                patient &= r.is_ok();
                results.push(r);
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

    /// One group's stepdown. Unanswered, or answered by a member that knows no leader, the
    /// server's own list decides (`plan::groups::after_unanswered`): a group electing a
    /// leader is waited for (at most `election_wait` in all) and asked again once it has one;
    /// all before the deadline. Not `patient` (another group of the account was given up, so
    /// the run stops anyway): asked once, and what it answers is the result.
    async fn one(
        &self,
        client: &async_nats::Client,
        who: &Who,
        c: &GroupCall,
        patient: bool,
    ) -> Result<Sent, String> {
        let mut asked_again = 0;
        // What the first request met ("no reply to ... within 2s", or a member's "no leader"),
        // and whether every request so far met silence alone (then the user is the likeliest
        // cause, and the message says so).
        let mut first: Option<String> = None;
        let mut silence_only = true;
        let mut hint = String::new();
        let mut electing_since: Option<Instant> = None;
        let ran_out = |first: &Option<String>| match first {
            None => "not sent: the time for moving the groups (--timeout) ran out".into(),
            Some(met) => {
                format!("{met}; then the time for moving the groups (--timeout) ran out")
            }
        };
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ran_out(&first));
            }
            let asked = nats::ask(
                client,
                &c.subject,
                c.body.as_deref(),
                self.limit.min(left),
                self.transport.vars(),
                who,
            )
            .await;
            let met = match asked {
                Ok(()) => return Ok(Sent::Moved),
                Err(e) if !patient => return Err(e.to_string()),
                Err(nats::AskError::Unanswered { what, hint: h }) => {
                    hint = h;
                    what
                }
                Err(nats::AskError::NoLeader(why)) => {
                    silence_only = false;
                    format!("a member answered that the group has no leader now: {why}")
                }
                Err(nats::AskError::Failed(why)) => return Err(why),
            };
            let first = first.get_or_insert(met).clone();
            loop {
                let left = self.deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ran_out(&Some(first)));
                }
                let listed = read_groups(
                    self.transport,
                    &self.target.profile,
                    self.pod,
                    self.limit.min(left),
                )
                .await
                .and_then(Result::ok);
                match after_unanswered(listed.as_deref(), self.member, &c.group, asked_again) {
                    Unanswered::NotLedHere => return Ok(Sent::LedElsewhere),
                    Unanswered::GiveUp if silence_only => {
                        return Err(format!("{first}: {hint}"))
                    }
                    Unanswered::GiveUp => return Err(format!(
                        "{first}; asked again, it was not moved either (the group was between leaders meanwhile)"
                    )),
                    Unanswered::AskAgain => {
                        asked_again += 1;
                        break;
                    }
                    Unanswered::Electing => {
                        silence_only = false;
                        let since = *electing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= self.election_wait {
                            return Err(format!(
                                "{first}; the server's list showed the group without a leader for {}s: has it lost a majority of its replicas?",
                                self.election_wait.as_secs()
                            ));
                        }
                        if Instant::now() + ELECTION_POLL >= self.deadline {
                            return Err(format!(
                                "{first}; the group was electing a leader when the time for moving the groups (--timeout) ran out"
                            ));
                        }
                        tokio::time::sleep(ELECTION_POLL).await;
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

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use crate::credentials::Vars;
    use crate::model::{Group, OwnerKind};
    use crate::plan::groups::plan_group_moves;
    use crate::profile::Catalog;

    /// How the server meets a stepdown: silence, success, or a member's "no leader now".
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Reply {
        Silent,
        Moved,
        NoLeader,
    }
    use Reply::*;

    /// What the server does: how each stepdown in turn is met (the last repeats), and the
    /// consumer's leader in each /jsz read in turn (the last repeats).
    struct Script {
        answers: Vec<Reply>,
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
                                let answer = {
                                    let mut s = script.lock().unwrap();
                                    s.asked += 1;
                                    nth(&s.answers, s.asked - 1)
                                };
                                let body = match answer {
                                    Silent => continue,
                                    Moved => {
                                        r#"{"type":"io.nats.jetstream.api.v1.consumer_leader_stepdown_response","success":true}"#
                                    }
                                    NoLeader => {
                                        r#"{"type":"io.nats.jetstream.api.v1.consumer_leader_stepdown_response","error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}"#
                                    }
                                };
                                let Some(reply) = reply else {
                                    continue;
                                };
                                let sid = inboxes
                                    .iter()
                                    .find(|(prefix, _)| reply.starts_with(prefix.as_str()))
                                    .map(|(_, sid)| sid.clone())
                                    .unwrap();
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
        crate::transport::test_server::http(move || {
            let leader = {
                let mut s = script.lock().unwrap();
                s.listed += 1;
                nth(&s.leaders, s.listed - 1)
            };
            let cluster =
                leader.map_or(serde_json::json!({}), |l| serde_json::json!({"leader": l}));
            let jsz = serde_json::json!({"account_details": [{"name": "APP", "stream_detail": [{
                "name": "ORDERS", "cluster": {"leader": "nats-0"},
                "consumer_detail": [
                    {"name": "work", "cluster": cluster},
                    {"name": "audit", "cluster": {"leader": "nats-2"}},
                ],
            }]}]});
            crate::transport::test_server::ok(jsz.to_string())
        })
        .await
    }

    /// The consumer APP/ORDERS/work, led by nats-2 at the look, moved off nats-2.
    async fn move_consumer(
        answers: Vec<Reply>,
        leaders: Vec<Option<&'static str>>,
        election_wait: Duration,
    ) -> (GroupsMoved, usize) {
        move_consumers(&["work"], answers, leaders, election_wait).await
    }

    /// The consumers `names` of APP/ORDERS, led by nats-2 at the look, moved off nats-2 (the
    /// script's leaders are work's; audit's stays nats-2).
    async fn move_consumers(
        names: &[&str],
        answers: Vec<Reply>,
        leaders: Vec<Option<&'static str>>,
        election_wait: Duration,
    ) -> (GroupsMoved, usize) {
        let script = Arc::new(Mutex::new(Script {
            answers,
            leaders,
            asked: 0,
            listed: 0,
        }));
        let moved = move_scripted(names, script.clone(), election_wait).await;
        let asked = script.lock().unwrap().asked;
        (moved, asked)
    }

    async fn move_scripted(
        names: &[&str],
        script: Arc<Mutex<Script>>,
        election_wait: Duration,
    ) -> GroupsMoved {
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
        let looked: Vec<Group> = names
            .iter()
            .map(|n| Group {
                kind: "consumers".into(),
                names: vec!["APP".into(), "ORDERS".into(), n.to_string()],
                leader: Some("nats-2".into()),
            })
            .collect();
        let (calls, skips) = plan_group_moves(profile.groups.as_ref().unwrap(), &looked, "nats-2");
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
        let timeout = Duration::from_secs(20);
        // The public path where the election wait is the real one, so it is what is tested.
        if election_wait == ELECTION_WAIT {
            move_off(&transport, &target, &pod, &moves, timeout).await
        } else {
            move_off_waiting(&transport, &target, &pod, &moves, timeout, election_wait).await
        }
    }

    /// The server's /jsz reads the last move made, with what it returned.
    async fn move_consumer_counting_reads(
        answers: Vec<Reply>,
        leaders: Vec<Option<&'static str>>,
    ) -> (GroupsMoved, usize) {
        let script = Arc::new(Mutex::new(Script {
            answers,
            leaders,
            asked: 0,
            listed: 0,
        }));
        let moved = move_scripted(&["work"], script.clone(), ELECTION_WAIT).await;
        let listed = script.lock().unwrap().listed;
        (moved, listed)
    }

    const WAIT: Duration = ELECTION_WAIT;

    #[tokio::test]
    async fn a_stepdown_unanswered_while_the_group_elects_is_asked_again_once_it_has_a_leader() {
        // Silent while the consumer has no leader; it elects nats-2 again, and the second
        // stepdown is answered and moves it to nats-1.
        let (moved, asked) = move_consumer(
            vec![Silent, Moved],
            vec![None, None, Some("nats-2"), Some("nats-1")],
            WAIT,
        )
        .await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(moved.moved, vec!["consumers APP/ORDERS/work"]);
        assert_eq!(moved.server, "nats-2");
        assert_eq!(asked, 2);
    }

    #[tokio::test]
    async fn a_member_answering_that_the_group_has_no_leader_is_asked_again_once_it_has_one() {
        // What NATS answers from a member of a group between leaders (err_code 10008).
        let (moved, asked) = move_consumer(
            vec![NoLeader, Moved],
            vec![None, Some("nats-2"), Some("nats-1")],
            WAIT,
        )
        .await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(moved.moved, vec!["consumers APP/ORDERS/work"]);
        assert_eq!(asked, 2);
    }

    #[tokio::test]
    async fn a_group_that_elected_another_leader_meanwhile_is_not_asked_again_nor_counted_moved() {
        let (moved, asked) = move_consumer(vec![Silent], vec![None, Some("nats-0")], WAIT).await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(moved.led_elsewhere, vec!["consumers APP/ORDERS/work"]);
        assert!(moved.moved.is_empty(), "{moved:?}");
        assert_eq!(asked, 1);
    }

    #[tokio::test]
    async fn a_stepdown_never_answered_while_the_server_still_leads_is_given_up_after_asking_twice()
    {
        // What a user without the right to send it meets: the group keeps its leader, and
        // the reason (the first silence's) names the account's user.
        let (moved, asked) = move_consumer(vec![Silent], vec![Some("nats-2")], WAIT).await;
        assert!(!moved.succeeded());
        assert_eq!(asked, 2);
        assert!(
            moved.failed[0].contains("no reply to $JS.API.CONSUMER.LEADER.STEPDOWN.ORDERS.work within 2s: is NATS_APP_USER (or NATS_APP_CREDS) a user of account APP who may publish to it?"),
            "{moved:?}"
        );
    }

    #[tokio::test]
    async fn a_group_that_elects_no_leader_is_given_up_after_the_election_wait_with_its_reason() {
        let (moved, asked) = move_consumer(vec![Silent], vec![None], Duration::from_secs(1)).await;
        assert!(!moved.succeeded());
        assert_eq!(asked, 1);
        assert!(
            moved.failed[0]
                .contains("without a leader for 1s: has it lost a majority of its replicas?"),
            "{moved:?}"
        );
    }

    #[tokio::test]
    async fn a_members_no_leader_answer_is_quoted_as_what_it_is_not_as_a_refusal() {
        let (moved, _) = move_consumer(vec![NoLeader], vec![None], Duration::from_secs(1)).await;
        let why = &moved.failed[0];
        assert!(
            why.contains(
                "no leader now: JetStream system temporarily unavailable (err_code 10008)"
            ),
            "{moved:?}"
        );
        assert!(!why.contains("refused the transfer"), "{moved:?}");
    }

    #[tokio::test]
    async fn once_a_group_is_given_up_the_accounts_others_are_asked_once_each() {
        // Planned in name order: audit, then work. audit is silent twice while nats-2 still
        // leads it; work, silent too, is asked once: the run stops at audit anyway.
        let (moved, asked) =
            move_consumers(&["audit", "work"], vec![Silent], vec![Some("nats-2")], WAIT).await;
        assert_eq!(asked, 3, "{moved:?}");
        assert_eq!(moved.failed.len(), 2, "{moved:?}");
        assert!(
            moved
                .failed
                .iter()
                .all(|f| f.contains("who may publish to it?")),
            "{moved:?}"
        );
    }

    #[tokio::test]
    async fn a_moved_group_is_waited_for_until_the_servers_list_names_another_leader() {
        // Answered at once; the server's list still names it the leader twice, then nats-1.
        let (moved, listed) = move_consumer_counting_reads(
            vec![Moved],
            vec![Some("nats-2"), Some("nats-2"), Some("nats-1")],
        )
        .await;
        assert!(moved.succeeded(), "{moved:?}");
        assert_eq!(
            listed, 3,
            "read until another leader was named, and no more"
        );
    }

    #[tokio::test]
    async fn the_time_taken_counts_the_unanswered_wait() {
        let (moved, _) = move_consumer(vec![Silent], vec![None, Some("nats-0")], WAIT).await;
        // At least the 2 s the first request waited for a reply, in milliseconds.
        assert!(moved.elapsed_ms >= 2000.0, "{moved:?}");
    }

    #[tokio::test]
    async fn a_group_between_leaders_and_then_silent_is_not_blamed_on_the_user() {
        // A member's "no leader now", then silence while the list names nats-2 the leader.
        let (moved, asked) =
            move_consumer(vec![NoLeader, Silent], vec![Some("nats-2")], WAIT).await;
        assert_eq!(asked, 2);
        assert!(
            moved.failed[0].contains("asked again, it was not moved either"),
            "{moved:?}"
        );
        assert!(!moved.failed[0].contains("who may publish"), "{moved:?}");
    }
}
