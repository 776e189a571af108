//! Handing leadership over, and waiting until it has really happened: the transfer request
//! (or, for systems that cannot transfer, the leader pod's deletion) runs while every replica
//! is polled, concurrently and often, so the leaderless window is measured rather than
//! guessed. `yield` prints the result; `drain` calls the same function before it evicts a
//! leader.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::{ClusterTarget, HttpAnswer};
use futures::StreamExt;

pub use crate::actions::{Outcome, Waited};
use crate::observe::{endpoint, poll_view};
use crate::plan::{judge, judge_with_history, Done, Expect, ReplicaView, TransferCall, YieldPlan};
use crate::report::ClusterReport;
use crate::transport::Transport;

/// How long replicas are still watched after the request failed.
const AFTER_FAILURE: Duration = Duration::from_secs(2);

/// How long a handover is waited for, and how long one replica's answer may take while it
/// is watched.
pub struct WaitOptions {
    pub timeout: Duration,
    /// The limit of one request in one round of polling.
    pub probe_limit: Duration,
}

/// The longest one replica's answer may take in one round of polling: a slow replica must
/// not hold its own samples up longer than this, whatever `--probe-timeout` allows a survey.
pub const POLL_PROBE_LIMIT: Duration = Duration::from_secs(1);

impl WaitOptions {
    /// The one way a verb builds its wait: `--timeout` for the whole handover, each poll
    /// bounded by `--probe-timeout` and by [`POLL_PROBE_LIMIT`].
    pub fn new(timeout: Duration, probe_timeout: Duration) -> Self {
        WaitOptions {
            timeout,
            probe_limit: probe_timeout.min(POLL_PROBE_LIMIT),
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Runs `action` (the transfer request, or a deletion) while polling every replica, each in
/// a loop of its own (a replica that is slow to answer never holds up the others' samples),
/// until the latest answers show the handover done, the action fails, or the time is up.
pub async fn act_and_wait<F>(
    transport: &Transport,
    target: &ClusterTarget,
    report: &ClusterReport,
    expect: Expect,
    opts: &WaitOptions,
    action: F,
) -> Waited
where
    F: Future<Output = Result<(), String>>,
{
    let pod_of_member = report.pod_of_member();
    let members = report.summary.voters as usize;
    // Until a replica answers, it is as the survey saw it.
    let views: Vec<ReplicaView> = target
        .pods
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let r = report.replicas.iter().find(|r| r.pod == name);
            ReplicaView {
                role: r.map(|r| r.raft.role),
                leader: r.and_then(|r| r.raft.leader_pod.clone()),
                has_leader: r.and_then(|r| r.raft.has_leader),
                term: r.and_then(|r| r.raft.term),
                error: None,
                pod: name,
            }
        })
        .collect();
    let pod_of_member = &pod_of_member;
    let poll = |i: usize| {
        poll_view(
            transport,
            &target.profile,
            &target.pods[i],
            pod_of_member,
            opts.probe_limit,
        )
    };
    let watch = Watch {
        views,
        members,
        expect,
        every: transport.poll_every(),
    };
    wait_with(watch, opts, poll, action).await
}

/// A planned transfer sent and waited for: the one way drain, restart, yield and the in-pod
/// hook hand leadership over (judged after by `Waited::verdict`).
pub async fn transfer_and_wait(
    transport: &Transport,
    target: &ClusterTarget,
    report: &ClusterReport,
    plan: &YieldPlan,
    opts: &WaitOptions,
    timeout: Duration,
) -> Waited {
    let send = send_transfer(transport, target, &plan.call, timeout);
    act_and_wait(transport, target, report, plan.expect(), opts, send).await
}

/// What a handover's wait starts from: the replicas as last seen (one view per pod, in the
/// order `poll` numbers them), how many voters the system has, what would count as done, and
/// how often each replica is asked.
pub struct Watch {
    pub views: Vec<ReplicaView>,
    pub members: usize,
    pub expect: Expect,
    pub every: Duration,
}

/// The wait itself, over any way of asking a replica: `poll(i)` asks the `i`th replica once.
/// [`act_and_wait`] polls real replicas through the transport; tests poll a scripted cluster
/// on tokio's paused clock.
pub async fn wait_with<P, PF, F>(watch: Watch, opts: &WaitOptions, poll: P, action: F) -> Waited
where
    P: Fn(usize) -> PF,
    PF: Future<Output = ReplicaView>,
    F: Future<Output = Result<(), String>>,
{
    let Watch {
        mut views,
        members,
        mut expect,
        every,
    } = watch;
    let replicas = views.len();
    let start = Instant::now();
    let deadline = start + opts.timeout;
    let poll = &poll;
    let pollers = (0..replicas).map(|i| {
        Box::pin(futures::stream::unfold(
            None::<Instant>,
            move |last| async move {
                if let Some(last) = last {
                    tokio::time::sleep_until(last + every).await;
                }
                let asked = Instant::now();
                let v = poll(i).await;
                // The moment the answer describes: halfway through the request.
                let at = (asked - start) + asked.elapsed() / 2;
                Some(((i, v, at, asked - start), Some(asked)))
            },
        ))
    });
    let mut samples = futures::stream::select_all(pollers);
    tokio::pin!(action);
    let mut action_result: Option<(Result<(), String>, Duration)> = None;
    let mut leaderless_since: Option<Duration> = None;
    let mut window: Option<Duration> = None;
    let mut rounds = 0usize;
    let may_vanish = expect.old_leader_may_vanish;
    let old_leader = expect.old_leader.clone();
    // When the deleted leader's pod object was gone (the action's end): an answer under its
    // name asked after that comes from its replacement, which may win the election; one
    // asked before came from the old process, however late it arrives.
    let mut vanished_at: Option<Duration> = None;
    let mut old_seen_following = false;
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let verdict = loop {
        let (i, v, at, asked_at) = tokio::select! {
            r = &mut action, if action_result.is_none() => {
                if r.is_ok() && may_vanish {
                    vanished_at = Some(start.elapsed());
                    expect.old_leader = String::new();
                    for v in views.iter_mut().filter(|v| v.pod == old_leader) {
                        *v = ReplicaView::silent(v.pod.clone());
                    }
                }
                if r.is_err() {
                    // Keep watching a little: whether leadership moved anyway (an election,
                    // elsewhere) says more than the failure, and the last answers are fresh.
                    let grace = Instant::now() + AFTER_FAILURE.max(opts.probe_limit * 2);
                    sleep.as_mut().reset(grace.min(deadline));
                }
                action_result = Some((r, start.elapsed()));
                continue;
            }
            Some(s) = samples.next() => s,
            _ = &mut sleep => break (Done::No, None, None),
        };
        if v.pod == old_leader && vanished_at.is_some_and(|t| asked_at < t) {
            continue;
        }
        rounds += 1;
        views[i] = v;
        let j = judge_with_history(&expect, &views, members, &mut old_seen_following);
        match (&j.agreed, leaderless_since) {
            (None, None) => leaderless_since = Some(at),
            (Some(a), Some(since)) if a != &expect.old_leader && window.is_none() => {
                window = Some(at.saturating_sub(since));
            }
            _ => {}
        }
        if j.done != Done::No {
            break (j.done, j.agreed, j.term);
        }
    };
    drop(samples);
    let verdict = match verdict {
        (Done::No, None, None) => {
            let j = judge(&expect, &views, members);
            (Done::No, j.agreed, j.term)
        }
        v => v,
    };
    // A synchronous request (etcd's MoveLeader) answers once the transfer is done: collect it.
    if action_result.is_none() {
        let left = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(1);
        if let Ok(r) = tokio::time::timeout(left, &mut action).await {
            action_result = Some((r, start.elapsed()));
        }
    }
    let total = start.elapsed();
    let (done, new_leader, term_after) = verdict;
    let error = match &action_result {
        Some((Err(e), _)) => Some(e.clone()),
        _ => None,
    };
    let outcome = match (&done, &error) {
        (Done::Transferred, _) => Outcome::Transferred,
        (Done::WentElsewhere(_), _) => Outcome::WentElsewhere,
        (Done::Returned, _) => Outcome::Returned,
        (Done::No, Some(_)) => Outcome::Failed,
        (Done::No, None) => Outcome::TimedOut,
    };
    let samples_per_replica = (rounds as f64 / replicas.max(1) as f64).max(1.0);
    Waited {
        outcome,
        new_leader,
        term_after,
        leaderless_window_ms: window.map(ms),
        action_ms: action_result.map(|(_, d)| ms(d)),
        total_ms: ms(total),
        rounds,
        round_ms: (ms(total) / samples_per_replica * 10.0).round() / 10.0,
        error,
        last_round: views,
    }
}

/// Sends the transfer request to its replica; an answer outside `ok_status` is a failure
/// whose message comes from the answer (etcd: `etcdserver: not leader`).
pub async fn send_transfer(
    transport: &Transport,
    target: &ClusterTarget,
    call: &TransferCall,
    limit: Duration,
) -> Result<(), String> {
    let pod = target
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(call.pod.as_str()))
        .ok_or_else(|| format!("pod {} is no longer part of the cluster", call.pod))?;
    if let Some(port) = &call.nats_port {
        // Not HTTP: over a TCP stream (a port-forward when replicas are reached by pods/proxy).
        let ep =
            endpoint(&target.profile, pod, Some(port)).map_err(|e| format!("{}: {e}", call.pod))?;
        // The stepdown is answered in ~0.1 s; a user outside the system account gets no
        // reply at all, so do not wait the whole limit for one.
        let limit = limit.min(Duration::from_secs(5));
        let tls = crate::nats::NatsTls::to(transport.tls(), &ep);
        let (host, port, bridge) = crate::transport::dial(transport, ep)
            .await
            .map_err(|e| format!("{}: {e}", call.pod))?;
        let result = crate::nats::request(
            (&host, port),
            &call.path,
            call.body.as_deref(),
            limit,
            transport.vars(),
            &tls,
        )
        .await
        .map_err(|e| format!("{}: {e}", call.pod));
        if let Some(b) = bridge {
            b.abort();
        }
        return result;
    }
    let ep = endpoint(&target.profile, pod, None).map_err(|e| format!("{}: {e}", call.pod))?;
    let ans = transport
        .call(&ep, &call.request(), limit)
        .await
        .map_err(|e| format!("{} {} {}: {e}", call.method, call.path, call.pod))?;
    if call.ok_status.contains(&ans.status) {
        return Ok(());
    }
    if let (404, Some(fallback)) = (ans.status, &call.tcp_fallback) {
        // No HTTP command API: the same word over the client port (raw TCP, through a
        // port-forward when replicas are reached by pods/proxy).
        let ep = endpoint(&target.profile, pod, Some(&fallback.port))
            .map_err(|e| format!("{}: {e}", call.pod))?;
        return crate::transport::four_letter_word(
            &transport.for_tcp(),
            &ep,
            &fallback.word,
            limit,
        )
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "{} has no command API (HTTP 404), and `{}` over its client port failed: {e}",
                call.pod, fallback.word
            )
        });
    }
    Err(refusal(call, &ans))
}

