//! Heap accounting: a global allocator that counts the bytes live now and the most
//! live at once since the last `reset_peak`. The wasm module and the CLI install it
//! (`#[global_allocator] static A: Counting = Counting;`), so `llm.stats()` and
//! `pippin bench --json` say what loading a model costs in memory: the file streams
//! to the GPU slice by slice and the heap must not grow with the model.

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single block of memory Pippin asks for (one tensor as the loader holds
/// it): 1 GiB in a wasm32 instance (4 GiB of address space in all), 1 TiB natively.
pub const MAX_BLOCK: u64 = if cfg!(target_arch = "wasm32") {
    1 << 30
} else {
    1 << 40
};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counted. One relaxed add per allocation: no measurable cost.
pub struct Counting;

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
    LARGEST.fetch_max(n, Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the counters
// only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            if new >= l.size() {
                grew(new - l.size());
            } else {
                LIVE.fetch_sub(l.size() - new, Relaxed);
            }
        }
        q
    }
}

/// Heap bytes now and at most since the last `reset_peak` (both 0 when the program
/// did not install `Counting`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Heap {
    pub live_bytes: u64,
    pub peak_bytes: u64,
    /// The largest single allocation (or growth) since the last `reset_peak`.
    pub largest_bytes: u64,
}

pub fn heap() -> Heap {
    Heap {
        live_bytes: LIVE.load(Relaxed) as u64,
        peak_bytes: PEAK.load(Relaxed) as u64,
        largest_bytes: LARGEST.load(Relaxed) as u64,
    }
}

/// Starts a new peak from what is live now (before a load, to measure it alone).
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
    LARGEST.store(0, Relaxed);
}
