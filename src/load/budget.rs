//! One budget for everything load and render *produce* from a repository's input: YAML alias
//! and anchor copies, `${…}` substitutions, overlay patches, a chart's dependency tree. Input
//! is small (a git snapshot has its own size limits); what a few hostile lines can make of it
//! is not: a JSON patch `copy` of `/spec` into itself doubles an object per operation, a whole
//! value `${big}` clones a subtree per use, an Armada dependency diamond doubles its tree per
//! level. Each producer charges the budget *before* it builds, so a case that would exhaust
//! memory fails fast, in bounded memory, with an error its caller places at a `file:line`.
//!
//! Every walk here is iterative: a value nested deeper than the stack would allow is measured,
//! not recursed into.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

/// The bounds of one unit of work: a whole load and its render (every YAML file, every chart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Nodes (scalars, sequences, mappings) produced beyond the input's own.
    pub max_nodes: usize,
    /// Bytes of string produced beyond the input's own.
    pub max_bytes: usize,
    /// Nesting depth of any value produced.
    pub max_depth: usize,
}

impl Default for Limits {
    /// Far above any real chart or manifest (the largest openstack-helm chart renders a few
    /// thousand nodes per object), far below what would hurt the daemon's 512 MiB limit: a
    /// render that spends it all peaks near 60 MiB (scripts/hostile-inputs, docs/benchmarks.md).
    fn default() -> Self {
        Limits {
            max_nodes: 250_000,
            max_bytes: 16 * 1024 * 1024,
            max_depth: 256,
        }
    }
}

/// What ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Nodes,
    Bytes,
    Depth,
}

/// A budget exceeded: the caller adds where (file, line, field) and by what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Exceeded {
    pub resource: Resource,
    pub limit: usize,
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resource {
            Resource::Nodes => write!(
                f,
                "would produce more than {} YAML/JSON nodes; refusing to expand further",
                self.limit
            ),
            Resource::Bytes => write!(
                f,
                "would produce more than {} bytes of text; refusing to expand further",
                self.limit
            ),
            Resource::Depth => write!(
                f,
                "would nest values deeper than {} levels; refusing to expand further",
                self.limit
            ),
        }
    }
}

/// Size of a value: its nodes, the bytes of its strings and keys, its depth (a scalar is 1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size {
    pub nodes: usize,
    pub bytes: usize,
    pub depth: usize,
}

/// Measure `value` without recursion, stopping early (with a size past the limits) once
/// `limits` are exceeded, so measuring a huge value costs no more than the budget.
pub fn measure(value: &Value, limits: &Limits) -> Size {
    let mut size = Size::default();
    let mut stack: Vec<(&Value, usize)> = vec![(value, 1)];
    while let Some((v, depth)) = stack.pop() {
        size.nodes += 1;
        size.depth = size.depth.max(depth);
        match v {
            Value::String(s) => size.bytes += s.len(),
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, depth + 1))),
            Value::Object(map) => {
                for (k, item) in map {
                    size.bytes += k.len();
                    stack.push((item, depth + 1));
                }
            }
            _ => {}
        }
        if size.nodes > limits.max_nodes
            || size.bytes > limits.max_bytes
            || size.depth > limits.max_depth
        {
            break;
        }
    }
    size
}

/// What has been produced so far against [`Limits`]. One budget bounds a whole load and the
/// render that follows it (every file, every chart): a clone is a handle on the *same* counts,
/// so what one file or chart spends, the next one no longer has.
#[derive(Clone, Debug)]
pub struct Budget {
    limits: Limits,
    spent: Arc<Spent>,
}

#[derive(Debug, Default)]
struct Spent {
    nodes: AtomicUsize,
    bytes: AtomicUsize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(Limits::default())
    }
}

fn charge(counter: &AtomicUsize, amount: usize) -> usize {
    // Saturating: a huge charge must not wrap around to a small count.
    let previous = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_add(amount))
        })
        .unwrap_or(usize::MAX);
    previous.saturating_add(amount)
}

