//! An index: a schema, its settings and its shards, behind the document-level API (`add`, `get`, `delete`,
//! `search`).
//!
//! Shards (SPIRIT §4.10's executors) share nothing: each has its own heaps, GDT, pipeline and result cache,
//! and a document lives in the shard its `_id` hashes to, so updates, deletes and gets go to one shard. A
//! search plans once over every shard's snapshot, sums the BM25 statistics of all shards, evaluates the
//! shards in parallel with those sums and merges their top-k: a document scores the same whatever the shard
//! count. Ties (and newest-first order) across shards are broken by a hidden index-wide sequence number
//! (`_seq`) that every shard stamps under its writer lock, so N shards answer exactly like one. A one-shard
//! index keeps its shard directly in the index directory; N shards live in `shard-0` … `shard-{N-1}`.

use crate::config::ShardConfig;
use crate::error::{Error, Result};
use crate::gdt::Snapshot;
use crate::query::{self, Query, SearchOptions, Sort};
use crate::schema::document::{analyze_document_logged, new_fields, take_id};
use crate::schema::{analyze_document, FieldType, Schema};
use crate::shard::{Precondition, Sequencer, Shard, ShardStats};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Instant;

/// Settings stored with the index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IndexSettings {
    #[serde(default = "k1")]
    pub bm25_k1: f32,
    #[serde(default = "b")]
    pub bm25_b: f32,
    /// Largest accepted document (`_source` bytes).
    #[serde(default = "max_doc")]
    pub max_document_bytes: usize,
    /// Analyzer of text fields mapped without one (explicitly or dynamically); `None`: `standard`.
    #[serde(default)]
    pub default_analyzer: Option<String>,
    /// Shards (executors), fixed when the index is created; the budgets are split evenly between them.
    #[serde(default = "one")]
    pub number_of_shards: usize,
    /// The index's named analyzers (Elasticsearch's `analysis.analyzer.NAME`), each definition as the
    /// create request gave it. The engine does not read them: its mappings name built-in analyzers, and the
    /// HTTP layer resolves these names to the built-in analyzer each definition equals wherever it meets
    /// one after creation (a mapping update, `_analyze`, a suggester's `analyzer`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub analyzers: std::collections::BTreeMap<String, serde_json::Value>,
}

fn one() -> usize {
    1
}

/// Most shards one index may have.
pub const MAX_SHARDS: usize = 64;

pub use crate::schema::SEQ_FIELD;

fn k1() -> f32 {
    1.2
}
fn b() -> f32 {
    0.75
}
fn max_doc() -> usize {
    100 << 20
}

impl IndexSettings {
    /// Checks the BM25 parameters as Lucene's `BM25Similarity` does: `k1` finite and not negative, `b`
    /// between 0 and 1. Block-max pruning relies on it — a score that grows with a term's frequency and
    /// falls as the field grows longer bounds a block by its best (frequency, length) pairs.
    pub fn validate(&self) -> Result<()> {
        if !(self.bm25_k1.is_finite() && self.bm25_k1 >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "illegal k1 value: {}, must be a non-negative finite value",
                self.bm25_k1
            )));
        }
        if !(0.0..=1.0).contains(&self.bm25_b) {
            return Err(Error::InvalidArgument(format!(
                "illegal b value: {}, must be between 0 and 1",
                self.bm25_b
            )));
        }
        Ok(())
    }
}

impl Default for IndexSettings {
    fn default() -> Self {
        IndexSettings {
            bm25_k1: k1(),
            bm25_b: b(),
            max_document_bytes: max_doc(),
            default_analyzer: None,
            number_of_shards: 1,
            analyzers: Default::default(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    schema: Schema,
    settings: IndexSettings,
    id_counter: u64,
}

/// A document analyzed and ready to insert ([`Index::prepare`] → [`Index::insert_prepared`]).
pub struct PreparedDoc {
    /// No `_id` was given: one is generated at insertion (and no existing document can be replaced).
    generated: bool,
    pub(crate) analyzed: crate::schema::AnalyzedDoc,
}

/// What [`Index::insert_prepared`] returns: the add, and in crash-safe mode what to sync before it is durable.
pub(crate) type Inserted = Result<(AddResult, Option<Pending>)>;

/// The outcome of an `add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddResult {
    pub id: String,
    /// Internal doc id (global within the shard).
    pub doc: u32,
    /// The shard holding the document.
    pub shard: usize,
    /// A live document with the same `_id` was replaced.
    pub replaced: bool,
    /// The document's `_version`: 1 for a new `_id`, one more than the replaced document's, or the external
    /// version the write gave ([`Precondition::Version`]).
    pub version: u64,
}

/// The live document of an `_id` ([`Index::get_versioned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveDoc {
    /// Its sequence number: its doc id in its shard, what `if_seq_no` names ([`Precondition::SeqNo`]).
    pub seq_no: u64,
    /// Its `_version`.
    pub version: u64,
    /// The stored `_source` as JSON bytes.
    pub source: Vec<u8>,
}

/// A write accepted but not yet durable (crash-safe mode): its shard and tLog position there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub shard: usize,
    pub lsn: u64,
}

/// Deferred writes to make durable together: the highest tLog position per shard.
#[derive(Debug, Clone, Default)]
pub struct PendingSet(Vec<Option<u64>>);

impl PendingSet {
    pub fn note(&mut self, p: Option<Pending>) {
        if let Some(p) = p {
            if self.0.len() <= p.shard {
                self.0.resize(p.shard + 1, None);
            }
            self.0[p.shard] = self.0[p.shard].max(Some(p.lsn));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|l| l.is_none())
    }
}

/// What [`Index::delete_versions`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletedVersions {
    pub deleted: u64,
    /// `_id`s whose version was replaced since it matched: left alone (a version conflict).
    pub conflicts: Vec<String>,
    /// Versions deleted by someone else since they matched.
    pub gone: u64,
}

/// One search hit.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: String,
    pub score: f32,
    /// Internal doc id within its shard.
    pub doc: u32,
    pub shard: usize,
    /// Insertion order across the index (higher = newer): the doc id in a one-shard index, `_seq` in a
    /// sharded one.
    pub seq: u64,
    /// The stored `_source` as JSON bytes.
    pub source: Vec<u8>,
    /// With [`Sort::Field`]: the hit's value of the sort field.
    pub sort_value: Option<f64>,
    /// With [`Index::search_sorted`]: the hit's value of each sort key (`None`: the field has none) — what a
    /// next page passes as `after`.
    pub sort_values: Vec<Option<SortValue>>,
    /// With a [`SortedPage::collapse`] key: the hit's value of it, its group (`None`: the group of documents
    /// without one).
    pub collapse_value: Option<SortValue>,
}

/// A hit's group under a collapse key: its value (a number by its bits), or none.
#[derive(PartialEq, Eq, Hash)]
enum GroupKey {
    Missing,
    Number(u64),
    Text(String),
}

impl GroupKey {
    fn of(v: &Option<SortValue>) -> GroupKey {
        match v {
            None => GroupKey::Missing,
            Some(SortValue::Number(x)) => GroupKey::Number(x.to_bits()),
            Some(SortValue::Text(t)) => GroupKey::Text(t.clone()),
        }
    }
}

/// How [`Index::search_sorted_with`] pages: the window, `search_after`, a scroll's horizon, collapsing.
#[derive(Debug, Clone, Copy, Default)]
pub struct SortedPage<'a> {
    /// Only hits strictly after these sort values (Elasticsearch's `search_after`).
    pub after: Option<&'a [Option<SortValue>]>,
    /// Hits (groups, when collapsing) to skip.
    pub offset: usize,
    /// Hits (groups) to return.
    pub limit: usize,
    /// Read each hit's `_id` and stored source.
    pub fetch: bool,
    /// Only the documents below this horizon, with its query plan and statistics ([`Index::horizon`]).
    pub horizon: Option<&'a Horizon>,
    /// One hit per value of this numeric, date or keyword field (Elasticsearch's `collapse`).
    pub collapse: Option<SortKey>,
    /// Only matches scoring at least this (Elasticsearch's `min_score`; the count too). Scores are
    /// computed for it whatever the keys.
    pub min_score: Option<f32>,
}

/// A hit's value of one sort key ([`Hit::sort_values`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SortValue {
    /// A score, an insertion order, a numeric or date field's value.
    Number(f64),
    /// A keyword field's value.
    Text(String),
}

impl SortValue {
    fn cmp(&self, o: &SortValue) -> std::cmp::Ordering {
        match (self, o) {
            (SortValue::Number(x), SortValue::Number(y)) => x.total_cmp(y),
            (SortValue::Text(x), SortValue::Text(y)) => x.cmp(y),
            // Never compared: `search_sorted` checks that `after` has each key's kind.
            (SortValue::Number(_), SortValue::Text(_)) => std::cmp::Ordering::Less,
            (SortValue::Text(_), SortValue::Number(_)) => std::cmp::Ordering::Greater,
        }
    }
}

/// One key of a sort over several keys ([`Index::search_sorted`]); later keys order what earlier ones tie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SortKey {
    /// The BM25 score.
    Score { descending: bool },
    /// Insertion order: the doc id in a one-shard index, `_seq` in a sharded one — fixed for a document's
    /// life (merges keep doc ids), so it makes a stable last key for paging with `after`.
    Seq { descending: bool },
    /// A numeric or date field's value ([`Index::sort_field`] resolves a name); documents without one go
    /// last, or first with `missing_first`.
    Field { field: u16, descending: bool, missing_first: bool },
    /// A keyword field's value, in byte order; a document with several values sorts by its smallest
    /// ascending and its largest descending (Elasticsearch's default `mode`). Read from the field's postings
    /// (spirit keeps no per-document keyword column): at most [`query::aggs::MAX_TERMS`] distinct values.
    Keyword { field: u16, descending: bool, missing_first: bool },
}

