//! The `weft` binary: everything is in [`weft::cli`].

fn main() -> std::process::ExitCode {
    weft::mem::tune_allocator();
    weft::source::git::system_ca::start_libgit2();
    weft::cli::main()
}
