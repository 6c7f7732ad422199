//! CRC-32 (the IEEE 802.3 / zlib / PNG checksum, "CRC-32/ISO-HDLC" in the catalogue of
//! parametrised CRCs), written here so model files and checkpoints can carry a checksum per
//! tensor without another dependency.
//!
//! Parameters: polynomial `x³² + x²⁶ + x²³ + x²² + x¹⁶ + x¹² + x¹¹ + x¹⁰ + x⁸ + x⁷ + x⁵ + x⁴ +
//! x² + x + 1` (`0x04C11DB7`, processed bit-reflected as `0xEDB88320`), initial register
//! `0xFFFFFFFF`, input and output reflected, final XOR `0xFFFFFFFF`. Check value:
//! `CRC-32("123456789") = 0xCBF43926`.
//!
//! Why CRC-32: every single-bit error, every burst of up to 32 bits and every odd number of bit
//! errors in a message is detected (the polynomial has the factor `x + 1`), and any other
//! random corruption slips through with probability 2⁻³². It catches storage and transfer
//! damage, which is what it is for here; it is not a defence against deliberate tampering.
//!
//! The register update per byte `b` is `r ← (r >> 8) ⊕ T[(r ⊕ b) & 0xFF]`, with `T[i]` the
//! register after shifting the byte `i` through eight reflected polynomial divisions.
//! [`Crc32::update`] processes eight bytes per step ("slicing by 8": tables `T_k[i]` = the
//! contribution of byte `i` followed by `k` zero bytes), which gives the same register.

/// The reflected polynomial `0xEDB88320` (bit-reversed `0x04C11DB7`).
pub const POLY_REFLECTED: u32 = 0xEDB8_8320;

/// `TABLES[0][i]`: byte `i` through eight polynomial divisions; `TABLES[k][i]` =
/// `(TABLES[k−1][i] >> 8) ⊕ TABLES[0][TABLES[k−1][i] & 0xFF]` (byte `i` then `k` zero bytes).
const TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut r = i as u32;
        let mut bit = 0;
        while bit < 8 {
            r = if r & 1 == 1 {
                (r >> 1) ^ POLY_REFLECTED
            } else {
                r >> 1
            };
            bit += 1;
        }
        t[0][i] = r;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// A running CRC-32 over a byte stream: `Crc32::new()`, any number of [`Crc32::update`]
/// calls, then [`Crc32::finish`] (the CRC of the concatenation of all updates).
#[derive(Clone, Copy, Debug)]
pub struct Crc32 {
    /// The register (kept without the final XOR).
    reg: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// A fresh checksum (register `0xFFFFFFFF`).
    pub fn new() -> Self {
        Crc32 { reg: 0xFFFF_FFFF }
    }

    /// Feeds `bytes`: eight at a time through the eight tables, the rest one at a time.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        let mut r = self.reg;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            // The first four bytes are XORed into the register, the other four stand alone;
            // byte j of the block is followed by 7 − j more bytes, hence table 7 − j.
            let lo = r ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            r = TABLES[7][(lo & 0xFF) as usize]
                ^ TABLES[6][((lo >> 8) & 0xFF) as usize]
                ^ TABLES[5][((lo >> 16) & 0xFF) as usize]
                ^ TABLES[4][(lo >> 24) as usize]
                ^ TABLES[3][c[4] as usize]
                ^ TABLES[2][c[5] as usize]
                ^ TABLES[1][c[6] as usize]
                ^ TABLES[0][c[7] as usize];
        }
        for &b in chunks.remainder() {
            r = (r >> 8) ^ TABLES[0][((r ^ b as u32) & 0xFF) as usize];
        }
        self.reg = r;
        self
    }

    /// The CRC-32 of everything fed so far (register XOR `0xFFFFFFFF`).
    pub fn finish(&self) -> u32 {
        self.reg ^ 0xFFFF_FFFF
    }
}

/// CRC-32 of `bytes` in one call.
pub fn crc32(bytes: &[u8]) -> u32 {
    Crc32::new().update(bytes).finish()
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
    fn tables_and_streaming_agree_with_the_bitwise_definition() {
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
