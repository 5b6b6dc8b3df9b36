//! Records the git commit Weft is built from (`weft version`): `WEFT_COMMIT` when set (an image
//! build without `.git`), else `git rev-parse`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=WEFT_COMMIT");
    let commit = std::env::var("WEFT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=WEFT_COMMIT={commit}");
    // The release binary's layout (docs/benchmarks.md, "Idle: which code pages"): the functions
    // an idle `weft run` runs, in one block at the start of .text (lld's symbol ordering; rustc
    // links with rust-lld on x86_64 Linux), and the relative relocations packed (DT_RELR, glibc
    // 2.36+). 27.1 -> 16.6 MiB idle RSS with the controllers, 24.7 -> 15.0 without.
    // WEFT_NO_ORDER_FILE=1 links as before (another linker, an older glibc).
    println!("cargo:rerun-if-env-changed=WEFT_NO_ORDER_FILE");
    println!("cargo:rerun-if-changed=weft.order");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let order = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join("weft.order");
    if var("PROFILE") == "release"
        && var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && std::env::var_os("WEFT_NO_ORDER_FILE").is_none()
        && order.exists()
    {
        println!(
            "cargo:rustc-link-arg-bin=weft=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=weft=-Wl,--no-warn-symbol-ordering");
        println!("cargo:rustc-link-arg-bin=weft=-Wl,-z,pack-relative-relocs");
    }
    // Build again when HEAD moves (a checkout, a commit), but only on files that exist: a
    // missing one would make every build run this again.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
