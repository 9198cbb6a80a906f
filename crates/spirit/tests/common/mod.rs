//! A brute-force reference index: a few lines over a `Vec` of documents, with the engine's query semantics
//! (Lucene boolean logic, BM25 with Lucene's formula over all documents ever added, dis-max over default
//! fields, constant-score prefix and range). Every engine answer is checked against it.

#![allow(dead_code)]

pub mod aggs;
pub mod gen;

use spirit::query::Query;
use std::collections::HashMap;
use std::ops::Bound;

pub const TEXT_FIELDS: [&str; 2] = ["title", "body"];

/// The tests' deterministic random source: one xorshift64 step of `s` (nonzero), returning the new state.
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Zipf-ish term number from a random word: 0 is in most documents of 30-odd terms, 150 in a few.
pub fn zipf_term(x: u64) -> u64 {
    let r = (x >> 11) as f64 / (1u64 << 53) as f64;
    (r.powf(3.0) * 200.0) as u64
}

#[derive(Debug, Clone)]
pub struct RefDoc {
    pub id: String,
    pub title: Vec<String>,
    pub body: Vec<String>,
    pub tag: String,
    pub n: i64,
    pub live: bool,
    /// Global insertion order = engine doc id order.
    pub seq: usize,
}

impl RefDoc {
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({"_id": self.id, "title": self.title.join(" "), "body": self.body.join(" "),
                           "tag": self.tag, "n": self.n})
    }
    fn field(&self, f: &str) -> Option<&Vec<String>> {
        match f {
            "title" => Some(&self.title),
            "body" => Some(&self.body),
            _ => None,
        }
    }
}

pub fn mappings() -> serde_json::Value {
    serde_json::json!({"properties": {"title": {"type": "text"}, "body": {"type": "text"},
                                      "tag": {"type": "keyword"}, "n": {"type": "long"}}})
}

#[derive(Default)]
pub struct Reference {
    pub docs: Vec<RefDoc>,
    /// Memoized collection statistics (per field, per field and term): brute force stays brute force per
    /// document, but not quadratic per query. Cleared by every change.
    stats_memo: std::cell::RefCell<HashMap<String, (f64, f64)>>,
    idf_memo: std::cell::RefCell<HashMap<(String, String), f64>>,
}

pub const K1: f64 = 1.2;
pub const B: f64 = 0.75;

impl Reference {
    pub fn add(&mut self, mut d: RefDoc) {
        for old in self.docs.iter_mut().filter(|o| o.id == d.id && o.live) {
            old.live = false;
        }
        self.forget();
        d.seq = self.docs.len();
        d.live = true;
        self.docs.push(d);
    }

    fn forget(&mut self) {
        self.stats_memo.get_mut().clear();
        self.idf_memo.get_mut().clear();
    }

    pub fn delete(&mut self, id: &str) -> bool {
        self.forget();
        let mut found = false;
        for d in self.docs.iter_mut().filter(|o| o.id == id && o.live) {
            d.live = false;
            found = true;
        }
        found
    }

    fn stats(&self, field: &str) -> (f64, f64) {
        if let Some(&s) = self.stats_memo.borrow().get(field) {
            return s;
        }
        let s = self.stats_uncached(field);
        self.stats_memo.borrow_mut().insert(field.to_string(), s);
        s
    }

    fn stats_uncached(&self, field: &str) -> (f64, f64) {
        // Every document has both text fields (generator guarantees non-empty values).
        let n = self.docs.len() as f64;
        let total: usize = self.docs.iter().map(|d| d.field(field).unwrap().len()).sum();
        (n, if n == 0.0 { 1.0 } else { total as f64 / n })
    }

    fn idf(&self, field: &str, term: &str) -> f64 {
        let key = (field.to_string(), term.to_string());
        if let Some(&x) = self.idf_memo.borrow().get(&key) {
            return x;
        }
        let x = self.idf_uncached(field, term);
        self.idf_memo.borrow_mut().insert(key, x);
        x
    }

