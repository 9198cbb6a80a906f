//! `spirit check`: every checksum and structural invariant of a shard, reported as a list of problems.
//!
//! Opening a shard already verifies the superblock, the manifest, the logs it replays and every image's
//! checksum; this goes further: each image's structure (sorted dictionary, hash section, decodable posting
//! lists with increasing docs and the recorded df), each delete bitmap against its segment (a document
//! compaction purged must be deleted), and the merged segment against the images it links — every term of a
//! merged segment must have exactly one checksummed chain node for that segment, pointing at that term's
//! posting list with its df and max tf.

use super::Shard;
use crate::gdt::{SegData, SegState};

/// The outcome of [`Shard::check`].
#[derive(Debug, Default)]
pub struct CheckReport {
    pub segments: usize,
    pub merged_terms_checked: u64,
    pub problems: Vec<String>,
}

impl Shard {
    /// Checks every segment and the merged segment. Read-only.
    pub fn check(&self) -> CheckReport {
        let snap = self.pin();
        let mut r = CheckReport { segments: snap.segments.len(), ..Default::default() };
        for s in &snap.segments {
            if let SegData::Fresh(_) = s.data {
                continue;
            }
            let v = match s.image().expect("image segment") {
                Ok(v) => v,
                Err(e) => {
                    r.problems.push(format!("segment {}: {}", s.id, e.0));
                    continue;
                }
            };
            let purged = match v.verify().and_then(|_| v.check_structure()).and_then(|_| v.check_stored()) {
                Ok(purged) => purged,
                Err(e) => {
                    r.problems.push(format!("segment {}: {}", s.id, e.0));
                    continue;
                }
            };
            if s.deletes.count() > s.doc_count {
                r.problems.push(format!("segment {}: more deletes than documents", s.id));
            }
            // A purged document is deleted for good: its bit set, else it would read as live, recordless.
            if purged.len() != v.purged() as usize {
                r.problems.push(format!(
                    "segment {}: {} purged documents recorded, {} found",
                    s.id,
                    v.purged(),
                    purged.len()
                ));
            } else if let Some(d) = purged.into_iter().find(|&d| !s.deletes.is_deleted(d)) {
                r.problems.push(format!("segment {}: purged document {d} is not deleted", s.id));
            }
            if s.state != SegState::Merged {
                continue;
            }
            for i in 0..v.n_terms() {
                let (Ok(key), Ok(info)) = (v.key_at(i), v.term_at(i)) else {
                    r.problems.push(format!("segment {}: term {i} unreadable", s.id));
                    continue;
                };
                let mut found = 0;
                for node in snap.merged.chain(key) {
                    match node {
                        Ok(n) if n.seg_id == s.id => {
                            found += 1;
                            if n.df != info.df
                                || n.max_tf != info.max_tf
                                || n.blob.as_ptr() != info.blob.as_ptr()
                                || n.blob.len() != info.blob.len()
                            {
                                r.problems.push(format!("merged segment: the chain node of segment {} for term {i} disagrees with the image", s.id));
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            r.problems.push(e.0);
                            break;
                        }
                    }
                }
                if found != 1 {
                    r.problems.push(format!(
                        "merged segment: term {i} of segment {} has {found} chain nodes (want 1)",
                        s.id
                    ));
                }
                r.merged_terms_checked += 1;
                if r.problems.len() > 100 {
                    r.problems.push("more than 100 problems; stopping".into());
                    return r;
                }
            }
        }
        r
    }
}
