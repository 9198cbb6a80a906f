//! Pipeline aggregations equal their definitions, computed here from the document aggregations they read
//! (which `tests/aggs.rs` checks against a brute force): derivatives, cumulative sums and bucket sorts of a
//! monthly date histogram and of keyword terms, and every sibling statistic, with both gap policies, on
//! paths through metrics, `stats`/`percentiles` values, `_count`, a filter bucket and another pipeline.
//! Random documents, some deleted, in fresh and merged segments; the same documents in 1 and 3 shards and
//! split over two indices answer alike. Misplaced pipelines and bad paths are errors.

mod common;

use common::aggs::{agg, open};
use proptest::prelude::*;
use serde_json::json;
use spirit::query::aggs::{Agg, AggKind, AggResult, AggValue, Bucket, BucketKey, DateInterval, TermsOrder};
use spirit::query::pipeline::{BucketStat, BucketsPath, GapPolicy, Pipeline};
use spirit::query::{parse, Query};
use spirit::schema::{format_date_millis, CalendarUnit};
use spirit::Index;

const DAY: i64 = 86_400_000;

/// A random document: a tag of six, and a long, a price in quarters and a date over 15 months, each often
/// missing (so months and tags have gaps).
fn gen_doc(x: &mut u64, i: usize) -> serde_json::Value {
    let mut r = |m: u64| common::xorshift(x) % m;
    let mut v = json!({"_id": i.to_string(), "body": if i.is_multiple_of(2) { "even" } else { "odd" }});
    if r(4) != 0 {
        v["tag"] = json!(format!("t{}", r(6)));
    }
    if r(3) != 0 {
        v["n"] = json!(r(40) as i64 - 10);
    }
    if r(3) != 0 {
        v["price"] = json!(r(400) as f64 * 0.25);
    }
    if r(5) != 0 {
        v["at"] = json!(format_date_millis(1_420_070_400_000 + r(450) as i64 * DAY));
    }
    v
}

fn path(p: &str) -> BucketsPath {
    BucketsPath::parse(p).unwrap()
}

fn pipe(name: &str, p: Pipeline) -> Agg {
    agg(name, AggKind::Pipeline(p), vec![])
}

fn sibling(name: &str, stat: BucketStat, p: &str, gap_policy: GapPolicy) -> Agg {
    pipe(name, Pipeline::Sibling { stat, path: path(p), gap_policy })
}

fn terms(name: &str, subs: Vec<Agg>) -> Agg {
    let kind = AggKind::Terms {
        field: "tag".into(),
        size: 100,
        min_doc_count: 1,
        order: TermsOrder::KeyAsc,
        filter: Default::default(),
    };
    agg(name, kind, subs)
}

/// The monthly histogram's document aggregations, and with `pipelines` its parent pipelines too.
fn months(pipelines: bool) -> Agg {
    let mut subs = vec![
        agg("avg_price", AggKind::Avg("price".into()), vec![]),
        agg("p", AggKind::Percentiles { field: "price".into(), percents: vec![50.0], keyed: true }, vec![]),
        agg(
            "odd",
            AggKind::Filter(parse("body:odd").unwrap()),
            vec![agg("max_n", AggKind::Max("n".into()), vec![])],
        ),
    ];
    if pipelines {
        let skip = GapPolicy::Skip;
        subs.extend([
            pipe("d_avg", Pipeline::Derivative { path: path("avg_price"), gap_policy: skip }),
            pipe(
                "d_avg_z",
                Pipeline::Derivative { path: path("avg_price"), gap_policy: GapPolicy::InsertZeros },
            ),
            pipe("d_p", Pipeline::Derivative { path: path("p.50"), gap_policy: skip }),
            pipe("d_count", Pipeline::Derivative { path: path("_count"), gap_policy: skip }),
            pipe("cum", Pipeline::CumulativeSum { path: path("avg_price") }),
            pipe("cum_odd", Pipeline::CumulativeSum { path: path("odd>max_n") }),
            pipe("cum_odd_docs", Pipeline::CumulativeSum { path: path("odd._count") }),
        ]);
    }
    let kind = AggKind::DateHistogram {
        field: "at".into(),
        interval: DateInterval::Calendar(CalendarUnit::Month),
        min_doc_count: 0,
    };
    agg("months", kind, subs)
}