/// "POD refused the transfer: HTTP 403: <its message> (<the profile's hint for 403>)".
pub fn refusal(call: &TransferCall, ans: &HttpAnswer) -> String {
    let hint = call
        .hints
        .get(&ans.status)
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    format!(
        "{} refused the transfer: HTTP {}: {}{hint}",
        call.pod,
        ans.status,
        refusal_message(ans, call.error_json.as_deref())
    )
}

/// The error message in a refusal, at the profile's JSON pointer, else the body's first line.
pub fn refusal_message(ans: &HttpAnswer, pointer: Option<&str>) -> String {
    pointer
        .and_then(|p| {
            serde_json::from_slice::<serde_json::Value>(&ans.body)
                .ok()?
                .pointer(p)?
                .as_str()
                .map(crate::model::text::message)
        })
        .unwrap_or_else(|| ans.snippet())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keeper_refusal_says_what_to_do() {
        let keeper = crate::profile::Catalog::builtin()
            .require("clickhouse-keeper")
            .unwrap()
            .clone();
        let t = keeper.transfer.unwrap();
        for req in [t.untargeted.unwrap(), t.targeted.unwrap()] {
            let call = TransferCall {
                pod: "keeper-0".into(),
                method: "GET".into(),
                path: req.request.path.clone(),
                body: None,
                headers: req.request.headers.clone(),
                ok_status: req.ok_status.clone(),
                error_json: req.error_json.clone(),
                hints: req.hints.clone(),
                synchronous: false,
                nats_port: None,
                tcp_fallback: None,
            };
            // Recorded shape of the older handler's answer (shared reference).
            let forbidden = HttpAnswer::new(
                403,
                r#"{"message":"Command is disabled. Check server settings."}"#,
            );
            assert_eq!(
                refusal(&call, &forbidden),
                "keeper-0 refused the transfer: HTTP 403: Command is disabled. Check server settings. (the command is not allowed: add ydld and rqld to keeper_server.four_letter_word_allow_list)"
            );
            assert!(refusal(&call, &HttpAnswer::new(404, "")).contains("no command API"));
        }
    }

    #[test]
    fn etcd_refusals_read_their_message() {
        // Recorded from etcd 3.4.23 (shared reference): a follower, and an unknown target.
        let not_leader = HttpAnswer::new(
            412,
            r#"{"error":"etcdserver: not leader","message":"etcdserver: not leader","code":9}"#,
        );
        assert_eq!(
            refusal_message(&not_leader, Some("/message")),
            "etcdserver: not leader"
        );
        let bad = HttpAnswer::new(
            412,
            r#"{"error":"etcdserver: bad leader transferee","message":"etcdserver: bad leader transferee","code":9}"#,
        );
        assert_eq!(
            refusal_message(&bad, Some("/message")),
            "etcdserver: bad leader transferee"
        );
        let text = HttpAnswer::new(404, "404 page not found\n");
        assert_eq!(
            refusal_message(&text, Some("/message")),
            "404 page not found"
        );
    }
}

