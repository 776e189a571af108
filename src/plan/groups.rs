//! Moving the leaders of a server's other Raft groups (NATS: its streams and consumers) off
//! it: which requests, decided from what the servers list. Pure; src/groups.rs sends them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::model::{groups_led_by, ClusterObservation, Group, Role};
use crate::profile::{GroupsSpec, PortSpec};

/// One group's stepdown request, ready to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCall {
    /// "streams APP/ORDERS".
    pub group: String,
    pub kind: String,
    pub names: Vec<String>,
    /// The NATS subject, the names filled in.
    pub subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The account whose user must send it; None: the system account.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(skip)]
    pub port: PortSpec,
}

/// What cannot be moved, and why: the user sees each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSkip {
    pub group: String,
    pub reason: String,
}

/// A name that can stand as one token of a NATS subject, as NATS requires of account, stream
/// and consumer names.
pub fn is_subject_token(name: &str) -> bool {
    !name.is_empty()
        && !name
            .chars()
            .any(|c| matches!(c, '.' | '*' | '>') || c.is_whitespace() || c.is_control())
}

/// "streams APP/ORDERS".
pub fn group_label(g: &Group) -> String {
    format!("{} {}", g.kind, g.names.join("/"))
}

/// The stepdowns that move every group `member` leads off it, from the groups any server
/// lists (each once), in a stable order; groups of a kind the profile cannot move are
/// skipped with the reason.
pub fn plan_group_moves<'a>(
    spec: &GroupsSpec,
    listed: impl IntoIterator<Item = &'a Group>,
    member: &str,
) -> (Vec<GroupCall>, Vec<GroupSkip>) {
    let mut calls = vec![];
    let mut skips = vec![];
    for g in groups_led_by(listed, member) {
        let Some(stepdown) = spec.kinds.get(&g.kind).and_then(|k| k.stepdown.as_ref()) else {
            skips.push(GroupSkip {
                group: group_label(&g),
                reason: format!("the profile has no stepdown for {}", g.kind),
            });
            continue;
        };
        // A name is one token of the subject: a server's list that names a group with a
        // subject's separator or wildcard (NATS refuses such names) would aim the request
        // at another subject.
        if let Some(bad) = g.names.iter().find(|n| !is_subject_token(n)) {
            skips.push(GroupSkip {
                group: group_label(&g),
                reason: format!(
                    "its name {bad:?} is not a single NATS subject token (no '.', '*', '>' or whitespace): not sent"
                ),
            });
            continue;
        }
        let fill = |s: &str| fill_names(s, &g.names);
        calls.push(GroupCall {
            group: group_label(&g),
            kind: g.kind.clone(),
            names: g.names.clone(),
            subject: fill(&stepdown.nats.subject),
            body: stepdown.nats.body.as_deref().map(fill),
            account: stepdown.account.and_then(|i| g.names.get(i).cloned()),
            port: stepdown.nats.port.clone(),
        });
    }
    (calls, skips)
}

/// A stepdown's subject or body with the group's names put in for `{0}`, `{1}`, ...
pub fn fill_names(template: &str, names: &[String]) -> String {
    names
        .iter()
        .enumerate()
        .fold(template.to_string(), |acc, (i, n)| {
            acc.replace(&format!("{{{i}}}"), n)
        })
}

/// One group of `account` any server lists, and the subject of its stepdown (a sample of
/// what that account's user will send), if any server lists one the profile can move.
pub fn sample_stepdown(obs: &ClusterObservation, account: &str) -> Option<(Group, String)> {
    let spec = obs.target.profile.groups.as_ref()?;
    obs.replicas
        .iter()
        .filter_map(|r| r.groups.as_ref()?.as_ref().ok())
        .flatten()
        .find_map(|g| {
            let stepdown = spec.kinds.get(&g.kind)?.stepdown.as_ref()?;
            (stepdown
                .account
                .and_then(|i| g.names.get(i))
                .map(String::as_str)
                == Some(account)
                && g.names.iter().all(|n| is_subject_token(n)))
            .then(|| (g.clone(), fill_names(&stepdown.nats.subject, &g.names)))
        })
}

