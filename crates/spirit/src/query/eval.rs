//! Evaluation: document-at-a-time scorers over every segment kind, BM25 with index-wide statistics, and
//! top-k / newest-first / count collection.
//!
//! Statistics (documents with the field, total field length, document frequency) are summed over every
//! segment of the pinned snapshot — the fresh segment up to its watermark — so a document's score does not
//! depend on which segment holds it. Deleted documents still count in the statistics until they are
//! compacted away, as in Lucene.
//!
//! A sharded index sums the statistics of every shard first ([`collection_stats`] per shard, then
//! [`CollectionStats::add`]) and evaluates each shard with the sum ([`SearchOptions::stats`]), so a document's
//! score does not depend on the shard count either.

mod explain;
pub use explain::{explain, Explanation};

use super::cache::{Boundary, CachedResult, ResultCache};
use super::plan::Node;
use super::scratch::{recycle, reset, reset_lists, Scratch};
use crate::codec::simd::{self, low_bits};
use crate::codec::{
    decode_norm, encode_norm, packed_tf, Impacts, Intersect, PackedImpacts, PostingsCursor,
    BLOCK as BLOCK_LEN, IMPACTS, MARKS_SPAN, NORM_VALUES, NO_DOC,
};
use crate::error::{Error, Result};
use crate::gdt::{SegData, SegState, SegmentDesc, Snapshot};
use crate::segment::biword::biword_key;
use crate::segment::deletes::DeletesAt;
use crate::segment::fresh::MAX_REGION;
use crate::segment::hot::{BlockTable, PinnedList};
use crate::segment::image::{norm_at, number_at};
use crate::segment::{FieldStats, FreshPostings, FreshSegment, ImageView, SegmentError};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25 {
    pub k1: f32,
    pub b: f32,
}

impl Default for Bm25 {
    fn default() -> Self {
        Bm25 { k1: 1.2, b: 0.75 }
    }
}

/// Result order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// BM25 descending, ties newest first.
    #[default]
    Score,
    /// Newest (highest doc id) first.
    Newest,
    /// By the value of a numeric or date field (its field id; [`crate::Index::field_sort`] resolves a name),
    /// ascending or descending; documents without a value come last, ties in index order (oldest first), as
    /// in Elasticsearch. Scores are not computed (reported as 0).
    Field { field: u16, descending: bool },
}

#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Hits to return (after `offset`).
    pub limit: usize,
    pub offset: usize,
    pub sort: Sort,
    /// Count every match exactly (otherwise newest-first may stop early and report a lower bound).
    pub track_total: bool,
    pub bm25: Bm25,
    /// Load `_id` and `_source` of the hits (off: hits carry only the internal doc id and score).
    pub fetch: bool,
    /// Use the shard's result cache (answers are identical either way; off: the query neither reads nor
    /// fills it, like Elasticsearch's `request_cache=false`).
    pub cache: bool,
    /// Index-wide statistics to score with instead of this snapshot's own (a sharded index passes the sum
    /// over its shards).
    pub stats: Option<std::sync::Arc<CollectionStats>>,
    /// How a pruned top-k of an OR of terms skips on image segments (the answer is the same either way).
    pub disjunction: Disjunction,
}

/// The BM25 statistics a planned query reads: per field (documents with it, total length) and per term
/// its document frequency.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectionStats {
    fields: FxHashMap<u16, FieldStats>,
    df: FxHashMap<Vec<u8>, u64>,
}

impl CollectionStats {
    /// The document frequency of term key `key` (0 when the query reads no such term).
    pub fn doc_freq(&self, key: &[u8]) -> u64 {
        self.df.get(key).copied().unwrap_or(0)
    }

    /// The statistics of `field` (zero when the query reads no term of it).
    pub fn field(&self, field: u16) -> FieldStats {
        self.fields.get(&field).copied().unwrap_or_default()
    }

    /// Adds another shard's statistics of the same planned query.
    pub fn add(&mut self, o: CollectionStats) {
        for (f, st) in o.fields {
            *self.fields.entry(f).or_default() += st;
        }
        for (k, df) in o.df {
            *self.df.entry(k).or_default() += df;
        }
    }
}

/// How many documents of each segment of a snapshot one evaluation sees (the fresh segment's watermark
/// moves while the writer adds).
pub type Watermarks = Vec<u32>;

/// The statistics `node` reads over the segments of `snap`, and the watermarks they were taken at: evaluate
/// with [`execute_at`] at the same watermarks, so no document is scored that the statistics do not count.
pub fn collection_stats(snap: &Snapshot, node: &Node) -> Result<(CollectionStats, Watermarks)> {
    let mut ctx = Ctx::new(snap, Bm25::default(), None, None)?;
    weight(node, &mut ctx)?;
    let marks = ctx.segs.iter().map(|s| s.visible).collect();
    Ok((
        CollectionStats { fields: ctx.fields, df: ctx.terms.into_iter().map(|(k, t)| (k, t.df)).collect() },
        marks,
    ))
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            offset: 0,
            sort: Sort::Score,
            track_total: true,
            bm25: Bm25::default(),
            fetch: true,
            cache: true,
            stats: None,
            disjunction: Disjunction::default(),
        }
    }
}

/// The dynamic-pruning algorithm of a top-k OR of terms ([`SearchOptions::disjunction`]); both give exactly
/// the top-k of exhaustive evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Disjunction {
    /// Block-max MaxScore (Lucene's `MaxScoreBulkScorer`): windows of doc ids, terms split into essential
    /// and non-essential by their bounds, term at a time inside a window. Faster on the enwiki workloads.
    #[default]
    MaxScore,
    /// Block-max WAND (Ding and Suel, SIGIR 2011): document at a time, a pivot found on the lists' whole
    /// bounds and checked on their block bounds.
    BlockMaxWand,
}

/// A hit: global doc id and score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoredDoc {
    pub doc: u32,
    pub score: f32,
    /// With [`Sort::Field`]: the document's value of the field (`None`: it has none).
    pub sort_value: Option<f64>,
}

/// A field-sort candidate; smaller is better: documents with a value before those without, then by the
/// (sign-adjusted) value, then older first.
#[derive(Debug, Clone, Copy)]
struct FieldEntry {
    missing: bool,
    key: f64,
    doc: u32,
    value: Option<f64>,
}
impl PartialEq for FieldEntry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for FieldEntry {}
impl PartialOrd for FieldEntry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for FieldEntry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.missing.cmp(&o.missing).then(self.key.total_cmp(&o.key)).then(self.doc.cmp(&o.doc))
    }
}

#[derive(Debug, Clone, Default)]
pub struct SearchHits {
    /// Matching live documents (exact when `track_total`, else a lower bound).
    pub total: u64,
    pub total_exact: bool,
    pub hits: Vec<ScoredDoc>,
}

// ---------------------------------------------------------------------------------------------------------
// Segment access

enum SegKind<'a> {
    Fresh(&'a FreshSegment),
    Image(ImageView<'a>),
}

struct Seg<'a> {
    desc: &'a SegmentDesc,
    visible: u32,
    /// The segment's deletes as this evaluation's snapshot has them ([`crate::segment::deletes`]).
    deletes: DeletesAt<'a>,
    kind: SegKind<'a>,
    merged: bool,
}

impl Seg<'_> {
    /// Whether the segment holds every biword ([`crate::segment::biword`]).
    fn has_biwords(&self) -> bool {
        matches!(&self.kind, SegKind::Image(v) if v.has_biwords())
    }
}

impl Weight {
    /// The weight segment `seg` evaluates for this one: a two-word phrase of common words is its biword's
    /// term on an image that holds biwords.
    fn on(&self, seg: &Seg<'_>) -> &Weight {
        match self {
            Weight::Phrase { biword: Some(b), .. } if seg.has_biwords() => b,
            w => w,
        }
    }
}

type ErrSlot = RefCell<Option<SegmentError>>;

struct Ctx<'a> {
    snap: &'a Snapshot,
    segs: Vec<Seg<'a>>,
    bm25: Bm25,
    err: ErrSlot,
    /// Per key: df over the snapshot, and the posting blob of each merged segment (by seg index).
    terms: FxHashMap<Vec<u8>, TermData<'a>>,
    fields: FxHashMap<u16, FieldStats>,
    /// Index-wide statistics that replace the snapshot's own in weights (sharded indexes).
    global: Option<&'a CollectionStats>,
}

/// Where a term's postings are in each segment of the snapshot (looked up once per query): a blob, with
/// its head pinned in DRAM when the selective cache holds the term.
#[derive(Clone)]
enum SegTerm<'a> {
    Absent,
    Blob(&'a [u8], Option<Arc<PinnedList>>),
    Fresh(u32),
}

struct TermData<'a> {
    df: u64,
    per_seg: Vec<SegTerm<'a>>,
}

impl<'a> Ctx<'a> {
    fn new(
        snap: &'a Snapshot,
        bm25: Bm25,
        global: Option<&'a CollectionStats>,
        marks: Option<&[u32]>,
    ) -> Result<Ctx<'a>> {
        let mut segs = Vec::with_capacity(snap.segments.len());
        for (i, d) in snap.segments.iter().enumerate() {
            // Each watermark read once: the live fresh segment's moves while the writer adds.
            let visible = marks.map_or_else(|| d.visible_docs(), |m| m[i].min(d.visible_docs()));
            let kind = match &d.data {
                SegData::Fresh(f) => SegKind::Fresh(f),
                SegData::Image { .. } => {
                    SegKind::Image(d.image().expect("image").map_err(|e| Error::Format(e.0))?)
                }
            };
            let merged = d.state == SegState::Merged && snap.merged_upto.is_some_and(|m| d.id <= m);
            segs.push(Seg { desc: d, visible, deletes: d.deletes.at(0), kind, merged });
        }
        // Doc ids are given in segment order, so the evaluation sees exactly the doc ids below this one: the
        // deletes it sees are those stamped below it.
        let visible_end = segs.last().map_or(0, |s| s.desc.base_doc + s.visible);
        for s in &mut segs {
            s.deletes = s.desc.deletes.at(visible_end);
        }
        Ok(Ctx {
            snap,
            segs,
            bm25,
            err: RefCell::new(None),
            terms: FxHashMap::default(),
            fields: FxHashMap::default(),
            global,
        })
    }

    fn resolve_term(&mut self, key: &[u8]) -> Result<()> {
        if self.terms.contains_key(key) {
            return Ok(());
        }
        let mut df = 0u64;
        let mut per_seg = vec![SegTerm::Absent; self.segs.len()];
        if self.segs.iter().any(|s| s.merged) {
            let (snap, segs) = (self.snap, &self.segs);
            let upto = snap.merged_upto.unwrap_or(0);
            // Through the hot-chain cache (selective caching of the dictionary's hot part).
            snap.merged
                .resolve(key, upto, &mut |node| {
                    if let Some(idx) = snap.index_of(node.seg_id).filter(|&i| segs[i].merged) {
                        df += node.df as u64;
                        per_seg[idx] = SegTerm::Blob(node.blob, node.pinned);
                    }
                })
                .map_err(|e| Error::Format(e.0))?;
        }
        for (i, s) in self.segs.iter().enumerate() {
            if s.merged {
                continue;
            }
            match &s.kind {
                SegKind::Fresh(f) => {
                    if let Some(e) = f.lookup(key) {
                        match f.df_below(e, s.visible) {
                            Some(n) => df += n as u64,
                            None => {
                                // The writer added the term after this query's watermark: count below it.
                                let mut p = f.postings(e, s.visible);
                                while p.doc() != NO_DOC {
                                    df += 1;
                                    p.next();
                                }
                            }
                        }
                        per_seg[i] = SegTerm::Fresh(e);
                    }
                }
                SegKind::Image(v) => {
                    if let Some(t) = v.term(key).map_err(|e| Error::Format(e.0))? {
                        df += t.df as u64;
                        per_seg[i] = SegTerm::Blob(t.blob, None);
                    }
                }
            }
        }
        self.terms.insert(key.to_vec(), TermData { df, per_seg });
        Ok(())
    }

    /// Statistics of `field` for scoring: index-wide when given, else over this snapshot.
    fn field_stats(&mut self, field: u16) -> FieldStats {
        if let Some(g) = self.global {
            return g.fields.get(&field).copied().unwrap_or_default();
        }
        if let Some(s) = self.fields.get(&field) {
            return *s;
        }
        let mut st = FieldStats::default();
        for s in &self.segs {
            st += match &s.kind {
                SegKind::Fresh(f) => f.field_stats(field, s.visible),
                SegKind::Image(v) => v.field_stats(field),
            };
        }
        self.fields.insert(field, st);
        st
    }

    /// Document frequency of a resolved term for scoring: index-wide when given, else over this snapshot.
    fn df(&self, key: &[u8]) -> u64 {
        match self.global {
            Some(g) => g.df.get(key).copied().unwrap_or(0),
            None => self.terms[key].df,
        }
    }

    fn idf(&self, df: u64, n: u64) -> f32 {
        let (df, n) = (df as f64, n.max(df) as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln() as f32
    }
}

// ---------------------------------------------------------------------------------------------------------
// Weights: the segment-independent part of scoring.

enum Weight {
    Nothing,
    All,
    Term {
        key: Vec<u8>,
        field: u16,
        idf: f32,
        avgdl: f32,
        bm: Bm25Doc,
    },
    Phrase {
        keys: Vec<Vec<u8>>,
        offsets: Vec<u32>,
        /// 0 for an exact phrase (every fast path), else a sloppy one (`PhraseScorer` alone).
        slop: u32,
        /// A multi-phrase's last position: any of these terms ([`Node::Phrase`]; `PhraseScorer` alone).
        last: Vec<Vec<u8>>,
        field: u16,
        idf: f32,
        avgdl: f32,
        bm: Bm25Doc,
        /// An exact phrase of two adjacent common words: the term weight of its biword, which images that
        /// hold biwords answer it with ([`Weight::on`]).
        biword: Option<Box<Weight>>,
    },
    /// Keyword sets score nothing (constant score): `zero` is a BM25 with idf 0.
    TermSet {
        keys: Vec<Vec<u8>>,
        zero: Bm25Doc,
    },
    Exists {
        field: u16,
    },
    /// Documents with one of these `_id`s ([`Node::Ids`]).
    Ids(Vec<String>),
    Range {
        field: u16,
        lower: Bound<f64>,
        upper: Bound<f64>,
    },
    Bool {
        must: Vec<Weight>,
        should: Vec<Weight>,
        must_not: Vec<Weight>,
        filter: Vec<Weight>,
    },
    /// Best clause plus the tie breaker times the others.
    DisMax(Vec<Weight>, f32),
    /// A weight whose matches all score the factor, whatever the inner weight would score: a boosted
    /// constant-score clause (match-all, prefix, exists, range; [`Node::Boost`]) or a constant-score query
    /// ([`Node::Constant`]).
    Scaled(Box<Weight>, f32),
    /// At least `min` of the clauses (between 2 and their count less one: planning makes the rest ORs and
    /// ANDs).
    AtLeast {
        min: usize,
        of: Vec<Weight>,
    },
}

fn weight(n: &Node, ctx: &mut Ctx<'_>) -> Result<Weight> {
    weight_boosted(n, ctx, 1.0)
}

/// The weight of `n` with its scores multiplied by `boost` ([`Node::Boost`]s met on the way multiply in).
/// A scoring term's or phrase's boost is folded into its idf, as Lucene folds it into its BM25 weight: the
/// score is linear in the idf, and so is every bound the evaluator derives from it (impacts, block maxima,
/// frequency thresholds), so a boosted term takes every fast path an unboosted one does. A constant-score
/// weight scores `boost` instead of 1 ([`Weight::Scaled`]). Clauses that never score (`filter`,
/// `must_not`) are planned unboosted.
fn weight_boosted(n: &Node, ctx: &mut Ctx<'_>, boost: f32) -> Result<Weight> {
    debug_assert!(boost.is_finite() && boost >= 0.0, "planning refuses other boosts");
    // A constant-score weight, scaled when boosted.
    let scaled = |w: Weight| if boost == 1.0 { w } else { Weight::Scaled(Box::new(w), boost) };
    Ok(match n {
        Node::Nothing | Node::Dropped => Weight::Nothing,
        Node::All => scaled(Weight::All),
        Node::Term { field, key } => {
            ctx.resolve_term(key)?;
            let st = ctx.field_stats(*field);
            let df = ctx.df(key);
            let (idf, avgdl) = (ctx.idf(df, st.docs) * boost, avgdl(st));
            Weight::Term {
                key: key.clone(),
                field: *field,
                idf,
                avgdl,
                bm: Bm25Doc::new(idf, ctx.bm25, avgdl),
            }
        }
        Node::Blended { field, keys, boosts } => {
            // Every term with the idf of the most frequent one, times its own boost: an OR of terms.
            let st = ctx.field_stats(*field);
            let mut df = 0;
            for k in keys {
                ctx.resolve_term(k)?;
                df = df.max(ctx.df(k));
            }
            let avgdl = avgdl(st);
            let idf = ctx.idf(df, st.docs) * boost;
            let mut terms: Vec<Weight> = keys
                .iter()
                .zip(boosts)
                .map(|(k, &b)| Weight::Term {
                    key: k.clone(),
                    field: *field,
                    idf: idf * b,
                    avgdl,
                    bm: Bm25Doc::new(idf * b, ctx.bm25, avgdl),
                })
                .collect();
            if terms.len() == 1 {
                terms.pop().expect("one term")
            } else {
                Weight::Bool { must: vec![], should: terms, must_not: vec![], filter: vec![] }
            }
        }
        Node::Phrase { field, keys, offsets, slop, last } => {
            let st = ctx.field_stats(*field);
            let mut idf = 0.0;
            for k in keys {
                ctx.resolve_term(k)?;
                idf += ctx.idf(ctx.df(k), st.docs);
            }
            // The last position's alternatives that some live document holds (a dictionary keeps the terms
            // of deleted documents until a merge): each adds its idf, as Lucene's multi-phrase sums them.
            let mut alternatives = vec![];
            for k in last {
                ctx.resolve_term(k)?;
                let df = ctx.df(k);
                if df > 0 {
                    idf += ctx.idf(df, st.docs);
                    alternatives.push(k.clone());
                }
            }
            if !last.is_empty() && alternatives.is_empty() {
                return Ok(Weight::Nothing);
            }
            let (idf, avgdl) = (idf * boost, avgdl(st));
            let bm = Bm25Doc::new(idf, ctx.bm25, avgdl);
            // Its frequency in a document is the phrase's, so the biword scores as the phrase does.
            let biword = match (&keys[..], &offsets[..], slop) {
                ([a, b], [x, y], 0) if y.checked_sub(*x) == Some(1) && last.is_empty() => biword_key(a, b),
                _ => None,
            };
            let biword = match biword {
                Some(key) if ctx.segs.iter().any(|s| s.has_biwords()) => {
                    ctx.resolve_term(&key)?;
                    Some(Box::new(Weight::Term { key, field: *field, idf, avgdl, bm: bm.clone() }))
                }
                _ => None,
            };
            Weight::Phrase {
                keys: keys.clone(),
                offsets: offsets.clone(),
                slop: *slop,
                last: alternatives,
                field: *field,
                idf,
                avgdl,
                bm,
                biword,
            }
        }
        Node::TermSet { keys } => {
            for k in keys {
                ctx.resolve_term(k)?;
            }
            scaled(Weight::TermSet { keys: keys.clone(), zero: Bm25Doc::new(0.0, ctx.bm25, 1.0) })
        }
        Node::Exists { field } => scaled(Weight::Exists { field: *field }),
        Node::Ids(ids) => scaled(Weight::Ids(ids.clone())),
        Node::Range { field, lower, upper } => {
            scaled(Weight::Range { field: *field, lower: *lower, upper: *upper })
        }
        Node::Bool { must, should, must_not, filter } => {
            let mut ws = |v: &[Node], b: f32| -> Result<Vec<Weight>> {
                v.iter().map(|n| weight_boosted(n, ctx, b)).collect()
            };
            Weight::Bool {
                must: ws(must, boost)?,
                should: ws(should, boost)?,
                must_not: ws(must_not, 1.0)?,
                filter: ws(filter, 1.0)?,
            }
        }
        Node::DisMax(v, tie) => {
            Weight::DisMax(v.iter().map(|n| weight_boosted(n, ctx, boost)).collect::<Result<_>>()?, *tie)
        }
        Node::Boost(n, b) => weight_boosted(n, ctx, boost * b)?,
        Node::Constant(n, score) => Weight::Scaled(Box::new(weight_boosted(n, ctx, 1.0)?), score * boost),
        Node::AtLeast { min, of } => Weight::AtLeast {
            min: *min,
            of: of.iter().map(|n| weight_boosted(n, ctx, boost)).collect::<Result<_>>()?,
        },
    })
}

fn avgdl(st: FieldStats) -> f32 {
    if st.docs == 0 {
        1.0
    } else {
        (st.total_len as f64 / st.docs as f64) as f32
    }
}

// ---------------------------------------------------------------------------------------------------------
// Scorers: positioned on their first doc when built; NO_DOC when exhausted.

trait Scorer {
    fn doc(&self) -> u32;
    fn next(&mut self) -> u32;
    fn advance(&mut self, target: u32) -> u32;
    fn score(&mut self) -> f32;
    /// An upper bound of `score()` over every document this scorer can still return.
    fn upper_bound(&self) -> f32 {
        f32::INFINITY
    }
    /// Documents scoring below `theta` cannot enter the top-k any more: the scorer may skip them (and then
    /// no longer returns every match). Only called when exact hit counts are not needed.
    fn set_threshold(&mut self, _theta: f32) {}
    /// `(bound, last)`: an upper bound of the score of every document this scorer can return from
    /// `target` (at or after its current doc) up to `last`, from block-max data and without moving
    /// (Lucene's `advanceShallow` + `getMaxScore`); by default the whole-list bound, valid to the end.
    fn block_max_at(&mut self, _target: u32) -> (f32, u32) {
        (self.upper_bound(), NO_DOC - 1)
    }
}

/// A boxed scorer is a scorer: composite scorers are generic over their clauses, so clauses of one concrete
/// kind (all terms, the benchmark's AND and OR queries) are called statically and inlined, and mixed
/// clauses go through the box.
impl<'a> Scorer for Box<dyn Scorer + 'a> {
    #[inline]
    fn doc(&self) -> u32 {
        (**self).doc()
    }
    #[inline]
    fn next(&mut self) -> u32 {
        (**self).next()
    }
    #[inline]
    fn advance(&mut self, target: u32) -> u32 {
        (**self).advance(target)
    }
    #[inline]
    fn score(&mut self) -> f32 {
        (**self).score()
    }
    #[inline]
    fn upper_bound(&self) -> f32 {
        (**self).upper_bound()
    }
    #[inline]
    fn set_threshold(&mut self, theta: f32) {
        (**self).set_threshold(theta)
    }
    #[inline]
    fn block_max_at(&mut self, target: u32) -> (f32, u32) {
        (**self).block_max_at(target)
    }
}

