//! Turning one JSON document into what the index stores: the analyzed terms with positions, the field
//! lengths (BM25 norms), the numeric column values, the `_id` and the `_source`.

use super::{parse_date_millis, FieldDef, FieldType, Schema};
use crate::codec::DocCodec;
use crate::error::{Error, Result};
use serde_json::Value;
use std::borrow::Cow;

/// Elasticsearch's `position_increment_gap`: values of a multi-valued text field are this many positions
/// apart, so a phrase never matches across two values.
pub const POSITION_GAP: u32 = 100;

/// A document ready for the ingester.
#[derive(Debug, Clone, Default)]
pub struct AnalyzedDoc {
    pub id: String,
    /// The stored `_source` (the document without `_id`, filtered by the `_source` mapping), as JSON bytes.
    pub source: Vec<u8>,
    /// The whole document when the `_source` mapping drops part of it and the tLog needs it all.
    whole: Option<Vec<u8>>,
    /// Term keys, back to back; `terms` points into it, in order of first occurrence.
    keys: Vec<u8>,
    terms: Vec<TermSpan>,
    /// Positions of every term, grouped by term in `terms` order, increasing within a term.
    positions: Vec<u32>,
    /// Field lengths (tokens) of the term fields present, sorted by field.
    pub lens: Vec<(u16, u32)>,
    /// Numeric values (first value of a multi-valued field), sorted by field.
    pub numerics: Vec<(u16, f64)>,
    /// Set when the document was analyzed into a block's [`BlockTerms`]: its terms are held there (and then
    /// in the block's `TermBatch`), not in `keys`, `terms` and `positions`, which are empty; these are their
    /// counts. `TermBatch::unbatch` gives a document its terms back.
    held: Option<HeldTerms>,
}

/// The totals of a document's terms held by its block ([`AnalyzedDoc::held`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct HeldTerms {
    terms: u32,
    positions: u32,
    key_bytes: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct TermSpan {
    key_off: u32,
    key_len: u32,
    pos_off: u32,
    pos_len: u32,
    /// The key's hash in the fresh segment's term table (`segment::fresh::hash_key`), taken during analysis
    /// so the insert, which runs under the shard's writer lock (and in a bulk load, one block at a time),
    /// does not hash.
    fresh_hash: u32,
}