/// What moving a server's groups off it takes: its member id (to tell when it no longer
/// leads them), the stepdowns, and the groups that cannot be moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMoves {
    pub member: String,
    pub calls: Vec<GroupCall>,
    pub skips: Vec<GroupSkip>,
}

impl GroupMoves {
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty() && self.skips.is_empty()
    }
}

/// The stepdowns that would move every group `pod` leads off it, from one observation of the
/// cluster (every server's list). None when the system has no other groups or the pod did
/// not say its member id.
pub fn moves_off(obs: &ClusterObservation, pod: &str) -> Option<GroupMoves> {
    let spec = obs.target.profile.groups.as_ref()?;
    let member = obs
        .replicas
        .iter()
        .find(|r| r.pod.metadata.name.as_deref() == Some(pod))?
        .facts
        .member_id
        .clone()?;
    let listed = obs
        .replicas
        .iter()
        .filter_map(|r| r.groups.as_ref().and_then(|g| g.as_ref().ok()))
        .flatten();
    let (calls, skips) = plan_group_moves(spec, listed, &member);
    Some(GroupMoves {
        member,
        calls,
        skips,
    })
}

/// Why a run that takes the pods `acting_on` could not move the leader of a cluster whose
/// credentials could not be read, when the system transfers: a taken pod is (or is named as)
/// its leader, or no leader is known, and whichever member leads when its turn comes may be a
/// taken one. The transfer is sent with the credentials, so the run would replace the
/// followers and then stop at the leader. Read without them, the cluster may still look
/// healthy (its TLS kept).
pub fn credentials_for_transfer(
    obs: &ClusterObservation,
    acting_on: &BTreeSet<String>,
) -> Option<String> {
    credentials_for_transfer_of(obs, &leader_pod(obs), acting_on)
}

/// [`credentials_for_transfer`] with the leaders as the caller knows them (the gate: its
/// look's report).
pub fn credentials_for_transfer_of(
    obs: &ClusterObservation,
    leaders: &BTreeSet<String>,
    acting_on: &BTreeSet<String>,
) -> Option<String> {
    let why = obs.credentials_error.as_ref()?;
    obs.target.profile.transfer.as_ref()?;
    match leaders.iter().find(|p| acting_on.contains(*p)) {
        Some(leader) => Some(format!(
            "the transfer of its leader {leader} is sent with the cluster's credentials, which could not be read: {why}"
        )),
        None if leaders.is_empty() && !acting_on.is_empty() => Some(format!(
            "no leader is known, and the transfer of whichever member leads when its turn comes is sent with the cluster's credentials, which could not be read: {why}"
        )),
        None => None,
    }
}

/// Who must send NATS requests for a run that takes the pods `acting_on` out of this cluster,
/// and what for: the system account (None) when one of them leads and the profile moves its
/// leader over NATS (the meta leader's stepdown); each account with a group (a stream, a
/// consumer) that has a replica on one of them, since whichever of its replicas leads when
/// that server's turn comes must be moved off it (leaders move as servers go). Empty for a
/// system with no NATS requests. Decided on one look; the caller checks the credentials
/// before anything changes.
pub fn senders(
    obs: &ClusterObservation,
    acting_on: &BTreeSet<String>,
) -> BTreeMap<Option<String>, Vec<String>> {
    let mut out: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    let by_nats = obs.target.profile.transfer.as_ref().is_some_and(|t| {
        [&t.targeted, &t.untargeted]
            .into_iter()
            .flatten()
            .any(|r| r.nats.is_some())
    });
    let leader = leader_pod(obs);
    for r in &obs.replicas {
        let Some(pod) = r.pod.metadata.name.as_deref() else {
            continue;
        };
        if !acting_on.contains(pod) {
            continue;
        }
        if by_nats && leader.contains(pod) {
            out.entry(None)
                .or_default()
                .push(format!("the meta leader {pod}'s stepdown"));
        }
        let Some(spec) = obs.target.profile.groups.as_ref() else {
            continue;
        };
        // Its own list (the groups it has a replica of); what any list says it leads (as
        // `moves_off` will read them); and, when its own list was not read, every group any
        // server lists: which of them it holds is unknown.
        let own = r.groups.as_ref().and_then(|g| g.as_ref().ok());
        let member = r.facts.member_id.as_deref();
        let listed = obs
            .replicas
            .iter()
            .filter_map(|x| x.groups.as_ref().and_then(|g| g.as_ref().ok()))
            .flatten();
        let led_elsewhere =
            listed.filter(|g| own.is_none() || (member.is_some() && g.leader.as_deref() == member));
        for g in own.into_iter().flatten().chain(led_elsewhere) {
            let Some(stepdown) = spec.kinds.get(&g.kind).and_then(|k| k.stepdown.as_ref()) else {
                continue;
            };
            let account = stepdown.account.and_then(|i| g.names.get(i).cloned());
            let what = format!("{}'s stepdown should it lead on {pod}", group_label(g));
            let list = out.entry(account).or_default();
            if !list.contains(&what) {
                list.push(what);
            }
        }
    }
    out
}

