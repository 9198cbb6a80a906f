//! Text analysis: turning field text into indexed terms with positions.
//!
//! The pipeline is tokenizer → lowercase → (optional) stop-word removal → (optional) Snowball English
//! stemming. Every front end (ingestion, the query-string parser, the Elasticsearch DSL) goes through the
//! same [`Analyzer`], so a query term and a document term meet in the same form.
//!
//! # Why it looks like this
//!
//! * **ASCII fast path.** Tokenizing is on the ingestion hot path and most text is ASCII. The tokenizer
//!   ([`tokenize`]) classifies bytes with a 256-entry table and either hands out slices of the input
//!   (already-lowercase tokens) or builds the lowercased token in a reused buffer, so there is no
//!   allocation per token.
//! * **Unicode fallback.** On a non-ASCII byte the rest of that token is handled char by char with
//!   [`char::is_alphanumeric`] and [`char::to_lowercase`], then the scan returns to the fast path. The
//!   result is exactly that of a naive `split(!is_alphanumeric)` + char-wise lowercase, which is also what
//!   Tantivy's `SimpleTokenizer` + `LowerCaser` produce, so comparative benchmarks do equal work.
//!   Lowercasing is char-wise (not `str::to_lowercase`): a capital sigma always becomes `'σ'`, never the
//!   word-final `'ς'`, so a term's form never depends on its context.
//! * **Lucene-compatible positions.** Every token consumes a position, including stop words and overlong
//!   tokens that are not indexed (Lucene's position increments). A phrase therefore never matches across a
//!   removed word: with stop words on, `"quick the fox"` indexes `quick@0 fox@2`, and the phrase
//!   `"quick fox"` (positions 0, 1) does not match it.
//! * **Overlong tokens** (more than [`MAX_TOKEN_BYTES`] bytes once lowercased) are dropped, as Lucene's
//!   and Tantivy's length filters do: they are almost always junk (base64, hashes) and would bloat the term
//!   dictionary.
//! * **Stemming** uses the Snowball English ("Porter2") stemmer from `rust-stemmers`, after stop-word
//!   removal (stop words are matched on the unstemmed token). The stemmer returns a `Cow`, so unchanged
//!   words cost no allocation; words it rewrites allocate inside `rust-stemmers`.
//! * **Prefix queries** are normalised by lowercasing only ([`Analyzer::normalize_prefix`]): stemming a
//!   prefix would be wrong (`runn*` must not become `run*`).
//! * **Keyword fields** are matched exactly ([`keyword_normalize`] is the identity).

mod stopwords;
mod tokenizer;

#[cfg(test)]
mod tests;

use rust_stemmers::{Algorithm, Stemmer};

pub use self::stopwords::{is_stop_word, ENGLISH_STOP_WORDS};
pub use self::tokenizer::{tokenize, tokenize_with_buffer};

/// Tokens longer than this many bytes (UTF-8, after lowercasing) are not indexed; they still consume a
/// position.
pub const MAX_TOKEN_BYTES: usize = 255;