impl AnalyzedDoc {
    /// Distinct terms, in order of first occurrence (given back by `TermBatch::unbatch`: in the order of
    /// first occurrence in its block), each with its positions. None while its block holds them
    /// ([`holds_terms`](Self::holds_terms) is false).
    pub fn terms(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u32])> + '_ {
        debug_assert!(self.held.is_none(), "the document's terms are held by its block");
        self.terms.iter().map(|t| {
            (
                &self.keys[t.key_off as usize..(t.key_off + t.key_len) as usize],
                &self.positions[t.pos_off as usize..(t.pos_off + t.pos_len) as usize],
            )
        })
    }

    /// Term `t` of [`terms`](Self::terms), with its positions.
    #[inline]
    pub fn term(&self, t: usize) -> (&[u8], &[u32]) {
        debug_assert!(self.held.is_none(), "the document's terms are held by its block");
        let t = &self.terms[t];
        (
            &self.keys[t.key_off as usize..(t.key_off + t.key_len) as usize],
            &self.positions[t.pos_off as usize..(t.pos_off + t.pos_len) as usize],
        )
    }

    /// The hash of term `t` of [`terms`](Self::terms) in the fresh segment's term table.
    #[inline]
    pub fn fresh_hash(&self, t: usize) -> u32 {
        self.terms[t].fresh_hash
    }

    /// Each distinct term's hash in the fresh segment's term table, in the order of [`terms`](Self::terms).
    pub fn fresh_hashes(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        self.terms.iter().map(|t| t.fresh_hash)
    }

    /// The document as the tLog records it (crash-safe mode): all of it, so recovery indexes every field
    /// even when `_source` stores only part.
    pub fn log_source(&self) -> &[u8] {
        self.whole.as_deref().unwrap_or(&self.source)
    }

    /// Number of distinct terms.
    pub fn term_count(&self) -> usize {
        self.held.map_or(self.terms.len(), |h| h.terms as usize)
    }

    /// Whether the document has its terms ([`terms`](Self::terms)): false while the block it was analyzed
    /// into holds them (a bulk load's batch; `TermBatch::unbatch` gives them back).
    pub fn holds_terms(&self) -> bool {
        self.held.is_none()
    }

    /// Ends its block's hold on its terms (`TermBatch::unbatch`, which then gives them back with
    /// [`push_term`](Self::push_term)): returns their totals (terms, positions, key bytes), room made for them.
    pub(crate) fn release_terms(&mut self) -> (usize, usize, usize) {
        let h = self.held.take().expect("the document's terms are held by its block");
        let h = (h.terms as usize, h.positions as usize, h.key_bytes as usize);
        self.terms.reserve_exact(h.0);
        self.positions.reserve_exact(h.1);
        self.keys.reserve_exact(h.2);
        h
    }

    /// Appends a term with its positions (increasing): `TermBatch::unbatch` giving a document its terms back.
    pub(crate) fn push_term(&mut self, key: &[u8], positions: &[u32], fresh_hash: u32) {
        debug_assert!(self.held.is_none());
        self.terms.push(TermSpan {
            key_off: self.keys.len() as u32,
            key_len: key.len() as u32,
            pos_off: self.positions.len() as u32,
            pos_len: positions.len() as u32,
            fresh_hash,
        });
        self.keys.extend_from_slice(key);
        self.positions.extend_from_slice(positions);
    }

    /// Sets the value of numeric column `field` (replacing the document's own, if any), keeping the order.
    pub fn set_numeric(&mut self, field: u16, x: f64) {
        match self.numerics.binary_search_by_key(&field, |&(f, _)| f) {
            Ok(i) => self.numerics[i].1 = x,
            Err(i) => self.numerics.insert(i, (field, x)),
        }
    }

    /// Removes numeric column `field`'s value, if the document has one.
    pub fn clear_numeric(&mut self, field: u16) {
        if let Ok(i) = self.numerics.binary_search_by_key(&field, |&(f, _)| f) {
            self.numerics.remove(i);
        }
    }

    /// The value of numeric column `field`, if the document has one.
    pub fn numeric(&self, field: u16) -> Option<f64> {
        self.numerics.binary_search_by_key(&field, |&(f, _)| f).ok().map(|i| self.numerics[i].1)
    }

    /// Arena words the fresh segment needs for this document's postings (doc, tf, positions per term).
    pub fn postings_words(&self) -> usize {
        2 * self.term_count() + self.position_count()
    }

    /// Bytes of all the term keys together.
    pub fn key_bytes(&self) -> usize {
        self.held.map_or(self.keys.len(), |h| h.key_bytes as usize)
    }

    /// Positions of all the terms together.
    pub fn position_count(&self) -> usize {
        self.held.map_or(self.positions.len(), |h| h.positions as usize)
    }
}

/// Gathers a document's distinct terms and their positions with no allocation per term: keys go back to back
/// into one buffer, a hash table maps them to term numbers (in order of first occurrence), and occurrences
/// are (term, position) pairs that [`finish`](Self::finish) groups by term with one counting pass. One
/// collector per thread is reused for every document the thread analyzes (see [`COLLECTOR`]), so analysis
/// allocates only what the [`AnalyzedDoc`] keeps. Terms stay in first-occurrence order: nothing downstream
/// needs them sorted (the fresh segment hashes them, the flusher sorts its whole dictionary once). A
/// [`BlockTerms`] is a collector in block mode (`block` set): its terms and occurrences stay from one
/// document to the next of a block, and documents come out without their terms.
#[derive(Default)]
struct TermCollector {
    table: hashbrown::HashTable<u32>,
    keys: Vec<u8>,
    spans: Vec<(u32, u32)>,
    /// Each term's [`super::term_hash`], in term order: the table rehashes from it as it grows, and
    /// [`finish`](Self::finish) derives the fresh segment's hash from it.
    hashes: Vec<u64>,
    occ: Vec<(u32, u32)>,
    /// Occurrences per term, then the next free position slot per term in `finish`.
    counts: Vec<u32>,
    /// The serialized `_source`, copied out at its exact size.
    source: Vec<u8>,
    /// A block's collector ([`BlockTerms`]): terms and occurrences stay from one document to the next.
    block: Option<BlockState>,
}

/// What a block's collector keeps besides a document's: which documents are in, and the totals of the one
/// being analyzed.
#[derive(Default)]
struct BlockState {
    /// Per term: the number of the last document that had it (`doc`, counted from 1), and its postings
    /// (documents) and positions in the block so far.
    counts: Vec<(u32, u32, u32)>,
    /// The document being analyzed, counted from 1 over every document begun (a failed one too).
    doc: u32,
    /// Occurrences of the documents taken in ([`BlockTerms::take`]); past them, the current document's.
    taken: usize,
    /// Where each document taken in ends in `occ`.
    ends: Vec<u32>,
    /// The current document's totals.
    held: HeldTerms,
}

