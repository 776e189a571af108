//! The gate against a generated world, judged by an oracle that knows the truth the gate only
//! looks at: which members are voters and which non-voters, which are hung, which were
//! evicted and are not back yet, which replacement is still catching up (its system's
//! readiness check failing), and who leads. Two gate replicas and a lock holder's evictions
//! are interleaved with plain evictors' at random; evictions that never take effect (a PDB
//! refused them further down the chain), replayed reviews, hangs and late replacements come
//! between them.
//!
//! Safety, at every admission, by the truth alone: the live voters left are a quorum of the
//! configured voters; no other member is down or unrejoined because of an earlier eviction;
//! the leader is never admitted. Liveness (the converse): once the faults end and every
//! replacement is back, every member's eviction is admitted within a bounded number of an
//! evictor's retries: the gate holds nothing back for ever. A member stuck standing for
//! election (cut off, its term climbing at every look) may outlast the faults: its own
//! eviction is then admitted first, and every other once its replacement is back.
//!
//! Runs on tokio's paused clock; the record is shared by both replicas as the API would keep
//! it (written only on the version read).

use std::collections::BTreeSet;
use std::sync::Mutex;

use proptest::prelude::*;

use super::*;
use crate::model::Role;
use crate::plan::tests::{cluster, m};
use crate::report::{Check, CheckState};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Healthy, caught up, as its kind.
    Up,
    /// Its Raft core is frozen (a fault, not an eviction).
    Hung,
    /// Evicted; its replacement does not answer yet.
    Gone,
    /// Its replacement answers, healthy, but its system's readiness check fails (catching up).
    Catching,
    /// It answers, standing for election and knowing no leader (cut off from the others; etcd
    /// and ZooKeeper say as much of a member that lost its leader), its term one higher at
    /// every look.
    Candidate,
}

#[derive(Debug, Clone)]
struct Member {
    voter: bool,
    node: u32,
    state: State,
    /// Bumped by every eviction that took effect.
    generation: u32,
}

#[derive(Debug, Clone)]
enum Op {
    /// A plain evictor's eviction of member `pod` through gate replica `replica`; `effect`:
    /// whether an admitted eviction goes through (a PDB may refuse it after the gate).
    Evict {
        pod: usize,
        replica: usize,
        effect: bool,
    },
    /// The lock holder's own eviction of `pod` (a `kubectl raft drain` of its node).
    HolderEvicts {
        pod: usize,
        effect: bool,
    },
    Hang(usize),
    Recover(usize),
    /// An evicted member's replacement starts and answers, still catching up.
    Replace(usize),
    /// A catching-up replacement has caught up.
    CaughtUp(usize),
    /// The last transfer the gate started ends: moved, or not.
    TransferEnds(bool),
    /// Member `i` wins an election just after the gate's next look (its leader paused, a
    /// hashicorp/raft follower timing out): the look says follower, the truth says leader.
    LeadsAfterLook(usize),
    /// Follower `i` is cut off and stands for election, again and again (until `Recover`).
    StandsForElection(usize),
    Tick(u64),
}

struct World {
    members: Vec<Member>,
    leader: usize,
    term: u64,
    /// How many times the replicas were asked (a candidate's term climbs with each).
    asked: std::cell::Cell<u64>,
    /// A member that wins an election just after the next look.
    leads_after_look: Option<usize>,
}

impl World {
    fn pod(i: usize) -> String {
        format!("etcd-{i}")
    }

    fn uid(&self, i: usize) -> String {
        format!("etcd-{i}-g{}", self.members[i].generation)
    }

