//! The bulk loader: a SCANNS-style pipeline (Orhean's thesis, seed 001, ch. 3) for loading large inputs —
//! `spirit index` on big files, large `_bulk` requests — with every core busy.
//!
//! ```text
//!  reader (caller's thread)      workers (N threads)                       ordered stage (one worker at a time)
//!  read 1 MiB, cut at the  ───▶  parse lines, map new fields, analyze ───▶ draw generated ids, route to the
//!  last line end                 (tokenize, stem) into PreparedDocs        shards, insert, group commit, ack
//!        ▲                              │
//!        └──── pool of recycled buffers ┘
//! ```
//!
//! * **Reader.** Reads the input in large blocks cut at a line end (the tail carries over into the next
//!   block) into buffers taken from a fixed pool; a worker returns a buffer as soon as it has parsed it, so
//!   memory is bounded by the pool (`threads * 2 + 1` blocks of input plus the analyzed documents of the
//!   blocks in flight) and the reader waits when the workers fall behind. A line longer than the document
//!   limit is skipped as it streams by (never buffered whole) and reported as too large.
//! * **Workers.** Parsing and analysis — the bulk of the per-document CPU time (JSON, tokenizer, stemmer,
//!   term sorting) — need no engine lock ([`Index::prepare`]), so they run on every worker at once.
//! * **Ordered stage.** A worker with an analyzed block waits its turn (blocks are numbered as read) and then
//!   inserts the block's documents in input order ([`Index::insert_prepared`]). In-order insertion is what
//!   makes a bulk-loaded index answer *exactly* like one built by streaming `add` calls over the same input:
//!   the same generated `_id`s, the same doc ids and `_seq` numbers, the same replacements when an `_id`
//!   repeats. Shards' fresh segments are the indexers: an insert appends to in-DRAM posting blocks and the
//!   shard's pipeline (flusher, engraver, merger threads) turns full ones into segments, so everything loaded
//!   so far is searchable while the load runs.
//!
//! * **Batches.** When a block's documents can go in together — one shard, every `_id` generated, so none
//!   replaces another — the worker analyzes them into one table for the block ([`BlockTerms`]: one hash
//!   lookup per token, each term of the block once, counted as it goes), groups that into a batch
//!   ([`TermBatch::fill`]: each term once, with its postings in document order; one pass over the
//!   occurrences), and the ordered stage inserts the block term by term
//!   ([`Index::insert_batch`], [`crate::segment::FreshSegment::insert_batch`]): a term that occurs in many
//!   of the block's documents costs one table lookup and one visit to its tail block instead of one per
//!   document, and the grouping, a pass over every posting, runs on the workers in parallel. The block's
//!   documents are published together; they get the ids, doc ids and `_seq` numbers one-by-one inserts
//!   would give them. On the enwiki dev file (2 threads, 1 shard) the ordered stage's insert went from ~26%
//!   of the CPU samples to ~14%, the grouping took ~8% on the workers, and loads closed 10–12% sooner.
//!   Analyzing into the block's table instead of document by document and then grouping (a second hash
//!   lookup per distinct term of each document) cut analysis and grouping from 1.32–1.35 to 1.11–1.18 CPU
//!   seconds per 110k documents (`spirit-bench stages --batch 1000`) and loads closed 5–8% sooner. A
//!   document goes in one by one (into an empty segment, or over the size limit) with its terms given back
//!   ([`TermBatch::unbatch`]).
//!
//! Each shard's insertion is cheap next to the analysis (see `bench/results/bulk-*`), so one ordered stage
//! keeps up with the workers on the machines this runs on; per-shard ordered stages would let N shards
//! insert in parallel, at the price of no longer numbering `_seq` in input order across shards.
//!
//! Bad documents (malformed JSON or UTF-8, a bad `_id`, a field of the wrong type, too large) are reported
//! through [`BulkObserver::rejected`] with their line number and skipped; any other error (a full budget, a
//! failed disk) stops the load and is returned — the documents inserted before it stay.
//!
//! Durability: in crash-safe mode the ordered stage syncs the shards' logs every `sync_every` documents and at
//! the end of each block (one persistence barrier for many documents), and reports the `_id`s it covered
//! through [`BulkObserver::acknowledged`] — in input order, each only after it is durable.

