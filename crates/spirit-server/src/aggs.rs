//! `aggs` (or `aggregations`) in a search request: Elasticsearch's JSON parsed into
//! [`spirit::query::aggs::Agg`] trees, and their results rendered in Elasticsearch's response shape. What
//! spirit computes is described in [`spirit::query::aggs`]; an option it does not implement is refused by
//! name, never ignored — except `shard_size` and `precision_threshold`, which only tune estimates, and
//! spirit's counts are exact.

use crate::dsl::Translator;
use crate::error::{ApiError, ApiResult};
use serde_json::{json, Map, Value};
use spirit::query::aggs::{
    Agg, AggKind, AggResult, AggValue, Bucket, BucketKey, DateInterval, RangeSpec, TermsFilter, TermsOrder,
};
use spirit::query::pipeline::{BucketStat, BucketsPath, GapPolicy, Pipeline};
use spirit::schema::{format_date_millis, CalendarUnit, FieldType, Schema};

/// Parses the `aggs` object of a request (`depth`: how deep it is nested, against the translator's limit).
pub fn parse(v: &Value, tr: &mut Translator<'_>, depth: usize) -> ApiResult<Vec<Agg>> {
    let obj = v.as_object().ok_or_else(|| ApiError::parsing("[aggs] must be an object"))?;
    if depth > tr.max_depth() {
        return Err(ApiError::parsing(format!(
            "aggregations nest deeper than {} levels (the limit)",
            tr.max_depth()
        )));
    }
    obj.iter().map(|(name, body)| parse_one(name, body, tr, depth)).collect()
}

fn parse_one(name: &str, body: &Value, tr: &mut Translator<'_>, depth: usize) -> ApiResult<Agg> {
    let obj = body
        .as_object()
        .ok_or_else(|| ApiError::parsing(format!("aggregation [{name}] must be an object")))?;
    let mut kind = None;
    let mut aggs = vec![];
    for (key, v) in obj {
        match key.as_str() {
            "aggs" | "aggregations" => aggs = parse(v, tr, depth + 1)?,
            "meta" => return Err(ApiError::unsupported(format!("[meta] on aggregation [{name}]"))),
            ty => {
                if kind.is_some() {
                    return Err(ApiError::parsing(format!(
                        "Found two aggregation type definitions in [{name}]: [{}] and [{ty}]",
                        obj.keys()
                            .find(|k| !["aggs", "aggregations"].contains(&k.as_str()))
                            .expect("the first")
                    )));
                }
                kind = Some(parse_kind(name, ty, v, tr)?);
            }
        }
    }
    let kind =
        kind.ok_or_else(|| ApiError::parsing(format!("Missing definition for aggregation [{name}]")))?;
    if !aggs.is_empty() && !kind.has_buckets() {
        return Err(ApiError::parsing(format!(
            "Aggregator [{name}] of type [{}] cannot accept sub-aggregations",
            kind.type_name()
        )));
    }
    Ok(Agg { name: name.to_string(), kind, aggs })
}

/// The parameters of one aggregation type, every key checked against those it takes.
struct Params<'v> {
    name: String,
    ty: String,
    obj: &'v Map<String, Value>,
}

