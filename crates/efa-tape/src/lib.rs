//! efa-tape (under construction).