use crate::error::{Error, Result};
use crate::formats::{parse_lines_doc, Format};
use crate::index::{AddResult, Index, Inserted, PendingSet, PreparedDoc};
use crate::schema::document::take_id;
use crate::schema::BlockTerms;
use crate::segment::TermBatch;
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// How a bulk load runs.
#[derive(Debug, Clone)]
pub struct BulkOptions {
    /// Input format of every line.
    pub format: Format,
    /// Worker threads that parse and analyze (default: one per core). The reader runs on the caller's thread.
    pub threads: usize,
    /// Input bytes per block handed to a worker (default 1 MiB; a block holds at least one whole line).
    pub block_bytes: usize,
    /// Stop after this many documents are inserted.
    pub limit: u64,
    /// Crash-safe mode: documents per group commit (one persistence barrier acknowledges them all); every
    /// block ends with one too.
    pub sync_every: usize,
}

impl Default for BulkOptions {
    fn default() -> Self {
        BulkOptions {
            format: Format::Jsonl,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            block_bytes: 1 << 20,
            limit: u64::MAX,
            sync_every: 256,
        }
    }
}

/// What a bulk load did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkProgress {
    /// Documents inserted (and, in crash-safe mode, durable).
    pub docs: u64,
    /// Lines skipped as bad documents.
    pub rejected: u64,
    /// Input bytes consumed (after decompression), whole lines only.
    pub bytes: u64,
    /// Input lines consumed (blank lines and a line file's header included).
    pub lines: u64,
}

/// Hooks a bulk load calls, always from one thread at a time and in input order.
pub trait BulkObserver: Sync {
    /// These documents are inserted — visible to searches and, in crash-safe mode, durable.
    fn acknowledged(&self, _added: &[AddResult]) {}
    /// Line `line` (1-based) was skipped: `error` says why.
    fn rejected(&self, _line: u64, _error: &Error) {}
    /// A block of input is done; `progress` counts everything so far.
    fn progress(&self, _progress: &BulkProgress) {}
    /// Polled between blocks: `true` stops the load early (what was read so far still goes in).
    fn should_stop(&self) -> bool {
        false
    }
}

/// An observer that ignores everything.
impl BulkObserver for () {}

/// A block of whole input lines, numbered in input order.
struct Block {
    seq: u64,
    data: Vec<u8>,
    /// After `data`'s lines, one line that took this many bytes (line end included) was skipped without
    /// buffering it (too large).
    skipped_line: Option<u64>,
}

/// A worker's analysis of one block: per line, the line's index within the block and what to insert.
struct Analyzed {
    lines: u64,
    bytes: u64,
    docs: Vec<(u64, Result<PreparedDoc>)>,
}

/// The turn-taking state of the ordered stage.
struct Turn {
    next: u64,
    progress: BulkProgress,
    /// A fatal error ended the load: everyone stops.
    failed: Option<Error>,
    /// The limit was reached or the observer asked to stop.
    done: bool,
}

/// Loads every line of `input` into `index` through the bulk pipeline (see the module docs). Returns what
/// was loaded; a fatal error is returned after the pipeline has stopped.
pub fn bulk_load(
    index: &Index,
    input: &mut dyn Read,
    opts: &BulkOptions,
    observer: &dyn BulkObserver,
) -> Result<BulkProgress> {
    if opts.threads == 0 || opts.block_bytes == 0 || opts.sync_every == 0 {
        return Err(Error::InvalidArgument(
            "bulk load: threads, block_bytes and sync_every must be > 0".into(),
        ));
    }
    // Few, large segments while the load runs (`ShardConfig::bulk_segment_bytes`).
    let guard = index.bulk_guard();
    let loaded = load(index, input, opts, observer);
    let ended = guard.finish();
    let progress = loaded?;
    ended?;
    Ok(progress)
}

