//! Steps 5 to 7, knowing sizes: bytes-to-tokens rates that one tenant
//! cannot skew for another.
//!
//! Each tenant's answers calibrate that tenant's own rate; a tenant
//! estimates with its own rate once it has one. The rate shared with
//! tenants that have none yet is the lower median of the tenants' rates
//! (with the stored rate as one more voice): one tenant whose requests
//! report many tokens for few bytes (images, files, server tools) cannot
//! raise it, and an estimate that errs low only lets the upstream decide.
//! Requests with inputs that are not text do not calibrate at all (the
//! pipeline tells, from the body).

use super::Calibration;
use crate::conversation::TenantId;

/// Tenants whose rates are remembered per model, the least recently
/// calibrated forgotten first.
const MAX_TENANTS: usize = 64;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rates {
    /// Read from the store: what the instances shared before.
    stored: Option<Calibration>,
    /// Most recently calibrated last.
    tenants: Vec<(TenantId, Calibration)>,
}

impl Rates {
    /// The rate `tenant` estimates with: its own, else the shared one.
    pub fn for_tenant(&self, tenant: &TenantId) -> Option<Calibration> {
        self.own(tenant).or_else(|| self.shared())
    }

    pub fn own(&self, tenant: &TenantId) -> Option<Calibration> {
        self.tenants
            .iter()
            .find(|(t, _)| t == tenant)
            .map(|(_, rate)| *rate)
    }

    /// The lower median of every tenant's rate and the stored one.
    pub fn shared(&self) -> Option<Calibration> {
        let mut rates: Vec<f64> = self.tenants.iter().map(|(_, r)| r.rate()).collect();
        rates.extend(self.stored.map(|r| r.rate()));
        if rates.is_empty() {
            return None;
        }
        rates.sort_by(f64::total_cmp);
        Some(Calibration::from_rate(rates[(rates.len() - 1) / 2]))
    }

    pub fn load_stored(&mut self, rate: Calibration) {
        self.stored.get_or_insert(rate);
    }

    /// `tenant`'s answer measured `observed`: blended into its own rate.
    pub fn observe(&mut self, tenant: &TenantId, observed: Calibration) {
        let index = self.tenants.iter().position(|(t, _)| t == tenant);
        let own = index.map(|i| self.tenants.remove(i).1);
        let blended = own.map_or(observed, |own| own.blended(observed));
        self.tenants.push((tenant.clone(), blended));
        if self.tenants.len() > MAX_TENANTS {
            self.tenants.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::from_credential(b"", Some(name.as_bytes()))
    }

    #[test]
    fn a_tenant_estimates_with_its_own_rate() {
        let (a, b) = (tenant("a"), tenant("b"));
        let mut rates = Rates::default();
        rates.observe(&a, Calibration::from_rate(0.25));
        rates.observe(&b, Calibration::from_rate(0.9));
        assert_eq!(rates.for_tenant(&a), Some(Calibration::from_rate(0.25)));
        assert_eq!(rates.for_tenant(&b), Some(Calibration::from_rate(0.9)));
    }

    #[test]
    fn one_outlier_cannot_raise_the_shared_rate() {
        let mut rates = Rates::default();
        rates.load_stored(Calibration::from_rate(0.25));
        rates.observe(&tenant("images"), Calibration::from_rate(1.0));
        assert_eq!(rates.shared(), Some(Calibration::from_rate(0.25)));
        rates.observe(&tenant("a"), Calibration::from_rate(0.26));
        assert_eq!(rates.shared(), Some(Calibration::from_rate(0.26)));
        assert_eq!(
            rates.for_tenant(&tenant("new")),
            Some(Calibration::from_rate(0.26))
        );
    }

    #[test]
    fn tenants_stay_bounded() {
        let mut rates = Rates::default();
        for i in 0..200 {
            rates.observe(&tenant(&i.to_string()), Calibration::from_rate(0.25));
        }
        assert_eq!(rates.tenants.len(), MAX_TENANTS);
    }
}
