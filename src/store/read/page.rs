//! Beside the flow, the operator's views: a page of a longer list.
//!
//! A conversation's compactions and requests are read a page at a time,
//! with how many there are in all.

/// A page of a longer list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed<T> {
    pub items: Vec<T>,
    /// How many come before the page.
    pub offset: i64,
    /// How many there are in all.
    pub total: i64,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            offset: 0,
            total: 0,
        }
    }
}
