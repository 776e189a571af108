//! One definition of a healthy voter, used by `yield` (its target), `drain` (its quorum
//! count and each replacement's rejoin) and `restart`: it fails closed. A replica counts only
//! when everything that could say otherwise says it is fine:
//!
//! - it votes: not a learner or observer by its own account, and a voter of the
//!   configuration the system lists (matched by its member id; a non-voter, an id the list
//!   lacks, or an id another replica also claims does not count);
//! - it is not terminating, is Ready, and its own health check passes;
//! - it is the leader, or a follower (a candidate or an unknown role does not count);
//! - a follower is in the leader's term and names that leader (a replica that knows no
//!   leader, or another one, does not count);
//! - it is live now: the best evidence its system gives (the leader's view of it, its last
//!   contact with the leader, its own sync state, a health check that needs the leader;
//!   `Profile::liveness`) says it hears from its leader (evidence the profile reads but its
//!   answer lacks counts against it);
//! - it is within `max_lag` entries of the leader;
//! - a fact the leader reports but this replica's answer lacks (term, leader id, an index)
//!   counts against it: the same profile asked both, so the answer was incomplete.
//!
//! Pure, property-tested in `plan::drain::tests` against an oracle written apart from it.
//! `status` counts healthy voters with it too (`assess`), so its fault tolerance is drain's.

use crate::model::Role;
use crate::report::{CheckState, Configured, ReplicaReport};

/// How many log entries behind the leader a member may be and still count, unless the user
/// says otherwise (`--max-lag`).
pub const DEFAULT_MAX_LAG: u64 = 1000;

/// Whether the replica votes, as far as anything says: not a learner or observer by its
/// own account, and a voter (or not known otherwise) by the system's configuration.
pub fn counts_as_voter(x: &ReplicaReport) -> bool {
    !x.raft.learner && x.raft.role.is_voter() && x.raft.configured.may_vote()
}

/// Why a replica does not count as a healthy voter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unhealthy {
    NotVoter,
    Terminating,
    Unreachable,
    CheckFailed,
    NotReady,
    NotFollower,
    OtherTerm,
    NoLeaderKnown,
    FollowsAnother,
    Incomplete,
    Lagging,
    /// It does not hear from its leader now (the leader's view, its last contact, its own
    /// sync state or its health check says so).
    Stale,
}

/// The verdict, with the sentence the user sees.
pub type Verdict = Result<(), (Unhealthy, String)>;

