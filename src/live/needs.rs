//! What a drain or restart will ask of a NATS cluster, checked before it changes anything: a
//! user for every account that must send a stepdown (the system account for the meta leader,
//! each stream's account for its leaders), each confirmed by a server over the route the
//! requests will take (the system user by a request only the system account is answered, an
//! account's user by one of its streams), and the right to port-forward when the requests go
//! through the API server. Who must send is decided by [`crate::plan::groups::senders`]; this
//! module asks.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;

use crate::model::ClusterObservation;
use crate::nats::{self, Who};
use crate::observe::endpoint;
use crate::plan::groups::{leader_pod, senders};
use crate::preflight::{self, Need};
use crate::survey::Surveyor;
use crate::transport::{dial, Transport};

/// How long a server has to answer each question (the connection, then the request).
const ASK_WITHIN: Duration = Duration::from_secs(5);

/// What a run's NATS requests need: the API rights (port-forward), and what stops it: each
/// credential missing or refused, or a right missing, with what it is for.
#[derive(Debug, Clone, Default)]
pub struct NatsNeeds {
    pub rights: Vec<Need>,
    pub missing: Vec<String>,
}

impl NatsNeeds {
    /// What stops `command` of `cluster` before it changes anything, if anything does.
    pub fn stop(&self, command: &str, cluster: &str) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        Some(format!(
            "{command} could not send {cluster}'s NATS requests: {}",
            self.missing.join("; ")
        ))
    }
}

/// The needs of a run that takes the pods `acting_on` out of the cluster `obs` looked at.
/// Nothing for a system without NATS requests (no credentials are read, nothing is asked).
pub async fn nats_requests(
    surveyor: &Surveyor,
    obs: &ClusterObservation,
    acting_on: &BTreeSet<String>,
) -> Result<NatsNeeds> {
    let who_for = senders(obs, acting_on);
    if who_for.is_empty() {
        return Ok(NatsNeeds::default());
    }
    let mut out = NatsNeeds::default();
    let transport = match surveyor.transport_for(&obs.target).await {
        Ok(t) => t,
        Err(e) => {
            out.missing.push(format!(
                "the cluster's credentials could not be read: {e:#}"
            ));
            return Ok(out);
        }
    };
    if transport.forwards_tcp() {
        let ns = &obs.target.namespace;
        out.rights = ["get", "create"]
            .into_iter()
            .map(|verb| {
                Need::new(
                    verb,
                    "pods/portforward",
                    "send NATS requests through a port-forward (or --via direct)",
                )
                .in_namespace(ns)
            })
            .collect();
        // Without them no server can be asked: said as the right it is, not as a user.
        if let Ok(refused) = preflight::missing(&surveyor.conn.client, &out.rights).await {
            if !refused.is_empty() {
                out.missing.extend(
                    refused
                        .iter()
                        .map(|n| format!("forbidden: this user may not {}", n.describe())),
                );
                return Ok(out);
            }
        }
    }
    let vars = transport.vars();
    let hint = if vars.env {
        String::new()
    } else {
        " (this run reads no environment: pass --credentials-from-env or --credentials-file, or name a credentials Secret)".to_string()
    };
    for (account, what) in who_for {
        let for_what = what.join(", ");
        let who = account.clone().map_or(Who::System, Who::Account);
        if let Some(why) = nats::missing_credentials(vars, &who) {
            out.missing.push(format!(
                "{why}; read from {}{hint} (for {for_what})",
                vars.describe()
            ));
            continue;
        }
        let asked = match &account {
            None => confirm(&transport, obs, &who, None).await,
            Some(a) => confirm(&transport, obs, &who, stream_of(obs, a).as_deref()).await,
        };
        if let Err(why) = asked {
            out.missing.push(format!(
                "the {} user from {}: {why} (for {for_what})",
                who.prefix(),
                vars.describe()
            ));
        }
    }
    Ok(out)
}

/// A stream of `account`, as any server lists it (a consumer's second name is its stream).
fn stream_of(obs: &ClusterObservation, account: &str) -> Option<String> {
    obs.replicas
        .iter()
        .filter_map(|r| r.groups.as_ref()?.as_ref().ok())
        .flatten()
        .find(|g| g.names.first().map(String::as_str) == Some(account))
        .and_then(|g| g.names.get(1).cloned())
}

/// The server to ask: the leader (the stepdown goes to it), else any that answered its check.
fn server_to_ask(obs: &ClusterObservation) -> Option<&Pod> {
    let leaders = leader_pod(obs);
    let named = |r: &&crate::model::ReplicaObservation| {
        r.pod
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| leaders.contains(n))
    };
    obs.replicas
        .iter()
        .find(|r| named(r) && r.healthy())
        .or_else(|| obs.replicas.iter().find(|r| r.healthy()))
        .or_else(|| obs.replicas.iter().find(named))
        .map(|r| &r.pod)
}

/// `who`'s user, asked by a server over the route and port the stepdowns take: the system
/// user by `$SYS.REQ.SERVER.PING`, an account's user by its `stream` (None: the connection
/// alone, which checks the password or .creds).
async fn confirm(
    transport: &Transport,
    obs: &ClusterObservation,
    who: &Who,
    stream: Option<&str>,
) -> Result<(), String> {
    let target = &obs.target;
    let port = match who {
        Who::System => target
            .profile
            .transfer
            .as_ref()
            .and_then(|t| t.targeted.as_ref().or(t.untargeted.as_ref()))
            .and_then(|r| r.nats.as_ref())
            .map(|n| n.port.clone()),
        Who::Account(_) => target.profile.groups.as_ref().and_then(|g| {
            g.kinds
                .values()
                .find_map(|k| k.stepdown.as_ref().map(|s| s.nats.port.clone()))
        }),
    };
    let Some(port) = port else {
        return Ok(());
    };
    let pod = server_to_ask(obs).ok_or("no server answered the survey, so none can be asked")?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ep = endpoint(&target.profile, pod, Some(&port))
        .map_err(|e| format!("could not ask {name}: {e}"))?;
    let (host, port, bridge) = dial(transport, ep)
        .await
        .map_err(|e| format!("could not ask {name}: {e}"))?;
    // The bridge task ends with this function, however it ends (a dropped future included).
    let _bridge = bridge.map(AbortOnDrop);
    let client = nats::connect(&host, port, ASK_WITHIN, transport.vars(), who)
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    let answer = match (who, stream) {
        (Who::System, _) => nats::confirm_system_user(&client, ASK_WITHIN).await,
        (Who::Account(_), Some(s)) => nats::confirm_stream(&client, s, ASK_WITHIN).await,
        (Who::Account(_), None) => Ok(()),
    };
    let _ = client.drain().await;
    answer.map_err(|e| format!("{name} says: {e}"))
}

/// A spawned task aborted when this goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