thread_local! {
    /// The buffer tokens are lowercased into, reused by every analysis on the thread (a new one per field
    /// value was an allocation and a few reallocations per document on ingest).
    static TOKEN_BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Which optional stages an [`Analyzer`] runs. Tokenizing and lowercasing always happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AnalyzerConfig {
    /// Drop Lucene's default English stop words ([`ENGLISH_STOP_WORDS`]).
    pub stop_words: bool,
    /// Apply the Snowball English stemmer.
    pub stemming: bool,
}

impl AnalyzerConfig {
    /// Tokenize and lowercase only (the default; Lucene's `SimpleAnalyzer`-like behaviour).
    pub const fn simple() -> AnalyzerConfig {
        AnalyzerConfig { stop_words: false, stemming: false }
    }

    /// Stop words and stemming (Lucene's `EnglishAnalyzer`-like behaviour).
    pub const fn english() -> AnalyzerConfig {
        AnalyzerConfig { stop_words: true, stemming: true }
    }
}

/// A configured analysis pipeline. Immutable, `Send + Sync`, and two words in size: share it freely
/// (by reference or by cloning).
pub struct Analyzer {
    config: AnalyzerConfig,
    stemmer: Option<Stemmer>,
}

impl Analyzer {
    /// Builds an analyzer for `config`.
    pub fn new(config: AnalyzerConfig) -> Analyzer {
        let stemmer = config.stemming.then(|| Stemmer::create(Algorithm::English));
        Analyzer { config, stemmer }
    }

    /// The configuration this analyzer was built with.
    pub fn config(&self) -> AnalyzerConfig {
        self.config
    }

    /// Calls `sink(term, position)` for every indexed token of `text`, positions starting at 0 and
    /// counting every token including dropped stop words and overlong tokens (as Lucene does: a phrase
    /// never matches across a removed stop word). Returns the number of positions consumed (so a caller
    /// can continue a multi-valued field at that offset, see [`Analyzer::analyze_from`]).
    pub fn analyze(&self, text: &str, sink: &mut dyn FnMut(&str, u32)) -> u32 {
        self.analyze_from(text, 0, sink)
    }

    /// Like [`Analyzer::analyze`], with positions starting at `first_position`. Returns the position
    /// after the last token (`first_position` plus the number of tokens), which is where the next value of
    /// a multi-valued field continues (add a gap to it to keep phrases from spanning values).
    /// Positions saturate at `u32::MAX`.
    pub fn analyze_from(&self, text: &str, first_position: u32, sink: &mut dyn FnMut(&str, u32)) -> u32 {
        TOKEN_BUF.with(|b| match b.try_borrow_mut() {
            Ok(mut buf) => self.analyze_with_buffer(text, first_position, &mut buf, sink),
            // Re-entered from a sink on this thread: a buffer of its own.
            Err(_) => self.analyze_with_buffer(text, first_position, &mut String::new(), sink),
        })
    }

    fn analyze_with_buffer(
        &self,
        text: &str,
        first_position: u32,
        buf: &mut String,
        sink: &mut dyn FnMut(&str, u32),
    ) -> u32 {
        let mut pos = first_position;
        let stop_words = self.config.stop_words;
        let stemmer = self.stemmer.as_ref();
        tokenizer::for_each_token(text, buf, &mut |token: &str| {
            let p = pos;
            pos = pos.saturating_add(1);
            if token.len() > MAX_TOKEN_BYTES || (stop_words && is_stop_word(token)) {
                return;
            }
            match stemmer {
                Some(s) => sink(&s.stem(token), p),
                None => sink(token, p),
            }
        });
        pos
    }

    /// Calls `sink(term, byte_range)` for every indexed token of `text`, with the byte range of the token in
    /// `text` (for highlighting). The terms are exactly those of [`Analyzer::analyze`], in order: a token is a
    /// maximal run of alphanumeric chars (the tokenizer's rule), lowercased, stop-word filtered and stemmed.
    pub fn analyze_spans(&self, text: &str, sink: &mut dyn FnMut(&str, std::ops::Range<usize>)) {
        let mut start = None;
        let emit = |s: usize, e: usize, sink: &mut dyn FnMut(&str, std::ops::Range<usize>)| {
            self.analyze(&text[s..e], &mut |t, _| sink(t, s..e));
        };
        for (i, c) in text.char_indices() {
            match (c.is_alphanumeric(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    emit(s, i, sink);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            emit(s, text.len(), sink);
        }
    }

    /// Collects [`Analyzer::analyze`]'s output (convenient for queries and tests; allocates per term).
    pub fn analyze_to_vec(&self, text: &str) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        self.analyze(text, &mut |t, p| out.push((t.to_owned(), p)));
        out
    }

    /// Normalises a prefix for prefix queries: lowercased char-wise exactly as the tokenizer lowercases
    /// (so `Caf` matches terms produced from `CAFÉ`), never stemmed and never stop-word filtered.
    /// Other characters are kept as they are: a prefix containing a separator matches no term, as in
    /// Lucene.
    pub fn normalize_prefix(&self, prefix: &str) -> String {
        if prefix.is_ascii() {
            prefix.to_ascii_lowercase()
        } else {
            prefix.chars().flat_map(char::to_lowercase).collect()
        }
    }
}

impl Default for Analyzer {
    fn default() -> Analyzer {
        Analyzer::new(AnalyzerConfig::default())
    }
}

impl Clone for Analyzer {
    fn clone(&self) -> Analyzer {
        Analyzer::new(self.config)
    }
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer").field("config", &self.config).finish()
    }
}

/// Normalisation for keyword fields (exact match): the identity.
#[inline]
pub fn keyword_normalize(s: &str) -> &str {
    s
}
