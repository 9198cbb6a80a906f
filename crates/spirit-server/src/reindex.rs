//! `POST /_reindex` (Elasticsearch's, without scripts or remote sources): copies the documents of one or
//! more source indices — all of them, or those a `query` matches — into a destination index, each under
//! its `_id`. The usual use is the re-index behind an alias swap ([`spirit::aliases`]): create `logs-v2`
//! with a new mapping, reindex `logs-v1` into it, move the alias.
//!
//! The matches are taken from one snapshot per source index (an alias's filter applies, as for a search);
//! each document's current source is then written through the `_bulk` path ([`crate::documents::bulk`]) in
//! batches, so the destination is created if missing, an alias names its write index, and in crash-safe
//! mode every batch is durable before the next. `dest.op_type: create` refuses ids the destination already
//! has: a version conflict, which ends the run with a 409 (`conflicts=abort`, the default) or is counted
//! (`conflicts=proceed`). Any other failure ends the run and is reported. A document deleted after the
//! query matched it is skipped (counted in `noops`).

use crate::documents::{bulk, check_run_params, conflicts_and_max_docs};
use crate::error::{ApiError, ApiResult};
use crate::State;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Documents per `_bulk` batch when the source gives no `size`.
const BATCH: usize = 1000;

/// Runs a reindex request to completion.
pub fn reindex(st: &State, body: &Value, params: &HashMap<String, String>) -> ApiResult<(StatusCode, Value)> {
    let t0 = std::time::Instant::now();
    check_run_params(params, "_reindex")?;
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "source" | "dest" | "max_docs" | "conflicts" => {}
            "script" => return Err(ApiError::unsupported("[script] in _reindex (no scripting)")),
            k => return Err(ApiError::parsing(format!("unknown key [{k}] in the _reindex request"))),
        }
    }
    let (abort, max_docs) = conflicts_and_max_docs(obj, params)?;
    let section = |name: &str| -> ApiResult<&Map<String, Value>> {
        obj.get(name)
            .ok_or_else(|| ApiError::bad_request(format!("[_reindex] requires [{name}]")))?
            .as_object()
            .ok_or_else(|| ApiError::parsing(format!("[{name}] must be an object")))
    };
    let (source, dest) = (section("source")?, section("dest")?);
    let mut batch = BATCH;
    for (k, v) in source {
        match k.as_str() {
            "index" | "query" => {}
            "size" => {
                batch = v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| ApiError::parsing("[source] [size] must be a positive integer"))?
                    .min(st.limits.max_bulk_actions as u64) as usize
            }
            k => return Err(ApiError::unsupported(format!("[source] [{k}] in _reindex"))),
        }
    }
    let sources = match source.get("index") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::parsing("[source] [index] takes a string or strings"))?
            .join(","),
        _ => return Err(ApiError::bad_request("[_reindex] requires [source] [index]")),
    };
    let mut create = false;
    for (k, v) in dest {
        match (k.as_str(), v) {
            ("index", Value::String(_)) => {}
            ("op_type", Value::String(t)) if t == "index" || t == "create" => create = t == "create",
            ("index" | "op_type", _) => {
                return Err(ApiError::parsing(format!(
                    "[dest] [{k}] must be a string (op_type: index or create)"
                )))
            }
            (k, _) => return Err(ApiError::unsupported(format!("[dest] [{k}] in _reindex"))),
        }
    }
    let dest = dest
        .get("index")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("[_reindex] requires [dest] [index]"))?;
    let targets = st.search_targets(&sources)?;
    // The index the writes go to, if it exists already (an alias: its write index).
    let written = match st.engine.index(dest) {
        Some(i) => Some(i.name().to_string()),
        None if st.engine.aliases().get(dest).is_some() => Some(st.write_index(dest)?.name().to_string()),
        None => None,
    };
    if let Some(w) = written.as_deref().filter(|w| targets.iter().any(|t| t.index.name() == *w)) {
        return Err(ApiError::bad_request(format!(
            "reindex cannot write into an index its reading from [{w}]"
        )));
    }
    let query = source.get("query").cloned().unwrap_or_else(|| json!({"match_all": {}}));
    let op = if create { "create" } else { "index" };
    let mut left = max_docs.unwrap_or(u64::MAX);
    let (mut total, mut created, mut updated, mut conflicts, mut noops, mut batches) = (0u64, 0, 0, 0, 0, 0);
    let mut failures: Vec<Value> = vec![];
    'sources: for t in &targets {
        let schema = t.index.schema();
        let mut tr = crate::dsl::Translator::new(&schema, st.limits.max_clauses, st.limits.max_depth)
            .on_index(t.index.settings());
        let q = crate::search::filtered(tr.query(&query)?, t.filter.as_ref(), &mut tr)?;
        let mut versions = t.index.matching_versions(&q)?;
        versions.truncate(left.min(usize::MAX as u64) as usize);
        left -= versions.len() as u64;
        total += versions.len() as u64;
        for chunk in versions.chunks(batch) {
            let (mut lines, mut ids) = (Vec::new(), vec![]);
            for (_, _, id) in chunk {
                match t.index.get(id)? {
                    Some(src) => {
                        ids.push(id.as_str());
                        lines.extend(serde_json::to_vec(&json!({ op: { "_id": id } })).expect("json"));
                        lines.push(b'\n');
                        lines.extend(src);
                        lines.push(b'\n');
                    }
                    // Deleted since the query matched it.
                    None => noops += 1,
                }
            }
            if lines.is_empty() {
                continue;
            }
            batches += 1;
            let r = bulk(st, Some(dest), &lines)?;
            for (item, id) in r["items"].as_array().into_iter().flatten().zip(ids) {
                let v = &item[op];
                match v["status"].as_u64() {
                    Some(201) => created += 1,
                    Some(200) => updated += 1,
                    Some(409) => {
                        conflicts += 1;
                        if abort {
                            failures.push(failure(v, id));
                        }
                    }
                    _ => failures.push(failure(v, id)),
                }
            }
            if !failures.is_empty() {
                break 'sources;
            }
        }
    }
    let status = match failures.first() {
        None => StatusCode::OK,
        Some(f) => StatusCode::from_u16(f["status"].as_u64().unwrap_or(500) as u16)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
    };
    Ok((
        status,
        json!({"took": t0.elapsed().as_millis() as u64, "timed_out": false, "total": total, "created": created,
               "updated": updated, "deleted": 0, "batches": batches, "version_conflicts": conflicts,
               "noops": noops, "retries": {"bulk": 0, "search": 0}, "throttled_millis": 0,
               "requests_per_second": -1.0, "throttled_until_millis": 0, "failures": failures}),
    ))
}

/// The failed bulk item of document `id` as a reindex failure (Elasticsearch's shape: index, id, cause,
/// status).
fn failure(item: &Value, id: &str) -> Value {
    json!({"index": item["_index"], "id": id, "cause": item["error"], "status": item["status"]})
}
