//! Document APIs: index (`PUT`/`POST /{index}/_doc[/{id}]`, `_create`), real-time get, delete, partial
//! update (`_update`) and `_bulk`. A write answers only once it is acknowledged by the engine — in
//! crash-safe mode, once its tLog record is durable; a bulk request shares one persist barrier per index.
//!
//! Optimistic concurrency control: a document's `_seq_no` is its doc id in its shard, which only grows, is new
//! for every write of an `_id` and survives merges, so it names one version of the `_id`; `_primary_term` is
//! always 1 (no replicas). `if_seq_no` + `if_primary_term` on index, update, delete and bulk items make the
//! write conditional on that version being live, checked by the engine under the shard's writer lock with
//! the write itself ([`spirit::Precondition`]); `op_type=create` is the engine's `Absent` condition.
//!
//! Versions: every document has a `_version`, kept by the engine — 1 for a new `_id`, one more at every
//! write of it (index, update), reported by writes, gets and (with `version: true`) search hits; a delete
//! reports the deleted version's plus one. External versioning (`version` with `version_type=external` or
//! `external_gte`) writes only a version above (or at least) the live one and gives the document that
//! version, as Elasticsearch does for versions kept in another system; `version` with internal versioning
//! is refused as in Elasticsearch 7+ (`if_seq_no` is the way). spirit keeps no tombstones: after a delete, a
//! new write of the `_id` starts at version 1 again (Elasticsearch remembers deleted versions for 60 s).

use crate::error::{ApiError, ApiResult};
use crate::State;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use spirit::{Index, PendingSet, Precondition};
use std::collections::HashMap;
use std::sync::Arc;

/// The response body of a write.
pub fn write_result(index: &str, id: &str, result: &str, seq_no: Option<u32>, version: u64) -> Value {
    json!({
        "_index": index, "_id": id, "_version": version, "result": result,
        "_shards": {"total": 1, "successful": 1, "failed": 0},
        "_seq_no": seq_no.unwrap_or(0), "_primary_term": 1,
    })
}

/// Parses a document body: a JSON object without metadata fields.
pub fn parse_document(body: &[u8]) -> ApiResult<Value> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "mapper_parsing_exception",
            format!("failed to parse the document: {e}"),
        )
    })?;
    check_document(v)
}

/// A document must be a JSON object without metadata fields.
pub fn check_document(v: Value) -> ApiResult<Value> {
    let obj = v.as_object().ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "mapper_parsing_exception", "a document must be a JSON object")
    })?;
    if let Some(k) =
        obj.keys().find(|k| ["_id", "_index", "_source", "_version", "_seq_no"].contains(&k.as_str()))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "mapper_parsing_exception",
            format!("Field [{k}] is a metadata field and cannot be added inside a document. Use the index API request parameters."),
        ));
    }
    Ok(v)
}

/// A write's condition: `if_seq_no` and `if_primary_term` (Elasticsearch's optimistic concurrency control),
/// or an external `version` (`version_type=external` or `external_gte`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCondition {
    SeqNo { seq_no: u64, primary_term: u64 },
    External { version: u64, gte: bool },
}