enum Postings<'a> {
    Fresh(FreshPostings<'a>),
    Block(Box<PostingsCursor<'a>>, &'a ErrSlot),
    /// Several terms' postings as one (a multi-phrase's last position, Lucene's `UnionPostingsEnum`): the
    /// documents any of them holds, with the frequencies summed and the positions merged. The current doc
    /// is kept (the smallest of the parts').
    Union(Vec<Postings<'a>>, u32),
    Empty,
}

impl<'a> Postings<'a> {
    fn union(parts: Vec<Postings<'a>>) -> Postings<'a> {
        let doc = parts.iter().map(Postings::doc).min().unwrap_or(NO_DOC);
        Postings::Union(parts, doc)
    }

    fn doc(&self) -> u32 {
        match self {
            Postings::Fresh(p) => p.doc(),
            Postings::Block(c, _) => c.doc(),
            Postings::Union(_, doc) => *doc,
            Postings::Empty => NO_DOC,
        }
    }
    fn freq(&mut self) -> u32 {
        let r = match self {
            Postings::Fresh(p) => return p.freq(),
            Postings::Block(c, _) => c.freq(),
            Postings::Union(parts, doc) => {
                let doc = *doc;
                return parts.iter_mut().filter(|p| p.doc() == doc).map(|p| p.freq()).sum();
            }
            Postings::Empty => return 0,
        };
        r.unwrap_or_else(|e| {
            self.fail(e.into());
            0
        })
    }
    fn fail(&mut self, e: SegmentError) -> u32 {
        if let Postings::Block(_, slot) = self {
            slot.borrow_mut().get_or_insert(e);
        }
        *self = Postings::Empty;
        NO_DOC
    }
    fn next(&mut self) -> u32 {
        let r = match self {
            Postings::Fresh(p) => return p.next(),
            Postings::Block(c, _) => c.next(),
            Postings::Union(_, doc) => {
                let t = doc.saturating_add(1);
                return self.advance(t);
            }
            Postings::Empty => return NO_DOC,
        };
        r.unwrap_or_else(|e| self.fail(e.into()))
    }
    fn advance(&mut self, t: u32) -> u32 {
        let r = match self {
            Postings::Fresh(p) => return p.advance(t),
            Postings::Block(c, _) => c.advance(t),
            Postings::Union(parts, doc) => {
                let mut least = NO_DOC;
                for p in parts.iter_mut() {
                    let d = if p.doc() < t { p.advance(t) } else { p.doc() };
                    least = least.min(d);
                }
                *doc = least;
                return least;
            }
            Postings::Empty => return NO_DOC,
        };
        r.unwrap_or_else(|e| self.fail(e.into()))
    }
    fn positions(&mut self, out: &mut Vec<u32>) {
        let r = match self {
            Postings::Fresh(p) => {
                p.positions(out);
                Ok(())
            }
            Postings::Block(c, _) => c.positions(out),
            Postings::Union(parts, doc) => {
                out.clear();
                let mut one = vec![];
                for p in parts.iter_mut().filter(|p| p.doc() == *doc) {
                    one.clear();
                    p.positions(&mut one);
                    out.extend_from_slice(&one);
                }
                out.sort_unstable();
                out.dedup();
                return;
            }
            Postings::Empty => Ok(()),
        };
        if let Err(e) = r {
            out.clear();
            self.fail(e.into());
        }
    }
}

/// One-byte norms (`codec::encode_norm` of the field length) per document.
#[derive(Clone, Copy)]
pub(super) enum Norms<'a> {
    Image(&'a [u8]),
    Fresh(&'a [AtomicU32]),
    None,
}

impl Norms<'_> {
    #[inline]
    fn get(&self, doc: u32) -> u8 {
        match self {
            Norms::Image(c) => norm_at(c, doc),
            Norms::Fresh(lens) => encode_norm(lens.get(doc as usize).map_or(0, |l| l.load(Relaxed))),
            Norms::None => encode_norm(1),
        }
    }
}

/// BM25 of one term: `idf · tf / (tf + k1·(1 − b + b·dl/avgdl))`, with the length term precomputed for
/// each of the 256 one-byte norms (as Lucene's `BM25Scorer` caches it), so a document costs a table load,
/// an add and a division. Built once per query term; every segment's scorer borrows it.
#[derive(Clone)]
pub(super) struct Bm25Doc {
    idf: f32,
    bm25: Bm25,
    /// The idf-free part, shared by every term scored under the same `k1`, `b` and average length.
    lengths: Arc<LengthTerms>,
}

/// What BM25 precomputes from `k1`, `b` and the average field length alone — the same for every term of a
/// field in a query, and across queries for as long as the average holds (on a static index, always), so
/// it is made once per (k1, b, average) and shared ([`LengthTerms::of`]) instead of per query term.
pub(super) struct LengthTerms {
    /// `k1·(1 − b + b·dl/avgdl)` for the length `dl` each norm stands for.
    denom: [f32; NORM_VALUES],
    /// The key and average length of the block-bound table ([`block_table`]) a term's block bounds may
    /// come from: per block, the impacts' best BM25 at idf 1 and at the smallest grid point at or above this
    /// query's average length. BM25 grows with the average length (it shrinks the length penalty), so that
    /// table times the idf bounds the block for every query whose average length is at most the grid point:
    /// as documents stream in, the average moves slowly and a table serves until it crosses a grid point.
    /// `None` for an average length that is not a positive number.
    grid_cell: Option<(u128, f32)>,
}

/// Steps of the average-length grid of block-bound tables per doubling: tables are made at grid points,
/// 0.54% apart (see `LengthTerms::grid_cell`).
const AVGDL_STEPS: f64 = 128.0;

/// A bound taken from a block-bound table — `idf ×` a bound made with idf 1 at a grid average length, where
/// the query's own scores divide `idf · tf` — is inflated by this factor: the two roundings differ by a few
/// ulps, far below it.
const TABLE_SLACK: f32 = 1.0 + 1e-5;

/// How many [`LengthTerms`] a thread keeps (the last made or used, most recent first, keyed by the bits of
/// k1, b and the average length): a query over two fields (title and body) alternates two.
const LENGTH_TERMS_KEPT: usize = 4;

type LengthKey = (u32, u32, u32);

thread_local! {
    static RECENT_LENGTH_TERMS: RefCell<Vec<(LengthKey, Arc<LengthTerms>)>> = const { RefCell::new(Vec::new()) };
}

impl LengthTerms {
    /// The length terms of (`bm25`, `avgdl`): the thread's copy if it made them recently, else new ones.
    fn of(bm25: Bm25, avgdl: f32) -> Arc<LengthTerms> {
        let key = (bm25.k1.to_bits(), bm25.b.to_bits(), avgdl.to_bits());
        let make = || Arc::new(LengthTerms::new(bm25, avgdl));
        // During thread teardown the cache may be gone: then they are simply made.
        RECENT_LENGTH_TERMS
            .try_with(|r| {
                let mut r = r.borrow_mut();
                if let Some(i) = r.iter().position(|(k, _)| *k == key) {
                    let hit = r.remove(i);
                    r.insert(0, hit);
                } else {
                    r.truncate(LENGTH_TERMS_KEPT - 1);
                    r.insert(0, (key, make()));
                }
                r[0].1.clone()
            })
            .unwrap_or_else(|_| make())
    }

    fn new(bm25: Bm25, avgdl: f32) -> LengthTerms {
        let (c0, c1) = (bm25.k1 * (1.0 - bm25.b), bm25.k1 * bm25.b / avgdl);
        let mut denom = [0f32; NORM_VALUES];
        for (n, d) in denom.iter_mut().enumerate() {
            *d = c0 + c1 * decode_norm(n as u8) as f32;
        }
        LengthTerms { denom, grid_cell: Self::grid_cell_of(bm25, avgdl) }
    }

    /// The grid cell of `avgdl` under `bm25` (see `LengthTerms::grid_cell`).
    fn grid_cell_of(bm25: Bm25, avgdl: f32) -> Option<(u128, f32)> {
        let a = f64::from(avgdl);
        if !(a.is_finite() && a > 0.0) {
            return None;
        }
        let step = (a.log2() * AVGDL_STEPS).ceil();
        // A hair above the grid point, so that rounding to f32 never lands below an average in its cell.
        let grid = (2f64.powf(step / AVGDL_STEPS) * (1.0 + 1e-6)) as f32;
        debug_assert!(grid >= avgdl);
        let key = ((bm25.k1.to_bits() as u128) << 64)
            | ((bm25.b.to_bits() as u128) << 32)
            | (step as i32 as u32 as u128);
        Some((key, grid))
    }
}

impl Bm25Doc {
    fn new(idf: f32, bm25: Bm25, avgdl: f32) -> Bm25Doc {
        Bm25Doc { idf, bm25, lengths: LengthTerms::of(bm25, avgdl) }
    }

    /// This term's bound of a block from a block-bound table's `value` for it (see `LengthTerms::grid_cell`).
    #[inline]
    fn bound_from_table(&self, value: f32) -> f32 {
        self.idf * value * TABLE_SLACK
    }

    #[inline]
    fn score(&self, tf: f32, norm: u8) -> f32 {
        self.idf * tf / (tf + self.lengths.denom[norm as usize])
    }

    /// Scores a batch of postings into `out` — bit for bit what [`Self::score`] gives each: first the
    /// length denominators (table loads), then arithmetic alone, which the compiler vectorizes (four
    /// divisions at a time instead of one).
    #[inline]
    fn score_batch(&self, norms: &Norms<'_>, docs: &[u32], tfs: &[u32], out: &mut [f32]) {
        let out = &mut out[..docs.len()];
        match norms {
            Norms::Image(col) => {
                for (o, &d) in out.iter_mut().zip(docs) {
                    *o = self.lengths.denom[norm_at(col, d) as usize];
                }
            }
            _ => {
                for (o, &d) in out.iter_mut().zip(docs) {
                    *o = self.lengths.denom[norms.get(d) as usize];
                }
            }
        }
        for (o, &f) in out.iter_mut().zip(tfs) {
            let tf = f as f32;
            *o = self.idf * tf / (tf + *o);
        }
    }

    /// [`Self::score_batch`] added to what `out` holds, in place: each posting's score computed as
    /// [`Self::score`] does, then added — the same operations as scoring into a buffer and adding it, without
    /// the buffer (a conjunction's windows keep a few candidates each, and clearing a block-sized buffer for
    /// every term of every window was ~5% of `+in +to`).
    #[inline]
    fn add_batch(&self, norms: &Norms<'_>, docs: &[u32], tfs: &[u32], out: &mut [f32]) {
        // One loop per kind of norms (monomorphized, as `bits_by`: the image column's read inlines).
        #[inline(always)]
        fn add_by(bm: &Bm25Doc, docs: &[u32], tfs: &[u32], out: &mut [f32], norm: impl Fn(u32) -> u8) {
            for ((o, &d), &f) in out.iter_mut().zip(docs).zip(tfs) {
                let tf = f as f32;
                *o += bm.idf * tf / (tf + bm.lengths.denom[norm(d) as usize]);
            }
        }
        let out = &mut out[..docs.len()];
        match norms {
            Norms::Image(col) => add_by(self, docs, tfs, out, |d| norm_at(col, d)),
            _ => add_by(self, docs, tfs, out, |d| norms.get(d)),
        }
    }

    /// Whether a posting of frequency `tf` at (quantized) length `dl` may score `need` or more: the
    /// division-free `tf·(idf − need) ≥ need·D` of [`keep_competitive`]. Callers lower `need` by
    /// [`FILTER_SLACK`] first, so float rounding never makes it reject a posting whose score reaches it.
    #[inline]
    fn may_reach(&self, tf: f32, dl: u32, need: f32) -> bool {
        tf * (self.idf - need) >= need * self.lengths.denom[encode_norm(dl) as usize]
    }

    /// [`Self::impacts_bound`] of packed impacts, read as stored (the norm code indexes the length terms
    /// directly): bit for bit the same value.
    #[inline]
    fn packed_bound(&self, imp: &PackedImpacts) -> f32 {
        let mut x = [0f32; IMPACTS];
        for (x, &w) in x.iter_mut().zip(imp) {
            let tf = packed_tf(w) as f32;
            *x = self.idf * tf / (tf + self.lengths.denom[(w & 0xFF) as usize]);
        }
        x.iter().fold(0.0f32, |m, &v| m.max(v))
    }

    /// The best score over a block's impacts — each bit for bit what [`Self::score`] gives a posting with
    /// that (tf, quantized length), so no posting of the block scores above it. The length terms are looked
    /// up first, so the divisions are independent and pipeline; an unused entry (tf 0) scores 0, or NaN
    /// when the length term is 0 too (k1 = 0), which `max` passes over.
    #[inline]
    fn impacts_bound(&self, imp: &Impacts) -> f32 {
        let den = imp.map(|(_, dl)| self.lengths.denom[encode_norm(dl) as usize]);
        let mut x = [0f32; IMPACTS];
        for (x, (&(tf, _), d)) in x.iter_mut().zip(imp.iter().zip(den)) {
            let tf = tf as f32;
            *x = self.idf * tf / (tf + d);
        }
        x.iter().fold(0.0f32, |m, &v| m.max(v))
    }
}

struct TermScorer<'a> {
    p: Postings<'a>,
    norms: Norms<'a>,
    bm: &'a Bm25Doc,
    ub: f32,
    theta: f32,
    /// The last block bound computed for `block_max_at`: (block, bound).
    bound_cache: (u32, f32),
}

/// A term's score bound over its whole list: the best block bound, or for a one-block list (no skip table)
/// its best posting. (A corrupt block bounds nothing; the error surfaces when it is read.)
fn list_bound(c: &mut PostingsCursor<'_>, norms: &Norms<'_>, bm: &Bm25Doc) -> f32 {
    c.max_over_blocks(|imp| bm.impacts_bound(imp)).unwrap_or_else(|| {
        c.block_postings().map_or(f32::INFINITY, |(docs, tfs)| {
            docs.iter().zip(tfs).map(|(&d, &tf)| bm.score(tf as f32, norms.get(d))).fold(0.0, f32::max)
        })
    })
}

impl<'a> TermScorer<'a> {
    fn new(mut p: Postings<'a>, norms: Norms<'a>, bm: &'a Bm25Doc) -> TermScorer<'a> {
        let ub = match &mut p {
            Postings::Block(c, _) => list_bound(c, &norms, bm),
            // tf / (tf + norm) < 1.
            Postings::Fresh(_) | Postings::Union(..) => bm.idf,
            Postings::Empty => 0.0,
        };
        TermScorer { p, norms, bm, ub, theta: f32::NEG_INFINITY, bound_cache: (u32::MAX, 0.0) }
    }

    /// Skips whole blocks whose bound is below the threshold (block-max skipping), reading only their
    /// impacts: the first block that can compete is the only one decoded.
    #[inline]
    fn skip_blocks(&mut self) -> u32 {
        if self.theta > 0.0 {
            if let Postings::Block(c, _) = &mut self.p {
                let bm = self.bm;
                let first = c.block_index();
                let mut b = first;
                while c.doc() != NO_DOC
                    && c.bound_of_block(b, |imp| bm.impacts_bound(imp)).is_some_and(|x| x < self.theta)
                {
                    b += 1;
                }
                if b != first {
                    if let Err(e) = c.seek_block(b) {
                        return self.p.fail(e.into());
                    }
                }
            }
        }
        self.p.doc()
    }
}

impl Scorer for TermScorer<'_> {
    fn doc(&self) -> u32 {
        self.p.doc()
    }
    fn next(&mut self) -> u32 {
        self.p.next();
        if matches!(&self.p, Postings::Block(c, _) if c.at_block_start()) {
            return self.skip_blocks();
        }
        self.p.doc()
    }
    fn advance(&mut self, t: u32) -> u32 {
        self.p.advance(t);
        self.skip_blocks()
    }
    fn score(&mut self) -> f32 {
        let d = self.p.doc();
        let tf = self.p.freq();
        self.bm.score(tf as f32, self.norms.get(d))
    }
    fn upper_bound(&self) -> f32 {
        self.ub
    }
    fn set_threshold(&mut self, theta: f32) {
        self.theta = theta;
    }
    fn block_max_at(&mut self, target: u32) -> (f32, u32) {
        match &self.p {
            Postings::Block(c, _) if c.block_count() > 1 => {
                if c.doc() == NO_DOC {
                    return (0.0, NO_DOC - 1);
                }
                let b = c.shallow_block(target);
                if b >= c.block_count() {
                    // Nothing at or after the target.
                    return (0.0, NO_DOC - 1);
                }
                if self.bound_cache.0 != b {
                    let bm = self.bm;
                    let x = c.bound_of_block(b, |imp| bm.impacts_bound(imp)).unwrap_or(self.ub);
                    self.bound_cache = (b, x);
                }
                (self.bound_cache.1, c.last_doc_of(b))
            }
            _ => (self.ub, NO_DOC - 1),
        }
    }
}

/// Leapfrog: advances every item to the first doc ≥ `target` that all of them contain (or `NO_DOC`).
fn leapfrog<T>(items: &mut [T], mut target: u32, advance: impl Fn(&mut T, u32) -> u32) -> u32 {
    'outer: loop {
        for it in items.iter_mut() {
            let d = advance(it, target);
            if d == NO_DOC {
                return NO_DOC;
            }
            if d > target {
                target = d;
                continue 'outer;
            }
        }
        return target;
    }
}

/// `next` and `advance` of a scorer positioned by `settle(target)` (first match ≥ target) on `self.doc`.
macro_rules! settle_driven {
    () => {
        fn doc(&self) -> u32 {
            self.doc
        }
        fn next(&mut self) -> u32 {
            if self.doc == NO_DOC {
                return NO_DOC;
            }
            self.settle(self.doc + 1)
        }
        fn advance(&mut self, t: u32) -> u32 {
            if self.doc >= t {
                return self.doc;
            }
            self.settle(t)
        }
    };
}

struct PhraseScorer<'a> {
    ps: Vec<Postings<'a>>,
    offsets: Vec<u32>,
    /// A sloppy phrase's slop and its terms' repeat groups ([`Sloppy`]); `None` for an exact phrase.
    sloppy: Option<Sloppy>,
    norms: Norms<'a>,
    bm: &'a Bm25Doc,
    doc: u32,
    /// The current doc's phrase frequency (a sloppy phrase's is a sum of fractions).
    freq: f32,
    bufs: Vec<Vec<u32>>,
    /// What a match must score to be wanted ([`Scorer::set_threshold`]; `-∞` for every match).
    theta: f32,
}

impl PhraseScorer<'_> {
    /// From the current candidate of the lead list, finds the next doc where all terms occur at the right
    /// relative positions.
    fn settle(&mut self, mut target: u32) -> u32 {
        loop {
            // Leapfrog to a doc every list contains.
            target = leapfrog(&mut self.ps, target, |p, t| p.advance(t));
            if target == NO_DOC {
                self.doc = NO_DOC;
                return NO_DOC;
            }
            // An exact phrase occurs at most as often as its least frequent term here, a sloppy one's
            // frequency is at most [`Sloppy::freq_bound`]: below the threshold at that frequency, the
            // document cannot be wanted, and its positions stay unread.
            if self.theta > f32::NEG_INFINITY {
                let most = match &self.sloppy {
                    None => self.ps.iter_mut().map(|p| p.freq()).min().unwrap_or(0) as f32,
                    Some(_) => Sloppy::freq_bound(self.ps.iter_mut().map(|p| p.freq())),
                };
                if self.bm.score(most, self.norms.get(target)) < self.theta {
                    target += 1;
                    if target == NO_DOC {
                        self.doc = NO_DOC;
                        return NO_DOC;
                    }
                    continue;
                }
            }
            // Positions, decoded only now that every term matches.
            for i in 0..self.ps.len() {
                let mut b = std::mem::take(&mut self.bufs[i]);
                self.ps[i].positions(&mut b);
                self.bufs[i] = b;
            }
            let freq = match &mut self.sloppy {
                None => phrase_freq(&self.bufs, &self.offsets) as f32,
                Some(sl) => sl.freq(&self.bufs, &self.offsets),
            };
            if freq > 0.0 {
                self.doc = target;
                self.freq = freq;
                return target;
            }
            target += 1;
            if target == NO_DOC {
                self.doc = NO_DOC;
                return NO_DOC;
            }
        }
    }
}

/// A document with every term of a phrase, its terms' positions in `bufs`: if the phrase occurs there, it is
/// counted and offered to the top-k at its frequency (below the k-th best nothing enters; equal may: the
/// newer doc wins the tie).
fn offer_phrase(
    col: &mut Collector,
    (bufs, offsets): (&[Vec<u32>], &[u32]),
    (bm, norm): (&Bm25Doc, u8),
    theta: f32,
    doc: u32,
) {
    let freq = phrase_freq(bufs, offsets);
    if freq > 0 {
        col.total += 1;
        let score = bm.score(freq as f32, norm);
        if score >= theta {
            col.push_score(Entry(score, doc));
        }
    }
}

/// How often the terms occur at their relative `offsets` (positions of each term, sorted, in `bufs`).
fn phrase_freq(bufs: &[Vec<u32>], offsets: &[u32]) -> u32 {
    if let [a, b] = bufs {
        return phrase_freq2(a, b, offsets[1].wrapping_sub(offsets[0]));
    }
    bufs[0]
        .iter()
        .filter(|&&p0| {
            (1..bufs.len()).all(|i| {
                let want = p0 + offsets[i] - offsets[0];
                bufs[i].binary_search(&want).is_ok()
            })
        })
        .count() as u32
}

/// [`phrase_freq`] of two terms: how many positions `p` of the first have `p + shift` among the second's.
fn phrase_freq2(a: &[u32], b: &[u32], shift: u32) -> u32 {
    if a.len() * b.len() <= 256 {
        // Two short lists (most documents): every pair compared, branch-free and vectorized, instead of a
        // binary search per position.
        return a
            .iter()
            .map(|&p| (b.iter().filter(|&&q| q == p.wrapping_add(shift)).count() > 0) as u32)
            .sum();
    }
    a.iter().filter(|&&p| b.binary_search(&p.wrapping_add(shift)).is_ok()).count() as u32
}

/// A sloppy phrase's matching, as Lucene's `SloppyPhraseMatcher`: each term's cursor over its positions
/// stands at a *phrase position* (its position less the term's offset in the phrase; an exact match has all
/// equal). The cursor furthest behind moves on; each time it passes the next one, the spread of phrase
/// positions it left (the match length, the furthest ahead less its own) is a match if at most the slop,
/// counting `1 / (1 + length)` towards the frequency, then the next furthest behind moves. So `"a b"~1`
/// finds `a x b` (length 1: ½), while `b a` has length 2 (a transposition is two moves) and needs `~2`. A
/// term repeated in the phrase (`"to be or not to be"~2`) never has two of its cursors on one position: on
/// a collision the one behind in phrase position moves on, as Lucene's repeat handling does. A phrase
/// prefix's last position is any of its expansions: it collides with a term among them.
struct Sloppy {
    slop: u32,
    /// For each position, the other positions whose terms it may share (the same key, or a key among the
    /// last position's expansions): only those can stand on one text position (a text position holds one
    /// term).
    peers: Vec<Vec<usize>>,
    repeats: bool,
    /// Per term: the index of its current position, and its phrase position.
    at: Vec<usize>,
    pos: Vec<i64>,
}

impl Sloppy {
    /// The matcher of a phrase of `keys`, then — for a phrase prefix — a last position of any of `last`
    /// (sorted).
    fn new(keys: &[Vec<u8>], last: &[Vec<u8>], slop: u32) -> Sloppy {
        let sets: Vec<&[Vec<u8>]> =
            keys.iter().map(std::slice::from_ref).chain((!last.is_empty()).then_some(last)).collect();
        let share = |a: &[Vec<u8>], b: &[Vec<u8>]| a.iter().any(|k| b.binary_search(k).is_ok());
        let peers: Vec<Vec<usize>> = (0..sets.len())
            .map(|p| (0..sets.len()).filter(|&u| u != p && share(sets[p], sets[u])).collect())
            .collect();
        let repeats = peers.iter().any(|p| !p.is_empty());
        Sloppy { slop, peers, repeats, at: vec![], pos: vec![] }
    }

    /// An upper bound of the frequency from the terms' frequencies in a document: every match but the last
    /// is followed by at least one cursor move, each move takes one position, and a match counts at most 1.
    fn freq_bound(tfs: impl Iterator<Item = u32>) -> f32 {
        let (sum, n) = tfs.fold((0u64, 0u64), |(s, n), tf| (s + tf as u64, n + 1));
        (sum + 1).saturating_sub(n).max(1) as f32
    }

    /// The sloppy frequency of one document from its terms' positions (sorted, in `bufs`).
    fn freq(&mut self, bufs: &[Vec<u32>], offsets: &[u32]) -> f32 {
        let n = bufs.len();
        if bufs.iter().any(|b| b.is_empty()) {
            return 0.0;
        }
        self.at.clear();
        self.at.resize(n, 0);
        self.pos.clear();
        self.pos.extend((0..n).map(|t| bufs[t][0] as i64 - offsets[t] as i64));
        let mut end = *self.pos.iter().max().expect("a phrase has terms");
        if self.repeats {
            for t in 0..n {
                if !self.resolve(t, bufs, offsets, &mut end) {
                    return 0.0;
                }
            }
        }
        let slop = self.slop as i64;
        let weight = |len: i64| 1.0 / (1.0 + len as f32);
        let mut freq = 0.0f32;
        loop {
            // The cursor furthest behind (ties: the lower term, as any order gives the same lengths), and
            // the phrase position of the next one.
            let p = (0..n).min_by_key(|&t| (self.pos[t], t)).expect("a phrase has terms");
            let next = (0..n).filter(|&t| t != p).map(|t| self.pos[t]).min().unwrap_or(i64::MAX);
            let mut len = end - self.pos[p];
            loop {
                if !self.advance(p, bufs, offsets, &mut end)
                    || (self.repeats && !self.resolve(p, bufs, offsets, &mut end))
                {
                    // A term has no position left: the last match, if it is one.
                    if len <= slop {
                        freq += weight(len);
                    }
                    return freq;
                }
                if self.pos[p] > next {
                    if len <= slop {
                        freq += weight(len);
                    }
                    break;
                }
                len = len.min(end - self.pos[p]);
            }
        }
    }

    /// Moves term `t` to its next position; false when it has none.
    fn advance(&mut self, t: usize, bufs: &[Vec<u32>], offsets: &[u32], end: &mut i64) -> bool {
        self.at[t] += 1;
        let Some(&p) = bufs[t].get(self.at[t]) else {
            return false;
        };
        self.pos[t] = p as i64 - offsets[t] as i64;
        *end = (*end).max(self.pos[t]);
        true
    }

    /// While term `t`'s cursor shares a position with one of its peers, the one behind in phrase position
    /// (the larger offset) moves on; false when it runs out.
    fn resolve(&mut self, t: usize, bufs: &[Vec<u32>], offsets: &[u32], end: &mut i64) -> bool {
        let mut p = t;
        loop {
            let here = self.pos[p] + offsets[p] as i64;
            let Some(&u) = self.peers[p].iter().find(|&&u| self.pos[u] + offsets[u] as i64 == here) else {
                return true;
            };
            // The lesser: smaller phrase position, then smaller offset (Lucene's order).
            if (self.pos[u], offsets[u]) < (self.pos[p], offsets[p]) {
                p = u;
            }
            if !self.advance(p, bufs, offsets, end) {
                return false;
            }
        }
    }
}

impl Scorer for PhraseScorer<'_> {
    settle_driven!();
    fn score(&mut self) -> f32 {
        self.bm.score(self.freq, self.norms.get(self.doc))
    }
    fn set_threshold(&mut self, theta: f32) {
        self.theta = self.theta.max(theta);
    }
}

/// Docs `0..max` filtered by a predicate, constant score.
struct ScanScorer<'a> {
    doc: u32,
    max: u32,
    pred: Box<dyn Fn(u32) -> bool + 'a>,
}

impl ScanScorer<'_> {
    fn settle(&mut self, mut d: u32) -> u32 {
        while d < self.max && !(self.pred)(d) {
            d += 1;
        }
        self.doc = if d < self.max { d } else { NO_DOC };
        self.doc
    }
}

impl Scorer for ScanScorer<'_> {
    settle_driven!();
    fn score(&mut self) -> f32 {
        1.0
    }
}

/// Matches a sorted list of docs, each scoring 1 (the `ids` query's lookups).
struct ListScorer {
    docs: Vec<u32>,
    i: usize,
}
impl Scorer for ListScorer {
    fn doc(&self) -> u32 {
        self.docs.get(self.i).copied().unwrap_or(NO_DOC)
    }
    fn next(&mut self) -> u32 {
        self.i = (self.i + 1).min(self.docs.len());
        self.doc()
    }
    fn advance(&mut self, target: u32) -> u32 {
        self.i += self.docs[self.i.min(self.docs.len())..].partition_point(|&d| d < target);
        self.doc()
    }
    fn score(&mut self) -> f32 {
        1.0
    }
    fn upper_bound(&self) -> f32 {
        1.0
    }
}

struct EmptyScorer;
impl Scorer for EmptyScorer {
    fn doc(&self) -> u32 {
        NO_DOC
    }
    fn next(&mut self) -> u32 {
        NO_DOC
    }
    fn advance(&mut self, _: u32) -> u32 {
        NO_DOC
    }
    fn score(&mut self) -> f32 {
        0.0
    }
}

