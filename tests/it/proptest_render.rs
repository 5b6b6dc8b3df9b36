//! Property tests of what load and render make of untrusted repository text (issue 14): YAML
//! loading agrees with JSON on JSON input and never panics on any input, `${…}` substitution
//! leaves text without placeholders alone and stays within its budget, and JSON patch overlays
//! applied within a budget agree with the plain RFC 6902 implementation when the budget is
//! ample and never produce more than it allows when it is not. Bounded: a fixed, small number
//! of cases, so the whole file runs in seconds.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use weft::load::budget::{measure, Budget, Limits};
use weft::load::yaml::{parse_documents, YamlLimits};
use weft::render::armada::{substitute_str, Builtins};
use weft::render::patch::apply_within;

fn config() -> ProptestConfig {
    ProptestConfig::with_cases(96)
}

/// JSON values of bounded size: integers, booleans, null, short strings, lists and maps.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        "[a-zA-Z0-9 _.:/-]{0,12}".prop_map(Value::String),
        // Strings YAML would otherwise read as something else must stay strings.
        prop_oneof![
            Just("true"),
            Just("null"),
            Just("1.5"),
            Just("~"),
            Just("- x")
        ]
        .prop_map(|s| Value::String(s.to_string())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z][a-z0-9_-]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn builtins() -> Builtins {
    Builtins {
        release_name: "rel".into(),
        release_namespace: "ns".into(),
        chart_name: "chart".into(),
        chart_version: "1.0.0".into(),
    }
}

/// A JSON pointer into `value`, or a pointer that names nothing, for patch operations.
fn pointer_into(value: &Value, choice: usize) -> String {
    let mut pointers = vec![String::new()];
    let mut stack = vec![(String::new(), value)];
    while let Some((p, v)) = stack.pop() {
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let child = format!("{p}/{i}");
                    pointers.push(child.clone());
                    stack.push((child, item));
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    let child = format!("{p}/{k}");
                    pointers.push(child.clone());
                    stack.push((child, item));
                }
            }
            _ => {}
        }
    }
    pointers.push("/missing/x".into());
    pointers[choice % pointers.len()].clone()
}

/// Patch operations over `doc`: adds, copies into the document itself, moves, removes.
fn operations(doc: &Value, picks: &[(u8, usize, usize, Value)]) -> Vec<json_patch::PatchOperation> {
    let ops: Vec<Value> = picks
        .iter()
        .map(|(kind, a, b, value)| {
            let from = pointer_into(doc, *a);
            let to = format!("{}/k{}", pointer_into(doc, *b), b % 3);
            match kind % 5 {
                0 => json!({"op": "add", "path": to, "value": value}),
                1 => json!({"op": "copy", "from": from, "path": to}),
                2 => json!({"op": "move", "from": from, "path": to}),
                3 => json!({"op": "remove", "path": from}),
                _ => json!({"op": "replace", "path": from, "value": value}),
            }
        })
        .collect();
    serde_json::from_value::<json_patch::Patch>(Value::Array(ops))
        .expect("generated operations are well formed")
        .0
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn yaml_reads_json_text_as_the_same_value(value in json_value()) {
        let text = serde_json::to_string_pretty(&value).unwrap();
        let docs = parse_documents(&text, YamlLimits::default())
            .map_err(|e| TestCaseError::fail(format!("{e:?} in\n{text}")))?;
        prop_assert_eq!(docs.len(), 1);
        prop_assert_eq!(&docs[0].value, &value);
    }

    #[test]
    fn yaml_never_panics_and_places_errors_inside_the_text(text in "[-a-z:&*!|>{}\\[\\],#'\" \n<]{0,200}") {
        if let Err(e) = parse_documents(&text, YamlLimits::default()) {
            let lines = text.lines().count().max(1) as u32;
            prop_assert!(e.pos.line <= lines + 1, "{:?} past {} lines", e, lines);
        }
    }

    #[test]
    fn text_without_placeholders_is_left_as_it_is(text in "[^$]{0,64}", values in json_value()) {
        let out = substitute_str(&text, &values, &builtins(), &mut Budget::default()).unwrap();
        prop_assert_eq!(out, Value::String(text));
    }

    #[test]
    fn a_whole_placeholder_is_the_value_it_names(values in json_value(), pick in any::<usize>()) {
        let pointer = pointer_into(&values, pick);
        prop_assume!(!pointer.is_empty() && !pointer.starts_with("/missing"));
        let path = pointer.trim_start_matches('/').replace('/', ".");
        let out = substitute_str(&format!("${{{path}}}"), &values, &builtins(), &mut Budget::default())
            .unwrap();
        prop_assert_eq!(&out, values.pointer(&pointer).unwrap());
    }

    #[test]
    fn substitution_stays_within_its_budget(
        values in json_value(),
        picks in prop::collection::vec(any::<usize>(), 1..12),
        max_nodes in 1usize..40,
    ) {
        let text: String = picks
            .iter()
            .map(|p| {
                let ptr = pointer_into(&values, *p);
                format!("${{{}:=d}}", ptr.trim_start_matches('/').replace('/', "."))
            })
            .collect();
        let limits = Limits { max_nodes, max_bytes: 64, max_depth: 8 };
        let mut budget = Budget::new(limits);
        // Either a value within the budget, or an error (budget, non-scalar, bad placeholder).
        if let Ok(out) = substitute_str(&text, &values, &builtins(), &mut budget) {
            let size = measure(&out, &limits);
            prop_assert!(size.nodes <= max_nodes + 1);
            prop_assert!(size.depth <= 8);
        }
    }

    #[test]
    fn patches_within_an_ample_budget_agree_with_rfc_6902(
        doc in json_value(),
        picks in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>(), json_value()), 1..8),
    ) {
        let ops = operations(&doc, &picks);
        // The reference applies the same operations one call each: json-patch's own atomic
        // multi-operation patch panics when undoing some failures (see render::patch's tests).
        let mut reference = doc.clone();
        let expected = ops
            .iter()
            .try_for_each(|op| json_patch::patch(&mut reference, std::slice::from_ref(op)));
        let mut ours = doc.clone();
        let got = apply_within(&mut ours, &ops, &mut Budget::default());
        prop_assert_eq!(got.is_ok(), expected.is_ok(), "{:?} vs {:?}", got, expected);
        if expected.is_ok() {
            prop_assert_eq!(ours, reference);
        }
    }

    #[test]
    fn patches_never_produce_more_than_their_budget(
        doc in json_value(),
        picks in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>(), json_value()), 1..24),
        max_nodes in 1usize..64,
    ) {
        let ops = operations(&doc, &picks);
        let limits = Limits { max_nodes, max_bytes: 4096, max_depth: 16 };
        let before = measure(&doc, &Limits::default());
        let mut patched = doc.clone();
        let _ = apply_within(&mut patched, &ops, &mut Budget::new(limits));
        let after = measure(&patched, &Limits::default());
        prop_assert!(after.nodes <= before.nodes + max_nodes, "{} > {} + {}", after.nodes, before.nodes, max_nodes);
        prop_assert!(after.depth <= before.depth.max(16));
    }
}
