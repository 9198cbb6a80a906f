//! The server over real HTTP on loopback: bad input gets Elasticsearch-shaped 4xx errors and the server stays
//! up; writes are visible to the very next request; crash-safe indexes created through the API survive a
//! restart; the API key guards every endpoint but the page; concurrent writers and searchers see no errors
//! and lose no acknowledged document; `/metrics` exposes the documented families.

use serde_json::{json, Value};
use spirit::{Engine, EngineConfig, ShardConfig};
use spirit_server::{Limits, ServerConfig, ServerState};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct TestServer {
    url: String,
    engine: Arc<Engine>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    fn start(dir: &std::path::Path, cfg: ServerConfig) -> TestServer {
        let shard = ShardConfig { dram_budget: 32 << 20, persistent_budget: 1 << 30, ..Default::default() };
        Self::start_with(dir, cfg, shard)
    }

    fn start_with(dir: &std::path::Path, cfg: ServerConfig, shard: ShardConfig) -> TestServer {
        let engine = Arc::new(Engine::open(dir, EngineConfig { shard, default_shards: None }).unwrap());
        let state = ServerState::new(engine.clone(), cfg);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                spirit_server::serve(state, listener, async move {
                    let _ = rx.await;
                })
                .await
                .unwrap();
            });
        });
        let addr = addr_rx.recv().unwrap();
        TestServer { url: format!("http://{addr}"), engine, stop: Some(tx), thread: Some(thread) }
    }

    fn stop(mut self) -> Arc<Engine> {
        self.stop.take().unwrap().send(()).unwrap();
        self.thread.take().unwrap().join().unwrap();
        self.engine.clone()
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        self.call_with(method, path, body, &[])
    }

    fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req =
            ureq::request(method, &format!("{}{}", self.url, path)).timeout(Duration::from_secs(60));
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let r = match body {
            Some(b) => req.set("content-type", "application/json").send_string(b),
            None => req.call(),
        };
        let resp = match r {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{method} {path}: {e}"),
        };
        let status = resp.status();
        let text = resp.into_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A request whose body is over the server's limit: the server answers 413 and closes the connection
    /// without reading the rest, so a client still writing may see its connection broken instead of the
    /// answer (as with Elasticsearch or nginx). Returns the answer, or `None` for a broken connection.
    fn call_oversize(&self, method: &str, path: &str, body: &str) -> Option<(u16, Value)> {
        let req = ureq::request(method, &format!("{}{}", self.url, path)).timeout(Duration::from_secs(60));
        match req.set("content-type", "application/json").send_string(body) {
            Ok(r) | Err(ureq::Error::Status(_, r)) => {
                let status = r.status();
                let text = r.into_string().unwrap();
                Some((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
            }
            Err(ureq::Error::Transport(t)) => {
                let e = t.to_string();
                assert!(
                    ["Broken pipe", "reset", "aborted"].iter().any(|x| e.contains(x)),
                    "{method} {path}: {e}"
                );
                None
            }
        }
    }
}

/// An Elasticsearch-shaped error with this status and type.
fn assert_es_error(r: &(u16, Value), status: u16, kind: &str) {
    let (s, v) = r;
    assert_eq!(*s, status, "{v}");
    assert_eq!(v["status"], json!(status), "{v}");
    assert_eq!(v["error"]["type"], json!(kind), "{v}");
    assert!(v["error"]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{v}");
    assert_eq!(v["error"]["root_cause"][0]["type"], json!(kind), "{v}");
}

/// Runs `check` against a fresh server holding an empty index `name` (with `mappings`, a JSON object) of one
/// shard, then of three: what a test asserts must hold whatever the shard count.
fn on_one_and_three_shards(name: &str, mappings: &str, check: impl Fn(&TestServer)) {
    for shards in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let s = TestServer::start(dir.path(), ServerConfig::default());
        let body = format!(r#"{{"settings": {{"number_of_shards": {shards}}}, "mappings": {mappings}}}"#);
        assert_eq!(s.call("PUT", &format!("/{name}"), Some(&body)).0, 200, "{shards} shards");
        check(&s);
        s.stop();
    }
}

/// The ids of a search's hits, in id order.
fn hit_ids(s: &TestServer, index: &str, q: &str) -> Vec<String> {
    hits_by_id(s, index, q).into_iter().map(|h| h.0).collect()
}

/// Puts each `(id, source)` into `index`, each acknowledged as created.
fn put_docs<'a>(s: &TestServer, index: &str, docs: impl IntoIterator<Item = (&'a str, String)>) {
    for (id, doc) in docs {
        assert_eq!(s.call("PUT", &format!("/{index}/_doc/{id}"), Some(&doc)).0, 201, "{doc}");
    }
}

