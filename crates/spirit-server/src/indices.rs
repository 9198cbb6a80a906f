//! Index administration: create (with `settings` and `mappings`), delete, get, mappings, `_cat/indices`.
//!
//! Settings understood at creation (flat `index.x.y` or nested, with or without the `index.` prefix):
//! `number_of_shards` (1 to 64; default: the server's `--shards`), `number_of_replicas` (accepted: a
//! single node holds no replicas, as a one-node Elasticsearch cluster), `refresh_interval` (accepted: every
//! write is visible at once), `translog.durability` (`request` = crash-safe, `async` = graceful),
//! `spirit.durability` (`volatile`, `graceful`, `crash-safe`), `spirit.dram_budget` and
//! `spirit.persistent_budget` (sizes such as `256MB`), and `analysis.analyzer.NAME` definitions that spirit's
//! built-in analyzers implement exactly: `{"type": "standard"}` (with `stopwords` `_english_` or `_none_`),
//! `{"type": "english"}`, `{"type": "stop"}`, or `{"type": "custom", "tokenizer": "standard", "filter":
//! ["lowercase", "stop"?, "porter_stem" | "snowball" | "stemmer"?]}`. A definition named `default` applies to
//! text fields mapped without an analyzer (dynamic ones too); other names are usable in the mappings. The
//! definitions are kept in the index's settings (`IndexSettings::analyzers`), so the names stay usable after
//! creation and a restart — in mapping updates, `_analyze` and a suggester's `analyzer` — and `_settings`
//! lists them. Anything
//! else (other tokenizers, char filters, synonym filters...) is refused by name. `similarity.default` sets the
//! BM25 parameters of every field: `type` `BM25`, `k1` (finite, not negative; default 1.2), `b` (0 to 1;
//! default 0.75) and `discount_overlaps` (accepted: spirit's analyzers put no two tokens at one position);
//! named similarities, for some fields only, are refused.

use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use spirit::{Durability, IndexOptions};
use std::collections::BTreeMap;

/// What a create-index request's settings ask for.
#[derive(Debug, Default)]
pub struct CreateSettings {
    pub options: IndexOptions,
    /// Analyzer names defined in `analysis`, each resolved to a built-in analyzer.
    pub analyzers: BTreeMap<String, String>,
    /// The definitions behind `analyzers`, as given (kept in the index's settings).
    pub analyzer_defs: BTreeMap<String, Value>,
    /// The built-in analyzer behind `analysis.analyzer.default`.
    pub default_analyzer: Option<String>,
    /// BM25 `k1` and `b` from `similarity.default` (`None`: the defaults).
    pub bm25_k1: Option<f32>,
    pub bm25_b: Option<f32>,
}

impl CreateSettings {
    /// The index settings these ask for.
    pub fn index_settings(&self) -> spirit::IndexSettings {
        let d = spirit::IndexSettings::default();
        spirit::IndexSettings {
            default_analyzer: self.default_analyzer.clone(),
            bm25_k1: self.bm25_k1.unwrap_or(d.bm25_k1),
            bm25_b: self.bm25_b.unwrap_or(d.bm25_b),
            analyzers: self.analyzer_defs.clone(),
            ..d
        }
    }
}

/// The built-in analyzer equal to an Elasticsearch analyzer definition.
pub(crate) fn resolve_analyzer(name: &str, def: &Map<String, Value>) -> ApiResult<String> {
    let refuse = |why: String| {
        ApiError::unsupported(format!(
            "the analyzer [{name}] ({why}); spirit's analyzers are standard, english, stop and stemming"
        ))
    };
    let stopwords = def.get("stopwords").map(text);
    let ty = def.get("type").map(text).unwrap_or_else(|| "custom".into());
    for k in def.keys() {
        if !["type", "stopwords", "tokenizer", "filter"].contains(&k.as_str()) {
            return Err(refuse(format!("option [{k}]")));
        }
    }
    let with_stop = |base_stop: bool| -> ApiResult<bool> {
        match stopwords.as_deref() {
            None => Ok(base_stop),
            Some("_english_") => Ok(true),
            Some("_none_") => Ok(false),
            Some(other) => Err(refuse(format!("stopwords {other}"))),
        }
    };
    let (stop, stem) = match ty.as_str() {
        "standard" => (with_stop(false)?, false),
        "stop" => (with_stop(true)?, false),
        "english" => (with_stop(true)?, true),
        "custom" => {
            if def.get("tokenizer").map(text).as_deref() != Some("standard") {
                return Err(refuse("a tokenizer other than standard".into()));
            }
            let filters: Vec<String> = match def.get("filter") {
                None => vec![],
                Some(Value::Array(a)) => a.iter().map(text).collect(),
                Some(v) => vec![text(v)],
            };
            if !filters.iter().any(|f| f == "lowercase") {
                return Err(refuse("no lowercase filter: spirit always lowercases".into()));
            }
            let (mut stop, mut stem) = (false, false);
            for f in &filters {
                match f.as_str() {
                    "lowercase" => {}
                    "stop" => stop = true,
                    "porter_stem" | "snowball" | "stemmer" => stem = true,
                    other => return Err(refuse(format!("the filter [{other}]"))),
                }
            }
            (stop, stem)
        }
        other => return Err(refuse(format!("type {other}"))),
    };
    Ok(match (stop, stem) {
        (false, false) => "standard",
        (true, false) => "stop",
        (false, true) => "stemming",
        (true, true) => "english",
    }
    .to_string())
}

