//! Aggregations: Elasticsearch's `aggs` over the documents a query matches — metrics (`min`, `max`, `sum`,
//! `avg`, `stats`, `value_count`, `cardinality`, `percentiles`, `percentile_ranks`) and buckets (`terms`, `histogram`, `date_histogram`,
//! `range`, `filter`, `filters`), nested to any depth, and pipelines over their results ([`super::pipeline`]).
//!
//! Everything is computed from what the index already holds, exactly: numbers from the numeric columns of
//! the segments (one value per document), keyword values from the postings — a `terms` aggregation reads
//! each of the field's terms' documents once per request and intersects them with each bucket's documents
//! (a bitmap per bucket), so its cost is the field's postings, not the matches times the values, and no
//! per-document keyword column is kept for it (spirit has none). Sharded indexes are aggregated over every
//! shard's documents at once, so counts are exact where Elasticsearch's are per-shard estimates
//! (`doc_count_error_upper_bound` is always 0), and so are several indices ([`aggregate_targets`]): one
//! index's shards and another's are all parts of one document set. Every shard is read at watermarks taken
//! once, so the buckets of one request partition the same documents even while writes go on.
//!
//! Limits, as Elasticsearch's: at most [`MAX_BUCKETS`] buckets in one request (`search.max_buckets`) and
//! at most [`MAX_TERMS`] distinct values read for one `terms`, `value_count` or `cardinality` of a keyword
//! field; an unmapped field aggregates nothing (empty buckets, null metrics), and a text field is refused
//! as Elasticsearch refuses it without fielddata.

use super::eval::{matching_docs, watermarks, Watermarks};
use super::pipeline::{self, Pipeline};
use super::plan::{keys_with_prefix, plan_shards, Node};
use super::regexp::{Regexp, RegexpFlags};
use super::Query;
use crate::error::{Error, Result};
use crate::gdt::{SegData, Snapshot};
use crate::schema::{CalendarUnit, FieldType, Schema};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

/// Most buckets one request may make, over all its aggregations (Elasticsearch's `search.max_buckets`).
pub const MAX_BUCKETS: usize = 65_536;
/// Most distinct values of a keyword field one aggregation reads.
pub const MAX_TERMS: usize = 65_536;

/// One named aggregation and the aggregations nested under its buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Agg {
    pub name: String,
    pub kind: AggKind,
    /// Sub-aggregations, computed per bucket (bucket aggregations only).
    pub aggs: Vec<Agg>,
}

/// What an aggregation computes. Fields are named as in the mapping.
#[derive(Debug, Clone, PartialEq)]
pub enum AggKind {
    Min(String),
    Max(String),
    Sum(String),
    Avg(String),
    /// Count, min, max, average and sum at once.
    Stats(String),
    /// Values of the field among the documents (a keyword document counts each of its values).
    ValueCount(String),
    /// Distinct values (exact).
    Cardinality(String),
    /// The values at the `percents` (each from 0 to 100) of a numeric or date field's values among the
    /// documents, exact: linearly interpolated between the two closest ranks (rank `p/100·(n − 1)` of the
    /// `n` sorted values), where Elasticsearch estimates them with a t-digest. `keyed` only says how the
    /// server renders them.
    Percentiles {
        field: String,
        percents: Vec<f64>,
        keyed: bool,
    },
    /// For each of `values`, the percentage of a numeric or date field's values among the documents that are
    /// at or below it, exact (Elasticsearch's `percentile_ranks` with its HDR method; its default t-digest
    /// estimates instead). `keyed` only says how the server renders them.
    PercentileRanks {
        field: String,
        values: Vec<f64>,
        keyed: bool,
    },
    /// A bucket per value, the `size` first in `order`, those with at least `min_doc_count` documents,
    /// of the values `filter` admits.
    Terms {
        field: String,
        size: usize,
        min_doc_count: u64,
        order: TermsOrder,
        filter: TermsFilter,
    },
    /// Buckets of width `interval` from `offset`; with `min_doc_count` 0 the empty ones between the first
    /// and the last are listed too.
    Histogram {
        field: String,
        interval: f64,
        offset: f64,
        min_doc_count: u64,
    },
    DateHistogram {
        field: String,
        interval: DateInterval,
        min_doc_count: u64,
    },
    /// A bucket per range, `from` included, `to` excluded, in the order given.
    Range {
        field: String,
        ranges: Vec<RangeSpec>,
    },
    /// One bucket: the documents that also match the query.
    Filter(Query),
    /// A bucket per named query.
    Filters(Vec<(String, Query)>),
    /// Computed from other aggregations' results ([`super::pipeline`]).
    Pipeline(Pipeline),
}

/// Which values a `terms` aggregation buckets: Elasticsearch's `include` and `exclude` as lists of exact
/// values (numbers for a numeric field) or as regular expressions (keyword fields), and `missing`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TermsFilter {
    /// Only these values (`None`: every value).
    pub include: Option<Vec<String>>,
    /// Never these values.
    pub exclude: Vec<String>,
    /// Only values this regular expression matches whole (Lucene's syntax, [`crate::query::Regexp`]).
    pub include_pattern: Option<String>,
    /// Never values this regular expression matches whole.
    pub exclude_pattern: Option<String>,
    /// The documents without a value count as holding this one (merged into its bucket if others hold it).
    pub missing: Option<String>,
}

/// Order of `terms` buckets (ties in key order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermsOrder {
    CountDesc,
    CountAsc,
    KeyAsc,
    KeyDesc,
    /// By the value of the bucket's sub-aggregation `agg`: a single-value metric (`min`, `max`, `sum`, `avg`,
    /// `value_count`, `cardinality`), or `stat` (`min`, `max`, `avg`, `sum`, `count`) of a `stats`
    /// (Elasticsearch's `{"order": {"prices.max": "desc"}}`). Buckets without a value (an `avg`, `min` or
    /// `max` of nothing) come last either way.
    Metric {
        agg: String,
        stat: Option<String>,
        desc: bool,
    },
}

