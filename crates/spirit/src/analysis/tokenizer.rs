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
//! Most text is ASCII, so bytes are classified with a 256-entry table ([`LOWER`]) that maps an ASCII
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

/// The tokenizer proper, generic over the sink so that internal callers get it inlined.
#[inline]
pub(super) fn for_each_token<F: FnMut(&str) + ?Sized>(text: &str, buf: &mut String, f: &mut F) {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut i = 0;
    while i < n {
        let class = LOWER[bytes[i] as usize];
        if class == SEP {
            i += 1;
            continue;
        }
        if class == NON_ASCII {
            // A non-ASCII char at a token boundary: it may start a token or be a separator.
            buf.clear();
            i = unicode_run(text, i, buf);
            if !buf.is_empty() {
                f(buf.as_str());
            }
            continue;
        }

        // An ASCII token starts at `start`. Phase 1: bytes that need no change (lowercase, digits).
        let start = i;
        while i < n && LOWER[bytes[i] as usize] == bytes[i] {
            i += 1;
        }
        if i == n || LOWER[bytes[i] as usize] == SEP {
            // Whole token was already lowercase ASCII: hand out a slice of the input, zero copy.
            f(&text[start..i]);
            continue;
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
    }
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
