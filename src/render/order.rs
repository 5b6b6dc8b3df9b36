//! Apply order: CRDs, Namespaces, cluster-wide roles and `*Class` kinds first (stage 0), then
//! every other object by wave and by a kind rank in the spirit of Helm's install order.

use super::DesiredObject;

/// The stage of a kind: 0 = cluster prerequisites, applied (and waited for) before the rest.
pub fn stage(kind: &str) -> u8 {
    match kind {
        "CustomResourceDefinition" | "Namespace" | "ClusterRole" | "ClusterRoleBinding" => 0,
        k if k.ends_with("Class") => 0,
        _ => 1,
    }
}

/// Rank of a kind within a stage and wave: dependencies before dependants.
pub fn kind_rank(kind: &str) -> u16 {
    const ORDER: &[&str] = &[
        "CustomResourceDefinition",
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "StorageClass",
        "IngressClass",
        "PriorityClass",
        "RuntimeClass",
        "NetworkPolicy",
        "ResourceQuota",
        "LimitRange",
        "PodDisruptionBudget",
        "ServiceAccount",
        "Secret",
        "ConfigMap",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Role",
        "RoleBinding",
        "Service",
        "DaemonSet",
        "Pod",
        "ReplicaSet",
        "Deployment",
        "HorizontalPodAutoscaler",
        "StatefulSet",
        "Job",
        "CronJob",
        "Ingress",
        "APIService",
    ];
    ORDER
        .iter()
        .position(|k| *k == kind)
        .map(|p| p as u16)
        .unwrap_or(ORDER.len() as u16)
}

/// Sort in apply order ([`order`]); ties keep a deterministic (kind, namespace, name) order.
pub fn sort(objects: &mut [DesiredObject]) {
    // Compared in place: a cached key copied each object's kind, namespace and name (≈ 20 MB
    // at 100,000 objects, at the render's memory peak); a set already in order (one kind,
    // files in name order) is not sorted at all, and a stable sort's scratch buffer is then
    // not taken either.
    if objects.is_sorted_by(|a, b| order(a, b) != std::cmp::Ordering::Greater) {
        return;
    }
    objects.sort_by(order);
}

/// Apply order: stage, wave, kind rank, kind, namespace, name. Objects of one kind (most
/// comparisons) skip the kind's stage and rank.
fn order(a: &DesiredObject, b: &DesiredObject) -> std::cmp::Ordering {
    use std::cmp::Ordering::Equal;
    let (ka, kb) = (a.kind(), b.kind());
    let same_kind = ka == kb;
    let by_stage = if same_kind {
        Equal
    } else {
        stage(ka).cmp(&stage(kb))
    };
    by_stage
        .then(a.wave.cmp(&b.wave))
        .then_with(|| {
            if same_kind {
                Equal
            } else {
                kind_rank(ka).cmp(&kind_rank(kb)).then(ka.cmp(kb))
            }
        })
        .then_with(|| a.namespace().unwrap_or("").cmp(b.namespace().unwrap_or("")))
        .then_with(|| a.name().cmp(b.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Owner;
    use serde_json::json;

    #[test]
    fn crds_and_namespaces_first_then_waves_then_kinds() {
        let owner = Owner::root("weft-system", "r");
        let mk = |kind: &str, name: &str, wave| {
            owner.adopt(
                json!({"apiVersion":"v1","kind":kind,"metadata":{"name":name}}),
                wave,
                None,
            )
        };
        let mut objs = vec![
            mk("Deployment", "d", 0),
            mk("ConfigMap", "late", 1),
            mk("Namespace", "ns", 0),
            mk("ConfigMap", "c", 0),
            mk("CustomResourceDefinition", "crd", 0),
            mk("Widget", "w", 0),
        ];
        sort(&mut objs);
        let names: Vec<_> = objs.iter().map(|o| o.name()).collect();
        assert_eq!(names, vec!["crd", "ns", "c", "d", "w", "late"]);
    }
}
