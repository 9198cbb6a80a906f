//! The codec family of seed 004's study, behind one small trait: how a block of delta-coded doc ids (gaps,
//! `doc - previous - 1`) becomes bytes. The segment format uses SIMD bit-packing (see [`super::postings`]);
//! this module holds the alternatives it was chosen against, so `spirit-bench codecs` can measure them all
//! on our data (bytes per posting, decoding speed, and the query workloads evaluated on decoded lists):
//!
//! - [`Raw`]: 4 bytes per gap, the baseline;
//! - [`VByte`]: 7 bits per byte with a continuation bit (Lucene's classic format);
//! - [`StreamVByte`]: Lemire's layout — a 2-bit length per value in control bytes, the value bytes apart, so
//!   decoding has no data-dependent branch per byte;
//! - [`BitPacked`]: SIMD bit-packing of 128 gaps at the block's widest bit width (`bitpacking`'s
//!   `BitPacker4x`, SIMD-BP128), a VByte tail;
//! - [`PFor`]: patched frame of reference (blocks of 128 or 256): the bit width covers 90% of the gaps, the
//!   others' high bits are *exceptions* stored after the packed block, with their positions.
//!
//! Every decoder bounds-checks its input and returns [`CodecError`] on malformed bytes.

use super::{read_vbyte, write_vbyte, CodecError};
use bitpacking::{BitPacker, BitPacker4x};

const BP: usize = BitPacker4x::BLOCK_LEN;

/// A codec of one block of gaps. `decode` fills `out[..n]` and returns the bytes it read.
pub trait GapCodec: Sync {
    fn name(&self) -> &'static str;
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>);
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError>;
    /// The block length this codec is meant for (the study cuts lists into blocks of it).
    fn block_len(&self) -> usize {
        BP
    }
}

/// Every codec of the study, the segment format's first.
pub fn all_codecs() -> Vec<Box<dyn GapCodec>> {
    vec![
        Box::new(BitPacked),
        Box::new(Raw),
        Box::new(VByte),
        Box::new(StreamVByte),
        Box::new(PFor { block: 128 }),
        Box::new(PFor { block: 256 }),
    ]
}

fn truncated(what: &'static str, offset: usize) -> CodecError {
    CodecError { what, offset }
}

pub struct Raw;

impl GapCodec for Raw {
    fn name(&self) -> &'static str {
        "raw u32"
    }
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>) {
        for &g in gaps {
            out.extend_from_slice(&g.to_le_bytes());
        }
    }
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
        let bytes = src.get(..n * 4).ok_or(truncated("raw block", src.len()))?;
        for (o, b) in out[..n].iter_mut().zip(bytes.chunks_exact(4)) {
            *o = u32::from_le_bytes(b.try_into().expect("4 bytes"));
        }
        Ok(n * 4)
    }
}

pub struct VByte;

impl GapCodec for VByte {
    fn name(&self) -> &'static str {
        "VByte"
    }
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>) {
        for &g in gaps {
            write_vbyte(out, g);
        }
    }
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
        let mut at = 0;
        for o in &mut out[..n] {
            *o = read_vbyte(src, &mut at)?;
        }
        Ok(at)
    }
}

pub struct StreamVByte;

/// Bytes of a value in Stream VByte: 1 to 4.
fn svb_len(v: u32) -> usize {
    1 + (v >= 1 << 8) as usize + (v >= 1 << 16) as usize + (v >= 1 << 24) as usize
}

impl GapCodec for StreamVByte {
    fn name(&self) -> &'static str {
        "Stream VByte"
    }
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>) {
        let controls = gaps.len().div_ceil(4);
        let start = out.len();
        out.resize(start + controls, 0);
        for (i, &g) in gaps.iter().enumerate() {
            let len = svb_len(g);
            out[start + i / 4] |= ((len - 1) as u8) << (2 * (i % 4));
            out.extend_from_slice(&g.to_le_bytes()[..len]);
        }
    }
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
        let controls = n.div_ceil(4);
        let ctl = src.get(..controls).ok_or(truncated("stream vbyte controls", src.len()))?;
        let mut at = controls;
        for (i, o) in out[..n].iter_mut().enumerate() {
            let len = 1 + ((ctl[i / 4] >> (2 * (i % 4))) & 3) as usize;
            let b = src.get(at..at + len).ok_or(truncated("stream vbyte data", at))?;
            let mut w = [0u8; 4];
            w[..len].copy_from_slice(b);
            *o = u32::from_le_bytes(w);
            at += len;
        }
        Ok(at)
    }
}