/// Whether `x` counts toward a quorum that can commit, given the cluster's single `leader`
/// (None when there is none, or several).
pub fn voter_health(x: &ReplicaReport, leader: Option<&ReplicaReport>, max_lag: u64) -> Verdict {
    let p = &x.pod;
    let no = |u: Unhealthy, why: String| Err((u, why));
    if x.raft.learner || !x.raft.role.is_voter() {
        return no(
            Unhealthy::NotVoter,
            format!("{p} is a {} and does not vote", x.raft.role.as_str()),
        );
    }
    // What it says of itself is not enough: the configuration decides who votes.
    let id = x.raft.member_id.as_deref().unwrap_or("none");
    match x.raft.configured {
        Configured::Voter | Configured::Unknown => {}
        Configured::NonVoter => {
            return no(
                Unhealthy::NotVoter,
                format!("{p} is a non-voter in the configuration (member id {id}), whatever role it reports"),
            )
        }
        Configured::NotListed => {
            return no(
                Unhealthy::NotVoter,
                format!("{p} is not in the configuration the cluster lists (member id {id})"),
            )
        }
        Configured::DuplicateId => {
            return no(
                Unhealthy::NotVoter,
                format!("{p} reports member id {id}, as another replica does: which of them the configuration means is unknown"),
            )
        }
    }
    if x.terminating {
        return no(Unhealthy::Terminating, format!("{p} is terminating"));
    }
    match x.raft.health.state {
        CheckState::Ok => {}
        CheckState::Unreachable => {
            return no(
                Unhealthy::Unreachable,
                format!(
                    "{p}'s health check is unreachable ({})",
                    x.raft.health.detail
                ),
            )
        }
        s => {
            return no(
                Unhealthy::CheckFailed,
                format!(
                    "{p}'s health check is {} ({})",
                    s.as_str(),
                    x.raft.health.detail
                ),
            )
        }
    }
    if !x.ready {
        return no(Unhealthy::NotReady, format!("{p} is not Ready"));
    }
    let is_leader = leader.is_some_and(|l| l.pod == *p);
    if is_leader {
        return Ok(());
    }
    if x.raft.role != Role::Follower {
        return no(
            Unhealthy::NotFollower,
            format!(
                "{p} is {}, neither the leader nor a follower",
                x.raft.role.as_str()
            ),
        );
    }
    let Some(l) = leader else {
        return no(
            Unhealthy::NoLeaderKnown,
            format!("{p} cannot be counted: the cluster has no single leader"),
        );
    };
    match (l.raft.term, x.raft.term) {
        (Some(lt), Some(t)) if lt != t => {
            return no(
                Unhealthy::OtherTerm,
                format!("{p} is in term {t}, the leader in {lt}"),
            )
        }
        (Some(_), None) => {
            return no(
                Unhealthy::Incomplete,
                format!("{p} did not report its term (the leader did)"),
            )
        }
        (None, Some(_)) => {
            return no(
                Unhealthy::Incomplete,
                format!(
                    "{p}'s term cannot be compared: the leader {} did not report its own",
                    l.pod
                ),
            )
        }
        _ => {}
    }
    if x.raft.has_leader == Some(false) {
        return no(Unhealthy::NoLeaderKnown, format!("{p} knows no leader"));
    }
    if x.raft.current == Some(false) {
        let why = match x.raft.last_contact_ms {
            Some(u64::MAX) => "it has never heard from a leader".to_string(),
            Some(ms) => format!(
                "it last heard from its leader {} ago",
                crate::model::human_duration(std::time::Duration::from_millis(ms))
            ),
            None => "by its system's own account it is not in step with its leader now".into(),
        };
        return no(Unhealthy::Stale, format!("{p} is not live: {why}"));
    }
    match (&x.raft.leader_pod, &x.raft.leader_id, &l.raft.leader_id) {
        (Some(lp), _, _) if *lp != l.pod => {
            return no(
                Unhealthy::FollowsAnother,
                format!("{p} follows {lp}, not the leader {}", l.pod),
            )
        }
        (None, Some(id), Some(lid)) if id != lid => {
            return no(
                Unhealthy::FollowsAnother,
                format!("{p} names leader {id}, the leader is {lid}"),
            )
        }
        (None, None, Some(_)) => {
            return no(
                Unhealthy::Incomplete,
                format!("{p} did not name its leader (the leader did)"),
            )
        }
        _ => {}
    }
    let leader_has_index = l.raft.commit_index.or(l.raft.applied_index).is_some();
    match x.raft.lag {
        Some(lag) if lag > max_lag => no(
            Unhealthy::Lagging,
            format!("{p} lags {lag} entries behind the leader (limit {max_lag})"),
        ),
        None if leader_has_index => no(
            Unhealthy::Incomplete,
            format!("{p}'s lag is unknown: it reported no index (the leader did)"),
        ),
        _ => Ok(()),
    }
}

/// What a member must be again once replaced: a voter (by [`counts_as_voter`]) unless the
/// report shows it as something else before its eviction; a member the report lacks is held
/// to the stricter test.
pub fn was_voter(report: &crate::report::ClusterReport, pod: &str) -> bool {
    report
        .replicas
        .iter()
        .find(|x| x.pod == pod)
        .is_none_or(counts_as_voter)
}