impl BlockState {
    /// Drops the occurrences of the document being analyzed, if it was not taken in, from `occ` and the
    /// counts: each of its terms had it last.
    fn discard(&mut self, occ: &mut Vec<(u32, u32)>) {
        for &(t, _) in &occ[self.taken..] {
            let c = &mut self.counts[t as usize];
            c.2 -= 1;
            if c.0 == self.doc {
                c.0 = 0;
                c.1 -= 1;
            }
        }
        occ.truncate(self.taken);
    }
}

/// Scratch kept by a collector between documents is given back once it exceeds this (one huge document
/// does not pin its tables, or make every later `clear` walk them).
const COLLECTOR_KEEP: usize = 1 << 16;

thread_local! {
    static COLLECTOR: std::cell::RefCell<TermCollector> = std::cell::RefCell::default();
}

/// Whether two byte strings are equal, compared inline when short (most tokens): a slice comparison is a
/// `memcmp` call per lookup.
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && if a.len() <= 16 { a.iter().zip(b).all(|(x, y)| x == y) } else { a == b }
}

impl TermCollector {
    /// Empties the collector for the next document, dropping scratch that grew past [`COLLECTOR_KEEP`]; in
    /// block mode, only leaves out what a document not taken in left and starts the next.
    fn reset(&mut self) {
        if let Some(b) = &mut self.block {
            // The next document of the block.
            b.discard(&mut self.occ);
            self.source.clear();
            b.doc += 1;
            b.held = HeldTerms::default();
            return;
        }
        self.empty(COLLECTOR_KEEP);
    }

    /// Empties the terms, occurrences and source, giving the scratch back if it grew past `keep` entries.
    fn empty(&mut self, keep: usize) {
        if self.table.capacity() > keep || self.occ.capacity() > keep {
            *self = TermCollector { block: self.block.take(), ..Default::default() };
        }
        self.table.clear();
        self.keys.clear();
        self.spans.clear();
        self.hashes.clear();
        self.occ.clear();
        self.source.clear();
    }

    /// Records an occurrence of token `tok` of field `fid` at `pos` (its term key: `schema::term_key`).
    fn add(&mut self, fid: u16, tok: &[u8], pos: u32) {
        let h = super::term_hash(fid, tok);
        let TermCollector { table, keys, spans, hashes, occ, block, .. } = self;
        let field = fid.to_be_bytes();
        let found = table.find(h, |&t| {
            let (o, l) = spans[t as usize];
            let key = &keys[o as usize..(o + l) as usize];
            // Every key starts with its field's two bytes.
            key[..2] == field && same_bytes(&key[2..], tok)
        });
        let t = match found {
            Some(&t) => t,
            None => {
                let t = spans.len() as u32;
                spans.push((keys.len() as u32, tok.len() as u32 + 2));
                hashes.push(h);
                keys.extend_from_slice(&field);
                keys.extend_from_slice(tok);
                table.insert_unique(h, t, |&x| hashes[x as usize]);
                if let Some(b) = block.as_mut() {
                    b.counts.push((0, 0, 0));
                }
                t
            }
        };
        occ.push((t, pos));
        if let Some(b) = block.as_mut() {
            let c = &mut b.counts[t as usize];
            c.2 += 1;
            b.held.positions += 1;
            if c.0 != b.doc {
                c.0 = b.doc;
                c.1 += 1;
                b.held.terms += 1;
                b.held.key_bytes += spans[t as usize].1;
            }
        }
    }

    /// The collected terms as the document keeps them: keys back to back, one span per term, positions
    /// grouped by term.
    fn finish(&mut self) -> (Vec<u8>, Vec<TermSpan>, Vec<u32>) {
        let TermCollector { keys, spans, hashes, occ, counts, .. } = self;
        counts.clear();
        counts.resize(spans.len(), 0);
        for &(t, _) in occ.iter() {
            counts[t as usize] += 1;
        }
        let mut terms = Vec::with_capacity(spans.len());
        let mut off = 0;
        for ((&(key_off, key_len), n), &h) in spans.iter().zip(counts.iter_mut()).zip(hashes.iter()) {
            let pos_len = *n;
            let fresh_hash = crate::segment::fresh::fresh_hash(h);
            terms.push(TermSpan { key_off, key_len, pos_off: off, pos_len, fresh_hash });
            *n = off; // from here on: where the term's next position goes
            off += pos_len;
        }
        let mut positions = vec![0u32; occ.len()];
        // Occurrences arrive in position order per term (a term key belongs to one field, analyzed in order).
        for &(t, p) in occ.iter() {
            positions[counts[t as usize] as usize] = p;
            counts[t as usize] += 1;
        }
        (keys.clone(), terms, positions)
    }
}

