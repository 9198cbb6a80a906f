//! Planning: from the AST to a [`Node`] tree with analyzed term keys, resolved fields and expanded
//! prefixes.

use super::ast::{FuzzyOptions, Query, MAX_SLOP};
use super::regexp::Regexp;
use super::wildcard::Pattern;
use crate::analysis::Analyzer;
use crate::error::{Error, Result};
use crate::gdt::{SegData, Snapshot};
use crate::schema::{parse_date_millis, term_key, FieldType, Schema};
use std::collections::BTreeSet;
use std::ops::Bound;

/// Most terms one prefix may expand to (Elasticsearch's `indices.query.bool.max_clause_count` default).
pub const MAX_PREFIX_EXPANSION: usize = 4096;

/// A planned query node.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Matches nothing.
    Nothing,
    /// Analysis produced no token (a stop word): the clause is dropped from its boolean parent.
    Dropped,
    All,
    Term {
        field: u16,
        key: Vec<u8>,
    },
    /// Terms at relative positions `offsets` (from the analyzer, so removed stop words leave gaps,
    /// ascending), or within `slop` position moves of them ([`Query::Phrase`]). `keys` has a term per
    /// position — except with `last` not empty ([`Query::PhrasePrefix`]): then the last position is any of
    /// `last` (sorted, distinct) and `keys` has the others.
    Phrase {
        field: u16,
        keys: Vec<Vec<u8>>,
        offsets: Vec<u32>,
        slop: u32,
        last: Vec<Vec<u8>>,
    },
    /// Union of terms with constant score 1 (prefix queries).
    TermSet {
        keys: Vec<Vec<u8>>,
    },
    /// Documents with one of these `_id`s (sorted, distinct, not empty; constant score 1).
    Ids(Vec<String>),
    /// Terms of one field scored together with the idf of the most frequent of them, each times its boost
    /// ([`Query::Fuzzy`]'s expansion; Lucene's blended term frequencies). Not empty.
    Blended {
        field: u16,
        keys: Vec<Vec<u8>>,
        boosts: Vec<f32>,
    },
    /// Documents with any value in the field (constant score 1).
    Exists {
        field: u16,
    },
    /// Numeric range (constant score 1).
    Range {
        field: u16,
        lower: Bound<f64>,
        upper: Bound<f64>,
    },
    Bool {
        must: Vec<Node>,
        should: Vec<Node>,
        must_not: Vec<Node>,
        filter: Vec<Node>,
    },
    /// Best of its clauses plus the tie breaker (from 0 to 1) times the others' scores (one unqualified term
    /// over several default fields: tie breaker 0).
    DisMax(Vec<Node>, f32),
    /// The node's scores multiplied by the factor ([`Query::Boost`]; never 1, never around `Nothing` or
    /// `Dropped`, never directly around another `Boost`: planning folds those).
    Boost(Box<Node>, f32),
    /// At least `min` of the clauses ([`Query::AtLeast`]); planning leaves `min` between 2 and the clause
    /// count less one (1 is a plain OR, all of them an AND).
    AtLeast {
        min: usize,
        of: Vec<Node>,
    },
    /// Matches of the node, each scoring the constant ([`Query::ConstantScore`]).
    Constant(Box<Node>, f32),
}

/// Plans `q` against `schema`, expanding prefixes over the segments of `snap`.
pub fn plan(q: &Query, schema: &Schema, snap: &Snapshot) -> Result<Node> {
    plan_shards(q, schema, &[snap])
}

/// Plans `q` for a sharded index: prefixes expand over the segments of every shard's snapshot, so every
/// shard evaluates the same plan.
pub fn plan_shards(q: &Query, schema: &Schema, snaps: &[&Snapshot]) -> Result<Node> {
    Ok(match plan_inner(q, schema, snaps, None)? {
        Node::Dropped => Node::Nothing,
        n => n,
    })
}

fn fields_of(field: &Option<String>, schema: &Schema) -> Vec<Option<u16>> {
    match field {
        Some(name) => vec![schema.field_id(name)],
        None => schema.default_search_fields().into_iter().map(Some).collect(),
    }
}

fn per_field(
    field: &Option<String>,
    schema: &Schema,
    mut f: impl FnMut(u16) -> Result<Node>,
) -> Result<Node> {
    let mut nodes = vec![];
    for fid in fields_of(field, schema) {
        nodes.push(match fid {
            Some(fid) => f(fid)?,
            None => Node::Nothing,
        });
    }
    Ok(dis_max(nodes, 0.0))
}

