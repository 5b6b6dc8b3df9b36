//! How the process uses glibc's allocator: a long-running `weft run` allocates a render, a plan
//! and pages of listed metadata on every pass and frees them again, and glibc's defaults keep
//! much of that in the process. Measured with `weft run` at 10,000 objects (docs/benchmarks.md,
//! "Allocator settings"): a heap peak of 47 MiB (heaptrack) showed as 121 MiB of RSS on a no-op
//! pass, 132 MiB over the run; with the settings below 86 and 90 MiB.
//!
//! - The mmap and trim thresholds are fixed at 128 KiB. glibc raises its mmap threshold each time
//!   a large block is freed (up to 32 MiB), after which list responses and the vectors of a pass
//!   are carved out of the heap and fragment it instead of being returned when freed.
//! - One arena: each thread that allocates gets an arena of its own otherwise, and memory freed in
//!   one arena is not reused by another. The work is I/O bound and spread over two runtime threads;
//!   no slower pass was measured.
//! - After each pass, [`release_free_memory`] hands free pages back (`malloc_trim`).
//!
//! An operator's `GLIBC_TUNABLES` wins: nothing is set when it is present. Other C libraries
//! (musl) and other systems are left alone.

/// Set the allocator up; call once, first thing in `main`, before threads start.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        const THRESHOLD: libc::c_int = 128 * 1024;
        // SAFETY: mallopt only changes allocator parameters; called before any other thread runs.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Return the free memory of the heap to the system (after a pass: what it allocated is freed).
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
