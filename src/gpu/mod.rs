//! The GPU device: an adapter and device with the limits and features Pippin can use,
//! buffer uploads in chunks and read-backs. The only module besides `wasm` that knows
//! whether it runs natively or in a browser.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// What the adapter offers beyond the WebGPU baseline; kernels pick faster paths by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    pub shader_f16: bool,
    pub subgroups: bool,
}

impl Caps {
    /// Every optional feature the adapter has.
    pub fn all() -> Caps {
        Caps {
            shader_f16: true,
            subgroups: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// A CPU implementation (lavapipe, SwiftShader): kernels pick shapes for it.
    pub software: bool,
    /// The fixed subgroup size when subgroup kernels are on, else 0.
    pub subgroup_size: u32,
    pub name: String,
    pub backend: String,
    pub driver: String,
}

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    pub caps: Caps,
    pub limits: wgpu::Limits,
    /// The most bytes one binding may hold, below the device's own limit when the
    /// caller asked (`with_max_binding`: to run a model as a smaller GPU would).
    binding_cap: u64,
    lost: Arc<Mutex<Option<String>>>,
    errors: Arc<Mutex<Option<Error>>>,
    /// GPU objects (buffers, bind groups, pipelines) created so far, by this `Gpu` and
    /// the kernels on it: the bench and tests check a decode step creates none.
    pub created: Arc<AtomicU64>,
    /// A stand-in for the device (`shadow`): buffers are placeholders.
    shadow: bool,
}

/// Bytes of a shadow device's buffers: more than any uniform or struct a kernel binds.
const SHADOW_BYTES: u64 = 256;

const UPLOAD_CHUNK: usize = 8 << 20;

impl Gpu {
    /// The best adapter there is, with every limit it has and the optional features we
    /// use. `allow` masks the optional features (tests force the baseline path).
    pub async fn new(allow: Caps) -> Result<Gpu> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        Self::with_instance(instance, allow).await
    }

    /// As `new`, with storage bindings held to `max_binding` bytes when given: every
    /// buffer a binding sees is split (or refused) as on a device whose
    /// `maxStorageBufferBindingSize` were that. The device itself is requested with
    /// the adapter's limits: WebGPU raises a requested limit under its default to the
    /// default, so the cap is Pippin's own.
    pub async fn with_max_binding(allow: Caps, max_binding: Option<u64>) -> Result<Gpu> {
        const LEAST: u64 = 1 << 16;
        let mut gpu = Self::new(allow).await?;
        if let Some(cap) = max_binding {
            if cap < LEAST {
                return Err(Error::invalid(format!(
                    "a storage binding limit of {cap} bytes is under the least Pippin runs with ({LEAST})"
                )));
            }
            gpu.binding_cap = cap / 4 * 4;
        }
        Ok(gpu)
    }