    /// What the replicas answer now.
    fn report(&self) -> crate::report::ClusterReport {
        self.asked.set(self.asked.get() + 1);
        let ms: Vec<_> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, x)| {
                m(if i == self.leader {
                    Role::Leader
                } else if x.voter {
                    Role::Follower
                } else {
                    Role::Learner
                })
            })
            .collect();
        let mut r = cluster(&ms);
        let voters = self.members.iter().filter(|x| x.voter).count() as u32;
        r.summary.voters = voters;
        r.summary.quorum = crate::assess::quorum(voters);
        r.summary.leader = Some(Self::pod(self.leader));
        for (i, x) in r.replicas.iter_mut().enumerate() {
            let truth = &self.members[i];
            x.raft.term = Some(self.term);
            x.node = Some(format!("n{}", truth.node));
            match truth.state {
                State::Up => {}
                State::Hung | State::Gone => {
                    x.raft.health.state = CheckState::Unreachable;
                    x.raft.role = Role::Unknown;
                    x.ready = truth.state == State::Hung;
                }
                State::Catching => {
                    x.raft.readiness = Some(Check {
                        state: CheckState::Failing,
                        detail: "a stream is not current".into(),
                    });
                }
                State::Candidate => {
                    x.raft.role = Role::Candidate;
                    x.raft.has_leader = Some(false);
                    x.raft.term = Some(self.term + self.asked.get());
                    x.raft.health.state = CheckState::Failing;
                    x.ready = false;
                }
            }
        }
        r
    }
}

struct Sim {
    world: Mutex<World>,
    holder: String,
    /// Whether the holder holds the cluster's lock now.
    locked: Mutex<bool>,
    record: Mutex<Record>,
    transfers: Mutex<Vec<(String, Option<String>, TransferSlot)>>,
    clock: Mutex<f64>,
}

impl GateOps for &Sim {
    async fn not_sent_here(&self, _: &str) -> Result<Option<String>> {
        Ok(None)
    }

    async fn member(&self, namespace: &str, pod: &str) -> Result<Option<super::Member>> {
        let w = self.world.lock().unwrap();
        let i: usize = pod.trim_start_matches("etcd-").parse().unwrap();
        Ok(Some(super::Member {
            namespace: namespace.into(),
            name: "etcd".into(),
            pod: pod.into(),
            uid: Some(w.uid(i)),
            node: Some(format!("n{}", w.members[i].node)),
        }))
    }

    async fn lock_holder(&self, _: &super::Member) -> Result<Option<String>> {
        Ok((*self.locked.lock().unwrap()).then(|| self.holder.clone()))
    }

    async fn node(&self, name: &str) -> Result<Option<Node>> {
        // Every evictor of the property drains the member's node.
        Ok(Some(super::tests::a_node(name, true, &[])))
    }

    async fn look(&self, _: &super::Member, _: &DrainOptions) -> Result<Option<Look>> {
        let mut w = self.world.lock().unwrap();
        let pods = (0..w.members.len())
            .map(|i| crate::drain::fixtures::pod(&World::pod(i), Some(&w.uid(i))))
            .collect();
        let look = crate::drain::fixtures::look(w.report(), pods, true);
        if let Some(i) = w.leads_after_look.take() {
            if w.members[i].voter && w.members[i].state == State::Up {
                w.leader = i;
                w.term += 1;
            }
        }
        Ok(Some(look))
    }

    async fn controller_busy_now(&self, _: &Look) -> Option<String> {
        None
    }

    async fn member_now(&self, _: &Look, pod: &str) -> crate::plan::ReplicaView {
        crate::drain::fixtures::view_now(&self.world.lock().unwrap().report(), pod)
    }

    fn start_transfer(&self, _: Look, step: DrainStep, _: DrainOptions, slot: TransferSlot) {
        self.transfers
            .lock()
            .unwrap()
            .push((step.pod, step.target, slot));
    }

    async fn record(&self, _: &super::Member) -> Result<Record> {
        Ok(self.record.lock().unwrap().clone())
    }

    async fn write_record(&self, _: &super::Member, r: &Record) -> Result<Written> {
        Ok(super::tests::write_on_version(
            &mut self.record.lock().unwrap(),
            r,
        ))
    }

