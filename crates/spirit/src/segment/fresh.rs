//! The fresh segment (SPIRIT's write-optimized store): searchable while it is written.
//!
//! Everything lives in one arena block of the DRAM heap's short-term ring, viewed as 32-bit atomic words:
//!
//! ```text
//! word 0                 reserved (offset 0 is the null pointer)
//! [1, 1+table_cap)       open-addressing term table: each slot holds the word offset of a term entry
//! doc table[max_docs]    word offset of each document's stored record
//! field dir[MAX_FIELDS]  word offset of each field's column block (norms and running sums, or numbers)
//! bump area              term entries, posting blocks, stored records, column blocks
//!
//! term entry:     hash | key bytes | head block | tail block | (df, last doc) as one 64-bit word
//!                 | the pair before the last posting, as one 64-bit word | key words...
//!                 (entries start at even words so the pairs are 8-byte aligned)
//! posting block:  capacity | used | next block | next block's first doc | positions' words
//!                 | [impacts: IMPACTS words (`codec::pack_impact`), in blocks of IMPACTS_MIN_CAP words or more]
//!                 | postings: doc << 8 | tf ... | free | ... positions (the first posting's at the end;
//!                 each posting's tf words below those of the postings before it; a tf of 255 or more is
//!                 written as 255 in its posting and in full in one more word, above its positions)
//! text column:    kind | norms[max_docs] | running length[max_docs] | running doc count[max_docs]
//! numeric column: f64 bits as two words per doc (NaN = no value)
//! ```
//!
//! The arena need not be zeroed (the ring hands back arenas as their last segment left them): the segment
//! zeroes its tables when it is laid out, and the bump area as it hands it out — whole where a reader may
//! read a word before it is written (column blocks), headers only elsewhere (a term entry's, a posting
//! block's); postings, positions, keys and stored records are written before anything links to them.
//! Zeroing a 64 MiB arena at allocation, on the writer's seal, was a second pass over memory the writer
//! then misses on again.
//!
//! One writer, many readers, no locks on the read side. The writer fills words with relaxed stores and
//! publishes them with release stores (a block's `used`, a slot, a `next` link); the *watermark* — the number
//! of complete documents — is published last. A reader loads the watermark with acquire and ignores every
//! posting of a later document, so it never sees half a document. Posting blocks grow geometrically, as in
//! Earlybird and SPIRIT §4.5. When a large block fills, the writer seals it: it writes the block's impacts
//! (the Pareto frontier of its postings' (tf, field length) pairs, as image skip entries hold) into its
//! header before linking the next block with release, so a reader that sees the link sees them — a
//! query can then pass over a sealed block whose best score cannot reach its top-k (block-max skipping on
//! the fresh segment). A large block's chunks (128 postings each) carry impacts too, written as each fills,
//! before the posting after it is published: only the last chunk of the open tail block, and small blocks
//! until they are sealed, have none and are always read. Per-document running sums make the exact BM25
//! statistics (documents with the field and total field length) at any watermark an O(1) read.

use super::image::id_hash;
use super::{FieldStats, SegmentError};
use crate::codec::{impacts, pack_impact, PackedImpacts, IMPACTS, MARKS_SPAN, NO_DOC};
use crate::memory::{prefetch, words_of, DramBlock};
use crate::schema::{AnalyzedDoc, BlockTerms, MAX_FIELDS};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::*};
use std::sync::Arc;

const ENTRY_HEADER: usize = 8;
/// Word offset, within a term entry, of the 64-bit (df, last doc) pair.
const ENTRY_DF: usize = 4;
/// Word offset, within a term entry, of the (df, last doc) pair as it was before the last posting.
const ENTRY_PREV_DF: usize = 6;
// `find_or_insert` zeroes an entry's header as hash, length, head, tail and the two pairs.
const _: () = assert!(ENTRY_DF == 4 && ENTRY_PREV_DF + 2 == ENTRY_HEADER);
const BLOCK_HEADER: usize = 5;
/// Word offset, in a posting block, of the first document of the block linked after it (written before
/// the link, so a reader that sees the link sees it): cursors skip blocks without touching the next one.
const BLOCK_NEXT_FIRST: usize = 3;
/// Word offset, in a posting block, of the number of words its positions take at its end (the writer's).
const BLOCK_BACK: usize = 4;
/// Words of a posting in its block: one, the doc above the frequency's byte ([`posting_word`]); its positions
/// lie at the block's end. A fixed stride, so a cursor's next posting never waits on the last one's
/// frequency, and `advance` searches a block. One word rather than a (doc, tf) pair: a bulk load's arenas
/// held 834 bytes of postings per enwiki document in pairs (of 2.3 KB per document in all), and a
/// conjunction reads twice the documents per cache line.
const POSTING_WORDS: usize = 1;
// Copies of a block's postings take one slice element per posting.
const _: () = assert!(POSTING_WORDS == 1);
/// Every posting has at least one position (a term is collected per occurrence), so it takes at least this
/// many words of its block: what sizes a block's chunk headers and regions.
const MIN_POSTING_WORDS: usize = POSTING_WORDS + 1;
/// Bits of a posting word below its document: the frequency, or [`TF_ESCAPE`].
const TF_BITS: u32 = 8;
/// The frequency byte of a posting whose frequency is this or more: the frequency itself is the word just
/// above the posting's positions ([`FreshSegment::escaped_tf`]).
const TF_ESCAPE: u32 = (1 << TF_BITS) - 1;
/// Most documents a fresh segment holds: every local doc id fits a posting word above the frequency byte.
const MAX_FRESH_DOCS: u32 = (1 << (32 - TF_BITS)) - 1;

/// The posting word of `doc` with frequency `tf` (escaped from [`TF_ESCAPE`] on).
#[inline]
fn posting_word(doc: u32, tf: u32) -> u32 {
    debug_assert!(doc <= MAX_FRESH_DOCS);
    doc << TF_BITS | tf.min(TF_ESCAPE)
}

/// The document of a posting word.
#[inline]
fn doc_of(word: u32) -> u32 {
    word >> TF_BITS
}

/// The frequency byte of a posting word (the frequency, unless it is [`TF_ESCAPE`]).
#[inline]
fn tf_byte(word: u32) -> u32 {
    word & TF_ESCAPE
}

/// Words a posting of frequency `tf` takes beside its positions for its frequency: 1 if escaped, else 0.
#[inline]
fn escape_words(tf: u32) -> usize {
    (tf >= TF_ESCAPE) as usize
}
/// Posting blocks of at least this many words carry impacts (smaller ones, the first blocks of every term,
/// would grow by more than an eighth).
const IMPACTS_MIN_CAP: usize = 64;
/// Words of a block's impacts, one per impact.
const IMPACT_WORDS: usize = IMPACTS;
const FIRST_BLOCK: usize = 6;
/// Terms between the stages of an insert's pipeline (slot, entry, tail block, append).
const INSERT_PIPELINE: usize = 4;
/// Entries [`FreshSegment::for_each_key`] fetches ahead of the one whose key it reads.
const KEYS_AHEAD: usize = 16;
/// The largest posting block a term's list grows to (a posting with more positions gets one just large
/// enough). 2048 words rather than 4096: in the windowed real-time run (`spirit-bench run --mode nrt`, the six
/// goal workloads, 5 s warm-up, four pairs in ABBA order) the hmean L..HH rose 3.8 / 18.8 / −9.2 / 15.8%
/// (+7% on the means) with the window's ingest unchanged (42.0k against 39.1k docs/s on the means), while
/// the fresh segment alone in a hot loop (`spirit-bench loop --fresh-docs`) showed no difference either way.
/// 1024 words had cost ANDs, ORs and phrases 10–35% in that loop.
const MAX_BLOCK: usize = 2048;
/// [`FreshPostings::probe`] marks a stretch of the list where it holds at most this many postings per
/// candidate, and advances candidate by candidate in sparser stretches. Marking costs two stores per
/// posting, a search about a dozen mispredicted compares per candidate. On one fresh segment of 50,000 enwiki
/// documents (`spirit-bench loop --fresh-docs`, one core, alternated rounds of 2 s), geomean µs for ratios
/// 0 (always search) / 4 / 8 / 16 / 32 / ∞ on the four densest AndHighHigh pairs: 186 / 152 / 140 / 130 /
/// 150 / 140; at 0 / 8 / 16 over the task file: AndHighHigh 97.3 / 76.3 / 75.5, AndHighMed 35.1 / 34.3 /
/// 30.3, AndMedMed 14.5 / 10.1 / 9.6.
pub const FRESH_MARKS_RATIO: usize = 16;
const KIND_TEXT: u32 = 1;
const KIND_NUMERIC: u32 = 2;
/// Words of a text column besides its three per-document arrays: the kind.
const TEXT_COLUMN_EXTRA: usize = 1;

/// A fresh segment. Shared (`Arc`) between its writer and any number of readers.
pub struct FreshSegment {
    block: DramBlock,
    table_cap: usize,
    max_docs: u32,
    doc_table: usize,
    field_dir: usize,
    watermark: AtomicU32,
    writer: Mutex<WriterState>,
    /// The writer's cursor (words of the arena handed out) as readers see it — stats and
    /// [`Self::prefault_ahead`] — without the writer's lock; relaxed.
    used: AtomicUsize,
}

struct WriterState {
    cursor: usize,
    terms: usize,
    /// Term fields with a column block, for the per-document running sums.
    term_fields: Vec<u16>,
    /// The live `_id`s: (xxh3 of the id, local doc), the id itself read back from the doc's stored record,
    /// so an add allocates nothing here (a `HashMap<String, u32>` cloned every id and SipHashed it).
    ids: hashbrown::HashTable<(u64, u32)>,
    /// Per-document scratch: term entries.
    entries: Vec<u32>,
    /// A block being sealed: its postings' frequencies and field lengths.
    seal_tfs: Vec<u32>,
    seal_dls: Vec<u32>,
}

/// Words before a posting block's postings: the header, and in a large block its impacts and its chunks'
/// bounds.
#[inline]
fn header_words(cap: usize) -> usize {
    if cap >= IMPACTS_MIN_CAP {
        BLOCK_HEADER + IMPACT_WORDS + IMPACT_WORDS * chunks(cap)
    } else {
        BLOCK_HEADER
    }
}

/// Postings per chunk of a large block: each chunk's impacts are written as it fills
/// ([`FreshSegment::seal_chunk`]), so a single-term scan passes over a chunk that cannot compete (a block's
/// impacts alone cover up to ~750 postings of a common term: too coarse to skip much).
const CHUNK: usize = 128;
/// Posting words of a full chunk.
const CHUNK_WORDS: usize = CHUNK * POSTING_WORDS;

/// Blocks of at least this many words have chunks (smaller ones hold about a chunk or less): blocks of 384
/// words on (~150 enwiki postings).
const CHUNKED_MIN_CAP: usize = 256;

/// The chunk [`FreshPostings::for_each_region`] gives a block without chunks: the region is the whole block.
pub const WHOLE_BLOCK: usize = usize::MAX;

/// Most postings a region (a chunk, or a whole block without chunks) holds.
pub const MAX_REGION: usize = CHUNKED_MIN_CAP / MIN_POSTING_WORDS;

/// Chunks a block of `cap` words may hold (every posting takes at least `MIN_POSTING_WORDS`).
#[inline]
fn chunks(cap: usize) -> usize {
    if cap >= CHUNKED_MIN_CAP {
        (cap / MIN_POSTING_WORDS).div_ceil(CHUNK)
    } else {
        0
    }
}

/// A term key's hash in the term table: from the key's [`crate::schema::key_hash`], which analysis already
/// took for the document's own table ([`fresh_hash`] of it), so the key is not hashed twice.
pub(crate) fn hash_key(key: &[u8]) -> u32 {
    fresh_hash(crate::schema::key_hash(key))
}

