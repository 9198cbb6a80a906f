//! Search kernels with a wide-vector form chosen at run time (AVX-512 on x86-64 CPUs that have it), each
//! next to the portable code it must agree with exactly.
//!
//! Why here: the build targets baseline x86-64 (SSE2), so the compiler never emits wider vectors on its
//! own; the query paths that decide AND speed — finding conjunction candidates inside a decoded block,
//! filtering a block's postings by what they can score — are short fixed-size loops where 16-lane compares
//! and 64-lane byte table lookups replace a chain of dependent loads or a per-posting float test. Every
//! kernel has a portable twin that returns the same thing for every input (checked by the tests below on
//! random and adversarial blocks), so results never depend on the CPU.

use super::postings::BLOCK;

/// Whether this CPU runs the AVX-512 kernels (F, VL, BW, VBMI and POPCNT), detected once. The environment
/// variable `SPIRIT_SIMD=portable` turns them off (the tests run the engine both ways).
#[inline]
pub fn wide() -> bool {
    static WIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WIDE.get_or_init(|| {
        if std::env::var_os("SPIRIT_SIMD").is_some_and(|v| v == "portable") {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vbmi")
                && std::arch::is_x86_feature_detected!("popcnt")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Looks each of `cands` (increasing, each at most `docs[BLOCK - 1]`) up in a decoded block: `out[k]` is
/// the frequency of `cands[k]` if the block holds it, else 0. `docs` is strictly increasing, then
/// `u32::MAX` past a short block's end. Returns the index of the last candidate's lower bound (the first
/// doc at least as large), where the caller's cursor goes. `None` when this CPU has no wide kernel (the
/// caller's binary searches answer).
#[inline]
pub fn probe_block(
    docs: &[u32; BLOCK + 8],
    tfs: &[u32; BLOCK],
    cands: &[u32],
    out: &mut [u32],
) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if wide() && !cands.is_empty() {
        // SAFETY: the CPU has AVX-512 F and VL and POPCNT (checked just above), all the kernel needs.
        return Some(unsafe { x86::probe_block(docs, tfs, cands, out) });
    }
    let _ = (docs, tfs, cands, out);
    None
}

/// Which of `n` (at most [`BLOCK`]) postings pass: bit `i` of the result (word `i / 64`) is set iff
/// `min(tfs[i], 255) >= limit[norms[i]]` — a filter's test with its per-norm frequency thresholds already
/// computed.
#[inline]
pub fn at_least(tfs: &[u32], norms: &[u8; BLOCK], limit: &[u8; 256], n: usize) -> [u64; 2] {
    let n = n.min(BLOCK).min(tfs.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: the CPU has AVX-512 F, BW, VL and VBMI (checked just above); `n <= tfs.len()`.
        let got = unsafe { x86::at_least(&tfs[..n], x86::NormsIn::Bytes(norms), limit) };
        return got.expect("norms given as bytes are always read");
    }
    at_least_portable(tfs, norms, limit, n)
}

/// [`at_least`] with each posting's norm read from a norms column by its doc (`col[docs[i]]`, 0 past the
/// column's end): where the CPU has wide vectors the reads are gathers, 16 at a time.
#[inline]
pub fn at_least_in_column(docs: &[u32], tfs: &[u32], col: &[u8], limit: &[u8; 256], n: usize) -> [u64; 2] {
    let n = n.min(BLOCK).min(tfs.len()).min(docs.len());
    #[cfg(target_arch = "x86_64")]
    // The gathers read four bytes at `col[doc]` with a signed 32-bit offset: the kernel checks every doc
    // against the column's last four bytes before it reads (docs of a corrupt block need not increase) and
    // gives up on a block with one past them, which is then read one byte at a time below.
    if n > 0 && wide() && col.len() >= 4 && col.len() <= i32::MAX as usize {
        let last = (col.len() - 4) as u32;
        // SAFETY: the CPU has AVX-512 F, BW, VL and VBMI (checked just above); `n <= tfs.len(), docs.len()`;
        // `last + 4` is the column's length, below 2^31.
        let got = unsafe { x86::at_least(&tfs[..n], x86::NormsIn::Column(&docs[..n], col, last), limit) };
        if let Some(bits) = got {
            return bits;
        }
    }
    let mut norms = [0u8; BLOCK];
    for (b, &d) in norms.iter_mut().zip(&docs[..n]) {
        *b = col.get(d as usize).copied().unwrap_or(0);
    }
    at_least(tfs, &norms, limit, n)
}

/// The frequency thresholds of a BM25 filter, per norm code: `limit[n] = ⌈need · denom[n] / gap⌉` clamped to
/// `[0, 255]` (computed as `need · denom[n] · (1 / gap)`; a NaN gives 0), the least frequency whose
/// `idf · tf / (tf + denom[n])` reaches `need` where `gap = idf − need > 0`, saturated like [`at_least`]'s
/// frequencies. Callers keep a margin on `need` far above the few roundings here.
#[inline]
pub fn tf_limits(need: f32, gap: f32, denom: &[f32; 256]) -> [u8; 256] {
    let inv = 1.0 / gap;
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: the CPU has AVX-512 F (checked just above).
        return unsafe { x86::tf_limits(need, inv, denom) };
    }
    tf_limits_portable(need, inv, denom)
}

/// [`tf_limits`] without vectors (and without a call per ceiling: truncation, plus one below the value).
fn tf_limits_portable(need: f32, inv: f32, denom: &[f32; 256]) -> [u8; 256] {
    std::array::from_fn(|n| {
        // NaN stays NaN here and truncates to 0, as the wide form's max-then-min makes it 0.
        let x = (need * denom[n] * inv).clamp(0.0, 255.0);
        let t = x as u32;
        (t + ((t as f32) < x) as u32) as u8
    })
}

/// [`at_least`] without vectors.
pub fn at_least_portable(tfs: &[u32], norms: &[u8; BLOCK], limit: &[u8; 256], n: usize) -> [u64; 2] {
    let n = n.min(BLOCK).min(tfs.len());
    bits_where(n, |i| tfs[i].min(255) >= limit[norms[i] as usize] as u32)
}

/// The set of `i < n` (at most [`BLOCK`]) where `pass(i)`, as two words (bit `i % 64` of word `i / 64`)
/// built in registers: a branch-free test per element, no store whose address depends on an earlier one.
#[inline(always)]
pub fn bits_where(n: usize, pass: impl Fn(usize) -> bool) -> [u64; 2] {
    let n = n.min(BLOCK);
    let (mut low, mut high) = (0u64, 0u64);
    for i in 0..n.min(64) {
        low |= (pass(i) as u64) << i;
    }
    for i in 64..n {
        high |= (pass(i) as u64) << (i - 64);
    }
    [low, high]
}

/// The `n` (at most 64) lowest bits set.
#[inline]
pub fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::BLOCK;
    use std::arch::x86_64::*;

    const _: () = assert!(BLOCK == 128, "the kernels cut a block into eight rows of 16 docs");

    /// [`super::probe_block`]: per candidate, the rows (16 docs) wholly below it are counted against the
    /// rows' last docs (one 8-lane compare), then the docs below it in the row it falls in (one 16-lane
    /// compare): its lower bound in two compares that do not wait on one another's candidates, where a
    /// binary search takes seven dependent loads.
    #[target_feature(enable = "avx512f,avx512vl,popcnt")]
    pub(super) unsafe fn probe_block(
        docs: &[u32; BLOCK + 8],
        tfs: &[u32; BLOCK],
        cands: &[u32],
        out: &mut [u32],
    ) -> usize {
        let p = docs.as_ptr();
        let lasts = _mm256_setr_epi32(15, 31, 47, 63, 79, 95, 111, 127);
        // SAFETY: every index is below BLOCK, inside `docs`.
        let lasts = unsafe { _mm256_i32gather_epi32::<4>(p as *const i32, lasts) };
        let mut at = 0usize;
        for (&c, o) in cands.iter().zip(out.iter_mut()) {
            let row = _mm256_cmplt_epu32_mask(lasts, _mm256_set1_epi32(c as i32)).count_ones() as usize;
            // `c` is at most the block's last doc, and the slots past a short block's end are u32::MAX, so
            // the last row's last doc is at least `c`: row < 8.
            debug_assert!(row < 8);
            let row = row & 7;
            // SAFETY: row * 16 + 16 <= BLOCK: the 16 docs read are inside `docs`.
            let v = unsafe { _mm512_loadu_si512(p.add(row * 16) as *const _) };
            at = row * 16 + _mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(c as i32)).count_ones() as usize;
            let a = at & (BLOCK - 1);
            *o = std::hint::select_unpredictable(docs[a] == c, tfs[a], 0);
        }
        at
    }

    /// [`super::tf_limits_portable`], 16 norms at a time.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tf_limits(need: f32, inv: f32, denom: &[f32; 256]) -> [u8; 256] {
        let mut out = [0u8; 256];
        let (nv, iv, cap) = (_mm512_set1_ps(need), _mm512_set1_ps(inv), _mm512_set1_ps(255.0));
        let zero = _mm512_setzero_ps();
        for r in 0..16 {
            // SAFETY: 16 values from r * 16, inside the 256.
            let d = unsafe { _mm512_loadu_ps(denom.as_ptr().add(r * 16)) };
            // Clamped to [0, 255] as the portable form is (each picks its second operand on a NaN: 0).
            let x = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_mul_ps(nv, d), iv), zero), cap);
            let c = _mm512_roundscale_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(x);
            let b = _mm512_cvtepi32_epi8(_mm512_cvttps_epu32(c));
            // SAFETY: 16 bytes from r * 16, inside the 256.
            unsafe { _mm_storeu_si128(out.as_mut_ptr().add(r * 16) as *mut __m128i, b) };
        }
        out
    }

    /// Where [`at_least`]'s kernel finds the postings' norms.
    pub(super) enum NormsIn<'a> {
        /// Gathered already, one byte per posting.
        Bytes(&'a [u8; BLOCK]),
        /// In a norms column, at the postings' docs: a doc's four bytes from `col[doc]` are read only if
        /// the doc is at most the last value (the column's length less 4, below 2^31).
        Column(&'a [u32], &'a [u8], u32),
    }

    /// [`super::at_least`] (the postings are `tfs`, at most a block): frequencies saturated to bytes, each
    /// posting's threshold looked up by its norm in the 256-byte table (two two-register byte permutes,
    /// picked by the norm's top bit), one unsigned compare per 64 postings. Lanes past the postings are
    /// never read and their bits are clear. `None` when a doc lies past the column's last four bytes (its
    /// norm is then read byte by byte by the caller).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    pub(super) unsafe fn at_least(tfs: &[u32], norms: NormsIn<'_>, limit: &[u8; 256]) -> Option<[u64; 2]> {
        let n = tfs.len();
        debug_assert!(n <= BLOCK);
        let l = limit.as_ptr();
        // SAFETY: four 64-byte loads inside the 256-byte table.
        let (t0, t1, t2, t3) = unsafe {
            (
                _mm512_loadu_si512(l as *const _),
                _mm512_loadu_si512(l.add(64) as *const _),
                _mm512_loadu_si512(l.add(128) as *const _),
                _mm512_loadu_si512(l.add(192) as *const _),
            )
        };
        // The lanes of the 16 postings from `at` that exist.
        let lanes = |at: usize| -> __mmask16 { super::low_bits(n.saturating_sub(at).min(16)) as __mmask16 };
        // Whether the postings average a doc gap under 8 (16 of them within 128 docs: see below); a
        // sparser list goes straight to the gathers.
        let close = match norms {
            NormsIn::Column(docs, ..) => n > 0 && (docs[n - 1].wrapping_sub(docs[0]) as usize) < 8 * n,
            NormsIn::Bytes(_) => false,
        };
        let mut bits = [0u64; 2];
        for (h, b) in bits.iter_mut().enumerate() {
            if h * 64 >= n {
                break;
            }
            // 64 norms and 64 frequencies as (saturated) bytes, 16 at a time; absent lanes read as 0.
            let mut norm = [_mm_setzero_si128(); 4];
            let mut tf = [_mm_setzero_si128(); 4];
            for j in 0..4 {
                let at = h * 64 + j * 16;
                let m = lanes(at);
                if m == 0 {
                    break;
                }
                // SAFETY: masked loads read only the lanes below `n`, inside `tfs` (and `docs`).
                let t = unsafe { _mm512_maskz_loadu_epi32(m, tfs.as_ptr().add(at) as *const i32) };
                tf[j] = _mm512_cvtusepi32_epi8(t);
                norm[j] = match norms {
                    // SAFETY: 16 bytes from `at` < BLOCK, inside the block's norms.
                    NormsIn::Bytes(b) => unsafe { _mm_loadu_si128(b.as_ptr().add(at) as *const __m128i) },
                    NormsIn::Column(docs, col, last) => {
                        // SAFETY: masked: only the lanes below `n`, inside `docs`, are read.
                        let d = unsafe { _mm512_maskz_loadu_epi32(m, docs.as_ptr().add(at) as *const i32) };
                        // Postings of a common term lie close together: when the 16 docs are within 128 of
                        // the first, their norms are picked from the 128 column bytes from there by one
                        // two-register byte permute — two loads instead of a 16-element gather (the gathers
                        // were half of this kernel's time on the densest conjunctions).
                        let d0 = docs[at];
                        let rel = _mm512_sub_epi32(d, _mm512_set1_epi32(d0 as i32));
                        let near = || _mm512_mask_cmplt_epu32_mask(m, rel, _mm512_set1_epi32(128)) == m;
                        if close && near() && (d0 as usize).saturating_add(128) <= col.len() {
                            // SAFETY: the 128 bytes from `col[d0]` lie inside the column (checked just above).
                            let (a, b) = unsafe {
                                let p = col.as_ptr().add(d0 as usize);
                                (_mm512_loadu_si512(p as *const _), _mm512_loadu_si512(p.add(64) as *const _))
                            };
                            // Each lane's offset from `d0` (below 128) picks its byte; absent lanes read 0,
                            // as the gather's do.
                            let ix = _mm512_castsi128_si512(_mm512_cvtepi32_epi8(rel));
                            let got = _mm512_castsi512_si128(_mm512_permutex2var_epi8(a, ix, b));
                            norm[j] = _mm_maskz_mov_epi8(m, got);
                            continue;
                        }
                        if _mm512_mask_cmpgt_epu32_mask(m, d, _mm512_set1_epi32(last as i32)) != 0 {
                            // A doc whose four bytes would pass the column's end.
                            return None;
                        }
                        // SAFETY: masked: only the lanes below `n` are read, and each of their docs is at
                        // most `last` (checked just above), so its four bytes lie inside the column, at an
                        // offset below 2^31 (the gather's offsets are signed).
                        let w = unsafe {
                            _mm512_mask_i32gather_epi32::<1>(
                                _mm512_setzero_si512(),
                                m,
                                d,
                                col.as_ptr() as *const i32,
                            )
                        };
                        _mm512_cvtepi32_epi8(w)
                    }
                };
            }
            let join = |q: [__m128i; 4]| {
                _mm512_inserti32x4::<3>(
                    _mm512_inserti32x4::<2>(
                        _mm512_inserti32x4::<1>(_mm512_castsi128_si512(q[0]), q[1]),
                        q[2],
                    ),
                    q[3],
                )
            };
            let idx = join(norm);
            let lo = _mm512_permutex2var_epi8(t0, idx, t1);
            let hi = _mm512_permutex2var_epi8(t2, idx, t3);
            let need = _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
            *b = _mm512_cmpge_epu8_mask(join(tf), need) & super::low_bits(n - h * 64);
        }
        Some(bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::xorshift;

    /// A deterministic source of test inputs.
    struct Rng(u64);
    impl Rng {
        fn new(seed: u64) -> Rng {
            Rng(seed.max(1))
        }
        fn below(&mut self, n: u64) -> u64 {
            xorshift(&mut self.0) % n.max(1)
        }
    }

    fn portable_probe(docs: &[u32; BLOCK + 8], tfs: &[u32; BLOCK], cands: &[u32], out: &mut [u32]) -> usize {
        let mut at = 0;
        for (&c, o) in cands.iter().zip(out.iter_mut()) {
            at = docs.partition_point(|&d| d < c);
            *o = if docs[at] == c { tfs[at] } else { 0 };
        }
        at
    }

    #[test]
    fn probe_block_agrees_with_a_binary_search() {
        let mut rng = Rng::new(7);
        for round in 0..2000 {
            let len = match round % 5 {
                0 => BLOCK,
                1 => 1,
                _ => 1 + rng.below(BLOCK as u64) as usize,
            };
            let mut docs = [u32::MAX; BLOCK + 8];
            let mut d = rng.below(1000) as u32;
            for x in docs.iter_mut().take(len) {
                *x = d;
                d += 1 + rng.below(if round % 3 == 0 { 3 } else { 1 << 20 }) as u32;
            }
            let tfs: [u32; BLOCK] = std::array::from_fn(|i| 1 + i as u32);
            let last = docs[len - 1];
            // Candidates: block docs, gaps between them, the first and last doc, increasing.
            let mut cands: Vec<u32> = (0..rng.below(40) as usize + 1)
                .map(|_| match rng.below(3) {
                    0 => docs[rng.below(len as u64) as usize],
                    1 => rng.below(last as u64 + 1) as u32,
                    _ => last,
                })
                .collect();
            cands.push(docs[0]);
            cands.sort_unstable();
            let (mut a, mut b) = (vec![9; cands.len()], vec![9; cands.len()]);
            let want = portable_probe(&docs, &tfs, &cands, &mut a);
            if let Some(got) = probe_block(&docs, &tfs, &cands, &mut b) {
                assert_eq!((got, &b), (want, &a), "len {len} cands {cands:?}");
            }
        }
    }

    #[test]
    fn tf_limits_agree_with_the_portable_ones_and_bound_the_scores() {
        let mut rng = Rng::new(5);
        for round in 0..500 {
            let avgdl = 1.0 + rng.below(2000) as f32 / 7.0;
            let denom: [f32; 256] =
                std::array::from_fn(|n| 0.3 + 0.9 * crate::codec::decode_norm(n as u8) as f32 / avgdl);
            let idf = 0.01 + rng.below(1000) as f32 / 97.0;
            let need = idf * (round % 100) as f32 / 100.0 + 1e-6;
            let gap = idf - need;
            if gap <= 0.0 {
                continue;
            }
            let limit = tf_limits(need, gap, &denom);
            assert_eq!(limit, tf_limits_portable(need, 1.0 / gap, &denom), "need {need} gap {gap}");
            // Length terms no sane k1 and b give (negative, NaN, infinite) still agree.
            let odd: [f32; 256] = std::array::from_fn(|n| match n % 4 {
                0 => -(n as f32) * 0.37,
                1 => f32::NAN,
                2 => f32::INFINITY,
                _ => denom[n],
            });
            assert_eq!(tf_limits(need, gap, &odd), tf_limits_portable(need, 1.0 / gap, &odd), "odd terms");
            for (n, &l) in limit.iter().enumerate() {
                // The threshold is the least frequency that reaches `need`, give or take the roundings.
                let score = |tf: u32| idf * tf as f32 / (tf as f32 + denom[n]);
                assert!(l >= 1, "n {n}: a frequency of 0 scores nothing");
                if l < 255 {
                    assert!(score(l as u32) >= need * 0.9999, "n {n} limit {l}");
                }
                assert!(score(l as u32 - 1) < need * 1.0001, "n {n} limit {l}");
            }
        }
    }

    #[test]
    fn at_least_agrees_with_the_portable_test() {
        let mut rng = Rng::new(11);
        for round in 0..2000 {
            let n = if round % 4 == 0 { BLOCK } else { rng.below(BLOCK as u64 + 1) as usize };
            let tfs: Vec<u32> = (0..n)
                .map(|_| match rng.below(4) {
                    0 => rng.below(4) as u32 + 1,
                    1 => 250 + rng.below(10) as u32,
                    2 => u32::MAX - rng.below(2) as u32,
                    _ => rng.below(300) as u32,
                })
                .collect();
            let norms: [u8; BLOCK] = std::array::from_fn(|_| rng.below(256) as u8);
            let limit: [u8; 256] = std::array::from_fn(|i| match round % 3 {
                0 => (i / 4) as u8,
                1 => 255 - (rng.below(3) as u8),
                _ => rng.below(256) as u8,
            });
            let want = at_least_portable(&tfs, &norms, &limit, n);
            assert_eq!(at_least(&tfs, &norms, &limit, n), want, "n {n}");
            // The same norms in a column, at increasing docs — close together (norms picked from the
            // column's bytes by permutes), far apart (gathered), or mostly close with jumps (both in one
            // block); some runs end at the column's last bytes (read one by one, not in fours).
            let mut docs = Vec::with_capacity(n);
            let mut col = Vec::new();
            for (i, &b) in norms.iter().take(n).enumerate() {
                let gap = match (round / 5) % 4 {
                    0 => (i % 3) * rng.below(5) as usize,
                    1 => rng.below(40) as usize,
                    2 if rng.below(16) == 0 => 100 + rng.below(60) as usize,
                    2 => 0,
                    _ => rng.below(10) as usize,
                };
                let d = col.len() + gap;
                col.resize(d, 7);
                col.push(b);
                docs.push(d as u32);
            }
            col.resize(col.len() + (round % 5) as usize, 9);
            assert_eq!(at_least_in_column(&docs, &tfs, &col, &limit, n), want, "n {n} column");
            // Docs as a corrupt block may decode them — not increasing, some past the column, some at 2^31
            // and beyond — read as the portable test reads them (norm 0 past the column), never out of it.
            if n > 1 {
                let mut bad = docs.clone();
                bad.swap(0, n - 1);
                bad[n / 2] = match round % 3 {
                    0 => col.len() as u32 + rng.below(4) as u32,
                    1 => (1 << 31) + rng.below(8) as u32,
                    _ => u32::MAX - rng.below(4) as u32,
                };
                let norms_bad: [u8; BLOCK] = std::array::from_fn(|i| {
                    bad.get(i).and_then(|&d| col.get(d as usize)).copied().unwrap_or(0)
                });
                let want_bad = at_least_portable(&tfs, &norms_bad, &limit, n);
                assert_eq!(at_least_in_column(&bad, &tfs, &col, &limit, n), want_bad, "n {n} corrupt docs");
            }
            assert_eq!(want[0] & !low_bits(n), 0);
            assert_eq!(want[1] & !low_bits(n.saturating_sub(64)), 0);
        }
    }
}
