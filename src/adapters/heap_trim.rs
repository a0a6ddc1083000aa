//! Hands the heap's free pages back to the operating system after a start-up. Loading
//! a million heartbeats allocates and frees far more than the engine keeps (the rows, the
//! parsed definitions), and glibc's allocator keeps those freed pages resident unless
//! asked: 18 MB of 372 after a restart of 1,000,000 (`docs/performance.md`).

/// Returns the free pages of every arena of glibc's allocator to the system; a no-op on
/// other allocators and in the simulator, whose memory no one measures.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(madsim)))]
    // SAFETY: `malloc_trim` only releases memory the allocator holds free; it touches no
    // memory in use, and any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
