//! Steps 5 to 7, knowing sizes: context windows learned from many
//! tenants' evidence, so that none can change what Condenser does for
//! another.
//!
//! An overflow that holds up as evidence (see `evidence.rs`) is one
//! tenant's *claim* about a model's window. It applies at once to that
//! tenant's own requests, and to everyone's once it is *agreed*: a second
//! tenant's overflow states the same window, or another tenant's request
//! that fits it (at least nine tenths of it) is answered. A window is
//! dropped when a request larger than it is answered: the upstream just
//! showed it is wrong. Only agreed windows are stored and shared between
//! instances; claims live in the memory of the instance that saw them.

use crate::conversation::TenantId;

/// Claims remembered per model: one per tenant, the least recently made
/// forgotten first.
const MAX_CLAIMS: usize = 16;

/// Two windows within this share of each other state the same window
/// (an upstream's count of one request varies a little with its parts).
const AGREEMENT: f64 = 0.05;

/// An answered request this close to a claimed window, and no larger,
/// corroborates it.
const FITS_SHARE: f64 = 0.9;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    tenant: TenantId,
    tokens: u64,
}

/// What one model's window is known to be, by whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Windows {
    agreed: Option<u64>,
    /// Most recent last.
    claims: Vec<Claim>,
}

/// What a change means for the window everyone shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    Unchanged,
    /// Now agreed at this many tokens: store it.
    Agreed(u64),
    /// Shown wrong by an answered request: forget the stored one.
    Dropped,
}

impl Windows {
    /// The window as `tenant` sees it: its own claim, else the agreed one.
    pub fn for_tenant(&self, tenant: &TenantId) -> Option<u64> {
        self.claim_of(tenant).or(self.agreed)
    }

    /// An agreed window read from the store.
    pub fn load_agreed(&mut self, tokens: u64) {
        self.agreed.get_or_insert(tokens);
    }

    /// `tenant`'s overflow states `tokens`.
    pub fn claim(&mut self, tenant: &TenantId, tokens: u64) -> Shared {
        self.claims.retain(|claim| claim.tenant != *tenant);
        let seconded = self.claims.iter().any(|claim| agree(claim.tokens, tokens));
        self.claims.push(Claim {
            tenant: tenant.clone(),
            tokens,
        });
        if self.claims.len() > MAX_CLAIMS {
            self.claims.remove(0);
        }
        if seconded && self.agreed != Some(tokens) {
            self.agreed = Some(tokens);
            return Shared::Agreed(tokens);
        }
        Shared::Unchanged
    }

    /// `tenant`'s request of `tokens` (input, plus output where the upstream
    /// counts it) was answered.
    pub fn answered(&mut self, tenant: &TenantId, tokens: u64) -> Shared {
        self.claims.retain(|claim| tokens <= claim.tokens);
        if self.agreed.is_some_and(|agreed| tokens > agreed) {
            self.agreed = None;
            return Shared::Dropped;
        }
        let corroborated = self
            .claims
            .iter()
            .filter(|claim| claim.tenant != *tenant)
            .filter(|claim| tokens as f64 >= claim.tokens as f64 * FITS_SHARE)
            .map(|claim| claim.tokens)
            .min();
        match corroborated {
            Some(tokens) if self.agreed != Some(tokens) => {
                self.agreed = Some(tokens);
                Shared::Agreed(tokens)
            }
            _ => Shared::Unchanged,
        }
    }

    fn claim_of(&self, tenant: &TenantId) -> Option<u64> {
        self.claims
            .iter()
            .find(|claim| claim.tenant == *tenant)
            .map(|claim| claim.tokens)
    }
}

fn agree(a: u64, b: u64) -> bool {
    a.abs_diff(b) as f64 <= a.max(b) as f64 * AGREEMENT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::from_credential(b"", Some(name.as_bytes()))
    }

    #[test]
    fn a_claim_applies_to_its_tenant_alone_until_a_second_tenant_agrees() {
        let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
        let mut windows = Windows::default();
        assert_eq!(windows.claim(&a, 1_000), Shared::Unchanged);
        assert_eq!(windows.for_tenant(&a), Some(1_000));
        assert_eq!(windows.for_tenant(&b), None);
        assert_eq!(windows.claim(&b, 1_020), Shared::Agreed(1_020));
        assert_eq!(windows.for_tenant(&c), Some(1_020));
    }

    #[test]
    fn a_tenant_cannot_second_its_own_claim() {
        let a = tenant("a");
        let mut windows = Windows::default();
        windows.claim(&a, 1_000);
        assert_eq!(windows.claim(&a, 1_000), Shared::Unchanged);
        assert_eq!(windows.answered(&a, 950), Shared::Unchanged);
        assert_eq!(windows.for_tenant(&tenant("b")), None);
    }

    #[test]
    fn another_tenants_answered_request_that_fits_corroborates_a_claim() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut windows = Windows::default();
        windows.claim(&a, 8_000);
        assert_eq!(
            windows.answered(&b, 3_000),
            Shared::Unchanged,
            "too small to say"
        );
        assert_eq!(windows.answered(&b, 7_500), Shared::Agreed(8_000));
    }

    #[test]
    fn a_larger_answered_request_drops_a_window_shown_too_low() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut windows = Windows::default();
        windows.claim(&a, 1_000);
        windows.answered(&b, 3_000);
        assert_eq!(windows.for_tenant(&a), None, "the claim was wrong");
        windows.load_agreed(2_000);
        assert_eq!(windows.answered(&b, 3_000), Shared::Dropped);
        assert_eq!(windows.for_tenant(&b), None);
    }

    #[test]
    fn claims_stay_bounded() {
        let mut windows = Windows::default();
        for i in 0..100 {
            windows.claim(&tenant(&i.to_string()), 10_000 + i * 1_000);
        }
        assert_eq!(windows.claims.len(), MAX_CLAIMS);
    }
}