impl<'v> Params<'v> {
    fn new(name: &str, ty: &str, v: &'v Value, known: &[&str]) -> ApiResult<Params<'v>> {
        let obj = v
            .as_object()
            .ok_or_else(|| ApiError::parsing(format!("[{ty}] of [{name}] must be an object")))?;
        if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ApiError::unsupported(format!("the [{k}] option of [{ty}] aggregation [{name}]")));
        }
        Ok(Params { name: name.into(), ty: ty.into(), obj })
    }

    fn field(&self) -> ApiResult<String> {
        self.obj.get("field").and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
            ApiError::parsing(format!("[{}] aggregation [{}] needs a [field]", self.ty, self.name))
        })
    }

    fn number(&self, key: &str) -> ApiResult<Option<f64>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(Value::String(s)) => s
                .parse::<f64>()
                .map(Some)
                .map_err(|_| ApiError::parsing(format!("[{key}] of [{}] must be a number", self.name))),
            Some(_) => Err(ApiError::parsing(format!("[{key}] of [{}] must be a number", self.name))),
        }
    }

    /// A scalar (string, number or boolean) as text, `None` if absent.
    fn scalar(&self, key: &str) -> ApiResult<Option<String>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
            Some(_) => Err(ApiError::parsing(format!("[{key}] of [{}] must be a value", self.name))),
        }
    }

    /// `include` or `exclude` of a `terms` aggregation as a list of exact values (`None` for a regular
    /// expression, [`Self::pattern`]'s; an object, a partition, is refused by name).
    fn values(&self, key: &str) -> ApiResult<Option<Vec<String>>> {
        match self.obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(_) | Value::Bool(_) => Ok(v.to_string()),
                    _ => Err(ApiError::parsing(format!("[{key}] of [{}] must list values", self.name))),
                })
                .collect::<ApiResult<_>>()
                .map(Some),
            Some(Value::String(_)) => Ok(None),
            Some(_) => Err(ApiError::unsupported(format!(
                "partitions as [{key}] of terms aggregation [{}] (give an array of values or a regular expression)",
                self.name
            ))),
        }
    }

    /// `include` or `exclude` of a `terms` aggregation as a regular expression (a string), if it is one.
    fn pattern(&self, key: &str) -> Option<String> {
        self.obj.get(key).and_then(Value::as_str).map(str::to_owned)
    }

    fn count(&self, key: &str, default: u64) -> ApiResult<u64> {
        match self.obj.get(key) {
            None => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| {
                ApiError::parsing(format!("[{key}] of [{}] must be a non-negative integer", self.name))
            }),
        }
    }
}

