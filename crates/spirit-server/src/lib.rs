//! `spirit-server`: spirit behind HTTP, speaking the subset of the Elasticsearch REST API that the official
//! clients use, so stock `elasticsearch-py`/`opensearch-py` code works unchanged (see the README for the
//! list). Every write is visible to the very next request — `_refresh` is accepted and does nothing.
//!
//! Shape of the server (ARCHITECTURE.md beside this crate has more):
//! * axum on a tokio runtime handles connections, parsing and routing only;
//! * searches and gets run on a dedicated [`QueryPool`](pool::QueryPool) of OS threads with a bounded queue
//!   (429 when it is full); writes, which may wait for a crash-safe persist barrier, run on tokio's blocking
//!   threads; neither ever blocks the reactor;
//! * one middleware enforces the optional API key, the request timeout and counts responses;
//! * limits are explicit ([`Limits`]): request body, bulk actions, query clauses and depth, result window.

pub mod aggs;
pub mod aliases;
pub mod analyze;
pub mod contexts;
pub mod documents;
pub mod dsl;
pub mod error;
pub mod field_caps;
pub mod highlight;
pub mod indices;
pub mod metrics;
pub mod multi;
pub mod pit;
pub mod pool;
pub mod reindex;
pub mod scroll;
pub mod search;
pub mod suggest;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State as Ext};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use error::{ApiError, ApiResult};
use parking_lot::{Mutex, MutexGuard};
use serde_json::{json, Value};
use spirit::{Durability, Engine, Index, IndexOptions};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The web page served to browsers at `/`.
const PAGE: &str = include_str!("../web/index.html");

/// Explicit limits: a slow or huge request cannot take the server down.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body (Elasticsearch's `http.max_content_length` is 100 MB).
    pub max_body_bytes: usize,
    /// Actions in one `_bulk` request.
    pub max_bulk_actions: usize,
    /// Leaf clauses in one query (Elasticsearch: `indices.query.bool.max_clause_count`).
    pub max_clauses: usize,
    /// Nesting depth of a query.
    pub max_depth: usize,
    /// `from + size` of a search (Elasticsearch: `index.max_result_window`).
    pub max_result_window: usize,
    /// A request that has not been answered by then gets a 504 (its work may still finish).
    pub request_timeout: Duration,
    /// Searches waiting for a query thread before new ones are refused with 429.
    pub query_queue: usize,
    /// A client must send a request's headers within this time (a slow-loris connection is closed); once
    /// they are in, `request_timeout` bounds the rest.
    pub header_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 100 << 20,
            max_bulk_actions: 100_000,
            max_clauses: 1024,
            max_depth: 32,
            max_result_window: 10_000,
            request_timeout: Duration::from_secs(120),
            query_queue: 1000,
            header_read_timeout: Duration::from_secs(30),
        }
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Durability of indexes created through the API without `index.translog.durability`.
    pub default_durability: Durability,
    /// When set, every request (except the web page itself) must carry `Authorization: ApiKey <key>` (or
    /// `Bearer <key>`).
    pub api_key: Option<String>,
    /// Query pool threads (default: the number of cores).
    pub query_threads: usize,
    pub limits: Limits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            default_durability: Durability::Graceful,
            api_key: None,
            query_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            limits: Limits::default(),
        }
    }
}

/// Shared server state.
pub struct ServerState {
    pub engine: Arc<Engine>,
    pub config: ServerConfig,
    pub limits: Limits,
    pub pool: pool::QueryPool,
    pub metrics: metrics::Metrics,
    /// Striped locks that serialize read-modify-write operations (`_update`, `_create`) per document id.
    id_locks: Vec<Mutex<()>>,
    /// Open scrolls (`?scroll=` searches).
    pub scrolls: scroll::Scrolls,
    /// Open points in time.
    pub pits: pit::Pits,
}

pub type State = ServerState;
type Shared = Arc<ServerState>;

/// An index a request reads, with the filter of the alias it was reached through (if any).
pub struct Target {
    pub index: Arc<Index>,
    /// Query DSL every query of the request is filtered with.
    pub filter: Option<Value>,
}

/// One filter for any of `filters` (a document passes when it passes one).
fn any_of(mut filters: Vec<Value>) -> Value {
    filters.dedup();
    match filters.len() {
        1 => filters.pop().expect("one"),
        _ => json!({"bool": {"should": filters, "minimum_should_match": 1}}),
    }
}

impl ServerState {
    pub fn new(engine: Arc<Engine>, config: ServerConfig) -> Shared {
        Arc::new(ServerState {
            pool: pool::QueryPool::new(config.query_threads.max(1), config.limits.query_queue.max(1)),
            limits: config.limits.clone(),
            engine,
            config,
            metrics: Default::default(),
            id_locks: (0..256).map(|_| Mutex::new(())).collect(),
            scrolls: Default::default(),
            pits: Default::default(),
        })
    }

