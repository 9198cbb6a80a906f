//! Scores equal Lucene's: exact and sloppy phrases (`"a b"~N`) on a few documents, including repeated
//! terms, give the hits and BM25 scores that Lucene 10.4's `PhraseQuery` gives, exact and sloppy phrase
//! prefixes those of its `MultiPhraseQuery` over the last word's expansions (Elasticsearch's
//! `match_phrase_prefix`), a dis-max of terms with
//! a tie breaker those of its `DisjunctionMaxQuery`, and fuzzy terms those of its `FuzzyQuery` (standard analyzer
//! without stop words, k1 1.2, b 0.75). The expected values were printed by `tests/lucene/PhraseScores.java`
//! (how to run it is at its top); one shard, so the statistics are the same whole-index ones. Checked on the
//! fresh segment and again after a force merge.

use spirit::{Index, Query, SearchOptions, ShardConfig};

const DOCS: [&str; 7] = [
    "quick fox a b",
    "quick x fox a",
    "fox quick a b",
    "quick x y fox",
    "quick fox quick x fox fox quick",
    "a a x a b a",
    "to be or not to be x to be",
];

/// Lucene's output: query, slop, then (doc, score) in its order.
const LUCENE: &str = "\
quick fox ~0: 0=0.38172525 4=0.30456364
quick fox ~1: 0=0.38172525 4=0.37968934 1=0.25608546
quick fox ~2: 4=0.4476386 0=0.38172525 1=0.25608546 2=0.19267052 3=0.19267052
quick fox ~3: 4=0.4476386 0=0.38172525 1=0.25608546 2=0.19267052 3=0.19267052
a a ~0: 5=0.5014642
a a ~1: 5=0.6985252
a a ~2: 5=0.6985252
a a ~3: 5=0.6985252
a b ~0: 0=0.7141773 2=0.7141773 5=0.61098194
a b ~1: 0=0.7141773 2=0.7141773 5=0.61098194
a b ~2: 0=0.7141773 2=0.7141773 5=0.7113167
a b ~3: 0=0.7141773 2=0.7141773 5=0.7113167
to be or not to be ~0: 6=3.5972347
to be or not to be ~1: 6=3.5972347
to be or not to be ~2: 6=3.5972347
to be or not to be ~3: 6=3.5972347
fox quick ~0: 4=0.43310574 2=0.38172525
fox quick ~1: 4=0.43310574 2=0.38172525
fox quick ~2: 4=0.43310574 2=0.38172525 0=0.19267052
fox quick ~3: 4=0.43310574 2=0.38172525 0=0.19267052 1=0.15442896
quick x fox ~0: 1=0.5725879 4=0.45684552
quick x fox ~1: 1=0.5725879 4=0.45684552 3=0.3841282
quick x fox ~2: 1=0.5725879 4=0.45684552 3=0.3841282
quick x fox ~3: 1=0.5725879 4=0.5183866 3=0.3841282
prefix to b ~0: 6=2.6134431
prefix to b ~1: 6=2.6134431
prefix to b ~2: 6=2.6134431
prefix to b ~3: 6=2.6134431
prefix a b ~0: 0=1.5668731 2=1.5668731 5=1.3404671
prefix a b ~1: 0=1.5668731 2=1.5668731 5=1.3404671
prefix a b ~2: 0=1.5668731 2=1.5668731 5=1.5605972
prefix a b ~3: 0=1.5668731 2=1.5668731 5=1.5605972
prefix quick q ~0:
prefix quick q ~1: 4=0.19111884
prefix quick q ~2: 4=0.19111884
prefix quick q ~3: 4=0.25425625
prefix quick x f ~0: 1=0.5725879 4=0.45684552
prefix quick x f ~1: 1=0.5725879 4=0.45684552 3=0.3841282
prefix quick x f ~2: 1=0.5725879 4=0.45684552 3=0.3841282
prefix quick x f ~3: 1=0.5725879 4=0.5183866 3=0.3841282
prefix a a ~0: 5=0.5014642
prefix a a ~1: 5=0.6985252
prefix a a ~2: 5=0.6985252
prefix a a ~3: 5=0.6985252
prefix fox q ~0: 4=0.43310574 2=0.38172525
prefix fox q ~1: 4=0.43310574 2=0.38172525
prefix fox q ~2: 4=0.43310574 2=0.38172525 0=0.19267052
prefix fox q ~3: 4=0.43310574 2=0.38172525 0=0.19267052 1=0.15442896
dismax quick fox a ~0.0: 5=0.43466875 0=0.29308096 1=0.29308096 2=0.29308096 4=0.2520062 3=0.19086263
dismax quick fox a ~0.3: 5=0.43466875 0=0.40759853 1=0.40759853 2=0.40759853 4=0.32760808 3=0.24812141
dismax quick fox a ~1.0: 0=0.67480624 1=0.67480624 2=0.67480624 4=0.5040124 5=0.43466875 3=0.38172525";

#[test]
fn phrase_scores_equal_lucenes() {
    let dir = tempfile::tempdir().unwrap();
    let mappings = serde_json::json!({"properties": {"body": {"type": "text", "analyzer": "standard"}}});
    let index = Index::open("p", dir.path(), ShardConfig::default(), Some(&mappings), None).unwrap();
    for (i, body) in DOCS.iter().enumerate() {
        index.add(serde_json::json!({"_id": i.to_string(), "body": body})).unwrap();
    }
    // In the fresh segment, then in a merged image (the exact phrase's fast paths run only there).
    check(&index);
    index.force_merge(1).unwrap();
    check(&index);
}