/// The pods that may lead, by one look: those that claim it, those whose member id another
/// names as leader, and, when a named leader is no replica's member id (its own answers were
/// not read), every pod that did not say its member id. A doubt costs a check, never a run
/// stopped at the leader.
pub fn leader_pod(obs: &ClusterObservation) -> BTreeSet<String> {
    let named: BTreeSet<&str> = obs
        .replicas
        .iter()
        .filter_map(|r| r.facts.leader_id.as_deref())
        .collect();
    let ids: BTreeSet<&str> = obs
        .replicas
        .iter()
        .filter_map(|r| r.facts.member_id.as_deref())
        .collect();
    let unaccounted = named.iter().any(|n| !ids.contains(n));
    obs.replicas
        .iter()
        .filter(|r| {
            r.facts.role == Some(Role::Leader)
                || match r.facts.member_id.as_deref() {
                    Some(m) => named.contains(m),
                    None => unaccounted,
                }
        })
        .filter_map(|r| r.pod.metadata.name.clone())
        .collect()
}

/// What to do after nobody answered a group's stepdown, judged by the server's own list of
/// groups read just after. The stepdown is answered by the group's leader only: for a
/// moment after any stepdown or restart the group has none and nobody answers, nor does
/// anyone answer a user of another account. A group no longer led by `member` needs no
/// stepdown; one listed without a leader is electing, and is asked again once it has one;
/// one still led by `member` (or a list that could not be read) is asked once more, then
/// given up with the first silence's reason (most likely the account's user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswered {
    NotLedHere,
    Electing,
    AskAgain,
    GiveUp,
}

pub fn after_unanswered(
    listed: Option<&[Group]>,
    member: &str,
    group: &str,
    asked_again: u32,
) -> Unanswered {
    let again = if asked_again == 0 {
        Unanswered::AskAgain
    } else {
        Unanswered::GiveUp
    };
    let Some(listed) = listed else {
        return again;
    };
    match listed.iter().find(|g| group_label(g) == group) {
        None => Unanswered::NotLedHere,
        Some(g) => match g.leader.as_deref() {
            None => Unanswered::Electing,
            Some(l) if l == member => again,
            Some(_) => Unanswered::NotLedHere,
        },
    }
}