fn parse_kind(name: &str, ty: &str, v: &Value, tr: &mut Translator<'_>) -> ApiResult<AggKind> {
    Ok(match ty {
        "min" | "max" | "sum" | "avg" | "stats" | "value_count" => {
            let f = Params::new(name, ty, v, &["field"])?.field()?;
            match ty {
                "min" => AggKind::Min(f),
                "max" => AggKind::Max(f),
                "sum" => AggKind::Sum(f),
                "avg" => AggKind::Avg(f),
                "stats" => AggKind::Stats(f),
                _ => AggKind::ValueCount(f),
            }
        }
        "cardinality" => {
            AggKind::Cardinality(Params::new(name, ty, v, &["field", "precision_threshold"])?.field()?)
        }
        "percentiles" => {
            let p = Params::new(name, ty, v, &["field", "percents", "keyed"])?;
            let percents = match p.obj.get("percents") {
                None => vec![1.0, 5.0, 25.0, 50.0, 75.0, 95.0, 99.0],
                Some(Value::Array(xs)) if !xs.is_empty() => xs
                    .iter()
                    .map(|x| x.as_f64().filter(|x| (0.0..=100.0).contains(x)))
                    .collect::<Option<Vec<f64>>>()
                    .ok_or_else(|| {
                        ApiError::parsing(format!("[percents] of [{name}] must be numbers from 0 to 100"))
                    })?,
                Some(_) => {
                    return Err(ApiError::parsing(format!(
                        "[percents] of [{name}] must be a non-empty array"
                    )))
                }
            };
            AggKind::Percentiles { field: p.field()?, percents, keyed: keyed(&p, name)? }
        }
        "percentile_ranks" => {
            let p = Params::new(name, ty, v, &["field", "values", "keyed"])?;
            let values = match p.obj.get("values") {
                Some(Value::Array(xs)) if !xs.is_empty() => xs
                    .iter()
                    .map(Value::as_f64)
                    .collect::<Option<Vec<f64>>>()
                    .ok_or_else(|| ApiError::parsing(format!("[values] of [{name}] must be numbers")))?,
                None => return Err(ApiError::parsing(format!("[values] must not be null: [{name}]"))),
                Some(_) => {
                    return Err(ApiError::parsing(format!("[values] of [{name}] must be a non-empty array")))
                }
            };
            AggKind::PercentileRanks { field: p.field()?, values, keyed: keyed(&p, name)? }
        }
        "terms" => {
            let p = Params::new(
                name,
                ty,
                v,
                &["field", "size", "min_doc_count", "order", "shard_size", "include", "exclude", "missing"],
            )?;
            let order = match p.obj.get("order") {
                None => TermsOrder::CountDesc,
                Some(o) => parse_order(name, o)?,
            };
            let size = p.count("size", 10)? as usize;
            if size == 0 {
                return Err(ApiError::parsing(format!(
                    "[size] must be greater than 0. Found [0] in [{name}]"
                )));
            }
            let filter = TermsFilter {
                include: p.values("include")?,
                exclude: p.values("exclude")?.unwrap_or_default(),
                include_pattern: p.pattern("include"),
                exclude_pattern: p.pattern("exclude"),
                missing: p.scalar("missing")?,
            };
            AggKind::Terms {
                field: p.field()?,
                size,
                min_doc_count: p.count("min_doc_count", 1)?,
                order,
                filter,
            }
        }
        "histogram" => {
            let p = Params::new(name, ty, v, &["field", "interval", "offset", "min_doc_count"])?;
            let interval = p.number("interval")?.ok_or_else(|| {
                ApiError::parsing(format!("[interval] must be >0 for histogram aggregation [{name}]"))
            })?;
            if !(interval.is_finite() && interval > 0.0) {
                return Err(ApiError::parsing(format!(
                    "[interval] must be >0 for histogram aggregation [{name}]"
                )));
            }
            AggKind::Histogram {
                field: p.field()?,
                interval,
                offset: p.number("offset")?.unwrap_or(0.0),
                min_doc_count: p.count("min_doc_count", 0)?,
            }
        }
        "date_histogram" => {
            let p = Params::new(
                name,
                ty,
                v,
                &["field", "fixed_interval", "calendar_interval", "min_doc_count", "time_zone", "interval"],
            )?;
            if p.obj.contains_key("interval") {
                return Err(ApiError::parsing(format!(
                    "[interval] on date_histogram [{name}] is deprecated in Elasticsearch and not supported by \
                     spirit: use [fixed_interval] or [calendar_interval]"
                )));
            }
            if let Some(tz) = p.obj.get("time_zone") {
                if !matches!(tz.as_str(), Some("UTC" | "Z" | "+00:00" | "Etc/UTC" | "GMT")) {
                    return Err(ApiError::unsupported(format!(
                        "[time_zone] {tz} on date_histogram [{name}]: buckets are in UTC"
                    )));
                }
            }
            let interval = match (p.obj.get("fixed_interval"), p.obj.get("calendar_interval")) {
                (Some(f), None) => DateInterval::Fixed(fixed_interval(name, f)?),
                (None, Some(c)) => DateInterval::Calendar(calendar_interval(name, c)?),
                _ => {
                    return Err(ApiError::parsing(format!(
                    "date_histogram [{name}] needs exactly one of [fixed_interval] and [calendar_interval]"
                )))
                }
            };
            AggKind::DateHistogram {
                field: p.field()?,
                interval,
                min_doc_count: p.count("min_doc_count", 0)?,
            }
        }
        "range" => {
            let p = Params::new(name, ty, v, &["field", "ranges", "keyed"])?;
            if p.obj.get("keyed").is_some_and(|k| k != &Value::Bool(false)) {
                return Err(ApiError::unsupported(format!("[keyed] ranges in [{name}]")));
            }
            let ranges = p
                .obj
                .get("ranges")
                .and_then(Value::as_array)
                .ok_or_else(|| ApiError::parsing(format!("range aggregation [{name}] needs [ranges]")))?;
            let ranges = ranges
                .iter()
                .map(|r| {
                    let rp = Params::new(name, "range", r, &["from", "to", "key"])?;
                    let key = match rp.obj.get("key") {
                        None => None,
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(_) => {
                            return Err(ApiError::parsing(format!("a [key] of [{name}] must be a string")))
                        }
                    };
                    Ok(RangeSpec { key, from: rp.number("from")?, to: rp.number("to")? })
                })
                .collect::<ApiResult<Vec<_>>>()?;
            AggKind::Range { field: p.field()?, ranges }
        }
        "filter" => AggKind::Filter(tr.query(v)?),
        "filters" => {
            let p = Params::new(name, ty, v, &["filters"])?;
            let named = match p.obj.get("filters") {
                Some(Value::Object(m)) => m,
                Some(Value::Array(_)) => {
                    return Err(ApiError::unsupported(format!("anonymous [filters] (an array) in [{name}]")))
                }
                _ => return Err(ApiError::parsing(format!("filters aggregation [{name}] needs [filters]"))),
            };
            AggKind::Filters(
                named.iter().map(|(k, q)| Ok((k.clone(), tr.query(q)?))).collect::<ApiResult<_>>()?,
            )
        }
        "avg_bucket" | "max_bucket" | "min_bucket" | "sum_bucket" | "stats_bucket" => {
            let p = Params::new(name, ty, v, &["buckets_path", "gap_policy"])?;
            let stat = match ty {
                "avg_bucket" => BucketStat::Avg,
                "max_bucket" => BucketStat::Max,
                "min_bucket" => BucketStat::Min,
                "sum_bucket" => BucketStat::Sum,
                _ => BucketStat::Stats,
            };
            AggKind::Pipeline(Pipeline::Sibling {
                stat,
                path: buckets_path(&p)?,
                gap_policy: gap_policy(&p)?,
            })
        }
        "derivative" => {
            let p = Params::new(name, ty, v, &["buckets_path", "gap_policy"])?;
            AggKind::Pipeline(Pipeline::Derivative { path: buckets_path(&p)?, gap_policy: gap_policy(&p)? })
        }
        "cumulative_sum" => {
            let p = Params::new(name, ty, v, &["buckets_path"])?;
            AggKind::Pipeline(Pipeline::CumulativeSum { path: buckets_path(&p)? })
        }
        "bucket_sort" => {
            let p = Params::new(name, ty, v, &["sort", "from", "size", "gap_policy"])?;
            let sort = match p.obj.get("sort") {
                None => vec![],
                Some(Value::Array(items)) => {
                    items.iter().map(|s| sort_key(name, s)).collect::<ApiResult<_>>()?
                }
                Some(one) => vec![sort_key(name, one)?],
            };
            let size = p.obj.get("size").map(|_| p.count("size", 0)).transpose()?.map(|n| n as usize);
            if size == Some(0) {
                return Err(ApiError::parsing(format!("[size] must be a positive integer: [{name}]")));
            }
            AggKind::Pipeline(Pipeline::BucketSort {
                sort,
                from: p.count("from", 0)? as usize,
                size,
                gap_policy: gap_policy(&p)?,
            })
        }
        other => return Err(ApiError::unsupported(format!("the [{other}] aggregation (in [{name}])"))),
    })
}

