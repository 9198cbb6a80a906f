//! `http-load`: load on loopback through the HTTP API. W writer threads send `_bulk` requests and S searcher
//! threads send `_search` requests for a fixed time, each over its own keep-alive connection; then the run
//! checks that no request failed and no acknowledged document was lost (`_count` equals the acknowledged
//! ids and a sample of them, plus every writer's last one, is found by real-time get), and reports
//! throughput and p50/p99/max latency per request kind.
//!
//! Without `--url` it starts the server in-process on a temporary data directory (crash-safe by default, so
//! every acknowledgement is a durable one).

use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct HttpLoadArgs {
    /// Server to load (default: start one in-process on loopback).
    #[arg(long)]
    url: Option<String>,
    /// Seconds of load.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Concurrent bulk writers.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Concurrent searchers.
    #[arg(long, default_value_t = 8)]
    searchers: usize,
    /// Documents per bulk request.
    #[arg(long, default_value_t = 200)]
    bulk: usize,
    /// luceneutil line file for document text (default: generated text).
    #[arg(long)]
    docs: Option<std::path::PathBuf>,
    /// Durability of the index the run creates.
    #[arg(long, default_value = "crash-safe")]
    durability: spirit::Durability,
    /// Index name (deleted first if it exists).
    #[arg(long, default_value = "load")]
    index: String,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

const WORDS: [&str; 24] = [
    "history", "world", "city", "music", "river", "science", "war", "film", "game", "school", "church",
    "party", "energy", "island", "language", "station", "album", "county", "football", "railway", "village",
    "novel", "season", "company",
];

fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<&str>) -> Result<(u16, Value), String> {
    let req = agent.request(method, url).set("content-type", "application/json");
    let r = match body {
        Some(b) => req.send_string(b),
        None => req.call(),
    };
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("{method} {url}: {e}")),
    };
    let status = resp.status();
    let text = resp.into_string().map_err(|e| e.to_string())?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

struct Kind {
    name: &'static str,
    micros: Vec<u64>,
    errors: Vec<String>,
}

impl Kind {
    fn summary(&mut self, secs: f64, unit_count: usize, unit: &str) -> Value {
        self.micros.sort_unstable();
        let s = json!({
            "requests": self.micros.len(), "errors": self.errors.len(), "per_second": self.micros.len() as f64 / secs,
            unit: unit_count, format!("{unit}_per_second"): unit_count as f64 / secs,
            "p50_ms": percentile(&self.micros, 0.5), "p99_ms": percentile(&self.micros, 0.99),
            "max_ms": percentile(&self.micros, 1.0),
        });
        println!(
            "| {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} |",
            self.name,
            self.micros.len(),
            self.micros.len() as f64 / secs,
            self.errors.len(),
            s["p50_ms"].as_f64().unwrap_or(0.0),
            s["p99_ms"].as_f64().unwrap_or(0.0),
            s["max_ms"].as_f64().unwrap_or(0.0)
        );
        s
    }
}

