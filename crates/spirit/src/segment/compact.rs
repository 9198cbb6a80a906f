//! Compaction's image builder: N consecutive images → one image with one contiguous posting list per term.
//!
//! Every document keeps its doc id: part `i`'s doc `d` becomes `(base_doc(i) - base_doc(0)) + d` (doc ids
//! inside an image are local). Deleted documents the caller names are *purged* (DESIGN §4: "compaction drops
//! deleted postings"): their postings and stored records are dropped, so a stream of updates or deletes does
//! not leave the persistent tier holding every old version until retention drops it. Everything the
//! statistics read stays as it was — each term's df (the image's `df` counts the purged postings too),
//! the fields' document counts and total lengths, the norms and numeric columns — so every score is the
//! same before and after, as it is when nothing is purged: scoring never depends on when compactions ran
//! (Lucene's statistics change when a merge drops deleted documents; here they count every document a
//! segment took, as between merges). A term all of whose postings are purged keeps its last one (of a
//! deleted document, which no query returns): an image's lists are never empty, and the term's df stays
//! in the dictionary. The delete bits carry over (the caller's), so the purged documents stay deleted.
//!
//! Terms are merged one at a time over the parts' sorted dictionaries (a heap of the parts' next keys), so
//! only one term's decoded postings are held at once; the doc store is read one block at a time. The output
//! is written by the same [`ImageWriter`] as a flush, so compacting segments flushed from fresh segments
//! gives the very bytes a flush of one fresh segment holding all their documents would.
//!
//! Biwords (`super::biword`) are terms here: merged when every part has them, dropped otherwise.
//!
//! Input is checked, not trusted: every part's checksum is verified first (a damaged part must not come out
//! under a fresh, valid checksum), and anything that does not decode into a well-formed list is a
//! [`SegmentError`], never a panic.

use super::biword::{is_biword_key, BIWORDS_VERSION};
use super::image::{norm_at, ImageWriter, SealedImage, TermPostings};
use super::{FieldStats, ImageView, SegmentError};
use crate::codec::{decode_norm, FieldCodecs, PostingsCursor, NO_DOC};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

fn err(m: impl std::fmt::Display) -> SegmentError {
    SegmentError(format!("compaction: {m}"))
}

