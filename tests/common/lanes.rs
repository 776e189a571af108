//! The agent's nodes in lanes (#41): `kworld-1..7` are lane 0, `kworld-8..14` lane 1. A test
//! that cordons, drains or silences nodes holds one lane exclusively, and its namespace's pods
//! are placed in that lane (the namespace's `scheduler.alpha.kubernetes.io/node-selector`,
//! which the API server's PodNodeSelector admission adds to every pod); a test that only
//! deploys shares a lane with others. So two exclusive tests run at once, each alone on
//! its own seven nodes, where before every exclusive test stopped the whole world.
//!
//! The real kubelets (`kreal-N`) carry every lane's label: they are one pool, so a test that
//! holds them exclusively (cordons or drains one) holds every lane (`exclusive_on`).

use std::cell::Cell;
use std::sync::{Condvar, Mutex};

/// Lanes of the agent's nodes.
pub const LANES: u32 = 2;
/// The agent's nodes in one lane: two more than the 5-member etcd needs (with required
/// anti-affinity, draining two of its nodes needs two spare ones).
pub const LANE_NODES: u32 = 7;

/// One lane of the agent's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane(pub u32);

impl Lane {
    /// The node label that puts a node in this lane.
    pub fn label(self) -> String {
        format!("kworld.local/lane-{}", self.0)
    }

    /// The lane's nodes, by name.
    pub fn nodes(self) -> Vec<String> {
        let prefix = super::Nodes::Agent.prefix();
        (1..=LANE_NODES)
            .map(|i| format!("{prefix}{}", self.0 * LANE_NODES + i))
            .collect()
    }

    /// The lane's last node: where tests put pods of their own on one named node.
    pub fn last_node(self) -> String {
        self.nodes().pop().expect("a lane has nodes")
    }
}

struct Held {
    readers: [u32; LANES as usize],
    writer: [bool; LANES as usize],
    /// A writer waits for this lane: no new reader enters it (writers do not starve).
    reserved: [Option<u64>; LANES as usize],
    /// The one test that waits to hold every lane (two reserving lanes in turn would deadlock).
    whole: Option<u64>,
    tickets: u64,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    readers: [0; LANES as usize],
    writer: [false; LANES as usize],
    reserved: [None; LANES as usize],
    whole: None,
    tickets: 0,
});
static CHANGED: Condvar = Condvar::new();

thread_local! {
    static CURRENT: Cell<Option<Lane>> = const { Cell::new(None) };
}

/// The lane the calling test holds, if it holds one.
pub fn current_lane() -> Option<Lane> {
    CURRENT.with(|c| c.get())
}

/// The lane of the calling test, or lane 0 for a test that holds none (its pods go anywhere).
pub fn lane() -> Lane {
    current_lane().unwrap_or(Lane(0))
}

/// A hold on lanes of nodes, released on drop.
#[must_use = "the lanes are released when the guard is dropped"]
pub struct NodesGuard {
    lanes: Vec<usize>,
    exclusive: bool,
}

impl Drop for NodesGuard {
    fn drop(&mut self) {
        let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
        for &l in &self.lanes {
            if self.exclusive {
                h.writer[l] = false;
            } else {
                h.readers[l] -= 1;
            }
        }
        CURRENT.with(|c| c.set(None));
        CHANGED.notify_all();
    }
}

fn wait(h: std::sync::MutexGuard<'static, Held>) -> std::sync::MutexGuard<'static, Held> {
    CHANGED.wait(h).unwrap_or_else(|e| e.into_inner())
}

/// A test asks for its nodes once: a second guard on the same thread would wait on its own
/// first one forever (with three test threads, #41, a silent hang costs the whole run).
fn asking_once() {
    assert!(
        current_lane().is_none(),
        "this test already holds nodes (lane {:?}): take one guard per test",
        current_lane()
    );
}

fn hold(lanes: Vec<usize>, exclusive: bool) -> NodesGuard {
    CURRENT.with(|c| c.set(Some(Lane(lanes[0] as u32))));
    NodesGuard { lanes, exclusive }
}

/// Shares the least busy lane that no writer holds or waits for.
pub fn shared_nodes() -> NodesGuard {
    asking_once();
    let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let open = (0..LANES as usize)
            .filter(|&l| !h.writer[l] && h.reserved[l].is_none())
            .min_by_key(|&l| h.readers[l]);
        if let Some(l) = open {
            h.readers[l] += 1;
            return hold(vec![l], false);
        }
        h = wait(h);
    }
}

/// Holds one lane alone: the first that is free, else the least busy one, reserved until its
/// readers are done.
pub fn exclusive_nodes() -> NodesGuard {
    asking_once();
    let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    h.tickets += 1;
    let me = h.tickets;
    loop {
        let free = |h: &Held, l: usize| {
            h.readers[l] == 0 && !h.writer[l] && h.reserved[l].is_none_or(|t| t == me)
        };
        // While a test waits to hold every lane, a writer takes only a lane it had reserved
        // (else writers taking turns in the lane the other freed would starve it).
        let open = |h: &Held, l: usize| h.whole.is_none() || h.reserved[l] == Some(me);
        if let Some(l) = (0..LANES as usize).find(|&l| free(&h, l) && open(&h, l)) {
            for r in h.reserved.iter_mut() {
                if *r == Some(me) {
                    *r = None;
                }
            }
            h.writer[l] = true;
            CHANGED.notify_all();
            return hold(vec![l], true);
        }
        if !h.reserved.contains(&Some(me)) && h.whole.is_none() {
            if let Some(l) = (0..LANES as usize)
                .filter(|&l| h.reserved[l].is_none())
                .min_by_key(|&l| (h.writer[l], h.readers[l]))
            {
                h.reserved[l] = Some(me);
            }
        }
        h = wait(h);
    }
}

/// Holds every lane alone (the real kubelets, or a resource of the whole world such as the
/// in-cluster gate's namespace); the test's pods go to lane 0.
pub fn exclusive_all_nodes() -> NodesGuard {
    asking_once();
    let mut h = HELD.lock().unwrap_or_else(|e| e.into_inner());
    h.tickets += 1;
    let me = h.tickets;
    loop {
        if h.whole.is_none() {
            h.whole = Some(me);
        }
        if h.whole != Some(me) {
            h = wait(h);
            continue;
        }
        for r in h.reserved.iter_mut() {
            if r.is_none() {
                *r = Some(me);
            }
        }
        let all = (0..LANES as usize)
            .all(|l| h.readers[l] == 0 && !h.writer[l] && h.reserved[l] == Some(me));
        if all {
            for l in 0..LANES as usize {
                h.reserved[l] = None;
                h.writer[l] = true;
            }
            h.whole = None;
            CHANGED.notify_all();
            return hold((0..LANES as usize).collect(), true);
        }
        h = wait(h);
    }
}
