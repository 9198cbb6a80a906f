//! Biwords: the postings of two-word phrases of common words, indexed with the image (common grams).
//!
//! A phrase of two very common words (`"in by"`, `"was his"`) is the slowest query a positional index
//! answers: nearly every document holds both words, so nearly every one has its positions read, for a
//! few hundred matches (`"in by"` over the 250k enwiki documents: 158k candidate documents, 1M
//! positions, 154 matches, ~15 ms however well its bounds prune). The remedy is the one Lucene's
//! `CommonGramsFilter`, Elasticsearch's `index_phrases` and the HathiTrust full-text search use: index the
//! adjacent pairs of common words as terms of their own. The pair's posting list holds exactly the
//! phrase's matches, its frequency is the phrase's frequency and its positions the phrase's, so the
//! phrase is answered as one term, with the term's block-max fast path, and scores exactly as before.
//!
//! * **Which words**: [`COMMON_WORDS`], English function words (articles, pronouns, prepositions,
//!   conjunctions, auxiliaries) — the closed class of words that make phrases slow in any English text,
//!   not a list fitted to one corpus. Only pairs of two of them are indexed: ~11% more positions on the
//!   enwiki sample, where pairs with one common word would be ~70%.
//! * **Where**: every image of a text field, built at flush from the fresh segment's postings
//!   ([`BiwordBuilder`]) and merged with the other terms by compaction. The fresh segment has none: the
//!   ingest path is untouched, and a phrase there reads positions as before. An image says in its header
//!   that it holds every pair's list ([`BIWORDS_VERSION`]); a pair missing from such an image occurs in
//!   none of its documents. Images without the mark (older ones, compactions of mixed parts) read
//!   positions.
//! * **Keys**: the field, then `0xFF` (a byte no UTF-8 term has, so biwords sort after every term of their
//!   field and no term prefix reaches them), the first word, `0x00`, the second word. Listings of a
//!   field's terms (prefix, fuzzy) skip them ([`is_biword_key`]).

use super::image::TermPostings;
use crate::memory::prefetch;

/// Occurrences [`BiwordLists::for_each`] fetches ahead of the one it reads.
const AT_AHEAD: usize = 16;

/// The biword list an image's header names: 0 = the image has no biwords, 1 = every adjacent pair of two
/// [`COMMON_WORDS`] in its text fields. A change to the word list is a new version.
pub const BIWORDS_VERSION: u32 = 1;

/// The common words whose pairs are indexed, in byte order (a word's rank is its index here).
pub const COMMON_WORDS: [&str; 120] = [
    "a", "about", "after", "against", "all", "also", "an", "and", "any", "are", "as", "at", "be", "because",
    "been", "before", "being", "between", "both", "but", "by", "can", "could", "did", "do", "does", "during",
    "each", "either", "for", "from", "had", "has", "have", "having", "he", "her", "here", "hers", "him",
    "his", "how", "i", "if", "in", "into", "is", "it", "its", "may", "me", "might", "more", "most", "much",
    "must", "my", "neither", "no", "nor", "not", "of", "off", "on", "one", "only", "onto", "or", "other",
    "our", "out", "over", "own", "shall", "she", "should", "since", "so", "some", "such", "than", "that",
    "the", "their", "them", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "under", "until", "up", "upon", "us", "very", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "whom", "whose", "why", "will", "with", "within", "without", "would", "yet", "you",
    "your",
];

const N: usize = COMMON_WORDS.len();
const _: () = assert!(N <= 255, "ranks fit in a byte");

/// The byte after a field id that marks a biword key.
pub(crate) const BIWORD_MARK: u8 = 0xFF;

/// The rank of `word` (an indexed term's bytes) in [`COMMON_WORDS`], if it is one.
pub fn common_rank(word: &[u8]) -> Option<u8> {
    COMMON_WORDS.binary_search_by(|w| w.as_bytes().cmp(word)).ok().map(|r| r as u8)
}

/// The key of the biword `a b` (two ranks) in `field`.
fn key_of_ranks(field: u16, a: usize, b: usize) -> Vec<u8> {
    let (a, b) = (COMMON_WORDS[a].as_bytes(), COMMON_WORDS[b].as_bytes());
    let mut k = Vec::with_capacity(4 + a.len() + b.len());
    k.extend_from_slice(&field.to_be_bytes());
    k.push(BIWORD_MARK);
    k.extend_from_slice(a);
    k.push(0);
    k.extend_from_slice(b);
    k
}

