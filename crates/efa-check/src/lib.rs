//! efa-check (under construction).