/// The leaves of a document with their dotted field names (top-level names borrowed, not copied).
fn walk<'a>(prefix: &str, v: &'a Value, out: &mut Vec<(Cow<'a, str>, &'a Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if prefix.is_empty() {
                    walk_named(Cow::Borrowed(k.as_str()), child, out);
                } else {
                    walk_named(Cow::Owned(format!("{prefix}.{k}")), child, out);
                }
            }
        }
        _ => walk_named(Cow::Owned(prefix.to_string()), v, out),
    }
}

fn walk_named<'a>(name: Cow<'a, str>, v: &'a Value, out: &mut Vec<(Cow<'a, str>, &'a Value)>) {
    match v {
        Value::Object(_) => walk(&name, v, out),
        Value::Array(items) => {
            for item in items {
                walk_named(name.clone(), item, out);
            }
        }
        Value::Null => {}
        _ => out.push((name, v)),
    }
}

/// Refuses a document with an object where a mapped field's values go (`{"title": {"raw": "x"}}` when
/// `title` is a field), as Elasticsearch does: its leaves would otherwise be dropped, or mapped as new fields.
pub fn check_objects(schema: &Schema, doc: &Value) -> Result<()> {
    fn find(schema: &Schema, path: &str, v: &Value) -> Option<String> {
        match v {
            Value::Object(map) => {
                if !path.is_empty() && schema.field_id(path).is_some() {
                    return Some(path.to_string());
                }
                // Only objects and arrays go deeper (no name built for a scalar leaf).
                map.iter().filter(|(_, c)| c.is_object() || c.is_array()).find_map(|(k, c)| {
                    find(schema, &if path.is_empty() { k.clone() } else { format!("{path}.{k}") }, c)
                })
            }
            Value::Array(items) => items.iter().find_map(|i| find(schema, path, i)),
            _ => None,
        }
    }
    match find(schema, "", doc) {
        None => Ok(()),
        Some(p) => {
            let ty = schema.field(schema.field_id(&p).expect("found by its id")).ty.es_name();
            Err(Error::BadDocument(format!(
                "failed to parse field [{p}] of type [{ty}]: an object where a value goes"
            )))
        }
    }
}

/// Splits `_id` off a document object; returns the id (if present) and the remaining object.
pub fn take_id(mut doc: Value) -> Result<(Option<String>, Value)> {
    let Value::Object(map) = &mut doc else {
        return Err(Error::BadDocument("a document must be a JSON object".into()));
    };
    let id = match map.remove("_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => return Err(Error::BadDocument(format!("[_id] must be a string, got {other}"))),
    };
    if let Some(id) = &id {
        validate_id(id)?;
    }
    Ok((id, doc))
}

/// Elasticsearch's limit on `_id`: at most 512 bytes.
pub fn validate_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 512 {
        return Err(Error::BadDocument(format!("[_id] must be 1 to 512 bytes long, got {} bytes", id.len())));
    }
    Ok(())
}

/// The fields of `doc` that the schema does not know yet, typed the way Elasticsearch's dynamic mapping
/// would type them. Empty if the schema is not dynamic.
pub fn new_fields(schema: &Schema, doc: &Value) -> Vec<FieldDef> {
    if !schema.dynamic {
        return vec![];
    }
    let mut leaves = vec![];
    walk("", doc, &mut leaves);
    let mut out: Vec<FieldDef> = vec![];
    for (name, v) in leaves {
        if name.is_empty()
            || name.starts_with('_')
            || schema.field_id(&name).is_some()
            || out.iter().any(|f| f.name == name)
        {
            continue;
        }
        let ty = match v {
            Value::String(s) if parse_date_millis(s).is_some() => FieldType::Date,
            Value::String(_) => FieldType::Text,
            Value::Number(n) if n.is_f64() => FieldType::Double,
            Value::Number(_) => FieldType::Long,
            Value::Bool(_) => FieldType::Keyword,
            _ => continue,
        };
        out.push(FieldDef {
            name: name.into_owned(),
            ty,
            analyzer: schema.default_analyzer().into(),
            search_analyzer: None,
            postings_codec: DocCodec::default(),
            of: None,
            ignore_above: None,
        });
    }
    out
}