/// The biword key of the phrase `a b` in `field` when both words are common (`a` and `b` are term keys of
/// `field`: the field's two bytes, then the term), else `None`.
pub fn biword_key(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    if a.len() < 2 || b.len() < 2 || a[..2] != b[..2] {
        return None;
    }
    let field = u16::from_be_bytes([a[0], a[1]]);
    Some(key_of_ranks(field, common_rank(&a[2..])? as usize, common_rank(&b[2..])? as usize))
}

/// Whether `key` is a biword's (not a term's).
pub fn is_biword_key(key: &[u8]) -> bool {
    key.get(2) == Some(&BIWORD_MARK)
}

/// Builds one text field's biword postings, document by document: [`entries`](Self::entries) with the
/// common words a document has, then [`end_doc`](Self::end_doc); [`finish`](Self::finish) groups the pairs.
///
/// A document's common-word positions are marked in a table by position (a sort when a position is too
/// large for the table); a position whose successor is marked starts a pair. Pairs are collected in one
/// flat vector and grouped by a counting sort at the end: one list per pair grown as it goes was twice
/// the time, most of it allocation.
#[derive(Default)]
pub(crate) struct BiwordBuilder {
    field: u16,
    /// The open document's common words: `position << 8 | rank`.
    entries: Vec<u64>,
    /// Per position below its length: 0, or the rank + 1 of the common word there (the open document's).
    slot: Vec<u8>,
    /// Every pair occurrence so far, in document order, each pair's in position order within a document: its
    /// pair (`a * N + b`) here, its `[doc, position]` in `at` (10 bytes an occurrence; a flush of the 250k
    /// enwiki documents collects ~6M).
    pairs: Vec<u16>,
    at: Vec<[u32; 2]>,
    /// Per document (by doc id) with a pair, its field length.
    dls: Vec<u32>,
}

const _: () = assert!(N * N <= u16::MAX as usize + 1, "a pair fits 16 bits");

/// A common word of rank `rank` at `position`, as [`BiwordBuilder::entries`] takes it.
#[inline]
pub(crate) fn word_entry(rank: u8, position: u32) -> u64 {
    (position as u64) << 8 | rank as u64
}

/// Positions the table of [`BiwordBuilder`] covers; documents with larger ones are sorted instead.
const SLOTS: u64 = 1 << 16;

impl BiwordBuilder {
    /// A builder for `field`.
    pub fn new(field: u16) -> BiwordBuilder {
        BiwordBuilder { field, ..Default::default() }
    }

    /// The open document's common words as [`word_entry`]s, each word's in position order.
    pub fn entries(&mut self, entries: &[u64]) {
        self.entries.extend_from_slice(entries);
    }

    /// Ends document `doc` (documents in increasing order), whose field length is `dl`.
    pub fn end_doc(&mut self, doc: u32, dl: u32) {
        debug_assert!(self.at.last().is_none_or(|o| o[0] < doc), "documents in increasing order");
        let had = self.at.len();
        let pair = |a: u64, b: u64| ((a & 0xFF) as usize * N + (b & 0xFF) as usize) as u16;
        let last = self.entries.iter().map(|e| e >> 8).max().unwrap_or(0);
        if self.entries.len() < 2 {
            // No pair.
        } else if last + 1 < SLOTS {
            if self.slot.len() <= last as usize + 1 {
                self.slot.resize(last as usize + 2, 0);
            }
            for &e in &self.entries {
                self.slot[(e >> 8) as usize] = (e & 0xFF) as u8 + 1;
            }
            // Each word's entries are in position order, so each pair's occurrences are too.
            for &e in &self.entries {
                let next = self.slot[(e >> 8) as usize + 1];
                if next != 0 {
                    self.pairs.push(pair(e, next as u64 - 1));
                    self.at.push([doc, (e >> 8) as u32]);
                }
            }
            for &e in &self.entries {
                self.slot[(e >> 8) as usize] = 0;
            }
        } else {
            self.entries.sort_unstable();
            for w in self.entries.windows(2) {
                if w[1] >> 8 == (w[0] >> 8) + 1 {
                    self.pairs.push(pair(w[0], w[1]));
                    self.at.push([doc, (w[0] >> 8) as u32]);
                }
            }
        }
        self.entries.clear();
        if self.at.len() > had {
            if self.dls.len() <= doc as usize {
                self.dls.resize(doc as usize + 1, 0);
            }
            self.dls[doc as usize] = dl;
        }
    }