pub fn run(a: HttpLoadArgs) {
    let texts: Vec<String> = match &a.docs {
        Some(p) => {
            crate::input::load_docs(p, Some(50_000)).expect("docs").into_iter().map(|d| d.body).collect()
        }
        None => (0..5000)
            .map(|i| {
                (0..80).map(|j| WORDS[(i * 7 + j * 13 + j * j) % WORDS.len()]).collect::<Vec<_>>().join(" ")
            })
            .collect(),
    };
    let texts = Arc::new(texts);
    // The in-process server, when no URL is given.
    let mut local: Option<(tempfile::TempDir, tokio::runtime::Runtime, Arc<spirit::Engine>)> = None;
    let base = match &a.url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let dir = tempfile::tempdir().expect("tempdir");
            let shard = spirit::ShardConfig { dram_budget: 256 << 20, ..Default::default() };
            let engine = Arc::new(
                spirit::Engine::open(dir.path(), spirit::EngineConfig { shard, default_shards: None })
                    .expect("engine"),
            );
            let state =
                spirit_server::ServerState::new(engine.clone(), spirit_server::ServerConfig::default());
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
            let addr = listener.local_addr().expect("addr");
            rt.spawn(spirit_server::serve(state, listener, std::future::pending()));
            local = Some((dir, rt, engine));
            format!("http://{addr}")
        }
    };
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
    let index_url = format!("{base}/{}", a.index);
    let _ = call(&agent, "DELETE", &index_url, None);
    let settings = json!({"settings": {"spirit.durability": a.durability}, "mappings": {"properties": {"body": {"type": "text"}, "w": {"type": "keyword"}}}});
    let (st, v) = call(&agent, "PUT", &index_url, Some(&settings.to_string())).expect("create index");
    assert_eq!(st, 200, "create index: {v}");
    println!(
        "http-load: {} writers (bulk of {}), {} searchers, {} s against {base} ({:?})",
        a.writers, a.bulk, a.searchers, a.seconds, a.durability
    );

    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let writers: Vec<_> = (0..a.writers)
        .map(|w| {
            let (stop, texts, url, bulk) =
                (stop.clone(), texts.clone(), format!("{index_url}/_bulk"), a.bulk);
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
                let mut k = Kind { name: "bulk", micros: vec![], errors: vec![] };
                let mut acked: Vec<String> = vec![];
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let mut body = String::new();
                    let ids: Vec<String> = (0..bulk).map(|i| format!("w{w}-{}", n + i)).collect();
                    for (i, id) in ids.iter().enumerate() {
                        let doc =
                            json!({"body": texts[(n + i + w * 7919) % texts.len()], "w": format!("w{w}")});
                        body.push_str(&format!("{{\"index\":{{\"_id\":\"{id}\"}}}}\n{doc}\n"));
                    }
                    let t = Instant::now();
                    match call(&agent, "POST", &url, Some(&body)) {
                        Ok((200, v)) if v["errors"] == json!(false) => {
                            k.micros.push(t.elapsed().as_micros() as u64);
                            acked.extend(ids);
                        }
                        Ok((s, v)) => k.errors.push(format!(
                            "bulk {s}: {}",
                            v.to_string().chars().take(300).collect::<String>()
                        )),
                        Err(e) => k.errors.push(e),
                    }
                    n += bulk;
                }
                (k, acked)
            })
        })
        .collect();
    let searchers: Vec<_> = (0..a.searchers)
        .map(|s| {
            let (stop, url) = (stop.clone(), format!("{index_url}/_search"));
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
                let mut k = Kind { name: "search", micros: vec![], errors: vec![] };
                let mut i = s;
                while !stop.load(Ordering::Relaxed) {
                    let q = match i % 4 {
                        0 => json!({"query": {"match": {"body": WORDS[i % WORDS.len()]}}}),
                        1 => json!({"query": {"match": {"body": {"query": format!("{} {}", WORDS[i % WORDS.len()], WORDS[(i / 3) % WORDS.len()]), "operator": "and"}}}}),
                        2 => json!({"query": {"match_phrase": {"body": format!("{} {}", WORDS[i % WORDS.len()], WORDS[(i / 5) % WORDS.len()])}}}),
                        _ => json!({"query": {"match_all": {}}, "sort": [{"_doc": "desc"}]}),
                    };
                    let t = Instant::now();
                    match call(&agent, "POST", &url, Some(&q.to_string())) {
                        Ok((200, _)) => k.micros.push(t.elapsed().as_micros() as u64),
                        Ok((st, v)) => k.errors.push(format!("search {st}: {v}")),
                        Err(e) => k.errors.push(e),
                    }
                    i += a.searchers;
                }
                k
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(a.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut bulk = Kind { name: "bulk", micros: vec![], errors: vec![] };
    let mut acked: Vec<Vec<String>> = vec![];
    for h in writers {
        let (k, ids) = h.join().expect("writer");
        bulk.micros.extend(k.micros);
        bulk.errors.extend(k.errors);
        acked.push(ids);
    }
    let mut search = Kind { name: "search", micros: vec![], errors: vec![] };
    for h in searchers {
        let k = h.join().expect("searcher");
        search.micros.extend(k.micros);
        search.errors.extend(k.errors);
    }
    let secs = t0.elapsed().as_secs_f64();
    let total_acked: usize = acked.iter().map(Vec::len).sum();

    // No acknowledged document lost: the count, a sample and every writer's last acknowledged id.
    let (_, c) = call(&agent, "GET", &format!("{index_url}/_count"), None).expect("count");
    let count = c["count"].as_u64().unwrap_or(0) as usize;
    let mut checked = 0;
    let mut missing = vec![];
    for ids in &acked {
        let step = (ids.len() / 500).max(1);
        for id in ids.iter().step_by(step).chain(ids.last()) {
            checked += 1;
            match call(&agent, "GET", &format!("{index_url}/_doc/{id}"), None) {
                Ok((200, _)) => {}
                other => missing.push(format!("{id}: {other:?}")),
            }
        }
    }
    println!("\n| requests | count | per second | errors | p50 (ms) | p99 (ms) | max (ms) |\n|---|---:|---:|---:|---:|---:|---:|");
    let b = bulk.summary(secs, total_acked, "docs");
    let s = search.summary(secs, search.micros.len(), "queries");
    println!(
        "\n{total_acked} documents acknowledged ({:.0} docs/s), {count} counted by _count, {checked} fetched by id, {} missing",
        total_acked as f64 / secs,
        missing.len()
    );
    for e in bulk.errors.iter().chain(&search.errors).take(10) {
        println!("error: {e}");
    }
    for m in missing.iter().take(10) {
        println!("missing: {m}");
    }
    let lost = count != total_acked || !missing.is_empty();
    let ok = !lost && bulk.errors.is_empty() && search.errors.is_empty();
    println!("http-load: {}", if ok { "ok: no errors, no acknowledged document lost" } else { "FAILED" });
    if let Some(p) = &a.json {
        let out = json!({"seconds": secs, "writers": a.writers, "searchers": a.searchers, "bulk_size": a.bulk,
            "durability": a.durability, "bulk": b, "search": s, "acknowledged": total_acked, "counted": count,
            "fetched": checked, "missing": missing.len(), "ok": ok});
        std::fs::write(p, serde_json::to_string_pretty(&out).expect("json")).expect("write json");
    }
    if let Some((_dir, rt, engine)) = local.take() {
        rt.shutdown_timeout(Duration::from_secs(5));
        let _ = engine.close();
    }
    if !ok {
        std::process::exit(1);
    }
}
