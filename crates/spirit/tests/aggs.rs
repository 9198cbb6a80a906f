//! Aggregations equal a brute-force computation over the live documents: random documents (one or two
//! keyword tags or none, a long, a double and a date, each sometimes missing), some deleted and some
//! replaced, in fresh, flushed and merged segments, in indexes of 1 and 3 shards; every aggregation kind,
//! nested, under a query that matches everything and under one that matches part. The sharded index must
//! answer exactly as the one-shard index does, and so must the documents split over two indices (of 1 and
//! 2 shards) aggregated together (prices are quarters, so every sum is exact whatever the order
//! of additions).

mod common;

use common::aggs::{agg, open};
use proptest::prelude::*;
use serde_json::json;
use spirit::query::aggs::{
    Agg, AggKind, AggResult, AggValue, BucketKey, DateInterval, RangeSpec, TermsFilter, TermsOrder,
};
use spirit::query::{parse, Query};
use spirit::schema::{format_date_millis, CalendarUnit};
use spirit::Index;
use std::collections::{BTreeMap, BTreeSet};

const DAY: i64 = 86_400_000;

#[derive(Clone, Debug)]
struct Doc {
    tags: Vec<String>,
    n: Option<i64>,
    price: Option<f64>,
    at: Option<i64>,
    even: bool,
}

fn gen_doc(x: &mut u64, i: usize) -> Doc {
    let mut r = |m: u64| {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % m
    };
    let tags = match r(5) {
        0 => vec![],
        1 => vec![format!("t{}", r(3)), format!("u{}", r(2))],
        _ => vec![format!("t{}", r(6))],
    };
    Doc {
        tags,
        n: (r(5) != 0).then(|| r(60) as i64 - 20),
        price: (r(4) != 0).then(|| r(400) as f64 * 0.25),
        at: (r(6) != 0).then(|| 1_420_070_400_000 + r(400) as i64 * DAY / 3),
        even: i.is_multiple_of(2),
    }
}

fn json_of(d: &Doc, id: usize) -> serde_json::Value {
    let mut v = json!({"_id": id.to_string(), "body": if d.even { "even" } else { "odd" }});
    if !d.tags.is_empty() {
        v["tag"] = json!(d.tags);
    }
    if let Some(n) = d.n {
        v["n"] = json!(n);
    }
    if let Some(p) = d.price {
        v["price"] = json!(p);
    }
    if let Some(t) = d.at {
        v["at"] = json!(format_date_millis(t));
    }
    v
}