/// The built-in analyzer each of an index's named analyzers equals (its `analysis.analyzer` definitions,
/// kept in its settings: they were resolved when it was created, so none fails here; one that would is left
/// out, and its name is then unknown).
pub fn index_analyzers(settings: &spirit::IndexSettings) -> BTreeMap<String, String> {
    settings
        .analyzers
        .iter()
        .filter_map(|(name, def)| Some((name.clone(), resolve_analyzer(name, def.as_object()?).ok()?)))
        .collect()
}

/// An analyzer by name, as requests after an index's creation name one (`_analyze`, a suggester's
/// `analyzer`): one of `index`'s named analyzers, else a built-in one.
pub(crate) fn analyzer_named(
    index: Option<&spirit::Index>,
    name: &str,
) -> ApiResult<spirit::analysis::AnalyzerConfig> {
    analyzer_in(index.map(|i| i.settings()), name)
}

/// [`analyzer_named`] for the index of `settings` (a query's `analyzer`).
pub(crate) fn analyzer_in(
    settings: Option<&spirit::IndexSettings>,
    name: &str,
) -> ApiResult<spirit::analysis::AnalyzerConfig> {
    // Only the definition named is resolved.
    let custom = settings
        .and_then(|s| s.analyzers.get(name).cloned())
        .and_then(|def| resolve_analyzer(name, def.as_object()?).ok());
    let builtin = custom.as_deref().unwrap_or(name);
    spirit::schema::analyzer_config(builtin).map_err(|_| {
        ApiError::bad_request(format!(
            "failed to find analyzer [{name}]; spirit's analyzers are standard, simple, english, stop and \
             stemming, and those an index defines in [analysis.analyzer]"
        ))
    })
}

/// Replaces analyzer names defined in `analysis` by their built-in equivalents in a mappings object.
pub fn resolve_mappings(mappings: &mut Value, analyzers: &BTreeMap<String, String>) {
    match mappings {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                // The parameter is a string; a field named `analyzer` is an object to descend into.
                if (k == "analyzer" || k == "search_analyzer") && v.is_string() {
                    if let Some(b) = v.as_str().and_then(|n| analyzers.get(n)) {
                        *v = Value::String(b.clone());
                    }
                } else {
                    resolve_mappings(v, analyzers);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| resolve_mappings(v, analyzers)),
        _ => {}
    }
}

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