/// Constant score wrapper (filters score 0, prefix sets 1).
struct ConstScorer<'a> {
    inner: Box<dyn Scorer + 'a>,
    score: f32,
}
impl Scorer for ConstScorer<'_> {
    fn doc(&self) -> u32 {
        self.inner.doc()
    }
    fn next(&mut self) -> u32 {
        self.inner.next()
    }
    fn advance(&mut self, t: u32) -> u32 {
        self.inner.advance(t)
    }
    fn score(&mut self) -> f32 {
        self.score
    }
    fn upper_bound(&self) -> f32 {
        self.score
    }
}

/// OR: sum (or max) of the clauses on the current doc.
///
/// With a threshold (top-k without exact counts) a sum-union runs MaxScore (Turtle & Flood): clauses are kept
/// sorted by upper bound, and the longest prefix whose bounds add up to less than the threshold is
/// *non-essential* — those clauses alone cannot make a document competitive, so the union only iterates the
/// essential ones and merely advances the others to each candidate.
/// How a union combines its matching clauses' scores.
#[derive(Clone, Copy, PartialEq)]
enum Combine {
    /// Their sum (an OR).
    Sum,
    /// The best plus `tie` (0 to 1) times the others, summed in query order (a dis-max, as Lucene's
    /// `DisjunctionMaxScorer`: the others in double precision).
    Max { tie: f32 },
}

struct UnionScorer<S> {
    subs: Vec<S>,
    doc: u32,
    combine: Combine,
    /// Clauses `0..essential_from` are non-essential (MaxScore); 0 without a threshold.
    essential_from: usize,
    /// `cum[i]` = sum of the upper bounds of clauses `0..=i` (clauses sorted by bound).
    cum: Vec<f32>,
    theta: f32,
    /// `plan[i]`: the position in the query of sorted clause `i`. Scores are added in query order, so a
    /// document's score does not depend on its segment's bounds (nor on the shard count).
    plan: Vec<usize>,
    /// Per query position: the clause's score at the current document, if it matches (reused, no allocation
    /// per document).
    parts: Vec<Option<f32>>,
}

impl<S: Scorer> UnionScorer<S> {
    fn new(subs: Vec<S>, combine: Combine) -> UnionScorer<S> {
        let mut sorted: Vec<(usize, S)> = subs.into_iter().enumerate().collect();
        sorted.sort_by(|a, b| a.1.upper_bound().total_cmp(&b.1.upper_bound()));
        let (plan, subs): (Vec<usize>, Vec<_>) = sorted.into_iter().unzip();
        let mut acc = 0.0;
        let cum = subs
            .iter()
            .map(|s| {
                acc += s.upper_bound();
                acc
            })
            .collect();
        let parts = vec![None; subs.len()];
        let mut u = UnionScorer {
            subs,
            doc: 0,
            combine,
            essential_from: 0,
            cum,
            theta: f32::NEG_INFINITY,
            plan,
            parts,
        };
        u.settle();
        u
    }

    fn settle(&mut self) -> u32 {
        self.doc = self.subs[self.essential_from..].iter().map(|s| s.doc()).min().unwrap_or(NO_DOC);
        self.doc
    }
}

impl<S: Scorer> Scorer for UnionScorer<S> {
    fn doc(&self) -> u32 {
        self.doc
    }
    fn next(&mut self) -> u32 {
        let d = self.doc;
        for s in &mut self.subs[self.essential_from..] {
            if s.doc() == d {
                s.next();
            }
        }
        self.settle()
    }
    fn advance(&mut self, t: u32) -> u32 {
        for s in &mut self.subs[self.essential_from..] {
            if s.doc() < t {
                s.advance(t);
            }
        }
        self.settle()
    }
    fn score(&mut self) -> f32 {
        let d = self.doc;
        for (i, s) in self.subs.iter_mut().enumerate() {
            let on = if i < self.essential_from { s.doc() <= d && s.advance(d) == d } else { s.doc() == d };
            if on {
                self.parts[self.plan[i]] = Some(s.score());
            }
        }
        match self.combine {
            Combine::Sum => self.parts.iter_mut().filter_map(Option::take).fold(0.0f32, |acc, x| acc + x),
            Combine::Max { tie } => {
                let (mut best, mut others) = (0.0f32, 0.0f64);
                for x in self.parts.iter_mut().filter_map(Option::take) {
                    if x >= best {
                        others += best as f64;
                        best = x;
                    } else {
                        others += x as f64;
                    }
                }
                if tie == 0.0 {
                    best
                } else {
                    (best as f64 + others * tie as f64) as f32
                }
            }
        }
    }
    fn upper_bound(&self) -> f32 {
        let sum = self.cum.last().copied().unwrap_or(0.0);
        match self.combine {
            Combine::Sum => sum,
            // best + tie·others ≤ max + tie·sum, with room for the roundings (others ≤ sum − best).
            Combine::Max { tie } => {
                let max = self.subs.iter().map(|s| s.upper_bound()).fold(0.0, f32::max);
                if tie == 0.0 {
                    max
                } else {
                    max + tie * sum
                }
            }
        }
    }
    fn set_threshold(&mut self, theta: f32) {
        if self.combine != Combine::Sum || theta <= self.theta {
            return;
        }
        self.theta = theta;
        let total = self.cum.last().copied().unwrap_or(0.0);
        while self.essential_from + 1 < self.subs.len() && self.cum[self.essential_from] < theta {
            self.essential_from += 1;
        }
        // Each essential clause must contribute at least what the others cannot.
        for (i, s) in self.subs.iter_mut().enumerate().skip(self.essential_from) {
            let others = total - (self.cum[i] - if i == 0 { 0.0 } else { self.cum[i - 1] });
            s.set_threshold(theta - others);
        }
        // The current doc stays as it is (set_threshold never moves a scorer): the clauses still essential
        // were essential before, so they already stand at or after it, and next() continues from there.
    }
}

/// At least `min` of the clauses on a doc ([`Weight::AtLeast`], Elasticsearch's `minimum_should_match`
/// above 1): the smallest doc that many clauses are on, scored as the sum of those clauses in query order
/// (as a union adds). No pruning: it never skips on a threshold, so its answers are exhaustive.
struct AtLeastScorer<'a> {
    subs: Vec<Box<dyn Scorer + 'a>>,
    min: usize,
    doc: u32,
}

impl AtLeastScorer<'_> {
    /// From the clauses' current docs on, to the first doc at least `min` of them are on.
    fn settle(&mut self) -> u32 {
        loop {
            let d = self.subs.iter().map(|s| s.doc()).min().unwrap_or(NO_DOC);
            if d == NO_DOC || self.subs.iter().filter(|s| s.doc() == d).count() >= self.min {
                self.doc = d;
                return d;
            }
            for s in self.subs.iter_mut().filter(|s| s.doc() == d) {
                s.next();
            }
        }
    }
}

impl Scorer for AtLeastScorer<'_> {
    fn doc(&self) -> u32 {
        self.doc
    }
    fn next(&mut self) -> u32 {
        let d = self.doc;
        for s in self.subs.iter_mut().filter(|s| s.doc() == d) {
            s.next();
        }
        self.settle()
    }
    fn advance(&mut self, t: u32) -> u32 {
        for s in self.subs.iter_mut().filter(|s| s.doc() < t) {
            s.advance(t);
        }
        self.settle()
    }
    fn score(&mut self) -> f32 {
        let d = self.doc;
        let mut acc = 0.0f32;
        for s in self.subs.iter_mut().filter(|s| s.doc() == d) {
            acc += s.score();
        }
        acc
    }
    fn upper_bound(&self) -> f32 {
        self.subs.iter().map(|s| s.upper_bound()).sum()
    }
}

/// AND by leapfrogging, rarest-first order is the caller's job.
///
/// With a threshold it also runs block-max AND: where every clause agrees on a document, the sum of the
/// clauses' block bounds caps the score of every document up to the nearest block end, so a sum below the
/// threshold skips all of them at once.
struct ConjScorer<S> {
    subs: Vec<S>,
    doc: u32,
    theta: f32,
}

impl<S: Scorer> ConjScorer<S> {
    fn settle(&mut self, mut target: u32) -> u32 {
        loop {
            if self.theta > 0.0 {
                // Block-max AND: skip every region whose clauses' block bounds cannot add up to θ, from the
                // skip data alone, before decoding a block of it.
                loop {
                    let (mut bound, mut last) = (0.0f32, NO_DOC - 1);
                    for s in &mut self.subs {
                        let (b, l) = s.block_max_at(target);
                        bound += b;
                        last = last.min(l);
                    }
                    if bound >= self.theta {
                        break;
                    }
                    target = last.max(target).saturating_add(1);
                    if target == NO_DOC {
                        self.doc = NO_DOC;
                        return NO_DOC;
                    }
                }
            }
            let t = leapfrog(&mut self.subs, target, |s, t| s.advance(t));
            if t == NO_DOC {
                self.doc = NO_DOC;
                return NO_DOC;
            }
            if self.theta > 0.0 && t != target {
                // The common doc is in another region: check its bounds first.
                target = t;
                continue;
            }
            self.doc = t;
            return t;
        }
    }
}

impl<S: Scorer> Scorer for ConjScorer<S> {
    settle_driven!();
    fn score(&mut self) -> f32 {
        self.subs.iter_mut().map(|s| s.score()).sum()
    }
    fn upper_bound(&self) -> f32 {
        self.subs.iter().map(|s| s.upper_bound()).sum()
    }
    fn set_threshold(&mut self, theta: f32) {
        self.theta = theta;
    }
}

/// Required clauses, optional scoring clauses and exclusions. (`set_threshold` must never move a scorer:
/// the collector has already scored the current document and continues with `next`.)
struct BoolScorer<'a> {
    req: Box<dyn Scorer + 'a>,
    opt: Option<Box<dyn Scorer + 'a>>,
    excl: Option<Box<dyn Scorer + 'a>>,
    doc: u32,
}

impl BoolScorer<'_> {
    fn skip_excluded(&mut self) -> u32 {
        let mut d = self.req.doc();
        if let Some(x) = &mut self.excl {
            while d != NO_DOC && x.advance(d) == d {
                d = self.req.next();
            }
        }
        self.doc = d;
        d
    }
}

impl Scorer for BoolScorer<'_> {
    fn doc(&self) -> u32 {
        self.doc
    }
    fn next(&mut self) -> u32 {
        self.req.next();
        self.skip_excluded()
    }
    fn advance(&mut self, t: u32) -> u32 {
        self.req.advance(t);
        self.skip_excluded()
    }
    fn score(&mut self) -> f32 {
        let mut s = self.req.score();
        if let Some(o) = &mut self.opt {
            if o.advance(self.doc) == self.doc {
                s += o.score();
            }
        }
        s
    }
    fn upper_bound(&self) -> f32 {
        self.req.upper_bound() + self.opt.as_ref().map_or(0.0, |o| o.upper_bound())
    }
    fn set_threshold(&mut self, theta: f32) {
        // Optional clauses may add up to their bound; exclusions only remove documents.
        let opt = self.opt.as_ref().map_or(0.0, |o| o.upper_bound());
        self.req.set_threshold(theta - opt);
    }
}

fn term_postings<'a>(ctx: &'a Ctx<'a>, si: usize, key: &[u8]) -> Postings<'a> {
    let seg = &ctx.segs[si];
    match ctx.terms.get(key).map(|t| &t.per_seg[si]) {
        None | Some(SegTerm::Absent) => Postings::Empty,
        Some(&SegTerm::Fresh(e)) => match &seg.kind {
            SegKind::Fresh(f) => Postings::Fresh(f.postings(e, seg.visible)),
            SegKind::Image(_) => Postings::Empty,
        },
        Some(SegTerm::Blob(blob, pin)) => match cursor(blob, pin) {
            Ok(c) => Postings::Block(Box::new(c), &ctx.err),
            Err(e) => {
                ctx.err.borrow_mut().get_or_insert(e.into());
                Postings::Empty
            }
        },
    }
}

fn norms<'a>(seg: &Seg<'a>, field: u16) -> Norms<'a> {
    match &seg.kind {
        SegKind::Fresh(f) => Norms::Fresh(f.lengths(field)),
        SegKind::Image(v) => v.norms(field).map_or(Norms::None, Norms::Image),
    }
}

/// The scorer of a term weight, unboxed (`None` for any other weight).
fn term_scorer<'a>(w: &'a Weight, ctx: &'a Ctx<'a>, si: usize) -> Option<TermScorer<'a>> {
    match w {
        Weight::Term { key, field, bm, .. } => {
            Some(TermScorer::new(term_postings(ctx, si, key), norms(&ctx.segs[si], *field), bm))
        }
        _ => None,
    }
}

fn scorer<'a>(w: &'a Weight, ctx: &'a Ctx<'a>, si: usize) -> Box<dyn Scorer + 'a> {
    let seg = &ctx.segs[si];
    match w {
        Weight::Nothing => Box::new(EmptyScorer),
        Weight::All => {
            let mut s = ScanScorer { doc: 0, max: seg.visible, pred: Box::new(|_| true) };
            s.settle(0);
            Box::new(s)
        }
        Weight::Term { .. } => Box::new(term_scorer(w, ctx, si).expect("a term weight")),
        Weight::Phrase { biword: Some(b), .. } if seg.has_biwords() => scorer(b, ctx, si),
        Weight::Phrase { keys, offsets, slop, field, bm, last, .. } => {
            let mut ps: Vec<Postings<'a>> = keys.iter().map(|k| term_postings(ctx, si, k)).collect();
            if !last.is_empty() {
                ps.push(Postings::union(last.iter().map(|k| term_postings(ctx, si, k)).collect()));
            }
            let n = ps.len();
            let mut s = PhraseScorer {
                ps,
                offsets: offsets.clone(),
                sloppy: (*slop > 0).then(|| Sloppy::new(keys, last, *slop)),
                norms: norms(seg, *field),
                bm,
                doc: 0,
                freq: 0.0,
                bufs: vec![vec![]; n],
                theta: f32::NEG_INFINITY,
            };
            s.settle(0);
            Box::new(s)
        }
        Weight::TermSet { keys, zero } => {
            let subs: Vec<Box<dyn Scorer + 'a>> = keys
                .iter()
                .map(|k| {
                    Box::new(TermScorer::new(term_postings(ctx, si, k), Norms::None, zero))
                        as Box<dyn Scorer + 'a>
                })
                .filter(|s| s.doc() != NO_DOC)
                .collect();
            Box::new(ConstScorer {
                inner: Box::new(UnionScorer::new(subs, Combine::Max { tie: 0.0 })),
                score: 1.0,
            })
        }
        Weight::Exists { field } => {
            let field = *field;
            let pred: Box<dyn Fn(u32) -> bool + 'a> = match &seg.kind {
                SegKind::Fresh(f) => {
                    Box::new(move |d| f.field_len(field, d) > 0 || f.numeric(field, d).is_some())
                }
                SegKind::Image(v) => {
                    let (n, x) = (v.norms(field), v.numbers(field));
                    Box::new(move |d| {
                        n.is_some_and(|c| norm_at(c, d) > 0) || x.is_some_and(|c| number_at(c, d).is_some())
                    })
                }
            };
            let mut s = ScanScorer { doc: 0, max: seg.visible, pred };
            s.settle(0);
            Box::new(s)
        }
        Weight::Ids(ids) => {
            // Each id looked up in the segment's id table (an image keeps every version of an `_id` it
            // holds, the fresh segment its newest; deleted ones are skipped as for any query).
            let mut docs: Vec<u32> = match &seg.kind {
                SegKind::Fresh(f) => ids.iter().filter_map(|id| f.lookup_id(id)).collect(),
                SegKind::Image(v) => ids.iter().flat_map(|id| v.docs_with_id(id)).collect(),
            };
            docs.retain(|&d| d < seg.visible);
            docs.sort_unstable();
            docs.dedup();
            Box::new(ListScorer { docs, i: 0 })
        }
        Weight::Range { field, lower, upper } => {
            let (field, lower, upper) = (*field, *lower, *upper);
            let inside = move |x: f64| {
                (match lower {
                    Bound::Included(l) => x >= l,
                    Bound::Excluded(l) => x > l,
                    Bound::Unbounded => true,
                }) && (match upper {
                    Bound::Included(u) => x <= u,
                    Bound::Excluded(u) => x < u,
                    Bound::Unbounded => true,
                })
            };
            let pred: Box<dyn Fn(u32) -> bool + 'a> = match &seg.kind {
                SegKind::Fresh(f) => Box::new(move |d| f.numeric(field, d).is_some_and(inside)),
                SegKind::Image(v) => match v.numbers(field) {
                    Some(c) => Box::new(move |d| number_at(c, d).is_some_and(inside)),
                    None => return Box::new(EmptyScorer),
                },
            };
            let mut s = ScanScorer { doc: 0, max: seg.visible, pred };
            s.settle(0);
            Box::new(s)
        }
        Weight::Scaled(w, boost) => Box::new(ConstScorer { inner: scorer(w, ctx, si), score: *boost }),
        Weight::AtLeast { min, of } => {
            let mut s =
                AtLeastScorer { subs: of.iter().map(|w| scorer(w, ctx, si)).collect(), min: *min, doc: 0 };
            s.settle();
            Box::new(s)
        }
        Weight::DisMax(ws, tie) => {
            let subs = ws.iter().map(|w| scorer(w, ctx, si)).collect();
            Box::new(UnionScorer::new(subs, Combine::Max { tie: *tie }))
        }
        Weight::Bool { must, should, must_not, filter } => {
            // Only terms, all required or all optional (AND and OR of words): clauses of one concrete type.
            if filter.is_empty() && must_not.is_empty() && (must.is_empty() != should.is_empty()) {
                let terms: Option<Vec<TermScorer<'a>>> = if must.is_empty() { should } else { must }
                    .iter()
                    .map(|w| term_scorer(w, ctx, si))
                    .collect();
                match terms {
                    Some(t) if t.len() > 1 && should.is_empty() => {
                        let mut c = ConjScorer { subs: t, doc: 0, theta: f32::NEG_INFINITY };
                        c.settle(0);
                        return Box::new(c);
                    }
                    Some(t) if t.len() > 1 => return Box::new(UnionScorer::new(t, Combine::Sum)),
                    _ => {}
                }
            }
            let mut req: Vec<Box<dyn Scorer + 'a>> = must.iter().map(|w| scorer(w, ctx, si)).collect();
            req.extend(
                filter.iter().map(|w| {
                    Box::new(ConstScorer { inner: scorer(w, ctx, si), score: 0.0 }) as Box<dyn Scorer>
                }),
            );
            let union = |ws: &'a [Weight]| -> Option<Box<dyn Scorer + 'a>> {
                if ws.is_empty() {
                    return None;
                }
                Some(Box::new(UnionScorer::new(
                    ws.iter().map(|w| scorer(w, ctx, si)).collect(),
                    Combine::Sum,
                )))
            };
            let opt = union(should);
            let excl = union(must_not);
            let (req, opt): (Box<dyn Scorer + 'a>, _) = if req.is_empty() {
                match opt {
                    Some(o) => (o, None),
                    None => {
                        // Only exclusions: everything else matches (score 0, as Elasticsearch).
                        let mut s = ScanScorer { doc: 0, max: seg.visible, pred: Box::new(|_| true) };
                        s.settle(0);
                        (Box::new(ConstScorer { inner: Box::new(s), score: 0.0 }), None)
                    }
                }
            } else if req.len() == 1 {
                (req.pop().unwrap(), opt)
            } else {
                let mut c = ConjScorer { subs: req, doc: 0, theta: f32::NEG_INFINITY };
                c.settle(0);
                (Box::new(c), opt)
            };
            if opt.is_none() && excl.is_none() {
                return req;
            }
            let mut b = BoolScorer { req, opt, excl, doc: 0 };
            b.skip_excluded();
            Box::new(b)
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Collection

#[derive(PartialEq, Clone, Copy)]
struct Entry(f32, u32);
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// "Better" is greater: higher score, then newer doc. The heap keeps the worst on top via Reverse.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// The best `cap` documents in the query's order, and the count of matches seen.
struct Collector {
    sort: Sort,
    cap: usize,
    total: u64,
    exact: bool,
    /// Score order: a min-heap of the best, the worst on top.
    heap: BinaryHeap<Reverse<Entry>>,
    /// Newest first: doc ids, descending.
    newest: Vec<u32>,
    /// Field order: a max-heap of the best (smallest) entries, the worst on top.
    by_field: BinaryHeap<FieldEntry>,
    /// The fast paths' buffers, from the thread's pool and back to it when the query is done. Boxed, so
    /// that lending them to a fast path ([`with_scratch`]) moves a pointer, not the whole set; `None` only
    /// while lent.
    scratch: Option<Box<Scratch>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(s) = self.scratch.take() {
            s.give_back();
        }
    }
}

impl Collector {
    fn new(sort: Sort, cap: usize) -> Collector {
        Collector {
            sort,
            cap,
            total: 0,
            exact: true,
            // Sized once (grown only past this), rather than doubling from empty on every query.
            heap: BinaryHeap::with_capacity(if sort == Sort::Score { cap.min(1024) } else { 0 }),
            newest: vec![],
            by_field: BinaryHeap::new(),
            scratch: Some(Scratch::take()),
        }
    }

    /// Score order: the score a document must reach to enter (−∞ until `cap` documents are in).
    fn theta(&self) -> f32 {
        match self.heap.peek() {
            Some(t) if self.cap > 0 && self.heap.len() >= self.cap => t.0 .0,
            _ => f32::NEG_INFINITY,
        }
    }

    #[inline]
    fn push_score(&mut self, e: Entry) {
        if self.heap.len() < self.cap {
            self.heap.push(Reverse(e));
        } else if let Some(mut worst) = self.heap.peek_mut() {
            // Replaced in place: one sift down instead of a pop and a push.
            if e > worst.0 {
                *worst = Reverse(e);
            }
        }
    }

    fn push_field(&mut self, e: FieldEntry) {
        if self.by_field.len() < self.cap {
            self.by_field.push(e);
        } else if self.by_field.peek().is_some_and(|worst| e < *worst) {
            self.by_field.pop();
            self.by_field.push(e);
        }
    }

    /// Keeps only the best `cap`.
    fn shrink(&mut self, cap: usize) {
        self.cap = cap;
        while self.heap.len() > cap {
            self.heap.pop();
        }
        while self.by_field.len() > cap {
            self.by_field.pop();
        }
        self.newest.truncate(cap);
    }

    /// The collected documents, best first.
    fn ranked(&self) -> Vec<ScoredDoc> {
        match self.sort {
            Sort::Score => {
                let mut v: Vec<Entry> = self.heap.iter().map(|r| r.0).collect();
                v.sort_by(|a, b| b.cmp(a));
                v.into_iter().map(|e| ScoredDoc { doc: e.1, score: e.0, sort_value: None }).collect()
            }
            Sort::Newest => {
                self.newest.iter().map(|&doc| ScoredDoc { doc, score: 0.0, sort_value: None }).collect()
            }
            Sort::Field { .. } => {
                let mut v: Vec<FieldEntry> = self.by_field.iter().copied().collect();
                v.sort();
                v.into_iter().map(|e| ScoredDoc { doc: e.doc, score: 0.0, sort_value: e.value }).collect()
            }
        }
    }

    fn finish(self, offset: usize) -> SearchHits {
        let hits = self.ranked().into_iter().skip(offset).collect();
        SearchHits { total: self.total, total_exact: self.exact, hits }
    }
}

/// Runs `f` with the collector's scratch (taken out of it, so both can be borrowed, and put back after).
fn with_scratch<R>(col: &mut Collector, f: impl FnOnce(&mut Collector, &mut Scratch) -> R) -> R {
    let mut s = col.scratch.take().unwrap_or_default();
    let r = f(col, &mut s);
    col.scratch = Some(s);
    r
}

/// A fast path over the posting lists of a boolean of terms on one image segment.
type ListsPath = fn(&Ctx<'_>, usize, &mut TermLists<'_>, &mut Collector, &mut Scratch, bool) -> Result<()>;

/// Opens the lists of `terms` in `s` (see [`TermLists::open`] for `drop_empty`), runs `path` over them, and
/// gives the buffers back whatever it returns.
fn on_term_lists(
    ctx: &Ctx<'_>,
    si: usize,
    (terms, drop_empty): (&[Weight], bool),
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
    path: ListsPath,
) -> Result<()> {
    let Some(mut lists) = TermLists::open(ctx, si, terms, drop_empty, s)? else {
        return Ok(());
    };
    let r = path(ctx, si, &mut lists, col, s, prune);
    lists.recycle(s);
    r
}

