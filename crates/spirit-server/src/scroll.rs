//! Scrolls: Elasticsearch's `?scroll=1m` searches and `/_search/scroll`, for reading every match of a search
//! page after page (exports, reindexing clients, `helpers.scan`) while writes go on.
//!
//! Elasticsearch keeps the segments a scroll opened on alive for its keep-alive. Spirit does not pin its
//! snapshots that long: a pinned snapshot keeps fresh arenas and DRAM images from their rings, so a
//! forgotten scroll would hold memory the writers wait for. A scroll remembers instead, per index, a
//! [`Horizon`] — each shard's doc ids at the moment it opened and the query's BM25 statistics then — and a
//! cursor. Every page is a `search_after` over the current snapshots, restricted to the documents below the
//! horizon and scored with those statistics, in the request's order with `_doc` (unique in an index, fixed
//! for a document's life) as the last key. So the pages partition one ordered set: no document twice, none
//! skipped, and none written after the scroll opened, whatever is written in between. One difference from
//! Elasticsearch: a document deleted or replaced after the scroll opened is left out of the pages that come
//! after (Elasticsearch would still return the version it saw).
//!
//! Over several indices each keeps its own horizon and cursor; a page takes every index's next `size` hits
//! and keeps the first `size` of them in the request's order (ties by index, in the order the targets
//! came), so the order is exact across indices too.
//!
//! An open scroll costs its request and a few words per index: at most [`MAX_OPEN`] are open at once
//! ([`crate::contexts`]). Each expires its keep-alive after its last page (at most [`MAX_KEEP_ALIVE`]);
//! `DELETE /_search/scroll` frees them earlier.

use crate::contexts::{Contexts, Use};
use crate::error::{ApiError, ApiResult};
use crate::search::{
    max_score, merge_pages, response, sort_values, take_hits, KeySpec, SearchRequest, SortSpec, TrackTotal,
    Within,
};
use crate::{Limits, Target};
use axum::http::StatusCode;
use serde_json::{json, Value};
use spirit::{Horizon, Index, SortValue};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Scrolls open at once (Elasticsearch's `search.max_open_scroll_context` default).
pub const MAX_OPEN: usize = 500;
/// The longest keep-alive (Elasticsearch's `search.max_keep_alive` default).
pub const MAX_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);

/// A scroll's keep-alive (`1m`, `30s`, ...: [`crate::contexts::keep_alive`]).
pub fn keep_alive(s: &str) -> ApiResult<Duration> {
    crate::contexts::keep_alive("scroll", s, MAX_KEEP_ALIVE)
}

/// One index of a scroll: its horizon and how far the pages got.
struct Cursor {
    /// Weak: a scroll does not keep a deleted index open.
    index: Weak<Index>,
    name: String,
    /// The filter of the alias the index was reached through.
    filter: Option<Value>,
    horizon: Horizon,
    /// The sort values of the last hit a page took from this index.
    after: Option<Vec<Option<SortValue>>>,
    /// No hit of this index is left.
    done: bool,
}

struct Context {
    /// The request every page runs: sorted by several keys, `_doc` last, from 0, no aggregations.
    page: SearchRequest,
    cursors: Vec<Cursor>,
    /// The matches when the scroll opened (every page reports it, as Elasticsearch's do).
    total: u64,
    /// How many of a hit's sort values to show (the keys asked for; `None`: no `sort`, none was asked for).
    shown: Option<usize>,
}

/// The open scrolls of a server.
pub struct Scrolls(Contexts<Context>);

impl Default for Scrolls {
    fn default() -> Self {
        Scrolls(Contexts::new(MAX_OPEN, "scroll", "too_many_scroll_contexts_exception"))
    }
}

