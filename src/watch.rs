//! `status --watch`, the pure part: what changed between two rounds of a cluster's report
//! (one [`Change`] each), and a running [`Tally`] per cluster (leader changes, term advances,
//! the longest and the current time without a leader, members not healthy). No I/O: the
//! command surveys, this compares, the renderer prints. Golden-tested from scripted rounds.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::report::{CheckState, ClusterReport, ReplicaReport};

/// One thing that changed between two rounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The cluster, `namespace/name`.
    pub cluster: String,
    /// The replica it is about; absent for the cluster's own facts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What changed: `leader`, `term`, `role`, `health`, `ready`, `endpoints`, `disruption`,
    /// `terminating`, `node`, `quorum`, `appeared`, `gone`.
    pub field: &'static str,
    /// Before and after, as the table shows them ("-" for none).
    pub from: String,
    pub to: String,
}

impl Change {
    /// The table column this change shows in, for a replica's change (`None`: the cluster's
    /// own facts, or a row that came or went).
    pub fn column(&self) -> Option<&'static str> {
        self.pod.as_ref()?;
        Some(match self.field {
            "role" => "ROLE",
            "term" => "TERM",
            "health" => "HEALTH",
            "ready" => "READY",
            "endpoints" => "ENDPOINTS",
            "disruption" | "terminating" => "STATUS",
            "node" => "NODE",
            _ => return None,
        })
    }

    /// The line `status --watch` prints without a terminal (after a timestamp).
    pub fn line(&self) -> String {
        match &self.pod {
            Some(p) => format!(
                "{} {p}: {} {} -> {}",
                self.cluster, self.field, self.from, self.to
            ),
            None => format!(
                "{}: {} {} -> {}",
                self.cluster, self.field, self.from, self.to
            ),
        }
    }
}

/// One change as `status --watch -o json` prints it: a line of JSON each
/// (docs/status-schema.md, "The watch's events").
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event<'a> {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// When the round that saw it was taken (RFC 3339).
    pub time: String,
    #[serde(flatten)]
    pub change: &'a Change,
}

impl<'a> Event<'a> {
    pub fn new(time: String, change: &'a Change) -> Self {
        Event {
            api_version: crate::report::API_VERSION,
            kind: "WatchEvent",
            time,
            change,
        }
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |x| x.to_string())
}

fn endpoints(r: &ReplicaReport) -> String {
    let mut parts: Vec<String> = r
        .endpoints
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e.service,
                if !e.listed {
                    "unlisted"
                } else if e.ready == Some(true) {
                    "ready"
                } else {
                    "not-ready"
                }
            )
        })
        .collect();
    parts.sort();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

fn health(r: &ReplicaReport) -> &'static str {
    r.raft.health.state.as_str()
}

/// The replica's facts a watch compares, by field, as shown.
fn facts(r: &ReplicaReport) -> Vec<(&'static str, String)> {
    vec![
        ("node", opt(r.node.as_deref())),
        ("ready", r.ready.to_string()),
        ("terminating", r.terminating.to_string()),
        ("disruption", opt(r.disruption.as_deref())),
        ("health", health(r).to_string()),
        ("role", r.raft.role.as_str().to_string()),
        ("endpoints", endpoints(r)),
    ]
}

/// Everything that changed from `prev` to `next` (`prev` None: the cluster appeared).
pub fn diff(prev: Option<&ClusterReport>, next: Option<&ClusterReport>) -> Vec<Change> {
    let (Some(a), Some(b)) = (prev, next) else {
        return match (prev, next) {
            (None, Some(b)) => vec![Change {
                cluster: format!("{}/{}", b.namespace, b.name),
                pod: None,
                field: "appeared",
                from: "-".into(),
                to: format!("{} replicas", b.replicas.len()),
            }],
            (Some(a), None) => vec![Change {
                cluster: format!("{}/{}", a.namespace, a.name),
                pod: None,
                field: "gone",
                from: format!("{} replicas", a.replicas.len()),
                to: "-".into(),
            }],
            _ => vec![],
        };
    };
    let cluster = format!("{}/{}", b.namespace, b.name);
    let mut out = vec![];
    let mut push = |pod: Option<&str>, field: &'static str, from: String, to: String| {
        if from != to {
            out.push(Change {
                cluster: cluster.clone(),
                pod: pod.map(str::to_string),
                field,
                from,
                to,
            });
        }
    };
    push(
        None,
        "leader",
        opt(a.summary.leader.as_deref()),
        opt(b.summary.leader.as_deref()),
    );
    push(None, "term", opt(a.summary.term), opt(b.summary.term));
    let quorum = |c: &ClusterReport| {
        if c.summary.has_quorum {
            format!("fault tolerance {}", c.summary.fault_tolerance)
        } else {
            "QUORUM LOST".into()
        }
    };
    push(None, "quorum", quorum(a), quorum(b));
    let before: BTreeMap<&str, &ReplicaReport> =
        a.replicas.iter().map(|r| (r.pod.as_str(), r)).collect();
    let after: BTreeMap<&str, &ReplicaReport> =
        b.replicas.iter().map(|r| (r.pod.as_str(), r)).collect();
    let mut pods: Vec<&str> = before.keys().chain(after.keys()).copied().collect();
    pods.sort();
    pods.dedup();
    for p in pods {
        match (before.get(p), after.get(p)) {
            (Some(x), Some(y)) => {
                for ((field, from), (_, to)) in facts(x).into_iter().zip(facts(y)) {
                    push(Some(p), field, from, to);
                }
            }
            (None, Some(y)) => push(Some(p), "appeared", "-".into(), opt(y.node.as_deref())),
            (Some(x), None) => push(Some(p), "gone", opt(x.node.as_deref()), "-".into()),
            (None, None) => {}
        }
    }
    out
}

