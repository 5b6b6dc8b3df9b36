//! The stored form of an inventory kept in ConfigMaps (format 2), as pure functions.
//!
//! The sorted JSON list of references is gzip-compressed, and the compressed bytes are cut into
//! chunks of at most [`CHUNK_BYTES`], each stored in the `binaryData` key [`CHUNK_KEY`] of its own
//! ConfigMap. The head ConfigMap holds only the [`Manifest`] (key [`MANIFEST_KEY`]): the format
//! version, the number of entries, and each chunk's ConfigMap name, size and sha256 digest.
//!
//! A chunk is named after its content (`<head>-<index>-<first 12 hex digits of its sha256>`), so a
//! write never overwrites a chunk the current head still points to: new chunks are written first,
//! then the head, then the chunks no head refers to any more are deleted. A crash at any point
//! leaves a head whose chunks all exist.
//!
//! Reading checks everything it can: every chunk present, its digest and size, the gzip stream
//! (its CRC), the JSON, and the entry count. Any mismatch is a [`Damage`] naming the ConfigMap, and
//! never an empty inventory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::ObjectRef;

/// The format this module writes.
pub const FORMAT: u32 = 2;
/// The only encoding of format 2: gzip of the sorted JSON list.
pub const ENCODING: &str = "json+gzip";
/// The head ConfigMap's key that holds the manifest.
pub const MANIFEST_KEY: &str = "manifest.json";
/// The chunk ConfigMap's `binaryData` key that holds its slice of the compressed list.
pub const CHUNK_KEY: &str = "inventory.json.gz";
/// Largest slice of compressed bytes per chunk: half of the 1 MiB a ConfigMap's data may hold,
/// so a chunk stays far below every size limit (etcd object, request body) with its metadata and
/// base64 encoding in the request (4/3 of it).
pub const CHUNK_BYTES: usize = 512 * 1024;

/// The head's description of a stored inventory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    pub encoding: String,
    /// Number of references in the inventory.
    pub entries: usize,
    /// The chunks, in order: their bytes concatenated are the compressed list.
    #[serde(rename = "shards")]
    pub chunks: Vec<ChunkRef>,
}

/// One chunk as the manifest names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChunkRef {
    /// Its ConfigMap's name (same namespace as the head).
    pub name: String,
    /// Hex sha256 of its bytes.
    pub sha256: String,
    /// Number of bytes.
    pub bytes: usize,
}

/// One chunk to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub name: String,
    pub data: Vec<u8>,
}

/// An inventory ready to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub manifest: Manifest,
    pub chunks: Vec<Chunk>,
}

/// What is wrong with a stored inventory: the ConfigMap (name) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub configmap: String,
    pub reason: String,
}

fn damage(configmap: &str, reason: impl Into<String>) -> Damage {
    Damage {
        configmap: configmap.to_string(),
        reason: reason.into(),
    }
}

/// Hex sha256 of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The name of the chunk `index` with content digest `sha256`, for the head `head`.
fn chunk_name(head: &str, index: usize, sha256: &str) -> String {
    format!("{head}-{index}-{}", &sha256[..12])
}

/// Encode `entries` for the head ConfigMap `head`, in chunks of at most `chunk_bytes`.
pub fn encode(
    head: &str,
    entries: &BTreeSet<ObjectRef>,
    chunk_bytes: usize,
) -> Result<Encoded, serde_json::Error> {
    let list: Vec<&ObjectRef> = entries.iter().collect();
    let json = serde_json::to_vec(&list)?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    gz.write_all(&json).expect("gzip into memory");
    let compressed = gz.finish().expect("gzip into memory");
    let chunks: Vec<Chunk> = compressed
        .chunks(chunk_bytes.max(1))
        .enumerate()
        .map(|(i, chunk)| Chunk {
            name: chunk_name(head, i, &digest(chunk)),
            data: chunk.to_vec(),
        })
        .collect();
    let manifest = Manifest {
        format: FORMAT,
        encoding: ENCODING.to_string(),
        entries: entries.len(),
        chunks: chunks
            .iter()
            .map(|s| ChunkRef {
                name: s.name.clone(),
                sha256: digest(&s.data),
                bytes: s.data.len(),
            })
            .collect(),
    };
    Ok(Encoded { manifest, chunks })
}

