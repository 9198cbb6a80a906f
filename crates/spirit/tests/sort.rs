//! Sorting by a numeric field: for random values (some documents without one, some deleted), across fresh,
//! flushed, committed and merged segments, every page of a field sort equals a brute-force sort of the live
//! matching documents: documents with a value first (ascending or descending), then those without, ties in
//! index order.

use proptest::prelude::*;
use spirit::{Index, SearchOptions, ShardConfig};

fn config() -> ShardConfig {
    ShardConfig { dram_budget: 8 << 20, max_docs_per_segment: 7, ..Default::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn field_sort_equals_brute_force(
        values in prop::collection::vec(prop::option::of(-50i64..50), 1..60),
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        stage in 0u8..3,
        descending in any::<bool>(),
        offset in 0usize..5,
        limit in 1usize..25,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open("s", dir.path(), config(), Some(&serde_json::json!({"properties": {"n": {"type": "long"}}})), None).unwrap();
        for (i, v) in values.iter().enumerate() {
            let doc = match v {
                Some(n) => serde_json::json!({"_id": i.to_string(), "body": if i % 3 == 0 { "odd" } else { "even" }, "n": n}),
                None => serde_json::json!({"_id": i.to_string(), "body": if i % 3 == 0 { "odd" } else { "even" }}),
            };
            index.add(doc).unwrap();
            if i % 11 == 10 && stage > 0 {
                index.shard().seal().unwrap();
            }
        }
        let mut deleted = std::collections::HashSet::new();
        for d in &deletes {
            let i = d.index(values.len());
            index.delete(&i.to_string()).unwrap();
            deleted.insert(i);
        }
        match stage {
            1 => index.shard().wait_idle().unwrap(),
            2 => index.shard().commit_and_merge_all().unwrap(),
            _ => {}
        }
        for query in ["*:*", "even"] {
            let mut expected: Vec<(usize, Option<i64>)> = values
                .iter()
                .enumerate()
                .filter(|(i, _)| !deleted.contains(i) && (query == "*:*" || i % 3 != 0))
                .map(|(i, v)| (i, *v))
                .collect();
            expected.sort_by(|a, b| match (a.1, b.1) {
                (Some(x), Some(y)) => (if descending { y.cmp(&x) } else { x.cmp(&y) }).then(a.0.cmp(&b.0)),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => a.0.cmp(&b.0),
            });
            let sort = index.field_sort("n", descending).unwrap();
            let r = index.search(query, &SearchOptions { limit, offset, sort, ..Default::default() }).unwrap();
            let got: Vec<(String, Option<f64>)> = r.hits.iter().map(|h| (h.id.clone(), h.sort_value)).collect();
            let want: Vec<(String, Option<f64>)> = expected.iter().skip(offset).take(limit).map(|(i, v)| (i.to_string(), v.map(|v| v as f64))).collect();
            prop_assert_eq!(got, want, "query {} descending {}", query, descending);
            prop_assert_eq!(r.total, expected.len() as u64);
        }
        prop_assert!(index.field_sort("body", false).is_err());
        prop_assert!(index.field_sort("nope", false).is_err());
    }
}
