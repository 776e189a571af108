//! The tests that need no test world, one test binary (#41): the code's floors
//! (architecture), the command line (cli), the docs against the code (docs), and the
//! dependencies' licences (licences).

#[path = "../source/mod.rs"]
mod source;

mod architecture;
mod cli;
mod docs;
mod licences;
