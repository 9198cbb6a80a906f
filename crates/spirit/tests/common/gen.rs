//! Proptest strategies shared by the randomized tests: skewed words (so terms have very different
//! frequencies and scores tie often), documents over a small id space (so adds replace), and query trees of
//! every kind (term, phrase, phrase prefix, prefix, wildcard, regexp, keyword, range, match-all, nested bool).

use super::RefDoc;
use proptest::prelude::*;
use spirit::query::{Query, RegexpFlags};
use std::ops::Bound;

pub const WORDS: [&str; 10] =
    ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"];
pub const TAGS: [&str; 3] = ["red", "green", "blue"];

pub fn word() -> impl Strategy<Value = String> {
    // Skewed: low indexes are frequent.
    (0usize..10, 0usize..10).prop_map(|(a, b)| WORDS[a.min(b)].to_string())
}

pub fn doc() -> impl Strategy<Value = RefDoc> {
    (
        0u32..25,
        proptest::collection::vec(word(), 1..4),
        proptest::collection::vec(word(), 1..16),
        0usize..3,
        0i64..40,
    )
        .prop_map(|(id, title, body, tag, n)| RefDoc {
            id: format!("d{id}"),
            title,
            body,
            tag: TAGS[tag].into(),
            n,
            live: true,
            seq: 0,
        })
}

pub fn leaf() -> impl Strategy<Value = Query> {
    let field = prop_oneof![Just(None), Just(Some("title".to_string())), Just(Some("body".to_string()))];
    prop_oneof![
        4 => (field.clone(), word()).prop_map(|(field, text)| Query::Term { field, text }),
        2 => (field.clone(), word(), word(), prop::sample::select(&[0u32, 0, 1, 2, 5][..]))
            .prop_map(|(field, a, b, slop)| Query::Phrase { field, text: format!("{a} {b}"), slop }),
        1 => (field.clone(), word(), word(), word(), 1u32..4)
            .prop_map(|(field, a, b, c, slop)| Query::Phrase { field, text: format!("{a} {b} {c}"), slop }),
        1 => (field.clone(), proptest::collection::vec(word(), 0..3), 0usize..10, 1usize..4, prop::sample::select(&[0u32, 0, 1, 3][..])).prop_map(
            |(field, words, w, n, slop)| {
                let text = words.iter().map(|w| format!("{w} ")).collect::<String>() + &WORDS[w][..n];
                Query::PhrasePrefix { field, text, max_expansions: 50, slop }
            }
        ),
        1 => (field, 0usize..10, 1usize..3).prop_map(|(field, w, n)| Query::Prefix { field, prefix: WORDS[w][..n].to_string() }),
        1 => (0usize..3).prop_map(|t| Query::Term { field: Some("tag".into()), text: TAGS[t].into() }),
        1 => (0usize..4, 0usize..10, proptest::collection::vec(0u8..5, 1..5), any::<bool>()).prop_map(
            |(f, w, ops, case_insensitive)| {
                let field = [None, Some("title"), Some("body"), Some("tag")][f].map(str::to_string);
                let base = if f == 3 { TAGS[w % 3] } else { WORDS[w] };
                Query::Wildcard { field, pattern: wildcard_of(base, &ops), case_insensitive }
            }
        ),
        1 => (0usize..4, 0usize..10, proptest::collection::vec(0u8..7, 1..5), any::<bool>()).prop_map(
            |(f, w, ops, case_insensitive)| {
                let field = [None, Some("title"), Some("body"), Some("tag")][f].map(str::to_string);
                let base = if f == 3 { TAGS[w % 3] } else { WORDS[w] };
                let pattern = regexp_of(base, &ops);
                Query::Regexp { field, pattern, flags: RegexpFlags::ALL, case_insensitive }
            }
        ),
        1 => (0i64..40, 0i64..20, any::<bool>()).prop_map(|(lo, w, inc)| Query::Range {
            field: "n".into(),
            lower: if inc { Bound::Included(lo.to_string()) } else { Bound::Excluded(lo.to_string()) },
            upper: Bound::Included((lo + w).to_string()),
        }),
        1 => Just(Query::MatchAll),
        1 => proptest::collection::vec(0u32..30, 0..4)
            .prop_map(|ids| Query::Ids { values: ids.into_iter().map(|i| format!("d{i}")).collect() }),
    ]
}

