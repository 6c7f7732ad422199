//! CRC-32 (the IEEE 802.3 / zlib / PNG checksum, "CRC-32/ISO-HDLC" in the catalogue of
//! parametrised CRCs) of model files, checkpoints and run inputs, computed by `crc32fast`.
//!
//! Parameters: polynomial `x³² + x²⁶ + x²³ + x²² + x¹⁶ + x¹² + x¹¹ + x¹⁰ + x⁸ + x⁷ + x⁵ + x⁴ +
//! x² + x + 1` (`0x04C11DB7`, processed bit-reflected as `0xEDB88320`), initial register
//! `0xFFFFFFFF`, input and output reflected, final XOR `0xFFFFFFFF`. Check value:
//! `CRC-32("123456789") = 0xCBF43926`. Files written before this module used `crc32fast` hold
//! the same checksums (the tests check the definition bit by bit).
//!
//! Why CRC-32: every single-bit error, every burst of up to 32 bits and every odd number of bit
//! errors in a message is detected (the polynomial has the factor `x + 1`), and any other
//! random corruption slips through with probability 2⁻³². It catches storage and transfer
//! damage, which is what it is for here; it is not a defence against deliberate tampering.

/// The reflected polynomial `0xEDB88320` (bit-reversed `0x04C11DB7`).
pub const POLY_REFLECTED: u32 = 0xEDB8_8320;

/// A running CRC-32 over a byte stream: `Crc32::new()`, any number of [`Crc32::update`]
/// calls, then [`Crc32::finish`] (the CRC of the concatenation of all updates).
#[derive(Clone, Debug, Default)]
pub struct Crc32 {
    hasher: crc32fast::Hasher,
}

impl Crc32 {
    /// A fresh checksum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        self.hasher.update(bytes);
        self
    }

    /// The CRC-32 of everything fed so far.
    pub fn finish(&self) -> u32 {
        self.hasher.clone().finalize()
    }
}

/// CRC-32 of `bytes` in one call.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The CRC-32 as stored in files: exactly eight lowercase hexadecimal digits.
pub fn to_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// Size in bytes and CRC-32 of a file's contents, read in 64 KiB blocks.
pub fn file_crc32(path: &std::path::Path) -> std::io::Result<(u64, u32)> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut n, mut c) = (0u64, Crc32::new());
    loop {
        let k = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        c.update(&buf[..k]);
        n += k as u64;
    }
    Ok((n, c.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one bit at a time with no table: shift each message bit (least
    /// significant first) into the reflected register, dividing by the polynomial.
    fn bitwise(bytes: &[u8]) -> u32 {
        let mut r = 0xFFFF_FFFFu32;
        for &b in bytes {
            for bit in 0..8 {
                let inb = ((b >> bit) & 1) as u32;
                let top = (r ^ inb) & 1;
                r >>= 1;
                if top == 1 {
                    r ^= POLY_REFLECTED;
                }
            }
        }
        !r
    }

    #[test]
    fn published_check_values() {
        // The catalogue's check value of CRC-32/ISO-HDLC, and values printed by zlib's
        // `crc32` (e.g. Python's `zlib.crc32`) in its documentation and countless examples.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
        // The normal-form polynomial reflected bit for bit gives the constant used.
        assert_eq!(0x04C1_1DB7u32.reverse_bits(), POLY_REFLECTED);
        assert_eq!(to_hex(0xCBF4_3926), "cbf43926");
        assert_eq!(to_hex(0x1F), "0000001f");
    }

    #[test]
    fn streaming_agrees_with_the_bitwise_definition() {
        // Lengths around the 8-byte blocks, and every split point of a streamed message.
        let msg: Vec<u8> = (0..77u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 0..msg.len() {
            assert_eq!(crc32(&msg[..n]), bitwise(&msg[..n]), "length {n}");
        }
        let whole = crc32(&msg);
        for split in 0..=msg.len() {
            let mut c = Crc32::new();
            c.update(&msg[..split]).update(&msg[split..]);
            assert_eq!(c.finish(), whole, "split {split}");
        }
        // The CRC residue: a message followed by its CRC (little-endian) always checks to the
        // same constant, 0x2144DF1C (the register residue 0xDEBB20E3 after the final XOR).
        for n in [0, 1, 9, 64] {
            let mut m = msg[..n].to_vec();
            m.extend_from_slice(&crc32(&msg[..n]).to_le_bytes());
            assert_eq!(crc32(&m), 0x2144_DF1C, "length {n}");
        }
    }

    #[test]
    fn every_single_bit_flip_changes_the_crc() {
        let msg: Vec<u8> = (0..40u8).collect();
        let c = crc32(&msg);
        for i in 0..msg.len() * 8 {
            let mut m = msg.clone();
            m[i / 8] ^= 1 << (i % 8);
            assert_ne!(crc32(&m), c, "bit {i}");
        }
    }

    #[test]
    fn file_crc_is_the_crc_of_the_bytes() {
        let dir = std::env::temp_dir().join(format!("efa-crc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bin");
        // Longer than one read block, so the blocks are chained.
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        assert_eq!(file_crc32(&p).unwrap(), (200_000, bitwise(&data)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
