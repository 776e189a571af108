//! The profile format: how a system is recognised and how its replicas are read and asked
//! to hand leadership over. Data only, on the data floor; `crate::profile` loads, validates
//! and applies it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub detect: Detect,
    /// The port probed unless a request names its own.
    pub port: PortSpec,
    #[serde(default)]
    pub scheme: Scheme,
    /// The port the system serves its API on over TLS where that is not `port` (Consul's
    /// `https` 8501): taken with scheme https, and taken *for* https by a StatefulSet whose
    /// pods declare it and none of `port` (`crate::profile::served`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_port: Option<PortSpec>,
    /// The system's own health check: a replica is healthy when it passes.
    pub health: CheckSpec,
    /// The system's own readiness check, where it has one distinct from health.
    #[serde(default)]
    pub ready: Option<CheckSpec>,
    /// Requests that yield Raft facts.
    #[serde(default)]
    pub requests: Vec<RequestSpec>,
    /// The system reports "no leader" by leaving the leader field out (etcd) or zero.
    #[serde(default)]
    pub leader_known_from_leader_id: bool,
    /// How to read the Raft membership (voters and learners) from any one member.
    #[serde(default)]
    pub membership: Option<MembershipSpec>,
    /// How to hand leadership over, where the system can (`kubectl raft yield`).
    #[serde(default)]
    pub transfer: Option<TransferSpec>,
    /// Why the system cannot hand leadership over, said when `yield` refuses.
    #[serde(default)]
    pub no_transfer: Option<String>,
    /// Other Raft groups whose leaders the members hold besides this one (NATS: one group
    /// per stream and per consumer): counted per replica in the report, and moved off a
    /// server by `yield --streams` and by `drain` before it evicts the server.
    #[serde(default)]
    pub groups: Option<GroupsSpec>,
    /// The health check fails on a member cut off from its leader (etcd's /health commits a
    /// read through Raft; NATS's `js-meta-only` health wants the meta leader heard from within
    /// 2 s): passing it says the member is live now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_needs_leader: bool,
    /// What this profile was proven against in this project's test world: `real` (the real
    /// server), `stand-in` (a stand-in speaking its API), `data` (its documented answers
    /// only). Shown by `kubectl raft systems`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proven: Option<Proven>,
}

/// What a profile was proven against (docs/systems/).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proven {
    /// The real server, end to end in the test world.
    Real,
    /// A stand-in that speaks the server's API (on real Raft where it says so).
    StandIn,
    /// The server's documented answers only (unit tests).
    Data,
}

impl Proven {
    pub fn as_str(self) -> &'static str {
        match self {
            Proven::Real => "real server",
            Proven::StandIn => "stand-in",
            Proven::Data => "data only",
        }
    }
}

/// What tells, for this system, that a follower is live now (still hears from its leader),
/// not only that it says "follower": `status`, `systems` and the drain's plan say it, and a
/// drain of a cluster whose system tells nothing needs `--assume-followers-current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Liveness {
    /// The leader's own view of each member, in the member list (autopilot's `Healthy`).
    LeaderView,
    /// Each member's time since it last heard from its leader (`last_contact`).
    LastContact,
    /// Each member says whether it is in step with its leader (ZooKeeper's zabstate).
    OwnState,
    /// The health check fails on a member cut off from its leader.
    Health,
    /// Nothing: a follower cut off from its leader may say "follower" for a while.
    Unknown,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::LeaderView => "the leader's view",
            Liveness::LastContact => "last contact",
            Liveness::OwnState => "its own sync state",
            Liveness::Health => "its health check",
            Liveness::Unknown => "none",
        }
    }
}

impl Profile {
    /// The best evidence of liveness this profile reads (`Liveness`).
    pub fn liveness(&self) -> Liveness {
        self.liveness_with(true)
    }

