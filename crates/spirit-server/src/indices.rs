//! Index administration: create (with `settings` and `mappings`), delete, get, mappings, `_cat/indices`.
//!
//! Settings understood at creation (flat `index.x.y` or nested, with or without the `index.` prefix):
//! `number_of_shards` (1; sharding is not built yet, so more is refused), `number_of_replicas` (accepted: a
//! single node holds no replicas, as a one-node Elasticsearch cluster), `refresh_interval` (accepted: every
//! write is visible at once), `translog.durability` (`request` = crash-safe, `async` = graceful),
//! `spirit.durability` (`volatile`, `graceful`, `crash-safe`), `spirit.dram_budget` and
//! `spirit.persistent_budget` (sizes such as `256MB`). Analyzers are chosen per field in the mappings
//! (`"analyzer": "standard" | "english" | "stop" | "stemming"`); custom analysis chains are refused.

use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use spirit::{Durability, IndexOptions};

/// Flattens nested settings into dotted keys without the `index.` prefix.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        other => {
            let key = prefix.strip_prefix("index.").unwrap_or(prefix).to_string();
            out.push((key, other.clone()));
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses the `settings` of a create-index request into the index's options.
pub fn parse_settings(settings: Option<&Value>, default_durability: Durability) -> ApiResult<IndexOptions> {
    let mut opts = IndexOptions { durability: Some(default_durability), ..Default::default() };
    let Some(settings) = settings else { return Ok(opts) };
    if !settings.is_object() {
        return Err(ApiError::parsing("[settings] must be an object"));
    }
    let mut flat = vec![];
    flatten("", settings, &mut flat);
    for (key, v) in flat {
        let value = text(&v);
        match key.as_str() {
            "number_of_shards" => {
                if value != "1" {
                    return Err(ApiError::bad_request(format!(
                        "[index.number_of_shards] {value}: spirit runs one shard per index for now (sharding is not built yet); use 1"
                    )));
                }
            }
            "number_of_replicas" | "auto_expand_replicas" | "refresh_interval" | "provided_name" => {}
            "translog.durability" => {
                opts.durability = Some(match value.to_ascii_lowercase().as_str() {
                    "request" => Durability::CrashSafe,
                    "async" => Durability::Graceful,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "unknown value [{other}] for [index.translog.durability]: use request or async"
                        )))
                    }
                })
            }
            "spirit.durability" => opts.durability = Some(value.parse().map_err(ApiError::bad_request)?),
            "spirit.dram_budget" => {
                opts.dram_budget = Some(spirit::parse_size(&value).map_err(ApiError::bad_request)? as usize)
            }
            "spirit.persistent_budget" => {
                opts.persistent_budget = Some(spirit::parse_size(&value).map_err(ApiError::bad_request)?)
            }
            k if k.starts_with("analysis.") => {
                return Err(ApiError::unsupported(format!(
                    "the setting [index.{k}] (custom analysis chains); choose a built-in analyzer per field in the \
                     mappings: standard, english, stop or stemming"
                )))
            }
            other => return Err(ApiError::bad_request(format!("unknown setting [index.{other}]"))),
        }
    }
    Ok(opts)
}

/// The `settings` object reported for an index.
pub fn settings_json(name: &str, opts: &IndexOptions, cfg: &spirit::ShardConfig) -> Value {
    let durability = opts.durability.unwrap_or(cfg.durability);
    let translog = if durability == Durability::CrashSafe { "request" } else { "async" };
    json!({"index": {
        "number_of_shards": "1", "number_of_replicas": "0", "provided_name": name,
        "translog": {"durability": translog},
        "spirit": {
            "durability": durability,
            "dram_budget": opts.dram_budget.unwrap_or(cfg.dram_budget).to_string(),
            "persistent_budget": opts.persistent_budget.unwrap_or(cfg.persistent_budget).to_string(),
        }
    }})
}

/// Checks the body of a create-index request; returns (settings, mappings).
pub fn parse_create(body: &[u8]) -> ApiResult<(Option<Value>, Option<Value>)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, None));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| ApiError::parsing(format!("request body is not valid JSON: {e}")))?;
    let obj: &Map<String, Value> = v.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "settings" | "mappings" => {}
            "aliases" if obj[k].as_object().is_some_and(|a| a.is_empty()) => {}
            "aliases" => return Err(ApiError::unsupported("index aliases")),
            other => return Err(ApiError::parsing(format!("unknown key [{other}] for create index"))),
        }
    }
    Ok((obj.get("settings").cloned(), obj.get("mappings").cloned()))
}

/// Human-readable bytes as `_cat` prints them (`12.3mb`).
pub fn cat_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["b", "kb", "mb", "gb", "tb"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b}b")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_forms() {
        let o = parse_settings(Some(&json!({"index": {"translog": {"durability": "request"}, "number_of_shards": 1}})), Durability::Graceful).unwrap();
        assert_eq!(o.durability, Some(Durability::CrashSafe));
        let o = parse_settings(Some(&json!({"index.translog.durability": "async", "number_of_replicas": 2})), Durability::CrashSafe).unwrap();
        assert_eq!(o.durability, Some(Durability::Graceful));
        let o = parse_settings(Some(&json!({"spirit": {"durability": "volatile", "dram_budget": "64MB"}})), Durability::Graceful).unwrap();
        assert_eq!((o.durability, o.dram_budget), (Some(Durability::Volatile), Some(64 << 20)));
        assert_eq!(parse_settings(None, Durability::CrashSafe).unwrap().durability, Some(Durability::CrashSafe));
        assert!(parse_settings(Some(&json!({"number_of_shards": 3})), Durability::Graceful).unwrap_err().reason.contains("one shard"));
        assert!(parse_settings(Some(&json!({"index": {"frobnicate": 1}})), Durability::Graceful).unwrap_err().reason.contains("frobnicate"));
        assert!(parse_settings(Some(&json!({"analysis": {"analyzer": {}}})), Durability::Graceful).is_ok(), "an empty analysis object sets nothing");
        assert!(parse_settings(Some(&json!({"analysis": {"analyzer": {"a": {"type": "custom"}}}})), Durability::Graceful).is_err());
    }

    #[test]
    fn cat_sizes() {
        assert_eq!(cat_bytes(512), "512b");
        assert_eq!(cat_bytes(1536), "1.5kb");
        assert_eq!(cat_bytes(5 << 20), "5.0mb");
    }
}
