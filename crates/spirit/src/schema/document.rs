//! Turning one JSON document into what the index stores: the analyzed terms with positions, the field
//! lengths (BM25 norms), the numeric column values, the `_id` and the `_source`.

use super::{parse_date_millis, term_key, FieldDef, FieldType, Schema};
use crate::codec::DocCodec;
use crate::error::{Error, Result};
use rustc_hash::FxHashMap;
use serde_json::Value;

/// Elasticsearch's `position_increment_gap`: values of a multi-valued text field are this many positions
/// apart, so a phrase never matches across two values.
pub const POSITION_GAP: u32 = 100;

/// A document ready for the ingester.
#[derive(Debug, Clone, Default)]
pub struct AnalyzedDoc {
    pub id: String,
    /// The stored `_source` (the document without `_id`), as JSON bytes.
    pub source: Vec<u8>,
    /// Term keys, back to back; `terms` points into it, sorted by key.
    keys: Vec<u8>,
    terms: Vec<TermSpan>,
    /// Positions of every term, grouped by term in `terms` order, increasing within a term.
    positions: Vec<u32>,
    /// Field lengths (tokens) of the term fields present, sorted by field.
    pub lens: Vec<(u16, u32)>,
    /// Numeric values (first value of a multi-valued field), sorted by field.
    pub numerics: Vec<(u16, f64)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct TermSpan {
    key_off: u32,
    key_len: u32,
    pos_off: u32,
    pos_len: u32,
}

impl AnalyzedDoc {
    /// Distinct terms, sorted by key, each with its positions.
    pub fn terms(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u32])> + '_ {
        self.terms.iter().map(|t| {
            (
                &self.keys[t.key_off as usize..(t.key_off + t.key_len) as usize],
                &self.positions[t.pos_off as usize..(t.pos_off + t.pos_len) as usize],
            )
        })
    }

    /// Number of distinct terms.
    pub fn term_count(&self) -> usize {
        self.terms.len()
    }

    /// Sets the value of numeric column `field` (replacing the document's own, if any), keeping the order.
    pub fn set_numeric(&mut self, field: u16, x: f64) {
        match self.numerics.binary_search_by_key(&field, |&(f, _)| f) {
            Ok(i) => self.numerics[i].1 = x,
            Err(i) => self.numerics.insert(i, (field, x)),
        }
    }

    /// The value of numeric column `field`, if the document has one.
    pub fn numeric(&self, field: u16) -> Option<f64> {
        self.numerics.binary_search_by_key(&field, |&(f, _)| f).ok().map(|i| self.numerics[i].1)
    }

    /// Arena words the fresh segment needs for this document's postings (doc, tf, positions per term).
    pub fn postings_words(&self) -> usize {
        2 * self.terms.len() + self.positions.len()
    }
}

/// Gathers a document's distinct terms and their positions with no allocation per term: keys go back to back
/// into one buffer, a hash table maps them to term numbers, and occurrences are (term, position) pairs that
/// [`finish`](Self::finish) groups by term in key order.
struct TermCollector {
    table: hashbrown::HashTable<u32>,
    keys: Vec<u8>,
    spans: Vec<(u32, u32)>,
    occ: Vec<(u32, u32)>,
}

fn key_hash(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

impl TermCollector {
    fn with_capacity(tokens: usize) -> TermCollector {
        TermCollector {
            table: hashbrown::HashTable::with_capacity(tokens / 2),
            keys: Vec::with_capacity(tokens * 4),
            spans: Vec::with_capacity(tokens / 2),
            occ: Vec::with_capacity(tokens),
        }
    }

    fn add(&mut self, key: &[u8], pos: u32) {
        let h = key_hash(key);
        let TermCollector { table, keys, spans, occ } = self;
        let found = table.find(h, |&t| {
            let (o, l) = spans[t as usize];
            &keys[o as usize..(o + l) as usize] == key
        });
        let t = match found {
            Some(&t) => t,
            None => {
                let t = spans.len() as u32;
                spans.push((keys.len() as u32, key.len() as u32));
                keys.extend_from_slice(key);
                table.insert_unique(h, t, |&x| {
                    let (o, l) = spans[x as usize];
                    key_hash(&keys[o as usize..(o + l) as usize])
                });
                t
            }
        };
        occ.push((t, pos));
    }

    fn finish(self) -> (Vec<u8>, Vec<TermSpan>, Vec<u32>) {
        let TermCollector { keys, spans, occ, .. } = self;
        let key = |t: usize| &keys[spans[t].0 as usize..(spans[t].0 + spans[t].1) as usize];
        let mut order: Vec<u32> = (0..spans.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| key(a as usize).cmp(key(b as usize)));
        let mut counts = vec![0u32; spans.len()];
        for &(t, _) in &occ {
            counts[t as usize] += 1;
        }
        let mut start = vec![0u32; spans.len()];
        let mut terms = Vec::with_capacity(spans.len());
        let mut off = 0;
        for &t in &order {
            start[t as usize] = off;
            let (ko, kl) = spans[t as usize];
            terms.push(TermSpan { key_off: ko, key_len: kl, pos_off: off, pos_len: counts[t as usize] });
            off += counts[t as usize];
        }
        let mut positions = vec![0u32; occ.len()];
        // Occurrences arrive in position order per term (a term key belongs to one field, analyzed in order).
        for &(t, p) in &occ {
            positions[start[t as usize] as usize] = p;
            start[t as usize] += 1;
        }
        (keys, terms, positions)
    }
}

fn walk<'a>(prefix: &str, v: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let name = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                walk(&name, child, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(prefix, item, out);
            }
        }
        Value::Null => {}
        _ => out.push((prefix.to_string(), v)),
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
            name,
            ty,
            analyzer: schema.default_analyzer().into(),
            postings_codec: DocCodec::default(),
        });
    }
    out
}

