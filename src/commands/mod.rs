//! The verbs, and only the verbs: each maps its flags to the library's settings (`crate::cli`'s
//! conversions), runs the survey, a planner or an executor over the adapters in `crate::live`,
//! and renders. `local` is `yield --local`, `watch` is `status --watch`, `complete` is the
//! dynamic completion `kubectl_complete-raft` calls, `copy` installs that helper.

pub mod complete;
pub mod copy;
pub mod drain;
pub mod gate;
pub mod local;
pub mod restart;
pub mod status;
pub mod systems;
pub mod version;
pub mod watch;
pub mod yield_;