impl WriteCondition {
    /// The condition of a request's URL parameters or a bulk item's metadata (`get` reads one, as text);
    /// `None` when it has none.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> ApiResult<Option<WriteCondition>> {
        let num = |k: &str| -> ApiResult<Option<u64>> {
            get(k)
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        ApiError::bad_request(format!("[{k}] must be a non-negative integer, got [{v}]"))
                    })
                })
                .transpose()
        };
        let external = match get("version_type").as_deref() {
            None | Some("internal") => None,
            Some("external" | "external_gt") => Some(false),
            Some("external_gte") => Some(true),
            Some(t) => {
                return Err(ApiError::bad_request(format!(
                    "[version_type] must be internal, external or external_gte, got [{t}]"
                )))
            }
        };
        let seq = match (num("if_seq_no")?, num("if_primary_term")?) {
            (None, None) => None,
            (Some(seq_no), Some(primary_term)) if primary_term > 0 => {
                Some(WriteCondition::SeqNo { seq_no, primary_term })
            }
            (Some(_), _) => return Err(validation("ifSeqNo is set, but primary term is [0]")),
            (None, Some(t)) => {
                return Err(validation(&format!("ifSeqNo is unassigned, but primary term is [{t}]")))
            }
        };
        match (num("version")?, external, seq) {
            (None, None, seq) => Ok(seq),
            (Some(_), None, _) => Err(validation(
                "internal versioning can not be used for optimistic concurrency control. Please use `if_seq_no` \
                 and `if_primary_term` instead",
            )),
            (None, Some(_), _) => Err(validation("an external version_type needs a [version]")),
            (Some(_), Some(_), Some(_)) => {
                Err(validation("compare and write operations can not be used with external versioning"))
            }
            (Some(version), Some(gte), None) => Ok(Some(WriteCondition::External { version, gte })),
        }
    }

    /// The engine's condition for a write to `id`. Every version here has primary term 1, so another term is
    /// a conflict whatever is live (reported with the live version, as Elasticsearch does).
    fn precondition(self, index: &Index, id: &str) -> ApiResult<Precondition> {
        let (want, term) = match self {
            WriteCondition::External { version, gte } => return Ok(Precondition::Version { version, gte }),
            WriteCondition::SeqNo { seq_no, primary_term: 1 } => return Ok(Precondition::SeqNo(seq_no)),
            WriteCondition::SeqNo { seq_no, primary_term } => (seq_no, primary_term),
        };
        let why = match index.get_versioned(id)? {
            Some(live) => format!("current document has seqNo [{}] and primary term [1]", live.seq_no),
            None => "but no document was found".into(),
        };
        Err(spirit::Error::VersionConflict(format!(
            "[{id}]: version conflict, required seqNo [{want}], primary term [{term}]. {why}"
        ))
        .into())
    }
}

/// Elasticsearch's request validation failure.
fn validation(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "action_request_validation_exception",
        format!("Validation Failed: 1: {what};"),
    )
}

/// The engine's condition for an index or create write (`cond`: its `if_seq_no` or external version, if any).
fn index_condition(
    index: &Index,
    id: Option<&str>,
    create: bool,
    cond: Option<WriteCondition>,
) -> ApiResult<Precondition> {
    match (cond, id) {
        (None, _) if create => Ok(Precondition::Absent),
        (None, _) => Ok(Precondition::None),
        (Some(WriteCondition::External { .. }), _) if create => {
            Err(validation("create operations only support internal versioning. use index instead"))
        }
        (Some(_), _) if create => {
            Err(validation("create operations do not support compare and set. use index instead"))
        }
        (Some(WriteCondition::External { .. }), None) => {
            Err(validation("an id must be provided if version type or value are set"))
        }
        (Some(_), None) => {
            Err(validation("compare and write operations can not be used with autoGenerateId"))
        }
        (Some(c), Some(id)) => c.precondition(index, id),
    }
}