/// Analyzes a document (without `_id`) whose fields are all known to `schema` (call [`new_fields`] and add
/// them first). Fields the schema does not know are stored in `_source` but not indexed.
pub fn analyze_document(schema: &Schema, id: String, doc: &Value) -> Result<AnalyzedDoc> {
    analyze_document_logged(schema, id, doc, false)
}

/// [`analyze_document`] for a crash-safe index: with `log_whole`, a document that the `_source` mapping
/// stores only in part also keeps its whole JSON for the tLog ([`AnalyzedDoc::log_source`]).
pub fn analyze_document_logged(
    schema: &Schema,
    id: String,
    doc: &Value,
    log_whole: bool,
) -> Result<AnalyzedDoc> {
    COLLECTOR.with(|c| match c.try_borrow_mut() {
        Ok(mut c) => analyze_with(schema, id, doc, log_whole, &mut c),
        // Re-entered on this thread (not done today): a collector of its own.
        Err(_) => analyze_with(schema, id, doc, log_whole, &mut TermCollector::default()),
    })
}

fn analyze_with(
    schema: &Schema,
    id: String,
    doc: &Value,
    log_whole: bool,
    terms: &mut TermCollector,
) -> Result<AnalyzedDoc> {
    terms.reset();
    let bad_json = |e: serde_json::Error| Error::BadDocument(e.to_string());
    schema.source.write(doc, &mut terms.source).map_err(bad_json)?;
    let source = terms.source.clone();
    let whole = match log_whole && !schema.source.is_whole() {
        true => Some(serde_json::to_vec(doc).map_err(bad_json)?),
        false => None,
    };
    check_objects(schema, doc)?;
    let mut leaves = vec![];
    walk("", doc, &mut leaves);
    let mut lens: Vec<(u16, u32, u32)> = vec![]; // (field, tokens, next position), few fields per document
    let mut numerics: Vec<(u16, f64)> = vec![];
    for (name, v) in leaves {
        let Some(fid) = schema.field_id(&name) else { continue };
        // A multi-field takes its parent's values, never a leaf of its own name (a dotted key).
        if schema.field(fid).of.is_some() {
            continue;
        }
        for &f in std::iter::once(&fid).chain(schema.multi_fields(fid)) {
            index_value(schema, f, v, terms, &mut lens, &mut numerics)?;
        }
    }
    let ((keys, terms, positions), held) = match &terms.block {
        Some(b) => (Default::default(), Some(b.held)),
        None => (terms.finish(), None),
    };
    let mut lens: Vec<(u16, u32)> = lens.into_iter().map(|(f, n, _)| (f, n)).collect();
    lens.sort_unstable();
    numerics.sort_unstable_by_key(|x| x.0);
    Ok(AnalyzedDoc { id, source, whole, keys, terms, positions, lens, numerics, held })
}

