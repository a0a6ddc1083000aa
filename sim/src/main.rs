//! The `systole-sim` binary; everything lives in the library (`lib.rs` says why).

// A third of a seed's time went to the system allocator (malloc, free, consolidation):
// mimalloc makes the same allocations cheaper. Nothing in a seed depends on an address.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the enum in its `mimalloc.h`, the same place in its
/// v2 and v3; the crate names no constant for it): how many milliseconds freed memory waits
/// before it goes back to the system, -1 for never.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() -> std::process::ExitCode {
    // Each seed frees what the next one allocates again. Handed back to the system after
    // mimalloc's delay (891 times in 20 seeds), the same memory came back as fresh pages the
    // kernel zeroes: `clear_page` was 5-8 % of a sweep's samples. Kept, a sweep of 1,000
    // seeds ran 3.5-6.4 % faster in about the same resident memory (docs/performance.md).
    // SAFETY: mimalloc's options are set before any other thread starts, as it asks.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    systole_sim::main()
}
