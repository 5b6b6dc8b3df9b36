//! The pure parts of agent updates: when a check is due (cron, UTC), and which bundle a
//! WeaveCloud should run.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{tz::TimeZone, Timestamp};

use super::UpdateError;
use crate::api::weavecloud::WeaveCloud;
use crate::source::channel::{pack_archive, sha256_hex, ChannelEntry};

/// The next time after `after` that `schedule` (cron, 5 or 6 fields or a macro, UTC) fires.
pub fn next_check(schedule: &str, after: Timestamp) -> Result<Timestamp, UpdateError> {
    let err = |message: String| UpdateError::Schedule {
        schedule: schedule.to_string(),
        message,
    };
    let cron = crate::load::parse_update_schedule(schedule.trim())
        .map_err(|e| err(format!("not a valid cron expression: {e}")))?;
    cron.find_next_occurrence(&after.to_zoned(TimeZone::UTC), false)
        .map(|at| at.timestamp())
        .map_err(|e| err(format!("never fires: {e}")))
}

/// What the channel offers a WeaveCloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection<'a> {
    /// The newest bundle `agentVersion` allows that is not marked bad.
    pub available: Option<&'a ChannelEntry>,
    /// The bundle to install now, if the agents should change version.
    pub target: Option<&'a ChannelEntry>,
}

/// Choose among `bundles` for agents running `current`. Only versions `range` allows (without a
/// range: any release, no pre-release) and not in `bad` are candidates. The newest candidate is
/// installed when it is newer than `current`, or when `current` itself is no longer allowed (a
/// pin moved below it): the pin wins over "never go back".
pub fn select<'a>(
    bundles: &'a [ChannelEntry],
    range: Option<&semver::VersionReq>,
    bad: &[String],
    current: &semver::Version,
) -> Selection<'a> {
    let allowed = |v: &semver::Version| match range {
        Some(r) => r.matches(v),
        None => v.pre.is_empty(),
    };
    let is_bad = |v: &semver::Version| bad.iter().any(|b| b.trim() == v.to_string());
    let available = bundles
        .iter()
        .filter(|b| allowed(&b.version) && !is_bad(&b.version))
        .max_by(|a, b| a.version.cmp(&b.version));
    let target =
        available.filter(|a| a.version > *current || (a.version != *current && !allowed(current)));
    Selection { available, target }
}

/// Whether an update to `target`, decided on `decided` (the copy the check started from), still
/// stands for `live` (the WeaveCloud as the API server has it once the bundle is fetched): the
/// fields the decision was made from are unchanged, and `target` was not marked bad meanwhile.
pub fn still_wanted(decided: &WeaveCloud, live: &WeaveCloud, target: &semver::Version) -> bool {
    let (d, l) = (&decided.spec.general, &live.spec.general);
    let target = target.to_string();
    let marked_bad = live
        .status
        .as_ref()
        .is_some_and(|s| s.bad_versions.iter().any(|b| b.trim() == target));
    l.auto_update
        && l.agent_version == d.agent_version
        && l.wc_poll_url == d.wc_poll_url
        && !marked_bad
}