impl SortKey {
    /// The order of two values of this key (`None`: missing).
    fn cmp(self, a: &Option<SortValue>, b: &Option<SortValue>) -> std::cmp::Ordering {
        use std::cmp::Ordering::*;
        let (descending, missing_first) = match self {
            SortKey::Score { descending } | SortKey::Seq { descending } => (descending, false),
            SortKey::Field { descending, missing_first, .. }
            | SortKey::Keyword { descending, missing_first, .. } => (descending, missing_first),
        };
        match (a, b) {
            (Some(x), Some(y)) if descending => y.cmp(x),
            (Some(x), Some(y)) => x.cmp(y),
            (None, None) => Equal,
            (None, Some(_)) => {
                if missing_first {
                    Less
                } else {
                    Greater
                }
            }
            (Some(_), None) => {
                if missing_first {
                    Greater
                } else {
                    Less
                }
            }
        }
    }
}

/// Cuts `cands` (and their rows of `values`, `keys.len()` each) back to the best `end` of them in the sort's
/// order (ties by `_seq`), keeping their order of arrival; returns the sort values and `_seq` of the worst one
/// kept, if `end` were kept (`None` when fewer were there). With `end` 0 nothing is kept and every later
/// match is barred.
fn keep_best(
    keys: &[SortKey],
    end: usize,
    cands: &mut Vec<(u64, usize, u32, f32)>,
    values: &mut Vec<Option<SortValue>>,
) -> Option<(Vec<Option<SortValue>>, u64)> {
    let nk = keys.len();
    if cands.len() <= end {
        return None;
    }
    let by = |a: &u32, b: &u32| {
        let (a, b) = (*a as usize, *b as usize);
        cmp_sort_values(keys, &values[a * nk..a * nk + nk], &values[b * nk..b * nk + nk])
            .then(cands[a].0.cmp(&cands[b].0))
    };
    if end == 0 {
        cands.clear();
        values.clear();
        // A bar of no values and `_seq` 0: every match ties it on no keys and is not below it on `_seq`.
        return Some((vec![], 0));
    }
    let mut order: Vec<u32> = (0..cands.len() as u32).collect();
    order.select_nth_unstable_by(end - 1, by);
    let worst = order[end - 1] as usize;
    let bar = (values[worst * nk..worst * nk + nk].to_vec(), cands[worst].0);
    order.truncate(end);
    order.sort_unstable();
    for (to, &from) in order.iter().enumerate() {
        let from = from as usize;
        cands[to] = cands[from];
        for j in 0..nk {
            values.swap(to * nk + j, from * nk + j);
        }
    }
    cands.truncate(end);
    values.truncate(end * nk);
    Some(bar)
}

/// The order of two hits' values under `keys`, key by key.
fn cmp_sort_values(keys: &[SortKey], a: &[Option<SortValue>], b: &[Option<SortValue>]) -> std::cmp::Ordering {
    keys.iter()
        .zip(a.iter().zip(b))
        .map(|(k, (x, y))| k.cmp(x, y))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

impl Hit {
    pub fn source_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.source).unwrap_or(serde_json::Value::Null)
    }
}

#[derive(Debug, Clone)]
pub struct SearchResult {
    pub total: u64,
    pub total_exact: bool,
    pub hits: Vec<Hit>,
    pub took_micros: u64,
}

/// The documents an index held at one moment — each shard's doc ids below its watermark then (a later
/// document, and a later version of an old one, lies at or past it) — and the BM25 statistics a query read
/// at that moment, so that each document scores the same on every page of a scroll. It pins nothing: a
/// page reads the current snapshots (see [`Index::search_sorted_with`]), so holding one costs a few words
/// and never keeps memory from its ring.
#[derive(Debug, Clone)]
pub struct Horizon {
    /// Per shard, the first doc id past the horizon.
    ends: Vec<u32>,
    stats: std::sync::Arc<query::CollectionStats>,
    /// The query as planned then: its expansions (prefixes, fuzzy terms, wildcards) are those of that
    /// moment too, so terms written later cannot change which old documents match.
    node: std::sync::Arc<query::Node>,
}

/// A search's match count, whether it is exact, and its hits (shard, doc) in order.
type Ranked = (u64, bool, Vec<(usize, u64, query::ScoredDoc)>);

/// A numeric field's values over a snapshot's segments, each segment's column found once rather than an image
/// opened per document (see `search_sorted` for what it saved).
struct NumberColumn<'s> {
    field: u16,
    /// Per segment, in doc order: its first doc id and where its values are.
    segs: Vec<(u32, NumberSource<'s>)>,
}

enum NumberSource<'s> {
    Fresh(&'s crate::segment::FreshSegment),
    Image(Option<&'s [u8]>),
}

impl<'s> NumberColumn<'s> {
    fn new(snap: &'s Snapshot, field: u16) -> Result<NumberColumn<'s>> {
        let mut segs = Vec::with_capacity(snap.segments.len());
        for seg in &snap.segments {
            let src = match &seg.data {
                crate::gdt::SegData::Fresh(f) => NumberSource::Fresh(f),
                crate::gdt::SegData::Image { .. } => {
                    let v = seg.image().expect("image").map_err(|e| Error::Format(e.0))?;
                    NumberSource::Image(v.numbers(field))
                }
            };
            segs.push((seg.base_doc, src));
        }
        Ok(NumberColumn { field, segs })
    }

    /// The value of `doc` (a visible doc id of the snapshot), if it has one.
    fn get(&self, doc: u32) -> Option<f64> {
        let i = self.segs.partition_point(|s| s.0 <= doc).checked_sub(1)?;
        let (base, src) = &self.segs[i];
        match src {
            NumberSource::Fresh(f) => f.numeric(self.field, doc - base),
            NumberSource::Image(col) => col.and_then(|c| crate::segment::image::number_at(c, doc - base)),
        }
    }
}

/// `_id` and `_source` of doc `local` of segment `seg`.
fn stored(seg: &crate::gdt::SegmentDesc, local: u32) -> Result<(String, Vec<u8>)> {
    match &seg.data {
        crate::gdt::SegData::Fresh(f) => f.stored(local),
        crate::gdt::SegData::Image { .. } => seg.image().expect("image").and_then(|v| v.stored(local)),
    }
    .map_err(|e| Error::Format(format!("segment {}: {}", seg.id, e.0)))
}

/// Sorts hits from several shards (`(seq, shard, hit)`) into the query's order, breaking ties by `seq` the way
/// one shard breaks them by doc id: by score (ties newest first), newest first, or by field value (documents
/// without one last, ties oldest first).
fn merge_order(hits: &mut [(u64, usize, query::ScoredDoc)], sort: Sort) {
    match sort {
        Sort::Score => hits.sort_by(|a, b| b.2.score.total_cmp(&a.2.score).then(b.0.cmp(&a.0))),
        Sort::Newest => hits.sort_by_key(|h| std::cmp::Reverse(h.0)),
        Sort::Field { descending, .. } => hits.sort_by(|a, b| {
            let v = |x: &(u64, usize, query::ScoredDoc)| x.2.sort_value.filter(|v| !v.is_nan());
            match (v(a), v(b)) {
                (Some(x), Some(y)) => {
                    let o = x.total_cmp(&y);
                    if descending {
                        o.reverse()
                    } else {
                        o
                    }
                }
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
            .then(a.0.cmp(&b.0))
        }),
    }
}

/// The shard count of the index in `dir`: its shard directories, else 1 for an index with its heap in `dir`
/// itself, else (a new index) from `settings`.
fn shard_count(dir: &Path, settings: Option<&IndexSettings>) -> Result<usize> {
    let mut found = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.strip_prefix("shard-").is_some_and(|i| i.parse::<usize>().is_ok()) && e.path().is_dir() {
                found += 1;
            }
        }
    }
    if found > 0 {
        let n = (0..).take_while(|i| dir.join(format!("shard-{i}")).is_dir()).count();
        if n != found {
            return Err(Error::Format(format!(
                "{}: {found} shard directories, but not shard-0 … shard-{} without gaps",
                dir.display(),
                found - 1
            )));
        }
        return Ok(n);
    }
    if dir.join(crate::shard::HEAP_FILE).exists() {
        return Ok(1);
    }
    let n = settings.map_or(1, |s| s.number_of_shards);
    if n == 0 || n > MAX_SHARDS {
        return Err(Error::InvalidArgument(format!(
            "number_of_shards must be between 1 and {MAX_SHARDS}, got {n}"
        )));
    }
    Ok(n)
}

/// Where shard `i` of `n` lives.
fn shard_dir(dir: &Path, n: usize, i: usize) -> std::path::PathBuf {
    if n == 1 {
        dir.to_path_buf()
    } else {
        dir.join(format!("shard-{i}"))
    }
}

/// A bulk load in progress on an index ([`Index::bulk_guard`]).
pub struct BulkGuard<'a> {
    index: &'a Index,
    done: bool,
}