/// The best of `nodes`: dropped if every one of them is (stop words), nothing if none can match, the one
/// left, or their [`Node::DisMax`].
fn dis_max(mut nodes: Vec<Node>, tie_breaker: f32) -> Node {
    if nodes.iter().all(|n| *n == Node::Dropped) && !nodes.is_empty() {
        return Node::Dropped;
    }
    nodes.retain(|n| !matches!(n, Node::Nothing | Node::Dropped));
    match nodes.len() {
        0 => Node::Nothing,
        1 => nodes.pop().expect("one node"),
        _ => Node::DisMax(nodes, tie_breaker),
    }
}

/// [`super::ast::check_factor`] as a planning error.
fn check_factor(what: &str, x: f32) -> Result<()> {
    super::ast::check_factor(what, x).map_err(Error::InvalidArgument)
}

fn parse_number(schema: &Schema, field: u16, s: &str) -> Result<f64> {
    let ty = schema.field(field).ty;
    if ty == FieldType::Date {
        if let Some(ms) = parse_date_millis(s) {
            return Ok(ms as f64);
        }
    }
    s.trim().parse::<f64>().ok().filter(|x| x.is_finite()).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "failed to parse [{s}] as a {} for field [{}]",
            ty.es_name(),
            schema.field(field).name
        ))
    })
}