/// Parse the manifest text of the head ConfigMap `head`.
pub fn parse_manifest(head: &str, text: &str) -> Result<Manifest, Damage> {
    let manifest: Manifest = serde_json::from_str(text)
        .map_err(|e| damage(head, format!("key {MANIFEST_KEY} is not a manifest: {e}")))?;
    if manifest.format != FORMAT || manifest.encoding != ENCODING {
        return Err(damage(
            head,
            format!(
                "inventory format {} ({}) is not known to this Weft (it reads format {FORMAT}, {ENCODING})",
                manifest.format, manifest.encoding
            ),
        ));
    }
    Ok(manifest)
}

/// Decode the inventory `manifest` (of head ConfigMap `head`) describes, from the bytes of its
/// chunks by ConfigMap name (`None`: the ConfigMap does not exist or has no [`CHUNK_KEY`]).
pub fn decode(
    head: &str,
    manifest: &Manifest,
    chunks: &BTreeMap<String, Option<Vec<u8>>>,
) -> Result<BTreeSet<ObjectRef>, Damage> {
    let mut compressed = Vec::new();
    for s in &manifest.chunks {
        let Some(Some(bytes)) = chunks.get(&s.name) else {
            let why = format!("missing: the head {head} lists it, and it has no key {CHUNK_KEY}");
            return Err(damage(&s.name, why));
        };
        let actual = digest(bytes);
        if actual != s.sha256 || bytes.len() != s.bytes {
            let why = format!(
                "corrupted: {} bytes with sha256 {actual}, the head {head} says {} bytes with sha256 {}",
                bytes.len(),
                s.bytes,
                s.sha256
            );
            return Err(damage(&s.name, why));
        }
        compressed.extend_from_slice(bytes);
    }
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_end(&mut json)
        .map_err(|e| damage(head, format!("its chunks do not decompress: {e}")))?;
    let list: Vec<ObjectRef> = serde_json::from_slice(&json).map_err(|e| {
        damage(
            head,
            format!("its chunks are not a list of references: {e}"),
        )
    })?;
    let entries: BTreeSet<ObjectRef> = list.into_iter().collect();
    if entries.len() != manifest.entries {
        let why = format!(
            "its chunks hold {} distinct references, the manifest says {}",
            entries.len(),
            manifest.entries
        );
        return Err(damage(head, why));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "weft-inventory-0123456789abcdef0123";

    fn entries(n: usize) -> BTreeSet<ObjectRef> {
        (0..n)
            .map(|i| ObjectRef {
                api_version: if i % 3 == 0 { "apps/v1" } else { "v1" }.into(),
                kind: if i % 3 == 0 {
                    "Deployment"
                } else {
                    "ConfigMap"
                }
                .into(),
                namespace: format!("team-{}", i % 17),
                name: format!("object-{i:06}"),
            })
            .collect()
    }

    fn stored(e: &Encoded) -> BTreeMap<String, Option<Vec<u8>>> {
        e.chunks
            .iter()
            .map(|s| (s.name.clone(), Some(s.data.clone())))
            .collect()
    }

    fn round_trip(e: &Encoded) -> Result<BTreeSet<ObjectRef>, Damage> {
        let text = serde_json::to_string(&e.manifest).unwrap();
        let manifest = parse_manifest(HEAD, &text)?;
        decode(HEAD, &manifest, &stored(e))
    }

    #[test]
    fn a_hundred_thousand_entries_round_trip_exactly_in_chunks_under_the_limit() {
        let all = entries(100_000);
        let e = encode(HEAD, &all, CHUNK_BYTES).unwrap();
        assert_eq!(e.manifest.entries, 100_000);
        assert!(e.chunks.iter().all(|s| s.data.len() <= CHUNK_BYTES));
        assert!(e.chunks.iter().all(|s| s.name.starts_with(HEAD)));
        assert_eq!(round_trip(&e).unwrap(), all);
        // Small chunks: the same list over many ConfigMaps reads back the same.
        let small = encode(HEAD, &all, 64 * 1024).unwrap();
        assert!(small.chunks.len() > 3, "{}", small.chunks.len());
        assert_eq!(round_trip(&small).unwrap(), all);
    }

    #[test]
    fn an_empty_inventory_round_trips() {
        let e = encode(HEAD, &BTreeSet::new(), CHUNK_BYTES).unwrap();
        assert_eq!(e.manifest.entries, 0);
        assert_eq!(round_trip(&e).unwrap(), BTreeSet::new());
    }

    #[test]
    fn encoding_is_deterministic_and_chunks_are_named_by_content() {
        let a = encode(HEAD, &entries(5_000), 16 * 1024).unwrap();
        assert_eq!(a, encode(HEAD, &entries(5_000), 16 * 1024).unwrap());
        let b = encode(HEAD, &entries(5_001), 16 * 1024).unwrap();
        // A changed inventory never reuses the name of a chunk with other bytes.
        let names_a: BTreeMap<_, _> = a.chunks.iter().map(|s| (&s.name, &s.data)).collect();
        for s in &b.chunks {
            if let Some(data) = names_a.get(&s.name) {
                assert_eq!(*data, &s.data);
            }
        }
        assert_ne!(a.manifest, b.manifest);
    }

    fn several() -> Encoded {
        let e = encode(HEAD, &entries(20_000), 32 * 1024).unwrap();
        assert!(e.chunks.len() >= 3, "{}", e.chunks.len());
        e
    }

    #[test]
    fn a_missing_chunk_is_named() {
        let e = several();
        let mut chunks = stored(&e);
        let lost = e.chunks[1].name.clone();
        chunks.remove(&lost);
        let err = decode(HEAD, &e.manifest, &chunks).unwrap_err();
        assert_eq!(err.configmap, lost);
        assert!(err.reason.contains("missing"), "{}", err.reason);
        chunks.insert(lost.clone(), None);
        assert_eq!(
            decode(HEAD, &e.manifest, &chunks).unwrap_err().configmap,
            lost
        );
    }

    #[test]
    fn a_corrupted_or_truncated_chunk_is_named() {
        let e = several();
        let mut chunks = stored(&e);
        let hit = e.chunks[2].name.clone();
        chunks.get_mut(&hit).unwrap().as_mut().unwrap()[10] ^= 0xff;
        let err = decode(HEAD, &e.manifest, &chunks).unwrap_err();
        assert_eq!(err.configmap, hit);
        assert!(err.reason.contains("corrupted"), "{}", err.reason);

        let mut chunks = stored(&e);
        chunks.get_mut(&hit).unwrap().as_mut().unwrap().pop();
        assert_eq!(
            decode(HEAD, &e.manifest, &chunks).unwrap_err().configmap,
            hit
        );
    }

    #[test]
    fn a_count_mismatch_or_undecodable_data_is_damage_of_the_head() {
        let e = several();
        let mut manifest = e.manifest.clone();
        manifest.entries += 1;
        let err = decode(HEAD, &manifest, &stored(&e)).unwrap_err();
        assert_eq!(err.configmap, HEAD);
        assert!(err.reason.contains("manifest says 20001"), "{}", err.reason);

        // A consistent manifest over bytes that are not gzip (digests recomputed).
        let garbage = vec![7u8; 100];
        let manifest = Manifest {
            chunks: vec![ChunkRef {
                name: format!("{HEAD}-0-x"),
                sha256: digest(&garbage),
                bytes: garbage.len(),
            }],
            ..e.manifest.clone()
        };
        let chunks = BTreeMap::from([(format!("{HEAD}-0-x"), Some(garbage))]);
        let err = decode(HEAD, &manifest, &chunks).unwrap_err();
        assert!(err.reason.contains("do not decompress"), "{}", err.reason);

        let err = parse_manifest(HEAD, "{\"format\": 3}").unwrap_err();
        assert_eq!(err.configmap, HEAD);
        let future =
            serde_json::json!({"format": 3, "encoding": ENCODING, "entries": 0, "shards": []});
        let err = parse_manifest(HEAD, &future.to_string()).unwrap_err();
        assert!(err.reason.contains("format 3"), "{}", err.reason);
    }
}