/// Analyzes a document (without `_id`) whose fields are all known to `schema` (call [`new_fields`] and add
/// them first). Fields the schema does not know are stored in `_source` but not indexed.
pub fn analyze_document(schema: &Schema, id: String, doc: &Value) -> Result<AnalyzedDoc> {
    let source = serde_json::to_vec(doc).map_err(|e| Error::BadDocument(e.to_string()))?;
    let mut leaves = vec![];
    walk("", doc, &mut leaves);
    // Sized for the document up front (about one token per 6 bytes, half of them distinct), so the table
    // and vectors rarely grow while it is analyzed.
    let mut terms = TermCollector::with_capacity(source.len() / 6);
    let mut lens: FxHashMap<u16, (u32, u32)> = FxHashMap::default(); // field -> (tokens, next position)
    let mut numerics: Vec<(u16, f64)> = vec![];
    let mut key = Vec::new();
    for (name, v) in leaves {
        let Some(fid) = schema.field_id(&name) else { continue };
        let def = schema.field(fid);
        let bad = || {
            Error::BadDocument(format!("failed to parse field [{name}] of type [{}]: {v}", def.ty.es_name()))
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
                let entry = lens.entry(fid).or_insert((0, 0));
                let start = if entry.1 == 0 { 0 } else { entry.1 + POSITION_GAP };
                if def.ty == FieldType::Keyword {
                    term_key(fid, text, &mut key);
                    terms.add(&key, start);
                    entry.0 += 1;
                    entry.1 = start + 1;
                } else {
                    let mut count = 0;
                    let used = schema.analyzer(fid).analyze(text, &mut |tok, pos| {
                        term_key(fid, tok, &mut key);
                        terms.add(&key, start + pos);
                        count += 1;
                    });
                    entry.0 += count;
                    entry.1 = start + used;
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
                let x = if def.ty == FieldType::Long { x.trunc() } else { x };
                if !numerics.iter().any(|(f, _)| *f == fid) {
                    numerics.push((fid, x));
                }
            }
            FieldType::Date => {
                let x = match v {
                    Value::Number(n) => n.as_f64().ok_or_else(bad)?,
                    Value::String(s) => parse_date_millis(s).ok_or_else(bad)? as f64,
                    _ => return Err(bad()),
                };
                if !numerics.iter().any(|(f, _)| *f == fid) {
                    numerics.push((fid, x));
                }
            }
        }
    }
    let (keys, terms, positions) = terms.finish();
    let mut lens: Vec<(u16, u32)> = lens.into_iter().map(|(f, (n, _))| (f, n)).collect();
    lens.sort_unstable();
    numerics.sort_unstable_by_key(|x| x.0);
    Ok(AnalyzedDoc { id, source, keys, terms, positions, lens, numerics })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert!(a.terms().zip(a.terms().skip(1)).all(|(x, y)| x.0 < y.0), "terms sorted by key");
        assert!(a.lens.contains(&(tags, 3)));
        assert!(a.numerics.contains(&(s.field_id("d").unwrap(), 1_432_339_200_000.0)));
        let bad = analyze_document(&s, "2".into(), &json!({"n": "not a number"})).unwrap_err();
        assert!(bad.to_string().contains("failed to parse field [n]"), "{bad}");
        assert!(take_id(json!([1])).is_err());
        assert_eq!(take_id(json!({"_id": 7, "a": 1})).unwrap().0.as_deref(), Some("7"));
    }
}