    fn idf_uncached(&self, field: &str, term: &str) -> f64 {
        let (n, _) = self.stats(field);
        let df =
            self.docs.iter().filter(|d| d.field(field).unwrap().iter().any(|t| t == term)).count() as f64;
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// BM25 with the field length as scoring sees it: through the one-byte norm (exact below 24 tokens,
    /// 4 significant bits above), as Lucene does; the average length stays exact.
    fn bm25(&self, field: &str, idf: f64, tf: f64, dl: usize) -> f64 {
        let (_, avgdl) = self.stats(field);
        let dl = spirit::codec::quantized_length(dl as u32);
        idf * tf / (tf + K1 * (1.0 - B + B * dl as f64 / avgdl))
    }

    /// Score of `d` for `q`, or None if it does not match.
    pub fn eval(&self, q: &Query, d: &RefDoc) -> Option<f64> {
        match q {
            Query::MatchAll => Some(1.0),
            Query::Term { field, text } | Query::Phrase { field, text, .. } => {
                let slop = match q {
                    Query::Phrase { slop, .. } => *slop as i64,
                    _ => 0,
                };
                let toks: Vec<String> = spirit::analysis::Analyzer::new(Default::default())
                    .analyze_to_vec(text)
                    .into_iter()
                    .map(|t| t.0)
                    .collect();
                let fields: Vec<&str> = match field.as_deref() {
                    None => TEXT_FIELDS.to_vec(),
                    Some(f) => vec![f],
                };
                let mut best: Option<f64> = None;
                for f in fields {
                    let s = match f {
                        "tag" => (d.tag == *text).then(|| {
                            let n = self.docs.len() as f64;
                            let df = self.docs.iter().filter(|o| o.tag == *text).count() as f64;
                            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                            idf * 1.0 / (1.0 + K1)
                        }),
                        "n" => text.parse::<f64>().ok().filter(|x| *x == d.n as f64).map(|_| 1.0),
                        "title" | "body" => self.text_score(f, &toks, slop, d),
                        _ => None,
                    };
                    if let Some(s) = s {
                        best = Some(best.map_or(s, |b: f64| b.max(s)));
                    }
                }
                best
            }
            Query::Prefix { field, prefix } => {
                let fields: Vec<&str> = match field.as_deref() {
                    None => TEXT_FIELDS.to_vec(),
                    Some(f) => vec![f],
                };
                let p = prefix.to_lowercase();
                fields
                    .iter()
                    .any(|f| match *f {
                        "tag" => d.tag.starts_with(prefix.as_str()),
                        f => d.field(f).is_some_and(|ts| ts.iter().any(|t| t.starts_with(&p))),
                    })
                    .then_some(1.0)
            }
            Query::Wildcard { field, pattern, case_insensitive } => {
                let fields: Vec<&str> = match field.as_deref() {
                    None => TEXT_FIELDS.to_vec(),
                    Some(f) => vec![f],
                };
                let chars = |s: &str| s.chars().collect::<Vec<char>>();
                let lower = chars(&pattern.to_lowercase());
                fields
                    .iter()
                    .any(|f| match *f {
                        "tag" if *case_insensitive => glob(&lower, &chars(&d.tag.to_lowercase())),
                        "tag" => glob(&chars(pattern), &chars(&d.tag)),
                        f => d.field(f).is_some_and(|ts| ts.iter().any(|t| glob(&lower, &chars(t)))),
                    })
                    .then_some(1.0)
            }
            Query::PhrasePrefix { field, text, max_expansions, slop } => {
                let toks: Vec<String> = spirit::analysis::Analyzer::new(Default::default())
                    .analyze_to_vec(text)
                    .into_iter()
                    .map(|t| t.0)
                    .collect();
                let (prefix, fixed) = toks.split_last()?;
                let fields: Vec<&str> = match field.as_deref() {
                    None => TEXT_FIELDS.to_vec(),
                    Some(f) => vec![f],
                };
                let mut best: Option<f64> = None;
                for f in fields {
                    // The first `max_expansions` terms of the field's live documents with the prefix.
                    let expansions: Vec<&String> = self
                        .docs
                        .iter()
                        .flat_map(|o| o.field(f).unwrap())
                        .filter(|t| t.starts_with(prefix.as_str()))
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .take(*max_expansions)
                        .collect();
                    let ts = d.field(f).unwrap();
                    let s = if fixed.is_empty() {
                        // One position: the OR of its terms, each scored as a term.
                        let scores: Vec<f64> = expansions
                            .iter()
                            .filter_map(|e| {
                                let tf = ts.iter().filter(|t| t == e).count();
                                (tf > 0).then(|| self.bm25(f, self.idf(f, e), tf as f64, ts.len()))
                            })
                            .collect();
                        (!scores.is_empty()).then(|| scores.iter().sum())
                    } else if *slop > 0 {
                        let sets: Vec<Vec<String>> = fixed
                            .iter()
                            .map(|t| vec![t.clone()])
                            .chain([expansions.iter().map(|e| e.to_string()).collect()])
                            .collect();
                        let freq = sloppy_freq(ts, &sets, *slop as i64);
                        let idf: f64 =
                            fixed.iter().chain(expansions.iter().copied()).map(|t| self.idf(f, t)).sum();
                        (freq > 0.0).then(|| self.bm25(f, idf, freq, ts.len()))
                    } else {
                        let n = fixed.len();
                        let freq = (0..ts.len())
                            .filter(|&i| {
                                fixed.iter().enumerate().all(|(j, t)| ts.get(i + j) == Some(t))
                                    && ts.get(i + n).is_some_and(|t| expansions.contains(&t))
                            })
                            .count();
                        let idf: f64 =
                            fixed.iter().chain(expansions.iter().copied()).map(|t| self.idf(f, t)).sum();
                        (freq > 0).then(|| self.bm25(f, idf, freq as f64, ts.len()))
                    };
                    if let Some(s) = s {
                        best = Some(best.map_or(s, |b: f64| b.max(s)));
                    }
                }
                best
            }
            Query::Regexp { field, pattern, case_insensitive, .. } => {
                // Not analyzed: the pattern meets the terms as they are.
                let fields: Vec<&str> = match field.as_deref() {
                    None => TEXT_FIELDS.to_vec(),
                    Some(f) => vec![f],
                };
                let ci = *case_insensitive;
                fields
                    .iter()
                    .any(|f| match *f {
                        "tag" => regexp_matches(pattern, &d.tag, ci),
                        f => d.field(f).is_some_and(|ts| ts.iter().any(|t| regexp_matches(pattern, t, ci))),
                    })
                    .then_some(1.0)
            }
            Query::Range { field, lower, upper } => {
                assert_eq!(field, "n");
                let x = d.n as f64;
                let p = |b: &Bound<String>| b.as_ref().map(|s| s.parse::<f64>().unwrap());
                let ok = match p(lower) {
                    Bound::Included(l) => x >= l,
                    Bound::Excluded(l) => x > l,
                    Bound::Unbounded => true,
                } && match p(upper) {
                    Bound::Included(u) => x <= u,
                    Bound::Excluded(u) => x < u,
                    Bound::Unbounded => true,
                };
                ok.then_some(1.0)
            }
            Query::Bool { must, should, must_not, filter } => {
                let mut score = 0.0;
                for m in must {
                    score += self.eval(m, d)?;
                }
                for f in filter {
                    self.eval(f, d)?;
                }
                if must_not.iter().any(|m| self.eval(m, d).is_some()) {
                    return None;
                }
                let mut any_should = false;
                for s in should {
                    if let Some(x) = self.eval(s, d) {
                        score += x;
                        any_should = true;
                    }
                }
                if must.is_empty() && filter.is_empty() && !should.is_empty() && !any_should {
                    return None;
                }
                Some(score)
            }
            Query::Boost { query, boost } => self.eval(query, d).map(|s| s * *boost as f64),
            Query::ConstantScore { query, score } => self.eval(query, d).map(|_| *score as f64),
            Query::DisMax { of, tie_breaker } => {
                // The best clause plus the tie breaker times the rest.
                let scores: Vec<f64> = of.iter().filter_map(|c| self.eval(c, d)).collect();
                let best = scores.iter().copied().reduce(f64::max)?;
                Some(best + *tie_breaker as f64 * (scores.iter().sum::<f64>() - best))
            }
            Query::Ids { values } => values.contains(&d.id).then_some(1.0),
            // Its expansions depend on the terms segments still hold for deleted documents: checked
            // against Lucene (`tests/lucene_parity.rs`) instead.
            Query::Fuzzy { .. } => unreachable!("the generator makes no fuzzy queries"),
            Query::Analyzed { .. } => unreachable!("the generator makes no analyzer overrides"),
            Query::AtLeast { min, of } => {
                let scores: Vec<f64> = of.iter().filter_map(|c| self.eval(c, d)).collect();
                (scores.len() >= *min).then(|| scores.iter().sum())
            }
        }
    }

    fn text_score(&self, f: &str, toks: &[String], slop: i64, d: &RefDoc) -> Option<f64> {
        let ts = d.field(f).unwrap();
        match toks.len() {
            0 => None,
            1 => {
                let tf = ts.iter().filter(|t| **t == toks[0]).count();
                (tf > 0).then(|| self.bm25(f, self.idf(f, &toks[0]), tf as f64, ts.len()))
            }
            _ if slop > 0 => {
                let sets: Vec<Vec<String>> = toks.iter().map(|t| vec![t.clone()]).collect();
                let freq = sloppy_freq(ts, &sets, slop);
                let idf: f64 = toks.iter().map(|t| self.idf(f, t)).sum();
                (freq > 0.0).then(|| self.bm25(f, idf, freq, ts.len()))
            }
            _ => {
                let freq = (0..ts.len())
                    .filter(|&i| toks.iter().enumerate().all(|(j, t)| ts.get(i + j) == Some(t)))
                    .count();
                let idf: f64 = toks.iter().map(|t| self.idf(f, t)).sum();
                (freq > 0).then(|| self.bm25(f, idf, freq as f64, ts.len()))
            }
        }
    }

    /// All live matches with their scores and sequence numbers.
    pub fn matches(&self, q: &Query) -> Vec<(f64, usize, String)> {
        self.docs
            .iter()
            .filter(|d| d.live)
            .filter_map(|d| self.eval(q, d).map(|s| (s, d.seq, d.id.clone())))
            .collect()
    }
}

/// Lucene's sloppy phrase frequency of a phrase (consecutive offsets) in the tokens `ts`, each position of
/// the phrase any of the terms of its set in `sets` (one term; a phrase prefix's expansions), written as a
/// set of cursors ordered by phrase position (position less offset): the one furthest behind moves on; when
/// it passes the next, the spread it left is a match if at most `slop`, counting `1 / (1 + spread)`. Two
/// cursors never share a text position (the one behind in phrase position moves on).
fn sloppy_freq(ts: &[String], sets: &[Vec<String>], slop: i64) -> f64 {
    let lists: Vec<Vec<i64>> = sets
        .iter()
        .map(|s| (0..ts.len()).filter(|&i| s.contains(&ts[i])).map(|i| i as i64).collect())
        .collect();
    if lists.iter().any(Vec::is_empty) {
        return 0.0;
    }
    let n = sets.len();
    let mut idx = vec![0usize; n];
    // (phrase position, term) of every cursor, ordered.
    let mut set: std::collections::BTreeSet<(i64, usize)> =
        (0..n).map(|j| (lists[j][0] - j as i64, j)).collect();
    let mut end = set.iter().map(|c| c.0).max().unwrap();
    // Moves cursor `j` on; false at its end.
    let step = |j: usize,
                idx: &mut Vec<usize>,
                set: &mut std::collections::BTreeSet<(i64, usize)>,
                end: &mut i64| {
        let old = lists[j][idx[j]] - j as i64;
        idx[j] += 1;
        let Some(&p) = lists[j].get(idx[j]) else { return false };
        set.remove(&(old, j));
        set.insert((p - j as i64, j));
        *end = (*end).max(p - j as i64);
        true
    };
    let here = |j: usize, idx: &Vec<usize>| lists[j][idx[j]];
    // Moves colliding cursors of `j`'s term (same position) until none collide; false when one runs out.
    let settle = |j: usize,
                  idx: &mut Vec<usize>,
                  set: &mut std::collections::BTreeSet<(i64, usize)>,
                  end: &mut i64| {
        let mut p = j;
        // Two cursors on one text position stand on the same term (one term per position).
        while let Some(k) = (0..n).find(|&k| k != p && here(k, idx) == here(p, idx)) {
            // Same position: the larger offset is the one behind in phrase position.
            p = p.max(k);
            if !step(p, idx, set, end) {
                return false;
            }
        }
        true
    };
    for j in 0..n {
        if !settle(j, &mut idx, &mut set, &mut end) {
            return 0.0;
        }
    }
    let mut freq = 0.0;
    loop {
        let &(first, p) = set.iter().next().unwrap();
        let next = set.iter().nth(1).map_or(i64::MAX, |c| c.0);
        let mut spread = end - first;
        loop {
            if !step(p, &mut idx, &mut set, &mut end) || !settle(p, &mut idx, &mut set, &mut end) {
                if spread <= slop {
                    freq += 1.0 / (1.0 + spread as f64);
                }
                return freq;
            }
            let now = lists[p][idx[p]] - p as i64;
            if now > next {
                if spread <= slop {
                    freq += 1.0 / (1.0 + spread as f64);
                }
                break;
            }
            spread = spread.min(end - now);
        }
    }
}

/// Checks an engine answer against the reference: exact count; the hits are a valid top-k (scores match the
/// reference within tolerance, order is non-increasing, and nothing outside the hits beats the last hit).
/// With `total: None` (top-k without exact counts) only the hits are checked.
pub fn verify_top_k(
    reference: &Reference,
    q: &Query,
    total: impl Into<Option<u64>>,
    hits: &[(String, f32)],
    k: usize,
) -> Result<(), String> {
    let m = reference.matches(q);
    if let Some(total) = total.into() {
        if total as usize != m.len() {
            return Err(format!("count mismatch for {q:?}: engine {total}, reference {}", m.len()));
        }
    }
    if hits.len() != k.min(m.len()) {
        return Err(format!("hit count for {q:?}: engine {}, want {}", hits.len(), k.min(m.len())));
    }
    let scores: HashMap<&str, f64> = m.iter().map(|(s, _, id)| (id.as_str(), *s)).collect();
    let tol = |a: f64| 1e-4 * a.abs().max(1.0);
    for (id, s) in hits {
        let Some(&want) = scores.get(id.as_str()) else {
            return Err(format!("hit {id} does not match {q:?}"));
        };
        if (want - *s as f64).abs() > tol(want) {
            return Err(format!("score of {id} for {q:?}: engine {s}, reference {want}"));
        }
    }
    for w in hits.windows(2) {
        if (w[0].1 as f64) < w[1].1 as f64 - tol(w[1].1 as f64) {
            return Err(format!("hits not sorted for {q:?}"));
        }
    }
    if let Some(last) = hits.last() {
        let returned: std::collections::HashSet<&str> = hits.iter().map(|h| h.0.as_str()).collect();
        for (s, _, id) in &m {
            if !returned.contains(id.as_str()) && *s > last.1 as f64 + tol(*s) {
                return Err(format!("{id} (score {s}) should be in top {k} of {q:?}, last hit {}", last.1));
            }
        }
    }
    Ok(())
}

pub fn check_top_k(
    reference: &Reference,
    q: &Query,
    total: impl Into<Option<u64>>,
    hits: &[(String, f32)],
    k: usize,
    ctx: &str,
) {
    if let Err(e) = verify_top_k(reference, q, total, hits, k) {
        panic!("{ctx}: {e}");
    }
}

/// Newest-first: the count is exact and the hits are the k matches with the highest sequence numbers.
pub fn verify_newest(
    reference: &Reference,
    q: &Query,
    total: u64,
    hits: &[String],
    k: usize,
) -> Result<(), String> {
    let mut m = reference.matches(q);
    if total as usize != m.len() {
        return Err(format!("count mismatch for {q:?}: engine {total}, reference {}", m.len()));
    }
    m.sort_by_key(|x| std::cmp::Reverse(x.1));
    let want: Vec<String> = m.into_iter().take(k).map(|x| x.2).collect();
    if hits != &want[..] {
        return Err(format!("newest-first for {q:?}: engine {hits:?}, reference {want:?}"));
    }
    Ok(())
}

pub fn check_newest(reference: &Reference, q: &Query, total: u64, hits: &[String], k: usize, ctx: &str) {
    if let Err(e) = verify_newest(reference, q, total, hits, k) {
        panic!("{ctx}: {e}");
    }
}

/// Whether `text` matches wildcard pattern `p` (`*` any run, `?` one character; the generator makes no
/// escapes), by the definition: every way of splitting the text among the pattern's pieces.
/// Whether `term` matches the whole of a pattern of [`gen::regexp_of`]'s constructs (`c`, `.`, `.*`, `c?`,
/// `[cq]`, `(c|q)`), case-folded with `ci`: a model independent of the engine's regex translation.
pub fn regexp_matches(pattern: &str, term: &str, ci: bool) -> bool {
    #[derive(Clone)]
    enum Item {
        /// One character of the set.
        One(Vec<char>),
        /// Any one character.
        Any,
        AnyRun,
        Optional(char),
    }
    let fold = |c: char| if ci { c.to_lowercase().next().unwrap_or(c) } else { c };
    let p: Vec<char> = pattern.chars().collect();
    let mut items = vec![];
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '.' if p.get(i + 1) == Some(&'*') => {
                items.push(Item::AnyRun);
                i += 2;
            }
            '.' => {
                items.push(Item::Any);
                i += 1;
            }
            '[' => {
                items.push(Item::One(vec![fold(p[i + 1]), fold(p[i + 2])]));
                i += 4;
            }
            '(' => {
                items.push(Item::One(vec![fold(p[i + 1]), fold(p[i + 3])]));
                i += 5;
            }
            c if p.get(i + 1) == Some(&'?') => {
                items.push(Item::Optional(fold(c)));
                i += 2;
            }
            c => {
                items.push(Item::One(vec![fold(c)]));
                i += 1;
            }
        }
    }
    fn go(items: &[Item], t: &[char]) -> bool {
        match items.split_first() {
            None => t.is_empty(),
            Some((Item::AnyRun, rest)) => (0..=t.len()).any(|k| go(rest, &t[k..])),
            Some((Item::Any, rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some((Item::Optional(c), rest)) => go(rest, t) || (t.first() == Some(c) && go(rest, &t[1..])),
            Some((Item::One(set), rest)) => t.first().is_some_and(|c| set.contains(c)) && go(rest, &t[1..]),
        }
    }
    let t: Vec<char> = term.chars().map(fold).collect();
    go(&items, &t)
}

pub fn glob(p: &[char], t: &[char]) -> bool {
    match p.split_first() {
        None => t.is_empty(),
        Some(('*', rest)) => (0..=t.len()).any(|k| glob(rest, &t[k..])),
        Some(('?', rest)) => !t.is_empty() && glob(rest, &t[1..]),
        Some((c, rest)) => t.first() == Some(c) && glob(rest, &t[1..]),
    }
}
