//! efa-model (under construction).