/// Indexes value `v` of a document into field `fid`: its terms into `terms`, its length into `lens`
/// ((field, tokens, next position)), a number into `numerics`.
fn index_value(
    schema: &Schema,
    fid: u16,
    v: &Value,
    terms: &mut TermCollector,
    lens: &mut Vec<(u16, u32, u32)>,
    numerics: &mut Vec<(u16, f64)>,
) -> Result<()> {
    let def = schema.field(fid);
    let bad = || {
        Error::BadDocument(format!(
            "failed to parse field [{}] of type [{}]: {v}",
            def.name,
            def.ty.es_name()
        ))
    };
    match def.ty {
        FieldType::Text | FieldType::Keyword => {
            let owned;
            let text: &str = match v {
                Value::String(s) => s,
                other => {
                    owned = other.to_string();
                    &owned
                }
            };
            // A keyword value past `ignore_above` characters is not indexed (as if absent), as in Elasticsearch.
            if def.ignore_above.is_some_and(|n| text.chars().count() > n as usize) {
                return Ok(());
            }
            let at = match lens.iter().position(|l| l.0 == fid) {
                Some(at) => at,
                None => {
                    lens.push((fid, 0, 0));
                    lens.len() - 1
                }
            };
            let entry = &mut lens[at];
            let start = if entry.2 == 0 { 0 } else { entry.2 + POSITION_GAP };
            if def.ty == FieldType::Keyword {
                terms.add(fid, text.as_bytes(), start);
                entry.1 += 1;
                entry.2 = start + 1;
            } else {
                let mut count = 0;
                let used = schema.analyzer(fid).analyze(text, &mut |tok, pos| {
                    terms.add(fid, tok.as_bytes(), start + pos);
                    count += 1;
                });
                entry.1 += count;
                entry.2 = start + used;
            }
        }
        FieldType::Long | FieldType::Double => {
            let x = match v {
                Value::Number(n) => n.as_f64().ok_or_else(bad)?,
                Value::String(s) => s.trim().parse::<f64>().map_err(|_| bad())?,
                _ => return Err(bad()),
            };
            if !x.is_finite() {
                return Err(bad());
            }
            // A long has no negative zero (`-0`, `-0.5` are 0, as Elasticsearch coerces them); a double
            // keeps it.
            let x = if def.ty == FieldType::Long { x.trunc() + 0.0 } else { x };
            if !numerics.iter().any(|(f, _)| *f == fid) {
                numerics.push((fid, x));
            }
        }
        FieldType::Date => {
            let x = match v {
                Value::Number(n) => n.as_f64().ok_or_else(bad)? + 0.0,
                Value::String(s) => parse_date_millis(s).ok_or_else(bad)? as f64,
                _ => return Err(bad()),
            };
            if !numerics.iter().any(|(f, _)| *f == fid) {
                numerics.push((fid, x));
            }
        }
    }
    Ok(())
}

/// The terms of a block of documents analyzed into one table ([`analyze_document_into`]): each distinct
/// term of the block once, and every occurrence (term, position), documents in order. A bulk load's worker
/// analyzes a block this way when its documents can go into the index together, and groups the table into
/// a `TermBatch` (`TermBatch::fill`) — one hash lookup per token in all, where analyzing document by
/// document and then grouping took one per token and another per distinct term of each document. The
/// documents come out without their terms ([`AnalyzedDoc::holds_terms`]). Reused block after block.
#[derive(Default)]
pub struct BlockTerms(TermCollector);

/// The occurrences of a [`BlockTerms`]' documents, per document, as [`BlockTerms::occurrences`] gives them.
pub(crate) type Occurrences<'a> = (&'a [(u32, u32)], &'a [u32]);

impl BlockTerms {
    /// Empties it for the next block.
    pub fn clear(&mut self) {
        let c = &mut self.0;
        c.empty(BLOCK_KEEP);
        let mut b = c.block.take().filter(|b| b.counts.capacity() <= BLOCK_KEEP).unwrap_or_default();
        b.counts.clear();
        b.doc = 0;
        b.taken = 0;
        b.ends.clear();
        c.block = Some(b);
    }

    /// Leaves the document analyzed last out of the block (one whose analysis failed is left out already).
    /// Each document analyzed into it is taken in or left out before the next, or before the block is
    /// grouped.
    pub fn discard(&mut self) {
        let c = &mut self.0;
        c.block.as_mut().expect("a block's collector").discard(&mut c.occ);
    }

    /// Takes the document analyzed last into the block.
    pub fn take(&mut self) {
        let b = self.0.block.as_mut().expect("a block's collector");
        assert!(self.0.occ.len() <= u32::MAX as usize, "a block's occurrences fit 32 bits");
        b.taken = self.0.occ.len();
        b.ends.push(b.taken as u32);
    }

    /// Term `t`: its key (its field's two bytes, then the token) and its `schema::term_hash`.
    pub(crate) fn term(&self, t: usize) -> (&[u8], u64) {
        let (o, l) = self.0.spans[t];
        (&self.0.keys[o as usize..(o + l) as usize], self.0.hashes[t])
    }

    /// Distinct terms (some may have no occurrence in a document taken in).
    pub(crate) fn term_count(&self) -> usize {
        self.0.spans.len()
    }

    /// Term `t`'s postings (documents) and positions in the documents taken in.
    pub(crate) fn counts(&self, t: usize) -> (u32, u32) {
        let c = self.0.block.as_ref().expect("a block's collector").counts[t];
        (c.1, c.2)
    }

    /// The occurrences (term, position) of the documents taken in, in order (each document's terms in order
    /// of first occurrence, a term's positions increasing), and where each document's end.
    pub(crate) fn occurrences(&self) -> Occurrences<'_> {
        match &self.0.block {
            Some(b) => {
                assert_eq!(self.0.occ.len(), b.taken, "each document analyzed was taken in or left out");
                (&self.0.occ, &b.ends)
            }
            None => (&[], &[]),
        }
    }
}

