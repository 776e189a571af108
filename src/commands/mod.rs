//! One module per verb; each wires discovery, observation, assessment and rendering.

pub mod local;
pub mod status;
pub mod systems;
pub mod yield_;