/// The aggregations every case runs.
fn requests() -> Vec<Agg> {
    let avg_n = || agg("avg_n", AggKind::Avg("n".into()), vec![]);
    vec![
        agg(
            "tags",
            AggKind::Terms {
                field: "tag".into(),
                size: 3,
                min_doc_count: 1,
                order: TermsOrder::CountDesc,
                filter: Default::default(),
            },
            vec![avg_n(), agg("prices", AggKind::Stats("price".into()), vec![])],
        ),
        agg(
            "tags_by_key",
            AggKind::Terms {
                field: "tag".into(),
                size: 100,
                min_doc_count: 1,
                order: TermsOrder::KeyDesc,
                filter: Default::default(),
            },
            vec![],
        ),
        agg(
            "tags_by_avg",
            AggKind::Terms {
                field: "tag".into(),
                size: 2,
                min_doc_count: 1,
                order: TermsOrder::Metric { agg: "avg_n".into(), stat: None, desc: true },
                filter: Default::default(),
            },
            vec![avg_n()],
        ),
        agg(
            "ns_by_max_price",
            AggKind::Terms {
                field: "n".into(),
                size: 3,
                min_doc_count: 1,
                order: TermsOrder::Metric { agg: "prices".into(), stat: Some("max".into()), desc: false },
                filter: Default::default(),
            },
            vec![agg("prices", AggKind::Stats("price".into()), vec![])],
        ),
        agg(
            "ns",
            AggKind::Terms {
                field: "n".into(),
                size: 4,
                min_doc_count: 1,
                order: TermsOrder::CountAsc,
                filter: Default::default(),
            },
            vec![],
        ),
        agg(
            "hist",
            AggKind::Histogram { field: "n".into(), interval: 10.0, offset: 5.0, min_doc_count: 0 },
            vec![agg(
                "tags",
                AggKind::Terms {
                    field: "tag".into(),
                    size: 2,
                    min_doc_count: 1,
                    order: TermsOrder::KeyAsc,
                    filter: Default::default(),
                },
                vec![],
            )],
        ),
        agg(
            "months",
            AggKind::DateHistogram {
                field: "at".into(),
                interval: DateInterval::Calendar(CalendarUnit::Month),
                min_doc_count: 0,
            },
            vec![agg("max_price", AggKind::Max("price".into()), vec![])],
        ),
        agg(
            "weeks",
            AggKind::DateHistogram {
                field: "at".into(),
                interval: DateInterval::Fixed(7 * DAY),
                min_doc_count: 1,
            },
            vec![],
        ),
        agg(
            "ranges",
            AggKind::Range {
                field: "price".into(),
                ranges: vec![
                    RangeSpec { key: None, from: None, to: Some(25.0) },
                    RangeSpec { key: Some("mid".into()), from: Some(25.0), to: Some(75.0) },
                    RangeSpec { key: None, from: Some(50.0), to: None },
                ],
            },
            vec![agg("n_count", AggKind::ValueCount("n".into()), vec![])],
        ),
        agg(
            "odd",
            AggKind::Filter(parse("body:odd").unwrap()),
            vec![
                agg("distinct_tags", AggKind::Cardinality("tag".into()), vec![]),
                agg("tag_values", AggKind::ValueCount("tag".into()), vec![]),
            ],
        ),
        agg(
            "split",
            AggKind::Filters(vec![
                ("even".into(), parse("body:even").unwrap()),
                ("t1".into(), parse("tag:t1").unwrap()),
            ]),
            vec![agg("sum_price", AggKind::Sum("price".into()), vec![])],
        ),
        agg("min_n", AggKind::Min("n".into()), vec![]),
        agg("min_at", AggKind::Min("at".into()), vec![]),
        agg("distinct_n", AggKind::Cardinality("n".into()), vec![]),
        agg(
            "pct_price",
            AggKind::Percentiles {
                field: "price".into(),
                percents: vec![0.0, 10.0, 50.0, 99.9, 100.0],
                keyed: true,
            },
            vec![],
        ),
        agg(
            "ranks_price",
            AggKind::PercentileRanks {
                field: "price".into(),
                values: vec![-1.0, 0.0, 10.0, 50.25, 99.75, 1000.0],
                keyed: true,
            },
            vec![],
        ),
        agg(
            "unmapped",
            AggKind::Terms {
                field: "nope".into(),
                size: 10,
                min_doc_count: 1,
                order: TermsOrder::CountDesc,
                filter: Default::default(),
            },
            vec![],
        ),
        agg(
            "tags_filtered",
            AggKind::Terms {
                field: "tag".into(),
                size: 10,
                min_doc_count: 1,
                order: TermsOrder::KeyAsc,
                filter: TermsFilter {
                    include: Some(["t0", "t2", "u1", "zz"].map(String::from).to_vec()),
                    exclude: vec!["t2".into()],
                    missing: Some("t0".into()),
                    ..Default::default()
                },
            },
            vec![avg_n()],
        ),
        agg(
            "ns_missing",
            AggKind::Terms {
                field: "n".into(),
                size: 5,
                min_doc_count: 1,
                order: TermsOrder::CountDesc,
                filter: TermsFilter {
                    include: None,
                    exclude: vec!["3".into(), "-20".into()],
                    missing: Some("7".into()),
                    ..Default::default()
                },
            },
            vec![],
        ),
        agg(
            "tags_regex",
            AggKind::Terms {
                field: "tag".into(),
                size: 10,
                min_doc_count: 1,
                order: TermsOrder::KeyAsc,
                filter: TermsFilter {
                    include_pattern: Some("[tu].*".into()),
                    exclude_pattern: Some("t[0-2]|u1".into()),
                    missing: Some("none".into()),
                    ..Default::default()
                },
            },
            vec![],
        ),
        agg(
            "unmapped_missing",
            AggKind::Terms {
                field: "nope".into(),
                size: 10,
                min_doc_count: 1,
                order: TermsOrder::CountDesc,
                filter: TermsFilter { missing: Some("x".into()), ..Default::default() },
            },
            vec![],
        ),
    ]
}

