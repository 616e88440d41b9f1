//! Log (stub).