/// The bucket width of a date histogram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DateInterval {
    /// A fixed number of milliseconds (`fixed_interval`).
    Fixed(i64),
    /// A calendar unit (`calendar_interval`).
    Calendar(CalendarUnit),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RangeSpec {
    pub key: Option<String>,
    pub from: Option<f64>,
    pub to: Option<f64>,
}

/// An aggregation's result.
#[derive(Debug, Clone, PartialEq)]
pub struct AggResult {
    pub name: String,
    pub value: AggValue,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AggValue {
    /// `min`, `max`, `sum`, `avg` and `stats`: over the `count` values (min and max are infinite when there
    /// are none).
    Stats { count: u64, min: f64, max: f64, sum: f64 },
    /// `value_count` and `cardinality`.
    Count(u64),
    /// `percentiles`: each percent with its value; `percentile_ranks`: each value with its percent (`None`
    /// without values).
    Percentiles(Vec<(f64, Option<f64>)>),
    /// `terms`, histograms and `range`: the buckets, and the documents of the buckets left out (`terms`).
    Buckets { buckets: Vec<Bucket>, other_doc_count: u64 },
    /// `filter`.
    Single(Bucket),
    /// `filters`: a bucket per name, keys [`BucketKey::Str`].
    Keyed(Vec<Bucket>),
    /// A pipeline's one value (`derivative`, `cumulative_sum`, `avg_bucket`, `sum_bucket`; `None`: no value).
    Value(Option<f64>),
    /// `max_bucket` and `min_bucket`: the extreme value and the keys of the buckets that hold it.
    BucketValue { value: Option<f64>, keys: Vec<BucketKey> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub key: BucketKey,
    pub doc_count: u64,
    pub aggs: Vec<AggResult>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BucketKey {
    /// `filter`.
    None,
    /// A keyword value or a filter's name.
    Str(String),
    /// A number, or a date as epoch milliseconds.
    Num(f64),
    Range {
        key: Option<String>,
        from: Option<f64>,
        to: Option<f64>,
    },
}

impl BucketKey {
    /// The order of two keys: numbers, strings, or ranges by their bounds (an open `from` first, an open
    /// `to` last); keys of different kinds are equal.
    pub fn order(&self, other: &BucketKey) -> std::cmp::Ordering {
        let bound = |x: Option<f64>, open: f64| x.unwrap_or(open);
        match (self, other) {
            (BucketKey::Num(x), BucketKey::Num(y)) => x.total_cmp(y),
            (BucketKey::Str(x), BucketKey::Str(y)) => x.cmp(y),
            (BucketKey::Range { from: f1, to: t1, .. }, BucketKey::Range { from: f2, to: t2, .. }) => {
                bound(*f1, f64::NEG_INFINITY)
                    .total_cmp(&bound(*f2, f64::NEG_INFINITY))
                    .then(bound(*t1, f64::INFINITY).total_cmp(&bound(*t2, f64::INFINITY)))
            }
            _ => std::cmp::Ordering::Equal,
        }
    }
}

/// The documents of one bucket: per part (a shard of a target), doc ids in ascending order.
type DocSet = Vec<Vec<u32>>;

/// Each value of a keyword field with its documents, in key order.
type KeywordValues = Rc<Vec<(String, DocSet)>>;

/// One index's share of an aggregation over several ([`aggregate_targets`]): its schema, its shards'
/// snapshots (pinned at the same moment), the query on it and the aggregations as translated for its
/// mapping. The targets' aggregations must have one shape — names, kinds, fields and parameters alike —
/// and differ at most in the queries of `filter` and `filters` (a query is translated with the mapping of
/// the index it runs on: a `term` on a field that is a keyword in one index and a number in another).
pub struct AggTarget<'a> {
    pub schema: &'a Schema,
    pub snaps: Vec<&'a Snapshot>,
    pub query: &'a Query,
    pub aggs: &'a [Agg],
}

/// Aggregates the documents `q` matches in the shards' snapshots (one per shard of an index, read at the
/// same moment). Returns the number of matches and a result per aggregation, in order.
pub fn aggregate(
    schema: &Schema,
    snaps: &[&Snapshot],
    q: &Query,
    aggs: &[Agg],
) -> Result<(u64, Vec<AggResult>)> {
    aggregate_targets(&[AggTarget { schema, snaps: snaps.to_vec(), query: q, aggs }])
}

/// Aggregates over several indices at once (`logs-*/_search` with `aggs`), exactly as over one index that
/// held all their documents: every target's matches are gathered first and each aggregation reads them
/// all, so a `terms` bucket counts every index's documents before the `size` first are kept, and
/// `cardinality` and `percentiles` see every value — where Elasticsearch reduces each shard's partial
/// results. A field is read through each index's own mapping: unmapped in some indices, it aggregates the
/// others' documents; mapped as a keyword in one index and a number in another, it is refused.
pub fn aggregate_targets(targets: &[AggTarget]) -> Result<(u64, Vec<AggResult>)> {
    let Some(first) = targets.first() else { return Ok((0, vec![])) };
    pipeline::check_parent(None, first.aggs)?;
    if let Some(t) = targets.iter().find(|t| !same_shape(first.aggs, t.aggs)) {
        return Err(Error::InvalidArgument(format!(
            "the aggregations translate to different shapes on different indices ({:?} and {:?})",
            first.aggs.iter().map(|a| &a.name).collect::<Vec<_>>(),
            t.aggs.iter().map(|a| &a.name).collect::<Vec<_>>()
        )));
    }
    let mut parts = vec![];
    for (i, t) in targets.iter().enumerate() {
        parts.extend(t.snaps.iter().map(|&s| (i, s, watermarks(s))));
    }
    let ev = Evaluator {
        targets,
        part_target: parts.iter().map(|p| p.0).collect(),
        snaps: parts.iter().map(|p| p.1).collect(),
        marks: parts.into_iter().map(|p| p.2).collect(),
        keyword_values: RefCell::default(),
        buckets: Cell::new(0),
    };
    let nodes = targets
        .iter()
        .map(|t| plan_shards(t.query, t.schema, &t.snaps).map(Some))
        .collect::<Result<Vec<_>>>()?;
    let set = ev.matching(&nodes)?;
    let total = set.iter().map(|d| d.len() as u64).sum();
    let lists: Vec<&[Agg]> = targets.iter().map(|t| t.aggs).collect();
    Ok((total, ev.all(&lists, &set)?))
}

/// Whether two targets' aggregations have one shape: equal but for the queries of `filter` and `filters`.
fn same_shape(a: &[Agg], b: &[Agg]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let kinds = match (&x.kind, &y.kind) {
                (AggKind::Filter(_), AggKind::Filter(_)) => true,
                (AggKind::Filters(p), AggKind::Filters(q)) => {
                    p.len() == q.len() && p.iter().zip(q).all(|(p, q)| p.0 == q.0)
                }
                (p, q) => p == q,
            };
            x.name == y.name && kinds && same_shape(&x.aggs, &y.aggs)
        })
}

