//! The tokenizer: maximal runs of alphanumeric characters, lowercased.
//!
//! Semantics (identical to Tantivy's `SimpleTokenizer` followed by `LowerCaser`):
//!
//! * a token is a maximal run of chars for which [`char::is_alphanumeric`] holds; every other char
//!   separates tokens and is discarded;
//! * each char of the token is lowercased with [`char::to_lowercase`], keeping *all* chars of the
//!   expansion (`'İ'` becomes `"i\u{307}"`).
//!
//! Lowercasing is char-wise on purpose: `str::to_lowercase` maps a word-final capital sigma to `'ς'`,
//! char-wise lowercasing always yields `'σ'`. Being context-free keeps the fast path simple and makes a
//! term's form independent of its neighbours (a query for `ΣΑΣ` and a document containing `ΣΑΣ` meet at
//! `σασ` whatever the surrounding text).
//!
//! In short, the output equals
//! `text.split(|c: char| !c.is_alphanumeric()).filter(|s| !s.is_empty())` with each piece mapped through
//! `s.chars().flat_map(char::to_lowercase).collect::<String>()`.
//!
//! # How it is fast
//!
//! Most text is ASCII. Where the next 64 bytes are all ASCII, the tokenizer classifies the whole chunk at
//! once into bit masks (alphanumeric, uppercase) with compares the compiler vectorizes, and reads the tokens
//! off the masks with `trailing_zeros` — no branch per byte (the SCANNS tokenizer of seed 001 works the
//! same way). Elsewhere, bytes are classified with a 256-entry table ([`LOWER`]) that maps an ASCII
//! alphanumeric byte to its lowercase form and marks separators and non-ASCII bytes. A token that is
//! already lowercase ASCII is handed to the sink as a slice of the input (no copy at all); one containing
//! an uppercase ASCII letter is built in a caller-supplied, reused buffer (no allocation per token). On
//! the first non-ASCII byte the rest of *that token* is processed char by char with the full Unicode
//! rules, and the scan returns to the byte-wise fast path after the token ends.

/// Table marker: the byte is an ASCII separator (never a valid UTF-8 byte, so it cannot be confused with
/// a byte that maps to itself).
const SEP: u8 = 0xFF;
/// Table marker: the byte is not ASCII (never a valid UTF-8 byte either).
const NON_ASCII: u8 = 0xFE;

/// Byte classes for the ASCII fast path: an ASCII alphanumeric byte maps to its lowercase form, any other
/// ASCII byte to [`SEP`], any byte `>= 0x80` to [`NON_ASCII`].
///
/// So `LOWER[b] == b` exactly when `b` is a lowercase ASCII letter or a digit (a token byte that needs no
/// change), because the markers are bytes that never occur in UTF-8.
static LOWER: [u8; 256] = build_table();

const fn build_table() -> [u8; 256] {
    let mut t = [SEP; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        t[b] = if c >= 0x80 {
            NON_ASCII
        } else if c.is_ascii_digit() || c.is_ascii_lowercase() {
            c
        } else if c.is_ascii_uppercase() {
            c + (b'a' - b'A')
        } else {
            SEP
        };
        b += 1;
    }
    t
}

/// Calls `f(token)` for each token of `text` (see the module docs for the exact semantics).
///
/// Convenience wrapper that owns a scratch buffer for the call; hot loops should prefer
/// [`tokenize_with_buffer`] and keep the buffer across calls.
pub fn tokenize(text: &str, f: &mut dyn FnMut(&str)) {
    let mut buf = String::new();
    for_each_token(text, &mut buf, f);
}

/// Like [`tokenize`], with a caller-owned scratch buffer that is reused for tokens needing lowercasing
/// (its contents on return are unspecified).
pub fn tokenize_with_buffer(text: &str, buf: &mut String, f: &mut dyn FnMut(&str)) {
    for_each_token(text, buf, f);
}

/// Bytes per chunk of the branch-free path: one bit per byte in a `u64`.
const CHUNK: usize = 64;

/// `b` repeated in every byte of a word.
const fn rep(b: u8) -> u64 {
    (b as u64) * 0x0101_0101_0101_0101
}
const HIGH: u64 = rep(0x80);

/// SWAR: the high bit of each byte of `x` (all bytes ASCII) set where the byte is in `lo..=hi`.
#[inline(always)]
fn in_range(x: u64, lo: u8, hi: u8) -> u64 {
    // With every byte below 0x80, adding 0x80 - lo sets a byte's high bit exactly when it is >= lo, and
    // adding 0x7f - hi exactly when it is > hi; no carry crosses into the next byte.
    x.wrapping_add(rep(0x80 - lo)) & !x.wrapping_add(rep(0x7f - hi)) & HIGH
}

/// The high bits of the 8 bytes of `x` (only high bits set) gathered into 8 bits, byte `k` → bit `k`.
#[inline(always)]
fn gather(x: u64) -> u64 {
    x.wrapping_mul(0x0002_0408_1020_4081) >> 56
}

/// The masks of one chunk: bit `j` of `token` is set when byte `j` is an ASCII alphanumeric, of `upper`
/// when it is an ASCII uppercase letter, of `high` when it is not ASCII. Eight bytes at a time in a word
/// (SWAR: adds, ands and one multiply per mask), no branch per byte.
#[inline]
fn chunk_masks(chunk: &[u8; CHUNK]) -> (u64, u64, u64) {
    let (mut token, mut upper, mut high) = (0u64, 0u64, 0u64);
    for (k, w) in chunk.chunks_exact(8).enumerate() {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        high |= gather(x & HIGH) << (8 * k);
        let x = x & !HIGH; // keep the arithmetic in range (non-ASCII bytes are masked out below)
        let letter = in_range(x | rep(0x20), b'a', b'z');
        let digit = in_range(x, b'0', b'9');
        let up = in_range(x, b'A', b'Z');
        token |= gather(letter | digit) << (8 * k);
        upper |= gather(up) << (8 * k);
    }
    (token & !high, upper & !high, high)
}