/// Parses the `settings` of a create-index request.
pub fn parse_settings(settings: Option<&Value>, default_durability: Durability) -> ApiResult<CreateSettings> {
    let mut out = CreateSettings::default();
    out.options.durability = Some(default_durability);
    let Some(settings) = settings else { return Ok(out) };
    if !settings.is_object() {
        return Err(ApiError::parsing("[settings] must be an object"));
    }
    let mut flat = vec![];
    flatten("", settings, &mut flat);
    let opts = &mut out.options;
    let mut analyzer_defs: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for (key, v) in flat {
        let value = text(&v);
        match key.as_str() {
            "number_of_shards" => {
                let n: usize = value.parse().map_err(|_| {
                    ApiError::bad_request(format!("failed to parse value [{value}] for setting [index.number_of_shards]"))
                })?;
                if !(1..=spirit::index::MAX_SHARDS).contains(&n) {
                    return Err(ApiError::bad_request(format!(
                        "failed to parse value [{n}] for setting [index.number_of_shards]: must be between 1 and {}",
                        spirit::index::MAX_SHARDS
                    )));
                }
                opts.shards = Some(n);
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
            "similarity.default.type" if value.eq_ignore_ascii_case("bm25") => {}
            "similarity.default.type" => {
                return Err(ApiError::unsupported(format!(
                    "the similarity type [{value}] for [index.similarity.default.type]: spirit scores with BM25"
                )))
            }
            "similarity.default.k1" | "similarity.default.b" => {
                let x: f32 = value.parse().map_err(|_| {
                    ApiError::bad_request(format!("failed to parse value [{value}] for setting [index.{key}]"))
                })?;
                if key.ends_with("k1") {
                    out.bm25_k1 = Some(x);
                } else {
                    out.bm25_b = Some(x);
                }
            }
            "similarity.default.discount_overlaps" => {
                if !matches!(value.as_str(), "true" | "false") {
                    return Err(ApiError::bad_request(format!(
                        "failed to parse value [{value}] for setting [index.{key}]: true or false"
                    )));
                }
            }
            k if k.starts_with("similarity.default.") => {
                return Err(ApiError::bad_request(format!("unknown setting [index.{k}]")))
            }
            k if k.starts_with("similarity.") => {
                return Err(ApiError::unsupported(format!(
                    "the setting [index.{k}] (a named similarity for some fields); set the BM25 parameters of \
                     every field in [index.similarity.default]"
                )))
            }
            k if k.starts_with("analysis.analyzer.") => {
                let rest = &k["analysis.analyzer.".len()..];
                let Some((name, param)) = rest.split_once('.') else {
                    return Err(ApiError::parsing(format!("malformed analyzer setting [index.{k}]")));
                };
                analyzer_defs.entry(name.to_string()).or_default().insert(param.to_string(), v);
            }
            k if k.starts_with("analysis.") => {
                return Err(ApiError::unsupported(format!(
                    "the setting [index.{k}] (custom tokenizers, filters and char filters); define analyzers from \
                     the built-in ones: standard, english, stop, or custom with the standard tokenizer and the \
                     lowercase, stop and stemmer filters"
                )))
            }
            other => return Err(ApiError::bad_request(format!("unknown setting [index.{other}]"))),
        }
    }
    for (name, def) in analyzer_defs {
        let builtin = resolve_analyzer(&name, &def)?;
        if name == "default" {
            out.default_analyzer = Some(builtin.clone());
        }
        out.analyzers.insert(name.clone(), builtin);
        out.analyzer_defs.insert(name, Value::Object(def));
    }
    out.index_settings().validate().map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(out)
}

/// The `settings` object reported for an index.
pub fn settings_json(
    name: &str,
    opts: &IndexOptions,
    cfg: &spirit::ShardConfig,
    settings: &spirit::IndexSettings,
) -> Value {
    let durability = opts.durability.unwrap_or(cfg.durability);
    let translog = if durability == Durability::CrashSafe { "request" } else { "async" };
    let mut out = json!({"index": {
        "number_of_shards": opts.shards.unwrap_or(1).to_string(), "number_of_replicas": "0", "provided_name": name,
        "translog": {"durability": translog},
        "similarity": {"default": {
            "type": "BM25", "k1": settings.bm25_k1.to_string(), "b": settings.bm25_b.to_string(),
        }},
        "spirit": {
            "durability": durability,
            "dram_budget": opts.dram_budget.unwrap_or(cfg.dram_budget).to_string(),
            "persistent_budget": opts.persistent_budget.unwrap_or(cfg.persistent_budget).to_string(),
        }
    }});
    // As Elasticsearch: no `analysis` section for an index that defines no analyzers.
    if !settings.analyzers.is_empty() {
        out["index"]["analysis"] = json!({"analyzer": settings.analyzers});
    }
    out
}

/// What a create-index body asks for: settings, mappings and aliases.
pub type CreateBody = (Option<Value>, Option<Value>, Vec<(String, crate::aliases::AliasOptions)>);

/// Checks the body of a create-index request; returns (settings, mappings, its aliases with their
/// options).
pub fn parse_create(body: &[u8]) -> ApiResult<CreateBody> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((None, None, vec![]));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::parsing(format!("request body is not valid JSON: {e}")))?;
    let obj: &Map<String, Value> =
        v.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "settings" | "mappings" | "aliases" => {}
            other => return Err(ApiError::parsing(format!("unknown key [{other}] for create index"))),
        }
    }
    let mut aliases = vec![];
    if let Some(a) = obj.get("aliases") {
        let a = a.as_object().ok_or_else(|| ApiError::parsing("[aliases] must be an object"))?;
        for (name, options) in a {
            let o = options
                .as_object()
                .ok_or_else(|| ApiError::parsing(format!("alias [{name}] takes an object")))?;
            aliases.push((name.clone(), crate::aliases::alias_options(name, o)?));
        }
    }
    Ok((obj.get("settings").cloned(), obj.get("mappings").cloned(), aliases))
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
    fn analyzers_map_to_built_ins() {
        let s = parse_settings(
            Some(&json!({"analysis": {"analyzer": {
                "default": {"type": "english"},
                "my_stop": {"type": "standard", "stopwords": "_english_"},
                "chain": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase", "porter_stem"]},
            }}})),
            Durability::Graceful,
        )
        .unwrap();
        assert_eq!(s.default_analyzer.as_deref(), Some("english"));
        assert_eq!(s.analyzers["my_stop"], "stop");
        assert_eq!(s.analyzers["chain"], "stemming");
        let mut m = json!({"properties": {"a": {"type": "text", "analyzer": "chain"}, "b": {"type": "text", "analyzer": "english"}}});
        resolve_mappings(&mut m, &s.analyzers);
        assert_eq!(m["properties"]["a"]["analyzer"], json!("stemming"));
        assert_eq!(m["properties"]["b"]["analyzer"], json!("english"));
        // A field named `analyzer` is a field, not the parameter.
        let mut m = json!({"properties": {"analyzer": {"type": "text", "analyzer": "chain"}}});
        resolve_mappings(&mut m, &s.analyzers);
        assert_eq!(m["properties"]["analyzer"]["analyzer"], json!("stemming"));
        for bad in [
            json!({"analysis": {"analyzer": {"x": {"type": "custom", "tokenizer": "whitespace", "filter": ["lowercase"]}}}}),
            json!({"analysis": {"analyzer": {"x": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase", "synonym"]}}}}),
            json!({"analysis": {"analyzer": {"x": {"type": "keyword"}}}}),
            json!({"analysis": {"filter": {"f": {"type": "stop"}}}}),
        ] {
            assert!(parse_settings(Some(&bad), Durability::Graceful).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_forms() {
        let o = parse_settings(
            Some(&json!({"index": {"translog": {"durability": "request"}, "number_of_shards": 1}})),
            Durability::Graceful,
        )
        .unwrap()
        .options;
        assert_eq!(o.durability, Some(Durability::CrashSafe));
        let o = parse_settings(
            Some(&json!({"index.translog.durability": "async", "number_of_replicas": 2})),
            Durability::CrashSafe,
        )
        .unwrap()
        .options;
        assert_eq!(o.durability, Some(Durability::Graceful));
        let o = parse_settings(
            Some(&json!({"spirit": {"durability": "volatile", "dram_budget": "64MB"}})),
            Durability::Graceful,
        )
        .unwrap()
        .options;
        assert_eq!((o.durability, o.dram_budget), (Some(Durability::Volatile), Some(64 << 20)));
        assert_eq!(
            parse_settings(None, Durability::CrashSafe).unwrap().options.durability,
            Some(Durability::CrashSafe)
        );
        let o =
            parse_settings(Some(&json!({"index": {"number_of_shards": "3"}})), Durability::Graceful).unwrap();
        assert_eq!(o.options.shards, Some(3));
        for bad in [json!(0), json!(65), json!("two")] {
            assert!(parse_settings(Some(&json!({"number_of_shards": bad})), Durability::Graceful)
                .unwrap_err()
                .reason
                .contains("number_of_shards"));
        }
        assert!(parse_settings(Some(&json!({"index": {"frobnicate": 1}})), Durability::Graceful)
            .unwrap_err()
            .reason
            .contains("frobnicate"));
        assert!(
            parse_settings(Some(&json!({"analysis": {"analyzer": {}}})), Durability::Graceful).is_ok(),
            "an empty analysis object sets nothing"
        );
        assert!(
            parse_settings(
                Some(&json!({"analysis": {"analyzer": {"a": {"type": "custom"}}}})),
                Durability::Graceful
            )
            .is_err(),
            "no tokenizer"
        );
    }

    #[test]
    fn cat_sizes() {
        assert_eq!(cat_bytes(512), "512b");
        assert_eq!(cat_bytes(1536), "1.5kb");
        assert_eq!(cat_bytes(5 << 20), "5.0mb");
    }
}
