//! Points in time: Elasticsearch's `POST /{index}/_pit` (and OpenSearch's
//! `POST /{index}/_search/point_in_time`), then searches with `"pit": {"id": ..}` paged by `search_after`.
//!
//! A point in time fixes a document set: each shard's doc ids visible when it opened
//! ([`Index::visible_ends`]). Like a scroll ([`crate::scroll`]) it pins no snapshot — it would hold memory
//! the writers wait for — so a search in it reads the current snapshots, below those ends. Each distinct
//! query gets its plan (expansions) and BM25 statistics at its first search in the point in time
//! ([`Index::horizon_at`], kept for the next searches: at most [`MAX_QUERIES`] per index), so a query pages
//! through one order with stable scores. As with scrolls, a document deleted or replaced after the point in
//! time opened is left out of later searches (Elasticsearch keeps its old version).
//!
//! Every search in a point in time sorts by its keys and then by `_shard_doc`, a tiebreaker unique over the
//! point in time's indices (the index's position times 2^40 plus the document's `_doc`), which the hits show
//! last in `sort`, as Elasticsearch's do; a `search_after` naming it resumes each index where the order left
//! it. Aggregations, suggestions and collapsing are refused in a point in time: they would read the current
//! documents, not its.

use crate::contexts::{keep_alive, Contexts, Use};
use crate::error::{ApiError, ApiResult};
use crate::search::{
    max_score, merge_pages, response, take_hits, KeySpec, SearchRequest, SortSpec, TrackTotal, Within,
};
use crate::{Limits, Target};
use axum::http::StatusCode;
use serde_json::{json, Value};
use spirit::{Horizon, Index, SortValue};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Points in time open at once (Elasticsearch's `search.max_open_point_in_time_context`... is unbounded by
/// default; this keeps a forgotten client from growing the map without end).
pub const MAX_OPEN: usize = 1_000;
/// The longest keep-alive (Elasticsearch's `search.max_keep_alive` default).
pub const MAX_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);
/// Queries whose plan and statistics one index of a point in time keeps (more: the least recently used is
/// forgotten, and planned again if asked for again).
pub const MAX_QUERIES: usize = 64;
/// `_shard_doc` = an index's position << this | the document's `_doc`.
const RANK_SHIFT: u32 = 40;

/// One index of a point in time.
struct PitIndex {
    /// Weak: a point in time does not keep a deleted index open.
    index: Weak<Index>,
    name: String,
    /// The filter of the alias the index was reached through.
    filter: Option<Value>,
    ends: Vec<u32>,
    /// Per query (its request JSON): its plan and statistics at its first search, and the search that last
    /// used them.
    horizons: HashMap<String, (Arc<Horizon>, u64)>,
}

struct Pit {
    indices: Vec<PitIndex>,
    /// Searches run in it (the clock of the plans' last uses).
    uses: u64,
}

/// The open points in time of a server.
pub struct Pits(Contexts<Pit>);

impl Default for Pits {
    fn default() -> Self {
        Pits(Contexts::new(MAX_OPEN, "point in time", "too_many_point_in_time_contexts_exception"))
    }
}

/// A reference to a point in time in a search request (`"pit": {"id", "keep_alive"}`).
#[derive(Debug, Clone)]
pub struct PitRef {
    pub id: String,
    pub keep_alive: Option<Duration>,
}

impl PitRef {
    pub fn parse(v: &Value) -> ApiResult<PitRef> {
        let obj = v.as_object().ok_or_else(|| ApiError::parsing("[pit] must be an object"))?;
        if let Some(k) = obj.keys().find(|k| !["id", "keep_alive"].contains(&k.as_str())) {
            return Err(ApiError::parsing(format!("unknown key [{k}] in [pit]")));
        }
        let id =
            obj.get("id").and_then(Value::as_str).ok_or_else(|| ApiError::parsing("[pit] needs an [id]"))?;
        let keep_alive = match obj.get("keep_alive") {
            None => None,
            Some(Value::String(s)) => Some(parse_keep_alive(s)?),
            Some(_) => return Err(ApiError::parsing("[pit] [keep_alive] must be a string such as 1m")),
        };
        Ok(PitRef { id: id.to_string(), keep_alive })
    }
}

/// A point in time's keep-alive.
pub fn parse_keep_alive(s: &str) -> ApiResult<Duration> {
    keep_alive("keep_alive", s, MAX_KEEP_ALIVE)
}

