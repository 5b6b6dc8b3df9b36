//! Watches that stay inside the namespaces the operator lists (`--watch-namespaces`).
//!
//! A Weft that may only read its tenants' namespaces (a Role in each, no ClusterRole) gets a
//! `403` on every cluster-wide list or watch, and kube-runtime retries those forever. So with a
//! namespace list every watch here is one watch per namespace, merged into one stream that looks
//! like a single watcher's: a store fed from it holds every listed namespace's objects, and is
//! ready once each namespace has been listed.
//!
//! kube-runtime's store cannot be fed from several watchers directly: each watcher's restart
//! (`Init` … `InitDone`) replaces the whole store with that one namespace's objects. The merge
//! below (for two namespaces or more) keeps each namespace's objects apart and, when any
//! namespace has been (re)listed, emits one complete restart of all of them.

use std::collections::BTreeMap;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Client, Resource, ResourceExt};

/// The watcher events of every `K` in `namespaces` (every namespace when `None`), with
/// kube-runtime's default backoff on each watch. The objects come without their
/// `managedFields`: no controller reads them from its store, they are often the largest part of
/// a custom resource with a status, and the store (and the merge below) would keep them for
/// every object (issue 47 item 4).
pub fn watch_in<K>(
    client: &Client,
    namespaces: Option<Vec<String>>,
    config: watcher::Config,
) -> BoxStream<'static, Result<Event<K>, watcher::Error>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let lean = |o: &mut K| o.managed_fields_mut().clear();
    let api = match namespaces.as_deref() {
        None => Some(Api::<K>::all(client.clone())),
        // One namespace: its watcher's events are already a single watcher's, so the merge
        // (which keeps a copy of every object besides the store's) is not needed.
        Some([only]) => Some(Api::<K>::namespaced(client.clone(), only)),
        Some(_) => None,
    };
    if let Some(api) = api {
        return watcher::watcher(api, config)
            .default_backoff()
            .map_ok(move |event| event.modify(lean))
            .boxed();
    }
    let namespaces = namespaces.unwrap_or_default();
    let watches = namespaces.iter().enumerate().map(|(i, ns)| {
        watcher::watcher(Api::<K>::namespaced(client.clone(), ns), config.clone())
            .default_backoff()
            .map_ok(move |event| event.modify(lean))
            .map(move |event| (i, event))
            .boxed()
    });
    let merge = Merge::new(namespaces.len());
    stream::select_all(watches)
        .scan(merge, |merge, (i, event)| {
            let out = match event {
                Ok(event) => merge.on(i, event).into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            };
            futures::future::ready(Some(stream::iter(out)))
        })
        .flatten()
        .boxed()
}

/// The `Api`s one secondary watch needs: one per listed namespace, or one for all.
pub fn apis<K>(client: &Client, namespaces: Option<Vec<String>>) -> Vec<Api<K>>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespaces {
        None => vec![Api::all(client.clone())],
        Some(namespaces) => namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    }
}

/// One secondary watch of `C` on `controller` per listed namespace (one for all without a list).
pub fn watches_in<C, K, I>(
    controller: Controller<K>,
    client: &Client,
    namespaces: &Option<Vec<String>>,
    config: &watcher::Config,
    mapper: impl Fn(C) -> I + Clone + Send + Sync + 'static,
) -> Controller<K>
where
    C: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    I: IntoIterator<Item = ObjectRef<K>> + 'static,
    I::IntoIter: Send,
{
    apis::<C>(client, namespaces.clone())
        .into_iter()
        .fold(controller, |c, api| {
            c.watches(api, config.clone(), mapper.clone())
        })
}

/// Each namespace's objects, kept apart so one namespace's relist replaces only its own.
struct Merge<K> {
    /// What each namespace's watch has listed (and changed since).
    live: Vec<BTreeMap<String, K>>,
    /// A namespace's relist in progress.
    buffer: Vec<BTreeMap<String, K>>,
    listed: Vec<bool>,
}

impl<K: Resource + Clone> Merge<K> {
    fn new(n: usize) -> Self {
        Merge {
            live: (0..n).map(|_| BTreeMap::new()).collect(),
            buffer: (0..n).map(|_| BTreeMap::new()).collect(),
            listed: vec![false; n],
        }
    }

    /// Until every namespace has been listed once nothing is emitted (a store fed from this is
    /// not ready before it holds every namespace); after that, changes pass through and a
    /// namespace's relist becomes one restart of all namespaces.
    fn on(&mut self, i: usize, event: Event<K>) -> Vec<Event<K>> {
        let ready = self.listed.iter().all(|l| *l);
        match event {
            Event::Init => {
                self.buffer[i].clear();
                vec![]
            }
            Event::InitApply(obj) => {
                self.buffer[i].insert(obj.name_any(), obj);
                vec![]
            }
            Event::InitDone => {
                self.live[i] = std::mem::take(&mut self.buffer[i]);
                self.listed[i] = true;
                if !self.listed.iter().all(|l| *l) {
                    return vec![];
                }
                let mut out = vec![Event::Init];
                out.extend(
                    self.live
                        .iter()
                        .flat_map(|m| m.values().cloned().map(Event::InitApply)),
                );
                out.push(Event::InitDone);
                out
            }
            Event::Apply(obj) => {
                self.live[i].insert(obj.name_any(), obj.clone());
                if ready {
                    vec![Event::Apply(obj)]
                } else {
                    vec![]
                }
            }
            Event::Delete(obj) => {
                self.live[i].remove(&obj.name_any());
                if ready {
                    vec![Event::Delete(obj)]
                } else {
                    vec![]
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.namespace = Some(ns.into());
        c.metadata.name = Some(name.into());
        c
    }

    fn names(events: &[Event<ConfigMap>]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::Init => "init".to_string(),
                Event::InitDone => "done".to_string(),
                Event::InitApply(o) => format!("list {}/{}", o.namespace().unwrap(), o.name_any()),
                Event::Apply(o) => format!("apply {}/{}", o.namespace().unwrap(), o.name_any()),
                Event::Delete(o) => format!("delete {}/{}", o.namespace().unwrap(), o.name_any()),
            })
            .collect()
    }

    #[test]
    fn a_namespace_relist_restarts_with_every_namespace_and_keeps_the_others() {
        let mut m = Merge::new(2);
        assert!(m.on(0, Event::Init).is_empty());
        assert!(m.on(0, Event::InitApply(cm("a", "x"))).is_empty());
        assert!(m.on(0, Event::InitDone).is_empty(), "b is not listed yet");
        assert!(m.on(0, Event::Apply(cm("a", "y"))).is_empty());
        m.on(1, Event::Init);
        m.on(1, Event::InitApply(cm("b", "z")));
        assert_eq!(
            names(&m.on(1, Event::InitDone)),
            ["init", "list a/x", "list a/y", "list b/z", "done"]
        );
        assert_eq!(names(&m.on(0, Event::Delete(cm("a", "x")))), ["delete a/x"]);
        // b relists: a's objects stay.
        m.on(1, Event::Init);
        assert_eq!(
            names(&m.on(1, Event::InitDone)),
            ["init", "list a/y", "done"]
        );
    }
}
