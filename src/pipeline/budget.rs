//! Step 8, bound: the compaction budget.
//!
//! The bound on compactions (ARCHITECTURE.md step 8, invariant 2). Every attempt
//! spends from it before any summary call, so a failing summary counts too.

#[derive(Debug, Clone)]
pub struct CompactionBudget {
    max: u32,
    spent: u32,
}

impl CompactionBudget {
    pub fn new(max: u32) -> Self {
        Self { max, spent: 0 }
    }

    /// True when one more compaction is allowed, and counts it.
    pub fn try_spend(&mut self) -> bool {
        if self.spent >= self.max {
            return false;
        }
        self.spent += 1;
        true
    }

    pub fn spent(&self) -> u32 {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spends_at_most_max() {
        let mut budget = CompactionBudget::new(2);
        assert!(budget.try_spend());
        assert!(budget.try_spend());
        assert!(!budget.try_spend());
        assert_eq!(budget.spent(), 2);
        assert!(!CompactionBudget::new(0).try_spend());
    }
}
