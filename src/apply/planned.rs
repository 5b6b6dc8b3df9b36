//! A planned object: one desired object with the API resource that serves it, as every verb
//! after the plan (apply, diff, delete, recreate, conflicts, ignored fields) takes it.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::Client;

use crate::api::ObjectRef;
use crate::render::DesiredObject;

/// One desired object with the API resource that serves it.
#[derive(Clone, Debug)]
pub struct PlannedObject {
    pub desired: DesiredObject,
    pub resource: Arc<ApiResource>,
    pub namespaced: bool,
    /// Its reference (namespace filled in for namespaced objects, removed for cluster-scoped ones).
    pub object_ref: ObjectRef,
    /// JSON pointers left to other managers ([`crate::apply::ignore`]): applied with their live
    /// values, and never drift (an autoscaler that took `spec.replicas` is no drift).
    pub ignored: Vec<String>,
}

impl PlannedObject {
    /// A dynamic API for this object's resource and namespace.
    pub fn api(&self, client: &Client) -> Api<DynamicObject> {
        if self.namespaced {
            Api::namespaced_with(client.clone(), &self.object_ref.namespace, &*self.resource)
        } else {
            Api::all_with(client.clone(), &*self.resource)
        }
    }
    /// The applied-hash annotation of the desired object.
    pub fn desired_hash(&self) -> Option<&str> {
        self.desired.object.applied_hash()
    }
}
