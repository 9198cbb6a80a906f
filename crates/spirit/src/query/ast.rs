//! The query AST: what every front end (the Lucene-style query string, the Elasticsearch DSL) produces and
//! the evaluator consumes. Text in the AST is *raw*: the evaluator runs it through the field's search
//! analyzer (its mapping's `search_analyzer`, else its `analyzer`) or the one a [`Query::Analyzed`] around it
//! names, so `Term { text: "Running" }` on an English-stemmed field looks up `run`.

use std::ops::Bound;

pub use super::regexp::RegexpFlags;

/// The largest phrase slop accepted (Lucene's and Elasticsearch's slop is a Java `int`): past any document's
/// length it changes nothing, so this only keeps the arithmetic on positions in range.
pub const MAX_SLOP: u32 = i32::MAX as u32;

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// Matches every live document.
    MatchAll,
    /// One term in a field (`None` = the index's default fields). The text is analyzed; if analysis yields
    /// several tokens (`wi-fi`), they are treated as a phrase (as Tantivy does; Lucene ORs them).
    Term { field: Option<String>, text: String },
    /// A phrase (`"a b"`): the analyzed tokens must occur at consecutive positions — or, with a `slop`
    /// above 0 (`"a b"~2`, Elasticsearch's `match_phrase` `slop`), within that many position moves of them,
    /// as in Lucene's sloppy phrase query: a match whose terms lie `d` moves from the exact phrase counts
    /// `1 / (d + 1)` towards the phrase frequency, so closer matches score higher.
    Phrase { field: Option<String>, text: String, slop: u32 },
    /// The analyzed tokens of `text` as an exact phrase whose last token is a prefix (Elasticsearch's
    /// `match_phrase_prefix`, Lucene's `MultiPhrasePrefixQuery`): the last position matches any of the first
    /// `max_expansions` terms, in term order, that start with the last token's analyzed form. Scored as
    /// Lucene's `MultiPhraseQuery`: the phrase frequency counts any of them at the last position and the idf
    /// is the sum over every term and expansion. A single token is the OR of its expansions, each scored
    /// as a term (as Lucene rewrites a one-position multi-phrase). With a `slop` above 0 the positions may
    /// lie that many moves apart, as a sloppy [`Query::Phrase`]'s.
    PhrasePrefix { field: Option<String>, text: String, max_expansions: usize, slop: u32 },
    /// Every term starting with `prefix` (`pre*`), lowercased, not stemmed.
    Prefix { field: Option<String>, prefix: String },
    /// Every term matching `pattern` (Elasticsearch's `wildcard` query; `te?t*` in a query string): `*`
    /// stands for any run of characters (none too), `?` for exactly one, `\` makes the next character
    /// literal ([`crate::query::Pattern`]). On text fields the pattern is lowercased as a prefix is (not
    /// stemmed); with `case_insensitive` a keyword field's terms match whatever their case. Constant
    /// score, as a prefix.
    Wildcard { field: Option<String>, pattern: String, case_insensitive: bool },
    /// Every term the regular expression `pattern` matches whole (Elasticsearch's `regexp` query,
    /// `/joh?n(ath[oa]n)/` in a query string), in Lucene's syntax with the optional operators `flags` allows
    /// ([`crate::query::regexp`]). The pattern is not analyzed (Elasticsearch's `regexp` is not: on a text
    /// field `Foo.*` matches no lowercased term); `case_insensitive` matches terms whatever their case.
    /// Constant score, as a wildcard.
    Regexp { field: Option<String>, pattern: String, flags: RegexpFlags, case_insensitive: bool },
    /// A range over a numeric or date field (`price:[10 TO 20]`, `date:{* TO 2015-01-01]`).
    /// Bounds are raw strings, interpreted by the field's type.
    Range { field: String, lower: Bound<String>, upper: Bound<String> },
    /// Boolean combination, with Lucene/Elasticsearch semantics: a document matches when it matches every
    /// `must` and `filter` clause, no `must_not` clause, and — if there are no `must`/`filter` clauses — at
    /// least one `should` clause. `must` and `should` clauses contribute to the score; `filter` and
    /// `must_not` do not. A query with only `must_not` clauses matches all other documents.
    Bool { must: Vec<Query>, should: Vec<Query>, must_not: Vec<Query>, filter: Vec<Query> },
    /// `query` with its score multiplied by `boost` (`title:dune^2`, Elasticsearch's `boost` parameter);
    /// what matches is unchanged. As in Lucene, the factor is folded into each scoring term's weight (its
    /// idf), so a boosted term is evaluated — and pruned — exactly like any other; constant-score clauses
    /// (prefix, range, `match_all`) score `boost` instead of 1. A boost is finite and at least 0
    /// ([`Query::boosted`] checks); boosts nest by multiplying.
    Boost { query: Box<Query>, boost: f32 },
    /// Documents matching at least `min` of the clauses `of`, scored as the sum of the clauses they match
    /// (Elasticsearch's `minimum_should_match` above 1: `{"bool": {"should": [a, b, c],
    /// "minimum_should_match": 2}}` is `Bool { must: [AtLeast { min: 2, of: [a, b, c] }] }`). `min` is at
    /// least 1; more than there are clauses matches nothing.
    AtLeast { min: usize, of: Vec<Query> },
    /// What `query` matches, every match scoring `score` (finite, at least 0) whatever its relevance:
    /// Elasticsearch's `constant_score` (and its `terms` query, which scores 1).
    ConstantScore { query: Box<Query>, score: f32 },
    /// What any clause matches, scored as the best clause's score plus `tie_breaker` (from 0 to 1) times the
    /// other matching clauses' scores (Elasticsearch's `dis_max`, Lucene's `DisjunctionMaxQuery`).
    DisMax { of: Vec<Query>, tie_breaker: f32 },
    /// Terms within an edit distance of `text` (Elasticsearch's `fuzzy` query, and `match` with `fuzziness`),
    /// scored as Lucene's `FuzzyQuery` scores them: the `max_expansions` closest terms of the field (ties in
    /// term order), each weighted `1 - edits / min(its length, the query term's)` in characters, all with
    /// the idf of the most frequent of them (Lucene's blended frequencies), summed. With `analyzed` the text
    /// goes through the field's analyzer first (as `match` does; each token is fuzzy), else it is only
    /// lowercased for text fields (as the term-level `fuzzy` query normalizes it).
    Fuzzy { field: Option<String>, text: String, options: FuzzyOptions, analyzed: bool },
    /// Documents whose `_id` is one of `values`, each scoring 1 (Elasticsearch's `ids` query): each segment
    /// looks the ids up in its id table, so the cost is per id, not per document.
    Ids { values: Vec<String> },
    /// `query` with the text of its clauses analyzed by `analyzer` instead of each field's own analyzer
    /// (Elasticsearch's `analyzer` parameter of `match`, `match_phrase`, `match_phrase_prefix`,
    /// `match_bool_prefix`, `multi_match` and `query_string`): a term's, a phrase's, a phrase prefix's and an
    /// analyzed fuzzy term's tokens are `analyzer`'s, on text fields and — as in Elasticsearch, where the
    /// analyzer asked for replaces a keyword field's too — on keyword fields, whose terms are then its
    /// tokens, each matched whole. Prefixes, wildcards and un-analyzed fuzzy terms are only lowercased on text
    /// fields, which every analyzer does alike. Nested, the innermost analyzer wins.
    Analyzed { analyzer: crate::analysis::AnalyzerConfig, query: Box<Query> },
}