/// A pipeline's `buckets_path`: one path (several named paths are `bucket_script`'s, which is not here).
fn buckets_path(p: &Params<'_>) -> ApiResult<BucketsPath> {
    match p.obj.get("buckets_path") {
        Some(Value::String(path)) => Ok(BucketsPath::parse(path)?),
        None => Err(ApiError::parsing(format!("Required parameter [buckets_path] missing in [{}]", p.name))),
        Some(_) => Err(ApiError::parsing(format!("[buckets_path] of [{}] must be a string", p.name))),
    }
}

/// A pipeline's `gap_policy`: `skip` (the default) or `keep_values` (the same here), or `insert_zeros`.
fn gap_policy(p: &Params<'_>) -> ApiResult<GapPolicy> {
    match p.obj.get("gap_policy").map(|g| g.as_str()) {
        None | Some(Some("skip" | "keep_values")) => Ok(GapPolicy::Skip),
        Some(Some("insert_zeros")) => Ok(GapPolicy::InsertZeros),
        Some(_) => Err(ApiError::parsing(format!(
            "[gap_policy] of [{}] must be skip, insert_zeros or keep_values",
            p.name
        ))),
    }
}

/// One key of a `bucket_sort`'s `sort`: `"path"` (ascending), `{"path": "desc"}` or
/// `{"path": {"order": "desc"}}`; `true` is descending.
fn sort_key(name: &str, v: &Value) -> ApiResult<(BucketsPath, bool)> {
    let bad =
        || ApiError::parsing(format!("[sort] of bucket_sort [{name}] must list paths with their order"));
    let (path, order) = match v {
        Value::String(path) => (path, None),
        Value::Object(m) if m.len() == 1 => {
            let (path, o) = m.iter().next().expect("one entry");
            let order = match o {
                Value::String(o) => o.as_str(),
                Value::Object(o) if o.keys().all(|k| k == "order") => {
                    o.get("order").and_then(Value::as_str).ok_or_else(bad)?
                }
                _ => return Err(bad()),
            };
            (path, Some(order))
        }
        _ => return Err(bad()),
    };
    let desc = match order {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(_) => return Err(bad()),
    };
    Ok((BucketsPath::parse(path)?, desc))
}

