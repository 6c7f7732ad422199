//! The integrity of a run directory: files written atomically ([`write_atomic`]), CRC-32
//! checksums ([`crc32`]) and one process per directory ([`runlock`]).

pub mod atomic;
pub mod crc32;
pub mod runlock;

pub use atomic::write_atomic;