/// Evaluates segment `si` into `col`.
fn eval_segment(
    ctx: &Ctx<'_>,
    w: &Weight,
    si: usize,
    col: &mut Collector,
    opts: &SearchOptions,
) -> Result<()> {
    let seg = &ctx.segs[si];
    if seg.visible == 0 {
        return Ok(());
    }
    let w = w.on(seg);
    if opts.sort == Sort::Newest && !opts.track_total && matches!(seg.kind, SegKind::Image(_)) {
        return newest_backwards(ctx, w, si, col);
    }
    // Top-k without exact counts: scorers may skip what cannot beat the k-th best score so far (a doc with an
    // equal score still can: ties go to the newer doc, whatever order the documents are offered in).
    let prune = opts.sort == Sort::Score && !opts.track_total && col.cap > 0;
    if let (SegKind::Fresh(f), Sort::Score) = (&seg.kind, opts.sort) {
        if col.cap > 0 {
            match w {
                Weight::Term { key, field, bm, .. } => {
                    fresh_term_top_k(ctx, si, f, key, *field, bm, col, prune);
                    return Ok(());
                }
                Weight::Bool { must, should, must_not, filter }
                    if (2..=FRESH_MAX_TERMS).contains(&must.len())
                        && should.is_empty()
                        && must_not.is_empty()
                        && filter.is_empty()
                        && must.iter().all(|w| matches!(w, Weight::Term { .. })) =>
                {
                    with_scratch(col, |col, s| fresh_conj_top_k(ctx, si, f, must, col, s, prune));
                    return Ok(());
                }
                Weight::Phrase { keys, offsets, slop: 0, field, bm, last, .. }
                    if (2..=FRESH_MAX_TERMS).contains(&keys.len()) && last.is_empty() =>
                {
                    with_scratch(col, |col, s| {
                        fresh_phrase_top_k(ctx, si, f, (keys, offsets, *field), bm, col, s, prune)
                    });
                    return Ok(());
                }
                Weight::Bool { must, should, must_not, filter }
                    if must.is_empty()
                        && (2..=FRESH_MAX_TERMS).contains(&should.len())
                        && must_not.is_empty()
                        && filter.is_empty()
                        && should.iter().all(|w| matches!(w, Weight::Term { .. })) =>
                {
                    with_scratch(col, |col, s| fresh_disj_top_k(ctx, si, f, should, col, s, prune));
                    return Ok(());
                }
                _ => {}
            }
        }
    }
    if let (SegKind::Image(_), Weight::Bool { must, should, must_not, filter }) = (&seg.kind, w) {
        if col.cap == 0
            && must.len() > 1
            && should.is_empty()
            && must_not.is_empty()
            && filter.is_empty()
            && must.iter().all(|w| matches!(w, Weight::Term { .. }))
        {
            return with_scratch(col, |col, s| {
                on_term_lists(ctx, si, (must, false), col, s, false, conj_count)
            });
        }
    }
    if let (SegKind::Image(_), Sort::Score) = (&seg.kind, opts.sort) {
        if col.cap > 0 {
            match w {
                Weight::Term { key, field, bm, .. } => {
                    return term_top_k(ctx, si, key, *field, bm, col, prune)
                }
                Weight::Phrase { keys, offsets, slop: 0, field, bm, last, .. } if last.is_empty() => {
                    return with_scratch(col, |col, s| {
                        phrase_top_k(ctx, si, keys, offsets, *field, bm, col, s, prune)
                    })
                }
                Weight::Bool { must, should, must_not, filter }
                    if must.len() > 1
                        && should.is_empty()
                        && must_not.is_empty()
                        && filter.is_empty()
                        && must.iter().all(|w| matches!(w, Weight::Term { .. })) =>
                {
                    return with_scratch(col, |col, s| {
                        on_term_lists(ctx, si, (must, false), col, s, prune, conj_top_k)
                    });
                }
                Weight::Bool { must, should, must_not, filter }
                    if must.is_empty()
                        && (2..=OR_MAX_TERMS).contains(&should.len())
                        && must_not.is_empty()
                        && filter.is_empty()
                        && should.iter().all(|w| matches!(w, Weight::Term { .. })) =>
                {
                    let path: ListsPath = if prune && opts.disjunction == Disjunction::BlockMaxWand {
                        disj_bmw
                    } else {
                        disj_top_k
                    };
                    return with_scratch(col, |col, s| {
                        on_term_lists(ctx, si, (should, true), col, s, prune, path)
                    });
                }
                _ => {}
            }
        }
    }
    let mut s = scorer(w, ctx, si);
    let mut theta = f32::NEG_INFINITY;
    if prune && col.heap.len() >= col.cap {
        theta = col.theta();
        if s.upper_bound() < theta {
            col.exact = false;
            return Ok(());
        }
        // With a threshold the scorers may skip matches without counting them.
        s.set_threshold(theta);
        col.exact = false;
    }
    let del = seg.deletes;
    let base = seg.desc.base_doc;
    let column = match (opts.sort, &seg.kind) {
        (Sort::Field { field, .. }, SegKind::Image(v)) => v.numbers(field),
        _ => None,
    };
    // Newest first: the last documents of this segment that still fit.
    let room = col.cap.saturating_sub(col.newest.len());
    let mut seg_hits: std::collections::VecDeque<u32> = Default::default();
    let mut d = s.doc();
    while d != NO_DOC && d < seg.visible {
        if !del.is_deleted(d) {
            col.total += 1;
            match opts.sort {
                Sort::Score if col.cap > 0 => {
                    col.push_score(Entry(s.score(), base + d));
                    if prune && col.heap.len() >= col.cap {
                        let t = col.theta();
                        if t > theta {
                            theta = t;
                            s.set_threshold(theta);
                            col.exact = false;
                        }
                    }
                }
                Sort::Newest if room > 0 => {
                    seg_hits.push_back(base + d);
                    if seg_hits.len() > room {
                        seg_hits.pop_front();
                    }
                }
                Sort::Field { field, descending } if col.cap > 0 => {
                    let value = match &seg.kind {
                        SegKind::Fresh(f) => f.numeric(field, d),
                        SegKind::Image(_) => column.and_then(|c| number_at(c, d)),
                    };
                    col.push_field(field_entry(value, descending, base + d));
                }
                _ => {}
            }
        }
        d = s.next();
    }
    if let Some(e) = ctx.err.borrow_mut().take() {
        return Err(Error::Format(format!("segment {}: {}", seg.desc.id, e.0)));
    }
    col.newest.extend(seg_hits.into_iter().rev());
    Ok(())
}

/// The cursor over a term's postings in an image segment (`None`: the term is not there), with the list's
/// DRAM part when the selective cache pins it.
fn image_list<'a>(
    ctx: &'a Ctx<'a>,
    si: usize,
    key: &[u8],
) -> Result<Option<(PostingsCursor<'a>, Option<&'a PinnedList>)>> {
    let seg = &ctx.segs[si];
    debug_assert!(matches!(seg.kind, SegKind::Image(_)), "image segments only");
    match ctx.terms.get(key).map(|t| &t.per_seg[si]) {
        Some(SegTerm::Blob(blob, pin)) => {
            cursor(blob, pin).map(|c| Some((c, pin.as_deref()))).map_err(codec_failure(seg))
        }
        None | Some(SegTerm::Absent | SegTerm::Fresh(_)) => Ok(None),
    }
}

/// A cursor over `blob`, reading its pinned head from DRAM when there is one.
fn cursor<'a>(
    blob: &'a [u8],
    pin: &'a Option<Arc<PinnedList>>,
) -> std::result::Result<PostingsCursor<'a>, crate::codec::CodecError> {
    PostingsCursor::with_pinned(blob, pinned_head(pin))
}

/// The DRAM copy of a list's head, if the selective cache pinned one (`&[]`: none).
fn pinned_head(pin: &Option<Arc<PinnedList>>) -> &[u8] {
    pin.as_ref().map_or(&[], |p| &p.head)
}

/// Turns a codec error met while reading segment `seg` into the query's error.
fn codec_failure<'s>(seg: &'s Seg<'_>) -> impl Fn(crate::codec::CodecError) -> Error + Copy + 's {
    move |e| Error::Format(format!("segment {}: {}", seg.desc.id, SegmentError::from(e).0))
}

/// Top-k of a single term on an image, a block at a time (the single-term loop of block-max WAND, as in
/// Tantivy and Lucene's impacts): with a threshold, a block whose impact bound is below it is skipped
/// without being decoded; a competitive block is decoded whole (docs and frequencies, SIMD) and scored in a
/// tight loop with the norms table. Same documents, scores, ties and counting as the generic scorer path.
fn term_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    key: &[u8],
    field: u16,
    bm: &Bm25Doc,
    col: &mut Collector,
    prune: bool,
) -> Result<()> {
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let Some((mut c, pin)) = image_list(ctx, si, key)? else {
        return Ok(());
    };
    // A pinned list's block bounds are in its table (a multiplication per block).
    let table = if prune { block_table(&c, pin, bm) } else { None };
    let norms = norms(seg, field);
    let (del, base, visible) = (seg.deletes, seg.desc.base_doc, seg.visible);
    let any_deleted = del.count() > 0;
    let mut theta = f32::NEG_INFINITY;
    let mut scores = [0f32; BLOCK_LEN];
    // Scores block `b` (its documents below the reader's snapshot) and offers those at or above θ.
    let mut offer =
        |c: &mut PostingsCursor<'_>, b: u32, col: &mut Collector, theta: &mut f32| -> Result<()> {
            c.seek_block(b).map_err(fail)?;
            let (docs, tfs) = c.block_postings().map_err(fail)?;
            let m = docs.partition_point(|&d| d < visible);
            bm.score_batch(&norms, &docs[..m], &tfs[..m], &mut scores);
            let mut counted = m as u64;
            // Newest first, as the blocks go: a document tying the k-th best at θ then meets only newer ones
            // in the top-k from this segment and stays out, where in doc order each such tie replaced the
            // worst (a sift of the heap; LowTerm's top-k is full of ties).
            for (&d, &score) in docs[..m].iter().zip(&scores[..m]).rev() {
                if any_deleted && del.is_deleted(d) {
                    counted -= 1;
                    continue;
                }
                // Below the k-th best nothing enters (equal may: the newer doc wins the tie).
                if score >= *theta {
                    col.push_score(Entry(score, base + d));
                    if prune && col.heap.len() >= col.cap {
                        *theta = col.theta();
                    }
                }
            }
            col.total += counted;
            Ok(())
        };
    // Warm start, as `conj_top_k`'s: with pruning and a top-k not yet full, the blocks of the highest bounds
    // — as many as the top-k has places (at most TERM_WARM_BLOCKS): each holds about one of the best — are
    // evaluated first, so θ starts near where it ends and the pass in doc order skips far more blocks. The
    // collector orders (score, doc) totally, so the order of offers never changes the top-k; the pass skips
    // these blocks, so nothing is offered or counted twice.
    let mut warm = [u32::MAX; TERM_WARM_BLOCKS];
    let n_warm = col.cap.saturating_sub(col.heap.len()).min(TERM_WARM_BLOCKS);
    if prune && n_warm > 0 && c.block_count() as usize >= 2 * n_warm {
        let best = &mut [(f32::NEG_INFINITY, u32::MAX); TERM_WARM_BLOCKS][..n_warm];
        for b in 0..c.block_count() {
            let x = match &table {
                Some(t) => bm.bound_from_table(t.values[b as usize]),
                None => c.bound_of_block(b, |imp| bm.impacts_bound(imp)).unwrap_or(f32::INFINITY),
            };
            keep_best(best, x, b);
        }
        for (w, &(_, b)) in warm.iter_mut().zip(best.iter()) {
            *w = b;
        }
        for &b in warm.iter().filter(|&&b| b != u32::MAX) {
            offer(&mut c, b, col, &mut theta)?;
        }
    }
    // In doc order (unused places last), so the newest-first pass meets them from the end, one comparison
    // per block.
    warm.sort_unstable();
    let mut warm_left = warm.iter().take_while(|&&b| b != u32::MAX).count();
    // Newest block first: a document scoring exactly θ enters only if it is newer than the k-th best (the
    // newer doc wins a tie), so once the top-k is full of documents newer than every block still to come, a
    // block whose best score is θ itself cannot contribute either. Common terms tie a lot at the top (BM25
    // saturates and lengths are quantized): `the` in the enwiki index has 338 of its 1,932 blocks at θ,
    // which the pass in doc order had to decode.
    for b in (0..c.block_count()).rev() {
        if warm_left > 0 && warm[warm_left - 1] == b {
            warm_left -= 1;
            continue;
        }
        if prune && col.heap.len() >= col.cap {
            theta = col.theta();
            col.exact = false;
            // Skip the block unless its bound reaches θ: from the table, or unless one of its impacts can
            // (conservatively: less a margin).
            let skip = match &table {
                Some(t) => bm.bound_from_table(t.values[b as usize]) < theta,
                None => {
                    let need = theta - theta.abs() * FILTER_SLACK;
                    c.any_impact(b, |tf, dl| bm.may_reach(tf as f32, dl, need)) == Some(false)
                }
            };
            if skip {
                continue;
            }
            // Only ties at θ may be left: passed over when every document of the block is older than the
            // k-th best, by the block's exact bound (the impacts scored bit for bit as its postings are).
            let worst = col.heap.peek().map_or(0, |w| w.0 .1);
            if (base as u64 + c.last_doc_of(b) as u64) < worst as u64
                && c.bound_of_block(b, |imp| bm.impacts_bound(imp)).is_some_and(|x| x <= theta)
            {
                continue;
            }
        }
        // A block past the reader's snapshot offers only the documents below it (blocks run newest first).
        offer(&mut c, b, col, &mut theta)?;
    }
    Ok(())
}

/// Top-k of a single term on the fresh segment, whose postings (written while read, no skip data) are read
/// in place a region at a time — a chunk of 128 postings of a large block, else a whole block — newest
/// region first, as `term_top_k` walks an image's blocks. Each posting's length comes from the segment's
/// length column; once the top-k is full a posting is scored only if the division-free bound says it may
/// reach θ ([`keep_competitive`], branch-free), and with `prune` a region whose impacts (a sealed block's,
/// exact) cannot reach θ is passed over, as is one whose bound is θ itself when all its documents are older
/// than the k-th best (a tie at θ goes to the newer document; frequent terms tie a lot). A warm start
/// evaluates the regions of the best bounds first. Same documents, scores and ties as the generic scorer
/// path; counts are exact unless a region was passed over. On one fresh segment of 50,000 enwiki documents
/// (`spirit-bench loop --fresh-docs`), against the walk in doc order posting by posting it replaced:
/// HighTerm 38 -> 10 µs, MedTerm 10 -> 5 µs, LowTerm 3.0 -> 2.6 µs (geometric means; the same documents as one
/// image: 6.8, 5.2 and 2.8 µs).
#[allow(clippy::too_many_arguments)]
fn fresh_term_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    f: &FreshSegment,
    key: &[u8],
    field: u16,
    bm: &Bm25Doc,
    col: &mut Collector,
    prune: bool,
) {
    let seg = &ctx.segs[si];
    let Some(&SegTerm::Fresh(e)) = ctx.terms.get(key).map(|t| &t.per_seg[si]) else { return };
    if fresh_cannot_compete(col, prune, bm.idf) {
        return;
    }
    let norms = norms(seg, field);
    let (del, base) = (seg.deletes, seg.desc.base_doc);
    let any_deleted = del.count() > 0;
    let p = f.postings(e, seg.visible);
    // The regions in list order, each with its bound (∞ without impacts, or without pruning).
    let mut regions = col.scratch.as_mut().map(|s| std::mem::take(&mut s.fresh_regions)).unwrap_or_default();
    regions.clear();
    p.for_each_region(|b, k, imp| {
        let bound = match imp {
            Some(imp) if prune => bm.packed_bound(imp),
            _ => f32::INFINITY,
        };
        regions.push(FreshRegion { block: b, chunk: k, bound, done: false });
    });
    let (mut docs, mut tfs) = ([0u32; MAX_REGION], [0u32; MAX_REGION]);
    let (mut kd, mut kt) = ([0u32; BLOCK_LEN], [0u32; BLOCK_LEN]);
    let mut theta = f32::NEG_INFINITY;
    // Scores region `r`'s postings (below the reader's snapshot, not deleted) and offers those at or above θ.
    let mut offer = |r: &FreshRegion, col: &mut Collector, theta: &mut f32| {
        let mut n = p.region_postings(r.block, r.chunk, &mut docs, &mut tfs);
        if any_deleted {
            let mut kept = 0;
            for i in 0..n {
                if !del.is_deleted(docs[i]) {
                    (docs[kept], tfs[kept]) = (docs[i], tfs[i]);
                    kept += 1;
                }
            }
            n = kept;
        }
        col.total += n as u64;
        // Newest first, as the regions go (see `term_top_k`: ties at θ then stay out instead of replacing).
        for (cd, ct) in docs[..n].chunks(BLOCK_LEN).zip(tfs[..n].chunks(BLOCK_LEN)).rev() {
            if prune && *theta == f32::NEG_INFINITY && col.heap.len() >= col.cap {
                *theta = col.theta();
            }
            // Without θ every posting may enter; with it, only those whose own score may reach it.
            let (bd, bt, k) = if *theta == f32::NEG_INFINITY {
                (cd, ct, cd.len())
            } else {
                let k = keep_competitive((bm, &norms), (cd, ct), (*theta, 0.0), (&mut kd, &mut kt));
                (&kd[..], &kt[..], k)
            };
            for (&d, &tf) in bd[..k].iter().zip(&bt[..k]).rev() {
                let score = bm.score(tf as f32, norms.get(d));
                // Below the k-th best nothing enters (equal may: the newer doc wins the tie).
                if score >= *theta {
                    col.push_score(Entry(score, base + d));
                    if prune && col.heap.len() >= col.cap {
                        *theta = col.theta();
                    }
                }
            }
        }
    };
    // Warm start, as `term_top_k`'s: with pruning and a top-k not yet full, the regions of the highest
    // bounds — as many as the top-k has places — first, so θ starts near where it ends.
    let n_warm = if prune { col.cap.saturating_sub(col.heap.len()).min(TERM_WARM_BLOCKS) } else { 0 };
    if n_warm > 0 && regions.iter().filter(|r| r.bound.is_finite()).count() >= 2 * n_warm {
        let mut best = [(f32::NEG_INFINITY, usize::MAX); TERM_WARM_BLOCKS];
        let best = &mut best[..n_warm];
        for (i, r) in regions.iter().enumerate() {
            if r.bound.is_finite() {
                keep_best(best, r.bound, i);
            }
        }
        for &(_, i) in best.iter().filter(|b| b.1 != usize::MAX) {
            regions[i].done = true;
            offer(&regions[i], col, &mut theta);
        }
    }
    for r in regions.iter().rev().filter(|r| !r.done) {
        if prune && col.heap.len() >= col.cap {
            theta = col.theta();
            // Below θ, less a margin for rounding (a computed score is not exactly monotone in tf when tf
            // is in the thousands), as `term_top_k` tests an image block.
            if r.bound < theta - theta.abs() * FILTER_SLACK {
                col.exact = false;
                continue;
            }
            // Only ties at θ may be left: passed over when every document of the region is older than the
            // k-th best (impacts score bit for bit as their postings do).
            let worst = col.heap.peek().map_or(0, |w| w.0 .1);
            if r.bound <= theta && (base as u64 + p.region_last_doc(r.block, r.chunk) as u64) < worst as u64 {
                col.exact = false;
                continue;
            }
        }
        offer(r, col, &mut theta);
    }
    if let Some(s) = col.scratch.as_mut() {
        s.fresh_regions = regions;
    }
}

/// Keeps in `best` (sorted by bound, highest first; at most its length) the items of the highest bounds seen:
/// `item` goes in if its bound `x` beats the last one kept — an insertion into a short sorted list. The warm
/// starts pick their blocks and regions so.
fn keep_best<T: Copy>(best: &mut [(f32, T)], x: f32, item: T) {
    let Some(last) = best.len().checked_sub(1) else { return };
    if x > best[last].0 {
        let mut i = last;
        while i > 0 && best[i - 1].0 < x {
            best[i] = best[i - 1];
            i -= 1;
        }
        best[i] = (x, item);
    }
}

/// A region of a fresh term's postings for [`fresh_term_top_k`]: (block, chunk) as
/// [`FreshPostings::for_each_region`] names it, its score bound, and whether the warm start evaluated it.
#[derive(Clone, Copy)]
pub(super) struct FreshRegion {
    block: usize,
    chunk: usize,
    bound: f32,
    done: bool,
}

/// Most terms [`fresh_conj_top_k`] takes (more go through the scorer tree).
const FRESH_MAX_TERMS: usize = 8;

/// AND of terms on the fresh segment, batch by batch as [`conj_top_k`] goes on images: up to a block's
/// worth of the lead's postings (the rarest list in this segment leads) are copied out of the segment,
/// filtered, looked up in the other lists (rarest first, [`FreshPostings::probe`]: galloping forward from
/// each list's cursor), and the matches scored term by term in query order — the order `ConjScorer` and
/// [`conj_top_k`] add in, so a doc scores the same on every path.
///
/// With `prune` it is block-max: a window is the lead's chunk of 128 postings in a sealed block that has
/// chunks, else the lead's posting block, and each other term is bounded over it by the largest impacts
/// bound of its chunks or blocks there (`idf` where a block carries no impacts). Once the top-k is full, a
/// window whose bounds cannot reach θ together is passed over whole, and a lead doc whose own score plus
/// the others' bounds cannot reach it is dropped before any other list moves ([`keep_competitive`]:
/// branch-free, where testing doc by doc mispredicted). Otherwise every match is counted, exactly.
fn fresh_conj_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    f: &FreshSegment,
    must: &[Weight],
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) {
    let seg = &ctx.segs[si];
    let n = must.len();
    let (window, tf_rows) = (&mut s.window, &mut s.tf_rows);
    let marks = s.tf_marks.get_or_insert_with(|| Box::new([0; MARKS_SPAN as usize]));
    let (mut curs, scoring, dfs) = fresh_terms(ctx, si, f, must);
    let (curs, scoring) = (&mut curs[..n], &scoring[..n]);
    if curs.iter().any(Option::is_none) {
        // A term this segment lacks: no document here matches.
        return;
    }
    if fresh_cannot_compete(col, prune, scoring.iter().flatten().map(|(bm, _)| bm.idf).sum()) {
        return;
    }
    // Every term is present here (checked above).
    fn present<'c, 'a>(c: &'c mut Option<FreshPostings<'a>>) -> &'c mut FreshPostings<'a> {
        c.as_mut().expect("every term is present")
    }
    // Terms by document frequency here: the rarest leads, the others are probed in that order.
    let mut order: [usize; FRESH_MAX_TERMS] = std::array::from_fn(|t| t);
    order[..n].sort_by_key(|&t| dfs[t]);
    let lead = order[0];
    let (lbm, lnorms) = scoring[lead].expect("every term is present");
    let (del, base) = (seg.deletes, seg.desc.base_doc);
    let any_deleted = del.count() > 0;
    // A batch (fixed-size rows of the scratch, as `conj_top_k`'s): the candidates and their scores, per term
    // their frequencies, and the lead's postings taken.
    let win = &mut **window.get_or_insert_with(Box::default);
    let (cands, scores) = (&mut win.docs, &mut win.scores);
    let (tfs, taken) = block_rows(tf_rows, n + 2).split_at_mut(n);
    let [taken, taken_tfs] = taken else { unreachable!("two rows") };
    // Block-max state (with `prune`): where the current window ends (exclusive; `None` before the first),
    // the sum of every term's bound over it and the others' (added in query order).
    let (mut window, mut all, mut rest) = (None, f32::INFINITY, 0.0f32);
    loop {
        let d = present(&mut curs[lead]).doc();
        if d == NO_DOC {
            return;
        }
        let full = prune && col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        if prune && window.is_none_or(|end| d >= end) {
            let lc = present(&mut curs[lead]);
            let (lead_bound, end) = match lc.chunk_window() {
                Some((imp, end)) => (lbm.packed_bound(&imp), end),
                None => (lc.sealed_impacts().map_or(lbm.idf, |imp| lbm.packed_bound(&imp)), lc.block_end()),
            };
            window = Some(end);
            // The lead's window bound with the others' idfs (no score reaches its idf), as `conj_top_k`'s
            // coarse test: when even that cannot reach θ — a stretch of the rarer term's low frequencies
            // against common terms, under the θ of the images before — the window is passed over without
            // walking the others' chunk bounds, which were most of such a query's time on the fresh segment
            // (`+the +as`: 23% in `max_block_bound`). Inflated by BOUND_SLACK: the idfs are not the bounds
            // the scores are added against.
            let idf_bound = |t: usize| scoring[t].expect("every term is present").0.idf;
            let coarse: f32 = (0..n).map(|t| if t == lead { lead_bound } else { idf_bound(t) }).sum();
            if full && coarse * BOUND_SLACK < theta {
                (all, rest) = (coarse * BOUND_SLACK, coarse * BOUND_SLACK - lead_bound);
            } else {
                (all, rest) = (0.0, 0.0);
                for t in 0..n {
                    let x = if t == lead {
                        lead_bound
                    } else {
                        let (bm, _) = scoring[t].expect("every term is present");
                        let c = curs[t].as_ref().expect("every term is present");
                        c.max_block_bound(d, end, |imp| bm.packed_bound(imp), bm.idf)
                    };
                    all += x;
                    if t != lead {
                        rest += x;
                    }
                }
            }
        }
        let end = window.unwrap_or(NO_DOC);
        if full && all < theta {
            // No doc of the window can reach θ: the rest of it is passed over.
            col.exact = false;
            let lc = present(&mut curs[lead]);
            if end == NO_DOC {
                lc.skip_block();
            } else {
                lc.advance(end);
            }
            continue;
        }
        let got = present(&mut curs[lead]).take_below(end, taken, taken_tfs);
        debug_assert!(got > 0, "the lead's doc is below the window's end");
        // Score first: a lead doc that cannot reach θ with the others' bounds moves no other list.
        let filter = full.then_some(((lbm, &lnorms), theta, rest));
        let (m, exhausted) = fresh_batch_matches(
            (&taken[..got], &taken_tfs[..got], filter),
            (curs, &order[..n], marks),
            (cands, tfs),
            (del, any_deleted),
            col,
        );
        col.total += m as u64;
        if m > 0 {
            let terms = scoring.iter().map(|sc| sc.expect("every term is present"));
            collect_batch(col, terms, (&cands[..m], &tfs[..]), &mut scores[..m], theta, base);
        }
        if exhausted {
            // Another list has nothing after its last candidate: no match from here on.
            return;
        }
    }
}