    pub fn id_lock(&self, index: &str, id: &str) -> MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (index, id).hash(&mut h);
        self.id_locks[h.finish() as usize % self.id_locks.len()].lock()
    }

    /// The index `name` names: an index, or an alias that names exactly one (single-index operations —
    /// gets, writes, mappings — through an alias of several are refused, as in Elasticsearch).
    pub fn index(&self, name: &str) -> ApiResult<Arc<Index>> {
        if let Some(i) = self.engine.index(name) {
            return Ok(i);
        }
        match self.engine.aliases().get(name).map(|ix| ix.into_iter().collect::<Vec<_>>()) {
            Some(ix) if ix.len() == 1 => self.engine.index(&ix[0]).ok_or_else(|| ApiError::index_not_found(name)),
            Some(ix) => Err(ApiError::bad_request(format!(
                "alias [{name}] has more than one index associated with it [{}], can't execute a single index op",
                ix.join(", ")
            ))),
            None => Err(ApiError::index_not_found(name)),
        }
    }

    /// The index writes to `name` go to: an index, or an alias's write index (see [`spirit::aliases`]).
    pub fn write_index(&self, name: &str) -> ApiResult<Arc<Index>> {
        if let Some(i) = self.engine.index(name) {
            return Ok(i);
        }
        let aliases = self.engine.aliases();
        if aliases.get(name).is_none() {
            return Err(ApiError::index_not_found(name));
        }
        match aliases.write_index(name) {
            Some(i) => self.engine.index(i).ok_or_else(|| ApiError::index_not_found(name)),
            None => Err(ApiError::bad_request(format!(
                "no write index is defined for alias [{name}]. The write index may be explicitly disabled using \
                 is_write_index=false or the alias points to multiple indices without one being designated as a \
                 write index"
            ))),
        }
    }

    /// The indices a search target names (Elasticsearch's multi-target syntax): names of indices or aliases
    /// separated by `,`, patterns with `*` (`logs-*`, matching index and alias names; one that matches
    /// nothing is no error, as `allow_no_indices` defaults), `_all` for every index. A plain name that is
    /// neither an index nor an alias is a 404. In name order, each index once.
    pub fn indices(&self, target: &str) -> ApiResult<Vec<Arc<Index>>> {
        Ok(self.search_targets(target)?.into_iter().map(|t| t.index).collect())
    }

    /// [`indices`](Self::indices), each with the filter a search applies to it: an index reached only
    /// through aliases that filter it gets their filters (any of them, as Elasticsearch combines them); one
    /// named directly, or through an alias without a filter there, gets none.
    pub fn search_targets(&self, target: &str) -> ApiResult<Vec<Target>> {
        let all = self.engine.index_names();
        // The aliases (a copy) only when some part is not the name of an index.
        let plain =
            target.split(',').all(|p| !p.contains('*') && (p.is_empty() || all.iter().any(|n| n == p)));
        let aliases = if plain { Default::default() } else { self.engine.aliases() };
        // Index name -> None (unfiltered) or the filters of the aliases it was reached through.
        let mut named: BTreeMap<String, Option<Vec<Value>>> = BTreeMap::new();
        let mut reach = |index: &str, filter: Option<&Value>| {
            let e = named.entry(index.to_string()).or_insert_with(|| Some(vec![]));
            match (e, filter) {
                (Some(fs), Some(f)) => fs.push(f.clone()),
                (e, _) => *e = None,
            }
        };
        for part in target.split(',').filter(|p| !p.is_empty()) {
            if part == "_all" || part.contains('*') {
                let pattern = if part == "_all" { "*" } else { part };
                all.iter().filter(|n| spirit::schema::simple_match(pattern, n)).for_each(|n| reach(n, None));
                if part != "_all" {
                    for (a, ix) in aliases.iter().filter(|(a, _)| spirit::schema::simple_match(pattern, a)) {
                        ix.for_each(|i| reach(i, aliases.filter(a, i)));
                    }
                }
            } else if let (None, Some(ix)) = (self.engine.index(part), aliases.get(part)) {
                ix.iter().for_each(|i| reach(i, aliases.filter(part, i)));
            } else {
                reach(part, None);
            }
        }
        named
            .into_iter()
            .map(|(n, filters)| {
                let index = self.engine.index(&n).ok_or_else(|| ApiError::index_not_found(&n))?;
                Ok(Target { index, filter: filters.map(any_of) })
            })
            .collect()
    }

    /// [`index`](Self::index), with the filter of the alias `name` is, if it filters that index (for the
    /// operations that apply it: `_delete_by_query`).
    pub fn filtered_index(&self, name: &str) -> ApiResult<Target> {
        let index = self.index(name)?;
        let filter = match index.name() == name {
            true => None,
            false => self.engine.aliases().filter(name, index.name()).cloned(),
        };
        Ok(Target { index, filter })
    }

    /// The index, created with the server's default durability when absent (Elasticsearch's
    /// `action.auto_create_index`).
    pub fn index_or_create(&self, name: &str) -> ApiResult<Arc<Index>> {
        if let Some(i) = self.engine.index(name) {
            return Ok(i);
        }
        if self.engine.aliases().get(name).is_some() {
            return self.write_index(name);
        }
        let opts = IndexOptions { durability: Some(self.config.default_durability), ..Default::default() };
        match self.engine.create_index_with(name, None, None, &opts) {
            Ok(i) => Ok(i),
            Err(spirit::Error::AlreadyExists(_)) => self.index(name),
            Err(e) => Err(e.into()),
        }
    }
}

/// The router with every endpoint, the limits and the guard middleware.
pub fn router(state: Shared) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/", get(root))
        .route("/_spirit/stats", get(spirit_stats))
        .route("/metrics", get(prometheus))
        .route("/_bulk", post(bulk_all).put(bulk_all))
        .route("/_cat/indices", get(cat_indices))
        .route("/_cat/aliases", get(cat_aliases))
        .route("/_cat/indices/{index}", get(cat_indices_one))
        .route("/_cluster/health", get(cluster_health))
        .route("/_refresh", get(refresh_all).post(refresh_all))
        .route("/_search", get(search_all).post(search_all))
        .route("/_analyze", get(analyze_global).post(analyze_global))
        .route("/_pit", axum::routing::delete(pit_close))
        .route("/{index}/_pit", post(pit_open))
        .route("/{index}/_search/point_in_time", post(pit_open_opensearch))
        .route("/_search/point_in_time", axum::routing::delete(pit_close_opensearch))
        .route("/_search/point_in_time/_all", get(pit_list_opensearch).delete(pit_close_all_opensearch))
        .route("/{index}/_analyze", get(analyze_index).post(analyze_index))
        .route("/_field_caps", get(field_caps_all).post(field_caps_all))
        .route("/{index}/_field_caps", get(field_caps_index).post(field_caps_index))
        .route("/_search/scroll", get(scroll_next).post(scroll_next).delete(scroll_clear))
        .route("/_search/scroll/{id}", get(scroll_next_id).post(scroll_next_id).delete(scroll_clear_id))
        .route("/_reindex", post(reindex))
        .route("/_aliases", get(get_aliases_all).post(post_aliases))
        .route("/_alias", get(get_aliases_all))
        .route("/_alias/{name}", get(get_alias_named))
        .route("/{index}/_alias", get(get_index_aliases))
        .route(
            "/{index}/_alias/{name}",
            get(get_index_alias).put(put_alias).post(put_alias).delete(delete_alias),
        )
        .route("/{index}/_aliases/{name}", put(put_alias).post(put_alias).delete(delete_alias))
        .route("/_count", get(count_all).post(count_all))
        .route("/_mget", get(mget_all).post(mget_all))
        .route("/_msearch", get(msearch_all).post(msearch_all))
        .route("/{index}", put(create_index).get(get_index).delete(delete_index))
        .route("/{index}/_mapping", get(get_mapping).put(put_mapping).post(put_mapping))
        .route("/{index}/_settings", get(get_settings))
        .route("/{index}/_doc", post(index_auto_id))
        .route("/{index}/_doc/{id}", put(index_doc).post(index_doc).get(get_doc).delete(delete_doc))
        .route("/{index}/_create/{id}", put(create_doc).post(create_doc))
        .route("/{index}/_source/{id}", get(get_source))
        .route("/{index}/_explain/{id}", get(explain_doc).post(explain_doc))
        .route("/{index}/_update/{id}", post(update_doc))
        .route("/{index}/_bulk", post(bulk_index).put(bulk_index))
        .route("/{index}/_search", get(search).post(search))
        .route("/{index}/_count", get(count).post(count))
        .route("/{index}/_mget", get(mget).post(mget))
        .route("/{index}/_msearch", get(msearch).post(msearch))
        .route("/{index}/_refresh", get(refresh).post(refresh))
        .route("/{index}/_forcemerge", post(force_merge))
        .route("/{index}/_delete_by_query", post(delete_by_query))
        .fallback(no_handler)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then stops accepting, lets requests in flight finish and returns.
