//! Pipeline aggregations: Elasticsearch's aggregations computed from other aggregations' results rather
//! than from documents — `avg_bucket`, `max_bucket`, `min_bucket`, `sum_bucket` and `stats_bucket` over a
//! sibling's buckets, and `derivative`, `cumulative_sum` and `bucket_sort` over the buckets of the
//! aggregation they are nested in (their parent).
//!
//! They run after the aggregations they read ([`super::aggs`] computes a level's document aggregations
//! first, then its sibling pipelines; a multi-bucket aggregation applies its parent pipelines once its
//! buckets are made, each after the pipelines it reads), so they cost a pass over buckets, never over
//! documents. A value
//! is found in a bucket by a *buckets path* (`sales`, `stats.max`, `load.99`, `_count`, `_key`, and
//! `filter_name>metric` through single-bucket aggregations). A bucket without a value (an `avg` of no
//! documents) is a *gap*: skipped, or counted as 0 with [`GapPolicy::InsertZeros`].
//!
//! Exact where Elasticsearch is: the values they read are the exact results of this engine. Scripts
//! (`bucket_script`, `bucket_selector`, `moving_fn`) are not here, nor multi-bucket keys in paths
//! (`sale_type['hat']>sales`): both are refused by name.

use super::aggs::{metric_value, Agg, AggKind, AggResult, AggValue, Bucket, BucketKey};
use crate::error::{Error, Result};
use std::cmp::Ordering;
use std::fmt;

/// Where a pipeline finds a value in a bucket: aggregation names separated by `>` (every one but the last a
/// single-bucket aggregation to go inside), then the value of the last: `.min` of a `stats`, `.99` of a
/// `percentiles`, nothing for a single-value metric; or `_count` (the bucket's documents) and `_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketsPath {
    pub aggs: Vec<String>,
    pub metric: Option<String>,
}

impl BucketsPath {
    /// Parses Elasticsearch's `buckets_path` syntax (`a>b.metric`).
    pub fn parse(path: &str) -> Result<BucketsPath> {
        let bad = |why: &str| Error::InvalidArgument(format!("invalid buckets_path [{path}]: {why}"));
        if path.contains('[') || path.contains(']') {
            return Err(bad("bucket keys in brackets (`agg['key']`) are not supported"));
        }
        let mut aggs: Vec<String> = path.split('>').map(str::to_owned).collect();
        let last = aggs.pop().expect("split gives one piece at least");
        let (name, metric) = match last.split_once('.') {
            Some((name, metric)) => (name.to_owned(), Some(metric.to_owned())),
            None => (last, None),
        };
        aggs.push(name);
        if aggs.iter().any(String::is_empty) || metric.as_deref() == Some("") {
            return Err(bad("an empty aggregation or metric name"));
        }
        Ok(BucketsPath { aggs, metric })
    }
}

impl fmt::Display for BucketsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.aggs.join(">"))?;
        match &self.metric {
            Some(m) => write!(f, ".{m}"),
            None => Ok(()),
        }
    }
}

/// What a pipeline does with a bucket that has no value at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GapPolicy {
    /// Leave the bucket out (Elasticsearch's default; `keep_values` is the same here, where a value is
    /// either missing or a number).
    #[default]
    Skip,
    /// Count it as 0.
    InsertZeros,
}

/// The statistic a sibling pipeline takes over the buckets' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketStat {
    Avg,
    Max,
    Min,
    Sum,
    Stats,
}

