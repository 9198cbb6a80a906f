//! Multi-requests: `_mget` (many real-time gets) and `_msearch` (many searches) in one round trip, as
//! Elasticsearch's clients send them (`mget`, `msearch`, Kibana-style dashboards).
//!
//! Both answer item by item, in request order: an item that fails (no index, a document missing, a query
//! that does not parse) gets its own error object and status inside a 200 response, as in Elasticsearch, and
//! never fails the others. Only a request that cannot be read as a whole (not JSON, a malformed `_msearch`
//! header, too many items) is a 400. At most [`Limits::max_bulk_actions`](crate::Limits) items per request,
//! as for `_bulk`.

use crate::error::{ApiError, ApiResult};
use crate::search::{SearchRequest, SourceFilter};
use crate::{Limits, ServerState};
use serde_json::{json, Value};
use std::collections::HashMap;

/// `_mget`: `{"docs": [{"_index", "_id", "_source"}, ...]}`, or `{"ids": [...]}` with the index in the path;
/// each item found (with its `_source`, filtered as asked), not found, or an error (an index that does not
/// exist).
pub fn mget(
    st: &ServerState,
    default_index: Option<&str>,
    body: &Value,
    params: &HashMap<String, String>,
) -> ApiResult<Value> {
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("[_mget] needs a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "docs" | "ids")) {
        return Err(ApiError::parsing(format!("unknown key [{k}] in the [_mget] request")));
    }
    let url_filter = SourceFilter::from_params(params);
    // (index, id, source filter) per item.
    let mut items: Vec<(Option<String>, String, Option<SourceFilter>)> = vec![];
    match (obj.get("docs"), obj.get("ids")) {
        (Some(Value::Array(docs)), None) => {
            for d in docs {
                let d = d.as_object().ok_or_else(|| ApiError::parsing("[_mget] docs must be objects"))?;
                let id = match d.get("_id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => return Err(ApiError::parsing("[_mget] every doc needs an [_id]")),
                };
                let index = match d.get("_index") {
                    Some(Value::String(s)) => Some(s.clone()),
                    None => default_index.map(str::to_string),
                    Some(_) => return Err(ApiError::parsing("[_mget] [_index] must be a string")),
                };
                let filter = d.get("_source").map(SourceFilter::parse).transpose()?;
                items.push((index, id, filter.or_else(|| url_filter.clone())));
            }
        }
        (None, Some(Value::Array(ids))) => {
            let Some(index) = default_index else {
                return Err(ApiError::bad_request(
                    "[_mget] [ids] needs the index in the path (/{index}/_mget)",
                ));
            };
            for id in ids {
                let id = match id {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => return Err(ApiError::parsing("[_mget] ids must be strings")),
                };
                items.push((Some(index.to_string()), id, url_filter.clone()));
            }
        }
        _ => return Err(ApiError::parsing("[_mget] needs an array of [docs] or of [ids]")),
    }
    check_count("_mget", items.len(), &st.limits)?;
    let docs = items
        .into_iter()
        .map(|(index, id, filter)| {
            let Some(index) = index else {
                let e = ApiError::bad_request("[_mget] a doc without [_index] needs the index in the path");
                return json!({"_id": id, "error": e.body()});
            };
            match get_one(st, &index, &id) {
                Ok((index, Some((seq_no, version, src)))) => {
                    let mut v = json!({"_index": index, "_id": id, "_version": version, "_seq_no": seq_no,
                                       "_primary_term": 1, "found": true});
                    if let Some(s) = filter.unwrap_or_default().apply(src) {
                        v["_source"] = s;
                    }
                    v
                }
                Ok((index, None)) => json!({"_index": index, "_id": id, "found": false}),
                Err(e) => json!({"_index": index, "_id": id, "error": e.body()}),
            }
        })
        .collect::<Vec<_>>();
    Ok(json!({ "docs": docs }))
}

/// A real-time get's answer: the index's name, and the live version's sequence number (`_seq_no`),
/// `_version` and stored `_source` as JSON (`None` when no live document has the id).
pub type Fetched = (String, Option<(u64, u64, Value)>);

/// One real-time get.
pub fn get_one(st: &ServerState, index: &str, id: &str) -> ApiResult<Fetched> {
    let index = st.index(index)?;
    let name = index.name().to_string();
    let Some(d) = index.get_versioned(id)? else { return Ok((name, None)) };
    serde_json::from_slice(&d.source).map(|v| (name, Some((d.seq_no, d.version, v)))).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "spirit_exception",
            format!("stored source of [{id}] is not JSON: {e}"),
        )
    })
}

/// `_msearch`: newline-delimited pairs of a header (`{"index": "name"}`, `{}` for the path's index; also
/// `request_cache`) and a search body, each answered as `_search` would answer it, with its `status`.
pub fn msearch(
    st: &ServerState,
    default_index: Option<&str>,
    body: &[u8],
    limits: &Limits,
) -> ApiResult<Value> {
    let t0 = std::time::Instant::now();
    let mut lines = body.split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    // (index, URL-style parameters from the header, body) per search.
    type Search<'b> = (Option<String>, HashMap<String, String>, &'b [u8]);
    let mut searches: Vec<Search> = vec![];
    while let Some(header) = lines.next() {
        let header: Value = serde_json::from_slice(header)
            .map_err(|e| ApiError::parsing(format!("[_msearch] a header line is not valid JSON: {e}")))?;
        let header =
            header.as_object().ok_or_else(|| ApiError::parsing("[_msearch] headers must be objects"))?;
        let mut params = HashMap::new();
        let mut index = default_index.map(str::to_string);
        for (k, v) in header {
            match (k.as_str(), v) {
                ("index", Value::String(s)) => index = Some(s.clone()),
                ("request_cache", Value::Bool(b)) => {
                    params.insert("request_cache".to_string(), b.to_string());
                }
                _ => return Err(ApiError::parsing(format!("[_msearch] header key [{k}] is not supported"))),
            }
        }
        let Some(body) = lines.next() else {
            return Err(ApiError::parsing("[_msearch] a header line has no search body after it"));
        };
        searches.push((index, params, body));
        check_count("_msearch", searches.len(), limits)?;
    }
    let responses = searches
        .into_iter()
        .map(|(index, params, body)| {
            let r = index
                .ok_or_else(|| {
                    ApiError::bad_request("[_msearch] a search without [index] needs it in the path")
                })
                .and_then(|index| {
                    let targets = st.search_targets(&index)?;
                    SearchRequest::parse(body, &params, limits)?.execute_on(&targets, limits)
                });
            match r {
                Ok(mut v) => {
                    v["status"] = json!(200);
                    v
                }
                Err(e) => json!({"error": e.body(), "status": e.status.as_u16()}),
            }
        })
        .collect::<Vec<_>>();
    Ok(json!({"took": t0.elapsed().as_millis() as u64, "responses": responses}))
}

fn check_count(what: &str, n: usize, limits: &Limits) -> ApiResult<()> {
    if n > limits.max_bulk_actions {
        return Err(ApiError::bad_request(format!(
            "[{what}] has more than {} items (the limit)",
            limits.max_bulk_actions
        )));
    }
    Ok(())
}
