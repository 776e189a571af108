//! One module per verb; each wires discovery, observation, assessment and rendering.

pub mod complete;
pub mod copy;
pub mod drain;
pub mod local;
pub mod progress;
pub mod restart;
pub mod status;
pub mod systems;
pub mod version;
pub mod watch;
pub mod yield_;
