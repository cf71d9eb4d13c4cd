//! One error type for the whole crate: every message names what was wrong and where,
//! so that it can be shown to a user (CLI) or a web developer (JS `Error`) as it is.
//! `Error::code` is the stable name JavaScript gets with it (`err.code`), so that apps
//! branch on what happened without matching message text.

use std::fmt;

#[derive(Clone, Debug, thiserror::Error)]
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
    /// The chat template failed on these messages (or has none).
    #[error("chat template: {0}")]
    Template(String),
    /// A response format (JSON Schema, regex, grammar) that cannot be used.
    #[error("response format: {0}")]
    Grammar(String),
    /// A reply owns the model: the call was refused (calls are not queued).
    #[error("{0}")]
    Busy(String),
    /// A caller passed something out of range (bad option, unknown adapter...).
    #[error("{0}")]
    Invalid(String),
    /// The prompt, or the tokens to run, do not fit in the context.
    #[error("{0}")]
    ContextFull(String),
    /// Reading the model's bytes failed (network, a stream that errored).
    #[error("{0}")]
    Download(String),
    /// No GPU adapter, or it refused a device.
    #[error("GPU: {0}")]
    NoAdapter(String),
    /// The model needs more than this device allows (a buffer over its limits, out of
    /// GPU memory, over the CPU backend's memory). The message says which.
    #[error("{0}")]
    DeviceLimits(String),
    /// The device was lost (driver reset, tab in the background too long), or a CPU
    /// worker thread holding part of the model: load again. The message says which.
    #[error("{0}")]
    DeviceLost(String),
    /// A GPU operation failed in a way that is a bug (validation, a missing plan).
    #[error("GPU: {0}")]
    Gpu(String),
    /// An invariant of Pippin's own code broke: a bug, whatever the caller did.
    #[error("internal error (a bug in Pippin): {0}")]
    Internal(String),
    /// Reading a file failed (its text: an error is cloned, for every later call of a
    /// reply that failed).
    #[error("I/O error: {0}")]
    Io(String),
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every code `Error::code` can return, in the order docs/javascript.md lists them (the JS
/// layer adds `NoWebGPU`, `Aborted` and `Disposed`, which only it can see).
pub const CODES: [&str; 10] = [
    "NoAdapter",
    "Download",
    "InvalidModel",
    "Unsupported",
    "DeviceLimits",
    "Busy",
    "ContextFull",
    "BadOptions",
    "DeviceLost",
    "Internal",
];

/// `Error::name(msg)` for the variants that carry a message alone.
macro_rules! constructors {
    ($($f:ident => $v:ident),* $(,)?) => {
        $(pub fn $f(msg: impl fmt::Display) -> Self {
            Error::$v(msg.to_string())
        })*
    };
}

impl Error {
    constructors! {
        gguf => Gguf,
        unsupported => Unsupported,
        gpu => Gpu,
        invalid => Invalid,
        context_full => ContextFull,
        device_limits => DeviceLimits,
        internal => Internal,
    }

    /// The stable name of what went wrong, for programs (JavaScript's `err.code`).
    /// `Internal` is a bug in Pippin or the GPU driver, not something a caller did.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Gguf(_) | Error::Truncated(_) | Error::Tokenizer(_) => "InvalidModel",
            Error::Unsupported(_) => "Unsupported",
            Error::Template(_) | Error::Grammar(_) | Error::Invalid(_) => "BadOptions",
            Error::Busy(_) => "Busy",
            Error::ContextFull(_) => "ContextFull",
            Error::Download(_) | Error::Io(_) => "Download",
            Error::NoAdapter(_) => "NoAdapter",
            Error::DeviceLimits(_) => "DeviceLimits",
            Error::DeviceLost(_) => "DeviceLost",
            Error::Gpu(_) | Error::Internal(_) => "Internal",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JavaScript apps branch on these names: each one the engine gives is typed in
    /// the .d.ts, listed in js/errors.js, and explained in docs/javascript.md.
    #[test]
    fn every_code_is_documented_for_javascript() {
        let docs = [
            include_str!("../js/index.d.ts"),
            include_str!("../js/errors.js"),
            include_str!("../docs/javascript.md"),
        ];
        let s = String::new;
        let all = [
            Error::Gguf(s()),
            Error::Truncated(s()),
            Error::Unsupported(s()),
            Error::Tokenizer(s()),
            Error::Template(s()),
            Error::Grammar(s()),
            Error::Busy(s()),
            Error::Invalid(s()),
            Error::ContextFull(s()),
            Error::Download(s()),
            Error::NoAdapter(s()),
            Error::DeviceLimits(s()),
            Error::DeviceLost(s()),
            Error::Gpu(s()),
            Error::Internal(s()),
            Error::from(std::io::Error::other("x")),
        ];
        for e in &all {
            assert!(CODES.contains(&e.code()), "{e:?}");
        }
        for c in CODES {
            let quoted = format!("\"{c}\"");
            for d in docs {
                assert!(d.contains(&quoted) || d.contains(&format!("`{c}`")), "{c}");
            }
        }
    }
}
