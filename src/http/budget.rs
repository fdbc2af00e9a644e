//! Step 1, accept: the memory budget of chat bodies in flight.
//!
//! A chat body is read whole and then parsed, hashed and queued for the
//! store, and at its peak a request holds several times its size in
//! memory, how many depending on its shape: `http/weight.rs` weighs it, in
//! bytes of the costliest shape.
//!
//! The weights of the chat bodies being read and worked on share one
//! budget, `server.max_inflight_body_bytes`: a body that would pass it is
//! refused at once with a 503 and `Retry-After` (clients retry those),
//! never queued; one that would pass it even alone (a body of the largest
//! size fits whatever its shape, but a smaller one can be denser than
//! any chat body: a value every two bytes) with a 413, as no retry helps. A request holds its lease until its answer's head is
//! ready: that is as long as the pipeline holds the body.
//!
//! A body with a `Content-Length` takes the weight of its bytes before a
//! byte is read, and what its values weigh as they arrive; while the
//! budget is within its first eighth, it takes the most its length can
//! weigh instead and is not weighed at all. A chunked body
//! declares nothing, so its whole lease grows as its bytes arrive:
//! reserving the largest allowed body for every chunked request would
//! refuse small ones for nothing, and counting as it reads keeps the
//! memory within the budget all the same. Either way a body is refused
//! at the chunk that would pass the budget, before it is parsed.
//!
//! The budget's last eighth is kept for small bodies (up to that eighth):
//! large ones stop short of it, so a few large uploads cannot keep a
//! quick question out. Only as much is kept as still lets one largest body
//! of the costliest shape in alone.
//!
//! Passthrough routes stream their bodies and are not counted.

use super::weight::heaviest;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The share of the budget kept for small bodies: one part in this many.
const SMALL_SHARE: usize = 8;

pub struct BodyBudget {
    limit: usize,
    /// Weight only small bodies may use; a body is small while its lease
    /// is no larger.
    reserve: usize,
    used: AtomicUsize,
    /// `condenser_inflight_body_bytes`, looked up once: a lookup hashes
    /// its name, twice a request.
    used_gauge: metrics::Gauge,
}

/// Weight of the budget held by one request; given back when dropped.
pub struct Lease {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

impl BodyBudget {
    /// A budget of `limit` weighed bytes in which one body of `max_body`
    /// bytes fits alone, however heavy.
    pub fn new(limit: usize, max_body: usize) -> Arc<Self> {
        let largest = heaviest(max_body);
        let limit = limit.max(largest);
        describe();
        metrics::gauge!("condenser_inflight_body_limit_bytes").set(limit as f64);
        Arc::new(Self {
            limit,
            reserve: (limit / SMALL_SHARE).min(limit - largest),
            used: AtomicUsize::new(0),
            used_gauge: metrics::gauge!("condenser_inflight_body_bytes"),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether a lease of `weight` would fit with nothing else in flight:
    /// past that, a body is refused for good, not for now.
    pub fn fits_alone(&self, weight: usize) -> bool {
        weight <= self.limit - self.reserve
    }

    /// A lease of the most a body can weigh ([`super::weight::most`]) while
    /// that keeps the budget within its first eighth, so the body need not
    /// be weighed as it arrives: the scan would cost a quiet instance a
    /// third of what its 800 KB histories add (bench/HISTORY.md, issue 43,
    /// "Work that was never new"). Past that eighth, bodies are weighed and
    /// none is over-counted.
    pub fn lease_unweighed(self: &Arc<Self>, most: usize) -> Option<Lease> {
        let quiet = self.used.load(Ordering::Acquire).saturating_add(most);
        (quiet <= self.limit / SMALL_SHARE)
            .then(|| self.lease(most))
            .flatten()
    }

    /// A lease of `bytes`, or `None` when they would pass the budget.
    pub fn lease(self: &Arc<Self>, bytes: usize) -> Option<Lease> {
        let mut lease = Lease {
            budget: self.clone(),
            bytes: 0,
        };
        lease.grow(bytes).then_some(lease)
    }

    /// Takes `more` bytes for a lease that holds `held`, unless the budget
    /// (short of the reserve, for a large body) would be passed.
    fn take(&self, held: usize, more: usize) -> bool {
        let ceiling = if held + more > self.reserve {
            self.limit - self.reserve
        } else {
            self.limit
        };
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                let after = used.checked_add(more)?;
                (after <= ceiling).then_some(after)
            });
        match taken {
            Ok(before) => {
                self.used_gauge.set((before + more) as f64);
                true
            }
            Err(_) => false,
        }
    }

    fn give_back(&self, bytes: usize) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.used_gauge.set((before - bytes) as f64);
    }
}

impl Lease {
    /// Whether the lease grown by `more` would fit in an idle budget.
    pub fn fits_alone(&self, more: usize) -> bool {
        self.budget.fits_alone(self.bytes.saturating_add(more))
    }

