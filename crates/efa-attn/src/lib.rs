//! efa-attn (under construction).
