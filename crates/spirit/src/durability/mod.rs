//! Crash-safe durability (DESIGN.md §7, SPIRIT §4.9): the three logs and what recovery reads from them.
//!
//! * **tLog** — every accepted operation, with the document contents, in order; an operation is acknowledged
//!   only once its record is durable ([`log::Log::sync`] is the group commit). Recovery re-applies the records
//!   that the durable segments do not already reflect.
//! * **eLog** — one record per engraved segment (where its persistent image lies and which docs it holds), so
//!   recovery finds engraved-but-not-checkpointed segments instead of re-indexing them.
//! * **mLog** — merge progress: begin, per-term progress, end. Linking is idempotent (a term whose chain head
//!   already is the segment is skipped), so a merge cut short is redone from its last progress record.
//!
//! A **checkpoint** (the manifest, published by the superblock's recovery record) is the cut that bounds
//! recovery: the segments whose images are durable, their delete bitmaps, the merged segment, the schema, and
//! the log positions to scan from. The merger writes one after each merge; the tLog chunks wholly before the
//! checkpoint's replay point are then recycled.
//!
//! Doc ids make replay exact: an add record carries the doc id it was given (recovery re-adds in LSN order
//! and checks it gets the same id) and the id of the doc it replaced; a delete record carries the doc id it
//! deleted. Setting a delete bit is idempotent, so replaying a record twice — or after a crash during recovery
//! — changes nothing.

pub mod log;

pub use log::{Log, LogError, LogPos, Record, Scan};

/// Log kinds (stored in chunk headers, so a pointer into the wrong log is detected).
pub const TLOG: u32 = 1;
pub const ELOG: u32 = 2;
pub const MLOG: u32 = 3;

const VERSION: u8 = 1;

/// A tLog record.
#[derive(Debug, Clone, PartialEq)]
pub enum TlogRecord {
    /// A document was added as `doc` (replacing `replaces`, if any); `seq` is its index-wide sequence number
    /// (sharded indexes), `version` its `_version` (`None` in records written before versions were kept).
    Add {
        doc: u32,
        replaces: Option<u32>,
        id: String,
        seq: Option<u64>,
        version: Option<u64>,
        source: Vec<u8>,
    },
    /// Doc `doc` (with `_id` `id`) was deleted.
    Delete { doc: u32, id: String },
    /// The owner's metadata (schema, settings) changed to this JSON.
    Meta { json: Vec<u8> },
}

/// An eLog record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Engraved {
    pub seg: u32,
    pub base_doc: u32,
    pub doc_count: u32,
    pub image_off: u64,
    pub image_len: u64,
}

/// An mLog record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeRecord {
    Begin {
        seg: u32,
    },
    /// Terms `[0, terms)` of `seg` are linked and durable.
    Progress {
        seg: u32,
        terms: u32,
    },
    End {
        seg: u32,
    },
}

/// A record that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("log record {lsn}: {what}")]
pub struct BadRecord {
    pub lsn: u64,
    pub what: String,
}

struct Reader<'a> {
    b: &'a [u8],
    lsn: u64,
}

impl<'a> Reader<'a> {
    fn new(r: &'a Record) -> Result<(u8, Reader<'a>), BadRecord> {
        let bad = |what: &str| BadRecord { lsn: r.lsn, what: what.into() };
        match r.payload.as_slice() {
            [kind, VERSION, rest @ ..] => Ok((*kind, Reader { b: rest, lsn: r.lsn })),
            [_, v, ..] => Err(bad(&format!("record format version {v} is not supported"))),
            _ => Err(bad("empty record")),
        }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadRecord> {
        if self.b.len() < n {
            return Err(BadRecord { lsn: self.lsn, what: "truncated record".into() });
        }
        let (a, b) = self.b.split_at(n);
        self.b = b;
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, BadRecord> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, BadRecord> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, BadRecord> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| BadRecord { lsn: self.lsn, what: "id is not UTF-8".into() })
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.b)
    }
}

const T_ADD: u8 = 1;
const T_DELETE: u8 = 2;
const T_META: u8 = 3;
/// An add with the document's index-wide sequence number after the id.
const T_ADD_SEQ: u8 = 4;
/// An add with the document's `_version` after the id, then its sequence number (`u64::MAX`: none). Every
/// add is written so since versions are kept; the two kinds before are still read.
const T_ADD_VERSION: u8 = 5;

impl TlogRecord {
    /// The fixed part of an add record; the source follows it (appended without a copy).
    pub fn add_header(doc: u32, replaces: Option<u32>, id: &str, seq: Option<u64>, version: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(30 + id.len());
        b.extend_from_slice(&[T_ADD_VERSION, VERSION]);
        b.extend_from_slice(&doc.to_le_bytes());
        b.extend_from_slice(&replaces.unwrap_or(u32::MAX).to_le_bytes());
        b.extend_from_slice(&(id.len() as u32).to_le_bytes());
        b.extend_from_slice(id.as_bytes());
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&seq.unwrap_or(u64::MAX).to_le_bytes());
        b
    }

    pub fn delete(doc: u32, id: &str) -> Vec<u8> {
        let mut b = vec![T_DELETE, VERSION];
        b.extend_from_slice(&doc.to_le_bytes());
        b.extend_from_slice(&(id.len() as u32).to_le_bytes());
        b.extend_from_slice(id.as_bytes());
        b
    }

    pub fn meta(json: &[u8]) -> Vec<u8> {
        let mut b = vec![T_META, VERSION];
        b.extend_from_slice(json);
        b
    }

    pub fn decode(r: &Record) -> Result<TlogRecord, BadRecord> {
        let (kind, mut rd) = Reader::new(r)?;
        Ok(match kind {
            T_ADD | T_ADD_SEQ | T_ADD_VERSION => {
                let doc = rd.u32()?;
                let replaces = Some(rd.u32()?).filter(|&d| d != u32::MAX);
                let id = rd.string()?;
                let (seq, version) = match kind {
                    T_ADD_SEQ => (Some(rd.u64()?), None),
                    T_ADD_VERSION => {
                        let version = rd.u64()?;
                        (Some(rd.u64()?).filter(|&q| q != u64::MAX), Some(version))
                    }
                    _ => (None, None),
                };
                TlogRecord::Add { doc, replaces, id, seq, version, source: rd.rest().to_vec() }
            }
            T_DELETE => {
                let doc = rd.u32()?;
                TlogRecord::Delete { doc, id: rd.string()? }
            }
            T_META => TlogRecord::Meta { json: rd.rest().to_vec() },
            k => return Err(BadRecord { lsn: r.lsn, what: format!("unknown tLog record kind {k}") }),
        })
    }
}

