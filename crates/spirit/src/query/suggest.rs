//! Term suggestions ("did you mean"): Elasticsearch's `term` suggester, which is Lucene's
//! `DirectSpellChecker` over the index's own dictionary — no separate spelling index to build or keep
//! current, so a word written a moment ago is suggested at once.
//!
//! For an analyzed query term, [`candidates`] lists the terms of its field within two edits (insertions,
//! deletions, substitutions and swaps of adjacent characters, as Lucene's Levenshtein automata accept) that
//! share its first `prefix_length` characters, with their document frequencies; [`select`] then applies the
//! suggester's rules — the term's length and frequency, the suggest mode, the accuracy, the candidates'
//! frequency bounds — and orders what is left. Candidates of several indices (or shards) merge by adding
//! their frequencies ([`Candidates::merge`]) before selection, so a suggestion is the same whatever the
//! shard count.
//!
//! A candidate's score is Lucene's internal string distance, the similarity fuzzy queries weigh their
//! expansions with: `1 - edits / min(its length, the term's)` in characters.

use super::plan::within_edits;
use super::{collection_stats, Node};
use crate::error::{Error, Result};
use crate::gdt::Snapshot;
use crate::schema::term_key;
use std::collections::BTreeMap;

/// When to suggest (Elasticsearch's `suggest_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuggestMode {
    /// Only for a term no document holds (the default).
    Missing,
    /// Only terms more documents hold than the term.
    Popular,
    /// Whatever the term's frequency.
    Always,
}

/// How suggestions are ordered (Elasticsearch's `sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuggestSort {
    /// By score, then frequency, then the term (the default).
    Score,
    /// By frequency, then score, then the term.
    Frequency,
}

/// The term suggester's options, with Elasticsearch's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct TermSuggestOptions {
    /// Edits a suggestion may lie from the term: 1 or 2.
    pub max_edits: usize,
    /// Leading characters a suggestion shares with the term.
    pub prefix_length: usize,
    /// Terms shorter than this (in characters) get no suggestions.
    pub min_word_length: usize,
    /// Suggestions per term.
    pub size: usize,
    pub mode: SuggestMode,
    pub sort: SuggestSort,
    /// The least score a suggestion needs (0 to 1).
    pub accuracy: f32,
    /// The least documents a suggestion must occur in: a count from 1 on, a fraction of the documents
    /// below it.
    pub min_doc_freq: f64,
    /// A term in more documents than this (a count from 1 on, a fraction below it) is taken as spelled
    /// right and gets no suggestions.
    pub max_term_freq: f64,
}

impl Default for TermSuggestOptions {
    fn default() -> Self {
        TermSuggestOptions {
            max_edits: 2,
            prefix_length: 1,
            min_word_length: 4,
            size: 5,
            mode: SuggestMode::Missing,
            sort: SuggestSort::Score,
            accuracy: 0.5,
            min_doc_freq: 0.0,
            max_term_freq: 0.01,
        }
    }
}

impl TermSuggestOptions {
    /// Checks the options' ranges (Elasticsearch's limits).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if !(1..=2).contains(&self.max_edits) {
            return bad(format!("Illegal max_edits value {}: it must be 1 or 2", self.max_edits));
        }
        if self.min_word_length < 1 {
            return bad("min_word_length must be at least 1".into());
        }
        if self.size < 1 {
            return bad("size must be positive".into());
        }
        if !(0.0..=1.0).contains(&self.accuracy) {
            return bad(format!("accuracy must be between 0 and 1, got {}", self.accuracy));
        }
        for (name, v) in [("min_doc_freq", self.min_doc_freq), ("max_term_freq", self.max_term_freq)] {
            if !v.is_finite() || v < 0.0 || (v > 1.0 && v.fract() != 0.0) {
                return bad(format!("{name} must be a fraction below 1 or a whole count, got {v}"));
            }
        }
        Ok(())
    }
}

/// A term's neighbourhood: its own frequency, the documents of its field, and the terms near it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    /// Documents holding the term itself.
    pub term_freq: u64,
    /// Documents holding the field.
    pub docs: u64,
    /// Each near term (not the term itself): its edits from the term and its document frequency.
    pub near: BTreeMap<String, (usize, u64)>,
}

impl Candidates {
    /// Adds another index's (or shard's) candidates of the same term.
    pub fn merge(&mut self, o: Candidates) {
        self.term_freq += o.term_freq;
        self.docs += o.docs;
        for (t, (edits, freq)) in o.near {
            self.near.entry(t).and_modify(|e| e.1 += freq).or_insert((edits, freq));
        }
    }
}

/// One suggestion.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    pub text: String,
    pub score: f32,
    pub freq: u64,
}