/// `keyed` of a `percentiles` or `percentile_ranks` aggregation: true unless it says otherwise.
fn keyed(p: &Params<'_>, name: &str) -> ApiResult<bool> {
    match p.obj.get("keyed") {
        None => Ok(true),
        Some(k) => {
            k.as_bool().ok_or_else(|| ApiError::parsing(format!("[keyed] of [{name}] must be a boolean")))
        }
    }
}

fn parse_order(name: &str, o: &Value) -> ApiResult<TermsOrder> {
    let one = match o {
        Value::Array(a) if a.len() == 1 => &a[0],
        Value::Array(_) => {
            return Err(ApiError::unsupported(format!("ordering [{name}] by more than one key")))
        }
        o => o,
    };
    let bad = || ApiError::parsing(format!("[order] of [{name}] must be like {{\"_count\": \"desc\"}}"));
    let m = one.as_object().filter(|m| m.len() == 1).ok_or_else(bad)?;
    let (k, dir) = m.iter().next().expect("one entry");
    let desc = match dir.as_str() {
        Some("desc") => true,
        Some("asc") => false,
        _ => return Err(bad()),
    };
    Ok(match (k.as_str(), desc) {
        ("_count", true) => TermsOrder::CountDesc,
        ("_count", false) => TermsOrder::CountAsc,
        ("_key" | "_term", false) => TermsOrder::KeyAsc,
        ("_key" | "_term", true) => TermsOrder::KeyDesc,
        // A sub-aggregation (`avg_price`, `prices.max`); the engine checks that it names a metric.
        (k, desc) if !k.starts_with('_') && !k.contains('>') && !k.contains('[') => {
            let (agg, stat) = match k.split_once('.') {
                Some((a, s)) => (a.to_string(), Some(s.to_string())),
                None => (k.to_string(), None),
            };
            TermsOrder::Metric { agg, stat, desc }
        }
        (k, _) => {
            return Err(ApiError::unsupported(format!(
                "ordering terms [{name}] by [{k}] (only _count, _key or a metric sub-aggregation)"
            )))
        }
    })
}

/// `fixed_interval`: a whole number of `ms`, `s`, `m`, `h` or `d`.
fn fixed_interval(name: &str, v: &Value) -> ApiResult<i64> {
    let s = v.as_str().unwrap_or_default();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    match n.parse::<i64>() {
        Ok(n) if n > 0 && ms > 0 => {
            n.checked_mul(ms).ok_or_else(|| ApiError::parsing("[fixed_interval] too large"))
        }
        _ => Err(ApiError::parsing(format!(
            "failed to parse [fixed_interval] {v} of [{name}]: a positive whole number of ms, s, m, h or d"
        ))),
    }
}

fn calendar_interval(name: &str, v: &Value) -> ApiResult<CalendarUnit> {
    Ok(match v.as_str().unwrap_or_default() {
        "minute" | "1m" => CalendarUnit::Minute,
        "hour" | "1h" => CalendarUnit::Hour,
        "day" | "1d" => CalendarUnit::Day,
        "week" | "1w" => CalendarUnit::Week,
        "month" | "1M" => CalendarUnit::Month,
        "quarter" | "1q" => CalendarUnit::Quarter,
        "year" | "1y" => CalendarUnit::Year,
        _ => {
            return Err(ApiError::parsing(format!(
                "The supplied interval {v} of [{name}] could not be parsed as a calendar interval (minute, hour, day, \
                 week, month, quarter, year, or 1m, 1h, 1d, 1w, 1M, 1q, 1y)"
            )))
        }
    })
}