/// A pipeline aggregation.
#[derive(Debug, Clone, PartialEq)]
pub enum Pipeline {
    /// A statistic of the values at `path` over the buckets of the sibling multi-bucket aggregation the
    /// path's first name names (`"sales_per_month>sales"`). `max_bucket`/`min_bucket` also give the keys of
    /// the buckets that hold the extreme.
    Sibling { stat: BucketStat, path: BucketsPath, gap_policy: GapPolicy },
    /// Per bucket of its parent histogram or date histogram, but the first, the change of the value at
    /// `path` from the bucket before (`None` where either has a gap).
    Derivative { path: BucketsPath, gap_policy: GapPolicy },
    /// Per bucket of its parent histogram or date histogram, the sum of the values at `path` up to it (gaps
    /// count 0).
    CumulativeSum { path: BucketsPath },
    /// Sorts its parent's buckets by the values at the `sort` paths (`true`: descending; `_key` sorts by
    /// key), in order, ties kept as they were, then keeps `size` of them (all when `None`) from `from`. With
    /// [`GapPolicy::Skip`] a bucket with a gap at a sort path is left out.
    BucketSort { sort: Vec<(BucketsPath, bool)>, from: usize, size: Option<usize>, gap_policy: GapPolicy },
}

impl Pipeline {
    /// Elasticsearch's name of the aggregation type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Pipeline::Sibling { stat: BucketStat::Avg, .. } => "avg_bucket",
            Pipeline::Sibling { stat: BucketStat::Max, .. } => "max_bucket",
            Pipeline::Sibling { stat: BucketStat::Min, .. } => "min_bucket",
            Pipeline::Sibling { stat: BucketStat::Sum, .. } => "sum_bucket",
            Pipeline::Sibling { stat: BucketStat::Stats, .. } => "stats_bucket",
            Pipeline::Derivative { .. } => "derivative",
            Pipeline::CumulativeSum { .. } => "cumulative_sum",
            Pipeline::BucketSort { .. } => "bucket_sort",
        }
    }

    /// Whether it works on the buckets of the aggregation it is nested in (rather than on a sibling's).
    pub fn is_parent(&self) -> bool {
        !matches!(self, Pipeline::Sibling { .. })
    }
}

/// Refuses the parent pipelines among `subs` that `parent` (`None`: the top level of a request) cannot
/// hold: every one needs a multi-bucket parent, and `derivative` and `cumulative_sum` a histogram.
pub(crate) fn check_parent(parent: Option<&Agg>, subs: &[Agg]) -> Result<()> {
    for sub in subs {
        let AggKind::Pipeline(p) = &sub.kind else { continue };
        if !p.is_parent() {
            continue;
        }
        let histogram = parent
            .is_some_and(|a| matches!(a.kind, AggKind::Histogram { .. } | AggKind::DateHistogram { .. }));
        let multi = parent.is_some_and(|a| a.kind.has_buckets() && !matches!(a.kind, AggKind::Filter(_)));
        let ok = match p {
            Pipeline::BucketSort { .. } => multi,
            _ => histogram,
        };
        let every_bucket = parent.is_some_and(|a| {
            matches!(
                a.kind,
                AggKind::Histogram { min_doc_count: 0, .. } | AggKind::DateHistogram { min_doc_count: 0, .. }
            )
        });
        if ok && !every_bucket && !matches!(p, Pipeline::BucketSort { .. }) {
            // Elasticsearch's rule: a series with buckets left out would difference or sum across the gaps.
            return Err(Error::InvalidArgument(format!(
                "parent histogram of {} aggregation [{}] must have min_doc_count of 0",
                p.type_name(),
                sub.name
            )));
        }
        if !ok {
            let needs = match p {
                Pipeline::BucketSort { .. } => "a multi-bucket aggregation",
                _ => "a histogram or date_histogram",
            };
            let parent = parent
                .map_or("none".to_owned(), |a| format!("[{}] of type [{}]", a.name, a.kind.type_name()));
            return Err(Error::InvalidArgument(format!(
                "{} aggregation [{}] must have {needs} as parent, not {parent}",
                p.type_name(),
                sub.name
            )));
        }
    }
    Ok(())
}