/// The sub-aggregations of one aggregation across the targets (one list per target).
fn subs<'x>(a: &[&'x Agg]) -> Vec<&'x [Agg]> {
    a.iter().map(|x| &x.aggs[..]).collect()
}

/// The `i`th aggregation of each target's list.
fn nth<'x>(lists: &[&'x [Agg]], i: usize) -> Vec<&'x Agg> {
    lists.iter().map(|l| &l[i]).collect()
}

struct Evaluator<'a> {
    targets: &'a [AggTarget<'a>],
    /// Per part (each target's shards, targets in order), its target.
    part_target: Vec<usize>,
    /// Per part, its snapshot.
    snaps: Vec<&'a Snapshot>,
    /// Per part, the watermarks every query of the request is evaluated at.
    marks: Vec<Watermarks>,
    /// Per keyword field (by name), each value's documents (in key order), read once per request.
    keyword_values: RefCell<HashMap<String, KeywordValues>>,
    /// Buckets made so far.
    buckets: Cell<usize>,
}

/// How an aggregation may read a field: its id in each target's mapping (`None` where unmapped).
#[derive(Clone, PartialEq)]
enum Source {
    /// In no target's mapping: nothing to aggregate.
    Unmapped,
    Numbers(Vec<Option<u16>>, FieldType),
    Keywords(Vec<Option<u16>>),
}

impl<'a> Evaluator<'a> {
    /// The documents each part's target's node matches (none where its node is `None`).
    fn matching(&self, nodes: &[Option<Node>]) -> Result<DocSet> {
        (0..self.snaps.len())
            .map(|p| match &nodes[self.part_target[p]] {
                Some(n) => matching_docs(self.snaps[p], n, Some(&self.marks[p])),
                None => Ok(vec![]),
            })
            .collect()
    }

    /// The aggregations of one level (`lists`: each target's), over `set`: those of documents in the order
    /// given, then the sibling pipelines, which read them (and the pipelines before them). Parent pipelines
    /// are their parent's to apply ([`pipeline::apply_parent`]).
    fn all(&self, lists: &[&[Agg]], set: &DocSet) -> Result<Vec<AggResult>> {
        let defs = lists[0];
        let mut out = Vec::with_capacity(defs.len());
        for (i, d) in defs.iter().enumerate() {
            if !matches!(d.kind, AggKind::Pipeline(_)) {
                out.push(AggResult { name: d.name.clone(), value: self.one(&nth(lists, i), set)? });
            }
        }
        for d in defs {
            if let AggKind::Pipeline(p) = &d.kind {
                if !p.is_parent() {
                    let value = pipeline::sibling(&d.name, p, &out, defs)?;
                    out.push(AggResult { name: d.name.clone(), value });
                }
            }
        }
        Ok(out)
    }

    /// How `what` (an aggregation's name, for errors) reads field `name`; `numeric_only` refuses keywords.
    fn source(&self, name: &str, what: &str, numeric_only: bool) -> Result<Source> {
        let mapped: Vec<Option<(u16, FieldType)>> = self
            .targets
            .iter()
            .map(|t| t.schema.field_id(name).map(|id| (id, t.schema.field(id).ty)))
            .collect();
        let ids = || mapped.iter().map(|m| m.map(|(id, _)| id)).collect::<Vec<_>>();
        let mut ty: Option<FieldType> = None;
        for &(_, other) in mapped.iter().flatten() {
            match other {
                FieldType::Text => {
                    return Err(Error::InvalidArgument(format!(
                        "Text fields are not optimised for operations that require per-document field data \
                         like aggregations and sorting, so these operations are disabled by default. Please \
                         use a keyword field instead. (field [{name}], aggregation [{what}])"
                    )))
                }
                FieldType::Keyword if numeric_only => {
                    return Err(Error::InvalidArgument(format!(
                        "Field [{name}] of type [keyword] is not supported for aggregation [{what}]"
                    )))
                }
                _ => {}
            }
            // Numbers of both kinds aggregate together (as doubles); a keyword and a number, or a date and
            // a number, do not.
            ty = Some(match (ty, other) {
                (None, b) => b,
                (Some(a), b) if a == b => a,
                (Some(FieldType::Long | FieldType::Double), FieldType::Long | FieldType::Double) => {
                    FieldType::Double
                }
                (Some(a), b) => {
                    return Err(Error::InvalidArgument(format!(
                        "field [{name}] is of type [{}] in one index and [{}] in another, which aggregation \
                         [{what}] cannot read together",
                        a.es_name(),
                        b.es_name()
                    )))
                }
            });
        }
        Ok(match ty {
            None => Source::Unmapped,
            Some(FieldType::Keyword) => Source::Keywords(ids()),
            Some(ty) => Source::Numbers(ids(), ty),
        })
    }

