//! efa-data (under construction).