/// The pipeline of [`bulk_load`].
fn load(
    index: &Index,
    input: &mut dyn Read,
    opts: &BulkOptions,
    observer: &dyn BulkObserver,
) -> Result<BulkProgress> {
    let workers = opts.threads;
    let pool_size = workers * 2 + 1;
    let (pool_tx, pool_rx) = bounded::<Vec<u8>>(pool_size);
    for _ in 0..pool_size {
        pool_tx.send(Vec::with_capacity(opts.block_bytes + 4096)).expect("pool has room");
    }
    let (work_tx, work_rx) = bounded::<Block>(workers);
    let turn = Mutex::new(Turn { next: 0, progress: BulkProgress::default(), failed: None, done: false });
    let turned = Condvar::new();
    let stop = AtomicBool::new(false);
    // A line may be a little larger than the document it holds (the line format's tabs, JSON's `_id`).
    let max_line = index.settings().max_document_bytes.saturating_add(64 << 10);

    let read_result = std::thread::scope(|scope| {
        // Run with the workers the system gives us; none at all is an error.
        let mut spawned = 0;
        for i in 0..workers {
            let (work_rx, pool_tx) = (work_rx.clone(), pool_tx.clone());
            let (turn, turned, stop) = (&turn, &turned, &stop);
            let r =
                std::thread::Builder::new().name(format!("spirit-bulk-{i}")).spawn_scoped(scope, move || {
                    // A bulk load is batch work: queries served meanwhile come first.
                    crate::memory::run_in_background();
                    worker(index, opts, observer, &work_rx, &pool_tx, turn, turned, stop);
                });
            match r {
                Ok(_) => spawned += 1,
                Err(e) if spawned == 0 && i + 1 == workers => {
                    return Err(Error::io("a bulk-load worker thread", e));
                }
                Err(_) => {}
            }
        }
        drop(work_rx);
        let r = read_blocks(input, opts.block_bytes, max_line, &pool_rx, &work_tx, &stop, observer);
        drop(work_tx); // workers drain what is queued and exit
        r.map_err(|e| Error::io("the bulk load input", e))
    });
    let t = turn.into_inner();
    if let Some(e) = t.failed {
        return Err(e);
    }
    read_result?;
    Ok(t.progress)
}

/// The reader: fills pooled buffers with whole lines and hands them out in order.
fn read_blocks(
    input: &mut dyn Read,
    block_bytes: usize,
    max_line: usize,
    pool: &Receiver<Vec<u8>>,
    work: &Sender<Block>,
    stop: &AtomicBool,
    observer: &dyn BulkObserver,
) -> std::io::Result<()> {
    let mut carry: Vec<u8> = Vec::new();
    let mut eof = false;
    let mut seq = 0u64;
    while !eof {
        if stop.load(Relaxed) || observer.should_stop() {
            stop.store(true, Relaxed);
            break;
        }
        let Ok(mut buf) = pool.recv() else { break };
        buf.clear();
        buf.append(&mut carry);
        let mut skipped_line = None;
        loop {
            // Fill to the block size, then cut after the last line end.
            while buf.len() < block_bytes && !eof {
                let want = block_bytes - buf.len();
                eof = fill(input, &mut buf, want)?;
            }
            if eof {
                break;
            }
            if let Some(p) = memchr::memrchr(b'\n', &buf) {
                carry.extend_from_slice(&buf[p + 1..]);
                buf.truncate(p + 1);
                break;
            }
            // One line fills the block: read on until its end, unless it is too large to be a document.
            if buf.len() > max_line {
                let (skipped, at_eof) = skip_line(input, buf.len() as u64, &mut carry)?;
                buf.clear();
                skipped_line = Some(skipped);
                eof = at_eof;
                break;
            }
            eof = fill(input, &mut buf, block_bytes.max(64 << 10))?;
        }
        if buf.is_empty() && skipped_line.is_none() {
            continue;
        }
        if work.send(Block { seq, data: buf, skipped_line }).is_err() {
            break; // every worker has stopped (a failure)
        }
        seq += 1;
    }
    Ok(())
}

