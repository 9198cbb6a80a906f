//! Server metrics: counters and a query-latency histogram kept with atomics (no lock on the request path
//! except the small ring of recent latencies), exposed as Prometheus text at `/metrics` and as JSON at
//! `/_spirit/stats` for the web page's live charts. Engine-side numbers (documents, segments by state, tier
//! bytes against budgets, tLog barriers) are read from each index's stats at scrape time.

use parking_lot::Mutex;
use serde_json::{json, Value};
use spirit::Engine;
use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS: [f64; 16] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// The web page's latency chart covers queries of this last window.
const RECENT: Duration = Duration::from_secs(5);
/// At most this many recent latencies are kept.
const RECENT_CAP: usize = 8192;

pub struct Metrics {
    started: Instant,
    pub docs_ingested: AtomicU64,
    pub write_requests: AtomicU64,
    pub bulk_requests: AtomicU64,
    pub queries: AtomicU64,
    pub query_errors: AtomicU64,
    /// HTTP responses by status class (1xx..5xx).
    responses: [AtomicU64; 5],
    buckets: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_micros: AtomicU64,
    recent: Mutex<VecDeque<(Instant, u32)>>,
    /// (time, docs_ingested) samples for the ingest-rate gauge.
    rate: Mutex<VecDeque<(Instant, u64)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            docs_ingested: AtomicU64::new(0),
            write_requests: AtomicU64::new(0),
            bulk_requests: AtomicU64::new(0),
            queries: AtomicU64::new(0),
            query_errors: AtomicU64::new(0),
            responses: Default::default(),
            buckets: Default::default(),
            latency_sum_micros: AtomicU64::new(0),
            recent: Mutex::new(VecDeque::new()),
            rate: Mutex::new(VecDeque::new()),
        }
    }
}

impl Metrics {
    pub fn response(&self, status: u16) {
        let class = (status / 100).clamp(1, 5) as usize - 1;
        self.responses[class].fetch_add(1, Relaxed);
    }

    /// Records one search (or count) and its latency.
    pub fn query(&self, took: Duration, ok: bool) {
        self.queries.fetch_add(1, Relaxed);
        if !ok {
            self.query_errors.fetch_add(1, Relaxed);
        }
        let secs = took.as_secs_f64();
        let b = BUCKETS.iter().position(|&le| secs <= le).unwrap_or(BUCKETS.len());
        self.buckets[b].fetch_add(1, Relaxed);
        let micros = took.as_micros().min(u32::MAX as u128) as u32;
        self.latency_sum_micros.fetch_add(micros as u64, Relaxed);
        let now = Instant::now();
        let mut r = self.recent.lock();
        if r.len() == RECENT_CAP {
            r.pop_front();
        }
        r.push_back((now, micros));
    }