/// A [`BlockTerms`] that grew past this many entries (a block of huge documents) is given back when cleared.
const BLOCK_KEEP: usize = 1 << 22;

/// [`analyze_document_logged`] into `block`: the document's terms go to the block's table, and it comes out
/// without them ([`AnalyzedDoc::holds_terms`]). [`BlockTerms::take`] then takes it into the block.
pub fn analyze_document_into(
    schema: &Schema,
    id: String,
    doc: &Value,
    log_whole: bool,
    block: &mut BlockTerms,
) -> Result<AnalyzedDoc> {
    if block.0.block.is_none() {
        block.clear();
    }
    let r = analyze_with(schema, id, doc, log_whole, &mut block.0);
    if r.is_err() {
        block.discard();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::term_key;
    use serde_json::json;

    /// The collector keeps one term per (field, token): the same token in two fields is two terms, tokens
    /// that differ in their last byte (short, or past the inline comparison's 16 bytes) or only in length
    /// are different terms, and each term's positions are its own.
    #[test]
    fn terms_are_told_apart_by_field_and_every_byte() {
        let s = Schema::from_mappings(&json!({"properties": {"a": {"type": "text"}, "b": {"type": "text"}}}))
            .unwrap();
        let long = "x".repeat(20);
        let text = format!("ab abc ab abd {long}1 {long}2 {long}1 {long} ab");
        let doc = analyze_document(&s, "1".into(), &json!({"a": text, "b": "ab abc"})).unwrap();
        let (a, b) = (s.field_id("a").unwrap(), s.field_id("b").unwrap());
        let positions = |f: u16, t: &str| {
            let mut k = vec![];
            term_key(f, t, &mut k);
            doc.terms().find(|x| x.0 == &k[..]).map(|x| x.1.to_vec())
        };
        assert_eq!(positions(a, "ab"), Some(vec![0, 2, 8]));
        assert_eq!(positions(a, "abc"), Some(vec![1]));
        assert_eq!(positions(a, "abd"), Some(vec![3]));
        assert_eq!(positions(a, &format!("{long}1")), Some(vec![4, 6]));
        assert_eq!(positions(a, &format!("{long}2")), Some(vec![5]));
        assert_eq!(positions(a, &long), Some(vec![7]));
        assert_eq!(positions(b, "ab"), Some(vec![0]));
        assert_eq!(positions(b, "abc"), Some(vec![1]));
        assert_eq!(doc.term_count(), 8);
        // The comparison itself (the table calls it only on hash collisions): every byte counts.
        for len in 0..40usize {
            let x: Vec<u8> = (0..len as u8).collect();
            assert!(same_bytes(&x, &x.clone()));
            assert!(!same_bytes(&x, &[x.as_slice(), &[0]].concat()), "length {len}");
            for i in 0..len {
                let mut y = x.clone();
                y[i] ^= 0x80;
                assert!(!same_bytes(&x, &y), "byte {i} of {len}");
            }
        }
    }

    /// A multi-field indexes its parent's values as its own type and analyzer says; a leaf named like a
    /// multi-field (an object under a text field) is not indexed into it.
    #[test]
    fn multi_fields_index_the_parents_values() {
        let s = Schema::from_mappings(&json!({"properties": {"t": {"type": "text", "fields": {
            "raw": {"type": "keyword"}, "en": {"type": "text", "analyzer": "english"}}}}}))
        .unwrap();
        let id = |n: &str| s.field_id(n).unwrap();
        let doc = analyze_document(&s, "1".into(), &json!({"t": ["Running Dogs", "7"]})).unwrap();
        let mut got: Vec<(u16, Vec<u8>, Vec<u32>)> =
            doc.terms().map(|(k, p)| (crate::schema::key_field(k), k[2..].to_vec(), p.to_vec())).collect();
        got.sort();
        let want = |f: &str, t: &str, p: &[u32]| (id(f), t.as_bytes().to_vec(), p.to_vec());
        let mut expected = vec![
            want("t", "running", &[0]),
            want("t", "dogs", &[1]),
            want("t", "7", &[2 + POSITION_GAP]),
            want("t.raw", "Running Dogs", &[0]),
            want("t.raw", "7", &[1 + POSITION_GAP]),
            want("t.en", "run", &[0]),
            want("t.en", "dog", &[1]),
            want("t.en", "7", &[2 + POSITION_GAP]),
        ];
        expected.sort();
        assert_eq!(got, expected);
        // A long multi-field takes a number, and rejects the document otherwise, as Elasticsearch does.
        let s2 = Schema::from_mappings(&json!({"properties": {"t": {"type": "keyword", "fields": {
            "n": {"type": "long"}}}}}))
        .unwrap();
        let doc = analyze_document(&s2, "1".into(), &json!({"t": "7"})).unwrap();
        assert_eq!(doc.numeric(s2.field_id("t.n").unwrap()), Some(7.0));
        let e = analyze_document(&s2, "1".into(), &json!({"t": "x"})).unwrap_err();
        assert!(e.to_string().contains("failed to parse field [t.n] of type [long]"), "{e}");
        // A dotted key naming the multi-field is not its value; an object under the text field is refused.
        let doc = analyze_document(&s, "1".into(), &json!({"t.raw": "x"})).unwrap();
        assert_eq!(doc.term_count(), 0);
        for bad in [json!({"t": {"raw": "x"}}), json!({"t": ["a", {"raw": "x"}]})] {
            let e = analyze_document(&s, "1".into(), &bad).unwrap_err().to_string();
            assert!(e.contains("failed to parse field [t] of type [text]: an object"), "{e}");
        }
        // Objects elsewhere are fine (`o.t` is no field).
        assert!(analyze_document(&s, "1".into(), &json!({"o": [{"t": 1}], "t": "a"})).is_ok());
        // A keyword multi-field with `ignore_above` leaves out the longer values (counted in characters),
        // the parent keeps them.
        let s3 = Schema::from_mappings(&json!({"properties": {"t": {"type": "text", "fields": {
            "raw": {"type": "keyword", "ignore_above": 4}}}}}))
        .unwrap();
        let doc = analyze_document(&s3, "1".into(), &json!({"t": ["éééé", "abcde"]})).unwrap();
        let raw = s3.field_id("t.raw").unwrap();
        let kept: Vec<&[u8]> =
            doc.terms().filter(|(k, _)| crate::schema::key_field(k) == raw).map(|(k, _)| &k[2..]).collect();
        assert_eq!(kept, ["éééé".as_bytes()]);
        assert_eq!(doc.terms().filter(|(k, _)| crate::schema::key_field(k) != raw).count(), 2);
    }

    #[test]
    fn dynamic_mapping_and_analysis() {
        let mut s = Schema::default();
        let doc = json!({"title": "Hello World", "n": 3, "x": 1.5, "ok": true, "d": "2015-05-23",
                          "tags": ["a b", "c"], "o": {"k": "v"}, "nil": null});
        for f in new_fields(&s, &doc) {
            s.add_field(f).unwrap();
        }
        let ty = |n: &str| s.field(s.field_id(n).unwrap()).ty;
        assert_eq!(ty("title"), FieldType::Text);
        assert_eq!(ty("n"), FieldType::Long);
        assert_eq!(ty("x"), FieldType::Double);
        assert_eq!(ty("ok"), FieldType::Keyword);
        assert_eq!(ty("d"), FieldType::Date);
        assert_eq!(ty("o.k"), FieldType::Text);
        assert!(s.field_id("nil").is_none());
        let a = analyze_document(&s, "1".into(), &doc).unwrap();
        let tags = s.field_id("tags").unwrap();
        let mut k = vec![];
        term_key(tags, "c", &mut k);
        let c = a.terms().find(|t| t.0 == &k[..]).unwrap();
        assert_eq!(c.1, &[2 + POSITION_GAP][..], "second value starts after the gap");
        let mut keys: Vec<&[u8]> = a.terms().map(|t| t.0).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), a.term_count(), "each term once");
        assert!(
            a.terms().all(|(_, p)| !p.is_empty() && p.windows(2).all(|w| w[0] < w[1])),
            "positions grouped by term, increasing"
        );
        assert!(a.lens.contains(&(tags, 3)));
        assert!(a.numerics.contains(&(s.field_id("d").unwrap(), 1_432_339_200_000.0)));
        let bad = analyze_document(&s, "2".into(), &json!({"n": "not a number"})).unwrap_err();
        assert!(bad.to_string().contains("failed to parse field [n]"), "{bad}");
        assert!(take_id(json!([1])).is_err());
        assert_eq!(take_id(json!({"_id": 7, "a": 1})).unwrap().0.as_deref(), Some("7"));
    }
}
