use serde_json::json;

use super::*;

fn parse(text: &str) -> Value {
    parse_document(text, &Yaml11Limits::default(), &mut Spent::default())
        .unwrap()
        .0
}

fn err(text: &str) -> String {
    parse_document(text, &Yaml11Limits::default(), &mut Spent::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn numbers_are_read_as_go_yaml_v2_reads_them() {
    let v = parse(
        "octal: 0555\nocto: 0o444\nzero: 0\nhex: 0x1F\nbin: 0b101\nplus: +12\nneg: -0x10\n\
         under: 1_000\nbig: 9223372036854775808\nhuge: 18446744073709551616\n\
         eight: 08\nfloat: 1.5\ndot: .5\nexp: 1e3\nwhole: 1.0\nsixty: 1:30\nover: 1e999\n\
         negzero: -0.0\nnegbin: -0b11\n",
    );
    assert_eq!(
        v,
        json!({
            "octal": 365, "octo": 292, "zero": 0, "hex": 31, "bin": 5, "plus": 12, "neg": -16,
            "under": 1000, "big": 9223372036854775808u64, "huge": 18446744073709551616.0,
            "eight": 8, "float": 1.5, "dot": 0.5, "exp": 1000, "whole": 1, "sixty": "1:30",
            "over": "1e999", "negzero": 0, "negbin": -3
        })
    );
    // Integers are integers in the JSON text, never `365.0`.
    assert_eq!(v["octal"].to_string(), "365");
    assert_eq!(v["whole"].to_string(), "1");
}

#[test]
fn booleans_nulls_and_strings_are_yaml_1_1() {
    let v = parse(
        "a: yes\nb: No\nc: on\nd: OFF\ne: y\nf: N\ng: true\nh: ~\ni: null\nj:\nk: '0555'\n\
         l: \"yes\"\nm: 2001-12-14\nnn: 2001-12-14t21:59:43.10-05:00\no: !!str 0555\np: !!int '0x10'\n\
         q: !!float 3\nr: !custom 12\ns: |\n  0555\nt: <<\nu: !!binary aGVsbG8=\nv: yess\n",
    );
    assert_eq!(
        v,
        json!({
            "a": true, "b": false, "c": true, "d": false, "e": true, "f": false, "g": true,
            "h": null, "i": null, "j": null, "k": "0555", "l": "yes", "m": "2001-12-14",
            "nn": "2001-12-14t21:59:43.10-05:00", "o": "0555", "p": 16, "q": 3, "r": "12",
            "s": "0555\n", "t": "<<", "u": "hello", "v": "yess"
        })
    );
}

#[test]
fn keys_become_strings_as_sigs_k8s_io_yaml_makes_them() {
    let v = parse("on: 1\n0555: 2\n1.5: 3\n1e7: 4\nfalse: 5\n\"~\": 6\n");
    assert_eq!(
        v,
        json!({"true": 1, "365": 2, "1.5": 3, "1e+07": 4, "false": 5, "~": 6})
    );
    assert!(err("~: x\n").contains("null map key"), "{}", err("~: x\n"));
    assert!(err("[a]: x\n").contains("key must be a scalar"));
}

#[test]
fn wrong_tags_and_infinities_are_errors() {
    assert!(err("a: !!int x\n").contains("cannot decode !!str `x` as a !!int"));
    let e = err("a: .inf\n");
    assert!(
        e.starts_with("line 1 of the rendered document: `.inf` cannot be carried in JSON"),
        "{e}"
    );
    assert!(err("a: -.Inf\n").contains("-.inf"));
    assert!(err("a: .nan\n").contains(".nan"));
}

#[test]
fn duplicate_keys_keep_the_last_and_are_reported() {
    let (v, dups) = parse_document(
        "spec:\n  template:\n    securityContext: {runAsUser: 1}\n    x: 1\n    securityContext:\n      runAsUser: 2\n",
        &Yaml11Limits::default(),
        &mut Spent::default(),
    )
    .unwrap();
    assert_eq!(
        v,
        json!({"spec": {"template": {"securityContext": {"runAsUser": 2}, "x": 1}}})
    );
    assert_eq!(
        dups,
        [DuplicateKey {
            key: "securityContext".into(),
            mapping: "/spec/template".into(),
            line: 5
        }]
    );
}

#[test]
fn merge_keys_follow_go_yaml_v2_order() {
    // A later merge overwrites an earlier key; a later key overwrites the merge; of a list of
    // maps the first wins. Overriding a merged key is not a duplicate.
    let (v, dups) = parse_document(
        "base: &b {x: 1, w: 2}\nother: &o {w: 20, z: 30}\n\
         m1:\n  x: 0\n  <<: *b\nm2:\n  <<: *b\n  w: 3\nm3:\n  <<: [*o, *b]\n",
        &Yaml11Limits::default(),
        &mut Spent::default(),
    )
    .unwrap();
    assert_eq!(v["m1"], json!({"x": 1, "w": 2}));
    assert_eq!(v["m2"], json!({"x": 1, "w": 3}));
    assert_eq!(v["m3"], json!({"x": 1, "w": 20, "z": 30}));
    assert!(dups.is_empty(), "{dups:?}");
    assert!(err("m:\n  <<: 1\n").contains("map merge requires map"));
}

#[test]
fn aliases_are_bounded_over_the_whole_render() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let items = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{items}]\n"));
    }
    let e = err(&text);
    assert!(e.contains("alias bomb"), "{e}");
    // Below the bound per document, but not over a render of several documents.
    let small = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: [*a, *a, *a, *a, *a]\n";
    let limits = Yaml11Limits {
        max_alias_nodes: 200,
        ..Yaml11Limits::default()
    };
    let mut spent = Spent::default();
    let mut refused = None;
    for i in 0..10 {
        if let Err(e) = parse_document(small, &limits, &mut spent) {
            refused = Some((i, e));
            break;
        }
    }
    let (i, e) = refused.expect("the render's budget is shared by its documents");
    assert!(i > 0 && e.message.contains("200 nodes"), "{i} {e}");
}

#[test]
fn deep_and_wide_output_is_bounded() {
    let limits = Yaml11Limits {
        max_nodes: 1000,
        ..Yaml11Limits::default()
    };
    let text = format!("a: [{}]\n", vec!["[]"; 2000].join(","));
    let e = parse_document(&text, &limits, &mut Spent::default()).unwrap_err();
    assert!(e.message.contains("more than 1000 YAML nodes"), "{e}");
    let deep: String = (0..300)
        .map(|i| format!("{}a:\n", "  ".repeat(i)))
        .collect();
    let e = err(&deep);
    assert!(e.contains("deeper than 256"), "{e}");
}

#[test]
fn long_keys_are_cut_in_reports() {
    let key = "k".repeat(5000);
    let (_, dups) = parse_document(
        // Implicit keys stop at 1,024 characters: explicit ones do not.
        &format!("? {key}\n: 1\n? {key}\n: 2\n"),
        &Yaml11Limits::default(),
        &mut Spent::default(),
    )
    .unwrap();
    assert!(dups[0].key.chars().count() <= MAX_QUOTED + 1);
}

#[test]
fn float_keys_are_formatted_as_go_formats_them() {
    for (f, text) in [
        (1000.0, "1000"),
        (1e6, "1e+06"),
        (1.5, "1.5"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.25, "-2.25"),
        (123456.0, "123456"),
        (0.1, "0.1"),
    ] {
        assert_eq!(go_format_float_key(f), text, "{f}");
    }
}
