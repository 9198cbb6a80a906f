//! Inputs shared by every run: luceneutil line files and task files, read the same way as the baselines
//! (`bench/baselines/README.md`): documents preloaded into memory, the first N distinct queries per category.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The data every run reads: a line file, a task file, and how much of each.
#[derive(clap::Args)]
pub struct Workload {
    /// luceneutil line file (.gz allowed).
    #[arg(long)]
    pub docs: std::path::PathBuf,
    /// Only the first N documents.
    #[arg(long)]
    pub max_docs: Option<usize>,
    /// luceneutil task file.
    #[arg(long)]
    pub tasks: std::path::PathBuf,
    /// First N distinct queries of each category.
    #[arg(long, default_value_t = 100)]
    pub queries_per_category: usize,
    #[arg(long, default_value = "1GB")]
    pub dram_budget: String,
    #[arg(long, default_value = "graceful")]
    pub durability: spirit::Durability,
    /// When engraved segments are committed and merged: `lazy` (when DRAM runs short; the default) or
    /// `eager` (right after engraving).
    #[arg(long, default_value = "lazy")]
    pub commit: spirit::CommitPolicy,
    /// Lazy commit's bound on unmerged engraved segments (`ShardConfig::max_unmerged`); `none`: no bound.
    #[arg(long, default_value = "2")]
    pub max_unmerged: String,
    /// Shards of the index (the DRAM budget is split between them); 1 matches the baselines' one query
    /// thread, more evaluate a query's shards in parallel.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Arena of one real-time fresh segment (`ShardConfig::fresh_segment_bytes`, e.g. `16MB`; default:
    /// the engine's, min(64 MiB, budget / 8)).
    #[arg(long)]
    pub fresh_segment_bytes: Option<String>,
    /// Touch the whole DRAM heap in the background when the engine opens, as `spirit serve --pretouch` does
    /// (`ShardConfig::pretouch`); by default it is faulted in as it is first used, as the library does.
    #[arg(long)]
    pub pretouch: bool,
}

impl Workload {
    pub fn shard_config(&self) -> spirit::ShardConfig {
        spirit::ShardConfig {
            dram_budget: spirit::parse_size(&self.dram_budget).expect("dram budget") as usize,
            durability: self.durability,
            commit: self.commit,
            max_unmerged: match self.max_unmerged.as_str() {
                "none" => None,
                n => Some(n.parse().expect("--max-unmerged: a number or none")),
            },
            fresh_segment_bytes: self
                .fresh_segment_bytes
                .as_deref()
                .map(|b| spirit::parse_size(b).expect("--fresh-segment-bytes") as usize),
            pretouch: self.pretouch,
            ..Default::default()
        }
    }

    pub fn engine_config(&self) -> spirit::EngineConfig {
        spirit::EngineConfig { shard: self.shard_config(), default_shards: Some(self.shards) }
    }
}

/// One line-file document; its `_id` is its 0-based line number (the baselines' `id` field).
pub struct Doc {
    pub title: String,
    pub date: String,
    pub body: String,
}

impl Doc {
    pub fn json(&self, id: usize) -> serde_json::Value {
        serde_json::json!({"_id": id.to_string(), "title": self.title, "date": self.date, "body": self.body})
    }
    /// Bytes of the line this document came from (with its newline).
    pub fn bytes(&self) -> usize {
        self.title.len() + self.date.len() + self.body.len() + 3
    }
}

