//! Where a pass's age identities come from: a key file (`--age-key-file`, `SOPS_AGE_KEY_FILE`,
//! read once at start) and a decryption Secret (`--decryption-secret`, keys `*.agekey`, as Flux's
//! kustomize-controller reads them), read from the cluster when a pass needs it and parsed again
//! only when its `resourceVersion` changed, so a rotated key is used without a restart.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use zeroize::Zeroizing;

use super::keys::{identities_from_secret_data, Identity, AGE_KEY_SUFFIX};
use super::SopsError;

/// A decryption Secret in Weft's namespace, with the identities of the version last read.
pub struct DecryptionSecret {
    client: Client,
    namespace: String,
    name: String,
    /// `(resourceVersion, identities)` of the last read.
    cache: tokio::sync::Mutex<Option<(String, Arc<Vec<Identity>>)>>,
}

impl fmt::Debug for DecryptionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecryptionSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl DecryptionSecret {
    pub fn new(client: Client, namespace: &str, name: &str) -> DecryptionSecret {
        DecryptionSecret {
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// `Secret NAMESPACE/NAME`, for messages.
    pub fn display(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.name)
    }

    fn error(&self, message: impl Into<String>) -> SopsError {
        SopsError::Identity {
            source_name: format!("decryption {}", self.display()),
            message: message.into(),
        }
    }

    /// The identities the Secret holds now: one GET; parsed again only when the Secret's
    /// `resourceVersion` changed since the last call. A missing Secret, or one without a
    /// `*.agekey` key, is an error (the user asked for it).
    pub async fn identities(&self) -> Result<Arc<Vec<Identity>>, SopsError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        // kube errors carry the API status message, never the Secret's data.
        let secret = api
            .get_opt(&self.name)
            .await
            .map_err(|e| {
                self.error(format!(
                    "cannot be read: {}",
                    crate::api::kube_error::Text(&e)
                ))
            })?
            .ok_or_else(|| self.error("not found"))?;
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        let mut cache = self.cache.lock().await;
        if let Some((cached, identities)) = cache.as_ref() {
            if !version.is_empty() && *cached == version {
                return Ok(Arc::clone(identities));
            }
        }
        let data = crate::api::secret_bytes(secret);
        let parsed = identities_from_secret_data(&data);
        // The key material is wiped from memory once parsed.
        for (_, value) in data {
            drop(Zeroizing::new(value));
        }
        let identities = parsed.map_err(|e| match e {
            SopsError::Identity {
                source_name,
                message,
            } => self.error(format!("{source_name}: {message}")),
            other => other,
        })?;
        if identities.is_empty() {
            return Err(self.error(format!(
                "holds no age identity: no key ends in `{AGE_KEY_SUFFIX}`"
            )));
        }
        tracing::info!(
            secret = %self.display(),
            resource_version = %version,
            identities = identities.len(),
            recipients = %identities.iter().map(Identity::recipient).collect::<Vec<_>>().join(","),
            "decryption keys read"
        );
        let identities = Arc::new(identities);
        *cache = Some((version, Arc::clone(&identities)));
        Ok(identities)
    }
}

/// The age identities of a pass: those of a key file (fixed) and those of a decryption Secret
/// (read when needed), tried in that order.
#[derive(Clone, Debug, Default)]
pub struct Decryption {
    /// Identities read from `--age-key-file` at start.
    pub key_file: Arc<Vec<Identity>>,
    /// The decryption Secret, when one is configured.
    pub secret: Option<Arc<DecryptionSecret>>,
}

impl Decryption {
    /// Every identity available now: the key file's, then the Secret's current ones.
    pub async fn identities(&self) -> Result<Arc<Vec<Identity>>, SopsError> {
        let Some(secret) = &self.secret else {
            return Ok(Arc::clone(&self.key_file));
        };
        let from_secret = secret.identities().await?;
        if self.key_file.is_empty() {
            return Ok(from_secret);
        }
        let mut all = Vec::with_capacity(self.key_file.len() + from_secret.len());
        all.extend(self.key_file.iter().cloned());
        all.extend(from_secret.iter().cloned());
        Ok(Arc::new(all))
    }
}
