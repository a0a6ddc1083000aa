//! Lowercase hexadecimal text of digests (fingerprints, reply digests, trace ids).

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hexadecimal, two digits a byte: what `format!("{byte:02x}")` per
/// byte gives, without an allocation per byte (a seed of a million heartbeats made 32
/// million of them for its fingerprints).
pub fn lower_hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_reads_as_its_two_lowercase_digits() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(lower_hex(&bytes), expected);
        assert_eq!(lower_hex(&[]), "");
    }
}
