//! What a drain or restart will ask of a NATS cluster, checked before it changes anything: a
//! user for every account that must send a stepdown (the system account for the meta leader,
//! each stream's account for its streams' and consumers' leaders), each confirmed by a server
//! over the route and port the stepdowns take: the account it is in and what it may publish
//! (`$SYS.REQ.USER.INFO`), the system account by a request only it is answered; and the right
//! to port-forward when the requests go through the API server. Who must send is decided by
//! [`crate::plan::groups::senders`]; this module asks.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;

use crate::model::ClusterObservation;
use crate::nats::{self, Who};
use crate::observe::endpoint;
use crate::plan::groups::{credentials_for_transfer, leader_pod, sample_stepdown, senders};
use crate::preflight::{self, Need};
use crate::survey::Surveyor;
use crate::transport::{dial, Transport};

/// How long a server has to answer each question (the connection, then the request).
const ASK_WITHIN: Duration = Duration::from_secs(5);

/// What a run's requests need (the leader's transfer, NATS's): the API rights (port-forward),
/// and what stops it: each credential missing or refused, or a right missing, with what it
/// is for.
#[derive(Debug, Clone, Default)]
pub struct RequestNeeds {
    pub rights: Vec<Need>,
    pub missing: Vec<String>,
}

impl RequestNeeds {
    /// What stops `command` of `cluster` before it changes anything, if anything does.
    pub fn stop(&self, command: &str, cluster: &str) -> Option<String> {
        if self.missing.is_empty() {
            return None;
        }
        Some(format!(
            "{command} could not send {cluster}'s requests: {}",
            self.missing.join("; ")
        ))
    }
}

/// The needs of a run that takes the pods `acting_on` out of the cluster `obs` looked at:
/// the credentials its leader's transfer is sent with, and what its NATS requests need.
/// Nothing else for a system without NATS requests (nothing is asked).
pub async fn requests_needs(
    surveyor: &Surveyor,
    obs: &ClusterObservation,
    acting_on: &BTreeSet<String>,
) -> Result<RequestNeeds> {
    let mut out = RequestNeeds::default();
    if let Some(why) = credentials_for_transfer(obs, acting_on) {
        out.missing.push(why);
        return Ok(out);
    }
    let who_for = senders(obs, acting_on);
    if who_for.is_empty() {
        return Ok(out);
    }
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
        " (pass --credentials-from-env, with the variables in your environment or --credentials-file FILE, or name a labelled credentials Secret on the StatefulSet)".to_string()
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
        if let Err(why) = confirm(&transport, obs, &who).await {
            out.missing.push(format!(
                "the {} user from {}: {why} (for {for_what})",
                who.prefix(),
                vars.describe()
            ));
        }
    }
    Ok(out)
}

/// The servers to ask, best first: the leader (the meta leader's stepdown goes to it), then
/// any that answered its check; none that is going away.
fn servers_to_ask(obs: &ClusterObservation) -> Vec<&Pod> {
    let leaders = leader_pod(obs);
    let leads = |r: &crate::model::ReplicaObservation| {
        r.pod
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| leaders.contains(n))
    };
    let mut live: Vec<&crate::model::ReplicaObservation> = obs
        .replicas
        .iter()
        .filter(|r| r.healthy() && r.pod.metadata.deletion_timestamp.is_none())
        .collect();
    live.sort_by_key(|r| !leads(r));
    live.into_iter().map(|r| &r.pod).collect()
}

