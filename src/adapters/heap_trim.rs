//! Hands the heap's free pages back to the operating system after a start-up. Loading
//! a million heartbeats allocates and frees far more than the engine keeps (the rows, the
//! parsed definitions), and both allocators the daemon may run on keep those freed pages
//! resident unless asked: glibc's until trimmed (18 MB of 372 after a restart of
//! 1,000,000, `docs/performance.md`), jemalloc's until they decay, seconds later and only
//! while the process allocates (ADR 0058).

/// Returns the free pages of every arena of glibc's allocator and, in a build with the
/// `jemalloc` feature (the daemon's allocator), of jemalloc's to the system; a no-op on
/// other allocators and in the simulator, whose memory no one measures.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu", not(madsim)))]
    // SAFETY: `malloc_trim` only releases memory the allocator holds free; it touches no
    // memory in use, and any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
    #[cfg(all(feature = "jemalloc", not(madsim)))]
    purge_jemalloc();
}

/// jemalloc's `arena.<all>.purge`: every arena's unused dirty pages go back at once.
#[cfg(all(feature = "jemalloc", not(madsim)))]
fn purge_jemalloc() {
    /// `MALLCTL_ARENAS_ALL`: the index that names every arena.
    const PURGE_ALL_ARENAS: &std::ffi::CStr = c"arena.4096.purge";
    // SAFETY: the name is NUL-terminated, and `purge` reads and writes no value (all
    // pointers null, length 0); it only releases pages no allocation holds. Its status is
    // ignored: a purge that fails leaves the pages to decay as they would anyway.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL_ARENAS.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
    }
}

/// One of jemalloc's counters (`stats.allocated`, `stats.arenas.4096.pdirty`), refreshed
/// first (an `epoch` write); 0 when jemalloc does not know the name.
#[cfg(all(feature = "jemalloc", not(madsim)))]
pub fn jemalloc_counter(name: &std::ffi::CStr) -> usize {
    let mut epoch: u64 = 1;
    let mut value: usize = 0;
    let mut length = std::mem::size_of::<usize>();
    // SAFETY: NUL-terminated names; `epoch` is written from a u64 of its size, and the
    // counter read into a usize with its length, as jemalloc documents them.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            c"epoch".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut epoch).cast(),
            std::mem::size_of::<u64>(),
        );
        tikv_jemalloc_sys::mallctl(name.as_ptr(), (&raw mut value).cast(), &raw mut length, std::ptr::null_mut(), 0);
    }
    value
}

#[cfg(all(test, feature = "jemalloc", not(madsim)))]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use tikv_jemallocator::Jemalloc;

    use super::{jemalloc_counter, release_free_heap};

    #[test]
    fn a_start_ups_freed_pages_go_back_to_the_system() {
        // What a start-up does: many small blocks made, then freed (through jemalloc
        // directly: a test binary runs on the system's allocator).
        let layout = Layout::from_size_align(256, 8).expect("a valid layout");
        // SAFETY: each block is allocated with `layout` and freed once with it.
        let blocks: Vec<*mut u8> = (0..100_000).map(|_| unsafe { Jemalloc.alloc(layout) }).collect();
        assert!(blocks.iter().all(|block| !block.is_null()));
        for block in blocks {
            // SAFETY: as above.
            unsafe { Jemalloc.dealloc(block, layout) };
        }
        let dirty_pages = c"stats.arenas.4096.pdirty";
        let before = jemalloc_counter(dirty_pages);
        assert!(before > 1_000, "25 MB freed leaves dirty pages until they decay: {before}");
        release_free_heap();
        let after = jemalloc_counter(dirty_pages);
        assert!(after < before / 10, "the purge hands them back: {before} dirty pages before, {after} after");
    }
}