fn missing(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "search_context_missing_exception",
        format!("No search context found for id [{id}]"),
    )
}

impl Pits {
    /// Opens a point in time over `targets`; returns its id and the shards it covers.
    pub fn open(&self, targets: &[Target], keep_alive: Duration) -> ApiResult<(String, usize)> {
        let reserved = self.0.reserve()?;
        let indices: Vec<PitIndex> = targets
            .iter()
            .map(|t| PitIndex {
                index: Arc::downgrade(&t.index),
                name: t.index.name().to_string(),
                filter: t.filter.clone(),
                ends: t.index.visible_ends(),
                horizons: HashMap::new(),
            })
            .collect();
        if indices.len() > 1 << (53 - RANK_SHIFT) {
            return Err(ApiError::bad_request("a point in time spans at most 8,192 indices"));
        }
        let shards = targets.iter().map(|t| t.index.shards().len()).sum();
        Ok((self.0.insert(reserved, Pit { indices, uses: 0 }, keep_alive), shards))
    }

    /// Frees the points in time `ids` (`None`: every one); returns those that were open.
    pub fn close(&self, ids: Option<&[String]>) -> Vec<String> {
        self.0.remove(ids)
    }

    /// Every open point in time: id, opening time (epoch ms), keep-alive.
    pub fn list(&self) -> Vec<(String, u64, Duration)> {
        self.0.list()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs `req` (which names a point in time) in its point in time.
    pub fn search(&self, req: &SearchRequest, pit: &PitRef, limits: &Limits) -> ApiResult<Value> {
        for (given, what) in [
            (req.aggs.is_some(), "aggregations"),
            (req.has_suggest(), "suggestions"),
            (req.collapse.is_some(), "collapse"),
        ] {
            if given {
                return Err(ApiError::unsupported(format!("{what} in a point in time")));
            }
        }
        // The point in time's lock is held only while its plans are taken.
        let parts = self.0.with(
            &pit.id,
            pit.keep_alive,
            || missing(&pit.id),
            Use::Briefly,
            |p| p.parts(req, limits),
        )?;
        let mut out = search_parts(req, &parts, limits)?;
        out["pit_id"] = json!(pit.id);
        Ok(out)
    }
}

/// One index of a search in a point in time, taken from it under its lock.
struct Part {
    rank: usize,
    name: String,
    /// `None`: deleted since the point in time opened (its shards then count as failed).
    index: Option<Arc<Index>>,
    shards: usize,
    filter: Option<Value>,
    /// The plan and statistics of the search's query (`None` for a deleted index).
    horizon: Option<Arc<Horizon>>,
}

impl Pit {
    /// The indices a search of `req` reads, each with the plan and statistics of `req`'s query (made now at
    /// its first search here; the least recently used of more than [`MAX_QUERIES`] forgotten).
    fn parts(&mut self, req: &SearchRequest, limits: &Limits) -> ApiResult<Vec<Part>> {
        self.uses += 1;
        let (key, now) = (req.plan_key(), self.uses);
        let mut parts = vec![];
        for (rank, p) in self.indices.iter_mut().enumerate() {
            let Some(index) = p.index.upgrade() else {
                let name = p.name.clone();
                parts.push(Part {
                    rank,
                    name,
                    index: None,
                    shards: p.ends.len(),
                    filter: None,
                    horizon: None,
                });
                continue;
            };
            let horizon = match p.horizons.get_mut(&key) {
                Some((h, used)) => {
                    *used = now;
                    h.clone()
                }
                None => {
                    if p.horizons.len() >= MAX_QUERIES {
                        let oldest =
                            p.horizons.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
                        p.horizons.remove(&oldest.expect("a full cache has entries"));
                    }
                    let target = Target { index: index.clone(), filter: p.filter.clone() };
                    let h = Arc::new(index.horizon_at(&req.query_on(&target, limits)?, &p.ends)?);
                    p.horizons.insert(key.clone(), (h.clone(), now));
                    h
                }
            };
            let (filter, horizon) = (p.filter.clone(), Some(horizon));
            let name = p.name.clone();
            parts.push(Part { rank, name, index: Some(index), shards: p.ends.len(), filter, horizon });
        }
        Ok(parts)
    }
}

/// Runs `req` over `parts` (outside the point in time's lock: searches in one point in time run together).
fn search_parts(req: &SearchRequest, parts: &[Part], limits: &Limits) -> ApiResult<Value> {
    let t0 = Instant::now();
    let mut keys = req.sort.keys();
    let tiebreak = match keys.iter().position(|k| k.name == "_shard_doc") {
        Some(at) => at,
        None => {
            keys.push(KeySpec { name: "_shard_doc".into(), descending: false, missing_first: false });
            keys.len() - 1
        }
    };
    // Each index runs the keys with its own `_doc` in the tiebreaker's place, counting every match.
    let mut page = req.clone();
    page.sort = SortSpec::Keys(
        keys.iter()
            .map(|k| {
                if k.name == "_shard_doc" {
                    KeySpec { name: "_doc".into(), ..k.clone() }
                } else {
                    k.clone()
                }
            })
            .collect(),
    );
    page.after = None;
    page.track = TrackTotal::Exact;
    let after_rank = match &req.after {
        None => None,
        Some(values) => match values.get(tiebreak) {
            Some(Some(SortValue::Number(t)))
                if *t >= 0.0 && t.fract() == 0.0 && (*t as u64 >> RANK_SHIFT) < parts.len() as u64 =>
            {
                let t = *t as u64;
                Some(((t >> RANK_SHIFT) as usize, (t & ((1 << RANK_SHIFT) - 1)) as f64))
            }
            other => {
                let shown = match other {
                    Some(Some(SortValue::Number(x))) => x.to_string(),
                    Some(Some(SortValue::Text(t))) => format!("\"{t}\""),
                    Some(None) => "null".into(),
                    None => "missing".into(),
                };
                return Err(ApiError::bad_request(format!(
                    "[search_after] value {shown} (position {tiebreak}) is not a `_shard_doc` of a hit of this point \
                     in time"
                )));
            }
        },
    };
    let (mut pages, mut total, mut shards, mut failures) = (vec![], 0u64, 0usize, vec![]);
    let window = req.window();
    for part in parts {
        shards += part.shards;
        let (Some(index), Some(horizon)) = (&part.index, &part.horizon) else {
            // Deleted since the point in time opened: the others still answer, as Elasticsearch's shards do.
            for shard in 0..part.shards {
                failures.push(json!({"shard": shard, "index": part.name, "reason": {
                    "type": "index_not_found_exception", "reason": format!("no such index [{}]", part.name)}}));
            }
            continue;
        };
        // Where this index resumes: within the named index at the tiebreaker's `_doc`; in an index before
        // it (a smaller `_shard_doc`) past every document at equal values (+inf), in one after it before
        // them all (-1) — for either direction of `_shard_doc`, as `after` then reads them.
        let after = req.after.as_ref().zip(after_rank).map(|(values, (r, doc))| {
            let mut v = values.clone();
            v[tiebreak] = Some(SortValue::Number(match part.rank.cmp(&r) {
                std::cmp::Ordering::Equal => doc,
                std::cmp::Ordering::Less => f64::INFINITY,
                std::cmp::Ordering::Greater => -1.0,
            }));
            v
        });
        let within = Within { horizon, after: after.as_deref() };
        let mut r = page.execute_page(
            index,
            part.filter.as_ref(),
            limits,
            (0, window.0 + window.1),
            false,
            Some(within),
        )?;
        total += r["hits"]["total"]["value"].as_u64().unwrap_or(0);
        let mut list = take_hits(&mut r);
        for hit in &mut list {
            let doc = hit["sort"][tiebreak].as_u64().unwrap_or(0);
            if doc >> RANK_SHIFT != 0 {
                return Err(ApiError::bad_request(format!(
                    "index [{}] has more documents than a point in time's `_shard_doc` numbers (2^40)",
                    index.name()
                )));
            }
            hit["sort"][tiebreak] = json!(((part.rank as u64) << RANK_SHIFT) | doc);
        }
        pages.push((part.rank, list));
    }
    let hits = merge_pages(&SortSpec::Keys(keys.clone()), &keys, pages);
    let page: Vec<Value> = hits.into_iter().skip(window.0).take(window.1).map(|h| h.0).collect();
    let best = max_score(&page);
    let mut out = response(page, req.total_json(total, true), best, shards, failures);
    out["took"] = json!(t0.elapsed().as_millis() as u64);
    Ok(out)
}