/// The `aggregations` object of the response, of the indices of `schemas` (a field's type, for how its
/// keys and values print, is that of the first index that maps it: the engine aggregates a field only
/// where the indices agree on it, longs and doubles aside).
pub fn render(results: &[AggResult], aggs: &[Agg], schemas: &[&Schema]) -> Value {
    Value::Object(render_all(results, aggs, schemas))
}

/// The results of one level, whose definitions are `aggs` (by name: a level's results come in another
/// order than its definitions, pipelines last, and a derivative has none in a histogram's first bucket).
fn render_all(results: &[AggResult], aggs: &[Agg], schemas: &[&Schema]) -> Map<String, Value> {
    results
        .iter()
        .map(|r| {
            let a = aggs.iter().find(|a| a.name == r.name).expect("a result is of a defined aggregation");
            (r.name.clone(), render_one(&r.value, a, aggs, schemas))
        })
        .collect()
}

/// The type of field `f` in the first of `schemas` that maps it.
fn field_type(f: &str, schemas: &[&Schema]) -> Option<FieldType> {
    schemas.iter().find_map(|schema| schema.field_id(f).map(|id| schema.field(id).ty))
}

fn render_one(v: &AggValue, a: &Agg, level: &[Agg], schemas: &[&Schema]) -> Value {
    let ty = a.kind.field().and_then(|f| field_type(f, schemas));
    // Percentile ranks are percents, whatever the field.
    let date = ty == Some(FieldType::Date) && !matches!(a.kind, AggKind::PercentileRanks { .. });
    // A metric value, with its date form on date fields.
    let value = |x: Option<f64>, key: &str, out: &mut Map<String, Value>| {
        out.insert(key.into(), json!(x));
        if let (true, Some(x)) = (date, x) {
            out.insert(format!("{key}_as_string"), json!(format_date_millis(x as i64)));
        }
    };
    match v {
        AggValue::Stats { count, min, max, sum } => {
            let n = *count;
            let (min, max, avg) =
                if n == 0 { (None, None, None) } else { (Some(*min), Some(*max), Some(sum / n as f64)) };
            let mut out = Map::new();
            match a.kind {
                AggKind::Min(_) => value(min, "value", &mut out),
                AggKind::Max(_) => value(max, "value", &mut out),
                AggKind::Avg(_) => value(avg, "value", &mut out),
                AggKind::Sum(_) => {
                    out.insert("value".into(), json!(sum));
                }
                _ => {
                    out.insert("count".into(), json!(n));
                    value(min, "min", &mut out);
                    value(max, "max", &mut out);
                    value(avg, "avg", &mut out);
                    out.insert("sum".into(), json!(sum));
                }
            }
            Value::Object(out)
        }
        AggValue::Count(n) => json!({ "value": n }),
        AggValue::Value(x) => json!({ "value": x }),
        AggValue::BucketValue { value, keys } => {
            // Keys as the buckets' keys print as strings (`key_as_string` of dates), Elasticsearch's form.
            let of = match &a.kind {
                AggKind::Pipeline(Pipeline::Sibling { path, .. }) => {
                    level.iter().find(|s| s.name == path.aggs[0])
                }
                _ => None,
            };
            let kty = of.and_then(|s| s.kind.field()).and_then(|f| field_type(f, schemas));
            // Histogram keys are doubles whatever the field ("10.0"); numeric terms of a long field whole.
            let whole = kty == Some(FieldType::Long)
                && !of.is_some_and(|s| matches!(s.kind, AggKind::Histogram { .. }));
            let keys: Vec<String> = keys
                .iter()
                .map(|k| match k {
                    BucketKey::Str(s) => s.clone(),
                    BucketKey::Num(x) if kty == Some(FieldType::Date) => format_date_millis(*x as i64),
                    BucketKey::Num(x) if whole && x.fract() == 0.0 => format!("{}", *x as i64),
                    BucketKey::Num(x) => range_bound(Some(*x)),
                    BucketKey::Range { key, from, to } => {
                        key.clone().unwrap_or_else(|| format!("{}-{}", range_bound(*from), range_bound(*to)))
                    }
                    BucketKey::None => String::new(),
                })
                .collect();
            json!({ "value": value, "keys": keys })
        }
        AggValue::Percentiles(values) => {
            // Keys as Java prints a double ("50.0", "99.9"), as Elasticsearch keys them.
            let key = |p: f64| if p.fract() == 0.0 { format!("{p:.1}") } else { p.to_string() };
            if matches!(
                a.kind,
                AggKind::Percentiles { keyed: false, .. } | AggKind::PercentileRanks { keyed: false, .. }
            ) {
                let list: Vec<Value> = values
                    .iter()
                    .map(|&(p, x)| {
                        let mut out = Map::new();
                        out.insert("key".into(), json!(p));
                        value(x, "value", &mut out);
                        Value::Object(out)
                    })
                    .collect();
                json!({ "values": list })
            } else {
                let mut out = Map::new();
                for &(p, x) in values {
                    value(x, &key(p), &mut out);
                }
                json!({ "values": out })
            }
        }
        AggValue::Buckets { buckets, other_doc_count } => {
            let list: Vec<Value> = buckets.iter().map(|b| bucket(b, a, ty, schemas)).collect();
            match a.kind {
                AggKind::Terms { .. } => json!({
                    "doc_count_error_upper_bound": 0,
                    "sum_other_doc_count": other_doc_count,
                    "buckets": list,
                }),
                _ => json!({ "buckets": list }),
            }
        }
        AggValue::Single(b) => bucket(b, a, ty, schemas),
        AggValue::Keyed(buckets) => {
            let keyed: Map<String, Value> = buckets
                .iter()
                .map(|b| {
                    let BucketKey::Str(name) = &b.key else { unreachable!("filters buckets are named") };
                    (name.clone(), bucket(b, a, ty, schemas))
                })
                .collect();
            json!({ "buckets": keyed })
        }
    }
}

