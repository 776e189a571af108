//! The executor against a generated world that does not cooperate, judged by an oracle that
//! knows the truth the planner never sees: which pods are configured voters (some pods that
//! say "follower" are non-voters, some are not in the configuration at all, and some
//! configured voters run in no pod), which are hung or cut off from their leader, and how
//! that changes from one look to the next (a member hangs or recovers, the member list fails
//! to answer, a scale-down takes pods away but not their places in the configuration).
//!
//! At every eviction the oracle counts, from the truth alone, the live configured voters that
//! remain; it must be a quorum of the configured voters. Runs on tokio's paused clock, so a
//! whole drain of minutes takes no time.

use std::cell::RefCell;
use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::model::Role;
use crate::plan::tests::{cluster, M};
use crate::report::{CheckState, ClusterReport, Configured, VotersFrom};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A voter of the configuration.
    Voter,
    /// Listed as a non-voter; says "follower" all the same.
    NonVoter,
    /// Not in the configuration at all (a server that came back under a new id); says
    /// "follower".
    Stranger,
}

#[derive(Debug, Clone)]
struct TPod {
    kind: Kind,
    node: u32,
    leader: bool,
    hung: bool,
    /// Answers, healthy, but no longer hears from its leader.
    cut_off: bool,
    /// Evicted; its replacement is not back yet.
    gone: bool,
}

/// What happens before a look.
#[derive(Debug, Clone)]
struct Event {
    hang: Option<usize>,
    recover: Option<usize>,
    cut: Option<usize>,
    membership_fails: bool,
    /// The last pod is scaled away (its voter stays configured: a ghost).
    scale_down: bool,
    /// This member wins an election just after the look (its leader paused; a hashicorp/raft
    /// follower that timed out): the look says follower, the truth says leader.
    leads_after_look: Option<usize>,
}

#[derive(Debug)]
struct World {
    pods: Vec<TPod>,
    /// Configured voters that run in no pod.
    ghosts: u32,
}

impl World {
    fn configured_voters(&self) -> u32 {
        self.pods.iter().filter(|p| p.kind == Kind::Voter).count() as u32 + self.ghosts
    }

    /// The oracle: live configured voters if `without` goes too.
    fn live_voters_without(&self, without: usize) -> u32 {
        self.pods
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                *i != without && p.kind == Kind::Voter && !p.hung && !p.cut_off && !p.gone
            })
            .count() as u32
    }
}

struct Sim {
    world: RefCell<World>,
    events: RefCell<std::vec::IntoIter<Event>>,
    /// This look's member list answers.
    readable: std::cell::Cell<bool>,
    violations: RefCell<Vec<String>>,
    evictions: std::cell::Cell<u32>,
    looks: std::cell::Cell<u32>,
    drained: BTreeSet<String>,
}

fn name(i: usize) -> String {
    format!("etcd-{i}")
}

impl Sim {
    fn index(&self, pod: &str) -> usize {
        pod.trim_start_matches("etcd-").parse().unwrap()
    }

    /// What the replicas and the member list say, from the truth.
    fn report(&self) -> ClusterReport {
        let w = self.world.borrow();
        let ms: Vec<M> = w
            .pods
            .iter()
            .map(|p| M {
                role: if p.leader {
                    Role::Leader
                } else {
                    Role::Follower
                },
                health: CheckState::Ok,
                lag: Some(0),
                cordoned: false,
                node: 0,
            })
            .collect();
        let mut r = cluster(&ms);
        let readable = self.readable.get();
        for (i, (x, p)) in r.replicas.iter_mut().zip(&w.pods).enumerate() {
            x.pod = name(i);
            x.node = Some(format!("n{}", p.node));
            if p.hung || p.gone {
                x.raft.health.state = CheckState::Unreachable;
                x.raft.role = Role::Unknown;
                x.ready = !p.gone;
            }
            x.raft.configured = match (readable, p.kind) {
                (false, _) => Configured::Unknown,
                (true, Kind::Voter) => Configured::Voter,
                (true, Kind::NonVoter) => Configured::NonVoter,
                (true, Kind::Stranger) => Configured::NotListed,
            };
            x.raft.current = Some(!p.cut_off);
            if p.leader {
                x.raft.current = Some(true);
            }
        }
        let leader = w.pods.iter().position(|p| p.leader && !p.hung && !p.gone);
        for x in r.replicas.iter_mut() {
            x.raft.leader_pod = leader.map(name);
        }
        r.summary.leader = leader.map(name);
        let voters = if readable {
            w.configured_voters()
        } else {
            // Counted from the pods: every one that says it votes.
            w.pods.len() as u32
        };
        r.summary.voters = voters;
        r.summary.quorum = crate::assess::quorum(voters);
        r.summary.voters_from = if readable {
            VotersFrom::Configuration
        } else {
            VotersFrom::Unreadable
        };
        r
    }