    /// The pairs' postings, grouped.
    pub fn finish(self) -> BiwordLists {
        debug_assert!(self.entries.is_empty(), "the last document ended");
        // A stable counting sort by pair keeps each pair's occurrences in (doc, position) order. It sorts
        // the occurrences' indices (4 bytes each), not the occurrences: a sorted copy of them was the
        // largest buffer of a flush after the fresh segment itself, in pages the kernel zeroes on first touch.
        let (mut starts, mut order) = (vec![], vec![]);
        let pairs = &self.pairs;
        group_stably(pairs.len(), N * N, |i| pairs[i] as usize, |i| i as u32, &mut starts, &mut order);
        BiwordLists { field: self.field, starts, order, at: self.at, dls: self.dls }
    }
}

/// A stable counting sort of items `0..len` by `key(i)` (below `n_keys`): `out` holds each item's
/// `value(i)`, grouped by key in item order within a key, and `starts` where each key's group begins in
/// it (and, last, the end).
pub(crate) fn group_stably<T: Copy + Default>(
    len: usize,
    n_keys: usize,
    key: impl Fn(usize) -> usize,
    value: impl Fn(usize) -> T,
    starts: &mut Vec<u32>,
    out: &mut Vec<T>,
) {
    assert!(len <= u32::MAX as usize, "places fit 32 bits");
    starts.clear();
    starts.resize(n_keys + 1, 0);
    for i in 0..len {
        starts[key(i) + 1] += 1;
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    out.clear();
    out.resize(len, T::default());
    for i in 0..len {
        let k = key(i);
        out[starts[k] as usize] = value(i);
        starts[k] += 1;
    }
    // Each key's start moved up by its count, to the next key's start: one place back.
    starts.copy_within(..n_keys, 1);
    starts[0] = 0;
}

/// One text field's biword occurrences grouped by pair ([`BiwordBuilder::finish`]).
pub(crate) struct BiwordLists {
    field: u16,
    /// Per pair, where its occurrences start in `order` (and, one past the last pair, the end).
    starts: Vec<u32>,
    /// The occurrences' indices in `at`, by pair, each pair's in (doc, position) order.
    order: Vec<u32>,
    /// Each occurrence's `[doc, position]`, in document order.
    at: Vec<[u32; 2]>,
    /// Per document with a pair, its field length.
    dls: Vec<u32>,
}

impl BiwordLists {
    /// The first biword key, if the field has any biword.
    #[cfg(test)]
    pub fn first_key(&self) -> Option<Vec<u8>> {
        let pair = (0..N * N).find(|&p| self.starts[p + 1] > self.starts[p])?;
        Some(key_of_ranks(self.field, pair / N, pair % N))
    }

    /// Calls `f` with every biword's key and postings, in key order.
    pub fn for_each(&self, f: &mut dyn FnMut(&[u8], &TermPostings)) {
        let mut post = TermPostings::default();
        for pair in 0..N * N {
            let occ = &self.order[self.starts[pair] as usize..self.starts[pair + 1] as usize];
            if occ.is_empty() {
                continue;
            }
            post.clear();
            // A pair's occurrences lie apart in `at` (in document order): each is fetched ahead of its turn.
            for &o in &occ[..occ.len().min(AT_AHEAD)] {
                prefetch(&self.at[o as usize]);
            }
            let mut ahead = occ.iter().skip(AT_AHEAD);
            for doc in occ.chunk_by(|&a, &b| self.at[a as usize][0] == self.at[b as usize][0]) {
                for &o in ahead.by_ref().take(doc.len()) {
                    prefetch(&self.at[o as usize]);
                }
                let d = self.at[doc[0] as usize][0];
                post.push_from(d, doc.iter().map(|&o| self.at[o as usize][1]), self.dls[d as usize]);
            }
            // Ranks are in byte order and `0x00` sorts below every word byte: pair order is key order.
            f(&key_of_ranks(self.field, pair / N, pair % N), &post);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_word_list_is_sorted_and_distinct() {
        assert!(COMMON_WORDS.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()));
        assert_eq!(common_rank(b"in"), COMMON_WORDS.iter().position(|w| *w == "in").map(|r| r as u8));
        assert_eq!(common_rank(b"inn"), None);
    }

    #[test]
    fn keys_sort_after_the_fields_terms_and_in_pair_order() {
        let key = |f: u16, t: &str| {
            let mut k = f.to_be_bytes().to_vec();
            k.extend_from_slice(t.as_bytes());
            k
        };
        let ab = biword_key(&key(3, "a"), &key(3, "by")).unwrap();
        assert!(is_biword_key(&ab) && !is_biword_key(&key(3, "zzz")));
        assert!(ab > key(3, "\u{10FFFF}zz") && ab < key(4, ""));
        assert_eq!(biword_key(&key(3, "a"), &key(4, "by")), None, "one field");
        assert_eq!(biword_key(&key(3, "a"), &key(3, "cat")), None, "both common");
        let mut all: Vec<Vec<u8>> = (0..N * N).map(|p| key_of_ranks(1, p / N, p % N)).collect();
        let unsorted = all.clone();
        all.sort();
        assert_eq!(all, unsorted);
    }

    /// Where the builder puts documents with far positions (its sorting path).
    fn shift(doc: usize) -> u32 {
        if doc % 3 == 2 {
            1 << 20
        } else {
            0
        }
    }

    proptest! {
        /// Each pair's postings are exactly the adjacent occurrences of its two words, counted over every
        /// document of random texts over a few common words and one other.
        #[test]
        fn pairs_are_the_adjacent_common_words(docs in prop::collection::vec(
            prop::collection::vec(0usize..5, 0..30), 1..20)
        ) {
            let words = ["in", "by", "the", "cat", "a"];
            let mut b = BiwordBuilder::new(7);
            for (d, toks) in docs.iter().enumerate() {
                for (w, word) in words.iter().enumerate() {
                    let pos: Vec<u32> =
                        (0..toks.len()).filter(|&i| toks[i] == w).map(|i| i as u32 + shift(d)).collect();
                    if let (Some(r), false) = (common_rank(word.as_bytes()), pos.is_empty()) {
                        b.entries(&pos.iter().map(|&p| word_entry(r, p)).collect::<Vec<_>>());
                    }
                }
                b.end_doc(d as u32, 1000 + d as u32);
            }
            let lists = b.finish();
            let mut got = vec![];
            lists.for_each(&mut |k, p| {
                got.push((k.to_vec(), p.docs.clone(), p.tfs.clone(), p.dls.clone(), p.decoded_positions()))
            });
            prop_assert_eq!(lists.first_key(), got.first().map(|g| g.0.clone()));
            // (doc, positions) per pair key, from the texts.
            let mut want: std::collections::BTreeMap<Vec<u8>, Vec<(u32, Vec<u32>)>> = Default::default();
            for (d, toks) in docs.iter().enumerate() {
                for i in 1..toks.len() {
                    let (x, y) = (words[toks[i - 1]], words[toks[i]]);
                    let (Some(rx), Some(ry)) = (common_rank(x.as_bytes()), common_rank(y.as_bytes())) else {
                        continue;
                    };
                    let p = i as u32 - 1 + shift(d);
                    let l = want.entry(key_of_ranks(7, rx as usize, ry as usize)).or_default();
                    match l.last_mut() {
                        Some((ld, ps)) if *ld == d as u32 => ps.push(p),
                        _ => l.push((d as u32, vec![p])),
                    }
                }
            }
            prop_assert_eq!(got.len(), want.len());
            for ((k, docs, tfs, dls, positions), (wk, wl)) in got.iter().zip(&want) {
                prop_assert_eq!(k, wk);
                prop_assert_eq!(docs, &wl.iter().map(|x| x.0).collect::<Vec<_>>());
                prop_assert_eq!(tfs, &wl.iter().map(|x| x.1.len() as u32).collect::<Vec<_>>());
                prop_assert_eq!(dls, &wl.iter().map(|x| 1000 + x.0).collect::<Vec<_>>());
                prop_assert_eq!(positions, &wl.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
            }
        }
    }
}
