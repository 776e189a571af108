//! Reading a large JSON answer for a few of its fields, without building the whole tree: the
//! parse keeps only what the profile's pointers reach and skips the rest as it reads it. A
//! NATS server's listing of its streams and consumers may be 64 MiB of JSON, which as a
//! `serde_json::Value` takes several times that; pruned, it takes what the names and leaders
//! take. Pure.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Which parts of a document to keep: the whole value here, some keys (or array indexes)
/// of it, and/or every element of it (a `*` in a pattern).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Keep {
    all: bool,
    keys: BTreeMap<String, Keep>,
    each: Option<Box<Keep>>,
}

impl Keep {
    /// Keeps what `pointer` reaches (a JSON pointer, `*` standing for every element of an
    /// array).
    pub fn add(&mut self, pointer: &str) {
        let mut node = self;
        for seg in pointer.split('/').skip(1) {
            node = if seg == "*" {
                node.each.get_or_insert_with(Default::default)
            } else {
                let key = seg.replace("~1", "/").replace("~0", "~");
                node.keys.entry(key).or_default()
            };
        }
        node.all = true;
    }
}

/// `bytes` parsed as JSON, keeping only what `keep` says; null where an array element is
/// skipped (so indexes stay as they were). At most `budget` values are kept: a document that
/// would keep more is refused while it is read, before it is built.
pub fn parse(bytes: &[u8], keep: &Keep, budget: usize) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let left = Cell::new(budget);
    let v = Pruned(keep, &left).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// What to keep here, and how many values may still be kept in all.
struct Pruned<'a>(&'a Keep, &'a Cell<usize>);

impl Pruned<'_> {
    /// One more value kept, or the error that ends the parse.
    fn count<E: serde::de::Error>(&self) -> Result<(), E> {
        match self.1.get() {
            0 => Err(E::custom(
                "the document holds more than its budget of values to keep",
            )),
            n => {
                self.1.set(n - 1);
                Ok(())
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.all {
            // What a pointer reaches is a name or a leader: a scalar. A container there is
            // skipped, not built (a listing cannot make one name a gigabyte).
            return d.deserialize_any(ScalarOnly);
        }
        d.deserialize_any(self)
    }
}

/// A scalar as it is; anything else skipped as it is read, null in its place.
struct ScalarOnly;

impl<'de> Visitor<'de> for ScalarOnly {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = vec![];
        let mut i = 0usize;
        // Elements kept by their index hold their place (null before them); with `*`, every
        // element that is a container is kept and the rest (scalars: no group holds there)
        // go, so a list of a million zeros keeps nothing.
        let last_index = self
            .0
            .keys
            .keys()
            .filter_map(|k| k.parse::<usize>().ok())
            .max();
        loop {
            let by_index = self.0.keys.get(&i.to_string());
            let next = match (by_index, self.0.each.as_deref()) {
                (Some(k), _) => seq.next_element_seed(Pruned(k, self.1))?,
                (None, Some(k)) => seq.next_element_seed(Pruned(k, self.1))?.map(|v| match v {
                    Value::Object(_) | Value::Array(_) => v,
                    _ => Value::Null,
                }),
                (None, None) => seq.next_element::<IgnoredAny>()?.map(|_| Value::Null),
            };
            let Some(v) = next else { break };
            if by_index.is_some() {
                while out.len() < i {
                    out.push(Value::Null);
                }
                self.count::<A::Error>()?;
                out.push(v);
            } else if !v.is_null() && last_index.is_none_or(|l| i > l) {
                self.count::<A::Error>()?;
                out.push(v);
            }
            i += 1;
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.0.keys.get(&key) {
                Some(k) => {
                    let v = map.next_value_seed(Pruned(k, self.1))?;
                    self.count::<A::Error>()?;
                    out.insert(key, v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_pointers_reach_is_kept() {
        let mut keep = Keep::default();
        keep.add("/a/*/name");
        keep.add("/a/*/c/leader");
        keep.add("/n");
        let doc = br#"{"a": [{"name": "x", "big": [1,2,3], "c": {"leader": "s1", "other": {}}},
                             {"name": "y", "c": {"leader": null}}],
                      "n": 3, "skip": {"deep": [[[1]]]}}"#;
        let v = parse(doc, &keep, 100_000).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": [{"name": "x", "c": {"leader": "s1"}},
                                     {"name": "y", "c": {"leader": null}}], "n": 3})
        );
    }

    #[test]
    fn array_indexes_keep_their_place() {
        let mut keep = Keep::default();
        keep.add("/ping/1/mode");
        let v = parse(
            br#"{"ping": [{"mode": "a"}, {"mode": "b", "x": 1}, {}]}"#,
            &keep,
            100_000,
        )
        .unwrap();
        assert_eq!(v.pointer("/ping/1/mode"), Some(&Value::from("b")));
        assert_eq!(v.pointer("/ping/0"), Some(&Value::Null));
    }

    #[test]
    fn a_document_that_would_keep_more_than_its_budget_is_refused_while_read() {
        let mut keep = Keep::default();
        keep.add("/a/*/name");
        let many: Vec<String> = (0..1000)
            .map(|i| format!(r#"{{"name": "s{i}"}}"#))
            .collect();
        let doc = format!(r#"{{"a": [{}]}}"#, many.join(","));
        assert!(parse(doc.as_bytes(), &keep, 100).is_err());
        assert!(parse(doc.as_bytes(), &keep, 10_000).is_ok());
        // Scalars where groups would be keep nothing.
        let zeros = format!(r#"{{"a": [{}]}}"#, vec!["0"; 100_000].join(","));
        let v = parse(zeros.as_bytes(), &keep, 10).unwrap();
        assert_eq!(v, serde_json::json!({"a": []}));
    }

    #[test]
    fn what_is_not_json_is_refused() {
        let keep = Keep::default();
        assert!(parse(b"{\"a\": ", &keep, 100_000).is_err());
        assert!(parse(b"{} trailing", &keep, 100_000).is_err());
    }

    proptest::proptest! {
        /// Whatever is kept reads as in the whole document.
        #[test]
        fn a_kept_pointer_reads_as_in_the_whole(n in 0usize..5, leader in "[a-z0-9-]{0,8}") {
            let items: Vec<Value> = (0..n)
                .map(|i| serde_json::json!({"name": format!("s{i}"), "cluster": {"leader": leader, "x": [i]}, "pad": "y".repeat(i)}))
                .collect();
            let whole = serde_json::json!({"list": items, "other": {"k": 1}});
            let bytes = serde_json::to_vec(&whole).unwrap();
            let mut keep = Keep::default();
            keep.add("/list/*/name");
            keep.add("/list/*/cluster/leader");
            let pruned = parse(&bytes, &keep, 100_000).unwrap();
            for i in 0..n {
                for p in [format!("/list/{i}/name"), format!("/list/{i}/cluster/leader")] {
                    proptest::prop_assert_eq!(pruned.pointer(&p), whole.pointer(&p));
                }
            }
            proptest::prop_assert!(pruned.pointer("/other").is_none());
        }
    }
}