/// The value of sibling pipeline `p` (named `name`) over the results of its level (`results`, whose
/// definitions are `defs`).
pub(crate) fn sibling(name: &str, p: &Pipeline, results: &[AggResult], defs: &[Agg]) -> Result<AggValue> {
    let Pipeline::Sibling { stat, path, gap_policy } = p else { unreachable!("a sibling pipeline") };
    let (first, rest) = path.aggs.split_first().expect("a path names an aggregation");
    let bad = |why: String| {
        Error::InvalidArgument(format!("{} [{name}]: buckets_path [{path}] {why}", p.type_name()))
    };
    let def =
        defs.iter().find(|d| &d.name == first).ok_or_else(|| bad(format!("names no sibling [{first}]")))?;
    let buckets: &[Bucket] = match results.iter().find(|r| &r.name == first).map(|r| &r.value) {
        Some(AggValue::Buckets { buckets, .. } | AggValue::Keyed(buckets)) => buckets,
        _ => {
            return Err(bad(format!("must start with a multi-bucket aggregation, and [{first}] is not one")))
        }
    };
    if !rest.is_empty() {
        check_path(&def.aggs, rest, path.metric.as_deref())?;
    }
    let mut values = vec![];
    for b in buckets {
        let v = match (rest.is_empty(), path.metric.as_deref()) {
            (true, Some("_count")) => Some(b.doc_count as f64),
            (true, _) => return Err(bad("must name a value inside the buckets (a metric or _count)".into())),
            (false, metric) => bucket_value(b, &def.aggs, rest, metric)?,
        };
        if let Some(v) = gap(v, *gap_policy) {
            values.push((b, v));
        }
    }
    let (count, sum) = (values.len() as u64, values.iter().map(|x| x.1).sum::<f64>());
    let (min, max) =
        values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x.1), hi.max(x.1)));
    let extreme = |x: f64| AggValue::BucketValue {
        value: (count > 0).then_some(x),
        keys: values.iter().filter(|v| v.1 == x).map(|v| v.0.key.clone()).collect(),
    };
    Ok(match stat {
        BucketStat::Avg => AggValue::Value((count > 0).then(|| sum / count as f64)),
        BucketStat::Sum => AggValue::Value(Some(sum)),
        BucketStat::Max => extreme(max),
        BucketStat::Min => extreme(min),
        BucketStat::Stats => AggValue::Stats { count, min, max, sum },
    })
}

/// The aggregations a parent pipeline reads (the first name of each of its paths).
fn reads(p: &Pipeline) -> Vec<&str> {
    match p {
        Pipeline::Sibling { path, .. }
        | Pipeline::Derivative { path, .. }
        | Pipeline::CumulativeSum { path } => {
            vec![path.aggs[0].as_str()]
        }
        Pipeline::BucketSort { sort, .. } => sort.iter().map(|(path, _)| path.aggs[0].as_str()).collect(),
    }
}

/// `parent`'s parent pipelines in the order they can run: each after the pipelines it reads (as
/// Elasticsearch orders them), else in the order given; a cycle is an error.
fn parent_order(parent: &Agg) -> Result<Vec<(&Agg, &Pipeline)>> {
    let mut left: Vec<(&Agg, &Pipeline)> = parent
        .aggs
        .iter()
        .filter_map(|a| match &a.kind {
            AggKind::Pipeline(p) if p.is_parent() => Some((a, p)),
            _ => None,
        })
        .collect();
    let mut order = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let ready = left
            .iter()
            .position(|(_, p)| reads(p).iter().all(|r| !left.iter().any(|(other, _)| other.name == *r)))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "the pipeline aggregations of [{}] read each other in a cycle ([{}])",
                    parent.name,
                    left.iter().map(|(a, _)| a.name.as_str()).collect::<Vec<_>>().join(", ")
                ))
            })?;
        order.push(left.remove(ready));
    }
    Ok(order)
}