/// The tokenizer proper, generic over the sink so that internal callers get it inlined.
///
/// Two paths: where the next 64 bytes are all ASCII, the token boundaries of the whole chunk come from two
/// bit masks (runs of set bits in the alphanumeric mask are tokens; the uppercase mask says which need
/// lowercasing) — no branch per byte. A run that reaches the chunk's end may continue, so the chunk is cut
/// before it and it starts the next one. Elsewhere (non-ASCII text, the tail, a token longer than a chunk)
/// the byte-at-a-time path takes one token at a time. Both leave `i` at a token boundary.
#[inline]
pub(super) fn for_each_token<F: FnMut(&str) + ?Sized>(text: &str, buf: &mut String, f: &mut F) {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut i = 0;
    // Below this offset the text is known to hold a non-ASCII byte within a chunk: byte at a time.
    let mut scalar_until = 0;
    while i < n {
        if i < scalar_until {
            i = one_token(text, i, buf, f);
            continue;
        }
        if let Some(chunk) = bytes.get(i..i + CHUNK) {
            let (token, upper, high) = chunk_masks(chunk.try_into().expect("CHUNK bytes"));
            // Tokens read off the masks end before `cut`: before a run that touches the chunk's last byte
            // (it may go on in the next chunk), and before the first non-ASCII byte and the ASCII run that
            // leads up to it (they belong to the Unicode path).
            let stop = if high != 0 { high.trailing_zeros() as usize } else { CHUNK };
            let below = if stop == CHUNK { token } else { token & ((1u64 << stop) - 1) };
            let cut = if stop == 0 || (below >> (stop - 1)) & 1 == 0 {
                stop
            } else {
                // The run of set bits ending at `stop - 1` starts after the highest clear bit below it.
                let clear = !below & ((1u64 << (stop - 1)) - 1);
                if clear == 0 {
                    0
                } else {
                    64 - clear.leading_zeros() as usize
                }
            };
            let mut runs = if cut == CHUNK { token } else { token & ((1u64 << cut) - 1) };
            while runs != 0 {
                let s = runs.trailing_zeros() as usize;
                let len = (!(runs >> s)).trailing_zeros() as usize;
                let span = ((1u64 << len) - 1) << s; // len < 64: the run ends inside the chunk
                runs &= !span;
                let (a, b) = (i + s, i + s + len);
                if upper & span == 0 {
                    f(&text[a..b]);
                } else {
                    buf.clear();
                    buf.extend(bytes[a..b].iter().map(|&c| LOWER[c as usize] as char));
                    f(buf.as_str());
                }
            }
            if high != 0 {
                scalar_until = i + CHUNK;
            }
            if cut > 0 {
                i += cut;
                continue;
            }
        }
        i = one_token(text, i, buf, f);
    }
}

/// The byte-at-a-time path from token boundary `i`: skips one separator, or hands out one token (with the
/// Unicode fallback for its non-ASCII part); returns the next token boundary.
#[inline]
fn one_token<F: FnMut(&str) + ?Sized>(text: &str, mut i: usize, buf: &mut String, f: &mut F) -> usize {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let class = LOWER[bytes[i] as usize];
    if class == SEP {
        return i + 1;
    }
    if class == NON_ASCII {
        // A non-ASCII char at a token boundary: it may start a token or be a separator.
        buf.clear();
        i = unicode_run(text, i, buf);
        if !buf.is_empty() {
            f(buf.as_str());
        }
        return i;
    }

    // An ASCII token starts at `start`. Phase 1: bytes that need no change (lowercase, digits).
    let start = i;
    while i < n && LOWER[bytes[i] as usize] == bytes[i] {
        i += 1;
    }
    if i == n || LOWER[bytes[i] as usize] == SEP {
        // Whole token was already lowercase ASCII: hand out a slice of the input, zero copy.
        f(&text[start..i]);
        return i;
    }

    // Phase 2: the token needs lowercasing (uppercase ASCII) or goes non-ASCII: build it in `buf`.
    buf.clear();
    buf.push_str(&text[start..i]);
    loop {
        if i == n {
            break;
        }
        let l = LOWER[bytes[i] as usize];
        if l == SEP {
            i += 1;
            break;
        }
        if l == NON_ASCII {
            // Unicode fallback for the rest of this token.
            i = unicode_run(text, i, buf);
            break;
        }
        buf.push(l as char);
        i += 1;
    }
    f(buf.as_str());
    i
}

/// The Unicode path: starting at char boundary `i`, appends the lowercased alphanumeric chars of the
/// current token to `buf` until the first non-alphanumeric char, which is consumed too. Returns the
/// byte offset after it (or `text.len()`). Always consumes at least one char.
fn unicode_run(text: &str, i: usize, buf: &mut String) -> usize {
    for (off, c) in text[i..].char_indices() {
        if c.is_alphanumeric() {
            if c.is_ascii() {
                buf.push(c.to_ascii_lowercase());
            } else {
                buf.extend(c.to_lowercase());
            }
        } else {
            return i + off + c.len_utf8();
        }
    }
    text.len()
}
