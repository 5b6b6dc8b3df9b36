//! A scripted fake API server for unit tests of the controllers and the updater (as kube-rs
//! `controller-rs`'s `fixtures.rs`): a [`kube::Client`] over a `tower-test` mock service, and an
//! [`ApiServerVerifier`] that answers each request from a [`Scenario`] and fails the test on any
//! call the scenario does not expect.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tower_test::mock::{self, Handle};

/// A client whose every call goes to the returned verifier.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServerVerifier(handle))
}

/// One request the fake API server received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub query: String,
    /// The JSON body (`Null` without one).
    pub body: Value,
}

/// One expected call and the answer to it.
pub struct Expect {
    method: Method,
    path: String,
    status: StatusCode,
    answer: Box<dyn FnOnce(&Seen) -> Value + Send>,
}

impl Expect {
    /// A call of `method` on `path` (without the query), answered 200 with `answer`.
    pub fn call(method: Method, path: impl Into<String>, answer: Value) -> Expect {
        Expect {
            method,
            path: path.into(),
            status: StatusCode::OK,
            answer: Box::new(move |_| answer),
        }
    }

    /// A `GET` answered 404 Not Found.
    pub fn not_found(path: impl Into<String>) -> Expect {
        let path = path.into();
        Expect {
            method: Method::GET,
            status: StatusCode::NOT_FOUND,
            answer: Box::new(|seen| not_found_status(&seen.path)),
            path,
        }
    }

    /// A call answered by `answer`, which sees (and may assert on) the request.
    pub fn with(
        method: Method,
        path: impl Into<String>,
        answer: impl FnOnce(&Seen) -> Value + Send + 'static,
    ) -> Expect {
        Expect {
            method,
            path: path.into(),
            status: StatusCode::OK,
            answer: Box::new(answer),
        }
    }

    /// An event published in `namespace` (answered with itself).
    pub fn event(namespace: &str) -> Expect {
        Expect::with(
            Method::POST,
            format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events"),
            |seen| seen.body.clone(),
        )
    }

    fn matches(&self, seen: &Seen) -> bool {
        self.method == seen.method && self.path == seen.path
    }
}

/// The calls a test expects, in steps: the calls of one step may come in any order (concurrent
/// work), the steps one after another.
#[derive(Default)]
pub struct Scenario {
    steps: Vec<Vec<Expect>>,
}

impl Scenario {
    pub fn new() -> Scenario {
        Scenario::default()
    }

    /// Then exactly this call.
    pub fn then(mut self, expect: Expect) -> Scenario {
        self.steps.push(vec![expect]);
        self
    }

    /// Then these calls, in any order.
    pub fn then_any_order(mut self, expects: Vec<Expect>) -> Scenario {
        self.steps.push(expects);
        self
    }
}

/// The server side of [`mock_client`].
pub struct ApiServerVerifier(Handle<Request<Body>, Response<Body>>);

impl ApiServerVerifier {
    /// Serve `scenario`, then make sure no further call comes within a short while. The task
    /// returns every request seen, in order; it panics (failing the test at `join`) on a call
    /// the scenario does not expect, or if the client stops before the scenario is done.
    pub fn run(self, scenario: Scenario) -> JoinHandle<Vec<Seen>> {
        let mut handle = self.0;
        tokio::spawn(async move {
            let mut seen_all = Vec::new();
            for mut step in scenario.steps {
                while !step.is_empty() {
                    let (request, send) = handle.next_request().await.unwrap_or_else(|| {
                        panic!("the client stopped; still expected: {}", describe(&step))
                    });
                    let seen = read(request).await;
                    let Some(i) = step.iter().position(|e| e.matches(&seen)) else {
                        panic!(
                            "unexpected call {} {}?{} {}\nexpected: {}\nbefore it: {:#?}",
                            seen.method,
                            seen.path,
                            seen.query,
                            seen.body,
                            describe(&step),
                            seen_all
                        );
                    };
                    let expect = step.remove(i);
                    let status = expect.status;
                    let body = (expect.answer)(&seen);
                    send.send_response(
                        Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
                            .expect("a valid response"),
                    );
                    seen_all.push(seen);
                }
            }
            let extra =
                tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
            if let Ok(Some((request, _))) = extra {
                let seen = read(request).await;
                panic!(
                    "unexpected call after the scenario: {} {} {}\nbefore it: {:#?}",
                    seen.method, seen.path, seen.body, seen_all
                );
            }
            seen_all
        })
    }
}

fn describe(step: &[Expect]) -> String {
    step.iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn read(request: Request<Body>) -> Seen {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let bytes = request
        .into_body()
        .collect_bytes()
        .await
        .expect("a request body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON request body")
    };
    Seen {
        method,
        path,
        query,
        body,
    }
}

/// The `Status` body of a 404.
pub fn not_found_status(path: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("{path} not found"),
        "reason": "NotFound",
        "code": 404
    })
}

/// The discovery document of one group version serving `resources` (`(kind, plural,
/// namespaced)`).
pub fn resource_list(group_version: &str, resources: &[(&str, &str, bool)]) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources.iter().map(|(kind, plural, namespaced)| json!({
            "name": plural,
            "singularName": kind.to_lowercase(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        })).collect::<Vec<_>>(),
    })
}

/// Merge `patch` into `base` (objects key by key, anything else replaced), to vary a fixture.
pub fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}
