//! An index: a schema, its settings and its shard, behind the document-level API (`add`, `get`, `delete`,
//! `search`).

use crate::config::ShardConfig;
use crate::error::{Error, Result};
use crate::query::{self, Query, SearchOptions, Sort};
use crate::schema::document::{new_fields, take_id};
use crate::schema::{analyze_document, Schema};
use crate::shard::{Shard, ShardStats};
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
}

fn k1() -> f32 {
    1.2
}
fn b() -> f32 {
    0.75
}
fn max_doc() -> usize {
    100 << 20
}

impl Default for IndexSettings {
    fn default() -> Self {
        IndexSettings { bm25_k1: k1(), bm25_b: b(), max_document_bytes: max_doc(), default_analyzer: None }
    }
}

#[derive(Serialize, Deserialize)]
struct Persisted {
    schema: Schema,
    settings: IndexSettings,
    id_counter: u64,
}

/// The outcome of an `add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddResult {
    pub id: String,
    /// Internal doc id (global within the shard).
    pub doc: u32,
    /// A live document with the same `_id` was replaced.
    pub replaced: bool,
}

/// One search hit.
#[derive(Debug, Clone)]
pub struct Hit {
    pub id: String,
    pub score: f32,
    pub doc: u32,
    /// The stored `_source` as JSON bytes.
    pub source: Vec<u8>,
    /// With [`Sort::Field`]: the hit's value of the sort field.
    pub sort_value: Option<f64>,
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

/// An index.
pub struct Index {
    name: String,
    shard: Shard,
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
        let (shard, extra, replay) = Shard::open(dir, cfg)?;
        let open_micros = t_open.elapsed().as_micros() as u64;
        let (schema, settings, counter) = if extra.is_null() {
            let settings = settings.unwrap_or_default();
            let mut schema = Schema::default();
            if let Some(a) = &settings.default_analyzer {
                crate::schema::analyzer_config(a)?;
                schema.default_analyzer = Some(a.clone());
            }
            (schema, settings, 0)
        } else {
            Self::unpack(dir, extra)?
        };
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let index = Index {
            name: name.to_string(),
            shard,
            schema: RwLock::new(schema),
            settings,
            id_counter: AtomicU64::new(counter),
            id_prefix: format!("{:x}", (nanos as u64) >> 10),
            recovery: parking_lot::Mutex::new(None),
        };
        let mut recovery = None;
        if let Some(r) = replay {
            let t = Instant::now();
            let records = r.records.len() as u64;
            index.replay(dir, r)?;
            index.shard.finish_recovery();
            recovery =
                Some(RecoveryStats { open_micros, replay_micros: t.elapsed().as_micros() as u64, records });
        }
        *index.recovery.lock() = recovery;
        if let Some(m) = mappings {
            index.schema.write().apply_mappings(m)?;
        }
        // Crash-safe: the schema and settings are durable before any document that depends on them.
        index.log_meta()?;
        Ok(index)
    }

    fn unpack(dir: &Path, extra: serde_json::Value) -> Result<(Schema, IndexSettings, u64)> {
        let p: Persisted = serde_json::from_value(extra)
            .map_err(|e| Error::Format(format!("{}: index metadata: {e}", dir.display())))?;
        Ok((p.schema.rebuild()?, p.settings, p.id_counter))
    }

