//! SOPS decryption: 1,000 Kubernetes Secrets encrypted by the real `sops` for one age recipient
//! (`--encrypted-regex '^(data|stringData)$'`, as Flux users write them), each with its own data
//! key, decrypted by `weft::sops` — one age unwrap, four AES-GCM values and the MAC each.
//!
//! The fixtures are made once with the tools `tests/sops/ensure` builds (about 1,000 sops runs,
//! two at a time) and kept in `$TMPDIR/weft-sops-bench-<tools>/`, reused by later runs.
//!
//! Run: `cargo bench --bench sops`

#[path = "../tests/sops/tools.rs"]
#[allow(dead_code, unused_imports)] // the part of the tests\' support this bench uses
mod sops_tools;

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion};
use weft::sops::{self, Format, Identity};

const SECRETS: usize = 1_000;

fn secret_yaml(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-{i:04}\n  namespace: team-{}\n  labels:\n    app: app-{i:04}\n\
         type: Opaque\ndata:\n  password: {}\n  tls.key: {}\nstringData:\n  username: user-{i}\n  url: postgres://db-{i}.internal:5432/app\n",
        i % 10,
        hex::encode(format!("password-{i}")),
        "QUJD".repeat(40),
    )
}

/// The key file and the 1,000 encrypted Secrets, made on first use.
fn fixtures() -> (PathBuf, Vec<Vec<u8>>) {
    let tools = sops_tools::tools();
    let tag = tools
        .sops
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("weft-sops-bench-{tag}"));
    let path = |i: usize| dir.join(format!("secret-{i:04}.enc.yaml"));
    let done = dir.join("done");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("bench fixture dir");
        let key = sops_tools::keygen(&dir, "bench");
        let start = std::time::Instant::now();
        std::thread::scope(|s| {
            for worker in 0..2 {
                let (dir, key, path) = (&dir, &key, &path);
                s.spawn(move || {
                    let work = dir.join(format!("work-{worker}"));
                    std::fs::create_dir_all(&work).expect("work dir");
                    for i in (worker..SECRETS).step_by(2) {
                        let enc = sops_tools::encrypt(
                            &work,
                            "secret.yaml",
                            &secret_yaml(i),
                            &[&key.recipient],
                            &["--encrypted-regex", "^(data|stringData)$"],
                        );
                        std::fs::write(path(i), enc).expect("write fixture");
                    }
                });
            }
        });
        std::fs::write(&done, "").expect("mark fixtures done");
        eprintln!(
            "made {SECRETS} encrypted Secrets with sops in {:?}",
            start.elapsed()
        );
    }
    let files = (0..SECRETS)
        .map(|i| std::fs::read(path(i)).expect("read fixture"))
        .collect();
    (dir.join("bench.agekey"), files)
}

fn bench(c: &mut Criterion) {
    let (key_file, files) = fixtures();
    let identities: Vec<Identity> = sops::identities_from_key_file(&key_file).expect("bench key");
    eprintln!(
        "{} Secrets, {} bytes encrypted in all",
        files.len(),
        files.iter().map(Vec::len).sum::<usize>()
    );
    // Every fixture must decrypt, or the figure means nothing.
    for (i, f) in files.iter().enumerate() {
        let out = sops::decrypt("bench.yaml", f, Format::Yaml, &identities).expect("decrypt");
        assert_eq!(
            out.documents[0]["stringData"]["username"],
            format!("user-{i}")
        );
    }

    let mut group = c.benchmark_group("sops");
    group.sample_size(10);
    group.bench_function("decrypt_1000_secrets", |b| {
        b.iter(|| {
            for f in &files {
                let out =
                    sops::decrypt("bench.yaml", f, Format::Yaml, &identities).expect("decrypt");
                std::hint::black_box(out);
            }
        })
    });
    group.finish();
    c.bench_function("sops_decrypt_one_secret", |b| {
        b.iter(|| {
            std::hint::black_box(
                sops::decrypt("bench.yaml", &files[0], Format::Yaml, &identities).expect("decrypt"),
            )
        })
    });
    // With ten identities and the right one last, as a decryption Secret holding old keys.
    let extra = tempfile::tempdir().expect("temp dir");
    let mut many: Vec<Identity> = (0..9)
        .map(|i| {
            let key = sops_tools::keygen(extra.path(), &format!("extra-{i}"));
            sops::identities_from_key_file(&key.file).expect("extra key")[0].clone()
        })
        .collect();
    many.extend(identities.iter().cloned());
    c.bench_function("sops_decrypt_one_secret_10_identities", |b| {
        b.iter(|| {
            std::hint::black_box(
                sops::decrypt("bench.yaml", &files[0], Format::Yaml, &many).expect("decrypt"),
            )
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