/// Applies `parent`'s parent pipelines (each after those it reads) to its `buckets`: each `derivative` and
/// `cumulative_sum` adds its result to every bucket, each `bucket_sort` reorders and cuts them.
pub(crate) fn apply_parent(parent: &Agg, buckets: &mut Vec<Bucket>) -> Result<()> {
    let order = parent_order(parent)?;
    for (_, p) in &order {
        let paths: Vec<&BucketsPath> = match p {
            Pipeline::Derivative { path, .. } | Pipeline::CumulativeSum { path } => vec![path],
            Pipeline::BucketSort { sort, .. } => sort.iter().map(|(path, _)| path).collect(),
            Pipeline::Sibling { .. } => vec![],
        };
        for path in paths {
            check_path(&parent.aggs, &path.aggs, path.metric.as_deref())?;
        }
    }
    for (sub, p) in order {
        let value = |b: &Bucket, path: &BucketsPath| -> Result<Option<f64>> {
            bucket_value(b, &parent.aggs, &path.aggs, path.metric.as_deref())
        };
        let result = |value: Option<f64>| AggResult { name: sub.name.clone(), value: AggValue::Value(value) };
        match p {
            Pipeline::Sibling { .. } => unreachable!("parent_order gives parent pipelines"),
            Pipeline::Derivative { path, gap_policy } => {
                // The value of the bucket before, once there is one.
                let mut before: Option<Option<f64>> = None;
                for b in buckets.iter_mut() {
                    let v = gap(value(b, path)?, *gap_policy);
                    if let Some(prev) = before {
                        b.aggs.push(result(prev.zip(v).map(|(p, v)| v - p)));
                    }
                    before = Some(v);
                }
            }
            Pipeline::CumulativeSum { path } => {
                let mut sum = 0.0;
                for b in buckets.iter_mut() {
                    sum += value(b, path)?.unwrap_or(0.0);
                    b.aggs.push(result(Some(sum)));
                }
            }
            Pipeline::BucketSort { sort, from, size, gap_policy } => {
                let mut keyed = vec![];
                'buckets: for b in buckets.drain(..) {
                    let mut keys = Vec::with_capacity(sort.len());
                    for (path, _) in sort {
                        let k = if path.aggs == ["_key"] && path.metric.is_none() {
                            Some(b.key.clone())
                        } else {
                            gap(value(&b, path)?, *gap_policy).map(BucketKey::Num)
                        };
                        match k {
                            Some(k) => keys.push(k),
                            None => continue 'buckets,
                        }
                    }
                    keyed.push((keys, b));
                }
                keyed.sort_by(|(a, _), (b, _)| {
                    sort.iter().zip(a.iter().zip(b)).fold(Ordering::Equal, |o, ((_, desc), (x, y))| {
                        o.then_with(|| if *desc { y.order(x) } else { x.order(y) })
                    })
                });
                buckets.extend(keyed.into_iter().map(|k| k.1).skip(*from).take(size.unwrap_or(usize::MAX)));
            }
        }
    }
    Ok(())
}

/// `v` under `policy`: a gap stays one when skipped, and is 0 otherwise.
fn gap(v: Option<f64>, policy: GapPolicy) -> Option<f64> {
    match policy {
        GapPolicy::Skip => v,
        GapPolicy::InsertZeros => Some(v.unwrap_or(0.0)),
    }
}

/// The error of a bad buckets path (`path`, then `metric`).
fn bad_path(path: &[String], metric: Option<&str>, why: String) -> Error {
    let mut shown = path.join(">");
    if let Some(m) = metric {
        shown = format!("{shown}.{m}");
    }
    Error::InvalidArgument(format!("buckets_path [{shown}]: {why}"))
}