impl Engraved {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![1, VERSION];
        for v in [self.seg, self.base_doc, self.doc_count] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.image_off.to_le_bytes());
        b.extend_from_slice(&self.image_len.to_le_bytes());
        b
    }

    pub fn decode(r: &Record) -> Result<Engraved, BadRecord> {
        let (kind, mut rd) = Reader::new(r)?;
        if kind != 1 {
            return Err(BadRecord { lsn: r.lsn, what: format!("unknown eLog record kind {kind}") });
        }
        Ok(Engraved {
            seg: rd.u32()?,
            base_doc: rd.u32()?,
            doc_count: rd.u32()?,
            image_off: rd.u64()?,
            image_len: rd.u64()?,
        })
    }
}

impl MergeRecord {
    pub fn encode(&self) -> Vec<u8> {
        let (kind, seg, terms) = match *self {
            MergeRecord::Begin { seg } => (1u8, seg, 0),
            MergeRecord::Progress { seg, terms } => (2, seg, terms),
            MergeRecord::End { seg } => (3, seg, 0),
        };
        let mut b = vec![kind, VERSION];
        b.extend_from_slice(&seg.to_le_bytes());
        b.extend_from_slice(&terms.to_le_bytes());
        b
    }

    pub fn decode(r: &Record) -> Result<MergeRecord, BadRecord> {
        let (kind, mut rd) = Reader::new(r)?;
        let (seg, terms) = (rd.u32()?, rd.u32()?);
        Ok(match kind {
            1 => MergeRecord::Begin { seg },
            2 => MergeRecord::Progress { seg, terms },
            3 => MergeRecord::End { seg },
            k => return Err(BadRecord { lsn: r.lsn, what: format!("unknown mLog record kind {k}") }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(payload: Vec<u8>) -> Record {
        Record { lsn: 5, payload }
    }

    #[test]
    fn records_round_trip_and_reject_garbage() {
        for seq in [None, Some(1u64 << 40)] {
            let mut add = TlogRecord::add_header(7, Some(3), "doc-1", seq, 1 << 50);
            add.extend_from_slice(br#"{"a":1}"#);
            assert_eq!(
                TlogRecord::decode(&rec(add)).unwrap(),
                TlogRecord::Add {
                    doc: 7,
                    replaces: Some(3),
                    id: "doc-1".into(),
                    seq,
                    version: Some(1 << 50),
                    source: br#"{"a":1}"#.to_vec()
                }
            );
        }
        // Records from before versions were kept: no version.
        let mut old = vec![T_ADD_SEQ, VERSION, 7, 0, 0, 0, 255, 255, 255, 255, 1, 0, 0, 0, b'x'];
        old.extend_from_slice(&9u64.to_le_bytes());
        old.extend_from_slice(b"{}");
        assert_eq!(
            TlogRecord::decode(&rec(old)).unwrap(),
            TlogRecord::Add {
                doc: 7,
                replaces: None,
                id: "x".into(),
                seq: Some(9),
                version: None,
                source: b"{}".to_vec()
            }
        );
        let add = TlogRecord::add_header(8, None, "", None, 1);
        assert!(matches!(TlogRecord::decode(&rec(add)).unwrap(), TlogRecord::Add { replaces: None, .. }));
        assert_eq!(
            TlogRecord::decode(&rec(TlogRecord::delete(9, "x"))).unwrap(),
            TlogRecord::Delete { doc: 9, id: "x".into() }
        );
        assert_eq!(
            TlogRecord::decode(&rec(TlogRecord::meta(b"{}"))).unwrap(),
            TlogRecord::Meta { json: b"{}".to_vec() }
        );
        let e = Engraved { seg: 1, base_doc: 2, doc_count: 3, image_off: 4, image_len: 5 };
        assert_eq!(Engraved::decode(&rec(e.encode())).unwrap(), e);
        for m in [
            MergeRecord::Begin { seg: 1 },
            MergeRecord::Progress { seg: 2, terms: 9 },
            MergeRecord::End { seg: 3 },
        ] {
            assert_eq!(MergeRecord::decode(&rec(m.encode())).unwrap(), m);
        }
        assert!(TlogRecord::decode(&rec(vec![])).is_err());
        assert!(TlogRecord::decode(&rec(vec![1, 99, 0])).unwrap_err().to_string().contains("version 99"));
        assert!(TlogRecord::decode(&rec(vec![T_ADD, VERSION, 1, 2])).is_err());
        assert!(TlogRecord::decode(&rec(vec![42, VERSION])).is_err());
    }
}