/// Whether a replacement has rejoined, for `drain`'s wait and the gate's record alike: a member that voted before its eviction (`was_voter`)
/// by the one definition of a healthy voter (`assess::voter`, within `--max-lag`): back as a
/// configured voter, so one that came back a non-voter has not rejoined; a learner or
/// observer by its own role's test (Ready, healthy, knowing the leader), so that one on a
/// drained node does not stall the drain.
pub fn rejoined(
    x: &ReplicaReport,
    was_voter: bool,
    leader: Option<&ReplicaReport>,
    max_lag: u64,
) -> Result<(), String> {
    if leader.is_none() {
        return Err("the cluster has no single leader".into());
    }
    // Where the system has a readiness check of its own beyond health (NATS: every stream
    // current), a replacement has rejoined only once it passes.
    if let Some(r) = x
        .raft
        .readiness
        .as_ref()
        .filter(|r| r.state != CheckState::Ok)
    {
        return Err(format!(
            "{}'s readiness check is {} ({})",
            x.pod,
            r.state.as_str(),
            r.detail
        ));
    }
    if !was_voter {
        let p = &x.pod;
        if x.terminating {
            return Err(format!("{p} is terminating"));
        }
        if x.raft.health.state != CheckState::Ok {
            return Err(format!(
                "{p}'s health check is {}",
                x.raft.health.state.as_str()
            ));
        }
        if !x.ready {
            return Err(format!("{p} is not Ready"));
        }
        if x.raft.has_leader == Some(false) {
            return Err(format!("{p} knows no leader"));
        }
        return Ok(());
    }
    voter_health(x, leader, max_lag).map_err(|(_, why)| why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Vec<ReplicaReport> {
        let m = |role| crate::plan::tests::M {
            role,
            health: CheckState::Ok,
            lag: Some(0),
            cordoned: false,
            node: 0,
        };
        crate::plan::tests::cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)])
            .replicas
    }

    fn leader(r: &[ReplicaReport]) -> &ReplicaReport {
        r.iter().find(|x| x.raft.role == Role::Leader).unwrap()
    }

    #[test]
    fn the_leader_and_its_caught_up_followers_count() {
        let r = cluster();
        for x in &r {
            assert_eq!(voter_health(x, Some(leader(&r)), 100), Ok(()), "{}", x.pod);
        }
    }

    #[test]
    fn a_candidate_or_unknown_role_does_not_count() {
        for role in [Role::Candidate, Role::Unknown] {
            let mut r = cluster();
            r[0].raft.role = role;
            let l = leader(&r).clone();
            assert_eq!(
                voter_health(&r[0], Some(&l), 100).unwrap_err().0,
                Unhealthy::NotFollower
            );
        }
    }

    #[test]
    fn a_missing_term_or_index_the_leader_reports_does_not_count() {
        let mut r = cluster();
        r[0].raft.term = None;
        let l = leader(&r).clone();
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::Incomplete
        );
        let mut r = cluster();
        r[0].raft.lag = None;
        let l = leader(&r).clone();
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::Incomplete
        );
    }

    #[test]
    fn a_follower_of_another_leader_or_of_none_does_not_count() {
        let mut r = cluster();
        r[0].raft.leader_pod = Some("elsewhere-9".into());
        let l = leader(&r).clone();
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::FollowsAnother
        );
        let mut r = cluster();
        r[0].raft.has_leader = Some(false);
        let l = leader(&r).clone();
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::NoLeaderKnown
        );
        let r = cluster();
        assert_eq!(
            voter_health(&r[0], None, 100).unwrap_err().0,
            Unhealthy::NoLeaderKnown
        );
    }

    /// A member and the leader known to each other by id only (no pod for the leader's id),
    /// the leader naming itself `id-1`, the member naming `mine`.
    fn by_ids(mine: Option<&str>) -> (ReplicaReport, ReplicaReport) {
        let r = cluster();
        let mut l = leader(&r).clone();
        l.raft.leader_id = Some("id-1".into());
        let mut x = r[0].clone();
        x.raft.leader_id = mine.map(str::to_string);
        (x, l)
    }

    // The six below were found missing by mutation testing (docs/testing.md): each of their
    // mutants of `voter_health` passed every unit test.

    #[test]
    fn a_follower_naming_the_leaders_id_counts() {
        let (x, l) = by_ids(Some("id-1"));
        assert_eq!(voter_health(&x, Some(&l), 100), Ok(()));
    }

    #[test]
    fn a_follower_naming_another_leaders_id_does_not_count() {
        let (x, l) = by_ids(Some("id-7"));
        assert_eq!(
            voter_health(&x, Some(&l), 100).unwrap_err().0,
            Unhealthy::FollowsAnother
        );
    }

    #[test]
    fn a_follower_naming_no_leader_where_the_leader_names_itself_is_incomplete() {
        let (x, l) = by_ids(None);
        assert_eq!(
            voter_health(&x, Some(&l), 100).unwrap_err().0,
            Unhealthy::Incomplete
        );
    }

    #[test]
    fn a_follower_without_an_index_counts_where_the_leader_reports_none_either() {
        let mut r = cluster();
        r[0].raft.lag = None;
        let mut l = leader(&r).clone();
        l.raft.commit_index = None;
        l.raft.applied_index = None;
        assert_eq!(voter_health(&r[0], Some(&l), 100), Ok(()));
    }

    #[test]
    fn a_follower_lagging_exactly_the_limit_counts_and_one_more_does_not() {
        let mut r = cluster();
        r[0].raft.lag = Some(100);
        let l = leader(&r).clone();
        assert_eq!(voter_health(&r[0], Some(&l), 100), Ok(()));
        r[0].raft.lag = Some(101);
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::Lagging
        );
    }

    #[test]
    fn a_learner_that_reports_a_follower_role_does_not_count() {
        let mut r = cluster();
        r[0].raft.learner = true;
        let l = leader(&r).clone();
        assert_eq!(
            voter_health(&r[0], Some(&l), 100).unwrap_err().0,
            Unhealthy::NotVoter
        );
    }
}
