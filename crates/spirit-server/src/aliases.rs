//! Index aliases over HTTP (Elasticsearch's alias API): `POST /_aliases` with `add`/`remove` actions applied
//! atomically, `PUT|POST|DELETE /{index}/_alias/{name}`, `GET /_alias[/{name}]`, `GET /{index}/_alias[/{name}]`,
//! `GET /_aliases`, and `aliases` in a create-index body. The engine keeps them ([`spirit::aliases`]); here
//! are the request shapes, wildcard expansion and the answers. Searches through an alias and single-index
//! operations through an alias that names one index are resolved by [`crate::ServerState`].
//!
//! An alias's `filter` (query DSL) is checked against the index's mapping when it is added, and filters
//! searches, counts and `_delete_by_query` through the alias ([`crate::ServerState::search_targets`]).
//!
//! Not supported, refused by name: routing, `is_hidden`, and the `remove_index` action.

use crate::error::{ApiError, ApiResult};
use crate::ServerState;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use spirit::{AliasAction, Aliases};

/// The options of one alias in a create-index body or a `PUT /{index}/_alias/{name}`.
#[derive(Debug, Default)]
pub struct AliasOptions {
    pub is_write_index: Option<bool>,
    /// Query DSL searches through the alias are filtered with.
    pub filter: Option<Value>,
}

pub fn alias_options(alias: &str, options: &Map<String, Value>) -> ApiResult<AliasOptions> {
    let mut o = AliasOptions::default();
    for (k, v) in options {
        match k.as_str() {
            "is_write_index" => o.is_write_index = Some(write_flag(v)?),
            "filter" => o.filter = Some(filter_query(v)?),
            k => return Err(ApiError::unsupported(format!("alias option [{k}] (of alias [{alias}])"))),
        }
    }
    Ok(o)
}

fn write_flag(v: &Value) -> ApiResult<bool> {
    v.as_bool().ok_or_else(|| ApiError::parsing("[is_write_index] takes a boolean"))
}

fn filter_query(v: &Value) -> ApiResult<Value> {
    match v {
        Value::Object(_) => Ok(v.clone()),
        _ => Err(ApiError::parsing("an alias [filter] is a query object")),
    }
}

/// An index's aliases as `GET /{index}` and `GET /_alias` show them: `{name: {}}`, with `filter` and
/// `is_write_index` where they were given.
pub fn of_index_json(aliases: &Aliases, index: &str) -> Map<String, Value> {
    of_index_matching(aliases, index, &|_| true)
}

fn of_index_matching(aliases: &Aliases, index: &str, wanted: &dyn Fn(&str) -> bool) -> Map<String, Value> {
    aliases
        .of_index(index)
        .into_iter()
        .filter(|(a, _)| wanted(a))
        .map(|(a, w)| {
            let mut props = Map::new();
            if let Some(f) = aliases.filter(&a, index) {
                props.insert("filter".into(), f.clone());
            }
            if let Some(w) = w {
                props.insert("is_write_index".into(), json!(w));
            }
            (a, Value::Object(props))
        })
        .collect()
}

/// One name or a list of names, from `key` (`index`, `alias`) or its plural (`indices`, `aliases`).
fn names(obj: &Map<String, Value>, one: &str, many: &str, action: &str) -> ApiResult<Vec<String>> {
    let bad = || ApiError::parsing(format!("[{action}] [{one}] and [{many}] take a string or strings"));
    let mut out = vec![];
    for key in [one, many] {
        match obj.get(key) {
            None => {}
            Some(Value::String(s)) => out.push(s.clone()),
            Some(Value::Array(a)) => {
                for v in a {
                    out.push(v.as_str().ok_or_else(bad)?.to_string());
                }
            }
            Some(_) => return Err(bad()),
        }
    }
    if out.is_empty() {
        return Err(ApiError::bad_request(format!("[{action}] requires one of [{one}] or [{many}]")));
    }
    Ok(out)
}

