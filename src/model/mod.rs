//! The data floor: the types that observation produces and that assessment and planning
//! consume. Types and their plain accessors only: this module imports nothing that does I/O
//! (no Kubernetes client, no transport, no runtime), so everything pure can stand on it.
//! `tests/offline/architecture.rs` checks that mechanically.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

pub mod profile;
pub mod text;

pub use profile::{Profile, Scheme};

// --- what Kubernetes says --------------------------------------------------------------------

/// The Kubernetes objects one survey looks at, read once.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub statefulsets: Vec<StatefulSet>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub slices: Vec<EndpointSlice>,
    pub pdbs: Vec<PodDisruptionBudget>,
    /// None when the user may not list nodes: cordon state is then unknown.
    pub nodes: Option<Vec<Node>>,
}

/// The annotation of its ValidatingWebhookConfiguration in which the gate says the mode it
/// runs in (`enforce`, `warn`, `audit`: `gate serve --mode`), for `status` to show.
pub const GATE_MODE_ANNOTATION: &str = "kubectl-raft.io/gate-mode";

/// The name the gate reports its Events under (their `reportingController`).
pub const GATE_COMPONENT: &str = "kubectl-raft-gate";

/// How the gate's webhook is known in a ValidatingWebhookConfiguration: its name ends so
/// (docs/gate.yaml: `evictions.gate.kubectl-raft.io`).
pub const GATE_WEBHOOK_SUFFIX: &str = "gate.kubectl-raft.io";

/// What says whether the eviction gate decides a namespace's evictions, read for `status`.
/// Each Err says why it could not be read (a right the user lacks).
#[derive(Debug, Clone)]
pub struct GateView {
    pub webhooks: Result<Vec<ValidatingWebhookConfiguration>, String>,
    /// Each namespace's labels.
    pub namespaces: BTreeMap<String, Result<BTreeMap<String, String>, String>>,
    /// The gate's Warning Events (its refusals) in each namespace.
    pub refusals: BTreeMap<String, Result<Vec<Event>, String>>,
    /// The ready endpoints of each Service a gate webhook calls, by NAMESPACE/NAME.
    pub ready_endpoints: BTreeMap<String, Result<u32, String>>,
}

/// What the user asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// The StatefulSet to look at (every recognised one when None).
    pub name: Option<String>,
    /// The person running the command typed that name (`status NAME`, `yield NAME`,
    /// `restart NAME`): the cluster then gets the user's own credentials (the environment,
    /// `--credentials-file`). A verb that looks at a cluster again by name for its own reasons
    /// (drain's clusters, `restart -l`'s matches) leaves it false: a name it found is not a
    /// name the user gave.
    pub named: bool,
    /// Only clusters with a replica on one of these nodes (none: every cluster).
    pub nodes: Vec<String>,
    pub selector: Option<String>,
    pub system: Option<String>,
}

/// What owns the replicas of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OwnerKind {
    StatefulSet,
    /// Pods chosen with `-l SELECTOR`.
    Selector,
}

impl OwnerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::StatefulSet => "StatefulSet",
            OwnerKind::Selector => "Selector",
        }
    }
}

/// One Raft cluster: its pods (ordered by ordinal) and the profile that reads them.
#[derive(Debug, Clone)]
pub struct ClusterTarget {
    pub namespace: String,
    pub name: String,
    pub owner_kind: OwnerKind,
    pub profile: Profile,
    pub desired_replicas: u32,
    pub pods: Vec<Pod>,
    /// The Secret the annotation kubectl-raft.io/credentials-secret names (the name only).
    pub credentials_secret: Option<String>,
    /// The Secret the annotation kubectl-raft.io/tls-secret names (the name only).
    pub tls_secret: Option<String>,
    /// What the StatefulSet's owner lets the eviction gate assume of it (the annotation
    /// kubectl-raft.io/gate-assume, as written): read by the gate only, never by a verb.
    pub gate_assume: Option<String>,
    /// The user named this cluster (`Selection::named`): the user's own credentials (the
    /// environment, `--credentials-file`) go to it; to others only with --credentials-from-env.
    pub named: bool,
}

pub fn labels(p: &Pod) -> &BTreeMap<String, String> {
    p.labels()
}

pub fn pod_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

// --- what a replica says ---------------------------------------------------------------------

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub namespace: String,
    pub pod: String,
    pub pod_ip: Option<String>,
    pub port: u16,
    pub scheme: Scheme,
    /// The names the replica's TLS certificate may carry, most specific first
    /// (`tls::member_names`): its DNS names, its address.
    pub names: Vec<String>,
}

