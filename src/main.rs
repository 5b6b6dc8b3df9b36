//! The `weft` binary: everything is in [`weft::cli`].

fn main() -> std::process::ExitCode {
    weft::mem::tune_allocator();
    weft::cli::main()
}
