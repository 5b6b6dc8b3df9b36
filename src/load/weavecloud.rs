//! A `WeaveCloud` document of the repository: its kebab-case spellings mapped to the CRD's fields
//! with warnings at their own lines, its values checked, a bare agent-channel host read as https.

use super::*;

/// `spec.general.updateSchedule` as a cron expression: five fields, six (seconds first) or a
/// macro. croner 4 would also take a seventh field (years); the schedule's syntax stays what it
/// was (docs/auto-update.md), so years are refused.
pub fn parse_update_schedule(schedule: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::parser::CronParser::builder()
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(schedule)
}

/// The position of the kebab-case spelling of the last component of `pointer`.
pub(super) fn kebab_origin(raw: &RawDoc, pointer: &str) -> Option<Origin> {
    let (parent, camel) = pointer.rsplit_once('/')?;
    let mut kebab = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            kebab.push('-');
            kebab.push(c.to_ascii_lowercase());
        } else {
            kebab.push(c);
        }
    }
    raw.positions
        .get(&format!("{parent}/{kebab}"))
        .map(|pos| Origin {
            file: raw.origin.file.clone(),
            pos,
        })
}

pub(super) fn load_weavecloud(
    raw: RawDoc,
    schema: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    diags: &mut Diagnostics,
) -> Option<Sourced<WeaveCloud>> {
    let raw = validate_against(raw, schema, diags)?;
    let mut wc: WeaveCloud = match serde_json::from_value(raw.value.clone()) {
        Ok(wc) => wc,
        Err(e) => {
            diags.error(raw.origin.clone(), format!("invalid WeaveCloud: {e}"));
            return None;
        }
    };
    let mut ok = true;
    let schedule = &wc.spec.general.update_schedule;
    if let Err(e) = parse_update_schedule(schedule) {
        diags.error(
            field_origin(&raw, "/spec/general/updateSchedule"),
            format!(
                "`spec.general.updateSchedule` `{schedule}` is not a valid cron expression: {e}"
            ),
        );
        ok = false;
    }
    if let Some(range) = &wc.spec.general.agent_version {
        if let Err(e) = parse_version_range(range) {
            diags.error(
                field_origin(&raw, "/spec/general/agentVersion"),
                format!("`spec.general.agentVersion` `{range}` is not a semver range: {e}"),
            );
            ok = false;
        }
    }
    if let Some(url) = wc.spec.general.wc_poll_url.clone() {
        let at = field_origin(&raw, "/spec/general/wcPollUrl");
        let url = match bare_host_as_https(&url) {
            Some(https) => {
                diags.warning(
                    at.clone(),
                    format!(
                        "`spec.general.wcPollUrl: {}` has no scheme, so it is read as `{https}`; \
                         write the channel's URL in full (`https://…/channel.yaml`, `file://…` or \
                         `git+<git URL>`) to say so",
                        yaml::quoted(url.trim())
                    ),
                );
                wc.spec.general.wc_poll_url = Some(https.clone());
                https
            }
            None => url,
        };
        let trimmed = url.trim();
        if !trimmed.contains("://") && !trimmed.starts_with("git+") {
            diags.error(
                at,
                // Not echoed: a mistyped `user:password@…` must not reach a log.
                "`spec.general.wcPollUrl` is neither a URL nor a host name: write the \
                 channel's URL in full (`https://…/channel.yaml`, `file:///…` or \
                 `git+<git URL>`)",
            );
            ok = false;
        } else if let Err(e) = crate::source::channel::ChannelLocation::parse(&url) {
            diags.error(at, e.to_string());
            ok = false;
        }
    }
    if let Some(endpoint) = wc.spec.scope.container_runtime_endpoint.as_deref() {
        if crate::api::weavecloud::known_runtime_socket(endpoint).is_none() {
            diags.error(
                field_origin(&raw, "/spec/scope/containerRuntimeEndpoint"),
                format!(
                    "`spec.scope.containerRuntimeEndpoint: {endpoint}` is not a known container runtime socket: it is mounted from the host into scope's privileged probe, so only {} are accepted",
                    crate::api::weavecloud::KNOWN_RUNTIME_SOCKETS.join(", ")
                ),
            );
            ok = false;
        }
    }
    for (i, arg) in wc.spec.flux.memcached_args.iter().enumerate() {
        if !crate::api::weavecloud::is_memcached_size_arg(arg) {
            diags.error(
                field_origin(&raw, &format!("/spec/flux/memcachedArgs/{i}")),
                format!(
                    "`spec.flux.memcachedArgs[{i}]: {}` is not `-m <size>` or `-I <size>` (a number with an optional k, m or g): memcached takes no other flag from a WeaveCloud",
                    yaml::quoted(arg)
                ),
            );
            ok = false;
        }
    }
    if wc.spec.general.wc_report_errors {
        diags.warning(
            field_origin(&raw, "/spec/general/wcReportErrors"),
            "`spec.general.wcReportErrors` is deprecated and does nothing: no agent of Weft's bundle reports its errors (the launcher's own agent did); remove it",
        );
    }
    if wc.metadata.namespace.as_deref().unwrap_or("").is_empty() {
        diags.error(
            raw.origin_of("/metadata"),
            "a WeaveCloud must set `metadata.namespace`: its agents live in that namespace",
        );
        ok = false;
    }
    ok.then_some(Sourced {
        value: wc,
        origin: raw.origin,
    })
}

/// Where the field at `pointer` was written, under its camelCase or its kebab-case spelling (the
/// positions are recorded under the key as written), else its nearest written ancestor.
fn field_origin(raw: &RawDoc, pointer: &str) -> Origin {
    match raw.positions.get(pointer) {
        Some(pos) => Origin {
            file: raw.origin.file.clone(),
            pos,
        },
        None => kebab_origin(raw, pointer).unwrap_or_else(|| raw.origin_of(pointer)),
    }
}

/// `https://<url>` when a `wcPollUrl` is a bare host (`foo-bar.works`, `host:8443/channel.yaml`),
/// as the first proposal's example wrote it: no scheme, a host name first.
pub fn bare_host_as_https(url: &str) -> Option<String> {
    let url = url.trim();
    if url.contains("://") || url.starts_with("git+") {
        return None;
    }
    let host = url.split(['/', '?', '#']).next().unwrap_or(url);
    let name = host.split_once(':').map_or(host, |(name, port)| {
        if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
            name
        } else {
            // `user:password@…`, `C:\…`: not a host and port.
            ""
        }
    });
    let labels_ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    // A dotted name (or `localhost`): `channel.yaml` alone would be a file, not a host.
    let looks_like_host = name.contains('.') || name == "localhost";
    let is_file_name = [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext));
    (labels_ok && looks_like_host && !is_file_name).then(|| format!("https://{url}"))
}