/// A result with numbers rounded to what the brute force computes exactly.
type Flat = Vec<(String, String)>;

fn flatten(prefix: &str, results: &[AggResult], out: &mut Flat) {
    for r in results {
        let p = format!("{prefix}/{}", r.name);
        match &r.value {
            AggValue::Stats { count, min, max, sum } => {
                out.push((p, format!("n={count} min={min} max={max} sum={sum}")));
            }
            AggValue::Count(n) => out.push((p, n.to_string())),
            AggValue::Value(v) => out.push((p, format!("{v:?}"))),
            AggValue::BucketValue { value, keys } => out.push((p, format!("{value:?} {keys:?}"))),
            AggValue::Percentiles(values) => {
                for (pct, v) in values {
                    out.push((format!("{p}[{pct}]"), format!("{v:?}")));
                }
            }
            AggValue::Buckets { buckets, other_doc_count } => {
                out.push((format!("{p}#other"), other_doc_count.to_string()));
                for b in buckets {
                    let k = key(&b.key);
                    out.push((format!("{p}[{k}]"), b.doc_count.to_string()));
                    flatten(&format!("{p}[{k}]"), &b.aggs, out);
                }
            }
            AggValue::Single(b) => {
                out.push((p.clone(), b.doc_count.to_string()));
                flatten(&p, &b.aggs, out);
            }
            AggValue::Keyed(buckets) => {
                for b in buckets {
                    let k = key(&b.key);
                    out.push((format!("{p}[{k}]"), b.doc_count.to_string()));
                    flatten(&format!("{p}[{k}]"), &b.aggs, out);
                }
            }
        }
    }
}

fn key(k: &BucketKey) -> String {
    match k {
        BucketKey::None => String::new(),
        BucketKey::Str(s) => s.clone(),
        BucketKey::Num(x) => x.to_string(),
        BucketKey::Range { key, from, to } => format!("{key:?}:{from:?}:{to:?}"),
    }
}

/// The documents of each tag among `ds`.
fn tag_counts<'a>(ds: &[&'a Doc]) -> BTreeMap<String, Vec<&'a Doc>> {
    let mut m: BTreeMap<String, Vec<&'a Doc>> = BTreeMap::new();
    for d in ds {
        for t in &d.tags {
            m.entry(t.clone()).or_default().push(*d);
        }
    }
    m
}

/// Two buckets' ordering values, ascending or descending, a bucket without one after any with one.
fn values_missing_last(x: Option<f64>, y: Option<f64>, desc: bool) -> std::cmp::Ordering {
    match (x, y) {
        (Some(x), Some(y)) if desc => y.total_cmp(&x),
        (Some(x), Some(y)) => x.total_cmp(&y),
        _ => y.is_some().cmp(&x.is_some()),
    }
}

