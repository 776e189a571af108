//! The end-to-end suites, one test binary (#41): every suite that needs the test world is a
//! module here, so the world is started once, the lanes of its nodes (tests/common/lanes.rs)
//! are shared by every test, and the test threads stay busy from
//! the first test to the last instead of idling at the end of each of twenty binaries run in
//! turn.
//!
//! `cargo test --test e2e gate::` runs one suite, `cargo test --test e2e NAME` one test.
//! world_lifecycle, which takes the world down, is a binary of its own and runs after this one.

#[path = "../common/mod.rs"]
mod common;

mod completion;
mod drain;
mod drain_adversity;
mod gate;
mod hraft;
mod keeper;
mod nats;
mod nemesis;
mod rbac;
mod restart;
mod spurctld;
mod status;
mod tls;
mod trust;
mod watch;
mod world;
mod world_fidelity;
mod yield_;