/// Closing the engine (persisting in graceful mode) is the caller's job.
pub async fn serve(
    state: Shared,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // hyper directly rather than `axum::serve`, which sets no timer and so cannot bound header reads.
    use hyper_util::rt::{TokioIo, TokioTimer};
    let header_timeout = state.config.limits.header_read_timeout;
    let app = router(state);
    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut close = close_rx.clone();
        conns.spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = close.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = close_tx.send(true);
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn accepts_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// Constant-time comparison (the key never leaks through timing).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorized(headers: &HeaderMap, key: &str) -> bool {
    let Some(v) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else { return false };
    let given = v.strip_prefix("ApiKey ").or_else(|| v.strip_prefix("Bearer ")).unwrap_or("");
    same(given.trim().as_bytes(), key.as_bytes())
}

/// API key, request timeout, response counting, and the product header Elasticsearch clients look for.
async fn guard(Ext(st): Ext<Shared>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.config.api_key {
        let page = req.method() == Method::GET && req.uri().path() == "/" && accepts_html(req.headers());
        if !page && !authorized(req.headers(), key) {
            st.metrics.response(401);
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "security_exception",
                "missing or wrong API key: send the header 'Authorization: ApiKey <key>'",
            )
            .into_response();
        }
    }
    let mut resp = match tokio::time::timeout(st.limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_exception",
            format!("the request took longer than {:?}", st.limits.request_timeout),
        )
        .into_response(),
    };
    resp.headers_mut().insert("x-elastic-product", HeaderValue::from_static("Elasticsearch"));
    st.metrics.response(resp.status().as_u16());
    resp
}

type Params = Query<HashMap<String, String>>;
type Body = Result<Bytes, BytesRejection>;

/// The request body, or the right error (413 for a body over the limit).
fn body(b: Body) -> ApiResult<Bytes> {
    b.map_err(|e| {
        let status = e.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "content_too_long_exception",
                "request body is larger than the server's limit",
            )
        } else {
            ApiError::new(status, "parsing_exception", e.body_text())
        }
    })
}

fn json_body(b: Body) -> ApiResult<Value> {
    let b = body(b)?;
    serde_json::from_slice(&b).map_err(|e| ApiError::parsing(format!("request body is not valid JSON: {e}")))
}

/// Index names in paths: `_`-prefixed ones are endpoints this server does not have.
fn check_name(index: &str, method: &Method, uri: &str) -> ApiResult<()> {
    if index.starts_with('_') {
        return Err(no_handler_error(method, uri));
    }
    Ok(())
}

fn no_handler_error(method: &Method, uri: &str) -> ApiError {
    ApiError::bad_request(format!("no handler found for uri [{uri}] and method [{method}]"))
}

async fn no_handler(method: Method, uri: axum::http::Uri) -> ApiError {
    no_handler_error(&method, uri.path())
}

async fn method_not_allowed(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "illegal_argument_exception",
        format!("Incorrect HTTP method for uri [{}] and method [{method}]", uri.path()),
    )
}

async fn root(headers: HeaderMap) -> Response {
    if accepts_html(&headers) {
        return Html(PAGE).into_response();
    }
    Json(json!({
        "name": "spirit",
        "cluster_name": "spirit",
        "cluster_uuid": "spirit",
        "version": {
            "number": "8.11.0",
            "build_flavor": "default",
            "build_type": "spirit",
            "build_hash": "spirit",
            "lucene_version": "none",
            "minimum_wire_compatibility_version": "7.17.0",
            "minimum_index_compatibility_version": "7.0.0",
            "spirit_version": env!("CARGO_PKG_VERSION"),
        },
        "tagline": "You Know, for Search"
    }))
    .into_response()
}

async fn spirit_stats(Ext(st): Ext<Shared>) -> Json<Value> {
    Json(st.metrics.stats_json(&st.engine))
}

async fn prometheus(Ext(st): Ext<Shared>) -> Response {
    let text = st.metrics.prometheus(&st.engine, st.pool.queued(), st.pool.threads());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn cluster_health(Ext(st): Ext<Shared>) -> Json<Value> {
    let n = st.engine.index_names().len();
    Json(json!({
        "cluster_name": "spirit", "status": "green", "timed_out": false, "number_of_nodes": 1,
        "number_of_data_nodes": 1, "active_primary_shards": n, "active_shards": n, "relocating_shards": 0,
        "initializing_shards": 0, "unassigned_shards": 0, "active_shards_percent_as_number": 100.0
    }))
}

fn shards_ok() -> Value {
    json!({"_shards": {"total": 1, "successful": 1, "failed": 0}})
}

async fn refresh_all() -> Json<Value> {
    Json(shards_ok())
}

async fn refresh(Ext(st): Ext<Shared>, Path(index): Path<String>) -> ApiResult<Json<Value>> {
    st.index(&index)?;
    Ok(Json(shards_ok()))
}

/// `POST /{index}/_forcemerge?max_num_segments=N` (default 1): seals, merges and compacts every shard
/// down to at most N segments, purging deleted documents, answering when done (Elasticsearch's
/// `wait_for_completion=true`). `only_expunge_deletes=true` only rewrites the segments with deleted documents
/// not yet purged.
async fn force_merge(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
) -> ApiResult<Json<Value>> {
    let i = st.index(&index)?;
    for k in params.keys() {
        if !matches!(
            k.as_str(),
            "max_num_segments" | "only_expunge_deletes" | "flush" | "wait_for_completion" | "pretty"
        ) {
            return Err(ApiError::bad_request(format!(
                "request [/{index}/_forcemerge] contains unrecognized parameter: [{k}]"
            )));
        }
    }
    if params.get("wait_for_completion").is_some_and(|v| v == "false") {
        return Err(ApiError::unsupported("wait_for_completion=false (force merge answers when done)"));
    }
    let expunge = match params.get("only_expunge_deletes").map(String::as_str) {
        None | Some("false") => false,
        Some("true" | "") => true,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "Failed to parse value [{v}] as only [true] or [false] are allowed."
            )))
        }
    };
    let max = match params.get("max_num_segments") {
        Some(_) if expunge => {
            return Err(ApiError::bad_request(
                "cannot set only_expunge_deletes and max_num_segments at the same time",
            ))
        }
        // Every segment stays; those with unpurged deletes are rewritten (`Index::force_merge`).
        None if expunge => usize::MAX,
        None => 1,
        Some(v) => v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
            ApiError::bad_request(format!("max_num_segments must be a positive integer, got [{v}]"))
        })?,
    };
    let shards = i.shards().len();
    pool::blocking(move || i.force_merge(max).map_err(ApiError::from)).await?;
    Ok(Json(json!({"_shards": {"total": shards, "successful": shards, "failed": 0}})))
}

