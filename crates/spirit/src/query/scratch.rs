//! Scratch: the buffers of the image fast paths, reused so that evaluating a query allocates nothing on its
//! hot path (issue 4, Build 7).
//!
//! The fast paths of `eval` (single terms, conjunctions, disjunctions and phrases of terms on image
//! segments) need per-term cursors, block bounds, candidate batches, score rows and intersection tables. They
//! used to allocate them per segment — a few dozen allocations per segment, some of them large (a
//! disjunction's score rows are 16 KB per term). Now one [`Scratch`] serves every segment of a query, and a
//! per-thread pool hands it to the next query on the thread: once its buffers have grown to a query's size,
//! the per-segment, per-block and per-posting work allocates nothing. What a query still allocates is its
//! setup (parsing, planning, weights, term resolution) and its answer — a number of small objects that
//! depends on the query's terms, never on the segments or postings it reads (`tests/alloc.rs` measures it).
//!
//! The pool keeps one scratch per thread (a nested query on the same thread gets a fresh one), and drops
//! buffers that grew past [`KEEP_BYTES`] each, so a rare huge query does not pin its memory in a thread forever.

use super::eval::{Bm25Doc, FreshRegion, Norms, TfMarks, WindowBuf};
use crate::codec::PostingsCursor;
use crate::codec::{BLOCK, MARKS_SPAN};
use crate::segment::hot::BlockTable;
use std::cell::Cell;
use std::sync::Arc;

/// A buffer whose capacity exceeds this many bytes is dropped when its scratch goes back to the pool (per
/// buffer: the per-term lists are buffers each, so a many-term query may keep up to this much per term).
pub(super) const KEEP_BYTES: usize = 1 << 20;

/// Every reusable buffer of the fast paths. Each fast path takes what it needs and leaves the rest; the
/// names say what the buffers hold in the conjunction, the disjunction and the phrase.
#[derive(Default)]
pub(super) struct Scratch {
    /// Per term: its cursor, its norms and BM25 (kept empty between uses; see [`recycle`]).
    pub curs: Vec<PostingsCursor<'static>>,
    pub scoring: Vec<(Norms<'static>, &'static Bm25Doc)>,
    /// Per term: its block bounds (filled lazily) and its bound over the whole list.
    pub bounds: Vec<Vec<f32>>,
    pub ubs: Vec<f32>,
    /// Per term: its pinned list's block-bound table (kept empty between uses, like the cursors).
    pub tables: Vec<Option<Arc<BlockTable>>>,
    /// Per term: its bound over the current window.
    pub window_bounds: Vec<f32>,
    /// Terms in processing order.
    pub order: Vec<usize>,
    /// Per term: the skip-table block the windows have reached.
    pub reached: Vec<u32>,
    /// Per term: whether it is essential in the current MaxScore window.
    pub essential: Vec<bool>,
    /// Candidate docs (the conjunction's, the disjunction's survivors).
    pub cand: Vec<u32>,
    /// Per term, one list: the conjunction's candidate frequencies, the phrase's positions.
    pub lists: Vec<Vec<u32>>,
    /// Per term, one value: the phrase's frequencies.
    pub per_term: Vec<u32>,
    /// Intersection output and its dense table (the fresh disjunction: its survivors' frequencies in a
    /// non-essential list).
    pub hits: Vec<(usize, u32)>,
    pub table: Vec<u32>,
    /// Scores of a batch (the conjunction's), partial sums of a window (the disjunction's).
    pub scores: Vec<f32>,
    /// The disjunction's per-term score rows and surviving window slots.
    pub rows: Vec<f32>,
    pub survivors: Vec<usize>,
    /// The conjunction's window: candidates and scores (allocated on first use, so that an empty scratch, as
    /// `mem::take` leaves one, allocates nothing), and per term the candidates' frequencies.
    pub window: Option<Box<WindowBuf>>,
    pub tf_rows: Vec<[u32; BLOCK]>,
    /// The count-only AND's intersection marks (a byte per doc id; all zero between uses).
    pub marks: Option<Box<[u8; MARKS_SPAN as usize]>>,
    /// The fresh segment's lookups' marks (a frequency per doc id; all zero between uses).
    pub tf_marks: Option<Box<TfMarks>>,
    /// A fresh term's regions (its chunks and blocks, with their bounds).
    pub fresh_regions: Vec<FreshRegion>,
}

thread_local! {
    static POOL: Cell<Option<Box<Scratch>>> = const { Cell::new(None) };
}

impl Scratch {
    /// The thread's pooled scratch, or a new (empty, unallocated) one.
    pub fn take() -> Box<Scratch> {
        POOL.try_with(Cell::take).ok().flatten().unwrap_or_default()
    }

    /// Returns this scratch to the thread's pool, without its oversized buffers.
    pub fn give_back(mut self: Box<Self>) {
        self.trim();
        // During thread teardown the pool may be gone: the scratch is then simply dropped.
        let _ = POOL.try_with(|p| p.set(Some(self)));
    }

    fn trim(&mut self) {
        fn keep<T>(v: &mut Vec<T>) {
            if v.capacity() * std::mem::size_of::<T>() > KEEP_BYTES {
                *v = Vec::new();
            }
        }
        debug_assert!(self.curs.is_empty() && self.scoring.is_empty(), "cursors are recycled empty");
        debug_assert!(self.tables.is_empty(), "tables are recycled empty");
        keep(&mut self.curs);
        keep(&mut self.scoring);
        keep(&mut self.bounds);
        keep(&mut self.tables);
        self.bounds.iter_mut().for_each(keep);
        keep(&mut self.ubs);
        keep(&mut self.window_bounds);
        keep(&mut self.order);
        keep(&mut self.reached);
        keep(&mut self.essential);
        keep(&mut self.tf_rows);
        keep(&mut self.fresh_regions);
        keep(&mut self.cand);
        keep(&mut self.lists);
        self.lists.iter_mut().for_each(keep);
        keep(&mut self.per_term);
        keep(&mut self.hits);
        keep(&mut self.table);
        keep(&mut self.scores);
        keep(&mut self.rows);
        keep(&mut self.survivors);
    }
}

/// Empties `v` and returns its allocation as a vector of `U`, a type of the same size and alignment — here
/// the same type with another lifetime (cursors borrow the snapshot of one query; the pool outlives it).
/// The standard library collects a mapped `vec::IntoIter` in place when the layouts agree, so no memory
/// moves and nothing is allocated (`tests/alloc.rs` would count it if it were). Other layouts do not compile
/// (the assertions below).
pub(super) fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<U>()) };
    const { assert!(std::mem::align_of::<T>() == std::mem::align_of::<U>()) };
    v.clear();
    v.into_iter().map(|_| unreachable!("the vector was emptied")).collect()
}

/// Clears `v` and sizes it to `n` copies of `x`, keeping its allocation.
pub(super) fn reset<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
    v.clear();
    v.resize(n, x);
}

/// The first `n` lists of `lists`, emptied, keeping every list's allocation.
pub(super) fn reset_lists<T>(lists: &mut Vec<Vec<T>>, n: usize) -> &mut [Vec<T>] {
    if lists.len() < n {
        lists.resize_with(n, Vec::new);
    }
    let lists = &mut lists[..n];
    lists.iter_mut().for_each(Vec::clear);
    lists
}