pub fn load_docs(path: &Path, max_docs: Option<usize>) -> std::io::Result<Vec<Doc>> {
    let file = std::fs::File::open(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let raw: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut reader = BufReader::with_capacity(1 << 20, raw);
    let mut buf = Vec::with_capacity(4096);
    let mut docs = Vec::new();
    let mut first = true;
    while max_docs.is_none_or(|m| docs.len() < m) {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        if std::mem::take(&mut first) && buf.starts_with(b"FIELDS_HEADER_INDICATOR") {
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        let mut parts = line.splitn(3, '\t');
        let mut next = || parts.next().unwrap_or("").to_string();
        docs.push(Doc { title: next(), date: next(), body: next() });
    }
    Ok(docs)
}

/// A category of queries.
pub struct Category {
    pub name: String,
    pub queries: Vec<String>,
}

/// `Category: query # comment` lines; the first `per_category` distinct queries of each category, in file
/// order, restricted to `wanted` (in that order) when given.
pub fn load_tasks(
    path: &Path,
    wanted: Option<&[String]>,
    per_category: usize,
) -> Result<Vec<Category>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cats: Vec<Category> = Vec::new();
    let mut seen: Vec<HashSet<String>> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((cat, rest)) = line.split_once(':') else { continue };
        let query = rest.split('#').next().unwrap_or("").trim();
        if query.is_empty() {
            continue;
        }
        let i = match cats.iter().position(|c| c.name == cat.trim()) {
            Some(i) => i,
            None => {
                cats.push(Category { name: cat.trim().to_string(), queries: vec![] });
                seen.push(HashSet::new());
                cats.len() - 1
            }
        };
        if cats[i].queries.len() < per_category && seen[i].insert(query.to_string()) {
            cats[i].queries.push(query.to_string());
        }
    }
    match wanted {
        None => Ok(cats),
        Some(names) => names
            .iter()
            .filter(|n| !n.trim().is_empty())
            .map(|n| {
                cats.iter()
                    .find(|c| c.name == n.trim())
                    .map(|c| Category { name: c.name.clone(), queries: c.queries.clone() })
                    .ok_or_else(|| format!("category {n} not found in the task file"))
            })
            .collect(),
    }
}

/// Restarts this process's peak RSS ([`peak_rss`]) from its current RSS (Linux: `clear_refs` 5), so a run
/// that follows others in the same process reports its own peak; a no-op where that is not available.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// VmHWM of this process in bytes.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The mappings of every spirit index that is compared with the baselines: `_source` without `body`, so
/// spirit stores what Lucene and Tantivy store (title and date; the line number is the `_id`) and, like
/// them, indexes `body` without storing it (`bench/baselines/README.md`, "Fields"). Same stored bytes,
/// same work.
pub fn baseline_mappings() -> serde_json::Value {
    serde_json::json!({"_source": {"excludes": ["body"]}})
}

/// CPU seconds the calling thread has used (user + system, from `/proc/thread-self/stat`; 0 where that is
/// missing). Unlike wall time, it does not count the time the thread waited for a core, so it measures the
/// work of a single-threaded loop on a shared machine.
pub fn thread_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else { return 0.0 };
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5); here 0-based after the state field (field 3).
    (ticks(11) + ticks(12)) / 100.0
}

/// From per-query latencies in seconds summed over `passes` loops: the mean latency of every query timed and
/// the geometric mean over the queries of each one's mean, both in µs.
pub fn loop_means(per_query: &[f64], passes: u64) -> (f64, f64) {
    let n = per_query.len().max(1) as f64;
    let each = per_query_means(per_query, passes);
    let mean = each.iter().sum::<f64>() / n;
    let geomean = (each.iter().map(|x| x.max(1e-3).ln()).sum::<f64>() / n).exp();
    (mean, geomean)
}

/// Each query's mean latency in µs (to 0.1 µs) from its seconds summed over `passes` loops.
pub fn per_query_means(per_query: &[f64], passes: u64) -> Vec<f64> {
    per_query.iter().map(|s| (s * 1e7 / passes.max(1) as f64).round() / 10.0).collect()
}

#[cfg(test)]
mod tests {
    use super::{loop_means, per_query_means};

    #[test]
    fn loop_means_are_per_query_means_averaged_and_geometric() {
        // Two queries over 4 passes: 4 µs and 400 µs in total, so 1 µs and 100 µs each.
        let (mean, geomean) = loop_means(&[4e-6, 400e-6], 4);
        assert!((mean - 50.5).abs() < 1e-9, "{mean}");
        assert!((geomean - 10.0).abs() < 1e-9, "{geomean}");
        assert_eq!(per_query_means(&[4e-6, 400e-6, 1.23456e-3], 4), vec![1.0, 100.0, 308.6]);
    }
}