    /// The best evidence of liveness one look has: the leader's view only where the member
    /// list was read (`list_read`), else the next the profile reads.
    pub fn liveness_with(&self, list_read: bool) -> Liveness {
        let reads = |f: Fact| self.requests.iter().any(|r| r.fields.contains_key(&f));
        if list_read && self.membership.as_ref().is_some_and(|m| m.live.is_some()) {
            Liveness::LeaderView
        } else if reads(Fact::LastContact) {
            Liveness::LastContact
        } else if reads(Fact::Current) {
            Liveness::OwnState
        } else if self.health_needs_leader {
            Liveness::Health
        } else {
            Liveness::Unknown
        }
    }
}

/// Where the other Raft groups are listed, and how each kind is moved.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupsSpec {
    #[serde(default)]
    pub port: Option<PortSpec>,
    pub request: HttpRequest,
    /// By kind ("streams", "consumers"): where its groups are in the answer.
    pub kinds: BTreeMap<String, GroupKind>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupKind {
    /// A JSON pointer to the groups, `*` standing for every element of an array:
    /// `/account_details/*/stream_detail/*`.
    pub each: String,
    /// One pointer per `*`, into that level's element, naming it: the group's name is the
    /// list of these (account, stream[, consumer]), `{0}`, `{1}`, ... in `stepdown`.
    pub names: Vec<String>,
    /// A pointer into the group to the member id of its leader ("" or absent: none).
    pub leader: String,
    /// How to make its leader step down (the group elects another).
    #[serde(default)]
    pub stepdown: Option<GroupStepdown>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupStepdown {
    /// A NATS request on the client port; `{0}`, `{1}`, ... in the subject are the group's
    /// names.
    pub nats: NatsRequest,
    /// Which of the names is the account the request must come from (NATS: a stream's
    /// stepdown is answered only in its own account): the credentials are
    /// NATS_<ACCOUNT>_USER/_PASSWORD or NATS_<ACCOUNT>_CREDS.
    #[serde(default)]
    pub account: Option<usize>,
}

/// Leadership transfer: to a chosen member, or to whichever member the system picks.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TransferSpec {
    /// To a chosen member; `{target_id}` in the path or body is its member id.
    #[serde(default)]
    pub targeted: Option<TransferRequest>,
    /// The system picks the successor (ClickHouse Keeper's `ydld`, Vault's step-down).
    #[serde(default)]
    pub untargeted: Option<TransferRequest>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TransferRequest {
    /// Which replica the request goes to.
    pub send_to: SendTo,
    /// The HTTP request (unused when `nats` is given).
    #[serde(default)]
    pub request: HttpRequest,
    /// Instead of HTTP, a request over the NATS client protocol (NATS JetStream's meta leader
    /// moves only that way). Credentials come from the environment the nats CLI reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsRequest>,
    /// When the HTTP request answers 404 (a ClickHouse Keeper without the commands API) and
    /// replicas are reached directly, this word is sent over raw TCP instead (Keeper's
    /// four-letter words on its client port). pods/proxy carries HTTP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_fallback: Option<TcpWord>,
    /// Status codes that mean the request was accepted.
    #[serde(default = "default_ok_status")]
    pub ok_status: Vec<u16>,
    /// A JSON pointer to the error message in a refusal.
    #[serde(default)]
    pub error_json: Option<String>,
    /// The answer comes only after the transfer happened (etcd's MoveLeader); otherwise it
    /// is only an acknowledgement and the result must be waited for.
    #[serde(default)]
    pub synchronous: bool,
    /// What a refusal with this status code means and what to do, added to its message
    /// (Keeper: 403 = the command is not allow-listed).
    #[serde(default)]
    pub hints: std::collections::BTreeMap<u16, String>,
}

/// A NATS request: `body` (with `{target_id}` filled in) to `subject`, on the replica's
/// client port; the reply is JSON, accepted when `/success` is true, its refusal at
/// `/error/description`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NatsRequest {
    pub port: PortSpec,
    pub subject: String,
    #[serde(default)]
    pub body: Option<String>,
}

