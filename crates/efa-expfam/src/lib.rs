//! efa-expfam (under construction).
