use super::*;
use crate::model::Role;
use crate::plan::tests::{cluster, m};
use crate::report::CheckState;

/// A scripted maintenance as a watch sees it, one report per round (2 s apart): etcd-1
/// leads; it hangs (no leader); etcd-0 is elected in term 6 while etcd-1 is evicted; etcd-1's
/// replacement appears on another node and follows.
fn rounds() -> Vec<ClusterReport> {
    let mut r1 = cluster(&[m(Role::Follower), m(Role::Leader), m(Role::Follower)]);
    r1.summary.leader = Some("etcd-1".into());
    let mut r2 = r1.clone();
    r2.summary.leader = None;
    r2.replicas[1].raft.health.state = CheckState::Unreachable;
    r2.replicas[1].raft.role = Role::Unknown;
    r2.summary.healthy_voters = 2;
    r2.summary.fault_tolerance = 0;
    let mut r3 = r2.clone();
    r3.summary.leader = Some("etcd-0".into());
    r3.summary.term = Some(6);
    r3.replicas[0].raft.role = Role::Leader;
    r3.replicas[1].terminating = true;
    r3.replicas[1].terminating_until = Some("2026-11-30T10:00:10Z".into());
    r3.replicas[1].disruption = Some("EvictionByEvictionAPI: Eviction API: evicting".into());
    let mut r4 = r3.clone();
    r4.replicas[1] = r1.replicas[1].clone();
    r4.replicas[1].raft.role = Role::Follower;
    r4.replicas[1].node = Some("n7".into());
    r4.summary.healthy_voters = 3;
    r4.summary.fault_tolerance = 1;
    vec![r1, r2, r3, r4]
}

/// The non-TTY stream and the JSON events of the scripted rounds.
fn streams() -> (String, String) {
    let rs = rounds();
    let mut lines = String::new();
    let mut events = String::new();
    let mut prev: Option<&ClusterReport> = None;
    for (i, r) in rs.iter().enumerate() {
        for c in diff(prev, Some(r)) {
            lines.push_str(&format!("t+{}s {}\n", i * 2, c.line()));
            let time = format!("2026-11-30T10:00:0{}Z", i * 2);
            events.push_str(&serde_json::to_string(&Event::new(time, &c)).unwrap());
            events.push('\n');
        }
        prev = Some(r);
    }
    (lines, events)
}

fn golden(name: &str, got: &str) {
    crate::golden::check(name, got);
}

#[test]
fn the_change_lines_match_the_golden_file() {
    golden("watch-lines.txt", &streams().0);
}

#[test]
fn the_json_events_match_the_golden_file() {
    golden("watch-events.jsonl", &streams().1);
}

#[test]
fn nothing_changed_is_nothing_said() {
    let r = rounds().remove(0);
    assert!(diff(Some(&r), Some(&r)).is_empty());
}

#[test]
fn the_tally_counts_one_leader_change_and_the_time_without_a_leader() {
    let mut t = Tally::new("db/etcd");
    for (i, r) in rounds().iter().enumerate() {
        t.observe(r, i as u64 * 2000);
    }
    assert_eq!(t.leader_changes, 1);
    assert_eq!(t.terms_advanced, 1);
    // Leader seen at 0 s, none at 2 s, etcd-0 at 4 s: 2 s from the first round without one
    // (the true window: within one interval of it).
    assert_eq!(t.longest_leaderless_ms, 2000);
    assert_eq!(t.leaderless_since_ms, None);
    assert!(t.unhealthy.is_empty());
}

#[test]
fn a_leader_lost_now_is_counted_until_now() {
    let rs = rounds();
    let mut t = Tally::new("db/etcd");
    t.observe(&rs[0], 0);
    t.observe(&rs[1], 2000);
    assert_eq!(t.leaderless_now_ms(3000), Some(1000));
    assert!(
        t.line(3000).contains("WITHOUT A LEADER for 1000ms"),
        "{}",
        t.line(3000)
    );
    assert!(t.line(3000).contains("not healthy: etcd-1"));
}

#[test]
fn the_same_leader_found_again_is_no_change() {
    let rs = rounds();
    let mut t = Tally::new("db/etcd");
    t.observe(&rs[0], 0);
    t.observe(&rs[1], 2000);
    t.observe(&rs[0], 4000);
    assert_eq!(t.leader_changes, 0);
    assert_eq!(t.longest_leaderless_ms, 2000);
}