/// Phrase on the fresh segment, a batch of the rarest term's postings at a time as [`fresh_conj_top_k`]
/// goes, where the scorer tree leapfrogged the lists doc by doc: the batch is copied out of the segment
/// ([`FreshPostings::take_below`]), and with `prune` and a full top-k its docs whose score at the lead's own
/// frequency (a phrase occurs at most as often as any of its terms) cannot reach θ are dropped before any
/// other list moves ([`keep_competitive`]); the rest are looked up in the other lists, rarest first
/// ([`FreshPostings::probe`]: marks where the lists are dense), a doc is dropped whose score at its least
/// frequency cannot reach θ, and only then are positions read — by a second cursor per term, which moves
/// forward to the survivors only, finding where each one's positions lie and prefetching them before any is
/// read — and the phrase counted. Same documents and scores as `PhraseScorer`; without `prune` every match
/// is counted. On one fresh segment of 50,000 enwiki documents (`spirit-bench loop --fresh-docs`, one core,
/// 3 alternated rounds of 2 s), geomean µs against the scorer tree: HighPhrase 321 -> 185, MedPhrase 154 ->
/// 120 (reading positions as found, without the prefetching pass: 205 and 141), LowPhrase 59 -> 63 (within
/// the rounds' spread). Walking the positions cursor posting by posting instead of searching was slower
/// (MedPhrase 133 -> 161).
#[allow(clippy::too_many_arguments)]
fn fresh_phrase_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    f: &FreshSegment,
    (keys, offsets, field): (&[Vec<u8>], &[u32], u16),
    bm: &Bm25Doc,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) {
    let seg = &ctx.segs[si];
    let n = keys.len();
    assert!((2..=FRESH_MAX_TERMS).contains(&n), "the caller checks the term count");
    // Per term: a cursor for the lookups and one for the positions (both only move forward), and its df.
    let mut look: [Option<FreshPostings<'_>>; FRESH_MAX_TERMS] = Default::default();
    let mut at: [Option<FreshPostings<'_>>; FRESH_MAX_TERMS] = Default::default();
    let mut dfs = [0u32; FRESH_MAX_TERMS];
    for (t, k) in keys.iter().enumerate() {
        let Some(&SegTerm::Fresh(e)) = ctx.terms.get(k.as_slice()).map(|x| &x.per_seg[si]) else {
            // A term this segment lacks: no phrase here.
            return;
        };
        look[t] = Some(f.postings(e, seg.visible));
        at[t] = Some(f.postings(e, seg.visible));
        // Below the watermark; a list being written to right now counts as long.
        dfs[t] = f.df_below(e, seg.visible).unwrap_or(u32::MAX - 1);
    }
    if fresh_cannot_compete(col, prune, bm.idf) {
        return;
    }
    fn present<'c, 'a>(c: &'c mut Option<FreshPostings<'a>>) -> &'c mut FreshPostings<'a> {
        c.as_mut().expect("every term is present")
    }
    let norms = norms(seg, field);
    let (del, base) = (seg.deletes, seg.desc.base_doc);
    let any_deleted = del.count() > 0;
    let mut order: [usize; FRESH_MAX_TERMS] = std::array::from_fn(|t| t);
    order[..n].sort_by_key(|&t| dfs[t]);
    let lead = order[0];
    let marks = s.tf_marks.get_or_insert_with(|| Box::new([0; MARKS_SPAN as usize]));
    let cands = &mut s.window.get_or_insert_with(Box::default).docs;
    let (tfs, rest) = block_rows(&mut s.tf_rows, 2 * n + 2).split_at_mut(n);
    let (spots, taken) = rest.split_at_mut(n);
    let [taken, taken_tfs] = taken else { unreachable!("two rows") };
    let bufs = reset_lists(&mut s.lists, n);
    let full = |col: &Collector| prune && col.heap.len() >= col.cap;
    loop {
        let lc = present(&mut look[lead]);
        if lc.doc() == NO_DOC {
            return;
        }
        let got = lc.take_below(NO_DOC, taken, taken_tfs);
        let filter = full(col).then(|| ((bm, &norms), col.theta(), 0.0));
        let (m, exhausted) = fresh_batch_matches(
            (&taken[..got], &taken_tfs[..got], filter),
            (&mut look[..n], &order[..n], marks),
            (cands, tfs),
            (del, any_deleted),
            col,
        );
        // The docs that may still score θ at their least frequency, with where each term's positions lie
        // there (`spots`), prefetched; then the positions read.
        let theta = if full(col) { col.theta() } else { f32::NEG_INFINITY };
        let mut kept = 0;
        for j in 0..m {
            let d = cands[j];
            let least = tfs[..n].iter().map(|row| row[j]).min().expect("a phrase has terms");
            if bm.score(least as f32, norms.get(d)) < theta {
                col.exact = false;
                continue;
            }
            cands[kept] = d;
            for t in 0..n {
                let c = present(&mut at[t]);
                c.advance(d);
                let (p, k) = c.positions_at();
                debug_assert_eq!(k as u32, tfs[t][j], "the positions cursor is on the doc");
                c.prefetch_positions(p);
                // A word index of the arena fits 32 bits, as the arena's own block links do.
                (spots[t][kept], tfs[t][kept]) = (p as u32, tfs[t][j]);
            }
            kept += 1;
        }
        for (j, &d) in cands[..kept].iter().enumerate() {
            let norm = norms.get(d);
            let theta = if full(col) { col.theta() } else { f32::NEG_INFINITY };
            for (t, b) in bufs.iter_mut().enumerate() {
                present(&mut at[t]).read_positions(spots[t][j] as usize, tfs[t][j] as usize, b);
            }
            offer_phrase(col, (bufs, offsets), (bm, norm), theta, base + d);
        }
        if exhausted {
            // Another list has nothing after its last candidate: no phrase from here on.
            return;
        }
    }
}

/// The lead's score bound a fresh batch is filtered with: its BM25 and norms, θ, and the other terms' bound.
type LeadFilter<'b, 'a> = ((&'b Bm25Doc, &'b Norms<'a>), f32, f32);

/// One batch of a conjunction on the fresh segment ([`fresh_conj_top_k`], [`fresh_phrase_top_k`]): the
/// lead's postings taken (`order[0]` is the lead) go to `cands` and the lead's row of `tfs` — with a filter,
/// only those whose own score plus the others' bound can reach θ ([`keep_competitive`]; the total is then no
/// longer exact if any is dropped) — and are looked up in the other lists in `order`
/// ([`FreshPostings::probe`]), keeping those every list holds, and not deleted. Returns how many are kept, and
/// whether a list ran out (nothing after the batch can match).
fn fresh_batch_matches(
    (taken, taken_tfs, filter): (&[u32], &[u32], Option<LeadFilter<'_, '_>>),
    (curs, order, marks): (&mut [Option<FreshPostings<'_>>], &[usize], &mut TfMarks),
    (cands, tfs): (&mut [u32; BLOCK_LEN], &mut [[u32; BLOCK_LEN]]),
    (del, any_deleted): (DeletesAt<'_>, bool),
    col: &mut Collector,
) -> (usize, bool) {
    let (lead, got) = (order[0], taken.len());
    let mut m = match filter {
        Some((scoring, theta, rest)) => {
            let m = keep_competitive(scoring, (taken, taken_tfs), (theta, rest), (cands, &mut tfs[lead]));
            if m < got {
                col.exact = false;
            }
            m
        }
        None => {
            cands[..got].copy_from_slice(taken);
            tfs[lead][..got].copy_from_slice(taken_tfs);
            got
        }
    };
    let mut exhausted = false;
    for (i, &t) in order.iter().enumerate().skip(1) {
        if m == 0 {
            break;
        }
        let c = curs[t].as_mut().expect("every term is present");
        c.probe(&cands[..m], &mut tfs[t][..m], marks);
        exhausted |= c.doc() == NO_DOC;
        m = keep_found(cands, tfs, &order[..=i], m);
    }
    if any_deleted {
        m = drop_deleted(del, cands, tfs, m);
    }
    (m, exhausted)
}

/// With pruning and a full top-k, whether a bound on every score in the fresh segment (`ub`: the terms'
/// idfs, as a term scores below its idf; with a margin for rounding) is below θ; the segment is then skipped uncounted, as the scorer
/// tree skips it, and the total is no longer exact.
fn fresh_cannot_compete(col: &mut Collector, prune: bool, ub: f32) -> bool {
    let skip = prune && col.heap.len() >= col.cap && ub * BOUND_SLACK < col.theta();
    if skip {
        col.exact = false;
    }
    skip
}

/// The fresh segment's postings, scoring inputs and document frequency of each of a query's terms (`None`,
/// 0: not in this segment).
type FreshTerms<'a> = (
    [Option<FreshPostings<'a>>; FRESH_MAX_TERMS],
    [Option<(&'a Bm25Doc, Norms<'a>)>; FRESH_MAX_TERMS],
    [u32; FRESH_MAX_TERMS],
);

fn fresh_terms<'a>(ctx: &'a Ctx<'a>, si: usize, f: &'a FreshSegment, terms: &'a [Weight]) -> FreshTerms<'a> {
    assert!(terms.len() <= FRESH_MAX_TERMS, "the caller checks the term count");
    let mut curs: [Option<FreshPostings<'_>>; FRESH_MAX_TERMS] = Default::default();
    let mut scoring = [None; FRESH_MAX_TERMS];
    let mut dfs = [0; FRESH_MAX_TERMS];
    let seg = &ctx.segs[si];
    for (i, w) in terms.iter().enumerate() {
        let Weight::Term { key, field, bm, .. } = w else { unreachable!("the caller checks the clauses") };
        if let Some(&SegTerm::Fresh(e)) = ctx.terms.get(key.as_slice()).map(|t| &t.per_seg[si]) {
            curs[i] = Some(f.postings(e, seg.visible));
            scoring[i] = Some((bm, norms(seg, *field)));
            // Below the watermark; a list being written to right now counts as long.
            dfs[i] = f.df_below(e, seg.visible).unwrap_or(u32::MAX - 1);
        }
    }
    (curs, scoring, dfs)
}

/// OR of terms on the fresh segment, window by window of doc ids as [`disj_top_k`] goes on images (block-max
/// MaxScore): each window takes each term's bound from the impacts of its chunks and sealed blocks there
/// ([`FreshPostings::max_block_bound`]; `idf`, which every score is below, where the open tail block has
/// none); with `prune` and a full top-k, the terms whose bounds add up below the k-th best score are
/// *non-essential* (a doc matching only them cannot compete): a window with no essential term is passed
/// over, and when one term is essential its chunks that cannot compete with the others' bounds are passed
/// over. The essential terms' postings are copied out of the segment a batch at a time
/// ([`FreshPostings::take_below`]) and scored term at a time into per-term score rows (vectorized scoring,
/// no per-doc merging of the lists); each doc seen whose partial score plus the non-essential bounds can
/// compete is then looked up in the non-essential lists ([`FreshPostings::probe`]) and its score summed
/// over the rows in query order — the order `UnionScorer` and [`disj_top_k`] add in, so a doc scores the
/// same on every path. Without `prune` every term is essential and every match counted.
fn fresh_disj_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    f: &FreshSegment,
    should: &[Weight],
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) {
    let seg = &ctx.segs[si];
    let n = should.len();
    let (mut curs, scoring, _) = fresh_terms(ctx, si, f, should);
    let (curs, scoring) = (&mut curs[..n], &scoring[..n]);
    if fresh_cannot_compete(col, prune, scoring.iter().flatten().map(|(bm, _)| bm.idf).sum()) {
        return;
    }
    let (del, base) = (seg.deletes, seg.desc.base_doc);
    let any_deleted = del.count() > 0;
    // Windows no longer than the segment's documents, so a small segment clears small rows.
    let w_len = OR_WINDOW.min((seg.visible as usize).next_multiple_of(64).max(64));
    // rows[t * w_len + i]: term t's score at doc start + i (0 = no posting; BM25 of a posting is > 0).
    // Every window leaves the rows and partial sums zeroed, as it found them.
    let rows = &mut s.rows;
    reset(rows, n * w_len, 0.0);
    let partial = &mut s.scores;
    reset(partial, w_len, 0.0);
    let mut seen_words = [0u64; OR_WINDOW / 64];
    let seen = &mut seen_words[..w_len / 64];
    let (survivors, docs, found) = (&mut s.survivors, &mut s.cand, &mut s.table);
    let marks = s.tf_marks.get_or_insert_with(|| Box::new([0; MARKS_SPAN as usize]));
    let (mut taken, mut taken_tfs, mut buf) = ([0u32; BLOCK_LEN], [0u32; BLOCK_LEN], [0f32; BLOCK_LEN]);
    let (mut wb, mut essential) = ([0f32; FRESH_MAX_TERMS], [true; FRESH_MAX_TERMS]);
    let mut order: [usize; FRESH_MAX_TERMS] = std::array::from_fn(|t| t);
    // The first windows are short and each doubles the last: until the top-k fills, every doc of a window
    // is scored, and a short one fills it (and raises θ) before much of the segment is read.
    let (mut start, mut span) = (0u32, 64usize);
    loop {
        // Every list onto the window's start (those that were not essential lag behind); the window starts at
        // the first posting still ahead (sparse lists leap over empty stretches).
        let next = curs.iter_mut().flatten().map(|c| c.advance(start)).min().unwrap_or(NO_DOC);
        if next == NO_DOC {
            break;
        }
        start = next;
        let end = start.saturating_add(span as u32);
        span = (span * 2).min(w_len);
        let full = prune && col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        let need = theta - theta.abs() * FILTER_SLACK;
        // The non-essential terms: those of smallest window bound while the bounds (inflated: they add in
        // another order than the scores) stay below θ.
        let mut ne_sum = 0.0f32;
        essential[..n].fill(true);
        if full {
            for t in 0..n {
                wb[t] = match (&curs[t], scoring[t]) {
                    (Some(c), Some((bm, _))) => {
                        c.max_block_bound(start, end, |imp| bm.packed_bound(imp), bm.idf)
                    }
                    _ => 0.0,
                };
            }
            order[..n].sort_by(|&a, &b| wb[a].total_cmp(&wb[b]));
            for &t in &order[..n] {
                if (ne_sum + wb[t]) * BOUND_SLACK >= theta {
                    break;
                }
                ne_sum += wb[t];
                essential[t] = false;
            }
            if essential[..n].iter().any(|&e| !e) {
                col.exact = false;
            }
            if essential[..n].iter().all(|&e| !e) {
                if end == NO_DOC {
                    break;
                }
                start = end;
                continue;
            }
        }
        // One essential term: its postings come in doc order, so they are counted and filtered as they are
        // scored (no bitset, no partial sums); only survivors are written to the score rows.
        let direct = full && essential[..n].iter().filter(|&&e| e).count() == 1;
        survivors.clear();
        docs.clear();
        for t in (0..n).filter(|&t| essential[t]) {
            let (Some(c), Some((bm, norms))) = (curs[t].as_mut(), scoring[t]) else { continue };
            let row = &mut rows[t * w_len..(t + 1) * w_len];
            while c.doc() < end {
                let mut stop = end;
                // Block-max over a sole essential list: a chunk (or sealed block) of it whose impacts, with
                // every non-essential term's bound, cannot reach θ holds no competitive doc and is passed over.
                if direct {
                    let (x, chunk_end) = match c.chunk_window() {
                        Some((imp, e)) => (bm.packed_bound(&imp), e),
                        // The open tail block has no impacts (and no end yet): it is never passed over.
                        None => (
                            c.sealed_impacts().map_or(f32::INFINITY, |imp| bm.packed_bound(&imp)),
                            c.block_end(),
                        ),
                    };
                    // (A chunk ends past its postings; the check keeps a malformed end from stalling the walk.)
                    if chunk_end > c.doc() {
                        if (x + ne_sum) * BOUND_SLACK < need {
                            c.advance(chunk_end);
                            continue;
                        }
                        stop = stop.min(chunk_end);
                    }
                }
                let got = c.take_below(stop, &mut taken, &mut taken_tfs);
                if got == 0 {
                    debug_assert!(false, "the cursor's doc {} is below the stop {stop}", c.doc());
                    break;
                }
                bm.score_batch(&norms, &taken[..got], &taken_tfs[..got], &mut buf);
                let batch = taken[..got].iter().zip(&buf);
                if direct {
                    for (&d, &x) in batch {
                        if any_deleted && del.is_deleted(d) {
                            continue;
                        }
                        col.total += 1;
                        if (x + ne_sum) * BOUND_SLACK >= need {
                            let i = (d - start) as usize;
                            row[i] = x;
                            survivors.push(i);
                            docs.push(d);
                        }
                    }
                } else {
                    for (&d, &x) in batch {
                        let i = (d - start) as usize;
                        seen[i / 64] |= 1 << (i % 64);
                        row[i] = x;
                        partial[i] += x;
                    }
                }
            }
        }
        if !direct {
            let keep = Some((ne_sum, need));
            window_survivors((seen, partial), (start, keep), (del, any_deleted), col, (survivors, docs));
        }
        if !survivors.is_empty() {
            reset(found, docs.len(), 0);
            for t in (0..n).filter(|&t| !essential[t]) {
                let (Some(c), Some((bm, norms))) = (curs[t].as_mut(), scoring[t]) else { continue };
                c.probe(docs, found, marks);
                for ((&i, &d), &tf) in survivors.iter().zip(docs.iter()).zip(found.iter()) {
                    if tf != 0 {
                        rows[t * w_len + i] = bm.score(tf as f32, norms.get(d));
                    }
                }
            }
            push_survivors(col, (rows, w_len, n), (survivors, docs), theta, base);
        }
        clear_window((rows, w_len, n), partial, seen, direct.then_some(&survivors[..]));
        if end == NO_DOC {
            break;
        }
        start = end;
    }
}

/// A block-max window of [`conj_top_k`] spans at most this many blocks of a denser list.
const WINDOW_BLOCKS: u32 = 16;
/// [`conj_top_k`] warm-starts (evaluates its best lead blocks first) on lead lists of at least this many
/// blocks.
const WARM_MIN_BLOCKS: u32 = 4;
/// How many lead blocks [`conj_top_k`]'s warm start evaluates.
const WARM_BLOCKS: usize = 3;
/// At most how many blocks [`term_top_k`]'s warm start evaluates (one per place of the top-k).
const TERM_WARM_BLOCKS: usize = 16;

/// AND of terms on an image, window by window (block-max conjunction, as Lucene's
/// `BlockMaxConjunctionScorer` and Tantivy's `block_wand_intersection`). A window is the rest of the rarest
/// (lead) list's current block, cut once the top-k is full where a denser list's [`WINDOW_BLOCKS`]-th block
/// there ends; each other term is bounded over it by the largest bound of its blocks in it. All of it comes
/// from the skip tables, nothing is decoded.
///
/// - With `prune` (no exact count wanted) and a full top-k, a window whose sum of bounds is below the k-th
///   best score is skipped whole, and inside a window a lead doc whose own score plus the other terms'
///   window bounds is below it is dropped before any other list is looked at (score
///   first, then intersect; [`keep_competitive`]). Windows as long as the lead's block keep the per-window
///   work (decoding, intersection set-up) per lead block rather than per block of the densest list.
/// - Otherwise every lead doc is a candidate and every match is counted; a window whose bound cannot
///   compete is counted without being scored.
///
/// The candidates are then looked up in each other list, rarest first ([`PostingsCursor::probe`], by
/// searches: marking a dense block's postings instead, as the count-only AND does, made no measurable
/// difference even with every lead doc a candidate), and the survivors scored term by term. Scores add
/// in query order, as `ConjScorer` adds them, and so do the bounds: float addition is monotone, so a sum of
/// bounds never falls below the sum of the scores it bounds. Ties stay in (`>=`): the newer doc wins them.
fn conj_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    lists: &mut TermLists<'_>,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let TermLists { curs, scoring, bounds, ubs } = lists;
    let n = curs.len();
    let order = &mut s.order;
    let (lead, before, lc, after) = split_lead(curs, order);
    let visible = seg.visible;
    // A window lies inside one lead block, so its candidates fit in fixed-size rows: the candidates, and
    // per term their frequencies (compacted together).
    let win = &mut **s.window.get_or_insert_with(Box::default);
    let tfs = block_rows(&mut s.tf_rows, n);
    // Warm start: with pruning and a top-k still empty, the WARM_BLOCKS lead blocks of the highest bounds are
    // evaluated first, whole, so θ starts near where it ends and the pass in doc order skips (and filters)
    // far more from its first window on. The collector orders (score, doc) totally, so the order in which
    // documents are offered never changes the top-k; the pass skips those blocks, so nothing is offered or
    // counted twice.
    let mut warm = [u32::MAX; WARM_BLOCKS];
    if prune && col.heap.len() < col.cap && lc.block_count() >= WARM_MIN_BLOCKS {
        // The WARM_BLOCKS lead blocks of the highest bounds (an insertion into a short sorted list).
        let mut best = [(f32::NEG_INFINITY, u32::MAX); WARM_BLOCKS];
        for b in 0..lc.block_count() {
            let x = bounds.get(lead, b, lc, scoring[lead].1, ubs[lead]);
            if x > best[WARM_BLOCKS - 1].0 {
                best[WARM_BLOCKS - 1] = (x, b);
                best.sort_unstable_by(|p, q| q.0.total_cmp(&p.0));
            }
        }
        for (w, &(_, b)) in warm.iter_mut().zip(&best) {
            *w = b;
        }
        // In doc order: probes only look forward.
        warm.sort_unstable();
        for &b in warm.iter().filter(|&&b| b != u32::MAX) {
            lc.seek_block(b).map_err(fail)?;
            let (docs, ftf) = lc.block_postings().map_err(fail)?;
            let m = docs.len();
            win.docs[..m].copy_from_slice(docs);
            tfs[lead][..m].copy_from_slice(ftf);
            let lists = (&mut *before, &mut *after, lead, &order[..]);
            let theta = col.theta();
            finish_window(seg, lists, (&mut *win, &mut *tfs, m), scoring, col, (theta, true))?;
        }
        // Back to the start for the pass in doc order.
        for c in before.iter_mut().chain(after.iter_mut()) {
            c.seek_block(0).map_err(fail)?;
        }
        lc.seek_block(0).map_err(fail)?;
    }
    // Per term, its bound over the current window.
    let bnd = &mut s.window_bounds;
    bnd.clear();
    bnd.extend_from_slice(ubs);
    // Per term, the skip-table block the windows have reached (they run ahead of the cursors).
    let reached = &mut s.reached;
    reset(reached, n, 0);
    let mut doc = 0u32;
    while doc < visible {
        let lb = lc.shallow_block_from(reached[lead].max(lc.block_index()), doc);
        if warm.contains(&lb) {
            // Evaluated whole by the warm start.
            reached[lead] = lb + 1;
            doc = lc.last_doc_of(lb).saturating_add(1);
            continue;
        }
        reached[lead] = lb;
        if lb >= lc.block_count() {
            break;
        }
        let mut end = lc.last_doc_of(lb);
        let full = col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        if full {
            bnd[lead] = bounds.get(lead, lb, lc, scoring[lead].1, ubs[lead]);
            // The lead's block bound with the others' whole-list bounds, added in query order: when even that
            // cannot reach θ (a block of a rare term's low tfs against common terms, whose idf is small), the
            // block is passed over without a look at the others' skip tables.
            let coarse = |x: f32| -> f32 { (0..n).map(|t| if t == lead { x } else { ubs[t] }).sum() };
            if prune && coarse(bnd[lead]) < theta {
                col.exact = false;
                // So are the blocks after it, often (θ does not move meanwhile): passed over in one go,
                // without a skip-table search per block.
                let mut next = lb + 1;
                while next < lc.block_count()
                    && coarse(bounds.get(lead, next, lc, scoring[lead].1, ubs[lead])) < theta
                {
                    next += 1;
                }
                reached[lead] = next;
                doc = lc.last_doc_of(next - 1).saturating_add(1);
                continue;
            }
            for &t in &order[1..] {
                let c = other(before, after, lead, t);
                let b = c.shallow_block_from(reached[t].max(c.block_index()), doc);
                reached[t] = b;
                if b >= c.block_count() {
                    // This list has nothing at or after `doc`: no match from here on.
                    return Ok(());
                }
                // The window is the rest of the lead's block: a denser list bounds it with the largest
                // bound of its blocks there (up to WINDOW_BLOCKS of them; past that the window ends
                // earlier), so windows never shrink to a dense list's short blocks.
                let mut x = bounds.get(t, b, c, scoring[t].1, ubs[t]);
                let mut last = c.last_doc_of(b);
                let mut nb = b + 1;
                while last < end && nb < c.block_count() && nb - b < WINDOW_BLOCKS {
                    x = x.max(bounds.get(t, nb, c, scoring[t].1, ubs[t]));
                    last = c.last_doc_of(nb);
                    nb += 1;
                }
                end = end.min(last);
                bnd[t] = x;
            }
            if prune && bnd.iter().sum::<f32>() < theta {
                col.exact = false;
                doc = end.saturating_add(1);
                continue;
            }
        }
        // The lead's block is decoded only for a window that is not skipped (once: a block spanning several
        // windows stays loaded).
        lc.seek_block(lb).map_err(fail)?;
        let (lead_docs, lead_tfs) = lc.block_postings().map_err(fail)?;
        let (from, to) = (first_at_least(lead_docs, doc), first_above(lead_docs, end));
        let (docs, ftf) = (&lead_docs[from..to], &lead_tfs[from..to]);
        let m = if prune && full {
            // Score first: keep a lead doc only if its own score plus the others' window bounds can compete.
            // The test is conservative (a margin over the float sums' rounding) and division-free; the exact
            // `score >= θ` check after the intersection decides. (Following each other list's blocks inside
            // the window, for a finer bound per stretch of lead docs, filtered more but cost more than it
            // saved: a stretch is a few lead docs, and its end a search among them. AndHighMed 64.6 -> 52.5
            // µs, AndHighHigh 141 -> 127, AndHighLow 32.3 -> 28.7 without it.)
            let (norms, bm) = &scoring[lead];
            let rest: f32 = order[1..].iter().map(|&t| bnd[t]).sum();
            let m =
                keep_competitive((bm, norms), (docs, ftf), (theta, rest), (&mut win.docs, &mut tfs[lead]));
            if m < docs.len() {
                col.exact = false;
            }
            m
        } else {
            win.docs[..docs.len()].copy_from_slice(docs);
            tfs[lead][..docs.len()].copy_from_slice(ftf);
            docs.len()
        };
        doc = end.saturating_add(1);
        let competes = !full || bnd.iter().sum::<f32>() >= theta;
        let lists = (&mut *before, &mut *after, lead, &order[..]);
        finish_window(seg, lists, (win, tfs, m), scoring, col, (theta, competes))?;
    }
    Ok(())
}

/// An AND's terms rarest first into `order` (the lead, the rarest, first), and the lead's cursor apart from
/// the others' — `(lead, cursors before it, its cursor, cursors after it)` — so its decoded block is read in
/// place while they move.
#[allow(clippy::type_complexity)]
fn split_lead<'c, 'a>(
    curs: &'c mut [PostingsCursor<'a>],
    order: &mut Vec<usize>,
) -> (usize, &'c mut [PostingsCursor<'a>], &'c mut PostingsCursor<'a>, &'c mut [PostingsCursor<'a>]) {
    order.clear();
    order.extend(0..curs.len());
    order.sort_by_key(|&t| curs[t].len());
    let lead = order[0];
    let (before, rest) = curs.split_at_mut(lead);
    let (lc, after) = rest.split_first_mut().expect("the lead is a term");
    (lead, before, lc, after)
}

/// A count-only AND of terms on an image (no hits wanted: `Index::count`, `size: 0`): the lead's (rarest
/// list's) doc ids block by block are looked up in each other list, rarest first, with
/// [`PostingsCursor::retain`] — which intersects by marks or by searches as the lists' densities there
/// make faster and skips the blocks between candidates undecoded. No frequency, position or score is read.
fn conj_count(
    ctx: &Ctx<'_>,
    si: usize,
    lists: &mut TermLists<'_>,
    col: &mut Collector,
    s: &mut Scratch,
    _prune: bool,
) -> Result<()> {
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let curs = &mut lists.curs;
    let order = &mut s.order;
    let (lead, before, lc, after) = split_lead(curs, order);
    let cands = &mut s.window.get_or_insert_with(Box::default).docs;
    let marks = s.marks.get_or_insert_with(|| Box::new([0; MARKS_SPAN as usize]));
    let del = seg.deletes;
    let any_deleted = del.count() > 0;
    for b in 0..lc.block_count() {
        lc.seek_block(b).map_err(fail)?;
        let docs = lc.block_docs();
        let seen = docs.partition_point(|&d| d < seg.visible);
        cands[..seen].copy_from_slice(&docs[..seen]);
        let mut m = seen;
        for &t in &order[1..] {
            let c = other(before, after, lead, t);
            m = c.retain(cands, m, Intersect::Auto, marks).map_err(fail)?;
            if c.doc() == NO_DOC && m == 0 {
                // This list has nothing left: no match from here on.
                return Ok(());
            }
            if m == 0 {
                break;
            }
        }
        col.total += if any_deleted {
            cands[..m].iter().filter(|&&d| !del.is_deleted(d)).count() as u64
        } else {
            m as u64
        };
        if seen < docs.len() {
            // The rest is past what this reader sees.
            break;
        }
    }
    Ok(())
}

/// The end of a [`conj_top_k`] window whose `m` lead candidates (and their lead frequencies) are in
/// `win.docs` and the lead's row: probes them in the other lists, rarest first (`order`), drops what the
/// reader cannot see (past its snapshot, deleted), counts the matches and, when the window `competes`,
/// scores them and offers those at or above `theta` to the collector.
fn finish_window<'a>(
    seg: &Seg<'_>,
    (before, after, lead, order): (&mut [PostingsCursor<'a>], &mut [PostingsCursor<'a>], usize, &[usize]),
    (win, tfs, mut m): (&mut WindowBuf, &mut [[u32; BLOCK_LEN]], usize),
    scoring: &[(Norms<'_>, &Bm25Doc)],
    col: &mut Collector,
    (theta, competes): (f32, bool),
) -> Result<()> {
    let fail = codec_failure(seg);
    for (i, &t) in order.iter().enumerate().skip(1) {
        if m == 0 {
            break;
        }
        other(before, after, lead, t).probe(&win.docs[..m], &mut tfs[t][..m]).map_err(fail)?;
        m = keep_found(&mut win.docs, tfs, &order[..=i], m);
    }
    m = win.docs[..m].partition_point(|&d| d < seg.visible);
    if seg.deletes.count() > 0 {
        m = drop_deleted(seg.deletes, &mut win.docs, tfs, m);
    }
    col.total += m as u64;
    if m > 0 && competes {
        let terms = scoring.iter().map(|(norms, bm)| (*bm, *norms));
        collect_batch(col, terms, (&win.docs[..m], tfs), &mut win.scores[..m], theta, seg.desc.base_doc);
    }
    Ok(())
}

/// A batch of conjunction candidates after term `done.last()` was looked up (its frequencies in its row, 0
/// where it lacks the candidate): keeps the candidates it has, with the frequencies of every term in `done`,
/// and returns how many. Branch-free (always write, advance past a hit) and in place (`w <= j` never
/// overwrites a row entry still to move).
fn keep_found(cands: &mut [u32; BLOCK_LEN], tfs: &mut [[u32; BLOCK_LEN]], done: &[usize], m: usize) -> usize {
    let (&t, before) = done.split_last().expect("the term just looked up");
    let mut w = 0;
    for j in 0..m {
        let tf = tfs[t][j];
        cands[w] = cands[j];
        for &u in before {
            tfs[u][w] = tfs[u][j];
        }
        tfs[t][w] = tf;
        w += (tf != 0) as usize;
    }
    w
}

/// Drops the deleted among a batch's `m` candidates (with their rows of frequencies); returns how many stay.
fn drop_deleted(
    del: DeletesAt<'_>,
    cands: &mut [u32; BLOCK_LEN],
    tfs: &mut [[u32; BLOCK_LEN]],
    m: usize,
) -> usize {
    let mut w = 0;
    for j in 0..m {
        if !del.is_deleted(cands[j]) {
            cands[w] = cands[j];
            for row in tfs.iter_mut() {
                row[w] = row[j];
            }
            w += 1;
        }
    }
    w
}

/// Scores a batch of conjunction matches term by term (tight loops), adding in query order as `ConjScorer`
/// does, and offers those at or above θ (equal may enter: the newer doc wins the tie) to the collector,
/// raising θ as it fills. `docs` are segment-local, `base` makes them global.
fn collect_batch<'n>(
    col: &mut Collector,
    terms: impl Iterator<Item = (&'n Bm25Doc, Norms<'n>)>,
    (docs, tfs): (&[u32], &[[u32; BLOCK_LEN]]),
    scores: &mut [f32],
    mut theta: f32,
    base: u32,
) {
    // The first term's scores are the sums so far (0 + x is x: scores are finite and positive), the others
    // added in order.
    let mut scored = false;
    for ((bm, norms), row) in terms.zip(tfs) {
        if scored {
            bm.add_batch(&norms, docs, &row[..docs.len()], scores);
        } else {
            bm.score_batch(&norms, docs, &row[..docs.len()], scores);
            scored = true;
        }
    }
    if !scored {
        scores.fill(0.0);
    }
    for (&s, &d) in scores.iter().zip(docs) {
        if s >= theta {
            col.push_score(Entry(s, base + d));
            if col.heap.len() >= col.cap {
                theta = col.theta();
            }
        }
    }
}

/// The index of the first of sorted `docs` at or after `x`. Windows mostly start at a block's first doc, so
/// that case is one compare; a binary search's chain of dependent loads, four times per window, was 13% of
/// the densest conjunctions' time (`+in +to`, perf).
#[inline]
fn first_at_least(docs: &[u32], x: u32) -> usize {
    match docs.first() {
        Some(&d) if d >= x => 0,
        _ => docs.partition_point(|&d| d < x),
    }
}

/// The index of the first of sorted `docs` after `x` (`docs.len()` if none): windows and stretches mostly
/// reach past the block's last doc, so that case is one compare.
#[inline]
fn first_above(docs: &[u32], x: u32) -> usize {
    match docs.last() {
        Some(&d) if d <= x => docs.len(),
        _ => docs.partition_point(|&d| d <= x),
    }
}

/// Term `t`'s cursor among the others of a split at the lead's index.
#[inline]
fn other<'c, 'a>(
    before: &'c mut [PostingsCursor<'a>],
    after: &'c mut [PostingsCursor<'a>],
    lead: usize,
    t: usize,
) -> &'c mut PostingsCursor<'a> {
    debug_assert!(t != lead);
    if t < lead {
        &mut before[t]
    } else {
        &mut after[t - lead - 1]
    }
}

/// [`FreshPostings::probe`]'s mark table: a frequency per doc id of a span.
pub(super) type TfMarks = [u32; MARKS_SPAN as usize];

/// [`conj_top_k`]'s per-window rows: the candidates and their scores (a window lies in one lead block).
pub(super) struct WindowBuf {
    docs: [u32; BLOCK_LEN],
    scores: [f32; BLOCK_LEN],
}

impl Default for WindowBuf {
    fn default() -> Self {
        WindowBuf { docs: [0; BLOCK_LEN], scores: [0.0; BLOCK_LEN] }
    }
}

/// The first `n` rows of `rows`, one block long each (their contents are left as they are).
fn block_rows(rows: &mut Vec<[u32; BLOCK_LEN]>, n: usize) -> &mut [[u32; BLOCK_LEN]] {
    if rows.len() < n {
        rows.resize(n, [0; BLOCK_LEN]);
    }
    &mut rows[..n]
}

/// The posting lists of a boolean of terms on one image segment, in query order, with what scoring and
/// block-max need: each term's norms and BM25, every block's bound, and the bound over the whole list.
struct TermLists<'a> {
    curs: Vec<PostingsCursor<'a>>,
    scoring: Vec<(Norms<'a>, &'a Bm25Doc)>,
    bounds: BlockBounds,
    /// A bound over the whole list: the BM25 ceiling `idf` (tf / (tf + norm) < 1) for a multi-block list —
    /// free, where the best block bound would read every block's impacts — or a one-block list's best posting.
    ubs: Vec<f32>,
}