    fn now(&self) -> f64 {
        *self.clock.lock().unwrap()
    }
}

impl Sim {
    /// The oracle, at an admission of member `i`, from the truth alone.
    fn judge(&self, i: usize) -> Vec<String> {
        let w = self.world.lock().unwrap();
        let mut wrong = vec![];
        let voters = w.members.iter().filter(|x| x.voter).count() as u32;
        let live = w
            .members
            .iter()
            .enumerate()
            .filter(|(j, x)| *j != i && x.voter && x.state == State::Up)
            .count() as u32;
        if live < crate::assess::quorum(voters) {
            wrong.push(format!(
                "etcd-{i} admitted with {live} live voter(s) left of {voters}"
            ));
        }
        for (j, x) in w.members.iter().enumerate() {
            if j != i && matches!(x.state, State::Gone | State::Catching) {
                wrong.push(format!(
                    "etcd-{i} admitted while etcd-{j} is {:?} after its eviction",
                    x.state
                ));
            }
        }
        if i == w.leader {
            wrong.push(format!("etcd-{i} admitted while it leads"));
        }
        wrong
    }

    /// An admitted eviction takes effect: the member goes, a new generation to come.
    fn evicted(&self, i: usize) {
        let mut w = self.world.lock().unwrap();
        w.members[i].state = State::Gone;
        w.members[i].generation += 1;
    }

    fn finish_transfer(&self, moved: bool) {
        let Some((from, to, slot)) = self.transfers.lock().unwrap().pop() else {
            return;
        };
        if slot.lock().unwrap().as_ref().unwrap().ended.is_some() {
            return;
        }
        let mut w = self.world.lock().unwrap();
        let target = to
            .as_deref()
            .map(|t| t.trim_start_matches("etcd-").parse::<usize>().unwrap());
        let ended = match target {
            Some(t) if moved && w.members[t].state == State::Up && w.members[t].voter => {
                w.leader = t;
                Ok(Handover {
                    from,
                    to: World::pod(t),
                    term_before: Some(5),
                    term_after: Some(6),
                    window_ms: Some(20.0),
                })
            }
            _ => Err("the transfer failed".into()),
        };
        slot.lock().unwrap().as_mut().unwrap().ended = Some(ended);
    }

    fn tick(&self, secs: u64) {
        *self.clock.lock().unwrap() += secs as f64;
    }
}

fn arb_op(n: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..n, 0..2usize, any::<bool>()).prop_map(|(pod, replica, effect)| Op::Evict { pod, replica, effect }),
        1 => (0..n, any::<bool>()).prop_map(|(pod, effect)| Op::HolderEvicts { pod, effect }),
        1 => (0..n).prop_map(Op::Hang),
        2 => (0..n).prop_map(Op::Recover),
        2 => (0..n).prop_map(Op::Replace),
        2 => (0..n).prop_map(Op::CaughtUp),
        1 => any::<bool>().prop_map(Op::TransferEnds),
        1 => (0..n).prop_map(Op::LeadsAfterLook),
        1 => (0..n).prop_map(Op::StandsForElection),
        2 => prop::sample::select(vec![1u64, 5, 31, 61, 700]).prop_map(Op::Tick),
    ]
}

/// Three or five members, some non-voters among five, on two or three nodes (so members
/// share a node, as the lock holder's two-member drain needs).
fn arb_world() -> impl Strategy<Value = (Vec<Member>, usize)> {
    prop_oneof![Just(3usize), Just(5usize)].prop_flat_map(|n| {
        (
            prop::collection::vec((any::<bool>(), 0..3u32), n),
            0..n,
            Just(n),
        )
            .prop_map(|(kinds, leader, n)| {
                let members: Vec<Member> = kinds
                    .into_iter()
                    .enumerate()
                    .map(|(i, (learner, node))| Member {
                        // Non-voters only among five, never the leader: 4 or more voters.
                        voter: !(n == 5 && learner && i >= 3 && i != leader),
                        node,
                        state: State::Up,
                        generation: 0,
                    })
                    .collect();
                (members, leader)
            })
    })
}

