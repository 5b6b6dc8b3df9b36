//! The client side of the sync endpoint, for `weft trigger [--wait]`.

use std::time::Duration;

use crate::daemon::status::PassReport;

/// Why `weft trigger` failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the daemon at {url}: {message}")]
    Connect { url: String, message: String },
    #[error("the daemon at {url} answered {status}: {message}")]
    Refused {
        url: String,
        status: u16,
        message: String,
    },
    #[error("the daemon at {url} sent an answer that is not a pass report: {message}")]
    BadAnswer { url: String, message: String },
}

/// What the daemon answered.
#[derive(Debug)]
pub enum TriggerAnswer {
    /// Queued: the number of the pass that will serve the request.
    Queued { pass: u64 },
    /// `--wait`: the pass finished (boxed: the report is large beside a queued pass's number).
    Finished(Box<PassReport>),
}

/// `POST {base}/api/v1/sync[?wait=true]` with `Authorization: Bearer {token}`.
pub async fn trigger(
    base: &str,
    token: &str,
    wait: bool,
    force_prune: bool,
    timeout: Duration,
) -> Result<TriggerAnswer, ClientError> {
    let query: Vec<&str> = [(wait, "wait=true"), (force_prune, "forcePrune=true")]
        .into_iter()
        .filter_map(|(on, q)| on.then_some(q))
        .collect();
    let url = format!(
        "{}/api/v1/sync{}{}",
        base.trim_end_matches('/'),
        if query.is_empty() { "" } else { "?" },
        query.join("&")
    );
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| ClientError::Connect {
            url: url.clone(),
            message: e.to_string(),
        })?;
    let resp = client
        .post(&url)
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| ClientError::Connect {
            url: url.clone(),
            message: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| ClientError::Connect {
        url: url.clone(),
        message: e.to_string(),
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    match status {
        200 => serde_json::from_value(json)
            .map(|r| TriggerAnswer::Finished(Box::new(r)))
            .map_err(|e| ClientError::BadAnswer {
                url,
                message: e.to_string(),
            }),
        202 => Ok(TriggerAnswer::Queued {
            pass: json
                .get("pass")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
        }),
        _ => Err(ClientError::Refused {
            url,
            status,
            message: json
                .get("error")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
                .unwrap_or(text),
        }),
    }
}
