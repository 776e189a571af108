//! The real-cluster adapters: the I/O behind the drain and restart executors.
//!
//! [`cluster::KubeCluster`] implements [`crate::drain::ClusterOps`] over the Kubernetes API and the
//! replicas' health ports, [`nodes::KubeNodes`] implements [`crate::drain::nodes::NodeOps`],
//! [`evict`] sends evictions, [`lock`] holds the per-cluster Lease, [`progress`] draws the
//! TTY-only spinners, [`statefulset::KubeRollout`] implements
//! [`crate::drain::rollout::RolloutOps`] (the restart record, the update strategy), and
//! [`restart::restart_statefulset`] runs one StatefulSet's restart on them, start to end, as
//! [`crate::drain::nodes::drain_nodes`] runs a drain over [`nodes::KubeNodes`];
//! [`yield_::yield_cluster`] runs one yield and [`hook::hand_over_here`] the in-pod handover
//! of a preStop hook, both judged by the one handover verdict. The executors never import
//! these; the verbs wire them together.

pub mod callers;
pub mod certs;
pub mod cluster;
pub mod evict;
pub mod gate;
pub mod hook;
pub mod lock;
pub mod needs;
pub mod nodes;
pub mod progress;
pub mod restart;
pub mod statefulset;
pub mod webhook;
pub mod yield_;