/// The term table's hash of a key whose [`crate::schema::key_hash`] is `h`: the high 32 bits of `h` times a
/// 64-bit odd constant (Fibonacci hashing), with [`HASH_NONZERO`] set. FxHash's own low bits, taken as they are, made the
/// table's inserts ~3% slower than xxh3 did (more probing); remixed, they match it (`spirit-bench stages`,
/// 3 alternated rounds: insert 0.61-0.62 s both, analysis 0.65-0.69 -> 0.62-0.63 s, as the key is no longer
/// hashed twice).
pub(crate) fn fresh_hash(h: u64) -> u32 {
    ((h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32) | HASH_NONZERO
}

/// The bit [`fresh_hash`] sets so a hash is never 0: above any table's slot mask (tables have at most
/// 2^24 slots), so every slot is some term's home slot (bit 0 set made only the odd ones homes: twice the
/// collisions at the same load; at the ~7% load of a bulk arena's table `spirit-bench stages` showed no
/// difference either way, and the same table at a quarter of the size was no faster).
const HASH_NONZERO: u32 = 1 << 31;
/// The most slots a term table has.
const MAX_TABLE_SLOTS: usize = 1 << 24;
const _: () = assert!(MAX_TABLE_SLOTS <= HASH_NONZERO as usize);

fn words_for(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// Why a document did not go into this segment.
#[derive(Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The segment is full; seal it and retry in a new one.
    Full,
}

/// Where a fresh segment's tables lie in an arena of a given size (see [`FreshSegment::new`]).
struct Layout {
    words: usize,
    table_cap: usize,
    max_docs: u32,
    doc_table: usize,
    field_dir: usize,
}

impl Layout {
    fn of(arena_bytes: usize, max_docs: u32) -> Layout {
        let words = arena_bytes / 4;
        // A sixteenth of the arena for the term table, which is kept at most half full: room for one distinct
        // term per 32 arena words, more than natural-language text needs before the arena fills.
        let table_cap = (words / 16).next_power_of_two().clamp(1024, MAX_TABLE_SLOTS);
        // Columns cost 3 words per doc and text field: size them for documents of at least ~1 KiB of arena
        // each (short documents then fill `max_docs` before the arena, which only makes segments smaller).
        let max_docs = max_docs.clamp(1, (words / 256).max(64) as u32).min(MAX_FRESH_DOCS);
        let doc_table = 1 + table_cap;
        Layout { words, table_cap, max_docs, doc_table, field_dir: doc_table + max_docs as usize }
    }
}

/// Upper bound on the words `doc` takes in a segment of `max_docs` documents, with `new_fields` column
/// blocks to allocate.
fn bound(doc: &AnalyzedDoc, new_fields: usize, max_docs: u32) -> usize {
    let postings: usize = doc
        .terms()
        .map(|(key, pos)| {
            let p = POSTING_WORDS + pos.len() + escape_words(pos.len() as u32);
            ENTRY_HEADER + words_for(key.len()) + 2 * (BLOCK_HEADER + IMPACT_WORDS + p.max(FIRST_BLOCK)) + p
        })
        .sum();
    postings + rest_bound(doc, new_fields, max_docs)
}

/// At least [`bound`], from the document's totals alone (no pass over its terms): per term,
/// `words_for(key) ≤ key / 4 + 1` and `max(p, FIRST_BLOCK) ≤ p + FIRST_BLOCK`, and the keys' quarters add up to
/// at most their total's quarter.
fn quick_bound(doc: &AnalyzedDoc, new_fields: usize, max_docs: u32) -> usize {
    // The posting word, and an escaped frequency's word.
    let per_term =
        ENTRY_HEADER + 1 + 2 * (BLOCK_HEADER + IMPACT_WORDS + FIRST_BLOCK) + 3 * (POSTING_WORDS + 1);
    doc.term_count() * per_term
        + doc.key_bytes() / 4
        + 3 * doc.position_count()
        + rest_bound(doc, new_fields, max_docs)
}

/// The stored record's and new column blocks' part of [`bound`].
fn rest_bound(doc: &AnalyzedDoc, new_fields: usize, max_docs: u32) -> usize {
    let record = 2 + words_for(doc.id.len()) + words_for(doc.source.len());
    record + new_fields * (TEXT_COLUMN_EXTRA + 3 * max_docs as usize)
}

/// The terms of a block of documents grouped by key, each group's postings in document order: what
/// [`FreshSegment::insert_batch`] appends term by term, reading it front to back. Built without the writer's
/// lock — a bulk load's workers fill one per block, in parallel, from the block's [`BlockTerms`] (each term
/// already once, with its hash) — and kept between batches (its buffers are reused).
#[derive(Default, Debug)]
pub struct TermBatch {
    /// Per group: its hash, its key (`keys[key_off..key_off + key_len]`) and the end of its postings.
    groups: Vec<(u32, u32, u32, u32)>,
    keys: Vec<u8>,
    /// Per posting: the document (index in the batch) and the end of its positions.
    postings: Vec<(u32, u32)>,
    positions: Vec<u32>,
    /// An estimate of the words the postings take in an arena, for [`FreshSegment::insert_batch`]'s check.
    bound: usize,
    /// Documents it was filled from.
    docs: usize,
    /// Scratch per term of the block: the last document (from 1) that had it, and its group's next free
    /// posting and position.
    last_doc: Vec<u32>,
    next: Vec<(u32, u32)>,
}

impl TermBatch {
    /// Groups the terms of the documents `block` took in, replacing what the batch held: one pass over their
    /// occurrences puts each in its place (the block counted each term's postings and positions).
    pub fn fill(&mut self, block: &BlockTerms) {
        let (occ, ends) = block.occurrences();
        let n = block.term_count();
        let TermBatch { groups, keys, postings, positions, bound, docs, last_doc, next } = self;
        *docs = ends.len();
        next.clear();
        next.extend((0..n).map(|t| block.counts(t)));
        // The groups: the terms with a posting (a document left out may have left some without), in the
        // block's order; the counts become each group's first posting and position.
        groups.clear();
        keys.clear();
        let (mut p, mut q) = (0u32, 0u32);
        for (t, c) in next.iter_mut().enumerate() {
            let (np, nq) = *c;
            if np == 0 {
                continue;
            }
            *c = (p, q);
            p += np;
            q += nq;
            let (key, h) = block.term(t);
            groups.push((fresh_hash(h), keys.len() as u32, key.len() as u32, p));
            keys.extend_from_slice(key);
        }
        let (total, total_pos) = (p as usize, q as usize);
        // What the batch may take of an arena: per group, an entry and (if its term is new, or its tail block
        // full) a first block and its successor; per posting, its words twice over (blocks grow by doubling).
        let group_words = ENTRY_HEADER + 1 + 2 * (BLOCK_HEADER + IMPACT_WORDS + FIRST_BLOCK);
        *bound = groups.len() * group_words + keys.len() / 4 + 2 * (total * (POSTING_WORDS + 1) + total_pos);
        // Every occurrence into its group's place, documents in order: a posting per (term, document).
        postings.clear();
        postings.resize(total, (0, 0));
        positions.clear();
        positions.resize(total_pos, 0);
        last_doc.clear();
        last_doc.resize(n, 0);
        let mut from = 0;
        for (d, &end) in ends.iter().enumerate() {
            let d = d as u32;
            for &(t, pos) in &occ[from..end as usize] {
                let (p, q) = &mut next[t as usize];
                positions[*q as usize] = pos;
                *q += 1;
                // `last_doc` counts documents from 1.
                if last_doc[t as usize] != d + 1 {
                    last_doc[t as usize] = d + 1;
                    *p += 1;
                }
                postings[*p as usize - 1] = (d, *q);
            }
            from = end as usize;
        }
    }

    /// Gives the documents the batch was filled from (those its block took in, in order) their terms back,
    /// to be inserted one by one: each term in the block's order, with its positions.
    pub fn unbatch<'a>(&self, docs: impl IntoIterator<Item = &'a mut AnalyzedDoc>) {
        let mut docs: Vec<&'a mut AnalyzedDoc> = docs.into_iter().collect();
        assert_eq!(docs.len(), self.docs, "the documents the batch was filled from");
        let held: Vec<_> = docs.iter_mut().map(|d| d.release_terms()).collect();
        let mut from = 0;
        let mut start = 0;
        for &(h, off, len, end) in &self.groups {
            let key = &self.keys[off as usize..(off + len) as usize];
            for &(d, to) in &self.postings[start..end as usize] {
                docs[d as usize].push_term(key, &self.positions[from..to as usize], h);
                from = to as usize;
            }
            start = end as usize;
        }
        for (d, h) in docs.iter().zip(held) {
            assert_eq!(
                (d.term_count(), d.position_count(), d.key_bytes()),
                h,
                "a document's terms came back"
            );
        }
    }

    /// Postings in all (the documents' distinct terms, summed).
    pub fn len(&self) -> usize {
        self.postings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.postings.is_empty()
    }
}

/// Why a batch did not go into this segment ([`FreshSegment::insert_batch`]).
#[derive(Debug, PartialEq, Eq)]
pub enum BatchError {
    /// It might not fit: nothing was written. Seal the segment (or, if it is empty, insert one by one).
    WontFit,
    /// The segment filled part-way: seal it (what was written lies beyond the watermark, which no reader or
    /// flush passes) and insert the batch into the next one.
    Full,
}

impl From<InsertError> for BatchError {
    fn from(InsertError::Full: InsertError) -> BatchError {
        BatchError::Full
    }
}

impl FreshSegment {
    /// Lays out a fresh segment in `block`, holding at most `max_docs` documents.
    /// The block's contents do not matter: the tables are zeroed here ([`DramBlock::zero_front`]), the bump
    /// area as it is handed out.
    pub fn new(mut block: DramBlock, max_docs: u32) -> FreshSegment {
        let Layout { words, table_cap, max_docs, doc_table, field_dir } = Layout::of(block.len(), max_docs);
        let cursor = field_dir + MAX_FIELDS;
        assert!(cursor < words, "fresh arena too small for its tables");
        // Links, the field directory and a batch's position spots hold word offsets in 32 bits.
        assert!(words <= u32::MAX as usize, "a fresh arena's word offsets fit 32 bits");
        block.zero_front(cursor * 4);
        FreshSegment {
            block,
            table_cap,
            max_docs,
            doc_table,
            field_dir,
            watermark: AtomicU32::new(0),
            used: AtomicUsize::new(cursor),
            writer: Mutex::new(WriterState {
                cursor,
                terms: 0,
                term_fields: vec![],
                ids: hashbrown::HashTable::new(),
                entries: vec![],
                seal_tfs: vec![],
                seal_dls: vec![],
            }),
        }
    }

    #[inline]
    fn w(&self) -> &[AtomicU32] {
        self.block.atomic_words()
    }

    /// Number of complete, visible documents.
    #[inline]
    pub fn visible(&self) -> u32 {
        self.watermark.load(Acquire)
    }

    pub fn max_docs(&self) -> u32 {
        self.max_docs
    }

    /// Bytes of DRAM this segment holds.
    pub fn dram_bytes(&self) -> usize {
        self.block.len()
    }

    /// Has the kernel back the arena's never-used pages `ahead` bytes past the writer's cursor, on a
    /// background thread, for as long as the segment lives ([`DramBlock::prefault_in_background`]; no thread
    /// for an arena in reused memory): a writer at full speed would otherwise take each page's first-touch
    /// fault itself — inside the insert stage bulk workers take turns at, or on the add thread. Bounded by
    /// the cursor, not the arena: a load that ends early, or a shard that gets a few documents, leaves at most
    /// `ahead` bytes touched for nothing, not the whole arena.
    pub fn prefault_ahead(self: &Arc<Self>, ahead: usize) {
        let seg = Arc::downgrade(self);
        self.block.prefault_in_background(move || seg.upgrade().map(|s| s.used.load(Relaxed) * 4 + ahead));
    }

    /// Bytes used so far (for stats).
    pub fn used_bytes(&self) -> usize {
        self.used.load(Relaxed) * 4
    }

    /// Local doc of a live `_id` in this segment (writer side).
    pub fn lookup_id(&self, id: &str) -> Option<u32> {
        let h = id_hash(id);
        self.writer.lock().ids.find(h, |&(x, l)| x == h && self.stored_id_is(l, id)).map(|e| e.1)
    }

    /// Whether an empty segment of an `arena_bytes` arena (and `max_docs`, as [`Self::new`] takes them) could
    /// hold `doc`: the document size limit, which a shard takes from its real-time arena whatever arena is
    /// current, so what is accepted never depends on how documents fell into segments.
    pub fn fits_empty_arena(arena_bytes: usize, max_docs: u32, doc: &AnalyzedDoc) -> bool {
        let l = Layout::of(arena_bytes, max_docs);
        let empty_cursor = l.field_dir + MAX_FIELDS;
        let fields = doc.lens.len() + doc.numerics.len();
        // The exact bound takes a pass over the terms, under the writer lock: only when the totals' bound
        // (at least as large) does not fit already.
        let fits = |b: usize| empty_cursor + b <= l.words;
        // A document whose block holds its terms has only the totals' bound (the caller gives it its terms
        // back to check it exactly).
        (fits(quick_bound(doc, fields, l.max_docs))
            || doc.holds_terms() && fits(bound(doc, fields, l.max_docs)))
            && doc.term_count() <= l.table_cap / 2
    }

    /// Appends one document and publishes it. The caller is the only writer.
    pub fn insert(&self, doc: &AnalyzedDoc) -> Result<u32, InsertError> {
        assert!(doc.holds_terms(), "a document inserted alone has its terms");
        let mut st = self.writer.lock();
        let local = self.watermark.load(Relaxed);
        if local >= self.max_docs || st.terms + doc.term_count() > self.table_cap / 2 {
            return Err(InsertError::Full);
        }
        // Running out of arena part-way is safe: everything written for this document lies beyond the
        // watermark, which readers and the flusher ignore, and the caller seals the segment.
        self.add_columns(&mut st, doc)?;
        debug_assert!(doc.terms().zip(doc.fresh_hashes()).all(|((key, _), h)| hash_key(key) == h));
        let key = |t: usize| doc.term(t).0;
        self.insert_terms(
            &mut st,
            doc.term_count(),
            |t| doc.fresh_hash(t),
            key,
            |st, t, e| {
                let (key, positions) = doc.term(t);
                let field = crate::schema::key_field(key);
                self.append_postings(st, e, field, local, &[(0, positions.len() as u32)], 0, positions)
            },
        )?;
        self.add_doc_values(&mut st, doc, local)?;
        self.add_id(&mut st, &doc.id, local);
        // Publish the whole document at once.
        self.watermark.store(local + 1, Release);
        Ok(local)
    }

    /// Appends `docs` as the next documents and publishes them together, their postings term by term
    /// (`batch` is [`TermBatch::fill`]ed from the block they were analyzed into): a term that occurs in several of them costs one table lookup and
    /// one visit to its tail block instead of one per document — the cache and TLB misses that are most of a
    /// one-by-one insert's time in a large arena. Returns the first one's local doc.
    ///
    /// All or none are published. The batch is tried only when the arena has room for its estimated size
    /// (not an upper bound: a posting can open a block of up to [`MAX_BLOCK`] words), else
    /// [`BatchError::WontFit`] with nothing written. [`BatchError::Full`], the
    /// arena filling part-way all the same, leaves what was written beyond the watermark, which no reader or
    /// flush passes (as [`insert`](Self::insert) does): the caller seals the segment.
    pub fn insert_batch(&self, docs: &[&AnalyzedDoc], batch: &TermBatch) -> Result<u32, BatchError> {
        let mut st = self.writer.lock();
        let local = self.watermark.load(Relaxed);
        assert_eq!(batch.docs, docs.len(), "a batch filled from these documents");
        debug_assert_eq!(
            batch.len(),
            docs.iter().map(|d| d.term_count()).sum::<usize>(),
            "the batch's terms"
        );
        let w = self.w();
        let md = self.max_docs as usize;
        let mut new_fields: Vec<u16> = docs
            .iter()
            .flat_map(|d| d.lens.iter().map(|x| x.0).chain(d.numerics.iter().map(|x| x.0)))
            .filter(|&f| w[self.field_dir + f as usize].load(Relaxed) == 0)
            .collect();
        new_fields.sort_unstable();
        new_fields.dedup();
        let need = batch.bound
            + docs.iter().map(|d| rest_bound(d, 0, self.max_docs)).sum::<usize>()
            + new_fields.len() * (TEXT_COLUMN_EXTRA + 3 * md);
        if local as usize + docs.len() > md
            || st.terms + batch.len() > self.table_cap / 2
            || st.cursor + need > w.len()
        {
            return Err(BatchError::WontFit);
        }
        // Columns and values first: a block sealed by a later document's posting reads the field lengths of
        // the documents before it.
        for (i, doc) in docs.iter().enumerate() {
            self.add_columns(&mut st, doc)?;
            self.add_doc_values(&mut st, doc, local + i as u32)?;
        }
        let groups = &batch.groups;
        let key_of = |g: usize| {
            let (_, off, len, _) = groups[g];
            &batch.keys[off as usize..(off + len) as usize]
        };
        // Each group's postings back to back, in document order.
        self.insert_terms(
            &mut st,
            groups.len(),
            |g| groups[g].0,
            key_of,
            |st, g, e| {
                let start = if g == 0 { 0 } else { groups[g - 1].3 as usize };
                let field = crate::schema::key_field(key_of(g));
                let from = if start == 0 { 0 } else { batch.postings[start - 1].1 as usize };
                let postings = &batch.postings[start..groups[g].3 as usize];
                self.append_postings(st, e, field, local, postings, from, &batch.positions)
            },
        )?;
        for (i, doc) in docs.iter().enumerate() {
            self.add_id(&mut st, &doc.id, local + i as u32);
        }
        self.watermark.store(local + docs.len() as u32, Release);
        Ok(local)
    }