/// `POST /{index}/_delete_by_query`: deletes the documents the body's `query` matches (all of them without
/// one), in two steps as Elasticsearch does — the matches are taken from one snapshot, then each is deleted
/// only if it is still the live version of its `_id`: a version written in between is left alone and is a
/// version conflict, which ends the run with a 409 (`conflicts=abort`, the default) or is counted
/// (`conflicts=proceed`). `max_docs` bounds the documents deleted. Runs to completion before answering
/// (`wait_for_completion=true`), durable in crash-safe mode; `refresh` is accepted and changes nothing, as
/// every write is visible at once. Through an alias that filters the index, only documents passing the
/// filter are deleted.
pub fn delete_by_query(
    target: &crate::Target,
    body: &Value,
    params: &HashMap<String, String>,
    limits: &crate::Limits,
) -> ApiResult<(StatusCode, Value)> {
    let t0 = std::time::Instant::now();
    check_run_params(params, "_delete_by_query")?;
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "query" | "max_docs" | "conflicts")) {
        return Err(ApiError::parsing(format!("unknown key [{k}] in the _delete_by_query request")));
    }
    let (abort, max_docs) = conflicts_and_max_docs(obj, params)?;
    let query = obj.get("query").cloned().unwrap_or_else(|| json!({"match_all": {}}));
    let index = &target.index;
    let schema = index.schema();
    let mut tr =
        crate::dsl::Translator::new(&schema, limits.max_clauses, limits.max_depth).on_index(index.settings());
    let q = crate::search::filtered(tr.query(&query)?, target.filter.as_ref(), &mut tr)?;
    let mut versions = index.matching_versions(&q)?;
    if let Some(m) = max_docs {
        versions.truncate(m.min(usize::MAX as u64) as usize);
    }
    let total = versions.len() as u64;
    let done = index.delete_versions(&versions, abort)?;
    let name = index.name();
    let failures: Vec<Value> = if abort {
        done.conflicts
            .iter()
            .map(|id| {
                json!({"index": name, "id": id, "status": 409, "cause": {
                    "type": "version_conflict_engine_exception",
                    "reason": format!("[{id}]: version conflict, the document changed after the query matched it"),
                    "index": name}})
            })
            .collect()
    } else {
        vec![]
    };
    let status = if failures.is_empty() { StatusCode::OK } else { StatusCode::CONFLICT };
    Ok((
        status,
        json!({"took": t0.elapsed().as_millis() as u64, "timed_out": false, "total": total, "deleted": done.deleted,
               "batches": 1, "version_conflicts": done.conflicts.len(), "noops": 0,
               "retries": {"bulk": 0, "search": 0}, "throttled_millis": 0, "requests_per_second": -1.0,
               "throttled_until_millis": 0, "failures": failures}),
    ))
}

/// The URL parameters a by-query request or a reindex takes (`wait_for_completion` only true: they answer
/// when done); any other is refused by name.
pub fn check_run_params(params: &HashMap<String, String>, what: &str) -> ApiResult<()> {
    for k in params.keys() {
        if !matches!(k.as_str(), "conflicts" | "refresh" | "wait_for_completion" | "max_docs" | "pretty") {
            return Err(ApiError::unsupported(format!("the [{k}] parameter of {what}")));
        }
    }
    if params.get("wait_for_completion").is_some_and(|v| v == "false") {
        return Err(ApiError::unsupported(format!("wait_for_completion=false ({what} answers when done)")));
    }
    Ok(())
}

/// The `conflicts` (`abort`, the default: true; `proceed`: false) and `max_docs` of a by-query request or a
/// reindex, from the body or else the URL.
pub fn conflicts_and_max_docs(
    obj: &Map<String, Value>,
    params: &HashMap<String, String>,
) -> ApiResult<(bool, Option<u64>)> {
    let conflicts =
        obj.get("conflicts").and_then(Value::as_str).or(params.get("conflicts").map(String::as_str));
    let abort = match conflicts {
        None | Some("abort") => true,
        Some("proceed") => false,
        Some(c) => return Err(ApiError::parsing(format!("[conflicts] must be abort or proceed, got [{c}]"))),
    };
    let max_docs = match (obj.get("max_docs"), params.get("max_docs")) {
        (Some(v), _) => {
            Some(v.as_u64().ok_or_else(|| ApiError::parsing("[max_docs] must be a non-negative integer"))?)
        }
        (None, Some(v)) => Some(
            v.parse::<u64>().map_err(|_| ApiError::parsing("[max_docs] must be a non-negative integer"))?,
        ),
        (None, None) => None,
    };
    Ok((abort, max_docs))
}

/// Indexes one document (id `None`: generated). `create` refuses an existing id; `cond` replaces only the
/// version it names. Both are checked by the engine together with the write.
pub fn index_doc(
    state: &State,
    index: &Arc<Index>,
    id: Option<String>,
    doc: Value,
    create_only: bool,
    cond: Option<WriteCondition>,
) -> ApiResult<(StatusCode, Value)> {
    let pre = index_condition(index, id.as_deref(), create_only, cond)?;
    let r = index.add_with_id_if(id, doc, pre)?;
    state.metrics.docs_ingested.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(added(index, &r))
}

/// The status and body of an index or create write that was done.
fn added(index: &Index, r: &spirit::AddResult) -> (StatusCode, Value) {
    let (status, result) =
        if r.replaced { (StatusCode::OK, "updated") } else { (StatusCode::CREATED, "created") };
    (status, write_result(index.name(), &r.id, result, Some(r.doc), r.version))
}