impl Budget {
    /// A new budget, nothing spent.
    pub fn new(limits: Limits) -> Self {
        Budget {
            limits,
            spent: Arc::default(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Nodes and bytes spent so far (by every handle of this budget).
    pub fn spent(&self) -> (usize, usize) {
        (
            self.spent.nodes.load(Ordering::Relaxed),
            self.spent.bytes.load(Ordering::Relaxed),
        )
    }

    /// Charge `nodes` new nodes.
    pub fn nodes(&mut self, nodes: usize) -> Result<(), Exceeded> {
        if charge(&self.spent.nodes, nodes) > self.limits.max_nodes {
            return Err(self.exceeded(Resource::Nodes));
        }
        Ok(())
    }

    /// Charge `bytes` new bytes of text.
    pub fn bytes(&mut self, bytes: usize) -> Result<(), Exceeded> {
        if charge(&self.spent.bytes, bytes) > self.limits.max_bytes {
            return Err(self.exceeded(Resource::Bytes));
        }
        Ok(())
    }

    /// Refuse a value nested `depth` levels deep.
    pub fn depth(&self, depth: usize) -> Result<(), Exceeded> {
        if depth > self.limits.max_depth {
            return Err(self.exceeded(Resource::Depth));
        }
        Ok(())
    }

    /// Charge a copy of `value` placed `at_depth` levels below the root of what it is copied
    /// into (0: it becomes the root). Measure first, then clone: call this before cloning.
    pub fn copy(&mut self, value: &Value, at_depth: usize) -> Result<(), Exceeded> {
        let size = measure(value, &self.limits);
        self.depth(at_depth.saturating_add(size.depth))?;
        self.nodes(size.nodes)?;
        self.bytes(size.bytes)
    }

    fn exceeded(&self, resource: Resource) -> Exceeded {
        Exceeded {
            resource,
            limit: match resource {
                Resource::Nodes => self.limits.max_nodes,
                Resource::Bytes => self.limits.max_bytes,
                Resource::Depth => self.limits.max_depth,
            },
        }
    }
}

/// Depth of the value a JSON pointer names below the root (`""` → 0, `/a/b` → 2).
pub fn pointer_depth(pointer: &str) -> usize {
    pointer.bytes().filter(|b| *b == b'/').count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn measure_counts_nodes_bytes_and_depth() {
        let v = json!({"ab": [1, "xyz", {"c": null}]});
        let size = measure(&v, &Limits::default());
        assert_eq!(
            size,
            Size {
                nodes: 6,
                bytes: 2 + 3 + 1,
                depth: 4
            }
        );
    }

    #[test]
    fn measure_stops_once_past_the_limits() {
        let v = Value::Array(vec![Value::Null; 10_000]);
        let limits = Limits {
            max_nodes: 10,
            ..Limits::default()
        };
        assert_eq!(measure(&v, &limits).nodes, 11);
    }

    #[test]
    fn a_budget_refuses_the_copy_that_passes_it_and_names_the_limit() {
        let mut budget = Budget::new(Limits {
            max_nodes: 5,
            max_bytes: 100,
            max_depth: 3,
        });
        budget.copy(&json!([1, 2]), 0).unwrap();
        let err = budget.copy(&json!([1, 2]), 0).unwrap_err();
        assert_eq!(err.resource, Resource::Nodes);
        assert!(err.to_string().contains("more than 5"), "{err}");
        let err = Budget::new(budget.limits)
            .copy(&json!([[1]]), 2)
            .unwrap_err();
        assert_eq!(err.resource, Resource::Depth);
        let err = Budget::new(budget.limits).bytes(101).unwrap_err();
        assert_eq!(err.resource, Resource::Bytes);
    }

    #[test]
    fn clones_charge_one_budget() {
        let budget = Budget::new(Limits {
            max_nodes: 10,
            max_bytes: 100,
            max_depth: 3,
        });
        let mut first_file = budget.clone();
        let mut second_file = budget.clone();
        first_file.nodes(6).unwrap();
        let err = second_file.nodes(6).unwrap_err();
        assert_eq!(err.resource, Resource::Nodes);
        assert_eq!(budget.spent().0, 12);
        // A huge charge saturates instead of wrapping around.
        let mut b = Budget::default();
        assert!(b.bytes(usize::MAX).is_err());
        assert!(b.bytes(usize::MAX).is_err());
    }

    #[test]
    fn measuring_a_very_deep_value_needs_no_stack() {
        let mut v = Value::Null;
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        let limits = Limits {
            max_depth: usize::MAX,
            max_nodes: usize::MAX,
            ..Limits::default()
        };
        let size = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let s = measure(&v, &limits);
                // Dropping a deep serde_json value recurses: leak it rather than overflow.
                std::mem::forget(v);
                s
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(size.depth, 100_001);
    }

    #[test]
    fn pointer_depth_counts_segments() {
        assert_eq!(pointer_depth(""), 0);
        assert_eq!(pointer_depth("/spec"), 1);
        assert_eq!(pointer_depth("/spec/template/0"), 3);
    }
}