/// `/_search`: every index.
async fn search_all(st: Ext<Shared>, params: Params, b: Body) -> ApiResult<Json<Value>> {
    run_search(st, None, params, b).await
}

/// `/_count`: every index.
async fn count_all(st: Ext<Shared>, params: Params, b: Body) -> ApiResult<Json<Value>> {
    count(st, Path("_all".into()), params, b).await
}

fn cat_rows(st: &ServerState, pattern: Option<&str>) -> Vec<Value> {
    st.engine
        .index_names()
        .into_iter()
        .filter(|n| pattern.is_none_or(|p| p.split(',').any(|p| spirit::schema::simple_match(p, n))))
        .filter_map(|n| st.engine.index(&n).map(|i| (n, i.shards().len(), i.stats().shard)))
        .map(|(n, pri, s)| {
            let size = indices::cat_bytes(s.persistent.used);
            json!({
                "health": "green", "status": "open", "index": n, "uuid": n, "pri": pri.to_string(), "rep": "0",
                "docs.count": s.docs.to_string(), "docs.deleted": (s.deleted - s.purged).to_string(),
                "store.size": size, "pri.store.size": size, "dataset.size": size,
            })
        })
        .collect()
}

/// The columns `_cat/indices` prints as text.
const CAT_INDICES: [&str; 10] = [
    "health",
    "status",
    "index",
    "uuid",
    "pri",
    "rep",
    "docs.count",
    "docs.deleted",
    "store.size",
    "pri.store.size",
];

/// The columns `_cat/aliases` prints (every row's value, as text too).
const CAT_ALIASES: [&str; 6] =
    ["alias", "index", "filter", "routing.index", "routing.search", "is_write_index"];

/// `_cat/aliases`: one row per (alias, index), in alias then index order.
async fn cat_aliases(Ext(st): Ext<Shared>, Query(params): Params) -> Response {
    let aliases = st.engine.aliases();
    let mut pairs: Vec<(String, String, Option<bool>)> = st
        .engine
        .index_names()
        .into_iter()
        .flat_map(|i| aliases.of_index(&i).into_iter().map(move |(a, w)| (a, i.clone(), w)))
        .collect();
    pairs.sort();
    let rows = pairs
        .into_iter()
        .map(|(alias, index, w)| {
            let filter = if aliases.filter(&alias, &index).is_some() { "*" } else { "-" };
            json!({"alias": alias, "index": index, "filter": filter, "routing.index": "-",
                   "routing.search": "-", "is_write_index": w.map_or("-".to_string(), |w| w.to_string())})
        })
        .collect();
    cat_response(rows, &params, &CAT_ALIASES)
}

fn cat_response(rows: Vec<Value>, params: &HashMap<String, String>, cols: &[&str]) -> Response {
    if params.get("format").map(String::as_str) == Some("json") {
        return Json(Value::Array(rows)).into_response();
    }
    let mut table: Vec<Vec<String>> = vec![];
    if params.contains_key("v") {
        table.push(cols.iter().map(|c| c.to_string()).collect());
    }
    for r in &rows {
        table.push(cols.iter().map(|c| r[c].as_str().unwrap_or("").to_string()).collect());
    }
    let widths: Vec<usize> =
        (0..cols.len()).map(|i| table.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in table {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join(" ").trim_end());
        out.push('\n');
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], out).into_response()
}

async fn cat_indices(Ext(st): Ext<Shared>, Query(params): Params) -> Response {
    cat_response(cat_rows(&st, None), &params, &CAT_INDICES)
}

async fn cat_indices_one(Ext(st): Ext<Shared>, Path(index): Path<String>, Query(params): Params) -> Response {
    let rows = cat_rows(&st, Some(&index));
    if rows.is_empty() && !index.contains('*') {
        return ApiError::index_not_found(&index).into_response();
    }
    cat_response(rows, &params, &CAT_INDICES)
}

async fn create_index(
    Ext(st): Ext<Shared>,
    method: Method,
    Path(index): Path<String>,
    b: Body,
) -> ApiResult<Json<Value>> {
    check_name(&index, &method, &format!("/{index}"))?;
    let (settings, mut mappings, alias_names) = indices::parse_create(&body(b)?)?;
    let create = indices::parse_settings(settings.as_ref(), st.config.default_durability)?;
    if let Some(m) = mappings.as_mut() {
        indices::resolve_mappings(m, &create.analyzers);
    }
    let index_settings = create.index_settings();
    let mut opts = create.options;
    if opts.shards.is_none() {
        opts.shards = st.engine.config().default_shards;
    }
    if st.engine.index(&index).is_some() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "resource_already_exists_exception",
            format!("index [{index}] already exists"),
        )
        .with("index", json!(index)));
    }
    let st2 = st.clone();
    let name = index.clone();
    pool::blocking(move || {
        st2.engine.create_index_with(&name, mappings.as_ref(), Some(index_settings), &opts).map_err(|e| {
            match e {
                spirit::Error::AlreadyExists(r) => {
                    ApiError::new(StatusCode::BAD_REQUEST, "resource_already_exists_exception", r)
                        .with("index", json!(name))
                }
                spirit::Error::InvalidArgument(r) if r.starts_with("invalid index name") => {
                    ApiError::new(StatusCode::BAD_REQUEST, "invalid_index_name_exception", r)
                        .with("index", json!(name))
                }
                e => e.into(),
            }
        })?;
        // The body's aliases, once the index exists; if they cannot be added (a name taken by an index, an
        // invalid one), the index is not left behind either.
        let actions: Vec<spirit::AliasAction> = alias_names
            .into_iter()
            .map(|(alias, o)| spirit::AliasAction::Add {
                index: name.clone(),
                alias,
                is_write_index: o.is_write_index,
                filter: o.filter,
            })
            .collect();
        if let Err(e) = aliases::update(&st2, &actions) {
            let _ = st2.engine.delete_index(&name);
            return Err(e);
        }
        Ok(())
    })
    .await?;
    Ok(Json(json!({"acknowledged": true, "shards_acknowledged": true, "index": index})))
}

