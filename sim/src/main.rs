//! The `systole-sim` binary; everything lives in the library (`lib.rs` says why).

// A third of a seed's time went to the system allocator (malloc, free, consolidation):
// mimalloc makes the same allocations cheaper. Nothing in a seed depends on an address.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    systole_sim::main()
}