/// The wait against a scripted cluster on tokio's paused clock: what each replica says is a
/// function of the (virtual) time it is asked, and the request's answer comes when the script
/// says. The cluster is unkind: the old leader keeps claiming, terms jump, the request fails
/// while leadership moves anyway, a deleted leader's last answer arrives late.
#[cfg(test)]
mod wait_tests {
    use super::*;
    use crate::actions::HandoverFailure;
    use crate::model::Role;

    const PODS: [&str; 3] = ["m-0", "m-1", "m-2"];

    fn says(pod: &str, role: Role, leader: Option<&str>, term: u64) -> ReplicaView {
        ReplicaView {
            pod: pod.into(),
            role: Some(role),
            leader: leader.map(Into::into),
            has_leader: Some(leader.is_some()),
            term: Some(term),
            error: None,
        }
    }

    /// Every member agrees that `leader` leads in `term`.
    fn led_by(pod: &str, leader: &str, term: u64) -> ReplicaView {
        let role = if pod == leader {
            Role::Leader
        } else {
            Role::Follower
        };
        says(pod, role, Some(leader), term)
    }

    /// Three members, m-0 leading in term 5; a transfer to `target` (None: to anyone).
    fn watch(target: Option<&str>, may_vanish: bool) -> Watch {
        Watch {
            views: PODS.iter().map(|p| led_by(p, "m-0", 5)).collect(),
            members: 3,
            expect: Expect {
                old_leader: "m-0".into(),
                target: target.map(Into::into),
                old_leader_may_vanish: may_vanish,
            },
            every: Duration::from_millis(100),
        }
    }