/// [`plan_shards`] of `q`, its text analyzed by `over` where a [`Query::Analyzed`] around it says so, else by
/// each field's analyzer.
fn plan_inner(q: &Query, schema: &Schema, snaps: &[&Snapshot], over: Option<&Analyzer>) -> Result<Node> {
    let analyzer = |fid: u16| -> &Analyzer { over.unwrap_or_else(|| schema.search_analyzer(fid)) };
    Ok(match q {
        Query::MatchAll => Node::All,
        Query::Ids { values } => {
            let mut v = values.clone();
            v.sort_unstable();
            v.dedup();
            if v.is_empty() {
                Node::Nothing
            } else {
                Node::Ids(v)
            }
        }
        Query::Term { field, text } | Query::Phrase { field, text, .. } => {
            let (phrase, slop) = match q {
                Query::Phrase { slop, .. } => (true, *slop),
                _ => (false, 0),
            };
            if slop > MAX_SLOP {
                return Err(Error::InvalidArgument(format!(
                    "phrase slop must be at most {MAX_SLOP}, got {slop}"
                )));
            }
            per_field(field, schema, |fid| {
                let def = schema.field(fid);
                Ok(match def.ty {
                    FieldType::Keyword => match over {
                        // The analyzer asked for replaces the keyword field's (the whole value) too: each
                        // of its tokens is a whole value the document must have.
                        Some(a) => {
                            let mut must: Vec<Node> = a
                                .analyze_to_vec(text)
                                .into_iter()
                                .map(|(t, _)| {
                                    let mut key = vec![];
                                    term_key(fid, &t, &mut key);
                                    Node::Term { field: fid, key }
                                })
                                .collect();
                            match must.len() {
                                0 => Node::Dropped,
                                1 => must.pop().expect("one term"),
                                // Elasticsearch's answer too: a keyword field has no positions.
                                _ if phrase => {
                                    return Err(Error::InvalidArgument(format!(
                                        "field [{}] of type [keyword] does not support phrase queries \
                                         (its analyzer made several tokens of [{text}])",
                                        def.name
                                    )))
                                }
                                _ => Node::Bool { must, should: vec![], must_not: vec![], filter: vec![] },
                            }
                        }
                        None => {
                            let mut key = vec![];
                            term_key(fid, text, &mut key);
                            Node::Term { field: fid, key }
                        }
                    },
                    FieldType::Text => {
                        let toks = analyzer(fid).analyze_to_vec(text);
                        match toks.len() {
                            0 => Node::Dropped,
                            1 => {
                                let mut key = vec![];
                                term_key(fid, &toks[0].0, &mut key);
                                Node::Term { field: fid, key }
                            }
                            _ => {
                                let first = toks[0].1;
                                let keys = toks
                                    .iter()
                                    .map(|(t, _)| {
                                        let mut k = vec![];
                                        term_key(fid, t, &mut k);
                                        k
                                    })
                                    .collect();
                                let offsets = toks.iter().map(|(_, p)| p - first).collect();
                                Node::Phrase { field: fid, keys, offsets, slop, last: vec![] }
                            }
                        }
                    }
                    _ if phrase && field.is_none() => Node::Nothing,
                    _ => {
                        let x = parse_number(schema, fid, text)?;
                        Node::Range { field: fid, lower: Bound::Included(x), upper: Bound::Included(x) }
                    }
                })
            })?
        }
        Query::Fuzzy { field, text, options, analyzed } => {
            if options.max_edits.is_some_and(|e| e > 2) {
                return Err(Error::InvalidArgument(format!(
                    "fuzziness must be 0, 1, 2 or AUTO, got {}",
                    options.max_edits.unwrap_or_default()
                )));
            }
            per_field(field, schema, |fid| {
                let def = schema.field(fid);
                let terms: Vec<String> = match def.ty {
                    FieldType::Keyword if *analyzed && over.is_some() => {
                        analyzer(fid).analyze_to_vec(text).into_iter().map(|(t, _)| t).collect()
                    }
                    FieldType::Keyword => vec![text.clone()],
                    FieldType::Text if *analyzed => {
                        analyzer(fid).analyze_to_vec(text).into_iter().map(|(t, _)| t).collect()
                    }
                    FieldType::Text => vec![analyzer(fid).normalize_prefix(text)],
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "fuzzy queries are not supported on {} field [{}]",
                            def.ty.es_name(),
                            def.name
                        )))
                    }
                };
                let mut nodes = vec![];
                for t in &terms {
                    nodes.push(fuzzy_node(snaps, fid, t, options)?);
                }
                Ok(match nodes.len() {
                    0 => Node::Dropped,
                    1 => nodes.pop().expect("one node"),
                    _ => Node::Bool { must: vec![], should: nodes, must_not: vec![], filter: vec![] },
                })
            })?
        }
        Query::PhrasePrefix { field, text, max_expansions, slop } => per_field(field, schema, |fid| {
            let def = schema.field(fid);
            if def.ty != FieldType::Text && field.is_none() {
                // A default field that is not text (as a phrase skips it).
                return Ok(Node::Nothing);
            }
            if def.ty != FieldType::Text {
                return Err(Error::InvalidArgument(format!(
                    "match_phrase_prefix queries are supported on text fields; [{}] is {}",
                    def.name,
                    def.ty.es_name()
                )));
            }
            if !(1..=MAX_PREFIX_EXPANSION).contains(max_expansions) {
                return Err(Error::InvalidArgument(format!(
                    "max_expansions must be from 1 to {MAX_PREFIX_EXPANSION}, got {max_expansions}"
                )));
            }
            let toks = analyzer(fid).analyze_to_vec(text);
            let Some(((prefix, _), _)) = toks.split_last() else { return Ok(Node::Dropped) };
            let key = |t: &str| {
                let mut k = vec![];
                term_key(fid, t, &mut k);
                k
            };
            let last = first_keys_with_prefix(snaps, &key(prefix), *max_expansions)?;
            if last.is_empty() {
                return Ok(Node::Nothing);
            }
            if toks.len() == 1 {
                // One position: its terms ORed, each scored as a term.
                let should = last.into_iter().map(|key| Node::Term { field: fid, key }).collect();
                return Ok(Node::Bool { must: vec![], should, must_not: vec![], filter: vec![] });
            }
            let first = toks[0].1;
            let keys = toks[..toks.len() - 1].iter().map(|(t, _)| key(t)).collect();
            let offsets = toks.iter().map(|(_, p)| p - first).collect();
            Ok(Node::Phrase { field: fid, keys, offsets, slop: *slop, last })
        })?,
        Query::Prefix { field, prefix } => per_field(field, schema, |fid| {
            let def = schema.field(fid);
            if prefix.is_empty() {
                return Ok(Node::Exists { field: fid });
            }
            if !def.ty.is_indexed_terms() {
                return Err(Error::InvalidArgument(format!(
                    "prefix queries are not supported on {} field [{}]",
                    def.ty.es_name(),
                    def.name
                )));
            }
            let norm = if def.ty == FieldType::Text {
                analyzer(fid).normalize_prefix(prefix)
            } else {
                prefix.clone()
            };
            let mut p = vec![];
            term_key(fid, &norm, &mut p);
            let keys = expand_prefix(snaps, &p)?;
            Ok(if keys.is_empty() { Node::Nothing } else { Node::TermSet { keys } })
        })?,
        Query::Wildcard { field, pattern, case_insensitive } => per_field(field, schema, |fid| {
            let def = schema.field(fid);
            if !def.ty.is_indexed_terms() {
                return Err(Error::InvalidArgument(format!(
                    "wildcard queries are not supported on {} field [{}]",
                    def.ty.es_name(),
                    def.name
                )));
            }
            let text = def.ty == FieldType::Text;
            // A keyword field matched whatever the case: both sides lowercased, and no literal prefix
            // narrows the scan (the terms keep their case).
            let fold = !text && *case_insensitive;
            let lower = |s: &str| analyzer(fid).normalize_prefix(s);
            let pat = Pattern::parse(&if text || fold { lower(pattern) } else { pattern.clone() })
                .map_err(Error::InvalidArgument)?;
            if pat.matches_everything() {
                return Ok(Node::Exists { field: fid });
            }
            let prefix = if fold { String::new() } else { pat.literal_prefix() };
            let is_match = |t: &str| if fold { pat.matches(&lower(t)) } else { pat.matches(t) };
            expand_matching(snaps, fid, &prefix, &is_match, &|| format!("wildcard query [{pattern}]"))
        })?,
        Query::Regexp { field, pattern, flags, case_insensitive } => per_field(field, schema, |fid| {
            let def = schema.field(fid);
            if !def.ty.is_indexed_terms() {
                return Err(Error::InvalidArgument(format!(
                    "regexp queries are not supported on {} field [{}]",
                    def.ty.es_name(),
                    def.name
                )));
            }
            let re = Regexp::new(pattern, *flags, *case_insensitive).map_err(Error::InvalidArgument)?;
            if re.matches_every_term() {
                return Ok(Node::Exists { field: fid });
            }
            expand_matching(snaps, fid, re.literal_prefix(), &|t| re.matches(t), &|| {
                format!("regexp query [{pattern}]")
            })
        })?,
        Query::Range { field, lower, upper } => {
            let Some(fid) = schema.field_id(field) else { return Ok(Node::Nothing) };
            let def = schema.field(fid);
            if !def.ty.is_numeric() {
                return Err(Error::InvalidArgument(format!(
                    "range queries are supported on numeric and date fields; [{}] is {}",
                    def.name,
                    def.ty.es_name()
                )));
            }
            let conv = |b: &Bound<String>| -> Result<Bound<f64>> {
                Ok(match b {
                    Bound::Included(s) => Bound::Included(parse_number(schema, fid, s)?),
                    Bound::Excluded(s) => Bound::Excluded(parse_number(schema, fid, s)?),
                    Bound::Unbounded => Bound::Unbounded,
                })
            };
            Node::Range { field: fid, lower: conv(lower)?, upper: conv(upper)? }
        }
        Query::Bool { must, should, must_not, filter } => {
            let list = |qs: &[Query]| -> Result<Vec<Node>> {
                let mut out = vec![];
                for q in qs {
                    match plan_inner(q, schema, snaps, over)? {
                        Node::Dropped => {}
                        n => out.push(n),
                    }
                }
                Ok(out)
            };
            let (must, should, must_not, filter) =
                (list(must)?, list(should)?, list(must_not)?, list(filter)?);
            if must.is_empty() && should.is_empty() && must_not.is_empty() && filter.is_empty() {
                return Ok(Node::Dropped);
            }
            if must.contains(&Node::Nothing) || filter.contains(&Node::Nothing) {
                return Ok(Node::Nothing);
            }
            let had_should = !should.is_empty();
            let should: Vec<Node> = should.into_iter().filter(|n| *n != Node::Nothing).collect();
            let must_not: Vec<Node> = must_not.into_iter().filter(|n| *n != Node::Nothing).collect();
            if must.is_empty() && filter.is_empty() && should.is_empty() && had_should {
                // Only should clauses can make a doc match, and none can.
                return Ok(Node::Nothing);
            }
            // (A bool left with no clause at all had only must_not clauses that match nothing: it matches
            // every document, with score 0.)
            Node::Bool { must, should, must_not, filter }
        }
        Query::AtLeast { min, of } => plan_at_least(*min, of, schema, snaps, over)?,
        Query::ConstantScore { query, score } => {
            check_factor("a constant score", *score)?;
            match plan_inner(query, schema, snaps, over)? {
                n @ (Node::Nothing | Node::Dropped) => n,
                n => Node::Constant(Box::new(n), *score),
            }
        }
        Query::DisMax { of, tie_breaker } => {
            if !(0.0..=1.0).contains(tie_breaker) {
                return Err(Error::InvalidArgument(format!(
                    "[dis_max] tie_breaker must be from 0 to 1, got {tie_breaker}"
                )));
            }
            dis_max(
                of.iter().map(|q| plan_inner(q, schema, snaps, over)).collect::<Result<_>>()?,
                *tie_breaker,
            )
        }
        Query::Analyzed { analyzer, query } => {
            plan_inner(query, schema, snaps, Some(&Analyzer::new(*analyzer)))?
        }
        Query::Boost { query, boost } => {
            check_factor("boost", *boost)?;
            match plan_inner(query, schema, snaps, over)? {
                n @ (Node::Nothing | Node::Dropped) => n,
                Node::Boost(n, inner) => boosted(*n, inner * boost),
                n => boosted(n, *boost),
            }
        }
    })
}