async fn delete_index(Ext(st): Ext<Shared>, Path(index): Path<String>) -> ApiResult<Json<Value>> {
    if st.engine.index(&index).is_none() && st.engine.aliases().get(&index).is_some() {
        return Err(ApiError::bad_request(format!(
            "The provided expression [{index}] matches an alias, specify the corresponding concrete indices instead."
        )));
    }
    st.index(&index)?;
    let st2 = st.clone();
    pool::blocking(move || {
        st2.engine.delete_index(&index).map_err(|e| match e {
            spirit::Error::NotFound(_) => ApiError::index_not_found(&index),
            e => e.into(),
        })
    })
    .await?;
    Ok(Json(json!({"acknowledged": true})))
}

fn index_settings(st: &ServerState, index: &str) -> ApiResult<Value> {
    let opts = st.engine.index_options(index)?;
    Ok(indices::settings_json(index, &opts, &st.engine.config().shard, st.index(index)?.settings()))
}

async fn get_index(
    Ext(st): Ext<Shared>,
    method: Method,
    Path(index): Path<String>,
) -> ApiResult<Json<Value>> {
    check_name(&index, &method, &format!("/{index}"))?;
    let i = st.index(&index)?;
    let name = i.name().to_string();
    let aliases = aliases::of_index_json(&st.engine.aliases(), &name);
    Ok(Json(json!({ name.clone(): {
        "aliases": aliases, "mappings": i.schema().to_mappings(), "settings": index_settings(&st, &name)?
    }})))
}

async fn get_settings(Ext(st): Ext<Shared>, Path(index): Path<String>) -> ApiResult<Json<Value>> {
    let name = st.index(&index)?.name().to_string();
    Ok(Json(json!({ name.clone(): {"settings": index_settings(&st, &name)?} })))
}

async fn get_mapping(Ext(st): Ext<Shared>, Path(index): Path<String>) -> ApiResult<Json<Value>> {
    let i = st.index(&index)?;
    Ok(Json(json!({ i.name(): {"mappings": i.schema().to_mappings()} })))
}

async fn post_aliases(Ext(st): Ext<Shared>, b: Body) -> ApiResult<Json<Value>> {
    let v = json_body(b)?;
    let actions = aliases::parse_actions(&st, &v)?;
    let st2 = st.clone();
    pool::blocking(move || aliases::update(&st2, &actions)).await?;
    Ok(Json(json!({"acknowledged": true, "errors": false})))
}

async fn put_alias(
    Ext(st): Ext<Shared>,
    Path((index, name)): Path<(String, String)>,
    b: Body,
) -> ApiResult<Json<Value>> {
    let b = body(b)?;
    let mut add = json!({"index": index, "aliases": name.split(',').collect::<Vec<_>>()});
    if !b.iter().all(u8::is_ascii_whitespace) {
        let v: Value = serde_json::from_slice(&b)
            .map_err(|e| ApiError::parsing(format!("request body is not valid JSON: {e}")))?;
        let o = v.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
        let o = aliases::alias_options(&name, o)?;
        if let Some(w) = o.is_write_index {
            add["is_write_index"] = json!(w);
        }
        if let Some(f) = o.filter {
            add["filter"] = f;
        }
    }
    let v = json!({"actions": [{"add": add}]});
    let actions = aliases::parse_actions(&st, &v)?;
    let st2 = st.clone();
    pool::blocking(move || aliases::update(&st2, &actions)).await?;
    Ok(Json(json!({"acknowledged": true})))
}

