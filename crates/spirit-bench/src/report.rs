//! `spirit-bench report`: reads every run's JSON in a results directory and writes `report.md` with tables
//! (QPS, latency percentiles, ingest, sizes, the goals as ratios from this one run, hit-count agreement) and
//! SVG plots (latency CDFs, QPS per configuration).

use serde_json::Value;
use std::fmt::Write;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// Directory holding the runs' JSON files (and `meta.json`); report.md and the SVGs are written there.
    #[arg(long)]
    dir: PathBuf,
}

/// Issue 4's workloads, whose static geometric-mean latency is to be at most the baselines'.
const FAST_QUERY_WORKLOADS: [&str; 7] =
    ["AndHighHigh", "AndHighMed", "OrHighHigh", "OrHighMed", "HighPhrase", "MedPhrase", "LowPhrase"];

/// The SPIRIT evaluation's six workloads.
const SPIRIT_WORKLOADS: [&str; 6] =
    ["LowTerm", "MedTerm", "HighTerm", "AndLowLow", "AndMedMed", "AndHighHigh"];

struct Run {
    label: String,
    /// The configuration's results; for one run in several rounds, pooled ([`pool`]).
    v: Value,
    /// Each round's own results, in round order (one for a configuration run once).
    rounds: Vec<Value>,
}