fn requests() -> Vec<Agg> {
    let skip = GapPolicy::Skip;
    let zeros = GapPolicy::InsertZeros;
    let avg_n = || agg("avg_n", AggKind::Avg("n".into()), vec![]);
    vec![
        months(true),
        sibling("max_month", BucketStat::Max, "months>avg_price", skip),
        sibling("min_month_z", BucketStat::Min, "months>avg_price", zeros),
        sibling("avg_docs", BucketStat::Avg, "months>_count", skip),
        sibling("avg_docs_dot", BucketStat::Avg, "months._count", skip),
        sibling("sum_odd", BucketStat::Sum, "months>odd>max_n", skip),
        sibling("stats_p", BucketStat::Stats, "months>p.50", skip),
        sibling("stats_p_z", BucketStat::Stats, "months>p.50", zeros),
        sibling("max_d", BucketStat::Max, "months>d_avg", skip),
        terms(
            "top_tags",
            vec![
                avg_n(),
                pipe(
                    "sort",
                    Pipeline::BucketSort {
                        sort: vec![(path("avg_n"), true), (path("_key"), false)],
                        from: 1,
                        size: Some(2),
                        gap_policy: skip,
                    },
                ),
            ],
        ),
        terms(
            "tags_z",
            vec![
                avg_n(),
                pipe(
                    "sort",
                    Pipeline::BucketSort {
                        sort: vec![(path("avg_n"), false)],
                        from: 0,
                        size: None,
                        gap_policy: zeros,
                    },
                ),
            ],
        ),
        terms(
            "tags_by_count",
            vec![pipe(
                "sort",
                Pipeline::BucketSort {
                    sort: vec![(path("_count"), true)],
                    from: 0,
                    size: Some(3),
                    gap_policy: skip,
                },
            )],
        ),
        sibling("min_tag", BucketStat::Min, "tags_z>avg_n", skip),
    ]
}

fn get<'a>(results: &'a [AggResult], name: &str) -> Option<&'a AggValue> {
    results.iter().find(|r| r.name == name).map(|r| &r.value)
}

fn buckets<'a>(results: &'a [AggResult], name: &str) -> &'a [Bucket] {
    match get(results, name) {
        Some(AggValue::Buckets { buckets, .. }) => buckets,
        other => panic!("{name}: {other:?}"),
    }
}

/// The value of a metric result: the mean of an `avg`, the value at the only percent, the max of a `max`.
fn avg(v: Option<&AggValue>) -> Option<f64> {
    match v {
        Some(AggValue::Stats { count, sum, .. }) => (*count > 0).then(|| sum / *count as f64),
        other => panic!("an avg: {other:?}"),
    }
}

fn max(v: Option<&AggValue>) -> Option<f64> {
    match v {
        Some(AggValue::Stats { count, max, .. }) => (*count > 0).then_some(*max),
        other => panic!("a max: {other:?}"),
    }
}

fn median(v: Option<&AggValue>) -> Option<f64> {
    match v {
        Some(AggValue::Percentiles(p)) => p[0].1,
        other => panic!("percentiles: {other:?}"),
    }
}

fn odd(b: &Bucket) -> &Bucket {
    match get(&b.aggs, "odd") {
        Some(AggValue::Single(inner)) => inner,
        other => panic!("a filter: {other:?}"),
    }
}

fn value(results: &[AggResult], name: &str) -> Option<f64> {
    match get(results, name) {
        Some(AggValue::Value(v)) => *v,
        other => panic!("{name}: {other:?}"),
    }
}

