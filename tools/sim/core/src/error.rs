//! Errors of the simulator core: one enum, each variant a semantic failure.

use std::fmt;

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, SimError>;

/// Everything that can go wrong when configuring or driving the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// The machine configuration is inconsistent (field name, explanation).
    Config(String),
    /// An operation referred to something that does not exist (kind, id).
    NotFound(&'static str, u64),
    /// The physical memory of a NUMA node is exhausted.
    OutOfMemory(u32),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Config(msg) => write!(f, "bad simulator configuration: {msg}"),
            SimError::NotFound(kind, id) => write!(f, "no {kind} with id {id}"),
            SimError::OutOfMemory(node) => write!(f, "NUMA node {node} has no free page left"),
        }
    }
}

impl std::error::Error for SimError {}