/// One HTTP answer from a replica, body already capped in size.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl HttpAnswer {
    #[cfg(test)]
    pub fn new(status: u16, body: &str) -> Self {
        HttpAnswer {
            status,
            body: body.as_bytes().to_vec(),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body shortened to one printable line, for messages (`text::one_line`).
    pub fn snippet(&self) -> String {
        let head = &self.body[..self.body.len().min(4096)];
        text::one_line(&String::from_utf8_lossy(head), 120)
    }
}

/// Answers larger than this are cut off and reported: health endpoints answer in bytes.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The most any profile may raise a request's answer cap to (`max_bytes`): NATS's listing of
/// every stream and consumer needs 64 MiB; more would let one replica exhaust the memory of
/// the admin's machine.
pub const MAX_ANSWER_BYTES_CEILING: usize = 64 << 20;

/// Why a request to a replica got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// No answer within the time limit (a hung or stopped process).
    Timeout(Duration),
    /// The connection was refused, closed, or could not be made.
    Unreachable(String),
    /// RBAC refused the proxy request.
    Forbidden(String),
    /// TLS failed in a way the user must act on (unknown CA, name mismatch, a client
    /// certificate required or refused, expired): said in one line with what to do.
    Tls(String),
    /// The answer exceeded the request's cap (`HttpRequest::answer_limit`), in bytes.
    TooLarge(usize),
    /// The request kept being refused for load with the API server's `Status` body (HTTP 429,
    /// priority and fairness); a replica can send the same body, so this is not proof. The
    /// Retry-After the API server sent with it, if any, is the retry loop's wait.
    Throttled {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Anything else: the API server failed, the pod has no IP, ...
    Other(String),
}

impl ProbeError {
    /// What kind of failure, in a word, without its message (which may be a replica's text).
    pub fn kind(&self) -> &'static str {
        match self {
            ProbeError::Timeout(_) => "timeout",
            ProbeError::Unreachable(_) => "unreachable",
            ProbeError::Forbidden(_) => "forbidden",
            ProbeError::Tls(_) => "tls",
            ProbeError::TooLarge(_) => "too large",
            ProbeError::Throttled { .. } => "throttled",
            ProbeError::Other(_) => "error",
        }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Timeout(d) => write!(f, "no answer within {}", human_duration(*d)),
            ProbeError::Unreachable(m) => write!(f, "unreachable: {m}"),
            ProbeError::Forbidden(m) => write!(f, "forbidden: {m}"),
            ProbeError::Tls(m) => write!(f, "TLS: {m}"),
            ProbeError::TooLarge(limit) => write!(
                f,
                "the answer is larger than {limit} bytes (is this the system's health port? a profile's request can raise its max_bytes)"
            ),
            ProbeError::Throttled {
                message,
                retry_after,
            } => {
                write!(
                    f,
                    "refused for load (HTTP 429 in the API server's words, from it or from the replica): {message}"
                )?;
                match retry_after {
                    Some(d) => write!(f, " (retry after {}s)", d.as_secs()),
                    None => Ok(()),
                }
            }
            ProbeError::Other(m) => write!(f, "{m}"),
        }
    }
}

/// The leaderless window of a handover as every verb reports it (`leaderless window 103ms`),
/// or that no poll fell into the gap, with the polls' spacing where known: the resolution
/// below which a window goes unseen.
pub fn leaderless_window(window_ms: Option<f64>, polled_every_ms: Option<f64>) -> String {
    let ms = |m: f64| human_duration(Duration::from_secs_f64(m.max(0.0) / 1000.0));
    match (window_ms, polled_every_ms) {
        (Some(w), _) => format!("leaderless window {}", ms(w)),
        (None, Some(r)) => format!("leaderless window none observed (polled every {})", ms(r)),
        (None, None) => "leaderless window none observed".into(),
    }
}

/// `250ms`, `2s`, `1.50s`: durations the way kubectl prints them.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.2}s", d.as_secs_f64())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Observer,
    Unknown,
}

impl Role {
    pub fn parse(s: &str) -> Role {
        match s.trim().to_ascii_lowercase().as_str() {
            // A standalone server is the leader of a cluster of one.
            "leader" | "standalone" | "primary" | "active" => Role::Leader,
            "follower" | "replica" | "standby" => Role::Follower,
            "candidate" | "precandidate" | "pre-candidate" | "looking" => Role::Candidate,
            "learner" | "non-voter" | "nonvoter" => Role::Learner,
            "observer" | "read-only" => Role::Observer,
            _ => Role::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Observer => "observer",
            Role::Unknown => "unknown",
        }
    }

    /// Whether the replica votes in elections (and so counts towards quorum).
    pub fn is_voter(self) -> bool {
        !matches!(self, Role::Learner | Role::Observer)
    }

    /// A role the replica reported that is not leader: it has stepped down, or never led.
    pub fn is_known_non_leader(self) -> bool {
        !matches!(self, Role::Leader | Role::Unknown)
    }
}