async fn delete_alias(
    Ext(st): Ext<Shared>,
    Path((index, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = json!({"actions": [{"remove": {
        "index": index, "aliases": name.split(',').collect::<Vec<_>>(), "must_exist": true
    }}]});
    let actions = aliases::parse_actions(&st, &v)?;
    let st2 = st.clone();
    pool::blocking(move || aliases::update(&st2, &actions)).await?;
    Ok(Json(json!({"acknowledged": true})))
}

async fn get_aliases_all(Ext(st): Ext<Shared>) -> ApiResult<Json<Value>> {
    aliases::get(&st, None, None).map(Json)
}

async fn get_alias_named(Ext(st): Ext<Shared>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    aliases::get(&st, None, Some(&name)).map(Json)
}

async fn get_index_aliases(Ext(st): Ext<Shared>, Path(index): Path<String>) -> ApiResult<Json<Value>> {
    aliases::get(&st, Some(&index), None).map(Json)
}

async fn get_index_alias(
    Ext(st): Ext<Shared>,
    Path((index, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    aliases::get(&st, Some(&index), Some(&name)).map(Json)
}

async fn put_mapping(Ext(st): Ext<Shared>, Path(index): Path<String>, b: Body) -> ApiResult<Json<Value>> {
    let i = st.index(&index)?;
    let mut m = json_body(b)?;
    // The analyzers the index defined at creation are known by name in its later mappings too.
    indices::resolve_mappings(&mut m, &indices::index_analyzers(i.settings()));
    pool::blocking(move || Ok(i.put_mappings(&m)?)).await?;
    Ok(Json(json!({"acknowledged": true})))
}

fn write_response((status, v): (StatusCode, Value)) -> Response {
    (status, Json(v)).into_response()
}

async fn do_index(
    st: Shared,
    index: String,
    id: Option<String>,
    params: HashMap<String, String>,
    b: Body,
    create: bool,
) -> ApiResult<Response> {
    check_name(&index, &Method::PUT, &format!("/{index}/_doc"))?;
    let cond = documents::WriteCondition::read(|k| params.get(k).cloned())?;
    let create = create || params.get("op_type").map(String::as_str) == Some("create");
    let doc = documents::parse_document(&body(b)?)?;
    st.metrics.write_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let i = st.index_or_create(&index)?;
    let st2 = st.clone();
    pool::blocking(move || documents::index_doc(&st2, &i, id, doc, create, cond)).await.map(write_response)
}

async fn index_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    do_index(st, index, Some(id), params, b, false).await
}

async fn create_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    do_index(st, index, Some(id), params, b, true).await
}

async fn index_auto_id(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    do_index(st, index, None, params, b, false).await
}

/// Real-time get: the stored `_source` and `_seq_no`, from any lifecycle stage, right after the write
/// returned, with the name of the index that holds it (a path may name an alias).
async fn fetch(st: &Shared, index: &str, id: &str) -> ApiResult<multi::Fetched> {
    let (st2, index, id) = (st.clone(), index.to_string(), id.to_string());
    st.pool.run(move || multi::get_one(&st2, &index, &id)).await
}

/// `_mget`, with the default index from the path if any ([`multi::mget`]).
async fn run_mget(
    st: Shared,
    index: Option<String>,
    params: HashMap<String, String>,
    b: Body,
) -> ApiResult<Json<Value>> {
    let v = json_body(b)?;
    let st2 = st.clone();
    st.pool.run(move || multi::mget(&st2, index.as_deref(), &v, &params)).await.map(Json)
}

async fn mget_all(Ext(st): Ext<Shared>, Query(params): Params, b: Body) -> ApiResult<Json<Value>> {
    run_mget(st, None, params, b).await
}

async fn mget(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    run_mget(st, Some(index), params, b).await
}

/// `_msearch`, with the default index from the path if any ([`multi::msearch`]).
async fn run_msearch(st: Shared, index: Option<String>, b: Body) -> ApiResult<Json<Value>> {
    let t0 = Instant::now();
    let bytes = body(b)?;
    let st2 = st.clone();
    let r = st.pool.run(move || multi::msearch(&st2, index.as_deref(), &bytes, &st2.limits)).await;
    st.metrics.query(t0.elapsed(), r.is_ok());
    r.map(Json)
}

async fn msearch_all(Ext(st): Ext<Shared>, b: Body) -> ApiResult<Json<Value>> {
    run_msearch(st, None, b).await
}

async fn msearch(Ext(st): Ext<Shared>, Path(index): Path<String>, b: Body) -> ApiResult<Json<Value>> {
    run_msearch(st, Some(index), b).await
}

async fn get_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
) -> ApiResult<Response> {
    let (index, source) = fetch(&st, &index, &id).await?;
    Ok(match source {
        Some((seq_no, version, src)) => {
            let mut v = json!({"_index": index, "_id": id, "_version": version, "_seq_no": seq_no, "_primary_term": 1, "found": true});
            if let Some(s) = search::SourceFilter::from_params(&params).unwrap_or_default().apply(src) {
                v["_source"] = s;
            }
            Json(v).into_response()
        }
        None => {
            (StatusCode::NOT_FOUND, Json(json!({"_index": index, "_id": id, "found": false}))).into_response()
        }
    })
}

async fn get_source(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    fetch(&st, &index, &id).await?.1.map(|(_, _, src)| Json(src)).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "resource_not_found_exception",
            format!("Document not found [{index}]/[{id}]"),
        )
    })
}

/// `/{index}/_explain/{id}`: how the document's score under the body's `query` (or `?q=`) comes about.
async fn explain_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    if let Some(k) = params.keys().find(|k| !matches!(k.as_str(), "q" | "df")) {
        return Err(ApiError::bad_request(format!(
            "request [_explain] contains unrecognized parameter: [{k}]"
        )));
    }
    let body = search::json_or_empty(&body(b)?)?;
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "query") {
        return Err(ApiError::parsing(format!("request does not support [{k}]")));
    }
    let query = search::request_query(obj.get("query"), &params)
        .ok_or_else(|| ApiError::bad_request("query is missing"))?;
    // One index, and through an alias its filter (a document outside it does not match).
    let i = st.index(&index)?;
    let filter =
        st.search_targets(&index)?.into_iter().find(|t| t.index.name() == i.name()).and_then(|t| t.filter);
    let limits = st.limits.clone();
    let (name, id2) = (i.name().to_string(), id.clone());
    let (found, e) = st
        .pool
        .run(move || {
            let schema = i.schema();
            let mut tr =
                dsl::Translator::new(&schema, limits.max_clauses, limits.max_depth).on_index(i.settings());
            let q = tr.query(&query)?;
            let q = search::filtered(q, filter.as_ref(), &mut tr)?;
            Ok(i.explain(&q, &id2)?)
        })
        .await?;
    let mut out = json!({"_index": name, "_id": id, "matched": e.is_some()});
    if !found {
        return Ok((StatusCode::NOT_FOUND, Json(out)).into_response());
    }
    out["explanation"] = match e {
        Some(e) => json!(e),
        None => json!({"value": 0.0, "description": "the document does not match the query", "details": []}),
    };
    Ok(Json(out).into_response())
}

async fn delete_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
) -> ApiResult<Response> {
    let cond = documents::WriteCondition::read(|k| params.get(k).cloned())?;
    let i = st.write_index(&index)?;
    st.metrics.write_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    pool::blocking(move || documents::delete_doc(&i, &id, cond)).await.map(write_response)
}

async fn reindex(Ext(st): Ext<Shared>, Query(params): Params, b: Body) -> ApiResult<Response> {
    let b = body(b)?;
    let req = search::json_or_empty(&b)?;
    st.metrics.write_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let st2 = st.clone();
    let (status, v) = pool::blocking(move || reindex::reindex(&st2, &req, &params)).await?;
    Ok((status, Json(v)).into_response())
}

async fn delete_by_query(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    let t = st.filtered_index(&index)?;
    let b = body(b)?;
    let req = search::json_or_empty(&b)?;
    st.metrics.write_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let limits = st.limits.clone();
    let (status, v) = pool::blocking(move || documents::delete_by_query(&t, &req, &params, &limits)).await?;
    Ok((status, Json(v)).into_response())
}

async fn update_doc(
    Ext(st): Ext<Shared>,
    Path((index, id)): Path<(String, String)>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Response> {
    let cond = documents::WriteCondition::read(|k| params.get(k).cloned())?;
    let retries = match params.get("retry_on_conflict") {
        None => 0,
        Some(v) => v.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!("[retry_on_conflict] must be a non-negative integer, got [{v}]"))
        })?,
    };
    let req = json_body(b)?;
    st.metrics.write_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let i = st.index_or_create(&index)?;
    let st2 = st.clone();
    pool::blocking(move || documents::update_doc(&st2, &i, &id, &req, cond, retries))
        .await
        .map(write_response)
}