    /// Counts `n` more buckets against [`MAX_BUCKETS`].
    fn count_buckets(&self, n: usize) -> Result<()> {
        let total = self.buckets.get() + n;
        if total > MAX_BUCKETS {
            return Err(too_many_buckets(total));
        }
        self.buckets.set(total);
        Ok(())
    }

    fn bucket(&self, key: BucketKey, set: &DocSet, subs: &[&[Agg]]) -> Result<Bucket> {
        let doc_count = set.iter().map(|d| d.len() as u64).sum();
        Ok(Bucket { key, doc_count, aggs: self.all(subs, set)? })
    }

    /// One aggregation, `a` as each target translated it, with its parent pipelines applied.
    fn one(&self, a: &[&Agg], set: &DocSet) -> Result<AggValue> {
        pipeline::check_parent(Some(a[0]), &a[0].aggs)?;
        let mut value = self.one_of_documents(a, set)?;
        if a[0].aggs.iter().any(|s| matches!(&s.kind, AggKind::Pipeline(p) if p.is_parent())) {
            match &mut value {
                AggValue::Buckets { buckets, .. } | AggValue::Keyed(buckets) => {
                    pipeline::apply_parent(a[0], buckets)?
                }
                _ => unreachable!("check_parent admits multi-bucket parents only"),
            }
        }
        Ok(value)
    }

    /// One aggregation of documents (a metric or buckets), `a` as each target translated it.
    fn one_of_documents(&self, a: &[&Agg], set: &DocSet) -> Result<AggValue> {
        let what = a[0].kind.type_name();
        if !a[0].aggs.is_empty() && !a[0].kind.has_buckets() {
            return Err(Error::InvalidArgument(format!(
                "Aggregator [{}] of type [{what}] cannot accept sub-aggregations",
                a[0].name
            )));
        }
        let subs = subs(a);
        Ok(match &a[0].kind {
            AggKind::Pipeline(_) => {
                return Err(Error::InvalidArgument(format!(
                    "[{}] of type [{what}] reads other aggregations' results, not documents",
                    a[0].name
                )))
            }
            AggKind::Min(f) | AggKind::Max(f) | AggKind::Sum(f) | AggKind::Avg(f) | AggKind::Stats(f) => {
                let (mut count, mut min, mut max, mut sum) = (0u64, f64::INFINITY, f64::NEG_INFINITY, 0.0);
                if let Source::Numbers(ids, _) = self.source(f, what, true)? {
                    self.numbers(&ids, set, |_, _, v| {
                        count += 1;
                        min = min.min(v);
                        max = max.max(v);
                        sum += v;
                    })?;
                }
                AggValue::Stats { count, min, max, sum }
            }
            AggKind::ValueCount(f) => AggValue::Count(match self.source(f, what, false)? {
                Source::Unmapped => 0,
                Source::Numbers(ids, _) => {
                    let mut n = 0;
                    self.numbers(&ids, set, |_, _, _| n += 1)?;
                    n
                }
                Source::Keywords(ids) => self.keyword_counts(&ids, f, set)?.iter().sum(),
            }),
            AggKind::Cardinality(f) => AggValue::Count(match self.source(f, what, false)? {
                Source::Unmapped => 0,
                Source::Numbers(ids, _) => {
                    let mut seen = std::collections::HashSet::new();
                    self.numbers(&ids, set, |_, _, v| {
                        seen.insert(value_key(v));
                    })?;
                    seen.len() as u64
                }
                Source::Keywords(ids) => {
                    self.keyword_counts(&ids, f, set)?.iter().filter(|&&c| c > 0).count() as u64
                }
            }),
            AggKind::Percentiles { field, percents, .. } => {
                if let Some(p) = percents.iter().find(|p| !(0.0..=100.0).contains(*p)) {
                    return Err(Error::InvalidArgument(format!(
                        "percent must be in [0,100], got [{p}]: [{}]",
                        a[0].name
                    )));
                }
                let values = self.sorted_values(field, what, set)?;
                AggValue::Percentiles(percents.iter().map(|&p| (p, percentile(&values, p))).collect())
            }
            AggKind::PercentileRanks { field, values: of, .. } => {
                if let Some(x) = of.iter().find(|x| !x.is_finite()) {
                    return Err(Error::InvalidArgument(format!(
                        "[{x}] is not a finite number: [{}]",
                        a[0].name
                    )));
                }
                let values = self.sorted_values(field, what, set)?;
                let rank = |x: f64| {
                    let at_or_below = values.partition_point(|&v| v <= x);
                    (!values.is_empty()).then(|| at_or_below as f64 * 100.0 / values.len() as f64)
                };
                AggValue::Percentiles(of.iter().map(|&x| (x, rank(x))).collect())
            }
            AggKind::Terms { field, size, min_doc_count, order, filter } => {
                self.terms(field, (*size, *min_doc_count, order, filter), set, &subs)?
            }
            AggKind::Histogram { field, interval, offset, min_doc_count } => {
                if !(interval.is_finite() && *interval > 0.0) {
                    return Err(Error::InvalidArgument(format!(
                        "[interval] must be >0 for histogram aggregation [{}]",
                        a[0].name
                    )));
                }
                let (interval, offset) = (*interval, *offset);
                let Source::Numbers(ids, _) = self.source(field, what, true)? else {
                    return Ok(AggValue::Buckets { buckets: vec![], other_doc_count: 0 });
                };
                let idx = |v: f64| ((v - offset) / interval).floor() as i64;
                let by = self.group(&ids, set, |v| Some(idx(v)))?;
                self.series(
                    by,
                    *min_doc_count,
                    &subs,
                    |i| i + 1,
                    |i| BucketKey::Num(i as f64 * interval + offset),
                )?
            }
            AggKind::DateHistogram { field, interval, min_doc_count } => {
                let Source::Numbers(ids, ty) = self.source(field, what, true)? else {
                    return Ok(AggValue::Buckets { buckets: vec![], other_doc_count: 0 });
                };
                if ty != FieldType::Date {
                    return Err(Error::InvalidArgument(format!(
                        "Field [{field}] of type [{}] is not supported for aggregation [date_histogram]",
                        ty.es_name()
                    )));
                }
                match *interval {
                    DateInterval::Fixed(ms) => {
                        if ms <= 0 {
                            return Err(Error::InvalidArgument("[fixed_interval] must be positive".into()));
                        }
                        let by = self.group(&ids, set, |v| Some((v as i64).div_euclid(ms) * ms))?;
                        self.series(by, *min_doc_count, &subs, |k| k + ms, |k| BucketKey::Num(k as f64))?
                    }
                    DateInterval::Calendar(unit) => {
                        let by = self.group(&ids, set, |v| Some(unit.floor(v as i64)))?;
                        self.series(
                            by,
                            *min_doc_count,
                            &subs,
                            |k| unit.next(k),
                            |k| BucketKey::Num(k as f64),
                        )?
                    }
                }
            }
            AggKind::Range { field, ranges } => {
                self.count_buckets(ranges.len())?;
                let mut sets: Vec<DocSet> = vec![vec![vec![]; set.len()]; ranges.len()];
                if let Source::Numbers(ids, _) = self.source(field, what, true)? {
                    self.numbers(&ids, set, |part, doc, v| {
                        for (r, s) in ranges.iter().zip(&mut sets) {
                            if r.from.is_none_or(|f| v >= f) && r.to.is_none_or(|t| v < t) {
                                s[part].push(doc);
                            }
                        }
                    })?;
                }
                let buckets = ranges
                    .iter()
                    .zip(&sets)
                    .map(|(r, s)| {
                        let key = BucketKey::Range { key: r.key.clone(), from: r.from, to: r.to };
                        self.bucket(key, s, &subs)
                    })
                    .collect::<Result<_>>()?;
                AggValue::Buckets { buckets, other_doc_count: 0 }
            }
            AggKind::Filter(_) => {
                self.count_buckets(1)?;
                let qs = a.iter().map(|x| match &x.kind {
                    AggKind::Filter(q) => q,
                    _ => unreachable!("one shape (same_shape)"),
                });
                AggValue::Single(self.bucket(BucketKey::None, &self.filtered(qs, set)?, &subs)?)
            }
            AggKind::Filters(named) => {
                self.count_buckets(named.len())?;
                let buckets = named
                    .iter()
                    .enumerate()
                    .map(|(i, (name, _))| {
                        let qs = a.iter().map(|x| match &x.kind {
                            AggKind::Filters(named) => &named[i].1,
                            _ => unreachable!("one shape (same_shape)"),
                        });
                        self.bucket(BucketKey::Str(name.clone()), &self.filtered(qs, set)?, &subs)
                    })
                    .collect::<Result<_>>()?;
                AggValue::Keyed(buckets)
            }
        })
    }