/// [`Query::AtLeast`] planned: clauses that can match nothing (a stop word, an unknown field) cannot help
/// reach `min` and are left out; what remains is nothing, an OR, an AND or a real `AtLeast`.
fn plan_at_least(
    min: usize,
    of: &[Query],
    schema: &Schema,
    snaps: &[&Snapshot],
    over: Option<&Analyzer>,
) -> Result<Node> {
    if min == 0 {
        return Err(Error::InvalidArgument("at-least queries need a minimum of 1 or more".into()));
    }
    let mut clauses = vec![];
    for q in of {
        match plan_inner(q, schema, snaps, over)? {
            Node::Nothing | Node::Dropped => {}
            n => clauses.push(n),
        }
    }
    Ok(match clauses.len() {
        n if n < min => Node::Nothing,
        _ if min == 1 => Node::Bool { must: vec![], should: clauses, must_not: vec![], filter: vec![] },
        n if n == min => Node::Bool { must: clauses, should: vec![], must_not: vec![], filter: vec![] },
        _ => Node::AtLeast { min, of: clauses },
    })
}

/// `n` scaled by `boost`: no node for a factor of 1.
fn boosted(n: Node, boost: f32) -> Node {
    if boost == 1.0 {
        n
    } else {
        Node::Boost(Box::new(n), boost)
    }
}

