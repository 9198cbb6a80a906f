//! Field-length norms in one byte (Lucene's `SmallFloat.intToByte4`).
//!
//! BM25 needs each document's field length at every scored posting, a random access into a per-document
//! column. At 4 bytes a document the column of a 250k-document segment is 1 MB, past the L2 cache, and the
//! access was the largest single cost of a term query (measured: 25% of LowTerm/MedTerm time). One byte a
//! document makes it 4x denser, and 256 possible values let a query precompute the BM25 length term once per
//! value ([`NORM_VALUES`]) instead of a multiply-add per document.
//!
//! Lengths 0–23 are exact; above, a 4-bit floating point keeps 4 significant bits (at most 12.5% below the
//! true length; decoding rounds down). Scoring everywhere uses the decoded length, as Lucene does, so fresh
//! and engraved segments score alike; collection statistics (average length) stay exact. Length 0 (field
//! absent) encodes as 0 and every positive length as at least 1, so "has the field" survives quantization.

/// The number of distinct encoded norms.
pub const NORM_VALUES: usize = 256;

/// Lengths below this encode as themselves.
const FREE: u32 = 24;

fn from_int4(i: u32) -> u32 {
    let bits = i & 0x07;
    let shift = (i >> 3) as i32 - 1;
    if shift < 0 {
        bits
    } else {
        (bits | 0x08) << shift
    }
}

/// The one-byte norm of a field of `len` tokens — `FREE + to_int4(len - FREE)` from `FREE` on. Lengths
/// below [`SMALL_LENGTHS`] (nearly all fields) read a table; longer ones compute it ([`encode_norm_computed`]).
/// Block bounds from unpacked impacts encode each impact's length for every block a query reaches, where the
/// computation was a third of a conjunction's bound work.
#[inline]
pub fn encode_norm(len: u32) -> u8 {
    match SMALL_NORMS.get(len as usize) {
        Some(&b) => b,
        None => encode_norm_computed(len),
    }
}

/// Lengths below this have their norm in a table (4 KiB).
const SMALL_LENGTHS: usize = 4096;

/// `encode_norm` of every length below [`SMALL_LENGTHS`], computed at compile time.
static SMALL_NORMS: [u8; SMALL_LENGTHS] = {
    let mut t = [0u8; SMALL_LENGTHS];
    let mut len = 0;
    while len < SMALL_LENGTHS {
        t[len] = encode_norm_computed(len as u32);
        len += 1;
    }
    t
};

/// [`encode_norm`] computed, without branches (a test holds it to the plain form).
#[inline]
const fn encode_norm_computed(len: u32) -> u8 {
    let i = len.saturating_sub(FREE);
    let bits = 32 - i.leading_zeros();
    let shift = bits.saturating_sub(4);
    // For i < 8 (bits < 4) `to_int4` is `i` itself: the same formula with the exponent part dropped.
    let exp = if bits < 4 { 0 } else { (shift + 1) << 3 };
    let int4 = ((i >> shift) & if bits < 4 { 0xF } else { 0x07 }) | exp;
    // Lucene's domain ends at i32::MAX (code 255); longer fields saturate there.
    let code = if FREE + int4 < 255 { FREE + int4 } else { 255 };
    (if len < FREE { len } else { code }) as u8
}

/// The field length a norm stands for (the largest that the encoding does not round down).
#[inline]
pub fn decode_norm(b: u8) -> u32 {
    let b = b as u32;
    if b < FREE {
        b
    } else {
        FREE + from_int4(b - FREE)
    }
}

/// The length scoring uses for a field of `len` tokens: `decode_norm(encode_norm(len))`.
#[inline]
pub fn quantized_length(len: u32) -> u32 {
    decode_norm(encode_norm(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_lengths_are_exact_and_presence_survives() {
        for len in 0..FREE {
            assert_eq!(quantized_length(len), len);
        }
        assert_eq!(encode_norm(0), 0);
        assert!(encode_norm(1) >= 1);
    }

    #[test]
    fn encoding_is_monotone_rounds_down_and_round_trips() {
        let mut prev = 0u8;
        for len in (0..100_000u32).chain([1 << 20, 1 << 30, i32::MAX as u32, 1 << 31, u32::MAX - 1, u32::MAX])
        {
            let b = encode_norm(len);
            assert!(b >= prev, "encode_norm not monotone at {len}");
            prev = b;
            let q = decode_norm(b);
            assert!(q <= len, "{len} decodes to {q}");
            // At most 12.5% below (4 significant bits) above the exact range, up to Lucene's i32::MAX.
            assert!(len < FREE || len > i32::MAX as u32 || (len - q) as u64 * 8 <= len as u64, "{len} → {q}");
            assert_eq!(encode_norm(q), b, "decoded value {q} of {len} does not re-encode to {b}");
        }
        // Every byte decodes to a length that encodes back to it (no unused or ambiguous codes).
        for b in 0..=255u8 {
            assert_eq!(encode_norm(decode_norm(b)), b);
        }
        assert_eq!(encode_norm(u32::MAX), 255);
    }

    /// `longToInt4`: 3 mantissa bits after the implicit leading one, shift + 1 above them.
    fn to_int4(i: u32) -> u32 {
        let bits = 32 - i.leading_zeros();
        if bits < 4 {
            i
        } else {
            let shift = bits - 4;
            ((i >> shift) & 0x07) | ((shift + 1) << 3)
        }
    }

    /// The plain form of [`encode_norm`].
    fn encode_norm_plain(len: u32) -> u8 {
        if len < FREE {
            len as u8
        } else {
            (FREE + to_int4(len - FREE)).min(255) as u8
        }
    }

    #[test]
    fn branch_free_encoding_equals_the_plain_one() {
        let edges = (0..32).flat_map(|k| {
            let p = 1u64 << k;
            [p - 1, p, p + 1, p + FREE as u64 - 1, p + FREE as u64, p + FREE as u64 + 1]
                .map(|x| x.min(u32::MAX as u64) as u32)
        });
        for len in (0..1 << 20).chain(edges).chain([u32::MAX - 1, u32::MAX]) {
            assert_eq!(encode_norm(len), encode_norm_plain(len), "at {len}");
            assert_eq!(encode_norm_computed(len), encode_norm_plain(len), "computed, at {len}");
        }
    }

    #[test]
    fn matches_lucene_small_float() {
        // Lucene 10.4 `SmallFloat.intToByte4` / `byte4ToInt` (run against lucene-core-10.4.0.jar).
        assert_eq!(encode_norm(24), 24);
        assert_eq!(encode_norm(100), 57);
        assert_eq!(decode_norm(57), 96);
        assert_eq!(decode_norm(255), 2_013_265_944);
        assert_eq!(encode_norm(150), 63);
        assert_eq!(quantized_length(150), 144);
    }
}