    /// Looks up (or adds) `n` terms and appends their postings, software-pipelined so the cache misses of
    /// different terms overlap: term `i`'s table slot is prefetched 3·D terms before its postings are
    /// appended, the slot's entry 2·D before, and the entry's tail block D before (each load of a stage hits
    /// what the stage before prefetched). Term `i` is `key(i)` of hash `hash(i)`; `append(st, i, entry)`
    /// appends its postings. Stops at the first error.
    fn insert_terms<'k>(
        &self,
        st: &mut WriterState,
        n: usize,
        hash: impl Fn(usize) -> u32,
        key: impl Fn(usize) -> &'k [u8],
        mut append: impl FnMut(&mut WriterState, usize, usize) -> Result<(), InsertError>,
    ) -> Result<(), InsertError> {
        const D: usize = INSERT_PIPELINE;
        let w = self.w();
        let mask = self.table_cap - 1;
        let mut entries = std::mem::take(&mut st.entries);
        entries.clear();
        let mut result = Ok(());
        for i in 0..n + 3 * D {
            if i < n {
                prefetch(&w[1 + (hash(i) as usize & mask)]);
            }
            if let Some(t) = i.checked_sub(D).filter(|&t| t < n) {
                // Each home slot's entry (a term seen before, usually), before any key is compared.
                let e = w[1 + (hash(t) as usize & mask)].load(Relaxed) as usize;
                if e != 0 {
                    prefetch(&w[e]);
                    prefetch(&w[e + ENTRY_HEADER]);
                }
            }
            if let Some(t) = i.checked_sub(2 * D).filter(|&t| t < n) {
                match self.find_or_insert(st, key(t), hash(t)) {
                    Ok(e) => {
                        prefetch(&w[w[e + 3].load(Relaxed) as usize]);
                        entries.push(e as u32);
                    }
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                }
            }
            if let Some(t) = i.checked_sub(3 * D) {
                if let Err(err) = append(st, t, entries[t] as usize) {
                    result = Err(err);
                    break;
                }
            }
        }
        st.entries = entries;
        result
    }

    /// Column blocks for the fields of `doc` this segment has not seen yet.
    fn add_columns(&self, st: &mut WriterState, doc: &AnalyzedDoc) -> Result<(), InsertError> {
        let w = self.w();
        for &(f, _) in &doc.lens {
            if w[self.field_dir + f as usize].load(Relaxed) == 0 {
                // Zeroed whole: the documents before this one read as not having the field.
                let at = self.bump_zeroed(st, TEXT_COLUMN_EXTRA + 3 * self.max_docs as usize)?;
                w[at].store(KIND_TEXT, Relaxed);
                w[self.field_dir + f as usize].store(at as u32, Release);
                st.term_fields.push(f);
            }
        }
        for &(f, _) in &doc.numerics {
            if w[self.field_dir + f as usize].load(Relaxed) == 0 {
                let n = 2 * self.max_docs as usize;
                let at = self.bump(st, 1 + n)?;
                w[at].store(KIND_NUMERIC, Relaxed);
                let nan = f64::NAN.to_bits();
                for d in 0..self.max_docs as usize {
                    w[at + 1 + 2 * d].store(nan as u32, Relaxed);
                    w[at + 2 + 2 * d].store((nan >> 32) as u32, Relaxed);
                }
                w[self.field_dir + f as usize].store(at as u32, Release);
            }
        }
        Ok(())
    }

    /// Everything of `doc` but its postings and its `_id`'s entry ([`Self::add_id`]), as local doc `local`: its
    /// norms and the running sums of every term field of the segment, its numbers and its stored record.
    fn add_doc_values(&self, st: &mut WriterState, doc: &AnalyzedDoc, local: u32) -> Result<(), InsertError> {
        let w = self.w();
        // Norms and running sums of every term field of the segment.
        let md = self.max_docs as usize;
        for &f in &st.term_fields {
            let col = w[self.field_dir + f as usize].load(Relaxed) as usize;
            let len = doc.lens.iter().find(|x| x.0 == f).map(|x| x.1);
            let (prev_len, prev_cnt) = if local == 0 {
                (0, 0)
            } else {
                (
                    w[col + 1 + md + local as usize - 1].load(Relaxed),
                    w[col + 1 + 2 * md + local as usize - 1].load(Relaxed),
                )
            };
            w[col + 1 + local as usize].store(len.unwrap_or(0), Relaxed);
            w[col + 1 + md + local as usize].store(prev_len + len.unwrap_or(0), Relaxed);
            w[col + 1 + 2 * md + local as usize].store(prev_cnt + len.is_some() as u32, Relaxed);
        }
        for &(f, x) in &doc.numerics {
            let col = w[self.field_dir + f as usize].load(Relaxed) as usize;
            let bits = x.to_bits();
            w[col + 1 + 2 * local as usize].store(bits as u32, Relaxed);
            w[col + 2 + 2 * local as usize].store((bits >> 32) as u32, Relaxed);
        }
        // Stored record.
        let rec = self.bump(st, 2 + words_for(doc.id.len()) + words_for(doc.source.len()))?;
        w[rec].store(doc.id.len() as u32, Relaxed);
        w[rec + 1].store(doc.source.len() as u32, Relaxed);
        let id_at = rec + 2;
        store_bytes(&w[id_at..], doc.id.as_bytes());
        store_bytes(&w[id_at + words_for(doc.id.len())..], &doc.source);
        w[self.doc_table + local as usize].store(rec as u32, Relaxed);
        Ok(())
    }

    /// Makes local doc `local`, whose stored record is written, the one its `_id` finds: last, once nothing
    /// of the document can fail (a lookup must never find a document past the watermark).
    fn add_id(&self, st: &mut WriterState, id: &str, local: u32) {
        let h = id_hash(id);
        match st.ids.find_mut(h, |&(x, l)| x == h && self.stored_id_is(l, id)) {
            Some(e) => e.1 = local,
            None => {
                st.ids.insert_unique(h, (h, local), |e| e.0);
            }
        }
    }

    /// Forgets an `_id` (after a delete), so a later lookup does not find the deleted doc.
    pub fn forget_id(&self, id: &str) {
        let h = id_hash(id);
        let mut st = self.writer.lock();
        if let Ok(e) = st.ids.find_entry(h, |&(x, l)| x == h && self.stored_id_is(l, id)) {
            e.remove();
        }
    }

    /// Whether the stored record of local doc `local` (below the writer's cursor) has `_id` `id`.
    fn stored_id_is(&self, local: u32, id: &str) -> bool {
        let w = self.w();
        let rec = w[self.doc_table + local as usize].load(Relaxed) as usize;
        w[rec].load(Relaxed) as usize == id.len()
            && id.as_bytes().chunks(4).enumerate().all(|(i, c)| w[rec + 2 + i].load(Relaxed) == le_word(c))
    }

    /// Hands out `words` words of the bump area as the arena holds them (anything): for a caller that writes
    /// every word before a reader or the flusher can reach it.
    fn bump(&self, st: &mut WriterState, words: usize) -> Result<usize, InsertError> {
        let at = st.cursor;
        if at + words > self.w().len() {
            return Err(InsertError::Full);
        }
        st.cursor += words;
        self.used.store(st.cursor, Relaxed);
        Ok(at)
    }

    /// [`bump`](Self::bump), zeroed.
    fn bump_zeroed(&self, st: &mut WriterState, words: usize) -> Result<usize, InsertError> {
        let at = self.bump(st, words)?;
        self.zero(at, words);
        Ok(at)
    }

    /// Zeroes `words` words from `at` (bump memory nothing links to yet): those in memory an earlier block
    /// held; the rest are zero still ([`DramBlock::reused_bytes`]), and storing zeros there would only fault
    /// their pages in ahead of the background prefault.
    fn zero(&self, at: usize, words: usize) {
        let end = (at + words).min(self.block.reused_bytes() / 4).max(at);
        for x in &self.w()[at..end] {
            x.store(0, Relaxed);
        }
        debug_assert!(
            self.w()[end..at + words].iter().all(|x| x.load(Relaxed) == 0),
            "memory no block held is zero"
        );
    }

    fn find_or_insert(&self, st: &mut WriterState, key: &[u8], h: u32) -> Result<usize, InsertError> {
        let w = self.w();
        let mask = self.table_cap - 1;
        let mut slot = h as usize & mask;
        loop {
            let e = w[1 + slot].load(Relaxed) as usize;
            if e == 0 {
                break;
            }
            if self.entry_is(e, h, key) {
                return Ok(e);
            }
            slot = (slot + 1) & mask;
        }
        if !st.cursor.is_multiple_of(2) {
            self.bump(st, 1)?;
        }
        let e = self.bump(st, ENTRY_HEADER + words_for(key.len()))?;
        w[e].store(h, Relaxed);
        w[e + 1].store(key.len() as u32, Relaxed);
        self.zero(e + 2, ENTRY_DF - 2);
        self.block.atomic_u64_at(e + ENTRY_DF).store(0, Relaxed);
        self.block.atomic_u64_at(e + ENTRY_PREV_DF).store(0, Relaxed);
        store_bytes(&w[e + ENTRY_HEADER..], key);
        st.terms += 1;
        // head/tail stay 0 until the first posting block is linked.
        w[1 + slot].store(e as u32, Release);
        Ok(e)
    }

    fn entry_is(&self, e: usize, h: u32, key: &[u8]) -> bool {
        let w = self.w();
        if w[e].load(Relaxed) != h || w[e + 1].load(Relaxed) as usize != key.len() {
            return false;
        }
        key.chunks(4).enumerate().all(|(i, c)| w[e + ENTRY_HEADER + i].load(Relaxed) == le_word(c))
    }

    /// Appends postings of the term at `entry` (of `field`): posting `k` is document `base + postings[k].0`,
    /// its positions `positions[postings[k - 1].1..postings[k].1]` (the first's from `from`), documents in
    /// increasing order. One posting for a document inserted alone; a block's run of them for a batch
    /// ([`Self::insert_batch`]), whose documents are all past the watermark until it is published whole: the
    /// tail block's fill counters and the (df, last doc) pair are then stored once per block and once per run
    /// instead of once per posting. Inlined: each caller's loop specializes it (a one-posting slice for one
    /// document).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // a run is (base, postings, from, positions): kept apart, no struct
    fn append_postings(
        &self,
        st: &mut WriterState,
        entry: usize,
        field: u16,
        base: u32,
        postings: &[(u32, u32)],
        mut from: usize,
        positions: &[u32],
    ) -> Result<(), InsertError> {
        let w = self.w();
        let width_of = |tf: usize| tf + escape_words(tf as u32);
        let mut tail = w[entry + 3].load(Relaxed) as usize;
        let mut k = 0;
        while k < postings.len() {
            let tf = postings[k].1 as usize - from;
            assert!(tf > 0, "a posting has a position");
            let need = POSTING_WORDS + width_of(tf);
            let room = |b: usize| {
                w[b].load(Relaxed) as usize
                    - w[b + 1].load(Relaxed) as usize
                    - w[b + BLOCK_BACK].load(Relaxed) as usize
            };
            if tail == 0 || room(tail) < need {
                let doc = base + postings[k].0;
                let cap = if tail == 0 {
                    need.max(FIRST_BLOCK)
                } else {
                    (2 * w[tail].load(Relaxed) as usize).min(MAX_BLOCK).max(need)
                };
                let b = self.bump(st, header_words(cap) + cap)?;
                // The header zeroed (no impacts yet, nothing used, no next block); the postings and positions
                // are written before `used` counts them.
                self.zero(b + 1, header_words(cap) - 1);
                w[b].store(cap as u32, Relaxed);
                if tail == 0 {
                    w[entry + 2].store(b as u32, Release);
                } else {
                    // Impacts and the next block's first doc before the link: a reader that follows it sees
                    // them.
                    self.seal(st, tail, field);
                    w[tail + BLOCK_NEXT_FIRST].store(doc, Relaxed);
                    w[tail + 2].store(b as u32, Release);
                }
                w[entry + 3].store(b as u32, Relaxed);
                tail = b;
            }
            // As many postings as the tail block has room for, posting words from the front and positions
            // from the back; its counters are stored once they are written.
            let cap = w[tail].load(Relaxed) as usize;
            let (mut used, mut back) =
                (w[tail + 1].load(Relaxed) as usize, w[tail + BLOCK_BACK].load(Relaxed) as usize);
            let start = tail + header_words(cap);
            let first = k;
            while let Some(&(d, to)) = postings.get(k) {
                let pos = &positions[from..to as usize];
                let width = width_of(pos.len());
                if cap - used - back < POSTING_WORDS + width {
                    break;
                }
                if used > 0 && used.is_multiple_of(CHUNK_WORDS) && chunks(cap) > 0 {
                    // This posting starts a chunk: the one before it is full (its posting words are written).
                    self.seal_chunk(st, tail, used / CHUNK_WORDS - 1, field);
                }
                let (at, p) = (start + used, start + cap - back - width);
                for (x, &y) in w[p..p + pos.len()].iter().zip(pos) {
                    x.store(y, Relaxed);
                }
                if width > pos.len() {
                    w[p + pos.len()].store(pos.len() as u32, Relaxed);
                }
                w[at].store(posting_word(base + d, pos.len() as u32), Relaxed);
                used += POSTING_WORDS;
                back += width;
                from = to as usize;
                k += 1;
            }
            assert!(k > first, "a block with room for the posting took it");
            w[tail + BLOCK_BACK].store(back as u32, Relaxed);
            w[tail + 1].store(used as u32, Release);
        }
        let Some(&(last, _)) = postings.last() else { return Ok(()) };
        // (df, last doc) change together, so a reader can tell whether df counts only docs below its watermark.
        // The previous pair first: a reader that finds the current one unchanged around its read of the
        // previous one knows the previous one is at most one posting older (see `df_below`; after a run of
        // several it counts the postings instead, until the watermark passes them).
        let pair = self.block.atomic_u64_at(entry + ENTRY_DF);
        let old = pair.load(Relaxed);
        self.block.atomic_u64_at(entry + ENTRY_PREV_DF).store(old, Release);
        let df = (old >> 32) + postings.len() as u64;
        pair.store(df << 32 | (base + last) as u64, Release);
        Ok(())
    }

    /// Writes the impacts of the full block at `b` (a term of `field`) into its header, if it has room for
    /// them, and those of its last chunk (the others were written as they filled, [`Self::seal_chunk`]). Its
    /// postings are all of complete documents, whose lengths the column holds.
    fn seal(&self, st: &mut WriterState, b: usize, field: u16) {
        let w = self.w();
        let cap = w[b].load(Relaxed) as usize;
        if cap < IMPACTS_MIN_CAP {
            return;
        }
        let used = w[b + 1].load(Relaxed) as usize;
        self.impact_inputs(st, b, 0, used, field);
        let (tfs, dls) = (&st.seal_tfs, &st.seal_dls);
        if chunks(cap) > 0 && !tfs.is_empty() {
            let last = (tfs.len() - 1) / CHUNK;
            self.store_chunk_impacts(b, last, &tfs[last * CHUNK..], &dls[last * CHUNK..]);
        }
        for (k, imp) in impacts(tfs, dls).into_iter().enumerate() {
            w[b + BLOCK_HEADER + k].store(pack_impact(imp), Relaxed);
        }
    }

    /// Writes the impacts of chunk `c` of block `b` (a term of `field`), which has just filled: the caller
    /// is about to publish the block's next posting, and a reader that sees it sees them, so the chunks of
    /// the open tail block bound their postings too (a common term's tail block holds up to a thousand
    /// postings, which a top-k otherwise reads whole).
    fn seal_chunk(&self, st: &mut WriterState, b: usize, c: usize, field: u16) {
        self.impact_inputs(st, b, c * CHUNK_WORDS, (c + 1) * CHUNK_WORDS, field);
        self.store_chunk_impacts(b, c, &st.seal_tfs, &st.seal_dls);
    }

    fn store_chunk_impacts(&self, b: usize, c: usize, tfs: &[u32], dls: &[u32]) {
        let w = self.w();
        assert!(c < chunks(w[b].load(Relaxed) as usize), "the header has room for every chunk");
        let chunk_at = b + BLOCK_HEADER + IMPACT_WORDS + IMPACT_WORDS * c;
        for (k, imp) in impacts(tfs, dls).into_iter().enumerate() {
            w[chunk_at + k].store(pack_impact(imp), Relaxed);
        }
    }

    /// The frequencies and field lengths of the postings in posting words `[from, to)` of block `b` (a term of
    /// `field`), into the writer's `seal_tfs` and `seal_dls`.
    fn impact_inputs(&self, st: &mut WriterState, b: usize, from: usize, to: usize, field: u16) {
        let w = self.w();
        let at = b + header_words(w[b].load(Relaxed) as usize);
        // A term field always has its column (allocated before the first posting).
        let col = w[self.field_dir + field as usize].load(Relaxed) as usize;
        let (tfs, dls) = (&mut st.seal_tfs, &mut st.seal_dls);
        tfs.clear();
        dls.clear();
        for j in (from..to).step_by(POSTING_WORDS) {
            let word = w[at + j].load(Relaxed);
            tfs.push(self.tf_at(b, at + j, word));
            dls.push(if col == 0 { 0 } else { w[col + 1 + doc_of(word) as usize].load(Relaxed) });
        }
    }

    /// Document frequency of a term among the documents below `limit`, in O(1) when no document at or
    /// after `limit` has the term yet (the usual case); `None` when the caller must count postings instead.
    pub fn df_below(&self, entry: u32, limit: u32) -> Option<u32> {
        let cur = self.block.atomic_u64_at(entry as usize + ENTRY_DF);
        let pair = cur.load(Acquire);
        let (df, last) = ((pair >> 32) as u32, pair as u32);
        if df == 0 || last < limit {
            return Some(df);
        }
        // Usually only the document being inserted is past the reader's watermark: the pair before its
        // posting says how many came earlier. The writer stores that pair before the current one, so if the
        // current pair is unchanged after it is read, it is the pair one run older or (a next run under way)
        // the current one again, which the df check rejects; so is a run of several postings (a batch's
        // term in several of its documents): then the postings are counted, until the watermark passes it.
        let prev = self.block.atomic_u64_at(entry as usize + ENTRY_PREV_DF).load(Acquire);
        let (prev_df, prev_last) = ((prev >> 32) as u32, prev as u32);
        (cur.load(Acquire) == pair && prev_df + 1 == df && (prev_df == 0 || prev_last < limit))
            .then_some(prev_df)
    }

    /// Looks a term key up; returns a handle for [`postings`](Self::postings).
    pub fn lookup(&self, key: &[u8]) -> Option<u32> {
        let w = self.w();
        let h = hash_key(key);
        let mask = self.table_cap - 1;
        let mut slot = h as usize & mask;
        for _ in 0..self.table_cap {
            let e = w[1 + slot].load(Acquire) as usize;
            if e == 0 {
                return None;
            }
            if self.entry_is(e, h, key) {
                return Some(e as u32);
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// The block linked after posting block `b` and its first document (`(0, NO_DOC)`: none linked yet).
    #[inline]
    fn next_block(&self, b: usize) -> (usize, u32) {
        let w = self.w();
        let next = w[b + 2].load(Acquire) as usize;
        (next, if next == 0 { NO_DOC } else { w[b + BLOCK_NEXT_FIRST].load(Relaxed) })
    }

    /// The frequency of the posting at word `at` of block `b`, whose posting word is `word`.
    #[inline]
    fn tf_at(&self, b: usize, at: usize, word: u32) -> u32 {
        let t = tf_byte(word);
        if t < TF_ESCAPE {
            t
        } else {
            self.escaped_tf(b, at)
        }
    }

    /// The frequency of the escaped posting at word `at` of block `b`: the word above its positions, found by
    /// summing the position words of the block's postings before it — a walk over the block, which has
    /// room for few such postings (each takes more than 255 words).
    #[cold]
    fn escaped_tf(&self, b: usize, at: usize) -> u32 {
        let w = self.w();
        let cap = w[b].load(Relaxed) as usize;
        let base = b + header_words(cap);
        let sum = self.position_words(base + cap, base, 0, at);
        w[base + cap - sum - 1].load(Relaxed)
    }

    /// Copies the postings of `words` — posting words of block `b` from word `at` on — whose documents are
    /// below `stop` into `docs` and `tfs` (which have room for them all); returns how many. Docs rise along a
    /// block, so those are a prefix (usually all of them), found first so the copy runs without a compare
    /// per posting.
    fn copy_below(
        &self,
        b: usize,
        at: usize,
        words: &[AtomicU32],
        stop: u32,
        docs: &mut [u32],
        tfs: &mut [u32],
    ) -> usize {
        let below = |x: &AtomicU32| doc_of(x.load(Relaxed)) < stop;
        let m = if words.last().is_none_or(below) { words.len() } else { words.partition_point(below) };
        let mut most = 0;
        for ((x, d_out), t_out) in words[..m].iter().zip(&mut docs[..m]).zip(&mut tfs[..m]) {
            let word = x.load(Relaxed);
            (*d_out, *t_out) = (doc_of(word), tf_byte(word));
            most = most.max(tf_byte(word));
        }
        if most == TF_ESCAPE {
            self.unescape(b, at, &mut tfs[..m]);
        }
        m
    }

    /// Replaces the escaped frequency bytes in `tfs`, the frequencies of the postings from word `at` of
    /// block `b` on, by the frequencies.
    #[cold]
    fn unescape(&self, b: usize, at: usize, tfs: &mut [u32]) {
        for (k, tf) in tfs.iter_mut().enumerate() {
            if *tf == TF_ESCAPE {
                *tf = self.escaped_tf(b, at + k * POSTING_WORDS);
            }
        }
    }

    /// `sum` plus the words that the positions (and escaped frequencies) of the postings in words
    /// `[from, to)` take at the end of their block, which ends at word `block_end`: four postings at a time
    /// while none is escaped (independent loads summed in a tree, not one add chain), else one by one.
    #[inline]
    fn position_words(&self, block_end: usize, from: usize, mut sum: usize, to: usize) -> usize {
        let w = self.w();
        let mut k = from;
        while k < to {
            if k + 4 <= to {
                let t = |i: usize| tf_byte(w[k + i].load(Relaxed));
                let (a, b, c, d) = (t(0), t(1), t(2), t(3));
                if a.max(b).max(c).max(d) < TF_ESCAPE {
                    sum += ((a + b) + (c + d)) as usize;
                    k += 4;
                    continue;
                }
            }
            let t = tf_byte(w[k].load(Relaxed));
            sum += if t < TF_ESCAPE { t as usize } else { w[block_end - sum - 1].load(Relaxed) as usize + 1 };
            k += 1;
        }
        sum
    }

    /// The impacts, as stored (packed), of posting block `b` (`k` = `WHOLE_BLOCK`) or of its chunk `k`, which
    /// the caller knows to be sealed (large enough to carry them — and chunks, for a chunk — its successor
    /// linked: loaded with acquire, so they are written).
    fn packed_impacts(&self, b: usize, k: usize) -> PackedImpacts {
        let w = self.w();
        let at = b + BLOCK_HEADER + if k == WHOLE_BLOCK { 0 } else { IMPACT_WORDS + IMPACT_WORDS * k };
        std::array::from_fn(|j| w[at + j].load(Relaxed))
    }

    /// Postings of a term, limited to documents below `limit` (a watermark the caller loaded).
    pub fn postings(&self, entry: u32, limit: u32) -> FreshPostings<'_> {
        let head = self.w()[entry as usize + 2].load(Acquire) as usize;
        let mut p = FreshPostings {
            seg: self,
            block: 0,
            base: 0,
            at: 0,
            end: 0,
            limit,
            doc: 0,
            tf: 0,
            block_end: 0,
            pos_at: 0,
            pos_sum: 0,
            skip_to: NO_DOC,
        };
        p.enter(head);
        p.next();
        p
    }

    /// Calls `f` with every posting of the term at `entry` below document `limit`, in order: its document and
    /// its position words (as many as its frequency). The flush's read of a list, which takes every posting
    /// in turn: block by block, each posting's positions found from the block's far end as the postings
    /// are walked, without a cursor's bookkeeping per posting ([`FreshPostings`]). `limit` is at most a
    /// watermark the caller loaded, as for [`postings`](Self::postings): every posting below it is within the
    /// `used` this reads.
    pub fn for_each_posting(&self, entry: u32, limit: u32, f: &mut impl FnMut(u32, &[AtomicU32])) {
        let w = self.w();
        let mut b = w[entry as usize + 2].load(Acquire) as usize;
        while b != 0 {
            let cap = w[b].load(Relaxed) as usize;
            let base = b + header_words(cap);
            let used = w[b + 1].load(Acquire) as usize;
            let next = w[b + 2].load(Acquire) as usize;
            // The next block lies anywhere in the arena, and this one's first positions at its far end.
            if next != 0 {
                prefetch(&w[next]);
            }
            prefetch(&w[base + cap - 1]);
            // Where the words of the posting before begin (the first posting's end at the block's end).
            let mut top = base + cap;
            for word in &w[base..base + used] {
                let word = word.load(Relaxed);
                let doc = doc_of(word);
                if doc >= limit {
                    return;
                }
                let tf = match tf_byte(word) {
                    // The frequency in full, in the word above the posting's positions.
                    TF_ESCAPE => w[top - 1].load(Relaxed) as usize,
                    t => t as usize,
                };
                top -= tf + escape_words(tf as u32);
                f(doc, &w[top..top + tf]);
            }
            b = next;
        }
    }

    /// A term's look-ahead for a walk over many terms (flush): hints the CPU to fetch the entry word
    /// [`postings`](Self::postings) reads first. Issue it some terms ahead, then
    /// [`prefetch_head`](Self::prefetch_head) once the entry has arrived: each is a cache miss per term
    /// otherwise, and most terms of a segment have a posting or two.
    #[inline]
    pub fn prefetch_entry(&self, entry: u32) {
        prefetch(&self.w()[entry as usize + 2]);
    }

    /// Hints the CPU to fetch the first posting block of the term at `entry` (its header and first
    /// postings), reading the entry's head word — cached by an earlier [`prefetch_entry`](Self::prefetch_entry).
    #[inline]
    pub fn prefetch_head(&self, entry: u32) {
        let w = self.w();
        let head = w[entry as usize + 2].load(Relaxed) as usize;
        if head != 0 {
            prefetch(&w[head]);
            // The line after, where a first block's postings and positions end.
            prefetch(&w[(head + 16).min(w.len() - 1)]);
        }
    }

    /// Every term key in the segment (unordered). Used by flush and prefix expansion.
    ///
    /// The table is read in slot order, so the entries come in no order of address: each is a cache miss.
    /// They are fetched [`KEYS_AHEAD`] entries before their key is read, so the misses overlap (a flush of
    /// 100k enwiki documents reads ~1M entries this way).
    pub fn for_each_key(&self, f: &mut dyn FnMut(&[u8], u32)) {
        let w = self.w();
        let mut key = Vec::new();
        let mut ahead = [0usize; KEYS_AHEAD];
        let mut read = |e: usize, key: &mut Vec<u8>| {
            let len = w[e + 1].load(Relaxed) as usize;
            words_of(&w[e + ENTRY_HEADER..], len, key);
            f(key, e as u32);
        };
        let mut found = 0usize;
        for slot in 0..self.table_cap {
            let e = w[1 + slot].load(Acquire) as usize;
            if e != 0 {
                prefetch(&w[e]);
                let at = found % KEYS_AHEAD;
                if found >= KEYS_AHEAD {
                    read(ahead[at], &mut key);
                }
                ahead[at] = e;
                found += 1;
            }
        }
        for i in found.saturating_sub(KEYS_AHEAD)..found {
            read(ahead[i % KEYS_AHEAD], &mut key);
        }
    }

    fn column(&self, field: u16, kind: u32) -> Option<usize> {
        let at = self.w()[self.field_dir + field as usize].load(Acquire) as usize;
        (at != 0 && self.w()[at].load(Relaxed) == kind).then_some(at + 1)
    }

    /// BM25 statistics of a field over documents below `limit`.
    pub fn field_stats(&self, field: u16, limit: u32) -> FieldStats {
        match (self.column(field, KIND_TEXT), limit) {
            (Some(c), 1..) => {
                let md = self.max_docs as usize;
                let w = self.w();
                FieldStats {
                    docs: w[c + 2 * md + limit as usize - 1].load(Relaxed) as u64,
                    total_len: w[c + md + limit as usize - 1].load(Relaxed) as u64,
                }
            }
            _ => FieldStats::default(),
        }
    }

    /// Field length (tokens) of `doc` in a term field.
    pub fn field_len(&self, field: u16, doc: u32) -> u32 {
        self.column(field, KIND_TEXT).map_or(0, |c| self.w()[c + doc as usize].load(Relaxed))
    }

    /// Every document's length (tokens) in a term field, indexed by local doc (empty when no document of
    /// the segment has the field). Entries of documents at or past a reader's watermark are not its to
    /// read: they may still be written.
    pub fn lengths(&self, field: u16) -> &[AtomicU32] {
        self.column(field, KIND_TEXT).map_or(&[], |c| &self.w()[c..c + self.max_docs as usize])
    }

    /// Numeric value of `doc` in a numeric or date field.
    pub fn numeric(&self, field: u16, doc: u32) -> Option<f64> {
        let c = self.column(field, KIND_NUMERIC)?;
        let w = self.w();
        let bits = w[c + 2 * doc as usize].load(Relaxed) as u64
            | (w[c + 2 * doc as usize + 1].load(Relaxed) as u64) << 32;
        let x = f64::from_bits(bits);
        (!x.is_nan()).then_some(x)
    }

    /// `_id` and `_source` of a visible document.
    pub fn stored(&self, doc: u32) -> Result<(String, Vec<u8>), SegmentError> {
        let (mut id, mut src) = (Vec::new(), Vec::new());
        self.stored_into(doc, &mut id, &mut src)?;
        Ok((String::from_utf8(id).map_err(|_| SegmentError("stored _id is not UTF-8".into()))?, src))
    }

    /// [`stored`](Self::stored) into the caller's buffers (replacing their contents): the flusher copies
    /// every record with no allocation per document.
    pub fn stored_into(&self, doc: u32, id: &mut Vec<u8>, src: &mut Vec<u8>) -> Result<(), SegmentError> {
        if doc >= self.visible() {
            return Err(SegmentError("stored doc beyond the watermark".into()));
        }
        let w = self.w();
        let rec = w[self.doc_table + doc as usize].load(Relaxed) as usize;
        let id_len = w[rec].load(Relaxed) as usize;
        let src_len = w[rec + 1].load(Relaxed) as usize;
        words_of(&w[rec + 2..], id_len, id);
        words_of(&w[rec + 2 + words_for(id_len)..], src_len, src);
        Ok(())
    }

    /// Kinds of the fields with columns in this segment: `(field, is_text)`.
    pub fn column_fields(&self) -> Vec<(u16, bool)> {
        (0..MAX_FIELDS as u16)
            .filter_map(|f| {
                let at = self.w()[self.field_dir + f as usize].load(Acquire) as usize;
                (at != 0).then(|| (f, self.w()[at].load(Relaxed) == KIND_TEXT))
            })
            .collect()
    }
}

fn store_bytes(words: &[AtomicU32], bytes: &[u8]) {
    for (i, c) in bytes.chunks(4).enumerate() {
        words[i].store(le_word(c), Relaxed);
    }
}

/// Up to four bytes as a little-endian word, zero-padded: how keys and stored bytes sit in the arena's
/// words. Written out per length (a `copy_from_slice` of a variable length into a padded array is a
/// `memcpy` call per chunk, which was most of a term lookup's key comparison on ingest).
#[inline(always)]
fn le_word(c: &[u8]) -> u32 {
    match *c {
        [a, b, x, y, ..] => u32::from_le_bytes([a, b, x, y]),
        [a, b, x] => u32::from_le_bytes([a, b, x, 0]),
        [a, b] => u32::from_le_bytes([a, b, 0, 0]),
        [a] => a as u32,
        [] => 0,
    }
}

/// A cursor over a fresh term's postings below a watermark.
pub struct FreshPostings<'a> {
    seg: &'a FreshSegment,
    /// The cursor's posting block (0: past the last one).
    block: usize,
    /// Word index of the block's first posting.
    base: usize,
    /// Word index of the next posting to read.
    at: usize,
    /// Word index where the block's postings ended when its `used` was last loaded (with acquire: every
    /// posting below it is written). Postings are read up to it without another load of `used`.
    end: usize,
    limit: u32,
    doc: u32,
    tf: u32,
    /// Word index just past the block's end, below which its positions lie.
    block_end: usize,
    /// Positions are found from frequencies: `pos_sum` is the sum of the frequencies of the block's
    /// postings before word `pos_at`, which only moves forward (so a block's walk sums each once).
    pos_at: usize,
    pos_sum: usize,
    /// The first document of the block after the cursor's, as it was when the cursor entered its block
    /// (`NO_DOC` when none was linked yet): `advance` jumps to that block without
    /// walking the rest of this one when its target is there or later.
    skip_to: u32,
}

