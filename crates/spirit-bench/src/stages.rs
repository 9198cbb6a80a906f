//! `spirit-bench stages`: the per-document stages of indexing (issue 7), each alone on one thread, timed in
//! thread CPU seconds so the shared machine's noise stays out — analysis (parse the fields, tokenize, collect
//! terms), insertion into a fresh segment, and the flush of that segment into an image. The bulk load runs
//! the same three on its workers, its ordered stage and the flusher; end-to-end times (`spirit-bench bulk`)
//! mix them with scheduling, page faults and I/O, which is what this leaves out.

use crate::input::{baseline_mappings, load_docs, thread_cpu_seconds};
use spirit::codec::FieldCodecs;
use spirit::memory::{DramHeap, Fill, RingKind};
use spirit::schema::{analyze_document, analyze_document_into, AnalyzedDoc, BlockTerms};
use spirit::segment::{FreshSegment, ImageBuilder, TermBatch};
use spirit::{Engine, EngineConfig};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct StagesArgs {
    /// luceneutil line file (.gz allowed).
    #[arg(long)]
    docs: PathBuf,
    /// Documents to index (one fresh segment holds them all).
    #[arg(long, default_value_t = 100_000)]
    max_docs: usize,
    /// Rounds of each stage; the least CPU time of each is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Arena of the fresh segment.
    #[arg(long, default_value = "512MiB")]
    arena: String,
    /// Insert in batches of this many documents (`FreshSegment::insert_batch`, as a bulk load's blocks are),
    /// their terms grouped beforehand (timed apart, as "group": the bulk workers do it); 0: one by one.
    #[arg(long, default_value_t = 0)]
    batch: usize,
}

/// Analyzed documents in batches, each with the table it was analyzed into (`None`: one by one, in one).
type Analyzed = Vec<(Option<BlockTerms>, Vec<AnalyzedDoc>)>;

/// CPU seconds `f` took on this thread, and what it returned.
fn cpu<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let t0 = thread_cpu_seconds();
    let r = f();
    (thread_cpu_seconds() - t0, r)
}

pub fn run(a: &StagesArgs) -> Result<(), Box<dyn std::error::Error>> {
    let arena = spirit::parse_size(&a.arena)? as usize;
    let docs = load_docs(&a.docs, Some(a.max_docs))?;
    let bytes: usize = docs.iter().map(|d| d.title.len() + d.date.len() + d.body.len() + 3).sum();
    let values: Vec<serde_json::Value> =
        docs.iter().map(|d| serde_json::json!({"title": d.title, "date": d.date, "body": d.body})).collect();
    drop(docs);
    // The schema the bulk benchmark's index ends up with: its mappings, fields mapped from the first document.
    let dir = tempfile::tempdir()?;
    let engine = Engine::open(dir.path(), EngineConfig::default())?;
    let index = engine.create_index("stages", Some(&baseline_mappings()), None)?;
    index.prepare(None, &values[0])?;
    let schema = index.schema();
    let ids: Vec<String> = (0..values.len()).map(|i| i.to_string()).collect();

    let (mut analyze, mut insert, mut flush, mut group) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    let mut image_bytes = 0;
    for round in 0..a.rounds {
        // One by one: each document analyzed alone. In batches: each batch's documents into one table, as a
        // bulk load's workers analyze a block (a worker reuses its table block after block; here each batch
        // keeps its own until it is grouped, so the tables' growth is counted in analysis).
        let (t, analyzed) = cpu(|| -> Result<Analyzed, spirit::Error> {
            let docs = values.iter().zip(&ids);
            if a.batch == 0 {
                let docs = docs.map(|(v, id)| analyze_document(&schema, id.clone(), v));
                return Ok(vec![(None, docs.collect::<Result<_, _>>()?)]);
            }
            let chunks: Vec<Vec<_>> = docs.collect::<Vec<_>>().chunks(a.batch).map(|c| c.to_vec()).collect();
            chunks
                .into_iter()
                .map(|c| {
                    let mut terms = BlockTerms::default();
                    let docs = c
                        .into_iter()
                        .map(|(v, id)| {
                            let d = analyze_document_into(&schema, id.clone(), v, false, &mut terms)?;
                            terms.take();
                            Ok(d)
                        })
                        .collect::<Result<_, spirit::Error>>()?;
                    Ok((Some(terms), docs))
                })
                .collect()
        });
        let analyzed = analyzed?;
        analyze = analyze.min(t);
        let heap = DramHeap::new(arena + (64 << 20), arena + (32 << 20))?;
        // Zeroed here, so the kernel backing its pages is not counted as insertion's work.
        let block = heap
            .try_alloc_filled(RingKind::ShortTerm, arena, Fill::Zeroed)
            .ok_or("the arena does not fit the heap")?;
        let fresh = FreshSegment::new(block, a.max_docs as u32);
        let (t, inserted) = if a.batch == 0 {
            let docs = &analyzed[0].1;
            cpu(|| docs.iter().try_for_each(|d| fresh.insert(d).map(drop).map_err(|e| format!("{e:?}"))))
        } else {
            let (g, batches) = cpu(|| {
                analyzed
                    .iter()
                    .map(|(terms, _)| {
                        let mut b = TermBatch::default();
                        b.fill(terms.as_ref().expect("a batch's table"));
                        b
                    })
                    .collect::<Vec<_>>()
            });
            group = group.min(g);
            let chunks: Vec<Vec<&AnalyzedDoc>> = analyzed.iter().map(|(_, c)| c.iter().collect()).collect();
            cpu(|| {
                chunks
                    .iter()
                    .zip(&batches)
                    .try_for_each(|(c, b)| fresh.insert_batch(c, b).map(drop).map_err(|e| format!("{e:?}")))
            })
        };
        inserted.map_err(|e| format!("insert: {e:?} (a larger --arena?)"))?;
        insert = insert.min(t);
        drop(analyzed);
        let (t, image) = cpu(|| ImageBuilder::from_fresh(&fresh, 1, 0, &FieldCodecs::default()));
        image_bytes = image.map_err(|e| format!("flush: {e:?}"))?.len();
        flush = flush.min(t);
        eprintln!(
            "round {round}: analyze {analyze:.2} s, group {group:.2} s, insert {insert:.2} s, flush {flush:.2} s (least so far)"
        );
    }
    let n = values.len() as f64;
    println!(
        "{} docs ({:.1} MB), least CPU of {} rounds: analyze {:.3} s ({:.2} µs/doc, {:.0} MB/s), insert {:.3} s \
         ({:.2} µs/doc), flush {:.3} s ({:.2} µs/doc) into a {:.1} MB image",
        values.len(),
        bytes as f64 / 1e6,
        a.rounds,
        analyze,
        analyze / n * 1e6,
        bytes as f64 / 1e6 / analyze,
        insert,
        insert / n * 1e6,
        flush,
        flush / n * 1e6,
        image_bytes as f64 / 1e6
    );
    Ok(())
}