/// A sibling's expected value: `stat` of the (key, value) pairs, gaps already applied.
fn expect_sibling(results: &[AggResult], name: &str, stat: BucketStat, values: &[(BucketKey, f64)]) {
    let xs: Vec<f64> = values.iter().map(|v| v.1).collect();
    let got = get(results, name).unwrap_or_else(|| panic!("{name} missing"));
    let extreme = |x: Option<f64>| AggValue::BucketValue {
        value: x,
        keys: x.map_or(vec![], |x| values.iter().filter(|v| v.1 == x).map(|v| v.0.clone()).collect()),
    };
    let want = match stat {
        BucketStat::Avg => {
            AggValue::Value((!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64))
        }
        BucketStat::Sum => AggValue::Value(Some(xs.iter().sum())),
        BucketStat::Max => extreme(xs.iter().copied().reduce(f64::max)),
        BucketStat::Min => extreme(xs.iter().copied().reduce(f64::min)),
        BucketStat::Stats => AggValue::Stats {
            count: xs.len() as u64,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            sum: xs.iter().sum(),
        },
    };
    assert_eq!(got, &want, "{name}");
}

/// Checks every pipeline of [`requests`] in `r` against `plain`, the same aggregations without pipelines.
fn check(r: &[AggResult], plain: &[AggResult]) {
    let months = buckets(r, "months");
    let base = buckets(plain, "months");
    assert_eq!(months.len(), base.len());
    // Parent pipelines leave the buckets and their document aggregations as they were.
    for (m, b) in months.iter().zip(base) {
        assert_eq!((&m.key, m.doc_count), (&b.key, b.doc_count));
        for a in &b.aggs {
            assert_eq!(get(&m.aggs, &a.name), Some(&a.value), "{}", a.name);
        }
    }
    let avgs: Vec<Option<f64>> = base.iter().map(|b| avg(get(&b.aggs, "avg_price"))).collect();
    let medians: Vec<Option<f64>> = base.iter().map(|b| median(get(&b.aggs, "p"))).collect();
    let (mut cum, mut cum_odd, mut cum_odd_docs) = (0.0, 0.0, 0.0);
    for (i, m) in months.iter().enumerate() {
        if i == 0 {
            for d in ["d_avg", "d_avg_z", "d_p", "d_count"] {
                assert_eq!(get(&m.aggs, d), None, "no {d} in the first bucket");
            }
        } else {
            let diff = |xs: &[Option<f64>]| xs[i].zip(xs[i - 1]).map(|(a, b)| a - b);
            assert_eq!(value(&m.aggs, "d_avg"), diff(&avgs));
            assert_eq!(value(&m.aggs, "d_avg_z"), Some(avgs[i].unwrap_or(0.0) - avgs[i - 1].unwrap_or(0.0)));
            assert_eq!(value(&m.aggs, "d_p"), diff(&medians));
            assert_eq!(value(&m.aggs, "d_count"), Some(m.doc_count as f64 - months[i - 1].doc_count as f64));
        }
        cum += avgs[i].unwrap_or(0.0);
        cum_odd += max(get(&odd(m).aggs, "max_n")).unwrap_or(0.0);
        cum_odd_docs += odd(m).doc_count as f64;
        assert_eq!(value(&m.aggs, "cum"), Some(cum));
        assert_eq!(value(&m.aggs, "cum_odd"), Some(cum_odd));
        assert_eq!(value(&m.aggs, "cum_odd_docs"), Some(cum_odd_docs));
    }
    // Siblings.
    let keyed = |xs: &[Option<f64>], zeros: bool| -> Vec<(BucketKey, f64)> {
        months
            .iter()
            .zip(xs)
            .filter_map(|(m, x)| x.or(zeros.then_some(0.0)).map(|x| (m.key.clone(), x)))
            .collect()
    };
    let counts: Vec<Option<f64>> = months.iter().map(|m| Some(m.doc_count as f64)).collect();
    let odd_max: Vec<Option<f64>> = months.iter().map(|m| max(get(&odd(m).aggs, "max_n"))).collect();
    let derivs: Vec<Option<f64>> =
        months.iter().map(|m| get(&m.aggs, "d_avg").and_then(|_| value(&m.aggs, "d_avg"))).collect();
    expect_sibling(r, "max_month", BucketStat::Max, &keyed(&avgs, false));
    expect_sibling(r, "min_month_z", BucketStat::Min, &keyed(&avgs, true));
    expect_sibling(r, "avg_docs", BucketStat::Avg, &keyed(&counts, false));
    expect_sibling(r, "avg_docs_dot", BucketStat::Avg, &keyed(&counts, false));
    expect_sibling(r, "sum_odd", BucketStat::Sum, &keyed(&odd_max, false));
    expect_sibling(r, "stats_p", BucketStat::Stats, &keyed(&medians, false));
    expect_sibling(r, "stats_p_z", BucketStat::Stats, &keyed(&medians, true));
    expect_sibling(r, "max_d", BucketStat::Max, &keyed(&derivs, false));
    // Bucket sorts: the plain terms' buckets sorted here.
    let tags = buckets(plain, "top_tags");
    let with_avg: Vec<(&Bucket, Option<f64>)> =
        tags.iter().map(|b| (b, avg(get(&b.aggs, "avg_n")))).collect();
    let mut top: Vec<(&Bucket, f64)> = with_avg.iter().filter_map(|(b, a)| a.map(|a| (*b, a))).collect();
    top.sort_by(|x, y| {
        y.1.total_cmp(&x.1).then_with(|| format!("{:?}", x.0.key).cmp(&format!("{:?}", y.0.key)))
    });
    let want: Vec<&BucketKey> = top.iter().skip(1).take(2).map(|x| &x.0.key).collect();
    assert_eq!(buckets(r, "top_tags").iter().map(|b| &b.key).collect::<Vec<_>>(), want);
    let mut zeros: Vec<(&Bucket, f64)> = with_avg.iter().map(|(b, a)| (*b, a.unwrap_or(0.0))).collect();
    zeros.sort_by(|x, y| x.1.total_cmp(&y.1));
    let sorted: Vec<&Bucket> = buckets(r, "tags_z").iter().collect();
    assert_eq!(
        sorted.iter().map(|b| &b.key).collect::<Vec<_>>(),
        zeros.iter().map(|x| &x.0.key).collect::<Vec<_>>()
    );
    let mut by_count: Vec<&Bucket> = tags.iter().collect();
    by_count.sort_by_key(|b| std::cmp::Reverse(b.doc_count));
    assert_eq!(
        buckets(r, "tags_by_count").iter().map(|b| &b.key).collect::<Vec<_>>(),
        by_count.iter().take(3).map(|b| &b.key).collect::<Vec<_>>()
    );
    let mins: Vec<(BucketKey, f64)> =
        sorted.iter().filter_map(|b| avg(get(&b.aggs, "avg_n")).map(|a| (b.key.clone(), a))).collect();
    expect_sibling(r, "min_tag", BucketStat::Min, &mins);
}

