//! Data parallelism: rayon's parallel slices natively; in the browser the same calls
//! run as plain iterators. wasm32-unknown-unknown has one thread (rayon would run
//! there on the calling thread anyway), and Pippin's own parallel calls cost ~15 KB of
//! wasm (rayon itself stays linked: the tokenizers crate uses it).

#[cfg(not(target_arch = "wasm32"))]
pub use rayon::prelude::*;

#[cfg(target_arch = "wasm32")]
pub use sequential::*;

#[cfg(target_arch = "wasm32")]
mod sequential {
    use std::slice::{Chunks, ChunksExactMut, ChunksMut};

    /// rayon's `par_chunks` on a shared slice, in order.
    pub trait ParallelSlice<T> {
        fn par_chunks(&self, size: usize) -> Chunks<'_, T>;
    }

    impl<T> ParallelSlice<T> for [T] {
        fn par_chunks(&self, size: usize) -> Chunks<'_, T> {
            self.chunks(size)
        }
    }

    /// rayon's `par_chunks_mut` / `par_chunks_exact_mut`, in order.
    pub trait ParallelSliceMut<T> {
        fn par_chunks_mut(&mut self, size: usize) -> ChunksMut<'_, T>;
        fn par_chunks_exact_mut(&mut self, size: usize) -> ChunksExactMut<'_, T>;
    }

    impl<T> ParallelSliceMut<T> for [T] {
        fn par_chunks_mut(&mut self, size: usize) -> ChunksMut<'_, T> {
            self.chunks_mut(size)
        }
        fn par_chunks_exact_mut(&mut self, size: usize) -> ChunksExactMut<'_, T> {
            self.chunks_exact_mut(size)
        }
    }
}