impl Run {
    fn engine(&self) -> &str {
        self.v["engine"].as_str().unwrap_or("?")
    }
    fn mode(&self) -> &str {
        self.v["mode"].as_str().unwrap_or("?")
    }
    fn lat(&self, cat: &str) -> Vec<f64> {
        let mut l: Vec<f64> = self.v["categories"][cat]["latencies_us"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        l.sort_by(|a, b| a.total_cmp(b));
        l
    }
    /// The latencies of `cat` whose query (see [`Self::per_query`]) `keep` accepts, sorted.
    fn lat_of(&self, cat: &str, keep: impl Fn(usize) -> bool) -> Vec<f64> {
        let mut l: Vec<f64> = self
            .per_query(cat)
            .into_iter()
            .enumerate()
            .filter(|(q, _)| keep(*q))
            .flat_map(|(_, t)| t)
            .collect();
        l.sort_by(|a, b| a.total_cmp(b));
        l
    }
    /// The category's latencies per query (the `i`th timed is query `i mod n` of the category's `n`: every
    /// engine times them round-robin, from the first; pooled rounds say it in `query_of`), each query's in the
    /// order they were timed.
    fn per_query(&self, cat: &str) -> Vec<Vec<f64>> {
        let n = self.queries(cat).max(1);
        let mut per = vec![vec![]; n];
        let c = &self.v["categories"][cat];
        let of = c["query_of"].as_array();
        if let Some(a) = c["latencies_us"].as_array() {
            for (i, x) in a.iter().enumerate() {
                let q = of.and_then(|o| o.get(i)).and_then(Value::as_u64).map_or(i % n, |q| q as usize);
                if let (Some(x), Some(per)) = (x.as_f64(), per.get_mut(q)) {
                    per.push(x);
                }
            }
        }
        per
    }
    /// This run's latencies of `cat` with every query weighted as in `other`: for a query `other` timed `k`
    /// times and this run `m` times, `k` of this run's timings, spread evenly over its `m` in the order they
    /// were taken (`m < k` repeats some); sorted. A p99 over a workload mixes its queries by how often each
    /// was timed, and a configuration that ran more queries in the window (each ~3.5 times, against ~1.3
    /// for one that reopens every 1000) has its slowest query's timings in its top 1% where the other has
    /// only its second-slowest query's: this compares the two at the same mix.
    fn lat_weighted_as(&self, other: &Run, cat: &str) -> Vec<f64> {
        let mine = self.per_query(cat);
        let mut l: Vec<f64> = other
            .per_query(cat)
            .iter()
            .zip(&mine)
            .flat_map(|(theirs, m)| {
                let (k, n) = (theirs.len(), m.len());
                (0..if n == 0 { 0 } else { k }).map(move |j| m[((2 * j + 1) * n) / (2 * k)])
            })
            .collect();
        l.sort_by(|a, b| a.total_cmp(b));
        l
    }
    /// For a workload where this run's p99 is not below `other`'s: `other`'s `top` slowest queries (by their
    /// slowest timing), each with both runs' median µs and timing counts — whether the miss is a query that
    /// is slower here, or the same queries mixed in different proportions (see [`Self::lat_weighted_as`]).
    fn slowest_compared(&self, other: &Run, cat: &str, top: usize) -> Vec<String> {
        let (mine, theirs) = (self.per_query(cat), other.per_query(cat));
        let median = |t: &[f64]| {
            let mut t = t.to_vec();
            t.sort_by(|a, b| a.total_cmp(b));
            pct(&t, 0.5)
        };
        let worst = |t: &[f64]| t.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut order: Vec<usize> = (0..theirs.len()).filter(|&q| !theirs[q].is_empty()).collect();
        order.sort_by(|&a, &b| worst(&theirs[b]).total_cmp(&worst(&theirs[a])));
        order
            .into_iter()
            .take(top)
            .map(|q| {
                let text = self.v["categories"][cat]["queries"][q].as_str().unwrap_or("?");
                let m = mine.get(q).map_or(&[][..], |m| m.as_slice());
                format!(
                    "`{text}` {} ({}×) / {} ({}×)",
                    f(median(m)),
                    m.len(),
                    f(median(&theirs[q])),
                    theirs[q].len()
                )
            })
            .collect()
    }
    /// How many distinct queries the category has.
    fn queries(&self, cat: &str) -> usize {
        self.v["categories"][cat]["queries"].as_array().map_or(0, |q| q.len())
    }
    /// Which of the category's queries this run timed at least once.
    fn timed(&self, cat: &str) -> Vec<bool> {
        self.per_query(cat).iter().take(self.queries(cat)).map(|t| !t.is_empty()).collect()
    }
    fn all_lat(&self) -> Vec<f64> {
        let mut l: Vec<f64> = self.cats().iter().flat_map(|c| self.lat(c)).collect();
        l.sort_by(|a, b| a.total_cmp(b));
        l
    }
    fn cats(&self) -> Vec<String> {
        self.v["categories"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
    }
    /// Geometric mean of the workload's latencies (NaN if none).
    fn geomean(&self, cat: &str) -> f64 {
        let l = self.lat(cat);
        if l.is_empty() {
            return f64::NAN;
        }
        (l.iter().map(|x| x.ln()).sum::<f64>() / l.len() as f64).exp()
    }
    fn qps(&self, cat: &str) -> f64 {
        let l = self.lat(cat);
        if l.is_empty() {
            return f64::NAN;
        }
        1e6 / (l.iter().sum::<f64>() / l.len() as f64)
    }
    /// Harmonic mean of per-workload QPS over `cats` present in this run.
    fn hmean_qps(&self, cats: &[&str]) -> f64 {
        let q: Vec<f64> = cats.iter().map(|c| self.qps(c)).filter(|x| x.is_finite()).collect();
        if q.is_empty() {
            return f64::NAN;
        }
        q.len() as f64 / q.iter().map(|x| 1.0 / x).sum::<f64>()
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[rank(sorted.len(), p)]
}

/// The index [`pct`] takes the `p` quantile of `n > 0` sorted values at.
fn rank(n: usize, p: f64) -> usize {
    (((n - 1) as f64) * p).round() as usize
}

/// What a p99 over `n` timings is, said where it is short of a hundred (a configuration that reopens often
/// times a few queries per workload): up to about fifty, [`pct`]'s p99 is the slowest timing.
fn few_timings(n: usize) -> String {
    if n == 0 || n >= 100 {
        String::new()
    } else if rank(n, 0.99) == n - 1 {
        format!("; {n} timings: its p99 is its slowest")
    } else {
        format!("; {n} timings")
    }
}

/// Pools the rounds of each configuration. `bench/run.sh full` runs every real-time configuration
/// `NRT_ROUNDS` times, each round a whole window on an index built afresh, the configurations' order reversed
/// every other round so that a drift of the machine spreads over all of them, and each round's queries rotated
/// (`bench/baselines/rotate_tasks.py`): one window times few queries for a configuration that reopens often (8
/// per workload for Tantivy NRT-10, always a workload's first), and a p99 over so few is its slowest timing.
/// Runs with the same label are rounds of one configuration, taken in file-name order (`-r1` .. `-r9`); a
/// configuration run once is left as it is.
fn pool(runs: Vec<Run>) -> Vec<Run> {
    let mut out: Vec<Run> = vec![];
    for r in runs {
        match out.iter_mut().find(|o| o.label == r.label) {
            Some(o) => o.rounds.extend(r.rounds),
            None => out.push(r),
        }
    }
    for o in &mut out {
        if o.rounds.len() > 1 {
            o.v = pooled(&o.rounds);
        }
    }
    out
}

/// One configuration's rounds as one result: per workload every round's timings back to back, each with its
/// query in `query_of` (a round times its queries round-robin: its `j`th timing is its query `j mod n`, found
/// by its text among the first round's); the mean ingest rate; the largest index and peak memory; the
/// real-time statistics of the round whose ingest-to-visible p99 is the largest, with the visibility checks,
/// violations and misses summed over all rounds and the segments visited averaged.
fn pooled(rounds: &[Value]) -> Value {
    let mut v = rounds[0].clone();
    let cats: Vec<String> =
        v["categories"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    for c in &cats {
        // Queries by text: each round may take them in its own order (`bench/run.sh` rotates them), and
        // their indexes are the first round's (a query only a later round has is added after those).
        let mut queries: Vec<Value> = v["categories"][c]["queries"].as_array().cloned().unwrap_or_default();
        let (mut lat, mut of) = (vec![], vec![]);
        for r in rounds {
            let qs = r["categories"][c]["queries"].as_array().map_or(&[][..], |q| q.as_slice());
            for (j, x) in r["categories"][c]["latencies_us"].as_array().into_iter().flatten().enumerate() {
                let Some(q) = qs.get(j % qs.len().max(1)) else { continue };
                let at = queries.iter().position(|y| y == q).unwrap_or_else(|| {
                    queries.push(q.clone());
                    queries.len() - 1
                });
                lat.push(x.clone());
                of.push(Value::from(at));
            }
        }
        v["categories"][c]["queries"] = Value::Array(queries);
        v["categories"][c]["latencies_us"] = Value::Array(lat);
        v["categories"][c]["query_of"] = Value::Array(of);
    }
    let nums = |path: &[&str]| -> Vec<f64> {
        rounds.iter().filter_map(|r| path.iter().fold(r, |x, k| &x[*k]).as_f64()).collect()
    };
    let mean = |x: Vec<f64>| (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64);
    let max = |x: Vec<f64>| x.into_iter().reduce(f64::max);
    if let Some(x) = mean(nums(&["ingest", "docs_per_sec"])) {
        v["ingest"]["docs_per_sec"] = x.into();
    }
    for k in ["index_bytes", "peak_rss_bytes"] {
        if let Some(x) = max(nums(&[k])) {
            v[k] = x.into();
        }
    }
    if v["nrt"].is_object() {
        let p99 = |r: &Value| r["nrt"]["visibility"]["p99_us"].as_f64().unwrap_or(f64::NEG_INFINITY);
        let worst = rounds.iter().max_by(|a, b| p99(a).total_cmp(&p99(b))).expect("rounds");
        v["nrt"] = worst["nrt"].clone();
        for path in [
            &["visibility_checks"][..],
            &["visibility_violations"],
            &["visibility_in_flight"],
            &["visibility", "not_visible_during_run"],
        ] {
            let x = nums(&[&["nrt"][..], path].concat());
            if !x.is_empty() {
                let (head, last) = path.split_at(path.len() - 1);
                head.iter().fold(&mut v["nrt"], |x, k| &mut x[*k])[last[0]] =
                    (x.iter().sum::<f64>() as u64).into();
            }
        }
        let states: Vec<String> = v["nrt"]["mean_segments_by_state"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for k in states {
            if let Some(x) = mean(nums(&["nrt", "mean_segments_by_state", &k])) {
                v["nrt"]["mean_segments_by_state"][&k] = x.into();
            }
        }
    }
    v
}

fn label(v: &Value) -> String {
    let e = v["engine"].as_str().unwrap_or("?");
    match (v["mode"].as_str().unwrap_or("?"), v["reopen_every"].as_u64().unwrap_or(0)) {
        ("static", _) => format!("{e} static"),
        (_, 0) if e == "spirit" => "spirit real-time".into(),
        (_, 0) => format!("{e} NRT-∞"),
        (_, k) => format!("{e} NRT-{k}"),
    }
}

fn order_key(r: &Run) -> (u8, u8, u64) {
    let e = match r.engine() {
        "spirit" => 0,
        "lucene" => 1,
        _ => 2,
    };
    let k = r.v["reopen_every"].as_u64().unwrap_or(0);
    (if r.mode() == "static" { 0 } else { 1 }, e, if k == 0 { u64::MAX } else { k })
}

fn f(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Issue 4's goal, from the static runs of this one: per workload, spirit's geometric-mean latency against
/// each baseline's (at or below it: a ratio ≤ 1).
fn fast_query_goals(md: &mut String, runs: &[Run]) {
    let find = |l: &str| runs.iter().find(|r| r.label == l);
    let Some(s) = find("spirit static") else {
        return;
    };
    let baselines: Vec<&Run> = ["tantivy static", "lucene static"].iter().filter_map(|l| find(l)).collect();
    if baselines.is_empty() {
        return;
    }
    writeln!(md, "\n## Goals (issue 4): static geometric-mean latency, as ratios from this run\n").unwrap();
    write!(md, "| workload | spirit µs |").unwrap();
    for b in &baselines {
        write!(md, " {} µs | spirit / {} |", b.label, b.engine()).unwrap();
    }
    write!(md, "\n|---|---|").unwrap();
    for _ in &baselines {
        write!(md, "---|---|").unwrap();
    }
    writeln!(md).unwrap();
    let mut missed = vec![];
    for c in FAST_QUERY_WORKLOADS {
        let a = s.geomean(c);
        write!(md, "| {c} | {} |", f(a)).unwrap();
        for b in &baselines {
            let x = b.geomean(c);
            write!(md, " {} | {} |", f(x), f(a / x)).unwrap();
            // Not measured (NaN) counts as missed.
            if a.partial_cmp(&x).is_none_or(|o| o.is_gt()) {
                missed.push(format!("{c} vs {}", b.engine()));
            }
        }
        writeln!(md).unwrap();
    }
    writeln!(
        md,
        "\n- spirit at or below every baseline on every workload (goal: ratio ≤ 1): {}",
        if missed.is_empty() { "met".to_string() } else { format!("not met on {}", missed.join(", ")) }
    )
    .unwrap();
}

pub fn report(a: ReportArgs) {
    let mut runs = vec![];
    let mut meta = Value::Null;
    let mut recovery = Value::Null;
    let mut stalls = vec![];
    let mut entries: Vec<_> =
        std::fs::read_dir(&a.dir).expect("results dir").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let v: Value = match std::fs::read_to_string(&p).ok().and_then(|t| serde_json::from_str(&t).ok()) {
            Some(v) => v,
            None => {
                eprintln!("skipping unreadable {}", p.display());
                continue;
            }
        };
        if p.file_name().is_some_and(|n| n == "meta.json") {
            meta = v;
        } else if v.get("recovery_ms").is_some() {
            recovery = v;
        } else if let Some(m) = v.get("stall_meter") {
            stalls.push(m.clone());
        } else if v.get("engine").is_some() {
            runs.push(Run { label: label(&v), rounds: vec![v.clone()], v });
        }
    }
    let mut runs = pool(runs);
    runs.sort_by_key(order_key);
    let mut md = String::new();
    writeln!(md, "# spirit vs Lucene vs Tantivy\n").unwrap();
    if let Some(m) = meta.as_object() {
        for (k, v) in m {
            writeln!(md, "- {k}: {}", v.as_str().map(String::from).unwrap_or(v.to_string())).unwrap();
        }
        writeln!(md).unwrap();
    }
    writeln!(md, "Latencies are per query in µs; QPS = 1e6 / mean latency of the workload (one query thread). Harmonic means are over the SPIRIT workloads L, M, H, LL, MM, HH (LowTerm, MedTerm, HighTerm, AndLowLow, AndMedMed, AndHighHigh).\n").unwrap();

    // Overview.
    writeln!(md, "## Runs\n\n| configuration | docs | ingest docs/s | index MB | peak RSS MB | queries timed | hmean QPS (L..HH) | p50 | p99 | p99.9 |\n|---|---|---|---|---|---|---|---|---|---|").unwrap();
    for r in &runs {
        let all = r.all_lat();
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            r.v["docs"],
            f(r.v["ingest"]["docs_per_sec"].as_f64().unwrap_or(f64::NAN)),
            f(r.v["index_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6),
            f(r.v["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6),
            all.len(),
            f(r.hmean_qps(&SPIRIT_WORKLOADS)),
            f(pct(&all, 0.5)),
            f(pct(&all, 0.99)),
            f(pct(&all, 0.999)),
        )
        .unwrap();
    }
    if let Some(k) = runs.iter().map(|r| r.rounds.len()).max().filter(|&k| k > 1) {
        // Whether later rounds took a workload's queries in another order than the first (rotated).
        let rotated = runs.iter().any(|r| {
            r.rounds.iter().skip(1).any(|x| {
                r.cats()
                    .iter()
                    .any(|c| x["categories"][c]["queries"] != r.rounds[0]["categories"][c]["queries"])
            })
        });
        let how = if rotated { "; each round's queries rotated, the same for every engine" } else { "" };
        writeln!(md, "\nThe windowed real-time configurations ran in {k} rounds (each a whole window on an index built afresh; the configurations' order reversed every other round{how}), and each row above and below pools every round's timings: percentiles and QPS over all of them, each timing with its query, ingest docs/s the rounds' mean, index and peak memory the largest.").unwrap();
    }
    writeln!(md, "\nEvery engine stores title and date (spirit: `_source` without `body`; the baselines: stored fields) and indexes body without storing it; spirit keeps the line number as `_id`, the baselines as a stored `id`.\n").unwrap();

    // Per-workload tables for static and for windowed real time.
    let cats: Vec<String> = runs.first().map(|r| r.cats()).unwrap_or_default();
    for (mode, title) in [
        ("static", "Static index (non-concurrent)"),
        ("nrt", "Windowed real time (queries while the last 20% is ingested)"),
    ] {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.mode() == mode).collect();
        if rs.is_empty() {
            continue;
        }
        writeln!(md, "## {title}\n\nQPS / p99 µs per workload:\n").unwrap();
        write!(md, "| workload |").unwrap();
        for r in &rs {
            write!(md, " {} |", r.label).unwrap();
        }
        write!(md, "\n|---|").unwrap();
        for _ in &rs {
            write!(md, "---|").unwrap();
        }
        writeln!(md).unwrap();
        for c in &cats {
            write!(md, "| {c} |").unwrap();
            for r in &rs {
                write!(md, " {} / {} |", f(r.qps(c)), f(pct(&r.lat(c), 0.99))).unwrap();
            }
            writeln!(md).unwrap();
        }
        writeln!(md).unwrap();
        let svg = cdf_svg(&rs, &format!("Latency CDF, {title}"));
        let name = format!("latency-cdf-{mode}.svg");
        std::fs::write(a.dir.join(&name), svg).expect("write svg");
        writeln!(md, "![latency CDF]({name})\n").unwrap();
    }
    let svg = qps_svg(&runs);
    std::fs::write(a.dir.join("qps.svg"), svg).expect("write svg");
    writeln!(md, "![QPS per configuration](qps.svg)\n").unwrap();

    visibility_section(&mut md, &runs, &recovery);

    // Goals as ratios from this run.
    writeln!(md, "## Goals (issue 5), as ratios from this run\n").unwrap();
    let find = |l: &str| runs.iter().find(|r| r.label == l);
    let spirit_rt = find("spirit real-time");
    let hm = |r: Option<&Run>| r.map_or(f64::NAN, |r| r.hmean_qps(&SPIRIT_WORKLOADS));
    // A ratio of two configurations run in as many rounds: each round's too (round i of one against round i
    // of the other), after the pooled one.
    let per_round = |a: Option<&Run>, b: Option<&Run>| -> String {
        let (Some(a), Some(b)) = (a, b) else { return String::new() };
        if a.rounds.len() < 2 || a.rounds.len() != b.rounds.len() {
            return String::new();
        }
        let round_hm = |v: &Value| {
            Run { label: String::new(), v: v.clone(), rounds: vec![] }.hmean_qps(&SPIRIT_WORKLOADS)
        };
        let each: Vec<String> =
            a.rounds.iter().zip(&b.rounds).map(|(x, y)| f(round_hm(x) / round_hm(y))).collect();
        format!(" (pooled over {} rounds; per round: {})", each.len(), each.join(", "))
    };
    let mut goal = |name: &str, value: f64, target: f64| {
        let ok = if value.is_finite() {
            if value >= target {
                "met"
            } else {
                "not met"
            }
        } else {
            "not measured"
        };
        writeln!(md, "- {name}: **{}** (goal ≥ {target}) — {ok}", f(value)).unwrap();
    };
    for (base, target) in [("lucene NRT-1", 50.0), ("lucene NRT-∞", 2.0)] {
        let name = format!(
            "spirit real-time QPS / {} QPS (hmean L..HH, WRT){}",
            base.replacen("lucene", "Lucene", 1),
            per_round(spirit_rt, find(base))
        );
        goal(&name, hm(spirit_rt) / hm(find(base)), target);
    }
    let ingest = |l: &str| find(l).and_then(|r| r.v["ingest"]["docs_per_sec"].as_f64()).unwrap_or(f64::NAN);
    goal(
        "single-thread ingest, spirit / Tantivy (static)",
        ingest("spirit static") / ingest("tantivy static"),
        1.5,
    );
    goal(
        "single-thread ingest, spirit / Lucene (static)",
        ingest("spirit static") / ingest("lucene static"),
        2.5,
    );
    if let Some(s) = spirit_rt {
        // As the goal is worded: each configuration's p99 over the queries it timed. A configuration that
        // reopens often times only the first few queries of each workload (round-robin), so the same
        // comparison is also made over the queries both timed (spirit's every run of them), and printed apart.
        let (mut worse, mut worse_same, mut worse_weighted) = (vec![], vec![], vec![]);
        let mut slowest = vec![];
        for r in runs.iter().filter(|r| r.mode() == "nrt" && r.engine() != "spirit") {
            for c in &cats {
                let theirs = r.lat(c);
                let b = pct(&theirs, 0.99);
                // Whether spirit's p99 `a` is not below the configuration's.
                let misses = |a: f64| a.is_finite() && b.is_finite() && a >= b;
                let a = pct(&s.lat(c), 0.99);
                let raw_miss = misses(a);
                if raw_miss {
                    worse.push(format!(
                        "{c} vs {} ({} ≥ {} µs{})",
                        r.label,
                        f(a),
                        f(b),
                        few_timings(theirs.len())
                    ));
                }
                let timed = r.timed(c);
                let same = s.lat_of(c, |q| timed.get(q).copied().unwrap_or(false));
                let a = pct(&same, 0.99);
                if misses(a) {
                    let k = timed.iter().filter(|&&t| t).count();
                    worse_same.push(format!("{c} vs {} ({} ≥ {} µs, {k} queries)", r.label, f(a), f(b)));
                }
                let a = pct(&s.lat_weighted_as(r, c), 0.99);
                let weighted_miss = misses(a);
                if weighted_miss {
                    worse_weighted.push(format!("{c} vs {} ({} ≥ {} µs)", r.label, f(a), f(b)));
                }
                if raw_miss || weighted_miss {
                    slowest.push(format!("{c} vs {}: {}", r.label, s.slowest_compared(r, c, 3).join(", ")));
                }
            }
        }
        if worse.is_empty() {
            writeln!(md, "- spirit p99 below every Lucene and Tantivy near-real-time configuration on every workload: met").unwrap();
        } else {
            writeln!(
                md,
                "- spirit p99 below every near-real-time configuration: not met on {}: {}",
                worse.len(),
                worse.join("; ")
            )
            .unwrap();
        }
        writeln!(
            md,
            "  - the same over the queries both timed (spirit's p99 over its runs of the queries the configuration \
             reached): {}",
            if worse_same.is_empty() {
                "below on every pair".to_string()
            } else {
                format!("not below on {}: {}", worse_same.len(), worse_same.join("; "))
            }
        )
        .unwrap();
        writeln!(
            md,
            "  - the same with every query weighted as the configuration timed it (as many of spirit's timings of \
             each query as the configuration took, spread evenly over spirit's): {}",
            if worse_weighted.is_empty() {
                "below on every pair".to_string()
            } else {
                format!("not below on {}: {}", worse_weighted.len(), worse_weighted.join("; "))
            }
        )
        .unwrap();
        if !slowest.is_empty() {
            writeln!(
                md,
                "  - where a p99 above misses, the configuration's three slowest queries of the workload, median µs \
                 (timings) spirit / the configuration: {}",
                slowest.join("; ")
            )
            .unwrap();
        }
        if !stalls.is_empty() {
            writeln!(
                md,
                "  - the machine's own stalls, the same for every engine: {}",
                stall_summary(&stalls)
            )
            .unwrap();
        }
        let n = &s.v["nrt"];
        let p99 = n["visibility"]["p99_us"].as_f64().unwrap_or(f64::NAN);
        let ok = if !p99.is_finite() {
            "not measured"
        } else if p99 < 1000.0 {
            "met"
        } else {
            "not met"
        };
        let worst = if s.rounds.len() > 1 {
            format!(", the largest of {} rounds", s.rounds.len())
        } else {
            String::new()
        };
        writeln!(
            md,
            "- spirit ingest-to-visible p99 (WRT{worst}): **{} µs** (goal < 1000 µs) — {ok}",
            f(p99)
        )
        .unwrap();
        writeln!(
            md,
            "- spirit visibility spot checks during WRT: {} checks, {} violations (a count missing a document \
             acknowledged before it started){}; {} probes missed their document",
            n["visibility_checks"],
            n["visibility_violations"],
            n.get("visibility_in_flight").map_or(String::new(), |x| format!(
                "; {x} counts also saw the document of an `add` still in flight (inserted, not yet returned)"
            )),
            n["visibility"]["not_visible_during_run"]
        )
        .unwrap();
        if let Some(m) = n.get("mean_segments_by_state").and_then(|m| m.as_object()) {
            let parts: Vec<String> =
                m.iter().map(|(k, v)| format!("{k} {:.1}", v.as_f64().unwrap_or(f64::NAN))).collect();
            writeln!(
                md,
                "- segments a spirit real-time query visited (mean per state): {}",
                parts.join(", ")
            )
            .unwrap();
        }
    }

    fast_query_goals(&mut md, &runs);

    // Equal work: hit counts of the static runs.
    let statics: Vec<&Run> = runs.iter().filter(|r| r.mode() == "static").collect();
    if statics.len() > 1 {
        writeln!(md, "\n## Equal work: static hit counts\n").unwrap();
        let base = statics[0];
        for other in &statics[1..] {
            let (mut same, mut diff, mut examples) = (0, 0, vec![]);
            for c in &cats {
                let qs = base.v["categories"][c]["queries"].as_array().cloned().unwrap_or_default();
                let ha = base.v["categories"][c]["hit_counts"].as_array().cloned().unwrap_or_default();
                let hb = other.v["categories"][c]["hit_counts"].as_array().cloned().unwrap_or_default();
                for (i, q) in qs.iter().enumerate() {
                    match (ha.get(i), hb.get(i)) {
                        (Some(x), Some(y)) if x == y => same += 1,
                        (Some(x), Some(y)) => {
                            diff += 1;
                            if examples.len() < 10 {
                                examples.push(format!("`{}` {x} vs {y}", q.as_str().unwrap_or("")));
                            }
                        }
                        _ => {}
                    }
                }
            }
            writeln!(
                md,
                "- {} vs {}: {same} queries with equal hit counts, {diff} different{}",
                base.label,
                other.label,
                if examples.is_empty() { String::new() } else { format!(": {}", examples.join(", ")) }
            )
            .unwrap();
        }
    }
    std::fs::write(a.dir.join("report.md"), &md).expect("write report");
    println!("{md}");
}

/// `spirit-bench stalls` results in one phrase: per meter, the random-read and clock-loop stall rates.
fn stall_summary(meters: &[Value]) -> String {
    let per = meters
        .iter()
        .map(|m| {
            let rate = |k: &str| m[k]["stalls_per_second"].as_f64().unwrap_or(f64::NAN);
            format!(
                "{}: {:.0} per second over random reads of {} MiB ({:.2}% of the time), {:.0} per second in a loop \
                 reading the clock",
                m["label"].as_str().filter(|l| !l.is_empty()).unwrap_or("meter"),
                rate("reads"),
                m["buffer_mib"],
                100.0 * m["reads"]["stalled_fraction"].as_f64().unwrap_or(f64::NAN),
                rate("clock")
            )
        })
        .collect::<Vec<_>>();
    format!(
        "intervals of {} µs or more in which a thread got no work done (`spirit-bench stalls`), {} — one inside a \
         cheap query makes it a p99 timing, whichever engine ran it",
        meters.first().and_then(|m| m["stall_us"].as_f64()).unwrap_or(crate::stalls::STALL_US),
        per.join("; ")
    )
}

/// Ingest-to-visible latency and reopen times of the real-time runs; open (restart) and crash-recovery times.
fn visibility_section(md: &mut String, runs: &[Run], recovery: &Value) {
    let nrt: Vec<&Run> = runs.iter().filter(|r| r.mode() == "nrt").collect();
    if !nrt.is_empty() {
        writeln!(md, "## Ingest-to-visible latency (windowed real time)\n").unwrap();
        writeln!(md, "spirit: for every 16th background document, the ingest thread searches the document's unique token right after `add` returns; the latency is until that search returns it. Baselines: from `addDocument`/`add_document` returning until the reopen that makes the document visible completes (every document; the docs are a prefix, so each reopen's new document count says which became visible). Documents no reopen made visible before the run ended are counted, not timed (NRT-∞: all of them).\n").unwrap();
        writeln!(md, "| configuration | docs timed | not visible in run | p50 µs | p99 µs | p99.9 µs | max µs | reopens | reopen mean / max µs | add p50 / p99 / max µs |\n|---|---|---|---|---|---|---|---|---|---|").unwrap();
        // One row per round: percentiles of different windows do not pool.
        let rows = nrt.iter().flat_map(|r| {
            r.rounds.iter().enumerate().map(move |(i, v)| match r.rounds.len() {
                1 => (r.label.clone(), v),
                _ => (format!("{} (round {})", r.label, i + 1), v),
            })
        });
        for (label, round) in rows {
            let n = &round["nrt"];
            let v = &n["visibility"];
            let g = |x: &Value| f(x.as_f64().unwrap_or(f64::NAN));
            let add = &n["add_latency"];
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                label,
                v["docs_measured"],
                v["not_visible_during_run"],
                g(&v["p50_us"]),
                g(&v["p99_us"]),
                g(&v["p999_us"]),
                g(&v["max_us"]),
                n["reopens"],
                g(&n["reopen_us_mean"]),
                g(&n["reopen_us_max"]),
                if add.is_object() {
                    format!("{} / {} / {}", g(&add["p50_us"]), g(&add["p99_us"]), g(&add["max_us"]))
                } else {
                    "–".into()
                },
            )
            .unwrap();
        }
        writeln!(md).unwrap();
    }
    let statics: Vec<&Run> =
        runs.iter().filter(|r| r.mode() == "static" && r.v["open_seconds"].is_f64()).collect();
    if statics.is_empty() && recovery.is_null() {
        return;
    }
    writeln!(md, "## Restart and recovery\n").unwrap();
    writeln!(md, "Open = time to open the static index from its directory after a clean close, until a searcher is ready (Lucene `DirectoryReader.open`, Tantivy `Index::open_in_dir` + reader, spirit `Engine::open`). After a crash, Lucene and Tantivy reopen their last commit the same way and lose every document added since it; spirit in crash-safe mode loses no acknowledged document.\n").unwrap();
    for r in &statics {
        writeln!(md, "- {}: open {} ms", r.label, f(r.v["open_seconds"].as_f64().unwrap_or(f64::NAN) * 1e3))
            .unwrap();
    }
    if !recovery.is_null() {
        writeln!(
            md,
            "- spirit crash-safe, `kill -9` during ingest at about {} docs: recovered in {} ms (open {} ms; {} tLog records scanned, the un-engraved tail re-indexed in {} ms) — `spirit-bench durability --recovery-only`",
            recovery["recovery_docs"],
            f(recovery["recovery_ms"].as_f64().unwrap_or(f64::NAN)),
            f(recovery["recovery_open_ms"].as_f64().unwrap_or(f64::NAN)),
            recovery["recovery_replayed_records"],
            f(recovery["recovery_replay_ms"].as_f64().unwrap_or(f64::NAN)),
        )
        .unwrap();
    }
    writeln!(md).unwrap();
}

const COLORS: [&str; 10] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf",
];

/// Latency CDF (log x) of all timed queries, one line per run.
fn cdf_svg(runs: &[&Run], title: &str) -> String {
    let (w, h, ml, mb) = (760.0, 420.0, 60.0, 50.0);
    let lats: Vec<Vec<f64>> = runs.iter().map(|r| r.all_lat()).collect();
    let lo = lats.iter().flatten().cloned().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = lats.iter().flatten().cloned().fold(0.0, f64::max).max(lo * 10.0);
    let (lx0, lx1) = (lo.log10().floor(), hi.log10().ceil());
    let x = |v: f64| ml + (v.max(1.0).log10() - lx0) / (lx1 - lx0) * (w - ml - 200.0);
    let y = |p: f64| h - mb - p * (h - mb - 30.0);
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='{ml}' y='18' font-size='14'>{title}</text>\n");
    for d in (lx0 as i32)..=(lx1 as i32) {
        let xv = x(10f64.powi(d));
        s += &format!("<line x1='{xv}' y1='{}' x2='{xv}' y2='{}' stroke='#ddd'/><text x='{xv}' y='{}' text-anchor='middle'>10^{d} µs</text>\n", y(0.0), y(1.0), h - mb + 18.0);
    }
    for p in [0.0, 0.5, 0.9, 0.99, 1.0] {
        s += &format!("<line x1='{ml}' y1='{}' x2='{}' y2='{}' stroke='#eee'/><text x='{}' y='{}' text-anchor='end'>{p}</text>\n", y(p), w - 200.0, y(p), ml - 4.0, y(p) + 4.0);
    }
    for (i, (r, l)) in runs.iter().zip(&lats).enumerate() {
        if l.is_empty() {
            continue;
        }
        let step = (l.len() / 400).max(1);
        let pts: Vec<String> = l
            .iter()
            .enumerate()
            .step_by(step)
            .chain(std::iter::once((l.len() - 1, &l[l.len() - 1])))
            .map(|(k, v)| format!("{:.1},{:.1}", x(*v), y((k + 1) as f64 / l.len() as f64)))
            .collect();
        let c = COLORS[i % COLORS.len()];
        s += &format!("<polyline fill='none' stroke='{c}' stroke-width='1.5' points='{}'/>\n", pts.join(" "));
        s += &format!(
            "<rect x='{}' y='{}' width='12' height='3' fill='{c}'/><text x='{}' y='{}'>{}</text>\n",
            w - 190.0,
            40.0 + 18.0 * i as f64,
            w - 172.0,
            45.0 + 18.0 * i as f64,
            r.label
        );
    }
    s + "</svg>\n"
}

/// Harmonic-mean QPS (L..HH) per configuration, log-scale bars.
fn qps_svg(runs: &[Run]) -> String {
    let rows: Vec<(&str, f64)> = runs
        .iter()
        .map(|r| (r.label.as_str(), r.hmean_qps(&SPIRIT_WORKLOADS)))
        .filter(|x| x.1.is_finite())
        .collect();
    let (w, bh) = (760.0, 22.0);
    let h = 50.0 + bh * rows.len() as f64;
    let hi = rows.iter().map(|r| r.1).fold(1.0, f64::max);
    let lx1 = hi.log10().ceil().max(1.0);
    let x = |v: f64| (v.max(1.0).log10() / lx1) * (w - 260.0);
    let mut s = format!("<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n<text x='10' y='18' font-size='14'>QPS, harmonic mean over L, M, H, LL, MM, HH (log scale)</text>\n");
    for (i, (l, q)) in rows.iter().enumerate() {
        let yv = 35.0 + bh * i as f64;
        let c = COLORS[if l.starts_with("spirit") {
            0
        } else if l.starts_with("lucene") {
            1
        } else {
            2
        }];
        s += &format!("<text x='170' y='{}' text-anchor='end'>{l}</text><rect x='175' y='{yv}' width='{:.1}' height='{}' fill='{c}'/><text x='{:.1}' y='{}'>{}</text>\n", yv + 14.0, x(*q), bh - 6.0, 180.0 + x(*q), yv + 14.0, f(*q));
    }
    s + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(latencies: &[f64]) -> Run {
        let v = json!({"categories": {"C": {"queries": ["a", "b", "c"], "latencies_us": latencies}}});
        Run { label: "x".into(), rounds: vec![v.clone()], v }
    }

    #[test]
    fn weighting_takes_as_many_timings_per_query_as_the_other_run_spread_over_this_one() {
        // This run: query a timed 4 times (1, 2, 3, 4), b 3 times (10, 20, 30), c 3 times (100, 200, 300).
        let mine = run(&[1.0, 10.0, 100.0, 2.0, 20.0, 200.0, 3.0, 30.0, 300.0, 4.0]);
        // The other, round-robin as every run: a twice (5, 8), b and c once.
        let other = run(&[5.0, 6.0, 7.0, 8.0]);
        assert_eq!(
            mine.per_query("C"),
            vec![vec![1.0, 2.0, 3.0, 4.0], vec![10.0, 20.0, 30.0], vec![100.0, 200.0, 300.0]]
        );
        // a: 2 of its 4, the middles of the two halves (indices 1 and 3); b and c: 1 of 3, the middle.
        assert_eq!(mine.lat_weighted_as(&other, "C"), vec![2.0, 4.0, 20.0, 200.0]);
        // More timings wanted than taken (a 3 against 2, b 3 against 1, c 2 against 1): spread with repeats.
        let many = run(&[7.0; 8]);
        let few = run(&[1.0, 10.0, 100.0, 2.0]);
        assert_eq!(few.lat_weighted_as(&many, "C"), vec![1.0, 2.0, 2.0, 10.0, 10.0, 10.0, 100.0, 100.0]);
        // A query this run never timed contributes nothing.
        assert_eq!(run(&[1.0]).lat_weighted_as(&run(&[5.0, 6.0]), "C"), vec![1.0]);
    }

    #[test]
    fn rounds_of_a_configuration_pool_their_timings_with_their_queries() {
        let round = |lat: &[f64], rate: f64, p99: f64, checks: u64| {
            json!({"engine": "tantivy", "mode": "nrt", "reopen_every": 10, "peak_rss_bytes": rate * 10.0,
                   "ingest": {"docs_per_sec": rate},
                   "categories": {"C": {"queries": ["a", "b", "c"], "latencies_us": lat}},
                   "nrt": {"visibility_checks": checks, "visibility": {"p99_us": p99, "not_visible_during_run": 1},
                           "mean_segments_by_state": {"fresh": rate / 100.0}}})
        };
        // The second round took the queries rotated by one: b, c, a.
        let mut second = round(&[3.0, 4.0, 5.0, 6.0], 300.0, 9.0, 4);
        second["categories"]["C"]["queries"] = json!(["b", "c", "a"]);
        let runs = [round(&[1.0, 2.0], 100.0, 5.0, 3), second]
            .into_iter()
            .map(|v| Run { label: label(&v), rounds: vec![v.clone()], v })
            .chain(std::iter::once(run(&[7.0])))
            .collect();
        let runs = pool(runs);
        assert_eq!(runs.len(), 2, "one run per configuration");
        let p = &runs[0];
        assert_eq!((p.label.as_str(), p.rounds.len()), ("tantivy NRT-10", 2));
        // Round 1 timed a, b; round 2 b, c, a, b: each timing stays with its query.
        assert_eq!(p.per_query("C"), vec![vec![1.0, 5.0], vec![2.0, 3.0, 6.0], vec![4.0]]);
        assert_eq!(p.lat("C"), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(p.timed("C"), vec![true, true, true]);
        assert_eq!(p.v["ingest"]["docs_per_sec"], 200.0);
        assert_eq!(p.v["peak_rss_bytes"], 3000.0);
        // The slowest round's visibility, with the checks and misses of both.
        assert_eq!(p.v["nrt"]["visibility"]["p99_us"], 9.0);
        assert_eq!(p.v["nrt"]["visibility_checks"], 7);
        assert_eq!(p.v["nrt"]["visibility"]["not_visible_during_run"], 2);
        assert_eq!(p.v["nrt"]["mean_segments_by_state"]["fresh"], 2.0);
        // A configuration run once is left as it was.
        assert_eq!((runs[1].rounds.len(), runs[1].lat("C")), (1, vec![7.0]));
    }

    #[test]
    fn a_p99_over_few_timings_says_so() {
        assert_eq!(few_timings(7), "; 7 timings: its p99 is its slowest");
        assert_eq!(few_timings(51), "; 51 timings: its p99 is its slowest");
        assert_eq!(few_timings(60), "; 60 timings");
        assert_eq!(few_timings(100), "");
        assert_eq!(few_timings(0), "");
    }

    #[test]
    fn slowest_queries_of_the_other_run_with_both_medians() {
        // This run: a (1, 3), b (50, 70), c (5). The other: a (2), b (40), c (9): slowest b, c, a. (A
        // median of two is the upper one, as `pct` ranks.)
        let mine = run(&[1.0, 50.0, 5.0, 3.0, 70.0]);
        let other = run(&[2.0, 40.0, 9.0]);
        assert_eq!(
            mine.slowest_compared(&other, "C", 2),
            vec!["`b` 70.0 (2×) / 40.0 (1×)".to_string(), "`c` 5.00 (1×) / 9.00 (1×)".to_string()]
        );
        // A query the other run never timed is not among its slowest; one this run never timed shows a dash.
        assert_eq!(
            run(&[1.0]).slowest_compared(&run(&[2.0, 3.0]), "C", 5),
            vec!["`b` – (0×) / 3.00 (1×)".to_string(), "`a` 1.00 (1×) / 2.00 (1×)".to_string()]
        );
    }
}
