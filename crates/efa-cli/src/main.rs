//! efa-cli (under construction).
fn main() {}