/// The terms of field `field` within `options`' edits of `term` ([`Query::Fuzzy`]): the closest
/// `max_expansions` (ties in key order), each with its boost `1 - edits / min(its length, the term's)`.
fn fuzzy_node(snaps: &[&Snapshot], field: u16, term: &str, options: &FuzzyOptions) -> Result<Node> {
    let want: Vec<char> = term.chars().collect();
    let max = options.edits_for(want.len()) as usize;
    let found = within_edits(snaps, field, term, options.prefix_length, max, options.transpositions)?;
    let mut scored: Vec<(f32, Vec<u8>)> = found
        .into_iter()
        .map(|(key, d)| {
            let chars = std::str::from_utf8(&key[2..]).map_or(0, |t| t.chars().count());
            let shortest = chars.min(want.len()).max(1);
            ((1.0 - d as f32 / shortest as f32).max(0.0), key)
        })
        .collect();
    // Closest first (highest boost), ties in key order, as Lucene's top-terms rewrite keeps them.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.truncate(options.max_expansions.max(1));
    if scored.is_empty() {
        return Ok(Node::Nothing);
    }
    let (boosts, keys) = scored.into_iter().unzip();
    Ok(Node::Blended { field, keys, boosts })
}

/// Every term key of field `field` (in any segment of the snapshots, each once) that shares the first
/// `prefix_length` characters of `term` and lies within `max` edits of it, with its distance (`term` itself,
/// if there, at 0).
pub(crate) fn within_edits(
    snaps: &[&Snapshot],
    field: u16,
    term: &str,
    prefix_length: usize,
    max: usize,
    transpositions: bool,
) -> Result<std::collections::BTreeMap<Vec<u8>, usize>> {
    let want: Vec<char> = term.chars().collect();
    let prefix_len = prefix_length.min(want.len());
    let fixed: String = want[..prefix_len].iter().collect();
    let mut prefix = vec![];
    term_key(field, &fixed, &mut prefix);
    // Every term of the field with the fixed prefix, each once, with its distance when within reach.
    let mut found: std::collections::BTreeMap<Vec<u8>, usize> = Default::default();
    let mut cand: Vec<char> = vec![];
    for_each_key_with_prefix(snaps, &prefix, &mut |key| {
        if found.contains_key(key) {
            return;
        }
        let Ok(text) = std::str::from_utf8(&key[2..]) else { return };
        cand.clear();
        cand.extend(text.chars());
        if let Some(d) =
            edit_distance(&want[prefix_len..], &cand[prefix_len.min(cand.len())..], max, transpositions)
        {
            found.insert(key.to_vec(), d);
        }
    })?;
    Ok(found)
}