/// The brute force: the same flattened answer computed from the live documents `docs`.
fn expected(docs: &[&Doc]) -> Flat {
    let mut out = vec![];
    let stats = |p: String, xs: &[f64], out: &mut Flat| {
        let (mut min, mut max, mut sum) = (f64::INFINITY, f64::NEG_INFINITY, 0.0);
        for &x in xs {
            min = min.min(x);
            max = max.max(x);
            sum += x;
        }
        out.push((p, format!("n={} min={min} max={max} sum={sum}", xs.len())));
    };
    let ns = |ds: &[&Doc]| ds.iter().filter_map(|d| d.n.map(|n| n as f64)).collect::<Vec<_>>();
    let prices = |ds: &[&Doc]| ds.iter().filter_map(|d| d.price).collect::<Vec<_>>();
    // tags: size 3 by count desc, key asc; with avg of n and stats of price.
    let tc = tag_counts(docs);
    let mut rows: Vec<(&String, &Vec<&Doc>)> = tc.iter().collect();
    rows.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
    out.push(("/tags#other".into(), rows.iter().skip(3).map(|r| r.1.len()).sum::<usize>().to_string()));
    for (t, ds) in rows.iter().take(3) {
        out.push((format!("/tags[{t}]"), ds.len().to_string()));
        stats(format!("/tags[{t}]/avg_n"), &ns(ds), &mut out);
        stats(format!("/tags[{t}]/prices"), &prices(ds), &mut out);
    }
    // tags_by_key: every tag, key descending.
    out.push(("/tags_by_key#other".into(), "0".into()));
    for (t, ds) in tc.iter().rev() {
        out.push((format!("/tags_by_key[{t}]"), ds.len().to_string()));
    }
    // tags_by_avg: the 2 tags with the highest average n (tags without one last), ties by key; and
    // ns_by_max_price: the 3 values of n whose documents' largest price is lowest.
    let avg = |ds: &[&Doc]| {
        let xs = ns(ds);
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    let mut by_avg: Vec<(&String, &Vec<&Doc>)> = tc.iter().collect();
    by_avg.sort_by(|a, b| values_missing_last(avg(a.1), avg(b.1), true).then(a.0.cmp(b.0)));
    out.push((
        "/tags_by_avg#other".into(),
        by_avg.iter().skip(2).map(|r| r.1.len()).sum::<usize>().to_string(),
    ));
    for (t, ds) in by_avg.iter().take(2) {
        out.push((format!("/tags_by_avg[{t}]"), ds.len().to_string()));
        stats(format!("/tags_by_avg[{t}]/avg_n"), &ns(ds), &mut out);
    }
    let mut by_n: BTreeMap<i64, Vec<&Doc>> = BTreeMap::new();
    for d in docs {
        if let Some(n) = d.n {
            by_n.entry(n).or_default().push(*d);
        }
    }
    let max_price = |ds: &[&Doc]| prices(ds).into_iter().reduce(f64::max);
    let mut by_max: Vec<(&i64, &Vec<&Doc>)> = by_n.iter().collect();
    by_max.sort_by(|a, b| values_missing_last(max_price(a.1), max_price(b.1), false).then(a.0.cmp(b.0)));
    out.push((
        "/ns_by_max_price#other".into(),
        by_max.iter().skip(3).map(|r| r.1.len()).sum::<usize>().to_string(),
    ));
    for (n, ds) in by_max.iter().take(3) {
        let k = format!("/ns_by_max_price[{}]", **n as f64);
        out.push((k.clone(), ds.len().to_string()));
        stats(format!("{k}/prices"), &prices(ds), &mut out);
    }
    // ns: terms on a long, 4 by count ascending, ties by value.
    let mut nc: BTreeMap<i64, usize> = BTreeMap::new();
    for d in docs {
        if let Some(n) = d.n {
            *nc.entry(n).or_default() += 1;
        }
    }
    let mut nrows: Vec<(i64, usize)> = nc.into_iter().collect();
    nrows.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    out.push(("/ns#other".into(), nrows.iter().skip(4).map(|r| r.1).sum::<usize>().to_string()));
    for (n, c) in nrows.iter().take(4) {
        out.push((format!("/ns[{}]", *n as f64), c.to_string()));
    }
    // hist: interval 10 from offset 5, empty buckets filled; tags under each, 2 by key.
    out.push(("/hist#other".into(), "0".into()));
    let bucket_of = |n: i64| ((n as f64 - 5.0) / 10.0).floor() as i64;
    let with_n: Vec<&Doc> = docs.iter().copied().filter(|d| d.n.is_some()).collect();
    if let (Some(lo), Some(hi)) = (
        with_n.iter().map(|d| bucket_of(d.n.unwrap())).min(),
        with_n.iter().map(|d| bucket_of(d.n.unwrap())).max(),
    ) {
        for b in lo..=hi {
            let ds: Vec<&Doc> = with_n.iter().copied().filter(|d| bucket_of(d.n.unwrap()) == b).collect();
            let k = format!("/hist[{}]", b as f64 * 10.0 + 5.0);
            out.push((k.clone(), ds.len().to_string()));
            let tc = tag_counts(&ds);
            out.push((
                format!("{k}/tags#other"),
                tc.values().skip(2).map(Vec::len).sum::<usize>().to_string(),
            ));
            for (t, tds) in tc.iter().take(2) {
                out.push((format!("{k}/tags[{t}]"), tds.len().to_string()));
            }
        }
    }
    // months: calendar months, empty ones filled; max price in each.
    out.push(("/months#other".into(), "0".into()));
    let with_at: Vec<&Doc> = docs.iter().copied().filter(|d| d.at.is_some()).collect();
    let month = |t: i64| CalendarUnit::Month.floor(t);
    if let (Some(lo), Some(hi)) = (
        with_at.iter().map(|d| month(d.at.unwrap())).min(),
        with_at.iter().map(|d| month(d.at.unwrap())).max(),
    ) {
        let mut m = lo;
        while m <= hi {
            let ds: Vec<&Doc> = with_at.iter().copied().filter(|d| month(d.at.unwrap()) == m).collect();
            let k = format!("/months[{}]", m as f64);
            out.push((k.clone(), ds.len().to_string()));
            let ps = prices(&ds);
            let max = ps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let min = ps.iter().copied().fold(f64::INFINITY, f64::min);
            out.push((
                format!("{k}/max_price"),
                format!("n={} min={min} max={max} sum={}", ps.len(), ps.iter().fold(0.0, |a, b| a + b)),
            ));
            m = CalendarUnit::Month.next(m);
        }
    }
    // weeks: fixed 7 days from the epoch, only non-empty.
    out.push(("/weeks#other".into(), "0".into()));
    let mut weeks: BTreeMap<i64, usize> = BTreeMap::new();
    for d in &with_at {
        *weeks.entry(d.at.unwrap().div_euclid(7 * DAY) * 7 * DAY).or_default() += 1;
    }
    for (w, c) in weeks {
        out.push((format!("/weeks[{}]", w as f64), c.to_string()));
    }
    // ranges on price, with the count of n values in each.
    out.push(("/ranges#other".into(), "0".into()));
    for (key, from, to) in [
        (None, None, Some(25.0)),
        (Some("mid".to_string()), Some(25.0), Some(75.0)),
        (None, Some(50.0), None),
    ] {
        let ds: Vec<&Doc> = docs
            .iter()
            .copied()
            .filter(|d| d.price.is_some_and(|p| from.is_none_or(|f| p >= f) && to.is_none_or(|t| p < t)))
            .collect();
        let k = format!("/ranges[{key:?}:{from:?}:{to:?}]");
        out.push((k.clone(), ds.len().to_string()));
        out.push((format!("{k}/n_count"), ns(&ds).len().to_string()));
    }
    // odd: a filter, with distinct tags and tag values.
    let odd: Vec<&Doc> = docs.iter().copied().filter(|d| !d.even).collect();
    out.push(("/odd".into(), odd.len().to_string()));
    let otc = tag_counts(&odd);
    out.push(("/odd/distinct_tags".into(), otc.len().to_string()));
    out.push(("/odd/tag_values".into(), otc.values().map(Vec::len).sum::<usize>().to_string()));
    // split: named filters with the sum of prices.
    for (name, pred) in [
        ("even", Box::new(|d: &Doc| d.even) as Box<dyn Fn(&Doc) -> bool>),
        ("t1", Box::new(|d: &Doc| d.tags.iter().any(|t| t == "t1"))),
    ] {
        let ds: Vec<&Doc> = docs.iter().copied().filter(|d| pred(d)).collect();
        out.push((format!("/split[{name}]"), ds.len().to_string()));
        stats(format!("/split[{name}]/sum_price"), &prices(&ds), &mut out);
    }
    stats("/min_n".into(), &ns(docs), &mut out);
    stats(
        "/min_at".into(),
        &docs.iter().filter_map(|d| d.at.map(|t| t as f64)).collect::<Vec<_>>(),
        &mut out,
    );
    out.push((
        "/distinct_n".into(),
        docs.iter().filter_map(|d| d.n).collect::<BTreeSet<_>>().len().to_string(),
    ));
    // Percentiles of price: between the sorted values around rank p/100·(n − 1), by that share.
    let mut ps = prices(docs);
    ps.sort_by(f64::total_cmp);
    for pct in [0.0, 10.0, 50.0, 99.9, 100.0] {
        let v = (!ps.is_empty()).then(|| {
            let rank = pct / 100.0 * (ps.len() - 1) as f64;
            let below = ps[rank as usize];
            match ps.get(rank as usize + 1) {
                Some(&above) if rank.fract() > 0.0 => below + (above - below) * rank.fract(),
                _ => below,
            }
        });
        out.push((format!("/pct_price[{pct}]"), format!("{v:?}")));
    }
    // Percentile ranks of price: the share of prices at or below each value, in percent.
    for x in [-1.0, 0.0, 10.0, 50.25, 99.75, 1000.0] {
        let v =
            (!ps.is_empty()).then(|| ps.iter().filter(|&&p| p <= x).count() as f64 * 100.0 / ps.len() as f64);
        out.push((format!("/ranks_price[{x}]"), format!("{v:?}")));
    }
    out.push(("/unmapped#other".into(), "0".into()));
    // tags_filtered: documents without a tag count as t0 (merged into its bucket); only t0, t2, u1, zz, but
    // not t2; by key.
    let mut tf = tag_counts(docs);
    let untagged: Vec<&Doc> = docs.iter().copied().filter(|d| d.tags.is_empty()).collect();
    tf.entry("t0".into()).or_default().extend(untagged);
    out.push(("/tags_filtered#other".into(), "0".into()));
    for (t, ds) in tf.iter().filter(|(t, ds)| !ds.is_empty() && ["t0", "u1"].contains(&t.as_str())) {
        out.push((format!("/tags_filtered[{t}]"), ds.len().to_string()));
        stats(format!("/tags_filtered[{t}]/avg_n"), &ns(ds), &mut out);
    }
    // ns_missing: documents without n count as 7; 3 and -20 left out; 5 by count descending, ties by value.
    let mut nm: BTreeMap<i64, usize> = BTreeMap::new();
    for d in docs {
        *nm.entry(d.n.unwrap_or(7)).or_default() += 1;
    }
    let mut nm: Vec<(i64, usize)> = nm.into_iter().filter(|(n, _)| *n != 3 && *n != -20).collect();
    nm.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out.push(("/ns_missing#other".into(), nm.iter().skip(5).map(|r| r.1).sum::<usize>().to_string()));
    for (n, c) in nm.iter().take(5) {
        out.push((format!("/ns_missing[{}]", *n as f64), c.to_string()));
    }
    // tags_regex: tags matching [tu].* but not t0, t1, t2 or u1 (so t3 to t5, u0), by key; the untagged
    // ones' `none` matches neither.
    out.push(("/tags_regex#other".into(), "0".into()));
    for (t, ds) in tag_counts(docs) {
        if !["t0", "t1", "t2", "u1"].contains(&t.as_str()) {
            out.push((format!("/tags_regex[{t}]"), ds.len().to_string()));
        }
    }
    // unmapped_missing: every document as `x`.
    out.push(("/unmapped_missing#other".into(), "0".into()));
    if !docs.is_empty() {
        out.push(("/unmapped_missing[x]".into(), docs.len().to_string()));
    }
    out
}

/// Metrics report every statistic; the brute force computes them all, so compare them all.
fn normalize(mut f: Flat) -> Flat {
    f.sort();
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn aggregations_equal_brute_force(
        seed in 1u64..u64::MAX,
        count in 0usize..70,
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        replaces in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
        stage in 0u8..3,
    ) {
        let mut x = seed;
        let mut docs: Vec<Option<Doc>> = (0..count).map(|i| Some(gen_doc(&mut x, i))).collect();
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let indexes = [open(dirs[0].path(), 1), open(dirs[1].path(), 3)];
        // The same documents split over two indices (of 1 and 2 shards): document i lives in `split[owner(i)]`.
        let split = [open(dirs[2].path(), 1), open(dirs[3].path(), 2)];
        let owner = |i: usize| (seed >> (i % 61)) as usize & 1;
        for index in &indexes {
            for (i, d) in docs.iter().enumerate() {
                index.add(json_of(d.as_ref().unwrap(), i)).unwrap();
            }
        }
        for (i, d) in docs.iter().enumerate() {
            split[owner(i)].add(json_of(d.as_ref().unwrap(), i)).unwrap();
        }
        if count > 0 {
            for r in &replaces {
                let i = r.index(count);
                let d = gen_doc(&mut x, i);
                for index in indexes.iter().chain([&split[owner(i)]]) {
                    index.add(json_of(&d, i)).unwrap();
                }
                docs[i] = Some(d);
            }
            for d in &deletes {
                let i = d.index(count);
                for index in indexes.iter().chain([&split[owner(i)]]) {
                    index.delete(&i.to_string()).unwrap();
                }
                docs[i] = None;
            }
        }
        for index in indexes.iter().chain(&split) {
            match stage {
                1 => {
                    index.seal().unwrap();
                    index.wait_engraved().unwrap();
                }
                2 => index.force_merge(1).map(|_| ()).unwrap(),
                _ => {}
            }
        }
        let reqs = requests();
        for (query, pred) in [(Query::MatchAll, Box::new(|_: &Doc| true) as Box<dyn Fn(&Doc) -> bool>), (parse("tag:t0 OR tag:t2").unwrap(), Box::new(|d: &Doc| d.tags.iter().any(|t| t == "t0" || t == "t2")))] {
            let live: Vec<&Doc> = docs.iter().flatten().filter(|d| pred(d)).collect();
            let (total, one) = indexes[0].aggregate(&query, &reqs).unwrap();
            prop_assert_eq!(total, live.len() as u64);
            let mut got = vec![];
            flatten("", &one, &mut got);
            prop_assert_eq!(normalize(got), normalize(expected(&live)), "query {:?}", query);
            let (total3, three) = indexes[1].aggregate(&query, &reqs).unwrap();
            prop_assert_eq!(total3, total);
            prop_assert_eq!(&three, &one, "3 shards against 1");
            let targets: Vec<(&Index, &Query, &[Agg])> = split.iter().map(|x| (x, &query, &reqs[..])).collect();
            let (total_split, two) = Index::aggregate_indices(&targets).unwrap();
            prop_assert_eq!(total_split, total);
            prop_assert_eq!(&two, &one, "two indices against one");
        }
    }
}

#[test]
fn refusals_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path(), 1);
    index.add(json!({"_id": "1", "body": "hello", "tag": "a", "n": 3})).unwrap();
    let run = |a: Agg| index.aggregate(&Query::MatchAll, &[a]).map(|r| r.1);
    let err = run(agg(
        "t",
        AggKind::Terms {
            field: "body".into(),
            size: 10,
            min_doc_count: 1,
            order: TermsOrder::CountDesc,
            filter: Default::default(),
        },
        vec![],
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("Text fields are not optimised"), "{err}");
    let err = run(agg("m", AggKind::Avg("tag".into()), vec![])).unwrap_err().to_string();
    assert!(err.contains("[keyword] is not supported for aggregation [avg]"), "{err}");
    let err = run(agg(
        "d",
        AggKind::DateHistogram { field: "n".into(), interval: DateInterval::Fixed(DAY), min_doc_count: 0 },
        vec![],
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("[long] is not supported for aggregation [date_histogram]"), "{err}");
    let err = run(agg("m", AggKind::Max("n".into()), vec![agg("x", AggKind::Min("n".into()), vec![])]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot accept sub-aggregations"), "{err}");
    // A histogram whose empty buckets would pass the bucket limit is refused, not built.
    index.add(json!({"_id": "2", "n": 1_000_000_000})).unwrap();
    let err = run(agg(
        "h",
        AggKind::Histogram { field: "n".into(), interval: 1.0, offset: 0.0, min_doc_count: 0 },
        vec![],
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("too many buckets"), "{err}");
    // Without empty buckets it is two.
    let r = run(agg(
        "h",
        AggKind::Histogram { field: "n".into(), interval: 1.0, offset: 0.0, min_doc_count: 1 },
        vec![],
    ))
    .unwrap();
    let AggValue::Buckets { buckets, .. } = &r[0].value else { panic!("buckets") };
    assert_eq!(
        buckets.iter().map(|b| (b.key.clone(), b.doc_count)).collect::<Vec<_>>(),
        vec![(BucketKey::Num(3.0), 1), (BucketKey::Num(1e9), 1)]
    );
    // Metrics over no values: infinite bounds and a zero count (rendered as null by the server).
    let r = run(agg("s", AggKind::Stats("price".into()), vec![])).unwrap();
    assert_eq!(
        r[0].value,
        AggValue::Stats { count: 0, min: f64::INFINITY, max: f64::NEG_INFINITY, sum: 0.0 }
    );
    // -0 and 0 are one value.
    index.add(json!({"_id": "3", "price": -0.0})).unwrap();
    index.add(json!({"_id": "4", "price": 0.0})).unwrap();
    let r = run(agg("c", AggKind::Cardinality("price".into()), vec![])).unwrap();
    assert_eq!(r[0].value, AggValue::Count(1));
    let terms = AggKind::Terms {
        field: "price".into(),
        size: 10,
        min_doc_count: 1,
        order: TermsOrder::CountDesc,
        filter: Default::default(),
    };
    let r = run(agg("t", terms, vec![])).unwrap();
    let AggValue::Buckets { buckets, .. } = &r[0].value else { panic!("buckets") };
    assert_eq!(buckets.len(), 1);
    assert_eq!(buckets[0].doc_count, 2);
}

/// A real-time index: documents added after the request pinned its snapshot are in no bucket, and every
/// document acknowledged before it is.
#[test]
fn sees_every_acknowledged_document() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path(), 1);
    let reqs = [agg(
        "tags",
        AggKind::Terms {
            field: "tag".into(),
            size: 10,
            min_doc_count: 1,
            order: TermsOrder::KeyAsc,
            filter: Default::default(),
        },
        vec![],
    )];
    for i in 0..50u64 {
        index.add(json!({"_id": i.to_string(), "tag": format!("t{}", i % 3)})).unwrap();
        let (total, r) = index.aggregate(&Query::MatchAll, &reqs).unwrap();
        assert_eq!(total, i + 1);
        let AggValue::Buckets { buckets, .. } = &r[0].value else { panic!("buckets") };
        assert_eq!(buckets.iter().map(|b| b.doc_count).sum::<u64>(), i + 1, "after {} adds", i + 1);
    }
}
