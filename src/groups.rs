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
use crate::plan::groups::{still_led, GroupCall, GroupMoves, GroupSkip};
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
        match send_all(transport, target, pod, &who, &calls, limit, deadline).await {
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

/// One connection as `who` to the server (through a port-forward when replicas are reached
/// by pods/proxy), every call on it.
async fn send_all(
    transport: &Transport,
    target: &ClusterTarget,
    pod: &Pod,
    who: &Who,
    calls: &[&GroupCall],
    limit: Duration,
    deadline: Instant,
) -> Result<Vec<Result<(), String>>, String> {
    if Instant::now() >= deadline {
        return Err("not sent: the time for moving the groups ran out".into());
    }
    let port = &calls[0].port;
    let ep = endpoint(&target.profile, pod, Some(port)).map_err(|e| e.to_string())?;
    let tls = nats::NatsTls::to(transport.tls(), &ep);
    let (host, port, bridge) = dial(transport, ep).await?;
    let result = async {
        let client = nats::connect(&host, port, limit, transport.vars(), who, &tls).await?;
        let mut results = vec![];
        for c in calls {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                results.push(Err(
                    "not sent: the time for moving the groups (--timeout) ran out".to_string(),
                ));
                continue;
            }
            results.push(
                nats::ask(
                    &client,
                    &c.subject,
                    c.body.as_deref(),
                    limit.min(left),
                    transport.vars(),
                    who,
                )
                .await,
            );
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