/// Deletes one document; with `cond`, only the version it names, or only below an external version (a
/// conflict otherwise). Durable when it returns (crash-safe mode). Not found is a 404 with result
/// `not_found`. The `_version` reported is the deleted version's plus one (an external version's own).
pub fn delete_doc(index: &Index, id: &str, cond: Option<WriteCondition>) -> ApiResult<(StatusCode, Value)> {
    let (pre, external) = match cond {
        None => (Precondition::None, None),
        Some(c) => {
            let pre = c.precondition(index, id)?;
            let external = match pre {
                Precondition::Version { version, .. } => Some(version),
                _ => None,
            };
            (pre, external)
        }
    };
    let mut pending = PendingSet::default();
    let (deleted, p) = index.delete_if_deferred(id, pre)?;
    pending.note(p);
    index.sync_pending(&mut pending)?;
    let version = external.unwrap_or_else(|| deleted.map_or(1, |v| v + 1));
    let (status, result) =
        if deleted.is_some() { (StatusCode::OK, "deleted") } else { (StatusCode::NOT_FOUND, "not_found") };
    Ok((status, write_result(index.name(), id, result, None, version)))
}

/// Recursively merges `patch` into `base` (objects merge key by key; anything else replaces), as
/// Elasticsearch's partial update does. Returns whether `base` changed.
pub fn merge(base: &mut Value, patch: &Value) -> bool {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            let mut changed = false;
            for (k, v) in p {
                match b.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => changed |= merge(existing, v),
                    Some(existing) if existing == v => {}
                    _ => {
                        b.insert(k.clone(), v.clone());
                        changed = true;
                    }
                }
            }
            changed
        }
        (b, p) => {
            let changed = *b != *p;
            *b = p.clone();
            changed
        }
    }
}

/// `POST /{index}/_update/{id}` with `doc` (and `doc_as_upsert` or `upsert`). Scripts are refused. The
/// update reads the live version and writes the merged document on condition that this version is still the
/// live one ([`Precondition::SeqNo`], or `Absent` for an upsert), so a write in between is never lost: it is
/// a conflict, retried `retries` times (`retry_on_conflict`) and then a 409, as in Elasticsearch. With
/// `cond` (`if_seq_no`) the version read must be the one it names.
pub fn update_doc(
    state: &State,
    index: &Arc<Index>,
    id: &str,
    body: &Value,
    cond: Option<WriteCondition>,
    retries: usize,
) -> ApiResult<(StatusCode, Value)> {
    if let Some(WriteCondition::External { .. }) = cond {
        return Err(validation("the update API does not support external versioning (use if_seq_no)"));
    }
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("an update request must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "doc" | "doc_as_upsert" | "upsert" | "detect_noop" | "_source" => {}
            "script" | "scripted_upsert" => return Err(ApiError::unsupported("scripted updates")),
            other => return Err(ApiError::parsing(format!("unknown field [{other}] in the update request"))),
        }
    }
    if cond.is_some() && retries > 0 {
        return Err(validation("compare and write operations can not be retried"));
    }
    let doc = obj.get("doc");
    if let Some(d) = doc {
        if !d.is_object() {
            return Err(ApiError::parsing("[doc] must be a JSON object"));
        }
    }
    let as_upsert = obj.get("doc_as_upsert").and_then(Value::as_bool).unwrap_or(false);
    let detect_noop = obj.get("detect_noop").and_then(Value::as_bool).unwrap_or(true);
    // Updates of one id wait for each other; other writes are caught by the write's condition.
    let _g = state.id_lock(index.name(), id);
    let mut attempt = 0;
    let (status, result, written, seq_no, version) = loop {
        let current = index.get_versioned(id)?;
        let live = current.as_ref().map(|d| (d.seq_no as u32, d.version));
        if let Some(c) = cond {
            // The version read must be the one named (the engine checks it again with the write).
            c.precondition(index, id)?.check(id, live)?;
        }
        let (status, result, write) = match current {
            None => {
                let new = match (obj.get("upsert"), as_upsert, doc) {
                    (Some(u), _, _) => u.clone(),
                    (None, true, Some(d)) => d.clone(),
                    _ => {
                        return Err(ApiError::new(
                            StatusCode::NOT_FOUND,
                            "document_missing_exception",
                            format!("[{id}]: document missing"),
                        )
                        .with("index", json!(index.name())))
                    }
                };
                if !new.is_object() {
                    return Err(ApiError::parsing("[upsert] must be a JSON object"));
                }
                (StatusCode::CREATED, "created", Some((new, Precondition::Absent)))
            }
            Some(d) => {
                let mut source: Value = serde_json::from_slice(&d.source).map_err(|e| {
                    ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "spirit_exception",
                        format!("stored source of [{id}] is not JSON: {e}"),
                    )
                })?;
                let changed = doc.is_some_and(|d| merge(&mut source, d));
                if !changed && detect_noop {
                    (StatusCode::OK, "noop", None)
                } else {
                    (StatusCode::OK, "updated", Some((source, Precondition::SeqNo(d.seq_no))))
                }
            }
        };
        let Some((new, pre)) = write else {
            // A no-op answers with the live version's sequence number and `_version`.
            break (status, result, None, live.map(|l| l.0), live.map_or(1, |l| l.1));
        };
        match index.add_with_id_if(Some(id.to_string()), new, pre) {
            Ok(r) => break (status, result, Some(r.doc), Some(r.doc), r.version),
            Err(spirit::Error::VersionConflict(_)) if attempt < retries => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    };
    if written.is_some() {
        state.metrics.docs_ingested.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok((status, write_result(index.name(), id, result, seq_no, version)))
}