/// A wildcard pattern made from `word`, character by character as `ops` (cycled) say: keep it, `?`, `*` in
/// place of it and the next, upper-case it, or `*` before it.
pub fn wildcard_of(word: &str, ops: &[u8]) -> String {
    let chars: Vec<char> = word.chars().collect();
    let (mut out, mut i) = (String::new(), 0);
    while i < chars.len() {
        match ops[i % ops.len()] {
            1 => out.push('?'),
            2 => {
                out.push('*');
                i += 1;
            }
            3 => out.extend(chars[i].to_uppercase()),
            4 => {
                out.push('*');
                out.push(chars[i]);
            }
            _ => out.push(chars[i]),
        }
        i += 1;
    }
    out
}

/// A regular expression made from `word`, character by character as `ops` (cycled) say: keep it, `.`,
/// `.*` in place of it and the next, upper-case it, a class `[cq]` of it and `q`, make it optional (`c?`),
/// or the alternation `(c|q)` — the constructs [`super::regexp_matches`] understands.
pub fn regexp_of(word: &str, ops: &[u8]) -> String {
    let chars: Vec<char> = word.chars().collect();
    let (mut out, mut i) = (String::new(), 0);
    while i < chars.len() {
        let c = chars[i];
        match ops[i % ops.len()] {
            1 => out.push('.'),
            2 => {
                out.push_str(".*");
                i += 1;
            }
            3 => out.extend(c.to_uppercase()),
            4 => out.push_str(&format!("[{c}q]")),
            5 => out.push_str(&format!("{c}?")),
            6 => out.push_str(&format!("({c}|q)")),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// `q`, now and then boosted (a factor of 0 included: the clause matches and adds nothing).
pub fn maybe_boosted(q: impl Strategy<Value = Query>) -> impl Strategy<Value = Query> {
    (q, proptest::option::weighted(0.15, proptest::sample::select(&[0.0f32, 0.5, 2.0, 3.5][..]))).prop_map(
        |(query, boost)| match boost {
            Some(boost) => Query::Boost { query: Box::new(query), boost },
            None => query,
        },
    )
}

pub fn query() -> impl Strategy<Value = Query> {
    maybe_boosted(leaf()).prop_recursive(2, 12, 4, |inner| {
        let bool = (
            proptest::collection::vec(inner.clone(), 0..3),
            proptest::collection::vec(inner.clone(), 0..3),
            proptest::collection::vec(inner.clone(), 0..2),
            proptest::collection::vec(inner.clone(), 0..2),
        )
            .prop_filter("non-empty bool", |(a, b, c, d)| {
                !(a.is_empty() && b.is_empty() && c.is_empty() && d.is_empty())
            })
            .prop_map(|(must, should, must_not, filter)| Query::Bool {
                must,
                should,
                must_not,
                filter,
            });
        // At least 1 to 4 of 1 to 4 clauses: ORs, ANDs, real at-leasts and ones that cannot match.
        let at_least = (1usize..5, proptest::collection::vec(inner.clone(), 1..5))
            .prop_map(|(min, of)| Query::AtLeast { min, of });
        let constant = (inner.clone(), proptest::sample::select(&[0.0f32, 1.0, 2.5][..]))
            .prop_map(|(q, score)| Query::ConstantScore { query: Box::new(q), score });
        let dis_max =
            (proptest::collection::vec(inner, 1..4), prop::sample::select(&[0.0f32, 0.0, 0.3, 1.0][..]))
                .prop_map(|(of, tie_breaker)| Query::DisMax { of, tie_breaker });
        prop_oneof![8 => bool, 2 => at_least, 1 => constant, 1 => dis_max]
            .prop_flat_map(|q| maybe_boosted(Just(q)))
    })
}

/// One step of a randomized lifecycle test.
#[derive(Debug, Clone)]
pub enum Op {
    Add(RefDoc),
    Delete(u32),
    Query(Query),
    Seal,
    CommitMerge,
    Compact,
    /// Force merge down to this many segments (1 or 2).
    ForceMerge(usize),
    Reopen,
}

/// Mostly adds and queries, with deletes and every lifecycle step in between.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => doc().prop_map(Op::Add),
        2 => (0u32..25).prop_map(Op::Delete),
        5 => query().prop_map(Op::Query),
        1 => Just(Op::Seal),
        1 => Just(Op::CommitMerge),
        1 => Just(Op::Compact),
        1 => (1usize..3).prop_map(Op::ForceMerge),
        1 => Just(Op::Reopen),
    ]
}
