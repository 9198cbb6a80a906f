//! Elasticsearch's `_source` mapping: which parts of each document are stored (and returned by get and
//! search). A field left out of `_source` is still indexed and searchable — like an Elasticsearch mapping
//! with `"_source": {"excludes": ["body"]}` — it only costs no store space, no compression at flush and no
//! copying at compaction. Applies to documents indexed after the mapping is set.
//!
//! Patterns are dotted field paths with `*` wildcards (Elasticsearch's simple match): `body`,
//! `meta.*`, `*_raw`. A path matched by an `excludes` pattern is dropped (with everything under it); with
//! `includes` set, only paths matched by one of them (and everything under a matched object) are kept.
//! `enabled: false` stores an empty object.
//!
//! Crash safety does not depend on the stored source: in crash-safe mode the tLog records the whole
//! document, and recovery analyzes that (see [`crate::schema::AnalyzedDoc::log_source`]).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `_source` mapping of an index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFilter {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub includes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excludes: Vec<String>,
}

fn yes() -> bool {
    true
}

impl Default for SourceFilter {
    fn default() -> Self {
        SourceFilter { enabled: true, includes: vec![], excludes: vec![] }
    }
}

impl SourceFilter {
    /// Parses the value of a mappings' `_source` key.
    pub fn from_mapping(v: &Value) -> Result<SourceFilter> {
        let bad = |m: &str| Error::InvalidArgument(format!("[_source] {m}"));
        let Some(obj) = v.as_object() else { return Err(bad("must be an object")) };
        let mut f = SourceFilter::default();
        for (k, x) in obj {
            match k.as_str() {
                "enabled" => f.enabled = x.as_bool().ok_or_else(|| bad("[enabled] must be true or false"))?,
                "includes" | "excludes" => {
                    let list: Vec<String> = match x {
                        Value::String(s) => vec![s.clone()],
                        Value::Array(items) => items
                            .iter()
                            .map(|i| i.as_str().map(str::to_string))
                            .collect::<Option<_>>()
                            .ok_or_else(|| bad(&format!("[{k}] must be a list of field patterns")))?,
                        _ => return Err(bad(&format!("[{k}] must be a list of field patterns"))),
                    };
                    if k == "includes" {
                        f.includes = list;
                    } else {
                        f.excludes = list;
                    }
                }
                other => {
                    return Err(bad(&format!("unknown parameter [{other}]; use enabled, includes, excludes")))
                }
            }
        }
        Ok(f)
    }

    /// Whether every document is stored whole (the default): no filtering pass at all.
    pub fn is_whole(&self) -> bool {
        self.enabled && self.includes.is_empty() && self.excludes.is_empty()
    }

    /// Writes `doc` as compact JSON, keeping what this filter keeps — byte for byte what
    /// `serde_json::to_writer` writes for the filtered document, without building it.
    pub fn write(&self, doc: &Value, out: &mut Vec<u8>) -> serde_json::Result<()> {
        if self.is_whole() {
            return serde_json::to_writer(out, doc);
        }
        if !self.enabled {
            out.extend_from_slice(b"{}");
            return Ok(());
        }
        let mut path = String::new();
        self.write_value(doc, &mut path, self.includes.is_empty(), out)
    }

    /// Writes `v` found at `path`; `kept`: an include pattern matched `path` or an object above it.
    fn write_value(
        &self,
        v: &Value,
        path: &mut String,
        kept: bool,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        match v {
            Value::Object(map) => {
                out.push(b'{');
                let mut first = true;
                for (k, child) in map {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    let excluded = self.excludes.iter().any(|p| simple_match(p, path));
                    let keep = kept || self.includes.iter().any(|p| simple_match(p, path));
                    if !excluded && (keep || has_objects(child)) {
                        let mark = out.len();
                        if !first {
                            out.push(b',');
                        }
                        serde_json::to_writer(&mut *out, k)?;
                        out.push(b':');
                        let body = out.len();
                        self.write_value(child, path, keep, out)?;
                        // An object (or list of objects) with nothing included below it is left out.
                        if !keep && out[body..].iter().all(|c| b"{}[],".contains(c)) {
                            out.truncate(mark);
                        } else {
                            first = false;
                        }
                    }
                    path.truncate(len);
                }
                out.push(b'}');
                Ok(())
            }
            Value::Array(items) if items.iter().any(Value::is_object) => {
                out.push(b'[');
                let mut first = true;
                // Outside an included part only objects can hold included paths.
                for item in items.iter().filter(|i| kept || i.is_object()) {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    self.write_value(item, path, kept, out)?;
                }
                out.push(b']');
                Ok(())
            }
            leaf => serde_json::to_writer(out, leaf),
        }
    }