async fn run_bulk(st: Shared, index: Option<String>, b: Body) -> ApiResult<Json<Value>> {
    let b = body(b)?;
    st.metrics.bulk_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let st2 = st.clone();
    pool::blocking(move || documents::bulk(&st2, index.as_deref(), &b)).await.map(Json)
}

async fn bulk_all(Ext(st): Ext<Shared>, b: Body) -> ApiResult<Json<Value>> {
    run_bulk(st, None, b).await
}

async fn bulk_index(Ext(st): Ext<Shared>, Path(index): Path<String>, b: Body) -> ApiResult<Json<Value>> {
    check_name(&index, &Method::POST, &format!("/{index}/_bulk"))?;
    run_bulk(st, Some(index), b).await
}

async fn search(
    st: Ext<Shared>,
    Path(index): Path<String>,
    params: Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    run_search(st, Some(index), params, b).await
}

/// A search of the indices `index` names (`None`: `/_search`, every index — or a point in time's).
async fn run_search(
    Ext(st): Ext<Shared>,
    index: Option<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    let t0 = Instant::now();
    let r = async {
        let req = search::SearchRequest::parse(&body(b)?, &params, &st.limits)?;
        let limits = st.limits.clone();
        if let Some(pit) = req.pit.clone() {
            if index.is_some() {
                return Err(ApiError::bad_request(
                    "[indices] cannot be used with point in time. Do not specify any index with point in time.",
                ));
            }
            let st2 = st.clone();
            return st.pool.run(move || st2.pits.search(&req, &pit, &limits)).await;
        }
        let targets = st.search_targets(index.as_deref().unwrap_or("_all"))?;
        if req.scroll.is_some() {
            let st2 = st.clone();
            return st.pool.run(move || st2.scrolls.open(&req, &targets, &limits)).await;
        }
        st.pool.run(move || req.execute_on(&targets, &limits)).await
    }
    .await;
    st.metrics.query(t0.elapsed(), r.is_ok());
    r.map(Json)
}

/// `/_analyze`: the built-in analyzers.
async fn analyze_global(st: Ext<Shared>, b: Body) -> ApiResult<Json<Value>> {
    run_analyze(st, None, b).await
}

/// `/{index}/_analyze`: also a field's analyzer and the index's default.
async fn analyze_index(st: Ext<Shared>, Path(index): Path<String>, b: Body) -> ApiResult<Json<Value>> {
    run_analyze(st, Some(index), b).await
}

async fn run_analyze(Ext(st): Ext<Shared>, index: Option<String>, b: Body) -> ApiResult<Json<Value>> {
    let index = index.map(|i| st.index(&i)).transpose()?;
    let body = search::json_or_empty(&body(b)?)?;
    st.pool.run(move || analyze::analyze(index.as_deref(), &body)).await.map(Json)
}

/// `/_field_caps`: every index's fields.
async fn field_caps_all(st: Ext<Shared>, params: Params, b: Body) -> ApiResult<Json<Value>> {
    run_field_caps(st, "_all", params, b).await
}

/// `/{index}/_field_caps`: the fields of the indices `index` names.
async fn field_caps_index(
    st: Ext<Shared>,
    Path(index): Path<String>,
    params: Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    run_field_caps(st, &index, params, b).await
}

async fn run_field_caps(
    Ext(st): Ext<Shared>,
    target: &str,
    Query(params): Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    let body = body(b)?;
    let body =
        if body.iter().all(u8::is_ascii_whitespace) { Value::Null } else { search::json_or_empty(&body)? };
    let fields = field_caps::requested(params.get("fields"), &body)?;
    for k in params.keys() {
        match k.as_str() {
            "fields" | "include_unmapped" | "allow_no_indices" | "ignore_unavailable"
            | "expand_wildcards" => {}
            "types" | "filters" | "include_empty_fields" => {
                return Err(ApiError::unsupported(format!("the _field_caps parameter [{k}]")))
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "request [_field_caps] contains unrecognized parameter: [{other}]"
                )))
            }
        }
    }
    let flag = |name: &str, default: bool| -> ApiResult<bool> {
        match params.get(name).map(String::as_str) {
            None => Ok(default),
            Some("true") | Some("") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(ApiError::bad_request(format!(
                "Failed to parse value [{other}] for [{name}]: only [true] or [false] are allowed."
            ))),
        }
    };
    let include_unmapped = flag("include_unmapped", false)?;
    let (allow_none, ignore_missing) = (flag("allow_no_indices", true)?, flag("ignore_unavailable", false)?);
    let indices = if ignore_missing {
        // Each part alone, a missing index left out.
        let mut all: Vec<Arc<Index>> = vec![];
        for part in target.split(',').filter(|p| !p.is_empty()) {
            match st.indices(part) {
                Ok(found) => {
                    for i in found {
                        if !all.iter().any(|x| x.name() == i.name()) {
                            all.push(i);
                        }
                    }
                }
                Err(e) if e.status == StatusCode::NOT_FOUND => {}
                Err(e) => return Err(e),
            }
        }
        all
    } else {
        st.indices(target)?
    };
    if indices.is_empty() && !allow_none {
        return Err(ApiError::index_not_found(target));
    }
    st.pool.run(move || Ok(field_caps::field_caps(&indices, &fields, include_unmapped))).await.map(Json)
}

/// Opens a point in time over the indices `index` names (`keep_alive` required).
fn open_pit(st: &ServerState, index: &str, params: &HashMap<String, String>) -> ApiResult<(String, usize)> {
    let keep = params.get("keep_alive").ok_or_else(|| {
        ApiError::bad_request("[keep_alive] is missing: a point in time needs one (such as 1m)")
    })?;
    let keep = pit::parse_keep_alive(keep)?;
    let targets = st.search_targets(index)?;
    st.pits.open(&targets, keep)
}

fn shards_json(n: usize) -> Value {
    json!({"total": n, "successful": n, "skipped": 0, "failed": 0})
}

/// `POST /{index}/_pit?keep_alive=1m` (Elasticsearch).
async fn pit_open(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
) -> ApiResult<Json<Value>> {
    let (id, shards) = open_pit(&st, &index, &params)?;
    Ok(Json(json!({"id": id, "_shards": shards_json(shards)})))
}

