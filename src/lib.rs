//! kubectl-raft as a library: what the `kubectl raft` plugin is built from, for programs that
//! embed its decisions and its drain the way kubectl's `pkg/drain` is embedded.
//!
//! The floors, from the ground up:
//! - [`model`]: the data observation produces and every verb consumes (no I/O);
//! - [`select`], [`assess`], [`plan`], [`report`], [`render`], [`profile`], [`watch`]: pure decisions
//!   over that data (tests/offline/architecture.rs checks that none of them reaches I/O);
//! - [`drain`]: the drain executor, which acts only through the [`drain::ClusterOps`] trait
//!   it is given and reports through [`drain::Events`]: a controller can embed it with its own
//!   cluster operations, and its tests run it against a scripted cluster;
//! - [`transport`], [`observe`], [`survey`], [`connect`], [`handover`], [`groups`],
//!   [`nats`], [`credentials`], [`preflight`], [`live`]: the I/O (the Kubernetes API, replicas' health
//!   ports);
//! - [`commands`]: the verbs, [`cli`] their flags (one place for every flag).

pub mod actions;
pub mod assess;
pub mod cli;
pub mod commands;
pub mod connect;
pub mod credentials;
pub mod drain;
pub mod errors;
pub mod gate;
pub mod groups;
pub mod handover;
pub mod live;
pub mod model;
pub mod nats;
pub mod observe;
pub mod plan;
pub mod preflight;
pub mod profile;
pub mod render;
pub mod report;
pub mod select;
pub mod survey;
pub mod tls;
pub mod transport;
pub mod verbose;
pub mod watch;

#[cfg(test)]
mod golden;