/// The hits of search `q` on `index` as (`_id`, score), sorted by `_id`.
fn hits_by_id(s: &TestServer, index: &str, q: &str) -> Vec<(String, f64)> {
    let (status, r) = s.call("POST", &format!("/{index}/_search"), Some(q));
    assert_eq!(status, 200, "{q}: {r}");
    let mut v: Vec<(String, f64)> = r["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_score"].as_f64().unwrap()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn small_limits() -> ServerConfig {
    ServerConfig {
        limits: Limits { max_body_bytes: 64 << 10, max_bulk_actions: 50, ..Default::default() },
        query_threads: 2,
        ..Default::default()
    }
}

#[test]
fn bad_input_gets_an_elasticsearch_error_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), small_limits());
    let up = |s: &TestServer| assert_eq!(s.call("GET", "/", None).0, 200);
    let mappings = r#"{"mappings": {"properties": {"n": {"type": "long"}, "body": {"type": "text"}}}}"#;
    assert_eq!(s.call("PUT", "/bad", Some(mappings)).0, 200);
    assert_eq!(s.call("PUT", "/bad/_doc/1", Some(r#"{"n": 1, "body": "ok"}"#)).0, 201);

    let big = format!(r#"{{"body": "{}"}}"#, "x".repeat(100 << 10));
    if let Some(r) = s.call_oversize("PUT", "/bad/_doc/2", &big) {
        assert_es_error(&r, 413, "content_too_long_exception");
    }
    up(&s);
    let cases: Vec<((u16, Value), u16, &str)> = vec![
        (s.call("PUT", "/bad/_doc/2", Some("{\"n\": 1,")), 400, "mapper_parsing_exception"),
        (s.call("PUT", "/bad/_doc/2", Some("[1, 2]")), 400, "mapper_parsing_exception"),
        (s.call("PUT", "/bad/_doc/2", Some(r#"{"n": "not a number"}"#)), 400, "mapper_parsing_exception"),
        (s.call("PUT", "/bad/_doc/2", Some(r#"{"_id": "x"}"#)), 400, "mapper_parsing_exception"),
        (s.call("GET", "/_no_such_endpoint", None), 400, "illegal_argument_exception"),
        (s.call("GET", "/bad/_no_such_endpoint", None), 400, "illegal_argument_exception"),
        (s.call("PATCH", "/bad", None), 405, "illegal_argument_exception"),
        (
            s.call("POST", "/bad/_search", Some(r#"{"query": {"span_term": {"body": "x"}}}"#)),
            400,
            "parsing_exception",
        ),
        (
            s.call(
                "POST",
                "/bad/_search",
                Some(r#"{"query": {"match": {"body": {"query": "x", "fuzziness": "AUTO:1,4"}}}}"#),
            ),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call(
                "POST",
                "/bad/_search",
                Some(r#"{"query": {"match_all": {}}, "aggs": {"a": {"geo_bounds": {"field": "x"}}}}"#),
            ),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call("POST", "/bad/_search", Some(r#"{"query": {"query_string": {"query": "\"unbalanced"}}}"#)),
            400,
            "query_shard_exception",
        ),
        (
            s.call("POST", "/bad/_search", Some(r#"{"query": {"range": {"body": {"gte": 1}}}}"#)),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call("POST", "/bad/_search", Some(r#"{"from": 9999, "size": 10}"#)),
            400,
            "illegal_argument_exception",
        ),
        (s.call("POST", "/bad/_search", Some(r#"{"size": "ten"}"#)), 400, "parsing_exception"),
        (
            s.call(
                "POST",
                "/bad/_search",
                Some(r#"{"sort": [{"n": {"order": "asc", "mode": "min"}}, "_score"]}"#),
            ),
            400,
            "illegal_argument_exception",
        ),
        (s.call("POST", "/bad/_search", Some("{not json")), 400, "parsing_exception"),
        (s.call("POST", "/missing/_search", Some("{}")), 404, "index_not_found_exception"),
        (s.call("GET", "/missing/_doc/1", None), 404, "index_not_found_exception"),
        (s.call("PUT", "/bad", None), 400, "resource_already_exists_exception"),
        (s.call("PUT", "/Upper", None), 400, "invalid_index_name_exception"),
        (
            s.call("PUT", "/other", Some(r#"{"settings": {"number_of_shards": 100}}"#)),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call("PUT", "/other", Some(r#"{"settings": {"index.translog.durability": "sometimes"}}"#)),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call("POST", "/bad/_update/1", Some(r#"{"script": "ctx._source.n++"}"#)),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call("POST", "/bad/_update/nope", Some(r#"{"doc": {"n": 2}}"#)),
            404,
            "document_missing_exception",
        ),
        (s.call("PUT", "/bad/_create/1", Some(r#"{"n": 3}"#)), 409, "version_conflict_engine_exception"),
        (
            s.call("PUT", "/bad/_doc/1?if_seq_no=3", Some(r#"{"n": 3}"#)),
            400,
            "action_request_validation_exception",
        ),
        (
            s.call("PUT", "/bad/_doc/1?version=3", Some(r#"{"n": 3}"#)),
            400,
            "action_request_validation_exception",
        ),
        (
            s.call("PUT", "/bad/_doc/1?if_seq_no=x&if_primary_term=1", Some(r#"{"n": 3}"#)),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call(
                "POST",
                "/_bulk",
                Some("{\"index\": {\"_index\": \"bad\"}}\n{\"n\": 1}\n{\"frobnicate\": {}}\n"),
            ),
            400,
            "illegal_argument_exception",
        ),
        (
            s.call(
                "POST",
                "/_bulk",
                Some(&"{\"delete\": {\"_index\": \"bad\", \"_id\": \"9\"}}\n".repeat(51)),
            ),
            400,
            "illegal_argument_exception",
        ),
    ];
    for (r, status, kind) in &cases {
        assert_es_error(r, *status, kind);
        up(&s);
    }
    // A query nested deeper than the limit, and one with too many clauses.
    let mut deep = json!({"match_all": {}});
    for _ in 0..40 {
        deep = json!({"bool": {"must": deep}});
    }
    assert_es_error(
        &s.call("POST", "/bad/_search", Some(&json!({"query": deep}).to_string())),
        400,
        "parsing_exception",
    );
    let many: Vec<Value> = (0..1100).map(|i| json!({"term": {"body": format!("t{i}")}})).collect();
    let r = s.call("POST", "/bad/_search", Some(&json!({"query": {"bool": {"should": many}}}).to_string()));
    assert_es_error(&r, 400, "too_many_clauses");

    // Bad bulk items fail alone; the rest go in.
    let bulk = "{\"index\": {\"_index\": \"bad\", \"_id\": \"a\"}}\n{\"n\": 10}\n{\"index\": {\"_index\": \"bad\", \"_id\": \"b\"}}\n{\"n\": \"x\"}\n{\"index\": {\"_index\": \"bad\", \"_id\": \"c\"}}\n{broken\n{\"update\": {\"_index\": \"bad\", \"_id\": \"zz\"}}\n{\"doc\": {}}\n{\"index\": {\"_index\": \"bad\", \"_id\": \"d\"}}\n{\"n\": 11}\n";
    let (st, v) = s.call("POST", "/_bulk", Some(bulk));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["errors"], json!(true));
    let statuses: Vec<u64> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_object().unwrap().values().next().unwrap()["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, vec![201, 400, 400, 404, 201]);
    let (_, c) = s.call("GET", "/bad/_count", None);
    assert_eq!(c["count"], json!(3), "docs 1, a and d: nothing half-applied");
    // Nothing above took the server down or lost data.
    assert_eq!(s.call("GET", "/bad/_doc/1", None).1["_source"], json!({"n": 1, "body": "ok"}));
    s.stop();
}

#[test]
fn every_write_is_visible_to_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    for i in 0..150 {
        let word = format!("unique{i}word");
        let (st, v) = s.call(
            "PUT",
            &format!("/rt/_doc/d{i}"),
            Some(&json!({"body": format!("text {word}"), "n": i}).to_string()),
        );
        assert!(st == 201, "{v}");
        let (_, r) =
            s.call("POST", "/rt/_search", Some(&json!({"query": {"match": {"body": word}}}).to_string()));
        assert_eq!(r["hits"]["total"]["value"], json!(1), "{r}");
        assert_eq!(r["hits"]["hits"][0]["_id"], json!(format!("d{i}")));
        let (st, g) = s.call("GET", &format!("/rt/_doc/d{i}"), None);
        assert_eq!((st, g["found"].clone()), (200, json!(true)));
        if i % 10 == 0 {
            let (_, d) = s.call("DELETE", &format!("/rt/_doc/d{i}"), None);
            assert_eq!(d["result"], json!("deleted"));
            let (_, r) =
                s.call("POST", "/rt/_search", Some(&json!({"query": {"match": {"body": word}}}).to_string()));
            assert_eq!(r["hits"]["total"]["value"], json!(0), "a delete is visible at once too");
            assert_eq!(s.call("GET", &format!("/rt/_doc/d{i}"), None).0, 404);
        }
    }
    let (_, c) = s.call("POST", "/rt/_count", Some(r#"{"query": {"match_all": {}}}"#));
    assert_eq!(c["count"], json!(135));
    // Newest first, paging, source filtering, no total.
    let (_, r) = s.call("POST", "/rt/_search", Some(r#"{"sort": [{"_doc": "desc"}], "size": 3, "from": 1, "_source": ["n"], "track_total_hits": false}"#));
    let ns: Vec<Value> = r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_source"].clone()).collect();
    assert_eq!(ns, vec![json!({"n": 148}), json!({"n": 147}), json!({"n": 146})]);
    assert!(r["hits"].get("total").is_none());
    // By a numeric field, both ways; a text field cannot be sorted on.
    let (_, r) = s.call("POST", "/rt/_search", Some(r#"{"sort": [{"n": {"order": "desc"}}], "size": 3}"#));
    let sorted: Vec<Value> =
        r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["sort"][0].clone()).collect();
    assert_eq!(sorted, vec![json!(149), json!(148), json!(147)], "{r}");
    assert_eq!(r["hits"]["hits"][0]["_score"], Value::Null);
    let (_, r) = s.call("GET", "/rt/_search?sort=n:asc&size=2&q=body:text", None);
    let ids: Vec<Value> = r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].clone()).collect();
    assert_eq!(ids, vec![json!("d1"), json!("d2")], "d0 was deleted");
    assert_es_error(
        &s.call("POST", "/rt/_search", Some(r#"{"sort": ["body"]}"#)),
        400,
        "illegal_argument_exception",
    );
    s.stop();
}

#[test]
fn crash_safe_index_created_through_the_api_keeps_its_mode_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let (st, v) =
        s.call("PUT", "/safe", Some(r#"{"settings": {"index": {"translog": {"durability": "request"}}}}"#));
    assert_eq!(st, 200, "{v}");
    let mut bulk = String::new();
    for i in 0..500 {
        bulk.push_str(&format!("{{\"index\": {{\"_id\": \"{i}\"}}}}\n{{\"body\": \"doc number {i}\"}}\n"));
    }
    let (_, v) = s.call("POST", "/safe/_bulk", Some(&bulk));
    assert_eq!(v["errors"], json!(false));
    let (_, set) = s.call("GET", "/safe/_settings", None);
    assert_eq!(set["safe"]["settings"]["index"]["translog"]["durability"], json!("request"));
    assert_eq!(s.engine.index("safe").unwrap().stats().shard.durability, spirit::Durability::CrashSafe);
    let engine = s.stop();
    engine.close().unwrap();
    drop(engine);
    // A restart whose engine defaults are graceful reopens it crash-safe, with every document.
    let s = TestServer::start(dir.path(), ServerConfig::default());
    assert_eq!(s.engine.index("safe").unwrap().stats().shard.durability, spirit::Durability::CrashSafe);
    let (_, c) = s.call("GET", "/safe/_count", None);
    assert_eq!(c["count"], json!(500));
    assert_eq!(s.call("DELETE", "/safe", None).0, 200);
    assert_eq!(s.call("HEAD", "/safe", None).0, 404);
    s.stop();
}

#[test]
fn api_key_guards_everything_but_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ServerConfig { api_key: Some("s3cret".into()), ..Default::default() };
    let s = TestServer::start(dir.path(), cfg);
    assert_es_error(&s.call("GET", "/", None), 401, "security_exception");
    assert_es_error(&s.call("GET", "/_cat/indices", None), 401, "security_exception");
    assert_es_error(
        &s.call_with("GET", "/", None, &[("authorization", "ApiKey wrong")]),
        401,
        "security_exception",
    );
    assert_eq!(s.call_with("GET", "/", None, &[("authorization", "ApiKey s3cret")]).0, 200);
    assert_eq!(s.call_with("PUT", "/k/_doc/1", Some("{}"), &[("authorization", "Bearer s3cret")]).0, 201);
    let (st, page) = s.call_with("GET", "/", None, &[("accept", "text/html")]);
    assert_eq!(st, 200);
    assert!(page.as_str().unwrap().contains("<html") || page.as_str().unwrap().contains("<!doctype"));
    s.stop();
}

#[test]
fn concurrent_writers_and_searchers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(TestServer::start(dir.path(), ServerConfig { query_threads: 2, ..Default::default() }));
    assert_eq!(
        s.call("PUT", "/load", Some(r#"{"settings": {"index.translog.durability": "request"}}"#)).0,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut acked = vec![];
                let mut batch = 0;
                while Instant::now() < deadline {
                    let mut body = String::new();
                    let ids: Vec<String> = (0..50).map(|i| format!("w{w}-{batch}-{i}")).collect();
                    for id in &ids {
                        body.push_str(&format!("{{\"index\": {{\"_id\": \"{id}\"}}}}\n{{\"body\": \"writer {w} batch {batch} common\"}}\n"));
                    }
                    let (st, v) = s.call("POST", "/load/_bulk", Some(&body));
                    assert_eq!((st, v["errors"].clone()), (200, json!(false)), "{v}");
                    acked.extend(ids);
                    batch += 1;
                }
                acked
            })
        })
        .collect();
    let searchers: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                let mut last = 0;
                while Instant::now() < deadline {
                    let (st, v) = s.call(
                        "POST",
                        "/load/_search",
                        Some(r#"{"query": {"match": {"body": "common"}}, "size": 5}"#),
                    );
                    assert_eq!(st, 200, "{v}");
                    let total = v["hits"]["total"]["value"].as_u64().unwrap();
                    assert!(total >= last, "a later search never sees fewer documents ({total} < {last})");
                    last = total;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let searches: usize = searchers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(searches > 0 && !acked.is_empty());
    let (_, c) = s.call("GET", "/load/_count", None);
    assert_eq!(c["count"], json!(acked.len()));
    for id in acked.iter().step_by(97) {
        assert_eq!(s.call("GET", &format!("/load/_doc/{id}"), None).0, 200, "{id}");
    }
    let (_, m) = s.call("GET", "/metrics", None);
    let text = m.as_str().unwrap();
    for family in [
        "spirit_docs_ingested_total",
        "spirit_query_duration_seconds_bucket",
        "spirit_index_segments",
        "spirit_tier_bytes",
        "spirit_tlog_barriers_total",
    ] {
        assert!(text.contains(family), "{family} missing from /metrics");
    }
    let (_, st) = s.call("GET", "/_spirit/stats", None);
    assert_eq!(st["ingest"]["docs_total"], json!(acked.len()));
    assert_eq!(st["indexes"][0]["durability"], json!("crash-safe"));
    Arc::try_unwrap(s).ok().expect("only owner").stop();
}

#[test]
fn analyzers_defined_in_settings_apply_to_mapped_and_dynamic_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let body = r#"{
        "settings": {"analysis": {"analyzer": {
            "default": {"type": "english"},
            "plain": {"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}}}},
        "mappings": {"properties": {"exact": {"type": "text", "analyzer": "plain"}}}}"#;
    assert_eq!(s.call("PUT", "/an", Some(body)).0, 200);
    assert_eq!(
        s.call("PUT", "/an/_doc/1", Some(r#"{"body": "The dogs were running", "exact": "running dogs"}"#)).0,
        201
    );
    let count = |q: &str| s.call("POST", "/an/_count", Some(q)).1["count"].clone();
    // `body` is dynamic: the default (english) analyzer stems it; `exact` uses the plain one.
    assert_eq!(count(r#"{"query": {"match": {"body": "run"}}}"#), json!(1));
    assert_eq!(count(r#"{"query": {"match": {"exact": "run"}}}"#), json!(0));
    assert_eq!(count(r#"{"query": {"match": {"exact": "running"}}}"#), json!(1));
    let (_, m) = s.call("GET", "/an/_mapping", None);
    assert_eq!(m["an"]["mappings"]["properties"]["body"]["analyzer"], json!("english"), "{m}");
    let bad =
        r#"{"settings": {"analysis": {"analyzer": {"x": {"type": "custom", "tokenizer": "whitespace"}}}}}"#;
    assert_es_error(&s.call("PUT", "/an2", Some(bad)), 400, "illegal_argument_exception");
    // The index's analyzer names stay known after its creation, and after a restart: in a mapping update,
    // in `_analyze`, in a suggester, and in its settings.
    assert_eq!(s.call("PUT", "/an2-none", None).0, 200);
    let mapping = r#"{"properties": {"later": {"type": "text", "analyzer": "plain"}}}"#;
    assert_eq!(s.call("PUT", "/an/_mapping", Some(mapping)).0, 200);
    assert_eq!(s.call("PUT", "/an/_doc/2", Some(r#"{"later": "Running dogs"}"#)).0, 201);
    let tokens = |s: &TestServer, path: &str, analyzer: &str| {
        let r =
            s.call("POST", path, Some(&format!(r#"{{"analyzer": "{analyzer}", "text": "Running dogs"}}"#)));
        assert_eq!(r.0, 200, "{path} {analyzer}: {}", r.1);
        r.1["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["token"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let check = |s: &TestServer| {
        let count = |q: &str| s.call("POST", "/an/_count", Some(q)).1["count"].clone();
        assert_eq!(count(r#"{"query": {"match": {"later": "running"}}}"#), json!(1));
        assert_eq!(count(r#"{"query": {"match": {"later": "run"}}}"#), json!(0), "plain does not stem");
        let (_, m) = s.call("GET", "/an/_mapping", None);
        let props = &m["an"]["mappings"]["properties"];
        assert_eq!(props["later"], props["exact"], "both map `plain`: {m}");
        assert_eq!(tokens(s, "/an/_analyze", "plain"), ["running", "dogs"]);
        assert_eq!(tokens(s, "/an/_analyze", "default"), ["run", "dog"]);
        assert_eq!(tokens(s, "/an/_analyze", "english"), ["run", "dog"]);
        // Another index's names are not this one's, and the path without an index knows only built-ins.
        assert_es_error(
            &s.call("POST", "/_analyze", Some(r#"{"analyzer": "plain", "text": "x"}"#)),
            400,
            "illegal_argument_exception",
        );
        let r = s.call("POST", "/an/_analyze", Some(r#"{"analyzer": "nope", "text": "x"}"#));
        assert_es_error(&r, 400, "illegal_argument_exception");
        assert!(
            r.1["error"]["reason"].as_str().unwrap().contains("failed to find analyzer [nope]"),
            "{}",
            r.1
        );
        // A suggester's analyzer: `plain` keeps "Runnign" whole (`english` would cut it to "runnign" too,
        // but the index's name must resolve first).
        let q = r#"{"size": 0, "suggest": {"s": {"text": "Runnign", "term": {"field": "exact", "analyzer": "plain"}}}}"#;
        let (st, v) = s.call("POST", "/an/_search", Some(q));
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["suggest"]["s"][0]["text"], json!("runnign"), "{v}");
        assert_eq!(v["suggest"]["s"][0]["options"][0]["text"], json!("running"), "{v}");
        let (_, v) = s.call("GET", "/an2-none/_settings", None);
        assert!(
            v["an2-none"]["settings"]["index"].get("analysis").is_none(),
            "no analyzers, no section: {v}"
        );
        let (_, v) = s.call("GET", "/an/_settings", None);
        let defs = &v["an"]["settings"]["index"]["analysis"]["analyzer"];
        assert_eq!(
            defs["plain"],
            json!({"type": "custom", "tokenizer": "standard", "filter": ["lowercase"]}),
            "{v}"
        );
        assert_eq!(defs["default"], json!({"type": "english"}), "{v}");
    };
    check(&s);
    let engine = s.stop();
    engine.close().unwrap();
    drop(engine);
    let s = TestServer::start(dir.path(), ServerConfig::default());
    check(&s);
    s.stop();
}

/// Boosts: a clause's `boost` (and the query string's `^N`) multiplies its score and can reorder the hits;
/// what matches is unchanged; a negative boost is a 400.
#[test]
fn boosts_scale_scores_and_reorder_hits() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let mappings = r#"{"mappings": {"properties": {"title": {"type": "text"}, "body": {"type": "text"}}}}"#;
    assert_eq!(s.call("PUT", "/bo", Some(mappings)).0, 200);
    for (id, doc) in [
        ("t", r#"{"title": "dune", "body": "a desert planet and its spice"}"#),
        ("b", r#"{"title": "arrakis", "body": "dune dune the desert"}"#),
        ("n", r#"{"title": "other", "body": "nothing here"}"#),
    ] {
        assert_eq!(s.call("PUT", &format!("/bo/_doc/{id}"), Some(doc)).0, 201);
    }
    let search = |q: &str| {
        let (status, r) = s.call("POST", "/bo/_search", Some(q));
        assert_eq!(status, 200, "{r}");
        r["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_score"].as_f64().unwrap()))
            .collect::<Vec<_>>()
    };
    let plain = search(r#"{"query": {"match": {"body": "desert"}}}"#);
    let boosted = search(r#"{"query": {"match": {"body": {"query": "desert", "boost": 2.5}}}}"#);
    assert_eq!(plain.len(), 2);
    for ((a, x), (b, y)) in plain.iter().zip(&boosted) {
        assert_eq!(a, b);
        assert!((y / x - 2.5).abs() < 1e-4, "{x} x 2.5 != {y}");
    }
    // Unboosted, "b" (dune twice in its body) wins; a title boost puts "t" first; the query string agrees.
    let either = |tb: f64| {
        format!(r#"{{"query": {{"multi_match": {{"query": "dune", "fields": ["title^{tb}", "body"]}}}}}}"#)
    };
    assert_eq!(search(&either(1.0))[0].0, "b");
    assert_eq!(search(&either(10.0))[0].0, "t");
    let qs = search(r#"{"query": {"query_string": {"query": "title:dune^10 body:dune"}}}"#);
    assert_eq!(qs[0].0, "t");
    assert_eq!(qs.len(), 2);
    // A boost of 0 keeps the matches, scoring 0.
    let zero = search(r#"{"query": {"match": {"body": {"query": "desert", "boost": 0}}}}"#);
    assert_eq!((zero.len(), zero.iter().all(|h| h.1 == 0.0)), (2, true), "{zero:?}");
    assert_es_error(
        &s.call(
            "POST",
            "/bo/_search",
            Some(r#"{"query": {"match": {"body": {"query": "x", "boost": -1}}}}"#),
        ),
        400,
        "parsing_exception",
    );
    s.stop();
}

/// `minimum_should_match` above 1, on `bool` and on `match`: only documents matching that many of the
/// optional clauses, scored as the sum of those they match.
#[test]
fn minimum_should_match_requires_that_many_clauses() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    for (id, body) in
        [("abc", "alpha beta gamma"), ("ab", "alpha beta"), ("a", "alpha"), ("c", "gamma delta")]
    {
        assert_eq!(
            s.call("PUT", &format!("/ms/_doc/{id}"), Some(&format!(r#"{{"body": "{body}"}}"#))).0,
            201
        );
    }
    let ids = |q: &str| {
        let (status, r) = s.call("POST", "/ms/_search", Some(q));
        assert_eq!(status, 200, "{r}");
        let mut v: Vec<String> = r["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["_id"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let bool_q = |msm: &str| {
        format!(
            r#"{{"query": {{"bool": {{"should": [{{"match": {{"body": "alpha"}}}}, {{"match": {{"body": "beta"}}}},
                {{"match": {{"body": "gamma"}}}}], "minimum_should_match": {msm}}}}}}}"#
        )
    };
    assert_eq!(ids(&bool_q("1")), ["a", "ab", "abc", "c"]);
    assert_eq!(ids(&bool_q("2")), ["ab", "abc"]);
    assert_eq!(ids(&bool_q("\"100%\"")), ["abc"]);
    assert_eq!(ids(&bool_q("-1")), ["ab", "abc"]);
    // Conditions: all 3 up to 3 clauses, 1 past 2.
    assert_eq!(ids(&bool_q("\"3<1\"")), ["abc"]);
    assert_eq!(ids(&bool_q("\"2<1\"")), ["a", "ab", "abc", "c"]);
    assert_eq!(
        ids(r#"{"query": {"match": {"body": {"query": "alpha gamma delta", "minimum_should_match": "2"}}}}"#),
        ["abc", "c"]
    );
    // The score is the sum of the clauses matched, as without the minimum.
    let score =
        |q: &str| s.call("POST", "/ms/_search", Some(q)).1["hits"]["hits"][0]["_score"].as_f64().unwrap();
    let all3 = |msm: &str| {
        format!(
            r#"{{"query": {{"match": {{"body": {{"query": "alpha beta gamma", "minimum_should_match": {msm}}}}}}}}}"#
        )
    };
    assert!((score(&all3("1")) - score(&all3("2"))).abs() < 1e-6);
    assert_es_error(
        &s.call("POST", "/ms/_search", Some(&bool_q("\"2<\""))),
        400,
        "illegal_argument_exception",
    );
    s.stop();
}

/// `exists`, `constant_score`, `dis_max` and the constant-score `terms`: what they match and how they score.
#[test]
fn exists_constant_score_dis_max_and_terms() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let mappings = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"},
                                                 "n": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/cs", Some(mappings)).0, 200);
    for (id, doc) in [
        ("1", r#"{"body": "red red fox", "tag": "x", "n": 3}"#),
        ("2", r#"{"body": "red dog", "tag": "y"}"#),
        ("3", r#"{"body": "blue whale and a very long body of text", "n": 5}"#),
    ] {
        assert_eq!(s.call("PUT", &format!("/cs/_doc/{id}"), Some(doc)).0, 201);
    }
    let hits = |q: &str| hits_by_id(&s, "cs", q);
    let ids = |q: &str| hits(q).into_iter().map(|h| h.0).collect::<Vec<_>>();
    assert_eq!(ids(r#"{"query": {"exists": {"field": "n"}}}"#), ["1", "3"]);
    assert_eq!(ids(r#"{"query": {"exists": {"field": "tag"}}}"#), ["1", "2"]);
    assert_eq!(ids(r#"{"query": {"exists": {"field": "nope"}}}"#), Vec::<String>::new());
    // Constant scores: the boost (1 without one), whatever the relevance.
    let c = hits(r#"{"query": {"constant_score": {"filter": {"match": {"body": "red"}}, "boost": 1.5}}}"#);
    assert_eq!(c, [("1".to_string(), 1.5), ("2".to_string(), 1.5)]);
    let t = hits(r#"{"query": {"terms": {"tag": ["x", "y", "z"]}}}"#);
    assert_eq!(t, [("1".to_string(), 1.0), ("2".to_string(), 1.0)]);
    // dis_max: the best clause's score, not the sum.
    let red = hits(r#"{"query": {"match": {"body": "red"}}}"#);
    let fox = hits(r#"{"query": {"match": {"body": "fox"}}}"#);
    let best = hits(
        r#"{"query": {"dis_max": {"queries": [{"match": {"body": "red"}}, {"match": {"body": "fox"}}]}}}"#,
    );
    assert_eq!(best.len(), 2);
    assert!((best[0].1 - red[0].1.max(fox[0].1)).abs() < 1e-5, "{best:?} {red:?} {fox:?}");
    assert!((best[1].1 - red[1].1).abs() < 1e-5);
    s.stop();
}

/// Aggregations in Elasticsearch's request and response shapes: metrics (with date forms), terms with a
/// sub-aggregation, histograms with empty buckets, a calendar date histogram, ranges, filter and filters,
/// pipelines; the counts follow writes at once; what is not implemented, or a text field, is a 400 that
/// names it.
#[test]
fn aggregations_answer_in_elasticsearch_shape() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let mappings = r#"{"mappings": {"properties": {"body": {"type": "text"}, "genre": {"type": "keyword"},
        "year": {"type": "long"}, "price": {"type": "double"}, "at": {"type": "date"}}}}"#;
    assert_eq!(s.call("PUT", "/shop", Some(mappings)).0, 200);
    for (id, doc) in [
        ("1", r#"{"body": "dune", "genre": "scifi", "year": 1965, "price": 10.5, "at": "2015-01-03"}"#),
        ("2", r#"{"body": "emma", "genre": "novel", "year": 1815, "price": 4.0, "at": "2015-01-20"}"#),
        ("3", r#"{"body": "solaris", "genre": "scifi", "year": 1961, "price": 8.0, "at": "2015-03-02"}"#),
        ("4", r#"{"body": "unpriced", "genre": ["scifi", "classic"], "year": 1968}"#),
    ] {
        assert_eq!(s.call("PUT", &format!("/shop/_doc/{id}"), Some(doc)).0, 201);
    }
    let aggs = |body: &str| {
        let (status, r) = s.call("POST", "/shop/_search", Some(body));
        assert_eq!(status, 200, "{r}");
        r["aggregations"].clone()
    };
    let a = aggs(
        r#"{"size": 0, "aggs": {
            "genres": {"terms": {"field": "genre"}, "aggs": {"avg_price": {"avg": {"field": "price"}}}},
            "first": {"min": {"field": "at"}},
            "prices": {"stats": {"field": "price"}},
            "decades": {"histogram": {"field": "year", "interval": 50}},
            "months": {"date_histogram": {"field": "at", "calendar_interval": "month"}},
            "cheap": {"range": {"field": "price", "ranges": [{"to": 5}, {"from": 5, "key": "dear"}]}},
            "old": {"filter": {"range": {"year": {"lt": 1900}}}, "aggs": {"n": {"value_count": {"field": "year"}}}},
            "split": {"filters": {"filters": {"dune": {"match": {"body": "dune"}}, "all": {"match_all": {}}}}},
            "kinds": {"cardinality": {"field": "genre"}}
        }}"#,
    );
    assert_eq!(
        a["genres"],
        json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": 0, "buckets": [
            {"key": "scifi", "doc_count": 3, "avg_price": {"value": 9.25}},
            {"key": "classic", "doc_count": 1, "avg_price": {"value": null}},
            {"key": "novel", "doc_count": 1, "avg_price": {"value": 4.0}}]})
    );
    assert_eq!(a["first"], json!({"value": 1420243200000.0, "value_as_string": "2015-01-03T00:00:00.000Z"}));
    assert_eq!(a["prices"], json!({"count": 3, "min": 4.0, "max": 10.5, "avg": 7.5, "sum": 22.5}));
    // (key, count) of numeric buckets.
    let numeric_buckets = |v: &Value| -> Vec<(f64, u64)> {
        let buckets = v["buckets"].as_array().unwrap().iter();
        buckets.map(|b| (b["key"].as_f64().unwrap(), b["doc_count"].as_u64().unwrap())).collect()
    };
    let decades = numeric_buckets(&a["decades"]);
    assert_eq!(decades, [(1800.0, 1), (1850.0, 0), (1900.0, 0), (1950.0, 3)], "empty buckets in between");
    assert_eq!(
        a["months"]["buckets"],
        json!([
            {"key_as_string": "2015-01-01T00:00:00.000Z", "key": 1420070400000i64, "doc_count": 2},
            {"key_as_string": "2015-02-01T00:00:00.000Z", "key": 1422748800000i64, "doc_count": 0},
            {"key_as_string": "2015-03-01T00:00:00.000Z", "key": 1425168000000i64, "doc_count": 1}])
    );
    assert_eq!(
        a["cheap"]["buckets"],
        json!([{"key": "*-5.0", "to": 5.0, "doc_count": 1}, {"key": "dear", "from": 5.0, "doc_count": 2}])
    );
    assert_eq!(a["old"], json!({"doc_count": 1, "n": {"value": 1}}));
    assert_eq!(a["split"], json!({"buckets": {"dune": {"doc_count": 1}, "all": {"doc_count": 4}}}));
    assert_eq!(a["kinds"], json!({"value": 3}));
    // The query narrows what is aggregated, and a write is counted by the very next request.
    let scifi = r#"{"query": {"term": {"genre": "scifi"}}, "size": 0, "aggregations": {"y": {"max": {"field": "year"}}}}"#;
    assert_eq!(aggs(scifi)["y"], json!({"value": 1968.0}));
    assert_eq!(s.call("PUT", "/shop/_doc/5", Some(r#"{"genre": "scifi", "year": 2011}"#)).0, 201);
    assert_eq!(aggs(scifi)["y"], json!({"value": 2011.0}));
    assert_eq!(s.call("DELETE", "/shop/_doc/5", None).0, 200);
    assert_eq!(aggs(scifi)["y"], json!({"value": 1968.0}));
    // Percentiles, exact: prices 4, 8 and 10.5; keyed by default, a list with `keyed: false`; dates with
    // their date form.
    let p = aggs(
        r#"{"size": 0, "aggs": {"p": {"percentiles": {"field": "price", "percents": [0, 25, 50, 99.9, 100]}},
            "l": {"percentiles": {"field": "price", "percents": [50], "keyed": false}},
            "d": {"percentiles": {"field": "at", "percents": [50]}},
            "none": {"percentiles": {"field": "nope", "percents": [50]}}}}"#,
    );
    assert_eq!(
        p["p"],
        json!({"values": {"0.0": 4.0, "25.0": 6.0, "50.0": 8.0, "99.9": 10.495, "100.0": 10.5}})
    );
    assert_eq!(p["l"], json!({"values": [{"key": 50.0, "value": 8.0}]}));
    assert_eq!(
        p["d"],
        json!({"values": {"50.0": 1421712000000.0, "50.0_as_string": "2015-01-20T00:00:00.000Z"}})
    );
    assert_eq!(p["none"], json!({"values": {"50.0": null}}));
    // Percentile ranks, exact: the share of prices (4, 8, 10.5) at or below each value; a date field's are
    // percents too.
    let r = aggs(
        r#"{"size": 0, "aggs": {"r": {"percentile_ranks": {"field": "price", "values": [3, 8, 10, 11]}},
            "l": {"percentile_ranks": {"field": "price", "values": [8], "keyed": false}},
            "d": {"percentile_ranks": {"field": "at", "values": [1421712000000]}},
            "none": {"percentile_ranks": {"field": "nope", "values": [1]}}}}"#,
    );
    let third = 100.0 / 3.0;
    assert_eq!(
        r["r"],
        json!({"values": {"3.0": 0.0, "8.0": 2.0 * third, "10.0": 2.0 * third, "11.0": 100.0}}),
        "{r}"
    );
    assert_eq!(r["l"], json!({"values": [{"key": 8.0, "value": 2.0 * third}]}));
    assert_eq!(r["d"]["values"].as_object().unwrap().len(), 1, "no date form of a percent: {r}");
    assert_eq!(r["none"], json!({"values": {"1.0": null}}));
    // Terms by a metric sub-aggregation: the average price (classic has none: last), a stats value.
    let o = aggs(
        r#"{"size": 0, "aggs": {
            "by_avg": {"terms": {"field": "genre", "order": {"avg_price": "desc"}}, "aggs": {"avg_price": {"avg": {"field": "price"}}}},
            "by_max": {"terms": {"field": "genre", "order": {"p.max": "asc"}, "size": 1}, "aggs": {"p": {"stats": {"field": "price"}}}}}}"#,
    );
    let keys =
        |v: &Value| v["buckets"].as_array().unwrap().iter().map(|b| b["key"].clone()).collect::<Vec<_>>();
    assert_eq!(keys(&o["by_avg"]), [json!("scifi"), json!("novel"), json!("classic")]);
    assert_eq!(keys(&o["by_max"]), [json!("novel")]);
    assert_eq!(o["by_max"]["sum_other_doc_count"], json!(4));
    // Terms by key, and a size that leaves buckets out.
    let t = aggs(
        r#"{"size": 0, "aggs": {"g": {"terms": {"field": "genre", "size": 1, "order": {"_key": "asc"}}}}}"#,
    );
    assert_eq!(
        t["g"],
        json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": 4,
        "buckets": [{"key": "classic", "doc_count": 1}]})
    );
    // `include` and `exclude` as lists of values or regular expressions (matching whole values); `missing`:
    // documents without a value count as holding it.
    let f = aggs(
        r#"{"size": 0, "aggs": {
            "g": {"terms": {"field": "genre", "include": ["scifi", "novel", "classic"], "exclude": ["novel"]}},
            "r": {"terms": {"field": "genre", "include": ".*c.*", "exclude": "sc.*", "order": {"_key": "asc"}}},
            "p": {"terms": {"field": "price", "missing": 0, "order": {"_key": "asc"}}},
            "y": {"terms": {"field": "year", "exclude": [1965, "1815"]}},
            "n": {"terms": {"field": "genre", "missing": "none", "include": ["none"]}}}}"#,
    );
    assert_eq!(keys(&f["g"]), [json!("scifi"), json!("classic")]);
    assert_eq!(keys(&f["r"]), [json!("classic")], "{f}");
    assert_eq!(numeric_buckets(&f["p"]), [(0.0, 1), (4.0, 1), (8.0, 1), (10.5, 1)], "{f}");
    assert_eq!(numeric_buckets(&f["y"]), [(1961.0, 1), (1968.0, 1)], "{f}");
    assert_eq!(f["n"]["buckets"], json!([]), "every document has a genre: {f}");
    // Refusals name what is missing; nothing is ignored.
    for (body, what) in [
        (r#"{"aggs": {"g": {"terms": {"field": "year", "include": ["abc"]}}}}"#, "is not a number"),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre", "exclude": {"partition": 0, "num_partitions": 2}}}}}"#,
            "partitions",
        ),
        (r#"{"aggs": {"g": {"terms": {"field": "body"}}}}"#, "Text fields"),
        (r#"{"aggs": {"g": {"percentile_ranks": {"field": "price"}}}}"#, "[values] must not be null"),
        (r#"{"aggs": {"g": {"percentile_ranks": {"field": "price", "values": ["a"]}}}}"#, "must be numbers"),
        (r#"{"aggs": {"g": {"percentile_ranks": {"field": "genre", "values": [1]}}}}"#, "percentile_ranks"),
        (r#"{"aggs": {"g": {"percentiles": {"field": "price", "percents": [101]}}}}"#, "from 0 to 100"),
        (r#"{"aggs": {"g": {"percentiles": {"field": "price", "tdigest": {}}}}}"#, "tdigest"),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre", "order": {"nope": "desc"}}}}}"#,
            "Invalid aggregation order path [nope]",
        ),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre", "order": {"p.median": "desc"}}, "aggs": {"p": {"stats": {"field": "price"}}}}}}"#,
            "Invalid aggregation order path [p]",
        ),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre", "order": {"f>n": "desc"}}}}}"#,
            "a metric sub-aggregation",
        ),
        (r#"{"aggs": {"g": {"terms": {"field": "year", "include": "19.*"}}}}"#, "not regular expressions"),
        (r#"{"aggs": {"g": {"terms": {"field": "genre", "exclude": "(sc"}}}}"#, "invalid regular expression"),
        (r#"{"aggs": {"g": {"date_histogram": {"field": "at", "interval": "1d"}}}}"#, "fixed_interval"),
        (
            r#"{"aggs": {"g": {"date_histogram": {"field": "at", "calendar_interval": "fortnight"}}}}"#,
            "calendar",
        ),
        (
            r#"{"aggs": {"g": {"max": {"field": "year"}, "aggs": {"h": {"min": {"field": "year"}}}}}}"#,
            "sub-aggregations",
        ),
        (r#"{"aggs": {"g": {"avg": {"field": "genre"}}}}"#, "not supported for aggregation [avg]"),
        (r#"{"aggs": {"g": {}}}"#, "Missing definition"),
        (r#"{"aggs": {"g": {"terms": {"field": "genre", "size": 0}}}}"#, "greater than 0"),
    ] {
        let (status, r) = s.call("POST", "/shop/_search", Some(body));
        assert_eq!(status, 400, "{body}: {r}");
        assert!(r["error"]["reason"].as_str().unwrap().contains(what), "{body}: {r}");
    }
    // An unmapped field aggregates nothing, as in Elasticsearch.
    let u = aggs(r#"{"aggs": {"g": {"terms": {"field": "nope"}}, "m": {"max": {"field": "nope"}}}}"#);
    assert_eq!(u["g"]["buckets"], json!([]));
    assert_eq!(u["m"], json!({"value": null}));
    // Pipeline aggregations: January sold 14.5, February nothing, March 8.
    let pl = aggs(
        r#"{"size": 0, "aggs": {
            "months": {"date_histogram": {"field": "at", "calendar_interval": "month"}, "aggs": {
                "sales": {"sum": {"field": "price"}},
                "d": {"derivative": {"buckets_path": "sales"}},
                "c": {"cumulative_sum": {"buckets_path": "_count"}}}},
            "best": {"max_bucket": {"buckets_path": "months>sales"}},
            "avg_sales": {"avg_bucket": {"buckets_path": "months>sales"}},
            "st": {"stats_bucket": {"buckets_path": "months>_count"}},
            "genres": {"terms": {"field": "genre"}, "aggs": {"avg_price": {"avg": {"field": "price"}},
                "top": {"bucket_sort": {"sort": [{"avg_price": {"order": "desc"}}], "size": 1}}}},
            "genre_min": {"min_bucket": {"buckets_path": "genres>avg_price"}},
            "decades": {"histogram": {"field": "year", "interval": 50}},
            "busiest": {"max_bucket": {"buckets_path": "decades>_count"}}}}"#,
    );
    assert_eq!(
        pl["months"]["buckets"],
        json!([
            {"key_as_string": "2015-01-01T00:00:00.000Z", "key": 1420070400000i64, "doc_count": 2,
             "sales": {"value": 14.5}, "c": {"value": 2.0}},
            {"key_as_string": "2015-02-01T00:00:00.000Z", "key": 1422748800000i64, "doc_count": 0,
             "sales": {"value": 0.0}, "d": {"value": -14.5}, "c": {"value": 2.0}},
            {"key_as_string": "2015-03-01T00:00:00.000Z", "key": 1425168000000i64, "doc_count": 1,
             "sales": {"value": 8.0}, "d": {"value": 8.0}, "c": {"value": 3.0}}]),
        "{pl}"
    );
    assert_eq!(pl["best"], json!({"value": 14.5, "keys": ["2015-01-01T00:00:00.000Z"]}));
    assert_eq!(pl["avg_sales"], json!({"value": 7.5}));
    assert_eq!(pl["st"], json!({"count": 3, "min": 0.0, "max": 2.0, "avg": 1.0, "sum": 3.0}));
    // The sort leaves out classic (no average price: a gap) and keeps the best one; the sibling after it
    // reads the sorted buckets.
    assert_eq!(
        pl["genres"]["buckets"],
        json!([{"key": "scifi", "doc_count": 3, "avg_price": {"value": 9.25}}])
    );
    assert_eq!(pl["genre_min"], json!({"value": 9.25, "keys": ["scifi"]}));
    assert_eq!(pl["busiest"], json!({"value": 3.0, "keys": ["1950.0"]}));
    for (body, what) in [
        (r#"{"aggs": {"d": {"derivative": {"buckets_path": "_count"}}}}"#, "must have a histogram"),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre"}, "aggs": {"d": {"derivative": {"buckets_path": "_count"}}}}}}"#,
            "not [g] of type [terms]",
        ),
        (
            r#"{"aggs": {"b": {"bucket_script": {"buckets_path": {"x": "y"}, "script": "x"}}}}"#,
            "[bucket_script]",
        ),
        (r#"{"aggs": {"m": {"max_bucket": {"buckets_path": "g['x']>n"}}}}"#, "brackets"),
        (r#"{"aggs": {"m": {"max_bucket": {}}}}"#, "[buckets_path] missing"),
        (r#"{"aggs": {"m": {"max_bucket": {"buckets_path": "g>n", "gap_policy": "none"}}}}"#, "[gap_policy]"),
        (
            r#"{"aggs": {"g": {"terms": {"field": "genre"}, "aggs": {"s": {"bucket_sort": {"size": 0}}}}}}"#,
            "[size] must be a positive integer",
        ),
        (
            r#"{"aggs": {"h": {"histogram": {"field": "year", "interval": 50}, "aggs": {"d": {"derivative": {"buckets_path": "_count", "unit": "1d"}}}}}}"#,
            "the [unit] option",
        ),
    ] {
        let (status, r) = s.call("POST", "/shop/_search", Some(body));
        assert_eq!(status, 400, "{body}: {r}");
        assert!(r["error"]["reason"].as_str().unwrap().contains(what), "{body}: {r}");
    }
    s.stop();
}

/// `_delete_by_query`: deletes what the query matches, visibly to the very next request, answers in
/// Elasticsearch's shape, honours `max_docs`, and refuses what it does not implement by name.
#[test]
fn delete_by_query_deletes_the_matches() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    for i in 0..20 {
        let doc = format!(r#"{{"body": "{} doc", "n": {i}}}"#, if i % 4 == 0 { "spam" } else { "ham" });
        assert_eq!(s.call("PUT", &format!("/dbq/_doc/{i}"), Some(&doc)).0, 201);
    }
    let count = |q: &str| s.call("POST", "/dbq/_count", Some(q)).1["count"].as_u64().unwrap();
    let (status, r) =
        s.call("POST", "/dbq/_delete_by_query", Some(r#"{"query": {"match": {"body": "spam"}}}"#));
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["total"].clone(), r["deleted"].clone(), r["version_conflicts"].clone()),
        (json!(5), json!(5), json!(0))
    );
    assert_eq!(r["failures"], json!([]));
    assert_eq!(count(r#"{"query": {"match": {"body": "spam"}}}"#), 0);
    assert_eq!(count(r#"{"query": {"match": {"body": "ham"}}}"#), 15);
    assert_eq!(s.call("GET", "/dbq/_doc/4", None).0, 404);
    // max_docs bounds the deletes; the rest stay.
    let (status, r) = s.call(
        "POST",
        "/dbq/_delete_by_query?max_docs=3",
        Some(r#"{"query": {"range": {"n": {"gte": 10}}}}"#),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["deleted"], json!(3));
    assert_eq!(count(r#"{"query": {"range": {"n": {"gte": 10}}}}"#), 5, "8 matched, 3 deleted");
    for (path, body, what) in [
        ("/dbq/_delete_by_query?slices=4", "{}", "slices"),
        ("/dbq/_delete_by_query?conflicts=maybe", "{}", "conflicts"),
        ("/dbq/_delete_by_query", r#"{"query": {"match_all": {}}, "script": {}}"#, "script"),
        ("/dbq/_delete_by_query?wait_for_completion=false", "{}", "wait_for_completion"),
    ] {
        let (status, r) = s.call("POST", path, Some(body));
        assert_eq!(status, 400, "{path}: {r}");
        assert!(r["error"]["reason"].as_str().unwrap().contains(what), "{path}: {r}");
    }
    assert_es_error(&s.call("POST", "/nope/_delete_by_query", Some("{}")), 404, "index_not_found_exception");
    // No query: everything.
    let (status, r) = s.call("POST", "/dbq/_delete_by_query?conflicts=proceed&refresh=true", Some("{}"));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["deleted"], json!(12));
    assert_eq!(count("{}"), 0);
    s.stop();
}

/// `_mget` and `_msearch`: many gets or searches in one request, answered item by item in order; a failing
/// item (a missing index, a bad query) has its own error and never fails the others.
#[test]
fn mget_and_msearch_answer_item_by_item() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    for (id, doc) in [("1", r#"{"body": "red fox", "n": 1}"#), ("2", r#"{"body": "blue whale", "n": 2}"#)] {
        assert_eq!(s.call("PUT", &format!("/mm/_doc/{id}"), Some(doc)).0, 201);
    }
    // _mget with docs: found (source filtered as asked), not found, and a missing index.
    let (status, r) = s.call(
        "POST",
        "/_mget",
        Some(
            r#"{"docs": [{"_index": "mm", "_id": "1", "_source": ["n"]}, {"_index": "mm", "_id": "9"},
                          {"_index": "nope", "_id": "1"}]}"#,
        ),
    );
    assert_eq!(status, 200, "{r}");
    let docs = r["docs"].as_array().unwrap();
    assert_eq!(docs.len(), 3);
    assert_eq!((docs[0]["found"].clone(), docs[0]["_source"].clone()), (json!(true), json!({"n": 1})));
    assert_eq!((docs[1]["_id"].clone(), docs[1]["found"].clone()), (json!("9"), json!(false)));
    assert_eq!(docs[2]["error"]["type"], json!("index_not_found_exception"), "{r}");
    // _mget with ids under the index, right after a write (real time).
    assert_eq!(s.call("PUT", "/mm/_doc/3", Some(r#"{"body": "green frog"}"#)).0, 201);
    let (_, r) = s.call("GET", "/mm/_mget", Some(r#"{"ids": ["3", "2"]}"#));
    let got: Vec<&str> =
        r["docs"].as_array().unwrap().iter().map(|d| d["_source"]["body"].as_str().unwrap()).collect();
    assert_eq!(got, ["green frog", "blue whale"]);
    assert_es_error(&s.call("POST", "/_mget", Some(r#"{"ids": ["1"]}"#)), 400, "illegal_argument_exception");
    assert_es_error(
        &s.call("POST", "/_mget", Some(r#"{"docs": [{"_index": "mm"}]}"#)),
        400,
        "parsing_exception",
    );
    // _msearch: the path's index by default, another named in a header, a bad query and a missing index.
    let body = concat!(
        "{}\n",
        r#"{"query": {"match": {"body": "fox"}}}"#,
        "\n",
        r#"{"index": "mm"}"#,
        "\n",
        r#"{"query": {"match_all": {}}, "size": 1}"#,
        "\n",
        "{}\n",
        r#"{"query": {"no_such_query": {}}}"#,
        "\n",
        r#"{"index": "nope"}"#,
        "\n",
        "{}\n",
    );
    let (status, r) = s.call("POST", "/mm/_msearch", Some(body));
    assert_eq!(status, 200, "{r}");
    let rs = r["responses"].as_array().unwrap();
    assert_eq!(rs.len(), 4);
    assert_eq!((rs[0]["status"].clone(), rs[0]["hits"]["hits"][0]["_id"].clone()), (json!(200), json!("1")));
    assert_eq!(
        (rs[1]["hits"]["total"]["value"].clone(), rs[1]["hits"]["hits"].as_array().unwrap().len()),
        (json!(3), 1)
    );
    assert_eq!(
        (rs[2]["status"].clone(), rs[2]["error"]["type"].clone()),
        (json!(400), json!("parsing_exception"))
    );
    assert_eq!(
        (rs[3]["status"].clone(), rs[3]["error"]["type"].clone()),
        (json!(404), json!("index_not_found_exception"))
    );
    // A header without its body, or one that is not an object, fails the request.
    assert_es_error(&s.call("POST", "/mm/_msearch", Some("{}\n")), 400, "parsing_exception");
    assert_es_error(&s.call("POST", "/mm/_msearch", Some("[1]\n{}\n")), 400, "parsing_exception");
    s.stop();
}

/// The `_source` mapping: an excluded field is searchable but neither stored nor returned; the mapping is
/// reported back; a bad one is a 400.
#[test]
fn source_excludes_in_mappings_keep_fields_searchable_but_unstored() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let body = r#"{"mappings": {"_source": {"excludes": ["body", "meta.*"]},
                                "properties": {"title": {"type": "text"}, "body": {"type": "text"}}}}"#;
    assert_eq!(s.call("PUT", "/src", Some(body)).0, 200);
    let doc = r#"{"title": "Dune", "body": "a desert planet", "meta": {"pages": 412}, "year": 1965}"#;
    assert_eq!(s.call("PUT", "/src/_doc/1", Some(doc)).0, 201);
    let (_, got) = s.call("GET", "/src/_doc/1", None);
    assert_eq!(got["_source"], json!({"title": "Dune", "meta": {}, "year": 1965}), "{got}");
    let (_, hits) = s.call("POST", "/src/_search", Some(r#"{"query": {"match": {"body": "desert"}}}"#));
    assert_eq!(hits["hits"]["total"]["value"], json!(1), "{hits}");
    assert_eq!(hits["hits"]["hits"][0]["_source"], json!({"title": "Dune", "meta": {}, "year": 1965}));
    let (_, m) = s.call("GET", "/src/_mapping", None);
    assert_eq!(
        m["src"]["mappings"]["_source"],
        json!({"enabled": true, "excludes": ["body", "meta.*"]}),
        "{m}"
    );
    let bad = r#"{"mappings": {"_source": {"excludes": "body", "compress": true}}}"#;
    assert_es_error(&s.call("PUT", "/src2", Some(bad)), 400, "illegal_argument_exception");
    s.stop();
}

#[test]
fn result_cache_answers_repeated_searches_and_reports_its_hit_rate() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments so the documents are sealed (the cache covers sealed segments), and every query cached.
    let shard = ShardConfig {
        dram_budget: 32 << 20,
        persistent_budget: 1 << 30,
        max_docs_per_segment: 300,
        result_cache_min_work: 0,
        ..Default::default()
    };
    let s =
        TestServer::start_with(dir.path(), ServerConfig { query_threads: 2, ..Default::default() }, shard);
    let mut body = String::new();
    for i in 0..2000 {
        let words = ["alpha", "beta", "gamma", "delta"];
        body.push_str(&format!(
            "{{\"index\": {{\"_id\": \"{i}\"}}}}\n{{\"body\": \"common {} {}\"}}\n",
            words[i % 4],
            words[i % 3]
        ));
    }
    let (st, v) = s.call("POST", "/c/_bulk", Some(&body));
    assert_eq!((st, v["errors"].clone()), (200, json!(false)));
    let q = r#"{"query": {"bool": {"should": [{"match": {"body": "alpha"}}, {"match": {"body": "beta"}}]}}, "size": 5}"#;
    let hits = |s: &TestServer| {
        s.call("GET", "/_spirit/stats", None).1["indexes"][0]["result_cache"]["hits"].as_u64().unwrap()
    };
    let first = s.call("POST", "/c/_search", Some(q)).1;
    let deadline = Instant::now() + Duration::from_secs(30);
    while hits(&s) == 0 {
        assert!(Instant::now() < deadline, "no cache hit: segments never sealed?");
        std::thread::sleep(Duration::from_millis(20));
        let again = s.call("POST", "/c/_search", Some(q)).1;
        assert_eq!(again["hits"]["total"], first["hits"]["total"]);
    }
    let cached = s.call("POST", "/c/_search", Some(q)).1;
    let before = hits(&s);
    let (st, uncached) = s.call("POST", "/c/_search?request_cache=false", Some(q));
    assert_eq!(st, 200);
    assert_eq!(hits(&s), before, "request_cache=false does not use the cache");
    assert_eq!(cached["hits"], uncached["hits"], "the same answer with and without the cache");
    assert_es_error(&s.call("POST", "/c/_search?request_cache=maybe", Some(q)), 400, "parsing_exception");
    let (_, m) = s.call("GET", "/metrics", None);
    let text = m.as_str().unwrap();
    for family in [
        "spirit_result_cache_hits_total{index=\"c\"}",
        "spirit_result_cache_hit_ratio",
        "spirit_result_cache_bytes",
    ] {
        assert!(text.contains(family), "{family} missing from /metrics");
    }
    let ratio: f64 = text
        .lines()
        .find(|l| l.starts_with("spirit_result_cache_hit_ratio{"))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(ratio > 0.0 && ratio <= 1.0, "{ratio}");
    s.stop();
}

#[test]
fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let cfg = ServerConfig {
        limits: Limits { header_read_timeout: Duration::from_millis(500), ..Default::default() },
        query_threads: 2,
        ..Default::default()
    };
    let s = TestServer::start(dir.path(), cfg);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: spirit\r\nX-Slow: ").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = Instant::now();
    // Other clients are served meanwhile.
    assert_eq!(s.call("GET", "/", None).0, 200);
    let mut buf = vec![];
    let r = slow.read_to_end(&mut buf);
    let waited = t.elapsed();
    assert!(r.is_ok(), "the server closes the connection instead of holding it: {r:?}");
    assert!(waited < Duration::from_secs(15), "closed after {waited:?}");
    let text = String::from_utf8_lossy(&buf);
    assert!(buf.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    assert_eq!(s.call("GET", "/", None).0, 200, "still serving");
    s.stop();
}

/// `number_of_shards` at creation: a sharded index reports its shards in `_settings` and in `_shards`, and
/// answers searches, counts, gets, updates and deletes exactly like a one-shard index fed the same requests.
#[test]
fn a_sharded_index_answers_like_a_one_shard_index() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    for (name, n) in [("one", 1), ("three", 3)] {
        let body = format!(r#"{{"settings": {{"number_of_shards": {n}}}}}"#);
        assert_eq!(s.call("PUT", &format!("/{name}"), Some(&body)).0, 200);
        let (_, v) = s.call("GET", &format!("/{name}/_settings"), None);
        assert_eq!(v[name]["settings"]["index"]["number_of_shards"], json!(n.to_string()));
        let mut bulk = String::new();
        for i in 0..120 {
            let words = ["red fox", "red dog", "blue fox jumps", "green red red"][i % 4];
            bulk += &format!(
                "{{\"index\": {{\"_id\": \"{i}\"}}}}\n{{\"text\": \"{words}\", \"n\": {}}}\n",
                i % 9
            );
        }
        assert_eq!(s.call("POST", &format!("/{name}/_bulk"), Some(&bulk)).0, 200);
        assert_eq!(
            s.call("PUT", &format!("/{name}/_doc/5"), Some(r#"{"text": "red red red fox", "n": 1}"#)).0,
            200
        );
        assert_eq!(s.call("DELETE", &format!("/{name}/_doc/7"), None).0, 200);
    }
    let search = |name: &str, body: &str| {
        let (status, v) = s.call("POST", &format!("/{name}/_search"), Some(body));
        assert_eq!(status, 200, "{v}");
        v
    };
    for body in [
        r#"{"query": {"match": {"text": "red fox"}}, "size": 15}"#,
        r#"{"query": {"match": {"text": "red"}}, "size": 7, "from": 3}"#,
        r#"{"query": {"match_phrase": {"text": "fox jumps"}}}"#,
        r#"{"query": {"match_all": {}}, "sort": [{"n": "desc"}], "size": 20}"#,
        r#"{"query": {"bool": {"must": [{"match": {"text": "red"}}], "must_not": [{"match": {"text": "dog"}}]}}}"#,
    ] {
        let (a, b) = (search("one", body), search("three", body));
        let hits = |v: &Value| {
            let mut h = v["hits"]["hits"].clone();
            h.as_array_mut()
                .unwrap()
                .iter_mut()
                .for_each(|x| x.as_object_mut().unwrap().remove("_index").map(drop).unwrap());
            h
        };
        assert!(!hits(&a).as_array().unwrap().is_empty(), "{body}");
        assert_eq!(hits(&a), hits(&b), "{body}");
        assert_eq!(a["hits"]["total"], b["hits"]["total"], "{body}");
        assert_eq!((a["_shards"]["total"].clone(), b["_shards"]["total"].clone()), (json!(1), json!(3)));
    }
    for name in ["one", "three"] {
        let (_, v) = s.call("GET", &format!("/{name}/_count"), None);
        assert_eq!(v["count"], json!(119));
        let (_, v) = s.call("GET", &format!("/{name}/_doc/5"), None);
        assert_eq!(v["_source"]["text"], json!("red red red fox"));
    }
    // Force merge: same answers after, bad parameters refused.
    let body = r#"{"query": {"match": {"text": "red fox"}}, "size": 20}"#;
    for (name, n) in [("one", 1), ("three", 3)] {
        let before = search(name, body);
        let (status, v) = s.call("POST", &format!("/{name}/_forcemerge?max_num_segments=1"), None);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["_shards"], json!({"total": n, "successful": n, "failed": 0}));
        let after = search(name, body);
        assert_eq!(before["hits"], after["hits"], "{name}");
        assert_eq!(s.call("POST", &format!("/{name}/_forcemerge"), None).0, 200);
    }
    // Deleted documents are purged by a force merge (`docs.deleted` counts those not yet purged), by one
    // that only expunges deletes too.
    let deleted = |name: &str| {
        let (_, v) = s.call("GET", &format!("/_cat/indices/{name}?format=json"), None);
        v[0]["docs.deleted"].clone()
    };
    for (name, q) in [("one", ""), ("three", "?only_expunge_deletes=true")] {
        assert_eq!(s.call("DELETE", &format!("/{name}/_doc/5"), None).0, 200);
        assert_eq!(deleted(name), json!("1"), "{name}");
        let (status, v) = s.call("POST", &format!("/{name}/_forcemerge{q}"), None);
        assert_eq!(status, 200, "{v}");
        assert_eq!(deleted(name), json!("0"), "{name}");
        assert_eq!(s.call("GET", &format!("/{name}/_doc/5"), None).0, 404);
        assert_eq!(s.call("GET", &format!("/{name}/_count"), None).1["count"], json!(118));
    }
    for q in [
        "max_num_segments=0",
        "max_num_segments=x",
        "only_expunge_deletes=maybe",
        "only_expunge_deletes=true&max_num_segments=1",
    ] {
        assert_es_error(
            &s.call("POST", &format!("/one/_forcemerge?{q}"), None),
            400,
            "illegal_argument_exception",
        );
    }
    assert_eq!(s.call("POST", "/missing/_forcemerge", None).0, 404);
    // The force merge flushed every shard's fresh segment: the pipeline's step counters say so.
    let (_, m) = s.call("GET", "/metrics", None);
    let text = m.as_str().unwrap();
    let sample = |name: &str, labels: &str| -> f64 {
        let prefix = format!("{name}{{{labels}}} ");
        let line =
            text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("{prefix}in {text}"));
        line[prefix.len()..].parse().unwrap()
    };
    for name in ["one", "three"] {
        let flushes = sample("spirit_pipeline_steps_total", &format!("index=\"{name}\",step=\"flush\""));
        assert!(flushes >= 1.0, "{name}: {flushes} flushes");
        let secs = sample("spirit_pipeline_step_seconds_total", &format!("index=\"{name}\",step=\"flush\""));
        assert!(secs >= 0.0 && secs.is_finite(), "{name}: {secs} s flushing");
    }
    s.stop();
}

#[test]
fn a_large_bulk_request_is_analyzed_in_parallel_and_applied_in_order() {
    // 200 items into an existing index take the parallel-analysis path; the same items one request per
    // item (the sequential path) must give the same statuses, results and answers.
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let mut bulk = String::new();
    for i in 0..200 {
        let id = format!("d{}", i % 70); // repeats: updates of earlier items in the same request
        let line = match i % 23 {
            5 => r#"{"n": "not a number"}"#.to_string(),
            9 => r#"{"body": 17, "n": 1.5}"#.to_string(),
            _ => format!(r#"{{"body": "w{} w{} common", "n": {i}}}"#, i % 7, i % 11),
        };
        let action = if i % 31 == 3 { "create" } else { "index" };
        bulk.push_str(&format!("{{\"{action}\": {{\"_id\": \"{id}\"}}}}\n{line}\n"));
    }
    let mut statuses = vec![];
    for name in ["par", "seq"] {
        // Both indexes exist with the same mapping first, so only the request shape differs.
        s.call("PUT", &format!("/{name}"), Some(r#"{"mappings": {"properties": {"n": {"type": "long"}}}}"#));
        let mut st = vec![];
        if name == "par" {
            let (code, v) = s.call("POST", "/par/_bulk", Some(&bulk));
            assert_eq!(code, 200, "{v}");
            for item in v["items"].as_array().unwrap() {
                let (op, body) = item.as_object().unwrap().iter().next().unwrap();
                st.push((op.clone(), body["status"].as_u64().unwrap(), body["result"].clone()));
            }
        } else {
            for pair in bulk.lines().collect::<Vec<_>>().chunks(2) {
                let (code, v) = s.call("POST", "/seq/_bulk", Some(&format!("{}\n{}\n", pair[0], pair[1])));
                assert_eq!(code, 200, "{v}");
                let (op, body) = v["items"][0].as_object().unwrap().iter().next().unwrap();
                st.push((op.clone(), body["status"].as_u64().unwrap(), body["result"].clone()));
            }
        }
        statuses.push(st);
    }
    assert_eq!(statuses[0], statuses[1]);
    assert!(
        statuses[0].iter().any(|(_, st, _)| *st == 400) && statuses[0].iter().any(|(_, st, _)| *st == 409)
    );
    for q in ["common", "w3", "+w2 +w5", "n:[10 TO 150]"] {
        let body = json!({"query": {"query_string": {"query": q}}, "size": 20}).to_string();
        let hits = |name: &str| {
            let (_, v) = s.call("POST", &format!("/{name}/_search"), Some(&body));
            let h: Vec<(Value, Value)> = v["hits"]["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| (h["_id"].clone(), h["_score"].clone()))
                .collect();
            (h, v["hits"]["total"]["value"].clone())
        };
        assert_eq!(hits("par"), hits("seq"), "{q}");
    }
    s.stop();
}

#[test]
fn phrase_slop_finds_near_matches_closest_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    // Four tokens each, so only the phrase frequency orders them.
    for (id, body) in [
        ("exact", "quick fox a b"),
        ("gap", "quick x fox a"),
        ("swap", "fox quick a b"),
        ("far", "quick x y fox"),
    ] {
        let doc = format!(r#"{{"body": "{body}"}}"#);
        assert_eq!(s.call("PUT", &format!("/slop/_doc/{id}"), Some(&doc)).0, 201);
    }
    let ids = |q: &str| {
        let (status, v) = s.call("POST", "/slop/_search", Some(q));
        assert_eq!(status, 200, "{v}");
        let hits = v["hits"]["hits"].as_array().unwrap().clone();
        let ids: Vec<String> = hits.iter().map(|h| h["_id"].as_str().unwrap().to_string()).collect();
        let scores: Vec<f64> = hits.iter().map(|h| h["_score"].as_f64().unwrap()).collect();
        (ids, scores)
    };
    let phrase = |slop: u32| {
        format!(r#"{{"query": {{"match_phrase": {{"body": {{"query": "quick fox", "slop": {slop}}}}}}}}}"#)
    };
    assert_eq!(ids(&phrase(0)).0, ["exact"]);
    assert_eq!(ids(&phrase(1)).0, ["exact", "gap"]);
    // A transposition is two moves, as is a gap of two.
    let (two, scores) = ids(&phrase(2));
    assert_eq!(&two[..2], ["exact", "gap"]);
    let mut rest = two[2..].to_vec();
    rest.sort();
    assert_eq!(rest, ["far", "swap"]);
    assert!(scores[0] > scores[1] && scores[1] > scores[2] && scores[2] == scores[3], "{scores:?}");
    // The query string's `~N` is the same query.
    assert_eq!(ids(r#"{"query": {"query_string": {"query": "body:\"quick fox\"~2"}}}"#), ids(&phrase(2)));
    let (status, v) = s.call(
        "POST",
        "/slop/_search",
        Some(r#"{"query": {"match_phrase": {"body": {"query": "quick fox", "slop": -1}}}}"#),
    );
    assert_eq!(status, 400, "{v}");
}

/// Optimistic concurrency control as the clients use it: `_seq_no` and `_primary_term` from a get, a search
/// hit or a write name the live version; a write or delete with `if_seq_no`/`if_primary_term` goes in only
/// while that version is live, else it is a 409 that writes nothing — on one shard and on three.
#[test]
fn if_seq_no_writes_replace_only_the_version_read() {
    on_one_and_three_shards("occ", "{}", |s| {
        let (status, r) = s.call("PUT", "/occ/_doc/a", Some(r#"{"n": 1}"#));
        assert_eq!(status, 201, "{r}");
        let s1 = r["_seq_no"].as_u64().unwrap();
        let (_, g) = s.call("GET", "/occ/_doc/a", None);
        assert_eq!((g["_seq_no"].as_u64(), g["_primary_term"].as_u64()), (Some(s1), Some(1)), "{g}");
        let (status, r) =
            s.call("PUT", &format!("/occ/_doc/a?if_seq_no={s1}&if_primary_term=1"), Some(r#"{"n": 2}"#));
        assert_eq!((status, r["result"].as_str()), (200, Some("updated")), "{r}");
        let s2 = r["_seq_no"].as_u64().unwrap();
        assert!(s2 > s1);
        // The stale version, another primary term, a missing document: conflicts that write nothing.
        let r = s.call("PUT", &format!("/occ/_doc/a?if_seq_no={s1}&if_primary_term=1"), Some(r#"{"n": 9}"#));
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        let why = r.1["error"]["reason"].as_str().unwrap();
        assert!(
            why.contains(&format!("required seqNo [{s1}]")) && why.contains(&format!("has seqNo [{s2}]")),
            "{why}"
        );
        let r = s.call("PUT", &format!("/occ/_doc/a?if_seq_no={s2}&if_primary_term=2"), Some(r#"{"n": 9}"#));
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        let r = s.call("PUT", "/occ/_doc/none?if_seq_no=0&if_primary_term=1", Some(r#"{"n": 9}"#));
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        assert_eq!(s.call("GET", "/occ/_doc/none", None).0, 404);
        assert_eq!(s.call("GET", "/occ/_doc/a", None).1["_source"], json!({"n": 2}));
        // Conditions that cannot apply are refused.
        let r = s.call("POST", "/occ/_doc?if_seq_no=0&if_primary_term=1", Some(r#"{"n": 9}"#));
        assert_es_error(&r, 400, "action_request_validation_exception");
        let r =
            s.call("PUT", &format!("/occ/_create/b?if_seq_no={s2}&if_primary_term=1"), Some(r#"{"n": 9}"#));
        assert_es_error(&r, 400, "action_request_validation_exception");
        let r = s.call(
            "POST",
            &format!("/occ/_update/a?if_seq_no={s2}&if_primary_term=1&retry_on_conflict=2"),
            Some(r#"{"doc": {"m": 1}}"#),
        );
        assert_es_error(&r, 400, "action_request_validation_exception");
        // Partial updates: with the live version's number, then with the old one.
        let (status, r) = s.call(
            "POST",
            &format!("/occ/_update/a?if_seq_no={s2}&if_primary_term=1"),
            Some(r#"{"doc": {"m": 1}}"#),
        );
        assert_eq!(status, 200, "{r}");
        let s3 = r["_seq_no"].as_u64().unwrap();
        let r = s.call(
            "POST",
            &format!("/occ/_update/a?if_seq_no={s2}&if_primary_term=1"),
            Some(r#"{"doc": {"m": 2}}"#),
        );
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        // A search hit carries the same numbers.
        let (_, r) = s.call(
            "POST",
            "/occ/_search",
            Some(r#"{"query": {"term": {"m": 1}}, "seq_no_primary_term": true, "version": true}"#),
        );
        let hit = &r["hits"]["hits"][0];
        assert_eq!(
            (hit["_seq_no"].as_u64(), hit["_primary_term"].as_u64(), hit["_version"].as_u64()),
            (Some(s3), Some(1), Some(3)),
            "{r}"
        );
        // Conditional deletes.
        let r = s.call("DELETE", &format!("/occ/_doc/a?if_seq_no={s2}&if_primary_term=1"), None);
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        assert_eq!(s.call("GET", "/occ/_doc/a", None).0, 200);
        let (status, r) = s.call("DELETE", &format!("/occ/_doc/a?if_seq_no={s3}&if_primary_term=1"), None);
        assert_eq!((status, r["result"].as_str()), (200, Some("deleted")), "{r}");
        assert_eq!(s.call("GET", "/occ/_doc/a", None).0, 404);
        // Bulk items: each condition checked on its own; a failed one fails only its item.
        s.call("PUT", "/occ/_doc/b", Some(r#"{"n": 1}"#));
        let sb = s.call("GET", "/occ/_doc/b", None).1["_seq_no"].as_u64().unwrap();
        let body = format!(
            "{{\"index\": {{\"_id\": \"b\", \"if_seq_no\": {sb}, \"if_primary_term\": 1}}}}\n{{\"n\": 2}}\n\
             {{\"index\": {{\"_id\": \"b\", \"if_seq_no\": {sb}, \"if_primary_term\": 1}}}}\n{{\"n\": 3}}\n\
             {{\"create\": {{\"_id\": \"b\"}}}}\n{{\"n\": 4}}\n\
             {{\"delete\": {{\"_id\": \"b\", \"if_seq_no\": {sb}, \"if_primary_term\": 1}}}}\n\
             {{\"update\": {{\"_id\": \"b\", \"retry_on_conflict\": 3}}}}\n{{\"doc\": {{\"m\": 5}}}}\n"
        );
        let (status, r) = s.call("POST", "/occ/_bulk", Some(&body));
        assert_eq!(status, 200, "{r}");
        let statuses: Vec<u64> = r["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_object().unwrap().values().next().unwrap()["status"].as_u64().unwrap())
            .collect();
        assert_eq!(statuses, [200, 409, 409, 409, 200], "{r}");
        assert_eq!(s.call("GET", "/occ/_doc/b", None).1["_source"], json!({"n": 2, "m": 5}));
    });
}

/// `_version`: 1 for a new `_id`, one more at every write of it (index, update; a delete reports the next),
/// shown by writes, gets and search hits; external versions write only above the live one and are kept as
/// given; what Elasticsearch refuses is refused — on one shard and on three.
#[test]
fn versions_count_writes_and_external_versions_write_only_newer() {
    on_one_and_three_shards("v", "{}", |s| {
        let version = |r: &(u16, Value)| r.1["_version"].as_u64();
        let r = s.call("PUT", "/v/_doc/a", Some(r#"{"n": 1}"#));
        assert_eq!((r.0, version(&r)), (201, Some(1)), "{}", r.1);
        let r = s.call("PUT", "/v/_doc/a", Some(r#"{"n": 2}"#));
        assert_eq!((r.0, version(&r)), (200, Some(2)), "{}", r.1);
        let r = s.call("POST", "/v/_update/a", Some(r#"{"doc": {"m": 1}}"#));
        assert_eq!((r.1["result"].as_str(), version(&r)), (Some("updated"), Some(3)), "{}", r.1);
        let r = s.call("POST", "/v/_update/a", Some(r#"{"doc": {"m": 1}}"#));
        assert_eq!((r.1["result"].as_str(), version(&r)), (Some("noop"), Some(3)), "{}", r.1);
        assert_eq!(version(&s.call("GET", "/v/_doc/a", None)), Some(3));
        let (_, m) = s.call("POST", "/_mget", Some(r#"{"docs": [{"_index": "v", "_id": "a"}]}"#));
        assert_eq!(m["docs"][0]["_version"], json!(3), "{m}");
        let (_, hits) = s.call("POST", "/v/_search", Some(r#"{"version": true}"#));
        assert_eq!(hits["hits"]["hits"][0]["_version"], json!(3), "{hits}");
        let r = s.call("DELETE", "/v/_doc/a", None);
        assert_eq!((r.0, version(&r)), (200, Some(4)), "{}", r.1);
        let r = s.call("DELETE", "/v/_doc/a", None);
        assert_eq!((r.0, r.1["result"].as_str()), (404, Some("not_found")), "{}", r.1);
        // External versions: kept as given, a write at or below the live one is a conflict.
        let r = s.call("PUT", "/v/_doc/x?version=5&version_type=external", Some(r#"{"n": 1}"#));
        assert_eq!((r.0, version(&r)), (201, Some(5)), "{}", r.1);
        let r = s.call("PUT", "/v/_doc/x?version=5&version_type=external", Some(r#"{"n": 2}"#));
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        assert!(
            r.1["error"]["reason"].as_str().unwrap().contains("current version [5] is higher or equal"),
            "{}",
            r.1
        );
        let r = s.call("PUT", "/v/_doc/x?version=5&version_type=external_gte", Some(r#"{"n": 3}"#));
        assert_eq!((r.0, version(&r)), (200, Some(5)), "{}", r.1);
        let r = s.call("PUT", "/v/_doc/x?version=4&version_type=external_gte", Some(r#"{"n": 4}"#));
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        assert_eq!(s.call("GET", "/v/_doc/x", None).1["_source"], json!({"n": 3}));
        let r = s.call("DELETE", "/v/_doc/x?version=5&version_type=external", None);
        assert_es_error(&r, 409, "version_conflict_engine_exception");
        let r = s.call("DELETE", "/v/_doc/x?version=9&version_type=external", None);
        assert_eq!((r.0, version(&r)), (200, Some(9)), "{}", r.1);
        // What cannot apply is refused.
        for (method, path, body) in [
            ("PUT", "/v/_doc/y?version=3", Some(r#"{"n": 1}"#)),
            ("PUT", "/v/_doc/y?version_type=external", Some(r#"{"n": 1}"#)),
            ("PUT", "/v/_create/y?version=3&version_type=external", Some(r#"{"n": 1}"#)),
            ("POST", "/v/_doc?version=3&version_type=external", Some(r#"{"n": 1}"#)),
            ("POST", "/v/_update/y?version=3&version_type=external", Some(r#"{"doc": {"n": 1}}"#)),
            (
                "PUT",
                "/v/_doc/y?version=3&version_type=external&if_seq_no=1&if_primary_term=1",
                Some(r#"{"n": 1}"#),
            ),
        ] {
            let r = s.call(method, path, body);
            assert_es_error(&r, 400, "action_request_validation_exception");
        }
        let r = s.call("PUT", "/v/_doc/y?version=3&version_type=force", Some(r#"{"n": 1}"#));
        assert_eq!(r.0, 400, "{}", r.1);
        let r =
            s.call("PUT", "/v/_doc/y?version=9007199254740993&version_type=external", Some(r#"{"n": 1}"#));
        assert_es_error(&r, 400, "illegal_argument_exception");
        let r = s.call("PUT", "/v/_mapping", Some(r#"{"properties": {"_version": {"type": "long"}}}"#));
        assert_eq!(r.0, 400, "a hidden column cannot be mapped: {}", r.1);
        // Bulk items carry versions too.
        let body = "{\"index\": {\"_id\": \"z\", \"version\": 3, \"version_type\": \"external\"}}\n{\"n\": 1}\n\
                    {\"index\": {\"_id\": \"z\", \"version\": 3, \"version_type\": \"external\"}}\n{\"n\": 2}\n\
                    {\"index\": {\"_id\": \"z\"}}\n{\"n\": 3}\n";
        let (_, r) = s.call("POST", "/v/_bulk", Some(body));
        let items: Vec<(u64, Option<u64>)> = r["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let i = &i["index"];
                (i["status"].as_u64().unwrap(), i["_version"].as_u64())
            })
            .collect();
        assert_eq!(items, [(201, Some(3)), (409, None), (200, Some(4))], "{r}");
    });
}

/// `ids` (and `term`/`terms` on `_id`): documents by `_id`, each scoring 1 (times a boost), whichever shard
/// and segment holds them, the replaced and deleted versions left out.
#[test]
fn ids_query_finds_documents_by_id() {
    on_one_and_three_shards("ids", "{}", |s| {
        for i in 0..30 {
            s.call(
                "PUT",
                &format!("/ids/_doc/d{i}"),
                Some(&format!(r#"{{"body": "word{}", "n": {i}}}"#, i % 3)),
            );
            if i == 14 {
                // Half the documents in merged segments, half fresh.
                assert_eq!(s.call("POST", "/ids/_forcemerge", None).0, 200);
            }
        }
        s.call("PUT", "/ids/_doc/d4", Some(r#"{"body": "replaced", "n": 104}"#));
        assert_eq!(s.call("DELETE", "/ids/_doc/d5", None).0, 200);
        let hits = |q: &str| hits_by_id(s, "ids", q);
        let one = |ids: &[&str], score: f64| ids.iter().map(|i| (i.to_string(), score)).collect::<Vec<_>>();
        assert_eq!(
            hits(r#"{"query": {"ids": {"values": ["d1", "d20", "d4", "d5", "nope", "d1"]}}}"#),
            one(&["d1", "d20", "d4"], 1.0)
        );
        assert_eq!(hits(r#"{"query": {"ids": {"values": ["d2"], "boost": 2.5}}}"#), one(&["d2"], 2.5));
        assert_eq!(hits(r#"{"query": {"term": {"_id": "d25"}}}"#), one(&["d25"], 1.0));
        assert_eq!(hits(r#"{"query": {"terms": {"_id": ["d7", "d8"]}}}"#), one(&["d7", "d8"], 1.0));
        assert_eq!(hits(r#"{"query": {"ids": {"values": []}}}"#), one(&[], 1.0));
        let (_, r) = s.call("POST", "/ids/_search", Some(r#"{"query": {"ids": {"values": ["d4"]}}}"#));
        assert_eq!(r["hits"]["hits"][0]["_source"]["n"], json!(104), "the live version");
        // Combined: ids as a filter of a scored query, and excluded with must_not.
        let q = r#"{"query": {"bool": {"must": {"match": {"body": "word1"}}, "filter": {"ids": {"values": ["d1", "d2", "d16", "d19"]}}}}}"#;
        assert_eq!(hits(q).iter().map(|h| h.0.as_str()).collect::<Vec<_>>(), ["d1", "d16", "d19"]);
        let (_, r) = s.call(
            "POST",
            "/ids/_count",
            Some(r#"{"query": {"bool": {"must_not": {"ids": {"values": ["d0", "d1"]}}}}}"#),
        );
        assert_eq!(r["count"], json!(27), "30 less a deleted one less two");
        assert_es_error(
            &s.call("POST", "/ids/_search", Some(r#"{"query": {"ids": {"values": "d1"}}}"#)),
            400,
            "parsing_exception",
        );
        assert_es_error(
            &s.call("POST", "/ids/_search", Some(r#"{"query": {"ids": {"values": ["d1"], "type": "x"}}}"#)),
            400,
            "parsing_exception",
        );
    });
}

/// Sorting by several keys (fields with ties and missing values, `_score`, `_doc`) and paging with
/// `search_after` through every match, on one shard and on three: the pages together are the whole order,
/// each hit carries its `sort` values, and the bad forms are 400s.
#[test]
fn several_sort_keys_page_with_search_after() {
    let mappings = r#"{"properties": {"year": {"type": "long"}, "price": {"type": "double"}, "genre": {"type": "keyword"}}}"#;
    on_one_and_three_shards("books", mappings, |s| {
        for i in 0..40 {
            let doc = if i % 7 == 3 {
                format!(r#"{{"title": "book {i}", "price": {}}}"#, (i % 5) as f64 + 0.5)
            } else {
                let genre = ["\"sf\"", "[\"crime\", \"sf\"]", "\"poetry\""][i % 3];
                format!(
                    r#"{{"title": "book {i}", "year": {}, "price": {}, "genre": {genre}}}"#,
                    2000 + i % 4,
                    (i % 5) as f64 + 0.5
                )
            };
            assert_eq!(s.call("PUT", &format!("/books/_doc/b{i}"), Some(&doc)).0, 201);
        }
        // The whole order in one page: year descending (missing last), then price ascending, then insertion.
        let sort = r#"[{"year": "desc"}, {"price": {"order": "asc"}}, {"_doc": "asc"}]"#;
        let (status, all) =
            s.call("POST", "/books/_search", Some(&format!(r#"{{"size": 100, "sort": {sort}}}"#)));
        assert_eq!(status, 200, "{all}");
        let all = all["hits"]["hits"].as_array().unwrap().clone();
        assert_eq!(all.len(), 40);
        let key = |h: &Value| {
            let src = &h["_source"];
            (
                src["year"].as_i64().map_or(i64::MAX, |y| -y),
                (src["price"].as_f64().unwrap() * 2.0) as i64,
                h["sort"][2].as_u64().unwrap(),
            )
        };
        assert!(all.windows(2).all(|w| key(&w[0]) < key(&w[1])), "in order");
        for h in &all {
            assert_eq!(h["sort"][0], h["_source"].get("year").cloned().unwrap_or(Value::Null), "{h}");
            assert_eq!(h["_score"], Value::Null);
        }
        // Pages of 7 through search_after.
        let mut paged = vec![];
        let mut after = Value::Null;
        loop {
            let body = if after.is_null() {
                format!(r#"{{"size": 7, "sort": {sort}}}"#)
            } else {
                format!(r#"{{"size": 7, "sort": {sort}, "search_after": {after}}}"#)
            };
            let (status, r) = s.call("POST", "/books/_search", Some(&body));
            assert_eq!(status, 200, "{r}");
            assert_eq!(r["hits"]["total"]["value"], json!(40));
            let hits = r["hits"]["hits"].as_array().unwrap();
            let Some(last) = hits.last() else { break };
            after = last["sort"].clone();
            paged.extend(hits.iter().map(|h| h["_id"].clone()));
        }
        assert_eq!(paged, all.iter().map(|h| h["_id"].clone()).collect::<Vec<_>>());
        // Missing first, and the score as a later key (scores reported then).
        let (_, r) = s.call(
            "POST",
            "/books/_search",
            Some(r#"{"query": {"match": {"title": "book"}}, "size": 3, "sort": [{"year": {"order": "asc", "missing": "_first"}}, "_score"]}"#),
        );
        let hits = r["hits"]["hits"].as_array().unwrap();
        assert!(hits.iter().all(|h| h["sort"][0].is_null() && h["_score"].as_f64().unwrap() > 0.0), "{r}");
        assert_eq!(hits[0]["sort"][1].as_f64(), hits[0]["_score"].as_f64());
        // A keyword field: its smallest value ascending, its largest descending, missing last; paged by strings.
        let (_, r) = s.call(
            "POST",
            "/books/_search",
            Some(r#"{"size": 100, "sort": [{"genre": "asc"}, {"_doc": "asc"}]}"#),
        );
        let genres: Vec<Value> =
            r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["sort"][0].clone()).collect();
        let count = |g: &str| genres.iter().filter(|x| **x == json!(g)).count();
        assert_eq!((count("crime"), count("poetry"), count("sf")), (11, 11, 12), "{r}");
        assert!(
            genres[..34].windows(2).all(|w| w[0].as_str() <= w[1].as_str())
                && genres[34..].iter().all(Value::is_null)
        );
        let after = &r["hits"]["hits"][10]["sort"];
        let (_, p) = s.call(
            "POST",
            "/books/_search",
            Some(&format!(
                r#"{{"size": 1, "sort": [{{"genre": "asc"}}, {{"_doc": "asc"}}], "search_after": {after}}}"#
            )),
        );
        assert_eq!(p["hits"]["hits"][0]["_id"], r["hits"]["hits"][11]["_id"]);
        let (_, r) = s.call("POST", "/books/_search", Some(r#"{"size": 12, "sort": {"genre": "desc"}}"#));
        assert!(r["hits"]["hits"].as_array().unwrap().iter().all(|h| h["sort"][0] == json!("sf")), "{r}");
        // search_after on a single-key sort, and _doc ascending alone (oldest first).
        let (_, r) = s.call("POST", "/books/_search", Some(r#"{"size": 2, "sort": [{"_doc": "asc"}]}"#));
        let first: Vec<&str> =
            r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap()).collect();
        assert_eq!(first, ["b0", "b1"]);
        let after = &r["hits"]["hits"][1]["sort"];
        let (_, r) = s.call(
            "POST",
            "/books/_search",
            Some(&format!(r#"{{"size": 1, "sort": [{{"_doc": "asc"}}], "search_after": {after}}}"#)),
        );
        assert_eq!(r["hits"]["hits"][0]["_id"], json!("b2"));
        for bad in [
            r#"{"sort": ["year"], "search_after": [1, 2]}"#,
            r#"{"sort": ["year"], "search_after": 2001}"#,
            r#"{"sort": ["year"], "search_after": [{"a": 1}]}"#,
            r#"{"from": 5, "sort": ["year"], "search_after": [2001]}"#,
            r#"{"sort": ["title", "year"]}"#,
        ] {
            let (status, r) = s.call("POST", "/books/_search", Some(bad));
            assert_eq!(status, 400, "{bad}: {r}");
        }
    });
}

/// Typo tolerance: `match` with `fuzziness` (each analyzed token fuzzy, `AUTO` by length) and the `fuzzy`
/// query find near spellings, closer ones scoring higher; bad options are 400s.
#[test]
fn fuzzy_queries_find_near_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let mappings = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}, "n": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/fz", Some(mappings)).0, 200);
    for (i, (body, tag)) in [
        ("the quick brown fox", "Alpha"),
        ("a quack of ducks", "Alpah"),
        ("quickly done", "beta"),
        ("brown bread", "Alpha"),
        ("nothing here", "gamma"),
    ]
    .iter()
    .enumerate()
    {
        s.call(
            "PUT",
            &format!("/fz/_doc/{i}"),
            Some(&format!(r#"{{"body": "{body}", "tag": "{tag}", "n": {i}}}"#)),
        );
    }
    let ids = |q: &str| -> Vec<String> {
        let (status, r) = s.call("POST", "/fz/_search", Some(q));
        assert_eq!(status, 200, "{q}: {r}");
        r["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap().to_string()).collect()
    };
    // "quikc" (5 letters: AUTO allows 1 edit, a swap counts 1) is "quick"; "quack" needs 2.
    assert_eq!(ids(r#"{"query": {"match": {"body": {"query": "quikc", "fuzziness": "AUTO"}}}}"#), ["0"]);
    assert_eq!(
        ids(
            r#"{"query": {"match": {"body": {"query": "quikc", "fuzziness": "AUTO", "fuzzy_transpositions": false}}}}"#
        ),
        Vec::<String>::new()
    );
    // Two edits reach "quack" and "quickly" too; the exact term scores highest.
    let two = ids(r#"{"query": {"fuzzy": {"body": {"value": "quick", "fuzziness": 2}}}}"#);
    assert_eq!(two[0], "0");
    assert_eq!(two.len(), 3);
    // Every token fuzzy, OR by default, AND with the operator.
    assert_eq!(ids(r#"{"query": {"match": {"body": {"query": "quikc brwn", "fuzziness": 1}}}}"#), ["0", "3"]);
    assert_eq!(
        ids(r#"{"query": {"match": {"body": {"query": "quikc brwn", "fuzziness": 1, "operator": "and"}}}}"#),
        ["0"]
    );
    // A prefix that must match exactly.
    assert_eq!(
        ids(r#"{"query": {"fuzzy": {"body": {"value": "xrown", "prefix_length": 1}}}}"#),
        Vec::<String>::new()
    );
    assert_eq!(ids(r#"{"query": {"fuzzy": {"body": "xrown"}}}"#).len(), 2);
    // A keyword value as a whole, case kept.
    let mut k = ids(r#"{"query": {"fuzzy": {"tag": {"value": "Alpha"}}}}"#);
    k.sort();
    assert_eq!(k, ["0", "1", "3"]);
    // Over several fields, and in a query string (`~` after a word).
    let mut m =
        ids(r#"{"query": {"multi_match": {"query": "Alpah", "fields": ["body", "tag"], "fuzziness": 1}}}"#);
    m.sort();
    assert_eq!(m, ["0", "1", "3"]);
    assert_eq!(ids(r#"{"query": {"query_string": {"query": "body:quikc~1"}}}"#), ["0"]);
    assert_eq!(ids(r#"{"query": {"query_string": {"query": "body:quikc~0"}}}"#), Vec::<String>::new());
    for bad in [
        r#"{"query": {"multi_match": {"query": "x", "type": "phrase", "fuzziness": 1}}}"#,
        r#"{"query": {"query_string": {"query": "quikc~3"}}}"#,
        r#"{"query": {"match": {"body": {"query": "x", "fuzziness": 3}}}}"#,
        r#"{"query": {"match": {"body": {"query": "x", "fuzziness": "AUTO:1,2"}}}}"#,
        r#"{"query": {"fuzzy": {"body": {"value": "x", "max_expansions": 0}}}}"#,
        r#"{"query": {"fuzzy": {"n": {"value": "1"}}}}"#,
        r#"{"query": {"fuzzy": {"body": {"value": "x", "nope": 1}}}}"#,
    ] {
        let (status, r) = s.call("POST", "/fz/_search", Some(bad));
        assert_eq!(status, 400, "{bad}: {r}");
    }
    s.stop();
}

/// `similarity.default` at creation sets BM25's `k1` and `b` for every field: the scores follow them (here
/// `b` = 0, so the field's length plays no part), `_settings` reports them, and they survive a restart;
/// values outside Lucene's ranges and similarities spirit lacks are refused and create nothing.
#[test]
fn bm25_parameters_from_the_default_similarity_score_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let body = r#"{"settings": {"index": {"similarity": {"default": {"type": "BM25", "k1": 2.0, "b": 0}}}}}"#;
    assert_eq!(s.call("PUT", "/sim", Some(body)).0, 200);
    assert_eq!(s.call("PUT", "/plain", None).0, 200);
    for index in ["sim", "plain"] {
        let docs = ["apple apple banana", "apple cherry cherry cherry cherry cherry cherry", "banana"];
        for (i, text) in docs.iter().enumerate() {
            let doc = format!(r#"{{"body": "{text}"}}"#);
            assert_eq!(s.call("PUT", &format!("/{index}/_doc/{i}"), Some(&doc)).0, 201);
        }
    }
    // Three documents, two with `apple`: idf = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)); with b = 0 a score is
    // idf * tf / (tf + k1) whatever the length.
    let idf = (1.0f64 + 1.5 / 2.5).ln();
    let expected = vec![("0".to_string(), idf * 2.0 / 4.0), ("1".to_string(), idf / 3.0)];
    let q = r#"{"query": {"match": {"body": "apple"}}}"#;
    let check = |s: &TestServer| {
        let got = hits_by_id(s, "sim", q);
        assert_eq!(got.len(), 2, "{got:?}");
        for ((id, score), (eid, escore)) in got.iter().zip(&expected) {
            assert_eq!(id, eid);
            assert!((score - escore).abs() < 1e-5 * escore, "{id}: {score} against {escore}");
        }
        // The defaults (k1 = 1.2, b = 0.75) score the long document's single `apple` lower still.
        let plain = hits_by_id(s, "plain", q);
        assert!(plain[1].1 < idf / (1.0 + 1.2), "{plain:?}");
        let (_, v) = s.call("GET", "/sim/_settings", None);
        let sim = &v["sim"]["settings"]["index"]["similarity"]["default"];
        assert_eq!(sim["type"], json!("BM25"), "{v}");
        assert_eq!(sim["k1"].as_str().and_then(|x| x.parse::<f64>().ok()), Some(2.0), "{v}");
        assert_eq!(sim["b"].as_str().and_then(|x| x.parse::<f64>().ok()), Some(0.0), "{v}");
        let (_, v) = s.call("GET", "/plain/_settings", None);
        assert_eq!(v["plain"]["settings"]["index"]["similarity"]["default"]["k1"], json!("1.2"), "{v}");
    };
    check(&s);
    let engine = s.stop();
    engine.close().unwrap();
    drop(engine);
    let s = TestServer::start(dir.path(), ServerConfig::default());
    check(&s);
    for (settings, what) in [
        (r#"{"similarity": {"default": {"b": 1.5}}}"#, "illegal b value"),
        (r#"{"similarity": {"default": {"k1": -1}}}"#, "illegal k1 value"),
        (r#"{"similarity": {"default": {"k1": "lots"}}}"#, "similarity.default.k1"),
        (r#"{"similarity": {"default": {"type": "classic"}}}"#, "classic"),
        (r#"{"similarity": {"default": {"discount_overlaps": "maybe"}}}"#, "discount_overlaps"),
        (r#"{"similarity": {"default": {"frobnicate": 1}}}"#, "frobnicate"),
        (r#"{"similarity": {"mine": {"type": "BM25", "k1": 1}}}"#, "similarity.mine"),
    ] {
        let r = s.call("PUT", "/bad", Some(&format!(r#"{{"settings": {settings}}}"#)));
        assert_es_error(&r, 400, "illegal_argument_exception");
        assert!(r.1["error"]["reason"].as_str().unwrap().contains(what), "{settings}: {}", r.1);
        assert_eq!(s.call("HEAD", "/bad", None).0, 404, "{settings}");
    }
    let ok = r#"{"settings": {"index.similarity.default.type": "bm25", "index.similarity.default.discount_overlaps": true}}"#;
    assert_eq!(s.call("PUT", "/ok", Some(ok)).0, 200);
    s.stop();
}

/// `wildcard` queries (and `?`/`*` inside `query_string`): `*` any run, `?` one character; text fields match
/// lowercased, keyword fields by case unless `case_insensitive`; highlighting marks the matching tokens; a
/// numeric field or a pattern that expands to too many terms is a 400.
#[test]
fn wildcard_queries_match_terms_by_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}, "n": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/w", Some(m)).0, 200);
    let docs = [
        ("1", "testing the text", "Red", 1),
        ("2", "a tent and a test", "red", 2),
        ("3", "nothing here", "blue", 3),
        ("4", "toast at last", "RED", 4),
    ];
    put_docs(
        &s,
        "w",
        docs.map(|(id, body, tag, n)| (id, format!(r#"{{"body": "{body}", "tag": "{tag}", "n": {n}}}"#))),
    );
    let ids = |q: &str| hit_ids(&s, "w", q);
    assert_eq!(ids(r#"{"query": {"wildcard": {"body": "te?t"}}}"#), ["1", "2"]);
    assert_eq!(
        ids(r#"{"query": {"wildcard": {"body": "TE*T"}}}"#),
        ["1", "2"],
        "text fields match lowercased"
    );
    assert_eq!(ids(r#"{"query": {"wildcard": {"body": {"value": "t*st"}}}}"#), ["2", "4"]);
    assert_eq!(ids(r#"{"query": {"wildcard": {"body": "*ing"}}}"#), ["1", "3"], "testing, nothing");
    assert_eq!(ids(r#"{"query": {"wildcard": {"tag": "r?d"}}}"#), ["2"]);
    assert_eq!(
        ids(r#"{"query": {"wildcard": {"tag": {"value": "r?d", "case_insensitive": true}}}}"#),
        ["1", "2", "4"]
    );
    assert_eq!(ids(r#"{"query": {"wildcard": {"tag": "*"}}}"#), ["1", "2", "3", "4"]);
    assert_eq!(ids(r#"{"query": {"query_string": {"query": "body:t??t AND tag:red"}}}"#), ["2"]);
    // Constant score (as a prefix), boosted as asked.
    let (_, v) = s.call(
        "POST",
        "/w/_search",
        Some(r#"{"query": {"wildcard": {"body": {"value": "te?t", "boost": 3}}}}"#),
    );
    assert_eq!(v["hits"]["hits"][0]["_score"], json!(3.0), "{v}");
    let (_, v) = s.call(
        "POST",
        "/w/_search",
        Some(r#"{"query": {"wildcard": {"body": "te?t"}}, "highlight": {"fields": {"body": {}}}}"#),
    );
    let hl: Vec<String> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["highlight"]["body"][0].as_str().unwrap().to_string())
        .collect();
    assert!(hl.contains(&"a <em>tent</em> and a <em>test</em>".to_string()), "{hl:?}");
    assert!(hl.contains(&"testing the <em>text</em>".to_string()), "{hl:?}");
    let r = s.call("POST", "/w/_search", Some(r#"{"query": {"wildcard": {"n": "1*"}}}"#));
    assert_es_error(&r, 400, "illegal_argument_exception");
    // Past 4096 terms a pattern is refused, as Lucene refuses too many clauses.
    let mut bulk = String::new();
    for i in 0..4200 {
        bulk += &format!("{{\"index\": {{}}}}\n{{\"body\": \"word{i:05}\"}}\n");
    }
    assert_eq!(s.call("POST", "/w/_bulk", Some(&bulk)).0, 200);
    let r = s.call("POST", "/w/_search", Some(r#"{"query": {"wildcard": {"body": "word*"}}}"#));
    assert_es_error(&r, 400, "illegal_argument_exception");
    assert!(r.1["error"]["reason"].as_str().unwrap().contains("more than 4096 terms"), "{}", r.1);
    let (_, c) = s.call("POST", "/w/_count", Some(r#"{"query": {"wildcard": {"body": "word0001?"}}}"#));
    assert_eq!(c["count"], json!(10));
    s.stop();
}

/// Searching several indices at once (`a,b/_search`, `logs-*/_search`, `/_search`, and `_count`): each
/// index's best hits merged in the request's order, totals added up; aggregations over all of them at once.
#[test]
fn searches_span_several_indices() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}, "n": {"type": "long"}, "tag": {"type": "keyword"}}}}"#;
    for (index, docs) in [
        ("logs-a", vec![("1", "red fox", 5, "x"), ("2", "red red red", 1, "y"), ("3", "blue", 9, "x")]),
        ("logs-b", vec![("1", "red", 3, "z"), ("4", "red dog", 7, "x")]),
        ("other", vec![("9", "red cat", 2, "w")]),
    ] {
        assert_eq!(s.call("PUT", &format!("/{index}"), Some(m)).0, 200);
        let sources = docs
            .into_iter()
            .map(|(id, body, n, tag)| (id, format!(r#"{{"body": "{body}", "n": {n}, "tag": "{tag}"}}"#)));
        put_docs(&s, index, sources);
    }
    let hits = |path: &str, body: &str| -> (Value, Vec<(String, String)>) {
        let (status, v) = s.call("POST", path, Some(body));
        assert_eq!(status, 200, "{path} {body}: {v}");
        let list = v["hits"]["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h["_index"].as_str().unwrap().to_string(), h["_id"].as_str().unwrap().to_string()))
            .collect();
        (v, list)
    };
    let pair = |i: &str, id: &str| (i.to_string(), id.to_string());
    // By field across indices: ascending n, then the page after the first two.
    let by_n = r#"{"query": {"match": {"body": "red"}}, "sort": [{"n": "asc"}]}"#;
    let (v, all) = hits("/logs-*/_search", by_n);
    assert_eq!(all, [pair("logs-a", "2"), pair("logs-b", "1"), pair("logs-a", "1"), pair("logs-b", "4")]);
    assert_eq!(v["hits"]["total"], json!({"value": 4, "relation": "eq"}));
    assert_eq!(v["_shards"]["total"], v["_shards"]["successful"]);
    let (_, page) = hits(
        "/logs-*/_search",
        r#"{"query": {"match": {"body": "red"}}, "sort": [{"n": "asc"}], "from": 2, "size": 1}"#,
    );
    assert_eq!(page, [pair("logs-a", "1")]);
    // By score: each hit scored in its own index, merged best first.
    let (v, scored) = hits("/logs-a,other/_search", r#"{"query": {"match": {"body": "red"}}}"#);
    assert_eq!(scored.len(), 3);
    let scores: Vec<f64> =
        v["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(v["hits"]["max_score"].as_f64(), Some(scores[0]));
    for (index, id) in &scored {
        let (_, one) =
            hits(&format!("/{index}/_search"), &format!(r#"{{"query": {{"ids": {{"values": ["{id}"]}}}}}}"#));
        assert_eq!(one.len(), 1);
    }
    // Every index, by a keyword then a number; `_count` adds up; a pattern matching nothing is empty.
    let (_, every) = hits("/_search", r#"{"sort": [{"tag": "desc"}, {"n": "asc"}], "size": 3}"#);
    assert_eq!(every, [pair("logs-b", "1"), pair("logs-a", "2"), pair("logs-a", "1")]);
    assert_eq!(
        s.call("POST", "/_all/_count", Some(r#"{"query": {"match": {"body": "red"}}}"#)).1["count"],
        json!(5)
    );
    assert_eq!(s.call("GET", "/logs-*,other/_count", None).1["count"], json!(6));
    assert_eq!(s.call("GET", "/_count", None).1["count"], json!(6));
    let ms = "{\"index\": \"logs-*\"}\n{\"query\": {\"match\": {\"body\": \"red\"}}}\n";
    let (_, v) = s.call("POST", "/_msearch", Some(ms));
    assert_eq!(v["responses"][0]["hits"]["total"]["value"], json!(4), "{v}");
    let (v, none) = hits("/nothing-*/_search", "{}");
    assert!(none.is_empty());
    assert_eq!(v["hits"]["total"]["value"], json!(0));
    // Aggregations over no index: over no documents.
    let (v, _) = hits(
        "/nothing-*/_search",
        r#"{"aggs": {"t": {"terms": {"field": "tag"}}, "m": {"max": {"field": "n"}}, "c": {"cardinality": {"field": "tag"}}}}"#,
    );
    assert_eq!(
        v["aggregations"],
        json!({"t": {"doc_count_error_upper_bound": 0, "sum_other_doc_count": 0, "buckets": []},
        "m": {"value": null}, "c": {"value": 0}}),
        "{v}"
    );
    // A missing plain name is a 404.
    let r = s.call("POST", "/logs-a,nope/_search", Some("{}"));
    assert_es_error(&r, 404, "index_not_found_exception");
    // Aggregations over several indices count every index's documents, as one index holding them all.
    let aggs = r#"{"size": 0, "aggs": {
        "t": {"terms": {"field": "tag", "size": 2}, "aggs": {"s": {"sum": {"field": "n"}}}},
        "red": {"filter": {"match": {"body": "red"}}, "aggs": {"top": {"max": {"field": "n"}}}},
        "tags": {"cardinality": {"field": "tag"}}, "p": {"percentiles": {"field": "n", "percents": [50]}}}}"#;
    let (v, none) = hits("/logs-*/_search", aggs);
    assert!(none.is_empty());
    assert_eq!(v["hits"]["total"]["value"], json!(5));
    let a = &v["aggregations"];
    assert_eq!(
        a["t"],
        json!({"doc_count_error_upper_bound": 0, "sum_other_doc_count": 1, "buckets": [
            {"key": "x", "doc_count": 3, "s": {"value": 21.0}}, {"key": "y", "doc_count": 1, "s": {"value": 1.0}}]}),
        "{v}"
    );
    assert_eq!(a["red"], json!({"doc_count": 4, "top": {"value": 7.0}}), "{v}");
    assert_eq!(a["tags"]["value"], json!(3), "{v}");
    assert_eq!(a["p"]["values"]["50.0"], json!(5.0), "{v}");
    // Through a filtered alias: its index's documents that pass the filter, beside another index's.
    let xs =
        r#"{"actions": [{"add": {"index": "logs-b", "alias": "xs", "filter": {"term": {"tag": "x"}}}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(xs)).0, 200);
    let (v, _) = hits("/xs,other/_search", r#"{"size": 0, "aggs": {"t": {"terms": {"field": "tag"}}}}"#);
    assert_eq!(
        v["aggregations"]["t"]["buckets"],
        json!([{"key": "w", "doc_count": 1}, {"key": "x", "doc_count": 1}]),
        "{v}"
    );
    // A field unmapped in one index aggregates the others'; mapped as a number in one and a keyword in
    // another, it is refused by name.
    let m2 = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/mixed", Some(m2)).0, 200);
    put_docs(&s, "mixed", [("1", r#"{"body": "red", "tag": 3}"#.to_string())]);
    let (v, _) = hits("/logs-a,mixed/_search", r#"{"size": 0, "aggs": {"s": {"stats": {"field": "n"}}}}"#);
    assert_eq!(v["aggregations"]["s"]["count"], json!(3), "{v}");
    assert_eq!(v["aggregations"]["s"]["sum"], json!(15.0), "{v}");
    let r = s.call("POST", "/logs-a,mixed/_search", Some(r#"{"aggs": {"t": {"terms": {"field": "tag"}}}}"#));
    assert_es_error(&r, 400, "illegal_argument_exception");
    assert!(
        r.1["error"]["reason"].as_str().unwrap().contains("[keyword] in one index and [long]"),
        "{}",
        r.1
    );
    // One index through a pattern answers as that index does, aggregations included.
    let r = s.call("POST", "/oth*/_search", Some(r#"{"aggs": {"t": {"terms": {"field": "tag"}}}}"#));
    assert_eq!(r.1["aggregations"]["t"]["buckets"][0]["key"], json!("w"), "{}", r.1);
    s.stop();
}

/// `match_phrase_prefix`: the analyzed text as a phrase whose last token matches the first `max_expansions`
/// terms (in term order) starting with it; one token alone is the OR of its expansions.
#[test]
fn match_phrase_prefix_makes_the_last_position_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}}}}"#;
    assert_eq!(s.call("PUT", "/pp", Some(m)).0, 200);
    let docs = [
        ("1", "quick brown fox"),
        ("2", "quick brown foxes jump"),
        ("3", "quick blue fog"),
        ("4", "the brown fox was quick"),
    ];
    put_docs(&s, "pp", docs.map(|(id, body)| (id, format!(r#"{{"body": "{body}", "tag": "t"}}"#))));
    let ids = |q: &str| hit_ids(&s, "pp", q);
    assert_eq!(ids(r#"{"query": {"match_phrase_prefix": {"body": "Quick Brown F"}}}"#), ["1", "2"]);
    assert_eq!(ids(r#"{"query": {"match_phrase_prefix": {"body": {"query": "quick b"}}}}"#), ["1", "2", "3"]);
    assert_eq!(
        ids(r#"{"query": {"match_phrase_prefix": {"body": {"query": "quick b", "max_expansions": 1}}}}"#),
        ["3"],
        "only the first expansion in term order: blue before brown"
    );
    assert_eq!(ids(r#"{"query": {"match_phrase_prefix": {"body": "brown fox"}}}"#), ["1", "2", "4"]);
    assert_eq!(ids(r#"{"query": {"match_phrase_prefix": {"body": "qui"}}}"#), ["1", "2", "3", "4"]);
    assert_eq!(ids(r#"{"query": {"match_phrase_prefix": {"body": "quick brown x"}}}"#), Vec::<String>::new());
    // With slop: "quick f" needs one move to reach "quick brown fox", and three for "the brown fox was
    // quick" (fox two positions before quick: phrase positions 1 and 4).
    let sloppy = |slop: u32| {
        ids(&format!(
            r#"{{"query": {{"match_phrase_prefix": {{"body": {{"query": "quick f", "slop": {slop}}}}}}}}}"#
        ))
    };
    assert_eq!(sloppy(0), Vec::<String>::new());
    assert_eq!(sloppy(1), ["1", "2", "3"]);
    assert_eq!(sloppy(2), ["1", "2", "3"]);
    assert_eq!(sloppy(3), ["1", "2", "3", "4"]);
    // multi_match of type phrase_prefix: over the default fields, the keyword one left out as a phrase's is.
    assert_eq!(
        ids(r#"{"query": {"multi_match": {"query": "quick brown f", "type": "phrase_prefix"}}}"#),
        ["1", "2"]
    );
    assert_eq!(
        ids(
            r#"{"query": {"multi_match": {"query": "brown f", "type": "bool_prefix", "fields": ["body"], "operator": "and"}}}"#
        ),
        ["1", "2", "4"]
    );
    // Highlighted: the phrase's terms and what the prefix matched.
    let (_, v) = s.call(
        "POST",
        "/pp/_search",
        Some(r#"{"query": {"match_phrase_prefix": {"body": "brown f"}}, "highlight": {"fields": {"body": {}}}}"#),
    );
    let hl: Vec<&str> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["highlight"]["body"][0].as_str().unwrap())
        .collect();
    assert!(hl.contains(&"quick <em>brown</em> <em>fox</em>"), "{hl:?}");
    assert!(hl.contains(&"quick <em>brown</em> <em>foxes</em> jump"), "{hl:?}");
    for (q, status) in [
        (r#"{"match_phrase_prefix": {"body": {"query": "a b", "slop": -1}}}"#, 400),
        (r#"{"match_phrase_prefix": {"body": {"query": "a b", "max_expansions": 0}}}"#, 400),
        (r#"{"match_phrase_prefix": {"body": {"query": "a b", "max_expansions": 5000}}}"#, 400),
        (r#"{"match_phrase_prefix": {"body": {"query": "a b", "analyzer": "nope"}}}"#, 400),
        (r#"{"match_phrase_prefix": {"tag": "t"}}"#, 400),
    ] {
        let r = s.call("POST", "/pp/_search", Some(&format!(r#"{{"query": {q}}}"#)));
        assert_eq!(r.0, status, "{q}: {}", r.1);
    }
    s.stop();
}

/// `regexp` (and `/.../` in query strings): Lucene's syntax matching whole terms, not analyzed, with
/// `case_insensitive` and `flags`; Lucene's operators the engine has no equivalent for are refused by name.
#[test]
fn regexp_queries_match_whole_terms() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}, "n": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/re", Some(m)).0, 200);
    let docs = [
        ("1", "jonathan wrote", "Red-1", 1),
        ("2", "johnathon read", "red-2", 2),
        ("3", "john and a+b", "blue", 3),
        ("4", "nathan was here", "RED-3", 4),
    ];
    put_docs(
        &s,
        "re",
        docs.map(|(id, body, tag, n)| (id, format!(r#"{{"body": "{body}", "tag": "{tag}", "n": {n}}}"#))),
    );
    let ids = |q: &str| hit_ids(&s, "re", q);
    assert_eq!(ids(r#"{"query": {"regexp": {"body": "joh?n(ath[oa]n)"}}}"#), ["1", "2"]);
    assert_eq!(ids(r#"{"query": {"regexp": {"body": {"value": "nath.*"}}}}"#), ["4"], "whole terms only");
    assert_eq!(ids(r#"{"query": {"regexp": {"body": "JOHN"}}}"#), Vec::<String>::new(), "not analyzed");
    assert_eq!(ids(r#"{"query": {"regexp": {"body": {"value": "JOHN", "case_insensitive": true}}}}"#), ["3"]);
    assert_eq!(ids(r#"{"query": {"regexp": {"tag": "red-\\d"}}}"#), ["2"]);
    assert_eq!(
        ids(r#"{"query": {"regexp": {"tag": {"value": "red-[13]", "case_insensitive": true}}}}"#),
        ["1", "4"]
    );
    assert_eq!(ids(r#"{"query": {"regexp": {"tag": "@"}}}"#), ["1", "2", "3", "4"], "'@' is any string");
    assert_eq!(
        ids(r#"{"query": {"regexp": {"tag": {"value": "b.*#", "flags": "EMPTY"}}}}"#),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(r#"{"query": {"regexp": {"tag": {"value": "blue|red-2", "flags": "NONE"}}}}"#),
        ["2", "3"]
    );
    assert_eq!(ids(r#"{"query": {"query_string": {"query": "body:/joh?n.*/ AND tag:blue"}}}"#), ["3"]);
    assert_eq!(
        ids(r#"{"query": {"query_string": {"query": "/.*than/", "default_field": "body"}}}"#),
        ["1", "4"]
    );
    // Constant score, boosted as asked; highlighted.
    let (_, v) = s.call(
        "POST",
        "/re/_search",
        Some(r#"{"query": {"regexp": {"body": {"value": "jo.*", "boost": 2}}}, "highlight": {"fields": {"body": {}}}}"#),
    );
    assert_eq!(v["hits"]["hits"][0]["_score"], json!(2.0), "{v}");
    let hl: Vec<&str> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["highlight"]["body"][0].as_str().unwrap())
        .collect();
    assert!(hl.contains(&"<em>jonathan</em> wrote"), "{hl:?}");
    // Refusals: Lucene's operators with no equivalent, malformed patterns, bad parameters, numeric fields.
    for (q, reason) in [
        (r#"{"regexp": {"body": "a~b"}}"#, "complement"),
        (r#"{"regexp": {"body": "a&b"}}"#, "intersection"),
        (r#"{"regexp": {"body": "<1-20>"}}"#, "interval"),
        (r#"{"regexp": {"body": "(ab"}}"#, "invalid regular expression"),
        (r#"{"regexp": {"n": "1.*"}}"#, "not supported on long field"),
    ] {
        let r = s.call("POST", "/re/_search", Some(&format!(r#"{{"query": {q}}}"#)));
        assert_es_error(&r, 400, "illegal_argument_exception");
        assert!(r.1["error"]["reason"].as_str().unwrap().contains(reason), "{q}: {}", r.1);
    }
    for q in [
        r#"{"regexp": {"body": {"value": "a", "flags": "BOGUS"}}}"#,
        r#"{"regexp": {"body": {"value": "a", "flags": 3}}}"#,
        r#"{"regexp": {"body": {"value": "a", "case_insensitive": "yes"}}}"#,
        r#"{"regexp": {"body": {"value": "a", "max_determinized_states": 0}}}"#,
        r#"{"regexp": {"body": {"value": "a", "flavour": 1}}}"#,
    ] {
        let r = s.call("POST", "/re/_search", Some(&format!(r#"{{"query": {q}}}"#)));
        assert_eq!(r.0, 400, "{q}: {}", r.1);
    }
    let r = s.call("POST", "/re/_search", Some(r#"{"query": {"query_string": {"query": "body:/jo.*"}}}"#));
    assert_eq!(r.0, 400, "an unclosed '/' is a syntax error: {}", r.1);
    s.stop();
}

/// `match_bool_prefix`: every token a term but the last, a prefix — of its analyzed form, as Elasticsearch
/// analyzes the text first (stemmed on an english field, a trailing stop word dropped).
#[test]
fn match_bool_prefix_makes_the_last_token_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}, "en": {"type": "text", "analyzer": "english"}}}}"#;
    assert_eq!(s.call("PUT", "/mb", Some(m)).0, 200);
    let docs = [
        ("1", "quick brown fox", "the runner"),
        ("2", "quick brown foxes jump", "she runs"),
        ("3", "slow brown dog", "a long walk"),
        ("4", "quick fog", "running late"),
    ];
    put_docs(&s, "mb", docs.map(|(id, body, en)| (id, format!(r#"{{"body": "{body}", "en": "{en}"}}"#))));
    let ids = |q: &str| hit_ids(&s, "mb", q);
    assert_eq!(
        ids(r#"{"query": {"match_bool_prefix": {"body": {"query": "quick fo", "operator": "and"}}}}"#),
        ["1", "2", "4"]
    );
    assert_eq!(
        ids(r#"{"query": {"match_bool_prefix": {"body": {"query": "brown fox", "operator": "and"}}}}"#),
        ["1", "2"]
    );
    assert_eq!(ids(r#"{"query": {"match_bool_prefix": {"body": "slow fo"}}}"#), ["1", "2", "3", "4"]);
    // `Running` analyzes to `run`: the prefix matches run (runs, running) and runner; `the` after it is a
    // stop word, dropped before the last token is taken.
    assert_eq!(ids(r#"{"query": {"match_bool_prefix": {"en": "Running the"}}}"#), ["1", "2", "4"]);
    // The term clauses score by BM25, the prefix clause a constant 1, as Elasticsearch's prefix query.
    let (_, v) =
        s.call("POST", "/mb/_search", Some(r#"{"query": {"match_bool_prefix": {"body": "dog fo"}}}"#));
    for h in v["hits"]["hits"].as_array().unwrap() {
        let score = h["_score"].as_f64().unwrap();
        match h["_id"].as_str().unwrap() {
            "3" => assert!(score > 0.0 && score < 1.0, "dog alone: {v}"),
            _ => assert_eq!(score, 1.0, "a fo* term alone: {v}"),
        }
    }
    s.stop();
}

/// A query's `analyzer` (`match`, `match_phrase`, `multi_match`, `query_string`...): the query text is
/// analyzed by it instead of the field's analyzer — a built-in one, or one the index defines — on text and
/// keyword fields; highlighting looks for the same terms; an unknown name is a 400.
#[test]
fn a_query_analyzer_replaces_the_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"settings": {"analysis": {"analyzer": {"stemmed": {"type": "custom", "tokenizer": "standard",
        "filter": ["lowercase", "porter_stem"]}}}},
        "mappings": {"properties": {"body": {"type": "text"}, "en": {"type": "text", "analyzer": "english"},
        "tag": {"type": "keyword"}}}}"#;
    assert_eq!(s.call("PUT", "/qa", Some(m)).0, 200);
    let docs = [("1", "running dogs", "Running dogs", "big"), ("2", "the run", "a run", "red")];
    put_docs(
        &s,
        "qa",
        docs.map(|(id, b, e, t)| (id, format!(r#"{{"body": "{b}", "en": "{e}", "tag": "{t}"}}"#))),
    );
    let ids = |q: &str| hit_ids(&s, "qa", &format!(r#"{{"query": {q}}}"#));
    // The english field stems "running" to "run", which both documents hold there.
    assert_eq!(ids(r#"{"match": {"en": "running"}}"#), ["1", "2"]);
    // The standard analyzer keeps "running", which no document holds in the stemmed field.
    assert!(ids(r#"{"match": {"en": {"query": "running", "analyzer": "standard"}}}"#).is_empty());
    // The body field is not stemmed: "running" is only document 1's; stemmed by the index's own analyzer
    // (or english), the query looks for "run", only document 2's.
    assert_eq!(ids(r#"{"match": {"body": "running"}}"#), ["1"]);
    assert_eq!(ids(r#"{"match": {"body": {"query": "running", "analyzer": "stemmed"}}}"#), ["2"]);
    assert_eq!(ids(r#"{"match_phrase": {"body": {"query": "the running", "analyzer": "english"}}}"#), ["2"]);
    // A phrase of two tokens: with the field's english analyzer "run dog" matches document 1's "Running
    // dogs"; the standard analyzer keeps "running dogs", which the stemmed field does not hold.
    assert_eq!(ids(r#"{"match_phrase": {"en": "running dogs"}}"#), ["1"]);
    assert!(ids(r#"{"match_phrase": {"en": {"query": "running dogs", "analyzer": "standard"}}}"#).is_empty());
    // On a keyword field through a query string.
    assert_eq!(ids(r#"{"query_string": {"query": "tag:BIG", "analyzer": "standard"}}"#), ["1"]);
    assert_eq!(
        ids(r#"{"multi_match": {"query": "runs", "fields": ["body"], "analyzer": "english"}}"#),
        ["2"]
    );
    assert_eq!(ids(r#"{"query_string": {"query": "body:runs", "analyzer": "english"}}"#), ["2"]);
    // A keyword field: its whole value without an analyzer, the analyzer's tokens with one.
    assert!(ids(r#"{"match": {"tag": "BIG"}}"#).is_empty());
    assert_eq!(ids(r#"{"match": {"tag": {"query": "BIG Red", "analyzer": "standard"}}}"#), ["1", "2"]);
    // Highlighting looks for the terms the query's analyzer made.
    let (_, v) = s.call(
        "POST",
        "/qa/_search",
        Some(r#"{"query": {"match": {"body": {"query": "runs", "analyzer": "english"}}}, "highlight": {"fields": {"body": {}}}}"#),
    );
    assert_eq!(v["hits"]["hits"][0]["highlight"]["body"][0], json!("the <em>run</em>"), "{v}");
    // A field's `search_analyzer` (the index's own "stemmed", kept as the built-in "stemming" it equals)
    // analyzes its queries, its `analyzer` its values: the query "running" looks for "run". `copy_to` is
    // refused by name.
    let m =
        r#"{"properties": {"sa": {"type": "text", "analyzer": "standard", "search_analyzer": "stemmed"}}}"#;
    assert_eq!(s.call("PUT", "/qa/_mapping", Some(m)).0, 200);
    assert_eq!(s.call("PUT", "/qa/_doc/3?refresh=true", Some(r#"{"sa": "run running"}"#)).0, 201);
    assert_eq!(ids(r#"{"match": {"sa": "running"}}"#), ["3"]);
    assert!(ids(r#"{"match_phrase": {"sa": "run running"}}"#).is_empty());
    assert_eq!(ids(r#"{"match_phrase": {"sa": {"query": "run running", "analyzer": "standard"}}}"#), ["3"]);
    let (_, v) = s.call("GET", "/qa/_mapping", None);
    assert_eq!(v["qa"]["mappings"]["properties"]["sa"]["search_analyzer"], json!("stemming"), "{v}");
    let copy = r#"{"properties": {"m": {"type": "text", "copy_to": "all"}}}"#;
    let r = s.call("PUT", "/qa/_mapping", Some(copy));
    assert_eq!(r.0, 400, "{}", r.1);
    assert!(r.1["error"]["reason"].as_str().unwrap().contains("[copy_to] is not supported"), "{}", r.1);
    let r = s.call(
        "POST",
        "/qa/_search",
        Some(r#"{"query": {"match": {"body": {"query": "x", "analyzer": "nope"}}}}"#),
    );
    assert_eq!(r.0, 400, "{}", r.1);
    assert!(r.1["error"]["reason"].as_str().unwrap().contains("failed to find analyzer [nope]"), "{}", r.1);
    s.stop();
}

/// Multi-fields (mapping `fields`): `title.raw` and `title.en` index every `title` value as a keyword and as
/// english text, each a field of its own to queries, sorts, aggregations, highlighting and `_field_caps`;
/// `_mapping` nests them under their parent.
#[test]
fn multi_fields_index_their_parents_values() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"title": {"type": "text", "fields": {
        "raw": {"type": "keyword"}, "en": {"type": "text", "analyzer": "english"}}}}}}"#;
    assert_eq!(s.call("PUT", "/mf", Some(m)).0, 200);
    let docs = [("1", "Running Dogs"), ("2", "a dog runs"), ("3", "Running Dogs")];
    put_docs(&s, "mf", docs.map(|(id, t)| (id, format!(r#"{{"title": "{t}"}}"#))));
    let ids = |q: &str| hit_ids(&s, "mf", &format!(r#"{{"query": {q}}}"#));
    assert_eq!(ids(r#"{"match": {"title": "running"}}"#), ["1", "3"]);
    assert_eq!(ids(r#"{"match": {"title.en": "running"}}"#), ["1", "2", "3"]);
    assert_eq!(ids(r#"{"term": {"title.raw": "Running Dogs"}}"#), ["1", "3"]);
    assert!(ids(r#"{"term": {"title.raw": "running"}}"#).is_empty());
    // A terms aggregation and a sort on the keyword multi-field.
    let (status, v) = s.call(
        "POST",
        "/mf/_search",
        Some(r#"{"size": 3, "sort": [{"title.raw": "asc"}, {"_doc": "asc"}], "aggs": {"t": {"terms": {"field": "title.raw"}}}}"#),
    );
    assert_eq!(status, 200, "{v}");
    let order: Vec<&str> =
        v["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap()).collect();
    assert_eq!(order, ["1", "3", "2"], "{v}");
    assert_eq!(
        v["aggregations"]["t"]["buckets"],
        json!([{"key": "Running Dogs", "doc_count": 2}, {"key": "a dog runs", "doc_count": 1}]),
        "{v}"
    );
    // Highlighting a multi-field reads its parent's text.
    let (_, v) = s.call(
        "POST",
        "/mf/_search",
        Some(r#"{"query": {"match": {"title.en": "run"}}, "highlight": {"fields": {"title.en": {}}}}"#),
    );
    let hl: Vec<&str> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["highlight"]["title.en"][0].as_str().unwrap())
        .collect();
    assert!(hl.contains(&"a dog <em>runs</em>") && hl.contains(&"<em>Running</em> Dogs"), "{hl:?}");
    let (_, v) = s.call("GET", "/mf/_mapping", None);
    assert_eq!(
        v["mf"]["mappings"]["properties"]["title"],
        json!({"type": "text", "fields": {"raw": {"type": "keyword"}, "en": {"type": "text", "analyzer": "english"}}}),
        "{v}"
    );
    let (_, v) = s.call("GET", "/mf/_field_caps?fields=title*", None);
    assert_eq!(v["fields"]["title.raw"]["keyword"]["aggregatable"], json!(true), "{v}");
    assert_eq!(v["fields"]["title"]["text"]["searchable"], json!(true), "{v}");
    // A multi-field's parent is a field, not an object: asked alone, the multi-field comes alone.
    let (_, v) = s.call("GET", "/mf/_field_caps?fields=title.raw", None);
    assert_eq!(v["fields"].as_object().unwrap().keys().collect::<Vec<_>>(), ["title.raw"], "{v}");
    // A multi-field added to a mapped field indexes the documents written after it (as in Elasticsearch:
    // the earlier ones need a `_reindex`).
    let m = r#"{"properties": {"title": {"type": "text", "fields": {"low": {"type": "keyword", "ignore_above": 8}}}}}"#;
    assert_eq!(s.call("PUT", "/mf/_mapping", Some(m)).0, 200);
    put_docs(
        &s,
        "mf",
        [("4", r#"{"title": "short"}"#.to_string()), ("5", r#"{"title": "Running Dogs"}"#.to_string())],
    );
    assert_eq!(ids(r#"{"exists": {"field": "title.low"}}"#), ["4"]);
    assert_eq!(ids(r#"{"term": {"title.raw": "Running Dogs"}}"#), ["1", "3", "5"]);
    // An object where a mapped field's values go is refused, and maps nothing from its leaves.
    let r = s.call("PUT", "/mf/_doc/9", Some(r#"{"title": {"sub": "x"}}"#));
    assert_eq!(r.0, 400, "{}", r.1);
    let (_, v) = s.call("GET", "/mf/_mapping", None);
    assert!(v["mf"]["mappings"]["properties"].get("title.sub").is_none(), "{v}");
    // A mapping refused part-way changes nothing: `a1` comes before the refused `b1`.
    let m = r#"{"properties": {"a1": {"type": "text"}, "b1": {"type": "text", "copy_to": "x"}}}"#;
    assert_eq!(s.call("PUT", "/mf/_mapping", Some(m)).0, 400);
    let (_, v) = s.call("GET", "/mf/_mapping", None);
    assert!(v["mf"]["mappings"]["properties"].get("a1").is_none(), "{v}");
    s.stop();
}

/// `_reindex`: every document (or those a query matches, through an alias's filter too) copied under its
/// `_id`; the destination created when missing or reached through an alias's write index; `op_type: create`
/// conflicts abort with a 409 or are counted with `conflicts=proceed`; `max_docs`; refusals.
#[test]
fn reindex_copies_documents_into_another_index() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"user": {"type": "keyword"}, "body": {"type": "text"}}}}"#;
    assert_eq!(s.call("PUT", "/src", Some(m)).0, 200);
    let docs =
        [("1", "kim", "red fox"), ("2", "lee", "red dog"), ("3", "kim", "blue fox"), ("4", "max", "red cat")];
    put_docs(&s, "src", docs.map(|(id, u, b)| (id, format!(r#"{{"user": "{u}", "body": "{b}"}}"#))));
    let all = r#"{"query": {"match_all": {}}}"#;
    let reindex = |body: &str| s.call("POST", "/_reindex", Some(body));
    // Everything, into an index that does not exist yet.
    let (status, v) = reindex(r#"{"source": {"index": "src"}, "dest": {"index": "dst"}}"#);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["total"], &v["created"], &v["updated"], &v["failures"]),
        (&json!(4), &json!(4), &json!(0), &json!([]))
    );
    assert_eq!(hit_ids(&s, "dst", all), ["1", "2", "3", "4"]);
    assert_eq!(s.call("GET", "/dst/_doc/3", None).1["_source"], json!({"user": "kim", "body": "blue fox"}));
    // Again: the same ids are replaced; small batches.
    let (_, v) = reindex(r#"{"source": {"index": "src", "size": 3}, "dest": {"index": "dst"}}"#);
    assert_eq!((&v["updated"], &v["batches"]), (&json!(4), &json!(2)), "{v}");
    // A query, and a source alias's filter.
    let kim =
        r#"{"actions": [{"add": {"index": "src", "alias": "kim", "filter": {"term": {"user": "kim"}}}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(kim)).0, 200);
    let (_, v) = reindex(
        r#"{"source": {"index": ["kim"], "query": {"match": {"body": "fox"}}}, "dest": {"index": "kims"}}"#,
    );
    assert_eq!(v["created"], json!(2), "{v}");
    assert_eq!(hit_ids(&s, "kims", all), ["1", "3"]);
    let (_, v) = reindex(
        r#"{"source": {"index": "src", "query": {"match": {"body": "red"}}}, "dest": {"index": "reds"}, "max_docs": 2}"#,
    );
    assert_eq!((&v["total"], &v["created"]), (&json!(2), &json!(2)), "{v}");
    // op_type create: existing ids conflict — the run stops after the batch with a 409 (the batch's other
    // documents are written, as in Elasticsearch), or counts them and goes on.
    let (status, v) = reindex(r#"{"source": {"index": "kim"}, "dest": {"index": "kims2"}}"#);
    assert_eq!((status, &v["created"]), (200, &json!(2)), "{v}");
    let (status, v) =
        reindex(r#"{"source": {"index": "src", "size": 2}, "dest": {"index": "kims", "op_type": "create"}}"#);
    assert_eq!(status, 409, "{v}");
    assert_eq!(
        (&v["created"], &v["version_conflicts"], &v["batches"]),
        (&json!(1), &json!(1), &json!(1)),
        "{v}"
    );
    assert_eq!(v["failures"][0]["cause"]["type"], json!("version_conflict_engine_exception"), "{v}");
    assert_eq!(v["failures"][0]["id"], json!("1"), "{v}");
    assert_eq!(hit_ids(&s, "kims", all), ["1", "2", "3"], "the second batch never ran");
    let (status, v) = reindex(
        r#"{"source": {"index": "src"}, "dest": {"index": "kims2", "op_type": "create"}, "conflicts": "proceed"}"#,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!((&v["created"], &v["version_conflicts"]), (&json!(2), &json!(2)), "{v}");
    assert_eq!(hit_ids(&s, "kims2", all), ["1", "2", "3", "4"]);
    // Through an alias's write index.
    assert_eq!(s.call("PUT", "/dst/_alias/current", None).0, 200);
    let (_, v) = reindex(r#"{"source": {"index": "kim"}, "dest": {"index": "current"}}"#);
    assert_eq!(v["updated"], json!(2), "{v}");
    // Refused: into a source, scripts, remote sources, unknown keys, a missing source.
    assert_es_error(
        &reindex(r#"{"source": {"index": "src"}, "dest": {"index": "src"}}"#),
        400,
        "illegal_argument_exception",
    );
    assert_es_error(
        &reindex(r#"{"source": {"index": "dst"}, "dest": {"index": "current"}}"#),
        400,
        "illegal_argument_exception",
    );
    assert_eq!(
        reindex(r#"{"source": {"index": "src"}, "dest": {"index": "x"}, "script": {"source": "1"}}"#).0,
        400
    );
    assert_eq!(reindex(r#"{"source": {"index": "src", "remote": {}}, "dest": {"index": "x"}}"#).0, 400);
    assert_eq!(reindex(r#"{"source": {"index": "src"}, "dest": {"index": "x"}, "nope": 1}"#).0, 400);
    assert_es_error(
        &reindex(r#"{"source": {"index": "missing"}, "dest": {"index": "x"}}"#),
        404,
        "index_not_found_exception",
    );
    assert_eq!(s.call("GET", "/x", None).0, 404, "nothing was created by a refused reindex");
    drop(s.stop());
}

/// A filtered alias: searches, counts, `_msearch` and `_delete_by_query` through it see only the documents
/// passing its filter; gets and writes through it ignore the filter (as in Elasticsearch); an index named
/// directly too is not filtered, and two filtered aliases of one index give either filter's documents.
#[test]
fn filtered_aliases_filter_searches_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"user": {"type": "keyword"}, "body": {"type": "text"}}},
               "aliases": {"kim": {"filter": {"term": {"user": "kim"}}}}}"#;
    assert_eq!(s.call("PUT", "/docs", Some(m)).0, 200);
    let lee =
        r#"{"actions": [{"add": {"index": "docs", "alias": "lee", "filter": {"term": {"user": "lee"}}}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(lee)).0, 200);
    put_docs(
        &s,
        "docs",
        [
            ("1", r#"{"user": "kim", "body": "red fox"}"#.to_string()),
            ("2", r#"{"user": "lee", "body": "red dog"}"#.to_string()),
            ("3", r#"{"user": "kim", "body": "blue fox"}"#.to_string()),
            ("4", r#"{"user": "max", "body": "red cat"}"#.to_string()),
        ],
    );
    let red = r#"{"query": {"match": {"body": "red"}}}"#;
    let ids = |target: &str| hit_ids(&s, target, red);
    assert_eq!(ids("docs"), ["1", "2", "4"]);
    assert_eq!(ids("kim"), ["1"]);
    assert_eq!(ids("lee"), ["2"]);
    assert_eq!(ids("kim,lee"), ["1", "2"], "either filter");
    assert_eq!(ids("kim,docs"), ["1", "2", "4"], "the index named directly is not filtered");
    assert_eq!(ids("k*"), ["1"], "an alias reached through a pattern filters too");
    // Scores are the query's: the filter scores nothing.
    let score = |target: &str| hits_by_id(&s, target, red)[0].1;
    assert_eq!(score("kim"), score("docs"));
    assert_eq!(s.call("GET", "/kim/_count", None).1["count"], json!(2));
    let (_, v) = s.call("POST", "/kim/_count", Some(r#"{"query": {"match": {"body": "fox"}}}"#));
    assert_eq!(v["count"], json!(2));
    let ms = "{\"index\": \"lee\"}\n{\"query\": {\"match_all\": {}}}\n{\"index\": \"docs\"}\n{\"query\": {\"match_all\": {}}}\n";
    let (_, v) = s.call("POST", "/_msearch", Some(ms));
    assert_eq!(v["responses"][0]["hits"]["total"]["value"], json!(1), "{v}");
    assert_eq!(v["responses"][1]["hits"]["total"]["value"], json!(4), "{v}");
    // Aggregations see the filtered documents only.
    let (_, v) =
        s.call("POST", "/kim/_search", Some(r#"{"size": 0, "aggs": {"u": {"terms": {"field": "user"}}}}"#));
    assert_eq!(v["aggregations"]["u"]["buckets"], json!([{"key": "kim", "doc_count": 2}]), "{v}");
    // Highlighting shows the request's query, not the filter's terms.
    let foxes = r#"{"actions": [{"add": {"index": "docs", "alias": "foxes", "filter": {"match": {"body": "fox"}}}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(foxes)).0, 200);
    let (_, v) = s.call(
        "POST",
        "/foxes/_search",
        Some(r#"{"query": {"match": {"body": "red"}}, "highlight": {"fields": {"body": {}}}}"#),
    );
    assert_eq!(v["hits"]["hits"][0]["highlight"]["body"], json!(["<em>red</em> fox"]), "{v}");
    assert_eq!(s.call("DELETE", "/docs/_alias/foxes", None).0, 200);
    // Gets and writes ignore the filter.
    assert_eq!(s.call("GET", "/kim/_doc/2", None).1["found"], json!(true));
    assert_eq!(s.call("PUT", "/kim/_doc/5", Some(r#"{"user": "lee", "body": "red owl"}"#)).0, 201);
    assert_eq!(ids("kim"), ["1"]);
    assert_eq!(ids("lee"), ["2", "5"]);
    // Shown with the alias; `_cat/aliases` marks it.
    let (_, v) = s.call("GET", "/_alias/kim", None);
    assert_eq!(v, json!({"docs": {"aliases": {"kim": {"filter": {"term": {"user": "kim"}}}}}}));
    let (_, v) = s.call("GET", "/_cat/aliases?format=json", None);
    assert_eq!(v[0]["filter"], json!("*"), "{v}");
    // A filter that does not parse is refused, and nothing changes.
    let bad = r#"{"actions": [{"remove": {"index": "docs", "alias": "lee"}}, {"add": {"index": "docs", "alias": "x", "filter": {"nope": {}}}}]}"#;
    let (status, v) = s.call("POST", "/_aliases", Some(bad));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["reason"].as_str().unwrap().contains("failed to parse filter for alias [x]"), "{v}");
    assert_eq!(ids("lee"), ["2", "5"]);
    assert_es_error(
        &s.call("PUT", "/docs/_alias/y", Some(r#"{"filter": "user:kim"}"#)),
        400,
        "parsing_exception",
    );
    // _delete_by_query through the alias deletes only what passes the filter.
    let (status, v) =
        s.call("POST", "/lee/_delete_by_query", Some(r#"{"query": {"match": {"body": "red"}}}"#));
    assert_eq!((status, &v["deleted"]), (200, &json!(2)), "{v}");
    assert_eq!(ids("docs"), ["1", "4"]);
    // Adding the alias again without a filter drops it; a restart keeps the filters.
    assert_eq!(s.call("PUT", "/docs/_alias/lee", None).0, 200);
    assert_eq!(ids("lee"), ["1", "4"]);
    drop(s.stop());
    let s = TestServer::start(dir.path(), ServerConfig::default());
    assert_eq!(hit_ids(&s, "kim", red), ["1"]);
    drop(s.stop());
}

/// Aliases: an atomic swap moves an alias between indices; searches through an alias (or a pattern
/// matching it) search every index it names; gets and writes go through an alias of one index and are
/// refused through one of several; an alias never shares a name with an index; deleting an index takes it
/// out of its aliases; they survive a restart.
#[test]
fn aliases_name_indices_for_searches_and_single_index_operations() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"mappings": {"properties": {"body": {"type": "text"}}}, "aliases": {"logs": {}}}"#;
    assert_eq!(s.call("PUT", "/logs-v1", Some(m)).0, 200);
    assert_eq!(
        s.call("PUT", "/logs-v2", Some(r#"{"mappings": {"properties": {"body": {"type": "text"}}}}"#)).0,
        200
    );
    put_docs(&s, "logs", [("1", r#"{"body": "red fox"}"#.to_string())]);
    put_docs(&s, "logs-v2", [("2", r#"{"body": "red dog"}"#.to_string())]);
    let red = r#"{"query": {"match": {"body": "red"}}}"#;
    let ids = |target: &str| hit_ids(&s, target, red);
    assert_eq!(ids("logs"), ["1"], "the write through the alias went to logs-v1");
    assert_eq!(s.call("GET", "/logs/_doc/1", None).1["_index"], json!("logs-v1"));
    let (_, v) = s.call("GET", "/logs", None);
    assert_eq!(v["logs-v1"]["aliases"], json!({"logs": {}}), "{v}");
    assert_eq!(s.call("GET", "/_alias/logs", None).1, json!({"logs-v1": {"aliases": {"logs": {}}}}));
    // The swap: both actions or neither.
    let swap = r#"{"actions": [{"remove": {"index": "logs-v1", "alias": "logs"}}, {"add": {"index": "logs-v2", "alias": "logs"}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(swap)).0, 200);
    assert_eq!(ids("logs"), ["2"]);
    let bad = r#"{"actions": [{"add": {"index": "logs-v1", "alias": "logs"}}, {"add": {"index": "nope", "alias": "logs"}}]}"#;
    assert_es_error(&s.call("POST", "/_aliases", Some(bad)), 404, "index_not_found_exception");
    assert_eq!(ids("logs"), ["2"], "a failed action list changes nothing");
    // An alias of two indices: searches span both (also through a pattern); single-index operations refuse.
    assert_eq!(s.call("PUT", "/logs-v1/_alias/logs", None).0, 200);
    assert_eq!(ids("logs"), ["1", "2"]);
    assert_eq!(ids("log*"), ["1", "2"]);
    assert_eq!(s.call("GET", "/logs/_count", None).1["count"], json!(2));
    assert_es_error(
        &s.call("PUT", "/logs/_doc/3", Some(r#"{"body": "x"}"#)),
        400,
        "illegal_argument_exception",
    );
    assert_es_error(&s.call("GET", "/logs/_doc/1", None), 400, "illegal_argument_exception");
    let (_, v) = s.call("GET", "/_alias", None);
    assert_eq!(v, json!({"logs-v1": {"aliases": {"logs": {}}}, "logs-v2": {"aliases": {"logs": {}}}}));
    // Rollover: a write index takes the writes (index, delete, bulk) while searches span both.
    let roll = r#"{"actions": [{"add": {"index": "logs-v2", "alias": "logs", "is_write_index": true}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(roll)).0, 200);
    assert_eq!(s.call("PUT", "/logs/_doc/5", Some(r#"{"body": "red ant"}"#)).1["_index"], json!("logs-v2"));
    let bulk = "{\"index\": {\"_index\": \"logs\", \"_id\": \"6\"}}\n{\"body\": \"red bee\"}\n{\"delete\": {\"_index\": \"logs\", \"_id\": \"5\"}}\n";
    let (status, v) = s.call("POST", "/_bulk", Some(bulk));
    assert_eq!((status, &v["errors"]), (200, &json!(false)), "{v}");
    assert_eq!(ids("logs"), ["1", "2", "6"]);
    assert_eq!(hit_ids(&s, "logs-v2", red), ["2", "6"]);
    assert_eq!(
        s.call("GET", "/logs-v2/_alias", None).1,
        json!({"logs-v2": {"aliases": {"logs": {"is_write_index": true}}}})
    );
    let (_, v) = s.call("GET", "/_cat/aliases?format=json", None);
    let row = json!({"alias": "logs", "index": "logs-v1", "filter": "-", "routing.index": "-",
        "routing.search": "-", "is_write_index": "-"});
    assert_eq!(v[0], row);
    assert_eq!(v[1]["is_write_index"], json!("true"));
    let two_writers =
        r#"{"actions": [{"add": {"index": "logs-v1", "alias": "logs", "is_write_index": true}}]}"#;
    assert_es_error(&s.call("POST", "/_aliases", Some(two_writers)), 400, "illegal_state_exception");
    assert_eq!(s.call("PUT", "/logs-v2/_alias/logs", Some(r#"{"is_write_index": false}"#)).0, 200);
    assert_es_error(
        &s.call("PUT", "/logs/_doc/7", Some(r#"{"body": "x"}"#)),
        400,
        "illegal_argument_exception",
    );
    assert_es_error(&s.call("GET", "/_alias/nope", None), 404, "aliases_not_found_exception");
    // Names: an alias is not an index, and not a name an index has.
    assert_es_error(&s.call("PUT", "/logs", Some("{}")), 400, "invalid_index_name_exception");
    assert_es_error(&s.call("PUT", "/logs-v1/_alias/logs-v2", None), 400, "invalid_alias_name_exception");
    assert_es_error(&s.call("PUT", "/logs-v1/_alias/_bad", None), 400, "invalid_alias_name_exception");
    assert_es_error(&s.call("DELETE", "/logs", None), 400, "illegal_argument_exception");
    assert_es_error(
        &s.call(
            "POST",
            "/_aliases",
            Some(r#"{"actions": [{"add": {"index": "logs-v1", "alias": "f", "routing": "1"}}]}"#),
        ),
        400,
        "illegal_argument_exception",
    );
    // Removing one that is not there is a 404 through DELETE.
    assert_eq!(s.call("DELETE", "/logs-v2/_alias/logs", None).0, 200);
    assert_es_error(&s.call("DELETE", "/logs-v2/_alias/logs", None), 404, "aliases_not_found_exception");
    assert_eq!(ids("logs"), ["1"]);
    // Wildcards in actions; deleting an index takes it out of its aliases; a restart keeps them.
    let wild = r#"{"actions": [{"add": {"index": "logs-*", "aliases": ["all-logs", "every"]}}]}"#;
    assert_eq!(s.call("POST", "/_aliases", Some(wild)).0, 200);
    assert_eq!(ids("all-logs"), ["1", "2", "6"]);
    assert_eq!(ids("ev*"), ["1", "2", "6"], "a pattern matches alias names too");
    assert_eq!(s.call("DELETE", "/logs-v1", None).0, 200);
    assert_eq!(ids("all-logs"), ["2", "6"]);
    assert_es_error(&s.call("GET", "/logs/_search", None), 404, "index_not_found_exception");
    drop(s.stop());
    let s = TestServer::start(dir.path(), ServerConfig::default());
    assert_eq!(hit_ids(&s, "every", red), ["2", "6"]);
    assert_eq!(
        s.call("GET", "/_alias", None).1,
        json!({"logs-v2": {"aliases": {"all-logs": {}, "every": {}}}})
    );
}

#[test]
fn scrolls_page_through_the_matches_of_their_moment() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m =
        r#"{"properties": {"body": {"type": "text"}, "n": {"type": "long"}, "tag": {"type": "keyword"}}}"#;
    // Two indices, one of three shards; every n distinct, so the order over both is one.
    for (index, shards) in [("sa", 3), ("sb", 1)] {
        let body = format!(r#"{{"settings": {{"number_of_shards": {shards}}}, "mappings": {m}}}"#);
        assert_eq!(s.call("PUT", &format!("/{index}"), Some(&body)).0, 200);
    }
    for i in 0..40 {
        let (index, tag) = if i % 3 == 0 { ("sb", "x") } else { ("sa", "y") };
        let doc =
            format!(r#"{{"body": "red {}", "n": {}, "tag": "{tag}"}}"#, "fox ".repeat(i % 4), (i * 7) % 40);
        assert_eq!(s.call("PUT", &format!("/{index}/_doc/d{i}"), Some(&doc)).0, 201);
    }
    let ids = |v: &Value| -> Vec<String> {
        v["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap().to_string()).collect()
    };
    let by_n = r#"{"query": {"match": {"body": "red"}}, "sort": [{"n": "asc"}], "size": 100}"#;
    let (_, v) = s.call("POST", "/sa,sb/_search", Some(by_n));
    let want = ids(&v);
    assert_eq!(want.len(), 40);
    // Pages of 6 by n, over both indices; between pages, writes that must not show.
    let (status, mut v) = s.call(
        "POST",
        "/sa,sb/_search?scroll=1m",
        Some(r#"{"query": {"match": {"body": "red"}}, "sort": [{"n": "asc"}], "size": 6, "aggs": {"tags": {"terms": {"field": "tag"}}}}"#),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["aggregations"]["tags"]["buckets"][0], json!({"key": "y", "doc_count": 26}));
    let mut got = vec![];
    let mut deleted = vec![];
    for page in 0.. {
        assert_eq!(v["hits"]["total"], json!({"value": 40, "relation": "eq"}), "page {page}");
        let hits = v["hits"]["hits"].as_array().unwrap().clone();
        if hits.is_empty() {
            break;
        }
        assert!(hits.len() <= 6);
        for h in &hits {
            // The sort values asked for, without the `_doc` the scroll adds.
            assert_eq!(h["sort"].as_array().unwrap().len(), 1, "{h}");
        }
        got.extend(ids(&v));
        // A new matching document (n -1 would sort first), and a document not yet returned deleted.
        let doc = format!(r#"{{"body": "red", "n": -{page}}}"#);
        assert_eq!(s.call("PUT", &format!("/sa/_doc/new{page}"), Some(&doc)).0, 201);
        if let Some(later) = want.iter().rev().find(|id| !got.contains(id) && !deleted.contains(*id)) {
            let index = if later[1..].parse::<usize>().unwrap() % 3 == 0 { "sb" } else { "sa" };
            assert_eq!(s.call("DELETE", &format!("/{index}/_doc/{later}"), None).0, 200);
            deleted.push(later.clone());
        }
        let id = v["_scroll_id"].as_str().unwrap().to_string();
        let body = json!({"scroll": "1m", "scroll_id": id}).to_string();
        let (status, next) = s.call("POST", "/_search/scroll", Some(&body));
        assert_eq!(status, 200, "{next}");
        assert!(next.get("aggregations").is_none());
        v = next;
    }
    let kept: Vec<String> = want.iter().filter(|id| !deleted.contains(id)).cloned().collect();
    assert_eq!(got, kept);
    assert!(!deleted.is_empty());

    // The default order (by score) shows scores and no sort values; the GET form with the id in the path.
    let (_, v) =
        s.call("POST", "/sa/_search?scroll=30s&size=5", Some(r#"{"query": {"match": {"body": "fox"}}}"#));
    let total = v["hits"]["total"]["value"].as_u64().unwrap();
    let (mut scores, mut seen) = (vec![], vec![]);
    let mut v = v;
    loop {
        let hits = v["hits"]["hits"].as_array().unwrap();
        if hits.is_empty() {
            break;
        }
        for h in hits {
            assert!(h.get("sort").is_none(), "{h}");
            scores.push(h["_score"].as_f64().unwrap());
        }
        seen.extend(ids(&v));
        let id = v["_scroll_id"].as_str().unwrap().to_string();
        let (status, next) = s.call("GET", &format!("/_search/scroll/{id}?scroll=30s"), None);
        assert_eq!(status, 200, "{next}");
        v = next;
    }
    assert_eq!(seen.len() as u64, total);
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len());

    // A double's negative zero sorts before zero, and a cursor on it reads it back as itself (not as 0); a
    // long has none (-0 is 0, as Elasticsearch coerces it).
    assert_eq!(s.call("PUT", "/sb/_mapping", Some(r#"{"properties": {"x": {"type": "double"}}}"#)).0, 200);
    for (id, x) in [("z1", "-0.0"), ("z2", "-0.0"), ("z3", "0"), ("z4", "-1")] {
        let doc = format!(r#"{{"body": "zero", "x": {x}, "n": {x}}}"#);
        assert_eq!(s.call("PUT", &format!("/sb/_doc/{id}"), Some(&doc)).0, 201);
    }
    let by_n = r#"{"query": {"ids": {"values": ["z1"]}}, "sort": [{"n": "asc"}]}"#;
    assert_eq!(s.call("POST", "/sb/_search", Some(by_n)).1["hits"]["hits"][0]["sort"], json!([0]));
    let (_, mut v) = s.call(
        "POST",
        "/sb/_search?scroll=1m&size=1",
        Some(r#"{"query": {"match": {"body": "zero"}}, "sort": [{"x": "asc"}]}"#),
    );
    let mut zeros = vec![];
    while let Some(h) = v["hits"]["hits"].as_array().unwrap().first() {
        zeros.push((h["_id"].as_str().unwrap().to_string(), h["sort"][0].to_string()));
        let next = json!({"scroll_id": v["_scroll_id"]}).to_string();
        v = s.call("POST", "/_search/scroll", Some(&next)).1;
    }
    let pair = |id: &str, n: &str| (id.to_string(), n.to_string());
    assert_eq!(zeros, [pair("z4", "-1"), pair("z1", "-0.0"), pair("z2", "-0.0"), pair("z3", "0")]);

    // Clearing: the id then is unknown (404); clearing what is not open is a 404 too.
    let (_, v) = s.call("POST", "/sa/_search?scroll=1m", Some(r#"{"sort": ["_doc"], "size": 1}"#));
    let id = v["_scroll_id"].as_str().unwrap().to_string();
    let body = json!({"scroll_id": [id.clone()]}).to_string();
    assert_eq!(
        s.call("DELETE", "/_search/scroll", Some(&body)),
        (200, json!({"succeeded": true, "num_freed": 1}))
    );
    let next = json!({"scroll_id": id}).to_string();
    assert_es_error(&s.call("POST", "/_search/scroll", Some(&next)), 404, "search_context_missing_exception");
    assert_eq!(
        s.call("DELETE", "/_search/scroll", Some(&body)),
        (404, json!({"succeeded": true, "num_freed": 0}))
    );
    for _ in 0..2 {
        assert_eq!(s.call("POST", "/sa/_search?scroll=1m", Some("{}")).0, 200);
    }
    // These two and the three read to their end above, which stay open until they expire or are cleared.
    assert_eq!(
        s.call("DELETE", "/_search/scroll/_all", None),
        (200, json!({"succeeded": true, "num_freed": 5}))
    );
    // Expiry after the keep-alive.
    let (_, v) = s.call("POST", "/sa/_search?scroll=300ms&size=1", Some("{}"));
    let next = json!({"scroll_id": v["_scroll_id"]}).to_string();
    std::thread::sleep(Duration::from_millis(400));
    assert_es_error(&s.call("POST", "/_search/scroll", Some(&next)), 404, "search_context_missing_exception");
    // A scroll whose index is deleted.
    let (_, v) = s.call("POST", "/sb/_search?scroll=1m&size=1", Some("{}"));
    assert_eq!(s.call("DELETE", "/sb", None).0, 200);
    let next = json!({"scroll_id": v["_scroll_id"]}).to_string();
    assert_es_error(&s.call("POST", "/_search/scroll", Some(&next)), 404, "index_not_found_exception");
    // Refusals, as Elasticsearch words them.
    for (path, body, reason) in [
        ("/sa/_search?scroll=1m", r#"{"from": 2}"#, "using [from] is not allowed in a scroll context"),
        (
            "/sa/_search?scroll=1m",
            r#"{"sort": ["_doc"], "search_after": [3]}"#,
            "[search_after] cannot be used",
        ),
        ("/sa/_search?scroll=1m", r#"{"track_total_hits": false}"#, "disabling [track_total_hits]"),
        ("/sa/_search?scroll=60", "{}", "unit is missing or unrecognized"),
        ("/sa/_search?scroll=1m", r#"{"size": 0}"#, "[size] cannot be [0] in a scroll context"),
        (
            "/sa/_search?scroll=1m&request_cache=true",
            "{}",
            "[request_cache] cannot be used in a scroll context",
        ),
        ("/sa/_search?scroll=2d", "{}", "Keep alive for request (2d) is too large"),
        ("/_search/scroll", r#"{"scroll": "1m"}"#, "does not contain a scroll_id"),
        ("/_search/scroll", r#"{"scroll_id": "x", "size": 3}"#, "unknown key [size]"),
    ] {
        let r = s.call("POST", path, Some(body));
        assert_eq!(r.0, 400, "{path} {body}: {}", r.1);
        assert!(r.1["error"]["reason"].as_str().unwrap().contains(reason), "{path} {body}: {}", r.1);
    }
    s.stop();
}

#[test]
fn post_filter_narrows_the_hits_but_not_the_aggregations() {
    on_one_and_three_shards(
        "pf",
        r#"{"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}}}"#,
        |s| {
            for i in 0..20 {
                let doc =
                    format!(r#"{{"body": "red {}", "tag": "{}"}}"#, "red ".repeat(i % 3), ["x", "y"][i % 2]);
                assert_eq!(s.call("PUT", &format!("/pf/_doc/{i}"), Some(&doc)).0, 201);
            }
            assert_eq!(s.call("PUT", "/pf/_doc/blue", Some(r#"{"body": "blue", "tag": "x"}"#)).0, 201);
            let aggs = r#""aggs": {"tags": {"terms": {"field": "tag"}}}"#;
            let (_, all) = s.call(
                "POST",
                "/pf/_search",
                Some(&format!(r#"{{"query": {{"match": {{"body": "red"}}}}, "size": 30, {aggs}}}"#)),
            );
            let body = format!(
                r#"{{"query": {{"match": {{"body": "red"}}}}, "post_filter": {{"term": {{"tag": "x"}}}}, "size": 30, {aggs}}}"#
            );
            let (status, v) = s.call("POST", "/pf/_search", Some(&body));
            assert_eq!(status, 200, "{v}");
            // The aggregations read every match of the query; the hits only those the post filter passes.
            assert_eq!(v["aggregations"], all["aggregations"]);
            assert_eq!(
                v["aggregations"]["tags"]["buckets"],
                json!([{"key": "x", "doc_count": 10}, {"key": "y", "doc_count": 10}])
            );
            assert_eq!(v["hits"]["total"], json!({"value": 10, "relation": "eq"}));
            let score_of = |r: &Value| -> std::collections::HashMap<String, f64> {
                r["hits"]["hits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_score"].as_f64().unwrap()))
                    .collect()
            };
            let (filtered, unfiltered) = (score_of(&v), score_of(&all));
            assert_eq!(filtered.len(), 10);
            for (id, score) in &filtered {
                assert_eq!(id.parse::<usize>().unwrap() % 2, 0, "{id}");
                // The post filter scores nothing.
                assert_eq!(*score, unfiltered[id], "{id}");
            }
            // Through a scroll, and a post filter that does not parse.
            let (_, v) = s.call("POST", "/pf/_search?scroll=1m&size=4", Some(&body));
            assert_eq!(v["hits"]["total"]["value"], 10);
            assert_eq!(v["aggregations"]["tags"]["buckets"][1]["doc_count"], 10);
            let bad = r#"{"post_filter": {"nope": {}}}"#;
            assert_eq!(s.call("POST", "/pf/_search", Some(bad)).0, 400);
        },
    );
}

#[test]
fn analyze_lists_the_terms_a_field_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let body = r#"{"settings": {"analysis": {"analyzer": {"default": {"type": "stop"}}}},
        "mappings": {"properties": {"body": {"type": "text", "analyzer": "english"}, "tag": {"type": "keyword"}, "n": {"type": "long"}}}}"#;
    assert_eq!(s.call("PUT", "/an", Some(body)).0, 200);
    let text = "The Runners were running to Café Zürich";
    let doc = json!({"body": text, "tag": "Big Tag", "other": text}).to_string();
    assert_eq!(s.call("PUT", "/an/_doc/1", Some(&doc)).0, 201);
    let terms = |path: &str, req: Value| -> Vec<String> {
        let (status, v) = s.call("POST", path, Some(&req.to_string()));
        assert_eq!(status, 200, "{req}: {v}");
        v["tokens"].as_array().unwrap().iter().map(|t| t["token"].as_str().unwrap().to_string()).collect()
    };
    // A text field's analyzer (english: stop words out, stemmed); every term it lists finds the document.
    let body_terms = terms("/an/_analyze", json!({"field": "body", "text": text}));
    assert_eq!(body_terms, ["runner", "were", "run", "café", "zürich"]);
    for t in &body_terms {
        let q = json!({"query": {"term": {"body": t}}}).to_string();
        assert_eq!(s.call("POST", "/an/_search", Some(&q)).1["hits"]["total"]["value"], 1, "{t}");
    }
    // A dynamically mapped field and the index's default (stop: no stemming).
    assert_eq!(
        terms("/an/_analyze", json!({"field": "other", "text": text})),
        ["runners", "were", "running", "café", "zürich"]
    );
    assert_eq!(terms("/an/_analyze", json!({"analyzer": "default", "text": "The Runners"})), ["runners"]);
    // A keyword field's whole value is its one term.
    let (_, v) = s.call("POST", "/an/_analyze", Some(r#"{"field": "tag", "text": "Big Tag"}"#));
    assert_eq!(
        v["tokens"],
        json!([{"token": "Big Tag", "start_offset": 0, "end_offset": 7, "type": "word", "position": 0}])
    );
    // Without an index, the built-in analyzers (GET with a body too, as clients send it).
    let (status, v) = s.call("GET", "/_analyze", Some(r#"{"analyzer": "standard", "text": "Hello, World"}"#));
    assert_eq!(status, 200);
    assert_eq!(
        v["tokens"][1],
        json!({"token": "world", "start_offset": 7, "end_offset": 12, "type": "<ALPHANUM>", "position": 1})
    );
    assert_es_error(
        &s.call("POST", "/an/_analyze", Some(r#"{"field": "n", "text": "3"}"#)),
        400,
        "illegal_argument_exception",
    );
    assert_es_error(
        &s.call("POST", "/nope/_analyze", Some(r#"{"text": "3"}"#)),
        404,
        "index_not_found_exception",
    );
    assert_es_error(
        &s.call("POST", "/_analyze", Some(r#"{"analyzer": "english"}"#)),
        400,
        "action_request_validation_exception",
    );
    s.stop();
}

#[test]
fn term_suggestions_come_from_the_live_dictionary() {
    on_one_and_three_shards(
        "sg",
        r#"{"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}}}"#,
        |s| {
            let docs = [
                "search engines search",
                "a search engine",
                "searching for spirit",
                "the spirit of search",
                "sea charts",
                "engine room",
            ];
            for (i, d) in docs.iter().enumerate() {
                let tag = ["red apple", "red apples"][i % 2];
                let doc = json!({"body": d, "tag": tag}).to_string();
                assert_eq!(s.call("PUT", &format!("/sg/_doc/{i}"), Some(&doc)).0, 201);
            }
            let suggest = |body: Value| -> Value {
                let (status, v) =
                    s.call("POST", "/sg/_search", Some(&json!({"size": 0, "suggest": body}).to_string()));
                assert_eq!(status, 200, "{v}");
                v["suggest"].clone()
            };
            let v = suggest(json!({"text": "Serch engine spirt", "fix": {"term": {"field": "body"}}}));
            let entries = v["fix"].as_array().unwrap();
            assert_eq!(entries.len(), 3);
            // "serch": search (one edit, in 3 documents) before sea (two edits).
            assert_eq!(entries[0]["text"], "serch");
            assert_eq!((entries[0]["offset"].as_u64(), entries[0]["length"].as_u64()), (Some(0), Some(5)));
            assert_eq!(entries[0]["options"][0], json!({"text": "search", "score": 0.8, "freq": 3}));
            // A word of the index gets none (mode missing); "spirt" -> spirit.
            assert_eq!(entries[1]["options"], json!([]));
            assert_eq!(entries[2]["options"][0]["text"], "spirit");
            assert_eq!(entries[2]["offset"], 13);
            // Mode always lists neighbours of a known word, unless it is in more than max_term_freq documents
            // (1% of 6 documents, rounded up, by default).
            let v = suggest(
                json!({"w": {"text": "engine", "term": {"field": "body", "suggest_mode": "always"}}}),
            );
            assert_eq!(v["w"][0]["options"], json!([]));
            let v = suggest(
                json!({"w": {"text": "engine", "term": {"field": "body", "suggest_mode": "always", "sort": "frequency", "max_term_freq": 2}}}),
            );
            assert_eq!(v["w"][0]["options"][0], json!({"text": "engines", "score": 0.8333333, "freq": 1}));
            // A keyword field's whole text is one term.
            let v = suggest(json!({"k": {"text": "red aple", "term": {"field": "tag"}}}));
            assert_eq!(v["k"][0]["text"], "red aple");
            assert_eq!(v["k"][0]["options"][0]["text"], "red apple");
            // A word written a moment ago is suggested at once.
            assert_eq!(s.call("PUT", "/sg/_doc/z", Some(r#"{"body": "zebra"}"#)).0, 201);
            let v = suggest(json!({"z": {"text": "zebar", "term": {"field": "body"}}}));
            assert_eq!(v["z"][0]["options"][0]["text"], "zebra");
            // Refusals.
            for (body, reason) in [
                (json!({"p": {"text": "x", "phrase": {"field": "body"}}}), "the [phrase] suggester"),
                (json!({"p": {"text": "x", "term": {}}}), "needs a [field]"),
                (
                    json!({"p": {"text": "x", "term": {"field": "body", "suggest_mode": "often"}}}),
                    "illegal suggest_mode",
                ),
                (json!({"p": {"text": "x", "term": {"field": "body", "max_edits": 3}}}), "max_edits"),
                (json!({"p": {"term": {"field": "body"}}}), "has no text"),
                (json!({"p": {"text": "word ".repeat(65), "term": {"field": "body"}}}), "at most 64"),
            ] {
                let (status, v) = s.call("POST", "/sg/_search", Some(&json!({"suggest": body}).to_string()));
                assert_eq!(status, 400, "{body}: {v}");
                assert!(v["error"]["reason"].as_str().unwrap().contains(reason), "{body}: {v}");
            }
        },
    );
}

#[test]
fn collapse_returns_each_values_best_hit() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"properties": {"body": {"type": "text"}, "user": {"type": "keyword"}, "likes": {"type": "long"}}}"#;
    for (index, shards) in [("cl-a", 3), ("cl-b", 1)] {
        let body = format!(r#"{{"settings": {{"number_of_shards": {shards}}}, "mappings": {m}}}"#);
        assert_eq!(s.call("PUT", &format!("/{index}"), Some(&body)).0, 200);
    }
    // (index, id, body, user, likes); "red" repeated scores higher.
    let docs = [
        ("cl-a", "1", "red", Some("alice"), 5),
        ("cl-a", "2", "red red red", Some("alice"), 1),
        ("cl-a", "3", "red red", Some("bob"), 9),
        ("cl-a", "4", "red", None, 7),
        ("cl-a", "5", "red red red red", Some("carol"), 2),
        ("cl-b", "6", "red red red red red", Some("bob"), 3),
        ("cl-b", "7", "blue", Some("dave"), 8),
    ];
    for (index, id, body, user, likes) in docs {
        let mut d = json!({"body": body, "likes": likes});
        if let Some(u) = user {
            d["user"] = json!(u);
        }
        assert_eq!(s.call("PUT", &format!("/{index}/_doc/{id}"), Some(&d.to_string())).0, 201);
    }
    let search = |path: &str, body: Value| -> (Value, Vec<(String, Value)>) {
        let (status, v) = s.call("POST", path, Some(&body.to_string()));
        assert_eq!(status, 200, "{body}: {v}");
        let hits = v["hits"]["hits"].as_array().unwrap().iter();
        let list =
            hits.map(|h| (h["_id"].as_str().unwrap().to_string(), h["fields"]["user"].clone())).collect();
        (v, list)
    };
    let pair = |id: &str, user: Value| (id.to_string(), user);
    // By score, one index: each user's best hit; the group without a user too; the count is of matches.
    let q = json!({"match": {"body": "red"}});
    let (v, got) = search("/cl-a/_search", json!({"query": q, "collapse": {"field": "user"}}));
    assert_eq!(
        got,
        [
            pair("5", json!(["carol"])),
            pair("2", json!(["alice"])),
            pair("3", json!(["bob"])),
            pair("4", Value::Null)
        ]
    );
    assert_eq!(v["hits"]["total"]["value"], 5);
    assert!(v["hits"]["hits"][0].get("sort").is_none());
    assert!(v["hits"]["hits"][0]["_score"].as_f64().unwrap() > 0.0);
    // By a field, paged by groups.
    let by_likes =
        json!({"query": q, "collapse": {"field": "user"}, "sort": [{"likes": "desc"}], "from": 1, "size": 2});
    let (_, got) = search("/cl-a/_search", by_likes);
    assert_eq!(got, [pair("4", Value::Null), pair("1", json!(["alice"]))]);
    // Over two indices: bob's best is in cl-b.
    let (_, got) = search("/cl-a,cl-b/_search", json!({"query": q, "collapse": {"field": "user"}}));
    assert_eq!(got.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(), ["6", "5", "2", "4"]);
    // Refusals.
    for (path, body, reason) in [
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "body"}}),
            "cannot collapse on field [body] of type [text]",
        ),
        ("/cl-a/_search", json!({"collapse": {"field": "nope"}}), "no mapping found for [nope]"),
        ("/cl-a/_search?scroll=1m", json!({"collapse": {"field": "user"}}), "in a scroll context"),
        ("/cl-a/_search", json!({"collapse": {"field": "user", "inner_hits": {}}}), "must have a [name]"),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "inner_hits": [{"name": "a"}, {"name": "a"}]}}),
            "already contains an entry for key [a]",
        ),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "inner_hits": {"name": "a", "from": 1, "size": 100}}}),
            "Inner result window is too large",
        ),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "inner_hits": {"name": "a", "collapse": {"field": "likes"}}}}),
            "[inner_hits] with [collapse]",
        ),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "inner_hits": {"name": "a", "frobnicate": 1}}}),
            "unknown field [frobnicate]",
        ),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "inner_hits": {"name": "a", "sort": [{"likes": "sideways"}]}}}),
            "sideways",
        ),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user"}, "sort": [{"likes": "asc"}], "search_after": [3]}),
            "search_after",
        ),
        ("/cl-a/_search", json!({"collapse": {}}), "needs a [field]"),
        (
            "/cl-a/_search",
            json!({"collapse": {"field": "user", "max_concurrent_group_searches": 0}}),
            "must be positive",
        ),
        (
            "/cl-a/_search",
            json!({"size": 501, "collapse": {"field": "user", "inner_hits": [{"name": "a"}, {"name": "b"}]}}),
            "a request may run",
        ),
    ] {
        let (status, v) = s.call("POST", path, Some(&body.to_string()));
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"]["reason"].as_str().unwrap().contains(reason), "{body}: {v}");
    }
    // inner_hits: each group's hits beside its best (the request's query over the same indices, filtered to
    // the group), in the definition's order and window; the group without a user is the documents without one.
    let inner = |v: &Value, name: &str| -> Vec<Vec<String>> {
        let ids = |h: &Value| {
            let hits = h["inner_hits"][name]["hits"]["hits"].as_array().unwrap().iter();
            hits.map(|x| x["_id"].as_str().unwrap().to_string()).collect()
        };
        v["hits"]["hits"].as_array().unwrap().iter().map(ids).collect()
    };
    let by_likes = json!({"name": "by_likes", "size": 2, "sort": [{"likes": "asc"}], "_source": false});
    let (v, got) =
        search("/cl-a/_search", json!({"query": q, "collapse": {"field": "user", "inner_hits": by_likes}}));
    assert_eq!(got.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(), ["5", "2", "3", "4"]);
    assert_eq!(inner(&v, "by_likes"), [vec!["5"], vec!["2", "1"], vec!["3"], vec!["4"]]);
    let alice = &v["hits"]["hits"][1]["inner_hits"]["by_likes"]["hits"];
    assert_eq!(alice["total"], json!({"value": 2, "relation": "eq"}), "{v}");
    assert_eq!(alice["hits"][0]["_index"], json!("cl-a"));
    assert_eq!(alice["hits"][0]["sort"], json!([1]));
    assert!(alice["hits"][0].get("_source").is_none(), "{v}");
    // Two definitions over two indices: bob's group holds his documents of both, by score and by likes
    // (default size 3); the query still decides what a group holds ("blue" is in none).
    let two = json!([{"name": "best"}, by_likes]);
    let (v, got) =
        search("/cl-a,cl-b/_search", json!({"query": q, "collapse": {"field": "user", "inner_hits": two}}));
    assert_eq!(got.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(), ["6", "5", "2", "4"]);
    assert_eq!(inner(&v, "best"), [vec!["6", "3"], vec!["5"], vec!["2", "1"], vec!["4"]]);
    assert_eq!(inner(&v, "by_likes"), [vec!["6", "3"], vec!["5"], vec!["2", "1"], vec!["4"]]);
    let best = &v["hits"]["hits"][0]["inner_hits"]["best"]["hits"];
    assert_eq!(best["hits"][0]["_source"]["user"], json!("bob"), "{v}");
    assert!(best["max_score"].as_f64().unwrap() > 0.0, "{v}");
    // The post filter filters the groups' hits too (Elasticsearch's expand phase applies it): alice's likes-1
    // document is left out of her group, as of the hits.
    let pf = json!({"range": {"likes": {"gte": 2}}});
    let (v, got) = search(
        "/cl-a/_search",
        json!({"query": q, "post_filter": pf, "collapse": {"field": "user", "inner_hits": {"name": "g"}}}),
    );
    assert_eq!(got.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(), ["5", "3", "1", "4"]);
    assert_eq!(inner(&v, "g"), [vec!["5"], vec!["3"], vec!["1"], vec!["4"]]);
    // Highlighting, versions and sequence numbers in the groups' hits.
    let opts = json!({"name": "h", "highlight": {"fields": {"body": {}}}, "version": true,
                      "seq_no_primary_term": true});
    let (v, _) =
        search("/cl-a/_search", json!({"query": q, "collapse": {"field": "user", "inner_hits": opts}}));
    let first = &v["hits"]["hits"][0]["inner_hits"]["h"]["hits"]["hits"][0];
    assert_eq!(
        first["highlight"]["body"][0],
        json!("<em>red</em> <em>red</em> <em>red</em> <em>red</em>"),
        "{v}"
    );
    assert_eq!(first["_version"], json!(1), "{v}");
    assert!(first["_seq_no"].is_u64() && first["_primary_term"] == json!(1), "{v}");
    // A date collapse field: the formatted value finds its group.
    assert_eq!(
        s.call("PUT", "/cl-d", Some(r#"{"mappings": {"properties": {"day": {"type": "date"}}}}"#)).0,
        200
    );
    for (id, day) in [("1", "2024-05-01"), ("2", "2024-05-01"), ("3", "2024-06-02")] {
        let doc = format!(r#"{{"day": "{day}", "body": "x"}}"#);
        assert_eq!(s.call("PUT", &format!("/cl-d/_doc/{id}"), Some(&doc)).0, 201);
    }
    let body = json!({"collapse": {"field": "day", "inner_hits": {"name": "d", "sort": ["_doc"]}}, "sort": [{"day": "asc"}]});
    let (status, v) = s.call("POST", "/cl-d/_search", Some(&body.to_string()));
    assert_eq!(status, 200, "{v}");
    let days: Vec<Vec<String>> = v["hits"]["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let hits = h["inner_hits"]["d"]["hits"]["hits"].as_array().unwrap().iter();
            hits.map(|x| x["_id"].as_str().unwrap().to_string()).collect()
        })
        .collect();
    assert_eq!(days, [vec!["1", "2"], vec!["3"]], "{v}");
    // A numeric collapse field: each group is its own value's documents.
    let (v, got) = search(
        "/cl-a/_search",
        json!({"query": q, "collapse": {"field": "likes", "inner_hits": {"name": "same"}}, "size": 3}),
    );
    assert_eq!(got.len(), 3);
    for (h, ids) in v["hits"]["hits"].as_array().unwrap().iter().zip(inner(&v, "same")) {
        assert_eq!(ids, [h["_id"].as_str().unwrap()], "{v}");
    }
    // search_after on the collapse field itself pages through the groups.
    let (_, got) = search(
        "/cl-a/_search",
        json!({"query": q, "collapse": {"field": "user"}, "sort": [{"user": "asc"}], "search_after": ["alice"]}),
    );
    assert_eq!(got, [pair("3", json!(["bob"])), pair("5", json!(["carol"])), pair("4", Value::Null)]);
    s.stop();
}

#[test]
fn min_score_drops_weaker_hits_from_the_page_and_the_count() {
    on_one_and_three_shards(
        "ms",
        r#"{"properties": {"body": {"type": "text"}, "n": {"type": "long"}}}"#,
        |s| {
            for i in 0..12 {
                let doc =
                    json!({"body": format!("red {}", "red ".repeat(i % 5) + &"blue ".repeat(i % 3)), "n": i})
                        .to_string();
                assert_eq!(s.call("PUT", &format!("/ms/_doc/{i}"), Some(&doc)).0, 201);
            }
            let q = json!({"match": {"body": "red"}});
            let (_, all) = s.call("POST", "/ms/_search", Some(&json!({"query": q, "size": 20}).to_string()));
            let scores: Vec<(String, f64)> = all["hits"]["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| (h["_id"].as_str().unwrap().to_string(), h["_score"].as_f64().unwrap()))
                .collect();
            let least = scores[5].1;
            let strong: Vec<&String> = scores.iter().filter(|s| s.1 >= least).map(|s| &s.0).collect();
            assert!(strong.len() >= 6 && strong.len() < 12, "{scores:?}");
            let (status, v) = s.call(
                "POST",
                "/ms/_search",
                Some(&json!({"query": q, "size": 20, "min_score": least}).to_string()),
            );
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["hits"]["total"]["value"].as_u64(), Some(strong.len() as u64));
            let ids: Vec<&str> =
                v["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap()).collect();
            assert_eq!(ids, strong);
            assert!(v["hits"]["hits"][0].get("sort").is_none());
            // Sorted by a field, the scores still decide what is left.
            let by_n = json!({"query": q, "size": 20, "min_score": least, "sort": [{"n": "asc"}]});
            let (_, v) = s.call("POST", "/ms/_search", Some(&by_n.to_string()));
            let mut ids: Vec<u64> = v["hits"]["hits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["sort"][0].as_u64().unwrap())
                .collect();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            let mut want: Vec<u64> = strong.iter().map(|i| i.parse().unwrap()).collect();
            want.sort();
            ids.sort();
            assert_eq!(ids, want);
            assert_eq!(s.call("POST", "/ms/_search", Some(r#"{"min_score": "high"}"#)).0, 400);
            let with_aggs = r#"{"min_score": 1, "aggs": {"m": {"max": {"field": "n"}}}}"#;
            assert_es_error(
                &s.call("POST", "/ms/_search", Some(with_aggs)),
                400,
                "illegal_argument_exception",
            );
        },
    );
}

#[test]
fn points_in_time_page_through_the_documents_of_their_moment() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let m = r#"{"properties": {"body": {"type": "text"}, "n": {"type": "long"}}}"#;
    for (index, shards) in [("pa", 3), ("pb", 1)] {
        let body = format!(r#"{{"settings": {{"number_of_shards": {shards}}}, "mappings": {m}}}"#);
        assert_eq!(s.call("PUT", &format!("/{index}"), Some(&body)).0, 200);
    }
    for i in 0..30 {
        let index = if i % 3 == 0 { "pb" } else { "pa" };
        let doc = json!({"body": format!("red {}", "fox ".repeat(i % 4)), "n": i % 7}).to_string();
        assert_eq!(s.call("PUT", &format!("/{index}/_doc/d{i}"), Some(&doc)).0, 201);
    }
    let ids = |v: &Value| -> Vec<String> {
        v["hits"]["hits"].as_array().unwrap().iter().map(|h| h["_id"].as_str().unwrap().to_string()).collect()
    };
    // The order now: by n, ties by index (pa first) then insertion.
    let (_, v) = s.call("POST", "/pa,pb/_search", Some(r#"{"sort": [{"n": "asc"}], "size": 100}"#));
    let want = ids(&v);
    assert_eq!(want.len(), 30);
    let (status, v) = s.call("POST", "/pa,pb/_pit?keep_alive=1m", None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["_shards"]["total"], 4);
    let pit = v["id"].as_str().unwrap().to_string();
    // Pages of 4 by n with search_after; between pages a new document and a delete of one not yet seen.
    let (mut got, mut deleted, mut after) = (vec![], vec![], None::<Value>);
    for page in 0.. {
        let mut body = json!({"pit": {"id": pit, "keep_alive": "1m"}, "sort": [{"n": "asc"}], "size": 4});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let (status, v) = s.call("POST", "/_search", Some(&body.to_string()));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["pit_id"], json!(pit));
        let hits = v["hits"]["hits"].as_array().unwrap().clone();
        let Some(last) = hits.last() else { break };
        // The sort values show the tiebreaker `_shard_doc` last.
        assert_eq!(last["sort"].as_array().unwrap().len(), 2, "{last}");
        after = Some(last["sort"].clone());
        got.extend(ids(&v));
        assert_eq!(s.call("PUT", &format!("/pa/_doc/new{page}"), Some(r#"{"body": "red", "n": -1}"#)).0, 201);
        if let Some(later) = want.iter().rev().find(|id| !got.contains(id) && !deleted.contains(*id)) {
            let index = if later[1..].parse::<usize>().unwrap() % 3 == 0 { "pb" } else { "pa" };
            assert_eq!(s.call("DELETE", &format!("/{index}/_doc/{later}"), None).0, 200);
            deleted.push(later.clone());
        }
    }
    let kept: Vec<String> = want.iter().filter(|id| !deleted.contains(id)).cloned().collect();
    assert_eq!(got, kept);
    // By score (the default), paged the same way: every remaining document of the moment once.
    let (mut seen, mut after) = (vec![], None::<Value>);
    loop {
        let mut body = json!({"pit": {"id": pit}, "query": {"match": {"body": "red"}}, "size": 7});
        if let Some(a) = &after {
            body["search_after"] = a.clone();
        }
        let (_, v) = s.call("POST", "/_search", Some(&body.to_string()));
        let hits = v["hits"]["hits"].as_array().unwrap().clone();
        let Some(last) = hits.last() else { break };
        assert!(last["_score"].as_f64().unwrap() > 0.0);
        after = Some(last["sort"].clone());
        seen.extend(ids(&v));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    let mut expect = kept.clone();
    expect.sort();
    assert_eq!(sorted, expect);
    // Refusals, then closing.
    for (path, body, status, reason) in [
        ("/pa/_search", json!({"pit": {"id": pit}}), 400, "[indices] cannot be used with point in time"),
        (
            "/_search",
            json!({"pit": {"id": pit}, "aggs": {"x": {"max": {"field": "n"}}}}),
            400,
            "aggregations in a point in time",
        ),
        ("/_search", json!({"pit": {"id": "nope"}}), 404, "No search context found"),
        (
            "/_search",
            json!({"pit": {"id": pit}, "sort": [{"n": "asc"}], "search_after": [1, "x"]}),
            400,
            "_shard_doc",
        ),
    ] {
        let (st, v) = s.call("POST", path, Some(&body.to_string()));
        assert_eq!(st, status, "{body}: {v}");
        assert!(v["error"]["reason"].as_str().unwrap().contains(reason), "{body}: {v}");
    }
    assert_eq!(s.call("POST", "/pa/_pit", None).0, 400, "keep_alive is required");
    let in_pit = |extra: Value| -> Value {
        let mut body = json!({"pit": {"id": pit}, "size": 100});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, v) = s.call("POST", "/_search", Some(&body.to_string()));
        assert_eq!(status, 200, "{body}: {v}");
        v
    };
    // `_shard_doc` named, descending: pages of 3 give the order of one search, each once; `from` too.
    let sort = json!([{"n": "asc"}, {"_shard_doc": "desc"}]);
    let whole = ids(&in_pit(json!({"sort": sort})));
    assert_eq!(whole.len(), kept.len());
    let (mut paged, mut after) = (vec![], None::<Value>);
    loop {
        let mut extra = json!({"sort": sort, "size": 3});
        if let Some(a) = &after {
            extra["search_after"] = a.clone();
        }
        let v = in_pit(extra);
        let Some(last) = v["hits"]["hits"].as_array().unwrap().last().cloned() else { break };
        after = Some(last["sort"].clone());
        paged.extend(ids(&v));
    }
    assert_eq!(paged, whole);
    assert_eq!(ids(&in_pit(json!({"sort": sort, "from": 2, "size": 3}))), whole[2..5]);
    // Totals as track_total_hits asks.
    assert!(in_pit(json!({"track_total_hits": false}))["hits"].get("total").is_none());
    assert_eq!(
        in_pit(json!({"track_total_hits": 5}))["hits"]["total"],
        json!({"value": 5, "relation": "gte"})
    );
    // A `_shard_doc` of no index of the point in time.
    let bad = json!({"pit": {"id": pit}, "sort": [{"n": "asc"}], "search_after": [1, 9_000_000_000_000u64]});
    assert_es_error(&s.call("POST", "/_search", Some(&bad.to_string())), 400, "illegal_argument_exception");
    assert_eq!(s.call("POST", "/_all/_search", Some(&json!({"pit": {"id": pit}}).to_string())).0, 400);
    // An index deleted meanwhile: the others answer, its shard counted as failed.
    assert_eq!(s.call("DELETE", "/pb", None).0, 200);
    let v = in_pit(json!({}));
    assert_eq!(v["_shards"]["failed"], 1);
    assert_eq!(v["_shards"]["failures"][0]["index"], "pb");
    let from_pa = kept.iter().filter(|id| id[1..].parse::<usize>().unwrap() % 3 != 0).count();
    assert_eq!(v["hits"]["total"]["value"].as_u64(), Some(from_pa as u64));
    let close = json!({"id": pit}).to_string();
    assert_eq!(s.call("DELETE", "/_pit", Some(&close)), (200, json!({"succeeded": true, "num_freed": 1})));
    assert_eq!(s.call("DELETE", "/_pit", Some(&close)), (404, json!({"succeeded": true, "num_freed": 0})));
    // OpenSearch's API: open, list, close.
    let (_, v) = s.call("POST", "/pa/_search/point_in_time?keep_alive=10m", None);
    let id = v["pit_id"].as_str().unwrap().to_string();
    assert!(v["creation_time"].as_u64().unwrap() > 0);
    let (_, list) = s.call("GET", "/_search/point_in_time/_all", None);
    assert_eq!(list["pits"][0]["pit_id"], json!(id));
    assert_eq!(list["pits"][0]["keep_alive"], 600_000);
    let close = json!({"pit_id": [id]}).to_string();
    let (status, v) = s.call("DELETE", "/_search/point_in_time", Some(&close));
    assert_eq!((status, v["pits"][0]["successful"].clone()), (200, json!(true)));
    // Closing one that is not open is still a 200 there, as OpenSearch answers.
    let (status, v) = s.call("DELETE", "/_search/point_in_time", Some(&close));
    assert_eq!((status, v["pits"][0]["successful"].clone()), (200, json!(false)));
    s.stop();
}

/// `_field_caps`: each field's type and capabilities across the indices named, in Elasticsearch's shape —
/// one entry per type, the indices listed only where they disagree (or lack the field, with
/// `include_unmapped`), dotted names' parents as objects, patterns in `fields`.
#[test]
fn field_caps_list_each_fields_types_across_indices() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path(), ServerConfig::default());
    let a = r#"{"mappings": {"properties": {"title": {"type": "text"}, "n": {"type": "long"},
        "user": {"properties": {"name": {"type": "keyword"}, "joined": {"type": "date"}}}}}}"#;
    let b = r#"{"mappings": {"properties": {"title": {"type": "text"}, "n": {"type": "keyword"}}}}"#;
    assert_eq!(s.call("PUT", "/fc-a", Some(a)).0, 200);
    assert_eq!(s.call("PUT", "/fc-b", Some(b)).0, 200);
    let (status, v) = s.call("GET", "/fc-a,fc-b/_field_caps?fields=title,n,user*", None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["indices"], json!(["fc-a", "fc-b"]));
    let f = &v["fields"];
    assert_eq!(
        f["title"],
        json!({"text": {"type": "text", "metadata_field": false, "searchable": true, "aggregatable": false}})
    );
    assert_eq!(f["n"]["long"]["indices"], json!(["fc-a"]), "{v}");
    assert_eq!(f["n"]["keyword"]["indices"], json!(["fc-b"]), "{v}");
    assert_eq!(f["n"]["keyword"]["aggregatable"], json!(true));
    assert_eq!(f["user"]["object"]["searchable"], json!(false), "{v}");
    assert_eq!(
        f["user.name"],
        json!({"keyword": {"type": "keyword", "metadata_field": false, "searchable": true, "aggregatable": true}}),
        "mapped in one index only: no index list without include_unmapped"
    );
    assert_eq!(f["user.joined"]["date"]["type"], json!("date"));
    assert_eq!(f.as_object().unwrap().len(), 5, "only what the patterns name: {v}");
    // A field's parents come with it, whatever the patterns name.
    let (_, v) = s.call("GET", "/fc-a/_field_caps?fields=user.name", None);
    let names: Vec<&String> = v["fields"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["user", "user.name"], "{v}");
    // Missing indices: ignored when asked; a pattern matching none is no error unless allow_no_indices=false.
    let (status, v) = s.call("GET", "/fc-a,nope/_field_caps?fields=title&ignore_unavailable=true", None);
    assert_eq!((status, v["indices"].clone()), (200, json!(["fc-a"])), "{v}");
    let (status, v) = s.call("GET", "/zz-*/_field_caps?fields=*", None);
    assert_eq!((status, v["fields"].clone()), (200, json!({})), "{v}");
    assert_es_error(
        &s.call("GET", "/zz-*/_field_caps?fields=*&allow_no_indices=false", None),
        404,
        "index_not_found_exception",
    );
    assert_eq!(s.call("GET", "/fc-a/_field_caps?fields=*&types=keyword", None).0, 400);
    assert_eq!(s.call("GET", "/fc-a/_field_caps?fields=*&frobnicate=1", None).0, 400);
    // Unmapped in one index: listed with include_unmapped.
    let (_, v) = s.call("GET", "/fc-*/_field_caps?fields=user.name&include_unmapped=true", None);
    assert_eq!(v["fields"]["user.name"]["keyword"]["indices"], json!(["fc-a"]), "{v}");
    assert_eq!(v["fields"]["user.name"]["unmapped"]["indices"], json!(["fc-b"]), "{v}");
    // `*` with the metadata fields spirit serves; the body's `fields`; a dynamically mapped field counts.
    assert_eq!(s.call("PUT", "/fc-b/_doc/1", Some(r#"{"extra": "x y"}"#)).0, 201);
    let (_, v) = s.call("POST", "/fc-b/_field_caps", Some(r#"{"fields": ["*"]}"#));
    let names: Vec<&String> = v["fields"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["_id", "_source", "extra", "n", "title"], "{v}");
    assert_eq!(v["fields"]["_id"]["_id"]["metadata_field"], json!(true));
    // Refusals: no fields, an unknown index, a bad flag.
    assert_es_error(&s.call("GET", "/fc-a/_field_caps", None), 400, "illegal_argument_exception");
    assert_es_error(&s.call("GET", "/nope/_field_caps?fields=*", None), 404, "index_not_found_exception");
    assert_es_error(
        &s.call("GET", "/fc-a/_field_caps?fields=*&include_unmapped=maybe", None),
        400,
        "illegal_argument_exception",
    );
    s.stop();
}

/// `_explain` and `explain: true`: the explanation's value is the hit's score, its parts are BM25's (idf from
/// the document counts, tf from the frequency and lengths), on one shard and on three; a document that does
/// not match says so, a missing one is a 404.
#[test]
fn explanations_give_each_hits_score_and_its_parts() {
    on_one_and_three_shards(
        "ex",
        r#"{"properties": {"body": {"type": "text"}, "tag": {"type": "keyword"}}}"#,
        |s| {
            let docs = [
                ("1", "red fox red", "a"),
                ("2", "blue fox", "b"),
                ("3", "red red red dog", "a"),
                ("4", "cat", "b"),
            ];
            for (id, body, tag) in docs {
                let d = json!({"body": body, "tag": tag});
                assert_eq!(s.call("PUT", &format!("/ex/_doc/{id}"), Some(&d.to_string())).0, 201);
            }
            let q = json!({"bool": {"should": [{"match": {"body": "red"}}, {"match": {"body": "fox"}}],
                                "filter": [{"term": {"tag": "a"}}]}});
            let (st, v) =
                s.call("POST", "/ex/_search", Some(&json!({"query": q, "explain": true}).to_string()));
            assert_eq!(st, 200, "{v}");
            let hits = v["hits"]["hits"].as_array().unwrap();
            assert_eq!(hits.len(), 2, "{v}");
            for h in hits {
                let id = h["_id"].as_str().unwrap();
                assert_eq!(h["_explanation"]["value"], h["_score"], "{h}");
                let (st, e) =
                    s.call("POST", &format!("/ex/_explain/{id}"), Some(&json!({"query": q}).to_string()));
                assert_eq!(st, 200, "{e}");
                assert_eq!(e["matched"], json!(true));
                assert_eq!(e["explanation"]["value"], h["_score"], "{e}");
                assert_eq!(e["explanation"]["description"], json!("sum of:"), "{e}");
            }
            // Doc 3: "red" three times in four words; its term's parts.
            let (_, e) = s.call(
                "POST",
                "/ex/_explain/3",
                Some(&json!({"query": {"match": {"body": "red"}}}).to_string()),
            );
            let top = &e["explanation"];
            let what = top["description"].as_str().unwrap();
            assert!(what.starts_with("weight(body:red in ") && what.ends_with(") [BM25], result of:"), "{e}");
            let parts = &top["details"][0]["details"];
            assert_eq!(parts[0]["details"][0]["value"], json!(2.0), "n: two documents have red: {e}");
            assert_eq!(parts[0]["details"][1]["value"], json!(4.0), "N: four have the field: {e}");
            assert_eq!(parts[1]["details"][0]["value"], json!(3.0), "freq: {e}");
            assert_eq!(parts[1]["details"][3]["value"], json!(4.0), "dl: {e}");
            assert_eq!(parts[1]["details"][4]["value"], json!(2.5), "avgdl: {e}");
            let (idf, tf) = (parts[0]["value"].as_f64().unwrap(), parts[1]["value"].as_f64().unwrap());
            assert!(((1.0f64 + 2.5 / 2.5).ln() - idf).abs() < 1e-6, "{e}");
            assert!((3.0 / (3.0 + 1.2 * (0.25 + 0.75 * 4.0 / 2.5)) - tf).abs() < 1e-6, "{e}");
            assert!((top["value"].as_f64().unwrap() - idf * tf).abs() < 1e-6, "{e}");
            // Not matching, missing, the query string, refusals.
            let (st, e) = s.call("GET", "/ex/_explain/4?q=body:red", None);
            assert_eq!((st, e["matched"].clone()), (200, json!(false)), "{e}");
            let (st, e) = s.call("GET", "/ex/_explain/99?q=body:red", None);
            assert_eq!((st, e["matched"].clone()), (404, json!(false)), "{e}");
            assert_eq!(s.call("GET", "/ex/_explain/1", None).0, 400);
            assert_eq!(
                s.call("POST", "/ex/_explain/1", Some(r#"{"query": {"match_all": {}}, "size": 3}"#)).0,
                400
            );
            assert_es_error(&s.call("GET", "/nope/_explain/1?q=x", None), 404, "index_not_found_exception");
            assert_eq!(s.call("GET", "/ex/_explain/1?q=body:red&routing=x", None).0, 400);
            // Through a filtered alias: a document outside the filter does not match.
            let alias = r#"{"actions": [{"add": {"index": "ex", "alias": "ex-a", "filter": {"term": {"tag": "a"}}}}]}"#;
            assert_eq!(s.call("POST", "/_aliases", Some(alias)).0, 200);
            let (_, e) = s.call("GET", "/ex-a/_explain/1?q=body:fox", None);
            assert_eq!(e["matched"], json!(true), "{e}");
            let (st, e) = s.call("GET", "/ex-a/_explain/2?q=body:fox", None);
            assert_eq!((st, e["matched"].clone()), (200, json!(false)), "{e}");
            // Deleted: not found; rewritten: the new version explained.
            assert_eq!(s.call("DELETE", "/ex/_doc/1", None).0, 200);
            assert_eq!(s.call("GET", "/ex/_explain/1?q=body:red", None).0, 404);
            assert_eq!(s.call("PUT", "/ex/_doc/2", Some(r#"{"body": "red", "tag": "b"}"#)).0, 200);
            let (st, e) = s.call("GET", "/ex/_explain/2?q=body:red", None);
            assert_eq!((st, e["matched"].clone()), (200, json!(true)), "{e}");
        },
    );
}
