//! One error type for the whole crate: every message names what was wrong and where,
//! so that it can be shown to a user (CLI) or a web developer (JS `Error`) as it is.

use std::fmt;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not a valid GGUF file, or is damaged.
    #[error("invalid GGUF file: {0}")]
    Gguf(String),
    /// The file ended before the data it announces.
    #[error("truncated file: {0}")]
    Truncated(String),
    /// A valid file that describes a model Pippin cannot run.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// A response format (JSON Schema, regex, grammar) that cannot be used.
    #[error("response format: {0}")]
    Grammar(String),
    /// A reply owns the model: the call was refused (calls are not queued).
    #[error("{0}")]
    Busy(String),
    /// A caller passed something out of range (prompt too long, bad option...).
    #[error("{0}")]
    Invalid(String),
    /// No usable GPU, a device limit exceeded, a lost device, a failed GPU operation.
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn gguf(msg: impl fmt::Display) -> Self {
        Error::Gguf(msg.to_string())
    }
    pub fn unsupported(msg: impl fmt::Display) -> Self {
        Error::Unsupported(msg.to_string())
    }
    pub fn gpu(msg: impl fmt::Display) -> Self {
        Error::Gpu(msg.to_string())
    }
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::Invalid(msg.to_string())
    }
}