/// Each term's block bounds, computed on first use: a query reads the impacts of the blocks it reaches,
/// not all of a long list's. A term whose list the selective cache pins takes them from the list's
/// block-bound table instead ([`block_table`]: a multiplication, where the impacts cost a division each).
struct BlockBounds {
    lists: Vec<Vec<f32>>,
    /// Per term, its list's block-bound table, if pinned.
    tables: Vec<Option<Arc<BlockTable>>>,
}

impl BlockBounds {
    /// Bounds for `curs`, in `store`'s lists (their allocations reused; [`Self::into_store`] gives them
    /// back), with `tables` (one per cursor: a table has one value per block of its list).
    fn new(
        curs: &[PostingsCursor<'_>],
        mut store: Vec<Vec<f32>>,
        tables: Vec<Option<Arc<BlockTable>>>,
    ) -> BlockBounds {
        reset_lists(&mut store, curs.len());
        assert_eq!(tables.len(), curs.len(), "a table slot per term");
        for ((b, c), tab) in store.iter_mut().zip(curs).zip(&tables) {
            if c.block_count() > 1 {
                b.resize(c.block_count() as usize, f32::NAN);
            }
            assert!(tab.as_ref().is_none_or(|t| t.values.len() == b.len()), "a table value per block");
        }
        BlockBounds { lists: store, tables }
    }

    fn into_store(self) -> (Vec<Vec<f32>>, Vec<Option<Arc<BlockTable>>>) {
        (self.lists, recycle(self.tables))
    }

    /// Term `t`'s bound over block `b` (`fallback` for a one-block list, which has no impacts).
    #[inline]
    fn get(&mut self, t: usize, b: u32, c: &PostingsCursor<'_>, bm: &Bm25Doc, fallback: f32) -> f32 {
        match self.lists[t].get_mut(b as usize) {
            None => fallback,
            Some(x) => {
                if x.is_nan() {
                    *x = match &self.tables[t] {
                        Some(tab) => bm.bound_from_table(tab.values[b as usize]),
                        None => c.bound_of_block(b, |imp| bm.impacts_bound(imp)).unwrap_or(fallback),
                    };
                }
                *x
            }
        }
    }
}

/// A pinned list's block-bound table for `bm`'s parameters: per block, the best BM25 of its impacts at idf
/// 1 and at the grid average length of `LengthTerms::grid_cell` (unreadable impacts bound nothing: infinity).
/// Made once per list and grid cell and kept with the list in the selective cache, so repeated queries skip
/// the impacts' divisions, and the skip table's reads, of every block they bound. `None` for a one-block
/// list (no impacts) or no usable average length.
fn block_table(c: &PostingsCursor<'_>, pin: Option<&PinnedList>, bm: &Bm25Doc) -> Option<Arc<BlockTable>> {
    let pin = pin.filter(|_| c.block_count() > 1)?;
    let (key, grid) = bm.lengths.grid_cell?;
    Some(pin.table(key, || {
        let unit = Bm25Doc::new(1.0, bm.bm25, grid);
        (0..c.block_count())
            .map(|b| c.bound_of_block(b, |imp| unit.impacts_bound(imp)).unwrap_or(f32::INFINITY))
            .collect()
    }))
}

impl<'a> TermLists<'a> {
    /// `None` when a term has no postings and `drop_empty` is false (a conjunction that cannot match);
    /// with `drop_empty` such terms are left out (they add nothing to a disjunction). The lists live in
    /// `s`'s buffers until [`Self::recycle`] gives them back (an error drops them: the next query allocates).
    fn open(
        ctx: &'a Ctx<'a>,
        si: usize,
        terms: &'a [Weight],
        drop_empty: bool,
        s: &mut Scratch,
    ) -> Result<Option<TermLists<'a>>> {
        let seg = &ctx.segs[si];
        let mut lists = TermLists {
            curs: recycle(std::mem::take(&mut s.curs)),
            scoring: recycle(std::mem::take(&mut s.scoring)),
            bounds: BlockBounds {
                lists: std::mem::take(&mut s.bounds),
                tables: recycle(std::mem::take(&mut s.tables)),
            },
            ubs: std::mem::take(&mut s.ubs),
        };
        for w in terms {
            let Weight::Term { key, field, bm, .. } = w else { unreachable!("terms only") };
            match ctx.terms.get(key.as_slice()).map(|t| &t.per_seg[si]) {
                Some(SegTerm::Blob(blob, pin)) => {
                    // Built in place in the list (a cursor is a kilobyte).
                    PostingsCursor::push_with_pinned(&mut lists.curs, blob, pinned_head(pin))
                        .map_err(codec_failure(seg))?;
                    let c = lists.curs.last().expect("just pushed");
                    lists.bounds.tables.push(block_table(c, pin.as_deref(), bm));
                }
                None | Some(SegTerm::Absent | SegTerm::Fresh(_)) if drop_empty => continue,
                None | Some(SegTerm::Absent | SegTerm::Fresh(_)) => {
                    lists.recycle(s);
                    return Ok(None);
                }
            }
            lists.scoring.push((norms(seg, *field), bm));
        }
        let TermLists { curs, scoring, ubs, bounds } = &mut lists;
        *bounds =
            BlockBounds::new(curs, std::mem::take(&mut bounds.lists), std::mem::take(&mut bounds.tables));
        ubs.clear();
        for (c, (norms, bm)) in curs.iter_mut().zip(scoring.iter()) {
            ubs.push(if c.block_count() > 1 { bm.idf } else { list_bound(c, norms, bm) });
        }
        Ok(Some(lists))
    }

    /// Gives the buffers back to `s`.
    fn recycle(self, s: &mut Scratch) {
        s.curs = recycle(self.curs);
        s.scoring = recycle(self.scoring);
        (s.bounds, s.tables) = self.bounds.into_store();
        s.ubs = self.ubs;
    }
}

/// Doc ids per window of [`disj_top_k`]'s term-at-a-time accumulation (a multiple of 64).
const OR_WINDOW: usize = 4096;

/// Disjunctions of at most this many terms take [`disj_top_k`] (a score row per term per window).
const OR_MAX_TERMS: usize = 32;

/// Bounds compared with sums taken in another order than the scores' (MaxScore partitions) are inflated
/// by this factor: float sums of a few positive terms differ by a few ulps with the order, far below it.
const BOUND_SLACK: f32 = 1.0 + 1e-4;

/// OR of terms on an image by block-max WAND (Ding and Suel, SIGIR 2011), document at a time, for
/// [`Disjunction::BlockMaxWand`] with pruning. The lists, ordered by their current doc, are summed by their
/// whole-list bounds until the sum can reach θ: that list's doc is the *pivot*, and no doc before it can
/// compete (only the lists before the pivot have one, and their bounds fall short). The pivot is then checked
/// on the block bounds of the lists up to it: when even those cannot reach θ, every list up to the pivot moves
/// past the first of their blocks' ends (or to the next list's doc, if sooner) — no doc in between can
/// compete either. Otherwise the lists before the pivot move to it, and once all are there the doc is scored
/// over every list, in query order (the order `UnionScorer` and [`disj_top_k`] add in, so a doc scores the
/// same on every path).
fn disj_bmw(
    ctx: &Ctx<'_>,
    si: usize,
    lists: &mut TermLists<'_>,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    debug_assert!(prune, "exhaustive evaluation goes through disj_top_k");
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let TermLists { curs, scoring, bounds, ubs } = lists;
    let n = curs.len();
    let (del, base, visible) = (seg.deletes, seg.desc.base_doc, seg.visible);
    let order = &mut s.order;
    order.clear();
    order.extend(0..n);
    loop {
        // By current doc (insertion sort: the order barely changes between steps).
        for i in 1..n {
            let mut j = i;
            while j > 0 && curs[order[j - 1]].doc() > curs[order[j]].doc() {
                order.swap(j - 1, j);
                j -= 1;
            }
        }
        let full = col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        // The pivot: the first list at which the whole-list bounds (inflated: they add in another order than
        // the scores) reach θ.
        let mut acc = 0.0f32;
        let mut pivot = None;
        for (i, &t) in order.iter().enumerate() {
            if curs[t].doc() == NO_DOC {
                break;
            }
            acc += ubs[t];
            if acc * BOUND_SLACK >= theta {
                pivot = Some(i);
                break;
            }
        }
        let Some(mut p) = pivot else {
            // Nothing left can reach θ.
            if order.iter().any(|&t| curs[t].doc() < visible) {
                col.exact = false;
            }
            break;
        };
        let pd = curs[order[p]].doc();
        if pd >= visible {
            break;
        }
        while p + 1 < n && curs[order[p + 1]].doc() == pd {
            p += 1;
        }
        if full {
            // The block bounds at the pivot of the lists up to it.
            let mut x = 0.0f32;
            let mut next = if p + 1 < n { curs[order[p + 1]].doc() } else { NO_DOC };
            for &t in &order[..=p] {
                let c = &curs[t];
                let b = c.shallow_block_from(c.block_index(), pd);
                x += bounds.get(t, b, c, scoring[t].1, ubs[t]);
                next = next.min(c.last_doc_of(b).saturating_add(1));
            }
            if x * BOUND_SLACK < theta {
                col.exact = false;
                for &t in &order[..=p] {
                    curs[t].advance(next).map_err(fail)?;
                }
                continue;
            }
        }
        if curs[order[0]].doc() != pd {
            // Docs before the pivot cannot compete: the lists before it move to it.
            col.exact = false;
            for &t in &order[..p] {
                if curs[t].doc() < pd {
                    curs[t].advance(pd).map_err(fail)?;
                }
            }
            continue;
        }
        // Every list up to the pivot is on it (and no other: they are past it).
        if !del.is_deleted(pd) {
            col.total += 1;
            let mut score = 0.0f32;
            for (c, (norms, bm)) in curs.iter_mut().zip(scoring.iter()) {
                if c.doc() == pd {
                    score += bm.score(c.freq().map_err(fail)? as f32, norms.get(pd));
                }
            }
            if score >= theta {
                col.push_score(Entry(score, base + pd));
            }
        }
        for &t in &order[..=p] {
            curs[t].next().map_err(fail)?;
        }
    }
    Ok(())
}

/// A window's score rows as [`disj_top_k`] and [`fresh_disj_top_k`] keep them: `rows[t * len + i]` is term
/// `t`'s score at the window's doc `i` (0 = no posting), for `n` terms.
type Rows<'r> = (&'r mut [f32], usize, usize);

/// The docs a window's essential terms marked in `seen`, in order (`partial`: their essential terms' score
/// sums): each not deleted is counted, and with `keep = Some((ne_sum, threshold))` kept in `survivors`
/// (its index in the window) and `docs` (its doc) when its partial score plus the non-essential terms'
/// bounds (inflated: they add in another order than the scores) reach the threshold.
#[inline(always)]
fn window_survivors(
    (seen, partial): (&mut [u64], &[f32]),
    (start, keep): (u32, Option<(f32, f32)>),
    (del, any_deleted): (DeletesAt<'_>, bool),
    col: &mut Collector,
    (survivors, docs): (&mut Vec<usize>, &mut Vec<u32>),
) {
    for (w, &bits) in seen.iter().enumerate() {
        let mut bits = bits;
        while bits != 0 {
            let i = w * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let d = start + i as u32;
            if any_deleted && del.is_deleted(d) {
                continue;
            }
            col.total += 1;
            if keep.is_some_and(|(ne_sum, threshold)| (partial[i] + ne_sum) * BOUND_SLACK >= threshold) {
                survivors.push(i);
                docs.push(d);
            }
        }
    }
}

/// Sums each survivor's row scores in query order — the order `UnionScorer` adds in, so a doc scores the
/// same on every path — and offers those at or above θ to the collector.
#[inline(always)]
fn push_survivors(
    col: &mut Collector,
    (rows, len, n): Rows<'_>,
    (survivors, docs): (&[usize], &[u32]),
    mut theta: f32,
    base: u32,
) {
    for (&i, &d) in survivors.iter().zip(docs) {
        let x = (0..n).fold(0.0f32, |a, t| a + rows[t * len + i]);
        // Below the k-th best nothing enters (equal may: the newer doc wins the tie).
        if x >= theta {
            col.push_score(Entry(x, base + d));
            if col.heap.len() >= col.cap {
                theta = col.theta();
            }
        }
    }
}

/// Zeroes what a window wrote, so the next finds its rows, partial sums and `seen` bits as this one did: in
/// the direct mode (`direct`: the survivors, whose rows are all it writes; it marks nothing in `seen`) the
/// survivors' rows, else the seen docs' — whole rows when many docs were seen (a memset beats scattered
/// stores).
#[inline(always)]
fn clear_window((rows, len, n): Rows<'_>, partial: &mut [f32], seen: &mut [u64], direct: Option<&[usize]>) {
    if let Some(survivors) = direct {
        debug_assert!(seen.iter().all(|&w| w == 0), "the direct mode marks nothing");
        for &i in survivors {
            for t in 0..n {
                rows[t * len + i] = 0.0;
            }
        }
        return;
    }
    let touched: u32 = seen.iter().map(|w| w.count_ones()).sum();
    if touched as usize * 8 > len {
        rows.fill(0.0);
        partial.fill(0.0);
        seen.fill(0);
        return;
    }
    for (w, bits) in seen.iter_mut().enumerate() {
        let mut b = *bits;
        while b != 0 {
            let i = w * 64 + b.trailing_zeros() as usize;
            b &= b - 1;
            partial[i] = 0.0;
            for t in 0..n {
                rows[t * len + i] = 0.0;
            }
        }
        *bits = 0;
    }
}

/// OR of terms on an image, window by window of [`OR_WINDOW`] doc ids (block-max MaxScore, as Lucene's
/// `MaxScoreBulkScorer`). Each window takes each term's bound from its block bounds there; with `prune`
/// and a full top-k, the terms whose bounds add up below the k-th best score are *non-essential* (a doc
/// matching only them cannot compete): a window with no essential term is skipped, and when one term is
/// essential its blocks that cannot compete with the others' bounds are skipped. The essential terms'
/// postings are scored term at a time into per-term score rows (one division per posting, no heap, no
/// per-doc merging); each doc seen whose partial score plus the non-essential bounds can compete is then
/// probed in the non-essential lists ([`PostingsCursor::intersect`]), and its score summed over the rows
/// in query order — the order `UnionScorer` adds in, so a doc scores the same on every path. Without
/// `prune` every term is essential and every match counted.
fn disj_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    lists: &mut TermLists<'_>,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let TermLists { curs, scoring, bounds, ubs } = lists;
    let n = curs.len();
    if n == 0 {
        return Ok(());
    }
    const W: usize = OR_WINDOW;
    let (del, base, visible) = (seg.deletes, seg.desc.base_doc, seg.visible);
    let any_deleted = del.count() > 0;
    // rows[t * W + i]: term t's score at doc start + i (0 = no posting; BM25 of a posting is > 0). Every
    // window leaves the rows and partial sums zeroed, as it found them.
    let rows = &mut s.rows;
    reset(rows, n * W, 0.0);
    let partial = &mut s.scores;
    reset(partial, W, 0.0);
    let mut seen = [0u64; W / 64];
    let wb = &mut s.window_bounds;
    reset(wb, n, 0.0);
    let order = &mut s.order;
    order.clear();
    order.extend(0..n);
    let essential = &mut s.essential;
    reset(essential, n, true);
    let (survivors, docs) = (&mut s.survivors, &mut s.cand);
    survivors.clear();
    docs.clear();
    let (table, hits) = (&mut s.table, &mut s.hits);
    let mut buf = [0f32; BLOCK_LEN];
    // Per term, the skip-table block the windows have reached (they run ahead of the cursors).
    let reached = &mut s.reached;
    reset(reached, n, 0);
    let mut start = 0u32;
    while start < visible {
        // Start at the first posting still ahead (sparse lists leap over empty stretches).
        let next = curs.iter().map(|c| c.doc()).min().unwrap_or(NO_DOC);
        start = start.max(next);
        if start >= visible {
            break;
        }
        let end = start.saturating_add(W as u32 - 1).min(visible - 1);
        let full = col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        for t in 0..n {
            let c = &curs[t];
            let from = c.shallow_block_from(reached[t].max(c.block_index()), start);
            let to = c.shallow_block_from(from, end).min(c.block_count() - 1);
            reached[t] = from;
            wb[t] = match () {
                _ if from >= c.block_count() => 0.0,
                _ => (from..=to.max(from))
                    .map(|b| bounds.get(t, b, c, scoring[t].1, ubs[t]))
                    .fold(0.0, f32::max),
            };
        }
        essential.fill(true);
        let mut ne_sum = 0.0f32;
        if full && prune {
            order.sort_by(|&a, &b| wb[a].total_cmp(&wb[b]));
            for &t in order.iter() {
                if (ne_sum + wb[t]) * BOUND_SLACK >= theta {
                    break;
                }
                ne_sum += wb[t];
                essential[t] = false;
            }
            if essential.iter().all(|e| !e) {
                col.exact = false;
                start = end.saturating_add(1);
                continue;
            }
            if essential.iter().any(|e| !e) {
                col.exact = false;
            }
        }
        // A window that cannot compete at all (exact counts wanted) is counted, not scored.
        let score = !full || wb.iter().sum::<f32>() * BOUND_SLACK >= theta;
        let lone = essential.iter().filter(|&&e| e).count() == 1;
        // One essential term: its postings come in doc order, so they are counted and filtered as they are
        // scored (no bitset, no partial sums); only survivors are written to the score rows.
        let direct = lone && score;
        survivors.clear();
        docs.clear();
        for t in (0..n).filter(|&t| essential[t]) {
            let (norms, bm) = &scoring[t];
            let c = &mut curs[t];
            if c.advance(start).map_err(fail)? == NO_DOC || c.doc() > end {
                continue;
            }
            loop {
                let b = c.block_index();
                // One essential term: its blocks that cannot compete even with every other term are skipped.
                if lone && full && prune && (bounds.get(t, b, c, bm, ubs[t]) + ne_sum) * BOUND_SLACK < theta {
                    if c.block_last_doc() > end {
                        c.advance(end.saturating_add(1)).map_err(fail)?;
                        break;
                    }
                    if c.next_block().map_err(fail)? == NO_DOC {
                        break;
                    }
                    continue;
                }
                let (ds, fs) = c.rest_of_block().map_err(fail)?;
                let m = ds.partition_point(|&d| d <= end);
                let row = &mut rows[t * W..(t + 1) * W];
                if direct {
                    bm.score_batch(norms, &ds[..m], &fs[..m], &mut buf);
                    for (&d, &s) in ds[..m].iter().zip(&buf) {
                        if any_deleted && del.is_deleted(d) {
                            continue;
                        }
                        col.total += 1;
                        if (s + ne_sum) * BOUND_SLACK >= theta {
                            let i = (d - start) as usize;
                            row[i] = s;
                            survivors.push(i);
                            docs.push(d);
                        }
                    }
                } else if score {
                    bm.score_batch(norms, &ds[..m], &fs[..m], &mut buf);
                    for (&d, &s) in ds[..m].iter().zip(&buf) {
                        let i = (d - start) as usize;
                        seen[i / 64] |= 1 << (i % 64);
                        row[i] = s;
                        partial[i] += s;
                    }
                } else {
                    for &d in &ds[..m] {
                        let i = (d - start) as usize;
                        seen[i / 64] |= 1 << (i % 64);
                    }
                }
                if m < ds.len() {
                    c.advance(end.saturating_add(1)).map_err(fail)?;
                    break;
                }
                if c.next_block().map_err(fail)? == NO_DOC {
                    break;
                }
            }
        }
        if !direct {
            let keep = score.then_some((ne_sum, theta));
            window_survivors((&mut seen, partial), (start, keep), (del, any_deleted), col, (survivors, docs));
        }
        if !survivors.is_empty() {
            for t in (0..n).filter(|&t| !essential[t]) {
                hits.clear();
                curs[t].intersect(docs, table, hits).map_err(fail)?;
                let (norms, bm) = &scoring[t];
                for &(k, f) in hits.iter() {
                    rows[t * W + survivors[k]] = bm.score(f as f32, norms.get(docs[k]));
                }
            }
            push_survivors(col, (rows, W, n), (survivors, docs), theta, base);
        }
        clear_window((rows, W, n), partial, &mut seen, direct.then_some(&survivors[..]));
        start = end.saturating_add(1);
    }
    Ok(())
}