/// The frequency of the analyzed term `term` of field `field` in the snapshots (one shard each) and their
/// documents (every visible one, deleted or not: Lucene's `maxDoc`), as of their watermarks — what decides
/// whether the term gets suggestions at all ([`wanted`]) before its neighbours are looked for.
pub fn term_stats(snaps: &[&Snapshot], field: u16, term: &str) -> Result<Candidates> {
    let mut own = vec![];
    term_key(field, term, &mut own);
    let node = Node::Blended { field, boosts: vec![1.0], keys: vec![own.clone()] };
    let mut out = Candidates::default();
    for snap in snaps {
        let (stats, marks) = collection_stats(snap, &node)?;
        out.term_freq += stats.doc_freq(&own);
        out.docs += marks.iter().map(|&m| m as u64).sum::<u64>();
    }
    Ok(out)
}

/// The terms of field `field` in the snapshots (one shard each) within `max_edits` of the analyzed term
/// `term` (not `term` itself) and sharing its first `prefix_length` characters — at least one for two
/// edits, as Lucene's spell checker asks — with their edits and document frequencies, as of the snapshots'
/// watermarks. Reads the field's dictionary from the fixed prefix on: ask only for a term [`wanted`] says
/// gets suggestions.
pub fn near_terms(
    snaps: &[&Snapshot],
    field: u16,
    term: &str,
    max_edits: usize,
    prefix_length: usize,
) -> Result<BTreeMap<String, (usize, u64)>> {
    let found = within_edits(snaps, field, term, prefix_length, max_edits, true)?;
    let wide_prefix: Vec<char> = term.chars().take(prefix_length.max(1)).collect();
    let keys: Vec<(Vec<u8>, usize)> = found
        .into_iter()
        .filter(|(k, d)| {
            *d > 0
                && (*d < 2
                    || std::str::from_utf8(&k[2..])
                        .is_ok_and(|t| t.chars().take(wide_prefix.len()).eq(wide_prefix.iter().copied())))
        })
        .collect();
    let mut near = BTreeMap::new();
    if keys.is_empty() {
        return Ok(near);
    }
    let node = Node::Blended {
        field,
        boosts: vec![1.0; keys.len()],
        keys: keys.iter().map(|k| k.0.clone()).collect(),
    };
    for snap in snaps {
        let (stats, _) = collection_stats(snap, &node)?;
        for (k, d) in &keys {
            let freq = stats.doc_freq(k);
            if freq > 0 {
                let text = String::from_utf8_lossy(&k[2..]).into_owned();
                near.entry(text).and_modify(|e: &mut (usize, u64)| e.1 += freq).or_insert((*d, freq));
            }
        }
    }
    Ok(near)
}

/// Whether `term` (its frequency and the documents in `c`) gets suggestions at all under `o`, as Lucene's
/// `DirectSpellChecker` decides before it looks at any other term: long enough, not in the index in mode
/// `missing`, not in more documents than `max_term_freq` (a count, or a fraction of the documents rounded
/// up).
pub fn wanted(term: &str, c: &Candidates, o: &TermSuggestOptions) -> bool {
    let most =
        if o.max_term_freq >= 1.0 { o.max_term_freq } else { (o.max_term_freq * c.docs as f64).ceil() };
    term.chars().count() >= o.min_word_length
        && !(o.mode == SuggestMode::Missing && c.term_freq > 0)
        && c.term_freq as f64 <= most
}

