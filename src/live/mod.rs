//! The real-cluster adapters: the I/O behind the drain and restart executors.
//!
//! [`cluster::KubeCluster`] implements [`crate::drain::ClusterOps`] over the Kubernetes API and the
//! replicas' health ports, [`nodes::KubeNodes`] implements [`crate::drain::nodes::NodeOps`],
//! [`evict`] sends evictions, [`lock`] holds the per-cluster Lease, [`progress`] draws the
//! TTY-only spinners, [`statefulset::KubeRollout`] implements
//! [`crate::drain::rollout::RolloutOps`] (the restart record, the update strategy), and
//! [`restart::restart_statefulset`] runs one StatefulSet's restart on them, start to end, as
//! [`crate::drain::nodes::drain_nodes`] runs a drain over [`nodes::KubeNodes`]. The executors
//! never import these; the verbs wire them together.

pub mod certs;
pub mod cluster;
pub mod evict;
pub mod gate;
pub mod lock;
pub mod nodes;
pub mod progress;
pub mod restart;
pub mod statefulset;
pub mod webhook;