/// `who`'s user, asked by a server over the route and port its stepdowns take (the next
/// server when one cannot be reached; never more than two). The server says which account
/// the user is in and what it may publish (`$SYS.REQ.USER.INFO`); the system account is also
/// confirmed by a request only it is answered (`$SYS.REQ.SERVER.PING`); an account's user by
/// one of its streams when the server does not say.
async fn confirm(transport: &Transport, obs: &ClusterObservation, who: &Who) -> Result<(), String> {
    let target = &obs.target;
    let (port, sample) = match who {
        Who::System => {
            let Some(nats) = target
                .profile
                .transfer
                .as_ref()
                .and_then(|t| t.targeted.as_ref().or(t.untargeted.as_ref()))
                .and_then(|r| r.nats.as_ref())
            else {
                return Ok(());
            };
            (nats.port.clone(), Some((None, nats.subject.clone())))
        }
        Who::Account(a) => {
            let sample = sample_stepdown(obs, a);
            let port = target.profile.groups.as_ref().and_then(|g| {
                let kind = sample.as_ref().map(|(g, _)| g.kind.as_str());
                g.kinds
                    .iter()
                    .filter(|(k, _)| kind.is_none_or(|want| want == k.as_str()))
                    .find_map(|(_, k)| k.stepdown.as_ref().map(|s| s.nats.port.clone()))
            });
            let Some(port) = port else {
                return Ok(());
            };
            (
                port,
                sample.map(|(g, subject)| (g.names.get(1).cloned(), subject)),
            )
        }
    };
    let mut last = "no server answered the survey, so none can be asked".to_string();
    for pod in servers_to_ask(obs).into_iter().take(2) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        match ask(transport, &target.profile, pod, &port, who, sample.as_ref()).await {
            Asked::Answered(result) => return result.map_err(|e| format!("{name} says: {e}")),
            Asked::Unreachable(e) => last = format!("could not ask {name}: {e}"),
        }
    }
    Err(last)
}

/// How asking one server ended: its answer, or no connection to it.
enum Asked {
    Answered(Result<(), String>),
    Unreachable(String),
}

async fn ask(
    transport: &Transport,
    profile: &crate::profile::Profile,
    pod: &Pod,
    port: &crate::profile::PortSpec,
    who: &Who,
    sample: Option<&(Option<String>, String)>,
) -> Asked {
    let ep = match endpoint(profile, pod, Some(port)) {
        Ok(ep) => ep,
        Err(e) => return Asked::Unreachable(e.to_string()),
    };
    let tls = nats::NatsTls::to(transport.tls(), &ep);
    let (host, port, bridge) = match dial(transport, ep).await {
        Ok(d) => d,
        Err(e) => return Asked::Unreachable(e),
    };
    // The bridge task ends with this function, however it ends (a dropped future included).
    let _bridge = bridge.map(AbortOnDrop);
    let client = match nats::connect(&host, port, ASK_WITHIN, transport.vars(), who, &tls).await {
        Ok(c) => c,
        // A refused login is an answer, and so is TLS's failure (the leader, asked first,
        // is where the meta stepdown must go); anything else, no connection.
        Err(nats::ConnectError::Refused(e) | nats::ConnectError::Tls(e)) => {
            return Asked::Answered(Err(e))
        }
        Err(nats::ConnectError::Unreachable(e)) => return Asked::Unreachable(e),
    };
    let answer = judge(&client, who, sample).await;
    let _ = client.drain().await;
    Asked::Answered(answer)
}

/// The user, judged by what the server says of it.
async fn judge(
    client: &async_nats::Client,
    who: &Who,
    sample: Option<&(Option<String>, String)>,
) -> Result<(), String> {
    let info = nats::user_info(client, ASK_WITHIN).await?;
    if let (Some(i), Some((_, subject))) = (&info, sample) {
        if !i.may_publish(subject) {
            return Err(format!(
                "it may not publish to {subject}, which the run will send"
            ));
        }
    }
    match (who, &info) {
        (Who::System, Some(i)) if !i.may_publish("$SYS.REQ.SERVER.PING") => {
            // Its permissions keep it from the one question only the system account is
            // answered; the stepdown itself is allowed: said by the run if refused.
            Ok(())
        }
        (Who::System, _) => nats::confirm_system_user(client, ASK_WITHIN).await,
        (Who::Account(a), Some(i)) if !i.in_account(a) => Err(format!(
            "it is a user of account {}, not of {a}",
            i.account_name.as_deref().unwrap_or(&i.account)
        )),
        (Who::Account(_), Some(_)) => Ok(()),
        (Who::Account(_), None) => match sample.and_then(|(stream, _)| stream.as_deref()) {
            Some(stream) => nats::confirm_stream(client, stream, ASK_WITHIN).await,
            None => Ok(()),
        },
    }
}

/// A spawned task aborted when this goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