    /// Runs the wait (10 s at most) over `script(pod, asked at)`; each answer takes `answer`
    /// to arrive, and the request answers `result` after `request`.
    async fn run(
        w: Watch,
        script: impl Fn(&str, Duration) -> ReplicaView,
        answer: impl Fn(&str) -> Duration,
        request: Duration,
        result: Result<(), String>,
    ) -> Waited {
        let t0 = Instant::now();
        let opts = WaitOptions::new(Duration::from_secs(10), Duration::from_secs(5));
        let pods: Vec<String> = w.views.iter().map(|v| v.pod.clone()).collect();
        let poll = |i: usize| {
            let v = script(&pods[i], t0.elapsed());
            let takes = answer(&pods[i]);
            async move {
                tokio::time::sleep(takes).await;
                v
            }
        };
        let action = async move {
            tokio::time::sleep(request).await;
            result
        };
        wait_with(w, &opts, poll, action).await
    }

    /// m-0 leads in term 5 until `at`, then every member agrees on `leader` in `term`.
    fn moves_at(
        at: Duration,
        leader: &'static str,
        term: u64,
    ) -> impl Fn(&str, Duration) -> ReplicaView {
        move |p, now| {
            if now >= at {
                led_by(p, leader, term)
            } else {
                led_by(p, "m-0", 5)
            }
        }
    }

