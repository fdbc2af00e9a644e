//! Step 2, identify: the canonical form of a message, the bytes its chain
//! link is hashed from. Each adapter says which of its fields are volatile;
//! this writes the rest in one stable form.

use serde_json::Value;

/// Serializes `value` with object keys sorted and every key named in
/// `volatile` removed at any depth, so that key order, whitespace and fields
/// that clients move between calls (`cache_control`) do not change identity.
///
/// Written straight from the borrowed value: a whole history passes through
/// here on every request, and building a sorted copy first cost an
/// allocation per node. The bytes are exactly `serde_json::to_vec` of that
/// sorted copy, so stored chains keep their hashes.
pub fn canonical_json(value: &Value, volatile: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(&mut out, value, volatile);
    out
}

fn write_canonical(out: &mut Vec<u8>, value: &Value, volatile: &[&str]) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map
                .iter()
                .filter(|(key, _)| !volatile.contains(&key.as_str()))
                .collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_scalar(out, key);
                out.push(b':');
                write_canonical(out, item, volatile);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(out, item, volatile);
            }
            out.push(b']');
        }
        scalar => write_scalar(out, scalar),
    }
}

/// Strings get serde_json's own escaping, numbers its own formatting.
fn write_scalar<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing JSON scalars into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_volatile_fields_do_not_change_the_canonical_form() {
        let a = json!({"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]});
        let b = json!({"content": [{"text": "hi", "type": "text"}], "role": "user"});
        assert_eq!(
            canonical_json(&a, &["cache_control"]),
            canonical_json(&b, &["cache_control"])
        );
    }

    /// The reference: a sorted copy, serialized by serde_json.
    fn sorted_copy(value: &Value, volatile: &[&str]) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map
                    .keys()
                    .filter(|key| !volatile.contains(&key.as_str()))
                    .collect();
                keys.sort();
                let mut sorted = serde_json::Map::new();
                for key in keys {
                    sorted.insert(key.clone(), sorted_copy(&map[key], volatile));
                }
                Value::Object(sorted)
            }
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| sorted_copy(v, volatile)).collect())
            }
            other => other.clone(),
        }
    }

    #[test]
    fn the_canonical_bytes_are_serde_json_of_a_sorted_copy() {
        let value = json!({
            "z": [1, 2.5, -3e-7, null, true, {"b": "\u{1F600} \"quoted\" \\ \n\t\u{0001}", "a": []}],
            "role": "tool",
            "cache_control": {"type": "ephemeral"},
            "content": [{"type": "text", "text": "ünïcödé", "cache_control": {"x": 1}}],
            "": {},
            "n": 18446744073709551615u64,
        });
        let reference =
            serde_json::to_vec(&sorted_copy(&value, &["cache_control"])).expect("serializes");
        assert_eq!(canonical_json(&value, &["cache_control"]), reference);
        assert_eq!(
            String::from_utf8(canonical_json(&json!({"b": 1, "a": {"d": 2, "c": 3}}), &[]))
                .expect("utf-8"),
            r#"{"a":{"c":3,"d":2},"b":1}"#
        );
    }
}