/// The suggestions for `term` among `c` under `o`, best first (at most `o.size`). A candidate must be in more
/// documents than Lucene's threshold: the term's own frequency in mode `popular`, and `min_doc_freq` (a
/// count, or a fraction of the documents less one).
pub fn select(term: &str, c: &Candidates, o: &TermSuggestOptions) -> Vec<Suggestion> {
    if !wanted(term, c, o) {
        return vec![];
    }
    let len = term.chars().count();
    let mut threshold: i64 = if o.mode == SuggestMode::Popular { c.term_freq as i64 } else { 0 };
    if o.min_doc_freq >= 1.0 {
        threshold = threshold.max(o.min_doc_freq as i64);
    } else if o.min_doc_freq > 0.0 {
        threshold = threshold.max((o.min_doc_freq * c.docs as f64) as i64 - 1);
    }
    let mut out: Vec<Suggestion> = c
        .near
        .iter()
        .filter(|(_, &(edits, freq))| edits <= o.max_edits && freq as i64 > threshold)
        .map(|(text, &(edits, freq))| {
            let shortest = text.chars().count().min(len).max(1);
            Suggestion { text: text.clone(), score: 1.0 - edits as f32 / shortest as f32, freq }
        })
        .filter(|s| s.score >= o.accuracy)
        .collect();
    out.sort_by(|a, b| {
        let (score, freq) = (b.score.total_cmp(&a.score), b.freq.cmp(&a.freq));
        match o.sort {
            SuggestSort::Score => score.then(freq),
            SuggestSort::Frequency => freq.then(score),
        }
        .then_with(|| a.text.cmp(&b.text))
    });
    out.truncate(o.size);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(list: &[(&str, usize, u64)]) -> BTreeMap<String, (usize, u64)> {
        list.iter().map(|&(t, e, f)| (t.to_string(), (e, f))).collect()
    }

    #[test]
    fn selection_follows_the_suggesters_rules() {
        // Near "tring": scores 1 - edits / min(length, 5).
        let c = Candidates {
            term_freq: 0,
            docs: 1000,
            near: near(&[("trying", 1, 3), ("string", 1, 9), ("tiring", 2, 50), ("trig", 1, 1)]),
        };
        let o = TermSuggestOptions::default();
        let texts = |s: Vec<Suggestion>| s.into_iter().map(|s| s.text).collect::<Vec<_>>();
        let got = select("tring", &c, &o);
        assert_eq!(texts(got.clone()), ["string", "trying", "trig", "tiring"]);
        assert_eq!([got[0].score, got[2].score, got[3].score], [0.8, 0.75, 0.6]);
        assert_eq!(got[0].freq, 9);
        let by_freq = TermSuggestOptions { sort: SuggestSort::Frequency, ..o.clone() };
        assert_eq!(texts(select("tring", &c, &by_freq)), ["tiring", "string", "trying", "trig"]);
        // A term in the index gets none in mode missing, only more frequent ones in mode popular.
        let known = Candidates { term_freq: 5, ..c.clone() };
        assert!(select("tring", &known, &o).is_empty());
        let popular = TermSuggestOptions { mode: SuggestMode::Popular, ..o.clone() };
        assert_eq!(texts(select("tring", &known, &popular)), ["string", "tiring"]);
        let always = TermSuggestOptions { mode: SuggestMode::Always, ..o.clone() };
        assert_eq!(select("tring", &known, &always).len(), 4);
        // Too short; too frequent (above 1% of 1,000 documents); too far; too rare; below the accuracy.
        assert!(select("tri", &c, &o).is_empty());
        assert!(select("tring", &Candidates { term_freq: 11, ..c.clone() }, &always).is_empty());
        assert_eq!(select("tring", &Candidates { term_freq: 10, ..c.clone() }, &always).len(), 4);
        assert_eq!(
            texts(select("tring", &c, &TermSuggestOptions { max_edits: 1, ..o.clone() })),
            ["string", "trying", "trig"]
        );
        // Lucene's threshold: more documents than min_doc_freq (3), or than a fraction of them less one.
        assert_eq!(
            texts(select("tring", &c, &TermSuggestOptions { min_doc_freq: 3.0, ..o.clone() })),
            ["string", "tiring"]
        );
        assert_eq!(
            texts(select("tring", &c, &TermSuggestOptions { min_doc_freq: 0.0035, ..o.clone() })),
            ["string", "trying", "tiring"]
        );
        // A similarity below zero fails even an accuracy of 0.
        let far = Candidates { near: near(&[("abc", 2, 1)]), ..c.clone() };
        let loose = TermSuggestOptions { min_word_length: 1, accuracy: 0.0, ..o.clone() };
        assert!(select("a", &far, &loose).is_empty());
        assert_eq!(
            texts(select("tring", &c, &TermSuggestOptions { accuracy: 0.7, ..o.clone() })),
            ["string", "trying", "trig"]
        );
        assert_eq!(texts(select("tring", &c, &TermSuggestOptions { size: 1, ..o.clone() })), ["string"]);
    }

    #[test]
    fn merged_candidates_add_frequencies() {
        let mut a = Candidates { term_freq: 1, docs: 10, near: near(&[("x", 1, 2)]) };
        a.merge(Candidates { term_freq: 2, docs: 5, near: near(&[("x", 1, 3), ("y", 2, 1)]) });
        assert_eq!(a, Candidates { term_freq: 3, docs: 15, near: near(&[("x", 1, 5), ("y", 2, 1)]) });
    }

    #[test]
    fn options_are_checked() {
        let o = TermSuggestOptions::default();
        assert!(o.validate().is_ok());
        assert!(TermSuggestOptions { max_edits: 3, ..o.clone() }.validate().is_err());
        assert!(TermSuggestOptions { accuracy: 1.5, ..o.clone() }.validate().is_err());
        assert!(TermSuggestOptions { min_doc_freq: 2.5, ..o.clone() }.validate().is_err());
        assert!(TermSuggestOptions { size: 0, ..o }.validate().is_err());
    }
}
