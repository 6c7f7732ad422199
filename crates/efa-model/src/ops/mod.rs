//! Tape ops that wrap the tape-free kernels of other crates through `efa_tape::FusedOp`.

pub mod attention;
pub mod gather;
pub mod linear;
pub mod link;
pub mod nll;