/// The requests' document aggregations alone (what the pipelines read).
fn plain() -> Vec<Agg> {
    let avg_n = || agg("avg_n", AggKind::Avg("n".into()), vec![]);
    vec![months(false), terms("top_tags", vec![avg_n()])]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn pipelines_equal_their_definitions(
        seed in 1u64..u64::MAX,
        count in 0usize..60,
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        merged in any::<bool>(),
    ) {
        let mut x = seed;
        let docs: Vec<serde_json::Value> = (0..count).map(|i| gen_doc(&mut x, i)).collect();
        let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
        let indexes = [open(dirs[0].path(), 1), open(dirs[1].path(), 3), open(dirs[2].path(), 1), open(dirs[3].path(), 2)];
        // The last two hold the documents between them.
        let owner = |i: usize| 2 + ((seed >> (i % 61)) as usize & 1);
        for (i, d) in docs.iter().enumerate() {
            for index in [&indexes[0], &indexes[1], &indexes[owner(i)]] {
                index.add(d.clone()).unwrap();
            }
        }
        if count > 0 {
            for d in &deletes {
                let i = d.index(count);
                for index in [&indexes[0], &indexes[1], &indexes[owner(i)]] {
                    index.delete(&i.to_string()).unwrap();
                }
            }
        }
        if merged {
            for index in &indexes {
                index.force_merge(1).unwrap();
            }
        }
        let reqs = requests();
        let (_, r) = indexes[0].aggregate(&Query::MatchAll, &reqs).unwrap();
        let (_, base) = indexes[0].aggregate(&Query::MatchAll, &plain()).unwrap();
        check(&r, &base);
        let (_, three) = indexes[1].aggregate(&Query::MatchAll, &reqs).unwrap();
        prop_assert_eq!(&three, &r);
        let q = Query::MatchAll;
        let (_, split) = Index::aggregate_indices(&[(&indexes[2], &q, &reqs[..]), (&indexes[3], &q, &reqs[..])]).unwrap();
        prop_assert_eq!(&split, &r);
    }
}

