//! Explanations: how one document's score comes about (Elasticsearch's `_explain` and `explain: true`,
//! Lucene's `Weight::explain`).
//!
//! Every value is the evaluator's own: each node of the planned query is scored on the document alone, with
//! the scorer a search would use, under the statistics and watermarks it is given. So the top value is
//! exactly the score a search at that moment gives the document (a search an instant earlier scored with the
//! statistics then: equal unless writes changed them), and a node's value is exactly what that node alone
//! scores. What
//! the explanation adds is the structure (which clauses matched, how they combine) and, for a term, the
//! parts of its BM25 score: the idf with its document counts, and the length-normalized frequency with the
//! frequency, the field length (as its one-byte norm stores it) and the average length. A combination's
//! details add up to its value up to float rounding (the evaluator sums in its own order), as in Lucene.
//!
//! The cost: the nodes' weights once per call (a node's weight rebuilds its subtree's, so nodes times depth),
//! then per document one scorer per node (again its subtree's) and one more per term — for a debugging aid
//! over a page of hits, not a hot path.

use super::{scorer, term_scorer, weight, Ctx, Scorer, Weight};
use crate::codec::decode_norm;
use crate::error::{Error, Result};
use crate::gdt::Snapshot;
use crate::query::plan::Node;
use crate::query::{Bm25, CollectionStats};
use crate::schema::{key_field, Schema};
use std::ops::Bound;

/// How a value was computed: Lucene's and Elasticsearch's explanation tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explanation {
    pub value: f32,
    pub description: String,
    pub details: Vec<Explanation>,
}

impl Explanation {
    fn leaf(value: f32, description: impl Into<String>) -> Explanation {
        Explanation { value, description: description.into(), details: vec![] }
    }

    fn of(value: f32, description: impl Into<String>, details: Vec<Explanation>) -> Explanation {
        Explanation { value, description: description.into(), details }
    }
}

/// A node with its weight (built while the context can still resolve terms) and its clauses'.
struct Weighed<'n> {
    node: &'n Node,
    weight: Weight,
    /// For a term: its document frequency, the documents with its field, and the field's average length.
    term_stats: Option<(u64, u64, f32)>,
    kids: Vec<(Role, Weighed<'n>)>,
}

/// What a clause is to its parent.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Scoring,
    Filter,
}

fn weigh<'n>(node: &'n Node, ctx: &mut Ctx<'_>) -> Result<Weighed<'n>> {
    let weight = weight(node, ctx)?;
    let term_stats = match node {
        Node::Term { field, key } => {
            let st = ctx.field_stats(*field);
            let df = ctx.df(key);
            Some((df, st.docs.max(df), super::avgdl(st)))
        }
        _ => None,
    };
    let mut kids = vec![];
    // `must_not` clauses are never explained, nor a constant's clause: not weighed.
    let mut add = |role, nodes: &'n [Node], ctx: &mut Ctx<'_>| -> Result<()> {
        for n in nodes {
            kids.push((role, weigh(n, ctx)?));
        }
        Ok(())
    };
    match node {
        Node::Bool { must, should, filter, .. } => {
            add(Role::Scoring, must, ctx)?;
            add(Role::Scoring, should, ctx)?;
            add(Role::Filter, filter, ctx)?;
        }
        Node::DisMax(of, _) | Node::AtLeast { of, .. } => add(Role::Scoring, of, ctx)?,
        Node::Boost(n, _) => add(Role::Scoring, std::slice::from_ref(&**n), ctx)?,
        _ => {}
    }
    Ok(Weighed { node, weight, term_stats, kids })
}

/// Where the document is: its segment's index in the context and its doc id there.
#[derive(Clone, Copy)]
struct At {
    seg: usize,
    local: u32,
}

/// `w`'s score of the document, `None` if it does not match.
fn score_at(w: &Weight, ctx: &Ctx<'_>, at: At) -> Result<Option<f32>> {
    let mut s = scorer(w, ctx, at.seg);
    let d = if s.doc() >= at.local { s.doc() } else { s.advance(at.local) };
    let score = (d == at.local).then(|| s.score());
    if let Some(e) = ctx.err.borrow_mut().take() {
        return Err(Error::Format(format!("explaining a score: {}", e.0)));
    }
    Ok(score)
}

