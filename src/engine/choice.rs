//! Which backend runs a model: WebGPU on a hardware adapter, the CPU backend where
//! WebGPU is missing or its only adapter is a software one (SwiftShader, llvmpipe,
//! lavapipe: 10–20× slower than the CPU backend), or what the caller asked for.

use super::BackendKind;
use crate::error::{Error, Result};
use serde::Deserialize;

/// What the caller asked for (`Pippin.load(src, { backend })`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendRequest {
    #[default]
    Auto,
    Webgpu,
    Cpu,
}

/// What the page found of WebGPU before loading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WebGpuProbe {
    /// No `navigator.gpu`.
    #[default]
    Missing,
    /// `requestAdapter()` gave none (blocklisted or disabled GPU), or did not answer in time.
    NoAdapter,
    /// A fallback or CPU adapter (SwiftShader, llvmpipe, lavapipe).
    Software,
    Hardware,
}

/// The backend for `request` given `probe`, and why (shown by `info().backend`).
/// Asking for WebGPU where it is missing is the caller's error to report.
pub fn choose(request: BackendRequest, probe: WebGpuProbe) -> (BackendKind, &'static str) {
    match (request, probe) {
        (BackendRequest::Cpu, _) => (BackendKind::Cpu, "asked for (backend: \"cpu\")"),
        (BackendRequest::Webgpu, _) => (BackendKind::Webgpu, "asked for (backend: \"webgpu\")"),
        (BackendRequest::Auto, WebGpuProbe::Hardware) => {
            (BackendKind::Webgpu, "a hardware WebGPU adapter")
        }
        (BackendRequest::Auto, WebGpuProbe::Software) => (
            BackendKind::Cpu,
            "the only WebGPU adapter is a software one (e.g. SwiftShader): the CPU backend is faster",
        ),
        (BackendRequest::Auto, WebGpuProbe::NoAdapter) => {
            (BackendKind::Cpu, "WebGPU gave no adapter (GPU blocklisted, disabled or not answering)")
        }
        (BackendRequest::Auto, WebGpuProbe::Missing) => {
            (BackendKind::Cpu, "WebGPU is not available in this browser")
        }
    }
}

/// When the WebGPU device that `choose` picked does not start (`error`): "auto"
/// goes on with the CPU backend (`Ok`: why, for `info().backend`; nothing of the
/// model has been read yet), an explicit "webgpu" fails with the device's error.
pub fn without_webgpu(request: BackendRequest, error: Error) -> Result<String> {
    match request {
        BackendRequest::Auto => Ok(format!("WebGPU did not start ({error})")),
        _ => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_webgpu_only_on_hardware() {
        use WebGpuProbe::*;
        for (probe, kind) in [
            (Hardware, BackendKind::Webgpu),
            (Software, BackendKind::Cpu),
            (NoAdapter, BackendKind::Cpu),
            (Missing, BackendKind::Cpu),
        ] {
            assert_eq!(choose(BackendRequest::Auto, probe).0, kind, "{probe:?}");
            assert_eq!(choose(BackendRequest::Cpu, probe).0, BackendKind::Cpu);
            assert_eq!(choose(BackendRequest::Webgpu, probe).0, BackendKind::Webgpu);
        }
    }

    #[test]
    fn only_auto_falls_back_when_webgpu_does_not_start() {
        let lost = || Error::gpu("no device");
        let why = without_webgpu(BackendRequest::Auto, lost()).unwrap();
        assert!(why.starts_with("WebGPU did not start") && why.contains("no device"));
        let e = without_webgpu(BackendRequest::Webgpu, lost()).unwrap_err();
        assert!(e.to_string().contains("no device"), "{e}");
    }
}