/// `POST /{index}/_search/point_in_time?keep_alive=1m` (OpenSearch).
async fn pit_open_opensearch(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
) -> ApiResult<Json<Value>> {
    let (id, shards) = open_pit(&st, &index, &params)?;
    let created = st.pits.list().into_iter().find(|p| p.0 == id).map_or(0, |p| p.1);
    Ok(Json(json!({"pit_id": id, "_shards": shards_json(shards), "creation_time": created})))
}

/// `DELETE /_pit` with `{"id": ..}` (Elasticsearch): a 404 when it was not open.
async fn pit_close(Ext(st): Ext<Shared>, b: Body) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = search::json_or_empty(&body(b)?)?;
    let id = body.get("id").and_then(Value::as_str).ok_or_else(|| ApiError::parsing("[id] is missing"))?;
    let freed = st.pits.close(Some(&[id.to_string()])).len();
    let status = if freed == 0 { StatusCode::NOT_FOUND } else { StatusCode::OK };
    Ok((status, Json(json!({"succeeded": true, "num_freed": freed}))))
}

/// `DELETE /_search/point_in_time` with `{"pit_id": [..]}` (OpenSearch).
async fn pit_close_opensearch(Ext(st): Ext<Shared>, b: Body) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = search::json_or_empty(&body(b)?)?;
    let ids: Vec<String> = match body.get("pit_id") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => return Err(ApiError::parsing("[pit_id] must be a string or an array of strings")),
    };
    // Always a 200, each id with whether it was open, as OpenSearch answers.
    let freed = st.pits.close(Some(&ids));
    let pits: Vec<Value> =
        ids.iter().map(|id| json!({"pit_id": id, "successful": freed.contains(id)})).collect();
    Ok((StatusCode::OK, Json(json!({"pits": pits}))))
}

/// `DELETE /_search/point_in_time/_all` (OpenSearch).
async fn pit_close_all_opensearch(Ext(st): Ext<Shared>) -> Json<Value> {
    let pits: Vec<Value> =
        st.pits.close(None).into_iter().map(|id| json!({"pit_id": id, "successful": true})).collect();
    Json(json!({"pits": pits}))
}

/// `GET /_search/point_in_time/_all` (OpenSearch).
async fn pit_list_opensearch(Ext(st): Ext<Shared>) -> Json<Value> {
    let pits: Vec<Value> = st
        .pits
        .list()
        .into_iter()
        .map(|(id, created, keep)| json!({"pit_id": id, "creation_time": created, "keep_alive": keep.as_millis() as u64}))
        .collect();
    Json(json!({"pits": pits}))
}

/// `/_search/scroll`: the next page of a scroll, its id and keep-alive (`scroll`) in the body or the URL.
async fn scroll_next(st: Ext<Shared>, params: Params, b: Body) -> ApiResult<Json<Value>> {
    scroll_page(st, None, params, b).await
}

/// `/_search/scroll/{id}` (the older form).
async fn scroll_next_id(
    st: Ext<Shared>,
    Path(id): Path<String>,
    params: Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    scroll_page(st, Some(id), params, b).await
}

async fn scroll_page(
    Ext(st): Ext<Shared>,
    path_id: Option<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    let t0 = Instant::now();
    let r = async {
        let body = search::json_or_empty(&body(b)?)?;
        let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
        if let Some(k) = obj.keys().find(|k| !["scroll", "scroll_id"].contains(&k.as_str())) {
            return Err(ApiError::parsing(format!("unknown key [{k}] in the scroll request")));
        }
        let text = |key: &str| -> ApiResult<Option<String>> {
            match (obj.get(key), params.get(key)) {
                (Some(Value::String(s)), _) => Ok(Some(s.clone())),
                (Some(_), _) => Err(ApiError::parsing(format!("[{key}] must be a string"))),
                (None, p) => Ok(p.cloned()),
            }
        };
        let id = match (path_id, text("scroll_id")?) {
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => return Err(ApiError::bad_request("request does not contain a scroll_id")),
        };
        let keep = text("scroll")?.map(|s| scroll::keep_alive(&s)).transpose()?;
        let limits = st.limits.clone();
        let st2 = st.clone();
        st.pool.run(move || st2.scrolls.next(&id, keep, &limits)).await
    }
    .await;
    st.metrics.query(t0.elapsed(), r.is_ok());
    r.map(Json)
}

/// `DELETE /_search/scroll`: frees scrolls (`scroll_id` a string or a list in the body, or a comma-separated
/// list in the URL; `_all` every one). A 404 when none of them was open, as in Elasticsearch.
async fn scroll_clear(
    Ext(st): Ext<Shared>,
    Query(params): Params,
    b: Body,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body = search::json_or_empty(&body(b)?)?;
    let ids: Vec<String> = match body.get("scroll_id") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::parsing("[scroll_id] must hold strings"))
            })
            .collect::<ApiResult<_>>()?,
        Some(_) => return Err(ApiError::parsing("[scroll_id] must be a string or an array of strings")),
        None => match params.get("scroll_id") {
            Some(p) => p.split(',').map(str::to_string).collect(),
            None => return Err(ApiError::bad_request("request does not contain a scroll_id")),
        },
    };
    Ok(clear_scrolls(&st, &ids))
}

/// `DELETE /_search/scroll/{ids}` (comma-separated, or `_all`).
async fn scroll_clear_id(Ext(st): Ext<Shared>, Path(ids): Path<String>) -> (StatusCode, Json<Value>) {
    clear_scrolls(&st, &ids.split(',').map(str::to_string).collect::<Vec<_>>())
}

fn clear_scrolls(st: &ServerState, ids: &[String]) -> (StatusCode, Json<Value>) {
    let freed =
        if ids.iter().any(|i| i == "_all") { st.scrolls.clear(None) } else { st.scrolls.clear(Some(ids)) };
    let status = if freed == 0 { StatusCode::NOT_FOUND } else { StatusCode::OK };
    (status, Json(json!({"succeeded": true, "num_freed": freed})))
}

async fn count(
    Ext(st): Ext<Shared>,
    Path(index): Path<String>,
    Query(params): Params,
    b: Body,
) -> ApiResult<Json<Value>> {
    let t0 = Instant::now();
    let r = async {
        let targets = st.search_targets(&index)?;
        let b = body(b)?;
        let limits = st.limits.clone();
        st.pool.run(move || search::count(&targets, &b, &params, &limits)).await
    }
    .await;
    st.metrics.query(t0.elapsed(), r.is_ok());
    r.map(Json)
}