impl FreshPostings<'_> {
    #[inline]
    pub fn doc(&self) -> u32 {
        self.doc
    }

    #[inline]
    pub fn freq(&self) -> u32 {
        self.tf
    }

    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> u32 {
        if self.at < self.end {
            let w = self.seg.w();
            let word = w[self.at].load(Relaxed);
            let d = doc_of(word);
            if d >= self.limit {
                return self.finish();
            }
            self.tf = self.seg.tf_at(self.block, self.at, word);
            self.at += POSTING_WORDS;
            self.doc = d;
            return d;
        }
        self.next_in_another_load()
    }

    /// [`next`](Self::next) past the postings known to be written: loads the block's `used` again (the
    /// open tail block grows while it is read) or moves on to the next block.
    #[cold]
    fn next_in_another_load(&mut self) -> u32 {
        let w = self.seg.w();
        loop {
            if self.block == 0 {
                return self.finish();
            }
            self.end = self.base + w[self.block + 1].load(Acquire) as usize;
            if self.at < self.end {
                return self.next();
            }
            self.enter(w[self.block + 2].load(Acquire) as usize);
        }
    }

    /// Past the last posting below the limit: every later call returns `NO_DOC`.
    fn finish(&mut self) -> u32 {
        (self.block, self.at, self.end, self.doc) = (0, 0, 0, NO_DOC);
        NO_DOC
    }

    /// Moves to the start of block `b` (0: past the last block) and notes where the block after it starts.
    #[inline]
    fn enter(&mut self, b: usize) {
        self.block = b;
        if b == 0 {
            (self.base, self.at, self.end, self.skip_to) = (0, 0, 0, NO_DOC);
            return;
        }
        let w = self.seg.w();
        let cap = w[b].load(Relaxed) as usize;
        self.base = b + header_words(cap);
        (self.at, self.end, self.block_end) = (self.base, self.base, self.base + cap);
        (self.pos_at, self.pos_sum) = (self.base, 0);
        let next;
        (next, self.skip_to) = self.seg.next_block(b);
        // The next block lies anywhere in the arena: its header is fetched while this block is read (a list
        // read through, as the flush's biwords read their words', missed on each otherwise).
        if next != 0 {
            prefetch(&w[next]);
        }
    }

    /// The end (exclusive) of the documents the cursor's block may hold: the first document of the next
    /// block, or `NO_DOC` when there is none yet (the open tail block).
    pub fn block_end(&self) -> u32 {
        if self.block == 0 {
            return NO_DOC;
        }
        self.seg.next_block(self.block).1
    }

    /// The largest `bound` of the impacts of the blocks, from the cursor's on, that may hold a document in
    /// `[from, end)` — of their chunks that may, in blocks with chunks — or `fallback` if one of them has no
    /// impacts (a small block, the open tail block without chunks, its last chunk), 0 if none may hold one. Reads block headers and chunk
    /// starts only; the cursor does not move.
    pub fn max_block_bound(
        &self,
        from: u32,
        end: u32,
        bound: impl Fn(&PackedImpacts) -> f32,
        fallback: f32,
    ) -> f32 {
        if self.doc == NO_DOC {
            return 0.0;
        }
        let (seg, w) = (self.seg, self.seg.w());
        let mut b = self.block;
        let mut best = 0.0f32;
        while b != 0 {
            let (next, next_first) = seg.next_block(b);
            // Block `b` holds documents below `next_first`.
            if next_first > from {
                let cap = w[b].load(Relaxed) as usize;
                // The open tail block (no successor yet) has impacts only in its chunks before the last.
                let open = next == 0;
                if cap < IMPACTS_MIN_CAP || (open && chunks(cap) == 0) {
                    return fallback;
                }
                let base = b + header_words(cap);
                // A block inside the range whole is bounded by its own impacts (they bound its chunks').
                if !open && (chunks(cap) == 0 || (next_first <= end && doc_of(w[base].load(Relaxed)) >= from))
                {
                    best = best.max(bound(&seg.packed_impacts(b, WHOLE_BLOCK)));
                } else {
                    // Chunk k holds the postings from word `base + k * CHUNK_WORDS` on, so documents from the
                    // first one there to the next chunk's first (the next block's, for the last chunk). Every
                    // chunk but the last has a posting after it (`used` loaded with acquire): its impacts are
                    // written; so are the last one's once the block is sealed.
                    let n = (w[b + 1].load(Acquire) as usize / POSTING_WORDS).div_ceil(CHUNK);
                    for k in 0..n {
                        let chunk_end = if k + 1 < n {
                            doc_of(w[base + (k + 1) * CHUNK_WORDS].load(Relaxed))
                        } else {
                            next_first
                        };
                        if chunk_end <= from {
                            continue;
                        }
                        if doc_of(w[base + k * CHUNK_WORDS].load(Relaxed)) >= end {
                            break;
                        }
                        if open && k + 1 == n {
                            return fallback;
                        }
                        best = best.max(bound(&seg.packed_impacts(b, k)));
                    }
                }
                if next_first >= end {
                    break;
                }
            }
            b = next;
        }
        best
    }

    /// In a block with chunks, where the chunk holding the cursor's posting is full and another posting
    /// follows it (in this block or the next): the chunk's impacts (packed), and the end (exclusive) of the
    /// documents the chunk may hold — the next chunk's first document, or the next block's. `None` elsewhere
    /// (the last chunk of the open tail block, a block too small for chunks, past the end).
    pub fn chunk_window(&self) -> Option<(PackedImpacts, u32)> {
        if self.doc == NO_DOC {
            return None;
        }
        let w = self.seg.w();
        if chunks(w[self.block].load(Relaxed) as usize) == 0 {
            return None;
        }
        // `at` is just past the cursor's posting.
        let k = ((self.at - self.base) / POSTING_WORDS - 1) / CHUNK;
        let next = self.base + (k + 1) * CHUNK_WORDS;
        // A posting after the chunk (loaded with acquire) says its impacts are written, in the open block too.
        let end = if next < self.base + w[self.block + 1].load(Acquire) as usize {
            doc_of(w[next].load(Relaxed))
        } else {
            match self.seg.next_block(self.block) {
                (0, _) => return None,
                (_, first) => first,
            }
        };
        Some((self.seg.packed_impacts(self.block, k), end))
    }

    /// Every region of the list from the cursor's block on (whole: a region holds its postings before the
    /// cursor too, so a walk starts from a fresh cursor), in list order: `f(block, chunk, impacts)` for each
    /// chunk of a block with chunks, `(block, WHOLE_BLOCK, impacts)` for a block without; the impacts (packed,
    /// as stored) are `Some` where they bound the region — a sealed block's (per chunk where it has chunks),
    /// and every chunk of the open tail block but its last — and `None` in small blocks, in the open tail
    /// block without chunks, and in its last chunk (the chunks of the open block are those of its postings
    /// written so far).
    /// Reads block headers only; the cursor does not move. A term's top-k walks the regions newest first.
    pub fn for_each_region(&self, mut f: impl FnMut(usize, usize, Option<&PackedImpacts>)) {
        if self.doc == NO_DOC {
            return;
        }
        let (seg, w) = (self.seg, self.seg.w());
        let mut b = self.block;
        while b != 0 {
            let next = w[b + 2].load(Acquire) as usize;
            let cap = w[b].load(Relaxed) as usize;
            // Once the successor is linked (acquire) the block is sealed: `used` and its impacts are final.
            let sealed = next != 0 && cap >= IMPACTS_MIN_CAP;
            if chunks(cap) == 0 {
                f(b, WHOLE_BLOCK, sealed.then(|| seg.packed_impacts(b, WHOLE_BLOCK)).as_ref());
            } else {
                // Every chunk but the last has a posting after it: its impacts are written, sealed or not.
                let n = (w[b + 1].load(Acquire) as usize / POSTING_WORDS).div_ceil(CHUNK);
                for k in 0..n {
                    f(b, k, (sealed || k + 1 < n).then(|| seg.packed_impacts(b, k)).as_ref());
                }
            }
            b = next;
        }
    }

    /// The words `[from, to)` holding the postings of region (`b`, `k`) written so far.
    fn region_words(&self, b: usize, k: usize) -> (usize, usize) {
        let w = self.seg.w();
        let base = b + header_words(w[b].load(Relaxed) as usize);
        let used = base + w[b + 1].load(Acquire) as usize;
        if k == WHOLE_BLOCK {
            (base, used)
        } else {
            ((base + k * CHUNK_WORDS).min(used), used.min(base + (k + 1) * CHUNK_WORDS))
        }
    }

    /// The postings of a region [`Self::for_each_region`] reported whose documents are below the cursor's
    /// limit, copied into `docs` and `tfs`; returns how many. The cursor does not move.
    pub fn region_postings(
        &self,
        b: usize,
        k: usize,
        docs: &mut [u32; MAX_REGION],
        tfs: &mut [u32; MAX_REGION],
    ) -> usize {
        let w = self.seg.w();
        let (from, to) = self.region_words(b, k);
        assert!(to - from <= MAX_REGION * POSTING_WORDS, "a region holds at most MAX_REGION postings");
        let words = &w[from..to];
        self.seg.copy_below(b, from, words, self.limit, docs, tfs)
    }

    /// The last document of a region [`Self::for_each_region`] reported (`NO_DOC` if it has none), below the
    /// limit or not.
    pub fn region_last_doc(&self, b: usize, k: usize) -> u32 {
        let (from, to) = self.region_words(b, k);
        if to <= from {
            return NO_DOC;
        }
        doc_of(self.seg.w()[to - POSTING_WORDS].load(Relaxed))
    }

    /// Whether the cursor is on the first posting of its block (tests walk blocks with it).
    #[cfg(test)]
    fn at_block_start(&self) -> bool {
        self.at == self.base + POSTING_WORDS
    }

    /// The impacts (packed) of the cursor's block if it is sealed (full, its successor linked; then they bound every
    /// posting in it), else `None` — the open tail block, or a block too small to carry them.
    pub fn sealed_impacts(&self) -> Option<PackedImpacts> {
        if self.doc == NO_DOC {
            return None;
        }
        let w = self.seg.w();
        if (w[self.block].load(Relaxed) as usize) < IMPACTS_MIN_CAP || w[self.block + 2].load(Acquire) == 0 {
            return None;
        }
        Some(self.seg.packed_impacts(self.block, WHOLE_BLOCK))
    }

    /// Moves to the first posting of the next block (below the limit), passing over the rest of this one.
    pub fn skip_block(&mut self) -> u32 {
        if self.doc == NO_DOC {
            return NO_DOC;
        }
        self.enter(self.seg.w()[self.block + 2].load(Acquire) as usize);
        self.next()
    }

    /// The first document at or after `target`: whole blocks that end before it are passed over (the
    /// next block's first document is known on entering a block), then the block's postings known to be
    /// written are searched (galloping from the cursor: a near target costs a compare or two).
    pub fn advance(&mut self, target: u32) -> u32 {
        if self.doc >= target {
            return self.doc;
        }
        while self.skip_to <= target {
            self.enter(self.seg.w()[self.block + 2].load(Acquire) as usize);
        }
        let w = self.seg.w();
        if self.at == self.end && self.block != 0 {
            // A block just entered, or one read to its end as last loaded: what is written now.
            self.end = self.base + w[self.block + 1].load(Acquire) as usize;
        }
        let n = (self.end - self.at) / POSTING_WORDS;
        let doc = |k: usize| doc_of(w[self.at + k * POSTING_WORDS].load(Relaxed));
        if n > 0 && doc(n - 1) >= target {
            // The first k with doc(k) >= target: gallop to bracket it, then bisect.
            let (mut lo, mut hi) = (0, 1);
            if doc(0) < target {
                while hi < n && doc(hi) < target {
                    lo = hi;
                    hi = (2 * hi).min(n - 1);
                }
                // doc(lo) < target <= doc(hi)
                while hi - lo > 1 {
                    let mid = (lo + hi) / 2;
                    if doc(mid) < target {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
            } else {
                hi = 0;
            }
            self.at += hi * POSTING_WORDS;
            return self.next();
        }
        // Every posting known here is below the target: on past them (more may be written since).
        self.at = self.end;
        while self.doc < target {
            self.next();
        }
        self.doc
    }

    /// Copies the postings from the cursor's on whose documents are below `end`, at most `docs.len()` of
    /// them, into `docs` and `tfs`, and moves the cursor onto the first one not taken. Returns how many.
    pub fn take_below(&mut self, end: u32, docs: &mut [u32], tfs: &mut [u32]) -> usize {
        let cap = docs.len().min(tfs.len());
        let (w, stop) = (self.seg.w(), end.min(self.limit));
        let mut m = 0;
        // `NO_DOC` is at least any `end`: past the last posting nothing is taken.
        while m < cap && self.doc < end {
            (docs[m], tfs[m]) = (self.doc, self.tf);
            m += 1;
            // The rest of the block's postings known to be written, copied straight from its words (slices
            // cut to length first, so the loop tests only the doc against `stop`).
            let n = (cap - m).min((self.end - self.at) / POSTING_WORDS);
            let words = &w[self.at..self.at + n * POSTING_WORDS];
            let k = self.seg.copy_below(self.block, self.at, words, stop, &mut docs[m..], &mut tfs[m..]);
            m += k;
            self.at += k * POSTING_WORDS;
            // Onto the first posting not taken (past the limit: `NO_DOC`).
            self.next();
        }
        m
    }

    /// Looks sorted candidates up from the cursor's document on: `out[k]` becomes the frequency of
    /// `cands[k]` here, or 0 where the list does not have it (a posting's frequency is at least 1). The
    /// cursor ends on the first document at or after the last candidate (`NO_DOC` if none).
    ///
    /// Candidate by candidate, [`advance`](Self::advance) gallops and bisects — a handful of mispredicted
    /// compares each. Where the list is about as dense as the candidates (at most [`FRESH_MARKS_RATIO`]
    /// postings per candidate between one candidate and a later one in the cursor's block, fewer than
    /// [`MARKS_SPAN`] doc ids apart), its postings there are marked instead: each posting's frequency is
    /// written into `marks` at its doc id's offset, each candidate reads its slot, and the postings' slots
    /// are zeroed again (`marks` is all zero between calls) — SPIRIT §4.11's merge-class intersection for
    /// lists of similar density, branch-free, as [`PostingsCursor::retain`](crate::codec::PostingsCursor::retain)
    /// does with image blocks.
    pub fn probe(&mut self, cands: &[u32], out: &mut [u32], marks: &mut [u32; MARKS_SPAN as usize]) {
        let m = cands.len().min(out.len());
        let w = self.seg.w();
        // Whether marking may pay here at all: the postings the cursor's block holds per doc id, over the
        // candidates' span, against the candidates (pruned batches are sparse; their lookups stay searches).
        let dense = m >= 2 && self.doc != NO_DOC && {
            let known = (self.end - (self.at - POSTING_WORDS)) / POSTING_WORDS;
            let list_span = doc_of(w[self.end - POSTING_WORDS].load(Relaxed)) - self.doc + 1;
            let cands_span = cands[m - 1] - cands[0] + 1;
            known as u64 * cands_span as u64 <= (FRESH_MARKS_RATIO * m) as u64 * list_span as u64
        };
        if !dense {
            for (&c, o) in cands[..m].iter().zip(&mut out[..m]) {
                let x = self.advance(c);
                *o = if x == c { self.tf } else { 0 };
            }
            return;
        }
        let mut i = 0;
        while i < m {
            let lo = cands[i];
            let x = self.advance(lo);
            out[i] = if x == lo { self.tf } else { 0 };
            i += 1;
            if x == NO_DOC {
                out[i..m].fill(0);
                return;
            }
            // The cursor's block holds, from the cursor's posting (word `at - 2`) to `end`, postings known to
            // be written. The candidates after `lo` up to its last one there (and within the span) are
            // `cands[i..j]`; the postings before `cands[j - 1]` are marked for `cands[i..j - 1]`, and the last
            // is advanced to as usual, so the cursor ends where candidate-by-candidate lookups leave it.
            debug_assert!(
                self.at > self.base && self.at <= self.end,
                "the cursor is on a posting of its block"
            );
            let from = self.at - POSTING_WORDS;
            let last = doc_of(w[self.end - POSTING_WORDS].load(Relaxed));
            let top = last.min(lo.saturating_add(MARKS_SPAN - 1));
            let j = i + cands[i..m].partition_point(|&c| c <= top);
            if j < i + 2 {
                continue;
            }
            let stop = cands[j - 1];
            // Postings in `[from, end)` with a doc below `stop` (docs rise along the block): `[from, to)`.
            // Marking only pays for at most `most` of them, so the search looks no further: if the posting
            // at `most` is still below `stop`, the stretch is too dense for marks.
            let n = (self.end - from) / POSTING_WORDS;
            let most = FRESH_MARKS_RATIO * (j - 1 - i);
            if most < n && doc_of(w[from + most * POSTING_WORDS].load(Relaxed)) < stop {
                continue;
            }
            let below = {
                let (mut lo_k, mut hi_k) = (0, n.min(most));
                while lo_k < hi_k {
                    let mid = (lo_k + hi_k) / 2;
                    if doc_of(w[from + mid * POSTING_WORDS].load(Relaxed)) < stop {
                        lo_k = mid + 1;
                    } else {
                        hi_k = mid;
                    }
                }
                lo_k
            };
            let to = from + below * POSTING_WORDS;
            // Every doc there is in `[x, stop)`, `x >= lo` and `stop - lo < MARKS_SPAN`; all below the limit,
            // as `stop` (a candidate) is.
            for k in (from..to).step_by(POSTING_WORDS) {
                let word = w[k].load(Relaxed);
                marks[(doc_of(word) - lo) as usize] = self.seg.tf_at(self.block, k, word);
            }
            for (&c, o) in cands[i..j - 1].iter().zip(&mut out[i..j - 1]) {
                *o = marks[(c - lo) as usize];
            }
            for k in (from..to).step_by(POSTING_WORDS) {
                marks[(doc_of(w[k].load(Relaxed)) - lo) as usize] = 0;
            }
            // Onto the first posting at or after `stop`.
            self.at = to;
            self.next();
            i = j - 1;
        }
    }

    pub fn positions(&mut self, out: &mut Vec<u32>) {
        let (at, n) = self.positions_at();
        self.read_positions(at, n, out);
    }

    /// Where the positions of the cursor's posting lie: the word of the first and how many there are (its
    /// frequency; `(0, 0)` past the end). A batch finds them all first, prefetching each
    /// ([`Self::prefetch_positions`]), then reads them ([`Self::read_positions`]): position words lie at the
    /// far end of their block from the postings, one cache miss per document otherwise taken in turn.
    pub fn positions_at(&mut self) -> (usize, usize) {
        if self.doc == NO_DOC {
            return (0, 0);
        }
        // The position words of the postings before this one, from where the last call left off.
        let here = self.at - POSTING_WORDS;
        self.pos_sum = self.seg.position_words(self.block_end, self.pos_at, self.pos_sum, here);
        self.pos_at = here;
        let tf = self.tf as usize;
        (self.block_end - self.pos_sum - tf - escape_words(self.tf), tf)
    }

    /// Hints the CPU to fetch the first position word [`Self::positions_at`] returned.
    #[inline]
    pub fn prefetch_positions(&self, at: usize) {
        prefetch(&self.seg.w()[at]);
    }

    /// Replaces `out` with the `n` position words from word `at` on, as [`Self::positions_at`] returned them.
    pub fn read_positions(&self, at: usize, n: usize, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.seg.w()[at..at + n].iter().map(|x| x.load(Relaxed)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{unpack_impact, Impacts};
    use crate::memory::{DramHeap, Fill, RingKind};
    use crate::schema::{analyze_document, BlockTerms, Schema};
    use serde_json::json;

    /// The totals' bound, which decides most documents without a pass over their terms, is never below the
    /// exact one (so both give the same answer), and not far above it for ordinary text.
    #[test]
    fn quick_bound_is_at_least_the_exact_bound() {
        let schema =
            Schema::from_mappings(&json!({"properties": {"body": {"type": "text"}, "n": {"type": "long"}}}))
                .unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..300 {
            let words: Vec<String> = (0..next() % 400)
                .map(|_| {
                    let len = 1 + (next() % 13) as usize;
                    let stem = next() % (1 + i as u64 % 50);
                    format!("{stem}{}", "k".repeat(len))
                })
                .collect();
            let doc = analyze_document(&schema, format!("id{i}"), &json!({"body": words.join(" "), "n": i}))
                .unwrap();
            for (fields, max_docs) in [(0, 1000), (2, 1000), (1, 65536)] {
                let (exact, quick) =
                    (super::bound(&doc, fields, max_docs), quick_bound(&doc, fields, max_docs));
                assert!(quick >= exact, "doc {i}: quick {quick} < exact {exact}");
                assert!(quick <= 2 * exact, "doc {i}: quick {quick} far above exact {exact}");
            }
        }
    }

    /// Keys and stored bytes go into words zero-padded little-endian, whatever their length; `entry_is`
    /// tells a stored key from every key that differs in one byte or in length.
    #[test]
    fn le_words_pad_and_keys_compare_exactly() {
        for len in 0..=4 {
            let c: Vec<u8> = (1..=len as u8).map(|x| x * 37).collect();
            let mut b = [0u8; 4];
            b[..len].copy_from_slice(&c);
            assert_eq!(le_word(&c), u32::from_le_bytes(b), "length {len}");
        }
        let heap = DramHeap::new(4 << 20, 3 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 2 << 20).unwrap(), 1000);
        let mut st = fresh.writer.lock();
        for len in 0..=13usize {
            let key: Vec<u8> = (0..len as u8).map(|x| x.wrapping_mul(73).wrapping_add(5)).collect();
            let e = fresh.find_or_insert(&mut st, &key, hash_key(&key)).unwrap();
            assert!(fresh.entry_is(e, hash_key(&key), &key));
            for i in 0..len {
                let mut other = key.clone();
                other[i] ^= 1;
                assert!(!fresh.entry_is(e, hash_key(&key), &other), "byte {i} of {len}");
            }
            let longer = [key.as_slice(), &[0]].concat();
            assert!(!fresh.entry_is(e, hash_key(&key), &longer), "a zero byte more, length {len}");
        }
    }

    /// A fresh segment laid out in an arena full of junk (the ring hands arenas back unzeroed) holds and
    /// answers exactly what one in a zeroed arena does: the same image when flushed, and to a reader the
    /// same postings, positions, block and chunk impacts, document frequencies, lengths, numbers and stored
    /// records (and the same image, flushed serially or in parallel) — with a text field that first appears
    /// late (its column zeroed for the documents before), numbers in some documents only, terms common
    /// enough for sealed blocks with chunks.
    /// Random documents over three fields (one numeric, one in only some of them, so columns start mid-way),
    /// analyzed one by one with `_id`s `id0`, `id1`, ...
    fn mixed_docs(n: u32, seed: u64, max_words: u64, vocabulary: u64) -> Vec<AnalyzedDoc> {
        let (schema, values) = mixed_values(n, seed, max_words, vocabulary);
        values
            .iter()
            .enumerate()
            .map(|(i, d)| analyze_document(&schema, format!("id{i}"), d).unwrap())
            .collect()
    }

    /// [`mixed_docs`]' documents as JSON, with their schema.
    fn mixed_values(n: u32, seed: u64, max_words: u64, vocabulary: u64) -> (Schema, Vec<serde_json::Value>) {
        let schema = Schema::from_mappings(&json!({"properties": {
            "body": {"type": "text"}, "title": {"type": "text"}, "n": {"type": "long"}}}))
        .unwrap();
        let mut rng = seed;
        let values = (0..n)
            .map(|i| {
                let mut next = |m: u64| crate::rng::xorshift(&mut rng) % m;
                let words: Vec<String> = (0..1 + next(max_words))
                    .map(|_| {
                        let spread = 1 + next(vocabulary);
                        format!("w{}", next(spread))
                    })
                    .collect();
                let mut d = json!({ "body": words.join(" ") });
                if i > n / 2 && i % 3 == 0 {
                    d["title"] = json!(format!("t{} w{}", i % 7, next(20)));
                }
                if i % 4 == 0 {
                    d["n"] = json!(i);
                }
                d
            })
            .collect();
        (schema, values)
    }

    /// Documents `range` of `values` (`_id`s `id{i}`) analyzed into one block, as a bulk load's worker does,
    /// and `batch` filled from it. Before each, one whose analysis fails part-way (a bad number after its
    /// text) and after each, one analyzed but left out (as one over the size limit is): neither leaves
    /// anything in the batch.
    fn block_batch(
        schema: &Schema,
        values: &[serde_json::Value],
        range: std::ops::Range<usize>,
        terms: &mut BlockTerms,
        batch: &mut TermBatch,
    ) -> Vec<AnalyzedDoc> {
        use crate::schema::analyze_document_into;
        terms.clear();
        let bad = json!({"body": "w1 w2 junk", "n": "not a number"});
        let left_out = json!({"body": "w3 w1 w9 leftout"});
        let docs = range
            .map(|i| {
                assert!(analyze_document_into(schema, "bad".into(), &bad, false, terms).is_err());
                let d = analyze_document_into(schema, format!("id{i}"), &values[i], false, terms).unwrap();
                terms.take();
                analyze_document_into(schema, "out".into(), &left_out, false, terms).unwrap();
                terms.discard();
                d
            })
            .collect();
        batch.fill(terms);
        docs
    }

    /// The terms of `doc` with their positions, sorted.
    fn sorted_terms(doc: &AnalyzedDoc) -> Vec<(Vec<u8>, Vec<u32>)> {
        let mut t: Vec<_> = doc.terms().map(|(k, p)| (k.to_vec(), p.to_vec())).collect();
        t.sort();
        t
    }

    /// Batches of any size insert exactly what inserting their documents one by one does (the flushed
    /// images are the same bytes); one that may not fit writes nothing; one that fills the arena part-way
    /// publishes none of its documents, and the segment answers at its watermark as before it.
    #[test]
    fn a_batch_inserts_what_one_by_one_inserts_do() {
        let docs = mixed_docs(3000, 0xba7c, 60, 400);
        let (schema, values) = mixed_values(3000, 0xba7c, 60, 400);
        let heap = DramHeap::new(16 << 20, 12 << 20).unwrap();
        let codecs = crate::codec::FieldCodecs::default();
        let image = |f: &FreshSegment| crate::segment::ImageBuilder::from_fresh(f, 1, 0, &codecs).unwrap();
        let one_by_one = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 4 << 20).unwrap(), 1 << 20);
        for d in &docs {
            one_by_one.insert(d).unwrap();
        }
        let expected = image(&one_by_one);
        // What the flushed image leaves out: each term's (df, last doc) answer and the impacts its fresh blocks
        // and chunks carry for queries on the fresh segment.
        let fresh_view = |f: &FreshSegment| {
            let n = f.visible();
            let mut terms = std::collections::BTreeMap::new();
            f.for_each_key(&mut |key, e| {
                let mut regions = vec![];
                let mut p = f.postings(e, n);
                p.for_each_region(|_, chunk, imp| regions.push((chunk, imp.copied())));
                let mut windows = vec![];
                while p.doc() != crate::codec::NO_DOC {
                    windows.push((p.doc(), p.sealed_impacts(), p.chunk_window()));
                    p.next();
                }
                terms.insert(key.to_vec(), (f.df_below(e, n), regions, windows));
            });
            terms
        };
        let expected_view = fresh_view(&one_by_one);
        drop(one_by_one);
        let batched = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 4 << 20).unwrap(), 1 << 20);
        let (mut batch, mut block) = (TermBatch::default(), BlockTerms::default());
        let (mut at, mut k) = (0, 0);
        while at < docs.len() {
            let size = [1, 2, 7, 50, 333, 3][k % 6].min(docs.len() - at);
            let held = block_batch(&schema, &values, at..at + size, &mut block, &mut batch);
            let alone = &docs[at..at + size];
            assert!(held.iter().all(|d| !d.holds_terms()), "the block holds their terms");
            let totals =
                |d: &AnalyzedDoc| (d.term_count(), d.position_count(), d.key_bytes(), d.lens.clone());
            assert!(held.iter().zip(alone).all(|(h, d)| totals(h) == totals(d)));
            assert_eq!(batch.len(), alone.iter().map(|d| d.term_count()).sum::<usize>());
            // Given back, each document's terms are the ones it has analyzed alone.
            let mut back = held.clone();
            batch.unbatch(back.iter_mut());
            assert!(back.iter().zip(alone).all(|(b, d)| sorted_terms(b) == sorted_terms(d)));
            let chunk: Vec<&AnalyzedDoc> = held.iter().collect();
            assert_eq!(batched.insert_batch(&chunk, &batch), Ok(at as u32));
            assert_eq!(batched.visible() as usize, at + size);
            at += size;
            k += 1;
        }
        assert_eq!(image(&batched), expected);
        assert!(expected_view.values().any(|(_, r, _)| r.iter().any(|x| x.1.is_some())), "some impacts");
        assert_eq!(fresh_view(&batched), expected_view);
        drop(batched);

        // A small arena and long documents of few words (the arena fills before its document limit or its
        // term table): batches go in until the next might not fit, which writes nothing.
        // Reversed: the first batch has every field, so later ones need no new column.
        let (schema, mut values) = mixed_values(1000, 0x5ba11, 400, 40);
        values.reverse();
        let docs: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, d)| analyze_document(&schema, format!("id{i}"), d).unwrap())
            .collect();
        let small = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 1 << 20).unwrap(), 1 << 20);
        let mut at = 0;
        let won_t_fit = loop {
            let held = block_batch(&schema, &values, at..at + 50, &mut block, &mut batch);
            let chunk: Vec<&AnalyzedDoc> = held.iter().collect();
            let used = small.used_bytes();
            match small.insert_batch(&chunk, &batch) {
                Ok(first) => assert_eq!(first as usize, at),
                Err(e) => {
                    assert_eq!(small.used_bytes(), used, "nothing written");
                    break e;
                }
            }
            at += 50;
        };
        assert_eq!(won_t_fit, BatchError::WontFit);
        assert!(at > 0 && small.visible() as usize == at);
        let before = image(&small);
        // Told it is tiny, a batch is tried and fills the arena part-way: nothing of it is published, and
        // what the segment holds (what a seal flushes) is what it held. The batch: the most documents (up to
        // all the rest) whose records alone fit what is left (with their postings, a word each and a word per
        // position at least, they do not).
        let room = ((1 << 20) - small.used_bytes()) / 4;
        let rest = |d: &AnalyzedDoc| rest_bound(d, 0, 1 << 20);
        let (mut end, mut records) = (at, 0);
        let mut terms = small.writer.lock().terms;
        while end < docs.len().min(small.max_docs() as usize)
            && records + rest(&docs[end]) <= room
            && terms + docs[end].term_count() <= small.table_cap / 2
        {
            records += rest(&docs[end]);
            terms += docs[end].term_count();
            end += 1;
        }
        let held = block_batch(&schema, &values, at..end, &mut block, &mut batch);
        let chunk: Vec<&AnalyzedDoc> = held.iter().collect();
        let least: usize = chunk.iter().map(|d| rest(d) + d.term_count() + d.position_count()).sum();
        assert!(
            least > room,
            "the postings cannot fit: at {at} end {end} room {room} least {least} max {}",
            small.max_docs()
        );
        batch.bound = 0;
        let used = small.used_bytes();
        assert_eq!(small.insert_batch(&chunk, &batch), Err(BatchError::Full));
        assert!(small.used_bytes() > used, "written part-way");
        assert_eq!(small.visible() as usize, at);
        assert_eq!(image(&small), before);
        assert!(chunk.iter().all(|d| small.lookup_id(&d.id).is_none()), "no _id of the batch is found");
        assert_eq!(small.lookup_id(&docs[at - 1].id), Some(at as u32 - 1));
    }

    #[test]
    fn a_junk_arena_answers_as_a_zeroed_one() {
        let schema = Schema::from_mappings(&json!({"properties": {
            "body": {"type": "text"}, "title": {"type": "text"}, "n": {"type": "long"}}}))
        .unwrap();
        let docs = mixed_docs(3000, 0x5eed, 60, 400);
        let heap = DramHeap::new(16 << 20, 12 << 20).unwrap();
        let build = |junk: Option<u8>| {
            let mut block = heap.try_alloc(RingKind::ShortTerm, 4 << 20).unwrap();
            if let Some(b) = junk {
                block.as_mut_slice().fill(b);
            }
            let fresh = FreshSegment::new(block, 1 << 20);
            for d in &docs {
                fresh.insert(d).unwrap();
            }
            fresh
        };
        let zeroed = build(None);
        let codecs = crate::codec::FieldCodecs::default();
        let image = crate::segment::ImageBuilder::from_fresh(&zeroed, 1, 0, &codecs).unwrap();
        // A parallel flush (terms encoded in two halves, then joined) writes the same bytes.
        let parallel = crate::segment::ImageBuilder::seal_fresh(&zeroed, 1, 0, &codecs, true).unwrap();
        assert_eq!(parallel.to_vec(), image);
        let fields = [schema.field_id("body").unwrap(), schema.field_id("title").unwrap()];
        let n = schema.field_id("n").unwrap();
        let mut keys = vec![];
        zeroed.for_each_key(&mut |k, _| keys.push(k.to_vec()));
        let mut sealed = 0;
        for junk in [0xff, 0xa5] {
            let fresh = build(Some(junk));
            assert_eq!(
                crate::segment::ImageBuilder::from_fresh(&fresh, 1, 0, &codecs).unwrap(),
                image,
                "junk {junk:#x}"
            );
            let limit = fresh.visible();
            for key in &keys {
                let (a, b) = (zeroed.lookup(key).unwrap(), fresh.lookup(key).unwrap());
                assert_eq!(zeroed.df_below(a, limit), fresh.df_below(b, limit));
                let (mut pa, mut pb) = (zeroed.postings(a, limit), fresh.postings(b, limit));
                let (mut xa, mut xb) = (vec![], vec![]);
                loop {
                    let (da, db) = (pa.next(), pb.next());
                    assert_eq!((da, pa.freq()), (db, pb.freq()), "{key:?}");
                    if da == NO_DOC {
                        break;
                    }
                    pa.positions(&mut xa);
                    pb.positions(&mut xb);
                    assert_eq!(xa, xb);
                    assert_eq!(pa.sealed_impacts(), pb.sealed_impacts());
                    assert_eq!(pa.chunk_window(), pb.chunk_window());
                    sealed += pa.sealed_impacts().is_some() as usize;
                    let bound = |i: &PackedImpacts| {
                        i.map(unpack_impact).iter().map(|&(tf, dl)| tf as f32 / (1.0 + dl as f32)).sum()
                    };
                    assert_eq!(
                        pa.max_block_bound(da, da + 50, bound, -1.0),
                        pb.max_block_bound(da, da + 50, bound, -1.0)
                    );
                }
            }
            for f in fields {
                assert_eq!(zeroed.field_stats(f, limit), fresh.field_stats(f, limit));
            }
            for d in 0..limit {
                assert_eq!(fields.map(|f| zeroed.field_len(f, d)), fields.map(|f| fresh.field_len(f, d)));
                assert_eq!(zeroed.numeric(n, d), fresh.numeric(n, d));
                assert_eq!(zeroed.stored(d).unwrap(), fresh.stored(d).unwrap());
            }
        }
        assert!(sealed > 1000, "sealed blocks were compared ({sealed} postings in them)");
        // An arena that earlier blocks held only in part — junk up to 128 KiB (inside its tables) or 1 MiB
        // (inside its bump area; the segment fills ~2 MiB), memory no block held after that, which the
        // segment does not zero — flushes to the same image too.
        for held in [128 << 10, 1 << 20] {
            let heap = DramHeap::new(16 << 20, 12 << 20).unwrap();
            let mut junk = heap.try_alloc_filled(RingKind::ShortTerm, held, Fill::Overwritten).unwrap();
            junk.as_mut_slice().fill(0xa5);
            drop(junk);
            let block = heap.try_alloc_filled(RingKind::ShortTerm, 4 << 20, Fill::Overwritten).unwrap();
            assert_eq!(block.reused_bytes(), held);
            let fresh = FreshSegment::new(block, 1 << 20);
            for d in &docs {
                fresh.insert(d).unwrap();
            }
            assert!(fresh.used_bytes() > held + (512 << 10), "the segment reaches well past the junk");
            let flushed = crate::segment::ImageBuilder::from_fresh(&fresh, 1, 0, &codecs).unwrap();
            assert_eq!(flushed, image, "junk in the first {held} bytes");
        }
    }

    /// The `_id` table finds each live id's latest document, tells ids apart that differ in one byte or in
    /// length (a zero byte more included: stored ids are zero-padded), and forgets exactly the id it is told.
    #[test]
    fn ids_map_to_their_latest_document() {
        let schema = Schema::from_mappings(&json!({"properties": {"body": {"type": "text"}}})).unwrap();
        let heap = DramHeap::new(4 << 20, 3 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 2 << 20).unwrap(), 1000);
        let ids = ["", "a", "ab", "abc", "abcd", "abcde", "abcd\0", "abce", "bbcd", "x".repeat(40).leak()];
        let add =
            |id: &str| fresh.insert(&analyze_document(&schema, id.into(), &json!({"body": "w"})).unwrap());
        for id in ids {
            assert_eq!(add(id).unwrap(), fresh.visible() - 1);
        }
        for (local, id) in ids.iter().enumerate() {
            assert_eq!(fresh.lookup_id(id), Some(local as u32), "{id:?}");
        }
        assert_eq!(fresh.lookup_id("abcd\0\0"), None);
        assert_eq!(fresh.lookup_id("abc\0"), None);
        // A replacement in the same segment: the id now names the new document.
        let again = add("abc").unwrap();
        assert_eq!(fresh.lookup_id("abc"), Some(again));
        fresh.forget_id("abc");
        assert_eq!(fresh.lookup_id("abc"), None);
        assert_eq!(fresh.lookup_id("abcd"), Some(4), "forgetting one id keeps its neighbours");
        fresh.forget_id("never added");
        assert_eq!(fresh.lookup_id("abcde"), Some(5));
    }

    /// A fresh segment (arena of `arena` bytes) with one document per body in its text field `body`; returns
    /// it, the field and the term entry of "x" there.
    fn with_bodies(bodies: &[String], arena: usize, max_docs: u32) -> (FreshSegment, u16, u32) {
        let schema = Schema::from_mappings(&json!({"properties": {"body": {"type": "text"}}})).unwrap();
        let heap = DramHeap::new(2 * arena, arena + arena / 2).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, arena).unwrap(), max_docs);
        for (i, body) in bodies.iter().enumerate() {
            fresh
                .insert(&analyze_document(&schema, format!("d{i}"), &json!({ "body": body })).unwrap())
                .unwrap();
        }
        let body = schema.field_id("body").unwrap();
        let key = [&body.to_be_bytes()[..], b"x"].concat();
        let e = fresh.lookup(&key).unwrap();
        (fresh, body, e)
    }

    /// A body of "x" `tf` times then "y" up to `len` words.
    fn x_body(tf: usize, len: usize) -> String {
        (0..len.max(tf)).map(|j| if j < tf { "x" } else { "y" }).collect::<Vec<_>>().join(" ")
    }

    /// `n` random [`x_body`]s: "x" in `present` tenths of them (all: no draw), 1 to `max_tf` times, in a
    /// body of that many words (at least one) plus fewer than `pad`.
    fn random_x_bodies(rng: &mut u64, n: u32, present: u64, max_tf: u64, pad: u64) -> Vec<String> {
        let mut next = |m: u64| crate::rng::xorshift(rng) % m;
        (0..n)
            .map(|_| {
                let tf = if present >= 10 || next(10) < present { 1 + next(max_tf) as usize } else { 0 };
                x_body(tf, tf.max(1) + next(pad) as usize)
            })
            .collect()
    }

    /// The BM25 shape `tf / (tf + dl)` the bound tests compare with, and its largest value over impacts.
    fn value(tf: u32, dl: u32) -> f32 {
        tf as f32 / (tf as f32 + dl as f32)
    }

    fn bound(imp: &PackedImpacts) -> f32 {
        imp.map(unpack_impact).iter().filter(|x| x.0 > 0).map(|&(tf, dl)| value(tf, dl)).fold(0.0, f32::max)
    }

    /// `df_below` is exact whenever it answers: in O(1) when at most the term's last posting is at or past
    /// the limit, `None` (count the postings) when more are.
    #[test]
    fn df_below_counts_postings_below_the_limit() {
        // "x" in docs 0, 2, 3, 4 and 7.
        let has_x = [true, false, true, true, true, false, false, true];
        let bodies: Vec<String> = has_x.iter().map(|&x| if x { "x y" } else { "y" }.to_string()).collect();
        let (fresh, _, e) = with_bodies(&bodies, 2 << 20, 1000);
        for limit in 0..=8u32 {
            let below = has_x[..limit as usize].iter().filter(|&&x| x).count() as u32;
            let past = 5 - below;
            match fresh.df_below(e, limit) {
                Some(df) => assert_eq!(df, below, "limit {limit}"),
                None => assert!(past > 1, "limit {limit}: {past} posting(s) past it, answerable in O(1)"),
            }
            if past <= 1 {
                assert_eq!(fresh.df_below(e, limit), Some(below), "limit {limit}");
            }
        }
    }

    /// A sealed block's impacts bound every posting in it (tf no higher, quantized length no shorter than
    /// one of them); the open tail block and small blocks have none; `skip_block` lands on the next block's
    /// first posting, and walking with it visits exactly the block starts of a plain walk.
    #[test]
    fn sealed_blocks_carry_impacts_that_bound_their_postings() {
        let mut rng = 7u64;
        let n = 2000u32;
        // "x" 1 to 6 times in a body of 1 to 120 words.
        let bodies = random_x_bodies(&mut rng, n, 10, 6, 115);
        let (fresh, body, e) = with_bodies(&bodies, 4 << 20, 3000);
        let (mut p, mut starts, mut sealed, mut seen) = (fresh.postings(e, n), vec![], 0, 0u32);
        let mut block: Option<Option<Impacts>> = None;
        while p.doc() != crate::codec::NO_DOC {
            if p.at_block_start() {
                starts.push(p.doc());
                block = Some(p.sealed_impacts().map(|i| i.map(unpack_impact)));
                sealed += block.unwrap().is_some() as usize;
            }
            let (tf, dl) = (p.freq(), crate::codec::quantized_length(fresh.field_len(body, p.doc())));
            if let Some(Some(imp)) = block {
                assert!(
                    imp.iter().any(|&(itf, idl)| itf > 0 && tf <= itf && dl >= idl),
                    "doc {} (tf {tf}, dl {dl}) not bounded by {imp:?}",
                    p.doc()
                );
            }
            seen += 1;
            p.next();
        }
        assert_eq!(seen, n, "every doc has the term");
        assert!(sealed >= 3, "long lists seal blocks with impacts ({sealed})");
        assert_eq!(block, Some(None), "the open tail block has no impacts");
        // Skipping block by block visits the same block starts.
        let mut p = fresh.postings(e, n);
        let mut skipped = vec![];
        while p.doc() != crate::codec::NO_DOC {
            assert!(p.at_block_start());
            skipped.push(p.doc());
            p.skip_block();
        }
        assert_eq!(skipped, starts);
        // A limit below a block's docs stops there, skipping or not.
        let mut p = fresh.postings(e, starts[2]);
        let mut last = 0;
        while p.doc() != crate::codec::NO_DOC {
            last = p.doc();
            p.skip_block();
        }
        assert!(last < starts[2]);
    }

    /// `for_each_region` cuts the list into its chunks and blocks, in order: their postings (`region_postings`)
    /// are the plain walk's, a region's last document is `region_last_doc`, and a sealed block's chunks carry
    /// impacts that bound every posting of the chunk (packed as stored, they read back as `chunk_window`'s).
    #[test]
    fn regions_cover_the_list_and_chunk_impacts_hold() {
        let mut rng = 5u64;
        let n = 6000u32;
        let bodies = random_x_bodies(&mut rng, n, 10, 4, 200);
        let (fresh, body, e) = with_bodies(&bodies, 16 << 20, 8000);
        // The plain walk: per posting (doc, tf, quantized length).
        let (mut p, mut all) = (fresh.postings(e, n), vec![]);
        while p.doc() != NO_DOC {
            all.push((p.doc(), p.freq(), crate::codec::quantized_length(fresh.field_len(body, p.doc()))));
            p.next();
        }
        // The regions, each with where its postings start in the walk and its impacts (chunks only).
        let p = fresh.postings(e, n);
        let (mut regions, mut starts) = (vec![], vec![]);
        p.for_each_region(|b, k, imp| regions.push((b, k, imp.copied())));
        let (mut docs, mut tfs) = ([0u32; MAX_REGION], [0u32; MAX_REGION]);
        let mut at = 0;
        for &(b, k, imp) in &regions {
            let m = p.region_postings(b, k, &mut docs, &mut tfs);
            assert!(m > 0, "no empty region");
            let want: Vec<(u32, u32)> = all[at..at + m].iter().map(|x| (x.0, x.1)).collect();
            assert_eq!(docs[..m].iter().copied().zip(tfs[..m].iter().copied()).collect::<Vec<_>>(), want);
            assert_eq!(p.region_last_doc(b, k), docs[m - 1]);
            if k == WHOLE_BLOCK {
                starts.push((at, None));
            } else {
                assert!(m <= CHUNK, "a chunk holds at most {CHUNK} postings");
                starts.push((at, imp));
            }
            if let Some(imp) = imp.map(|i| i.map(unpack_impact)) {
                for &(d, tf, dl) in &all[at..at + m] {
                    assert!(
                        imp.iter().any(|&(itf, idl)| itf > 0 && tf <= itf && dl >= idl),
                        "doc {d} (tf {tf}, dl {dl}) not bounded by {imp:?}"
                    );
                }
            }
            at += m;
        }
        assert_eq!(at, all.len(), "the regions hold every posting");
        // Below a watermark mid-list (a reader's snapshot while the writer goes on): the regions' postings
        // stop at it; a region's last document may lie past it.
        let limit = n / 2;
        let p = fresh.postings(e, limit);
        let mut below = vec![];
        let mut past_limit = 0;
        p.for_each_region(|b, k, _| {
            let m = p.region_postings(b, k, &mut docs, &mut tfs);
            below.extend(docs[..m].iter().copied());
            past_limit += (p.region_last_doc(b, k) >= limit) as usize;
        });
        let want: Vec<u32> = all.iter().map(|x| x.0).filter(|&d| d < limit).collect();
        assert_eq!(below, want);
        assert!(past_limit >= 1, "some region reaches past the watermark");
        assert!(starts.iter().filter(|s| s.1.is_some()).count() >= 20, "many chunks: {}", starts.len());
        // `chunk_window` from any posting of a chunk: the chunk's impacts and where the next chunk or block
        // starts; `max_block_bound` over exactly a chunk is the chunk's bound.
        let mut checked = 0;
        for (i, &(at, imp)) in starts.iter().enumerate() {
            let until = starts.get(i + 1).map_or(all.len(), |s| s.0);
            let end = all.get(until).map_or(NO_DOC, |x| x.0);
            for k in [at, at + (until - at) / 2, until - 1] {
                let mut p = fresh.postings(e, n);
                p.advance(all[k].0);
                match (imp, p.chunk_window()) {
                    (Some(imp), Some(got)) => assert_eq!(got, (imp, end), "chunk of doc {}", all[k].0),
                    (None, got) => assert_eq!(got, None, "doc {} is in a block without chunks", all[k].0),
                    (Some(_), None) => panic!("doc {} is in a chunk", all[k].0),
                }
            }
            let Some(imp) = imp else { continue };
            if end != NO_DOC {
                let mut p = fresh.postings(e, n);
                p.advance(all[at].0);
                assert_eq!(p.max_block_bound(all[at].0, end, bound, f32::INFINITY), bound(&imp));
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked} chunks checked");
    }

    /// `take_below` copies the postings below a doc from the cursor's on, leaving the cursor on the first one
    /// not taken; `probe` finds each candidate's frequency (0: absent) as a plain walk does.
    #[test]
    fn take_below_and_probe_agree_with_a_plain_walk() {
        let mut rng = 17u64;
        let n = 4000u32;
        let bodies = random_x_bodies(&mut rng, n, 6, 5, 60);
        let mut next = |m: u64| crate::rng::xorshift(&mut rng) % m;
        let (fresh, _, e) = with_bodies(&bodies, 8 << 20, 5000);
        let (mut p, mut all) = (fresh.postings(e, n), vec![]);
        while p.doc() != NO_DOC {
            all.push((p.doc(), p.freq()));
            p.next();
        }
        let tf_of = |d: u32| all.iter().find(|x| x.0 == d).map_or(0, |x| x.1);
        let mut marks = Box::new([0u32; MARKS_SPAN as usize]);
        for _ in 0..200 {
            let from = next(n as u64) as u32;
            let end = from + next(600) as u32;
            let cap = 1 + next(200) as usize;
            let mut p = fresh.postings(e, n);
            p.advance(from);
            let (mut docs, mut tfs) = (vec![0; cap], vec![0; cap]);
            let got = p.take_below(end, &mut docs, &mut tfs);
            let want: Vec<(u32, u32)> =
                all.iter().copied().filter(|x| x.0 >= from && x.0 < end).take(cap).collect();
            let taken: Vec<(u32, u32)> =
                docs[..got].iter().copied().zip(tfs[..got].iter().copied()).collect();
            assert_eq!(taken, want, "take_below({end}) from {from}, at most {cap}");
            let after = all.iter().filter(|x| x.0 >= from).nth(got).map_or(NO_DOC, |x| x.0);
            assert_eq!(p.doc(), after);
            // Sorted candidates from the cursor's doc on, present or not.
            let mut cands: Vec<u32> = (0..1 + next(40)).map(|_| p.doc().min(n) + next(300) as u32).collect();
            cands.sort_unstable();
            cands.dedup();
            let mut out = vec![u32::MAX; cands.len()];
            p.probe(&cands, &mut out, &mut marks);
            assert!(marks.iter().all(|&x| x == 0), "probe leaves its marks zeroed");
            for (&c, &tf) in cands.iter().zip(&out) {
                assert_eq!(tf, tf_of(c), "probe of {c}");
            }
            let last = *cands.last().unwrap();
            assert_eq!(p.doc(), all.iter().find(|x| x.0 >= last).map_or(NO_DOC, |x| x.0));
        }
    }

    /// Frequencies of 255 and more (escaped in their posting word, written in full above their positions)
    /// read back exactly everywhere a frequency is read — the cursor, `take_below`, regions, `probe` by marks
    /// and by searches, sealed impacts — and the positions of every posting, escaped or not, stay where
    /// their frequencies say.
    #[test]
    fn escaped_frequencies_read_back_exactly() {
        let mut rng = 31u64;
        let n = 1500u32;
        let mut next = |m: u64| crate::rng::xorshift(&mut rng) % m;
        // "x" in most documents, usually 1 to 4 times, one in 12 documents 253 to 700 times.
        let tfs: Vec<usize> = (0..n)
            .map(|_| match next(12) {
                0 => 253 + next(448) as usize,
                1 | 2 => 0,
                _ => 1 + next(4) as usize,
            })
            .collect();
        let bodies: Vec<String> = tfs.iter().map(|&tf| x_body(tf, tf.max(1) + next(20) as usize)).collect();
        assert!(tfs.iter().filter(|&&t| t >= TF_ESCAPE as usize).count() > 50, "many escaped frequencies");
        let (fresh, body, e) = with_bodies(&bodies, 16 << 20, 2000);
        let want: Vec<(u32, u32)> =
            (0..n).filter(|&d| tfs[d as usize] > 0).map(|d| (d, tfs[d as usize] as u32)).collect();
        // The cursor, with every posting's positions: "x" is each body's first `tf` words.
        let (mut p, mut got, mut pos) = (fresh.postings(e, n), vec![], vec![]);
        while p.doc() != NO_DOC {
            got.push((p.doc(), p.freq()));
            p.positions(&mut pos);
            assert_eq!(pos, (0..p.freq()).collect::<Vec<u32>>(), "positions of doc {}", p.doc());
            p.next();
        }
        assert_eq!(got, want);
        // "y" fills each body after the "x"s: its positions start where "x"'s end.
        let y = fresh.lookup(&[&body.to_be_bytes()[..], b"y"].concat()).unwrap();
        let mut p = fresh.postings(y, n);
        while p.doc() != NO_DOC {
            p.positions(&mut pos);
            let from = tfs[p.doc() as usize] as u32;
            assert_eq!(pos, (from..from + p.freq()).collect::<Vec<u32>>(), "\"y\" in doc {}", p.doc());
            p.next();
        }
        // take_below from everywhere, probe by marks (dense candidates) and by searches.
        let mut marks = Box::new([0u32; MARKS_SPAN as usize]);
        for from in (0..n).step_by(37) {
            let mut p = fresh.postings(e, n);
            p.advance(from);
            let (mut docs, mut out) = (vec![0; 64], vec![0; 64]);
            let m = p.take_below(from + 90, &mut docs, &mut out);
            let expect: Vec<(u32, u32)> =
                want.iter().copied().filter(|x| x.0 >= from && x.0 < from + 90).take(64).collect();
            assert_eq!(docs[..m].iter().copied().zip(out[..m].iter().copied()).collect::<Vec<_>>(), expect);
            for dense in [true, false] {
                // Candidates from the cursor's document on, every one (marks) or two far apart (searches).
                let at = p.doc().min(n);
                let cands: Vec<u32> = if dense { (at..at + 40).collect() } else { vec![at + 60, at + 300] };
                let mut out = vec![u32::MAX; cands.len()];
                p.probe(&cands, &mut out, &mut marks);
                for (&c, &tf) in cands.iter().zip(&out) {
                    assert_eq!(tf, if c < n { tfs[c as usize] as u32 } else { 0 }, "probe of {c}");
                }
            }
        }
        // Regions, and the impacts of sealed ones bound their postings.
        let (p, mut regions) = (fresh.postings(e, n), vec![]);
        p.for_each_region(|b, k, imp| regions.push((b, k, imp.copied())));
        let (mut docs, mut out, mut all) = ([0u32; MAX_REGION], [0u32; MAX_REGION], vec![]);
        for &(b, k, imp) in &regions {
            let m = p.region_postings(b, k, &mut docs, &mut out);
            for j in 0..m {
                if let Some(imp) = imp {
                    let dl = crate::codec::quantized_length(fresh.field_len(body, docs[j]));
                    assert!(value(out[j], dl) <= bound(&imp), "impacts of doc {}", docs[j]);
                }
                all.push((docs[j], out[j]));
            }
        }
        assert!(regions.iter().any(|r| r.2.is_some()), "some sealed regions");
        assert_eq!(all, want);
        // The flush's read of a whole list gives every posting and its positions as the cursor does, below
        // every limit (at a block's first document, inside a block, past the last).
        for (term, limit) in (0..=n + 1).map(|l| (e, l)).chain([(y, n), (y, 777), (y, 0)]) {
            let (mut p, mut by_cursor) = (fresh.postings(term, limit), vec![]);
            while p.doc() != NO_DOC {
                p.positions(&mut pos);
                by_cursor.push((p.doc(), pos.clone()));
                p.next();
            }
            let mut read = vec![];
            fresh.for_each_posting(term, limit, &mut |d, words| {
                read.push((d, words.iter().map(|w| w.load(Relaxed)).collect::<Vec<u32>>()));
            });
            assert!(limit < n || by_cursor.len() > 1000, "a long list");
            assert_eq!(read, by_cursor, "term entry {term} below {limit}");
        }
    }

    /// `probe` finds each candidate's frequency as a plain walk does whichever way it takes — marks (dense
    /// batches in a dense list, candidates far apart past the mark span) or searches (sparse batches, a
    /// sparse list) — leaves the marks zeroed and the cursor on the first document at or after the last
    /// candidate, batch after batch over a list of many blocks.
    #[test]
    fn probe_by_marks_or_searches_agrees_with_a_plain_walk() {
        let mut rng = 23u64;
        let n = 12_000u32;
        let mut marks = Box::new([0u32; MARKS_SPAN as usize]);
        for present in [9, 3, 10] {
            let bodies = random_x_bodies(&mut rng, n, present, 4, 20);
            let mut next = |m: u64| crate::rng::xorshift(&mut rng) % m;
            let (fresh, _, e) = with_bodies(&bodies, 16 << 20, n);
            let (mut p, mut all) = (fresh.postings(e, n), std::collections::BTreeMap::new());
            while p.doc() != NO_DOC {
                all.insert(p.doc(), p.freq());
                p.next();
            }
            for _ in 0..30 {
                let mut p = fresh.postings(e, n);
                let mut at = next(200) as u32;
                while at < n {
                    // A batch from `at` on: candidates 1 to 60 doc ids apart, or spread past the mark span.
                    let gap = [2, 8, 60, 3 * MARKS_SPAN as u64][next(4) as usize];
                    let len = 1 + next(128) as usize;
                    let mut cands = vec![];
                    for _ in 0..len {
                        cands.push(at);
                        at += 1 + next(gap) as u32;
                    }
                    let mut out = vec![u32::MAX; len];
                    p.probe(&cands, &mut out, &mut marks);
                    for (&c, &tf) in cands.iter().zip(&out) {
                        assert_eq!(tf, all.get(&c).copied().unwrap_or(0), "probe of {c} (x in {present}0%)");
                    }
                    assert!(marks.iter().all(|&x| x == 0), "probe leaves its marks zeroed");
                    let last = *cands.last().unwrap();
                    assert_eq!(p.doc(), all.range(last..).next().map_or(NO_DOC, |x| *x.0));
                }
            }
        }
    }

    /// `advance` (which passes over whole blocks) lands where a plain walk does, from any position;
    /// `block_end` is where the next block starts; `max_block_bound` bounds every posting from the cursor's
    /// block on in the range it is asked about.
    #[test]
    fn advance_and_block_bounds_agree_with_a_plain_walk() {
        let mut rng = 11u64;
        let n = 3000u32;
        // "x" in 70% of the docs, 1 to 6 times, in a body of 1 to 120 words.
        let bodies = random_x_bodies(&mut rng, n, 7, 6, 115);
        let mut next = |m: u64| crate::rng::xorshift(&mut rng) % m;
        let (fresh, body, e) = with_bodies(&bodies, 8 << 20, 4000);
        // The plain walk: (doc, tf, quantized length, block start of its block).
        let (mut p, mut all) = (fresh.postings(e, n), vec![]);
        let mut start = 0;
        while p.doc() != NO_DOC {
            if p.at_block_start() {
                start = p.doc();
            }
            all.push((
                p.doc(),
                p.freq(),
                crate::codec::quantized_length(fresh.field_len(body, p.doc())),
                start,
            ));
            p.next();
        }
        let starts: Vec<u32> = all.iter().filter(|x| x.0 == x.3).map(|x| x.0).collect();
        assert!(starts.len() >= 6, "several blocks: {starts:?}");
        let first_at_least = |t: u32| all.iter().find(|x| x.0 >= t);
        let mut targets: Vec<u32> = starts.iter().flat_map(|&s| [s.saturating_sub(1), s, s + 1]).collect();
        targets.extend((0..200).map(|_| next(n as u64 + 3) as u32));
        targets.push(n + 5);
        for &from in &targets {
            for &t in targets.iter().filter(|&&t| t >= from).take(12) {
                let mut p = fresh.postings(e, n);
                p.advance(from);
                let got = p.advance(t);
                match first_at_least(t) {
                    Some(&(d, tf, ..)) => assert_eq!((got, p.freq()), (d, tf), "advance {from} then {t}"),
                    None => assert_eq!(got, NO_DOC, "advance {from} then {t}"),
                }
                if got == NO_DOC {
                    continue;
                }
                // The cursor's block ends where the next one starts.
                let here = first_at_least(t).unwrap().3;
                let end = p.block_end();
                assert_eq!(
                    Some(&end).filter(|&&x| x != NO_DOC),
                    starts.iter().find(|&&s| s > here),
                    "block of {got}"
                );
                // Bounds over [got, until) for a few ranges.
                for until in [got + 1, got + 50, got + 400, n] {
                    let b = p.max_block_bound(got, until, bound, f32::INFINITY);
                    for &(d, tf, dl, _) in all.iter().filter(|x| x.0 >= got && x.0 < until) {
                        assert!(value(tf, dl) <= b, "doc {d} in [{got}, {until}): {} > {b}", value(tf, dl));
                    }
                }
            }
        }
        // Past the limit: nothing, and a bound of nothing.
        let mut p = fresh.postings(e, starts[3]);
        assert_eq!(p.advance(starts[3]), NO_DOC);
        assert_eq!(p.max_block_bound(0, n, bound, f32::INFINITY), 0.0);
    }
}