/// How far a fuzzy term reaches ([`Query::Fuzzy`]), with Elasticsearch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FuzzyOptions {
    /// At most this many edits (0 to 2); `None` is `AUTO`: 0 for terms of 1–2 characters, 1 for 3–5, 2 above.
    pub max_edits: Option<u8>,
    /// Characters at the start that must match exactly.
    pub prefix_length: usize,
    /// Terms the query expands to, at most (the closest).
    pub max_expansions: usize,
    /// Whether swapping two adjacent characters is one edit (else two).
    pub transpositions: bool,
}

impl Default for FuzzyOptions {
    fn default() -> Self {
        FuzzyOptions { max_edits: None, prefix_length: 0, max_expansions: 50, transpositions: true }
    }
}

impl FuzzyOptions {
    /// The edits allowed for a term of `chars` characters.
    pub fn edits_for(&self, chars: usize) -> u8 {
        self.max_edits.unwrap_or(match chars {
            0..=2 => 0,
            3..=5 => 1,
            _ => 2,
        })
    }

    /// Whether `candidate` is among the terms a fuzzy query of (normalized) `term` can expand to: it shares
    /// the first `prefix_length` characters and lies within the allowed edits — the rule the planner reads
    /// the dictionary with (what the closest `max_expansions` of them are depends on the dictionary; a
    /// highlighter asks this of each token of a hit).
    pub fn accepts(&self, term: &str, candidate: &str) -> bool {
        let (want, cand): (Vec<char>, Vec<char>) = (term.chars().collect(), candidate.chars().collect());
        let p = self.prefix_length.min(want.len());
        cand.len() >= p
            && cand[..p] == want[..p]
            && super::plan::edit_distance(
                &want[p..],
                &cand[p..],
                self.edits_for(want.len()) as usize,
                self.transpositions,
            )
            .is_some()
    }
}

impl Query {
    /// An empty boolean query (matches nothing until clauses are added).
    pub fn bool() -> Query {
        Query::Bool { must: vec![], should: vec![], must_not: vec![], filter: vec![] }
    }

    /// `self` with its score multiplied by `boost`, or why the boost is refused: it must be a finite number
    /// of at least 0 (Elasticsearch refuses negative boosts too). A boost of 1 changes nothing and adds no
    /// node.
    pub fn boosted(self, boost: f32) -> Result<Query, String> {
        check_factor("boost", boost)?;
        Ok(if boost == 1.0 { self } else { Query::Boost { query: Box::new(self), boost } })
    }
}

/// Refuses a boost or constant score (`what`) that is not a finite number of at least 0; planning checks
/// the same of queries built without [`Query::boosted`].
pub(crate) fn check_factor(what: &str, x: f32) -> Result<(), String> {
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{what} must be a finite number of at least 0, got {x}"));
    }
    Ok(())
}