    async fn with_instance(instance: wgpu::Instance, allow: Caps) -> Result<Gpu> {
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::NoAdapter(format!(
                    "no WebGPU/Vulkan/Metal/DX12 adapter is available ({e})"
                ))
            })?;
        let info = adapter.get_info();
        let has = adapter.features();
        let mut features = wgpu::Features::empty();
        // Subgroup kernels assume one known size (lavapipe: 8, NVIDIA: 32).
        let fixed_size =
            info.subgroup_min_size == info.subgroup_max_size && info.subgroup_min_size >= 4;
        let caps = Caps {
            shader_f16: allow.shader_f16 && has.contains(wgpu::Features::SHADER_F16),
            subgroups: allow.subgroups && has.contains(wgpu::Features::SUBGROUP) && fixed_size,
        };
        let subgroup_size = if caps.subgroups {
            info.subgroup_min_size
        } else {
            0
        };
        if caps.shader_f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if caps.subgroups {
            features |= wgpu::Features::SUBGROUP;
        }
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("pippin"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("the adapter refused a device: {e}")))?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            if let Ok(mut l) = flag.lock() {
                *l = Some(format!("{reason:?}: {msg}"));
            }
        });
        // Validation and out-of-memory errors are kept and reported by the next call,
        // instead of wgpu's default panic.
        let errors = Arc::new(Mutex::new(None));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| match e {
                    wgpu::Error::OutOfMemory { .. } => Error::device_limits(format!(
                        "out of GPU memory ({e}); try a smaller model or maxContext"
                    )),
                    e => Error::gpu(e),
                });
            }
        }));
        let adapter = AdapterSummary {
            software: info.device_type == wgpu::DeviceType::Cpu,
            subgroup_size,
            name: info.name,
            backend: format!("{:?}", info.backend),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
        };
        Ok(Gpu {
            device,
            queue,
            adapter,
            caps,
            limits,
            binding_cap: u64::MAX,
            lost,
            errors,
            created: Arc::new(AtomicU64::new(0)),
            shadow: false,
        })
    }

    /// The same device, whose storage and read-back buffers are small placeholders and
    /// whose uploads write nothing: a model built on it from a GGUF header alone has
    /// every shape, format and binding of the real one, so recording its steps compiles
    /// every pipeline the real model needs before its weights have arrived (they are
    /// never submitted). Size checks still see the real sizes; errors go to this
    /// device's sink; its buffers are counted apart.
    pub fn shadow(&self) -> Gpu {
        Gpu {
            device: self.device.clone(),
            queue: self.queue.clone(),
            adapter: self.adapter.clone(),
            caps: self.caps,
            limits: self.limits.clone(),
            binding_cap: self.binding_cap,
            lost: self.lost.clone(),
            errors: self.errors.clone(),
            created: Arc::new(AtomicU64::new(0)),
            shadow: true,
        }
    }

    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The size to create for a buffer of `size` bytes, already whole words (a
    /// placeholder's on a shadow).
    fn created_size(&self, size: u64) -> u64 {
        if self.shadow {
            size.min(SHADOW_BYTES)
        } else {
            size
        }
    }

    /// GPU objects created so far (see `created`).
    pub fn objects_created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    /// wgpu's no-op backend (natively): every call returns at once and computes
    /// nothing. It reports a discrete GPU with 32-wide subgroups, so the kernels take
    /// the shapes a hardware GPU gets; the bench times a decode step's CPU side on it.
    #[cfg(not(target_arch = "wasm32"))]
    pub async fn noop() -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::NOOP;
        desc.backend_options.noop = wgpu::NoopBackendOptions {
            enable: true,
            device_type: Some(wgpu::DeviceType::DiscreteGpu),
            subgroup_min_size: Some(32),
            subgroup_max_size: Some(32),
            ..Default::default()
        };
        Self::with_instance(wgpu::Instance::new(desc), Caps::all()).await
    }

    /// Fails once the device has been lost; what was on it is gone.
    pub fn check_lost(&self) -> Result<()> {
        match self.lost.lock().ok().and_then(|l| l.clone()) {
            Some(why) => Err(Error::DeviceLost(format!(
                "the GPU device was lost ({why}); load the model again"
            ))),
            None => Ok(()),
        }
    }

    /// The first GPU error since the last call (a failed validation, out of memory).
    pub fn take_error(&self) -> Result<()> {
        self.check_lost()?;
        match self.errors.lock().ok().and_then(|mut e| e.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Lines to put before a kernel's source: browsers require `enable subgroups;`,
    /// which naga (the native compiler) does not accept yet.
    pub fn shader_prelude(&self) -> &'static str {
        if self.caps.subgroups && cfg!(target_arch = "wasm32") {
            "enable subgroups;\n"
        } else {
            ""
        }
    }

    /// Largest storage buffer one binding can see.
    pub fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
            .min(self.binding_cap)
    }

    /// A storage buffer holding `data`, written in chunks so no second full copy is made.
    pub fn upload(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        let size = (data.len() as u64).next_multiple_of(4).max(4);
        self.check_size(label, size)?;
        let buf = self.storage(label, size)?;
        if self.shadow {
            return Ok(buf);
        }
        for (i, chunk) in data.chunks(UPLOAD_CHUNK).enumerate() {
            let mut c = chunk.to_vec();
            c.resize(c.len().next_multiple_of(4), 0);
            self.queue.write_buffer(&buf, (i * UPLOAD_CHUNK) as u64, &c);
        }
        Ok(buf)
    }

    /// Writes `words` into `buf` from word `at` on (no copy is made here; the queue
    /// takes the bytes before it returns).
    pub fn write_words(&self, buf: &wgpu::Buffer, at: usize, words: &[u32]) -> Result<()> {
        let (start, len) = (at as u64 * 4, words.len() as u64 * 4);
        if self.shadow {
            return Ok(());
        }
        if start + len > buf.size() {
            return Err(Error::invalid(format!(
                "writing {len} bytes at {start} overruns a buffer of {}",
                buf.size()
            )));
        }
        self.queue
            .write_buffer(buf, start, bytemuck::cast_slice(words));
        Ok(())
    }

    pub fn upload_u32(&self, label: &str, data: &[u32]) -> Result<wgpu::Buffer> {
        self.upload(label, bytemuck::cast_slice(data))
    }

    pub fn upload_f32(&self, label: &str, data: &[f32]) -> Result<wgpu::Buffer> {
        self.upload(label, bytemuck::cast_slice(data))
    }

    /// A zeroed storage buffer that kernels read and write.
    pub fn storage(&self, label: &str, size: u64) -> Result<wgpu::Buffer> {
        let size = size.next_multiple_of(4).max(4);
        self.check_size(label, size)?;
        self.count();
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: self.created_size(size),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    pub fn uniform(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        self.count();
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: data,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
    }

    fn check_size(&self, label: &str, size: u64) -> Result<()> {
        if size > self.max_binding() {
            return Err(Error::device_limits(format!(
                "{label} needs a buffer of {size} bytes, over this device's maxStorageBufferBindingSize of {} by {}",
                self.max_binding(),
                size - self.max_binding()
            )));
        }
        Ok(())
    }

    /// Copies `size` bytes at `offset` of `buf` back to the CPU.
    pub async fn read(&self, buf: &wgpu::Buffer, offset: u64, size: u64) -> Result<Vec<u8>> {
        let enc = self.device.create_command_encoder(&Default::default());
        self.submit_and_read(enc, buf, offset, size).await
    }

    /// Submits `enc` with a copy of `size` bytes at `offset` of `buf` appended, and
    /// returns those bytes once the work is done: one submission per read-back.
    pub async fn submit_and_read(
        &self,
        enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let staging = self.readback(size);
        self.submit_and_read_into(enc, buf, offset, &staging, size)
            .await
    }

    /// A buffer to read `size` bytes back into, to reuse for every read of that size.
    pub fn readback(&self, size: u64) -> wgpu::Buffer {
        self.count();
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: self.created_size(size.next_multiple_of(4).max(4)),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// As `submit_and_read`, into `staging` (from `readback`, at least `size` bytes):
    /// nothing is created.
    pub async fn submit_and_read_into(
        &self,
        mut enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        offset: u64,
        staging: &wgpu::Buffer,
        size: u64,
    ) -> Result<Vec<u8>> {
        enc.copy_buffer_to_buffer(buf, offset, staging, 0, size);
        self.queue.submit([enc.finish()]);
        let bytes = self.map_read(staging).await?;
        Ok(bytes[..size as usize].to_vec())
    }

    /// Maps a MAP_READ buffer and returns its bytes.
    pub async fn map_read(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>> {
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait();
        let mapped = rx
            .await
            .map_err(|_| Error::gpu("the read-back was dropped"));
        self.take_error()?;
        mapped?.map_err(|e| Error::gpu(format!("read-back failed: {e}")))?;
        let bytes = staging
            .get_mapped_range(..)
            .map_err(|e| Error::gpu(format!("read-back failed: {e}")))?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }

    /// Natively, drives the device until submitted work is done (the browser does this
    /// by itself and resolves the map promise).
    fn wait(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
    }

    pub async fn read_f32(
        &self,
        buf: &wgpu::Buffer,
        offset_elems: u64,
        n: u64,
    ) -> Result<Vec<f32>> {
        let b = self.read(buf, offset_elems * 4, n * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&b))
    }
}
