//! VByte: 7 bits per byte, high bit set on every byte but the last.

use super::CodecError;

pub fn write_vbyte(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads one value at `*pos`, advancing it.
#[inline]
pub fn read_vbyte(buf: &[u8], pos: &mut usize) -> Result<u32, CodecError> {
    let mut v: u32 = 0;
    let mut shift = 0;
    loop {
        let Some(&b) = buf.get(*pos) else {
            return Err(CodecError { what: "vbyte (truncated)", offset: *pos });
        };
        *pos += 1;
        if shift == 28 && b > 0x0f {
            return Err(CodecError { what: "vbyte (overflow)", offset: *pos - 1 });
        }
        v |= ((b & 0x7f) as u32) << shift;
        if b < 0x80 {
            return Ok(v);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(vals in proptest::collection::vec(any::<u32>(), 0..200)) {
            let mut out = vec![];
            for &v in &vals { write_vbyte(&mut out, v); }
            let mut pos = 0;
            for &v in &vals { prop_assert_eq!(read_vbyte(&out, &mut pos).unwrap(), v); }
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let mut pos = 0;
            while pos < bytes.len() { if read_vbyte(&bytes, &mut pos).is_err() { break; } }
        }
    }
}
