//! Bearer tokens: generation, SHA-256 hashing and constant-time comparison.
//!
//! Only hashes are stored (in the identities file); a presented token is hashed once and
//! compared with every stored hash in constant time, so neither the timing of a comparison
//! nor the order of the file tells an attacker how close a guess was.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A SHA-256 digest of a token.
pub type TokenHash = [u8; 32];

/// The SHA-256 hash of a token.
#[must_use]
pub fn hash_token(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// The SHA-256 hash of a token as lower-case hex, the form the identities file holds.
#[must_use]
pub fn hash_token_hex(token: &str) -> String {
    hex::encode(hash_token(token))
}

/// Whether two hashes are equal, in time independent of where they differ.
#[must_use]
pub fn hashes_equal(a: &TokenHash, b: &TokenHash) -> bool {
    a.ct_eq(b).into()
}

/// A fresh random 256-bit token, hex-encoded (64 characters).
///
/// # Errors
/// When the operating system's random source fails.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_sha256_hex_and_comparison_detects_any_difference() {
        // SHA-256("abc"), the FIPS 180-2 test vector.
        assert_eq!(
            hash_token_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let a = hash_token("secret");
        assert!(hashes_equal(&a, &hash_token("secret")));
        assert!(!hashes_equal(&a, &hash_token("secret2")));
        let mut last = a;
        last[31] ^= 1;
        assert!(!hashes_equal(&a, &last));
    }

    #[test]
    fn new_tokens_are_256_bit_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