/// Explains the scores of documents `docs` of `snap` under `node` (planned against `schema`), scored as a
/// search scores them with `bm25` and the index-wide `stats` (a sharded index's; `None`: the snapshot's own)
/// at `marks` ([`super::collection_stats`]'s, or [`super::watermarks`]; `None`: the current watermarks).
/// One per document: `None` when it is not in the snapshot below the marks, is deleted, or does not match.
pub fn explain(
    snap: &Snapshot,
    node: &Node,
    schema: &Schema,
    docs: &[u32],
    (bm25, stats): (Bm25, Option<&CollectionStats>),
    marks: Option<&[u32]>,
) -> Result<Vec<Option<Explanation>>> {
    let mut ctx = Ctx::new(snap, bm25, stats, marks)?;
    let tree = weigh(node, &mut ctx)?;
    let ctx = ctx;
    let mut out = Vec::with_capacity(docs.len());
    for &doc in docs {
        let seg = ctx.segs.iter().position(|s| s.desc.base_doc <= doc && doc - s.desc.base_doc < s.visible);
        let at = seg.map(|seg| At { seg, local: doc - ctx.segs[seg].desc.base_doc });
        out.push(match at {
            Some(at) if !ctx.segs[at.seg].deletes.is_deleted(at.local) => {
                explain_node(&tree, &ctx, schema, at, doc)?
            }
            _ => None,
        });
    }
    Ok(out)
}