/// A number as Elasticsearch prints a key of a field of type `ty`: whole on long and date fields.
fn number(x: f64, ty: Option<FieldType>) -> Value {
    if matches!(ty, Some(FieldType::Long | FieldType::Date)) && x.fract() == 0.0 && x.abs() < 9.0e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// A range bound as Elasticsearch names it in a key (Java's `Double.toString`: `100.0`, `1.5`).
fn range_bound(x: Option<f64>) -> String {
    match x {
        None => "*".into(),
        Some(x) if x.fract() == 0.0 && x.abs() < 1e7 => format!("{x:.1}"),
        Some(x) => format!("{x}"),
    }
}

fn bucket(b: &Bucket, a: &Agg, ty: Option<FieldType>, schemas: &[&Schema]) -> Value {
    let mut out = Map::new();
    match &b.key {
        BucketKey::None => {}
        BucketKey::Str(s) => {
            if !matches!(a.kind, AggKind::Filters(_)) {
                out.insert("key".into(), json!(s));
            }
        }
        BucketKey::Num(x) => {
            if ty == Some(FieldType::Date) {
                out.insert("key_as_string".into(), json!(format_date_millis(*x as i64)));
            }
            let key = match a.kind {
                // Histogram keys are doubles in Elasticsearch, whatever the field.
                AggKind::Histogram { .. } => json!(x),
                _ => number(*x, ty),
            };
            out.insert("key".into(), key);
        }
        BucketKey::Range { key, from, to } => {
            let name = key.clone().unwrap_or_else(|| format!("{}-{}", range_bound(*from), range_bound(*to)));
            out.insert("key".into(), json!(name));
            if let Some(f) = from {
                out.insert("from".into(), json!(f));
            }
            if let Some(t) = to {
                out.insert("to".into(), json!(t));
            }
        }
    }
    out.insert("doc_count".into(), json!(b.doc_count));
    out.extend(render_all(&b.aggs, &a.aggs, schemas));
    Value::Object(out)
}