    /// The documents of `set` that the queries match (`qs`: each target's).
    fn filtered<'q>(&self, qs: impl Iterator<Item = &'q Query>, set: &DocSet) -> Result<DocSet> {
        let nodes = qs
            .zip(self.targets)
            .map(|(q, t)| plan_shards(q, t.schema, &t.snaps).map(Some))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.matching(&nodes)?.iter().zip(set).map(|(m, s)| intersect(m, s)).collect())
    }

    /// The values of numeric field `field` (by name; `what` aggregates it) over the documents of `set`,
    /// sorted (none for an unmapped field).
    fn sorted_values(&self, field: &str, what: &str, set: &DocSet) -> Result<Vec<f64>> {
        let mut values = vec![];
        if let Source::Numbers(ids, _) = self.source(field, what, true)? {
            self.numbers(&ids, set, |_, _, v| values.push(v))?;
        }
        values.sort_by(f64::total_cmp);
        Ok(values)
    }

    /// Calls `f(part, doc, value)` for every document of `set` with a value in the numeric field (`ids`: its
    /// id in each target's mapping), in doc order per part.
    fn numbers(&self, ids: &[Option<u16>], set: &DocSet, mut f: impl FnMut(usize, u32, f64)) -> Result<()> {
        for (part, docs) in set.iter().enumerate() {
            let Some(field) = ids[self.part_target[part]] else { continue };
            let mut j = 0;
            for (seg, &mark) in self.snaps[part].segments.iter().zip(&self.marks[part]) {
                let (base, end) = (seg.base_doc, seg.base_doc + mark);
                let from = j + docs[j..].partition_point(|&d| d < base);
                let to = from + docs[from..].partition_point(|&d| d < end);
                j = to;
                if from == to {
                    continue;
                }
                match &seg.data {
                    SegData::Fresh(fr) => {
                        for &d in &docs[from..to] {
                            if let Some(v) = fr.numeric(field, d - base) {
                                f(part, d, v);
                            }
                        }
                    }
                    SegData::Image { .. } => {
                        let v = seg.image().expect("image").map_err(|e| Error::Format(e.0))?;
                        let Some(col) = v.numbers(field) else { continue };
                        for &d in &docs[from..to] {
                            if let Some(x) = crate::segment::image::number_at(col, d - base) {
                                f(part, d, x);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The documents of `set` per group key `key` gives their value (`None`: in no group).
    fn group(
        &self,
        ids: &[Option<u16>],
        set: &DocSet,
        key: impl Fn(f64) -> Option<i64>,
    ) -> Result<BTreeMap<i64, DocSet>> {
        let mut by: BTreeMap<i64, DocSet> = BTreeMap::new();
        let parts = set.len();
        self.numbers(ids, set, |part, doc, v| {
            if let Some(k) = key(v) {
                by.entry(k).or_insert_with(|| vec![vec![]; parts])[part].push(doc);
            }
        })?;
        Ok(by)
    }

    /// Histogram buckets from groups keyed in ascending order: with `min_doc_count` 0 every key from the
    /// first to the last (`next` steps from one to the following) gets a bucket, empty or not.
    fn series(
        &self,
        by: BTreeMap<i64, DocSet>,
        min_doc_count: u64,
        subs: &[&[Agg]],
        next: impl Fn(i64) -> i64,
        key: impl Fn(i64) -> BucketKey,
    ) -> Result<AggValue> {
        let parts = self.snaps.len();
        let mut keys: Vec<i64> = by.keys().copied().collect();
        if min_doc_count == 0 {
            if let (Some(&first), Some(&last)) = (keys.first(), keys.last()) {
                keys.clear();
                let mut k = first;
                while k <= last {
                    keys.push(k);
                    if keys.len() + self.buckets.get() > MAX_BUCKETS {
                        return Err(too_many_buckets(keys.len() + self.buckets.get()));
                    }
                    k = next(k);
                }
            }
        }
        let empty: DocSet = vec![vec![]; parts];
        let mut buckets = Vec::with_capacity(keys.len());
        for k in keys {
            let s = by.get(&k).unwrap_or(&empty);
            if (s.iter().map(|d| d.len() as u64).sum::<u64>()) < min_doc_count {
                continue;
            }
            self.count_buckets(1)?;
            buckets.push(self.bucket(key(k), s, subs)?);
        }
        Ok(AggValue::Buckets { buckets, other_doc_count: 0 })
    }

    /// Each value of keyword field `name` (`ids`: its id in each target's mapping) with its documents (per
    /// part), in key order; read once per request. A value counts once however many targets hold it.
    fn keyword_docs(&self, ids: &[Option<u16>], name: &str) -> Result<KeywordValues> {
        if let Some(v) = self.keyword_values.borrow().get(name) {
            return Ok(v.clone());
        }
        let too_many = || {
            Error::InvalidArgument(format!(
                "field [{name}] has more than {MAX_TERMS} distinct values, more than one aggregation reads"
            ))
        };
        let mut values: BTreeSet<Vec<u8>> = BTreeSet::new();
        for (t, id) in self.targets.iter().zip(ids) {
            let Some(id) = id else { continue };
            let keys = keys_with_prefix(&t.snaps, &id.to_be_bytes(), MAX_TERMS)?.ok_or_else(too_many)?;
            values.extend(keys.into_iter().map(|k| k[2..].to_vec()));
            if values.len() > MAX_TERMS {
                return Err(too_many());
            }
        }
        let mut out = Vec::with_capacity(values.len());
        for value in values {
            let nodes: Vec<Option<Node>> = ids
                .iter()
                .map(|id| {
                    id.map(|field| Node::Term { field, key: [&field.to_be_bytes()[..], &value].concat() })
                })
                .collect();
            out.push((String::from_utf8_lossy(&value).into_owned(), self.matching(&nodes)?));
        }
        let out = Rc::new(out);
        self.keyword_values.borrow_mut().insert(name.to_owned(), out.clone());
        Ok(out)
    }

    /// Each value of keyword field `name` (in key order) with how many documents of `set` hold it, and —
    /// with `keep` — which ones (per part).
    fn keyword_split(
        &self,
        ids: &[Option<u16>],
        name: &str,
        set: &DocSet,
        keep: bool,
    ) -> Result<Vec<(String, u64, Option<DocSet>)>> {
        let values = self.keyword_docs(ids, name)?;
        let maps: Vec<Vec<u64>> = set.iter().map(|d| bitmap(d)).collect();
        Ok(values
            .iter()
            .map(|(label, docs)| {
                let mine = docs.iter().zip(&maps).map(|(d, m)| d.iter().copied().filter(|&x| has(m, x)));
                if keep {
                    let mine: DocSet = mine.map(Iterator::collect).collect();
                    let n = mine.iter().map(|d| d.len() as u64).sum();
                    (label.clone(), n, Some(mine))
                } else {
                    (label.clone(), mine.map(|d| d.count() as u64).sum(), None)
                }
            })
            .collect())
    }

    /// How many documents of `set` hold each value of keyword field `name` (in key order).
    fn keyword_counts(&self, ids: &[Option<u16>], name: &str, set: &DocSet) -> Result<Vec<u64>> {
        Ok(self.keyword_split(ids, name, set, false)?.into_iter().map(|(_, n, _)| n).collect())
    }

    /// The documents of `set` without a value in `source`'s field (all of them for an unmapped field).
    fn without_value(&self, source: &Source, name: &str, set: &DocSet) -> Result<DocSet> {
        // Per part, the documents with a value, in order.
        let mut with: DocSet = vec![vec![]; set.len()];
        match source {
            Source::Unmapped => return Ok(set.clone()),
            Source::Keywords(ids) => {
                for (_, docs) in self.keyword_docs(ids, name)?.iter() {
                    with.iter_mut().zip(docs).for_each(|(w, d)| w.extend_from_slice(d));
                }
                with.iter_mut().for_each(|w| w.sort_unstable());
            }
            Source::Numbers(ids, _) => self.numbers(ids, set, |part, doc, _| with[part].push(doc))?,
        }
        let maps: Vec<Vec<u64>> = with.iter().map(|d| bitmap(d)).collect();
        Ok(set.iter().zip(&maps).map(|(d, m)| d.iter().copied().filter(|&x| !has(m, x)).collect()).collect())
    }

    fn terms(
        &self,
        field: &str,
        (size, min_doc_count, order, filter): (usize, u64, &TermsOrder, &TermsFilter),
        set: &DocSet,
        subs: &[&[Agg]],
    ) -> Result<AggValue> {
        // Ordered by a sub-aggregation: the one it names, and which of its values.
        let metric = match order {
            TermsOrder::Metric { agg, stat, .. } => Some(order_metric(subs[0], agg, stat.as_deref())?),
            _ => None,
        };
        // (key, count, the bucket's documents when sub-aggregations need them).
        let source = self.source(field, "terms", false)?;
        // A value of `filter` as a bucket key of this field: a number for a numeric field.
        let key_of = |v: &String| -> Result<BucketKey> {
            Ok(match &source {
                Source::Numbers(..) => BucketKey::Num(v.trim().parse::<f64>().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "[{v}] is not a number, as the terms aggregation on numeric field [{field}] needs"
                    ))
                })?),
                _ => BucketKey::Str(v.clone()),
            })
        };
        let include =
            filter.include.as_ref().map(|l| l.iter().map(key_of).collect::<Result<Vec<_>>>()).transpose()?;
        let exclude = filter.exclude.iter().map(key_of).collect::<Result<Vec<_>>>()?;
        // Regular expressions match string keys: refused on a numeric field, as Elasticsearch refuses them.
        let pattern = |p: &Option<String>| -> Result<Option<Regexp>> {
            let Some(p) = p else { return Ok(None) };
            if matches!(source, Source::Numbers(..)) {
                return Err(Error::InvalidArgument(format!(
                    "the terms aggregation on numeric field [{field}] takes include/exclude as arrays of values, \
                     not regular expressions"
                )));
            }
            Regexp::new(p, RegexpFlags::ALL, false).map(Some).map_err(Error::InvalidArgument)
        };
        let (include_re, exclude_re) = (pattern(&filter.include_pattern)?, pattern(&filter.exclude_pattern)?);
        let by_pattern = |k: &BucketKey| match k {
            BucketKey::Str(s) => {
                include_re.as_ref().is_none_or(|r| r.matches(s))
                    && !exclude_re.as_ref().is_some_and(|r| r.matches(s))
            }
            _ => true,
        };
        let mut rows: Vec<(BucketKey, u64, Option<DocSet>)> = match &source {
            Source::Unmapped => vec![],
            Source::Keywords(ids) => self
                .keyword_split(ids, field, set, !subs[0].is_empty())?
                .into_iter()
                .map(|(label, n, docs)| (BucketKey::Str(label), n, docs))
                .collect(),
            Source::Numbers(ids, _) => {
                let mut by: HashMap<u64, DocSet> = HashMap::new();
                let parts = set.len();
                self.numbers(ids, set, |part, doc, v| {
                    by.entry(value_key(v)).or_insert_with(|| vec![vec![]; parts])[part].push(doc);
                })?;
                by.into_iter()
                    .map(|(bits, s)| {
                        let n = s.iter().map(|d| d.len() as u64).sum();
                        (BucketKey::Num(f64::from_bits(bits)), n, Some(s))
                    })
                    .collect()
            }
        };
        if let Some(m) = &filter.missing {
            let key = key_of(m)?;
            let docs = self.without_value(&source, field, set)?;
            let n: u64 = docs.iter().map(|d| d.len() as u64).sum();
            if n > 0 {
                match rows.iter_mut().find(|r| r.0 == key) {
                    Some(r) => {
                        r.1 += n;
                        if let Some(d) = &mut r.2 {
                            for (mine, more) in d.iter_mut().zip(docs) {
                                mine.extend(more);
                                mine.sort_unstable();
                            }
                        }
                    }
                    None => rows.push((key, n, (!subs[0].is_empty()).then_some(docs))),
                }
            }
        }
        rows.retain(|r| {
            include.as_ref().is_none_or(|l| l.contains(&r.0)) && !exclude.contains(&r.0) && by_pattern(&r.0)
        });
        rows.retain(|r| r.1 >= min_doc_count);
        let by_key = BucketKey::order;
        // Each bucket's ordering value (every bucket's, before any is left out).
        let values: Vec<Option<f64>> = match metric {
            Some((sub, stat)) => rows
                .iter()
                .map(|r| {
                    let docs = r.2.as_ref().expect("a sub-aggregation reads its bucket's documents");
                    let sub = nth(subs, sub);
                    Ok(metric_value(&self.one(&sub, docs)?, &sub[0].kind, stat))
                })
                .collect::<Result<_>>()?,
            None => vec![None; rows.len()],
        };
        let mut rows: Vec<_> = rows.into_iter().zip(values).collect();
        rows.sort_by(|(a, va), (b, vb)| match order {
            TermsOrder::CountDesc => b.1.cmp(&a.1).then_with(|| by_key(&a.0, &b.0)),
            TermsOrder::CountAsc => a.1.cmp(&b.1).then_with(|| by_key(&a.0, &b.0)),
            TermsOrder::KeyAsc => by_key(&a.0, &b.0),
            TermsOrder::KeyDesc => by_key(&b.0, &a.0),
            TermsOrder::Metric { desc, .. } => match (va, vb) {
                (Some(x), Some(y)) if *desc => y.total_cmp(x),
                (Some(x), Some(y)) => x.total_cmp(y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            }
            .then_with(|| by_key(&a.0, &b.0)),
        });
        let mut rows: Vec<(BucketKey, u64, Option<DocSet>)> = rows.into_iter().map(|(r, _)| r).collect();
        let other_doc_count = rows.iter().skip(size).map(|r| r.1).sum();
        rows.truncate(size);
        self.count_buckets(rows.len())?;
        let buckets = rows
            .into_iter()
            .map(|(key, n, docs)| match docs {
                Some(d) => self.bucket(key, &d, subs),
                None => Ok(Bucket { key, doc_count: n, aggs: vec![] }),
            })
            .collect::<Result<_>>()?;
        Ok(AggValue::Buckets { buckets, other_doc_count })
    }
}

impl AggKind {
    /// Elasticsearch's name of the aggregation type.
    pub fn type_name(&self) -> &'static str {
        match self {
            AggKind::Min(_) => "min",
            AggKind::Max(_) => "max",
            AggKind::Sum(_) => "sum",
            AggKind::Avg(_) => "avg",
            AggKind::Stats(_) => "stats",
            AggKind::ValueCount(_) => "value_count",
            AggKind::Cardinality(_) => "cardinality",
            AggKind::Percentiles { .. } => "percentiles",
            AggKind::PercentileRanks { .. } => "percentile_ranks",
            AggKind::Terms { .. } => "terms",
            AggKind::Histogram { .. } => "histogram",
            AggKind::DateHistogram { .. } => "date_histogram",
            AggKind::Range { .. } => "range",
            AggKind::Filter(_) => "filter",
            AggKind::Filters(_) => "filters",
            AggKind::Pipeline(p) => p.type_name(),
        }
    }

    /// Whether it makes buckets (and so takes sub-aggregations).
    pub fn has_buckets(&self) -> bool {
        matches!(
            self,
            AggKind::Terms { .. }
                | AggKind::Histogram { .. }
                | AggKind::DateHistogram { .. }
                | AggKind::Range { .. }
                | AggKind::Filter(_)
                | AggKind::Filters(_)
        )
    }

    /// The field it reads, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            AggKind::Min(f)
            | AggKind::Max(f)
            | AggKind::Sum(f)
            | AggKind::Avg(f)
            | AggKind::Stats(f)
            | AggKind::ValueCount(f)
            | AggKind::Cardinality(f)
            | AggKind::Percentiles { field: f, .. }
            | AggKind::PercentileRanks { field: f, .. }
            | AggKind::Terms { field: f, .. }
            | AggKind::Histogram { field: f, .. }
            | AggKind::DateHistogram { field: f, .. }
            | AggKind::Range { field: f, .. } => Some(f),
            AggKind::Filter(_) | AggKind::Filters(_) | AggKind::Pipeline(_) => None,
        }
    }
}