/// The edit distance of `a` and `b` if it is at most `max` (`None` beyond): insertions, deletions and
/// substitutions of one character, and with `transpositions` swaps of two adjacent ones (the optimal string
/// alignment distance, which Lucene's Levenshtein automata accept: a swapped pair is not edited again).
pub(crate) fn edit_distance(a: &[char], b: &[char], max: usize, transpositions: bool) -> Option<usize> {
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let w = b.len() + 1;
    // Three rows: two back (for swaps), the previous, the current.
    let (mut prev2, mut prev, mut cur) = (vec![0usize; w], (0..w).collect::<Vec<_>>(), vec![0usize; w]);
    for i in 1..=a.len() {
        cur[0] = i;
        let mut row_min = cur[0];
        for j in 1..w {
            let cost = (a[i - 1] != b[j - 1]) as usize;
            let mut v = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if transpositions && i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(prev2[j - 2] + 1);
            }
            cur[j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    Some(prev[w - 1]).filter(|&d| d <= max)
}

/// Calls `f` with every term key starting with `prefix` in any segment of the snapshots (a key held by
/// several segments once per segment).
fn for_each_key_with_prefix(snaps: &[&Snapshot], prefix: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<()> {
    for_first_keys_with_prefix(snaps, prefix, usize::MAX, f)
}

/// [`for_each_key_with_prefix`], but at most the first `per_image` keys of each image's range (an image's
/// dictionary is in key order; the fresh segment's is not, so all of its keys are offered).
fn for_first_keys_with_prefix(
    snaps: &[&Snapshot],
    prefix: &[u8],
    per_image: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<()> {
    for s in snaps.iter().flat_map(|snap| &snap.segments) {
        match &s.data {
            SegData::Fresh(fresh) => fresh.for_each_key(&mut |k, _| {
                if k.starts_with(prefix) {
                    f(k);
                }
            }),
            SegData::Image { .. } => {
                let v = s.image().expect("image").map_err(|e| Error::Format(e.0))?;
                for i in v.prefix_range(prefix).map_err(|e| Error::Format(e.0))?.take(per_image) {
                    f(v.key_at(i).map_err(|e| Error::Format(e.0))?);
                }
            }
        }
    }
    Ok(())
}

/// The terms of field `fid` that start with `prefix` and `is_match` accepts (their text, without the key's
/// field bytes), in any segment of the snapshots: the expansion of a wildcard or regexp (`what` names it in
/// the error past [`MAX_PREFIX_EXPANSION`] terms).
fn expand_matching(
    snaps: &[&Snapshot],
    fid: u16,
    prefix: &str,
    is_match: &dyn Fn(&str) -> bool,
    what: &dyn Fn() -> String,
) -> Result<Node> {
    let mut p = vec![];
    term_key(fid, prefix, &mut p);
    let (mut keys, mut over) = (BTreeSet::new(), false);
    for_each_key_with_prefix(snaps, &p, &mut |key| {
        if over || keys.contains(key) {
            return;
        }
        let Ok(t) = std::str::from_utf8(&key[2..]) else { return };
        if is_match(t) {
            keys.insert(key.to_vec());
            over = keys.len() > MAX_PREFIX_EXPANSION;
        }
    })?;
    if over {
        return Err(Error::InvalidArgument(format!(
            "{} expands to more than {MAX_PREFIX_EXPANSION} terms; make it more specific",
            what()
        )));
    }
    Ok(if keys.is_empty() { Node::Nothing } else { Node::TermSet { keys: keys.into_iter().collect() } })
}

/// The first `limit` term keys in key order starting with `prefix`, over every segment of the snapshots
/// (Lucene's `max_expansions`: the rest are left out, not refused).
fn first_keys_with_prefix(snaps: &[&Snapshot], prefix: &[u8], limit: usize) -> Result<Vec<Vec<u8>>> {
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    // Only an image range's first `limit` keys can be among the first `limit` overall.
    for_first_keys_with_prefix(snaps, prefix, limit, &mut |key| {
        if (keys.len() < limit || keys.last().is_some_and(|l| key < l.as_slice()))
            && keys.insert(key.to_vec())
            && keys.len() > limit
        {
            keys.pop_last();
        }
    })?;
    Ok(keys.into_iter().collect())
}

/// Every term key starting with `prefix` in any segment of the snapshots.
fn expand_prefix(snaps: &[&Snapshot], prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
    keys_with_prefix(snaps, prefix, MAX_PREFIX_EXPANSION)?.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "prefix query expands to more than {MAX_PREFIX_EXPANSION} terms; use a longer prefix"
        ))
    })
}

