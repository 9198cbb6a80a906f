//! Term suggestions' candidates against a brute force: for random documents over a small alphabet (many
//! near terms) on one shard and on three, through fresh, sealed and merged segments, the candidates of a
//! term are exactly the field's terms within the edits (optimal string alignment: a swap of adjacent
//! characters is one edit) that share its prefix — the first character at least for two edits — with the
//! number of documents holding each.

use proptest::prelude::*;
use spirit::{Index, ShardConfig};
use std::collections::BTreeMap;

/// Optimal string alignment distance.
fn osa(a: &[char], b: &[char]) -> usize {
    let (n, m) = (a.len(), b.len());
    let mut d = vec![vec![0usize; m + 1]; n + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=n {
        for j in 1..=m {
            let cost = (a[i - 1] != b[j - 1]) as usize;
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[n][m]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn candidates_equal_brute_force(
        docs in prop::collection::vec(prop::collection::vec("[abcd]{2,6}", 1..5), 1..40),
        term in "[abcd]{2,7}",
        max_edits in 1usize..3,
        prefix_length in 0usize..3,
        seal in any::<bool>(),
    ) {
        let mut want: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        let t: Vec<char> = term.chars().collect();
        let mut words: BTreeMap<&str, u64> = BTreeMap::new();
        for d in &docs {
            let mut seen: Vec<&str> = d.iter().map(String::as_str).collect();
            seen.sort();
            seen.dedup();
            for w in seen {
                *words.entry(w).or_default() += 1;
            }
        }
        let p = prefix_length.min(t.len());
        let term_freq = words.get(term.as_str()).copied().unwrap_or(0);
        for (w, &freq) in &words {
            let c: Vec<char> = w.chars().collect();
            if *w == term || c.len() < p || c[..p] != t[..p] {
                continue;
            }
            let d = osa(&t[p..], &c[p..]);
            let wide = prefix_length.max(1).min(t.len());
            if d <= max_edits && (d < 2 || (c.len() >= wide && c[..wide] == t[..wide])) {
                want.insert(w.to_string(), (d, freq));
            }
        }
        let mut got = vec![];
        for shards in [1usize, 3] {
            let dir = tempfile::tempdir().unwrap();
            let settings = spirit::IndexSettings { number_of_shards: shards, ..Default::default() };
            let c = ShardConfig { dram_budget: shards * (8 << 20), max_docs_per_segment: 7, ..Default::default() };
            let index = Index::open("s", dir.path(), c, None, Some(settings)).unwrap();
            for (i, d) in docs.iter().enumerate() {
                index.add(serde_json::json!({"_id": i.to_string(), "body": d.join(" ")})).unwrap();
                if seal && i % 9 == 8 {
                    index.seal().unwrap();
                }
            }
            if seal {
                index.force_merge(1).unwrap();
            }
            let near = index.suggest_near_terms("body", &term, max_edits, prefix_length).unwrap();
            let c = index.suggest_term_stats("body", &term).unwrap();
            prop_assert_eq!(&near, &want, "{} shards", shards);
            prop_assert_eq!(c.term_freq, term_freq);
            prop_assert_eq!(c.docs, docs.len() as u64);
            prop_assert!(index.suggest_near_terms("nope", &term, 2, 1).unwrap().is_empty());
            got.push((c, near));
        }
        prop_assert_eq!(&got[0], &got[1]);
    }
}
