//! What go-yaml's v2 and v3 share, for the two readers of Go tools' YAML in `source`: helm's
//! output (`helm::yaml11_scalar`) and sops's cleartext values (`sops::scalar`).

/// go-yaml's `yamlStyleFloat`, the same in v2 (helm's output, through `sigs.k8s.io/yaml`) and
/// v3 (sops): `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
pub fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

#[cfg(test)]
mod tests {
    use super::yaml_style_float;

    #[test]
    fn floats_as_go_yaml_writes_them() {
        for s in ["1.5", "-1.5", "+.5", "1.", "1e3", "1.5E-3", "0.0"] {
            assert!(yaml_style_float(s), "{s}");
        }
        for s in [
            "", ".", "e3", "1e", "1.5.2", "0x1p3", "1_000.0", ".inf", "1:30",
        ] {
            assert!(!yaml_style_float(s), "{s}");
        }
    }
}