/// Appends up to `want` bytes from `input` to `buf`; returns whether the input is exhausted.
fn fill(input: &mut dyn Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<bool> {
    let start = buf.len();
    buf.resize(start + want, 0);
    loop {
        match input.read(&mut buf[start..]) {
            Ok(n) => {
                buf.truncate(start + n);
                return Ok(n == 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
}

/// Reads and drops the rest of an over-long line (`seen` bytes of it are already read); what follows its
/// end goes to `carry`. Returns the bytes the line took (its line end included) and whether the input ended
/// with it.
fn skip_line(input: &mut dyn Read, mut seen: u64, carry: &mut Vec<u8>) -> std::io::Result<(u64, bool)> {
    let mut tmp = vec![0u8; 64 << 10];
    loop {
        let n = match input.read(&mut tmp) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok((seen, true));
        }
        if let Some(p) = memchr::memchr(b'\n', &tmp[..n]) {
            carry.extend_from_slice(&tmp[p + 1..n]);
            return Ok((seen + p as u64 + 1, false));
        }
        seen += n as u64;
    }
}

/// A worker: analyze blocks as they come, then insert each in its turn.
#[allow(clippy::too_many_arguments)]
fn worker(
    index: &Index,
    opts: &BulkOptions,
    observer: &dyn BulkObserver,
    work: &Receiver<Block>,
    pool: &Sender<Vec<u8>>,
    turn: &Mutex<Turn>,
    turned: &Condvar,
    stop: &AtomicBool,
) {
    // The worker's block table and term batch, reused block after block (see `group_block`).
    let (mut terms, mut batch) = (BlockTerms::default(), TermBatch::default());
    while let Ok(block) = work.recv() {
        if stop.load(Relaxed) {
            let _ = pool.send(block.data);
            // Still take the turn so later blocks' workers are not left waiting, and end the load there: a
            // later block another worker analyzed before the stop must not go in after this gap (what a
            // stopped load inserted is a prefix of the input).
            take_turn(turn, turned, stop, block.seq, |t| {
                t.done = true;
                Ok(())
            });
            continue;
        }
        // A panic (a bug: analysis returns errors for bad input) must not leave later blocks waiting for
        // this one's turn: it becomes a failure of the load.
        let seq = block.seq;
        let analyzed = catch_unwind(AssertUnwindSafe(|| {
            let mut a = analyze_block(index, opts.format, &block, &mut terms);
            let batched = group_block(index, &mut a, &terms, &mut batch);
            (a, batched)
        }));
        let _ = pool.send(block.data);
        take_turn(turn, turned, stop, seq, |t| match analyzed {
            Ok((a, batched)) => insert_block(index, opts, observer, stop, t, a, batched.then_some(&batch)),
            Err(_) => Err(worker_panicked()),
        });
    }
}

fn worker_panicked() -> Error {
    Error::Format("a bulk-load worker panicked (a bug); the load stopped".into())
}

/// Waits until block `seq` is next, runs `f` unless the load has failed or finished, and passes the turn on.
/// A failure (an error or a panic of `f`) stops the load.
fn take_turn(
    turn: &Mutex<Turn>,
    turned: &Condvar,
    stop: &AtomicBool,
    seq: u64,
    f: impl FnOnce(&mut Turn) -> Result<()>,
) {
    let mut t = turn.lock();
    while t.next != seq {
        turned.wait(&mut t);
    }
    if t.failed.is_none() && !t.done {
        match catch_unwind(AssertUnwindSafe(|| f(&mut t))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => t.failed = Some(e),
            Err(_) => t.failed = Some(worker_panicked()),
        }
        if t.failed.is_some() {
            stop.store(true, Relaxed);
        }
    }
    t.next += 1;
    turned.notify_all();
}

/// Parses and analyzes every line of a block (no engine lock). With one shard, documents with generated
/// `_id`s are analyzed into `terms`, the block's table (see [`group_block`]).
fn analyze_block(index: &Index, format: Format, block: &Block, terms: &mut BlockTerms) -> Analyzed {
    let into_block = index.batches_generated_ids();
    terms.clear();
    let mut docs = Vec::new();
    let mut lines = 0u64;
    for raw in block.data.split_inclusive(|&b| b == b'\n') {
        let at = lines;
        lines += 1;
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let doc = match format {
            Format::Jsonl => index.parse_json(line).and_then(take_id),
            Format::Lines => match std::str::from_utf8(line) {
                Err(e) => Err(Error::BadDocument(format!("line is not UTF-8: {e}"))),
                Ok(s) => match parse_lines_doc(s) {
                    Ok(None) => continue,
                    Ok(Some(d)) => Ok((None, d)),
                    Err(e) => Err(e),
                },
            },
        };
        docs.push((
            at,
            doc.and_then(|(id, body)| match id {
                None if into_block => index.prepare_into(id, &body, terms),
                id => index.prepare(id, &body),
            }),
        ));
    }
    if let Some(size) = block.skipped_line {
        let limit = index.settings().max_document_bytes;
        docs.push((lines, Err(Error::DocumentTooLarge { size: size as usize, limit })));
        lines += 1;
    }
    Analyzed { lines, bytes: block.data.len() as u64 + block.skipped_line.unwrap_or(0), docs }
}

/// Groups the terms of a block's documents (those analyzed into `terms`) into `batch` when the ordered stage
/// can insert them together ([`Index::insert_batch`]: one shard, generated `_id`s), so that work — a pass
/// over every occurrence — is done here, in parallel, and the ordered stage appends term by term. Returns
/// whether it did; if not, the documents analyzed into `terms` get their terms back, to go in one by one.
fn group_block(index: &Index, block: &mut Analyzed, terms: &BlockTerms, batch: &mut TermBatch) -> bool {
    let docs: Vec<&PreparedDoc> = block.docs.iter().filter_map(|(_, d)| d.as_ref().ok()).collect();
    let held = docs.iter().filter(|d| !d.analyzed.holds_terms()).count();
    if held == 0 {
        return false;
    }
    batch.fill(terms);
    if docs.len() >= 2 && held == docs.len() && index.batchable(&docs) {
        return true;
    }
    let docs = block.docs.iter_mut().filter_map(|(_, d)| d.as_mut().ok());
    batch.unbatch(docs.map(|d| &mut d.analyzed).filter(|a| !a.holds_terms()));
    false
}

/// What the ordered stage does with a line of a block.
enum Step {
    Insert(PreparedDoc),
    /// Inserted with the rest of its block's batch.
    Inserted(Inserted),
}

/// The ordered stage for one block: insert in input order, group-commit, acknowledge, report. With `batch`
/// (the block's documents grouped by [`group_block`]) and room under the limit for all of them, they go in
/// together first, and their results are taken in turn below as one-by-one inserts' are; without room, they
/// get their terms back and go one by one up to the limit.
fn insert_block(
    index: &Index,
    opts: &BulkOptions,
    observer: &dyn BulkObserver,
    stop: &AtomicBool,
    t: &mut Turn,
    mut block: Analyzed,
    batch: Option<&TermBatch>,
) -> Result<()> {
    let ok = block.docs.iter().filter(|(_, d)| d.is_ok()).count() as u64;
    let steps: Vec<(u64, Result<Step>)> = match batch {
        Some(batch) if t.progress.docs.saturating_add(ok) <= opts.limit => {
            let (mut ats, mut prepared, mut steps) = (vec![], vec![], vec![]);
            for (at, d) in block.docs {
                match d {
                    Ok(d) => {
                        ats.push(steps.len());
                        prepared.push(d);
                        // Replaced below, unless an earlier document's failure ended the batch (and the load
                        // stops there, before this one).
                        let skipped =
                            Error::ResourceExhausted("not inserted: the load failed before it".into());
                        steps.push((at, Ok(Step::Inserted(Err(skipped)))));
                    }
                    Err(e) => steps.push((at, Err(e))),
                }
            }
            let inserted = match index.insert_batch(prepared, batch) {
                Ok(r) => r,
                Err(e) => {
                    stop.store(true, Relaxed);
                    return Err(e);
                }
            };
            debug_assert!(
                inserted.len() == ats.len()
                    || inserted.last().is_some_and(|r| r.as_ref().is_err_and(|e| !is_document_error(e))),
                "a batch's results end early only at a failure"
            );
            for (i, r) in ats.into_iter().zip(inserted) {
                steps[i].1 = Ok(Step::Inserted(r));
            }
            steps
        }
        _ => {
            if let Some(batch) = batch {
                // Grouped, but the limit ends the load inside the block: one by one, with their terms back.
                let docs = block.docs.iter_mut().filter_map(|(_, d)| d.as_mut().ok());
                batch.unbatch(docs.map(|d| &mut d.analyzed));
            }
            block.docs.into_iter().map(|(at, d)| (at, d.map(Step::Insert))).collect()
        }
    };
    let first_line = t.progress.lines + 1;
    let mut pending = PendingSet::default();
    let mut added: Vec<AddResult> = Vec::new();
    let mut since_sync = 0usize;
    let sync = |added: &mut Vec<AddResult>, pending: &mut PendingSet| -> Result<()> {
        index.sync_pending(pending)?;
        observer.acknowledged(added);
        added.clear();
        Ok(())
    };
    for (at, step) in steps {
        if t.progress.docs >= opts.limit {
            t.done = true;
            break;
        }
        let inserted = step.and_then(|s| match s {
            Step::Insert(d) => index.insert_prepared(d),
            Step::Inserted(r) => r,
        });
        match inserted {
            Ok((r, p)) => {
                pending.note(p);
                added.push(r);
                t.progress.docs += 1;
                since_sync += 1;
                if since_sync >= opts.sync_every {
                    sync(&mut added, &mut pending)?;
                    since_sync = 0;
                }
            }
            Err(e) if is_document_error(&e) => {
                t.progress.rejected += 1;
                observer.rejected(first_line + at, &e);
            }
            Err(e) => {
                // Acknowledge what is in before giving up (it is inserted; sync makes it durable).
                let _ = sync(&mut added, &mut pending);
                stop.store(true, Relaxed);
                return Err(e);
            }
        }
    }
    sync(&mut added, &mut pending)?;
    t.progress.lines += block.lines;
    t.progress.bytes += block.bytes;
    if t.progress.docs >= opts.limit {
        t.done = true;
    }
    if t.done {
        stop.store(true, Relaxed);
    }
    observer.progress(&t.progress);
    Ok(())
}

/// Errors that reject one document and let the load go on.
pub fn is_document_error(e: &Error) -> bool {
    matches!(e, Error::BadDocument(_) | Error::DocumentTooLarge { .. } | Error::InvalidArgument(_))
}