/// Where the sub-aggregation a `terms` order names is among `subs` (`agg`, with `stat` of a `stats`), checked
/// to give one value.
fn order_metric(subs: &[Agg], agg: &str, stat: Option<&str>) -> Result<(usize, Option<&'static str>)> {
    let bad = |why: &str| Error::InvalidArgument(format!("Invalid aggregation order path [{agg}]: {why}"));
    let at = subs.iter().position(|s| s.name == agg).ok_or_else(|| bad("no such sub-aggregation"))?;
    let sub = &subs[at];
    let known = |s: &str| ["min", "max", "avg", "sum", "count"].into_iter().find(|x| *x == s);
    let stat = match (&sub.kind, stat) {
        (
            AggKind::Min(_)
            | AggKind::Max(_)
            | AggKind::Sum(_)
            | AggKind::Avg(_)
            | AggKind::ValueCount(_)
            | AggKind::Cardinality(_),
            None,
        ) => None,
        (AggKind::Stats(_), Some(s)) if known(s).is_some() => known(s),
        (AggKind::Stats(_), _) => {
            return Err(bad("a stats aggregation orders by .min, .max, .avg, .sum or .count"))
        }
        _ => return Err(bad("only a single-value metric or a stats value orders buckets")),
    };
    Ok((at, stat))
}