fn check(index: &Index) {
    let opts = SearchOptions { limit: 10, ..Default::default() };
    for line in LUCENE.lines() {
        let (query, hits) = line.split_once(':').unwrap();
        let (terms, slop) = query.rsplit_once(" ~").unwrap();
        let res = match (terms.strip_prefix("dismax "), terms.strip_prefix("prefix ")) {
            // A phrase prefix (Lucene's MultiPhraseQuery over the last word's expansions), `~` its slop.
            (_, Some(text)) => {
                let q = Query::PhrasePrefix {
                    field: Some("body".into()),
                    text: text.into(),
                    max_expansions: 50,
                    slop: slop.parse().unwrap(),
                };
                index.search_query(&q, &opts).unwrap()
            }
            // A dis_max of term queries, `~` its tie breaker.
            (Some(terms), _) => {
                let of = terms
                    .split(' ')
                    .map(|t| Query::Term { field: Some("body".into()), text: t.into() })
                    .collect();
                let q = Query::DisMax { of, tie_breaker: slop.parse().unwrap() };
                index.search_query(&q, &opts).unwrap()
            }
            (None, None) => index.search(&format!("body:\"{terms}\"~{slop}"), &opts).unwrap(),
        };
        assert_lucenes_hits(line, hits, &res);
    }
}

/// Fuzzy terms score as Lucene's `FuzzyQuery` (max edits, prefix length, max expansions, transpositions;
/// printed by the same Java program): the expansion, each term's boost from its edits, the blended idf.
const FUZZY_DOCS: [&str; 16] = [
    "hello world",
    "help me hello",
    "hallo hallo welt",
    "jello shot",
    "yellow hell",
    "helo",
    "hero held",
    "world wide web",
    "hell hello",
    "abc ca",
    "ac bca cab",
    "hellooo",
    "he",
    "hxllo hexlo helxo",
    "héllo",
    "ehllo wrold",
];

const LUCENE_FUZZY: &str = "\
fuzzy helo 2 0 50 true: 13=1.211495 6=1.0911058 8=1.0911058 5=0.91020703 1=0.9086213 2=0.7407819 0=0.5455529 4=0.5455529 14=0.45510352 3=0.36370197 15=0.36370197 12=0.0
fuzzy hello 2 0 3 true: 0=0.72740394 8=0.72740394 2=0.7006531 1=0.6057475 15=0.5819231
fuzzy hello 1 2 50 true: 8=1.2729568 13=0.9691961 0=0.72740394 5=0.6826553 1=0.6057475 4=0.5455529
fuzzy ehllo 1 0 50 true: 15=0.72740394 0=0.5819231 8=0.5819231 1=0.48459804
fuzzy ehllo 1 0 50 false: 15=1.1173736
fuzzy ca 2 0 50 true: 10=1.3957438 9=1.1173736 1=0.0 12=0.0
fuzzy world 1 0 50 true: 0=0.88226557 7=0.734709 15=0.7058125
fuzzy wlord 2 1 50 true: 0=0.5293594 15=0.5293594 7=0.4408254
fuzzy zzzzzz 2 0 50 true:";

#[test]
fn fuzzy_scores_equal_lucenes() {
    let dir = tempfile::tempdir().unwrap();
    let mappings = serde_json::json!({"properties": {"body": {"type": "text", "analyzer": "standard"}}});
    let index = Index::open("f", dir.path(), ShardConfig::default(), Some(&mappings), None).unwrap();
    for (i, body) in FUZZY_DOCS.iter().enumerate() {
        index.add(serde_json::json!({"_id": i.to_string(), "body": body})).unwrap();
    }
    check_fuzzy(&index);
    index.force_merge(1).unwrap();
    check_fuzzy(&index);
}

fn check_fuzzy(index: &Index) {
    let opts = SearchOptions { limit: 20, ..Default::default() };
    for line in LUCENE_FUZZY.lines() {
        let (query, hits) = line.split_once(':').unwrap();
        let p: Vec<&str> = query.split(' ').collect();
        let options = spirit::query::FuzzyOptions {
            max_edits: Some(p[2].parse().unwrap()),
            prefix_length: p[3].parse().unwrap(),
            max_expansions: p[4].parse().unwrap(),
            transpositions: p[5].parse().unwrap(),
        };
        let q = Query::Fuzzy { field: Some("body".into()), text: p[1].into(), options, analyzed: false };
        assert_lucenes_hits(line, hits, &index.search_query(&q, &opts).unwrap());
    }
}

/// `res` has the hits Lucene printed (`hits`: `doc=score` separated by spaces) with their scores, to f32
/// rounding; ties may come in another order (Lucene's oldest first, spirit's newest first).
fn assert_lucenes_hits(line: &str, hits: &str, res: &spirit::SearchResult) {
    let mut want: Vec<(String, f32)> = hits
        .split_whitespace()
        .map(|h| {
            let (d, s) = h.split_once('=').unwrap();
            (d.to_string(), s.parse().unwrap())
        })
        .collect();
    let mut got: Vec<(String, f32)> = res.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
    let by_id = |v: &mut Vec<(String, f32)>| v.sort_by(|a, b| a.0.cmp(&b.0));
    by_id(&mut want);
    by_id(&mut got);
    assert_eq!(got.len(), want.len(), "{line}: got {got:?}");
    for ((gid, gs), (wid, ws)) in got.iter().zip(&want) {
        assert_eq!(gid, wid, "{line}: got {got:?}");
        assert!((gs - ws).abs() <= 1e-5 * ws.abs().max(1e-3), "{line}: doc {gid} scores {gs}, Lucene {ws}");
    }
}