/// Pack a bundle's files into the archive a channel serves (deterministic), with its sha256.
pub fn bundle_archive(files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<(Vec<u8>, String)> {
    let archive = pack_archive(files)?;
    let digest = sha256_hex(&archive);
    Ok((archive, digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::parse_version_range;
    use crate::source::channel::{unpack_archive, ChannelLimits};

    /// The instant of a UTC wall time.
    fn utc(
        y: i16,
        mo: i8,
        d: i8,
        h: i8,
        mi: i8,
        s: i8,
    ) -> Result<Timestamp, k8s_openapi::jiff::Error> {
        Ok(k8s_openapi::jiff::civil::datetime(y, mo, d, h, mi, s, 0)
            .to_zoned(TimeZone::UTC)?
            .timestamp())
    }

    fn entry(v: &str) -> ChannelEntry {
        ChannelEntry {
            version: semver::Version::parse(v).unwrap(),
            url: format!("https://h/{v}.tar.gz"),
            sha256: "0".repeat(64),
        }
    }

    fn v(s: &str) -> semver::Version {
        semver::Version::parse(s).unwrap()
    }

    fn versions(sel: &Selection<'_>) -> (Option<String>, Option<String>) {
        (
            sel.available.map(|e| e.version.to_string()),
            sel.target.map(|e| e.version.to_string()),
        )
    }

    fn pair(a: Option<&str>, t: Option<&str>) -> (Option<String>, Option<String>) {
        (a.map(str::to_string), t.map(str::to_string))
    }

    #[test]
    fn the_schedule_is_evaluated_in_utc() {
        let at = utc(2026, 3, 1, 10, 15, 30).unwrap();
        assert_eq!(
            next_check("0 * * * *", at).unwrap(),
            utc(2026, 3, 1, 11, 0, 0).unwrap()
        );
        assert_eq!(
            next_check("30 2 * * *", at).unwrap(),
            utc(2026, 3, 2, 2, 30, 0).unwrap()
        );
        assert_eq!(
            next_check("@daily", at).unwrap(),
            utc(2026, 3, 2, 0, 0, 0).unwrap()
        );
        // Six fields: seconds first.
        assert_eq!(
            next_check("*/10 * * * * *", at).unwrap(),
            utc(2026, 3, 1, 10, 15, 40).unwrap()
        );
        // Exactly on an occurrence: the next one, not now again.
        let on = utc(2026, 3, 1, 11, 0, 0).unwrap();
        assert_eq!(
            next_check("0 * * * *", on).unwrap(),
            utc(2026, 3, 1, 12, 0, 0).unwrap()
        );
        let e = next_check("every hour", at).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "`spec.general.updateSchedule` `every hour`: not a valid cron expression"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_newest_allowed_bundle_is_chosen() {
        let all = [
            entry("1.0.0"),
            entry("1.2.0"),
            entry("1.1.0"),
            entry("2.0.0"),
        ];
        let s = select(&all, None, &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("2.0.0"), Some("2.0.0")));
        let pin = parse_version_range("1.x").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.2.0"), Some("1.2.0")));
        let s = select(&all, Some(&pin), &[], &v("1.2.0"));
        assert_eq!(versions(&s), pair(Some("1.2.0"), None));
    }

    #[test]
    fn bad_versions_are_skipped() {
        let all = [entry("1.0.0"), entry("1.1.0"), entry("1.2.0")];
        let s = select(&all, None, &["1.2.0".to_string()], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0"), Some("1.1.0")));
        let s = select(
            &all,
            None,
            &["1.2.0".to_string(), "1.1.0".to_string()],
            &v("1.0.0"),
        );
        assert_eq!(versions(&s), pair(Some("1.0.0"), None));
    }

    #[test]
    fn never_downgrade_unless_the_pin_says_so() {
        let all = [entry("1.0.0"), entry("1.1.0")];
        // Running 1.3.0 (from an older channel state): nothing newer, stay.
        let s = select(&all, None, &[], &v("1.3.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0"), None));
        // A pin below the running version moves the agents down to the pin.
        let pin = parse_version_range("~1.0").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.3.0"));
        assert_eq!(versions(&s), pair(Some("1.0.0"), Some("1.0.0")));
        // Nothing allowed at all: stay on what runs.
        let pin = parse_version_range(">=3").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(None, None));
    }

    #[test]
    fn prereleases_need_a_range_that_asks_for_them() {
        let all = [entry("1.0.0"), entry("1.1.0-rc.1")];
        let s = select(&all, None, &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.0.0"), None));
        let pin = parse_version_range(">=1.1.0-rc.0").unwrap();
        let s = select(&all, Some(&pin), &[], &v("1.0.0"));
        assert_eq!(versions(&s), pair(Some("1.1.0-rc.1"), Some("1.1.0-rc.1")));
    }

    #[test]
    fn a_bundle_archive_digest_matches_its_bytes() {
        let files: BTreeMap<String, Vec<u8>> =
            [("bundle.yaml".to_string(), b"version: 1.0.0\n".to_vec())].into();
        let (archive, digest) = bundle_archive(&files).unwrap();
        assert_eq!(digest, sha256_hex(&archive));
        assert_eq!(
            unpack_archive(&archive, &ChannelLimits::default(), "t").unwrap(),
            files
        );
    }

    fn weavecloud(general: serde_json::Value, bad: &[&str]) -> WeaveCloud {
        let mut g = serde_json::json!({
            "environment": "generic",
            "autoUpdate": true,
            "agentVersion": "1.x",
            "wcPollUrl": "https://cloud.weave.works/channel.yaml",
            "tokenSecretRef": {"name": "weave-cloud", "key": "token"},
        });
        json_patch::merge(&mut g, &general);
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cloud.weave.works/v1beta1",
            "kind": "WeaveCloud",
            "metadata": {"name": "wc", "namespace": "weave"},
            "spec": {"general": g},
            "status": {"badVersions": bad},
        }))
        .unwrap()
    }

    #[test]
    fn an_update_stands_only_while_what_decided_it_is_unchanged() {
        let decided = weavecloud(serde_json::json!({}), &[]);
        let target = v("1.2.0");
        assert!(still_wanted(&decided, &decided, &target));
        // Edits that do not touch the decision (the controller's business) leave it standing.
        let scope = weavecloud(serde_json::json!({"wcHostname": "other.example"}), &[]);
        assert!(still_wanted(&decided, &scope, &target));
        for (why, live) in [
            (
                "autoUpdate off",
                weavecloud(serde_json::json!({"autoUpdate": false}), &[]),
            ),
            (
                "pin moved",
                weavecloud(serde_json::json!({"agentVersion": "=1.1.0"}), &[]),
            ),
            (
                "other channel",
                weavecloud(serde_json::json!({"wcPollUrl": "https://x/c.yaml"}), &[]),
            ),
            ("marked bad", weavecloud(serde_json::json!({}), &["1.2.0"])),
        ] {
            assert!(!still_wanted(&decided, &live, &target), "{why}");
        }
    }
}