/// The outcome of one bulk item: its status and body, or its error.
type ItemResult = Result<(StatusCode, Value), ApiError>;

/// One action of a bulk request.
/// Each may carry an `if_seq_no` condition; an update also its `retry_on_conflict`.
enum Action {
    Index { create: bool, id: Option<String>, doc: Result<Value, ApiError>, cond: Option<WriteCondition> },
    Update { id: String, body: Result<Value, ApiError>, cond: Option<WriteCondition>, retries: usize },
    Delete { id: String, cond: Option<WriteCondition> },
}

struct Item {
    op: &'static str,
    index: String,
    action: Result<Action, ApiError>,
}

/// `_bulk`: NDJSON action lines (`index`, `create`, `update`, `delete`), each but `delete` followed by a
/// source line. A malformed action line fails the whole request (as in Elasticsearch); a bad document or a
/// failed action fails only its item. Items run in order; documents are acknowledged together: one persist
/// barrier per index at the end (crash-safe mode), after which every item reported successful is durable.
/// In a large request the documents bound for existing indexes are analyzed in parallel first
/// ([`prepare_bulk`]); only the insertions run one by one.
pub fn bulk(state: &State, default_index: Option<&str>, body: &[u8]) -> ApiResult<Value> {
    let t0 = std::time::Instant::now();
    let items = parse_bulk(default_index, body, state.limits.max_bulk_actions)?;
    let mut prepared = prepare_bulk(state, &items);
    let mut indexes: HashMap<String, Arc<Index>> = HashMap::new();
    let mut results: Vec<(usize, &'static str, ItemResult)> = vec![];
    // Items whose acknowledgement waits for their index's persist barrier.
    let mut pending: HashMap<String, Vec<usize>> = HashMap::new();
    for (n, item) in items.into_iter().enumerate() {
        let r = (|| -> ApiResult<(StatusCode, Value, bool)> {
            let action = item.action?;
            let index = match indexes.get(&item.index) {
                Some(i) => i.clone(),
                None => {
                    let i = match &action {
                        Action::Delete { .. } | Action::Update { .. } => state.write_index(&item.index)?,
                        Action::Index { .. } => state.index_or_create(&item.index)?,
                    };
                    indexes.insert(item.index.clone(), i.clone());
                    i
                }
            };
            // The document analyzed ahead of time, if it was (and for this very index).
            let ready = prepared[n].take().filter(|(i, _)| Arc::ptr_eq(i, &index)).map(|(_, p)| p);
            match action {
                Action::Index { create, id, doc, cond } => {
                    // The engine checks the condition with the write (create: no live version).
                    let pre = index_condition(&index, id.as_deref(), create, cond)?;
                    let p = match ready {
                        Some(p) => p?,
                        None => index.prepare(id, &doc?)?,
                    };
                    let r = index.insert_prepared_if(p, pre)?.0;
                    let (status, v) = added(&index, &r);
                    Ok((status, v, true))
                }
                Action::Update { id, body, cond, retries } => {
                    let (status, v) = update_doc(state, &index, &id, &body?, cond, retries)?;
                    Ok((status, v, false))
                }
                Action::Delete { id, cond } => {
                    let (status, v) = delete_doc(&index, &id, cond)?;
                    Ok((status, v, false))
                }
            }
        })();
        match r {
            Ok((status, v, deferred)) => {
                if deferred {
                    pending.entry(item.index.clone()).or_default().push(results.len());
                    state.metrics.docs_ingested.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                results.push((n, item.op, Ok((status, v))));
            }
            Err(e) => results.push((n, item.op, Err(e.with("index", json!(item.index))))),
        }
    }
    // One persist barrier per index acknowledges all its documents; if it fails, none of them is.
    for (name, positions) in pending {
        if let Err(e) = indexes[&name].sync() {
            let e = ApiError::from(e);
            for p in positions {
                results[p].2 = Err(e.clone());
            }
        }
    }
    let mut errors = false;
    let items: Vec<Value> = results
        .into_iter()
        .map(|(_, op, r)| {
            let body = match r {
                Ok((status, mut v)) => {
                    v["status"] = json!(status.as_u16());
                    v
                }
                Err(e) => {
                    errors = true;
                    let mut m = Map::new();
                    if let Some(i) = e.extra.get("index") {
                        m.insert("_index".into(), i.clone());
                    }
                    m.insert("status".into(), json!(e.status.as_u16()));
                    m.insert("error".into(), e.body());
                    Value::Object(m)
                }
            };
            json!({ op: body })
        })
        .collect();
    Ok(json!({"took": t0.elapsed().as_millis() as u64, "errors": errors, "items": items}))
}

/// Large bulk requests: the documents of `index`/`create` items for indexes that already exist are analyzed
/// in parallel up front ([`Index::prepare_all`]); the items still run one by one in order. Returns, per item,
/// the analysis and the index it was made for (used only if the item resolves to that same index).
#[allow(clippy::type_complexity)]
fn prepare_bulk(
    state: &State,
    items: &[Item],
) -> Vec<Option<(Arc<Index>, spirit::Result<spirit::PreparedDoc>)>> {
    const PARALLEL_MIN: usize = 32;
    let mut out: Vec<_> = items.iter().map(|_| None).collect();
    let mut by_index: HashMap<&str, Vec<usize>> = HashMap::new();
    for (n, item) in items.iter().enumerate() {
        if let Ok(Action::Index { doc: Ok(_), .. }) = &item.action {
            by_index.entry(item.index.as_str()).or_default().push(n);
        }
    }
    for (name, ns) in by_index {
        let Some(index) = state.engine.index(name).filter(|_| ns.len() >= PARALLEL_MIN) else { continue };
        let inputs = ns
            .iter()
            .filter_map(|&n| match &items[n].action {
                Ok(Action::Index { id, doc: Ok(d), .. }) => Some((id.clone(), d)),
                _ => None,
            })
            .collect();
        for (&n, p) in ns.iter().zip(index.prepare_all(inputs)) {
            out[n] = Some((index.clone(), p));
        }
    }
    out
}

fn parse_bulk(default_index: Option<&str>, body: &[u8], max_actions: usize) -> ApiResult<Vec<Item>> {
    let mut lines =
        body.split(|&b| b == b'\n').enumerate().filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace));
    let mut items = vec![];
    while let Some((n, line)) = lines.next() {
        if items.len() == max_actions {
            return Err(ApiError::bad_request(format!(
                "a bulk request may hold at most {max_actions} actions"
            )));
        }
        let malformed =
            |why: String| ApiError::bad_request(format!("Malformed action/metadata line [{}]: {why}", n + 1));
        let v: Value = serde_json::from_slice(line).map_err(|e| malformed(format!("not JSON ({e})")))?;
        let obj = v
            .as_object()
            .filter(|o| o.len() == 1)
            .ok_or_else(|| malformed("expected one action object".into()))?;
        let (op, meta) = obj.iter().next().expect("one key");
        let op: &'static str = match op.as_str() {
            "index" => "index",
            "create" => "create",
            "update" => "update",
            "delete" => "delete",
            other => return Err(malformed(format!("unknown action [{other}]"))),
        };
        let meta = meta.as_object().ok_or_else(|| malformed("action metadata must be an object".into()))?;
        let index = match meta.get("_index").and_then(Value::as_str).or(default_index) {
            Some(i) => i.to_string(),
            None => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "action_request_validation_exception",
                    "Validation Failed: 1: index is missing;",
                ))
            }
        };
        let id = match meta.get("_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(_) => return Err(malformed("[_id] must be a string".into())),
        };
        let meta_text = |k: &str| {
            meta.get(k).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let cond = WriteCondition::read(meta_text);
        let retries = match meta_text("retry_on_conflict") {
            None => Ok(0),
            Some(v) if op == "update" => v.parse::<usize>().map_err(|_| {
                ApiError::bad_request(format!(
                    "[retry_on_conflict] must be a non-negative integer, got [{v}]"
                ))
            }),
            Some(_) => Err(ApiError::bad_request(format!(
                "[retry_on_conflict] applies to update actions, not [{op}]"
            ))),
        };
        let mut source = || -> ApiResult<Value> {
            let (m, l) = lines.next().ok_or_else(|| {
                ApiError::bad_request(format!("the [{op}] action on line {} has no source line", n + 1))
            })?;
            serde_json::from_slice(l).map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "mapper_parsing_exception",
                    format!("failed to parse the source on line {}: {e}", m + 1),
                )
            })
        };
        let action = match op {
            "delete" => match id {
                Some(id) => retries.and(cond).map(|cond| Action::Delete { id, cond }),
                None => Err(ApiError::bad_request("[delete] needs an [_id]")),
            },
            "update" => {
                let body = source();
                match id {
                    Some(id) => {
                        cond.and_then(|cond| Ok(Action::Update { id, body, cond, retries: retries? }))
                    }
                    None => Err(ApiError::bad_request("[update] needs an [_id]")),
                }
            }
            _ => {
                let doc = source().and_then(check_document);
                // Elasticsearch generates an id for create without one.
                let create = op == "create" && id.is_some();
                retries.and(cond).map(|cond| Action::Index { create, id, doc, cond })
            }
        };
        items.push(Item { op, index, action });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_update_merges_objects() {
        let mut base = json!({"a": 1, "o": {"x": 1, "y": 2}, "l": [1]});
        assert!(merge(&mut base, &json!({"o": {"y": 3}, "l": [2], "new": true})));
        assert_eq!(base, json!({"a": 1, "o": {"x": 1, "y": 3}, "l": [2], "new": true}));
        assert!(!merge(&mut base, &json!({"a": 1, "o": {"x": 1}})));
    }

    #[test]
    fn bulk_lines() {
        let body = b"{\"index\":{\"_id\":\"1\"}}\n{\"a\":1}\n{\"delete\":{\"_index\":\"other\",\"_id\":\"2\"}}\n\n{\"create\":{\"_id\":3}}\n{bad json\n{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{\"a\":2}}\n";
        let items = parse_bulk(Some("d"), body, 100).unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!((items[0].op, items[0].index.as_str()), ("index", "d"));
        assert_eq!((items[1].op, items[1].index.as_str()), ("delete", "other"));
        assert!(
            matches!(&items[2].action, Ok(Action::Index { create: true, id: Some(id), doc: Err(_), cond: None }) if id == "3")
        );
        assert!(matches!(&items[3].action, Ok(Action::Update { .. })));
        assert!(parse_bulk(Some("d"), b"{\"nope\":{}}\n", 100).is_err());
        assert!(parse_bulk(None, b"{\"index\":{}}\n{}\n", 100).is_err());
        assert!(parse_bulk(Some("d"), b"{\"index\":{}}\n{}\n{\"index\":{}}\n{}\n", 1).is_err());
    }
}
