//! The English stop-word set.
//!
//! This is exactly Lucene's `EnglishAnalyzer.ENGLISH_STOP_WORDS_SET` (the same list Elasticsearch's
//! `_english_` stop filter uses), so a spirit index with stop words enabled drops the same tokens as a
//! Lucene/Elasticsearch index with the default English analyzer.

/// Lucene's default English stop words, sorted. Stop-word matching is done on the lowercased,
/// *unstemmed* token.
pub const ENGLISH_STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to",
    "was", "will", "with",
];

/// Whether `term` (already lowercased) is one of [`ENGLISH_STOP_WORDS`].
///
/// A `match` on string literals compiles to a length switch plus a few byte comparisons, which beats a
/// hash-set lookup (no hashing) for a set this small.
#[inline]
pub fn is_stop_word(term: &str) -> bool {
    matches!(
        term,
        "a" | "an"
            | "and"
            | "are"
            | "as"
            | "at"
            | "be"
            | "but"
            | "by"
            | "for"
            | "if"
            | "in"
            | "into"
            | "is"
            | "it"
            | "no"
            | "not"
            | "of"
            | "on"
            | "or"
            | "such"
            | "that"
            | "the"
            | "their"
            | "then"
            | "there"
            | "these"
            | "they"
            | "this"
            | "to"
            | "was"
            | "will"
            | "with"
    )
}