/// A phrase on an image, driven by its rarest term (as `PhraseScorer`), with block-max and per-document
/// bounds. A phrase occurs at most as often as its least frequent term in a document, so the phrase's BM25
/// at any one term's (tf, length) bounds its score: over a window (cut at every list's block end, as in
/// [`conj_top_k`]) the smallest of the terms' block bounds bounds the phrase, and a window below the
/// k-th best score θ is skipped; inside a window, a lead document whose bound at its own tf is below θ is
/// passed over before any other list moves (the lead's block tested whole, [`competitive_bits`]: HighPhrase
/// 988 -> 453 µs, MedPhrase 466 -> 309, LowPhrase 198 -> 174 on the enwiki dev file), and a document with
/// every term whose bound at the smallest tf is below θ is dropped before any position is read. Only the
/// rest decode positions. Without `prune` every document is checked, so the count is exact.
#[allow(clippy::too_many_arguments)]
fn phrase_top_k(
    ctx: &Ctx<'_>,
    si: usize,
    keys: &[Vec<u8>],
    offsets: &[u32],
    field: u16,
    bm: &Bm25Doc,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    let mut curs: Vec<PostingsCursor<'_>> = recycle(std::mem::take(&mut s.curs));
    // A table holds each block's impacts' BM25 at idf 1, whichever weight reads it: the phrase's serves.
    let mut tables: Vec<Option<Arc<BlockTable>>> = recycle(std::mem::take(&mut s.tables));
    let mut r = Ok(());
    for k in keys {
        match image_list(ctx, si, k) {
            Ok(Some((c, pin))) => {
                tables.push(block_table(&c, pin, bm));
                curs.push(c);
            }
            Ok(None) => {
                // A term is missing: no phrase here.
                curs.clear();
                break;
            }
            Err(e) => {
                r = Err(e);
                curs.clear();
                break;
            }
        }
    }
    if curs.is_empty() {
        s.tables = recycle(tables);
    } else {
        // The phrase's BM25 at each term's block impacts.
        let mut bounds = BlockBounds::new(&curs, std::mem::take(&mut s.bounds), tables);
        r = phrase_docs(ctx, si, &mut curs, &mut bounds, offsets, field, bm, col, s, prune);
        (s.bounds, s.tables) = bounds.into_store();
    }
    s.curs = recycle(curs);
    r
}

/// The documents of [`phrase_top_k`] over its open cursors.
#[allow(clippy::too_many_arguments)]
fn phrase_docs(
    ctx: &Ctx<'_>,
    si: usize,
    curs: &mut [PostingsCursor<'_>],
    bounds: &mut BlockBounds,
    offsets: &[u32],
    field: u16,
    bm: &Bm25Doc,
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    let seg = &ctx.segs[si];
    let fail = codec_failure(seg);
    let n = curs.len();
    let norms = norms(seg, field);
    let lead = (0..n).min_by_key(|&t| curs[t].len()).expect("a phrase has terms");
    if n == 2 {
        let shift = offsets[1].wrapping_sub(offsets[0]);
        return phrase2_newest_first(seg, curs, lead, bounds, shift, (bm, &norms), col, s, prune);
    }
    let (del, base, visible) = (seg.deletes, seg.desc.base_doc, seg.visible);
    let bufs = reset_lists(&mut s.lists, n);
    let tfs = &mut s.per_term;
    reset(tfs, n, 0);
    // The current window: docs up to `win_end` are bounded by `win_bound`.
    let (mut win_end, mut win_bound) = (0u32, f32::INFINITY);
    let reached = &mut s.reached;
    reset(reached, n, 0);
    let mut have_window = false;
    // Which docs of the lead's block `pass_block` may reach θ on their own (bit i for its i-th doc).
    let (mut pass_block, mut pass) = (u32::MAX, [0u64; 2]);
    let mut doc = 0u32;
    'docs: loop {
        let d = curs[lead].advance(doc).map_err(fail)?;
        if d >= visible {
            break;
        }
        let full = col.heap.len() >= col.cap;
        let theta = if full { col.theta() } else { f32::NEG_INFINITY };
        if prune && full {
            if !have_window || d > win_end {
                win_end = NO_DOC - 1;
                win_bound = f32::INFINITY;
                for (t, c) in curs.iter().enumerate() {
                    let b = c.shallow_block_from(reached[t].max(c.block_index()), d);
                    reached[t] = b;
                    if b >= c.block_count() {
                        return Ok(()); // a term has nothing left: no phrase from here on
                    }
                    win_end = win_end.min(c.last_doc_of(b));
                    win_bound = win_bound.min(bounds.get(t, b, c, bm, f32::INFINITY));
                }
                have_window = true;
            }
            if win_bound < theta {
                col.exact = false;
                doc = win_end.saturating_add(1);
                continue;
            }
            // The phrase occurs at most as often as its rarest term: a lead doc whose own frequency cannot
            // reach θ is passed over before any other list moves (score first, then intersect). The lead's
            // block is tested whole on entry (branch-free, without a division), against θ then (it only
            // rises, so the test stays sound); its docs that pass are visited, the others jumped over.
            let lc = &mut curs[lead];
            if lc.block_index() != pass_block {
                pass_block = lc.block_index();
                let (docs, ltfs) = lc.block_postings().map_err(fail)?;
                pass = competitive_bits((bm, &norms), (docs, ltfs), (theta, 0.0));
            }
            let i = lc.index_in_block();
            let rest = if i < 64 { [pass[0] >> i, 0] } else { [0, pass[1] >> (i - 64)] };
            let skip = if rest[0] != 0 {
                rest[0].trailing_zeros() as usize
            } else if i < 64 && pass[1] != 0 {
                64 - i + pass[1].trailing_zeros() as usize
            } else if rest[1] != 0 {
                rest[1].trailing_zeros() as usize
            } else {
                usize::MAX
            };
            if skip != 0 {
                col.exact = false;
                let (docs, _) = lc.block_postings().map_err(fail)?;
                // To the next doc that passes, or past the block.
                doc = match docs.get(i.saturating_add(skip)) {
                    Some(&next) => next,
                    None => docs[docs.len() - 1].saturating_add(1),
                };
                continue;
            }
        }
        for (t, c) in curs.iter_mut().enumerate() {
            if t == lead {
                continue;
            }
            let x = c.advance(d).map_err(fail)?;
            if x != d {
                doc = x;
                if x == NO_DOC {
                    break 'docs;
                }
                continue 'docs;
            }
        }
        doc = d + 1;
        if del.is_deleted(d) {
            continue;
        }
        for (t, c) in curs.iter_mut().enumerate() {
            tfs[t] = c.freq().map_err(fail)?;
        }
        let norm = norms.get(d);
        if prune && full {
            let least = *tfs.iter().min().expect("a phrase has terms");
            if bm.score(least as f32, norm) < theta {
                col.exact = false;
                continue;
            }
        }
        for (c, b) in curs.iter_mut().zip(bufs.iter_mut()) {
            c.positions(b).map_err(fail)?;
        }
        offer_phrase(col, (bufs, offsets), (bm, norm), theta, base + d);
    }
    Ok(())
}

/// Up to this frequency a BM25 score computed at a frequency bound is, in f32, never below the score at a
/// lower frequency (one step of tf raises the exact value by far more than the operations' rounding), so a
/// bound that only ties θ may drop an older document. Above it only bounds strictly below θ prune.
const TIE_SAFE_TF: u32 = 64;

/// Whether a document can no longer enter the full top-k when `bound` (its score's bound, at frequency
/// `tf`) is all it may score: below θ, or tying θ while older than the k-th best (the newer doc wins a tie).
#[inline]
fn cannot_enter(col: &Collector, theta: f32, bound: f32, tf: u32, doc: u32) -> bool {
    bound < theta || (bound == theta && tf <= TIE_SAFE_TF && col.heap.peek().is_some_and(|w| doc < w.0 .1))
}