#[test]
fn misplaced_pipelines_and_bad_paths_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let index = open(dir.path(), 1);
    index.add(json!({"_id": "1", "tag": "a", "n": 3, "price": 2.5, "at": "2015-01-02"})).unwrap();
    let run =
        |aggs: Vec<Agg>| index.aggregate(&Query::MatchAll, &aggs).map(|r| r.1).map_err(|e| e.to_string());
    let deriv = || pipe("d", Pipeline::Derivative { path: path("_count"), gap_policy: GapPolicy::Skip });
    let sort = || {
        pipe("s", Pipeline::BucketSort { sort: vec![], from: 0, size: Some(1), gap_policy: GapPolicy::Skip })
    };
    let err = run(vec![deriv()]).unwrap_err();
    assert!(
        err.contains(
            "derivative aggregation [d] must have a histogram or date_histogram as parent, not none"
        ),
        "{err}"
    );
    let err = run(vec![terms("t", vec![deriv()])]).unwrap_err();
    assert!(err.contains("not [t] of type [terms]"), "{err}");
    let err = run(vec![agg("f", AggKind::Filter(Query::MatchAll), vec![sort()])]).unwrap_err();
    assert!(
        err.contains("bucket_sort aggregation [s] must have a multi-bucket aggregation as parent"),
        "{err}"
    );
    assert!(run(vec![terms("t", vec![sort()])]).is_ok(), "bucket_sort under terms");
    let stats = || agg("st", AggKind::Stats("n".into()), vec![]);
    let err = run(vec![terms("t", vec![stats()]), sibling("m", BucketStat::Max, "t>st", GapPolicy::Skip)])
        .unwrap_err();
    assert!(err.contains("[st] is not a single-value metric"), "{err}");
    let ok = run(vec![terms("t", vec![stats()]), sibling("m", BucketStat::Max, "t>st.avg", GapPolicy::Skip)])
        .unwrap();
    assert_eq!(
        ok[1].value,
        AggValue::BucketValue { value: Some(3.0), keys: vec![BucketKey::Str("a".into())] }
    );
    let err = run(vec![sibling("m", BucketStat::Max, "nope>x", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("names no sibling [nope]"), "{err}");
    let err = run(vec![stats(), sibling("m", BucketStat::Max, "st.avg", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("must start with a multi-bucket aggregation"), "{err}");
    let err =
        run(vec![terms("t", vec![]), sibling("m", BucketStat::Max, "t>nope", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("no aggregation [nope] here"), "{err}");
    let err = run(vec![terms("t", vec![]), sibling("m", BucketStat::Max, "t", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("must name a value inside the buckets"), "{err}");
    let err =
        run(vec![terms("t", vec![stats()]), sibling("m", BucketStat::Max, "t>st.median", GapPolicy::Skip)])
            .unwrap_err();
    assert!(err.contains("has no value [median]"), "{err}");
    // Paths are checked against the definitions, so a bad one is an error with no buckets to read too (a
    // terms of an unmapped field, and a histogram of no documents).
    let empty = |subs| {
        let kind = AggKind::Terms {
            field: "nope".into(),
            size: 10,
            min_doc_count: 1,
            order: TermsOrder::KeyAsc,
            filter: Default::default(),
        };
        agg("e", kind, subs)
    };
    let err = run(vec![empty(vec![stats()]), sibling("m", BucketStat::Max, "e>st.median", GapPolicy::Skip)])
        .unwrap_err();
    assert!(err.contains("has no value [median]"), "{err}");
    let err = run(vec![empty(vec![]), sibling("m", BucketStat::Max, "e>nope", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("no aggregation [nope] here"), "{err}");
    let none = agg(
        "h",
        AggKind::Histogram { field: "nope".into(), interval: 1.0, offset: 0.0, min_doc_count: 0 },
        vec![pipe("d", Pipeline::Derivative { path: path("x.y"), gap_policy: GapPolicy::Skip })],
    );
    let err = run(vec![none]).unwrap_err();
    assert!(err.contains("no aggregation [x] here"), "{err}");
    let err =
        run(vec![terms("t", vec![]), sibling("m", BucketStat::Max, "t>_key", GapPolicy::Skip)]).unwrap_err();
    assert!(err.contains("_key is a number only in numeric buckets"), "{err}");
    // A series with buckets left out is refused (Elasticsearch's rule); pipelines that read each other run in
    // the order of what they read, whatever the order given, and a cycle is refused.
    let hist = |min_doc_count, subs| {
        let kind = AggKind::Histogram { field: "n".into(), interval: 1.0, offset: 0.0, min_doc_count };
        agg("h", kind, subs)
    };
    let err = run(vec![hist(1, vec![deriv()])]).unwrap_err();
    assert!(
        err.contains("parent histogram of derivative aggregation [d] must have min_doc_count of 0"),
        "{err}"
    );
    index.add(json!({"_id": "2", "n": 5, "price": 1.0})).unwrap();
    let chained = vec![
        pipe("dd", Pipeline::Derivative { path: path("cs"), gap_policy: GapPolicy::Skip }),
        pipe("cs", Pipeline::CumulativeSum { path: path("_count") }),
    ];
    let r = run(vec![hist(0, chained)]).unwrap();
    let AggValue::Buckets { buckets, .. } = &r[0].value else { panic!("buckets") };
    // Buckets 3, 4, 5 hold 1, 0, 1 documents: cumulative 1, 1, 2, and its derivative 0, 1.
    let dd: Vec<Option<&AggValue>> =
        buckets.iter().map(|b| b.aggs.iter().find(|a| a.name == "dd").map(|a| &a.value)).collect();
    assert_eq!(dd, [None, Some(&AggValue::Value(Some(0.0))), Some(&AggValue::Value(Some(1.0)))]);
    let cycle = vec![
        pipe("x", Pipeline::Derivative { path: path("y"), gap_policy: GapPolicy::Skip }),
        pipe("y", Pipeline::Derivative { path: path("x"), gap_policy: GapPolicy::Skip }),
    ];
    let err = run(vec![hist(0, cycle)]).unwrap_err();
    assert!(err.contains("read each other in a cycle ([x, y])"), "{err}");
    for bad in ["", "a>", ">b", "a.", "t['x']>y"] {
        assert!(BucketsPath::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        path("a>b.99.9"),
        BucketsPath { aggs: vec!["a".into(), "b".into()], metric: Some("99.9".into()) }
    );
    assert_eq!(path("a>b.99.9").to_string(), "a>b.99.9");
}
