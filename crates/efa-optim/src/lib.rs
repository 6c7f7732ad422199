//! efa-optim (under construction).