    fn quick(_: &str) -> Duration {
        Duration::from_millis(10)
    }

    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_transfer_is_done_when_all_agree_on_the_target_and_the_old_leader_follows() {
        let w = run(
            watch(Some("m-1"), false),
            moves_at(SEC, "m-1", 6),
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), true), Ok(()));
        assert_eq!(w.new_leader.as_deref(), Some("m-1"));
        assert_eq!(w.term_after, Some(6));
    }

    #[tokio::test(start_paused = true)]
    async fn an_old_leader_that_still_claims_keeps_the_handover_unfinished() {
        // The others follow m-1 from 1 s; m-0 says it leads until 3 s.
        let w = run(
            watch(Some("m-1"), false),
            |p, at| match p {
                "m-0" if at < 3 * SEC => led_by(p, "m-0", 5),
                _ if at >= SEC => led_by(p, "m-1", 6),
                _ => led_by(p, "m-0", 5),
            },
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), true), Ok(()));
        let old = w.last_round.iter().find(|v| v.pod == "m-0").unwrap();
        assert_eq!(old.role, Some(Role::Follower), "done only once m-0 follows");
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_that_jumped_past_the_transfer_is_an_election() {
        let w = run(
            watch(Some("m-1"), false),
            moves_at(SEC, "m-1", 8),
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(
            w.verdict(Some(5), true),
            Err(HandoverFailure::TermJumped {
                to: "m-1".into(),
                by: 3
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_taken_by_another_member_is_not_the_transfer() {
        let w = run(
            watch(Some("m-1"), false),
            moves_at(SEC, "m-2", 6),
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(
            w.verdict(Some(5), true),
            Err(HandoverFailure::WentElsewhere { to: "m-2".into() })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_steps_down_and_is_chosen_again_returned() {
        // From 1 s nobody leads (m-0 follows no one); from 2 s m-0 leads again, term 7.
        let w = run(
            watch(None, false),
            |p, at| {
                if at >= 2 * SEC {
                    led_by(p, "m-0", 7)
                } else if at >= SEC {
                    says(p, Role::Follower, None, 6)
                } else {
                    led_by(p, "m-0", 5)
                }
            },
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), false), Err(HandoverFailure::Returned));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_request_that_moved_nothing_fails_without_waiting_out_the_timeout() {
        let w = run(
            watch(Some("m-1"), false),
            |p, _| led_by(p, "m-0", 5),
            quick,
            SEC / 2,
            Err("etcdserver: not leader".into()),
        )
        .await;
        assert_eq!(
            w.verdict(Some(5), true),
            Err(HandoverFailure::Failed("etcdserver: not leader".into()))
        );
        assert!(
            w.total_ms < 10_000.0,
            "the wait stops after a short grace, not at --timeout"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_whose_leadership_moved_anyway_is_judged_by_the_members() {
        // The request's connection broke at 0.2 s, but the transfer happened at 1 s.
        let w = run(
            watch(Some("m-1"), false),
            moves_at(SEC, "m-1", 6),
            quick,
            SEC / 5,
            Err("connection reset".into()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), true), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cluster_that_never_moves_times_out() {
        let w = run(
            watch(Some("m-1"), false),
            |p, _| led_by(p, "m-0", 5),
            quick,
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), true), Err(HandoverFailure::TimedOut));
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_never_answers_holds_up_no_other_replicas_samples() {
        // m-2 hangs for the whole wait; m-0 and m-1 (a majority) agree on m-1 from 1 s.
        let w = run(
            watch(Some("m-1"), false),
            moves_at(SEC, "m-1", 6),
            |p| {
                if p == "m-2" {
                    Duration::from_secs(3600)
                } else {
                    Duration::from_millis(10)
                }
            },
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), true), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_leaders_late_answer_from_before_its_deletion_does_not_count() {
        // An election by deletion: the pod is gone at 1 s. m-0's answer asked at 0 s says it
        // leads, and arrives at 4 s; the others agree on m-1 from 2 s. That late answer must
        // not be read as the replacement claiming leadership back.
        let w = run(
            watch(None, true),
            |p, at| match p {
                "m-0" if at < SEC => led_by(p, "m-0", 5),
                "m-0" => says(p, Role::Follower, Some("m-1"), 6),
                _ if at >= 2 * SEC => led_by(p, "m-1", 6),
                _ => says(p, Role::Follower, None, 5),
            },
            |p| {
                if p == "m-0" {
                    Duration::from_secs(4)
                } else {
                    Duration::from_millis(10)
                }
            },
            SEC,
            Ok(()),
        )
        .await;
        assert_eq!(w.verdict(Some(5), false), Ok(()));
        assert_eq!(w.new_leader.as_deref(), Some("m-1"));
    }
}
