//! `harness`: see `harness --help`.

/// Why mimalloc: `analyze` and the checks allocate and free a few small strings per journal entry,
/// and the load driver a few buffers per request; glibc's malloc spent about a third of
/// `analyze`'s time on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