/// What one replica says about Raft.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RaftFacts {
    pub role: Option<Role>,
    pub member_id: Option<String>,
    pub leader_id: Option<String>,
    pub has_leader: Option<bool>,
    pub term: Option<u64>,
    pub commit_index: Option<u64>,
    pub applied_index: Option<u64>,
    pub leader_commit_index: Option<u64>,
    pub learner: Option<bool>,
    pub version: Option<String>,
    /// How long ago this member last heard from its leader, in milliseconds (hashicorp/raft's
    /// `last_contact`: 0 on the leader; `never` is `u64::MAX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_contact_ms: Option<u64>,
    /// Whether this member says it is in step with its leader now (ZooKeeper's zabstate
    /// `broadcast`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<bool>,
}

/// The outcome of a health or readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOutcome {
    pub ok: bool,
    pub detail: String,
}

/// One of the other Raft groups a server takes part in (a NATS stream or consumer), as that
/// server lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Group {
    pub kind: String,
    /// Its names, outermost first: account, stream[, consumer].
    pub names: Vec<String>,
    /// The member id of its leader, if it has one.
    pub leader: Option<String>,
}

/// The groups `member` leads, each once however many servers list it, in a stable order.
pub fn groups_led_by<'a>(groups: impl IntoIterator<Item = &'a Group>, member: &str) -> Vec<Group> {
    let mut led: Vec<Group> = groups
        .into_iter()
        .filter(|g| g.leader.as_deref() == Some(member))
        .cloned()
        .collect();
    led.sort();
    led.dedup_by(|a, b| a.kind == b.kind && a.names == b.names);
    led
}

/// How many groups of each kind `member` leads; every kind named, 0 included.
pub fn count_led<'a>(
    kinds: impl IntoIterator<Item = &'a String>,
    groups: &[Group],
    member: &str,
) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<String, u64> = kinds.into_iter().map(|k| (k.clone(), 0)).collect();
    for g in groups_led_by(groups, member) {
        *counts.entry(g.kind).or_default() += 1;
    }
    counts
}

/// One member of the Raft configuration, as the system lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: String,
    pub name: Option<String>,
    pub learner: bool,
    /// Where it serves the profile's port, where the member list says.
    #[serde(default)]
    pub url: Option<String>,
    /// Its Raft address (`host:port`), where the list gives that and no URL: its host
    /// serves the profile's port too (Consul's servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// A place-holder: the system gives only how many voters it has (NATS's meta group), so
    /// `id` is a number of ours, not one a replica can be matched by.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
    /// The leader's view of it, where the list is the leader's (Consul's and Vault's
    /// autopilot): heard from recently and caught up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct ReplicaObservation {
    pub pod: Pod,
    pub health: Result<CheckOutcome, ProbeError>,
    pub readiness: Option<Result<CheckOutcome, ProbeError>>,
    pub facts: RaftFacts,
    /// Failed requests, one message each (optional requests are left out).
    pub errors: Vec<String>,
    /// A request the API server refused for want of a permission (RBAC): its message.
    pub refused: Option<String>,
    /// The other Raft groups this replica takes part in, where the profile lists them.
    pub groups: Option<Result<Vec<Group>, String>>,
}

impl ReplicaObservation {
    /// Healthy by the system's own check.
    pub fn healthy(&self) -> bool {
        self.health.as_ref().is_ok_and(|c| c.ok)
    }
}

#[derive(Debug, Clone)]
pub struct ClusterObservation {
    pub target: ClusterTarget,
    pub replicas: Vec<ReplicaObservation>,
    /// The Raft membership as one member lists it, where the profile knows how to ask.
    pub members: Option<Result<Vec<Member>, String>>,
    /// Why the cluster's credentials (a Secret or file) could not be read, if they could not:
    /// it was then observed with the environment's alone.
    pub credentials_error: Option<String>,
    /// Its HTTPS replicas were read without verifying their certificates (--tls-skip-verify).
    pub tls_unverified: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(human_duration(Duration::from_secs(2)), "2s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.50s");
    }

    /// One wording for yield, drain and restart (yield said "no round without a leader", drain
    /// "none observed", for the same fact).
    #[test]
    fn a_leaderless_window_reads_the_same_in_every_verb() {
        assert_eq!(
            leaderless_window(Some(103.4), Some(25.0)),
            "leaderless window 103ms"
        );
        assert_eq!(
            leaderless_window(Some(1500.0), None),
            "leaderless window 1.50s"
        );
        assert_eq!(
            leaderless_window(None, Some(122.0)),
            "leaderless window none observed (polled every 122ms)"
        );
        assert_eq!(
            leaderless_window(None, None),
            "leaderless window none observed"
        );
    }
}
