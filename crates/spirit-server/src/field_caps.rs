//! `_field_caps`: what each field is across the indices a request names — its type, and whether it can be
//! searched and aggregated — in Elasticsearch's shape. It is what Kibana, OpenSearch Dashboards and Grafana
//! ask to list an index pattern's fields, and what a client asks before it builds a query over indices
//! whose mappings it does not know.
//!
//! The answer reads the mappings only. A field mapped in several indices with different types gets one
//! entry per type, each listing its indices; with `include_unmapped=true`, indices without the field are
//! listed under the type `unmapped`. The parents of dotted names are `object` fields, neither searchable nor
//! aggregatable, listed with any field they hold that is asked for (as Elasticsearch adds them). Two metadata
//! fields are listed as spirit serves them: `_id` (searchable with `ids` and `term`, not aggregatable) and
//! `_source` (neither); `_index` is not, since spirit's queries cannot name it. `fields` takes names and `*`
//! patterns, from the URL or the body, and is required.

use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use spirit::schema::{simple_match, FieldType};
use spirit::Index;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// One field's capabilities in one index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Caps {
    ty: &'static str,
    metadata: bool,
    searchable: bool,
    aggregatable: bool,
}

/// Every field of `index` with its capabilities, by name: its mapped fields, the objects their dotted names
/// imply, and the metadata fields.
fn fields_of(index: &Index) -> BTreeMap<String, Caps> {
    let field = |ty, searchable, aggregatable| Caps { ty, metadata: false, searchable, aggregatable };
    let mut out = BTreeMap::new();
    let schema = index.schema();
    for (_, f) in schema.user_fields() {
        let caps = match f.ty {
            FieldType::Text => field("text", true, false),
            FieldType::Keyword => field("keyword", true, true),
            FieldType::Long => field("long", true, true),
            FieldType::Double => field("double", true, true),
            FieldType::Date => field("date", true, true),
        };
        let mut parent = f.name.as_str();
        while let Some((p, _)) = parent.rsplit_once('.') {
            out.entry(p.to_string()).or_insert(field("object", false, false));
            parent = p;
        }
        out.insert(f.name.clone(), caps);
    }
    let meta = |ty, searchable| Caps { ty, metadata: true, searchable, aggregatable: false };
    out.insert("_id".into(), meta("_id", true));
    out.insert("_source".into(), meta("_source", false));
    out
}

/// The `fields` a request asks for: the URL's `fields` (comma-separated) or the body's (a list or a
/// comma-separated string).
pub fn requested(param: Option<&String>, body: &Value) -> ApiResult<Vec<String>> {
    let obj = match body {
        Value::Null => None,
        Value::Object(o) => Some(o),
        _ => return Err(ApiError::parsing("request body must be a JSON object")),
    };
    for k in obj.into_iter().flat_map(|o| o.keys()) {
        match k.as_str() {
            "fields" => {}
            "index_filter" | "runtime_mappings" => {
                return Err(ApiError::unsupported(format!("[{k}] in a _field_caps request")))
            }
            other => {
                return Err(ApiError::parsing(format!("unknown key [{other}] in a _field_caps request")))
            }
        }
    }
    let split = |s: &str| s.split(',').map(str::trim).filter(|x| !x.is_empty()).map(String::from).collect();
    let fields: Vec<String> = match (obj.and_then(|o| o.get("fields")), param) {
        (Some(Value::Array(a)), _) => a
            .iter()
            .map(|v| {
                v.as_str().map(String::from).ok_or_else(|| ApiError::parsing("[fields] must hold strings"))
            })
            .collect::<ApiResult<_>>()?,
        (Some(Value::String(s)), _) => split(s),
        (Some(_), _) => return Err(ApiError::parsing("[fields] must be a list of field names or patterns")),
        (None, Some(p)) => split(p),
        (None, None) => vec![],
    };
    if fields.is_empty() {
        return Err(ApiError::bad_request("specified fields can't be null or empty"));
    }
    Ok(fields)
}

/// The `_field_caps` answer for `indices` and the field names or patterns `fields`.
pub fn field_caps(indices: &[Arc<Index>], fields: &[String], include_unmapped: bool) -> Value {
    let per_index: Vec<(&str, BTreeMap<String, Caps>)> =
        indices.iter().map(|i| (i.name(), fields_of(i))).collect();
    // Whether each distinct name is asked for, matched once however many indices have it.
    let mut asked: HashMap<&str, bool> = HashMap::new();
    // Field -> its capabilities -> the indices that have it so.
    let mut found: BTreeMap<&str, BTreeMap<Caps, BTreeSet<&str>>> = BTreeMap::new();
    for (index, caps) in &per_index {
        for (name, c) in caps {
            let want = *asked.entry(name).or_insert_with(|| fields.iter().any(|p| simple_match(p, name)));
            if !want {
                continue;
            }
            found.entry(name).or_default().entry(*c).or_default().insert(index);
            // Its parent objects too, whatever the patterns say (not a multi-field's parent field).
            let mut parent = name.as_str();
            while let Some((p, _)) = parent.rsplit_once('.') {
                if let Some((p, pc)) = caps.get_key_value(p).filter(|(_, pc)| pc.ty == "object") {
                    found.entry(p).or_default().entry(*pc).or_default().insert(index);
                }
                parent = p;
            }
        }
    }
    let mut out = Map::new();
    for (name, kinds) in found {
        let having: usize = kinds.values().map(BTreeSet::len).sum();
        let unmapped: Vec<&str> = if include_unmapped && having < per_index.len() {
            let has = |i: &&str| kinds.values().any(|ix| ix.contains(i));
            per_index.iter().map(|(i, _)| *i).filter(|i| !has(i)).collect()
        } else {
            vec![]
        };
        // Indices are listed only when the indices do not all agree.
        let list = kinds.len() > 1 || !unmapped.is_empty();
        let mut types = Map::new();
        for (c, ix) in &kinds {
            let mut e = json!({
                "type": c.ty, "metadata_field": c.metadata, "searchable": c.searchable,
                "aggregatable": c.aggregatable,
            });
            if list {
                e["indices"] = json!(ix);
            }
            // Two kinds can share a type name only if they differ in what they allow: never here (a type
            // decides both), so one entry per type.
            types.insert(c.ty.to_string(), e);
        }
        if !unmapped.is_empty() {
            types.insert(
                "unmapped".into(),
                json!({"type": "unmapped", "metadata_field": false, "searchable": false,
                       "aggregatable": false, "indices": unmapped}),
            );
        }
        out.insert(name.to_string(), Value::Object(types));
    }
    let names: Vec<&str> = per_index.iter().map(|(i, _)| *i).collect();
    json!({"indices": names, "fields": out})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_the_url_or_the_body() {
        let p = "a, b.*".to_string();
        assert_eq!(requested(Some(&p), &Value::Null).unwrap(), ["a", "b.*"]);
        assert_eq!(requested(None, &json!({"fields": ["x", "y*"]})).unwrap(), ["x", "y*"]);
        assert_eq!(requested(Some(&p), &json!({"fields": "z"})).unwrap(), ["z"]);
        assert!(requested(None, &Value::Null).unwrap_err().reason.contains("can't be null or empty"));
        assert!(requested(None, &json!({"fields": []})).is_err());
        assert!(requested(None, &json!({"fields": [1]})).is_err());
        assert!(requested(None, &json!({"index_filter": {}})).unwrap_err().reason.contains("index_filter"));
        assert!(requested(None, &json!({"nope": 1})).is_err());
        assert!(requested(None, &json!([1])).is_err());
    }
}