    /// Takes `more` bytes for the same request; false when they do not fit.
    pub fn grow(&mut self, more: usize) -> bool {
        if more == 0 {
            return true;
        }
        let taken = self.budget.take(self.bytes, more);
        if taken {
            self.bytes += more;
        }
        taken
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.bytes);
        }
    }
}

/// HELP lines for the budget's metrics, beside the code that sets them.
fn describe() {
    metrics::describe_gauge!(
        "condenser_inflight_body_bytes",
        metrics::Unit::Bytes,
        "Chat request bodies being read and worked on now, weighed: bytes of the costliest shape taking the same memory."
    );
    metrics::describe_gauge!(
        "condenser_inflight_body_limit_bytes",
        metrics::Unit::Bytes,
        "The budget of chat bodies in flight, weighed (server.max_inflight_body_bytes)."
    );
    metrics::describe_counter!(
        "condenser_inflight_body_refused_total",
        "Chat requests refused with a 503 because their body would pass the budget."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn leases_are_given_back_when_dropped() {
        let budget = BodyBudget::new(4 * MIB, MIB);
        let first = budget.lease(MIB).expect("fits");
        let second = budget.lease(MIB).expect("fits");
        assert_eq!(budget.used.load(Ordering::Acquire), 2 * MIB);
        drop((first, second));
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
    }

    #[test]
    fn large_bodies_leave_the_reserve_to_small_ones() {
        let budget = BodyBudget::new(8 * MIB, 2 * MIB);
        // The reserve is 1 MiB: large bodies stop at 7 MiB.
        let held: Vec<_> = (0..3).filter_map(|_| budget.lease(2 * MIB)).collect();
        assert_eq!(held.len(), 3);
        assert!(
            budget.lease(2 * MIB).is_none(),
            "8 MiB would eat the reserve"
        );
        let small: Vec<_> = (0..2).filter_map(|_| budget.lease(MIB)).collect();
        assert_eq!(small.len(), 2, "small bodies use the reserve");
        assert!(budget.lease(1).is_none(), "the budget is full");
    }

    #[test]
    fn only_a_quiet_budget_leases_bodies_unweighed() {
        let budget = BodyBudget::new(64 * MIB, MIB);
        let first = budget
            .lease_unweighed(4 * MIB)
            .expect("within the first eighth");
        let second = budget
            .lease_unweighed(4 * MIB)
            .expect("8 MiB: still within");
        assert!(
            budget.lease_unweighed(1).is_none(),
            "past the first eighth, bodies are weighed"
        );
        let weighed = budget
            .lease(MIB)
            .expect("the rest is there for weighed bodies");
        assert_eq!(budget.used.load(Ordering::Acquire), 9 * MIB);
        drop((first, second, weighed));
        assert!(budget.lease_unweighed(8 * MIB).is_some());
    }

    #[test]
    fn one_largest_body_always_fits_alone() {
        let budget = BodyBudget::new(MIB, MIB);
        let heaviest = heaviest(MIB);
        assert!(budget.fits_alone(heaviest));
        let whole = budget.lease(heaviest).expect("the largest body fits alone");
        assert!(budget.lease(1).is_none());
        assert!(whole.fits_alone(0), "refused for now, not for good");
        assert!(!whole.fits_alone(1), "one byte heavier never fits");
        drop(whole);
        let mut growing = budget.lease(0).expect("an empty lease");
        assert!(growing.grow(heaviest));
        assert!(!growing.grow(1), "no byte past the limit");
    }
}