/// Every term key starting with `prefix` in any segment of the snapshots, in key order; `None` once there
/// are more than `limit`.
pub(crate) fn keys_with_prefix(
    snaps: &[&Snapshot],
    prefix: &[u8],
    limit: usize,
) -> Result<Option<Vec<Vec<u8>>>> {
    let mut keys = BTreeSet::new();
    for s in snaps.iter().flat_map(|snap| &snap.segments) {
        match &s.data {
            SegData::Fresh(f) => {
                f.for_each_key(&mut |k, _| {
                    if k.starts_with(prefix) {
                        keys.insert(k.to_vec());
                    }
                });
            }
            SegData::Image { .. } => {
                let v = s.image().expect("image").map_err(|e| Error::Format(e.0))?;
                let r = v.prefix_range(prefix).map_err(|e| Error::Format(e.0))?;
                if r.len() > limit {
                    return Ok(None);
                }
                for i in r {
                    keys.insert(v.key_at(i).map_err(|e| Error::Format(e.0))?.to_vec());
                }
            }
        }
        if keys.len() > limit {
            return Ok(None);
        }
    }
    Ok(Some(keys.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::edit_distance;
    use crate::analysis::AnalyzerConfig;
    use crate::query::{Query, SearchOptions};
    use crate::{Index, ShardConfig};
    use proptest::prelude::*;
    use serde_json::json;

    /// A query's text goes through the analyzer a [`Query::Analyzed`] names, on text and keyword fields,
    /// instead of each field's own; the innermost wins, and clauses outside keep their fields' analyzers.
    #[test]
    fn an_analyzed_query_uses_its_analyzer() {
        let dir = tempfile::tempdir().unwrap();
        let mappings = json!({"properties": {
            "en": {"type": "text", "analyzer": "english"},
            "std": {"type": "text"},
            "tag": {"type": "keyword"},
            "sa": {"type": "text", "analyzer": "english", "search_analyzer": "standard"}}});
        let c = ShardConfig { dram_budget: 8 << 20, ..Default::default() };
        let index = Index::open("a", dir.path(), c, Some(&mappings), None).unwrap();
        index
            .add(json!({"_id": "1", "en": "Running dogs", "std": "the runs", "tag": "big", "sa": "running"}))
            .unwrap();
        index.add(json!({"_id": "2", "en": "a run", "std": "running", "tag": "red", "sa": "walks"})).unwrap();
        let ids = |q: &Query| {
            let opts = SearchOptions { limit: 10, ..Default::default() };
            let mut ids: Vec<String> =
                index.search_query(q, &opts).unwrap().hits.into_iter().map(|h| h.id).collect();
            ids.sort();
            ids
        };
        let term = |f: &str, t: &str| Query::Term { field: Some(f.into()), text: t.into() };
        let with =
            |config: AnalyzerConfig, q: Query| Query::Analyzed { analyzer: config, query: Box::new(q) };
        let (standard, english) = (AnalyzerConfig::simple(), AnalyzerConfig::english());
        // The field's english analyzer stems "running" to "run", held by both documents.
        assert_eq!(ids(&term("en", "running")), ["1", "2"]);
        // The standard analyzer keeps "running": no document of the english field holds it.
        assert!(ids(&with(standard, term("en", "running"))).is_empty());
        // The english analyzer on a standard field: "running" becomes "run", which no document holds there,
        // and "runs" becomes "run" too.
        assert!(ids(&with(english, term("std", "running"))).is_empty());
        assert_eq!(ids(&term("std", "running")), ["2"]);
        // A phrase's tokens are the analyzer's: stop words dropped, as english drops them.
        let phrase = Query::Phrase { field: Some("std".into()), text: "the runs".into(), slop: 0 };
        assert_eq!(ids(&phrase), ["1"]);
        assert!(ids(&with(english, phrase.clone())).is_empty());
        // Keyword fields: the analyzer asked for replaces the whole-value match, so "BIG" is lowercased.
        assert!(ids(&term("tag", "BIG")).is_empty());
        assert_eq!(ids(&with(standard, term("tag", "BIG"))), ["1"]);
        // Several tokens of one keyword clause must all be whole values of the document; a phrase of them
        // is refused (a keyword field has no positions), one of a single token is a term.
        assert!(ids(&with(standard, term("tag", "big red"))).is_empty());
        let tag_phrase = |t: &str| Query::Phrase { field: Some("tag".into()), text: t.into(), slop: 0 };
        let opts = SearchOptions { limit: 10, ..Default::default() };
        let e = index.search_query(&with(standard, tag_phrase("big red")), &opts).unwrap_err();
        assert!(e.to_string().contains("does not support phrase queries"), "{e}");
        assert_eq!(ids(&with(standard, tag_phrase("BIG"))), ["1"]);
        // A stop word alone leaves a keyword clause nothing to match.
        assert!(ids(&with(english, term("tag", "the"))).is_empty());
        // A phrase prefix's tokens are the analyzer's too.
        let pp = |t: &str| Query::PhrasePrefix {
            field: Some("en".into()),
            text: t.into(),
            max_expansions: 50,
            slop: 0,
        };
        assert_eq!(ids(&pp("running d")), ["1"]);
        assert!(ids(&with(standard, pp("running d"))).is_empty());
        // A field's search analyzer analyzes its queries: "running" was indexed as "run" (english), which
        // the standard search analyzer reaches from "run" but not from "running"; a query's own wins.
        assert_eq!(ids(&term("sa", "run")), ["1"]);
        assert!(ids(&term("sa", "running")).is_empty());
        assert_eq!(ids(&with(english, term("sa", "running"))), ["1"]);
        // The innermost analyzer wins; clauses outside keep their fields' analyzers.
        assert!(ids(&with(english, with(standard, term("en", "running")))).is_empty());
        let both = Query::Bool {
            must: vec![with(standard, term("std", "running"))],
            should: vec![],
            must_not: vec![],
            filter: vec![term("en", "running")],
        };
        assert_eq!(ids(&both), ["2"]);
        // An analyzed fuzzy term on a keyword field takes the analyzer's tokens too.
        let fuzzy = Query::Fuzzy {
            field: Some("tag".into()),
            text: "BIGG".into(),
            options: Default::default(),
            analyzed: true,
        };
        assert!(ids(&fuzzy).is_empty());
        assert_eq!(ids(&with(standard, fuzzy)), ["1"]);
    }

    /// The optimal string alignment distance by its definition: the full table, no cutoff.
    fn osa(a: &[char], b: &[char], transpositions: bool) -> usize {
        let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in d.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, x) in d[0].iter_mut().enumerate() {
            *x = j;
        }
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let cost = (a[i - 1] != b[j - 1]) as usize;
                d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
                if transpositions && i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
                }
            }
        }
        d[a.len()][b.len()]
    }

    #[test]
    fn swaps_are_one_edit_only_with_transpositions() {
        let c = |s: &str| s.chars().collect::<Vec<_>>();
        assert_eq!(edit_distance(&c("ehllo"), &c("hello"), 2, true), Some(1));
        assert_eq!(edit_distance(&c("ehllo"), &c("hello"), 2, false), Some(2));
        // Not Damerau's unrestricted distance (2): a swapped pair is not edited again, as in Lucene.
        assert_eq!(edit_distance(&c("ca"), &c("abc"), 2, true), None);
        assert_eq!(edit_distance(&c("héllo"), &c("hello"), 1, true), Some(1));
    }

    proptest! {
        /// Within the cutoff the distance is the full table's; beyond it, `None`.
        #[test]
        fn cutoff_distance_equals_the_full_table(
            a in proptest::collection::vec(prop::sample::select(vec!['a', 'b', 'c', 'é']), 0..8),
            b in proptest::collection::vec(prop::sample::select(vec!['a', 'b', 'c', 'é']), 0..8),
            max in 0usize..4,
            transpositions in any::<bool>(),
        ) {
            let full = osa(&a, &b, transpositions);
            prop_assert_eq!(edit_distance(&a, &b, max, transpositions), (full <= max).then_some(full));
        }
    }
}