impl Scrolls {
    /// Scrolls open now (expired ones are dropped first).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Opens a scroll for `req` (which has `scroll`) over `targets` and answers its first page, with the
    /// request's aggregations.
    pub fn open(&self, req: &SearchRequest, targets: &[Target], limits: &Limits) -> ApiResult<Value> {
        let keep_alive = req.scroll.expect("a scroll request has a keep-alive");
        let reserved = self.0.reserve()?;
        let mut keys = req.sort.keys();
        // The default order (by score) shows no `sort`, as Elasticsearch's does.
        let shown = (req.sort != SortSpec::Score).then_some(keys.len());
        if !keys.iter().any(|k| k.name == "_doc") {
            keys.push(KeySpec { name: "_doc".into(), descending: false, missing_first: false });
        }
        let mut page = req.clone();
        page.sort = SortSpec::Keys(keys);
        page.after = None;
        page.scroll = None;
        page.track = TrackTotal::Exact;
        page.aggs = None;
        let cursors = targets
            .iter()
            .map(|t| {
                Ok(Cursor {
                    index: Arc::downgrade(&t.index),
                    name: t.index.name().to_string(),
                    filter: t.filter.clone(),
                    horizon: t.index.horizon(&req.query_on(t, limits)?)?,
                    after: None,
                    done: false,
                })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let mut ctx = Context { page, cursors, total: 0, shown };
        let t0 = Instant::now();
        let (mut out, total) = next_page(&mut ctx, limits)?;
        ctx.total = total;
        out["hits"]["total"] = json!({"value": total, "relation": "eq"});
        if let Some(aggs) = req.aggregations_on(targets, limits)? {
            out["aggregations"] = aggs;
        }
        if let Some(s) = req.suggestions_on(targets)? {
            out["suggest"] = s;
        }
        out["took"] = json!(t0.elapsed().as_millis() as u64);
        out["_scroll_id"] = json!(self.0.insert(reserved, ctx, keep_alive));
        Ok(out)
    }

    /// The next page of scroll `id`, its keep-alive renewed (to `keep_alive` when given). An unknown or
    /// expired id is a 404.
    pub fn next(&self, id: &str, keep_alive: Option<Duration>, limits: &Limits) -> ApiResult<Value> {
        let missing = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "search_context_missing_exception",
                format!("No search context found for id [{id}]"),
            )
        };
        self.0.with(id, keep_alive, missing, Use::Alone, |ctx| {
            let t0 = Instant::now();
            let (mut out, _) = next_page(ctx, limits)?;
            out["hits"]["total"] = json!({"value": ctx.total, "relation": "eq"});
            out["_scroll_id"] = json!(id);
            out["took"] = json!(t0.elapsed().as_millis() as u64);
            Ok(out)
        })
    }

    /// Frees the scrolls `ids` (`None`: every one). Returns how many were open.
    pub fn clear(&self, ids: Option<&[String]>) -> usize {
        self.0.remove(ids).len()
    }
}

/// The next page of `ctx`: every index's next `size` hits below its horizon, the first `size` of them all
/// in the request's order; each index's cursor moves to the last hit taken from it. Returns the response
/// (without `_scroll_id`) and the matches below the horizons now.
fn next_page(ctx: &mut Context, limits: &Limits) -> ApiResult<(Value, u64)> {
    let size = ctx.page.size;
    let keys = ctx.page.sort.keys();
    let (mut pages, mut returned, mut total, mut shards) =
        (vec![], vec![0usize; ctx.cursors.len()], 0u64, 0usize);
    for (rank, c) in ctx.cursors.iter().enumerate() {
        if c.done {
            // Read to its end: not read again (and not missed if it was deleted since).
            shards += c.index.upgrade().map_or(0, |i| i.shards().len());
            continue;
        }
        // An index deleted since the scroll opened.
        let index = c.index.upgrade().ok_or_else(|| ApiError::index_not_found(&c.name))?;
        shards += index.shards().len();
        let within = Within { horizon: &c.horizon, after: c.after.as_deref() };
        let mut r =
            ctx.page.execute_page(&index, c.filter.as_ref(), limits, (0, size), false, Some(within))?;
        total += r["hits"]["total"]["value"].as_u64().unwrap_or(0);
        let page = take_hits(&mut r);
        returned[rank] = page.len();
        pages.push((rank, page));
    }
    let mut hits = merge_pages(&ctx.page.sort, &keys, pages);
    hits.truncate(size);
    let mut taken = vec![0usize; ctx.cursors.len()];
    for (hit, rank) in &hits {
        taken[*rank] += 1;
        let values = hit["sort"].as_array().map(|v| sort_values(v)).transpose()?;
        ctx.cursors[*rank].after = values;
    }
    for (c, (&t, &r)) in ctx.cursors.iter_mut().zip(taken.iter().zip(&returned)) {
        // Fewer than a page, every one of them taken: nothing of this index is left.
        c.done |= t == r && r < size;
    }
    let mut page: Vec<Value> = hits.into_iter().map(|(hit, _)| hit).collect();
    let best = max_score(&page);
    for hit in &mut page {
        if let Value::Object(o) = hit {
            match ctx.shown {
                None => {
                    o.remove("sort");
                }
                Some(n) => {
                    if let Some(Value::Array(v)) = o.get_mut("sort") {
                        v.truncate(n);
                    }
                }
            }
        }
    }
    let out = response(page, Some(json!({"value": total, "relation": "eq"})), best, shards, vec![]);
    Ok((out, total))
}