/// Compaction: one image holding every document of `parts` (consecutive segments, oldest first, each
/// part's base_doc == previous base_doc + previous doc_count), with a contiguous posting list per term.
///
/// The result has `base_doc = parts[0].base_doc()`, the sum of the parts' doc counts and id `seg_id`.
/// Postings are re-encoded with `codecs` (each field's codec now).
pub fn compact_images(
    parts: &[ImageView<'_>],
    purge: &[&[u64]],
    seg_id: u32,
    codecs: &FieldCodecs,
) -> Result<Vec<u8>, SegmentError> {
    Ok(seal_compacted(parts, purge, seg_id, codecs)?.to_vec())
}

/// Whether local doc `d` is in a purge set: bit `d % 64` of word `d / 64`.
fn in_set(set: &[u64], d: u32) -> bool {
    set.get(d as usize / 64).is_some_and(|w| w >> (d % 64) & 1 == 1)
}

/// [`compact_images`], laid out but not yet written (see [`ImageWriter::seal`]): compaction writes it
/// straight into the persistent heap. `purge` holds, per part, the local docs to purge as a bitmap (deleted
/// documents, as the caller's delete bitmaps held them); empty, or an empty bitmap, purges nothing more.
/// Documents purged by an earlier compaction stay purged.
pub(crate) fn seal_compacted(
    parts: &[ImageView<'_>],
    purge: &[&[u64]],
    seg_id: u32,
    codecs: &FieldCodecs,
) -> Result<SealedImage, SegmentError> {
    if !purge.is_empty() && purge.len() != parts.len() {
        return Err(err(format_args!("{} purge sets for {} images", purge.len(), parts.len())));
    }
    // A part's purge set, if it purges documents an earlier compaction did not (the set holds those too,
    // deleted still): else the part is copied as it is.
    let purge: Vec<Option<&[u64]>> = (0..parts.len())
        .map(|i| {
            let (p, n) = (&parts[i], parts[i].doc_count());
            purge
                .get(i)
                .copied()
                .filter(|set| (0..n).filter(|&d| in_set(set, d)).count() > p.purged() as usize)
        })
        .collect();
    let first = parts.first().ok_or_else(|| err("no images to compact"))?;
    let base = first.base_doc();
    // Offset of each part's local doc ids in the compacted image.
    let mut offsets = Vec::with_capacity(parts.len());
    let mut total = 0u32;
    for (i, p) in parts.iter().enumerate() {
        p.verify().map_err(|e| err(format_args!("image {i} (segment {}): {}", p.seg_id(), e.0)))?;
        let expected = base.checked_add(total).ok_or_else(|| err("doc ids overflow"))?;
        if p.base_doc() != expected {
            return Err(err(format_args!(
                "image {i} (segment {}) starts at doc {}, expected {expected}: images are not consecutive",
                p.seg_id(),
                p.base_doc()
            )));
        }
        offsets.push(total);
        total = total.checked_add(p.doc_count()).ok_or_else(|| err("doc count overflows"))?;
    }
    base.checked_add(total).ok_or_else(|| err("doc ids overflow"))?;

    let mut w = ImageWriter::with_codecs(codecs.clone());
    // Biwords are merged as terms when every part has them all; else the output has none (a pair one
    // part lacks would read as absent from the part's documents).
    let biwords = parts.iter().all(|p| p.has_biwords());
    merge_terms(parts, &purge, &offsets, biwords, &mut w)?;
    if biwords {
        w.biwords = BIWORDS_VERSION;
    }
    merge_columns(parts, &mut w)?;
    for (i, p) in parts.iter().enumerate() {
        let appended = match purge[i] {
            Some(set) => w.append_stored_purging(p, &|d| in_set(set, d)),
            None => w.append_stored(p),
        };
        appended.map_err(|e| err(format_args!("image {i} (segment {}): {}", p.seg_id(), e.0)))?;
    }
    Ok(w.seal(seg_id, base))
}

/// Merges the parts' dictionaries in key order and writes each term's concatenated postings.
fn merge_terms(
    parts: &[ImageView<'_>],
    purge: &[Option<&[u64]>],
    offsets: &[u32],
    biwords: bool,
    w: &mut ImageWriter,
) -> Result<(), SegmentError> {
    // (next key, part): ties pop in part order, which is doc order.
    let mut heap: BinaryHeap<Reverse<(&[u8], usize)>> = BinaryHeap::with_capacity(parts.len());
    // Index of the term each part has on the heap.
    let mut at = vec![0usize; parts.len()];
    for (i, p) in parts.iter().enumerate() {
        if p.n_terms() > 0 {
            heap.push(Reverse((p.key_at(0)?, i)));
        }
    }
    let mut holders = Vec::with_capacity(parts.len());
    let mut post = TermPostings::default();
    let mut purged = Purged::default();
    while let Some(Reverse((key, i))) = heap.pop() {
        holders.clear();
        holders.push(i);
        while heap.peek().is_some_and(|Reverse((k, _))| *k == key) {
            if let Some(Reverse((_, j))) = heap.pop() {
                holders.push(j);
            }
        }
        if key.len() < 2 {
            return Err(err(format_args!("term key {key:?} has no field")));
        }
        let field = crate::schema::key_field(key);
        post.clear();
        purged.last = None;
        // The term's df for scoring: its parts' (purged postings counted).
        let mut df = 0u32;
        for &j in &holders {
            let p = &parts[j];
            let t = p.term_at(at[j])?;
            let n = match purge[j] {
                Some(set) if has_any(t.blob, set)? => {
                    append_postings_purging(p, offsets[j], t.blob, field, set, &mut post, &mut purged)
                }
                _ => append_postings(p, offsets[j], t.blob, field, &mut post),
            }
            .map_err(|e| err(format_args!("image {j} (segment {}), term {}: {}", p.seg_id(), at[j], e.0)))?;
            df = df.checked_add(t.df).ok_or_else(|| err("df overflows"))?;
            if !p.df_holds(t.df, n) {
                return Err(err(format_args!(
                    "image {j} (segment {}), term {}: df {} recorded, {n} postings found",
                    p.seg_id(),
                    at[j],
                    t.df
                )));
            }
            at[j] += 1;
            if at[j] < p.n_terms() {
                let next = p.key_at(at[j])?;
                if next <= key {
                    return Err(err(format_args!(
                        "image {j} (segment {}): dictionary not sorted",
                        p.seg_id()
                    )));
                }
                heap.push(Reverse((next, j)));
            }
        }
        if post.docs.is_empty() {
            // Every posting purged: the last one stays (see the module doc).
            if let Some((doc, dl)) = purged.last {
                post.push(doc, &purged.positions, dl);
            }
        }
        if biwords || !is_biword_key(key) {
            w.add_term_counted(key, &post, df);
        }
    }
    Ok(())
}

/// The last purged posting of the term being merged: (doc, field length) and its positions.
#[derive(Default)]
struct Purged {
    last: Option<(u32, u32)>,
    positions: Vec<u32>,
}

/// Whether any posting of `blob` is of a doc in `set` (reads doc ids only).
fn has_any(blob: &[u8], set: &[u64]) -> Result<bool, SegmentError> {
    let mut c = PostingsCursor::new(blob)?;
    while c.doc() != NO_DOC {
        if in_set(set, c.doc()) {
            return Ok(true);
        }
        c.next()?;
    }
    Ok(false)
}

/// [`append_postings`] without the postings of the docs in `set`, the last of which goes to `purged`
/// instead: each kept posting's positions are decoded and written again (the stream cannot be copied
/// whole with holes in it). Returns how many postings the blob held, purged ones included.
fn append_postings_purging(
    p: &ImageView<'_>,
    offset: u32,
    blob: &[u8],
    field: u16,
    set: &[u64],
    out: &mut TermPostings,
    purged: &mut Purged,
) -> Result<u32, SegmentError> {
    let norms = p.norms(field);
    let mut c = PostingsCursor::new(blob)?;
    let (mut n, mut last) = (0u32, None);
    let mut positions = Vec::new();
    while c.doc() != NO_DOC {
        let d = c.doc();
        if d >= p.doc_count() || last.is_some_and(|l| l >= d) {
            return Err(SegmentError(format!("posting doc {d} out of order or range")));
        }
        let tf = c.freq()?;
        c.positions(&mut positions)?;
        if tf == 0 || positions.len() != tf as usize || positions.windows(2).any(|w| w[0] >= w[1]) {
            return Err(SegmentError(format!("posting doc {d}: tf {tf}, positions {positions:?}")));
        }
        let dl = norms.map_or(0, |col| decode_norm(norm_at(col, d)));
        if in_set(set, d) {
            purged.last = Some((offset + d, dl));
            std::mem::swap(&mut purged.positions, &mut positions);
        } else {
            out.push(offset + d, &positions, dl);
        }
        last = Some(d);
        n += 1;
        c.next()?;
    }
    Ok(n)
}

/// Appends the postings of one part's blob (local docs shifted by `offset`) to `out`, with each doc's field
/// length from the part's norms column; returns how many there were. Checks what the encoder relies on:
/// docs strictly increasing and in range, tf ≥ 1, as many positions as the frequencies add up to. The
/// positions stream is copied whole, undecoded (each posting's first position is absolute, so nothing needs
/// rebasing): decoding and re-encoding every position was ~40% of a merger's samples.
fn append_postings(
    p: &ImageView<'_>,
    offset: u32,
    blob: &[u8],
    field: u16,
    out: &mut TermPostings,
) -> Result<u32, SegmentError> {
    let norms = p.norms(field);
    let mut c = PostingsCursor::new(blob)?;
    let (mut n, mut last, mut total_tf) = (0u32, None, 0u64);
    while c.doc() != NO_DOC {
        let d = c.doc();
        if d >= p.doc_count() || last.is_some_and(|l| l >= d) {
            return Err(SegmentError(format!("posting doc {d} out of order or range")));
        }
        let tf = c.freq()?;
        if tf == 0 {
            return Err(SegmentError(format!("posting doc {d} has tf 0")));
        }
        total_tf += tf as u64;
        let dl = norms.map_or(0, |col| decode_norm(norm_at(col, d)));
        out.push_positionless(offset + d, tf, dl, || c.positions_offset())?;
        last = Some(d);
        n += 1;
        c.next()?;
    }
    // The positions stream, copied whole: it must hold exactly the frequencies' worth of values (a value
    // ends at a byte below 0x80), ending with one; values too long for a u32 are left to the merged image's
    // readers, which refuse them.
    let stream = c.positions_stream();
    let ends = stream.iter().filter(|&&b| b < 0x80).count() as u64;
    if ends != total_tf || stream.last().is_some_and(|&b| b >= 0x80) {
        return Err(SegmentError(format!("positions stream holds {ends} values for {total_tf} positions")));
    }
    out.push_positions_stream(stream);
    Ok(n)
}

/// Writes the union of the parts' columns, in field order: norms (0 where a part lacks the field) with the
/// summed statistics, numbers (NaN where a part lacks the field).
fn merge_columns(parts: &[ImageView<'_>], w: &mut ImageWriter) -> Result<(), SegmentError> {
    let mut fields: BTreeMap<u16, bool> = BTreeMap::new();
    let mut has: Vec<Vec<u16>> = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let cols = p.column_fields()?;
        for &(f, is_text) in &cols {
            if *fields.entry(f).or_insert(is_text) != is_text {
                return Err(err(format_args!(
                    "field {f} is a text field in one image and numeric in another (image {i})"
                )));
            }
        }
        has.push(cols.into_iter().map(|(f, _)| f).collect());
    }
    for (f, is_text) in fields {
        let mut stats = FieldStats::default();
        for p in parts {
            stats += p.field_stats(f);
        }
        w.add_column(f, is_text, stats, |col| {
            for (p, has) in parts.iter().zip(&has) {
                let n = p.doc_count() as usize;
                let src = if is_text { p.norms(f) } else { p.numbers(f) };
                match src {
                    Some(s) => col.extend_from_slice(s),
                    None if has.contains(&f) => {
                        return Err(err(format_args!(
                            "segment {}: column of field {f} out of bounds",
                            p.seg_id()
                        )))
                    }
                    None if is_text => col.resize(col.len() + n, 0),
                    None => {
                        for _ in 0..n {
                            col.extend_from_slice(&f64::NAN.to_le_bytes());
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{encode_postings_with, DocCodec};
    use crate::memory::{DramHeap, RingKind};
    use crate::schema::{analyze_document, key_field, term_key, Schema};
    use crate::segment::image::{id_hash, number_at};
    use crate::segment::{FreshSegment, ImageBuilder};
    use serde_json::{json, Value};
    use std::collections::BTreeSet;

    const BASE: u32 = 1000;
    /// Four common words among them, so the texts have biwords.
    const WORDS: [&str; 20] = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda",
        "mu", "nu", "xi", "omicron", "pi", "the", "in", "by", "of",
    ];

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            crate::rng::xorshift(&mut self.0) % n
        }
        fn words(&mut self, n: usize) -> String {
            let v: Vec<&str> = (0..n).map(|_| WORDS[self.below(WORDS.len() as u64) as usize]).collect();
            v.join(" ")
        }
    }

    fn schema() -> Schema {
        Schema::from_mappings(&json!({"properties": {
            "title": {"type": "text"}, "body": {"type": "text"}, "tag": {"type": "keyword"},
            "n": {"type": "long"}, "extra": {"type": "text"}, "x": {"type": "double"}}}))
        .unwrap()
    }

    /// Documents `start..start + n` (global numbering): every body has "alpha" (so lists span blocks),
    /// repeated words (tf > 1), some multi-valued titles, some missing `n`, one large body (a doc-store block
    /// of its own), some reused `_id`s; `extra` (text) and `x` (double) only where asked.
    fn docs(start: usize, n: usize, extra: bool, x: bool) -> Vec<(String, Value)> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ start as u64);
        (start..start + n)
            .map(|g| {
                let id = if g % 37 == 36 { format!("d{}", g - 5) } else { format!("d{g}") };
                let len = if g % 97 == 7 { 3000 } else { 3 + rng.below(25) as usize };
                let tag = ["red", "green", "blue", "x-1"][g % 4];
                let mut d = json!({"body": format!("alpha {}", rng.words(len)), "tag": tag});
                d["title"] = if g % 5 == 0 {
                    let n = 1 + rng.below(3) as usize;
                    json!([rng.words(2), rng.words(n)])
                } else {
                    let n = 1 + rng.below(4) as usize;
                    json!(rng.words(n))
                };
                if g % 11 != 0 {
                    d["n"] = json!(rng.below(1000) as i64 - 500);
                }
                if extra && g % 3 == 0 {
                    d["extra"] = json!(rng.words(4));
                }
                if x && g % 2 == 0 {
                    d["x"] = json!(rng.below(10_000) as f64 / 7.0);
                }
                (id, d)
            })
            .collect()
    }

    /// Flushes `docs` through a fresh segment, as the flusher does.
    fn flush(schema: &Schema, docs: &[(String, Value)], seg_id: u32, base_doc: u32) -> Vec<u8> {
        flush_with(schema, docs, seg_id, base_doc, &FieldCodecs::default())
    }

    fn flush_with(
        schema: &Schema,
        docs: &[(String, Value)],
        seg_id: u32,
        base_doc: u32,
        codecs: &FieldCodecs,
    ) -> Vec<u8> {
        let heap = DramHeap::new(20 << 20, 17 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 16 << 20).unwrap(), 10_000);
        for (id, d) in docs {
            fresh.insert(&analyze_document(schema, id.clone(), d).unwrap()).unwrap();
        }
        ImageBuilder::from_fresh(&fresh, seg_id, base_doc, codecs).unwrap()
    }

    /// Part sizes and which optional fields they have: an empty part, a one-doc part, parts with fields the
    /// others lack.
    const PARTS: [(usize, bool, bool); 5] =
        [(300, false, false), (1, false, false), (0, false, false), (200, true, false), (450, false, true)];

    /// (images of the parts, every document in order)
    fn parts(schema: &Schema) -> (Vec<Vec<u8>>, Vec<(String, Value)>) {
        let (mut images, mut all, mut start) = (vec![], vec![], 0);
        for (i, &(n, extra, x)) in PARTS.iter().enumerate() {
            let d = docs(start, n, extra, x);
            images.push(flush(schema, &d, 5 + i as u32, BASE + start as u32));
            all.extend(d);
            start += n;
        }
        (images, all)
    }

    fn views(images: &[Vec<u8>]) -> Vec<ImageView<'_>> {
        images.iter().map(|b| ImageView::parse(b).unwrap()).collect()
    }

    /// A decoded posting: doc, tf, positions, field length.
    type Posting = (u32, u32, Vec<u32>, u32);

    /// The postings of a list, docs shifted by `offset`.
    fn decode(v: &ImageView<'_>, key: &[u8], blob: &[u8], offset: u32) -> Vec<Posting> {
        let norms = v.norms(key_field(key));
        let mut c = PostingsCursor::new(blob).unwrap();
        let mut out = vec![];
        while c.doc() != NO_DOC {
            let mut p = vec![];
            c.positions(&mut p).unwrap();
            out.push((
                offset + c.doc(),
                c.freq().unwrap(),
                p,
                norms.map_or(0, |n| decode_norm(norm_at(n, c.doc()))),
            ));
            c.next().unwrap();
        }
        out
    }

    /// Everything the brief promises about a compacted image, checked against its parts.
    /// Returns how many lists span more than one block.
    fn check_compacted(parts: &[ImageView<'_>], bytes: &[u8], seg_id: u32, n_fields: u16) -> usize {
        check_compacted_with(parts, bytes, seg_id, n_fields, &FieldCodecs::default())
    }

    /// [`check_compacted`] of an image whose postings were encoded with `codecs`.
    fn check_compacted_with(
        parts: &[ImageView<'_>],
        bytes: &[u8],
        seg_id: u32,
        n_fields: u16,
        codecs: &FieldCodecs,
    ) -> usize {
        let c = ImageView::parse(bytes).unwrap();
        c.verify().unwrap();
        c.check_structure().unwrap();
        let offsets: Vec<u32> = parts.iter().map(|p| p.base_doc() - parts[0].base_doc()).collect();
        assert_eq!((c.seg_id(), c.base_doc()), (seg_id, parts[0].base_doc()));
        assert_eq!(c.doc_count(), parts.iter().map(|p| p.doc_count()).sum::<u32>());

        // Terms: the sorted union, each list the concatenation of the parts' lists.
        let union: BTreeSet<Vec<u8>> =
            parts.iter().flat_map(|p| (0..p.n_terms()).map(|i| p.key_at(i).unwrap().to_vec())).collect();
        assert_eq!(c.n_terms(), union.len());
        let mut multi_block = 0;
        for (i, key) in union.iter().enumerate() {
            assert_eq!(c.key_at(i).unwrap(), &key[..]);
            let mut want = vec![];
            for (p, &off) in parts.iter().zip(&offsets) {
                if let Some(t) = p.term(key).unwrap() {
                    want.extend(decode(p, key, t.blob, off));
                }
            }
            let t = c.term(key).unwrap().unwrap();
            assert_eq!(c.term_sorted(key).unwrap().unwrap().blob_offset, t.blob_offset);
            let got = decode(&c, key, t.blob, 0);
            assert_eq!(got, want, "postings of {key:?}");
            assert_eq!(t.df as usize, want.len());
            assert_eq!(t.max_tf, want.iter().map(|w| w.1).max().unwrap());
            // Byte for byte the encoding of the concatenation with the parts' field lengths (so the blocks'
            // impacts are right too).
            let mut blob = vec![];
            let pos: Vec<u32> = want.iter().flat_map(|w| w.2.iter().copied()).collect();
            let col = |f: fn(&Posting) -> u32| want.iter().map(f).collect::<Vec<u32>>();
            let codec = codecs.get(key_field(key));
            encode_postings_with(codec, &col(|w| w.0), &col(|w| w.1), &pos, &col(|w| w.3), &mut blob);
            assert_eq!(t.blob, &blob[..]);
            multi_block += (want.len() > crate::codec::BLOCK) as usize;
        }

        // Fields: statistics summed, columns concatenated (0 / none where a part lacks the field).
        for f in 0..n_fields {
            let mut stats = FieldStats::default();
            for p in parts {
                stats += p.field_stats(f);
            }
            assert_eq!(c.field_stats(f), stats, "field {f}");
            assert_eq!(c.norms(f).is_some(), parts.iter().any(|p| p.norms(f).is_some()));
            assert_eq!(c.numbers(f).is_some(), parts.iter().any(|p| p.numbers(f).is_some()));
            for (p, &off) in parts.iter().zip(&offsets) {
                for d in 0..p.doc_count() {
                    let norm = |v: &ImageView<'_>, d| v.norms(f).map_or(0, |n| norm_at(n, d));
                    let num = |v: &ImageView<'_>, d| v.numbers(f).and_then(|n| number_at(n, d));
                    assert_eq!(norm(&c, off + d), norm(p, d), "norm of field {f}, doc {d}");
                    assert_eq!(num(&c, off + d), num(p, d), "number of field {f}, doc {d}");
                }
            }
        }

        // Stored records and the `_id` index.
        for (p, &off) in parts.iter().zip(&offsets) {
            for d in 0..p.doc_count() {
                let rec = p.stored(d).unwrap();
                assert_eq!(c.stored(off + d).unwrap(), rec);
                let h = id_hash(&rec.0);
                let mut want: Vec<u32> = parts
                    .iter()
                    .zip(&offsets)
                    .flat_map(|(q, &o)| q.docs_with_id_hash(h).map(move |x| o + x))
                    .collect();
                want.sort_unstable();
                let mut got: Vec<u32> = c.docs_with_id_hash(h).collect();
                got.sort_unstable();
                assert!(got.contains(&(off + d)));
                assert_eq!(got, want);
            }
        }

        // Prefixes.
        let mut k = vec![];
        for (field, prefix) in
            [("body", ""), ("body", "a"), ("body", "alp"), ("title", "e"), ("tag", ""), ("tag", "zz")]
        {
            let schema = schema();
            term_key(schema.field_id(field).unwrap(), prefix, &mut k);
            // A field's biwords are not among its terms.
            let want: Vec<&Vec<u8>> = union
                .iter()
                .filter(|u| u.starts_with(&k) && !crate::segment::biword::is_biword_key(u))
                .collect();
            let got: Vec<Vec<u8>> =
                c.prefix_range(&k).unwrap().map(|i| c.key_at(i).unwrap().to_vec()).collect();
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "prefix {field}:{prefix}");
        }
        multi_block
    }

    /// Checks `purged`, the compaction of `parts` purging `sets`, against `full`, their compaction purging
    /// nothing: the same terms with the same df, each list the full one without the purged docs (or, if
    /// none is left, its last posting alone), the same field statistics and columns, the kept documents'
    /// records and `_id`s, none for the purged ones. Returns the purged documents' global numbers.
    fn check_purged(parts: &[ImageView<'_>], sets: &[Vec<u64>], full: &[u8], purged: &[u8]) -> BTreeSet<u32> {
        let (f, c) = (ImageView::parse(full).unwrap(), ImageView::parse(purged).unwrap());
        c.verify().unwrap();
        c.check_structure().unwrap();
        let mut gone = BTreeSet::new();
        let mut at = 0;
        for (p, set) in parts.iter().zip(sets) {
            gone.extend((0..p.doc_count()).filter(|&d| in_set(set, d)).map(|d| at + d));
            at += p.doc_count();
        }
        assert_eq!((c.doc_count(), c.base_doc(), c.n_terms()), (f.doc_count(), f.base_doc(), f.n_terms()));
        assert_eq!(c.purged() as usize, gone.len());
        let mut kept_one = 0;
        for i in 0..f.n_terms() {
            let key = f.key_at(i).unwrap();
            assert_eq!(c.key_at(i).unwrap(), key);
            let (ft, ct) = (f.term_at(i).unwrap(), c.term_at(i).unwrap());
            assert_eq!(ct.df, ft.df, "df of {key:?}");
            let all = decode(&f, key, ft.blob, 0);
            let want: Vec<Posting> = all.iter().filter(|p| !gone.contains(&p.0)).cloned().collect();
            let got = decode(&c, key, ct.blob, 0);
            if want.is_empty() {
                // One of the purged postings (the last of those compacted: of `full`'s, if none was purged
                // before).
                assert_eq!(got.len(), 1, "postings of {key:?}");
                assert!(all.contains(&got[0]), "postings of {key:?}");
                kept_one += 1;
            } else {
                assert_eq!(got, want, "postings of {key:?}");
            }
            assert_eq!(ct.max_tf, got.iter().map(|w| w.1).max().unwrap());
        }
        assert!(kept_one > 0, "some term is only in purged documents");
        for field in 0..schema().fields().len() as u16 {
            assert_eq!(c.field_stats(field), f.field_stats(field));
            assert_eq!(c.norms(field), f.norms(field));
            assert_eq!(c.numbers(field), f.numbers(field));
        }
        for d in 0..f.doc_count() {
            let (id, source) = f.stored(d).unwrap();
            if gone.contains(&d) {
                assert_eq!(c.stored(d).unwrap(), (String::new(), vec![]));
                assert!(!c.docs_with_id_hash(id_hash(&id)).any(|x| x == d));
            } else {
                assert_eq!(c.stored(d).unwrap(), (id.clone(), source));
                assert!(c.docs_with_id_hash(id_hash(&id)).any(|x| x == d));
            }
        }
        assert!(purged.len() < full.len());
        gone
    }

    /// Compaction purges the deleted documents it is given (their postings, records and `_id`s) and keeps
    /// every statistic — df, field counts and lengths, norms — so scores do not change; a term only purged
    /// documents had keeps its last posting. A purged image compacts again: alone with more documents to
    /// purge, and beside an image with nothing to purge.
    #[test]
    fn compaction_purges_deleted_documents_and_keeps_their_statistics() {
        let schema = schema();
        let (images, _) = parts(&schema);
        let parts = views(&images);
        // Every third document, the one-doc part whole, and the 3000-word body (terms no other doc has).
        let mut at = 0;
        let sets: Vec<Vec<u64>> = parts
            .iter()
            .map(|p| {
                let mut set = vec![0u64; (p.doc_count() as usize).div_ceil(64)];
                for d in 0..p.doc_count() {
                    let g = at + d;
                    if g % 3 == 1 || p.doc_count() == 1 || g % 97 == 7 {
                        set[d as usize / 64] |= 1 << (d % 64);
                    }
                }
                at += p.doc_count();
                set
            })
            .collect();
        let refs: Vec<&[u64]> = sets.iter().map(Vec::as_slice).collect();
        let codecs = FieldCodecs::default();
        let full = compact_images(&parts, &[], 9, &codecs).unwrap();
        let purged = compact_images(&parts, &refs, 9, &codecs).unwrap();
        let gone = check_purged(&parts, &sets, &full, &purged);
        assert!(gone.len() > 300);

        // Again, alone: with no purge set its purged documents stay purged (the bytes are the same); with
        // more documents (every fifth too), it purges those as well.
        let one = [ImageView::parse(&purged).unwrap()];
        assert!(compact_images(&one, &[], 9, &codecs).unwrap() == purged);
        // Both are of the current version (4: a binary before purging refuses either), the header counts
        // the purged documents.
        use crate::segment::image::VERSION;
        let version = |b: &[u8]| u32::from_le_bytes(b[8..12].try_into().unwrap());
        assert_eq!((version(&full), version(&purged)), (VERSION, VERSION));
        assert_eq!(ImageView::parse(&full).unwrap().purged(), 0);
        assert_eq!(one[0].purged() as usize, gone.len());
        // Purging the same documents again purges nothing new: the image is copied as it is.
        let same: Vec<u64> = {
            let mut set = vec![0u64; (one[0].doc_count() as usize).div_ceil(64)];
            for &d in &gone {
                set[d as usize / 64] |= 1 << (d % 64);
            }
            set
        };
        assert!(compact_images(&one, &[&same], 9, &codecs).unwrap() == purged);
        let more: Vec<u64> = {
            let mut set = vec![0u64; (one[0].doc_count() as usize).div_ceil(64)];
            for d in (0..one[0].doc_count()).filter(|d| gone.contains(d) || d % 5 == 0) {
                set[d as usize / 64] |= 1 << (d % 64);
            }
            set
        };
        let again = compact_images(&one, &[&more], 9, &codecs).unwrap();
        let full_one = [ImageView::parse(&full).unwrap()];
        assert!(check_purged(&full_one, std::slice::from_ref(&more), &full, &again).len() > gone.len());

        // Beside an unpurged image: its postings are copied as they are, the purged one's filtered.
        let later = flush(&schema, &docs(951, 40, true, true), 12, BASE + 951);
        let (a, b) = (ImageView::parse(&purged).unwrap(), ImageView::parse(&later).unwrap());
        let both = compact_images(&[a, b], &[&more, &[]], 12, &codecs).unwrap();
        let full_both = compact_images(&[full_one[0], b], &[], 12, &codecs).unwrap();
        check_purged(&[full_one[0], b], &[more, vec![]], &full_both, &both);
    }

    /// A sealed image writes every byte of its destination: written over garbage (as into a recycled DRAM
    /// block or reused heap space) it is the image written into zeros, and it verifies.
    #[test]
    fn sealed_images_overwrite_every_byte() {
        let schema = schema();
        let (images, all) = parts(&schema);
        let parts = views(&images);
        let heap = DramHeap::new(20 << 20, 17 << 20).unwrap();
        let fresh = FreshSegment::new(heap.try_alloc(RingKind::ShortTerm, 16 << 20).unwrap(), 10_000);
        for (id, d) in &all {
            fresh.insert(&analyze_document(&schema, id.clone(), d).unwrap()).unwrap();
        }
        let sealed = [
            ImageBuilder::seal_fresh(&fresh, 9, BASE, &FieldCodecs::default(), false).unwrap(),
            seal_compacted(&parts, &[], 9, &FieldCodecs::default()).unwrap(),
        ];
        for image in &sealed {
            let clean = image.to_vec();
            for garbage in [0xffu8, 0x5a] {
                let mut out = vec![garbage; image.len()];
                image.write_into(&mut out);
                assert!(out == clean, "bytes left from before the write");
                ImageView::parse(&out).unwrap().verify().unwrap();
            }
        }
    }

    #[test]
    fn compaction_keeps_every_posting_column_and_record() {
        let schema = schema();
        let (images, all) = parts(&schema);
        let parts = views(&images);
        let out = compact_images(&parts, &[], 9, &FieldCodecs::default()).unwrap();
        assert!(check_compacted(&parts, &out, 9, schema.fields().len() as u16) > 0);
        // "alpha" is in every body: one list of 951 postings, 8 blocks, where the parts had 3 + 1 + 2 + 4.
        let mut k = vec![];
        term_key(schema.field_id("body").unwrap(), "alpha", &mut k);
        let c = ImageView::parse(&out).unwrap();
        assert_eq!(c.term(&k).unwrap().unwrap().df, 951);
        // The same sections as flushing one fresh segment holding every document, but for the doc store,
        // whose compressed blocks compaction copies from the parts (the records are checked above).
        let single = flush(&schema, &all, 9, BASE);
        let s = ImageView::parse(&single).unwrap();
        assert!(
            c.sections_but_doc_store() == s.sections_but_doc_store(),
            "compaction differs from a single flush"
        );
        assert_eq!((c.doc_count(), c.base_doc(), c.seg_id()), (s.doc_count(), s.base_doc(), s.seg_id()));
        for d in 0..c.doc_count() {
            assert_eq!(c.stored(d).unwrap(), s.stored(d).unwrap());
        }
    }

    /// Each field's postings in its codec: flushed with one choice, compacted with another (compaction
    /// re-encodes), every posting, column and record kept, and every block readable whatever wrote it.
    #[test]
    fn postings_take_each_fields_codec() {
        let schema = schema();
        let id = |f: &str| schema.field_id(f).unwrap() as usize;
        let mut flushed = vec![DocCodec::default(); schema.fields().len()];
        flushed[id("body")] = DocCodec::Pfor;
        flushed[id("title")] = DocCodec::Vbyte;
        let flushed = FieldCodecs(flushed);
        let mut compacted = vec![DocCodec::default(); schema.fields().len()];
        compacted[id("body")] = DocCodec::Raw;
        compacted[id("tag")] = DocCodec::Streamvbyte;
        compacted[id("extra")] = DocCodec::Pfor;
        let compacted = FieldCodecs(compacted);
        let (mut images, mut start) = (vec![], 0);
        for (i, &(n, extra, x)) in PARTS.iter().enumerate() {
            let d = docs(start, n, extra, x);
            images.push(flush_with(&schema, &d, 5 + i as u32, BASE + start as u32, &flushed));
            start += n;
        }
        let parts = views(&images);
        let n_fields = schema.fields().len() as u16;
        for (p, bytes) in parts.iter().zip(&images) {
            // A flushed part's lists are its fields' codecs' encodings (a part checked as its own compaction).
            check_compacted_with(&[*p], bytes, p.seg_id(), n_fields, &flushed);
        }
        let out = compact_images(&parts, &[], 9, &compacted).unwrap();
        assert!(check_compacted_with(&parts, &out, 9, n_fields, &compacted) > 0);
        // Different bytes from the default encoding, same postings.
        assert!(out != compact_images(&parts, &[], 9, &FieldCodecs::default()).unwrap());
    }

    #[test]
    fn copied_doc_blocks_must_cover_the_documents() {
        // Compaction copies doc-store blocks without decompressing them, so it checks their directory: a
        // directory that skips or repeats documents is an error, never a wrong record.
        let schema = schema();
        let (images, _) = parts(&schema);
        let mut bytes = images.iter().max_by_key(|i| i.len()).unwrap().clone();
        let v = ImageView::parse(&bytes).unwrap();
        assert!(v.doc_count() > 1);
        // The DOCSTORE section's offset is in the section table after the 64-byte header (section 5).
        let at = 64 + 5 * 16;
        let off = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
        let n_blocks = u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap());
        // Shift the first block's first doc: the blocks no longer start at document 0.
        bytes[off + 8] = bytes[off + 8].wrapping_add(1);
        let bad = ImageView::parse(&bytes).unwrap();
        let mut w = ImageWriter::default();
        let e = w.append_stored(&bad).unwrap_err();
        assert!(e.0.contains("does not cover"), "{} ({n_blocks} blocks)", e.0);
    }

    #[test]
    fn compaction_composes() {
        let schema = schema();
        let (images, _) = parts(&schema);
        let parts = views(&images);
        let head = compact_images(&parts[..3], &[], 7, &FieldCodecs::default()).unwrap();
        let mut again = vec![ImageView::parse(&head).unwrap()];
        again.extend_from_slice(&parts[3..]);
        assert!(
            compact_images(&again, &[], 9, &FieldCodecs::default()).unwrap()
                == compact_images(&parts, &[], 9, &FieldCodecs::default()).unwrap()
        );
    }

    #[test]
    fn a_single_part_is_reproduced() {
        let schema = schema();
        let (images, _) = parts(&schema);
        for img in &images {
            let v = ImageView::parse(img).unwrap();
            let out = compact_images(&[v], &[], v.seg_id(), &FieldCodecs::default()).unwrap();
            assert!(&out == img, "segment {}", v.seg_id());
            if v.doc_count() > 1 {
                check_compacted(&[v], &out, v.seg_id(), schema.fields().len() as u16);
            }
        }
    }

    #[test]
    fn non_consecutive_parts_are_rejected() {
        let schema = schema();
        let a = flush(&schema, &docs(0, 30, false, false), 1, BASE);
        let msg = |r: Result<Vec<u8>, SegmentError>| r.unwrap_err().0;
        for (base, what) in [(BASE + 31, "gap"), (BASE + 29, "overlap"), (BASE, "same start")] {
            let b = flush(&schema, &docs(30, 20, false, false), 2, base);
            let m = msg(compact_images(&views(&[a.clone(), b]), &[], 2, &FieldCodecs::default()));
            assert!(m.contains("not consecutive"), "{what}: {m}");
        }
        // Out of order.
        let b = flush(&schema, &docs(30, 20, false, false), 2, BASE + 30);
        assert!(compact_images(&views(&[a.clone(), b.clone()]), &[], 2, &FieldCodecs::default()).is_ok());
        assert!(msg(compact_images(&views(&[b, a.clone()]), &[], 2, &FieldCodecs::default()))
            .contains("not consecutive"));
        assert!(msg(compact_images(&[], &[], 2, &FieldCodecs::default())).contains("no images"));
        // A field that is text in one part and numeric in the other.
        let other = Schema::from_mappings(
            &json!({"properties": {"title": {"type": "text"}, "body": {"type": "long"}}}),
        )
        .unwrap();
        let c = flush(&other, &[("z".into(), json!({"title": "a b", "body": 3}))], 2, BASE + 30);
        let m = msg(compact_images(&views(&[a, c]), &[], 2, &FieldCodecs::default()));
        assert!(m.contains("is a text field in one image and numeric in another"), "{m}");
    }

    #[test]
    fn damaged_parts_are_errors_not_panics() {
        let schema = schema();
        let a = flush(&schema, &docs(0, 300, true, false), 1, BASE);
        let b = flush(&schema, &docs(300, 200, false, true), 2, BASE + 300);
        // A flip the checksum catches is refused: a damaged part must not come out under a valid checksum.
        let mut bad = b.clone();
        bad[PREFIX_BYTES + 100] ^= 1;
        assert!(compact_images(&views(&[a.clone(), bad]), &[], 2, &FieldCodecs::default())
            .unwrap_err()
            .0
            .contains("checksum"));
        // Flips behind a recomputed checksum (a checksum collision, or a bug upstream) still never panic.
        let mut rng = Rng(42);
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..400 {
            let mut bad = b.clone();
            for _ in 0..1 + rng.below(3) {
                let at = PREFIX_BYTES + rng.below((bad.len() - PREFIX_BYTES) as u64) as usize;
                bad[at] ^= 1 << rng.below(8);
            }
            let mut h = crc32fast::Hasher::new();
            h.update(&bad[..32]);
            h.update(&bad[36..]);
            let crc = h.finalize();
            bad[32..36].copy_from_slice(&crc.to_le_bytes());
            let Ok(v) = ImageView::parse(&bad) else { continue };
            match compact_images(&[ImageView::parse(&a).unwrap(), v], &[], 2, &FieldCodecs::default()) {
                Ok(out) => {
                    let c = ImageView::parse(&out).unwrap();
                    c.verify().unwrap();
                    c.check_structure().unwrap();
                    // Compressed doc-store blocks are copied unread: a flip there shows only here, as an
                    // error.
                    let _ = c.check_stored();
                    ok += 1;
                }
                Err(_) => failed += 1,
            }
        }
        assert!(failed > 0 && ok > 0, "{failed} refused, {ok} compacted");
    }

    /// Header and section table of an image.
    const PREFIX_BYTES: usize = 64 + 8 * 16;

    /// Biwords are merged as terms when every part holds them (the result equals one flush of every
    /// document, as checked above), and dropped when a part does not (an image from before biwords): a
    /// compacted image never claims biwords some of its documents lack.
    #[test]
    fn biwords_merge_when_every_part_has_them_else_none() {
        let schema = schema();
        let (mut images, _) = parts(&schema);
        let biwords = |v: &ImageView<'_>| {
            (0..v.n_terms()).filter(|&i| crate::segment::biword::is_biword_key(v.key_at(i).unwrap())).count()
        };
        let all = compact_images(&views(&images), &[], 9, &FieldCodecs::default()).unwrap();
        let all = ImageView::parse(&all).unwrap();
        assert!(all.has_biwords() && biwords(&all) > 10, "{} biwords", biwords(&all));
        let mut k = vec![];
        term_key(schema.field_id("body").unwrap(), "in", &mut k);
        let mut key_in_by = k.clone();
        term_key(schema.field_id("body").unwrap(), "by", &mut k);
        key_in_by = crate::segment::biword::biword_key(&key_in_by, &k).unwrap();
        assert!(all.term(&key_in_by).unwrap().is_some());
        // The fourth part as an image without biwords: header field cleared, checksum redone.
        let old = &mut images[3];
        let had = biwords(&ImageView::parse(old).unwrap());
        assert!(had > 0);
        old[36..40].copy_from_slice(&0u32.to_le_bytes());
        let mut h = crc32fast::Hasher::new();
        h.update(&old[..32]);
        h.update(&old[36..]);
        old[32..36].copy_from_slice(&h.finalize().to_le_bytes());
        let parts = views(&images);
        assert!(!parts[3].has_biwords());
        let mixed = compact_images(&parts, &[], 9, &FieldCodecs::default()).unwrap();
        let mixed = ImageView::parse(&mixed).unwrap();
        mixed.verify().unwrap();
        assert!(!mixed.has_biwords());
        assert_eq!(biwords(&mixed), 0);
        assert_eq!(mixed.n_terms(), all.n_terms() - biwords(&all));
        // Listing a field's terms never reaches its biwords.
        let field = schema.field_id("body").unwrap().to_be_bytes();
        let listed = all.prefix_range(&field).unwrap();
        assert!(listed.clone().all(|i| !crate::segment::biword::is_biword_key(all.key_at(i).unwrap())));
        assert_eq!(listed.len(), mixed.prefix_range(&field).unwrap().len());
    }
}
