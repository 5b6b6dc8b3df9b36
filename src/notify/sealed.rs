//! Weft's Kubernetes events, sealed (`api::event_seal`): each event's `reportingInstance` ends
//! with an HMAC over what the event says, keyed with the Secret `weft-event-key` in Weft's
//! namespace (made, 32 random bytes, by the first Weft that publishes an event), so that the UI
//! can tell Weft's events from one a tenant wrote with `reportingComponent: weft`. Every writer
//! of events (the daemon's controllers, `weft sync`, the Provider and Alert status writer)
//! publishes through this.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use crate::api::event_seal::{self, SealedFields, KEY_BYTES, KEY_FIELD, KEY_SECRET};

/// Recorders kept, one per sealed `reportingInstance` (a repeated event is one series).
const MAX_RECORDERS: usize = 512;

/// Events as the controller `weft`, sealed once [`sealed_in`](Self::sealed_in) names Weft's
/// namespace. Cheap to clone.
#[derive(Clone)]
pub struct SealedRecorders {
    client: Client,
    /// The pod's name (`POD_NAME`), the start of every event's `reportingInstance`.
    instance: Option<String>,
    /// One recorder per `reportingInstance`, which holds the event's seal.
    recorders: Arc<Mutex<HashMap<String, Recorder>>>,
    /// The key, read (or made) once in Weft's namespace; `None`: nothing is sealed.
    seal: Option<Arc<SealKey>>,
}

/// The key of Weft's namespace, loaded on first use.
struct SealKey {
    client: Client,
    namespace: String,
    key: tokio::sync::OnceCell<Option<Vec<u8>>>,
}

/// The sealing key of `namespace` (Secret [`KEY_SECRET`]), as a reader (the UI) checks events
/// with it. `Ok(None)`: there is none yet (no Weft published an event).
pub async fn read_key(client: &Client, namespace: &str) -> Result<Option<Vec<u8>>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(KEY_SECRET).await?.and_then(|s| {
        s.data?
            .remove(KEY_FIELD)
            .map(|k| k.0)
            .filter(|k| k.len() >= KEY_BYTES)
    }))
}

/// The sealing key of `namespace`, made (32 random bytes) when there is none.
async fn read_or_make_key(client: &Client, namespace: &str) -> Result<Vec<u8>, kube::Error> {
    if let Some(key) = read_key(client, namespace).await? {
        return Ok(key);
    }
    let mut key = vec![0u8; KEY_BYTES];
    {
        use std::io::Read;
        if let Err(e) = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut key))
        {
            // No key is better than a guessable one: nothing is sealed, the UI shows no event.
            return Err(kube::Error::Service(Box::new(e)));
        }
    }
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(KEY_SECRET.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "weft".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            KEY_FIELD.to_string(),
            ByteString(key.clone()),
        )])),
        ..Default::default()
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(key),
        // Another replica made it first: its key is the one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Ok(read_key(client, namespace).await?.unwrap_or(key))
        }
        Err(e) => Err(e),
    }
}

impl SealedRecorders {
    /// Events as the controller `weft` (instance: the pod's name), not sealed.
    pub fn new(client: Client) -> SealedRecorders {
        SealedRecorders {
            client,
            instance: std::env::var("POD_NAME").ok(),
            recorders: Arc::default(),
            seal: None,
        }
    }

    /// The same recorders, sealing with the key of Weft's namespace `namespace`.
    pub fn sealed_in(mut self, namespace: &str) -> SealedRecorders {
        self.seal = Some(Arc::new(SealKey {
            client: self.client.clone(),
            namespace: namespace.to_string(),
            key: tokio::sync::OnceCell::new(),
        }));
        self
    }

    /// The same seal, writing events with `client`.
    pub fn with_client(&self, client: Client) -> SealedRecorders {
        SealedRecorders {
            client,
            instance: self.instance.clone(),
            recorders: Arc::default(),
            seal: self.seal.clone(),
        }
    }

    /// The sealing key, loaded (or made) on first use; `None` when it cannot be (logged once).
    async fn key(&self) -> Option<&[u8]> {
        let seal = self.seal.as_ref()?;
        seal.key
            .get_or_init(|| async {
                match read_or_make_key(&seal.client, &seal.namespace).await {
                    Ok(key) => Some(key),
                    Err(e) => {
                        tracing::warn!(secret = %format!("{}/{KEY_SECRET}", seal.namespace), error = %crate::api::kube_error::Text(&e), "cannot read or make the key that seals Weft's events: they are published unsealed, and the UI does not show them as Weft's");
                        None
                    }
                }
            })
            .await
            .as_deref()
    }

    /// The recorder of `instance`, kept for the next event of the same series.
    fn recorder(&self, instance: String) -> Recorder {
        let mut recorders = self.recorders.lock().unwrap_or_else(|p| p.into_inner());
        if recorders.len() >= MAX_RECORDERS {
            recorders.clear();
        }
        recorders
            .entry(instance.clone())
            .or_insert_with(|| {
                Recorder::new(
                    self.client.clone(),
                    Reporter {
                        controller: "weft".to_string(),
                        instance: Some(instance),
                    },
                )
            })
            .clone()
    }

    /// Publish `event` about `regarding`, sealed when a key is at hand.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let instance = match self.key().await {
            Some(key) => event_seal::sealed_instance(
                self.instance.as_deref(),
                key,
                &SealedFields {
                    kind: regarding.kind.as_deref().unwrap_or_default(),
                    namespace: regarding.namespace.as_deref().unwrap_or_default(),
                    name: regarding.name.as_deref().unwrap_or_default(),
                    uid: regarding.uid.as_deref().unwrap_or_default(),
                    type_: match event.type_ {
                        EventType::Warning => "Warning",
                        EventType::Normal => "Normal",
                    },
                    reason: &event.reason,
                    action: &event.action,
                    note: event.note.as_deref().unwrap_or_default(),
                },
            ),
            None => self.instance.clone().unwrap_or_else(|| "weft".to_string()),
        };
        self.recorder(instance).publish(event, regarding).await
    }
}