    /// The oracle, at an eviction: the pod going is a live configured voter, and without it the
    /// live configured voters are fewer than a quorum. (A pod that is no live voter costs no
    /// quorum, whatever state the cluster is in.)
    fn check(&self, pod: &str, what: &str) {
        let w = self.world.borrow();
        let i = self.index(pod);
        let p = &w.pods[i];
        let costs = p.kind == Kind::Voter && !p.hung && !p.cut_off && !p.gone;
        let live = w.live_voters_without(i);
        let quorum = crate::assess::quorum(w.configured_voters());
        if costs && live < quorum {
            self.violations.borrow_mut().push(format!(
                "{what} {pod} left {live} live configured voter(s) of {} (quorum {quorum}): {:?}",
                w.configured_voters(),
                w.pods
            ));
        }
    }
}

fn pod(name: &str) -> Pod {
    super::fixtures::pod(name, None)
}

use k8s_openapi::api::core::v1::Pod;

impl ClusterOps for Sim {
    async fn look(&self) -> Result<Option<Look>> {
        // The first look sees the world as generated (what the user's assumptions are about);
        // the events happen between the looks after it.
        let first = self.looks.get() == 0;
        self.looks.set(self.looks.get() + 1);
        let event = if first {
            None
        } else {
            self.events.borrow_mut().next()
        };
        let leads_after_look = event.as_ref().and_then(|e| e.leads_after_look);
        if let Some(e) = event {
            let mut w = self.world.borrow_mut();
            let n = w.pods.len();
            if let Some(i) = e.hang.filter(|i| *i < n) {
                w.pods[i].hung = true;
            }
            if let Some(i) = e.recover.filter(|i| *i < n) {
                w.pods[i].hung = false;
                w.pods[i].cut_off = false;
            }
            // A follower cut off from its leader (a leader cut off from all its followers
            // would be every follower's cut: not modelled).
            if let Some(i) = e.cut.filter(|i| *i < n && !w.pods[*i].leader) {
                w.pods[i].cut_off = true;
            }
            if e.scale_down && n > 1 && !w.pods[n - 1].leader {
                let gone = w.pods.pop().expect("a pod");
                if gone.kind == Kind::Voter {
                    w.ghosts += 1;
                }
            }
            self.readable.set(!e.membership_fails);
        } else {
            self.readable.set(true);
        }
        // A replacement is back at the next look, on a node that stays, as the voter (or
        // non-voter) it was.
        for p in self.world.borrow_mut().pods.iter_mut().filter(|p| p.gone) {
            p.gone = false;
            p.hung = false;
            p.cut_off = false;
        }
        let report = self.report();
        let pods = report.replicas.iter().map(|x| pod(&x.pod)).collect();
        let mut w = self.world.borrow_mut();
        if let Some(i) = leads_after_look.filter(|i| {
            w.pods
                .get(*i)
                .is_some_and(|p| p.kind == Kind::Voter && !p.hung && !p.cut_off && !p.gone)
        }) {
            for (j, p) in w.pods.iter_mut().enumerate() {
                p.leader = j == i;
            }
        }
        Ok(Some(super::fixtures::look(report, pods, false)))
    }

    async fn check_lock(&self) -> Result<()> {
        Ok(())
    }

    fn lock_lost(&self) -> Option<String> {
        None
    }

    async fn transfer(&self, _: &Look, step: &DrainStep) -> Result<Handover> {
        let to = step.target.clone().expect("a target");
        let i = self.index(&to);
        let mut w = self.world.borrow_mut();
        let t = &w.pods[i];
        if t.kind != Kind::Voter || t.hung || t.cut_off || t.gone {
            bail!("{to} cannot take over");
        }
        for (j, p) in w.pods.iter_mut().enumerate() {
            p.leader = j == i;
        }
        Ok(Handover {
            from: step.pod.clone(),
            to,
            term_before: None,
            term_after: None,
            window_ms: None,
        })
    }

    async fn move_groups_off(&self, _: &Look, _: &str, _: Duration) -> Result<Option<GroupsMoved>> {
        Ok(None)
    }

    async fn refused_now(&self, _: &Look, _: &str) -> Option<String> {
        None
    }

    async fn controller_busy_now(&self, _: &Look) -> Option<String> {
        None
    }

    async fn member_now(&self, _: &Look, pod: &str) -> crate::plan::ReplicaView {
        super::fixtures::view_now(&self.report(), pod)
    }

    async fn evict(&self, _: &Look, pod: &str) -> Result<Attempt> {
        self.check(pod, "evicting");
        // A member evicted as a follower must not lead by the truth: that eviction starts an
        // election where the plan meant a transfer.
        if self.world.borrow().pods[self.index(pod)].leader {
            self.violations.borrow_mut().push(format!(
                "evicted {pod} as a follower while it leads: an election instead of a transfer"
            ));
        }
        self.evictions.set(self.evictions.get() + 1);
        let i = self.index(pod);
        let mut w = self.world.borrow_mut();
        w.pods[i].gone = true;
        w.pods[i].node = 50 + i as u32;
        Ok(Attempt::Done(Evicted::Accepted))
    }