/// What a watch has seen of one cluster so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub cluster: String,
    pub rounds: u64,
    /// Changes of the agreed leader (to another pod; a leader lost and found again is none).
    pub leader_changes: u64,
    /// How much the term went up in all (etcd: a transfer advances it by one, an election by
    /// one or more; a watch cannot tell them apart).
    pub terms_advanced: u64,
    /// The longest time without a leader, in ms: from the first round without one to the next
    /// round with one. The true window is within one interval of it (each end is seen at most
    /// an interval late), which is how it compares with what `yield` or `drain` measured.
    pub longest_leaderless_ms: u64,
    /// Since when (ms into the watch) it has been without a leader, if it is now.
    pub leaderless_since_ms: Option<u64>,
    /// Members not healthy in the last round.
    pub unhealthy: Vec<String>,
    last_leader: Option<String>,
    last_term: Option<u64>,
}

impl Tally {
    pub fn new(cluster: &str) -> Self {
        Tally {
            cluster: cluster.into(),
            ..Default::default()
        }
    }

    /// One round, taken `at_ms` into the watch.
    pub fn observe(&mut self, r: &ClusterReport, at_ms: u64) {
        self.rounds += 1;
        let leader = r.summary.leader.clone();
        match &leader {
            Some(l) => {
                if self.last_leader.as_ref().is_some_and(|p| p != l) {
                    self.leader_changes += 1;
                }
                if let Some(since) = self.leaderless_since_ms {
                    self.longest_leaderless_ms =
                        self.longest_leaderless_ms.max(at_ms.saturating_sub(since));
                }
                self.last_leader = Some(l.clone());
                self.leaderless_since_ms = None;
            }
            None => {
                if self.leaderless_since_ms.is_none() {
                    self.leaderless_since_ms = Some(at_ms);
                }
            }
        }
        if let (Some(t), Some(before)) = (r.summary.term, self.last_term) {
            self.terms_advanced = self.terms_advanced.saturating_add(t.saturating_sub(before));
        }
        if r.summary.term.is_some() {
            self.last_term = r.summary.term;
        }
        self.unhealthy = r
            .replicas
            .iter()
            .filter(|x| x.raft.health.state != CheckState::Ok)
            .map(|x| x.pod.clone())
            .collect();
    }

    /// The time without a leader now (ms), if the cluster has none.
    pub fn leaderless_now_ms(&self, at_ms: u64) -> Option<u64> {
        self.leaderless_since_ms.map(|s| at_ms.saturating_sub(s))
    }

    /// The running line under the cluster's table, and the summary after Ctrl-C.
    pub fn line(&self, at_ms: u64) -> String {
        let now = match self.leaderless_now_ms(at_ms) {
            Some(ms) => format!(", WITHOUT A LEADER for {ms}ms"),
            None => String::new(),
        };
        let unhealthy = if self.unhealthy.is_empty() {
            String::new()
        } else {
            format!(", not healthy: {}", self.unhealthy.join(", "))
        };
        format!(
            "{}: {} leader change(s), terms advanced {}, longest without a leader {}ms{now}{unhealthy} ({} rounds)",
            self.cluster,
            self.leader_changes,
            self.terms_advanced,
            self.longest_leaderless_ms.max(self.leaderless_now_ms(at_ms).unwrap_or(0)),
            self.rounds
        )
    }
}

#[cfg(test)]
mod tests;