/// [`phrase_docs`] of two terms: the lead's blocks newest first, as [`term_top_k`] walks, the lead's docs
/// found in the other list a block at a time ([`PostingsCursor::probe_each`]) and the positions of those it
/// has matched. Without `prune` every lead doc is looked up and every match counted. With it, once the top-k
/// is full every document still to come is older than it, so one whose bound only ties θ stays out — and
/// phrases tie a lot at θ (most occur once in a document, and lengths are quantized): in doc order
/// `"shape or"` read positions for 986 documents to find 41 matches. A lead block is skipped undecoded when
/// its phrase bound, or the other term's largest over its span, is below θ; in one that is not, only the docs
/// that pass [`competitive_bits`] and whose exact score at their own frequency can still enter are looked
/// up, and a found doc is dropped if its smaller frequency cannot enter.
#[allow(clippy::too_many_arguments)]
fn phrase2_newest_first(
    seg: &Seg<'_>,
    curs: &mut [PostingsCursor<'_>],
    lead: usize,
    bounds: &mut BlockBounds,
    shift: u32,
    (bm, norms): (&Bm25Doc, &Norms<'_>),
    col: &mut Collector,
    s: &mut Scratch,
    prune: bool,
) -> Result<()> {
    let fail = codec_failure(seg);
    let (del, base, visible) = (seg.deletes, seg.desc.base_doc, seg.visible);
    // Without `prune` (exact counts) every lead doc is looked up and every match counted.
    let full = |col: &Collector| prune && col.heap.len() >= col.cap;
    let [c0, c1] = curs else { unreachable!("two terms") };
    let (lc, oc) = if lead == 0 { (c0, c1) } else { (c1, c0) };
    let other = 1 - lead;
    let [lbuf, obuf] = reset_lists(&mut s.lists, 2) else { unreachable!("two lists") };
    let batch = &mut **s.window.get_or_insert_with(Box::default);
    let (cands, ctfs) = (&mut batch.docs, &mut block_rows(&mut s.tf_rows, 1)[0]);
    // The other list's block for the current lead block's first candidate: it only moves back.
    let mut ob = oc.block_count();
    for b in (0..lc.block_count()).rev() {
        if b > 0 && lc.last_doc_of(b - 1) >= visible {
            continue; // every doc of the block is past the reader's snapshot
        }
        if full(col) {
            let theta = col.theta();
            // The phrase occurs at most as often as either term: the lead's block bound, then the other's
            // largest over the lead block's span (its blocks there, found going back).
            let mut x = bounds.get(lead, b, lc, bm, f32::INFINITY);
            if x >= theta {
                let first = if b == 0 { 0 } else { lc.last_doc_of(b - 1) + 1 };
                let last = lc.last_doc_of(b);
                ob = oc.block_reaching(ob, first);
                let mut y = f32::NEG_INFINITY;
                let mut ib = ob;
                while ib < oc.block_count() && y < theta {
                    y = y.max(bounds.get(other, ib, oc, bm, f32::INFINITY));
                    if oc.last_doc_of(ib) >= last {
                        break;
                    }
                    ib += 1;
                }
                x = x.min(y);
            }
            if x < theta {
                col.exact = false;
                continue;
            }
        }
        lc.seek_block(b).map_err(fail)?;
        let (docs, ltfs) = lc.block_postings().map_err(fail)?;
        let to = docs.partition_point(|&d| d < visible);
        let theta = col.theta();
        let pass = if full(col) {
            competitive_bits((bm, norms), (&docs[..to], &ltfs[..to]), (theta, 0.0))
        } else {
            [u64::MAX; 2]
        };
        let mut m = 0;
        for j in 0..to {
            // Branch-free: always write, advance past a doc that passes.
            cands[m] = docs[j];
            ctfs[m] = ltfs[j];
            m += (pass[j / 64] >> (j % 64) & 1) as usize;
        }
        if full(col) && m > 0 {
            // The division-free test lets through what ties θ (it keeps a margin); those the lead's exact
            // score shows cannot enter are dropped here, before the other list is searched (scores
            // vectorized; θ only rises, so its value at the block's start is a sound bar).
            let scores = &mut batch.scores;
            bm.score_batch(norms, &cands[..m], &ctfs[..m], scores);
            let mut w = 0;
            for j in 0..m {
                cands[w] = cands[j];
                ctfs[w] = ctfs[j];
                w += !cannot_enter(col, theta, scores[j], ctfs[j], base + cands[j]) as usize;
            }
            m = w;
        }
        if m < to {
            col.exact = false;
        }
        if m == 0 {
            continue;
        }
        let from = oc.block_reaching(ob, cands[0]);
        if from >= oc.block_count() {
            continue; // the other list has nothing at or after this block's first candidate
        }
        ob = from;
        oc.seek_block(ob).map_err(fail)?;
        oc.probe_each(&cands[..m], |k, oc| {
            let d = cands[k];
            if del.is_deleted(d) {
                return Ok(());
            }
            let norm = norms.get(d);
            let theta = col.theta();
            if full(col) {
                let least = ctfs[k].min(oc.freq()?);
                if cannot_enter(col, theta, bm.score(least as f32, norm), least, base + d) {
                    col.exact = false;
                    return Ok(());
                }
            }
            // The lead's cursor to the doc (forward, inside its block), then both terms' positions.
            lc.advance(d)?;
            lc.positions(lbuf)?;
            oc.positions(obuf)?;
            let (p0, p1) = if lead == 0 { (&*lbuf, &*obuf) } else { (&*obuf, &*lbuf) };
            let freq = phrase_freq2(p0, p1, shift);
            if freq > 0 {
                col.total += 1;
                let s = bm.score(freq as f32, norm);
                if s >= theta {
                    col.push_score(Entry(s, base + d));
                }
            }
            Ok(())
        })
        .map_err(fail)?;
    }
    Ok(())
}

const _: () = assert!(BLOCK_LEN.is_power_of_two());

/// Keeps the postings (at most a block) whose own BM25 plus `rest` (the other terms' bounds) can reach
/// `theta` ([`competitive_bits`]), writing them in order to `out_docs`/`out_tfs`, and returns how many.
fn keep_competitive(
    (bm, norms): (&Bm25Doc, &Norms<'_>),
    (docs, tfs): (&[u32], &[u32]),
    (theta, rest): (f32, f32),
    (kd, kt): (&mut [u32; BLOCK_LEN], &mut [u32; BLOCK_LEN]),
) -> usize {
    let n = docs.len();
    assert!(n <= BLOCK_LEN && tfs.len() >= n);
    // Two passes: the tests into a bit set (no store whose address depends on an earlier test, so the
    // postings' lookups overlap freely), then the kept postings moved out in order.
    let mut m = 0;
    for (w, mut bits) in competitive_bits((bm, norms), (docs, tfs), (theta, rest)).into_iter().enumerate() {
        while bits != 0 {
            let i = w * 64 + bits.trailing_zeros() as usize;
            // m < n <= BLOCK_LEN: the mask changes nothing.
            kd[m & (BLOCK_LEN - 1)] = docs[i];
            kt[m & (BLOCK_LEN - 1)] = tfs[i];
            m += 1;
            bits &= bits - 1;
        }
    }
    m
}

/// Which of the postings (at most a block; bit `i` of the two words for posting `i`) may score, on their
/// own plus `rest` (the other terms' bounds), `theta` or more. `idf·tf / (tf + D) ≥ need` is tested as
/// `tf·(idf − need) ≥ need·D` (no division) with each posting's own length term `D`, and `need = θ − rest`
/// lowered by [`FILTER_SLACK`] of the sums' magnitude, so rounding never drops a document whose exact score
/// sum reaches θ (that check follows). Branch-free, one test per posting: a first pass on frequencies alone
/// against the block's shortest length let most postings of common terms through (78% on `+may +their`).
/// For [`LIMITS_MIN`] postings or more the test is turned around once per call: the least frequency that
/// reaches `need` at each of the 256 norms ([`simd::tf_limits`], `⌈need·D / (idf − need)⌉`, the same
/// inequality solved for `tf`), then per posting one integer compare of its frequency with its norm's
/// threshold ([`simd::at_least_in_column`]: 16 norms gathered and 64 postings compared per instruction
/// where the CPU has AVX-512; AndHighHigh −10%, AndMedMed −18% on the enwiki index, alternated loops).
fn competitive_bits(
    (bm, norms): (&Bm25Doc, &Norms<'_>),
    (docs, tfs): (&[u32], &[u32]),
    (theta, rest): (f32, f32),
) -> [u64; 2] {
    let n = docs.len().min(tfs.len()).min(BLOCK_LEN);
    let (docs, tfs) = (&docs[..n], &tfs[..n]);
    // What the posting itself must score, lowered by a margin relative to the sums' magnitude.
    let need = theta - rest - (theta.abs() + rest.abs()) * FILTER_SLACK;
    if need.is_nan() || need <= 0.0 {
        // Anything competes (or θ is not a number yet).
        return [low_bits(n.min(64)), low_bits(n.saturating_sub(64))];
    }
    let gap = bm.idf - need;
    let denom = &bm.lengths.denom;
    if n >= LIMITS_MIN && gap > 0.0 {
        // A frequency threshold per norm, then one integer test per posting (16 or 64 at a time where the
        // CPU has wide vectors): the norms gathered first, so nothing waits on a float per posting.
        let limits = simd::tf_limits(need, gap, denom);
        if let Norms::Image(col) = norms {
            return simd::at_least_in_column(docs, tfs, col, &limits, n);
        }
        let mut nb = [0u8; BLOCK_LEN];
        nb.iter_mut().zip(docs).for_each(|(b, &d)| *b = norms.get(d));
        return simd::at_least(tfs, &nb, &limits, n);
    }
    match norms {
        Norms::Image(col) => bits_by(docs, tfs, (gap, need, denom), |d| norm_at(col, d)),
        _ => bits_by(docs, tfs, (gap, need, denom), |d| norms.get(d)),
    }
}

/// [`competitive_bits`] tests at least this many postings through per-norm frequency thresholds
/// ([`simd::tf_limits`]: 256 of them, worth it for a block, not for a window of a few postings).
const LIMITS_MIN: usize = 32;

/// [`competitive_bits`]' loop for one kind of norms (monomorphized: the column read inlines); the set's two
/// words stay in registers.
#[inline(always)]
fn bits_by(
    docs: &[u32],
    tfs: &[u32],
    (gap, need, denom): (f32, f32, &[f32; NORM_VALUES]),
    norm: impl Fn(u32) -> u8,
) -> [u64; 2] {
    let n = docs.len().min(tfs.len()).min(BLOCK_LEN);
    let (docs, tfs) = (&docs[..n], &tfs[..n]);
    simd::bits_where(n, |i| tfs[i] as f32 * gap >= need * denom[norm(docs[i]) as usize])
}

/// Relative margin of [`keep_competitive`]'s threshold: far above the few ulps by which float sums of a
/// handful of scores differ with their order, far below what would keep many more documents.
const FILTER_SLACK: f32 = 1e-4;

/// Newest first without an exact count, on an image: windows of doc ids from the segment's end (512 docs,
/// then four times more each time), each reached with `advance` over the skip data, until the hits still
/// wanted are found — the newest k of a common term cost a few blocks, not the whole list. (A fresh segment
/// has no skip data; it is read forward once.)
fn newest_backwards(ctx: &Ctx<'_>, w: &Weight, si: usize, col: &mut Collector) -> Result<()> {
    let seg = &ctx.segs[si];
    let room = col.cap.saturating_sub(col.newest.len());
    if room == 0 {
        return Ok(());
    }
    let (del, base) = (seg.deletes, seg.desc.base_doc);
    let (mut hi, mut width) = (seg.visible, 512u32);
    let mut window: Vec<u32> = vec![];
    while hi > 0 && col.newest.len() < col.cap {
        let lo = hi.saturating_sub(width);
        let mut s = scorer(w, ctx, si);
        let mut d = s.advance(lo);
        window.clear();
        while d != NO_DOC && d < hi {
            if !del.is_deleted(d) {
                window.push(base + d);
            }
            d = s.next();
        }
        if let Some(e) = ctx.err.borrow_mut().take() {
            return Err(Error::Format(format!("segment {}: {}", seg.desc.id, e.0)));
        }
        col.total += window.len() as u64;
        let want = col.cap - col.newest.len();
        col.newest.extend(window.iter().rev().take(want));
        hi = lo;
        width = width.saturating_mul(4);
    }
    if hi > 0 {
        col.exact = false;
    }
    Ok(())
}

fn field_entry(value: Option<f64>, descending: bool, doc: u32) -> FieldEntry {
    let key = value.map_or(0.0, |v| if descending { -v } else { v });
    FieldEntry { missing: value.is_none(), key, doc, value }
}

/// How many documents of each segment of `snap` are visible now: watermarks to evaluate several queries
/// at ([`matching_docs`], [`execute_at`]) so that they all see the same documents while the writer adds.
pub fn watermarks(snap: &Snapshot) -> Watermarks {
    snap.segments.iter().map(|s| s.visible_docs()).collect()
}

/// Every live document of `snap` that `node` matches (at `marks`; `None`: the current watermarks), as doc
/// ids in ascending order: the document set aggregations bucket. Exhaustive: the scorers visit every match
/// (no threshold, no top-k), and scores are not computed.
pub fn matching_docs(snap: &Snapshot, node: &Node, marks: Option<&[u32]>) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    each_match(snap, node, (Bm25::default(), None), marks, false, |d, _| out.push(d))?;
    Ok(out)
}

/// [`matching_docs`] with each match's score, as [`execute`] computes it under `bm25` and the index-wide
/// `stats` (a sharded index's; `None`: this snapshot's own): the candidates of a sort over several keys,
/// which orders every match.
pub fn scored_matches(
    snap: &Snapshot,
    node: &Node,
    bm25: Bm25,
    stats: Option<&CollectionStats>,
    marks: Option<&[u32]>,
) -> Result<Vec<ScoredDoc>> {
    let mut out = Vec::new();
    each_match(snap, node, (bm25, stats), marks, true, |doc, score| {
        out.push(ScoredDoc { doc, score, sort_value: None })
    })?;
    Ok(out)
}

/// Calls `f` with every live match of `node` in doc order, and its score when `score` (else 0).
fn each_match(
    snap: &Snapshot,
    node: &Node,
    (bm25, stats): (Bm25, Option<&CollectionStats>),
    marks: Option<&[u32]>,
    score: bool,
    mut f: impl FnMut(u32, f32),
) -> Result<()> {
    let mut ctx = Ctx::new(snap, bm25, stats, marks)?;
    let w = weight(node, &mut ctx)?;
    let ctx = ctx;
    let mut last = None;
    for (si, seg) in ctx.segs.iter().enumerate() {
        if seg.visible == 0 {
            continue;
        }
        let (del, base) = (seg.deletes, seg.desc.base_doc);
        let mut s = scorer(&w, &ctx, si);
        let mut d = s.doc();
        while d != NO_DOC && d < seg.visible {
            if !del.is_deleted(d) {
                debug_assert!(last < Some(base + d), "segments follow each other in doc ids");
                last = Some(base + d);
                f(base + d, if score { s.score() } else { 0.0 });
            }
            d = s.next();
        }
        if let Some(e) = ctx.err.borrow_mut().take() {
            return Err(Error::Format(format!("segment {}: {}", seg.desc.id, e.0)));
        }
    }
    Ok(())
}

/// Evaluates a planned query on a pinned snapshot.
pub fn execute(snap: &Snapshot, node: &Node, opts: &SearchOptions) -> Result<SearchHits> {
    execute_cached(snap, node, opts, None)
}

/// Candidates a new cache entry keeps for a query asking for `k` hits: enough slack that the statistics of a
/// growing index rarely push a left-out document into the top k.
fn cache_capacity(k: usize) -> usize {
    if k == 0 {
        0
    } else {
        k.saturating_mul(2).max(k.saturating_add(32))
    }
}

/// A hit on an entry whose coverage is followed by more than this many sealed segments runs the query in
/// full instead, so the entry is replaced by one that covers them (SPIRIT notes that old entries otherwise
/// leave ever more segments to compute).
const MAX_UNCOVERED_SEALED: usize = 8;

/// [`execute`] with the result cache: the sealed prefix of the snapshot is answered from `cache` when it
/// holds an entry for the query that can be proven exact, and the answer is stored there otherwise.
pub fn execute_cached(
    snap: &Snapshot,
    node: &Node,
    opts: &SearchOptions,
    cache: Option<&ResultCache>,
) -> Result<SearchHits> {
    execute_at(snap, node, opts, cache, None)
}

/// [`execute_cached`] at the watermarks [`collection_stats`] returned (`None`: the current ones).
pub fn execute_at(
    snap: &Snapshot,
    node: &Node,
    opts: &SearchOptions,
    cache: Option<&ResultCache>,
    marks: Option<&[u32]>,
) -> Result<SearchHits> {
    let mut ctx = Ctx::new(snap, opts.bm25, opts.stats.as_deref(), marks)?;
    let w = weight(node, &mut ctx)?;
    let ctx = ctx;
    let k = opts.limit.saturating_add(opts.offset);
    // The sealed prefix: images never change except for delete bits.
    let sealed = ctx.segs.iter().take_while(|s| matches!(s.kind, SegKind::Image(_))).count();
    let Some(cache) = cache.filter(|c| c.enabled() && sealed > 0 && work(&w, &ctx) >= c.min_work()) else {
        return Ok(run(&ctx, &w, opts, k, None)?.0);
    };
    let key = format!("{:?}|{:?}|{:?}", opts.sort, opts.bm25, node);
    match cache.get(&key) {
        Some(e)
            if matches!(w, Weight::Term { .. })
                && opts.sort == Sort::Score
                && ctx.segs[sealed..].iter().any(|s| s.visible > 0)
                && {
                    let mut now = vec![];
                    leaves(&w, &mut now);
                    rescores(&now, coverage(&ctx, &e), &e)
                } =>
        {
            // A single term's entry whose scores moved with the statistics, on an index taking documents
            // (fresh documents): re-scoring its candidates reads as many blocks as block-max reads to answer the
            // term afresh (live HighTerm: 25 µs a hit against 18 uncached), and the statistics move again
            // with the next documents, so it is answered uncached and nothing is stored. Once every document
            // is sealed, the entry is re-scored or replaced as any other.
            cache.record_stale();
            return Ok(run(&ctx, &w, opts, k, None)?.0);
        }
        Some(e) => {
            if let Some(h) = from_cache(&ctx, &w, opts, k, &e, sealed)? {
                if settled(&ctx.segs[..sealed]) {
                    cache.record_hit();
                    return Ok(h);
                }
            }
            cache.record_stale();
        }
        None => cache.record_miss(),
    }
    let (hits, entry) = run(&ctx, &w, opts, k, Some(sealed))?;
    if let Some(e) = entry.filter(|_| settled(&ctx.segs[..sealed])) {
        cache.put(&key, e);
    }
    Ok(hits)
}

/// Whether the evaluation saw every set bit of `segs` as a delete (no delete racing with it was hidden from
/// its snapshot; [`crate::segment::deletes`]). Cache entries are made and used only then: they count deletes
/// by set bits. Checked after the evaluation (a delete hidden once is hidden from then on).
fn settled(segs: &[Seg<'_>]) -> bool {
    segs.iter().all(|s| s.deletes.settled())
}

/// Documents and deleted documents in `segs`.
fn coverage_counts(segs: &[Seg<'_>]) -> (u64, u64) {
    segs.iter().fold((0, 0), |(n, d), s| (n + s.desc.doc_count as u64, d + s.deletes.count() as u64))
}

/// The (idf, avgdl) of every scoring leaf, in plan order.
fn leaves(w: &Weight, out: &mut Vec<(f32, f32)>) {
    match w {
        Weight::Term { idf, avgdl, .. } | Weight::Phrase { idf, avgdl, .. } => out.push((*idf, *avgdl)),
        Weight::Bool { must, should, must_not, filter } => {
            for c in must.iter().chain(should).chain(must_not).chain(filter) {
                leaves(c, out);
            }
        }
        Weight::DisMax(v, _) | Weight::AtLeast { of: v, .. } => v.iter().for_each(|c| leaves(c, out)),
        _ => {}
    }
}

/// How much any document's score can have grown from the statistics of `old` to those of `new`: a BM25 term
/// contributes `idf · tf / (tf + k1·(1 − b + b·dl/avgdl))`, which scales by the idf ratio and — when avgdl
/// grows — by at most `avgdl_new / avgdl_old`; sums and maxima of non-negative contributions grow by at most
/// the largest factor. `None`: the leaves do not correspond.
fn growth(old: &[(f32, f32)], new: &[(f32, f32)]) -> Option<f64> {
    if old.len() != new.len() {
        return None;
    }
    let mut f = 1.0f64;
    for (&(i0, a0), &(i1, a1)) in old.iter().zip(new) {
        if !(i0 > 0.0 && a0 > 0.0) {
            return None;
        }
        let r = (i1 as f64 / i0 as f64) * (a1 as f64 / a0 as f64).max(1.0);
        f = f.max(r);
    }
    Some(f)
}

/// Runs the query over every segment. With `cover = Some(sealed)` it also returns a cache entry for the
/// first `sealed` segments (collected with a larger capacity, then trimmed to `k` for the answer).
fn run(
    ctx: &Ctx<'_>,
    w: &Weight,
    opts: &SearchOptions,
    k: usize,
    cover: Option<usize>,
) -> Result<(SearchHits, Option<CachedResult>)> {
    let n = ctx.segs.len();
    let capacity = cache_capacity(k);
    let mut col = Collector::new(opts.sort, k);
    let mut entry = None;
    let counts = cover.map(|c| coverage_counts(&ctx.segs[..c]));
    let mut leaf_stats = vec![];
    leaves(w, &mut leaf_stats);
    let make = |cands: Vec<ScoredDoc>, count: u64, count_exact: bool, sealed: usize| {
        let (docs, deleted) = counts.unwrap_or_default();
        let boundary = if cands.len() < capacity {
            Boundary::Complete
        } else {
            match (opts.sort, cands.last()) {
                (Sort::Score, Some(l)) => Boundary::Score(l.score, l.doc),
                (Sort::Field { descending, .. }, Some(l)) => {
                    let e = field_entry(l.sort_value, descending, l.doc);
                    Boundary::Field { missing: e.missing, key: e.key, doc: e.doc }
                }
                _ => Boundary::Older,
            }
        };
        CachedResult {
            upto_id: ctx.segs[sealed - 1].desc.id,
            segments: sealed,
            docs,
            deleted,
            count,
            count_exact,
            capacity,
            boundary,
            leaves: leaf_stats.clone(),
            values: match opts.sort {
                Sort::Field { .. } => cands.iter().map(|c| c.sort_value).collect(),
                _ => vec![],
            },
            scores: match opts.sort {
                Sort::Score => cands.iter().map(|c| c.score).collect(),
                _ => vec![],
            },
            docs_in_order: cands.into_iter().map(|c| c.doc).collect(),
        }
    };
    match opts.sort {
        Sort::Score | Sort::Field { .. } => {
            if cover.is_some() {
                col.cap = capacity;
            }
            for si in 0..n {
                if cover == Some(si) {
                    entry = Some(make(col.ranked(), col.total, opts.track_total && col.exact, si));
                    col.shrink(k);
                }
                eval_segment(ctx, w, si, &mut col, opts)?;
            }
            if cover == Some(n) {
                entry = Some(make(col.ranked(), col.total, opts.track_total && col.exact, n));
                col.shrink(k);
            }
        }
        Sort::Newest => {
            let sealed = cover.unwrap_or(0);
            let (mut mark, mut total_before, mut covered) = (0, 0, false);
            for si in (0..n).rev() {
                if !opts.track_total && col.newest.len() >= col.cap.max(k) {
                    // Enough hits: older segments cannot contribute. (Before the sealed prefix: nothing to
                    // cache either; inside it: the entry has its `capacity` candidates.)
                    col.exact = false;
                    break;
                }
                if cover.is_some() && si + 1 == sealed {
                    (mark, total_before, covered) = (col.newest.len(), col.total, true);
                    col.cap = mark + capacity;
                }
                eval_segment(ctx, w, si, &mut col, opts)?;
            }
            if covered {
                let cands = col.ranked()[mark..].to_vec();
                let count_exact = opts.track_total && col.exact;
                entry = Some(make(cands, col.total - total_before, count_exact, sealed));
            }
            col.shrink(k);
        }
    }
    Ok((col.finish(opts.offset), entry))
}

/// Whether answering a score-ordered query from entry `e` re-scores its candidates: the statistics moved
/// since it was made, or a compaction inside its coverage changed the scorers' clause order (see
/// [`from_cache`]).
/// `now`: the query's leaves today ([`leaves`]); `cov`: the segments the entry covers today ([`coverage`]).
fn rescores(now: &[(f32, f32)], cov: usize, e: &CachedResult) -> bool {
    !(now == e.leaves && (cov == e.segments || now.is_empty()))
}

/// How many of the snapshot's segments (a prefix) entry `e` covers.
fn coverage(ctx: &Ctx<'_>, e: &CachedResult) -> usize {
    ctx.segs.partition_point(|s| s.desc.id <= e.upto_id)
}

/// Answers from a cache entry plus the segments newer than its coverage, or `None` when the entry cannot
/// give an exact answer.
fn from_cache(
    ctx: &Ctx<'_>,
    w: &Weight,
    opts: &SearchOptions,
    k: usize,
    e: &CachedResult,
    sealed: usize,
) -> Result<Option<SearchHits>> {
    if e.capacity < k {
        return Ok(None);
    }
    let n = ctx.segs.len();
    let cov = coverage(ctx, e);
    if cov > sealed || sealed - cov > MAX_UNCOVERED_SEALED {
        return Ok(None);
    }
    let (docs, deleted) = coverage_counts(&ctx.segs[..cov]);
    if docs != e.docs {
        // Retention dropped covered documents, or a compaction crossed the coverage's end.
        return Ok(None);
    }
    if deleted < e.deleted {
        // A query pinned before deletes the entry already reflects (compaction copied the bitmaps, so an
        // older snapshot can see fewer): the entry left out documents this snapshot still has.
        return Ok(None);
    }
    let counts_valid = e.count_exact && deleted == e.deleted;
    if opts.track_total && !counts_valid {
        return Ok(None);
    }
    let seg_index = |doc: u32| ctx.segs[..cov].partition_point(|s| s.desc.base_doc <= doc).checked_sub(1);
    let alive = |doc: u32| {
        seg_index(doc).is_some_and(|si| {
            let s = &ctx.segs[si];
            doc - s.desc.base_doc < s.visible && !s.deletes.is_deleted(doc - s.desc.base_doc)
        })
    };
    let mut col = Collector::new(opts.sort, k);
    let mut live_cands = 0u64;
    match opts.sort {
        Sort::Score => {
            let mut now = vec![];
            leaves(w, &mut now);
            let same_scores = !rescores(&now, cov, e);
            if same_scores {
                // Same statistics and the same segments (a compaction inside the coverage changes the
                // scorers' clause order, hence the f32 sums — unless no clause scores by BM25: sums of the
                // constants 0 and 1 are exact in any order): the cached scores are today's, bit for bit.
                for (&doc, &score) in e.docs_in_order.iter().zip(&e.scores) {
                    if alive(doc) {
                        live_cands += 1;
                        col.push_score(Entry(score, doc));
                    }
                }
            } else {
                let Some(n) = rescore(ctx, w, e, cov, &mut col)? else { return Ok(None) };
                live_cands = n;
            }
            for si in cov..n {
                eval_segment(ctx, w, si, &mut col, opts)?;
            }
            if let (Boundary::Score(theta, bdoc), true) = (e.boundary, k > 0) {
                let exact = if same_scores {
                    // Same statistics: scores are bit-identical to the entry's, so every left-out document
                    // ranks below the entry's last candidate.
                    col.heap.len() >= k && col.heap.peek().is_some_and(|t| t.0 >= Entry(theta, bdoc))
                } else {
                    let Some(f) = growth(&e.leaves, &now) else { return Ok(None) };
                    let bound = theta as f64 * f * (1.0 + 1e-4) + 1e-12;
                    col.heap.len() >= k && col.theta() as f64 > bound
                };
                if !exact {
                    return Ok(None);
                }
            }
        }
        Sort::Newest => {
            for si in (cov..n).rev() {
                if !opts.track_total && col.newest.len() >= k {
                    col.exact = false;
                    break;
                }
                eval_segment(ctx, w, si, &mut col, opts)?;
            }
            for &doc in &e.docs_in_order {
                if col.newest.len() >= k {
                    break;
                }
                if alive(doc) {
                    live_cands += 1;
                    col.newest.push(doc);
                }
            }
            if col.newest.len() < k && e.boundary != Boundary::Complete {
                return Ok(None);
            }
        }
        Sort::Field { descending, .. } => {
            for (&doc, &value) in e.docs_in_order.iter().zip(&e.values) {
                if alive(doc) {
                    live_cands += 1;
                    col.push_field(field_entry(value, descending, doc));
                }
            }
            for si in cov..n {
                eval_segment(ctx, w, si, &mut col, opts)?;
            }
            if let (Boundary::Field { missing, key, doc }, true) = (e.boundary, k > 0) {
                let b = FieldEntry { missing, key, doc, value: None };
                if col.by_field.len() < k || col.by_field.peek().is_some_and(|worst| *worst >= b) {
                    return Ok(None);
                }
            }
        }
    }
    if counts_valid {
        col.total += e.count;
    } else {
        col.total += live_cands;
        col.exact = false;
    }
    Ok(Some(col.finish(opts.offset)))
}

/// Scores the live candidates of `e` under today's statistics into `col`, segment by segment in doc order;
/// returns how many there were (`None` if a candidate no longer matches, which an immutable segment cannot
/// do: the entry is refused rather than trusted).
fn rescore(
    ctx: &Ctx<'_>,
    w: &Weight,
    e: &CachedResult,
    cov: usize,
    col: &mut Collector,
) -> Result<Option<u64>> {
    let mut cands = e.docs_in_order.clone();
    cands.sort_unstable();
    let mut live = 0;
    let mut i = 0;
    while i < cands.len() {
        let Some(si) = ctx.segs[..cov].partition_point(|s| s.desc.base_doc <= cands[i]).checked_sub(1) else {
            return Ok(None);
        };
        let seg = &ctx.segs[si];
        let end = seg.desc.base_doc + seg.visible;
        let mut s = scorer(w, ctx, si);
        while i < cands.len() && cands[i] < end {
            let (doc, d) = (cands[i], cands[i] - seg.desc.base_doc);
            i += 1;
            if seg.deletes.is_deleted(d) {
                continue;
            }
            if s.advance(d) != d {
                debug_assert!(false, "cached doc {doc} no longer matches");
                return Ok(None);
            }
            live += 1;
            col.push_score(Entry(s.score(), doc));
        }
        if let Some(err) = ctx.err.borrow_mut().take() {
            return Err(Error::Format(format!("segment {}: {}", seg.desc.id, err.0)));
        }
    }
    Ok(Some(live))
}

/// Estimated cost of evaluating `w` over the whole snapshot: postings of its terms (positions count twice
/// for phrases), documents scanned for match-all, ranges and exists.
fn work(w: &Weight, ctx: &Ctx<'_>) -> u64 {
    let df = |k: &Vec<u8>| ctx.terms.get(k).map_or(0, |t| t.df);
    let docs = || ctx.segs.iter().map(|s| s.visible as u64).sum::<u64>();
    match w {
        Weight::Nothing => 0,
        Weight::Term { key, .. } => df(key),
        Weight::Phrase { keys, last, .. } => keys.iter().chain(last).map(|k| 2 * df(k)).sum(),
        Weight::TermSet { keys, .. } => keys.iter().map(df).sum(),
        Weight::All | Weight::Exists { .. } | Weight::Range { .. } => docs(),
        Weight::Ids(ids) => ids.len() as u64 * ctx.segs.len() as u64,
        Weight::Bool { must, should, must_not, filter } => {
            must.iter().chain(should).chain(must_not).chain(filter).map(|c| work(c, ctx)).sum()
        }
        Weight::DisMax(v, _) => v.iter().map(|c| work(c, ctx)).sum(),
        Weight::Scaled(w, _) => work(w, ctx),
        Weight::AtLeast { of, .. } => of.iter().map(|c| work(c, ctx)).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sloppy frequency of a phrase of `n` distinct terms at offsets `0..n` from each term's positions.
    fn sloppy(bufs: &[Vec<u32>], slop: u32) -> f32 {
        let keys: Vec<Vec<u8>> = (0..bufs.len()).map(|t| vec![t as u8]).collect();
        let offsets: Vec<u32> = (0..bufs.len() as u32).collect();
        Sloppy::new(&keys, &[], slop).freq(bufs, &offsets)
    }

    #[test]
    fn sloppy_phrase_lengths_are_lucenes() {
        // "a b"~1 on `a x b`: one move, ½.
        assert_eq!(sloppy(&[vec![0], vec![2]], 1), 0.5);
        // "a b"~1 on `b a`: a transposition is two moves.
        assert_eq!(sloppy(&[vec![1], vec![0]], 1), 0.0);
        assert_eq!(sloppy(&[vec![1], vec![0]], 2), 1.0 / 3.0);
        // The exact phrase is length 0: 1, as an exact phrase counts it.
        assert_eq!(sloppy(&[vec![4], vec![5]], 3), 1.0);
        // Two matches in one document, `a b x x x a x b`: 1 + ½.
        assert_eq!(sloppy(&[vec![0, 5], vec![1, 7]], 1), 1.5);
        // Too far apart.
        assert_eq!(sloppy(&[vec![0], vec![9]], 3), 0.0);
        // "a b c"~2 on `a x b c`: b and c one move from a.
        assert_eq!(sloppy(&[vec![0], vec![2], vec![3]], 2), 0.5);
        // A repeated term never uses one position twice: "a a"~1 on a single `a` is no match, on `a x a`
        // one move (½).
        let rep = |pos: Vec<u32>, slop| {
            Sloppy::new(&[vec![7], vec![7]], &[], slop).freq(&[pos.clone(), pos], &[0, 1])
        };
        assert_eq!(rep(vec![3], 5), 0.0);
        assert_eq!(rep(vec![3, 5], 1), 0.5);
        assert_eq!(rep(vec![3, 4], 1), 1.0);
    }

    proptest! {
        /// A document matches a sloppy phrase of distinct terms exactly when some choice of one position
        /// per term spreads their phrase positions (position less offset) over at most the slop (brute
        /// force over every choice); the frequency never exceeds the bound pruning relies on, and slop 0
        /// counts what the exact phrase counts.
        #[test]
        fn sloppy_phrase_matches_iff_a_window_fits(
            bufs in prop::collection::vec(prop::collection::btree_set(0u32..24, 1..5), 2..4),
            slop in 0u32..6,
        ) {
            let bufs: Vec<Vec<u32>> = bufs.into_iter().map(|s| s.into_iter().collect()).collect();
            let n = bufs.len();
            let mut best = i64::MAX;
            let mut pick = vec![0usize; n];
            'all: loop {
                let pp: Vec<i64> = (0..n).map(|t| bufs[t][pick[t]] as i64 - t as i64).collect();
                best = best.min(pp.iter().max().unwrap() - pp.iter().min().unwrap());
                for t in 0..n {
                    pick[t] += 1;
                    if pick[t] < bufs[t].len() {
                        continue 'all;
                    }
                    pick[t] = 0;
                }
                break;
            }
            let f = sloppy(&bufs, slop);
            prop_assert_eq!(f > 0.0, best <= slop as i64, "best spread {}", best);
            prop_assert!(f <= Sloppy::freq_bound(bufs.iter().map(|b| b.len() as u32)));
            let offsets: Vec<u32> = (0..n as u32).collect();
            if slop == 0 {
                prop_assert_eq!(f, phrase_freq(&bufs, &offsets) as f32);
            }
        }
    }

    proptest! {
        /// A block-bound table made at a grid cell's average length bounds, times the idf, every posting's
        /// score at every average length in that cell, whatever the impacts: the tables of pinned lists
        /// never prune a document that could compete.
        #[test]
        fn table_bounds_hold_across_their_grid_cell(
            avgdl in 0.5f32..5000.0,
            k1 in 0.0f32..3.0,
            b in 0.0f32..1.0,
            idf in 0.01f32..20.0,
            imp in proptest::collection::vec((1u32..200, 1u32..100_000), 1..=IMPACTS),
            below in 0.0f32..0.006,
        ) {
            let bm25 = Bm25 { k1, b };
            let (key, grid) = Bm25Doc::new(idf, bm25, avgdl).lengths.grid_cell.unwrap();
            prop_assert!(grid >= avgdl);
            // The table's value for a block with these impacts.
            let mut impacts: Impacts = [(0, u32::MAX); IMPACTS];
            for (slot, &(tf, dl)) in impacts.iter_mut().zip(&imp) {
                *slot = (tf, crate::codec::quantized_length(dl));
            }
            let value = Bm25Doc::new(1.0, bm25, grid).impacts_bound(&impacts);
            // Queries at this average length and at any lower one of the same cell.
            for a in [avgdl, avgdl * (1.0 - below)] {
                let q = Bm25Doc::new(idf, bm25, a);
                if q.lengths.grid_cell.map(|(k, _)| k) != Some(key) {
                    continue;
                }
                let bound = q.bound_from_table(value);
                for &(tf, dl) in &impacts {
                    let s = q.score(tf as f32, encode_norm(dl));
                    prop_assert!(tf == 0 || s <= bound, "score {s} above bound {bound} (tf {tf}, dl {dl}, avgdl {a})");
                }
            }
        }

        /// Packed impacts bound exactly what their unpacked form bounds (the fresh segment's regions are
        /// bounded from the packed words), unused entries and saturated frequencies included.
        #[test]
        fn packed_bounds_equal_unpacked_ones(
            avgdl in 0.5f32..5000.0,
            k1 in 0.0f32..3.0,
            b in 0.0f32..1.0,
            idf in 0.01f32..20.0,
            imp in proptest::collection::vec((1u32..(1 << 25), 0u32..u32::MAX), 0..=IMPACTS),
        ) {
            let bm = Bm25Doc::new(idf, Bm25 { k1, b }, avgdl);
            let mut packed: PackedImpacts = [0; IMPACTS];
            for (slot, &(tf, dl)) in packed.iter_mut().zip(&imp) {
                *slot = crate::codec::pack_impact((tf, crate::codec::quantized_length(dl)));
            }
            let unpacked: Impacts = packed.map(crate::codec::unpack_impact);
            let (a, u) = (bm.packed_bound(&packed), bm.impacts_bound(&unpacked));
            prop_assert_eq!(a.to_bits(), u.to_bits(), "{:?}", unpacked);
        }
    }

    #[test]
    fn grid_cells_are_keyed_by_parameters() {
        let bm = |k1, b, a| Bm25Doc::new(1.0, Bm25 { k1, b }, a).lengths.grid_cell.unwrap();
        assert_eq!(bm(1.2, 0.75, 100.0).0, bm(1.2, 0.75, 100.1).0, "one cell");
        assert_ne!(bm(1.2, 0.75, 100.0).0, bm(1.2, 0.75, 101.0).0, "0.54% apart");
        assert_ne!(bm(1.2, 0.75, 100.0).0, bm(1.3, 0.75, 100.0).0);
        assert_ne!(bm(1.2, 0.75, 100.0).0, bm(1.2, 0.7, 100.0).0);
        assert!(Bm25Doc::new(1.0, Bm25 { k1: 1.2, b: 0.75 }, 0.0).lengths.grid_cell.is_none());
    }

    /// The length terms a thread keeps are those of their own (k1, b, average length): a recent key gets
    /// the same table back, and whatever the order of requests (more keys than are kept included), every
    /// table equals one made afresh for its key.
    #[test]
    fn length_terms_are_shared_per_key_and_always_right() {
        let keys =
            [(1.2, 0.75, 100.0), (1.2, 0.75, 100.5), (0.0, 0.75, 7.0), (2.0, 1.0, 3.5), (1.2, 0.3, 100.0)];
        let a = LengthTerms::of(Bm25 { k1: 1.2, b: 0.75 }, 100.0);
        let b = LengthTerms::of(Bm25 { k1: 1.2, b: 0.75 }, 100.0);
        assert!(Arc::ptr_eq(&a, &b), "a recent key is shared");
        for round in 0..3 {
            for (i, &(k1, b, avgdl)) in keys.iter().enumerate().chain(keys.iter().enumerate().rev()) {
                let bm25 = Bm25 { k1, b };
                let got = LengthTerms::of(bm25, avgdl);
                let want = LengthTerms::new(bm25, avgdl);
                let bits = |t: &LengthTerms| t.denom.map(f32::to_bits);
                assert_eq!(bits(&got), bits(&want), "round {round}, key {i}");
                assert_eq!(got.grid_cell, want.grid_cell, "round {round}, key {i}");
            }
        }
    }
}