    async fn wait_gone(&self, _: &Look, _: &str) -> Result<()> {
        Ok(())
    }

    async fn evict_leader(&self, _: &Look, step: &DrainStep) -> Result<Election> {
        self.check(&step.pod, "evicting the leader");
        let i = self.index(&step.pod);
        let mut w = self.world.borrow_mut();
        w.pods[i].gone = true;
        w.pods[i].leader = false;
        w.pods[i].node = 50 + i as u32;
        let next = w
            .pods
            .iter()
            .position(|p| p.kind == Kind::Voter && !p.hung && !p.cut_off && !p.gone);
        match next {
            Some(j) => {
                w.pods[j].leader = true;
                Ok(Election {
                    new_leader: name(j),
                    window_ms: None,
                })
            }
            None => bail!("no new leader"),
        }
    }

    async fn wait_replacement_ready(&self, _: &Look, _: &str) -> Result<()> {
        Ok(())
    }

    async fn pause(&self, d: Duration) -> bool {
        tokio::time::sleep(d).await;
        false
    }

    fn interrupted(&self) -> bool {
        false
    }
}

struct Quiet;

impl Events for Quiet {
    fn doing(&self, _: &str) {}
    fn did(&self, _: &str) {}
}

fn arb_pod() -> impl Strategy<Value = TPod> {
    (
        prop_oneof![6 => Just(Kind::Voter), 2 => Just(Kind::NonVoter), 1 => Just(Kind::Stranger)],
        1u32..=6,
        any::<bool>(),
        prop_oneof![9 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(kind, node, hung, cut_off)| TPod {
            kind,
            node,
            leader: false,
            hung: hung && node % 3 == 0,
            cut_off,
            gone: false,
        })
}

fn arb_event() -> impl Strategy<Value = Event> {
    (
        prop::option::weighted(0.2, 0usize..7),
        prop::option::weighted(0.2, 0usize..7),
        prop::option::weighted(0.1, 0usize..7),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.1),
        prop::option::weighted(0.1, 0usize..7),
    )
        .prop_map(
            |(hang, recover, cut, membership_fails, scale_down, leads_after_look)| Event {
                hang,
                recover,
                cut,
                membership_fails,
                scale_down,
                leads_after_look,
            },
        )
}

fn arb_world() -> impl Strategy<Value = World> {
    (
        prop::collection::vec(arb_pod(), 2..=7),
        0u32..=2,
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut pods, ghosts, at)| {
            // One leader, a live voter (a world without one is not drained at all).
            let voters: Vec<usize> = (0..pods.len())
                .filter(|i| pods[*i].kind == Kind::Voter)
                .collect();
            if voters.is_empty() {
                pods[0].kind = Kind::Voter;
            }
            let voters: Vec<usize> = (0..pods.len())
                .filter(|i| pods[*i].kind == Kind::Voter)
                .collect();
            let l = voters[at.index(voters.len())];
            pods[l].leader = true;
            pods[l].hung = false;
            pods[l].cut_off = false;
            World { pods, ghosts }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Whatever the generated world does between looks, no eviction the executor takes
    /// leaves fewer live configured voters than a quorum, by the truth (not by what the
    /// replicas say, and not by assess::voter).
    #[test]
    fn no_eviction_leaves_fewer_live_configured_voters_than_a_quorum(
        world in arb_world(),
        events in prop::collection::vec(arb_event(), 0..12),
        drained in prop::collection::btree_set(1u32..=6, 1..=3),
        assume in any::<bool>(),
    ) {
        let mut world = world;
        if assume {
            // --assume-voters-are-pods, where it is true when the drain starts: every pod a
            // voter, none elsewhere. (A scale-down mid-run makes it false: the run must not
            // believe the pods then.)
            world.ghosts = 0;
            for p in &mut world.pods {
                p.kind = Kind::Voter;
            }
        }
        let drained: BTreeSet<String> = drained.into_iter().map(|n| format!("n{n}")).collect();
        let sim = Sim {
            world: RefCell::new(world),
            events: RefCell::new(events.into_iter()),
            readable: std::cell::Cell::new(true),
            violations: RefCell::new(vec![]),
            evictions: std::cell::Cell::new(0),
            looks: std::cell::Cell::new(0),
            drained: drained.clone(),
        };
        let opts = DrainOptions {
            nodes: drained,
            max_lag: 100,
            assume_voters_are_pods: if assume {
                crate::plan::drain::Assume::Every
            } else {
                crate::plan::drain::Assume::Nothing
            },
            ..Default::default()
        };
        let settings = Settings { timeout: Duration::from_secs(30) };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(drain_cluster(&sim, &Quiet, &opts, &settings, "db", "etcd"));
        let v = sim.violations.borrow();
        prop_assert!(v.is_empty(), "{} (nodes {:?})", v.join("\n"), sim.drained);
    }
}