pub struct BitPacked;

/// Packs full blocks of [`BP`] with `BitPacker4x` (one bit-width byte each), the rest VByte.
fn bitpack_encode(gaps: &[u32], out: &mut Vec<u8>) {
    let bp = BitPacker4x::new();
    let mut chunks = gaps.chunks_exact(BP);
    for c in &mut chunks {
        let bits = bp.num_bits(c);
        out.push(bits);
        let at = out.len();
        out.resize(at + bits as usize * BP / 8, 0);
        bp.compress(c, &mut out[at..], bits);
    }
    for &g in chunks.remainder() {
        write_vbyte(out, g);
    }
}

fn bitpack_decode(src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
    let bp = BitPacker4x::new();
    let mut at = 0;
    let full = n / BP;
    for k in 0..full {
        let bits = *src.get(at).ok_or(truncated("bit width", at))?;
        if bits > 32 {
            return Err(truncated("bit width", at));
        }
        let need = bits as usize * BP / 8;
        let packed = src.get(at + 1..at + 1 + need).ok_or(truncated("packed block", at))?;
        bp.decompress(packed, &mut out[k * BP..(k + 1) * BP], bits);
        at += 1 + need;
    }
    for o in &mut out[full * BP..n] {
        *o = read_vbyte(src, &mut at)?;
    }
    Ok(at)
}

impl GapCodec for BitPacked {
    fn name(&self) -> &'static str {
        "SIMD bit-packing (segment format)"
    }
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>) {
        bitpack_encode(gaps, out)
    }
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
        bitpack_decode(src, n, out)
    }
}

/// Patched frame of reference over blocks of `block` (a multiple of 128) gaps.
pub struct PFor {
    pub block: usize,
}

/// The fraction of a block's gaps the PFor bit width must cover (the rest are exceptions).
const PFOR_COVER: f64 = 0.9;

impl PFor {
    fn encode_block(&self, gaps: &[u32], out: &mut Vec<u8>) {
        // The smallest width covering PFOR_COVER of the gaps.
        let mut widths: Vec<u8> = gaps.iter().map(|&g| 32 - g.leading_zeros() as u8).collect();
        widths.sort_unstable();
        let idx = ((gaps.len() as f64 * PFOR_COVER).ceil() as usize).clamp(1, gaps.len()) - 1;
        let bits = widths[idx];
        let mask = if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 };
        let exceptions: Vec<(usize, u32)> =
            gaps.iter().enumerate().filter(|(_, &g)| g > mask).map(|(i, &g)| (i, g >> bits)).collect();
        out.push(bits);
        write_vbyte(out, exceptions.len() as u32);
        let low: Vec<u32> = gaps.iter().map(|&g| g & mask).collect();
        let bp = BitPacker4x::new();
        for c in low.chunks_exact(BP) {
            let at = out.len();
            out.resize(at + bits as usize * BP / 8, 0);
            bp.compress(c, &mut out[at..], bits);
        }
        let mut prev = 0;
        for (i, high) in exceptions {
            write_vbyte(out, (i - prev) as u32);
            write_vbyte(out, high);
            prev = i;
        }
    }

    fn decode_block(&self, src: &[u8], out: &mut [u32]) -> Result<usize, CodecError> {
        let bits = *src.first().ok_or(truncated("pfor width", 0))?;
        if bits > 32 {
            return Err(truncated("pfor width", 0));
        }
        let mut at = 1;
        let n_exc = read_vbyte(src, &mut at)? as usize;
        let bp = BitPacker4x::new();
        let need = bits as usize * BP / 8;
        for c in out.chunks_exact_mut(BP) {
            let packed = src.get(at..at + need).ok_or(truncated("pfor block", at))?;
            bp.decompress(packed, c, bits);
            at += need;
        }
        let mut i = 0;
        for _ in 0..n_exc {
            i += read_vbyte(src, &mut at)? as usize;
            let high = read_vbyte(src, &mut at)?;
            let o = out.get_mut(i).ok_or(truncated("pfor exception", at))?;
            *o |= high.checked_shl(bits as u32).unwrap_or(0);
        }
        Ok(at)
    }
}