    /// Re-applies the tLog records a crash left unreflected (crash-safe recovery), re-analysing each document
    /// with the schema in force when it was added.
    fn replay(&self, dir: &Path, r: crate::shard::Replay) -> Result<()> {
        use crate::durability::TlogRecord;
        for (lsn, rec) in r.records {
            match rec {
                TlogRecord::Meta { json } => {
                    let v = serde_json::from_slice(&json)
                        .map_err(|e| Error::corrupt(dir, 0, format!("tLog record {lsn}: metadata: {e}")))?;
                    let (schema, _, counter) = Self::unpack(dir, v)?;
                    *self.schema.write() = schema;
                    self.id_counter.fetch_max(counter, Relaxed);
                }
                TlogRecord::Add { doc, replaces, id, source } => {
                    if doc < self.shard.next_doc() {
                        // Already in a durable segment: only its replacement of an older doc matters.
                        if let Some(r) = replaces {
                            self.shard.replay_delete(r, &id);
                        }
                        continue;
                    }
                    let body: serde_json::Value = serde_json::from_slice(&source)
                        .map_err(|e| Error::corrupt(dir, 0, format!("tLog record {lsn}: document: {e}")))?;
                    let analyzed = analyze_document(&self.schema.read(), id, &body)?;
                    self.shard.replay_add(lsn, &analyzed, doc, replaces)?;
                }
                TlogRecord::Delete { doc, id } => self.shard.replay_delete(doc, &id),
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
    fn log_meta_with(&self, schema: &Schema) -> Result<()> {
        if self.shard.durability() == crate::Durability::CrashSafe {
            self.shard.log_meta(self.persisted(schema))?;
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
    pub fn put_mappings(&self, mappings: &serde_json::Value) -> Result<()> {
        let mut s = self.schema.write();
        s.apply_mappings(mappings)?;
        self.log_meta_with(&s)
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

    /// [`add`](Self::add) without waiting for durability: returns the tLog LSN to sync to (crash-safe mode).
    pub fn add_doc_deferred(&self, doc: serde_json::Value) -> Result<(AddResult, Option<u64>)> {
        let (id, body) = take_id(doc)?;
        self.add_deferred(id, body)
    }

    /// Adds `body` (without `_id`) under `id`, or a generated id when `None`. In crash-safe mode the document
    /// is durable when this returns.
    pub fn add_with_id(&self, id: Option<String>, body: serde_json::Value) -> Result<AddResult> {
        let (r, lsn) = self.add_deferred(id, body)?;
        self.shard.sync_to(lsn)?;
        Ok(r)
    }

    /// Adds many documents with one persistence barrier for all of them (crash-safe mode): every `Ok` result
    /// is durable when this returns. Documents are independent: a bad one gets its error, the rest go in.
    pub fn add_bulk(
        &self,
        docs: impl IntoIterator<Item = serde_json::Value>,
    ) -> Result<Vec<Result<AddResult>>> {
        let mut out = vec![];
        let mut last = None;
        for d in docs {
            out.push(take_id(d).and_then(|(id, body)| self.add_deferred(id, body)).map(|(r, lsn)| {
                last = lsn.or(last);
                r
            }));
        }
        self.shard.sync_to(last)?;
        Ok(out)
    }

    /// Makes every write accepted so far durable (crash-safe mode; a no-op otherwise).
    pub fn sync(&self) -> Result<()> {
        self.shard.sync()
    }

    /// Adds a document without waiting for durability; returns the tLog LSN to sync to (crash-safe mode).
    /// Use [`sync`](Self::sync) before acknowledging it to anyone.
    pub fn add_deferred(
        &self,
        id: Option<String>,
        body: serde_json::Value,
    ) -> Result<(AddResult, Option<u64>)> {
        if !body.is_object() {
            return Err(Error::BadDocument("a document must be a JSON object".into()));
        }
        {
            let s = self.schema.read();
            let new = new_fields(&s, &body);
            drop(s);
            if !new.is_empty() {
                let mut w = self.schema.write();
                for f in new {
                    w.add_field(f)?;
                }
                self.log_meta_with(&w)?;
            }
        }
        let generated = id.is_none();
        let id = match id {
            Some(id) => {
                crate::schema::document::validate_id(&id)?;
                id
            }
            None => self.next_id(),
        };
        let analyzed = analyze_document(&self.schema.read(), id, &body)?;
        if analyzed.source.len() > self.settings.max_document_bytes {
            return Err(Error::DocumentTooLarge {
                size: analyzed.source.len(),
                limit: self.settings.max_document_bytes,
            });
        }
        let (doc, replaced, lsn) = self.shard.upsert_deferred(&analyzed, !generated)?;
        Ok((AddResult { id: analyzed.id, doc, replaced }, lsn))
    }

    /// Deletes the document with `_id`; returns whether it existed.
    pub fn delete(&self, id: &str) -> Result<bool> {
        self.shard.delete(id)
    }

    /// Real-time get by `_id`: the `_source` bytes of the live document.
    pub fn get(&self, id: &str) -> Result<Option<Vec<u8>>> {
        match self.shard.find_id(id) {
            None => Ok(None),
            Some((seg, local)) => {
                let r = match &seg.data {
                    crate::gdt::SegData::Fresh(f) => f.stored(local),
                    crate::gdt::SegData::Image { .. } => {
                        seg.image().expect("image").and_then(|v| v.stored(local))
                    }
                };
                r.map(|(_, src)| Some(src)).map_err(|e| Error::Format(e.0))
            }
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
        let snap = self.shard.pin();
        let node = {
            let schema = self.schema.read();
            query::plan(q, &schema, &snap)?
        };
        let mut opts = opts.clone();
        opts.bm25 = query::Bm25 { k1: self.settings.bm25_k1, b: self.settings.bm25_b };
        let cache = opts.cache.then(|| self.shard.result_cache());
        let res = query::execute_cached(&snap, &node, &opts, cache)?;
        let mut hits = Vec::with_capacity(res.hits.len());
        for h in res.hits {
            if !opts.fetch {
                hits.push(Hit {
                    id: String::new(),
                    score: h.score,
                    doc: h.doc,
                    source: vec![],
                    sort_value: h.sort_value,
                });
                continue;
            }
            let seg = snap
                .segment_of(h.doc)
                .ok_or_else(|| Error::Format(format!("hit {} has no segment", h.doc)))?;
            let local = h.doc - seg.base_doc;
            let stored = match &seg.data {
                crate::gdt::SegData::Fresh(f) => f.stored(local),
                crate::gdt::SegData::Image { .. } => {
                    seg.image().expect("image").and_then(|v| v.stored(local))
                }
            }
            .map_err(|e| Error::Format(format!("segment {}: {}", seg.id, e.0)))?;
            hits.push(Hit {
                id: stored.0,
                score: h.score,
                doc: h.doc,
                source: stored.1,
                sort_value: h.sort_value,
            });
        }
        Ok(SearchResult {
            total: res.total,
            total_exact: res.total_exact,
            hits,
            took_micros: t0.elapsed().as_micros() as u64,
        })
    }

    /// A sort by the numeric or date field `name` (an error for other field types and unknown fields).
    pub fn field_sort(&self, name: &str, descending: bool) -> Result<Sort> {
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
        Ok(Sort::Field { field: id, descending })
    }

    /// Number of live documents matching a query string.
    pub fn count(&self, query: &str) -> Result<u64> {
        let opts = SearchOptions { limit: 0, sort: Sort::Score, ..Default::default() };
        Ok(self.search(query, &opts)?.total)
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            name: self.name.clone(),
            fields: self.schema.read().fields().len(),
            recovery: *self.recovery.lock(),
            shard: self.shard.stats(),
        }
    }

    /// The shard (for lifecycle control in tests and benchmarks).
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// Closes the index: drains the pipeline and, in graceful and crash-safe mode, persists everything.
    pub fn close(&self) -> Result<()> {
        let meta = self.persisted(&self.schema.read());
        self.shard.close(meta)
    }
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