/// A word written to a TCP port, the answer read to EOF (ZooKeeper-style four-letter words).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TcpWord {
    pub port: PortSpec,
    pub word: String,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SendTo {
    Leader,
    Target,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Detect {
    /// Matches when an image's name (without registry and tag) contains one of these.
    #[serde(default)]
    pub images: Vec<String>,
    /// Matches when a container's command (or first arg) has one of these file names.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Matches when a container exposes all of these ports (and images/commands are empty).
    #[serde(default)]
    pub ports: Vec<i32>,
    /// Never matches an image whose name contains one of these (a sidecar or tool that
    /// shares the system's name: `consul-dataplane` is not a Consul server).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_images: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// Container port names tried first.
    #[serde(default)]
    pub names: Vec<String>,
    /// Container port numbers tried next; the first is used even if the spec does not declare it.
    #[serde(default)]
    pub numbers: Vec<i32>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    #[default]
    Http,
    Https,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    #[serde(default = "default_method")]
    pub method: String,
    pub path: String,
    #[serde(default)]
    pub body: Option<String>,
    /// Extra headers; `${NAME}` in a value is the environment variable NAME at run time
    /// (tokens: `X-Vault-Token: ${VAULT_TOKEN}`), never written into a report.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// The largest answer read, in bytes (default `MAX_ANSWER_BYTES`, 1 MiB): health and
    /// status answers are small, a listing of every stream and consumer may not be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
}

impl HttpRequest {
    /// The cap on this request's answer.
    pub fn answer_limit(&self) -> usize {
        self.max_bytes.unwrap_or(super::MAX_ANSWER_BYTES)
    }
}

/// `${NAME}` in `value` replaced by `lookup(NAME)`, `${NAME:-DEFAULT}` by DEFAULT where NAME
/// is unset (as the shell does); the first required name it cannot find is the error.
pub fn expand_env(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let inner = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        let value = match inner.split_once(":-") {
            Some((name, default)) => lookup(name).unwrap_or_else(|| default.to_string()),
            None => lookup(inner).ok_or_else(|| inner.to_string())?,
        };
        out.push_str(&value);
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

pub(crate) fn default_method() -> String {
    "GET".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub request: HttpRequest,
    #[serde(default = "default_ok_status")]
    pub ok_status: Vec<u16>,
    /// JSON pointer -> the value it must have (null: must be null or absent).
    #[serde(default)]
    pub ok_json: BTreeMap<String, serde_json::Value>,
    /// The port this check is sent to (default: the profile's port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSpec>,
    /// The check used instead on a pod that declares none of this check's ports (by name or
    /// number): a server without the listener this check needs (spurctld before its
    /// `[health]` listener) is checked where it can be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otherwise: Option<Box<CheckSpec>>,
    /// JSON pointer -> a value that fails the check (Consul's leader `""`: no leader).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fail_json: BTreeMap<String, serde_json::Value>,
}

impl CheckSpec {
    /// Every check this one may turn into, itself first.
    pub fn chain(&self) -> impl Iterator<Item = &CheckSpec> {
        std::iter::successors(Some(self), |c| c.otherwise.as_deref())
    }
}

pub(crate) fn default_ok_status() -> Vec<u16> {
    vec![200]
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Json,
    /// `key<separator>value` lines (ZooKeeper/Keeper four-letter-word output).
    Kv,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    pub name: String,
    #[serde(default)]
    pub port: Option<PortSpec>,
    pub request: HttpRequest,
    /// Status codes whose body is read; any other is an error. Empty: any status.
    #[serde(default = "default_ok_status")]
    pub accept_status: Vec<u16>,
    /// A failure here is not an error: older versions lack the endpoint.
    #[serde(default)]
    pub optional: bool,
    /// Read this string out of a JSON envelope first (Keeper's commands API: /result).
    #[serde(default)]
    pub unwrap_json: Option<String>,
    #[serde(default)]
    pub format: Format,
    #[serde(default = "default_separator")]
    pub separator: String,
    /// A JSON pointer whose non-null value is an error message (ZooKeeper AdminServer).
    #[serde(default)]
    pub error_json: Option<String>,
    pub fields: BTreeMap<Fact, FieldSpec>,
}

pub(crate) fn default_separator() -> String {
    "\t".into()
}

/// The facts a profile can report; the only vocabulary the assessment understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fact {
    Role,
    IsLeader,
    MemberId,
    LeaderId,
    HasLeader,
    Term,
    CommitIndex,
    AppliedIndex,
    LeaderCommitIndex,
    Learner,
    Version,
    /// Time since the member last heard from its leader: a Go duration (`12.3ms`), `0` on the
    /// leader, `never`.
    LastContact,
    /// Whether the member says it is in step with its leader (a boolean).
    Current,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// A JSON pointer into the body.
    #[serde(default)]
    pub json: Option<String>,
    /// A key of `key<separator>value` lines.
    #[serde(default)]
    pub key: Option<String>,
    /// The status code decides the value: {"200": leader, "503": follower}; "*" for any other.
    #[serde(default)]
    pub status: Option<BTreeMap<String, String>>,
    /// Rewrites the value read: {"primary": leader}.
    #[serde(default)]
    pub map: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MembershipSpec {
    pub request: HttpRequest,
    /// JSON pointer to the members: an array, or an object whose keys are the member ids
    /// (ZooKeeper's voting_view). Empty when the system says only how many there are (`size`).
    #[serde(default)]
    pub list: String,
    /// Pointers inside one member (the id: unused when `list` is an object).
    #[serde(default)]
    pub id: String,
    /// Its name; a host name's first label is matched to the pod names.
    #[serde(default)]
    pub name: Option<String>,
    /// A boolean, true for a member that does not vote (etcd's isLearner).
    #[serde(default)]
    pub learner: Option<String>,
    /// A boolean, true for a member that votes (Consul's and Nomad's Voter).
    #[serde(default)]
    pub voter: Option<String>,
    /// Where the system gives only the number of voters it is configured with (NATS's meta
    /// group `cluster_size`), a pointer to it, instead of `list`.
    #[serde(default)]
    pub size: Option<String>,
    /// Where the member serves the profile's port (a URL, e.g. etcd's clientURLs), for
    /// `yield --local`, which reaches its peers without the Kubernetes API.
    #[serde(default)]
    pub url: Option<String>,
    /// Where the list gives no URL: the member's Raft address (`host:port`, Consul's and
    /// Nomad's `Address`), whose host serves the profile's port as well, for `yield --local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// With `voter` pointing to a string (Vault's `status`), the values that mean a voter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voter_values: Option<Vec<String>>,
    /// A boolean, the leader's view of the member: heard from recently and caught up
    /// (autopilot's `Healthy`). Only for a list the leader makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<String>,
    /// Status codes whose body is the list (Consul's autopilot answers 429 while a server is
    /// unhealthy, with the same body).
    #[serde(default = "default_ok_status")]
    pub accept_status: Vec<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_templates_take_values_from_the_environment() {
        let env = |n: &str| (n == "VAULT_TOKEN").then(|| "s.abc".to_string());
        assert_eq!(expand_env("${VAULT_TOKEN}", env).unwrap(), "s.abc");
        assert_eq!(
            expand_env("Bearer ${VAULT_TOKEN}!", env).unwrap(),
            "Bearer s.abc!"
        );
        assert_eq!(expand_env("plain", env).unwrap(), "plain");
        assert_eq!(expand_env("${NOMAD_TOKEN:-}", env).unwrap(), "");
        assert_eq!(expand_env("${VAULT_TOKEN:-x}", env).unwrap(), "s.abc");
        assert_eq!(
            expand_env("${CONSUL_HTTP_TOKEN}", env).unwrap_err(),
            "CONSUL_HTTP_TOKEN"
        );
    }
}