/// Of `moved`, the groups `member` still leads according to `listed`.
pub fn still_led<'a>(
    listed: impl IntoIterator<Item = &'a Group>,
    member: &str,
    moved: &[GroupCall],
) -> Vec<String> {
    groups_led_by(listed, member)
        .iter()
        .map(group_label)
        .filter(|l| moved.iter().any(|c| &c.group == l))
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::profile::Catalog;

    fn nats() -> GroupsSpec {
        Catalog::builtin_groups("nats")
    }

    fn g(kind: &str, names: &[&str], leader: &str) -> Group {
        Group {
            kind: kind.into(),
            names: names.iter().map(|s| s.to_string()).collect(),
            leader: Some(leader.into()).filter(|l: &String| !l.is_empty()),
        }
    }

    #[test]
    fn a_servers_streams_and_consumers_become_stepdowns_in_their_accounts() {
        let listed = [
            g("streams", &["APP", "ORDERS"], "nats-0"),
            g("streams", &["APP", "EVENTS"], "nats-1"),
            g("consumers", &["APP", "ORDERS", "work"], "nats-0"),
            g("streams", &["OPS", "AUDIT"], "nats-0"),
        ];
        let (calls, skips) = plan_group_moves(&nats(), &listed, "nats-0");
        assert!(skips.is_empty());
        let got: Vec<(&str, &str, Option<&str>)> = calls
            .iter()
            .map(|c| (c.group.as_str(), c.subject.as_str(), c.account.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "consumers APP/ORDERS/work",
                    "$JS.API.CONSUMER.LEADER.STEPDOWN.ORDERS.work",
                    Some("APP")
                ),
                (
                    "streams APP/ORDERS",
                    "$JS.API.STREAM.LEADER.STEPDOWN.ORDERS",
                    Some("APP")
                ),
                (
                    "streams OPS/AUDIT",
                    "$JS.API.STREAM.LEADER.STEPDOWN.AUDIT",
                    Some("OPS")
                ),
            ]
        );
    }

    #[test]
    fn an_unanswered_stepdown_with_the_servers_list_unread_is_asked_once_more_then_given_up() {
        let label = "consumers APP/S/c";
        assert_eq!(
            after_unanswered(None, "nats-0", label, 0),
            Unanswered::AskAgain
        );
        assert_eq!(
            after_unanswered(None, "nats-0", label, 1),
            Unanswered::GiveUp
        );
    }

    #[test]
    fn an_unanswered_stepdown_of_a_group_gone_from_the_servers_list_needs_no_more() {
        let listed = [g("streams", &["APP", "S"], "nats-0")];
        let got = after_unanswered(Some(&listed), "nats-0", "consumers APP/S/c", 0);
        assert_eq!(got, Unanswered::NotLedHere);
    }

    #[test]
    fn only_groups_of_a_kind_with_a_stepdown_are_moved() {
        let mut spec = nats();
        spec.kinds.get_mut("consumers").unwrap().stepdown = None;
        let listed = [g("consumers", &["APP", "S", "c"], "nats-0")];
        let (calls, skips) = plan_group_moves(&spec, &listed, "nats-0");
        assert!(calls.is_empty());
        assert_eq!(skips[0].group, "consumers APP/S/c");
        assert!(skips[0].reason.contains("no stepdown"), "{skips:?}");
    }

    #[test]
    fn a_name_that_would_change_the_subject_is_not_sent() {
        let listed = [
            g("streams", &["APP", "ORDERS.>"], "nats-0"),
            g("consumers", &["APP", "ORDERS", "a.b"], "nats-0"),
            g("streams", &["APP", "OK"], "nats-0"),
        ];
        let (calls, skips) = plan_group_moves(&nats(), &listed, "nats-0");
        let subjects: Vec<&str> = calls.iter().map(|c| c.subject.as_str()).collect();
        assert_eq!(subjects, vec!["$JS.API.STREAM.LEADER.STEPDOWN.OK"]);
        assert_eq!(skips.len(), 2, "{skips:?}");
        assert!(skips.iter().all(|s| s.reason.contains("subject token")));
    }

    #[test]
    fn still_led_counts_only_what_was_moved_and_is_still_there() {
        let before = [
            g("streams", &["APP", "A"], "nats-0"),
            g("streams", &["APP", "B"], "nats-0"),
        ];
        let (calls, _) = plan_group_moves(&nats(), &before, "nats-0");
        let after = [
            g("streams", &["APP", "A"], "nats-2"),
            g("streams", &["APP", "B"], "nats-0"),
            g("streams", &["APP", "C"], "nats-0"), // new since: not ours to wait for
        ];
        assert_eq!(still_led(&after, "nats-0", &calls), vec!["streams APP/B"]);
    }

    /// A 3-server NATS cluster seen at one look: nats-0 leads the meta group, each server's
    /// groups as given.
    fn nats_look(system: &str, groups: &[Vec<Group>]) -> ClusterObservation {
        use crate::model::{CheckOutcome, ClusterTarget, OwnerKind, RaftFacts, ReplicaObservation};
        let profile = Catalog::builtin().get(system).unwrap().clone();
        let pods: Vec<k8s_openapi::api::core::v1::Pod> = (0..3)
            .map(|i| {
                let mut p = k8s_openapi::api::core::v1::Pod::default();
                p.metadata.name = Some(format!("nats-{i}"));
                p
            })
            .collect();
        let replicas = pods
            .iter()
            .enumerate()
            .map(|(i, p)| ReplicaObservation {
                pod: p.clone(),
                health: Ok(CheckOutcome {
                    ok: true,
                    detail: "HTTP 200".into(),
                }),
                readiness: None,
                facts: RaftFacts {
                    role: Some(if i == 0 { Role::Leader } else { Role::Follower }),
                    member_id: Some(format!("nats-{i}")),
                    leader_id: Some("nats-0".into()),
                    ..Default::default()
                },
                errors: vec![],
                refused: None,
                groups: groups.get(i).map(|g| Ok(g.clone())),
            })
            .collect();
        ClusterObservation {
            target: ClusterTarget {
                namespace: "mq".into(),
                name: "nats".into(),
                owner_kind: OwnerKind::StatefulSet,
                profile,
                desired_replicas: 3,
                pods,
                credentials_secret: None,
                tls_secret: None,
                gate_assume: None,
                named: true,
            },
            replicas,
            members: None,
            credentials_error: None,
            tls_unverified: false,
        }
    }

    fn pods(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_run_that_takes_the_leader_of_a_cluster_whose_credentials_cannot_be_read_is_stopped() {
        let mut obs = nats_look("etcd", &[]);
        obs.credentials_error = Some("secrets \"absent\" not found".into());
        let why = credentials_for_transfer(&obs, &pods(&["nats-0", "nats-1"])).unwrap();
        assert!(why.contains("nats-0") && why.contains("absent"), "{why}");
    }

    #[test]
    fn a_run_that_takes_only_followers_needs_no_credentials_for_a_transfer() {
        let mut obs = nats_look("etcd", &[]);
        obs.credentials_error = Some("secrets \"absent\" not found".into());
        assert_eq!(credentials_for_transfer(&obs, &pods(&["nats-1"])), None);
    }

    #[test]
    fn a_run_on_a_cluster_with_no_known_leader_and_unreadable_credentials_is_stopped() {
        let mut obs = nats_look("etcd", &[]);
        obs.credentials_error = Some("secrets \"absent\" not found".into());
        for r in obs.replicas.iter_mut() {
            r.facts.role = Some(Role::Follower);
            r.facts.leader_id = None;
        }
        let why = credentials_for_transfer(&obs, &pods(&["nats-1"])).unwrap();
        assert!(why.contains("no leader is known"), "{why}");
    }

    #[test]
    fn a_system_that_cannot_transfer_needs_no_credentials_for_a_transfer() {
        let mut obs = nats_look("zookeeper", &[]);
        obs.credentials_error = Some("secrets \"absent\" not found".into());
        assert_eq!(credentials_for_transfer(&obs, &pods(&["nats-0"])), None);
    }

    #[test]
    fn a_run_that_takes_the_meta_leader_needs_the_system_account() {
        let obs = nats_look("nats", &[]);
        let who = senders(&obs, &pods(&["nats-0", "nats-1"]));
        assert_eq!(who.keys().collect::<Vec<_>>(), vec![&None]);
        assert!(who[&None][0].contains("nats-0"), "{who:?}");
    }

    #[test]
    fn a_run_that_takes_only_followers_leading_nothing_needs_no_user() {
        let obs = nats_look("nats", &[]);
        assert!(senders(&obs, &pods(&["nats-1", "nats-2"])).is_empty());
    }

    #[test]
    fn a_leader_whose_own_state_is_unread_counts_by_the_others_naming_it() {
        let mut obs = nats_look("nats", &[]);
        obs.replicas[0].facts.role = None;
        assert!(senders(&obs, &pods(&["nats-0"])).contains_key(&None));
    }

    #[test]
    fn a_leader_that_said_not_even_its_member_id_still_counts() {
        let mut obs = nats_look("nats", &[]);
        obs.replicas[0].facts.role = None;
        obs.replicas[0].facts.member_id = None;
        obs.replicas[0].facts.leader_id = None;
        assert!(senders(&obs, &pods(&["nats-0"])).contains_key(&None));
        assert!(senders(&obs, &pods(&["nats-1"])).is_empty());
    }

    #[test]
    fn each_account_with_a_group_on_a_taken_server_must_send() {
        // nats-1 takes part in ORDERS (led by nats-2 now) and leads nothing: its leadership
        // can move onto it while the run goes, so APP's user is needed all the same.
        let on_1 = vec![g("streams", &["APP", "ORDERS"], "nats-2")];
        let on_2 = vec![
            g("streams", &["APP", "ORDERS"], "nats-2"),
            g("streams", &["OPS", "AUDIT"], "nats-2"),
        ];
        let obs = nats_look("nats", &[vec![], on_1, on_2]);
        let who = senders(&obs, &pods(&["nats-1"]));
        assert_eq!(
            who.keys().collect::<Vec<_>>(),
            vec![&Some("APP".to_string())]
        );
        assert!(who[&Some("APP".into())][0].contains("streams APP/ORDERS"));
        let both = senders(&obs, &pods(&["nats-1", "nats-2"]));
        assert_eq!(both.len(), 2, "{both:?}");
    }

    #[test]
    fn a_group_another_server_says_a_taken_server_leads_counts() {
        // nats-1's own list was not read; nats-2's says nats-1 leads ORDERS.
        let on_2 = vec![g("streams", &["APP", "ORDERS"], "nats-1")];
        let mut obs = nats_look("nats", &[vec![], vec![], on_2]);
        obs.replicas[1].groups = Some(Err("timed out".into()));
        let who = senders(&obs, &pods(&["nats-1"]));
        assert!(who.contains_key(&Some("APP".into())), "{who:?}");
    }

    #[test]
    fn a_taken_server_whose_own_list_is_unread_needs_every_account_listed() {
        let on_2 = vec![g("streams", &["OPS", "AUDIT"], "nats-2")];
        let mut obs = nats_look("nats", &[vec![], vec![], on_2]);
        obs.replicas[1].groups = None;
        let who = senders(&obs, &pods(&["nats-1"]));
        assert!(who.contains_key(&Some("OPS".into())), "{who:?}");
    }

    #[test]
    fn a_system_that_moves_its_leader_over_http_needs_no_nats_user() {
        let obs = nats_look("etcd", &[]);
        assert!(senders(&obs, &pods(&["nats-0", "nats-1", "nats-2"])).is_empty());
    }

    fn arb_group() -> impl Strategy<Value = Group> {
        (
            prop::sample::select(vec!["streams", "consumers"]),
            prop::sample::select(vec!["APP", "OPS"]),
            prop::sample::select(vec!["A", "B", "C"]),
            prop::sample::select(vec!["nats-0", "nats-1", "nats-2", ""]),
        )
            .prop_map(|(k, a, s, l)| {
                let names: Vec<&str> = if k == "streams" {
                    vec![a, s]
                } else {
                    vec![a, s, "c"]
                };
                g(k, &names, l)
            })
    }

    proptest! {
        /// Every server lists the groups it takes part in: however the lists overlap and are
        /// ordered, each group is asked to step down once, and only groups the server leads.
        #[test]
        fn each_led_group_is_asked_once_whatever_the_order(
            listed in prop::collection::vec(arb_group(), 0..24),
            seed in any::<u64>(),
        ) {
            let (calls, _) = plan_group_moves(&nats(), &listed, "nats-0");
            let mut shuffled = listed.clone();
            let n = shuffled.len().max(1);
            shuffled.rotate_left((seed as usize) % n);
            shuffled.reverse();
            let (again, _) = plan_group_moves(&nats(), &shuffled, "nats-0");
            prop_assert_eq!(&calls, &again);
            let mut groups: Vec<&str> = calls.iter().map(|c| c.group.as_str()).collect();
            let before = groups.len();
            groups.dedup();
            prop_assert_eq!(before, groups.len());
            for c in &calls {
                let led = listed.iter().any(|x| group_label(x) == c.group && x.leader.as_deref() == Some("nats-0"));
                prop_assert!(led, "{} is not led by nats-0", c.group);
            }
        }
    }
}
