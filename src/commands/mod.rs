//! One module per verb; each wires discovery, observation, assessment and rendering.

pub mod status;
pub mod systems;