impl GapCodec for PFor {
    fn name(&self) -> &'static str {
        if self.block == 256 {
            "PFor (256)"
        } else {
            "PFor (128)"
        }
    }
    fn block_len(&self) -> usize {
        self.block
    }
    fn encode(&self, gaps: &[u32], out: &mut Vec<u8>) {
        assert!(self.block.is_multiple_of(BP), "PFor blocks are whole bit-packer blocks");
        let mut chunks = gaps.chunks_exact(self.block);
        for c in &mut chunks {
            self.encode_block(c, out);
        }
        // A partial block is VByte, as in the segment format.
        for &g in chunks.remainder() {
            write_vbyte(out, g);
        }
    }
    fn decode(&self, src: &[u8], n: usize, out: &mut [u32]) -> Result<usize, CodecError> {
        let mut at = 0;
        let full = n / self.block;
        for k in 0..full {
            at += self
                .decode_block(&src[at..], &mut out[k * self.block..(k + 1) * self.block])
                .map_err(|e| CodecError { what: e.what, offset: e.offset + at })?;
        }
        for o in &mut out[full * self.block..n] {
            *o = read_vbyte(src, &mut at)?;
        }
        Ok(at)
    }
}

/// Decodes `n` gaps written by [`GapCodec::encode`] into `out` (resized to `n`).
pub fn decode_list(
    codec: &dyn GapCodec,
    src: &[u8],
    n: usize,
    out: &mut Vec<u32>,
) -> Result<usize, CodecError> {
    out.clear();
    out.resize(n, 0);
    codec.decode(src, n, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(gaps: &[u32]) {
        for c in all_codecs() {
            let mut buf = vec![];
            c.encode(gaps, &mut buf);
            let mut out = vec![];
            let used = decode_list(c.as_ref(), &buf, gaps.len(), &mut out).unwrap();
            assert_eq!(used, buf.len(), "{}: bytes read", c.name());
            assert_eq!(out, gaps, "{}", c.name());
            // Truncated input is an error, never a panic.
            if !buf.is_empty() {
                let mut out = vec![];
                assert!(
                    decode_list(c.as_ref(), &buf[..buf.len() - 1], gaps.len(), &mut out).is_err(),
                    "{}",
                    c.name()
                );
            }
        }
    }

    #[test]
    fn adversarial_lengths_and_gaps() {
        for len in [0usize, 1, 2, 127, 128, 129, 255, 256, 257, 511, 512, 513] {
            round_trip(&vec![0; len]);
            round_trip(&(0..len as u32).collect::<Vec<_>>());
            // Maximal gaps, and a single huge gap among small ones (a PFor exception).
            round_trip(&vec![u32::MAX; len]);
            let mut v: Vec<u32> = (0..len as u32).map(|i| i % 7).collect();
            if len > 0 {
                v[len / 2] = u32::MAX - 1;
            }
            round_trip(&v);
        }
    }

    proptest! {
        #[test]
        fn random_lists_round_trip(gaps in proptest::collection::vec(any::<u32>().prop_map(|x| x >> (x % 32)), 0..700)) {
            round_trip(&gaps);
        }

        #[test]
        fn corrupt_bytes_never_panic(gaps in proptest::collection::vec(0u32..5000, 0..600), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            for c in all_codecs() {
                let mut buf = vec![];
                c.encode(&gaps, &mut buf);
                if buf.is_empty() { continue; }
                for &(i, x) in &flips { let n = buf.len(); buf[i % n] ^= x | 1; }
                let mut out = vec![];
                let _ = decode_list(c.as_ref(), &buf, gaps.len(), &mut out);
            }
        }
    }
}
