//! Deterministic pseudo-random numbers (xorshift64): the simulated persistence domain's torn writes and the
//! unit tests' random inputs, reproducible from a seed and with no dependency.

/// Advances `state` (never 0) and returns the new value.
#[inline]
pub(crate) fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