impl BulkGuard<'_> {
    /// Ends the bulk load on every shard (each bulk-sized fresh segment is sealed, see `Shard::end_bulk`);
    /// returns the first error, after every shard has counted the load as ended.
    pub fn finish(mut self) -> Result<()> {
        self.done = true;
        self.end_all()
    }

    fn end_all(&self) -> Result<()> {
        let mut first = Ok(());
        for s in &self.index.shards {
            if let Err(e) = s.end_bulk() {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for BulkGuard<'_> {
    fn drop(&mut self) {
        // Unwinding or an early return only (`finish` is the normal end): a seal that fails here fails again,
        // with its error, at the shard's next write.
        if !self.done {
            let _ = self.end_all();
        }
    }
}

/// One shard's configuration: the index's budgets split evenly, so the index as a whole stays inside them.
fn split_config(cfg: &ShardConfig, n: usize) -> Result<ShardConfig> {
    let mut c = cfg.clone();
    if n > 1 {
        c.dram_budget = cfg.dram_budget / n;
        c.persistent_budget = cfg.persistent_budget / n as u64;
        c.result_cache_bytes = cfg.result_cache_bytes.map(|b| b / n);
        c.selective_cache_bytes = cfg.selective_cache_bytes.map(|b| b / n);
        c.fresh_segment_bytes = cfg.fresh_segment_bytes.map(|b| b / n);
        c.bulk_segment_bytes = cfg.bulk_segment_bytes.map(|b| b / n);
        c.retention.max_bytes = cfg.retention.max_bytes.map(|b| b / n as u64);
        c.validate().map_err(|e| {
            Error::InvalidArgument(format!("{e} (per shard: the budgets are split between {n} shards)"))
        })?;
    }
    Ok(c)
}

/// An index.
pub struct Index {
    name: String,
    shards: Vec<Shard>,
    /// Sharded indexes: the `_seq` column and the next sequence number.
    seq: Option<Sequencer>,
    schema: RwLock<Schema>,
    settings: IndexSettings,
    id_counter: AtomicU64,
    id_prefix: String,
    recovery: parking_lot::Mutex<Option<RecoveryStats>>,
}

/// What the last crash recovery of this index did (crash-safe mode).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RecoveryStats {
    /// Mapping the heap, reading the checkpoint and the logs, redoing an interrupted merge.
    pub open_micros: u64,
    /// Re-applying the tLog records the durable segments did not reflect.
    pub replay_micros: u64,
    /// tLog records scanned for replay.
    pub records: u64,
}

/// Stats of one index.
#[derive(Debug, Clone, Serialize)]
pub struct IndexStats {
    pub name: String,
    pub fields: usize,
    /// Set when this session began with a crash recovery.
    pub recovery: Option<RecoveryStats>,
    /// Live documents per shard.
    pub shard_docs: Vec<u64>,
    /// Summed over the shards.
    #[serde(flatten)]
    pub shard: ShardStats,
}

impl Index {
    /// Opens (or creates) the index stored in `dir`. `mappings` and `settings` apply to a new index; for an
    /// existing one, new mappings are merged in.
    pub fn open(
        name: &str,
        dir: &Path,
        cfg: ShardConfig,
        mappings: Option<&serde_json::Value>,
        settings: Option<IndexSettings>,
    ) -> Result<Index> {
        cfg.validate().map_err(Error::InvalidArgument)?;
        let t_open = Instant::now();
        let n = shard_count(dir, settings.as_ref())?;
        let shard_cfg = split_config(&cfg, n)?;
        let (mut shards, mut extra, mut replays) = (Vec::with_capacity(n), serde_json::Value::Null, vec![]);
        // Until the index is fully open, a failure abandons the shards opened so far: no close, no clean
        // checkpoint, so the next open recovers from the logs exactly as this one tried to.
        let abandon = |shards: &[Shard]| shards.iter().for_each(|s| s.abandon());
        for i in 0..n {
            let (shard, e, replay) = match Shard::open(&shard_dir(dir, n, i), shard_cfg.clone()) {
                Ok(x) => x,
                Err(e) => {
                    abandon(&shards);
                    return Err(e);
                }
            };
            shards.push(shard);
            // Every shard stores the same metadata; the first that has any speaks for the index.
            if extra.is_null() {
                extra = e;
            }
            replays.push(replay);
        }
        let open_micros = t_open.elapsed().as_micros() as u64;
        let (schema, settings, counter, seq) = match Self::metadata(dir, extra, settings, n) {
            Ok(x) => x,
            Err(e) => {
                abandon(&shards);
                return Err(e);
            }
        };
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let index = Index {
            name: name.to_string(),
            shards,
            seq,
            schema: RwLock::new(schema),
            settings,
            id_counter: AtomicU64::new(counter),
            id_prefix: format!("{:x}", (nanos as u64) >> 10),
            recovery: parking_lot::Mutex::new(None),
        };
        if let Err(e) = index.finish_open(dir, replays, open_micros, mappings) {
            abandon(&index.shards);
            return Err(e);
        }
        Ok(index)
    }

    /// The schema, settings, id counter and sequencer of an index whose shards stored `extra` (`Null`: new).
    fn metadata(
        dir: &Path,
        extra: serde_json::Value,
        settings: Option<IndexSettings>,
        n: usize,
    ) -> Result<(Schema, IndexSettings, u64, Option<Sequencer>)> {
        let (mut schema, settings, counter) = if extra.is_null() {
            let mut settings = settings.unwrap_or_default();
            settings.validate()?;
            settings.number_of_shards = n;
            let mut schema = Schema::default();
            if let Some(a) = &settings.default_analyzer {
                crate::schema::analyzer_config(a)?;
                schema.default_analyzer = Some(a.clone());
            }
            (schema, settings, 0)
        } else {
            Self::unpack(dir, extra)?
        };
        if settings.number_of_shards != n {
            return Err(Error::Format(format!(
                "{}: the index settings say {} shards but the directory holds {n}",
                dir.display(),
                settings.number_of_shards
            )));
        }
        let seq = if n > 1 {
            Some(Sequencer { field: schema.seq_field()?, next: Default::default() })
        } else {
            None
        };
        Ok((schema, settings, counter, seq))
    }

    /// Replays what crashes left in the logs, resumes the sequence numbers and applies `mappings`.
    fn finish_open(
        &self,
        dir: &Path,
        replays: Vec<Option<crate::shard::Replay>>,
        open_micros: u64,
        mappings: Option<&serde_json::Value>,
    ) -> Result<()> {
        self.publish_codecs(&self.schema.read());
        let mut recovery: Option<RecoveryStats> = None;
        for (i, replay) in replays.into_iter().enumerate() {
            if let Some(r) = replay {
                let t = Instant::now();
                let records = r.records.len() as u64;
                self.replay(dir, i, r)?;
                let rs = recovery.get_or_insert(RecoveryStats { open_micros, replay_micros: 0, records: 0 });
                rs.replay_micros += t.elapsed().as_micros() as u64;
                rs.records += records;
            }
        }
        // Every replay succeeded: wake the mergers for the recovered committed segments.
        for sh in &self.shards {
            sh.finish_recovery();
        }
        *self.recovery.lock() = recovery;
        if let Some(s) = &self.seq {
            // Resume numbering after the newest document of any shard.
            let mut newest = None;
            for sh in &self.shards {
                newest = newest.max(sh.newest_seq(s.field)?);
            }
            s.next.fetch_max(newest.map_or(0, |x| x + 1), Relaxed);
            for sh in &self.shards {
                sh.set_sequencer(s.clone());
            }
        }
        // Every write from now on keeps its `_version` in a hidden column. An index from before versions were
        // kept gets the column now, after whatever fields its logs restored (a schema a replayed metadata
        // record restores gets it too, in case a later record carries a version); its documents are version 1.
        let versions = self.schema.write().version_field()?;
        for sh in &self.shards {
            sh.set_version_field(versions);
        }
        if let Some(m) = mappings {
            self.schema.write().apply_mappings(m)?;
        }
        // Crash-safe: the schema and settings are durable before any document that depends on them.
        self.log_meta()
    }

    fn unpack(dir: &Path, extra: serde_json::Value) -> Result<(Schema, IndexSettings, u64)> {
        let p: Persisted = serde_json::from_value(extra)
            .map_err(|e| Error::Format(format!("{}: index metadata: {e}", dir.display())))?;
        Ok((p.schema.rebuild()?, p.settings, p.id_counter))
    }

    /// Re-applies the tLog records a crash left unreflected (crash-safe recovery), re-analysing each document
    /// with the schema in force when it was added.
    fn replay(&self, dir: &Path, shard: usize, r: crate::shard::Replay) -> Result<()> {
        use crate::durability::TlogRecord;
        let sh = &self.shards[shard];
        for (lsn, rec) in r.records {
            match rec {
                TlogRecord::Meta { json } => {
                    let v = serde_json::from_slice(&json)
                        .map_err(|e| Error::corrupt(dir, 0, format!("tLog record {lsn}: metadata: {e}")))?;
                    let (mut schema, _, counter) = Self::unpack(dir, v)?;
                    schema.version_field()?;
                    self.publish_codecs(&schema);
                    *self.schema.write() = schema;
                    self.id_counter.fetch_max(counter, Relaxed);
                }
                TlogRecord::Add { doc, replaces, id, seq, version, source } => {
                    if let (Some(s), Some(q)) = (&self.seq, seq) {
                        s.next.fetch_max(q + 1, Relaxed);
                    }
                    if doc < sh.next_doc() {
                        // Already in a durable segment: only its replacement of an older doc matters.
                        if let Some(r) = replaces {
                            sh.replay_delete(r, &id);
                        }
                        continue;
                    }
                    let body: serde_json::Value = serde_json::from_slice(&source)
                        .map_err(|e| Error::corrupt(dir, 0, format!("tLog record {lsn}: document: {e}")))?;
                    let mut analyzed = analyze_document(&self.schema.read(), id, &body)?;
                    match (&self.seq, seq) {
                        (Some(s), Some(q)) => analyzed.set_numeric(s.field, q as f64),
                        (None, None) => {}
                        _ => {
                            return Err(Error::corrupt(
                                dir,
                                0,
                                format!("tLog record {lsn}: sequence number does not match the shard count"),
                            ))
                        }
                    }
                    if let Some(v) = version.filter(|&v| v != 1) {
                        let field = self.schema.write().version_field()?;
                        analyzed.set_numeric(field, v as f64);
                    }
                    sh.replay_add(lsn, &analyzed, doc, replaces)?;
                }
                TlogRecord::Delete { doc, id } => sh.replay_delete(doc, &id),
            }
        }
        Ok(())
    }

    fn persisted(&self, schema: &Schema) -> serde_json::Value {
        let p = Persisted {
            schema: schema.clone(),
            settings: self.settings.clone(),
            id_counter: self.id_counter.load(Relaxed),
        };
        serde_json::to_value(&p).expect("index metadata serializes")
    }

    /// Crash-safe mode: logs the schema and settings. Callers hold the schema's write lock, so no document
    /// analysed with the new schema can be logged before it.
    /// Tells the shards each field's postings codec (they encode the images they build from now on with it).
    fn publish_codecs(&self, schema: &Schema) {
        let codecs = schema.field_codecs();
        for sh in &self.shards {
            sh.set_field_codecs(codecs.clone());
        }
    }

    /// Every schema change goes through here: the shards learn the codecs, and in crash-safe mode the
    /// schema is logged before any document that depends on it.
    fn log_meta_with(&self, schema: &Schema) -> Result<()> {
        self.publish_codecs(schema);
        if self.shards[0].durability() == crate::Durability::CrashSafe {
            let meta = self.persisted(schema);
            for sh in &self.shards {
                sh.log_meta(meta.clone())?;
            }
        }
        Ok(())
    }

    fn log_meta(&self) -> Result<()> {
        let s = self.schema.write();
        self.log_meta_with(&s)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn settings(&self) -> &IndexSettings {
        &self.settings
    }

    /// A copy of the schema.
    pub fn schema(&self) -> Schema {
        self.schema.read().clone()
    }

    /// Sets the fields that terms without a `field:` prefix search (default: every text field).
    pub fn set_default_fields(&self, fields: Option<Vec<String>>) -> Result<()> {
        let mut s = self.schema.write();
        if let Some(f) = fields.iter().flatten().find(|f| s.field_id(f).is_none()) {
            return Err(Error::InvalidArgument(format!("unknown default field [{f}]")));
        }
        s.default_fields = fields;
        self.log_meta_with(&s)
    }

    /// Adds fields from Elasticsearch `mappings`.
    /// All or nothing: a mapping refused part-way changes nothing.
    pub fn put_mappings(&self, mappings: &serde_json::Value) -> Result<()> {
        let mut s = self.schema.write();
        let mut next = s.clone();
        next.apply_mappings(mappings)?;
        self.log_meta_with(&next)?;
        *s = next;
        Ok(())
    }

    fn next_id(&self) -> String {
        let n = self.id_counter.fetch_add(1, Relaxed);
        format!("{}{:x}", self.id_prefix, n)
    }

    /// Adds a JSON document (an object with optional `_id`). A document with the `_id` of a live document
    /// replaces it. Visible to every search that starts after this returns.
    pub fn add(&self, doc: serde_json::Value) -> Result<AddResult> {
        let (id, body) = take_id(doc)?;
        self.add_with_id(id, body)
    }

    /// Adds a document given as JSON text.
    pub fn add_json(&self, json: &[u8]) -> Result<AddResult> {
        self.add(self.parse_json(json)?)
    }

    /// Parses a document given as JSON text, enforcing the size limit.
    pub fn parse_json(&self, json: &[u8]) -> Result<serde_json::Value> {
        if json.len() > self.settings.max_document_bytes {
            return Err(Error::DocumentTooLarge {
                size: json.len(),
                limit: self.settings.max_document_bytes,
            });
        }
        serde_json::from_slice(json).map_err(|e| Error::BadDocument(format!("malformed JSON: {e}")))
    }

    /// [`add`](Self::add) without waiting for durability: returns what to [`sync_pending`](Self::sync_pending)
    /// (crash-safe mode).
    pub fn add_doc_deferred(&self, doc: serde_json::Value) -> Result<(AddResult, Option<Pending>)> {
        let (id, body) = take_id(doc)?;
        self.add_deferred(id, body)
    }

    /// Adds `body` (without `_id`) under `id`, or a generated id when `None`. In crash-safe mode the document
    /// is durable when this returns.
    pub fn add_with_id(&self, id: Option<String>, body: serde_json::Value) -> Result<AddResult> {
        let (r, pending) = self.add_deferred(id, body)?;
        if let Some(p) = pending {
            self.shards[p.shard].sync_to(Some(p.lsn))?;
        }
        Ok(r)
    }

    /// Adds many documents with one persistence barrier for all of them (crash-safe mode): every `Ok` result
    /// is durable when this returns. Documents are independent: a bad one gets its error, the rest go in.
    /// They are analyzed in parallel ([`prepare_all`](Self::prepare_all)) and inserted in order.
    pub fn add_bulk(
        &self,
        docs: impl IntoIterator<Item = serde_json::Value>,
    ) -> Result<Vec<Result<AddResult>>> {
        let split: Vec<Result<(Option<String>, serde_json::Value)>> = docs.into_iter().map(take_id).collect();
        let inputs: Vec<(Option<String>, &serde_json::Value)> =
            split.iter().filter_map(|d| d.as_ref().ok()).map(|(id, body)| (id.clone(), body)).collect();
        let mut prepared = self.prepare_all(inputs).into_iter();
        let mut out = vec![];
        let mut pending = PendingSet::default();
        for d in split {
            out.push(d.and_then(|_| prepared.next().expect("one per document")).and_then(|p| {
                let (r, lsn) = self.insert_prepared(p)?;
                pending.note(lsn);
                Ok(r)
            }));
        }
        self.sync_pending(&mut pending)?;
        Ok(out)
    }

    /// [`prepare`](Self::prepare) for many documents, on the rayon pool when there are enough of them to be
    /// worth it; results in input order. New fields are mapped in whatever order the threads reach them.
    pub fn prepare_all(&self, docs: Vec<(Option<String>, &serde_json::Value)>) -> Vec<Result<PreparedDoc>> {
        use rayon::prelude::*;
        const PARALLEL_MIN: usize = 32;
        if docs.len() < PARALLEL_MIN {
            return docs.into_iter().map(|(id, body)| self.prepare(id, body)).collect();
        }
        docs.into_par_iter().with_min_len(8).map(|(id, body)| self.prepare(id, body)).collect()
    }

    /// Makes every write accepted so far durable (crash-safe mode; a no-op otherwise).
    pub fn sync(&self) -> Result<()> {
        self.shards.iter().try_for_each(|s| s.sync())
    }

    /// Makes the deferred writes in `p` durable (one persistence barrier per shard involved) and empties it.
    pub fn sync_pending(&self, p: &mut PendingSet) -> Result<()> {
        for (i, lsn) in p.0.iter_mut().enumerate() {
            if let Some(l) = lsn.take() {
                self.shards[i].sync_to(Some(l))?;
            }
        }
        Ok(())
    }

    /// The shard a document with `_id` `id` lives in.
    pub fn shard_of(&self, id: &str) -> usize {
        if self.shards.len() == 1 {
            0
        } else {
            (xxhash_rust::xxh3::xxh3_64(id.as_bytes()) % self.shards.len() as u64) as usize
        }
    }

    /// Adds a document without waiting for durability; returns what to sync (crash-safe mode). Use
    /// [`sync`](Self::sync) or [`sync_pending`](Self::sync_pending) before acknowledging it to anyone.
    pub fn add_deferred(
        &self,
        id: Option<String>,
        body: serde_json::Value,
    ) -> Result<(AddResult, Option<Pending>)> {
        let prepared = self.prepare(id, &body)?;
        self.insert_prepared(prepared)
    }

    /// The first half of an add, which needs no engine lock and may run on any thread: maps new fields
    /// (dynamic mapping), checks the `_id` and size limits and analyzes the document. The second half,
    /// [`insert_prepared`](Self::insert_prepared), puts it in its shard; the bulk loader runs the first
    /// half on many threads and the second in input order.
    pub fn prepare(&self, id: Option<String>, body: &serde_json::Value) -> Result<PreparedDoc> {
        self.prepare_with(id, body, None)
    }

    /// [`prepare`](Self::prepare) of a bulk load's document into its block's table (see
    /// [`BlockTerms`](crate::schema::BlockTerms)), which takes it in if it is accepted and leaves it out if
    /// not.
    pub(crate) fn prepare_into(
        &self,
        id: Option<String>,
        body: &serde_json::Value,
        block: &mut crate::schema::BlockTerms,
    ) -> Result<PreparedDoc> {
        let d = self.prepare_with(id, body, Some(&mut *block));
        match d {
            Ok(_) => block.take(),
            Err(_) => block.discard(),
        }
        d
    }

    fn prepare_with(
        &self,
        id: Option<String>,
        body: &serde_json::Value,
        block: Option<&mut crate::schema::BlockTerms>,
    ) -> Result<PreparedDoc> {
        if !body.is_object() {
            return Err(Error::BadDocument("a document must be a JSON object".into()));
        }
        {
            let s = self.schema.read();
            // Before any field is mapped from it.
            crate::schema::document::check_objects(&s, body)?;
            let new = new_fields(&s, body);
            drop(s);
            if !new.is_empty() {
                let mut w = self.schema.write();
                // A field mapped meanwhile (a mapping update between the two locks) stays as mapped.
                for f in new {
                    if w.field_id(&f.name).is_none() {
                        w.add_field(f)?;
                    }
                }
                self.log_meta_with(&w)?;
            }
        }
        if let Some(id) = &id {
            crate::schema::document::validate_id(id)?;
        }
        // A generated `_id` is drawn when the document is inserted, so ids follow insertion order.
        let log_whole = self.shards[0].durability() == crate::Durability::CrashSafe;
        let (schema, id_or_none) = (self.schema.read(), id.clone().unwrap_or_default());
        let analyzed = match block {
            Some(b) => crate::schema::analyze_document_into(&schema, id_or_none, body, log_whole, b)?,
            None => analyze_document_logged(&schema, id_or_none, body, log_whole)?,
        };
        drop(schema);
        if analyzed.log_source().len() > self.settings.max_document_bytes {
            return Err(Error::DocumentTooLarge {
                size: analyzed.log_source().len(),
                limit: self.settings.max_document_bytes,
            });
        }
        Ok(PreparedDoc { generated: id.is_none(), analyzed })
    }

    /// The second half of an add (see [`prepare`](Self::prepare)): draws a generated `_id` if the document
    /// has none, routes it to its shard and inserts it there (replacing a live document with the same
    /// `_id`). Not yet durable in crash-safe mode: sync the returned [`Pending`].
    pub fn insert_prepared(&self, prepared: PreparedDoc) -> Result<(AddResult, Option<Pending>)> {
        self.insert_prepared_if(prepared, Precondition::None)
    }

    /// [`insert_prepared`](Self::insert_prepared) only if `cond` holds for the `_id`'s live version, checked
    /// atomically with the write ([`Error::VersionConflict`] otherwise, nothing written). A generated `_id`
    /// is new: `Absent` holds for it, `SeqNo` never does.
    pub fn insert_prepared_if(
        &self,
        mut prepared: PreparedDoc,
        cond: Precondition,
    ) -> Result<(AddResult, Option<Pending>)> {
        let analyzed = &mut prepared.analyzed;
        if prepared.generated {
            match cond {
                Precondition::SeqNo(_) => {
                    return Err(Error::InvalidArgument(
                        "an if_seq_no condition needs the document's _id".into(),
                    ))
                }
                Precondition::Version { .. } => {
                    return Err(Error::InvalidArgument("an external version needs the document's _id".into()))
                }
                Precondition::None | Precondition::Absent => {}
            }
            analyzed.id = self.next_id();
        }
        self.insert_with_id(analyzed, prepared.generated, cond)
    }

    /// [`insert_prepared_if`](Self::insert_prepared_if) of an analysis whose `_id` is set: `generated` (drawn
    /// by [`next_id`](Self::next_id)) is new, so it is not looked up and `cond` does not apply.
    fn insert_with_id(
        &self,
        analyzed: &mut crate::schema::AnalyzedDoc,
        generated: bool,
        cond: Precondition,
    ) -> Result<(AddResult, Option<Pending>)> {
        let shard = self.shard_of(&analyzed.id);
        let cond = if generated { Precondition::None } else { cond };
        let u = self.shards[shard].upsert_deferred(analyzed, !generated, cond)?;
        let id = std::mem::take(&mut analyzed.id);
        let r = AddResult { id, doc: u.doc, shard, replaced: u.replaced, version: u.version };
        Ok((r, u.lsn.map(|lsn| Pending { shard, lsn })))
    }

    /// Whether [`insert_batch`](Self::insert_batch) takes `docs`: one shard, and every `_id` generated.
    pub(crate) fn batchable(&self, docs: &[&PreparedDoc]) -> bool {
        self.batches_generated_ids() && docs.iter().all(|d| d.generated)
    }

    /// Whether documents with generated `_id`s can go in as batches (one shard): a bulk load analyzes those
    /// into their block's table.
    pub(crate) fn batches_generated_ids(&self) -> bool {
        self.shards.len() == 1
    }

    /// [`insert_prepared`](Self::insert_prepared) of each of `docs` in turn — the same generated `_id`s, doc
    /// ids and `_seq` numbers, one result per document — with their postings inserted term by term
    /// ([`Shard::add_batch`](crate::shard::Shard::add_batch); `batch` is filled from the block they were
    /// analyzed into, which holds their terms). They must be [`batchable`](Self::batchable). A document that
    /// may be over the size limit among them (its totals' bound does not fit: [`Shard::accepts`]) has them
    /// inserted one by one instead, given their terms back and each checked exactly (with the `_id`s drawn,
    /// so the same ones). The results end at the first that is not
    /// a document's own error (a closed index, a failed log write): what came after it was not inserted, as
    /// one-by-one inserts would have stopped there. `Err`: none was inserted.
    pub(crate) fn insert_batch(
        &self,
        mut docs: Vec<PreparedDoc>,
        batch: &crate::segment::TermBatch,
    ) -> Result<Vec<Inserted>> {
        assert!(self.batchable(&docs.iter().collect::<Vec<_>>()), "a batch of one shard's generated _ids");
        for d in &mut docs {
            d.analyzed.id = self.next_id();
        }
        let shard = &self.shards[0];
        if !docs.iter().all(|d| shard.accepts(&d.analyzed)) {
            // One by one, each checked exactly, with its terms back.
            batch.unbatch(docs.iter_mut().map(|d| &mut d.analyzed));
            let mut out = Vec::with_capacity(docs.len());
            for mut d in docs {
                let r = self.insert_with_id(&mut d.analyzed, true, Precondition::None);
                let fatal = r.as_ref().is_err_and(|e| !crate::bulk::is_document_error(e));
                out.push(r);
                if fatal {
                    break;
                }
            }
            return Ok(out);
        }
        let mut analyzed: Vec<_> = docs.into_iter().map(|d| d.analyzed).collect();
        let ups = shard.add_batch(&mut analyzed, batch)?;
        Ok(analyzed
            .into_iter()
            .zip(ups)
            .map(|(a, u)| {
                let u = u?;
                let r = AddResult { id: a.id, doc: u.doc, shard: 0, replaced: false, version: u.version };
                Ok((r, u.lsn.map(|lsn| Pending { shard: 0, lsn })))
            })
            .collect())
    }

    /// [`add_with_id`](Self::add_with_id) only if `cond` holds for the `_id`'s live version, checked
    /// atomically with the write: [`Precondition::Absent`] creates, [`Precondition::SeqNo`] replaces exactly
    /// the version read before (optimistic concurrency); otherwise [`Error::VersionConflict`] and nothing is
    /// written. Durable when it returns (crash-safe mode).
    pub fn add_with_id_if(
        &self,
        id: Option<String>,
        body: serde_json::Value,
        cond: Precondition,
    ) -> Result<AddResult> {
        let (r, pending) = self.insert_prepared_if(self.prepare(id, &body)?, cond)?;
        if let Some(p) = pending {
            self.shards[p.shard].sync_to(Some(p.lsn))?;
        }
        Ok(r)
    }

    /// Deletes the document with `_id` only if `cond` holds for its live version: its sequence number is
    /// the one named ([`Precondition::SeqNo`]), or an external version is above its `_version`
    /// ([`Precondition::Version`], which also holds when there is none); [`Error::VersionConflict`]
    /// otherwise. Returns the deleted document's `_version` (`None`: none was deleted). Not yet durable
    /// (crash-safe mode).
    pub fn delete_if_deferred(&self, id: &str, cond: Precondition) -> Result<(Option<u64>, Option<Pending>)> {
        let shard = self.shard_of(id);
        let (version, lsn) = self.shards[shard].delete_if_deferred(id, cond)?;
        Ok((version, lsn.map(|lsn| Pending { shard, lsn })))
    }

    /// Deletes the document with `_id`; returns whether it existed.
    pub fn delete(&self, id: &str) -> Result<bool> {
        self.shards[self.shard_of(id)].delete(id)
    }

    /// Like [`delete`](Self::delete), without waiting for durability (crash-safe mode); returns the deleted
    /// document's `_version` (`None`: there was none).
    pub fn delete_deferred(&self, id: &str) -> Result<(Option<u64>, Option<Pending>)> {
        let shard = self.shard_of(id);
        let (found, lsn) = self.shards[shard].delete_deferred(id)?;
        Ok((found, lsn.map(|lsn| Pending { shard, lsn })))
    }

    /// The documents `q` matches now, as (shard, doc id, `_id`) in each shard's doc order: the first half of
    /// `_delete_by_query`, whose second half, [`delete_versions`](Self::delete_versions), deletes exactly
    /// these versions.
    pub fn matching_versions(&self, q: &Query) -> Result<Vec<(usize, u32, String)>> {
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        let node = {
            let schema = self.schema.read();
            query::plan_shards(q, &schema, &refs)?
        };
        let mut out = vec![];
        for (shard, snap) in refs.iter().enumerate() {
            for doc in query::matching_docs(snap, &node, None)? {
                let seg =
                    snap.segment_of(doc).ok_or_else(|| Error::Format(format!("doc {doc} has no segment")))?;
                let (id, _) = stored(seg, doc - seg.base_doc)?;
                out.push((shard, doc, id));
            }
        }
        Ok(out)
    }

    /// Deletes the given versions ([`matching_versions`](Self::matching_versions)), each only if it is still
    /// the live version of its `_id` — one written since is left alone and counted as a conflict, as in
    /// Elasticsearch; with `stop_at_conflict` the first conflict ends the run (Elasticsearch's default
    /// `conflicts=abort`). Durable when it returns (one persist barrier per shard in crash-safe mode).
    pub fn delete_versions(
        &self,
        versions: &[(usize, u32, String)],
        stop_at_conflict: bool,
    ) -> Result<DeletedVersions> {
        let mut out = DeletedVersions::default();
        let mut pending = PendingSet::default();
        for (shard, doc, id) in versions {
            let (what, lsn) = self.shards[*shard].delete_version_deferred(id, *doc)?;
            pending.note(lsn.map(|lsn| Pending { shard: *shard, lsn }));
            match what {
                crate::shard::VersionDelete::Deleted => out.deleted += 1,
                crate::shard::VersionDelete::Replaced => {
                    out.conflicts.push(id.clone());
                    if stop_at_conflict {
                        break;
                    }
                }
                crate::shard::VersionDelete::Gone => out.gone += 1,
            }
        }
        self.sync_pending(&mut pending)?;
        Ok(out)
    }

    /// Real-time get by `_id`: the `_source` bytes of the live document.
    pub fn get(&self, id: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.get_versioned(id)?.map(|d| d.source))
    }

    /// Real-time get by `_id` with the live version's sequence number (its doc id in its shard, see
    /// [`Precondition`]: what a later conditional write names to replace exactly this version) and `_version`.
    pub fn get_versioned(&self, id: &str) -> Result<Option<LiveDoc>> {
        match self.shards[self.shard_of(id)].find_id(id) {
            None => Ok(None),
            Some((seg, local)) => {
                let version = self.version_at(&seg, local)?;
                let (_, source) = stored(&seg, local)?;
                Ok(Some(LiveDoc { seq_no: (seg.base_doc + local) as u64, version, source }))
            }
        }
    }

    /// The `_version` of doc `doc` of shard `shard` (a search hit's: [`Hit::doc`], [`Hit::shard`]), as the
    /// shard holds it now: `None` if the shard no longer holds it (retention dropped its segment since the
    /// search, or compaction purged it once deleted).
    pub fn version_of(&self, shard: usize, doc: u32) -> Result<Option<u64>> {
        let snap = self.shards[shard].pin();
        match snap.segment_of(doc) {
            Some(seg) => Ok(Some(self.version_at(seg, doc - seg.base_doc)?)),
            None => Ok(None),
        }
    }

    fn version_at(&self, seg: &crate::gdt::SegmentDesc, local: u32) -> Result<u64> {
        match self.schema.read().hidden_field(crate::schema::VERSION_FIELD) {
            Some(field) => crate::shard::version_of(seg, field, local),
            None => Ok(1),
        }
    }

    /// Parses a Lucene-style query string and searches.
    pub fn search(&self, query: &str, opts: &SearchOptions) -> Result<SearchResult> {
        let q = query::parse(query)?;
        self.search_query(&q, opts)
    }

    /// Searches with a query AST.
    pub fn search_query(&self, q: &Query, opts: &SearchOptions) -> Result<SearchResult> {
        let t0 = Instant::now();
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        let node = {
            let schema = self.schema.read();
            query::plan_shards(q, &schema, &refs)?
        };
        let mut opts = opts.clone();
        opts.bm25 = query::Bm25 { k1: self.settings.bm25_k1, b: self.settings.bm25_b };
        let (total, total_exact, ranked) = if self.shards.len() == 1 {
            let cache = opts.cache.then(|| self.shards[0].result_cache());
            let res = query::execute_cached(refs[0], &node, &opts, cache)?;
            (res.total, res.total_exact, res.hits.into_iter().map(|h| (0, h.doc as u64, h)).collect())
        } else {
            self.search_shards(&refs, &node, opts.clone())?
        };
        let mut hits = Vec::with_capacity(ranked.len());
        for (shard, seq, h) in ranked {
            let (id, source) = if opts.fetch {
                let snap = refs[shard];
                let seg = snap
                    .segment_of(h.doc)
                    .ok_or_else(|| Error::Format(format!("hit {} has no segment", h.doc)))?;
                stored(seg, h.doc - seg.base_doc)?
            } else {
                (String::new(), vec![])
            };
            hits.push(Hit {
                id,
                score: h.score,
                doc: h.doc,
                shard,
                seq,
                source,
                sort_value: h.sort_value,
                sort_values: vec![],
                collapse_value: None,
            });
        }
        Ok(SearchResult { total, total_exact, hits, took_micros: t0.elapsed().as_micros() as u64 })
    }

    /// How the score of the live document with `_id` `id` under `q` comes about (Elasticsearch's `_explain`):
    /// whether the document exists, and the explanation if it matches — its value exactly the score a search
    /// now gives the document (the same plan, statistics and watermarks; see [`query::explain`]). A document
    /// rewritten while it is explained may be reported missing (its new version lies past the watermarks).
    pub fn explain(&self, q: &Query, id: &str) -> Result<(bool, Option<query::Explanation>)> {
        let shard = self.shard_of(id);
        self.explaining(q, |refs, marks| {
            let ids = query::Node::Ids(vec![id.to_string()]);
            let found = query::matching_docs(refs[shard], &ids, Some(&marks[shard]))?;
            Ok(found.first().map(|&doc| vec![(shard, doc)]).unwrap_or_default())
        })
        .map(|mut e| match e.pop() {
            Some(e) => (true, e),
            None => (false, None),
        })
    }

    /// [`explain`](Self::explain) for search hits, by their shard and doc id ([`Hit::shard`], [`Hit::doc`]):
    /// planned once for them all. One per hit, `None` for a hit no longer live or no longer matching.
    pub fn explain_hits(&self, q: &Query, hits: &[(usize, u32)]) -> Result<Vec<Option<query::Explanation>>> {
        self.explaining(q, |_, _| Ok(hits.to_vec()))
    }

    /// Pins every shard, plans `q`, takes the statistics and watermarks a search takes, and explains the
    /// documents `which` names (by shard and doc id) at them, in its order.
    fn explaining(
        &self,
        q: &Query,
        which: impl FnOnce(&[&Snapshot], &[query::Watermarks]) -> Result<Vec<(usize, u32)>>,
    ) -> Result<Vec<Option<query::Explanation>>> {
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        let schema = self.schema.read().clone();
        let node = query::plan_shards(q, &schema, &refs)?;
        let bm25 = query::Bm25 { k1: self.settings.bm25_k1, b: self.settings.bm25_b };
        // As a search: one shard scores with its own statistics, several with their sum; at fixed watermarks,
        // so the documents found are the ones explained.
        let (stats, marks) = if self.shards.len() == 1 {
            (None, vec![query::watermarks(refs[0])])
        } else {
            let (mut stats, mut marks) = (query::CollectionStats::default(), vec![]);
            for s in &refs {
                let (st, m) = query::collection_stats(s, &node)?;
                stats.add(st);
                marks.push(m);
            }
            (Some(stats), marks)
        };
        let docs = which(&refs, &marks)?;
        let mut out = vec![None; docs.len()];
        for shard in 0..refs.len() {
            let (at, ds): (Vec<usize>, Vec<u32>) =
                docs.iter().enumerate().filter(|(_, d)| d.0 == shard).map(|(i, d)| (i, d.1)).unzip();
            if ds.is_empty() {
                continue;
            }
            let e = query::explain(
                refs[shard],
                &node,
                &schema,
                &ds,
                (bm25, stats.as_ref()),
                Some(&marks[shard]),
            )?;
            for (i, e) in at.into_iter().zip(e) {
                out[i] = e;
            }
        }
        Ok(out)
    }

    /// A sharded search: index-wide statistics, every shard evaluated in parallel with them, and the shards'
    /// top `offset + limit` merged in the query's order, ties broken by `_seq` as one shard breaks them by
    /// doc id.
    fn search_shards(
        &self,
        snaps: &[&Snapshot],
        node: &query::Node,
        mut opts: SearchOptions,
    ) -> Result<Ranked> {
        let seq = self.seq.as_ref().expect("a sharded index has a sequencer").field;
        let mut stats = query::CollectionStats::default();
        let mut marks = Vec::with_capacity(snaps.len());
        for s in snaps {
            let (st, m) = query::collection_stats(s, node)?;
            stats.add(st);
            marks.push(m);
        }
        opts.stats = Some(std::sync::Arc::new(stats));
        let k = opts.limit.saturating_add(opts.offset);
        let (offset, limit) = (opts.offset, opts.limit);
        opts.offset = 0;
        opts.limit = k;
        // Per shard: its match count, whether exact, and its hits keyed by sequence number.
        type Part = Result<(u64, bool, Vec<(u64, usize, query::ScoredDoc)>)>;
        let run = |i: usize| -> Part {
            let cache = opts.cache.then(|| self.shards[i].result_cache());
            let res = query::execute_at(snaps[i], node, &opts, cache, Some(&marks[i]))?;
            // The hits' `_seq` (0 for a document stored without one: none are).
            let seqs = NumberColumn::new(snaps[i], seq)?;
            let hits = res.hits.iter().map(|h| (seqs.get(h.doc).map_or(0, |x| x as u64), i, *h)).collect();
            Ok((res.total, res.total_exact, hits))
        };
        let mut parts: Vec<Part> = (0..snaps.len()).map(|_| Ok((0, true, vec![]))).collect();
        // The caller evaluates shard 0 itself while the pool takes the others.
        rayon::in_place_scope(|scope| {
            let (first, rest) = parts.split_first_mut().expect("a sharded index has shards");
            for (j, slot) in rest.iter_mut().enumerate() {
                let run = &run;
                scope.spawn(move |_| *slot = run(j + 1));
            }
            *first = run(0);
        });
        let (mut total, mut exact, mut all) = (0u64, true, vec![]);
        for p in parts {
            let (t, e, hits) = p?;
            total += t;
            exact &= e;
            all.extend(hits);
        }
        merge_order(&mut all, opts.sort);
        Ok((total, exact, all.into_iter().skip(offset).take(limit).map(|(q, i, h)| (i, q, h)).collect()))
    }

    /// Aggregates the documents `q` matches ([`query::aggs`]: Elasticsearch's metric and bucket
    /// aggregations, nested): every shard's snapshot is pinned once and read at the same watermarks, so the
    /// buckets partition the same documents even while writes go on. Returns the number of matches and a
    /// result per aggregation, in order.
    pub fn aggregate(
        &self,
        q: &Query,
        aggs: &[query::aggs::Agg],
    ) -> Result<(u64, Vec<query::aggs::AggResult>)> {
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        // A copy: an aggregation may take a while, and the lock would hold up writes that add fields.
        let schema = self.schema();
        query::aggs::aggregate(&schema, &refs, q, aggs)
    }

    /// Aggregates over several indices at once, exactly as over one index holding all their documents
    /// ([`query::aggs::aggregate_targets`]): each target is an index, the query on it and the aggregations
    /// as translated for its mapping (one shape for all). Each index's shards are pinned at one moment, the
    /// indices one after the other. Returns the number of matches over all of them and a result per
    /// aggregation, in order.
    pub fn aggregate_indices(
        targets: &[(&Index, &Query, &[query::aggs::Agg])],
    ) -> Result<(u64, Vec<query::aggs::AggResult>)> {
        let pinned: Vec<(Vec<_>, Schema)> = targets
            .iter()
            .map(|(index, ..)| (index.shards.iter().map(|s| s.pin()).collect(), index.schema()))
            .collect();
        let parts: Vec<query::aggs::AggTarget> = targets
            .iter()
            .zip(&pinned)
            .map(|(&(_, query, aggs), (snaps, schema))| query::aggs::AggTarget {
                schema,
                snaps: snaps.iter().map(|s| &**s).collect(),
                query,
                aggs,
            })
            .collect();
        query::aggs::aggregate_targets(&parts)
    }

    /// Searches with a sort over several keys ([`SortKey`]: score, insertion order, numeric and date fields,
    /// each ascending or descending), returning the hits from `offset` on that come strictly after `after`
    /// (the previous page's last hit's [`Hit::sort_values`]: Elasticsearch's `search_after`) with their sort
    /// values. Ties on every key go oldest first. Every match is visited (the single-key sorts of
    /// [`search_query`](Self::search_query) prune; this does not), so the count is exact, and only the best
    /// `offset + limit` are kept as it goes (all of them with a keyword key, whose values are read after);
    /// scores are computed
    /// only when a key is the score (else they are 0), with index-wide statistics as `search_query` scores.
    pub fn search_sorted(
        &self,
        q: &Query,
        keys: &[SortKey],
        after: Option<&[Option<SortValue>]>,
        window: (usize, usize),
        fetch: bool,
    ) -> Result<SearchResult> {
        let page = SortedPage { after, offset: window.0, limit: window.1, fetch, ..Default::default() };
        self.search_sorted_with(q, keys, &page)
    }

    /// The documents of this index now, with the statistics `q` reads now: a [`Horizon`] to page through
    /// them with [`search_sorted_with`](Self::search_sorted_with) while writes go on (Elasticsearch's
    /// scroll).
    pub fn horizon(&self, q: &Query) -> Result<Horizon> {
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        let node = {
            let schema = self.schema.read();
            query::plan_shards(q, &schema, &refs)?
        };
        let mut stats = query::CollectionStats::default();
        let mut ends = Vec::with_capacity(refs.len());
        for s in &refs {
            let (st, marks) = query::collection_stats(s, &node)?;
            stats.add(st);
            // Segments are in doc id order: the last one's watermark ends what the statistics counted.
            let end = s.segments.iter().zip(&marks).next_back().map_or(0, |(seg, &m)| seg.base_doc + m);
            ends.push(end);
        }
        Ok(Horizon { ends, stats: std::sync::Arc::new(stats), node: std::sync::Arc::new(node) })
    }

    /// Each shard's first doc id past what is visible now: the document set of a point in time, for
    /// [`horizon_at`](Self::horizon_at).
    pub fn visible_ends(&self) -> Vec<u32> {
        self.shards
            .iter()
            .map(|s| s.pin())
            .map(|s| s.segments.last().map_or(0, |g| g.base_doc + g.visible_docs()))
            .collect()
    }

    /// A [`Horizon`] at `ends` (from [`visible_ends`](Self::visible_ends), earlier) for `q`, planned and
    /// with its statistics taken now: a point in time's document set, with the plan and statistics of the
    /// first search of `q` in it.
    pub fn horizon_at(&self, q: &Query, ends: &[u32]) -> Result<Horizon> {
        if ends.len() != self.shards.len() {
            return Err(Error::InvalidArgument("ends of another index".into()));
        }
        Ok(Horizon { ends: ends.to_vec(), ..self.horizon(q)? })
    }

    /// [`search_sorted`](Self::search_sorted) with the options of a [`SortedPage`]: below a scroll's
    /// horizon, one hit per value of a collapse key.
    ///
    /// With a horizon (from [`horizon`](Self::horizon) with the same query, which it planned then: `q` is
    /// not planned again) only the documents below it that are still live are read, scored with its
    /// statistics: every page of a scroll then sees one document set in one order, whatever was written in
    /// between, except that a document deleted or replaced since (its new version lies past the horizon) is
    /// left out. The count is the number of those matches.
    ///
    /// With `collapse` (a numeric, date or keyword field as [`sort_field`](Self::sort_field) makes it) the
    /// page is of groups: each value's best hit in the order (documents without a value are one group),
    /// [`Hit::collapse_value`] its value; `offset` and `limit` count groups, the count is still of matches.
    /// A document with several values of a keyword collapse field is an error, as in Elasticsearch.
    pub fn search_sorted_with(
        &self,
        q: &Query,
        keys: &[SortKey],
        page: &SortedPage<'_>,
    ) -> Result<SearchResult> {
        let SortedPage { after, offset, limit, fetch, horizon, collapse, min_score } = *page;
        let t0 = Instant::now();
        if collapse.is_some_and(|c| !matches!(c, SortKey::Field { .. } | SortKey::Keyword { .. })) {
            return Err(Error::InvalidArgument("a collapse key is a numeric, date or keyword field".into()));
        }
        if horizon.is_some_and(|h| h.ends.len() != self.shards.len()) {
            return Err(Error::InvalidArgument("a horizon of another index".into()));
        }
        if keys.is_empty() {
            return Err(Error::InvalidArgument("a sort needs at least one key".into()));
        }
        if after.is_some_and(|a| a.len() != keys.len()) {
            return Err(Error::InvalidArgument(format!(
                "search_after has {} value(s) but sort has {}",
                after.map_or(0, <[_]>::len),
                keys.len()
            )));
        }
        for (i, (k, v)) in keys.iter().zip(after.unwrap_or_default()).enumerate() {
            let text = matches!(k, SortKey::Keyword { .. });
            let (is_text, shown) = match v {
                None => continue,
                Some(SortValue::Text(t)) => (true, format!("\"{t}\"")),
                Some(SortValue::Number(x)) => (false, x.to_string()),
            };
            if is_text != text {
                return Err(Error::InvalidArgument(format!(
                    "search_after value {shown} (position {i}) does not fit its sort key, which takes {}",
                    if text { "a string (a keyword field)" } else { "a number" }
                )));
            }
        }
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        let planned;
        let node = match horizon {
            Some(h) => &*h.node,
            None => {
                let schema = self.schema.read();
                planned = query::plan_shards(q, &schema, &refs)?;
                &planned
            }
        };
        let bm25 = query::Bm25 { k1: self.settings.bm25_k1, b: self.settings.bm25_b };
        let scored = keys.iter().any(|k| matches!(k, SortKey::Score { .. })) || min_score.is_some();
        let sharded = self.shards.len() > 1;
        // A sharded index scores with its index-wide statistics, taken at the watermarks it then reads; one
        // shard needs only the watermarks.
        let mut stats = query::CollectionStats::default();
        let mut marks = Vec::with_capacity(refs.len());
        for s in &refs {
            if sharded && horizon.is_none() {
                let (st, m) = query::collection_stats(s, node)?;
                stats.add(st);
                marks.push(m);
            } else {
                marks.push(query::watermarks(s));
            }
        }
        // Every match: (seq, shard, doc, score), and its sort values, `keys.len()` per match in one vector.
        // Ordering all 250k enwiki documents by `date` then `_doc` (`spirit serve`, `curl`, medians of 5–6):
        // 50 ms with an image opened per value and a vector per match, 35 ms without (23 ms on 12-07), 6.9 ms
        // keeping only the best `end` (below); a single-key sort (the pruned top-k) takes 1 ms.
        let nk = keys.len();
        // Keyword values are read after the matches, and collapsing needs every match's group: no pruning.
        let keep_all = keys.iter().any(|k| matches!(k, SortKey::Keyword { .. })) || collapse.is_some();
        // Without keyword keys only the best `end` matches are kept: the buffer is cut back to them whenever
        // it reaches `prune_at`, and the worst of them then bars every later match that does not beat it —
        // a scroll's page costs one pass over the matches, not an ordering of all of them.
        let end = offset.saturating_add(limit);
        let prune_at = end.saturating_mul(2).max(16);
        let mut worst: Option<(Vec<Option<SortValue>>, u64)> = None;
        let mut total = 0u64;
        let mut cands: Vec<(u64, usize, u32, f32)> = vec![];
        // With `collapse`, each candidate's group: its value of the collapse field.
        let mut groups: Vec<Option<SortValue>> = vec![];
        let mut values: Vec<Option<SortValue>> = vec![];
        for (i, snap) in refs.iter().enumerate() {
            // The columns of the field keys, and of `_seq` in a sharded index.
            let columns = keys
                .iter()
                .map(|k| match *k {
                    SortKey::Field { field, .. } => NumberColumn::new(snap, field).map(Some),
                    _ => Ok(None),
                })
                .collect::<Result<Vec<_>>>()?;
            let seqs = match &self.seq {
                Some(s) if sharded => Some(NumberColumn::new(snap, s.field)?),
                _ => None,
            };
            let group_column = match collapse {
                Some(SortKey::Field { field, .. }) => Some(NumberColumn::new(snap, field)?),
                _ => None,
            };
            let global = match horizon {
                Some(h) => Some(&*h.stats),
                None => sharded.then_some(&stats),
            };
            let mut matches = if scored {
                query::scored_matches(snap, node, bm25, global, Some(&marks[i]))?
            } else {
                query::matching_docs(snap, node, Some(&marks[i]))?
                    .into_iter()
                    .map(|doc| query::ScoredDoc { doc, score: 0.0, sort_value: None })
                    .collect()
            };
            if let Some(h) = horizon {
                matches.retain(|m| m.doc < h.ends[i]);
            }
            if let Some(least) = min_score {
                matches.retain(|m| m.score >= least);
            }
            let expect = if keep_all { matches.len() } else { matches.len().min(prune_at) };
            cands.reserve(expect);
            values.reserve(expect * nk);
            for m in matches {
                // A document stored without `_seq` (none are) would sort as 0.
                let seq = seqs.as_ref().map_or(m.doc as u64, |c| c.get(m.doc).map_or(0, |x| x as u64));
                for (k, col) in keys.iter().zip(&columns) {
                    values.push(match *k {
                        SortKey::Score { .. } => Some(SortValue::Number(m.score as f64)),
                        SortKey::Seq { .. } => Some(SortValue::Number(seq as f64)),
                        SortKey::Field { .. } => {
                            col.as_ref().and_then(|c| c.get(m.doc)).map(SortValue::Number)
                        }
                        // Filled in below, from the field's postings.
                        SortKey::Keyword { .. } => None,
                    });
                }
                total += 1;
                if !keep_all {
                    // Every value is known here (keyword values come later): a match not after `after`, or
                    // not before the worst of the best `end` kept so far, is dropped at once.
                    let row = values.len() - nk;
                    let (mine, bar) = (&values[row..], worst.as_ref());
                    if after.is_some_and(|a| cmp_sort_values(keys, mine, a).is_le())
                        || bar.is_some_and(|(v, s)| cmp_sort_values(keys, mine, v).then(seq.cmp(s)).is_ge())
                    {
                        values.truncate(row);
                        continue;
                    }
                }
                cands.push((seq, i, m.doc, m.score));
                if collapse.is_some() {
                    // A keyword group's value is filled in below, from the field's postings.
                    groups.push(group_column.as_ref().and_then(|c| c.get(m.doc)).map(SortValue::Number));
                }
                if !keep_all && cands.len() >= prune_at {
                    worst = keep_best(keys, end, &mut cands, &mut values);
                }
            }
        }
        for (j, k) in keys.iter().enumerate() {
            if let SortKey::Keyword { field, descending, .. } = *k {
                self.keyword_sort_values(&refs, &marks, (field, descending), &cands, &mut values, (j, nk))?;
            }
        }
        if let Some(SortKey::Keyword { field, .. }) = collapse {
            if self.keyword_sort_values(&refs, &marks, (field, false), &cands, &mut groups, (0, 1))? {
                return Err(Error::InvalidArgument(format!(
                    "cannot collapse on field [{}]: a matching document has several values of it",
                    self.schema.read().field(field).name
                )));
            }
        }
        let vals = |c: usize| &values[c * nk..c * nk + nk];
        // The candidates by index, those after `after` only.
        let mut order: Vec<u32> = (0..cands.len() as u32)
            .filter(|&c| after.is_none_or(|a| cmp_sort_values(keys, vals(c as usize), a).is_gt()))
            .collect();
        let by = |a: &u32, b: &u32| {
            let (a, b) = (*a as usize, *b as usize);
            cmp_sort_values(keys, vals(a), vals(b)).then(cands[a].0.cmp(&cands[b].0))
        };
        let end = offset.saturating_add(limit).min(order.len());
        if collapse.is_some() {
            // Every match in order, then each group's first: the best `end` groups, in order.
            order.sort_unstable_by(by);
            let mut seen = std::collections::HashSet::new();
            order.retain(|&c| seen.len() < end && seen.insert(GroupKey::of(&groups[c as usize])));
        } else {
            if end > 0 && end < order.len() {
                order.select_nth_unstable_by(end - 1, by);
                order.truncate(end);
            }
            order.sort_unstable_by(by);
        }
        let mut hits = Vec::with_capacity(end.saturating_sub(offset));
        for &c in order.iter().skip(offset) {
            let (seq, shard, doc, score) = cands[c as usize];
            let (id, source) = if fetch {
                let seg = refs[shard]
                    .segment_of(doc)
                    .ok_or_else(|| Error::Format(format!("hit {doc} has no segment")))?;
                stored(seg, doc - seg.base_doc)?
            } else {
                (String::new(), vec![])
            };
            let sort_values = vals(c as usize).to_vec();
            let collapse_value = groups.get(c as usize).cloned().flatten();
            hits.push(Hit {
                id,
                score,
                doc,
                shard,
                seq,
                source,
                sort_value: None,
                sort_values,
                collapse_value,
            });
        }
        Ok(SearchResult { total, total_exact: true, hits, took_micros: t0.elapsed().as_micros() as u64 })
    }

    /// Sets key `j` (of `nk`) of each candidate (`(seq, shard, doc, score)`; its values at `values[c * nk..]`)
    /// to its document's value of keyword field `field`: the smallest (ascending) or largest (`descending`) of
    /// its values, read term by term from the field's postings at the shards' watermarks `marks`. Returns
    /// whether some candidate has several values.
    fn keyword_sort_values(
        &self,
        snaps: &[&Snapshot],
        marks: &[query::Watermarks],
        (field, descending): (u16, bool),
        cands: &[(u64, usize, u32, f32)],
        values: &mut [Option<SortValue>],
        (j, nk): (usize, usize),
    ) -> Result<bool> {
        let max = query::aggs::MAX_TERMS;
        let keys = query::keys_with_prefix(snaps, &field.to_be_bytes(), max)?.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "field [{}] has more than {max} distinct values, more than a sort or a collapse reads",
                self.schema.read().field(field).name
            ))
        })?;
        let at: std::collections::HashMap<(usize, u32), usize> =
            cands.iter().enumerate().map(|(n, c)| ((c.1, c.2), n)).collect();
        let mut several = false;
        for key in keys {
            let value = String::from_utf8_lossy(&key[2..]).into_owned();
            let node = query::Node::Term { field, key };
            for (i, snap) in snaps.iter().enumerate() {
                for doc in query::matching_docs(snap, &node, Some(&marks[i]))? {
                    if let Some(&n) = at.get(&(i, doc)) {
                        // Keys come in ascending order: the first is the smallest, the last the largest.
                        let slot = &mut values[n * nk + j];
                        several |= slot.is_some();
                        if slot.is_none() || descending {
                            *slot = Some(SortValue::Text(value.clone()));
                        }
                    }
                }
            }
        }
        Ok(several)
    }

    /// A term suggestion's first step ([`query::suggest::term_stats`]) for the analyzed term `term` of the
    /// text or keyword field `field`, over every shard at one moment: the term's frequency and the
    /// documents. Nothing when the field is not mapped; an error for a field of another type.
    pub fn suggest_term_stats(&self, field: &str, term: &str) -> Result<query::suggest::Candidates> {
        let Some(fid) = self.suggest_field(field)? else { return Ok(Default::default()) };
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        query::suggest::term_stats(&refs, fid, term)
    }

    /// A term suggestion's second step ([`query::suggest::near_terms`]): the terms of `field` near `term`,
    /// with their edits and frequencies.
    pub fn suggest_near_terms(
        &self,
        field: &str,
        term: &str,
        max_edits: usize,
        prefix_length: usize,
    ) -> Result<std::collections::BTreeMap<String, (usize, u64)>> {
        let Some(fid) = self.suggest_field(field)? else { return Ok(Default::default()) };
        let snaps: Vec<_> = self.shards.iter().map(|s| s.pin()).collect();
        let refs: Vec<&Snapshot> = snaps.iter().map(|s| &**s).collect();
        query::suggest::near_terms(&refs, fid, term, max_edits, prefix_length)
    }

    /// The text or keyword field a suggestion reads (`None`: not mapped).
    fn suggest_field(&self, field: &str) -> Result<Option<u16>> {
        let schema = self.schema.read();
        match schema.field_id(field) {
            None => Ok(None),
            Some(f) if matches!(schema.field(f).ty, FieldType::Text | FieldType::Keyword) => Ok(Some(f)),
            Some(f) => Err(Error::InvalidArgument(format!(
                "field [{field}] of type [{}] has no terms to suggest from",
                schema.field(f).ty.es_name()
            ))),
        }
    }

    /// The numeric, date or keyword field `name` as a sort key (an error for other field types and unknown
    /// fields).
    pub fn sort_field(&self, name: &str, descending: bool, missing_first: bool) -> Result<SortKey> {
        let schema = self.schema.read();
        if let Some(field) =
            schema.field_id(name).filter(|&f| schema.field(f).ty == crate::schema::FieldType::Keyword)
        {
            return Ok(SortKey::Keyword { field, descending, missing_first });
        }
        if let Some(f) = schema.field_id(name).filter(|&f| schema.field(f).ty == FieldType::Text) {
            return Err(Error::InvalidArgument(format!(
                "cannot sort on field [{name}] of type [{}]: only numeric, date and keyword fields can be sorted on",
                schema.field(f).ty.es_name()
            )));
        }
        drop(schema);
        Ok(SortKey::Field { field: self.numeric_field(name)?, descending, missing_first })
    }

    /// A sort by the numeric or date field `name` (an error for other field types and unknown fields).
    pub fn field_sort(&self, name: &str, descending: bool) -> Result<Sort> {
        Ok(Sort::Field { field: self.numeric_field(name)?, descending })
    }

    /// The id of the numeric or date field `name`, to sort on (an error for other field types and unknown
    /// fields).
    fn numeric_field(&self, name: &str) -> Result<u16> {
        let schema = self.schema.read();
        let id = schema.field_id(name).ok_or_else(|| {
            Error::InvalidArgument(format!("no mapping found for [{name}] in order to sort on"))
        })?;
        let ty = schema.field(id).ty;
        if !ty.is_numeric() {
            return Err(Error::InvalidArgument(format!(
                "cannot sort on field [{name}] of type [{}]: only numeric and date fields can be sorted on",
                ty.es_name()
            )));
        }
        Ok(id)
    }

    /// Number of live documents matching a query string.
    pub fn count(&self, query: &str) -> Result<u64> {
        let opts = SearchOptions { limit: 0, sort: Sort::Score, ..Default::default() };
        Ok(self.search(query, &opts)?.total)
    }

    pub fn stats(&self) -> IndexStats {
        let per: Vec<ShardStats> = self.shards.iter().map(|s| s.stats()).collect();
        IndexStats {
            name: self.name.clone(),
            fields: self.schema.read().user_fields().count(),
            recovery: *self.recovery.lock(),
            shard_docs: per.iter().map(|s| s.docs).collect(),
            shard: ShardStats::sum(&per),
        }
    }

    /// The first shard (the only one of a one-shard index), for lifecycle control in tests and benchmarks.
    pub fn shard(&self) -> &Shard {
        &self.shards[0]
    }

    /// Every shard, in routing order.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Marks a bulk load on every shard until the guard is finished or dropped: fresh segments started
    /// meanwhile get the bulk arena (see [`ShardConfig::bulk_arenas`]). [`crate::bulk_load`] takes one; guards nest.
    pub fn bulk_guard(&self) -> BulkGuard<'_> {
        for s in &self.shards {
            s.begin_bulk();
        }
        BulkGuard { index: self, done: false }
    }

    /// Seals every shard's fresh segment (see [`Shard::seal`]).
    pub fn seal(&self) -> Result<()> {
        self.shards.iter().try_for_each(|s| s.seal())
    }

    /// Waits until every shard's pipeline is idle (see [`Shard::wait_idle`]).
    pub fn wait_idle(&self) -> Result<()> {
        self.shards.iter().try_for_each(|s| s.wait_idle())
    }

    /// Waits until every shard has flushed and engraved what was sealed, merges aside (see
    /// [`Shard::wait_engraved`]).
    pub fn wait_engraved(&self) -> Result<()> {
        self.shards.iter().try_for_each(|s| s.wait_engraved())
    }

    /// Force merge: every shard is sealed, merged and compacted down to at most `max_segments` segments
    /// (Elasticsearch's `_forcemerge?max_num_segments=N`; see [`Shard::force_merge`]). Answers and scores do
    /// not change; queries get cheaper (one dictionary lookup and one posting list per term and segment).
    /// Returns the segments left, summed over the shards.
    pub fn force_merge(&self, max_segments: usize) -> Result<usize> {
        self.shards.iter().map(|s| s.force_merge(max_segments)).sum()
    }

    /// Closes the index: drains the pipelines and, in graceful and crash-safe mode, persists everything.
    pub fn close(&self) -> Result<()> {
        let meta = self.persisted(&self.schema.read());
        // The shards close in parallel: each drains its own pipeline and links and compacts what is left,
        // work no other shard shares, so N shards close in about the time of the slowest one.
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let others: Vec<_> = self.shards[1..]
                .iter()
                .map(|sh| {
                    let meta = meta.clone();
                    scope.spawn(move || sh.close(meta))
                })
                .collect();
            let mut out = vec![self.shards[0].close(meta.clone())];
            for h in others {
                out.push(
                    h.join()
                        .unwrap_or_else(|_| Err(Error::ResourceExhausted("a shard's close panicked".into()))),
                );
            }
            out
        });
        results.into_iter().find_map(Result::err).map_or(Ok(()), Err)
    }

    /// Stops every shard's pipeline without persisting anything (no last flush, engraving, compaction or
    /// manifest): what an index about to be deleted needs — its close would write out everything it is
    /// about to remove (seconds on a large index, and its idle-priority threads wait for the cores while
    /// queries run). A shard's thread in the middle of a job finishes it first.
    pub fn discard(&self) {
        std::thread::scope(|scope| {
            for sh in &self.shards[1..] {
                scope.spawn(move || sh.abandon());
            }
            self.shards[0].abandon();
        });
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