fn explain_node(
    w: &Weighed<'_>,
    ctx: &Ctx<'_>,
    schema: &Schema,
    at: At,
    doc: u32,
) -> Result<Option<Explanation>> {
    let Some(value) = score_at(&w.weight, ctx, at)? else { return Ok(None) };
    let name = |field: u16| schema.field(field).name.clone();
    let term = |key: &[u8]| {
        format!("{}:{}", name(key_field(key)), String::from_utf8_lossy(key.get(2..).unwrap_or_default()))
    };
    // The explanations of the matching clauses, filters as Lucene lists them (they add 0).
    let kids = |roles: &[Role]| -> Result<Vec<Explanation>> {
        let mut out = vec![];
        for (role, k) in w.kids.iter().filter(|(r, _)| roles.contains(r)) {
            if let Some(e) = explain_node(k, ctx, schema, at, doc)? {
                out.push(match role {
                    Role::Filter => Explanation::of(
                        0.0,
                        "match on required clause, product of:",
                        vec![Explanation::leaf(0.0, "FILTER clause"), e],
                    ),
                    _ => e,
                });
            }
        }
        Ok(out)
    };
    Ok(Some(match w.node {
        Node::Term { key, .. } => {
            let (df, docs, avgdl) = w.term_stats.expect("a term's statistics are taken with its weight");
            let idf = ctx.idf(df, docs);
            let mut details = vec![Explanation::of(
                idf,
                "idf, computed as log(1 + (N - n + 0.5) / (n + 0.5)) from:",
                vec![
                    Explanation::leaf(df as f32, "n, number of documents containing term"),
                    Explanation::leaf(docs as f32, "N, total number of documents with field"),
                ],
            )];
            if let Some(mut ts) = term_scorer(&w.weight, ctx, at.seg) {
                let d = if ts.doc() >= at.local { ts.doc() } else { ts.advance(at.local) };
                if d == at.local {
                    let freq = ts.p.freq() as f32;
                    let dl = decode_norm(ts.norms.get(at.local)) as f32;
                    let Bm25 { k1, b } = ctx.bm25;
                    if let Some(e) = ctx.err.borrow_mut().take() {
                        return Err(Error::Format(format!("explaining a score: {}", e.0)));
                    }
                    details.push(Explanation::of(
                        freq / (freq + k1 * (1.0 - b + b * dl / avgdl)),
                        "tf, computed as freq / (freq + k1 * (1 - b + b * dl / avgdl)) from:",
                        vec![
                            Explanation::leaf(freq, "freq, occurrences of term within document"),
                            Explanation::leaf(k1, "k1, term saturation parameter"),
                            Explanation::leaf(b, "b, length normalization parameter"),
                            Explanation::leaf(dl, "dl, length of field (approximate)"),
                            Explanation::leaf(avgdl, "avgdl, average length of field"),
                        ],
                    ));
                }
            }
            Explanation::of(
                value,
                format!("weight({} in {doc}) [BM25], result of:", term(key)),
                vec![Explanation::of(value, "score, computed as idf * tf from:", details)],
            )
        }
        Node::Phrase { field, keys, slop, last, .. } => {
            let mut words: Vec<String> =
                keys.iter().map(|k| String::from_utf8_lossy(k.get(2..).unwrap_or_default()).into()).collect();
            if !last.is_empty() {
                let alts: Vec<String> = last
                    .iter()
                    .map(|k| String::from_utf8_lossy(k.get(2..).unwrap_or_default()).into())
                    .collect();
                words.push(format!("({})", alts.join(" | ")));
            }
            let slop = if *slop > 0 { format!("~{slop}") } else { String::new() };
            Explanation::leaf(
                value,
                format!(
                    "weight({}:\"{}\"{slop} in {doc}) [BM25]: the phrase's frequency in the document, scored as \
                     a term whose idf is the sum of its terms'",
                    name(*field),
                    words.join(" ")
                ),
            )
        }
        Node::Blended { field, keys, .. } => {
            let terms: Vec<String> =
                keys.iter().map(|k| String::from_utf8_lossy(k.get(2..).unwrap_or_default()).into()).collect();
            Explanation::leaf(
                value,
                format!(
                    "weight({}:[{}] in {doc}) [BM25]: the fuzzy expansions, each with the idf of the most frequent \
                     and its own edit-distance boost, summed",
                    name(*field),
                    terms.join(", ")
                ),
            )
        }
        Node::All => Explanation::leaf(value, "*:*"),
        Node::TermSet { keys } => Explanation::leaf(
            value,
            format!(
                "ConstantScore({} terms, e.g. {})",
                keys.len(),
                keys.first().map(|k| term(k)).unwrap_or_default()
            ),
        ),
        Node::Exists { field } => {
            Explanation::leaf(value, format!("ConstantScore(FieldExistsQuery [field={}])", name(*field)))
        }
        Node::Ids(ids) => Explanation::leaf(value, format!("ConstantScore(_id:[{}])", ids.join(", "))),
        Node::Range { field, lower, upper } => {
            let lo = match lower {
                Bound::Included(x) => format!("[{x}"),
                Bound::Excluded(x) => format!("{{{x}"),
                Bound::Unbounded => "[*".into(),
            };
            let hi = match upper {
                Bound::Included(x) => format!("{x}]"),
                Bound::Excluded(x) => format!("{x}}}"),
                Bound::Unbounded => "*]".into(),
            };
            Explanation::leaf(value, format!("ConstantScore({}:{lo} TO {hi})", name(*field)))
        }
        Node::Bool { .. } => Explanation::of(value, "sum of:", kids(&[Role::Scoring, Role::Filter])?),
        // As Lucene words it: "max of" without a tie breaker.
        Node::DisMax(_, tie) if *tie == 0.0 => Explanation::of(value, "max of:", kids(&[Role::Scoring])?),
        Node::DisMax(_, tie) => {
            Explanation::of(value, format!("max plus {tie} times others of:"), kids(&[Role::Scoring])?)
        }
        Node::AtLeast { min, of } => {
            let matching = kids(&[Role::Scoring])?;
            let what =
                format!("sum of the {} of {} clauses that match (at least {min}):", matching.len(), of.len());
            Explanation::of(value, what, matching)
        }
        Node::Boost(_, factor) => {
            let mut details = kids(&[Role::Scoring])?;
            details.push(Explanation::leaf(*factor, "boost"));
            Explanation::of(value, "product of:", details)
        }
        Node::Constant(..) => Explanation::leaf(value, "ConstantScore: every match scores this"),
        Node::Nothing | Node::Dropped => Explanation::leaf(value, "no clause"),
    }))
}