/// Checks `path` (aggregation names, then `metric`) against the definitions `defs` alone, before any bucket
/// is read: a bad path is an error whether or not there are buckets to read it in (as Elasticsearch
/// checks paths when it parses the request). [`bucket_value`] reads what this admits.
fn check_path(defs: &[Agg], path: &[String], metric: Option<&str>) -> Result<()> {
    let bad = |why: String| bad_path(path, metric, why);
    let (first, rest) = path.split_first().expect("a path names an aggregation");
    if rest.is_empty() && metric.is_none() && (first == "_count" || first == "_key") {
        return Ok(());
    }
    let def = defs
        .iter()
        .find(|d| &d.name == first)
        .ok_or_else(|| bad(format!("no aggregation [{first}] here")))?;
    if !rest.is_empty() {
        return match def.kind {
            AggKind::Filter(_) => check_path(&def.aggs, rest, metric),
            _ => Err(bad(format!("[{first}] is not a single-bucket aggregation a path can go into"))),
        };
    }
    let stats = |m: &str| ["min", "max", "avg", "sum", "count"].contains(&m);
    let ok = match (&def.kind, metric) {
        (AggKind::Filter(_), None | Some("_count")) => true,
        (
            AggKind::Min(_)
            | AggKind::Max(_)
            | AggKind::Avg(_)
            | AggKind::Sum(_)
            | AggKind::ValueCount(_)
            | AggKind::Cardinality(_),
            None | Some("value"),
        ) => true,
        (AggKind::Pipeline(Pipeline::Sibling { stat: BucketStat::Stats, .. }), Some(m)) => stats(m),
        (AggKind::Pipeline(p), None | Some("value")) => {
            !matches!(p, Pipeline::Sibling { stat: BucketStat::Stats, .. })
        }
        (
            AggKind::Min(_) | AggKind::Max(_) | AggKind::Avg(_) | AggKind::Sum(_) | AggKind::Stats(_),
            Some(m),
        ) => stats(m),
        (
            AggKind::Percentiles { percents: at, .. } | AggKind::PercentileRanks { values: at, .. },
            Some(m),
        ) => m.parse::<f64>().is_ok_and(|x| at.contains(&x)),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(bad(match metric {
        None => format!("[{first}] is not a single-value metric: name one of its values ([{first}.max])"),
        Some(m) => format!("[{first}] has no value [{m}]"),
    }))
}

/// The value at `path` (aggregation names, then `metric`) in bucket `b`, whose sub-aggregations `defs`
/// define; `None` is a gap.
fn bucket_value(b: &Bucket, defs: &[Agg], path: &[String], metric: Option<&str>) -> Result<Option<f64>> {
    let bad = |why: String| bad_path(path, metric, why);
    let (first, rest) = path.split_first().expect("a path names an aggregation");
    match (first.as_str(), rest.is_empty(), metric) {
        ("_count", true, None) => return Ok(Some(b.doc_count as f64)),
        ("_key", true, None) => {
            return match b.key {
                BucketKey::Num(x) => Ok(Some(x)),
                _ => Err(bad("_key is a number only in numeric buckets (histograms, numeric terms)".into())),
            }
        }
        _ => {}
    }
    let def = defs
        .iter()
        .find(|d| &d.name == first)
        .ok_or_else(|| bad(format!("no aggregation [{first}] here")))?;
    // A pipeline's result is missing where it has none (a derivative's first bucket).
    let Some(res) = b.aggs.iter().find(|r| &r.name == first) else { return Ok(None) };
    if !rest.is_empty() {
        return match &res.value {
            AggValue::Single(inner) => bucket_value(inner, &def.aggs, rest, metric),
            _ => Err(bad(format!("[{first}] is not a single-bucket aggregation a path can go into"))),
        };
    }
    // `check_path` admitted the metric for this aggregation.
    Ok(match (&res.value, metric) {
        (AggValue::Single(inner), _) => Some(inner.doc_count as f64),
        (AggValue::Value(v) | AggValue::BucketValue { value: v, .. }, _) => *v,
        (AggValue::Stats { .. } | AggValue::Count(_), m) => {
            metric_value(&res.value, &def.kind, m.filter(|&m| m != "value"))
        }
        (AggValue::Percentiles(values), Some(m)) => {
            let p: f64 = m.parse().map_err(|_| bad(format!("[{m}] is not a percent of [{first}]")))?;
            values.iter().find(|(at, _)| *at == p).and_then(|(_, v)| *v)
        }
        _ => return Err(bad(format!("[{first}] gives no single number here"))),
    })
}