/// Two replicas of the gate over one world and one record.
fn replicas(sim: &Sim) -> [Gate<&Sim>; 2] {
    let settings = || {
        let mut s = Settings::default();
        s.opts.max_lag = 100;
        s
    };
    [Gate::new(sim, settings()), Gate::new(sim, settings())]
}

fn request(i: usize, holder: Option<&str>) -> Request {
    Request {
        namespace: "db".into(),
        pod: World::pod(i),
        dry_run: false,
        lock_holder: holder.map(str::to_string),
    }
}

async fn run(sim: &Sim, ops: Vec<Op>) -> Result<(), String> {
    let gates = replicas(sim);
    let n = sim.world.lock().unwrap().members.len();
    for op in ops {
        match op {
            Op::Evict {
                pod,
                replica,
                effect,
            } => {
                let v = gates[replica].review(&request(pod, None)).await;
                if v.allowed() {
                    let wrong = sim.judge(pod);
                    if !wrong.is_empty() {
                        return Err(wrong.join("; "));
                    }
                    if effect {
                        sim.evicted(pod);
                    }
                }
            }
            Op::HolderEvicts { pod, effect } => {
                *sim.locked.lock().unwrap() = true;
                let v = gates[0].review(&request(pod, Some(&sim.holder))).await;
                *sim.locked.lock().unwrap() = false;
                if v.allowed() {
                    let wrong = sim.judge(pod);
                    if !wrong.is_empty() {
                        return Err(format!("the lock holder's eviction: {}", wrong.join("; ")));
                    }
                    if effect {
                        sim.evicted(pod);
                    }
                }
            }
            Op::Hang(i) => {
                let mut w = sim.world.lock().unwrap();
                if w.members[i].state == State::Up && i != w.leader {
                    w.members[i].state = State::Hung;
                }
            }
            Op::Recover(i) => {
                let mut w = sim.world.lock().unwrap();
                if matches!(w.members[i].state, State::Hung | State::Candidate) {
                    w.members[i].state = State::Up;
                }
            }
            Op::Replace(i) => {
                let mut w = sim.world.lock().unwrap();
                if w.members[i].state == State::Gone {
                    w.members[i].state = State::Catching;
                }
            }
            Op::CaughtUp(i) => {
                let mut w = sim.world.lock().unwrap();
                if w.members[i].state == State::Catching {
                    w.members[i].state = State::Up;
                }
            }
            Op::TransferEnds(moved) => sim.finish_transfer(moved),
            Op::LeadsAfterLook(i) => sim.world.lock().unwrap().leads_after_look = Some(i),
            Op::StandsForElection(i) => {
                let mut w = sim.world.lock().unwrap();
                if w.members[i].state == State::Up && w.members[i].voter && i != w.leader {
                    w.members[i].state = State::Candidate;
                }
            }
            Op::Tick(secs) => {
                tokio::time::advance(Duration::from_secs(secs)).await;
                sim.tick(secs);
            }
        }
    }
    // The faults end; every replacement comes back; transfers end. One member standing for
    // election may stay so (it is stuck, not faulted): the first, if any.
    let stuck = {
        let mut w = sim.world.lock().unwrap();
        let stuck = w.members.iter().position(|x| x.state == State::Candidate);
        for (i, x) in w.members.iter_mut().enumerate() {
            if Some(i) != stuck {
                x.state = State::Up;
            }
        }
        w.leads_after_look = None;
        stuck
    };
    while !sim.transfers.lock().unwrap().is_empty() {
        sim.finish_transfer(true);
    }
    // The converse: a node upgrade, node by node, as `kubectl drain` does it: every member on
    // the node evicted at once, each refused one retried every 5 s; a replacement comes back
    // healthy before the next round. The stuck candidate's node goes first (no other member
    // can go while it counts as down, as no other could while a member hangs).
    let nodes: Vec<u32> = {
        let w = sim.world.lock().unwrap();
        let first = stuck.map(|i| w.members[i].node);
        let rest: BTreeSet<u32> = w.members.iter().map(|x| x.node).collect();
        first
            .into_iter()
            .chain(rest.into_iter().filter(|n| Some(*n) != first))
            .collect()
    };
    for node in nodes {
        let mut left: Vec<usize> = (0..n)
            .filter(|i| sim.world.lock().unwrap().members[*i].node == node)
            .collect();
        for round in 0..60 {
            if left.is_empty() {
                break;
            }
            let mut still = vec![];
            for &i in &left {
                let v = gates[(i + round) % 2].review(&request(i, None)).await;
                if !v.allowed() {
                    still.push((i, v));
                    continue;
                }
                let wrong = sim.judge(i);
                if !wrong.is_empty() {
                    return Err(format!("after the faults: {}", wrong.join("; ")));
                }
                sim.evicted(i);
                // Its replacement starts on a node that is not being drained.
                let mut w = sim.world.lock().unwrap();
                w.members[i].state = State::Up;
                w.members[i].node = 100 + node;
            }
            if round == 59 && !still.is_empty() {
                return Err(format!(
                    "never admitted once every member was back: {still:?}"
                ));
            }
            left = still.into_iter().map(|(i, _)| i).collect();
            sim.finish_transfer(true);
            tokio::time::advance(Duration::from_secs(5)).await;
            sim.tick(5);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Whatever the evictors, the lock holder and the faults do, no admission breaks the
    /// truth's quorum, takes a second member while one is down or unrejoined, or takes the
    /// leader; and once the faults end, every member's eviction is admitted.
    #[test]
    fn the_gate_admits_one_member_at_a_time_and_holds_none_for_ever(
        (members, leader) in arb_world(),
        ops in prop::collection::vec(arb_op(5), 0..40),
    ) {
        let n = members.len();
        let ops: Vec<Op> = ops
            .into_iter()
            .filter(|op| match op {
                Op::Evict { pod, .. } | Op::HolderEvicts { pod, .. } => *pod < n,
                Op::Hang(i)
                | Op::Recover(i)
                | Op::Replace(i)
                | Op::CaughtUp(i)
                | Op::LeadsAfterLook(i)
                | Op::StandsForElection(i) => *i < n,
                _ => true,
            })
            .collect();
        let sim = Sim {
            world: Mutex::new(World {
                members,
                leader,
                term: 5,
                asked: std::cell::Cell::new(0),
                leads_after_look: None,
            }),
            holder: "alice@laptop pid 7 started 1 (kubectl raft drain n1)".into(),
            locked: Mutex::new(false),
            record: Mutex::new(Record::default()),
            transfers: Mutex::new(vec![]),
            clock: Mutex::new(1_000_000.0),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let outcome = rt.block_on(run(&sim, ops));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

/// The property's own positive control: a gate that admits every eviction breaks it at once
/// (the oracle does not pass a gate that decides nothing).
#[test]
fn the_oracle_catches_a_gate_that_admits_everything() {
    let sim = Sim {
        world: Mutex::new(World {
            members: (0..3)
                .map(|i| Member {
                    voter: true,
                    node: i,
                    state: State::Up,
                    generation: 0,
                })
                .collect(),
            leader: 1,
            term: 5,
            asked: std::cell::Cell::new(0),
            leads_after_look: None,
        }),
        holder: String::new(),
        locked: Mutex::new(false),
        record: Mutex::new(Record::default()),
        transfers: Mutex::new(vec![]),
        clock: Mutex::new(0.0),
    };
    sim.evicted(0);
    assert!(
        !sim.judge(2).is_empty(),
        "a second member while one is gone"
    );
    assert!(!sim.judge(1).is_empty(), "the leader");
}