    /// The filter as a mappings' `_source` value, or `None` for the default.
    pub fn to_mapping(&self) -> Option<Value> {
        (*self != SourceFilter::default()).then(|| serde_json::to_value(self).expect("plain data"))
    }
}

/// Whether `v` may hold an included path below it (so it is walked, not dropped, outside included parts).
fn has_objects(v: &Value) -> bool {
    v.is_object() || v.as_array().is_some_and(|a| a.iter().any(Value::is_object))
}

/// Elasticsearch's simple match (`Regex.simpleMatch`): `*` matches any run of characters (dots included),
/// everything else itself. Used for `_source` patterns here and for field patterns in the server (search-time
/// `_source` filtering, highlight fields, `_mapping/field`).
pub fn simple_match(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), s.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filtered(f: &Value, doc: &Value) -> Value {
        let mut out = vec![];
        SourceFilter::from_mapping(f).unwrap().write(doc, &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn simple_match_patterns() {
        assert!(simple_match("body", "body"));
        assert!(!simple_match("body", "body2"));
        assert!(!simple_match("body", "bod"));
        assert!(simple_match("meta.*", "meta.a.b"));
        assert!(!simple_match("meta.*", "meta"));
        assert!(simple_match("*_raw", "title_raw"));
        assert!(simple_match("*", ""));
        assert!(simple_match("a*b*c", "axxbyyc"));
        assert!(!simple_match("a*b*c", "axxbyy"));
    }

    #[test]
    fn excludes_includes_and_disabled() {
        let doc = json!({"title": "T", "body": "long text", "meta": {"a": 1, "b": {"c": 2, "d": 3}},
                         "list": [{"x": 1, "y": 2}, {"x": 3}], "n": [1, 2]});
        assert_eq!(
            filtered(&json!({"excludes": ["body", "meta.b.c", "list.y"]}), &doc),
            json!({"title": "T", "meta": {"a": 1, "b": {"d": 3}}, "list": [{"x": 1}, {"x": 3}], "n": [1, 2]})
        );
        assert_eq!(
            filtered(&json!({"includes": ["title", "meta.b"]}), &doc),
            json!({"title": "T", "meta": {"b": {"c": 2, "d": 3}}})
        );
        assert_eq!(
            filtered(&json!({"includes": ["meta.*"], "excludes": ["*.d"]}), &doc),
            json!({"meta": {"a": 1, "b": {"c": 2}}})
        );
        assert_eq!(filtered(&json!({"includes": "list.x"}), &doc), json!({"list": [{"x": 1}, {"x": 3}]}));
        let mixed = json!({"a": [1, {"b": 2, "c": 3}], "d": [{"e": 1}]});
        assert_eq!(filtered(&json!({"includes": ["a.b"]}), &mixed), json!({"a": [{"b": 2}]}));
        assert_eq!(filtered(&json!({"includes": ["a"]}), &mixed), json!({"a": [1, {"b": 2, "c": 3}]}));
        assert_eq!(filtered(&json!({"enabled": false}), &doc), json!({}));
        // The default and a filter that keeps everything write exactly what serde_json writes.
        for f in [json!({}), json!({"excludes": ["nothing"]})] {
            let mut out = vec![];
            SourceFilter::from_mapping(&f).unwrap().write(&doc, &mut out).unwrap();
            assert_eq!(out, serde_json::to_vec(&doc).unwrap());
        }
        assert!(SourceFilter::from_mapping(&json!({"exclude": ["x"]})).is_err());
        assert!(SourceFilter::from_mapping(&json!({"excludes": [1]})).is_err());
        assert!(SourceFilter::from_mapping(&json!({"enabled": "no"})).is_err());
        assert_eq!(SourceFilter::default().to_mapping(), None);
        let f = SourceFilter::from_mapping(&json!({"excludes": ["body"]})).unwrap();
        assert_eq!(SourceFilter::from_mapping(&f.to_mapping().unwrap()).unwrap(), f);
    }
}