    /// (count, p50, p99) in microseconds over the recent window.
    fn recent_latency(&self) -> (usize, f64, f64) {
        let now = Instant::now();
        let mut v: Vec<u32> = {
            let mut r = self.recent.lock();
            while r.front().is_some_and(|(t, _)| now.duration_since(*t) > RECENT) {
                r.pop_front();
            }
            r.iter().map(|(_, m)| *m).collect()
        };
        if v.is_empty() {
            return (0, 0.0, 0.0);
        }
        v.sort_unstable();
        let pct = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize] as f64;
        (v.len(), pct(0.5), pct(0.99))
    }

    /// Documents per second over the last ~10 s (sampled at each scrape).
    fn ingest_rate(&self) -> f64 {
        let now = Instant::now();
        let docs = self.docs_ingested.load(Relaxed);
        let mut r = self.rate.lock();
        r.push_back((now, docs));
        while r.len() > 2 && now.duration_since(r[0].0) > Duration::from_secs(10) {
            r.pop_front();
        }
        let (t0, d0) = r[0];
        let dt = now.duration_since(t0).as_secs_f64();
        if dt < 0.001 {
            0.0
        } else {
            (docs - d0) as f64 / dt
        }
    }

    /// `/_spirit/stats` (the contract of the web page).
    pub fn stats_json(&self, engine: &Engine) -> Value {
        let (count, p50, p99) = self.recent_latency();
        let mut tiers = [0u64; 4];
        let mut indexes = vec![];
        for name in engine.index_names() {
            let Some(idx) = engine.index(&name) else { continue };
            let s = idx.stats().shard;
            let d = [
                (s.dram.short_term_used + s.dram.long_term_used + s.result_cache.used_bytes) as u64,
                s.dram.budget as u64,
                s.persistent.used,
                s.persistent.budget,
            ];
            for (t, v) in tiers.iter_mut().zip(d) {
                *t += v;
            }
            let segments: serde_json::Map<String, Value> =
                s.segments.iter().map(|(st, n)| (format!("{st:?}").to_lowercase(), json!(n))).collect();
            let c = &s.result_cache;
            indexes.push(json!({
                "name": name, "docs": s.docs, "durability": s.durability,
                "dram_bytes": d[0], "dram_budget": d[1], "persistent_bytes": d[2], "persistent_budget": d[3],
                "segments": segments,
                "result_cache": {"hits": c.hits, "misses": c.misses, "stale": c.stale, "hit_rate": c.hit_rate,
                                 "entries": c.entries, "bytes": c.used_bytes, "capacity_bytes": c.capacity_bytes},
            }));
        }
        json!({
            "uptime_secs": self.started.elapsed().as_secs_f64(),
            "ingest": {"docs_total": self.docs_ingested.load(Relaxed), "requests_total": self.write_requests.load(Relaxed) + self.bulk_requests.load(Relaxed)},
            "queries": {
                "total": self.queries.load(Relaxed), "errors_total": self.query_errors.load(Relaxed),
                "recent": {"count": count, "p50_micros": p50, "p99_micros": p99},
            },
            "tiers": {"dram_bytes": tiers[0], "dram_budget": tiers[1], "persistent_bytes": tiers[2], "persistent_budget": tiers[3]},
            "indexes": indexes,
        })
    }

    /// `/metrics` in the Prometheus text exposition format (each family's HELP and TYPE lines, then its
    /// samples, one group per family).
    pub fn prometheus(&self, engine: &Engine, query_queue: usize, query_threads: usize) -> String {
        let mut o = String::new();
        let one = |v: f64| vec![(String::new(), v)];
        family(
            &mut o,
            "spirit_uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            one(self.started.elapsed().as_secs_f64()),
        );
        family(
            &mut o,
            "spirit_docs_ingested_total",
            "counter",
            "Documents accepted by index, create, update and bulk requests.",
            one(self.docs_ingested.load(Relaxed) as f64),
        );
        family(
            &mut o,
            "spirit_ingest_docs_per_second",
            "gauge",
            "Documents accepted per second over about the last 10 s.",
            one(self.ingest_rate()),
        );
        family(
            &mut o,
            "spirit_write_requests_total",
            "counter",
            "Single-document write requests.",
            one(self.write_requests.load(Relaxed) as f64),
        );
        family(
            &mut o,
            "spirit_bulk_requests_total",
            "counter",
            "Bulk requests.",
            one(self.bulk_requests.load(Relaxed) as f64),
        );
        let classes = self
            .responses
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("class=\"{}xx\"", i + 1), c.load(Relaxed) as f64))
            .collect();
        family(&mut o, "spirit_http_responses_total", "counter", "HTTP responses by status class.", classes);
        family(
            &mut o,
            "spirit_query_errors_total",
            "counter",
            "Searches and counts answered with an error.",
            one(self.query_errors.load(Relaxed) as f64),
        );
        let n = "spirit_query_duration_seconds";
        let _ =
            writeln!(o, "# HELP {n} Search and count latency, measured on the server.\n# TYPE {n} histogram");
        let mut cum = 0;
        for (i, le) in BUCKETS.iter().enumerate() {
            cum += self.buckets[i].load(Relaxed);
            let _ = writeln!(o, "{n}_bucket{{le=\"{le}\"}} {cum}");
        }
        cum += self.buckets[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(o, "{n}_bucket{{le=\"+Inf\"}} {cum}");
        let _ = writeln!(o, "{n}_sum {}", self.latency_sum_micros.load(Relaxed) as f64 / 1e6);
        let _ = writeln!(o, "{n}_count {cum}");
        family(
            &mut o,
            "spirit_query_queue_depth",
            "gauge",
            "Searches waiting for a query-pool thread.",
            one(query_queue as f64),
        );
        family(
            &mut o,
            "spirit_query_threads",
            "gauge",
            "Threads of the query pool.",
            one(query_threads as f64),
        );

        let stats: Vec<(String, spirit::shard::ShardStats)> = engine
            .index_names()
            .into_iter()
            .filter_map(|name| {
                engine.index(&name).map(|i| (format!("index=\"{}\"", escape_label(&name)), i.stats().shard))
            })
            .collect();
        let per = |f: &dyn Fn(&spirit::shard::ShardStats) -> f64| {
            stats.iter().map(|(l, s)| (l.clone(), f(s))).collect::<Vec<_>>()
        };
        family(&mut o, "spirit_index_docs", "gauge", "Live documents per index.", per(&|s| s.docs as f64));
        family(
            &mut o,
            "spirit_index_deleted_docs",
            "gauge",
            "Deleted documents not yet purged, per index.",
            per(&|s| (s.deleted - s.purged) as f64),
        );
        let segs = stats
            .iter()
            .flat_map(|(l, s)| {
                s.segments.iter().map(move |(st, c)| {
                    (format!("{l},state=\"{}\"", format!("{st:?}").to_lowercase()), *c as f64)
                })
            })
            .collect();
        family(&mut o, "spirit_index_segments", "gauge", "Segments per index by lifecycle state.", segs);
        let in_flight = per(&|s| {
            s.segments
                .iter()
                .filter(|(st, _)| !matches!(format!("{st:?}").to_lowercase().as_str(), "fresh" | "merged"))
                .map(|(_, c)| *c as f64)
                .sum()
        });
        family(
            &mut o,
            "spirit_pipeline_segments_in_flight",
            "gauge",
            "Segments between sealing and merging (flushed, engraved, committed): the pipeline's queues.",
            in_flight,
        );
        let tiers = |used: bool| {
            stats
                .iter()
                .flat_map(|(l, s)| {
                    let (d, p) = if used {
                        let dram = s.dram.short_term_used + s.dram.long_term_used + s.result_cache.used_bytes;
                        (dram as f64, s.persistent.used as f64)
                    } else {
                        (s.dram.budget as f64, s.persistent.budget as f64)
                    };
                    [(format!("{l},tier=\"dram\""), d), (format!("{l},tier=\"persistent\""), p)]
                })
                .collect::<Vec<_>>()
        };
        family(&mut o, "spirit_tier_bytes", "gauge", "Bytes used per memory tier and index.", tiers(true));
        family(
            &mut o,
            "spirit_tier_budget_bytes",
            "gauge",
            "Budget per memory tier and index.",
            tiers(false),
        );
        for (name, help, f) in [
            (
                "spirit_result_cache_hits_total",
                "Searches answered from the result cache (plus the segments newer than the entry).",
                &(|s: &spirit::shard::ShardStats| s.result_cache.hits as f64) as &dyn Fn(&_) -> f64,
            ),
            (
                "spirit_result_cache_misses_total",
                "Cacheable searches with no entry in the result cache.",
                &|s: &spirit::shard::ShardStats| s.result_cache.misses as f64,
            ),
            (
                "spirit_result_cache_stale_total",
                "Searches whose entry could not prove an exact answer (run in full, entry replaced).",
                &|s: &spirit::shard::ShardStats| s.result_cache.stale as f64,
            ),
            (
                "spirit_result_cache_evictions_total",
                "Entries evicted from the result cache to make room.",
                &|s: &spirit::shard::ShardStats| s.result_cache.evictions as f64,
            ),
        ] {
            family(&mut o, name, "counter", help, per(f));
        }
        family(
            &mut o,
            "spirit_result_cache_hit_ratio",
            "gauge",
            "Result cache hits / lookups since the index was opened.",
            per(&|s| s.result_cache.hit_rate),
        );
        family(
            &mut o,
            "spirit_result_cache_entries",
            "gauge",
            "Entries in the result cache.",
            per(&|s| s.result_cache.entries as f64),
        );
        family(
            &mut o,
            "spirit_result_cache_bytes",
            "gauge",
            "Bytes held by the result cache (part of the DRAM tier).",
            per(&|s| s.result_cache.used_bytes as f64),
        );
        family(
            &mut o,
            "spirit_result_cache_capacity_bytes",
            "gauge",
            "The result cache's share of the DRAM budget.",
            per(&|s| s.result_cache.capacity_bytes as f64),
        );
        family(
            &mut o,
            "spirit_selective_cache_hit_ratio",
            "gauge",
            "Selective cache (hot dictionary chains in DRAM): lookups answered from it / lookups.",
            per(&|s| s.selective_cache.hit_rate),
        );
        family(
            &mut o,
            "spirit_selective_cache_bytes",
            "gauge",
            "Bytes held by the selective cache (part of the DRAM tier).",
            per(&|s| s.selective_cache.used_bytes as f64),
        );
        family(
            &mut o,
            "spirit_selective_cache_pinned_list_bytes",
            "gauge",
            "Of the selective cache's bytes, the hot posting lists' heads pinned in DRAM (skip tables, small lists' blocks).",
            per(&|s| s.selective_cache.pinned_list_bytes as f64),
        );
        family(
            &mut o,
            "spirit_selective_cache_contended_total",
            "counter",
            "Selective cache lookups and admissions that found it held by another thread and went on without it (a query never waits for the cache).",
            per(&|s| s.selective_cache.contended as f64),
        );
        // The pipeline's steps, by step: how many completed and the time they took on their threads.
        type Step = (&'static str, fn(&spirit::shard::ShardStats) -> (u64, u64));
        const STEPS: [Step; 4] = [
            ("flush", |s| (s.flushes, s.flush_millis)),
            ("engrave", |s| (s.engraves, s.engrave_millis)),
            ("merge", |s| (s.merges, s.merge_millis)),
            ("compaction", |s| (s.compactions, s.compaction_millis)),
        ];
        let steps = |time: bool| {
            stats
                .iter()
                .flat_map(|(l, s)| {
                    STEPS.iter().map(move |(step, f)| {
                        let (n, ms) = f(s);
                        (format!("{l},step=\"{step}\""), if time { ms as f64 / 1e3 } else { n as f64 })
                    })
                })
                .collect::<Vec<_>>()
        };
        family(
            &mut o,
            "spirit_pipeline_steps_total",
            "counter",
            "Pipeline steps completed per index: flushes, engraves, merges, compactions.",
            steps(false),
        );
        family(
            &mut o,
            "spirit_pipeline_step_seconds_total",
            "counter",
            "Time the completed pipeline steps took on their threads (wall time, in whole milliseconds).",
            steps(true),
        );
        family(
            &mut o,
            "spirit_tlog_barriers_total",
            "counter",
            "tLog persist barriers (crash-safe group commits and checkpoints).",
            per(&|s| s.tlog_syncs as f64),
        );
        family(
            &mut o,
            "spirit_tlog_barrier_seconds_total",
            "counter",
            "Time spent in tLog persist barriers.",
            per(&|s| s.tlog_sync_nanos as f64 / 1e9),
        );
        o
    }
}

fn family(o: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(o, "{name} {v}");
        } else {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        }
    }
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