/// The value a `terms` order (and a pipeline's buckets path, [`super::pipeline`]) reads from a
/// sub-aggregation's result: `stat` of a `stats`, else the metric's one value (`None`: it has none).
pub(crate) fn metric_value(v: &AggValue, kind: &AggKind, stat: Option<&str>) -> Option<f64> {
    match v {
        AggValue::Count(n) => Some(*n as f64),
        AggValue::Stats { count, min, max, sum } => {
            let what = match (kind, stat) {
                (_, Some(s)) => s,
                (AggKind::Min(_), _) => "min",
                (AggKind::Max(_), _) => "max",
                (AggKind::Avg(_), _) => "avg",
                _ => "sum",
            };
            match what {
                "count" => Some(*count as f64),
                "sum" => Some(*sum),
                _ if *count == 0 => None,
                "min" => Some(*min),
                "max" => Some(*max),
                _ => Some(sum / *count as f64),
            }
        }
        _ => None,
    }
}

/// The value at percent `p` (0 to 100) of the ascending `sorted` values: linear between the two closest
/// ranks, `None` without values.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let rank = p / 100.0 * last as f64;
    let (lo, hi) = (rank.floor() as usize, (rank.ceil() as usize).min(last));
    let (a, b) = (sorted[lo], sorted[hi]);
    Some(if lo == hi { a } else { a + (b - a) * (rank - lo as f64) })
}

/// A number as a hash key: its bits, with -0 as 0 (they are one value).
fn value_key(v: f64) -> u64 {
    if v == 0.0 {
        0f64.to_bits()
    } else {
        v.to_bits()
    }
}

fn too_many_buckets(total: usize) -> Error {
    Error::InvalidArgument(format!(
        "Trying to create too many buckets. Must be less than or equal to: [{MAX_BUCKETS}] but was [{total}]. \
         This limit can be set by changing the [search.max_buckets] cluster level setting."
    ))
}

/// The sorted docs of `a` that are also in sorted `b`.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// A bitmap of `docs`, for membership tests in constant time.
fn bitmap(docs: &[u32]) -> Vec<u64> {
    let mut b = vec![0u64; docs.last().map_or(0, |&d| d as usize / 64 + 1)];
    for &d in docs {
        b[d as usize / 64] |= 1 << (d % 64);
    }
    b
}

fn has(bits: &[u64], doc: u32) -> bool {
    bits.get(doc as usize / 64).is_some_and(|w| w >> (doc % 64) & 1 == 1)
}
