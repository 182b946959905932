//! Byte sources (being written).
