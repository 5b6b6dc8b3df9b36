//! The API client's request metrics, under client-go's names (which Flux's controllers export
//! and its dashboards read): `rest_client_requests_total{code,method}` and
//! `rest_client_request_duration_seconds{verb}`. Fed by the counting layer of the daemon's kube
//! client ([`crate::apply::calls::CallObserver`]), so every API call of every component counts.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::{labels, Labels};
use crate::apply::calls::CallObserver;

/// The families, shared with the client's layer.
#[derive(Clone)]
pub struct RestClientMetrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram>,
}

fn latency_buckets() -> Vec<f64> {
    // client-go's buckets.
    vec![
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ]
}

impl RestClientMetrics {
    /// Register the families in `registry` (the unprefixed one).
    pub fn register(registry: &mut Registry) -> RestClientMetrics {
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "rest_client_requests",
            "Kubernetes API requests, by HTTP status code (<error> when none came) and method",
            requests.clone(),
        );
        let duration =
            Family::<Labels, Histogram>::new_with_constructor(|| Histogram::new(latency_buckets()));
        registry.register_with_unit(
            "rest_client_request_duration",
            "Kubernetes API request latency (to the answer's headers), by verb (HTTP method)",
            Unit::Seconds,
            duration.clone(),
        );
        RestClientMetrics { requests, duration }
    }
}

impl CallObserver for RestClientMetrics {
    fn observe(&self, method: &http::Method, code: Option<u16>, seconds: f64) {
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.requests
            .get_or_create(&labels(&[("code", &code), ("method", method.as_str())]))
            .inc();
        self.duration
            .get_or_create(&labels(&[("verb", method.as_str())]))
            .observe(seconds);
    }
}
