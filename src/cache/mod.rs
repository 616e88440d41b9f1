//! Cache (stub).