/// The actions of a `POST /_aliases` body, with index wildcards expanded to the existing indices.
pub fn parse_actions(st: &ServerState, body: &Value) -> ApiResult<Vec<AliasAction>> {
    let actions = body
        .get("actions")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::parsing("[aliases] requires an [actions] array"))?;
    let mut out = vec![];
    for a in actions {
        let (kind, spec) = match a.as_object().map(|o| o.iter().collect::<Vec<_>>()) {
            Some(v) if v.len() == 1 => (v[0].0.as_str(), v[0].1),
            _ => return Err(ApiError::parsing("each alias action is an object with one key")),
        };
        let obj = spec.as_object().ok_or_else(|| ApiError::parsing(format!("[{kind}] takes an object")))?;
        match kind {
            "add" | "remove" => {}
            "remove_index" => return Err(ApiError::unsupported("the [remove_index] alias action")),
            other => return Err(ApiError::parsing(format!("unknown alias action [{other}]"))),
        }
        let (mut must_exist, mut is_write_index, mut filter) = (false, None, None);
        for (k, v) in obj {
            match (kind, k.as_str()) {
                (_, "index" | "indices" | "alias" | "aliases") => {}
                ("add", "is_write_index") => is_write_index = Some(write_flag(v)?),
                ("add", "filter") => filter = Some(filter_query(v)?),
                ("remove", "must_exist") => {
                    must_exist =
                        v.as_bool().ok_or_else(|| ApiError::parsing("[must_exist] takes a boolean"))?
                }
                (_, other) => {
                    return Err(ApiError::unsupported(format!(
                        "alias option [{other}] (of a [{kind}] action)"
                    )))
                }
            }
        }
        let indices = expand(st, &names(obj, "index", "indices", kind)?)?;
        for alias in names(obj, "alias", "aliases", kind)? {
            for index in &indices {
                out.push(match kind {
                    "add" => AliasAction::Add {
                        index: index.clone(),
                        alias: alias.clone(),
                        is_write_index,
                        filter: filter.clone(),
                    },
                    _ => AliasAction::Remove { index: index.clone(), alias: alias.clone(), must_exist },
                });
            }
        }
    }
    Ok(out)
}

/// Index names and patterns (`logs-*`, `_all`) as the existing index names they stand for; a plain name is
/// kept as it is (the engine then says whether it exists).
fn expand(st: &ServerState, parts: &[String]) -> ApiResult<Vec<String>> {
    let all = st.engine.index_names();
    let mut out = vec![];
    for p in parts {
        if p == "_all" || p.contains('*') {
            let pattern = if p == "_all" { "*" } else { p };
            out.extend(all.iter().filter(|n| spirit::schema::simple_match(pattern, n)).cloned());
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Applies alias actions; engine errors in Elasticsearch's shapes. A filter must translate against its
/// index's mapping (checked before anything changes).
pub fn update(st: &ServerState, actions: &[AliasAction]) -> ApiResult<()> {
    for a in actions {
        if let AliasAction::Add { index, alias, filter: Some(f), .. } = a {
            if let Some(i) = st.engine.index(index) {
                let schema = i.schema();
                crate::dsl::Translator::new(&schema, st.limits.max_clauses, st.limits.max_depth)
                    .on_index(i.settings())
                    .query(f)
                    .map_err(|mut e| {
                        e.reason = format!("failed to parse filter for alias [{alias}]: {}", e.reason);
                        e
                    })?;
            }
        }
    }
    st.engine.update_aliases(actions).map_err(|e| match e {
        spirit::Error::NotFound(r) if r.starts_with("no such index") => {
            let index = r.trim_start_matches("no such index [").trim_end_matches(']').to_string();
            ApiError::index_not_found(&index)
        }
        spirit::Error::NotFound(r) => ApiError::new(StatusCode::NOT_FOUND, "aliases_not_found_exception", r),
        spirit::Error::InvalidArgument(r) if r.contains("more than one write index") => {
            ApiError::new(StatusCode::BAD_REQUEST, "illegal_state_exception", r)
        }
        spirit::Error::InvalidArgument(r) => {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_alias_name_exception", r)
        }
        e => e.into(),
    })
}

/// `GET /_alias`, `/_alias/{name}`, `/{index}/_alias[/{name}]`, `/_aliases`: per index (those `index`
/// selects, every one by default), the aliases among `names` (every one by default; comma-separated, `*`
/// patterns) that name it. Naming aliases that match nothing is a 404.
pub fn get(st: &ServerState, index: Option<&str>, names: Option<&str>) -> ApiResult<Value> {
    let indices = match index {
        Some(t) => st.indices(t)?.iter().map(|i| i.name().to_string()).collect(),
        None => st.engine.index_names(),
    };
    let wanted = |a: &str| {
        names.is_none_or(|n| {
            n.split(',')
                .any(|p| p == "_all" || p == a || (p.contains('*') && spirit::schema::simple_match(p, a)))
        })
    };
    let aliases = st.engine.aliases();
    let mut out = Map::new();
    let mut found = false;
    for i in &indices {
        let mine = of_index_matching(&aliases, i, &wanted);
        found |= !mine.is_empty();
        if names.is_none() || !mine.is_empty() {
            out.insert(i.clone(), json!({ "aliases": mine }));
        }
    }
    if let Some(n) = names {
        if !found && !n.split(',').all(|p| p.contains('*') || p == "_all") {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "aliases_not_found_exception",
                format!("alias [{n}] missing"),
            )
            .with("resource.type", json!("aliases"))
            .with("resource.id", json!(n)));
        }
    }
    Ok(Value::Object(out))
}
