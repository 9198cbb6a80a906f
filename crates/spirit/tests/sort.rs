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

/// A sort key as the brute force reads it: 0 = n, 1 = m, 2 = insertion order, 3 = score, 4 = the keyword
/// `tag` (several values or none).
type KeySpec = (u8, bool, bool);

fn key_of(index: &Index, (what, descending, missing_first): KeySpec) -> spirit::SortKey {
    match what {
        0 => index.sort_field("n", descending, missing_first).unwrap(),
        1 => index.sort_field("m", descending, missing_first).unwrap(),
        2 => spirit::SortKey::Seq { descending },
        3 => spirit::SortKey::Score { descending },
        _ => index.sort_field("tag", descending, missing_first).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Several keys (two fields with many ties and missing values, insertion order, score; each either way,
    /// missing first or last) on one shard and on three: the order equals a brute-force sort of the live
    /// matches (ties oldest first), each hit's sort values are its own, scores are `search_query`'s, and
    /// paging with `after` (each page's last sort values) walks exactly that order.
    #[test]
    fn several_keys_and_search_after_equal_brute_force(
        docs in prop::collection::vec((prop::option::of(-3i64..3), prop::option::of(-2i64..2), 0usize..4, prop::collection::vec(0usize..4, 0..3)), 1..50),
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        keys in prop::collection::vec((0u8..5, any::<bool>(), any::<bool>()), 1..4),
        shards in prop::sample::select(&[1usize, 3][..]),
        seal in any::<bool>(),
        page in 1usize..9,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
        let mappings = serde_json::json!({"properties": {"n": {"type": "long"}, "m": {"type": "double"}, "tag": {"type": "keyword"}}});
        const TAGS: [&str; 4] = ["b", "a", "Z", "ab"];
        let c = ShardConfig { dram_budget: shards * (8 << 20), ..config() };
        let index = Index::open("s", dir.path(), c, Some(&mappings), Some(settings)).unwrap();
        for (i, (n, m, k, tags)) in docs.iter().enumerate() {
            let mut d = serde_json::json!({"_id": i.to_string(), "body": format!("even {}", "odd ".repeat(*k))});
            match tags.as_slice() {
                [] => {}
                [t] => d["tag"] = serde_json::json!(TAGS[*t]),
                many => d["tag"] = serde_json::json!(many.iter().map(|&t| TAGS[t]).collect::<Vec<_>>()),
            }
            if let Some(n) = n { d["n"] = serde_json::json!(n); }
            if let Some(m) = m { d["m"] = serde_json::json!(*m as f64 / 2.0); }
            index.add(d).unwrap();
            if seal && i % 9 == 8 {
                index.seal().unwrap();
            }
        }
        let mut deleted = std::collections::HashSet::new();
        for d in &deletes {
            let i = d.index(docs.len());
            index.delete(&i.to_string()).unwrap();
            deleted.insert(i);
        }
        let q = spirit::query::parse("even odd").unwrap();
        // Scores as the ordinary search computes them.
        let all = index.search_query(&q, &SearchOptions { limit: 1000, ..Default::default() }).unwrap();
        let score: std::collections::HashMap<String, f32> = all.hits.iter().map(|h| (h.id.clone(), h.score)).collect();
        let sort_keys: Vec<spirit::SortKey> = keys.iter().map(|&k| key_of(&index, k)).collect();
        use spirit::SortValue::{Number, Text};
        // A keyword sorts by its smallest value ascending, its largest descending.
        let value = |i: usize, (what, desc, _): KeySpec| -> Option<spirit::SortValue> {
            match what {
                0 => docs[i].0.map(|n| Number(n as f64)),
                1 => docs[i].1.map(|m| Number(m as f64 / 2.0)),
                2 => Some(Number(i as f64)),
                3 => Some(Number(score[&i.to_string()] as f64)),
                _ => {
                    let mut t: Vec<&str> = docs[i].3.iter().map(|&t| TAGS[t]).collect();
                    t.sort();
                    if desc { t.last() } else { t.first() }.map(|t| Text(t.to_string()))
                }
            }
        };
        let ord = |x: &spirit::SortValue, y: &spirit::SortValue| match (x, y) {
            (Number(a), Number(b)) => a.total_cmp(b),
            (Text(a), Text(b)) => a.cmp(b),
            _ => unreachable!("one kind per key"),
        };
        let cmp1 = |a: Option<spirit::SortValue>, b: Option<spirit::SortValue>, (_, desc, mf): KeySpec| match (a, b) {
            (Some(x), Some(y)) => if desc { ord(&y, &x) } else { ord(&x, &y) },
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => if mf { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater },
            (Some(_), None) => if mf { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Less },
        };
        let mut want: Vec<usize> = (0..docs.len()).filter(|i| !deleted.contains(i)).collect();
        want.sort_by(|&a, &b| {
            keys.iter().map(|&k| cmp1(value(a, k), value(b, k), k)).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
        });
        let r = index.search_sorted(&q, &sort_keys, None, (0, 1000), true).unwrap();
        let got: Vec<usize> = r.hits.iter().map(|h| h.id.parse().unwrap()).collect();
        prop_assert_eq!(&got, &want, "keys {:?}", keys);
        prop_assert_eq!(r.total, want.len() as u64);
        for h in &r.hits {
            let i: usize = h.id.parse().unwrap();
            let own: Vec<Option<spirit::SortValue>> = keys.iter().map(|&k| if k.0 == 2 { Some(Number(h.seq as f64)) } else { value(i, k) }).collect();
            prop_assert_eq!(&h.sort_values, &own, "hit {}", i);
            if keys.iter().any(|k| k.0 == 3) {
                prop_assert_eq!(h.score, score[&h.id]);
            }
        }
        // Insertion order is the documents' order of adds.
        let seqs: Vec<u64> = { let mut v: Vec<(usize, u64)> = r.hits.iter().map(|h| (h.id.parse().unwrap(), h.seq)).collect(); v.sort(); v.into_iter().map(|x| x.1).collect() };
        prop_assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        // Pages through `after`, and an offset into the order.
        let mut paged = vec![];
        let mut after: Option<Vec<Option<spirit::SortValue>>> = None;
        loop {
            let p = index.search_sorted(&q, &sort_keys, after.as_deref(), (0, page), true).unwrap();
            prop_assert_eq!(p.total, want.len() as u64);
            let Some(last) = p.hits.last() else { break };
            after = Some(last.sort_values.clone());
            paged.extend(p.hits.iter().map(|h| h.id.parse::<usize>().unwrap()));
            prop_assert!(paged.len() <= want.len());
        }
        // A page's last values may tie the next page's first on every key only if the keys do not tell
        // them apart: then `after` skips the rest of that tie, as Elasticsearch's does.
        let distinct = keys.iter().any(|k| k.0 == 2);
        if distinct {
            prop_assert_eq!(&paged, &want);
        } else {
            prop_assert!(paged.iter().all(|i| want.contains(i)));
        }
        let off = index.search_sorted(&q, &sort_keys, None, (page, 3), false).unwrap();
        let want_off: Vec<u32> = r.hits.iter().skip(page).take(3).map(|h| h.doc).collect();
        prop_assert_eq!(off.hits.iter().map(|h| h.doc).collect::<Vec<_>>(), want_off);
        prop_assert!(index.search_sorted(&q, &sort_keys, Some(&[]), (0, 3), false).is_err());
        // A value of the wrong kind for its key is refused, not compared.
        let seq = [spirit::SortKey::Seq { descending: false }];
        prop_assert!(index.search_sorted(&q, &seq, Some(&[Some(Text("x".into()))]), (0, 3), false).is_err());
        prop_assert!(index.search_sorted(&q, &seq, Some(&[None]), (0, 3), false).is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Paging below a horizon (a scroll) while documents are added, replaced and deleted, and segments
    /// sealed and merged, between pages: the pages together are the order at the horizon's moment — each hit
    /// with the sort values, scores included, it had then — less documents deleted or replaced before their
    /// page came (every other one is there), and nothing written after the horizon.
    #[test]
    fn scroll_pages_keep_their_horizon(
        docs in prop::collection::vec((prop::option::of(-3i64..3), 0usize..4), 1..40),
        writes in prop::collection::vec((0u8..5, any::<prop::sample::Index>(), 0usize..4), 0..30),
        by in prop::sample::select(&[0u8, 3][..]),
        shards in prop::sample::select(&[1usize, 3][..]),
        page in 1usize..7,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
        let mappings = serde_json::json!({"properties": {"n": {"type": "long"}}});
        let c = ShardConfig { dram_budget: shards * (8 << 20), ..config() };
        let index = Index::open("s", dir.path(), c, Some(&mappings), Some(settings)).unwrap();
        let doc = |id: String, n: Option<i64>, k: usize| {
            let mut d = serde_json::json!({"_id": id, "body": format!("even {}", "odd ".repeat(k))});
            if let Some(n) = n { d["n"] = serde_json::json!(n); }
            d
        };
        for (i, &(n, k)) in docs.iter().enumerate() {
            index.add(doc(i.to_string(), n, k)).unwrap();
        }
        let q = spirit::query::parse("even odd").unwrap();
        let keys = vec![key_of(&index, (by, true, false)), spirit::SortKey::Seq { descending: false }];
        let horizon = index.horizon(&q).unwrap();
        let at_open = index.search_sorted(&q, &keys, None, (0, 1000), true).unwrap();
        let mut touched = std::collections::HashSet::new();
        let (mut got, mut after, mut w) = (vec![], None::<Vec<Option<spirit::SortValue>>>, writes.iter());
        loop {
            let opts = spirit::SortedPage { after: after.as_deref(), limit: page, fetch: true, horizon: Some(&horizon), ..Default::default() };
            let p = index.search_sorted_with(&q, &keys, &opts).unwrap();
            let Some(last) = p.hits.last() else { break };
            after = Some(last.sort_values.clone());
            got.extend(p.hits.into_iter().map(|h| (h.id, h.sort_values)));
            prop_assert!(got.len() <= at_open.hits.len());
            for &(kind, target, k) in w.by_ref().take(2) {
                let id = target.index(docs.len()).to_string();
                match kind {
                    // New documents match the query and would sort anywhere.
                    0 => { index.add(doc(format!("new{}", got.len()), Some(k as i64), k)).unwrap(); }
                    1 => { index.add(doc(id.clone(), Some(k as i64 - 1), k)).unwrap(); touched.insert(id); }
                    2 => { index.delete(&id).unwrap(); touched.insert(id); }
                    3 => index.seal().unwrap(),
                    _ => { index.force_merge(1).unwrap(); }
                }
            }
        }
        // In the order (and with the values) of the moment the horizon was taken: a subsequence of it.
        let mut open = at_open.hits.iter().map(|h| (&h.id, &h.sort_values));
        for (id, values) in &got {
            prop_assert!(open.by_ref().any(|(i, v)| i == id && v == values), "{} {:?} out of order or changed", id, values);
        }
        let ids: std::collections::HashSet<&String> = got.iter().map(|g| &g.0).collect();
        prop_assert_eq!(ids.len(), got.len(), "no document twice");
        for h in &at_open.hits {
            prop_assert!(touched.contains(&h.id) || ids.contains(&h.id), "{} left out", h.id);
        }
        prop_assert_eq!(at_open.total, docs.len() as u64);
    }
}

/// A horizon keeps the query as planned when it was taken: a term written later that would take the place
/// of an expansion (here the one term `b…` a phrase prefix expands to) does not change what old documents
/// match on later pages.
#[test]
fn a_horizon_keeps_its_expansions() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open("s", dir.path(), config(), None, None).unwrap();
    for i in 0..6 {
        index.add(serde_json::json!({"_id": i.to_string(), "body": "quick brown fox"})).unwrap();
    }
    let q = spirit::Query::PhrasePrefix {
        field: Some("body".into()),
        text: "quick b".into(),
        max_expansions: 1,
        slop: 0,
    };
    let keys = [spirit::SortKey::Seq { descending: false }];
    let horizon = index.horizon(&q).unwrap();
    let (mut seen, mut after) = (vec![], None::<Vec<Option<spirit::SortValue>>>);
    loop {
        let opts = spirit::SortedPage {
            after: after.as_deref(),
            limit: 2,
            fetch: true,
            horizon: Some(&horizon),
            ..Default::default()
        };
        let p = index.search_sorted_with(&q, &keys, &opts).unwrap();
        let Some(last) = p.hits.last() else { break };
        after = Some(last.sort_values.clone());
        seen.extend(p.hits.iter().map(|h| h.id.clone()));
        // `ba` sorts before `brown`: planned now, the prefix would expand to it alone.
        index.add(serde_json::json!({"body": "quick ba"})).unwrap();
    }
    assert_eq!(seen, ["0", "1", "2", "3", "4", "5"]);
    let now = index.search_sorted(&q, &keys, None, (0, 10), false).unwrap();
    assert_eq!(now.total, 3, "planned now, `quick b` matches the new documents only");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Collapsing on a keyword or numeric field (some documents without a value, some deleted) on one shard
    /// and on three: the groups are each value's first hit in the uncollapsed order, `offset` and `limit`
    /// count groups, each hit carries its group's value, and the count stays the matches'.
    #[test]
    fn collapse_keeps_each_groups_best(
        docs in prop::collection::vec((prop::option::of(0i64..4), prop::option::of(0usize..4), 0usize..4), 1..40),
        deletes in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        keys in prop::collection::vec((0u8..5, any::<bool>(), any::<bool>()), 1..3),
        on_keyword in any::<bool>(),
        shards in prop::sample::select(&[1usize, 3][..]),
        (offset, limit) in (0usize..4, 1usize..5),
    ) {
        const TAGS: [&str; 4] = ["b", "a", "Z", "ab"];
        let dir = tempfile::tempdir().unwrap();
        let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
        let mappings = serde_json::json!({"properties": {"n": {"type": "long"}, "m": {"type": "double"}, "tag": {"type": "keyword"}}});
        let c = ShardConfig { dram_budget: shards * (8 << 20), ..config() };
        let index = Index::open("s", dir.path(), c, Some(&mappings), Some(settings)).unwrap();
        for (i, (n, t, k)) in docs.iter().enumerate() {
            let mut d = serde_json::json!({"_id": i.to_string(), "body": format!("even {}", "odd ".repeat(*k)), "m": (i % 3) as f64});
            if let Some(n) = n { d["n"] = serde_json::json!(n); }
            if let Some(t) = t { d["tag"] = serde_json::json!(TAGS[*t]); }
            index.add(d).unwrap();
        }
        for d in &deletes {
            index.delete(&d.index(docs.len()).to_string()).unwrap();
        }
        let q = spirit::query::parse("even odd").unwrap();
        let mut sort_keys: Vec<spirit::SortKey> = keys.iter().map(|&k| key_of(&index, k)).collect();
        sort_keys.push(spirit::SortKey::Seq { descending: false });
        let all = index.search_sorted(&q, &sort_keys, None, (0, 1000), true).unwrap();
        let group_of = |id: &str| -> Option<spirit::SortValue> {
            let (n, t, _) = docs[id.parse::<usize>().unwrap()];
            if on_keyword { t.map(|t| spirit::SortValue::Text(TAGS[t].into())) } else { n.map(|n| spirit::SortValue::Number(n as f64)) }
        };
        let mut seen = vec![];
        let mut want = vec![];
        for h in &all.hits {
            let g = group_of(&h.id);
            if !seen.contains(&g) {
                seen.push(g.clone());
                want.push((h.id.clone(), g));
            }
        }
        let collapse = Some(index.sort_field(if on_keyword { "tag" } else { "n" }, false, false).unwrap());
        let page = spirit::SortedPage { offset, limit, fetch: true, collapse, ..Default::default() };
        let got = index.search_sorted_with(&q, &sort_keys, &page).unwrap();
        let got: Vec<(String, Option<spirit::SortValue>)> = got.hits.into_iter().map(|h| (h.id, h.collapse_value)).collect();
        let want: Vec<_> = want.into_iter().skip(offset).take(limit).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(index.search_sorted_with(&q, &sort_keys, &page).unwrap().total, all.total);
    }
}

#[test]
fn collapsing_on_a_field_with_several_values_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mappings = serde_json::json!({"properties": {"tag": {"type": "keyword"}}});
    let index = Index::open("s", dir.path(), config(), Some(&mappings), None).unwrap();
    index.add(serde_json::json!({"body": "x", "tag": "a"})).unwrap();
    index.add(serde_json::json!({"body": "x", "tag": ["a", "b"]})).unwrap();
    let q = spirit::query::parse("x").unwrap();
    let keys = [spirit::SortKey::Score { descending: true }];
    let page = spirit::SortedPage {
        limit: 10,
        collapse: Some(index.sort_field("tag", false, false).unwrap()),
        ..Default::default()
    };
    let e = index.search_sorted_with(&q, &keys, &page).unwrap_err().to_string();
    assert!(e.contains("several values"), "{e}");
    let seq = spirit::SortedPage { collapse: Some(spirit::SortKey::Seq { descending: false }), ..page };
    assert!(index.search_sorted_with(&q, &keys, &seq).is_err());
}
